"""fresh_process: each call gets a new interpreter, started ahead of time, with the caller's
environment and none of its state; failures come back with the interpreter's traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import types

import pytest
import torch

from cudnn_guide import check
from cudnn_guide.studies import fresh_process, interpreter
from cudnn_guide.studies.fresh_process import FreshProcessError, InterpreterPool

STATE = {"touched": False}  # changed by the test process only; an interpreter must see the import-time value


def _pid_state_env():
    return os.getpid(), STATE["touched"], os.environ.get("CUDNN_GUIDE_TEST_VAR"), "json" in sys.modules, os.getcwd()


def _modules():
    return sorted(m for m in ("json", "netrc", "wave") if m in sys.modules)


def _die():
    os._exit(3)


def _sleep(seconds):
    time.sleep(seconds)


def _slow_exit(marker):
    import atexit

    print("printed before the answer")
    atexit.register(lambda: (time.sleep(1.5), open(marker, "w").close()))  # a slow teardown that leaves a trace
    return os.getpid()


def _nested():
    return os.getpid(), fresh_process.run(os.getpid, preload=()).value


def test_each_call_runs_in_a_new_interpreter_without_the_callers_state(monkeypatch, tmp_path):
    STATE["touched"] = True
    with InterpreterPool(2, preload=("json",)) as pool:
        monkeypatch.setenv("CUDNN_GUIDE_TEST_VAR", "set after the pool started")
        monkeypatch.chdir(tmp_path)
        try:
            first = pool.run(_pid_state_env)
            second = pool.run(_pid_state_env)
        finally:
            STATE["touched"] = False
        assert pool.left == 0 and pool.start_seconds > 0
        with pytest.raises(FreshProcessError, match="no interpreter left"):
            pool.run(os.getpid)
    pid, touched, var, preloaded, cwd = first.value
    assert pid == first.pid != os.getpid() and second.pid != pid
    assert touched is False  # the module was imported afresh, not copied from this process
    assert var == "set after the pool started" and cwd == str(tmp_path)  # the caller's, at call time
    assert preloaded
    assert 0 <= first.start_seconds <= first.seconds and first.import_seconds > 0


def test_interpreters_import_their_preload_before_the_call_and_nothing_of_the_callers():
    import wave  # noqa: F401  (imported here, in the caller only)

    assert "netrc" not in sys.modules or pytest.skip("this process already imported netrc")
    assert fresh_process.run(_modules, preload=("netrc",)).value == ["json", "netrc"]  # json: the launcher's own


def test_a_raising_function_is_reported_with_its_traceback():
    with pytest.raises(FreshProcessError) as info:
        fresh_process.run(int, "not a number", preload=())
    assert "ValueError: invalid literal for int()" in info.value.detail
    assert info.value.what == "builtins.int"


def _unpicklable():
    return lambda: None


def test_a_result_that_cannot_be_sent_back_is_a_clear_error():
    with pytest.raises(FreshProcessError, match="its result cannot be sent back"):
        fresh_process.run(_unpicklable, preload=())


def test_a_function_from_main_is_refused_with_the_fix():
    def local():
        return 1

    local.__module__ = "__main__"
    with pytest.raises(FreshProcessError, match="define it in an importable module"):
        fresh_process.run(local, preload=())


def test_an_interpreter_that_dies_or_hangs_is_an_error_not_a_hang():
    with pytest.raises(FreshProcessError, match=r"died without an answer \(exit code 3\)"):
        fresh_process.run(_die, preload=())
    t0 = time.perf_counter()
    with pytest.raises(FreshProcessError, match="no answer within 1 s; the interpreter was killed"):
        fresh_process.run(_sleep, 30, preload=(), timeout=1)
    assert time.perf_counter() - t0 < 20


def test_an_interpreter_can_start_its_own():
    # A recorded page (itself in a fresh interpreter) runs start-up studies in interpreters of its own.
    middle, inner = fresh_process.run(_nested, preload=()).value
    assert len({os.getpid(), middle, inner}) == 3


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    # A gallery example run by hand has no ``if __name__ == "__main__"``; its interpreters must not re-run it.
    script = tmp_path / "example.py"
    script.write_text(
        textwrap.dedent("""
        import os
        print("top level ran", flush=True)
        from cudnn_guide.studies import fresh_process
        print("child", fresh_process.run(os.getpid, preload=()).value != os.getpid(), flush=True)
    """)
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=root),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["top level ran", "child True"]


def test_unused_interpreters_exit_quietly_when_the_pool_closes(capfd):
    pool = InterpreterPool(3, preload=("json",))
    assert pool.run(os.getpid).value != os.getpid()
    procs = [i.proc for i in pool._idle]
    pool.close()
    assert all(p.poll() is not None for p in procs) and pool.left == 0
    assert "Traceback" not in capfd.readouterr().err
    with pytest.raises(ValueError, match="positive size"):
        InterpreterPool(0)


def test_an_interpreter_refuses_to_run_when_cuda_is_already_initialized(monkeypatch, tmp_path):
    # A preload module that leaves torch's CUDA state initialized: the pool must refuse the interpreter.
    (tmp_path / "touches_cuda.py").write_text(
        textwrap.dedent("""
        import sys, types
        sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(FreshProcessError, match="importing its modules touched CUDA"):
        fresh_process.run(os.getpid, preload=("touches_cuda",))

    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    assert "already initialized" in interpreter.cuda_untouched()
    fake_torch.cuda.is_initialized = lambda: False
    assert interpreter.cuda_untouched() is None


