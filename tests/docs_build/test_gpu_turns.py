"""Lanes on one GPU take turns: one process's cell at a time, CPU-only work set aside, each lane on its own cores.

The turn is a real ``flock`` shared by real processes here; the recorder's lanes are checked with
a fake page runner (``recording.interpreter_pool``), so no GPU is needed.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from gallery_build import gpu_turns, recording

from cudnn_guide import collector

EXT = Path(__file__).resolve().parents[2] / "docs" / "_ext"

HOLDER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {ext!r})
    from gallery_build import gpu_turns
    turn = gpu_turns.Turn({lock!r})
    with turn.held():
        print("took", time.time(), flush=True)
        time.sleep({hold})
        {inner}
        print("gave", time.time(), flush=True)
    """
)


def _holder(lock: Path, hold: float, inner: str = "pass") -> subprocess.Popen:
    code = HOLDER.format(ext=str(EXT), lock=str(lock), hold=hold, inner=inner)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _times(proc: subprocess.Popen) -> dict[str, float]:
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    return {line.split()[0]: float(line.split()[1]) for line in out.splitlines() if line.split()[0] in ("took", "gave")}


def test_two_processes_never_hold_one_gpus_turn_at_once(tmp_path):
    lock = tmp_path / "gpu-0.turn"
    first = _holder(lock, 1.0)
    time.sleep(0.3)
    second = _holder(lock, 0.2)
    a, b = _times(first), _times(second)
    assert b["took"] >= a["gave"] - 0.05, (a, b)  # the second waited for the first to give its turn


def test_work_set_aside_lets_another_lane_run_and_the_turn_comes_back_after(tmp_path):
    lock = tmp_path / "gpu-0.turn"
    # the first holds its turn, then sets it aside for 1.0 s of 'compiling'; the second takes it meanwhile
    # and holds it for 2.0 s, longer than the aside: the first gets it back only when the second gives it
    inner = (
        "print('aside', time.time(), flush=True)\n"
        "    with turn.aside(): time.sleep(1.0)\n"
        "    print('back', time.time(), flush=True)"
    )
    first = _holder(lock, 0.5, inner)
    deadline = time.time() + 30
    while not _locked(lock) and time.time() < deadline:  # wait until the first holds it
        time.sleep(0.05)
    second = _holder(lock, 2.0)
    out_first, _ = first.communicate(timeout=60)
    b = _times(second)
    a = {line.split()[0]: float(line.split()[1]) for line in out_first.splitlines()}
    assert a["aside"] <= b["took"] <= a["aside"] + 1.0, (a, b)  # ran during the first's aside
    assert a["back"] >= b["gave"] - 0.05, (a, b)  # the turn came back only after the second gave it


def _locked(lock: Path) -> bool:
    """Whether some other open file holds ``lock`` (probed from a new descriptor, never blocking)."""
    import fcntl

    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_aside_and_held_do_nothing_without_the_turn(tmp_path):
    turn = gpu_turns.Turn(str(tmp_path / "t"))
    with turn.aside():
        assert not turn.holding
    lock = tmp_path / "t"
    with turn.held():
        assert turn.holding and _locked(lock)
        with turn.held():  # nested: still one turn
            pass
        with turn.aside():
            assert not turn.holding and not _locked(lock)
        assert turn.holding and _locked(lock)
    assert not turn.holding and not _locked(lock) and turn.turns == 2 and turn.aside_seconds >= 0


def test_held_seconds_count_the_turn_held_and_not_the_work_set_aside(tmp_path):
    turn = gpu_turns.Turn(str(tmp_path / "t"))
    with turn.held():
        time.sleep(0.2)
        with turn.aside():
            time.sleep(0.3)
    assert 0.2 <= turn.held_seconds < 0.45 and turn.aside_seconds >= 0.3


def test_install_without_a_lock_file_changes_nothing(monkeypatch):
    monkeypatch.delenv(gpu_turns.TURN_ENV, raising=False)
    before = list(sys.meta_path)
    assert gpu_turns.install() is None
    assert sys.meta_path == before


@pytest.fixture
def dynamo_callbacks():
    """Restore Dynamo's callback handler after a test that hooks it."""
    callback = pytest.importorskip("torch._dynamo.callback")
    handler = callback.callback_handler
    start, end = list(handler.start_callbacks), list(handler.end_callbacks)
    yield handler
    handler.__dict__.pop("clear", None)  # our instance-level wrapper; the class's method returns
    handler.start_callbacks[:], handler.end_callbacks[:] = start, end


