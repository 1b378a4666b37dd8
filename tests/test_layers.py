"""The package reads one way: no import cycles, and the layers graphs → measure → report only point down.

Every import of every module counts, at the top or inside a function (a function-level import
is still a dependency, only a later one), and so does an import under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cudnn_guide"

FORBIDDEN = {
    # layer: the layers it must not import (a lower layer never reaches up)
    "graphs": ("measure", "report", "studies"),
    "measure": ("report", "studies"),
    "report": ("studies",),
}


def module_names(package_dir: Path, package: str) -> dict[str, Path]:
    """Dotted module name → file, for every module of the package (``pkg.sub`` for ``pkg/sub/__init__.py``)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package, *parts])] = path
    return out


def import_graph(package_dir: Path, package: str) -> dict[str, dict[str, int]]:
    """Module → {imported module of the same package: line of the first such import}.

    ``from a.b import c`` points at ``a.b.c`` when that is a module, else at ``a.b``; relative
    imports are resolved against the importing module. Imports of other packages are left out.
    """
    modules = module_names(package_dir, package)
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def layer_violations(graph: dict[str, dict[str, int]], package: str, files: dict[str, Path]) -> list[str]:
    """``file:line: a imports b`` for each import that reaches up a layer (:data:`FORBIDDEN`)."""
    out = []
    for name, edges in graph.items():
        parts = name.split(".")
        layer = parts[1] if len(parts) > 1 else ""
        for target, line in edges.items():
            tparts = target.split(".")
            if len(tparts) > 1 and tparts[1] in FORBIDDEN.get(layer, ()):
                out.append(f"{files[name].relative_to(files[package].parent.parent)}:{line}: {name} imports {target}")
    return out


def _describe(cycle: list[str], graph: dict[str, dict[str, int]], files: dict[str, Path]) -> str:
    steps = [f"{files[a].name}:{graph[a][b]} ({a} → {b})" for a, b in zip(cycle, cycle[1:])]
    return " ; ".join(steps)


def test_the_package_has_no_import_cycle():
    graph = import_graph(PACKAGE, "cudnn_guide")
    files = module_names(PACKAGE, "cudnn_guide")
    cycle = find_cycle(graph)
    assert cycle is None, (
        f"import cycle {' → '.join(cycle)}: {_describe(cycle, graph, files)}. Move the shared name into the "
        "module lower down, or pass it in, so that the imports point one way"
    )


def test_lower_layers_do_not_import_higher_ones():
    graph = import_graph(PACKAGE, "cudnn_guide")
    files = module_names(PACKAGE, "cudnn_guide")
    bad = layer_violations(graph, "cudnn_guide", files)
    assert not bad, (
        "graphs must import nothing of measure/report/studies, measure nothing of report/studies, report nothing "
        "of studies; move the function to the higher layer (e.g. a plot of a measurement into report):\n"
        + "\n".join(bad)
    )


def test_the_checker_sees_every_import_of_every_module():
    graph = import_graph(PACKAGE, "cudnn_guide")
    assert "cudnn_guide.measure.bench" in graph and "cudnn_guide.report.records" in graph
    # records imports the measurement type at the top; compare's function-level imports count too
    assert "cudnn_guide.measure.measurement" in graph["cudnn_guide.report.records"]


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "fake"
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_planted_cycle_through_a_function_level_import_is_found(tmp_path):
    root = _fake_package(
        tmp_path,
        {
            "measure/__init__.py": "",
            "measure/a.py": "from fake.measure import b\n",
            "measure/b.py": "def f():\n    from fake.measure.c import g\n",
            "measure/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n",
        },
    )
    cycle = find_cycle(import_graph(root, "fake"))
    assert cycle is not None and set(cycle) == {"fake.measure.a", "fake.measure.b", "fake.measure.c"}


def test_a_package_without_cycles_passes_the_checker(tmp_path):
    root = _fake_package(
        tmp_path,
        {"graphs/__init__.py": "from fake.graphs.g import x\n", "graphs/g.py": "import os\nx = 1\n"},
    )
    assert find_cycle(import_graph(root, "fake")) is None


@pytest.mark.parametrize(
    ("source", "importer"),
    [
        ("from fake.report import plots\n", "graphs/g.py"),
        ("def f():\n    from fake.report.plots import p\n", "measure/m.py"),
        ("import fake.measure.m\n", "graphs/g.py"),
    ],
)
def test_a_planted_upward_import_is_found(tmp_path, source, importer):
    root = _fake_package(
        tmp_path,
        {
            "graphs/__init__.py": "",
            "graphs/g.py": "",
            "measure/__init__.py": "",
            "measure/m.py": "",
            "report/__init__.py": "",
            "report/plots.py": "",
            importer: source,
        },
    )
    files = module_names(root, "fake")
    bad = layer_violations(import_graph(root, "fake"), "fake", files)
    assert len(bad) == 1 and importer.replace("/", ".").removesuffix(".py") in bad[0], bad


def test_the_library_reads_no_side_channel_from_the_docs_build():
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "CUDNN_GUIDE_DRIFT" in line or "CUDNN_GUIDE_PAGE" in line
    ]
    assert not found, (
        "the library reads the docs build's drift through the environment at "
        + ", ".join(found)
        + ": return the in-run interval; docs/_ext/gallery_build/drift_bands.py widens it when the record is written"
    )


def test_library_tests_import_nothing_of_the_docs_build():
    library_tests = [
        *sorted((ROOT / "tests").glob("test_*.py")),
        *(p for d in ("graphs", "measure", "report") for p in sorted((ROOT / "tests" / d).glob("*.py"))),
    ]
    bad = []
    for path in library_tests:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n.split(".")[0] == "gallery_build" for n in names):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"library tests import gallery_build at {bad}: move those tests to tests/docs_build/"
