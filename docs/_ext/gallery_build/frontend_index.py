"""The site's "cuDNN Frontend API" index: every frontend call, enum and module function the site
uses, with the helpers that make it and the gallery pages that run it.

Read from the sources, not typed: each ``cudnn_guide`` function and class is parsed for the
frontend names it uses (``cudnn.X`` attributes, graph and tensor methods named as the installed
frontend names them, and method names held in tables for ``getattr``), its calls to other helpers
are followed, and each example's calls lead to the helpers it runs. The frontend's vocabulary
comes from the installed ``cudnn`` package (``pygraph``, ``Tensor``, the module itself).
"""

from __future__ import annotations

import ast
import html
import inspect
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "frontend_vocabulary",
    "frontend_index",
    "api_pages",
    "page_links",
    "helper_links",
    "anchor",
    "code_links",
    "code_links_json",
    "PendingCodeLinks",
    "start_code_links",
    "describe",
]

# one-word graph methods that also name common torch or Python calls (add, max, relu, ...):
# counted only when called on something named as a graph (g, graph, fused.built.graph, ...)
_GRAPH_NAMES = {"g", "graph", "raw_graph"}


# keyword arguments that name an operation's data or bookkeeping, not one of its options
_NOT_OPTIONS = {"name", "compute_data_type", "data_type", "dim", "stride"}
# options without an underscore, still worth finding by name
_SHORT_OPTIONS = {"dropout", "bias", "padding", "stride", "dilation", "mode", "epsilon", "momentum"}
_GRAPH_RECEIVER = re.compile(r"^(g\w{0,3}|graph|raw_graph)$")


def frontend_vocabulary() -> dict[str, set[str]]:
    """The installed frontend's names: ``graph`` methods, ``tensor`` methods, ``module`` attributes,
    and the ``option`` keywords its operations, tensors and graphs document.

    Returns
    -------
    dict[str, set[str]]
        Public names of ``cudnn.pygraph``, of its tensors, and of the ``cudnn`` module; the keyword
        arguments documented by the backend graph's operations and ``cudnn.pygraph``'s constructor.

    Example
    -------
    >>> "sdpa_backward" in frontend_vocabulary()["graph"]
    True
    """
    import cudnn

    def public(obj: Any) -> set[str]:
        return {n for n in dir(obj) if not n.startswith("_")}

    tensor = public(getattr(cudnn, "Tensor", object)) | public(getattr(cudnn, "tensor", object))
    options = set(inspect.signature(cudnn.pygraph.__init__).parameters) - {"self", "name", "kwargs"}
    backend = getattr(getattr(cudnn, "_pybind_module", None), "backend_graph", None)
    for op in public(backend) if backend is not None else ():
        doc = getattr(getattr(backend, op), "__doc__", None) or ""
        options |= set(re.findall(r"^\s+(\w+) \((?:Optional\[)?[\w\[\], .:()|]*\)", doc, re.M))
    options = {o for o in options if ("_" in o or o in _SHORT_OPTIONS) and o not in _NOT_OPTIONS}
    return {"graph": public(cudnn.pygraph), "tensor": tensor, "module": public(cudnn), "option": options}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


class _Unit:
    def __init__(self, name: str) -> None:
        self.name, self.uses, self.calls = name, set(), set()


def _scan(
    tree: ast.AST,
    unit: _Unit,
    vocab: dict[str, set[str]],
    aliases: dict[str, str],
    local: set[str],
    module: str,
    functions: frozenset[str] = frozenset(),
) -> None:
    for node in ast.walk(tree):
        # a helper passed as a value (to a fresh process, a sweep) runs as surely as one called
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in local:
                unit.calls.add(f"{module}.{node.id}")
            elif node.id in aliases:
                unit.calls.add(aliases[node.id])
        if isinstance(node, ast.Attribute):
            chain = _dotted(node)
            if chain.startswith("cudnn.") and chain.split(".")[1] in vocab["module"]:
                unit.uses.add("cudnn." + chain.split(".")[1])
            head = chain.split(".")[0] if chain else ""
            if head in aliases and chain.count(".") == 1:
                unit.calls.add(f"{aliases[head]}.{node.attr}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "_" in node.value:
            if node.value in vocab["graph"]:  # a method held in a table, called through getattr
                unit.uses.add(node.value)
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute):
            attr, receiver = func.attr, _dotted(func.value)
            is_method = attr in vocab["graph"] or attr in vocab["tensor"]
            if is_method and ("_" in attr or receiver.split(".")[-1] in _GRAPH_NAMES):
                unit.uses.add(attr)
        # an operation's options, as keywords: sink_token=, kernel_cache=, ragged_offset=. On a graph's
        # own call any documented option counts; in a dict of options or a call to a function of the
        # same file that passes them on (``**mask``), only the unmistakable ones, with an underscore
        on_graph = isinstance(func, ast.Attribute) and (
            _dotted(func) == "cudnn.pygraph"
            or (func.attr in vocab["graph"] and _GRAPH_RECEIVER.match(_dotted(func.value).split(".")[-1]))
        )
        passed_on = isinstance(func, ast.Name) and (func.id == "dict" or func.id in functions)
        for kw in node.keywords:
            if kw.arg in vocab.get("option", ()) and (on_graph or (passed_on and "_" in kw.arg)):
                unit.uses.add(f"{kw.arg}=")


