"""With ``CUDNN_GUIDE_TURN_SCOPE=measured`` (the default), lanes share the GPU's turn for their cells.

They hold it alone to measure.

Real processes on a real ``flock``: shared cells run side by side, a measured block waits for
them and nothing of another lane runs while it measures, and a lane waiting to measure goes
before a shared cell asked for after it. The library marks what it measures
(``collector.measuring``), and every wall clock it reads lies in such a block.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from gallery_build import gpu_turns

import cudnn_guide
from cudnn_guide import collector
from cudnn_guide.studies import fresh_process

EXT = Path(__file__).resolve().parents[2] / "docs" / "_ext"

LANE = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {ext!r})
    from gallery_build import gpu_turns
    turn = gpu_turns.Turn({lock!r}, shared_cells={shared}, gated=True)
    time.sleep(max(0.0, {t0} + {start} - time.time()))  # one clock for every lane
    with turn.held():
        print("took", time.time(), flush=True)
        time.sleep({hold})
        if {alone}:
            print("asked", time.time(), flush=True)
            with turn.exclusive():
                print("alone", time.time(), flush=True)
                time.sleep({alone})
                print("shared", time.time(), flush=True)
        print("gave", time.time(), flush=True)
    """
)


T0 = {"at": 0.0}


def _lane(lock: Path, start: float, hold: float, alone: float = 0.0, shared: bool = True) -> subprocess.Popen:
    """A lane that asks for a cell ``start`` seconds after the test's common start (set by the first lane)."""
    if start == 0.0:
        T0["at"] = time.time() + 1.5  # room for every interpreter to start on a busy machine
    code = LANE.format(ext=str(EXT), lock=str(lock), t0=T0["at"], start=start, hold=hold, alone=alone, shared=shared)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _times(proc: subprocess.Popen) -> dict[str, float]:
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    return {line.split()[0]: float(line.split()[1]) for line in out.splitlines()}


def _probe(lock: Path, shared: bool) -> bool:
    """Whether a new descriptor could take ``lock`` now (shared or alone), never blocking."""
    import fcntl

    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_two_lanes_cells_run_side_by_side(tmp_path):
    lock = tmp_path / "gpu-0.turn"
    a, b = _lane(lock, 0.0, 1.5), _lane(lock, 0.5, 0.2)
    ta, tb = _times(a), _times(b)
    assert tb["took"] < ta["gave"] - 0.3, (ta, tb)  # the second cell did not wait for the first


def test_a_measured_block_waits_for_the_other_lanes_cell_and_runs_alone(tmp_path):
    lock = tmp_path / "gpu-0.turn"
    a = _lane(lock, 0.0, 1.5)  # a long shared cell
    b = _lane(lock, 0.5, 0.1, alone=0.5)  # asks to measure while it runs
    ta, tb = _times(a), _times(b)
    assert tb["took"] < ta["gave"], (ta, tb)
    assert tb["asked"] < ta["gave"] - 0.3, (ta, tb)  # it asked while the first lane's cell ran ...
    assert tb["alone"] >= ta["gave"] - 0.05, (ta, tb)  # ... and measured only once that cell ended


def test_a_lane_waiting_to_measure_goes_before_a_cell_asked_for_after_it(tmp_path):
    lock = tmp_path / "gpu-0.turn"
    a = _lane(lock, 0.0, 2.0)  # holds a shared cell for 2 s
    b = _lane(lock, 0.6, 0.0, alone=0.8)  # asks to measure at about 0.6 s
    c = _lane(lock, 1.4, 0.1)  # asks for a shared cell at about 1.4 s, while b waits
    ta, tb, tc = _times(a), _times(b), _times(c)
    assert tb["asked"] < ta["gave"] - 0.3, (ta, tb)  # b asked while a's cell ran
    assert tb["alone"] >= ta["gave"] - 0.05, (ta, tb)
    assert tc["took"] >= tb["shared"] - 0.05, (tb, tc)  # c waited behind b's measurement


