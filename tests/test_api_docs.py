"""Every public function and class of cudnn_guide is documented, and the reference lists it."""

import importlib
import inspect
import pkgutil
import re

import pytest

import cudnn_guide

MODULES = sorted(
    m.name.removeprefix("cudnn_guide.") for m in pkgutil.walk_packages(cudnn_guide.__path__, "cudnn_guide.")
)


def _public(module):
    names = getattr(module, "__all__", None)
    assert names is not None, f"{module.__name__} has no __all__"
    for name in names:
        obj = getattr(module, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield name, obj


@pytest.mark.parametrize("modname", MODULES)
def test_public_api_is_documented(modname):
    module = importlib.import_module(f"cudnn_guide.{modname}")
    assert (module.__doc__ or "").strip(), f"cudnn_guide.{modname} has no module docstring"
    missing = [name for name, obj in _public(module) if len((inspect.getdoc(obj) or "").strip()) < 20]
    assert not missing, f"cudnn_guide.{modname}: undocumented: {missing}"
    no_example = [name for name, obj in _public(module) if "Example\n-------" not in (inspect.getdoc(obj) or "")]
    assert not no_example, f"cudnn_guide.{modname}: no Example section: {no_example}"
    for name, obj in _public(module):
        if not inspect.isfunction(obj):
            continue
        doc, sig = inspect.getdoc(obj) or "", inspect.signature(obj)
        for param in sig.parameters:
            documented = any(f"\n{param}{end}" in doc for end in ("\n", ":", " :"))
            assert documented, f"cudnn_guide.{modname}.{name}: parameter {param!r} undocumented"
        if sig.return_annotation not in (inspect.Signature.empty, None, "None"):
            assert "Returns\n-------" in doc, f"cudnn_guide.{modname}.{name}: no Returns section"


SUBPACKAGES = ("graphs", "measure", "report", "studies")
"""One page of the API reference each (``docs/api/<name>.md``); the top-level modules go on ``core.md``."""


def _entries(root):
    """Module (without ``cudnn_guide.``) → the ``docs/api`` pages with an ``automodule`` entry for it."""
    out = {}
    for page in sorted((root / "docs" / "api").glob("*.md")):
        for module in re.findall(r"^\.\. automodule:: cudnn_guide\.([\w.]+)\s*$", page.read_text(), re.M):
            out.setdefault(module, []).append(page.name)
    return out


def _page_for(module):
    top = module.split(".")[0]
    return f"{top}.md" if top in SUBPACKAGES else "core.md"


def _on_its_page(module, page):
    """A subpackage's modules sit on its page, or on a continuation of it (``studies_attention.md``)."""
    wanted = _page_for(module)
    return page == wanted or (wanted != "core.md" and page.startswith(wanted[: -len(".md")] + "_"))


def test_every_module_is_in_the_api_reference(root):
    entries = _entries(root)
    missing = [m for m in MODULES if m not in entries]
    assert not missing, (
        f"modules missing from the API reference: {missing}: add `.. automodule:: cudnn_guide.<module>` "
        "to docs/api/<subpackage>.md (top-level modules: docs/api/core.md)"
    )
    unknown = sorted(set(entries) - set(MODULES))
    assert not unknown, f"docs/api documents modules that do not exist: {unknown}: remove their automodule entries"


def test_every_module_is_documented_once_on_its_subpackages_page(root):
    entries = _entries(root)
    twice = {m: pages for m, pages in entries.items() if len(pages) > 1}
    assert not twice, (
        f"modules with more than one automodule entry in docs/api (duplicate object descriptions): {twice}"
    )
    misplaced = {
        m: f"docs/api/{pages[0]}, not docs/api/{_page_for(m)}"
        for m, pages in entries.items()
        if not _on_its_page(m, pages[0])
    }
    assert not misplaced, f"modules on the wrong page of the API reference (move the automodule entry): {misplaced}"


def test_the_api_reference_index_lists_every_page(root):
    api = root / "docs" / "api"
    pages = {p.stem for p in api.glob("*.md")} - {"index"}
    continued = {p for p in pages if p.split("_")[0] in SUBPACKAGES and "_" in p}  # a subpackage's page, continued
    assert pages - continued == {*SUBPACKAGES, "core"}, (
        f"docs/api pages: {sorted(pages)}; expected one per subpackage (or its continuations, <subpackage>_*.md) "
        "and core.md"
    )
    index = (api / "index.md").read_text()
    toctree = re.search(r"```\{toctree\}\n(.*?)```", index, re.S)
    assert toctree, "docs/api/index.md has no toctree: list the API pages in one"
    listed = {line.strip() for line in toctree.group(1).splitlines() if line.strip() and not line.startswith(":")}
    assert listed == pages, f"docs/api/index.md's toctree lists {sorted(listed)}; the pages are {sorted(pages)}"
    unlinked = [p for p in sorted(pages) if f"{{doc}}`{p}`" not in index]
    assert not unlinked, f"docs/api/index.md does not describe {unlinked}: add a {{doc}} line for each"