def test_cute_compiles_and_flash_attn_imports_set_the_turn_aside_by_caller_and_scope(
    tmp_path, monkeypatch, dynamo_callbacks
):
    """Stand-in ``cutlass``, ``flash_attn`` and ``cudnn`` packages: FA4's import and its ``cute.compile``
    calls run with the turn set aside; ``cutlass``'s import and a compile called from elsewhere keep it;
    cuDNN's compiles are set aside where cells share the turn, not in a page that reads a clock; inside
    a measured block nothing is set aside."""
    from cudnn_guide import collector

    site = tmp_path / "site"
    (site / "cutlass").mkdir(parents=True)
    (site / "flash_attn").mkdir()
    (site / "cutlass" / "__init__.py").write_text(
        "import gallery_build.gpu_turns as g\nHELD_AT_IMPORT = g.current().holding\n"
    )
    (site / "cutlass" / "cute.py").write_text(
        "import gallery_build.gpu_turns as g\n"
        "class _Compile:\n"
        "    def __call__(self, fn):\n"
        "        return (fn, g.current().holding)\n"
        "    def __getitem__(self, option):\n"
        "        return lambda fn: (fn, option, g.current().holding)\n"
        "compile = _Compile()\n"
    )
    (site / "cudnn").mkdir()
    (site / "cudnn" / "__init__.py").write_text(
        "import cutlass.cute as cute\ndef build(fn):\n    return cute.compile(fn)\n"
    )
    (site / "flash_attn" / "__init__.py").write_text(
        "import gallery_build.gpu_turns as g\n"
        "HELD_AT_IMPORT = g.current().holding\n"
        "import cutlass.cute as cute\n"
        "def build(fn):\n"
        "    return cute.compile(fn)\n"
        "def build_with(option, fn):\n"
        "    return cute.compile[option](fn)\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "cudnn", raising=False)  # the stand-in, not the frontend
    monkeypatch.setattr(gpu_turns, "_CURRENT", None)
    finders = list(sys.meta_path)
    try:
        turn = gpu_turns.install(str(tmp_path / "gpu-0.turn"))
        with turn.held():
            cutlass = importlib.import_module("cutlass")
            assert cutlass.HELD_AT_IMPORT is True  # cutlass alone: cuDNN imports it inside build_plans
            flash_attn = importlib.import_module("flash_attn")
            assert flash_attn.HELD_AT_IMPORT is False  # imported aside
            assert flash_attn.build("kernel") == ("kernel", False)  # FA4's compile: aside
            assert flash_attn.build_with("opt", "kernel") == ("kernel", "opt", False)  # cute.compile[...] too
            cute = importlib.import_module("cutlass.cute")
            assert cute.compile("kernel") == ("kernel", True)  # called from elsewhere: keeps the turn
            cudnn = importlib.import_module("cudnn")
            assert turn.shared_cells and cudnn.build("kernel") == ("kernel", False)  # cells share: aside
            from cudnn_guide import collector

            with collector.spending("timing"):  # a measured block: nothing set aside
                assert flash_attn.build("kernel") == ("kernel", True)
                assert cudnn.build("kernel") == ("kernel", True)
            assert turn.holding  # and the turn is back after each
        # a new page's process: a page that reads a clock, whose cuDNN compiles keep its cell-wide turn
        monkeypatch.setattr(gpu_turns, "_CURRENT", None)
        sys.meta_path[:] = finders
        for name in ("cutlass", "cutlass.cute", "flash_attn", "cudnn"):
            sys.modules.pop(name, None)
        clocked = gpu_turns.install(str(tmp_path / "gpu-1.turn"), page_reads_a_clock=True)
        assert not clocked.shared_cells
        with clocked.held():
            cudnn = importlib.import_module("cudnn")
            flash_attn = importlib.import_module("flash_attn")
            assert cudnn.build("kernel") == ("kernel", True)
            assert flash_attn.build("kernel") == ("kernel", False)  # FA4's compile: aside all the same
            assert clocked.holding
    finally:
        sys.meta_path[:] = finders
        collector.hold_while_measuring(None)
        collector.give_way_with(None)
        for name in ("cutlass", "cutlass.cute", "flash_attn", "cudnn"):
            sys.modules.pop(name, None)


def _stand_in_cudnn(site: Path) -> None:
    """A stand-in ``cudnn`` package whose ``pygraph`` steps answer whether the page held the turn as they ran."""
    (site / "cudnn").mkdir(parents=True)
    (site / "cudnn" / "__init__.py").write_text(
        "import gallery_build.gpu_turns as g\nHELD_AT_IMPORT = g.current().holding\n"
        "from cudnn._pygraph import pygraph\n"
    )
    steps = "".join(
        f"    def {step}(self, *args):\n        return g.current().holding\n"
        for step in ("validate", "create_execution_plans", "check_support", "build_plans")
    )
    (site / "cudnn" / "_pygraph.py").write_text(f"import gallery_build.gpu_turns as g\nclass pygraph:\n{steps}")


@pytest.mark.parametrize(
    ("env", "reads_a_clock", "aside"), [(None, False, True), ("0", False, False), (None, True, False)]
)
def test_cudnn_plan_builds_and_its_import_set_the_turn_aside_where_cells_share_it(
    tmp_path, monkeypatch, env, reads_a_clock, aside
):
    """Issue 34: while a page builds cuDNN plans (CPU work), another lane may measure. Not with
    CUDNN_GUIDE_BUILDS_ASIDE=0, not in a page whose cells hold the turn alone, not inside a measured block,
    not in a cell that reads a clock itself; validate (cheap) keeps the turn."""
    site = tmp_path / "site"
    _stand_in_cudnn(site)
    monkeypatch.syspath_prepend(str(site))
    for name in ("cudnn", "cudnn._pygraph"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    if env is None:
        monkeypatch.delenv(gpu_turns.BUILDS_ASIDE_ENV, raising=False)
    else:
        monkeypatch.setenv(gpu_turns.BUILDS_ASIDE_ENV, env)
    monkeypatch.setattr(gpu_turns, "_CURRENT", None)
    finders = list(sys.meta_path)
    try:
        turn = gpu_turns.install(str(tmp_path / "gpu-0.turn"), page_reads_a_clock=reads_a_clock)
        assert gpu_turns.builds_aside(turn) is aside
        with turn.held():
            cudnn = importlib.import_module("cudnn")
            assert cudnn.HELD_AT_IMPORT is not aside
            graph = cudnn.pygraph()
            assert graph.validate() is True
            assert [graph.create_execution_plans([]), graph.check_support(), graph.build_plans()] == [not aside] * 3
            assert turn.holding  # taken back after each
            with collector.spending("timing"):  # a measured block: nothing set aside
                assert graph.build_plans() is True
        if turn.shared_cells:
            with turn.held(alone=True):  # a cell that reads a clock: its builds keep the turn
                assert graph.build_plans() is True
    finally:
        sys.meta_path[:] = finders
        collector.hold_while_measuring(None)
        collector.give_way_with(None)
        for name in ("cudnn", "cudnn._pygraph"):
            sys.modules.pop(name, None)


def test_dynamo_compiles_set_the_turn_aside_also_after_a_reset_and_only_while_compiling(tmp_path, dynamo_callbacks):
    pytest.importorskip("torch")
    import torch
    import torch._dynamo

    turn = gpu_turns.Turn(str(tmp_path / "gpu-0.turn"))
    gpu_turns._dynamo_aside(turn)(torch._dynamo)
    seen = []

    def f(x):
        return (x * 2).sin()

    with turn.held():
        torch.compile(f, backend="eager")(torch.randn(4))
        first = turn.aside_seconds
        assert first > 0 and turn.holding and _locked(tmp_path / "gpu-0.turn")
        torch._dynamo.reset()  # clears every callback; ours come back
        torch.compile(f, backend="eager")(torch.randn(5))
        assert turn.aside_seconds > first and turn.holding
        # run-time autotuning and CUDA-graph recording use the GPU: they keep the turn
        from torch._dynamo.callback import CallbackTrigger

        for trigger in (CallbackTrigger.TRITON_AUTOTUNING, CallbackTrigger.CUDAGRAPH_RECORDING):
            with dynamo_callbacks.install_callbacks(trigger, "0/0"):
                seen.append(turn.holding)
    assert seen == [True, True]


def test_the_real_inductor_benchmarker_is_patched_to_hold_the_turn(tmp_path):
    benchmarking = pytest.importorskip("torch._inductor.runtime.benchmarking")
    turn = gpu_turns.Turn(str(tmp_path / "gpu-0.turn"))
    saved = {
        c: dict(getattr(benchmarking, c).__dict__)
        for c in ("Benchmarker", "TritonBenchmarker", "InductorBenchmarker")
        if hasattr(benchmarking, c)
    }
    try:
        gpu_turns._benchmarks_hold(turn)(benchmarking)
        patched = [
            c
            for c in saved
            if getattr(getattr(benchmarking, c).__dict__.get("benchmark_gpu"), "_cudnn_guide_turn", False)
        ]
        assert patched, "no benchmark_gpu of torch's Inductor benchmarkers was wrapped"
    finally:
        for c, attrs in saved.items():
            if "benchmark_gpu" in attrs:
                getattr(benchmarking, c).benchmark_gpu = attrs["benchmark_gpu"]


def test_a_pages_running_time_leaves_out_its_waits_for_the_turn(tmp_path, monkeypatch):
    gen_rst = pytest.importorskip("sphinx_gallery.gen_rst")
    turn = gpu_turns.Turn(str(tmp_path / "gpu-0.turn"))

    def execute_script(*args, **kwargs):
        turn.waited += 2.0  # the page waited 2 s for its turns while its cells ran
        return ["blocks"], 5.0

    monkeypatch.setattr(gen_rst, "execute_script", execute_script)
    monkeypatch.setattr(gen_rst, "execute_code_block", lambda *a, **k: None)
    gpu_turns.take_turns_per_cell(turn)
    assert gen_rst.execute_script() == (["blocks"], 3.0)


def test_a_record_keeps_its_waits_apart_and_out_of_compile():
    from gallery_build import hooks

    turn = gpu_turns.Turn("unused")
    turn.waited, turn.compile_waits = 12.0, 4.0
    seconds = {"timing": 3.0, "compile": 6.0}
    hooks._leave_out_turn_waits(seconds, turn, 2.0, 1.0)
    assert seconds == {"timing": 3.0, "compile": 3.0, "waiting for the GPU's turn": 10.0}


def test_inductor_benchmarks_take_the_turn_back_while_they_run(tmp_path, monkeypatch):
    class Benchmarker:
        def benchmark_gpu(self, fn):
            return turn.holding

    module = type(sys)("benchmarking")
    module.Benchmarker = Benchmarker
    turn = gpu_turns.Turn(str(tmp_path / "gpu-0.turn"))
    gpu_turns._benchmarks_hold(turn)(module)
    with turn.held(), turn.aside():  # compiling, turn aside: the benchmark holds it
        assert Benchmarker().benchmark_gpu(None) is True
        assert not turn.holding


def test_lane_cpus_split_the_cores_into_disjoint_near_equal_slices():
    slices = [gpu_turns.lane_cpus(i, 3, list(range(16))) for i in range(3)]
    assert slices == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14, 15]]
    assert gpu_turns.lane_cpus(0, 1, [0, 1]) == [0, 1]
    assert gpu_turns.lane_cpus(1, 3, [0, 1]) == [0, 1]  # fewer cores than lanes: share them all


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_a_page_process_pins_itself_to_its_lanes_cores(monkeypatch):
    allowed = sorted(os.sched_getaffinity(0))
    monkeypatch.setenv(gpu_turns.CPUS_ENV, f"{allowed[0]}")
    code = (
        f"import sys, os; sys.path.insert(0, {str(EXT)!r}); from gallery_build import gpu_turns; "
        "print(gpu_turns.pin_to_lane_cpus(), sorted(os.sched_getaffinity(0)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("] ")
    assert out[0] + "]" == str([allowed[0]]) and out[1].strip() == str([allowed[0]])


