"""Write the offline intersphinx inventories ``docs/_intersphinx/{python,torch,numpy}.inv``.

The docs build links the names the example pages use to Python's, PyTorch's and NumPy's own
documentation through intersphinx. CI and most readers' machines build without network access,
so the build reads these small inventories; the hosted site's build fetches the projects' full
inventories first (``CUDNN_GUIDE_INTERSPHINX=online``, see ``docs/conf.py``) and falls back to them.

Which names: every name sphinx-gallery resolved in the recorded pages (``docs/auto_examples/
*.codeobj.json``) that belongs to one of the three projects and exists in the installed package.
Where: each project's documented URL scheme (:func:`python_uri`, :func:`torch_uri`,
:func:`numpy_uri`); a name whose page the scheme cannot place is left out, never guessed.

Run it after a recording that adds names: ``python tools/make_inventories.py``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "_intersphinx"
PROJECTS = {
    "python": ("Python", "3"),
    "torch": ("PyTorch", "stable"),
    "numpy": ("NumPy", "stable"),
}
STDLIB = {
    "collections", "collections.abc", "dataclasses", "functools", "inspect", "json", "math", "os",
    "os.path", "pathlib", "re", "statistics", "subprocess", "sys", "tempfile", "textwrap", "time",
    "warnings", "copy", "enum", "itertools", "contextlib", "typing",
}  # fmt: skip
# torch namespaces whose functions and classes have one autosummary page each (generated/<name>.html)
TORCH_GENERATED = ("torch", "torch.nn", "torch.nn.functional", "torch.cuda", "torch.optim", "torch.nn.attention")
TORCH_PAGES = {"torch.testing": "testing.html", "torch.library": "library.html"}
# documented on a shared page, not an autosummary page of their own
TORCH_SPECIAL = {
    "torch.Tensor": "tensors.html",
    "torch.Size": "size.html",
    "torch.dtype": "tensor_attributes.html",
    "torch.device": "tensor_attributes.html",
    "torch.memory_format": "tensor_attributes.html",
}
# importable, but with no page in PyTorch's documentation (or one this scheme cannot place)
TORCH_UNDOCUMENTED = {
    "torch.cudnn_convolution_relu", "torch.relu", "torch.conv2d", "torch.softmax",
    "torch.optim.Optimizer", "torch.nn.attention.activate_flash_attention_impl",
}  # fmt: skip
# Python documents these classes' members on another class's entry, or not at all
PYTHON_NO_MEMBERS = ("collections.abc.", "pathlib.PosixPath.", "pathlib.PurePosixPath.", "pathlib.Path.name")


def resolve(full: str):
    """The object named ``full`` (``pkg.mod.Obj.attr``), or ``None`` when it does not exist here."""
    parts = full.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _role(obj, is_method: bool) -> str:
    if inspect.ismodule(obj):
        return "py:module"
    if inspect.isclass(obj):
        return "py:class"
    if is_method:
        return "py:method"
    return "py:function" if callable(obj) else "py:data"


def python_uri(module: str, name: str, obj) -> str | None:
    """docs.python.org: ``library/<module>.html#<module>.<name>``; builtins on functions.html."""
    if module == "builtins":
        if "." in name:
            return None
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            return f"library/exceptions.html#{name}"
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            return None  # int, str, dict...: sphinx-gallery would link every variable of that type
        return f"library/functions.html#{name}"
    if module not in STDLIB or f"{module}.{name}".startswith(PYTHON_NO_MEMBERS):
        return None
    page = "collections.abc" if module == "collections.abc" else module
    return f"library/{page}.html#{module}.{name}"


def torch_uri(module: str, name: str, obj) -> str | None:
    """docs.pytorch.org/docs/stable: autosummary pages ``generated/<full>.html``, a class's methods on
    its class page; ``torch.Tensor`` and its methods; ``torch.testing``/``torch.library`` pages."""
    full = f"{module}.{name}"
    if module in TORCH_PAGES:
        return f"{TORCH_PAGES[module]}#{full}"
    if full in TORCH_UNDOCUMENTED:
        return None
    if full in TORCH_SPECIAL:
        return f"{TORCH_SPECIAL[full]}#{full}"
    if module == "torch" and name.startswith("Tensor."):
        return f"generated/{full}.html#{full}"
    if module not in TORCH_GENERATED or getattr(obj, "__module__", "") is None:
        return None
    head, _, rest = name.partition(".")
    owner = resolve(f"{module}.{head}")
    if owner is None or not (inspect.isclass(owner) or inspect.isroutine(owner)):
        return None  # dtypes, constants: no page of their own
    if not getattr(owner, "__module__", "").startswith(module):
        return None  # re-exported under another name: its page is under its own module
    page = f"generated/{module}.{head}.html"
    return f"{page}#{full}"


def numpy_uri(module: str, name: str, obj) -> str | None:
    """numpy.org/doc/stable: ``reference/generated/numpy.<name>.html``."""
    if module != "numpy" or "." in name:
        return None
    return f"reference/generated/numpy.{name}.html#numpy.{name}"


SCHEMES = {"python": python_uri, "torch": torch_uri, "numpy": numpy_uri}


def project_of(module: str) -> str | None:
    top = module.split(".")[0]
    if top in ("torch", "numpy"):
        return top
    if module == "builtins" or module in STDLIB:
        return "python"
    return None


def collect(codeobj_dir: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """Project → {full name: (role, uri)} for every placeable name the recorded pages use."""
    out: dict[str, dict[str, tuple[str, str]]] = {p: {} for p in PROJECTS}
    for path in sorted(codeobj_dir.glob("*.codeobj.json")):
        for entries in json.loads(path.read_text()).values():
            for e in entries:
                module, name = e["module"], e["name"]
                project = project_of(module)
                if project is None or name.startswith("_") or "._" in name:
                    continue
                full = f"{module}.{name}" if module != "builtins" else name
                obj = resolve(full if module != "builtins" else f"builtins.{name}")
                if obj is None:
                    continue
                uri = SCHEMES[project](module, name, obj)
                if uri:
                    owner = resolve(f"{module}.{name.rsplit('.', 1)[0]}") if "." in name else None
                    out[project][full] = (_role(obj, inspect.isclass(owner)), uri)
    return out


def write_inventory(path: Path, project: str, version: str, names: dict[str, tuple[str, str]]) -> None:
    """A Sphinx inventory, version 2: a plain header, then zlib-compressed ``name role prio uri -`` lines."""
    header = f"# Sphinx inventory version 2\n# Project: {project}\n# Version: {version}\n"
    header += "# The remainder of this file is compressed using zlib.\n"
    body = "".join(f"{n} {role} 1 {uri} -\n" for n, (role, uri) in sorted(names.items()))
    path.write_bytes(header.encode() + zlib.compress(body.encode(), 9))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for project, names in collect(ROOT / "docs" / "auto_examples").items():
        title, version = PROJECTS[project]
        write_inventory(OUT / f"{project}.inv", title, version, names)
        print(f"{project}: {len(names)} names -> {(OUT / f'{project}.inv').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
