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
    # the first holds its turn, then sets it aside for 1.5 s of 'compiling'; the second runs meanwhile
    inner = "print('aside', time.time(), flush=True)\n    with turn.aside(): time.sleep(1.5)"
    first = _holder(lock, 0.5, inner)
    time.sleep(0.2)
    second = _holder(lock, 0.3)
    out_first, _ = first.communicate(timeout=60)
    b = _times(second)
    a = {line.split()[0]: float(line.split()[1]) for line in out_first.splitlines()}
    assert a["aside"] <= b["took"] <= a["aside"] + 1.0, (a, b)  # ran during the first's aside
    assert a["gave"] >= b["gave"]  # the first took its turn back only after the second gave it


def test_aside_and_held_do_nothing_without_the_turn(tmp_path):
    turn = gpu_turns.Turn(str(tmp_path / "t"))
    with turn.aside():
        assert not turn.holding
    with turn.held():
        assert turn.holding
        with turn.held():  # nested: still one turn
            pass
        with turn.aside():
            assert not turn.holding
        assert turn.holding
    assert not turn.holding and turn.turns == 2 and turn.aside_seconds >= 0


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


def test_flash_attn_imports_aside_and_cute_compiles_aside(tmp_path, monkeypatch):
    """A stand-in ``cutlass`` package: its import and its ``cute.compile`` calls run with the turn set aside."""
    pkg = tmp_path / "site" / "cutlass"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import gallery_build.gpu_turns as g\nHELD_AT_IMPORT = g.current().holding\n")
    (pkg / "cute.py").write_text(
        "import gallery_build.gpu_turns as g\n"
        "class _Compile:\n"
        "    def __call__(self, fn):\n"
        "        return (fn, g.current().holding)\n"
        "    def __getitem__(self, option):\n"
        "        return lambda fn: (fn, option, g.current().holding)\n"
        "compile = _Compile()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(gpu_turns, "_CURRENT", None)
    finders = list(sys.meta_path)
    try:
        turn = gpu_turns.install(str(tmp_path / "gpu-0.turn"))
        with turn.held():
            cutlass = importlib.import_module("cutlass")
            cute = importlib.import_module("cutlass.cute")
            assert cutlass.HELD_AT_IMPORT is False  # imported aside
            assert cute.compile("kernel") == ("kernel", False)  # compiled aside
            assert cute.compile["opt"]("kernel") == ("kernel", "opt", False)  # cute.compile[...] too
            assert turn.holding  # and the turn is back after each
    finally:
        sys.meta_path[:] = finders
        for name in ("cutlass", "cutlass.cute"):
            sys.modules.pop(name, None)


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
        (["plot_05"], 1, ["plot_05"]),
    ],
)
def test_the_lanes_option_is_taken_out_of_the_command_line(args, lanes, rest, monkeypatch):
    monkeypatch.delenv(recording.LANES_ENV, raising=False)
    assert recording.lanes_option(args) == (lanes, rest)


def test_the_lanes_variable_sets_the_default_and_the_command_line_wins(monkeypatch):
    monkeypatch.setenv(recording.LANES_ENV, "3")
    assert recording.lanes_option(["plot_05"]) == (3, ["plot_05"])
    assert recording.lanes_option(["--lanes", "2", "plot_05"]) == (2, ["plot_05"])
    monkeypatch.setenv(recording.LANES_ENV, "many")
    with pytest.raises(recording.LanesError, match=r"CUDNN_GUIDE_LANES\) takes .* got 'many'"):
        recording.lanes_option([])


@pytest.mark.parametrize("args", [["--lanes"], ["--lanes", "0"], ["--lanes", "two"], ["--lanes=9"]])
def test_a_bad_lanes_value_is_refused_with_the_range(args, monkeypatch):
    monkeypatch.delenv(recording.LANES_ENV, raising=False)
    with pytest.raises(recording.LanesError, match=r"a whole number from 1 to 8; got"):
        recording.lanes_option(args)


