"""A build cut short never spoils the next one, and a render leaves the committed tree as it was
(:mod:`gallery_build.build_lock`). The Sphinx builds here are of a three-page project (about 2 s each)."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, copy_project
from gallery_build import build_lock

EXT = str(ROOT / "docs" / "_ext")


@pytest.fixture(autouse=True)
def no_inherited_lock(monkeypatch):
    monkeypatch.delenv(build_lock.HELD_ENV, raising=False)


def tiny_project(root: Path, broken: bool = False) -> Path:
    """``root/docs``: three pages whose ``conf.py`` guards its builds as the site's does."""
    src = root / "docs"
    src.mkdir(parents=True)
    (src / "conf.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {EXT!r})
            from gallery_build import build_lock
            project = "tiny"
            html_theme = "basic"
            exclude_patterns = ["_build"]

            def setup(app):
                build_lock.guard_sphinx_build(app, {str(src)!r})
            """
        )
    )
    (src / "index.rst").write_text("Tiny\n====\n\n.. toctree::\n\n   a\n   b\n")
    (src / "a.rst").write_text("Alpha\n=====\n\nConvolution forward with a fused bias and ReLU.\n")
    target = "nowhere" if broken else "a"
    (src / "b.rst").write_text(f"Beta\n====\n\nScaled dot-product attention; see :doc:`{target}`.\n")
    return src


def sphinx(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != build_lock.HELD_ENV}
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", *extra, str(src), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def same_output(a: Path, b: Path) -> list[str]:
    """Files that differ between two output folders (the pickled doctrees aside); empty if none."""
    problems = []
    for left in sorted(p for p in a.rglob("*") if p.is_file() and ".doctrees" not in p.parts):
        right = b / left.relative_to(a)
        if not right.is_file() or not filecmp.cmp(left, right, shallow=False):
            problems.append(str(left.relative_to(a)))
    extra = {p.relative_to(b) for p in b.rglob("*") if p.is_file() and ".doctrees" not in p.parts}
    extra -= {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    return problems + sorted(f"only in {b.name}: {p}" for p in extra)


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGE = {
    "a truncated search index": lambda out: cut_in_half(out / "searchindex.js"),
    "a truncated search index and environment pickle": lambda out: (
        cut_in_half(out / "searchindex.js"),
        cut_in_half(out / ".doctrees" / "environment.pickle"),
    ),
    "a half-written page": lambda out: cut_in_half(out / "a.html"),
}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A clean build of the tiny project: what every build after an interruption must equal."""
    src = tiny_project(tmp_path_factory.mktemp("clean"))
    proc = sphinx(src, src.parent / "html")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return src.parent / "html"


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_build_killed_while_writing_is_followed_by_a_clean_build_with_the_same_output(tmp_path, clean, damage):
    src, out = tiny_project(tmp_path), tmp_path / "html"
    assert sphinx(src, out).returncode == 0
    assert not (out / build_lock.MARK).exists(), "a build that finished should remove its mark"
    (out / build_lock.MARK).write_text("{}\n")  # killed: the mark stays, the files are half written
    DAMAGE[damage](out)
    proc = sphinx(src, out)
    assert proc.returncode == 0, f"the build after an interrupted one failed:\n{proc.stdout}{proc.stderr}"
    assert "did not finish" in proc.stdout, "the recovery should say what it removed and why"
    assert same_output(clean, out) == [], "the build after an interrupted one differs from a clean build"
    assert not (out / build_lock.MARK).exists()


@pytest.mark.parametrize("damage", ["a truncated search index", "a half-written page"])
def test_without_the_mark_the_damage_of_a_killed_build_survives_into_the_next(tmp_path, clean, damage):
    """Why the mark is needed: Sphinx alone fails on, or keeps, what a killed build left."""
    src, out = tiny_project(tmp_path), tmp_path / "html"
    assert sphinx(src, out).returncode == 0
    DAMAGE[damage](out)
    proc = sphinx(src, out)
    if damage == "a truncated search index":
        assert proc.returncode != 0 and "search index couldn't be loaded" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0 and same_output(clean, out) == ["a.html"]


def test_a_build_that_fails_keeps_its_mark_so_the_next_one_is_clean(tmp_path, clean):
    broken = tiny_project(tmp_path / "broken", broken=True)
    out = tmp_path / "html"
    proc = sphinx(broken, out)
    assert proc.returncode != 0, "the broken reference should fail the build under -W"
    assert (out / build_lock.MARK).exists(), "a build failed by a warning must leave its mark"
    src = tiny_project(tmp_path / "fixed")
    shutil.copytree(out, tmp_path / "fixed" / "html")
    proc = sphinx(src, tmp_path / "fixed" / "html")
    assert proc.returncode == 0 and "did not finish" in proc.stdout, proc.stdout + proc.stderr
    assert same_output(clean, tmp_path / "fixed" / "html") == []


def test_the_lock_file_survives_the_wipe_of_an_output_folder_that_holds_it(tmp_path):
    src = tiny_project(tmp_path)
    out = src / "_build"  # the lock lives in docs/_build/.lock: inside this output folder
    assert sphinx(src, out).returncode == 0
    (out / build_lock.MARK).write_text("{}\n")
    (out / "stale.html").write_text("left by a killed build")
    proc = sphinx(src, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / ".lock").is_file() and not (out / "stale.html").exists()


def test_the_wipe_never_reaches_the_sources(tmp_path):
    src = tiny_project(tmp_path)
    (tmp_path / build_lock.MARK).write_text("{}\n")  # as if the output folder were the project itself
    removed = build_lock.recover_interrupted(tmp_path, tmp_path / ".doctrees", protected=[src])
    assert removed == [] and (src / "index.rst").is_file()
    proc = sphinx(src, tmp_path, "-d", str(tmp_path / "doctrees"))
    assert (src / "index.rst").is_file(), proc.stdout + proc.stderr


def test_an_out_of_tree_doctree_folder_is_wiped_with_the_output(tmp_path):
    src, out, doctrees = tiny_project(tmp_path), tmp_path / "html", tmp_path / "doctrees"
    assert sphinx(src, out, "-d", str(doctrees)).returncode == 0
    (out / build_lock.MARK).write_text("{}\n")
    (doctrees / "stale.doctree").write_text("x")
    cut_in_half(out / "searchindex.js")
    assert sphinx(src, out, "-d", str(doctrees)).returncode == 0
    assert not (doctrees / "stale.doctree").exists() and (doctrees / "environment.pickle").is_file()


# -- the site's own conf.py ------------------------------------------------------------------------

SETUP_PROBE = """
import json, os, runpy, sys
from pathlib import Path
conf = runpy.run_path(sys.argv[1])
out = Path(sys.argv[2])

class App:
    outdir, doctreedir = out, out / ".doctrees"
    srcdir = confdir = Path(sys.argv[1]).parent
    extensions = {}
    hooks = {}
    def connect(self, event, fn, priority=500):
        self.hooks.setdefault(event, []).append((priority, fn))

app = App()
conf["setup"](app)
from sphinx_gallery import downloads
from gallery_build import build_lock
state = {
    "marked": (out / build_lock.MARK).exists(),
    "stale_left": (out / "searchindex.js").exists(),
    "zips": downloads.zip_files is build_lock.reproducible_zip,
}
for _, fn in sorted(app.hooks["build-finished"], key=lambda h: h[0]):
    if fn.__qualname__.startswith("guard_sphinx_build"):
        fn(app, None)
state["mark_after_success"] = (out / build_lock.MARK).exists()
print(json.dumps(state))
"""


def test_the_sites_conf_py_recovers_marks_and_makes_the_zips_reproducible(tmp_path):
    import json

    project = copy_project(tmp_path / "project")
    for example in (project / "examples").glob("plot_*.py"):  # the recorded examples: the render starts
        recorded = project / "docs" / "auto_examples" / example.name
        example.write_bytes(recorded.read_bytes()) if recorded.exists() else example.unlink()
    out = tmp_path / "html"
    out.mkdir()
    (out / build_lock.MARK).write_text("{}\n")
    (out / "searchindex.js").write_text("Search.setIndex({")  # what a killed build left
    env = {k: v for k, v in os.environ.items() if k != build_lock.HELD_ENV}
    env.update(CUDNN_GUIDE_DOCS_MODE="render", PYTHONPATH=os.pathsep.join([EXT, str(project)]))
    probe = subprocess.run(
        [sys.executable, "-c", SETUP_PROBE, str(project / "docs" / "conf.py"), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stdout + probe.stderr
    state = json.loads(probe.stdout.strip().splitlines()[-1])
    assert state == {"marked": True, "stale_left": False, "zips": True, "mark_after_success": False}, (
        "docs/conf.py setup() should call build_lock.guard_sphinx_build and keep_zips_reproducible: " + str(state)
    )


# -- a render leaves the tree clean: the gallery-wide zips -------------------------------------------


def _gallery(tmp_path: Path) -> Path:
    gal = tmp_path / "auto_examples"
    gal.mkdir()
    for name, text in [("plot_b.py", "print('b')\n"), ("plot_a.py", "print('a')\n"), ("plot_c.py", "print('c')\n")]:
        (gal / name).write_text(text)
        (gal / name).with_suffix(".ipynb").write_text('{"cells": []}\n')
    return gal


def _files(gal: Path, ext: str) -> list[str]:
    return [str(p) for p in gal.iterdir() if p.name.endswith(ext)]


def test_the_same_files_give_the_same_zip_bytes_whatever_their_times_and_order(tmp_path):
    gal = _gallery(tmp_path)
    zip_path = gal / "all.zip"
    build_lock.reproducible_zip(_files(gal, ".py"), zip_path, gal)
    first = zip_path.read_bytes()
    zip_path.unlink()
    for i, p in enumerate(gal.iterdir()):
        os.utime(p, (1_700_000_000 + i * 999, 1_700_000_000 + i * 999))
    build_lock.reproducible_zip(list(reversed(_files(gal, ".py"))), zip_path, gal)
    assert zip_path.read_bytes() == first
    with zipfile.ZipFile(zip_path) as z:
        assert z.namelist() == ["plot_a.py", "plot_b.py", "plot_c.py"]
        assert {i.date_time for i in z.infolist()} == {build_lock.ZIP_TIME}


def test_a_zip_already_holding_the_same_files_is_left_untouched(tmp_path):
    gal = _gallery(tmp_path)
    zip_path = gal / "all.zip"
    with zipfile.ZipFile(zip_path, "w") as z:  # as sphinx-gallery wrote it: directory order, real times
        for name in ["plot_c.py", "plot_a.py", "plot_b.py"]:
            z.write(gal / name, name)
    before, stat = zip_path.read_bytes(), zip_path.stat()
    build_lock.reproducible_zip(_files(gal, ".py"), zip_path, gal)
    assert zip_path.read_bytes() == before and zip_path.stat().st_mtime_ns == stat.st_mtime_ns


def test_a_zip_whose_files_changed_is_rewritten_with_them(tmp_path):
    gal = _gallery(tmp_path)
    zip_path = gal / "all.zip"
    build_lock.reproducible_zip(_files(gal, ".py"), zip_path, gal)
    (gal / "plot_b.py").write_text("print('b, edited')\n")
    build_lock.reproducible_zip(_files(gal, ".py"), zip_path, gal)
    with zipfile.ZipFile(zip_path) as z:
        assert z.read("plot_b.py") == b"print('b, edited')\n"


def test_sphinx_gallery_writes_its_gallery_zips_reproducibly_and_killed_builds_leftovers_go(tmp_path, monkeypatch):
    from sphinx_gallery import downloads

    gal = _gallery(tmp_path)
    (gal / "auto_examples_python.zip.new").write_bytes(b"left by a killed build")
    monkeypatch.setattr(downloads, "zip_files", downloads.zip_files)  # restored after the test
    build_lock.keep_zips_reproducible(gal)
    assert not (gal / "auto_examples_python.zip.new").exists()
    conf = {"example_extensions": {".py"}, "notebook_extensions": {".ipynb"}}
    downloads.generate_zipfiles(gal, tmp_path, conf)
    zips = {name: (gal / name).read_bytes() for name in ("auto_examples_python.zip", "auto_examples_jupyter.zip")}
    for p in gal.iterdir():
        os.utime(p, (1_800_000_000, 1_800_000_000))
    downloads.generate_zipfiles(gal, tmp_path, conf)
    assert {name: (gal / name).read_bytes() for name in zips} == zips
    with zipfile.ZipFile(gal / "auto_examples_jupyter.zip") as z:
        assert z.namelist() == ["plot_a.ipynb", "plot_b.ipynb", "plot_c.ipynb"]


def test_a_render_leaves_the_committed_gallery_zips_untouched(tmp_path, monkeypatch):
    """What a render does to ``docs/auto_examples/auto_examples_{python,jupyter}.zip``, on a copy."""
    from sphinx_gallery import downloads

    gal = tmp_path / "auto_examples"
    shutil.copytree(ROOT / "docs" / "auto_examples", gal, ignore=shutil.ignore_patterns("images"))
    monkeypatch.setattr(downloads, "zip_files", downloads.zip_files)
    build_lock.keep_zips_reproducible()
    conf = {"example_extensions": {".py"}, "notebook_extensions": {".ipynb"}}
    downloads.generate_zipfiles(gal, tmp_path, conf)
    changed = [
        name
        for name in ("auto_examples_python.zip", "auto_examples_jupyter.zip")
        if (gal / name).read_bytes() != (ROOT / "docs" / "auto_examples" / name).read_bytes()
    ]
    assert changed == [], (
        f"docs/auto_examples/{changed}: a render rewrites these, because they do not hold the recorded pages' "
        "current .py/.ipynb files (stale). Fix: run one render build (nox -s docs) and commit the zips it writes; "
        "they are reproducible, so every later render leaves them untouched"
    )


# -- what is published -------------------------------------------------------------------------------


def test_the_pages_artifact_leaves_out_the_doctrees():
    import yaml

    steps = yaml.safe_load((ROOT / ".github" / "workflows" / "docs.yml").read_text())["jobs"]["build"]["steps"]
    upload = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    site = steps[upload]["with"]["path"].rstrip("/")
    removed = [s["run"] for s in steps[:upload] if f"rm -rf {site}/.doctrees" in s.get("run", "")]
    assert removed, (
        f".github/workflows/docs.yml: the Pages artifact ({site}) would carry Sphinx's .doctrees (about 7 MB of "
        f"build state); add a step `rm -rf {site}/.doctrees` before actions/upload-pages-artifact"
    )
