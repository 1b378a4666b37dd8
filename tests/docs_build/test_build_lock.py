"""One docs build at a time per checkout (:mod:`gallery_build.build_lock`): the recorder, Sphinx and the
nox session take ``docs/_build/.lock``; a second build stops at once naming the first."""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from conftest import ROOT, copy_project
from gallery_build import build_lock

EXT = str(ROOT / "docs" / "_ext")


@pytest.fixture(autouse=True)
def no_inherited_lock(monkeypatch):
    """No test starts as if a parent build held a lock (the variable a holder sets for its children)."""
    monkeypatch.delenv(build_lock.HELD_ENV, raising=False)


class Holder:
    """Another process that holds ``docs_dir``'s build lock until it is stopped."""

    def __init__(self, docs_dir: Path, what: str = "recording") -> None:
        code = textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {EXT!r})
            from gallery_build import build_lock
            lock = build_lock.acquire({str(docs_dir)!r}, {what!r})
            print("held", flush=True)
            time.sleep(600)
            """
        )
        env = {k: v for k, v in os.environ.items() if k != build_lock.HELD_ENV}
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout.readline().strip() == "held", "the holder process could not take the lock"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.fixture
def holder(tmp_path):
    started = []

    def start(docs_dir: Path, what: str = "recording") -> Holder:
        started.append(Holder(docs_dir, what))
        return started[-1]

    yield start
    for h in started:
        if h.proc.poll() is None:
            h.kill()


def test_a_second_build_stops_at_once_naming_the_first(tmp_path, holder):
    first = holder(tmp_path / "docs", "recording")
    with pytest.raises(build_lock.BuildLockError) as info:
        build_lock.acquire(tmp_path / "docs", "sphinx-build")
    message = str(info.value)
    assert f"pid {first.proc.pid}" in message, message
    assert "recording" in message and "gallery_build" in message, "the message should name the holder's command"
    assert "since 20" in message and "Wait for it to finish" in message, message
    assert str(tmp_path / "docs" / "_build" / ".lock") in message


def test_the_lock_ends_with_its_process_so_a_killed_build_never_blocks_the_next(tmp_path, holder):
    holder(tmp_path / "docs").kill()
    with build_lock.acquire(tmp_path / "docs", "sphinx-build") as lock:
        assert not lock.inherited
        assert f'"pid": {os.getpid()}' in lock.path.read_text()
    assert lock.path.read_text() == "", "a released lock should not keep naming its holder"


def test_a_process_started_by_the_holder_inherits_the_lock(tmp_path):
    probe = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {EXT!r})
        from gallery_build import build_lock
        print(build_lock.acquire({str(tmp_path / "docs")!r}, "sphinx-build").inherited)
        """
    )
    with build_lock.acquire(tmp_path / "docs", "nox -s docs"):
        child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0 and child.stdout.strip() == "True", child.stdout + child.stderr


def test_a_copied_variable_does_not_let_an_unrelated_process_in(tmp_path, holder, monkeypatch):
    first = holder(tmp_path / "docs")
    monkeypatch.setenv(build_lock.HELD_ENV, f"{first.proc.pid}:{tmp_path / 'docs' / '_build' / '.lock'}")
    with pytest.raises(build_lock.BuildLockError, match=f"pid {first.proc.pid}"):
        build_lock.acquire(tmp_path / "docs", "sphinx-build")


def test_two_checkouts_build_side_by_side(tmp_path, holder):
    holder(tmp_path / "a" / "docs")
    with build_lock.acquire(tmp_path / "b" / "docs", "sphinx-build") as lock:
        assert lock.path == (tmp_path / "b" / "docs" / "_build" / ".lock").resolve()


def recorded_project(dest: Path) -> Path:
    """A copy of the project whose examples are the recorded ones (the render's staleness check passes
    whatever examples are being edited in the checkout)."""
    copy_project(dest)
    for example in (dest / "examples").glob("plot_*.py"):
        recorded = dest / "docs" / "auto_examples" / example.name
        example.write_bytes(recorded.read_bytes()) if recorded.exists() else example.unlink()
    return dest


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return recorded_project(tmp_path_factory.mktemp("project"))


