"""One page in one command: page names or numbers → example files, in nox and in the recorder.

``nox -s docs -- 5`` and ``python -m gallery_build.recording record 5`` share
:func:`gallery_build.progress.resolve_pages`; an unknown name lists the valid pages and stops
before anything is installed, recorded or built.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types

import pytest
from gallery_build import progress, recording

EXAMPLES = sorted(p.name for p in (recording.REPO_ROOT / "examples").glob("plot_*.py"))


@pytest.mark.parametrize("token", ["plot_05", "05", "5", "plot_05_sdpa_causal.py", "plot_05_sdpa_causal", " 5 "])
def test_a_page_is_named_by_its_file_stem_plot_number_or_number(token):
    assert progress.resolve_pages([token], EXAMPLES) == ["plot_05_sdpa_causal.py"]


def test_several_pages_come_back_once_each_in_the_examples_order():
    got = progress.resolve_pages(["12", "plot_01", "plot_12_conv_backward.py", "007"], EXAMPLES)
    assert got == ["plot_01_environment.py", "plot_07_kernel_cache.py", "plot_12_conv_backward.py"]
    assert progress.resolve_pages([], EXAMPLES) == []  # nothing named: the caller records every page


def test_an_unknown_page_names_itself_and_lists_every_valid_page():
    with pytest.raises(progress.UnknownPageError) as info:
        progress.resolve_pages(["5", "plot_99", "sdpa"], EXAMPLES)
    msg = str(info.value)
    assert "unknown page 'plot_99'" in msg and "unknown page 'sdpa'" in msg
    assert "'5'" not in msg.split("Valid pages")[0], "a valid page was reported as unknown"
    listed = msg.split("Valid pages:\n", 1)[1].splitlines()
    assert [line.split()[-1] for line in listed] == EXAMPLES, "the error must list every valid page, in order"
    assert listed[4].split() == ["05", "plot_05_sdpa_causal.py"]  # with the number to type
    assert isinstance(info.value, ValueError)  # what record_examples documented before


def test_a_number_two_pages_share_is_refused_as_ambiguous():
    with pytest.raises(progress.UnknownPageError, match="ambiguous.*plot_03_a.py, plot_03_b.py"):
        progress.resolve_pages(["3"], ["plot_03_a.py", "plot_03_b.py", "plot_04_c.py"])
    assert progress.resolve_pages(["plot_03_b"], ["plot_03_a.py", "plot_03_b.py"]) == ["plot_03_b.py"]


@pytest.mark.parametrize(
    ("args", "pages", "sphinx"),
    [
        ([], [], []),
        (["5", "7"], ["5", "7"], []),
        (["-E"], [], ["-E"]),  # Sphinx flags alone keep working, as before
        (["5", "-E", "-v"], ["5"], ["-E", "-v"]),
        (["5", "--", "-D", "key=value", "plot_07"], ["5"], ["-D", "key=value", "plot_07"]),
        (["--", "-b", "linkcheck"], [], ["-b", "linkcheck"]),
    ],
)
def test_docs_arguments_split_into_pages_and_sphinx_arguments(args, pages, sphinx):
    assert progress.split_docs_args(args) == (pages, sphinx)


def test_an_option_value_before_the_second_double_dash_is_refused_with_the_fix():
    pages, _ = progress.split_docs_args(["-D", "key=value"])
    with pytest.raises(progress.UnknownPageError, match=r"after a second '--'"):
        progress.resolve_pages(pages, EXAMPLES)


def test_record_examples_refuses_an_unknown_page_before_anything_starts(tmp_path, monkeypatch):
    from cudnn_guide import environment

    def no_gpu_query():
        raise AssertionError("record_examples looked at the GPU before checking the page names")

    monkeypatch.setattr(environment, "collect", no_gpu_query)
    gallery = tmp_path / "auto_examples"
    with pytest.raises(progress.UnknownPageError, match="unknown page '99'"):
        recording.record_examples(tmp_path, recording.REPO_ROOT / "examples", gallery, names=["99"])
    assert not gallery.exists() and not list(tmp_path.iterdir())  # nothing was staged or written


def test_the_recorder_command_lists_the_valid_pages_and_exits_non_zero(root):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "docs" / "_ext")]))
    before = (root / "docs" / "auto_examples" / "recording.json").read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "gallery_build.recording", "record", "5", "plot_99"],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
    )
    assert done.returncode != 0
    assert "unknown page 'plot_99'" in done.stderr and "plot_25_transformer_block.py" in done.stderr, done.stderr
    assert "recording plot_05" not in done.stdout + done.stderr  # nothing started
    assert (root / "docs" / "auto_examples" / "recording.json").read_bytes() == before


# -- the nox session, with a stand-in for nox (the test environment does not install nox) ----------


class _SessionError(Exception):
    pass


class _FakeSession:
    """What the docs session calls on nox.Session: each run is recorded, ``error`` stops it."""

    venv_backend = "virtualenv"
    virtualenv = types.SimpleNamespace(is_sandboxed=True)

    def __init__(self, posargs, mode, install_only=False):
        self.posargs, self.mode, self.env = list(posargs), mode, {}
        self.install_only = install_only  # nox --install-only: every run is skipped and returns None
        self.calls, self.logs, self.warnings = [], [], []

    def install(self, *args, **kwargs):
        self.calls.append(("install", *args))

    def run(self, *args, silent=False, **kwargs):
        self.calls.append(("run", *args))
        if self.install_only:
            return None
        if "-c" in args:  # the mode query
            return f"{self.mode}\n"
        if "sphinx" in args:  # the build writes its output folder
            os.makedirs(args[-1] if not args[-1].startswith("-") else "docs/_build/html", exist_ok=True)
        return ""

    def log(self, msg, *a, **k):
        self.logs.append(str(msg))

    def warn(self, msg, *a, **k):
        self.warnings.append(str(msg))

    def error(self, msg="", *a, **k):
        raise _SessionError(str(msg))


@pytest.fixture
def noxfile(root, tmp_path, monkeypatch):
    """The project's noxfile, imported with a stand-in ``nox``, run in a scratch copy of the layout."""
    fake = types.ModuleType("nox")
    fake.Session = _FakeSession
    fake.options = types.SimpleNamespace()
    fake.session = lambda f=None, **kw: f if f is not None else (lambda g: g)
    monkeypatch.setitem(sys.modules, "nox", fake)
    (tmp_path / "examples").mkdir()
    for name in EXAMPLES:
        (tmp_path / "examples" / name).write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "_ext").symlink_to(root / "docs" / "_ext")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the session adds docs/_ext
    environ = dict(os.environ)  # the session may note what it holds (its build lock) for the commands it starts
    spec = importlib.util.spec_from_file_location("noxfile_under_test", root / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    os.environ.clear()
    os.environ.update(environ)


def _runs(session):
    return [c[1:] for c in session.calls if c[0] == "run" and "-c" not in c]


def test_nox_docs_records_only_the_named_pages_then_builds_with_the_sphinx_arguments(noxfile):
    session = _FakeSession(["5", "plot_07", "--", "-E"], mode="record")
    noxfile.docs(session)
    runs = _runs(session)
    record = [r for r in runs if "gallery_build.recording" in r]
    assert record == [("python", "-m", "gallery_build.recording", "record", *EXAMPLES[4:5], EXAMPLES[6])]
    sphinx = [r for r in runs if "sphinx" in r]
    assert len(sphinx) == 1 and "-E" in sphinx[0] and "plot_07" not in sphinx[0]
    assert runs.index(record[0]) < runs.index(sphinx[0])  # recorded first, then the site


def test_nox_docs_with_no_pages_records_every_page(noxfile):
    session = _FakeSession([], mode="record")
    noxfile.docs(session)
    assert ("python", "-m", "gallery_build.recording", "record") in _runs(session)


def test_nox_docs_refuses_an_unknown_page_before_installing_anything(noxfile):
    session = _FakeSession(["5", "plot_99"], mode="record")
    with pytest.raises(_SessionError) as info:
        noxfile.docs(session)
    assert "unknown page 'plot_99'" in str(info.value) and "plot_01_environment.py" in str(info.value)
    assert session.calls == []  # no install, no mode query, no recording, no build


def test_nox_docs_without_a_gpu_says_nothing_is_recorded_and_renders_the_recording(noxfile):
    session = _FakeSession(["5"], mode="render")
    noxfile.docs(session)
    runs = _runs(session)
    assert not [r for r in runs if "gallery_build.recording" in r]  # nothing recorded
    assert [r for r in runs if "sphinx" in r], "the committed recording must still be rendered"
    warning = " ".join(session.warnings)
    assert "nothing can be recorded without" in warning and "plot_05_sdpa_causal.py" in warning


def test_nox_docs_install_only_installs_and_stops_without_recording_or_building(noxfile):
    session = _FakeSession(["5"], mode="record", install_only=True)
    noxfile.docs(session)  # nox returns None from a skipped run: the session must not fail on it
    assert [c for c in session.calls if c[0] == "install"], "the environment is still installed"
    assert _runs(session) == []  # only the (skipped) mode query: no recording, no build