GIVING_LANE = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {ext!r})
    from gallery_build import gpu_turns
    from cudnn_guide import collector
    turn = gpu_turns.install({lock!r})
    time.sleep(max(0.0, {t0} - time.time()))
    with turn.held():
        print("took", time.time(), flush=True)
        end = time.time() + {hold}
        while time.time() < end:  # a cell of GPU steps, each behind a point where it may give way
            time.sleep(0.02)
            before = time.time()
            collector.between_steps()
            if turn.gave_way and "left" not in globals():
                left = True
                print("left", before, flush=True)
                print("back", time.time(), flush=True)
        print("gave", time.time(), flush=True)
    print("gave_way", turn.gave_way, flush=True)
    """
)


def test_a_shared_cell_gives_way_between_steps_to_a_lane_waiting_to_measure(tmp_path, monkeypatch):
    # without it a measurement waits for the whole cell (85.6 s of eedf3ae's recording was such waits)
    lock = tmp_path / "gpu-0.turn"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(EXT), str(Path(cudnn_guide.__file__).parents[1])]))
    monkeypatch.delenv(gpu_turns.SCOPE_ENV, raising=False)
    T0["at"] = time.time() + 1.5
    code = GIVING_LANE.format(ext=str(EXT), lock=str(lock), t0=T0["at"], hold=2.0)
    a = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    b = _lane(lock, 0.5, 0.0, alone=0.5)  # asks to measure half a second into a's two-second cell
    out_a, _ = a.communicate(timeout=60)
    assert a.returncode == 0
    ta = {line.split()[0]: float(line.split()[1]) for line in out_a.splitlines()}
    tb = _times(b)
    assert ta["gave_way"] == 1  # once, for the one measurement
    assert tb["alone"] < tb["asked"] + 0.3, (ta, tb)  # it measured within a step, not after the cell
    assert ta["left"] < tb["alone"] and ta["back"] >= tb["shared"] - 0.05, (ta, tb)  # nothing of a's beside it
    assert ta["gave"] > ta["took"] + 2.0  # a's cell finished its steps after the measurement


def test_a_cell_gives_way_only_when_someone_waits_and_never_inside_a_measured_block(shared_turn, monkeypatch):
    turn, lock = shared_turn
    monkeypatch.setattr(gpu_turns, "_drain", lambda: True)
    collector.give_way_with(turn.give_way)
    try:
        with turn.held():
            collector.between_steps()  # nobody waits: the turn is kept
            assert turn.gave_way == 0 and turn.mode == "shared"
            monkeypatch.setattr(turn, "_someone_waits", lambda: True)
            with collector.measuring():  # alone, measuring: never
                collector.between_steps()
                assert turn.mode == "exclusive" and turn.gave_way == 0
            collector.between_steps()
            assert turn.gave_way == 1 and turn.mode == "shared" and turn.turns == 4  # cell, alone, cell, cell again
            monkeypatch.setattr(gpu_turns, "_drain", lambda: False)  # a CUDA graph being captured
            collector.between_steps()
            assert turn.gave_way == 1
    finally:
        collector.give_way_with(None)


@pytest.fixture
def shared_turn(tmp_path):
    """A turn whose cells are shared, registered as the collector's holder (and unregistered after)."""
    lock = tmp_path / "t"
    turn = gpu_turns.Turn(str(lock), shared_cells=True)
    collector.hold_while_measuring(turn.exclusive)
    yield turn, lock
    collector.hold_while_measuring(None)
    collector.give_way_with(None)


def test_a_pool_keeps_a_shared_cell_turn_while_importing_and_holds_it_alone_from_there(shared_turn, monkeypatch):
    # set aside, a pool's imports ran beside another lane's timing loops (5d281fa's recording)
    turn, lock = shared_turn
    monkeypatch.setattr(gpu_turns, "_drain", lambda: True)
    seen = []
    with turn.held():
        assert turn.mode == "shared"
        with fresh_process.InterpreterPool(1, preload=()) as pool:
            real_wait = pool._idle[0].wait_ready

            def waiting(timeout):  # while the imports are waited for, the cell keeps its shared turn
                seen.append((turn.mode, _probe(lock, shared=False), _probe(lock, shared=True)))
                real_wait(timeout)

            pool._idle[0].wait_ready = waiting
            pool.run(os.getpid)
            assert turn.mode == "exclusive" and not _probe(lock, shared=True)
        assert turn.mode == "shared"  # the pool closed: the cell's turn, shared again
    assert seen == [("shared", False, True)]  # another lane's cell could run beside it, nothing measure
    assert turn.turns == 3  # the cell's, the pool's alone, the cell's again: none taken twice


def test_measuring_holds_the_turn_alone_and_gives_the_cell_back_shared(shared_turn):
    turn, lock = shared_turn
    with turn.held():
        assert turn.mode == "shared" and _probe(lock, shared=True) and not _probe(lock, shared=False)
        with collector.measuring():
            assert turn.mode == "exclusive" and not _probe(lock, shared=True)
            with turn.aside():  # inside a measured block nothing is set aside
                assert turn.mode == "exclusive"
            with collector.spending("timing"):  # nested: still alone, one turn
                assert turn.mode == "exclusive"
        assert turn.mode == "shared"
        with collector.spending("timing"):
            assert turn.mode == "exclusive"
    assert turn.mode is None and _probe(lock, shared=False)
    assert turn.turns == 5 and 0 < turn.exclusive_seconds <= turn.held_seconds


def test_a_measured_block_left_open_past_its_cell_does_not_take_the_turn_again(tmp_path):
    lock = tmp_path / "t"
    turn = gpu_turns.Turn(str(lock), shared_cells=True)
    block = turn.exclusive()
    with turn.held():
        block.__enter__()
    block.__exit__(None, None, None)  # the cell ended first
    assert turn.mode is None and _probe(lock, shared=False)


def test_cell_scope_holds_every_cell_alone(tmp_path):
    lock = tmp_path / "t"
    turn = gpu_turns.Turn(str(lock))
    with turn.held():
        assert turn.mode == "exclusive" and not _probe(lock, shared=True)
        with turn.exclusive():
            assert turn.mode == "exclusive"
    assert turn.exclusive_seconds == turn.held_seconds > 0