def _aliases(tree: ast.AST, package: str, module: str) -> dict[str, str]:
    """Local name → ``cudnn_guide.module`` or ``cudnn_guide.module.name`` from the file's imports."""
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:  # from . import graphs / from .graphs import build
            base = package + ("." + base if base else "")
        if not base.startswith(package):
            continue
        for name in node.names:
            target = f"{base}.{name.name}"
            out[name.asname or name.name] = target
    return out


def frontend_index(root: Path, package: str = "cudnn_guide") -> list[dict[str, Any]]:
    """One row per frontend name the site uses: its kind, the helpers that use it, the pages that run it.

    Parameters
    ----------
    root
        The repository (``cudnn_guide/`` and ``examples/`` below it).
    package
        The helper package.

    Returns
    -------
    list[dict[str, Any]]
        ``name``, ``kind`` (``graph method``, ``tensor method``, ``module`` or ``option``: a keyword
        of an operation, a tensor or the graph, shown as ``sink_token=``), ``helpers``
        (qualified names that use it directly) and ``pages`` (example stems), sorted by name.

    Example
    -------
    >>> rows = frontend_index(Path("."))
    >>> "plot_09_sdpa_backward" in next(r for r in rows if r["name"] == "sdpa_backward")["pages"]
    True
    """
    vocab = frontend_vocabulary()
    units: dict[str, _Unit] = {}
    reexported: dict[str, str] = {}  # a subpackage's name → where it is defined
    for path in sorted((Path(root) / package).rglob("*.py")):
        parts = path.relative_to(Path(root) / package).with_suffix("").parts
        module = ".".join((package, *parts)).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = _aliases(tree, package, module)
        if path.stem == "__init__":
            reexported.update({f"{module}.{local}": target for local, target in aliases.items()})
        tops = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        local = {n.name for n in tops}
        functions = frozenset(n.name for n in tops if isinstance(n, ast.FunctionDef))
        for node in tops:
            unit = units[f"{module}.{node.name}"] = _Unit(f"{module}.{node.name}")
            _scan(node, unit, vocab, aliases, local, module, functions)

    def closure(name: str, seen: set[str]) -> set[str]:
        name = reexported.get(name, name)
        if name in seen or name not in units:
            return set()
        seen.add(name)
        out = set(units[name].uses)
        for callee in units[name].calls:
            out |= closure(callee, seen)
        return out

    pages: dict[str, set[str]] = {}
    for path in sorted((Path(root) / "examples").glob("plot_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        unit = _Unit(path.stem)
        functions = frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef))
        _scan(tree, unit, vocab, _aliases(tree, package, path.stem), set(), path.stem, functions)
        used = set(unit.uses)
        for callee in unit.calls:
            used |= closure(callee, set())
        for name in used:
            pages.setdefault(name, set()).add(path.stem)
    helpers: dict[str, set[str]] = {}
    for unit in units.values():
        for name in unit.uses:
            helpers.setdefault(name, set()).add(unit.name)

    def kind(name: str) -> str:
        if name.startswith("cudnn."):
            return "module"
        if name.endswith("="):
            return "option"
        return "graph method" if name in vocab["graph"] else "tensor method"

    return [
        {"name": n, "kind": kind(n), "helpers": sorted(helpers.get(n, ())), "pages": sorted(pages.get(n, ()))}
        for n in sorted(set(helpers) | set(pages))
    ]


_AUTOMODULE = re.compile(r"^\.\. automodule:: ([\w.]+)[ \t]*\n((?:[ \t]+:[\w-]+:.*\n)*)", re.M)