def test_a_pool_pins_its_interpreters_environment_from_their_start():
    import os

    from cudnn_guide.studies import fresh_process

    with fresh_process.InterpreterPool(2, preload=(), env={"CUDA_VISIBLE_DEVICES": "1"}) as pool:
        assert pool.run(os.getenv, "CUDA_VISIBLE_DEVICES").value == "1"
        assert pool.run(os.getenv, "PATH").value == os.environ["PATH"]  # the caller's environment too


def test_a_fast_exit_skips_the_teardown_but_keeps_the_answer_and_the_output(tmp_path, capfd):
    done = {}
    for fast in (False, True):
        with InterpreterPool(1, preload=(_slow_exit.__module__,), exit_fast=fast) as pool:  # imports before the clock
            done[fast] = pool.run(_slow_exit, str(tmp_path / f"exited-{fast}"))
    assert (tmp_path / "exited-False").exists() and not (tmp_path / "exited-True").exists()
    assert done[False].seconds > 1.5 > done[True].seconds  # the caller waited for the slow exit only without it
    assert done[True].value == done[True].pid and capfd.readouterr().out.count("printed before the answer") == 2


def _write_then_answer(path):
    with open(path, "w") as f:  # as a CUDA JIT cache or a plan cache is written during the call
        f.write("kept")
    return os.getpid()


def test_the_default_exit_is_fast_and_keeps_what_the_call_wrote(tmp_path):
    with InterpreterPool(2, preload=(_slow_exit.__module__,)) as pool:
        assert pool.exit_fast
        slow = pool.run(_slow_exit, str(tmp_path / "exited"))
        wrote = pool.run(_write_then_answer, str(tmp_path / "written"))
    assert slow.seconds < 1.5 and not (tmp_path / "exited").exists()  # its atexit teardown never ran
    assert (tmp_path / "written").read_text() == "kept" and wrote.value == wrote.pid


# --- on the GPU (marker gpu; skipped without one) ---


