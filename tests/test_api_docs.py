"""Every public function and class of cudnn_guide is documented, and the reference lists it."""

import importlib
import inspect
import pkgutil

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


def test_every_module_is_in_the_api_reference(root):
    api = (root / "docs" / "api.md").read_text()
    missing = [m for m in MODULES if f"automodule:: cudnn_guide.{m}" not in api]
    assert not missing, f"modules missing from docs/api.md: {missing}"
