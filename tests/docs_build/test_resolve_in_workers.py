"""resolve_in_workers: a parallel HTML build whose workers resolve the pages they write gives the same site."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx")

EXT = Path(__file__).resolve().parents[2] / "docs" / "_ext"

PNG = base64.b64decode(  # one transparent pixel
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

CONF = """
import sys
sys.path.insert(0, {ext!r})
project = "t"
extensions = []
html_theme = "alabaster"

def setup(app):
    if {patched!r}:
        from gallery_build import resolve_in_workers
        resolve_in_workers.install(app)

    def said(app, exc):
        method = getattr(app.builder, "_write_parallel", None)
        (app.outdir / "writer.txt").write_text(getattr(method, "__func__", method).__qualname__)

    app.connect("build-finished", said)
"""

PAGES = {
    "index.rst": "Top\n===\n\n.. toctree::\n\n   {pages}\n",
    "page{n}.rst": (
        ".. _label{n}:\n\nPage {n}\n=======\n\nSee :ref:`label{m}`, :doc:`page{m}` and :func:`os.path.join`.\n\n"
        ".. image:: pixel.png\n\n.. code-block:: python\n\n   import os  # page {n}\n   print(os.sep)\n\n"
        "A word only here: uniqueword{n}.\n"
    ),
}


def _site(root: Path, patched: bool) -> Path:
    src = root / ("patched" if patched else "sphinx") / "src"
    src.mkdir(parents=True)
    (src / "conf.py").write_text(CONF.format(ext=str(EXT), patched=patched))
    (src / "pixel.png").write_bytes(PNG)
    n = 8
    (src / "index.rst").write_text(PAGES["index.rst"].format(pages="\n   ".join(f"page{i}" for i in range(n))))
    for i in range(n):
        (src / f"page{i}.rst").write_text(PAGES["page{n}.rst"].format(n=i, m=(i + 1) % n))
    out = src.parent / "html"
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-j", "3", "-b", "html", str(src), str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return out


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and ".doctrees" not in p.parts and p.name not in {".buildinfo", "writer.txt"}
    }


def test_pages_resolved_in_workers_give_the_same_html_search_index_and_images(tmp_path):
    own, patched = _site(tmp_path, False), _site(tmp_path, True)
    assert (own / "writer.txt").read_text() == "Builder._write_parallel"
    assert (patched / "writer.txt").read_text() == "write_parallel"  # the workers resolved the pages
    a, b = _files(own), _files(patched)
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []
    assert "_images/pixel.png" in b and b"uniqueword7" in b["searchindex.js"]
    assert b'href="page0.html#label0"' in b["page7.html"] or b'href="#label0"' in b["page7.html"]


def test_it_leaves_other_builders_alone():
    from gallery_build import resolve_in_workers

    class App:
        def __init__(self):
            self.handlers = {}

        def connect(self, event, fn):
            self.handlers[event] = fn

    class Builder:
        name = "latex"

        def _write_parallel(self, docnames, nproc):
            return "sphinx's"

    app = App()
    assert resolve_in_workers.install(app)
    app.builder = Builder()
    app.handlers["builder-inited"](app)
    assert app.builder._write_parallel([], 1) == "sphinx's"