@pytest.mark.parametrize(
    ("args", "lanes", "rest"),
    [
        (["--lanes", "3", "5", "--keep-going"], 3, ["5", "--keep-going"]),
        (["--lanes=2", "plot_05"], 2, ["plot_05"]),
        (["plot_05"], None, ["plot_05"]),  # nobody said: the recorder chooses (gallery_build.auto_lanes)
        (["--lanes", "auto", "plot_05"], None, ["plot_05"]),
        (["--lanes", "1", "plot_05"], 1, ["plot_05"]),
    ],
)
def test_the_lanes_option_is_taken_out_of_the_command_line(args, lanes, rest, monkeypatch):
    monkeypatch.delenv(recording.LANES_ENV, raising=False)
    assert recording.lanes_option(args) == (lanes, rest)


def test_the_lanes_variable_sets_the_default_and_the_command_line_wins(monkeypatch):
    monkeypatch.setenv(recording.LANES_ENV, "3")
    assert recording.lanes_option(["plot_05"]) == (3, ["plot_05"])
    assert recording.lanes_option(["--lanes", "2", "plot_05"]) == (2, ["plot_05"])
    monkeypatch.setenv(recording.LANES_ENV, "1")  # one at a time, whatever the machine
    assert recording.lanes_option(["plot_05"]) == (1, ["plot_05"])
    monkeypatch.setenv(recording.LANES_ENV, "auto")
    assert recording.lanes_option(["plot_05"]) == (None, ["plot_05"])
    monkeypatch.setenv(recording.LANES_ENV, "many")
    with pytest.raises(recording.LanesError, match=r"CUDNN_GUIDE_LANES\) takes .* or auto; got 'many'"):
        recording.lanes_option([])


