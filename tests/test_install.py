"""The package installs from a standard wheel, and what every example uses of it resolves in that installed copy.

A downloaded script needs the wheel, not this repository. The wheel is built the standard way
(``pip wheel`` with build isolation: setuptools comes from the registry, as in CI and for a
reader), installed with ``--no-deps`` into a fresh virtual environment that sees the test
interpreter's packages (torch, cudnn, matplotlib, pandas) but not this checkout, and every module
of the package and every ``cudnn_guide`` name each example uses is imported there, with ``python -I``
from a temporary directory. A name is public when its module lists it in ``__all__``, or when the
module it lives in does (a subpackage re-exporting a name).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RESOLVE = r"""
import ast, importlib, json, sys, types
site_dir, modules, examples = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
import cudnn_guide
problems = [] if cudnn_guide.__file__.startswith(site_dir) else [f"cudnn_guide imported from {cudnn_guide.__file__}"]
for name in modules:  # every module of the package, as the checkout has them
    try:
        importlib.import_module(name)
    except Exception as exc:
        problems.append(f"import {name} fails in the installed package: {type(exc).__name__}: {exc}")

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
            try:
                mod = importlib.import_module(node.module)
            except ImportError as exc:
                problems.append(f"{path}:{node.lineno}: {node.module} is not in the installed package ({exc})")
                continue
            for a in node.names:
                try:
                    aliases[a.asname or a.name] = importlib.import_module(f"{node.module}.{a.name}")
                except ImportError:
                    if not hasattr(mod, a.name):
                        problems.append(f"{path}:{node.lineno}: {node.module}.{a.name} is not in the installed package")
                    elif not public(mod, a.name):
                        problems.append(f"{path}:{node.lineno}: imports {node.module}.{a.name}, which is not public")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            mod = aliases[node.value.id]
            if not hasattr(mod, node.attr):
                problems.append(f"{path}:{node.lineno}: {mod.__name__}.{node.attr} is not in the installed package")
            elif not public(mod, node.attr):
                problems.append(f"{path}:{node.lineno}: uses {mod.__name__}.{node.attr}, which is not public")
print(json.dumps(problems))
"""

IMPORT_TO_DISTRIBUTION = {
    # what an example imports → the distributions that provide it (pip names, normalized)
    "cudnn": {"nvidia-cudnn-frontend"},
    "torch": {"torch"},
    "numpy": {"numpy"},
    "matplotlib": {"matplotlib"},
    "pandas": {"pandas"},
    "cuda": {"cuda-python", "cuda-bindings"},
    "cutlass": {"nvidia-cutlass-dsl"},
    "flash_attn": {"flash-attn-4", "flash-attn"},
}


def _modules(package_dir: Path) -> list[str]:
    """Every module of the package in the checkout, dotted (``cudnn_guide.measure.bench``)."""
    out = []
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    out = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (
        f"{' '.join(args)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    )
    return out


def _build_wheel(tmp_path: Path) -> Path:
    """``pip wheel`` with build isolation, from a copy (setuptools writes build/ and *.egg-info beside the sources)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "cudnn_guide", src / "cudnn_guide", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run(*pip, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(src), cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("cudnn_guide-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_standard_wheel_holds_every_module_of_the_package_and_nothing_of_the_docs_build(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    expected = {str(p.relative_to(ROOT)) for p in (ROOT / "cudnn_guide").rglob("*.py")}
    missing = sorted(expected - names)
    assert not missing, (
        f"the wheel built by `pip wheel .` lacks {missing}: pyproject.toml's [tool.setuptools] must find every "
        "subpackage (packages.find include = ['cudnn_guide', 'cudnn_guide.*'])"
    )
    assert not any(n.startswith(("gallery_build/", "tests/", "tools/", "examples/")) for n in names), sorted(names)


def test_examples_use_only_public_names_of_the_package_installed_from_its_wheel_in_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv), cwd=tmp_path)
    python = venv / "bin" / "python"
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(_run(str(python), "-I", "-c", ask, cwd=tmp_path).stdout.strip())
    # torch, cudnn and the rest come from the test interpreter's own site-packages (a virtualenv's
    # --system-site-packages would reach only its base interpreter's): listed as plain paths, so
    # their .pth files (this checkout's editable install among them) are not run
    theirs = [p for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]} if Path(p) != purelib]
    (purelib / "_test_interpreter_packages.pth").write_text("\n".join(sorted(theirs)) + "\n")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    _run(*pip, "install", "--no-deps", "--no-compile", str(wheel), cwd=tmp_path)

    where = _run(str(python), "-I", "-c", "import cudnn_guide; print(cudnn_guide.__file__)", cwd=tmp_path)
    installed = Path(where.stdout.strip())
    assert installed.is_relative_to(purelib), (
        f"cudnn_guide was imported from {installed}, not from the fresh venv's {purelib}: the checkout leaks in"
    )
    assert not (purelib / "gallery_build").exists(), "the docs build's machinery must stay out of the wheel"
    examples = sorted(str(p) for p in (ROOT / "examples").glob("plot_*.py"))
    modules = _modules(ROOT / "cudnn_guide")
    out = _run(str(python), "-I", "-c", RESOLVE, str(purelib), json.dumps(modules), *examples, cwd=tmp_path)
    problems = json.loads(out.stdout.strip().splitlines()[-1])
    assert not problems, "\n".join(problems)


def test_every_third_party_module_an_example_imports_is_a_declared_dependency():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})

    def names(reqs):
        return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}

    declared, examples_extra = names(project["dependencies"]), names(extras.get("examples", []))
    bad = []
    for path in sorted((ROOT / "examples").glob("plot_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top == "cudnn_guide":
                    continue
                dists = IMPORT_TO_DISTRIBUTION.get(top)
                if dists is None:
                    bad.append(f"{path.name}:{node.lineno}: imports {top!r}, unknown to this test: add it above")
                elif not dists & (declared | examples_extra):
                    bad.append(
                        f"{path.name}:{node.lineno}: imports {top!r}, which no dependency of pyproject.toml provides "
                        f"(add one of {sorted(dists)} to [project] dependencies, or to the `examples` extra if the "
                        "page guards the import)"
                    )
    assert not bad, "\n".join(bad)
