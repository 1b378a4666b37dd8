"""Shared fixtures. GPU tests (``@pytest.mark.gpu``) are skipped, not failed, without a CUDA GPU."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "_ext"))  # gallery_build: the docs build's machinery
sys.path.insert(0, str(ROOT / "tools"))  # crosscheck: the timing-validation study
os.environ.setdefault("MPLBACKEND", "Agg")

from cudnn_guide.graphs import conv  # noqa: E402  (after the paths above)


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


HAS_GPU = _has_gpu()


@pytest.fixture(autouse=True)
def _signal_handlers_put_back():
    """A test that runs a CLI in process (``recording.stop_on_sigterm``) leaves no handler to the next."""
    import signal

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        if handler is not None:  # None: set from C, which Python cannot set back
            signal.signal(sig, handler)


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the GPU builder)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def fake_benchmark(monkeypatch, fake) -> list:
    """Give ``compare`` a fake ``benchmark`` (no GPU); its first-call checks, made before the measured block
    (``bench.first_call``), are only noted. Returns the list of ``(label, callable)`` they were asked for."""
    from cudnn_guide.measure import compare

    asked: list = []
    monkeypatch.setattr(compare, "benchmark", fake)
    monkeypatch.setattr(compare, "first_call", lambda fn, label, expect_shape=None: asked.append((label, fn)))
    return asked


SMALL_CONV = conv.ConvProblem(n=2, c=32, h=16, w=16, k=64)
"""The small convolution the GPU tests share (declaring it needs no GPU)."""


@pytest.fixture(autouse=True)
def no_running_record():
    """Each test starts and ends with no example's record collecting (records.page() starts one)."""
    from cudnn_guide import collector

    collector.stop()
    yield
    collector.stop()


@pytest.fixture
def small_conv():
    """GPU tests' small conv → bias → ReLU, built: ``(inputs, fused)``."""
    inputs = SMALL_CONV.make_inputs(seed=3)
    return inputs, conv.conv_bias_relu_graph(SMALL_CONV, inputs)


@pytest.fixture
def root() -> Path:
    return ROOT


def sphinx_render(src: Path, out: Path) -> subprocess.CompletedProcess:
    """Build the site from the committed recording (render mode), warnings as errors."""
    env = dict(os.environ, CUDNN_GUIDE_DOCS_MODE="render")
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-j", "auto", "-b", "html", str(src), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The site, built once per test session from a copy of the committed recording (a render
    rewrites the gallery's download zips in its source folder: the checkout stays untouched)."""
    out = tmp_path_factory.mktemp("html")
    src = copy_project(tmp_path_factory.mktemp("project"))
    proc = sphinx_render(src / "docs", out)
    assert proc.returncode == 0, f"sphinx failed (warnings are errors):\n{proc.stdout}\n{proc.stderr}"
    return out


def copy_project(dest: Path) -> Path:
    """Copy what a docs build reads (docs, examples, the package, tools, pyproject) into ``dest``; return ``dest``."""
    shutil.copytree(ROOT / "docs", dest / "docs", ignore=shutil.ignore_patterns("_build", "generated"))
    shutil.copytree(ROOT / "examples", dest / "examples")
    shutil.copytree(ROOT / "cudnn_guide", dest / "cudnn_guide")
    shutil.copytree(ROOT / "tools", dest / "tools")  # the docs include its scripts (recording at scale)
    for name in ("pyproject.toml", "README.md"):  # the site builds the package's wheel for its downloads
        shutil.copy(ROOT / name, dest / name)
    return dest


def remove_recording(gallery: Path, stem: str) -> None:
    """Delete every file the recording holds for one example (page, record, images, downloads)."""
    for old in list(gallery.glob(f"*{stem}*")) + list((gallery / "images").rglob(f"*{stem}*")):
        old.unlink()


def tiny_gallery(tmp_path, text="print(1)\n"):
    """One example ``plot_a.py`` and a gallery that recorded it (its md5 and a page)."""
    ex, gal = tmp_path / "examples", tmp_path / "gallery"
    ex.mkdir()
    gal.mkdir()
    (ex / "plot_a.py").write_text(text)
    (gal / "plot_a.py.md5").write_text(hashlib.md5(text.encode()).hexdigest())
    (gal / "plot_a.rst").write_text("page")
    return ex, gal


@pytest.fixture(autouse=True)
def _sphinx_gallery_put_back():
    """``gpu_turns.take_turns_per_cell`` wraps sphinx-gallery's cell functions in place: each test gets the
    originals back, so that no wrapper outlives its test or piles up on another."""
    try:
        from sphinx_gallery import gen_rst
    except ImportError:  # without the docs extra: nothing to put back
        yield
        return
    names = ("execute_code_block", "execute_script", "save_figures", "_get_code_output")
    saved = {n: getattr(gen_rst, n) for n in names}
    yield
    for n, fn in saved.items():
        setattr(gen_rst, n, fn)