@pytest.mark.parametrize("args", [["--lanes"], ["--lanes", "0"], ["--lanes", "two"], ["--lanes=9"]])
def test_a_bad_lanes_value_is_refused_with_the_range(args, monkeypatch):
    monkeypatch.delenv(recording.LANES_ENV, raising=False)
    with pytest.raises(recording.LanesError, match=r"a whole number from 1 to 8, or auto; got"):
        recording.lanes_option(args)


def test_the_recorder_cli_refuses_a_bad_lanes_value_before_anything_starts(monkeypatch):
    monkeypatch.delenv(recording.LANES_ENV, raising=False)
    with pytest.raises(SystemExit, match=r"cudnn-guide: --lanes \(or CUDNN_GUIDE_LANES\) takes how many pages"):
        recording._main(["record", "--lanes", "0", "plot_05"])


def _record_envs(gallery: Path, monkeypatch, fake_pool) -> list[dict[str, str]]:
    """Replace the recorder's interpreters with ``fake_pool``; returns the environments each lane got."""
    previous = json.loads((gallery / "recording.json").read_text())["example_seconds"]
    envs: list[dict[str, str]] = []

    def pool(size, env):
        envs.append(env)
        return fake_pool(previous)

    monkeypatch.setattr(recording, "interpreter_pool", pool)
    return envs


