"""first_call: fresh processes timed up to their first attention output, their table, figure and conclusions.

Everything but the last test runs without a GPU: the fresh processes are small scripts that print what
a real child would, and the data are those of a recorded run (plot_28 at bc4f7a2, rounded).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading

import pytest

from cudnn_guide import collector
from cudnn_guide.studies import first_call
from cudnn_guide.studies.first_call import PARTS

NAMES = {"cudnn": "cuDNN graph (heuristics A)", "fa4": "FlashAttention-4 (flash-attn-4 4.0.0b36)"}


def _run(ctx, imp, first, second=0.001):
    return {"torch_and_context_s": ctx, "import_s": imp, "first_call_s": first, "second_call_s": second}


RECORDED = {
    "cudnn": [_run(5.384, 0.114, 1.392), _run(1.901, 0.028, 1.207), _run(1.770, 0.025, 1.018)],
    "fa4": [_run(1.789, 7.172, 2.422), _run(1.593, 1.731, 2.642), _run(1.865, 2.006, 2.665)],
}
SECONDS = {
    "validate": 0.2519,
    "build_operation_graph": 2.19e-05,
    "create_execution_plans": 0.0566,
    "check_support": 9.30e-05,
    "build_plans": 0.6254,
    "first execute": 0.00236,
    "second execute": 0.00100,
}


def test_the_child_declares_the_lessons_tensors():
    # B, S, H, HKV, D = 2, 4096, 64, 8, 128 on the page, which asserts the same
    assert "torch.randn(2, 4096, 64, 128," in first_call.CHILD
    assert "torch.randn(2, 4096, 8, 128," in first_call.CHILD
    compile(first_call.CHILD, "<child>", "exec")


def test_a_fresh_process_gets_empty_caches_and_returns_its_json(monkeypatch):
    script = (
        "import json, os, sys\n"
        "print('noise first')\n"
        "print(json.dumps({'backend': sys.argv[1], 'cache': os.environ['CUDA_CACHE_PATH'],\n"
        "                  'tmp': os.environ['TMPDIR'],\n"
        "                  'cute': os.environ['FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED']}))\n"
    )
    monkeypatch.setattr(first_call, "CHILD", script)
    got = first_call.fresh_process("fa4")
    assert got["backend"] == "fa4" and got["cute"] == "0"
    assert got["cache"] == got["tmp"] and got["cache"]


def test_the_child_ends_at_once_and_its_line_still_arrives(monkeypatch):
    """The child's own ending (a flushed JSON line, then os._exit): its answer is not lost in a pipe's buffer."""
    tail = first_call.CHILD[first_call.CHILD.index("print(json.dumps(") :]
    assert tail.rstrip().endswith("os._exit(0)")
    script = "import json, sys, time\nt0 = t1 = t2 = t3 = t4 = 0.0\n" + tail
    monkeypatch.setattr(first_call, "CHILD", script)
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)  # a pipe's buffer, as under the recorder
    assert first_call.fresh_process("cudnn") == dict.fromkeys(first_call._KEYS, 0.0)


def test_a_failed_process_gives_the_last_line_of_its_error(monkeypatch):
    monkeypatch.setattr(first_call, "CHILD", "import sys\nprint('a', file=sys.stderr)\nraise ImportError('no cute')")
    assert first_call.fresh_process("fa4") == {"error": "ImportError: no cute"}
    monkeypatch.setattr(first_call, "CHILD", "raise SystemExit(3)")
    assert first_call.fresh_process("cudnn") == {"error": "exit status 3"}


def test_fresh_processes_interleave_the_backends(monkeypatch):
    order = []
    monkeypatch.setattr(first_call, "fresh_process", lambda b: order.append(b) or {"b": b, "n": len(order)})
    runs = first_call.fresh_processes(["cudnn", "fa4"], rounds=3)
    assert order == ["cudnn", "fa4"] * 3
    assert [r["n"] for r in runs["cudnn"]] == [1, 3, 5] and [r["n"] for r in runs["fa4"]] == [2, 4, 6]


def test_the_median_sums_the_keys_in_each_process_and_skips_failures():
    runs = {"cudnn": [_run(1, 0.1, 3.0), {"error": "x"}, _run(1, 0.2, 1.0), _run(1, 0.3, 2.0), _run(1, 0.4, 4.0)]}
    assert first_call.median_s(runs, "cudnn") == 3.0  # of 1, 2, 3, 4: the upper of the middle two
    assert first_call.median_s(runs, "cudnn", "import_s") == pytest.approx(0.3)
    assert first_call.median_s(runs, "cudnn", "import_s", "first_call_s") == pytest.approx(3.1)
    assert first_call.median_s(runs, "fa4") is None
    assert first_call.median_s({"fa4": [{"error": "x"}]}, "fa4") is None


def test_the_table_gives_medians_with_their_range_and_errors():
    runs = {"cudnn": RECORDED["cudnn"], "fa4": [{"error": "ImportError: no cute"}] * 2}
    table = first_call.first_call_table(runs, NAMES)
    assert list(table.columns) == [
        "backend",
        "processes",
        "torch and CUDA start (s)",
        "backend import (s)",
        "first call (s)",
        "second call (s)",
        "error",
    ]
    row = table.iloc[0]
    assert (row["backend"], row["processes"]) == (NAMES["cudnn"], 3)
    assert row["first call (s)"] == "1.207 [1.018, 1.392]"
    assert row["backend import (s)"] == "0.028 [0.025, 0.114]"
    assert not any("_" in column for column in table.columns)  # words, not the child's keys
    assert (table.iloc[1]["backend"], table.iloc[1]["error"]) == ("fa4", "ImportError: no cute")


def test_the_figure_stacks_the_parts_of_each_finished_backend():
    runs = {**RECORDED, "other": [{"error": "x"}]}
    fig = first_call.plot_first_call(SECONDS, runs, {**NAMES, "other": "other"})
    steps_ax, fresh_ax = fig.axes
    assert [p.get_width() for p in steps_ax.patches] == pytest.approx([1e3 * s for s in SECONDS.values()])
    assert len(fresh_ax.patches) == 2 * len(PARTS)  # the failed backend has no bar
    ends = [p.get_x() + p.get_width() for p in fresh_ax.patches[-2:]]
    whole = [sum(first_call.median_s(RECORDED, b, part) for part in PARTS) for b in ("cudnn", "fa4")]
    assert ends == pytest.approx(whole)
    assert [t.get_text() for t in fresh_ax.get_legend().get_texts()] == [
        "torch and CUDA start",
        "backend import",
        "first call",
    ]
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_the_conclusions_give_import_and_first_call_of_both_backends():
    lesson, fresh = first_call.conclusions(SECONDS, RECORDED, NAMES, seq=4096)
    assert lesson.startswith("In this page's process, with torch, CUDA, cuDNN and the handle already started, ")
    assert "the lesson's five build steps took 0.934 s, 67% of it in build_plans;" in lesson
    assert "the first execute then took 2.36 ms and the second 1.00 ms" in lesson
    assert fresh.startswith("In a fresh process (OS file cache not emptied; medians of 3 processes each), ")
    assert f"importing the backend took 0.03 s for cuDNN and 2.01 s for {NAMES['fa4']}" in fresh
    assert "took 1.21 s with cuDNN (plan build included) and 2.64 s with FlashAttention-4" in fresh
    assert "FlashAttention-4 took 2.2× longer on the first call alone and 3.8× longer on import and first" in fresh
    assert "(1.24 s with cuDNN against 4.67 s, summed in each process)" in fresh
    assert "a fresh process took 3.14 s with cuDNN and 6.54 s with FlashAttention-4." in fresh
    assert fresh.endswith("the five build steps and the first execute in this page's process (0.94 s).")
    assert "That first cuDNN call, which also creates its handle and declares the graph, took 1.3×" in fresh
    assert "The fresh process was the faster" not in fresh  # it was not: 1.21 s against 0.94 s


# plot_28 as recorded: the fresh process's first call (median 0.687 s) against the page's 1.26 s
RECORDED_FASTER = {"cudnn": [_run(1.562, 0.064, 0.980), _run(1.290, 0.017, 0.667), _run(1.446, 0.016, 0.687)]}
SECONDS_SLOWER = {
    "validate": 0.3553,
    "build_operation_graph": 4.39e-05,
    "create_execution_plans": 0.0767,
    "check_support": 1.01e-04,
    "build_plans": 0.8296,
    "first execute": 0.00277,
    "second execute": 0.00107,
}


def test_a_faster_fresh_process_gets_a_two_digit_ratio_and_the_steps_slower_in_the_page():
    _, fresh = first_call.conclusions(SECONDS_SLOWER, RECORDED_FASTER, NAMES, seq=4096)
    assert "declares the graph, took 0.54× the time of the five build steps and the first execute in this " in fresh
    assert fresh.endswith(
        "(1.26 s). The fresh process was the faster: its first call is not timed step by step, but here "
        "build_plans alone took 0.83 s, more than that whole call (0.69 s), so build_plans was slower in this "
        "page's process."
    )
    both = {**SECONDS_SLOWER, "validate": 0.75}
    _, fresh = first_call.conclusions(both, RECORDED_FASTER, NAMES, seq=4096)
    assert fresh.endswith(
        "but here validate (0.75 s) and build_plans (0.83 s) each took more than that whole call (0.69 s), so "
        "those steps were slower in this page's process."
    )
    spread = {**SECONDS_SLOWER, "validate": 0.5, "build_plans": 0.6}
    _, fresh = first_call.conclusions(spread, RECORDED_FASTER, NAMES, seq=4096)
    assert "took 0.58× the time" in fresh
    assert fresh.endswith(
        "no step here alone took as long as that whole call (0.69 s), so which step was slower in this page's "
        "process is not measured (the longest here: build_plans, 0.60 s)."
    )


@pytest.mark.parametrize(
    "ratio, said", [(0.01314, "0.013"), (0.5444, "0.54"), (1.0, "1.0"), (1.26, "1.3"), (13.4, "13"), (134.2, "134")]
)
def test_the_ratio_keeps_two_significant_digits(ratio, said):
    in_page = sum(s for step, s in SECONDS.items() if step != "second execute")
    _, fresh = first_call.conclusions(SECONDS, {"cudnn": [_run(1.0, 0.02, ratio * in_page)]}, NAMES, seq=4096)
    assert f"took {said}× the time of the five build steps" in fresh
    assert "(OS file cache not emptied; medians of 1 process), importing cuDNN" in fresh


def test_the_conclusions_say_when_a_backend_has_no_row():
    runs = {"cudnn": RECORDED["cudnn"][:2] + [{"error": "x"}], "fa4": [{"error": "ImportError: no cute"}]}
    _, fresh = first_call.conclusions(SECONDS, runs, NAMES, seq=4096)
    assert fresh.startswith("In a fresh process (OS file cache not emptied; medians of 2 processes), importing")
    assert f"(plan build included); {NAMES['fa4']} has no fresh-process row. That first cuDNN call" in fresh
    _, fresh = first_call.conclusions(SECONDS, {"cudnn": [{"error": "x"}]}, NAMES, seq=4096)
    assert fresh == "No fresh cuDNN process finished its first call: see the table above."
    faster = {"cudnn": RECORDED["fa4"], "fa4": RECORDED["cudnn"][:2]}
    _, fresh = first_call.conclusions(SECONDS, faster, NAMES, seq=4096)
    assert "medians of 3 and 2 processes" in fresh and "× shorter on the first call alone" in fresh


def test_the_route_sentence_names_the_versions_only_when_both_are_installed():
    import torch

    assert first_call.route_sentence("works", True, "4.0.0b36") == "PyTorch's own route to FlashAttention-4 works."
    failed = "fails: ValueError: too many values to unpack (expected 2)"
    said = first_call.route_sentence(failed, True, "4.0.0b36")
    assert said.startswith(f"PyTorch's own route to FlashAttention-4 {failed}. Most likely this is a version")
    assert f"torch {torch.__version__}'s FA4 hook and flash-attn-4 4.0.0b36" in said
    assert (
        first_call.route_sentence(failed, False, "not installed")
        == f"PyTorch's own route to FlashAttention-4 {failed}."
    )


def test_the_module_needs_no_gpu_to_import():
    out = json.loads(json.dumps(first_call.__all__))
    assert "conclusions" in out and all(hasattr(first_call, n) for n in out)


@pytest.mark.gpu
def test_a_fresh_cudnn_process_builds_and_runs_the_lessons_graph():
    got = first_call.fresh_process("cudnn")
    assert "error" not in got, got
    assert set(got) == {*PARTS, "second_call_s"} and got["first_call_s"] > got["second_call_s"] > 0


# -- two at once (CUDNN_GUIDE_FIRST_CALLS_AT_ONCE=2): an A/B switch, off by default ------------------------------

two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two at once needs two cores to share")


def _stand_in(monkeypatch, barrier=None, fail=None):
    """A fresh_process that records its thread's cores and, with a barrier, proves two ran at the same time.

    Like the real one it is a measured block of its own (``collector.spending``)."""
    seen = []

    @collector.spending("fresh processes")
    def fake(backend):
        seen.append((backend, frozenset(os.sched_getaffinity(0))))
        if backend == fail:
            raise RuntimeError(f"{backend} broke")
        if barrier is not None:
            barrier.wait()  # both processes of a round must be running to pass
        return {"backend": backend}

    monkeypatch.setattr(first_call, "fresh_process", fake)
    return seen


def test_by_default_one_process_at_a_time_each_its_own_measured_block(monkeypatch):
    monkeypatch.delenv(first_call.AT_ONCE_ENV, raising=False)
    seen = _stand_in(monkeypatch)
    blocks = []

    @contextlib.contextmanager
    def holder():
        blocks.append(len(seen))
        yield

    collector.hold_while_measuring(holder)
    try:
        runs = first_call.fresh_processes(["cudnn", "fa4"], rounds=2)
    finally:
        collector.hold_while_measuring(None)
    assert [b for b, _ in seen] == ["cudnn", "fa4"] * 2
    assert runs == {"cudnn": [{"backend": "cudnn"}] * 2, "fa4": [{"backend": "fa4"}] * 2}
    assert blocks == [0, 1, 2, 3], "each process is its own measured block (its own alone turn), as before"


@two_cores
def test_two_at_once_start_a_rounds_processes_together_on_disjoint_cores(monkeypatch):
    monkeypatch.setenv(first_call.AT_ONCE_ENV, "2")
    seen = _stand_in(monkeypatch, barrier=threading.Barrier(2, timeout=10))
    entered = []

    @contextlib.contextmanager
    def holder():
        entered.append(len(seen))
        yield

    before = os.sched_getaffinity(0)
    collector.hold_while_measuring(holder)
    try:
        runs = first_call.fresh_processes(["cudnn", "fa4"], rounds=3)
    finally:
        collector.hold_while_measuring(None)
    assert runs == {"cudnn": [{"backend": "cudnn"}] * 3, "fa4": [{"backend": "fa4"}] * 3}  # in backend order
    assert entered == [0, 2, 4], "each round is one measured block (one alone turn), entered before it starts"
    by_backend = {b: cores for b, cores in seen}
    assert not by_backend["cudnn"] & by_backend["fa4"], "each process on its own share of the cores"
    assert by_backend["cudnn"] | by_backend["fa4"] == before, "together, the caller's cores"
    assert os.sched_getaffinity(0) == before, "the caller's own cores are untouched"


@two_cores
def test_a_failure_in_one_of_two_at_once_reaches_the_caller(monkeypatch):
    seen = _stand_in(monkeypatch, fail="fa4")
    with pytest.raises(RuntimeError, match="fa4 broke"):
        first_call.fresh_processes(["cudnn", "fa4"], rounds=1, at_once=2)
    assert sorted(b for b, _ in seen) == ["cudnn", "fa4"], "both started: the round ran two at once"
    assert not seen[0][1] & seen[1][1], "on disjoint cores, as two at once runs them"


def test_two_at_once_refuses_bad_settings_before_any_process(monkeypatch):
    seen = _stand_in(monkeypatch)
    monkeypatch.setenv(first_call.AT_ONCE_ENV, "3")
    with pytest.raises(ValueError, match=f"{first_call.AT_ONCE_ENV} takes 1 .* got '3'"):
        first_call.fresh_processes(["cudnn", "fa4"])
    with pytest.raises(ValueError, match="at_once takes 1 or 2"):
        first_call.fresh_processes(["cudnn", "fa4"], at_once=0)
    with pytest.raises(ValueError, match="more than two|got 3"):
        first_call.fresh_processes(["cudnn", "fa4", "cudnn"], at_once=2)
    assert seen == []


def test_core_shares_are_contiguous_and_cover_every_core():
    from cudnn_guide.studies.interpreter import core_share

    assert [core_share(i, 2, [0, 1, 2, 3, 4]) for i in range(2)] == [[0, 1], [2, 3, 4]]
    assert core_share(0, 2, [7]) == [7] and core_share(0, 1, [0, 1]) == [0, 1]  # too few to split: all of them


def test_one_core_gives_no_pair_but_one_process_at_a_time(monkeypatch):
    seen = _stand_in(monkeypatch)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    entered = []

    @contextlib.contextmanager
    def holder():
        entered.append(len(seen))
        yield

    collector.hold_while_measuring(holder)
    try:
        first_call.fresh_processes(["cudnn", "fa4"], rounds=1, at_once=2)
    finally:
        collector.hold_while_measuring(None)
    assert [b for b, _ in seen] == ["cudnn", "fa4"]
    assert entered == [0, 1], "one measured block a process: they ran one at a time, not as a pair"
