"""Names from Python, PyTorch and NumPy in the pages link to those projects' documentation (issue 33),
offline too: the build reads the inventories in ``docs/_intersphinx`` unless told to fetch them."""

import importlib.util
import re
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INVENTORIES = ROOT / "docs" / "_intersphinx"


def _tool():
    spec = importlib.util.spec_from_file_location("make_inventories", ROOT / "tools" / "make_inventories.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_inventories"] = module
    spec.loader.exec_module(module)
    return module


def _entries(name: str) -> dict[str, str]:
    raw = (INVENTORIES / f"{name}.inv").read_bytes()
    header_end = raw.index(b"compressed using zlib.\n") + len(b"compressed using zlib.\n")
    lines = zlib.decompress(raw[header_end:]).decode().splitlines()
    return {line.split(" ")[0]: line.split(" ")[3] for line in lines}


@pytest.mark.parametrize("project", ["python", "torch", "numpy"])
def test_each_inventory_is_current_with_the_recorded_pages(project):
    names = _tool().collect(ROOT / "docs" / "auto_examples")[project]
    assert _entries(project) == {n: uri for n, (_, uri) in names.items()}, (
        f"docs/_intersphinx/{project}.inv is out of date: run python tools/make_inventories.py"
    )


def test_the_schemes_place_names_on_their_projects_pages_and_refuse_what_they_cannot_place():
    tool = _tool()
    import torch

    assert tool.torch_uri("torch", "randn", torch.randn) == "generated/torch.randn.html#torch.randn"
    assert tool.torch_uri("torch.cuda", "CUDAGraph.replay", torch.cuda.CUDAGraph.replay) == (
        "generated/torch.cuda.CUDAGraph.html#torch.cuda.CUDAGraph.replay"
    )
    assert tool.torch_uri("torch", "Tensor", torch.Tensor) == "tensors.html#torch.Tensor"
    assert tool.torch_uri("torch", "bfloat16", torch.bfloat16) is None  # a dtype has no page
    assert tool.torch_uri("torch", "cudnn_convolution_relu", None) is None  # undocumented
    assert tool.python_uri("time", "perf_counter", None) == "library/time.html#time.perf_counter"
    assert tool.python_uri("builtins", "ValueError", ValueError) == "library/exceptions.html#ValueError"
    assert tool.python_uri("builtins", "int", int) is None  # would link every int variable
    assert tool.python_uri("cudnn", "pygraph", None) is None
    assert tool.resolve("torch.no_such_name") is None


def test_the_build_reads_local_inventories_unless_told_to_fetch(monkeypatch):
    source = (ROOT / "docs" / "conf.py").read_text()
    assert '"sphinx.ext.intersphinx"' in source
    assert re.search(r'CUDNN_GUIDE_INTERSPHINX"\) == "online"', source)
    for hosted in (ROOT / ".github" / "workflows" / "docs.yml", ROOT / ".readthedocs.yaml"):
        assert "CUDNN_GUIDE_INTERSPHINX=online" in hosted.read_text(), hosted


@pytest.mark.docs
def test_code_on_the_pages_links_to_pytorch_and_python(site):
    page = (site / "auto_examples" / "plot_05_sdpa_causal.html").read_text()
    assert 'href="https://docs.pytorch.org/docs/stable/generated/torch.randn.html#torch.randn"' in page
    assert 'href="https://docs.pytorch.org/docs/stable/testing.html#torch.testing.assert_close"' in page
    api = (site / "api" / "core.html").read_text()
    assert 'href="https://docs.python.org/3/library/exceptions.html#' in api