def api_pages(docs: Path) -> dict[str, str]:
    """Which page of the API reference documents each module's members, read from its ``automodule`` entries.

    Parameters
    ----------
    docs
        The Sphinx source folder (``docs/api/*.md`` below it).

    Returns
    -------
    dict[str, str]
        Module name → the page's path from ``docs`` without its suffix (``api/graphs``). A module
        entered with ``:no-members:`` (a subpackage's overview) is left out: its members have no
        anchor there.

    Example
    -------
    >>> api_pages(Path("docs"))["cudnn_guide.graphs.builder"]
    'api/graphs'
    """
    docs = Path(docs)
    out = {}
    for path in sorted((docs / "api").glob("*.md")):
        for module, options in _AUTOMODULE.findall(path.read_text(encoding="utf-8") + "\n"):
            if ":no-members:" not in options:
                out[module] = path.relative_to(docs).with_suffix("").as_posix()
    return out


def page_links(stems: Iterable[str], titles: Mapping[str, str], prefix: str = "auto_examples/") -> str:
    """The gallery pages as links that read "04 · Matmul with a fused epilogue", one a line, HTML-escaped.

    Parameters
    ----------
    stems
        Example stems (``plot_04_matmul_epilogue``), in the order shown.
    titles
        Stem → the page's title (from its record); a page without one shows its stem.
    prefix
        The gallery's folder, relative to the linking page.

    Returns
    -------
    str
        HTML: the ``<a>`` elements joined by ``<br>``; empty for no pages. Titles come from recorded
        data: a ``<script>`` in one shows as text.

    Example
    -------
    >>> page_links(["plot_04_matmul_epilogue"], {"plot_04_matmul_epilogue": "Matmul <fused>"})
    '<a href="auto_examples/plot_04_matmul_epilogue.html">04 · Matmul &lt;fused&gt;</a>'
    """
    links = []
    for stem in stems:
        number = stem.split("_")[1] if stem.count("_") >= 2 else stem
        text = f"{number} · {titles.get(stem) or stem}"
        links.append(f'<a href="{html.escape(prefix + stem)}.html">{html.escape(text)}</a>')
    return "<br>".join(links)


def helper_links(qualnames: Iterable[str], pages: Mapping[str, str], public: Any = None) -> str:
    """The ``cudnn_guide`` helpers as code, each linked to its entry in the API reference page that documents it.

    Parameters
    ----------
    qualnames
        Qualified names (``cudnn_guide.graphs.builder.build``).
    pages
        Module → API page, as :func:`api_pages` reads them (relative to the linking page).
    public
        ``public(module, name)`` → whether the name is documented (in the module's ``__all__``);
        by default, every name of a module in ``pages``.

    Returns
    -------
    str
        HTML: ``<code>`` elements (that may break after a dot: ``<wbr>``), linked where documented,
        joined by ``", "``; escaped.

    Example
    -------
    >>> helper_links(["cudnn_guide.graphs.builder.build"], {"cudnn_guide.graphs.builder": "api/graphs"})
    '<a href="api/graphs.html#cudnn_guide.graphs.builder.build"><code>graphs.<wbr>builder.<wbr>build</code></a>'
    """
    out = []
    for qualname in qualnames:
        module, name = qualname.rsplit(".", 1)
        # a long name may break after a dot (<wbr>), so the column stays narrow enough for the page titles
        label = "<code>" + ".<wbr>".join(html.escape(qualname.removeprefix("cudnn_guide.")).split(".")) + "</code>"
        if module in pages and (public is None or public(module, name)):
            label = f'<a href="{html.escape(pages[module])}.html#{html.escape(qualname)}">{label}</a>'
        out.append(label)
    return ", ".join(out)


def anchor(name: str) -> str:
    """The id of a frontend name's row in the index, which code on the pages links to.

    Example
    -------
    >>> anchor("cudnn.pygraph"), anchor("sink_token=")
    ('fe-pygraph', 'fe-sink_token')
    """
    return "fe-" + re.sub(r"[^A-Za-z0-9_]", "", name.removeprefix("cudnn."))


