"""resolve_in_workers: a parallel HTML build whose workers resolve the pages they write gives Sphinx's own site."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("sphinx")

from gallery_build.resolve_in_workers import OFF_ENV

EXT = Path(__file__).resolve().parents[2] / "docs" / "_ext"

PNG = base64.b64decode(  # one transparent pixel
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

CONF = """
import os, sys
sys.path.insert(0, {ext!r})
project = "t"
extensions = []
html_theme = "alabaster"

def setup(app):
    if {patched!r}:
        from gallery_build import resolve_in_workers
        resolve_in_workers.install(app)

    def resolved(app, doctree, docname):  # which process resolved each page
        if docname == "page2":  # a slow page: the chunks after its own finish first
            import time

            time.sleep(1.0)
        with open(os.path.join(app.outdir, "resolved.txt"), "a") as out:
            out.write(f"{{docname}} {{os.getpid()}}\\n")

    def said(app, exc):
        method = getattr(app.builder, "_write_parallel", None)
        (app.outdir / "writer.txt").write_text(getattr(method, "__func__", method).__qualname__)
        (app.outdir / "main.txt").write_text(str(os.getpid()))

    app.connect("doctree-resolved", resolved)
    app.connect("build-finished", said)
"""

PAGE = """.. _label{n}:

Page {n}
=======

.. index:: sharedentry; page {n}
.. index:: sharedentry

.. only:: latex

   .. index:: latexonlyentry{n}

See :ref:`label{m}`, :doc:`{other}` and :func:`os.path.join`.{broken}

.. image:: {up}pixel.png

.. image:: {up}pixel.png
   :width: 10px

.. code-block:: python

   import os  # page {n}
   print(os.sep)

A word only here: uniqueword{n}.
"""

N = 12


def _page_path(i: int) -> str:
    return f"page{i}" if i % 2 == 0 else f"sub/deep/page{i}"  # half of them two folders down


def _site(root: Path, patched: bool, broken: bool = False, off: bool = False) -> tuple[Path, str]:
    src = root / ("patched" if patched else "sphinx") / "src"
    (src / "sub" / "deep").mkdir(parents=True)
    (src / "conf.py").write_text(CONF.format(ext=str(EXT), patched=patched))
    (src / "pixel.png").write_bytes(PNG)
    pages = [_page_path(i) for i in range(N)]
    (src / "index.rst").write_text("Top\n===\n\n.. toctree::\n\n   " + "\n   ".join(pages) + "\n   secret\n")
    for i, page in enumerate(pages):
        up = "../../" if "/" in page else ""
        text = PAGE.format(
            n=i,
            m=(i + 1) % N,
            other="/" + pages[(i + 1) % N],
            up=up,
            broken=" And :ref:`nowhere-at-all`." if broken and i == 5 else "",
        )
        (src / f"{page}.rst").write_text(text)
    (src / "secret.rst").write_text(":nosearch:\n\nSecret\n======\n\nA word nobody finds: secretword.\n")
    out = src.parent / "html"
    args = [sys.executable, "-m", "sphinx", "-j", "3", "-b", "html", str(src), str(out)]
    env = {**os.environ, OFF_ENV: "1"} if off else {k: v for k, v in os.environ.items() if k != OFF_ENV}
    done = subprocess.run(args if broken else [*args[:3], "-W", *args[3:]], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return out, done.stderr


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file()
        and ".doctrees" not in p.parts
        and p.name not in {".buildinfo", "writer.txt", "main.txt", "resolved.txt"}
    }


def _resolvers(out: Path) -> dict[str, int]:
    lines = (out / "resolved.txt").read_text().split("\n")
    return {page: int(pid) for page, pid in (line.split() for line in lines if line)}


def test_pages_resolved_in_workers_give_sphinxs_html_images_and_search_index(tmp_path):
    (own, _), (patched, _) = _site(tmp_path, False), _site(tmp_path, True)
    assert (own / "writer.txt").read_text() == "Builder._write_parallel"
    assert (patched / "writer.txt").read_text() == "write_parallel"
    # Sphinx resolves every page in its main process; patched, only the first page is resolved there
    main_own, main_patched = int((own / "main.txt").read_text()), int((patched / "main.txt").read_text())
    assert set(_resolvers(own).values()) == {main_own}
    by_worker = {page for page, pid in _resolvers(patched).items() if pid != main_patched}
    assert by_worker == set(_resolvers(patched)) - {"index"}
    a, b = _files(own), _files(patched)
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []
    # what the site is checked on: scaled images two folders down link to the full image there, the nosearch page
    # is not in the index, a page's shared index entry is, and resolved references read as their targets' titles
    assert b'href="../../_images/pixel.png"' in b["sub/deep/page1.html"]
    index = b["searchindex.js"]
    assert b"uniqueword11" in index and b"secretword" not in index and b"sharedentry" in index
    assert b"latexonlyentry" not in index  # an index entry under ``only:: latex`` is dropped by resolving
    assert b'href="page2.html#label2"' in b["sub/deep/page1.html"].replace(b"../../", b"")


def test_a_broken_reference_warns_once_either_way(tmp_path):
    (_, own), (_, patched) = _site(tmp_path, False, broken=True), _site(tmp_path, True, broken=True)
    assert own.count("nowhere-at-all") == patched.count("nowhere-at-all") == 1
    assert own.count("WARNING") == patched.count("WARNING") == 1


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


def test_the_off_switch_gives_sphinxs_own_method(tmp_path):
    out, _ = _site(tmp_path, True, off=True)
    assert (out / "writer.txt").read_text() == "Builder._write_parallel"
    assert set(_resolvers(out).values()) == {int((out / "main.txt").read_text())}


def _fails() -> None:
    raise ValueError("boom in a worker")


def _sleeps() -> None:
    time.sleep(0.5)


def test_a_worker_failure_read_while_a_later_chunk_is_queued_is_kept():
    from gallery_build import resolve_in_workers
    from sphinx.util.parallel import ParallelTasks

    def run(tasks):  # the first chunk fails before the second is queued; add_task reads it, stops all, carries on
        tasks.add_task(_fails)
        time.sleep(1.0)
        tasks.add_task(_sleeps)
        tasks.join()  # nothing left for join to read
        return tasks

    assert getattr(run(ParallelTasks(1)), "failure", None) is None  # Sphinx's own: the failure is gone
    kept = run(resolve_in_workers._first_failure_kept()(1)).failure
    assert kept is not None and "boom in a worker" in str(kept.args)