@pytest.mark.gpu
def test_pre_started_interpreters_have_no_cuda_state_and_measure_a_cold_start(tmp_path):
    from cudnn_guide.studies import coldstart, fresh_process

    torch.empty(1, device="cuda")  # this process has a CUDA context; the interpreters must not share it
    with fresh_process.InterpreterPool(2, preload=coldstart.PRELOAD) as pool:
        built = coldstart.run_fresh("conv", "build", tmp_path, pool=pool)
        loaded = coldstart.run_fresh("conv", "cache", tmp_path, pool=pool)
    on_demand = coldstart.run_fresh("conv", "cache", tmp_path)  # a pool of one: it imports, then runs
    for r in (built, loaded, on_demand):
        assert r["rel_error"] < check.tolerance(torch.bfloat16)
        assert r["context_s"] > 0.01  # each created its own context
        assert r["import_s"] < 0.5  # imports were done before the call: the clock starts after them


def test_the_plan_caches_speed_up_per_graph_and_case_with_its_range_and_its_plot():
    import matplotlib

    from cudnn_guide.studies import coldstart

    matplotlib.use("Agg")

    def runs(*seconds):
        return [{"first_result_s": s} for s in seconds]

    fresh = {
        ("conv", "cold"): runs(2.0, 2.2, 1.8),
        ("conv", "warm JIT"): runs(0.5, 0.6, 0.4),
        ("conv", "plan from disk"): runs(0.10, 0.08, 0.125),
    }
    sp = coldstart.first_result_speedups(fresh)
    assert set(sp) == {("conv", "cold"), ("conv", "warm JIT")}
    ratio, low, high = sp[("conv", "cold")]
    assert ratio == pytest.approx(20.0) and low == pytest.approx(1.8 / 0.125) and high == pytest.approx(2.2 / 0.08)
    ax = coldstart.plot_first_results(fresh, title="t")
    assert len(ax.patches) == 3 and [p.get_height() for p in ax.patches] == pytest.approx([2000, 500, 100])
    assert "min–max of 3 runs" in ax.get_ylabel()


def test_the_build_time_plot_draws_each_run_in_build_order_and_by_batch():
    import matplotlib

    from cudnn_guide.studies import dynamic_shapes

    matplotlib.use("Agg")
    rows = [{"batch": b, "build_s": s} for b, s in ((4, 0.5), (1, 0.02), (2, 0.01))]
    fig = dynamic_shapes.plot_build_times({"cache, descending": rows, "no cache, ascending": rows})
    order, by_batch = fig.axes
    assert [list(line.get_ydata()) for line in order.lines][0] == pytest.approx([500, 20, 10])
    assert list(by_batch.lines[0].get_xdata()) == [1, 2, 4] and by_batch.lines[0].get_linestyle() == "--"
    assert by_batch.lines[1].get_linestyle() == "-"


def _cores_of_every_thread():
    import threading

    threading.Thread(target=time.sleep, args=(0.05,)).start()  # a thread started during the call, too
    tasks = os.listdir("/proc/self/task")
    return sorted(os.sched_getaffinity(0)), {tuple(sorted(os.sched_getaffinity(int(t)))) for t in tasks}


def _probe_module(tmp_path, seen):
    (tmp_path / "import_probe.py").write_text(
        textwrap.dedent(
            f"""
            import os, time
            deadline = time.time() + float(os.environ.get("PROBE_WAIT", "0"))
            while len(os.sched_getaffinity(0)) < 2 and time.time() < deadline:
                time.sleep(0.01)  # the pool widens the new interpreter just after it starts
            open({str(seen)!r}, "w").write(" ".join(map(str, sorted(os.sched_getaffinity(0)))))
            """
        )
    )


PINNABLE = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs Linux and 2 cores"
)


@PINNABLE
def test_a_pinned_callers_interpreters_import_on_the_cores_named_and_run_the_call_on_its_cores(tmp_path, monkeypatch):
    """plot_06's 36 interpreters imported on a lane's 5 cores for 13 s, holding the shared turn (dcab682)."""
    seen = tmp_path / "import_cores.txt"
    _probe_module(tmp_path, seen)
    monkeypatch.syspath_prepend(str(tmp_path))
    every = sorted(os.sched_getaffinity(0))  # what this process may use (a cpuset or taskset included)
    monkeypatch.setenv(fresh_process.IMPORT_CPUS_ENV, ",".join(map(str, every)))
    monkeypatch.setenv("PROBE_WAIT", "10")
    os.sched_setaffinity(0, every[:1])  # a lane's cores: here one
    try:
        with InterpreterPool(1, preload=("import_probe",)) as pool:
            cores, threads = pool.run(_cores_of_every_thread).value
    finally:
        os.sched_setaffinity(0, every)
    assert [int(c) for c in seen.read_text().split()] == every  # imported on every core named
    assert cores == every[:1] and threads == {tuple(every[:1])}  # the call, every thread, on the caller's