def test_the_recorder_cli_refuses_a_bad_lanes_value_before_anything_starts(monkeypatch):
    monkeypatch.delenv(recording.LANES_ENV, raising=False)
    with pytest.raises(SystemExit, match=r"cudnn-guide: --lanes \(or CUDNN_GUIDE_LANES\) takes how many pages"):
        recording._main(["record", "--lanes", "0", "plot_05"])


def test_lanes_on_one_gpu_share_its_turn_and_get_their_own_cores(tmp_path, root, monkeypatch, capsys):
    """Three lanes on one GPU: each lane's interpreters get the GPU's lock file and disjoint cores."""
    from test_progress import PAGE_A, PAGE_B, FakePool, _project

    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    third = "plot_05_sdpa_causal.py"
    import shutil

    shutil.copy(root / "examples" / third, examples / third)
    previous = json.loads((gallery / "recording.json").read_text())["example_seconds"]
    envs = []

    def pool(size, env):
        envs.append(env)
        return FakePool(previous)

    monkeypatch.setattr(recording, "interpreter_pool", pool)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(12)), raising=False)
    seconds = recording.record_examples(docs, examples, gallery, gpus=1, lanes=3)
    assert set(seconds) == {PAGE_A, PAGE_B, third}
    assert len(envs) == 3
    assert len({env[gpu_turns.TURN_ENV] for env in envs}) == 1  # one GPU: one lock file
    cores = [set(env[gpu_turns.CPUS_ENV].split(",")) for env in envs]
    assert sorted(len(c) for c in cores) == [4, 4, 4] and not (cores[0] & cores[1] or cores[1] & cores[2])
    assert all("CUDA_VISIBLE_DEVICES" not in env for env in envs)
    out = capsys.readouterr().out
    assert "3 page(s) on 3 lane(s) of 1 GPU(s), taking turns on each" in out
    assert "in a fresh interpreter on lane " in out


def test_one_lane_records_as_before_without_turns(tmp_path, root, monkeypatch):
    from test_progress import FakePool, _project

    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    previous = json.loads((gallery / "recording.json").read_text())["example_seconds"]
    envs = []

    def pool(size, env):
        envs.append(env)
        return FakePool(previous)

    monkeypatch.setattr(recording, "interpreter_pool", pool)
    recording.record_examples(docs, examples, gallery, gpus=1)
    assert len(envs) == 1 and gpu_turns.TURN_ENV not in envs[0] and gpu_turns.CPUS_ENV not in envs[0]


def test_lanes_sharing_a_gpu_estimate_the_time_left_from_the_gpus_rate_not_a_pages_own_seconds():
    from gallery_build.progress import Progress

    now = [0.0]
    p = Progress({"a.py": 10.0, "b.py": 30.0, "c.py": 20.0}, clock=lambda: now[0])
    p.plan([], [["a.py", "c.py"], ["b.py"]])
    p.share(1)
    first = p.plan([], [["a.py", "c.py"], ["b.py"]])
    assert "about 60 s from the last recording's per-page times, one page at a time on each GPU" in first
    p.start("a.py", 0), p.start("b.py", 1)
    now[0] = 15.0  # a (10 s when recorded alone) took 15 s beside b: the GPU does 10 page-seconds per 15 s
    line = p.finish("a.py", 0, 15.0)
    assert "on lane 0" in line
    assert line.endswith(
        "1 of 3 finished, about 75 s left (estimate from the pages finished so far: "
        "their last-recording seconds per second taken, 0.67 on GPU 0)"
    ), line
    p.start("c.py", 0)
    now[0] = 45.0
    assert "about 0 s left" not in p.finish("b.py", 1, 45.0)  # c still runs: (10 + 30) / 45 s, 20 s of it left
    assert round(p.remaining()) == round(20 / (40 / 45))