INSTALLED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {ext!r})
    from gallery_build import gpu_turns
    from cudnn_guide import collector
    turn = gpu_turns.install({lock!r})
    with turn.held():
        cell = turn.mode
        with collector.measuring():
            measured = turn.mode
    print(cell, measured)
    """
)


@pytest.mark.parametrize(
    ("scope", "said"),
    [(None, "shared exclusive"), ("cell", "exclusive exclusive"), ("measured", "shared exclusive")],
)
def test_install_shares_cells_unless_the_scope_is_cell(tmp_path, scope, said):
    env = {k: v for k, v in os.environ.items() if k != gpu_turns.SCOPE_ENV}
    if scope:
        env[gpu_turns.SCOPE_ENV] = scope
    code = INSTALLED.format(ext=str(EXT), lock=str(tmp_path / "t"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == said.split()


def test_an_unknown_scope_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_turns.SCOPE_ENV, "pages")
    with pytest.raises(ValueError, match="CUDNN_GUIDE_TURN_SCOPE='pages': expected one of cell, measured"):
        gpu_turns.install(str(tmp_path / "t"))


@pytest.mark.parametrize("module", ["gallery_build.recording", "gallery_build.shards"])
def test_the_recorder_refuses_an_unknown_scope_before_any_page_starts(tmp_path, module):
    env = {
        **os.environ,
        gpu_turns.SCOPE_ENV: "pages",
        "PYTHONPATH": os.pathsep.join([str(EXT), os.environ.get("PYTHONPATH", "")]),
    }
    page = "plot_99_none"  # were the scope not checked first, the unknown page would be the complaint
    args = ["record", page] if module.endswith("recording") else ["record", str(tmp_path / "shard"), page]
    done = subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "CUDNN_GUIDE_TURN_SCOPE='pages'" in done.stderr and "cell, measured" in done.stderr
    assert not (tmp_path / "shard").exists()


def test_an_interpreter_pools_imports_set_nothing_aside_and_its_runs_are_one_measured_block():
    events: list[str] = []

    class Holder:
        def __enter__(self) -> None:
            events.append("alone in")

        def __exit__(self, *exc: object) -> None:
            events.append("alone out")

    collector.hold_while_measuring(Holder)
    try:
        with fresh_process.InterpreterPool(2, preload=()) as pool:
            assert not collector.measuring_now() and events == []  # started: they import, nothing held yet
            assert pool.run(os.getpid).value != os.getpid()
            # the wait for their imports kept the turn as it was; then it is taken alone, and the runs hold it
            # alone until the pool closes
            assert events == ["alone in"] and collector.measuring_now()
            assert pool.start_seconds is not None
            pool.run(os.getpid)
            assert events == ["alone in"]
        assert not collector.measuring_now() and events == ["alone in", "alone out"]
        events.clear()
        with collector.measuring():  # inside a measured block the wait is part of it: taken once
            with fresh_process.InterpreterPool(1, preload=()) as pool:
                pool.run(os.getpid)
        assert events == ["alone in", "alone out"]
    finally:
        collector.hold_while_measuring(None)
        collector.give_way_with(None)


MARKS = ("measuring", "spending")
CLOCKS_ELSEWHERE = {
    ("collector.py", "spending"): "the clock of the measured block itself",
    ("studies/coldstart.py", "measure"): "runs in a fresh interpreter, which holds no turn",
    ("studies/interpreter.py", "_read_exact"): "a deadline, not a measurement",
    ("studies/interpreter.py", "receive"): "a deadline, not a measurement",
    ("studies/interpreter.py", "worker_main"): "runs in a fresh interpreter, which holds no turn",
    ("studies/fresh_process.py", "__init__"): "the pool's start time: its interpreters' imports, not measured",
    ("studies/fresh_process.py", "wait_ready"): "the pool's start time: its interpreters' imports, not measured",
    ("studies/fresh_process.py", "_exchange"): "called only inside run_all's measured block (run calls run_all)",
}


def _unmarked_clocks(path: Path, rel: str) -> list[tuple[str, str, int]]:
    def marked(node: ast.expr) -> bool:
        node = node.func if isinstance(node, ast.Call) else node
        return isinstance(node, ast.Attribute) and node.attr in MARKS

    found: list[tuple[str, str, int]] = []

    def walk(node: ast.AST, name: str, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            here, within = name, inside
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                here, within = child.name, inside or any(marked(d) for d in child.decorator_list)
            elif isinstance(child, ast.With) and any(marked(item.context_expr) for item in child.items):
                within = True
            elif isinstance(child, ast.Call) and gpu_turns.is_clock_call(child.func) and not inside:
                found.append((rel, name, child.lineno))
            walk(child, here, within)

    walk(ast.parse(path.read_text()), "", False)
    return found


def test_every_wall_clock_the_library_reads_is_in_a_measured_block():
    root = Path(cudnn_guide.__file__).parent
    unmarked = [
        found
        for path in sorted(root.rglob("*.py"))
        for found in _unmarked_clocks(path, path.relative_to(root).as_posix())
        if found[:2] not in CLOCKS_ELSEWHERE
    ]
    assert not unmarked, f"wall clocks outside collector.measuring (another lane may run meanwhile): {unmarked}"


def test_the_scan_finds_an_unmarked_clock(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import time\n"
        "def timed():\n    return time.perf_counter()\n"
        "@collector.measuring()\ndef fine():\n    return time.perf_counter()\n"
        "def also_fine():\n    with collector.measuring():\n        return time.perf_counter()\n"
    )
    assert _unmarked_clocks(sample, "sample.py") == [("sample.py", "timed", 3)]


def test_a_measured_block_open_when_a_cell_starts_makes_the_cell_hold_the_turn_alone(shared_turn):
    turn, lock = shared_turn
    block = collector.measuring()
    with turn.held():  # cell 1 opens a block (an interpreter pool) and ends before it closes
        block.__enter__()
    with turn.held():  # cell 2: the block is still open, so the cell is alone
        assert turn.mode == "exclusive" and not _probe(lock, shared=True)
        with collector.spending("timing"):
            assert turn.mode == "exclusive"
        block.__exit__(None, None, None)
    assert turn.mode is None and _probe(lock, shared=False) and not collector.measuring_now()


def test_blocks_that_close_out_of_order_keep_the_turn_until_the_last_closes(shared_turn):
    turn, lock = shared_turn
    with turn.held():
        first, second = collector.measuring(), collector.measuring()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)  # pool A closes while pool B lives
        assert collector.measuring_now() and turn.mode == "exclusive" and not _probe(lock, shared=True)
        second.__exit__(None, None, None)
        assert not collector.measuring_now() and turn.mode == "shared"


def test_the_cell_wide_turn_sets_work_aside_inside_a_build_as_before(tmp_path):
    """Cell scope keeps the rule it had: only a spending block (timing, fresh processes) keeps the turn."""
    turn = gpu_turns.Turn(str(tmp_path / "t"))
    with turn.held():
        with collector.measuring():  # a plan build: FlashAttention-4's import may still go aside
            with turn.aside():
                assert turn.mode is None
            with collector.spending("timing"), turn.aside():
                assert turn.mode == "exclusive"


def test_pages_that_read_a_clock_in_their_own_code_are_found():
    examples = Path(__file__).resolve().parents[2] / "examples"
    reading = {p.name[:7] for p in examples.glob("plot_*.py") if gpu_turns.reads_a_clock(p.read_text())}
    assert {"plot_03", "plot_07", "plot_28"} <= reading  # plan builds and first calls timed in the page
    assert "plot_05" not in reading  # its timing is all the library's
    assert gpu_turns.reads_a_clock("end.elapsed_time(start)") and gpu_turns.reads_a_clock("x = time.time()")
    assert not gpu_turns.reads_a_clock("# time.perf_counter() in a comment\nx = 1")
    assert gpu_turns.reads_a_clock("def broken(:")  # what cannot be read is treated as timing


PAGE_CLOCK = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {ext!r})
    from gallery_build import gpu_turns
    turn = gpu_turns.install({lock!r}, page_reads_a_clock=True)
    with turn.held():
        print(turn.mode)
    """
)