@PINNABLE
def test_without_the_recorders_cores_an_interpreter_imports_and_runs_where_its_caller_may(tmp_path, monkeypatch):
    seen = tmp_path / "import_cores.txt"
    _probe_module(tmp_path, seen)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(fresh_process.IMPORT_CPUS_ENV, raising=False)
    every = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, every[:1])
    try:
        with InterpreterPool(1, preload=("import_probe",)) as pool:
            cores, _ = pool.run(_cores_of_every_thread).value
    finally:
        os.sched_setaffinity(0, every)
    assert [int(c) for c in seen.read_text().split()] == every[:1] == cores  # a reader's taskset is kept


def _stamp_and_wait(seconds):
    start = time.time()
    time.sleep(seconds)
    return os.getpid(), start, time.time(), sorted(os.sched_getaffinity(0))


def _meet(folder, name, wait=30.0):
    """Say this call started, then wait until its pair's other call has too: True if it came within ``wait`` s."""
    from pathlib import Path

    Path(folder, name).write_text(str(os.getpid()))
    deadline = time.time() + wait
    while time.time() < deadline:
        if len(list(Path(folder).glob("*"))) >= 2:
            return os.getpid(), time.time(), sorted(os.sched_getaffinity(0)), True
        time.sleep(0.01)
    return os.getpid(), time.time(), sorted(os.sched_getaffinity(0)), False


def _die_once_written(folder, name):
    """Exit with an error once the neighbour has written its pid (a file barrier, not a race with its start)."""
    from pathlib import Path

    deadline = time.time() + 30
    while not Path(folder, name).exists() and time.time() < deadline:
        time.sleep(0.01)
    os._exit(3)


def _pid_then_sleep(folder, name, seconds):
    from pathlib import Path

    Path(folder, name).write_text(str(os.getpid()))
    time.sleep(seconds)


def _locked_span(path):
    from cudnn_guide.studies.fresh_process import timing_alone

    with timing_alone():
        start = time.time()
        time.sleep(0.4)
        end = time.time()
    return start, end


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = open(f"/proc/{pid}/stat").read().split()[2] if os.path.exists(f"/proc/{pid}/stat") else "X"
    return state not in ("Z", "X")


@PINNABLE
def test_two_at_once_run_consecutive_pairs_together_each_on_its_half_of_the_cores(tmp_path):
    every = sorted(os.sched_getaffinity(0))
    first, second = tmp_path / "1", tmp_path / "2"
    first.mkdir(), second.mkdir()
    with InterpreterPool(4, preload=(), at_once=2) as pool:
        done = pool.run_all([(_meet, (str(d), n), {}) for d in (first, second) for n in ("a", "b")])
    values = [d.value for d in done]
    assert all(met for *_, met in values)  # each call saw its neighbour start before it ended: a pair
    assert len({pid for pid, *_ in values}) == 4 and os.getpid() not in {pid for pid, *_ in values}
    assert int((first / "a").read_text()) == values[0][0]  # results come back in the order of the calls
    second_started = min((second / n).stat().st_mtime for n in ("a", "b"))
    assert max(seen for _, seen, _, _ in values[:2]) <= second_started + 0.05  # once the first pair had ended
    half = len(every) // 2
    assert values[0][2] == values[2][2] == every[:half] and values[1][2] == values[3][2] == every[half:]