def test_lanes_on_one_gpu_share_its_turn_and_get_their_own_cores(tmp_path, root, monkeypatch, capsys):
    """Three lanes on one GPU: each lane's interpreters get the GPU's lock file and disjoint cores."""
    from test_progress import PAGE_A, PAGE_B, FakePool, _project

    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    third = "plot_05_sdpa_causal.py"
    import shutil

    shutil.copy(root / "examples" / third, examples / third)
    envs = _record_envs(gallery, monkeypatch, FakePool)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(12)), raising=False)
    seconds = recording.record_examples(docs, examples, gallery, gpus=1, lanes=3)
    assert set(seconds) == {PAGE_A, PAGE_B, third}
    assert len(envs) == 3
    assert len({env[gpu_turns.TURN_ENV] for env in envs}) == 1  # one GPU: one lock file
    cores = [set(env[gpu_turns.CPUS_ENV].split(",")) for env in envs]
    assert sorted(len(c) for c in cores) == [4, 4, 4] and not (cores[0] & cores[1] or cores[1] & cores[2])
    assert all("CUDA_VISIBLE_DEVICES" not in env for env in envs)
    assert all(env["CUDNN_GUIDE_POOL_AT_ONCE"] == env["CUDNN_GUIDE_FIRST_CALLS_AT_ONCE"] == "2" for env in envs)
    out = capsys.readouterr().out
    assert "3 page(s) on 3 lane(s) of 1 GPU(s), taking turns on each" in out
    assert "in a fresh interpreter on lane " in out
    assert (
        "fresh processes two at once in each lane (CUDNN_GUIDE_POOL_AT_ONCE=2, CUDNN_GUIDE_FIRST_CALLS_AT_ONCE=2" in out
    )


def test_a_callers_own_setting_of_the_pairs_wins_in_lanes_and_one_lane_gets_none(tmp_path, root, monkeypatch):
    from test_progress import FakePool, _project

    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    envs = _record_envs(gallery, monkeypatch, FakePool)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(12)), raising=False)
    monkeypatch.setenv("CUDNN_GUIDE_POOL_AT_ONCE", "1")
    monkeypatch.delenv("CUDNN_GUIDE_FIRST_CALLS_AT_ONCE", raising=False)
    recording.record_examples(docs, examples, gallery, gpus=1, lanes=2)
    assert envs and all("CUDNN_GUIDE_POOL_AT_ONCE" not in env for env in envs)  # the caller's 1 reaches the pages
    assert all(env["CUDNN_GUIDE_FIRST_CALLS_AT_ONCE"] == "2" for env in envs)
    envs.clear()
    recording.record_examples(docs, examples, gallery, gpus=1)
    assert len(envs) == 1 and not set(recording.PAIRED_IN_LANES) & set(envs[0])


@pytest.mark.parametrize(("memory", "lanes"), [([139.8], 3), ([79.2], 1), ([], 1)])
def test_lanes_nobody_gave_are_chosen_from_the_machine_and_said(tmp_path, root, monkeypatch, capsys, memory, lanes):
    """``lanes=None`` (the command lines' default): on an H200-sized GPU with cores enough, a lane a page up to five
    (three pages here: three lanes), else one."""
    from gallery_build import auto_lanes
    from test_progress import PAGE_A, PAGE_B, FakePool, _project

    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    third = "plot_05_sdpa_causal.py"
    import shutil

    shutil.copy(root / "examples" / third, examples / third)
    envs = _record_envs(gallery, monkeypatch, FakePool)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(auto_lanes, "gpu_memory_gib", lambda: memory)
    seconds = recording.record_examples(docs, examples, gallery, gpus=1, lanes=None)
    assert set(seconds) == {PAGE_A, PAGE_B, third}
    assert len(envs) == lanes
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "CUDNN_GUIDE_LANES=N sets it" in line]
    assert len(said) == 1, out  # one line, naming the choice and how to change it
    assert ("3 pages at a time" if lanes == 3 else "one page at a time") in said[0]