def test_the_sites_sphinx_build_refuses_to_start_while_another_build_runs(project, holder, tmp_path):
    first = holder(project / "docs", "recording")
    env = {k: v for k, v in os.environ.items() if k != build_lock.HELD_ENV}
    env.update(CUDNN_GUIDE_DOCS_MODE="render", PYTHONPATH=os.pathsep.join([str(project / "docs" / "_ext"), EXT]))
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(project / "docs"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, "docs/conf.py setup() should refuse a build while another holds the lock:\n" + out
    assert f"pid {first.proc.pid}" in out and "another docs build" in out, out
    assert not (tmp_path / "out" / "index.html").exists()


def test_the_recorder_refuses_to_start_while_another_build_runs(project, holder):
    first = holder(project / "docs", "sphinx-build")
    env = {k: v for k, v in os.environ.items() if k != build_lock.HELD_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(project / "docs" / "_ext"), str(project)])
    proc = subprocess.run(
        [sys.executable, "-m", "gallery_build.recording", "record", "plot_01_environment.py"],
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"pid {first.proc.pid}" in out, out
    assert "Traceback" not in out, "the refusal should be a message, not a traceback:\n" + out


def _fake_nox() -> types.ModuleType:
    nox = types.ModuleType("nox")
    nox.options = types.SimpleNamespace()
    nox.session = lambda func=None, **kw: func if func is not None else (lambda f: f)
    nox.Session = object
    return nox


class FakeSession:
    def __init__(self) -> None:
        self.env: dict[str, str] = {}
        self.errors: list[str] = []

    def error(self, message: str) -> None:
        self.errors.append(message)
        raise SystemExit(message)


def _another_build_tries(docs_dir: Path) -> str:
    """An unrelated process (no inherited variable) tries the lock: ``acquired`` or ``refused``."""
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {EXT!r})
        from gallery_build import build_lock
        try:
            build_lock.acquire({str(docs_dir)!r}, "sphinx-build")
            print("acquired")
        except build_lock.BuildLockError:
            print("refused")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != build_lock.HELD_ENV}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    ).stdout.strip()


def test_the_nox_docs_session_holds_the_lock_for_the_recording_and_the_sphinx_build(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "nox", _fake_nox())
    monkeypatch.setattr(sys, "path", list(sys.path))
    noxfile = runpy.run_path(str(ROOT / "noxfile.py"))
    assert noxfile["docs"].__wrapped__.__name__ == "docs", "noxfile.py: the docs session should hold the build lock"
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    seen = {}

    def session_body(session):
        seen["env"] = dict(session.env)
        seen["another build"] = _another_build_tries(tmp_path / "docs")

    noxfile["_one_build_at_a_time"](session_body)(FakeSession())
    assert seen["another build"] == "refused", "another build ran during the nox docs session"
    assert seen["env"][build_lock.HELD_ENV].startswith(f"{os.getpid()}:"), "the recorder and Sphinx inherit the lock"
    assert build_lock.HELD_ENV not in os.environ and _another_build_tries(tmp_path / "docs") == "acquired", (
        "the session should release the lock when it ends"
    )


def test_the_nox_docs_session_stops_naming_the_build_that_holds_the_lock(tmp_path, holder, monkeypatch):
    monkeypatch.setitem(sys.modules, "nox", _fake_nox())
    monkeypatch.setattr(sys, "path", list(sys.path))
    noxfile = runpy.run_path(str(ROOT / "noxfile.py"))
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    first = holder(tmp_path / "docs")
    ran, session = [], FakeSession()
    with pytest.raises(SystemExit):
        noxfile["_one_build_at_a_time"](ran.append)(session)
    assert ran == [] and f"pid {first.proc.pid}" in session.errors[0]