def test_one_at_a_time_by_default_and_a_bad_setting_is_refused(monkeypatch):
    monkeypatch.delenv(fresh_process.AT_ONCE_ENV, raising=False)
    with InterpreterPool(2, preload=()) as pool:
        assert pool.at_once == 1
        (_, s0, e0, _), (_, s1, _, _) = (d.value for d in pool.run_all([(_stamp_and_wait, (0.3,), {})] * 2))
    assert s1 >= e0  # one after the other
    monkeypatch.setenv(fresh_process.AT_ONCE_ENV, "2")
    with InterpreterPool(1, preload=()) as pool:
        assert pool.at_once == 2
    monkeypatch.setenv(fresh_process.AT_ONCE_ENV, "3")
    with pytest.raises(ValueError, match="CUDNN_GUIDE_POOL_AT_ONCE takes 1 .* or 2"):
        InterpreterPool(1, preload=())
    with pytest.raises(ValueError, match="1 or 2 calls at once"):
        InterpreterPool(1, preload=(), at_once=4)


def test_run_all_says_when_the_pool_is_too_small_or_a_call_cannot_be_sent_before_any_starts():
    with InterpreterPool(2, preload=()) as pool:
        with pytest.raises(FreshProcessError, match="2 interpreter\\(s\\) left for 3 calls"):
            pool.run_all([(os.getpid, (), {})] * 3)
        with pytest.raises(FreshProcessError, match="cannot be sent to an interpreter"):
            pool.run_all([(os.getpid, (), {}), (_stamp_and_wait, (lambda: 0,), {})])
        assert pool.left == 2  # nothing was started


@PINNABLE
def test_a_failing_call_stops_its_neighbour_instead_of_waiting_for_it(tmp_path):
    with InterpreterPool(2, preload=(), at_once=2) as pool:
        t0 = time.perf_counter()
        with pytest.raises(FreshProcessError, match="died without an answer") as caught:
            pool.run_all(
                [(_die_once_written, (str(tmp_path), "n"), {}), (_pid_then_sleep, (str(tmp_path), "n", 60), {})]
            )
        assert time.perf_counter() - t0 < 30  # not the neighbour's 60 s
        assert "exit code 3" in str(caught.value)  # the failing call's own error, not its stopped neighbour's
        assert not _alive(int((tmp_path / "n").read_text())) and pool.left == 0


@PINNABLE
def test_an_interrupt_stops_both_calls_of_a_pair(tmp_path):
    import _thread
    import threading

    pool = InterpreterPool(2, preload=(), at_once=2)
    threading.Timer(3.0, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        pool.run_all([(_pid_then_sleep, (str(tmp_path), n, 60), {}) for n in ("a", "b")])
    pool.close()
    pids = [int((tmp_path / n).read_text()) for n in ("a", "b")]
    assert not any(_alive(pid) for pid in pids)


@PINNABLE
def test_a_pairs_timed_gpu_work_takes_turns_and_alone_the_lock_does_nothing(tmp_path, monkeypatch):
    with InterpreterPool(2, preload=(), at_once=2) as pool:
        (a0, a1), (b0, b1) = (d.value for d in pool.run_all([(_locked_span, (str(tmp_path),), {})] * 2))
    assert a1 <= b0 or b1 <= a0  # never both inside
    monkeypatch.delenv(fresh_process.PAIR_LOCK_ENV, raising=False)
    t0 = time.time()
    with fresh_process.timing_alone():
        pass
    assert time.time() - t0 < 0.1


def test_a_caller_with_one_core_gets_one_at_a_time_and_the_pool_says_so(monkeypatch):
    monkeypatch.setattr(fresh_process, "_cores", lambda: [0])
    with InterpreterPool(2, preload=(), at_once=2) as pool:
        assert pool.at_once == 1  # what the pages print ("ran two at a time") follows this
        (_, s0, e0, _), (_, s1, _, _) = (d.value for d in pool.run_all([(_stamp_and_wait, (0.3,), {})] * 2))
    assert s1 >= e0