def test_one_lane_records_as_before_without_turns(tmp_path, root, monkeypatch):
    from test_progress import FakePool, _project

    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    envs = _record_envs(gallery, monkeypatch, FakePool)
    recording.record_examples(docs, examples, gallery, gpus=1)
    assert len(envs) == 1 and gpu_turns.TURN_ENV not in envs[0] and gpu_turns.CPUS_ENV not in envs[0]


def test_lanes_sharing_a_gpu_estimate_the_time_left_from_the_gpus_rate_not_a_pages_own_seconds():
    from gallery_build.progress import RUNNING_CREDIT, Progress

    now = [0.0]
    p = Progress({"a.py": 10.0, "b.py": 30.0, "c.py": 20.0}, clock=lambda: now[0])
    p.share(1, 2)
    first = p.plan([], [["a.py", "c.py"], ["b.py"]])
    assert "about 60 s from the last recording's per-page times, one page at a time on each GPU" in first
    p.start("a.py", 0), p.start("b.py", 1)
    now[0] = 15.0  # a (10 s when recorded alone) took 15 s beside b: pages go at 10/15 of their own pace
    line = p.finish("a.py", 0, 15.0)
    assert "on lane 0" in line
    # b has run 15 s at that pace (10 of its 30 s done): (10 + 10) / 15 s, and 20 + 20 s left of b and c
    assert line.endswith(
        "1 of 3 finished, about 30 s left (estimate from the pages finished and running so far: "
        "last-recording seconds per second taken, 1.33 on GPU 0)"
    ), line
    p.start("c.py", 0)
    now[0] = 45.0
    assert "about 0 s left" not in p.finish("b.py", 1, 45.0)  # c still runs
    # a and b: 40 s done in 60 s of their wall; c has run 30 s at 2/3: 20 s, capped at RUNNING_CREDIT of its 20
    credit = min(RUNNING_CREDIT * 20.0, 30.0 * 40 / 60)
    assert p.remaining() == pytest.approx((20.0 - credit) / ((40.0 + credit) / 45.0))


def test_a_long_page_still_running_no_longer_drives_the_shared_estimate_up():
    # three lanes on one GPU: a 120 s page runs on lane 0 while short pages finish beside it. Counting finished
    # pages only, the GPU's rate fell while the long page ran, and the time left rose far above what was left.
    from gallery_build.progress import Progress

    now = [0.0]
    costs = {"long.py": 120.0, "s1.py": 20.0, "s2.py": 20.0, "s3.py": 20.0, "s4.py": 20.0}
    p = Progress(costs, clock=lambda: now[0])
    p.share(1, 3)
    p.plan([], [["long.py"], ["s1.py", "s3.py"], ["s2.py", "s4.py"]])
    for page, lane in (("long.py", 0), ("s1.py", 1), ("s2.py", 2)):
        p.start(page, lane)
    now[0] = 40.0  # every page goes at half its own pace beside two others
    p.finish("s1.py", 1, 20.0), p.finish("s2.py", 2, 20.0)
    p.start("s3.py", 1), p.start("s4.py", 2)
    now[0] = 80.0
    p.finish("s3.py", 1, 20.0), p.finish("s4.py", 2, 20.0)
    # the long page has run 80 s at the finished pages' half pace: 40 of its 120 s done, 80 s left at the GPU's rate
    assert p.remaining() < 120.0  # finished pages alone gave 120 / (80 / 80) = 120 s, the whole page again
    assert p.remaining() == pytest.approx((120.0 - 40.0) / ((80.0 + 40.0) / 80.0))


def test_lanes_on_two_gpus_say_which_gpu_has_no_rate_yet():
    from gallery_build.progress import Progress

    now = [0.0]
    p = Progress({"a.py": 10.0, "b.py": 30.0, "c.py": 20.0, "d.py": 40.0}, clock=lambda: now[0])
    p.share(2, 4)  # lanes 0 and 2 on GPU 0, lanes 1 and 3 on GPU 1
    p.plan([], [["a.py"], ["b.py"], ["c.py"], ["d.py"]])
    for lane, page in enumerate(("a.py", "b.py", "c.py", "d.py")):
        p.start(page, lane)
    now[0] = 15.0
    line = p.finish("a.py", 0, 15.0)
    assert "on GPU 0" in line and "one page at a time, on GPU 1" in line, line
    assert round(p.remaining()) == 70  # GPU 1, with no page finished: b and d at the last recording's times


