"""The package installs from a built wheel, and what every example uses of it resolves, in that
installed copy, to a public name: a downloaded script needs the wheel, not this repository.

A name is public when its module lists it in ``__all__``, or when the module it lives in does (a
subpackage re-exporting a name).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RESOLVE = r"""
import ast, importlib, json, sys, types
site, examples = sys.argv[1], sys.argv[2:]
import cudnn_guide
problems = [] if cudnn_guide.__file__.startswith(site) else [f"cudnn_guide imported from {cudnn_guide.__file__}"]

def public(mod, name):
    if name in getattr(mod, "__all__", ()):
        return True
    obj = getattr(mod, name)
    if isinstance(obj, types.ModuleType):
        return not name.startswith("_")
    home = getattr(obj, "__module__", "") or ""
    return home.startswith("cudnn_guide") and name in getattr(sys.modules.get(home), "__all__", ())

for path in examples:
    tree = ast.parse(open(path, encoding="utf-8").read())
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cudnn_guide"):
            mod = importlib.import_module(node.module)
            for a in node.names:
                try:
                    aliases[a.asname or a.name] = importlib.import_module(f"{node.module}.{a.name}")
                except ImportError:
                    if not hasattr(mod, a.name):
                        problems.append(f"{path}: {node.module}.{a.name} is not in the installed package")
                    elif not public(mod, a.name):
                        problems.append(f"{path}: imports {node.module}.{a.name}, which is not public")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            mod = aliases[node.value.id]
            if not hasattr(mod, node.attr):
                problems.append(f"{path}: {mod.__name__}.{node.attr} is not in the installed package")
            elif not public(mod, node.attr):
                problems.append(f"{path}: uses {mod.__name__}.{node.attr}, which is not public")
print(json.dumps(problems))
"""


def _pip(*args: str, cwd: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_examples_use_only_public_names_of_the_package_installed_from_its_wheel(tmp_path):
    src = tmp_path / "src"  # build from a copy: setuptools writes build/ and *.egg-info beside the sources
    shutil.copytree(ROOT / "cudnn_guide", src / "cudnn_guide", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    _pip("wheel", "--no-deps", *isolation, "-w", str(tmp_path / "dist"), str(src), cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("cudnn_guide-*.whl")
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--no-compile", "--target", str(site), str(wheel), cwd=tmp_path)
    assert not (site / "gallery_build").exists(), "the docs build's machinery must stay out of the wheel"
    examples = sorted(str(p) for p in (ROOT / "examples").glob("plot_*.py"))
    out = subprocess.run(
        [sys.executable, "-c", RESOLVE, str(site), *examples],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    problems = json.loads(out.stdout.strip().splitlines()[-1])
    assert not problems, "\n".join(problems)