def code_links(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Name as it stands in code after a dot (``pygraph``, ``sdpa``, ``set_output``) → its row's id, for
    the pages' code links (``_static/cudnn-guide.js``); options (``name=``) are not linked.

    Example
    -------
    >>> code_links([{"name": "cudnn.pygraph", "kind": "module"}, {"name": "bias=", "kind": "option"}])
    {'pygraph': 'fe-pygraph'}
    """
    return {r["name"].removeprefix("cudnn."): anchor(r["name"]) for r in rows if r["kind"] != "option"}


def code_links_json(root: Path) -> str:
    """The site's ``_static/frontend-names.json``: :func:`code_links` of :func:`frontend_index`, as JSON.

    Example
    -------
    >>> json.loads(code_links_json(Path(".")))["pygraph"]
    'fe-pygraph'
    """
    import json

    return json.dumps(code_links(frontend_index(root)))


class PendingCodeLinks:
    """:func:`code_links_json` computed in a fresh interpreter of its own (:func:`start_code_links`).

    Example
    -------
    >>> pending = start_code_links(Path("."))
    >>> text = pending.result()
    """

    def __init__(self, root: Path) -> None:
        import os
        import subprocess
        import sys
        import tempfile

        fd, name = tempfile.mkstemp(prefix="cudnn-guide-frontend-names-", suffix=".json")
        os.close(fd)
        self._out = Path(name)
        ext = str(Path(__file__).resolve().parents[1])  # docs/_ext: gallery_build's folder
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ext, os.environ.get("PYTHONPATH", "")]))}
        code = (
            "import sys; from pathlib import Path; from gallery_build.frontend_index import code_links_json; "
            "Path(sys.argv[2]).write_text(code_links_json(Path(sys.argv[1])), encoding='utf-8')"
        )
        # its errors go to a file, not a pipe: nothing needs reading while it runs
        with open(f"{self._out}.err", "w", encoding="utf-8") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", code, str(Path(root).resolve()), str(self._out)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def result(self) -> str:
        """Wait for it; the JSON text.

        Raises
        ------
        RuntimeError
            The interpreter failed, with its last lines.
        """
        code = self._proc.wait()
        out, err = self._out, Path(f"{self._out}.err")
        try:
            if code:
                tail = " | ".join(err.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:])
                raise RuntimeError(f"the frontend index could not be computed ({tail})")
            return out.read_text(encoding="utf-8")
        finally:
            out.unlink(missing_ok=True)
            err.unlink(missing_ok=True)

    def cancel(self) -> None:
        """Stop it (a build that failed needs no index) and remove its files."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        self._out.unlink(missing_ok=True)
        Path(f"{self._out}.err").unlink(missing_ok=True)


def start_code_links(root: Path) -> PendingCodeLinks:
    """Start :func:`code_links_json` in a fresh interpreter and return at once.

    The docs build starts it when the builder is ready and writes its JSON when the build finishes
    (:func:`gallery_build.hooks.connect`): the index is read from the sources while Sphinx builds the
    pages, not after them. A fresh interpreter, as the frontend API page's notebook computes it.

    Parameters
    ----------
    root
        The repository (``cudnn_guide/`` and ``examples/`` below it).

    Returns
    -------
    PendingCodeLinks
        Its :meth:`~PendingCodeLinks.result` waits and returns the JSON text.

    Example
    -------
    >>> Path("out/_static/frontend-names.json").write_text(start_code_links(Path(".")).result())
    """
    return PendingCodeLinks(root)


SOURCE = "https://github.com/NVIDIA/cudnn-frontend/blob/main/python/"
"""Where the frontend's Python sources live (the main branch: file paths, not line numbers)."""


def describe(name: str, kind: str) -> tuple[str, str]:
    """One line on what a frontend name does, from the installed frontend's own docstring, and a
    link to the file that defines it in NVIDIA's repository (``("", "")`` when either is unknown).

    Example
    -------
    >>> describe("set_output", "tensor method")[0]
    'Mark this tensor as an output (non-virtual) or intermediate (virtual).'
    """
    try:
        import cudnn
        from cudnn import _pygraph
    except ImportError:
        return "", ""
    if kind == "option":
        return "", ""
    owner = {"graph method": _pygraph.pygraph, "tensor method": getattr(_pygraph, "Tensor", None)}.get(kind, cudnn)
    obj = getattr(owner, name.removeprefix("cudnn."), None)
    if obj is None:
        return "", ""
    import enum

    members = getattr(obj, "__members__", None)
    if isinstance(obj, type) and (issubclass(obj, enum.Enum) or members):  # an enumeration: name its values
        values = list(members or {})
        return f"Enumeration: {', '.join(values[:6])}{', …' if len(values) > 6 else ''}.", ""
    text = inspect.getdoc(obj) or ""
    if isinstance(obj, type) and len(obj.__mro__) > 1 and text == inspect.getdoc(obj.__mro__[1]):
        text = ""  # only its base class's docstring (an exception's "Common base class ...")
    doc = re.sub(r":\w+:`~?([^`]*)`", r"\1", " ".join(text.split("\n\n")[0].split())).replace("``", "")
    line = doc.split(". ")[0].rstrip(".") + "." if doc and not re.match(r"^\w+\(", doc) else ""
    module = inspect.getmodule(obj)
    path = getattr(module, "__file__", "") or ""
    url = SOURCE + "cudnn/" + path.split("/cudnn/", 1)[1] if "/cudnn/" in path and path.endswith(".py") else ""
    return line, url