def test_a_lanes_page_seconds_leave_out_its_waits(tmp_path, root, monkeypatch, capsys):
    from test_progress import PAGE_A, PAGE_B, FakePool, _project

    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    previous = json.loads((gallery / "recording.json").read_text())["example_seconds"]

    class WaitingPool(FakePool):
        def run(self, *args, **kwargs):
            done = super().run(*args, **kwargs)
            done.value = (0, 4.0)  # exit code 0, 4 s waiting for the turn
            return done

    monkeypatch.setattr(recording, "interpreter_pool", lambda size, env: WaitingPool(previous))
    seconds = recording.record_examples(docs, examples, gallery, gpus=1, lanes=2)
    assert set(seconds) == {PAGE_A, PAGE_B}
    assert all(abs(seconds[p] - (round(1.5 * previous[p], 1) - 4.0)) < 1e-9 for p in (PAGE_A, PAGE_B))
    out = capsys.readouterr().out
    for p in (PAGE_A, PAGE_B):  # the progress line says the same seconds as the manifest, on its lane
        assert f"recorded {p} in {seconds[p]:.1f} s on lane " in out, out


def _three_pages_two_lanes(tmp_path, root, monkeypatch):
    """A project of three pages, planned on two lanes: (docs, examples, gallery, previous seconds, the lanes,
    the lane with two pages, the pages)."""
    import shutil

    from gallery_build.scheduling import plan_lanes
    from test_progress import PAGE_A, PAGE_B, _project

    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    third = "plot_05_sdpa_causal.py"
    shutil.copy(root / "examples" / third, examples / third)
    previous = json.loads((gallery / "recording.json").read_text())["example_seconds"]
    pages = sorted([PAGE_A, PAGE_B, third])
    _, lanes = plan_lanes(pages, previous, 2)
    return docs, examples, gallery, previous, lanes, next(lane for lane in lanes if len(lane) == 2), pages


def test_a_lane_that_runs_out_of_pages_takes_one_not_yet_started_from_a_busy_lane(tmp_path, root, monkeypatch, capsys):
    """Two lanes, three pages: the lane given one page takes the busy lane's second page, which would
    otherwise wait until the busy lane's first page ends (here: until that second page has started)."""
    import threading

    from test_progress import FakePool

    docs, examples, gallery, previous, lanes, busy, pages = _three_pages_two_lanes(tmp_path, root, monkeypatch)
    second_started = threading.Event()

    class BlockingPool(FakePool):
        def run(self, fn, docs_dir, out_dir, example, timeout=None):
            if example == busy[1]:
                second_started.set()
            if example == busy[0]:
                second_started.wait(timeout=20)  # without stealing, this page waits out the timeout
            return super().run(fn, docs_dir, out_dir, example, timeout)

    monkeypatch.setattr(recording, "interpreter_pool", lambda size, env: BlockingPool(previous))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    seconds = recording.record_examples(docs, examples, gallery, gpus=1, lanes=2)
    assert set(seconds) == set(pages)
    out = capsys.readouterr().out
    thief = 1 - lanes.index(busy)
    assert f"recording {busy[1]} in a fresh interpreter on lane {thief}" in out, out
    assert second_started.is_set()


def test_steal_takes_the_shortest_page_of_the_lane_with_the_most_left_and_never_an_alone_page():
    from gallery_build.scheduling import steal

    costs = {"a.py": 30.0, "b.py": 10.0, "c.py": 25.0, "d.py": 20.0, "alone.py": 5.0}
    left = [[], ["a.py", "b.py"], ["c.py"]]
    assert steal(left, 0, costs, []) == "b.py" and left == [[], ["a.py"], ["c.py"]]
    assert steal(left, 0, costs, []) == "a.py"  # 30 s left on lane 1 against 25 s on lane 2
    assert steal(left, 0, costs, []) == "c.py" and steal(left, 0, costs, []) is None
    left = [["alone.py"], [], ["d.py"]]
    assert steal(left, 1, costs, ["alone.py"]) == "d.py" and left == [["alone.py"], [], []]
    assert steal(left, 1, costs, ["alone.py"]) is None  # a page that runs alone first stays where it is