def test_a_page_that_reads_a_clock_keeps_the_cell_wide_turn_under_the_measured_scope(tmp_path):
    env = {**os.environ, gpu_turns.SCOPE_ENV: "measured"}
    code = PAGE_CLOCK.format(ext=str(EXT), lock=str(tmp_path / "t"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["exclusive"]


@pytest.mark.parametrize("scope", ["measured", "cell", ""])
def test_the_recorder_turns_no_scope_away(tmp_path, scope):
    env = {
        **{k: v for k, v in os.environ.items() if k != "CUDNN_GUIDE_ROUND_BUDGET_MS"},
        gpu_turns.SCOPE_ENV: scope,
        "PYTHONPATH": os.pathsep.join([str(EXT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "gallery_build.recording", "record", "--lanes", "3", "plot_99_none"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # no scope is turned away (until d51459d the measured one was, into a shard only): the unknown page is
    # the only complaint, made before anything starts
    assert done.returncode != 0 and "plot_99_none" in done.stderr, done.stderr
    assert "shard only" not in done.stderr and "TURN_SCOPE" not in done.stderr


def test_a_page_that_reads_a_clock_queues_at_the_gate_so_shared_cells_do_not_starve_it(tmp_path):
    lock = tmp_path / "gpu-0.turn"
    a = _lane(lock, 0.0, 2.0)  # a shared cell for 2 s
    b = _lane(lock, 0.6, 0.5, shared=False)  # a clock-reading page: its cell is alone, asked at about 0.6 s
    c = _lane(lock, 1.4, 0.1)  # a shared cell asked at about 1.4 s, while b waits
    ta, tb, tc = _times(a), _times(b), _times(c)
    assert tb["took"] >= ta["gave"] - 0.05, (ta, tb)
    assert tc["took"] >= tb["gave"] - 0.05, (tb, tc)  # c did not join a's shared turn ahead of b


def test_a_block_left_open_by_an_earlier_cell_hands_the_next_cell_its_turn_when_it_closes(shared_turn):
    turn, lock = shared_turn
    block = collector.measuring()
    with turn.held():
        block.__enter__()
    block_turn_after_cell = turn.mode
    with turn.held():  # opened while the block is open: alone
        assert turn.mode == "exclusive"
        block.__exit__(None, None, None)  # the block closes inside this cell: the cell goes on, shared
        assert turn.mode == "shared" and _probe(lock, shared=True) and not _probe(lock, shared=False)
    assert block_turn_after_cell is None and turn.mode is None


def test_a_measured_block_opened_inside_an_aside_keeps_the_turn_alone_after_the_aside(shared_turn):
    turn, lock = shared_turn
    block = collector.measuring()
    with turn.held():
        with turn.aside():
            block.__enter__()  # e.g. a pool opened during a compile set aside
            assert turn.mode == "exclusive"
        assert turn.mode == "exclusive" and not _probe(lock, shared=True)  # not taken back shared
        block.__exit__(None, None, None)
        assert turn.mode == "shared"
    assert turn.mode is None


def test_inductors_benchmarks_inside_a_compile_set_aside_give_the_turn_back_after(tmp_path):
    """The cell-wide turn as before: a benchmark inside an aside takes the turn and leaves it with the aside."""
    turn = gpu_turns.Turn(str(tmp_path / "t"))
    with turn.held():
        with turn.aside():
            with turn.exclusive():
                assert turn.mode == "exclusive"
            assert turn.mode is None
        assert turn.mode == "exclusive"


def test_a_clock_imported_by_name_is_a_clock():
    assert gpu_turns.reads_a_clock("from time import perf_counter\nt0 = perf_counter()")
    assert gpu_turns.reads_a_clock("t = time.monotonic_ns()")


@pytest.mark.parametrize(
    ("value", "said"), [("12.5", "records into a shard only"), ("fast", "is not a positive number")]
)
def test_the_recorder_keeps_a_round_budget_ab_off_the_site_and_refuses_a_bad_one(tmp_path, value, said):
    env = {
        **os.environ,
        "CUDNN_GUIDE_ROUND_BUDGET_MS": value,
        "PYTHONPATH": os.pathsep.join([str(EXT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "gallery_build.recording", "record", "plot_01"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and said in done.stderr and "CUDNN_GUIDE_ROUND_BUDGET_MS" in done.stderr, done.stderr
    shard = subprocess.run(
        [sys.executable, "-m", "gallery_build.shards", "record", str(tmp_path / "s"), "plot_01"],
        env={**env, "CUDNN_GUIDE_ROUND_BUDGET_MS": "fast"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shard.returncode != 0 and "is not a positive number" in shard.stderr and not (tmp_path / "s").exists()


def test_recording_the_site_by_any_road_refuses_a_round_budget_ab(monkeypatch, tmp_path):
    from gallery_build import recording

    monkeypatch.setenv("CUDNN_GUIDE_ROUND_BUDGET_MS", "12.5")
    root = recording.REPO_ROOT
    with pytest.raises(SystemExit, match="records into a shard only"):  # nox -s docs, or a direct call
        recording.record_examples(root / "docs", root / "examples", root / "docs" / "auto_examples", names=["plot_01"])
    env = {**os.environ, "CUDNN_GUIDE_ROUND_BUDGET_MS": "12.5", "CUDNN_GUIDE_DOCS_MODE": "record"}
    env["PYTHONPATH"] = os.pathsep.join([str(EXT), env.get("PYTHONPATH", "")])
    done = subprocess.run(  # a plain record-mode Sphinx build of the site reads conf.py first
        [sys.executable, "-c", f"import runpy; runpy.run_path({str(root / 'docs' / 'conf.py')!r})"],
        cwd=root / "docs",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "a record-mode build of the site" in done.stderr, done.stderr


def test_a_wait_for_the_turn_inside_an_aside_counts_as_a_wait_not_as_cpu_work(shared_turn, monkeypatch):
    import fcntl

    turn, _ = shared_turn
    monkeypatch.setattr(gpu_turns, "_drain", lambda: True)
    real_flock = fcntl.flock

    def slow_flock(fd, op):  # another lane holds the turn alone for 0.3 s
        if op == fcntl.LOCK_EX and turn.mode is None and turn._aside_depth:
            time.sleep(0.3)
        return real_flock(fd, op)

    with turn.held():
        monkeypatch.setattr(fcntl, "flock", slow_flock)
        with turn.aside():
            with collector.measuring():  # taken alone inside the aside, as a pool does after its imports
                pass
            turn_waited = turn.waited
        monkeypatch.setattr(fcntl, "flock", real_flock)
    assert turn_waited >= 0.3 and turn.aside_seconds < 0.2, (turn_waited, turn.aside_seconds)


def test_only_a_lane_waiting_to_measure_makes_a_cell_give_way(shared_turn, monkeypatch):
    # a lane taking the turn shared holds the gate for a moment too: that is no reason to give way
    import fcntl

    turn, lock = shared_turn
    monkeypatch.setattr(gpu_turns, "_drain", lambda: True)
    with turn.held():
        other = os.open(str(lock) + ".gate", os.O_RDWR | os.O_CREAT)
        fcntl.flock(other, fcntl.LOCK_EX)  # another lane at the gate, on its way to a shared turn
        try:
            assert not turn._someone_waits() and turn.give_way() is False
        finally:
            os.close(other)
        waiting = os.open(str(lock) + ".alone", os.O_RDWR | os.O_CREAT)
        fcntl.flock(waiting, fcntl.LOCK_SH)  # a lane waiting to take the turn alone says so here
        try:
            assert turn._someone_waits()
            turn._pid = -1  # as in a forked child: the parent's turn is not this process's
            assert turn.give_way() is False
            turn._pid = os.getpid()
            ungated = gpu_turns.Turn(str(lock), shared_cells=True, gated=False)
            ungated.mode = "shared"
            assert ungated.give_way() is False  # only lanes that queue at the gate give way
        finally:
            os.close(waiting)


@pytest.mark.parametrize("value, gives_way", [(None, True), ("1", True), ("0", False), (" 0 ", False)])
def test_giving_way_can_be_switched_off_for_an_ab(tmp_path, monkeypatch, value, gives_way):
    if value is None:
        monkeypatch.delenv(gpu_turns.GIVE_WAY_ENV, raising=False)
    else:
        monkeypatch.setenv(gpu_turns.GIVE_WAY_ENV, value)
    monkeypatch.delenv(gpu_turns.SCOPE_ENV, raising=False)
    monkeypatch.setattr(gpu_turns, "_CURRENT", None)
    seen = []
    monkeypatch.setattr(gpu_turns.Turn, "give_way", lambda self: seen.append(self) or True)
    try:
        turn = gpu_turns.install(str(tmp_path / "gpu-0.turn"))
        collector.between_steps()
    finally:
        collector.hold_while_measuring(None)
        collector.give_way_with(None)
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, gpu_turns._AfterImport)]
    assert seen == ([turn] if gives_way else [])


# -- a page's own clock: the cells that read it hold the turn alone, the page's other cells share it ---------


def _code_cells(page: Path) -> list[tuple[int, int, str]]:
    from sphinx_gallery import py_source_parser

    blocks = py_source_parser.split_code_and_text_blocks(str(page))[1]
    return [(b.lineno, b.lineno + b.content.count("\n"), b.content) for b in blocks if b.type == "code"]


@pytest.mark.parametrize("stem", ["plot_03_autotuning", "plot_07_kernel_cache", "plot_28_first_call"])
def test_only_the_lesson_cell_of_a_page_that_times_its_build_holds_the_turn_alone(tmp_path, stem):
    page = Path(__file__).resolve().parents[2] / "examples" / f"{stem}.py"
    turn = gpu_turns.Turn(str(tmp_path / "t"), shared_cells=True)
    turn.clock_lines = gpu_turns.clock_lines(page.read_text(encoding="utf-8"))
    cells = _code_cells(page)
    alone = [content for first, last, content in cells if turn.cell_is_alone(first, last)]
    assert len(alone) == 1 and "perf_counter" in alone[0]  # the lesson's timed build, and nothing else
    assert all(gpu_turns.reads_a_clock(c) == (c in alone) for _, _, c in cells)
    assert gpu_turns.Turn(str(tmp_path / "u"), shared_cells=False).cell_is_alone(1, 1)  # cell scope: every cell


def test_a_timer_defined_in_one_cell_and_called_in_later_ones_holds_every_cell_between():
    page = textwrap.dedent(
        """\
        import time
        def timed(f):
            t0 = time.perf_counter()
            f()
            return time.perf_counter() - t0
        def twice(f):
            return timed(f) + timed(f)
        x = 1
        y = twice(work)
        z = 2
        w = timed(work)
        plot()
        """
    )
    assert gpu_turns.clock_lines(page) == (9, 11)  # twice (a timer through timed) to the last call of timed
    assert gpu_turns.clock_lines("a = 1\nb = 2") is None
    assert gpu_turns.clock_lines("a = 1\nt = end.elapsed_time(start)\nb = 2") == (2, 2)
    lam = "clock = lambda: time.perf_counter()\nx = 1\ns = clock()\n"
    assert gpu_turns.clock_lines(lam) == (3, 3)
    klass = "class Timer:\n    def stop(self):\n        return time.perf_counter()\nx = 1\ny = 2"
    assert gpu_turns.clock_lines(klass) == (1, 5)  # a class's instances cannot be followed: the whole page
    assert gpu_turns.clock_lines("def broken(:\n  pass") == (1, 2)  # what cannot be read: the whole page
    # a method of the same name does not hide the page's timer
    same = "def timed():\n    return time.perf_counter()\nclass A:\n    def timed(self):\n        return 1\n"
    same += "x = 1\ny = timed()"
    assert gpu_turns.clock_lines(same) == (7, 7)
    # a timer or a clock passed on, or imported under a name, is called where it cannot be placed: the whole page
    assert gpu_turns.clock_lines("t = functools.partial(timed, f)\ndef timed(f):\n    return time.time()\nx = 1") == (
        1,
        4,
    )
    assert gpu_turns.clock_lines("c = time.perf_counter\nx = 1\ny = c()") == (1, 3)
    assert gpu_turns.clock_lines("from time import perf_counter as pc\nx = 1\ny = pc()") == (1, 3)
    # a CUDA event's record() starts a timer that a later elapsed_time() reads
    assert gpu_turns.clock_lines("a.record()\nwork()\nb.record()\nms = b.elapsed_time(a)\nplot()") == (1, 4)


def test_a_clock_cell_holds_the_turn_alone_and_sets_nothing_aside_and_other_cells_share_it(shared_turn, monkeypatch):
    from sphinx_gallery import gen_rst
    from sphinx_gallery.py_source_parser import Block

    turn, lock = shared_turn
    turn.clock_lines = (10, 12)
    seen = []

    def execute_code_block(compiler, block, *rest):
        with turn.aside():  # e.g. FlashAttention-4 compiling inside the cell
            seen.append((block.lineno, turn.mode, _probe(lock, shared=True)))
        seen.append((block.lineno, turn.mode, _probe(lock, shared=True)))
        return ""

    monkeypatch.setattr(gen_rst, "execute_code_block", execute_code_block)
    monkeypatch.setattr(gen_rst, "execute_script", lambda *a, **k: ([], 0.0))
    gpu_turns.take_turns_per_cell(turn)
    for first, lines in ((1, 3), (8, 3), (13, 2)):
        gen_rst.execute_code_block(None, Block("code", "x = 1\n" * lines, first), None, {}, {}, {})
    assert seen == [
        (1, None, True),  # lines 1-4: shared, and set aside for the compile
        (1, "shared", True),
        (8, "exclusive", False),  # lines 8-11 overlap the clock's: alone, kept through the compile
        (8, "exclusive", False),
        (13, None, True),  # lines 13-15: after the clock's, shared again
        (13, "shared", True),
    ]
    assert turn.mode is None and not turn._cell_alone


def test_under_the_cell_wide_turn_every_cell_is_alone_and_still_sets_compiles_aside(tmp_path, monkeypatch):
    from sphinx_gallery import gen_rst
    from sphinx_gallery.py_source_parser import Block

    turn = gpu_turns.Turn(str(tmp_path / "t"), shared_cells=False)
    seen = []

    def execute_code_block(compiler, block, *rest):
        seen.append(turn.mode)
        with turn.aside():  # a compile outside a timing block: set aside, as before per-cell clocks
            seen.append(turn.mode)
        return ""

    monkeypatch.setattr(gen_rst, "execute_code_block", execute_code_block)
    monkeypatch.setattr(gen_rst, "execute_script", lambda *a, **k: ([], 0.0))
    gpu_turns.take_turns_per_cell(turn)
    gen_rst.execute_code_block(None, Block("code", "x = 1\n", 1), None, {}, {}, {})
    assert seen == ["exclusive", None]


def test_a_block_left_open_by_a_shared_cell_and_closed_in_a_clock_cell_leaves_the_cell_its_turn(shared_turn):
    turn, lock = shared_turn
    block = collector.measuring()
    with turn.held():
        block.__enter__()
    with turn.held(alone=True):  # a cell that reads a clock: alone from start to end
        assert turn.mode == "exclusive"
        block.__exit__(None, None, None)
        assert turn.mode == "exclusive" and not _probe(lock, shared=True)  # never let go inside the cell
    assert turn.mode is None


def _figures_cell(turn, lock, monkeypatch, seen, *, last_expr, value=None):
    """A stand-in for sphinx-gallery's execute_code_block: the code, then save_figures, then the output."""
    from sphinx_gallery import gen_rst

    def save_figures(*args):
        seen.append(("figures", turn.mode, _probe(lock, shared=False)))
        return ""

    def code_output(is_last_expr, *args):
        seen.append(("output", turn.mode, _probe(lock, shared=False)))
        return ""

    monkeypatch.setattr(gen_rst, "save_figures", save_figures)
    monkeypatch.setattr(gen_rst, "_get_code_output", code_output)

    def execute_code_block(compiler, block, *rest):
        seen.append(("code", turn.mode, _probe(lock, shared=False)))
        gen_rst.save_figures(block)
        return gen_rst._get_code_output(last_expr, {"___": value}, {}, None, "", ())

    monkeypatch.setattr(gen_rst, "execute_code_block", execute_code_block)
    monkeypatch.setattr(gen_rst, "execute_script", lambda *a, **k: ([], 0.0))
    gpu_turns.take_turns_per_cell(turn)
    return gen_rst


@pytest.mark.parametrize(
    ("last_expr", "value", "back"),
    [(False, None, False), (True, None, False), (True, "a tensor on the GPU, say", True)],
)
def test_a_shared_cell_lets_go_of_its_turn_to_save_figures_and_takes_it_back_only_to_print(
    shared_turn, monkeypatch, last_expr, value, back
):
    from sphinx_gallery.py_source_parser import Block

    turn, lock = shared_turn
    seen = []
    gen_rst = _figures_cell(turn, lock, monkeypatch, seen, last_expr=last_expr, value=value)
    gen_rst.execute_code_block(None, Block("code", "x = 1\n", 1), None, {}, {}, {})
    # the code holds the turn (nobody may take it alone); the figures are saved without it
    assert seen[:2] == [("code", "shared", False), ("figures", None, True)]
    # a last expression with a value is printed in the turn again (its repr may read the GPU); a None prints
    # nothing, and a cell ending in a statement has nothing to print: the cell ends without the turn
    assert seen[2] == (("output", "shared", False) if back else ("output", None, True))
    assert turn.let_go_times == 1 and turn.mode is None and _probe(lock, shared=False)
    kinds = [t[0] for t in turn.trace]
    assert kinds == (["shared", "shared"] if back else ["shared"])  # each turn held is traced


def test_a_cell_keeps_its_turn_for_its_figures_while_a_cuda_graph_is_captured_or_its_drain_fails(
    shared_turn, monkeypatch
):
    turn, lock = shared_turn
    monkeypatch.setattr(gpu_turns, "_drain", lambda: False)  # capturing: synchronizing would break the capture
    with turn.held():
        assert turn.let_go() is False and turn.mode == "shared"

    def failing_drain():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(gpu_turns, "_drain", failing_drain)
    with pytest.raises(RuntimeError):  # the cell's own error comes out where the cell ends, not from let_go
        with turn.held():
            assert turn.let_go() is False and turn.mode == "shared"
            failing_drain()
    assert turn.let_go_times == 0


def test_the_real_execute_code_block_saves_figures_without_the_turn_and_prints_a_value_in_it(
    shared_turn, monkeypatch, tmp_path
):
    """sphinx-gallery's own execute_code_block, not a stand-in: it reaches save_figures and _get_code_output through
    its module (where the wrappers sit), and the repr of a last expression is made inside _get_code_output."""
    import codeop
    import types

    from sphinx_gallery import gen_rst
    from sphinx_gallery.py_source_parser import Block

    turn, lock = shared_turn
    seen = []
    monkeypatch.setattr(gen_rst, "save_figures", lambda *a, **k: seen.append(("figures", turn.mode)) or "")

    def code_output(is_last_expr, example_globals, *rest):
        seen.append(("output", turn.mode, example_globals.get("___") if is_last_expr else None))
        return ""

    monkeypatch.setattr(gen_rst, "_get_code_output", code_output)
    monkeypatch.setattr(gen_rst, "execute_script", lambda *a, **k: ([], 0.0))
    gpu_turns.take_turns_per_cell(turn)
    src = tmp_path / "plot_x.py"
    src.write_text("x = 1\n")
    main = types.ModuleType("__main__")
    script_vars = {"execute_script": True, "src_file": str(src), "memory_delta": [], "fake_main": main}
    conf = {
        "capture_repr": ("_repr_html_", "__repr__"),
        "show_memory": False,
        "ignore_repr_types": "",
        "call_memory": None,
    }
    monkeypatch.chdir(tmp_path)
    for code in ("x = 1\n", "x + 1\n", "print(x)\n"):
        gen_rst.execute_code_block(codeop.Compile(), Block("code", code, 1), main.__dict__, script_vars, conf, {})
    assert seen == [
        ("figures", None),  # x = 1: figures without the turn, nothing to print
        ("output", None, None),
        ("figures", None),  # x + 1: its value is printed in the turn
        ("output", "shared", 2),
        ("figures", None),  # print(x): the value is None, nothing to print, no turn
        ("output", None, None),
    ]
    assert turn.let_go_times == 3 and turn.mode is None and _probe(lock, shared=False)


def test_let_go_is_a_no_op_outside_a_cell_and_take_back_without_one(tmp_path):
    turn = gpu_turns.Turn(str(tmp_path / "t"), shared_cells=True)
    assert turn.let_go() is False
    turn.take_back()
    assert turn.mode is None and turn.turns == 0


def test_each_turn_a_cell_holds_is_traced_with_the_cells_first_line(shared_turn, monkeypatch):
    from sphinx_gallery import gen_rst
    from sphinx_gallery.py_source_parser import Block

    turn, lock = shared_turn
    monkeypatch.setattr(gpu_turns, "_drain", lambda: True)

    def execute_code_block(compiler, block, *rest):
        if block.lineno == 20:
            with collector.measuring():  # a measured block inside the cell: its alone turn carries the line too
                pass
        return ""

    monkeypatch.setattr(gen_rst, "execute_code_block", execute_code_block)
    monkeypatch.setattr(gen_rst, "execute_script", lambda *a, **k: ([], 0.0))
    gpu_turns.take_turns_per_cell(turn)
    for first in (3, 20):
        gen_rst.execute_code_block(None, Block("code", "x = 1\n", first), None, {}, {}, {})
    with turn.held():  # a turn held outside sphinx-gallery's cells has no line
        pass
    assert [(t[0], t[5]) for t in turn.trace] == [
        ("shared", 3),
        ("shared", 20),
        ("exclusive", 20),
        ("shared", 20),
        ("shared", None),
    ]
