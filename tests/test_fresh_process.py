"""fresh_process: each call gets a new process, forked from a server, with the caller's
environment and none of its state; failures come back with the child's traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import pytest

from cudnn_guide import fresh_process
from cudnn_guide.fresh_process import FreshProcessError

STATE = {"touched": False}  # changed by the test process only; a child must see the import-time value


def _pid_and_state():
    return os.getpid(), STATE["touched"], os.environ.get("CUDNN_GUIDE_TEST_VAR")


def _die():
    os._exit(3)


def _sleep(seconds):
    import time

    time.sleep(seconds)


def _nested():
    inner = fresh_process.run(os.getpid, preload=())
    return os.getpid(), inner.value


def test_each_call_runs_in_a_new_process_without_the_callers_state(monkeypatch):
    STATE["touched"] = True
    monkeypatch.setenv("CUDNN_GUIDE_TEST_VAR", "set after the server started")
    try:
        first = fresh_process.run(_pid_and_state)
        second = fresh_process.run(_pid_and_state)
    finally:
        STATE["touched"] = False
    pid, touched, var = first.value
    assert pid == first.pid and pid != os.getpid() and second.pid != pid
    assert touched is False  # the module was imported afresh in the server, not copied from this process
    assert var == "set after the server started"  # the caller's environment at call time
    assert 0 <= second.start_seconds <= second.seconds


def test_a_raising_function_is_reported_with_the_childs_traceback():
    with pytest.raises(FreshProcessError) as info:
        fresh_process.run(int, "not a number")
    assert "ValueError: invalid literal for int()" in info.value.detail
    assert info.value.what == "builtins.int"


def test_a_function_from_main_is_refused_with_the_fix():
    def local():
        return 1
    local.__module__ = "__main__"
    with pytest.raises(FreshProcessError, match="define it in an importable module"):
        fresh_process.run(local)


def test_a_child_that_dies_or_hangs_is_an_error_not_a_hang():
    with pytest.raises(FreshProcessError, match=r"died without an answer \(exit code 3\)"):
        fresh_process.run(_die)
    with pytest.raises(FreshProcessError, match="no answer within 1 s; the child was killed"):
        fresh_process.run(_sleep, 30, timeout=1)


def test_a_child_can_start_its_own_fresh_process():
    # A recorded page (itself a fresh process) runs start-up studies in fresh processes of its own.
    outer = fresh_process.run(_nested)
    middle, inner = outer.value
    assert len({os.getpid(), middle, inner}) == 3


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    # A gallery example run by hand has no ``if __name__ == "__main__"``; multiprocessing would
    # re-run it in the child unless run() hides it.
    script = tmp_path / "example.py"
    script.write_text(textwrap.dedent("""
        import os
        print("top level ran", flush=True)
        from cudnn_guide import fresh_process
        print("child", fresh_process.run(os.getpid, preload=()).value != os.getpid(), flush=True)
    """))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=root))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["top level ran", "child True"]


def test_a_child_refuses_to_run_when_cuda_is_already_initialized(monkeypatch):
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    assert "already initialized" in fresh_process._cuda_untouched()
    fake_torch.cuda.is_initialized = lambda: False
    assert fresh_process._cuda_untouched() is None