def test_a_lane_takes_no_more_pages_than_its_interpreters(tmp_path, root, monkeypatch):
    """With no spare interpreters, every lane records only its own planned pages, and no pool is asked for
    more runs than it has interpreters, though a page was there to take."""
    import threading

    from test_progress import FakePool

    docs, examples, gallery, previous, lanes, busy, pages = _three_pages_two_lanes(tmp_path, root, monkeypatch)
    ran: list[list[str]] = []
    too_many: list[str] = []  # asserted in the test's own thread (a lane's thread would only warn)
    other_lane_done = threading.Event()

    class CountedPool(FakePool):
        def __init__(self, previous, size):
            super().__init__(previous)
            self.size, self.pages = size, []
            ran.append(self.pages)

        def __exit__(self, *exc):
            if busy[0] not in self.pages:
                other_lane_done.set()
            return super().__exit__(*exc)

        def run(self, fn, docs_dir, out_dir, example, timeout=None):
            if len(self.pages) >= self.size:
                too_many.append(example)
            self.pages.append(example)
            if example == busy[0]:  # the busy lane's second page waits until the other lane could take it
                other_lane_done.wait(timeout=20)
            return super().run(fn, docs_dir, out_dir, example, timeout)

    monkeypatch.setattr(recording, "SPARE_INTERPRETERS", 0)
    monkeypatch.setattr(recording, "interpreter_pool", lambda size, env: CountedPool(previous, size))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    seconds = recording.record_examples(docs, examples, gallery, gpus=1, lanes=2)
    assert set(seconds) == set(pages)
    assert too_many == [], "a pool was asked for more runs than its interpreters"
    assert sorted(ran) == sorted(lanes)  # each lane ran its plan, no more


def test_a_turns_trace_is_ordered_even_for_turns_taken_and_given_up_at_once(tmp_path, monkeypatch):
    """Asked, taken and given up come from one wall-clock reading and perf_counter differences, so a turn
    taken without a wait is never traced as taken before it was asked for (two clock reads could)."""
    wall = iter([100.0, 99.99])  # a wall clock read twice could go back a little between two reads
    monkeypatch.setattr(gpu_turns.time, "time", lambda: next(wall))
    turn = gpu_turns.Turn(str(tmp_path / "gpu-0.turn"))
    turn._take("shared")
    turn._give()
    ((mode, asked, taken, given, owner, line),) = turn.trace
    assert mode == "shared" and asked <= taken <= given and taken == 100.0 and owner == "cell" and line is None


@collector.measuring()
def _a_measured_function():
    return gpu_turns.current().mode


def test_the_trace_names_the_measured_block_that_held_the_turn_alone(tmp_path, monkeypatch):
    """An alone turn names its measured block: a decorated function by its own name, a ``with`` block in a
    page by file and line; a cell's turn is the cell's, and one taken while an earlier cell left a measured
    block open names that block."""
    monkeypatch.setattr(gpu_turns, "_drain", lambda: True)
    turn = gpu_turns.Turn(str(tmp_path / "gpu-0.turn"), shared_cells=True)
    monkeypatch.setattr(gpu_turns, "_CURRENT", turn)
    collector.hold_while_measuring(turn.exclusive)
    try:
        with turn.held():
            assert _a_measured_function() == "exclusive"
            with collector.measuring():
                pass
        left_open = collector.measuring()
        with turn.held():  # a cell that leaves its measured block open (an interpreter pool across cells)
            left_open.__enter__()
        try:
            with turn.held():
                pass
        finally:
            left_open.__exit__(None, None, None)
    finally:
        collector.hold_while_measuring(None)
        collector.give_way_with(None)
    owners = [(t[0], t[4]) for t in turn.trace]
    source = Path(__file__).read_text().splitlines()

    def line_of(owner):
        name, _, line = owner.partition(":")
        assert name == Path(__file__).name
        return source[int(line) - 1].strip()

    assert owners[:3] == [("shared", "cell"), ("exclusive", f"{__name__}._a_measured_function"), ("shared", "cell")]
    assert owners[3][0] == "exclusive" and line_of(owners[3][1]) == "with collector.measuring():"
    assert owners[4:7] == [("shared", "cell"), ("shared", "cell"), ("exclusive", owners[6][1])]
    assert line_of(owners[6][1]) == "left_open.__enter__()"
    assert owners[7:] == [("exclusive", owners[6][1])]  # the next cell's turn: the block left open


def test_inductor_autotuning_is_traced_as_such(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_turns, "_drain", lambda: True)
    turn = gpu_turns.Turn(str(tmp_path / "gpu-0.turn"), shared_cells=True)
    benchmarking = type("benchmarking", (), {})()
    benchmarking.Benchmarker = type("Benchmarker", (), {"benchmark_gpu": lambda self: turn.mode})
    gpu_turns._benchmarks_hold(turn)(benchmarking)
    with turn.held():
        assert benchmarking.Benchmarker().benchmark_gpu() == "exclusive"
    assert [(t[0], t[4]) for t in turn.trace][1] == ("exclusive", "torch._inductor autotuning")
