"""autotuning: the autotuning page's checks of every plan, its reading of two exhaustive passes and a
halving search, its table, launchers and conclusions.

Everything here runs without a GPU: tuning results are built from measurements with known samples,
the graph is a stand-in with the frontend's method names, and the plan cache's key is made by hand.
"""

from __future__ import annotations

import pytest
import torch

from cudnn_guide import check
from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import plan_cache
from cudnn_guide.measure.autotune import PlanTiming, TuneResult
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import autotuning
from cudnn_guide.studies.autotuning import HEURISTIC, Halving, Passes


def timing(index, ms, calls=200, host_ms=0.01):
    """Plan ``index`` timed ``calls`` times at ``ms`` (a spread of ±1%), with a host time per call."""
    samples = [ms * (0.99 + 0.02 * (i % 3) / 2) for i in range(calls)]
    m = Measurement(f"eng{index}", samples, "cold", params={"impl": f"eng{index}"}, host_samples_ms=[host_ms])
    return PlanTiming(index, f"eng{index}", m)


def result(times, seconds=2.0, calls=None, method="exhaustive"):
    """A tuning result: plan i at ``times[i]`` ms (``None``: it could not be timed)."""
    calls = calls or {}
    timings = [
        PlanTiming(i, f"eng{i}", error="no") if ms is None else timing(i, ms, calls.get(i, 200))
        for i, ms in enumerate(times)
    ]
    return TuneResult(method, timings, seconds)


class FakeGraph:
    """Runs plan ``i`` by writing ``outputs[i]`` into the output (an exception: raises it)."""

    def __init__(self, out, outputs):
        self.out, self.outputs, self.runs = out, outputs, []

    def execute_plan_at_index(self, pack, workspace, index, handle=None):
        self.runs.append((index, bool(torch.isnan(self.out).all()), pack, workspace, handle))
        got = self.outputs[index]
        if isinstance(got, Exception):
            raise got
        self.out.copy_(got)


def test_check_plans_runs_each_distinct_plan_once_poisoned_first_and_keeps_why_one_could_not_run():
    ref = torch.linspace(1.0, 2.0, 16)
    out = torch.zeros(16)
    graph = FakeGraph(out, {0: ref, 1: RuntimeError("CUDNN_STATUS_NOT_SUPPORTED " + "x" * 100), 3: ref})
    names = ["eng0", "eng1", "eng0", "eng3"]  # plan 2 repeats plan 0's configuration
    passed, failed = autotuning.check_plans(graph, names, "pack", "ws", out, ref, handle="h")
    assert [r[0] for r in graph.runs] == [0, 1, 3]
    assert all(poisoned for _, poisoned, *_ in graph.runs)  # NaN before every run
    assert {r[2:] for r in graph.runs} == {("pack", "ws", "h")}
    assert list(passed) == ["eng0", "eng3"] and [r.name for r in passed.values()] == ["plan 0", "plan 3"]
    assert list(failed) == ["eng1"] and failed["eng1"].startswith("RuntimeError: CUDNN_STATUS_NOT_SUPPORTED")
    assert len(failed["eng1"]) == 80


def test_check_plans_stops_at_a_plan_that_computes_the_wrong_thing():
    ref = torch.ones(8)
    out = torch.zeros(8)
    graph = FakeGraph(out, {0: ref, 1: -ref})
    with pytest.raises(CheckFailedError, match="plan 1"):
        autotuning.check_plans(graph, ["eng0", "eng1"], {}, None, out, ref, handle=None)


def test_checks_text_gives_the_counts_the_worst_error_and_each_plan_that_could_not_run():
    a = check.CheckResult("plan 0", "bfloat16", 1e-3, 1.6e-2, 0, 10)
    b = check.CheckResult("plan 3", "bfloat16", 4e-3, 1.6e-2, 0, 10)
    text = autotuning.checks_text({"eng0": a, "eng3": b}, {"eng1": "RuntimeError: no"})
    assert text.splitlines() == [
        "2 plans ran and passed their check",
        "largest relative error 4.00e-03 (tolerance 1.6e-02)",
        "1 could not run",
        "  could not run: eng1: RuntimeError: no",
    ]
    assert autotuning.checks_text({"eng0": a}, {}).splitlines()[-1] == "0 could not run"


def test_passes_read_two_exhaustive_passes_together():
    first = result([0.10, 0.08, 0.30, 5.0, 0.09, 0.20], seconds=3.0, calls={3: 7})
    second = result([0.10, 0.07, 0.31, 5.0, 0.09, 0.25], seconds=5.0, calls={3: 6, 2: 150})
    passes = Passes(first, second, reps=200, short_below=20)
    assert passes.rho == pytest.approx(1.0)
    assert passes.top5 == ([1, 4, 0, 5, 2], [1, 4, 0, 5, 2])
    assert passes.host_ms == pytest.approx(0.01)
    assert passes.calls[(1, 3)] == 7 and passes.calls[(2, 2)] == 150 and len(passes.calls) == 12
    assert passes.full == 9 and passes.short == {(1, 3): 7, (2, 3): 6}
    assert passes.of(1) is first and passes.of(2) is second
    assert str(passes).splitlines() == [
        "exhaustive passes: 3.00 s and 5.00 s",
        "median host time per execute: 10.0 µs",
        "rank correlation between the passes: 1.000",
        "top five, pass 1: [1, 4, 0, 5, 2]; pass 2: [1, 4, 0, 5, 2]",
        "timed calls: 9 of 12 plan timings got 200",
        "fewer than 20: 2",
        "  pass 1, plan 3: 7 calls of 5.0 ms",
        "  pass 2, plan 3: 6 calls of 5.0 ms",
    ]


def test_halving_is_read_against_the_faster_of_the_two_passes():
    first = result([0.10, 0.08, 0.30], seconds=3.0)
    second = result([0.10, 0.07, 0.31], seconds=5.0)
    search = Halving(result([0.2, 0.3, 0.1], seconds=1.0, method="halving"), first, second)
    assert search.pick == 2
    assert search.gap == pytest.approx(min(0.30, 0.31) / 0.07 - 1, rel=1e-2)
    assert search.exhaustive_seconds == 4.0 and search.cost_ratio == 0.25
    text = str(search).splitlines()
    assert text[0] == "halving picked plan 2 in 1.00 s" and text[1] == "that is 25% of an exhaustive pass"
    assert text[2].startswith("its exhaustive median is +3") and text[2].endswith("% from the best")


def test_selected_plans_shows_the_fastest_the_heuristics_choice_and_the_slowest_once_each():
    table = autotuning.selected_plans(result([0.5, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8]), fastest=5)
    assert table.rows == [
        "#1 plan 1: eng1",
        "#2 plan 2: eng2",
        "#3 plan 3: eng3",
        "#4 plan 4: eng4",
        "#5 plan 0: eng0",  # the heuristic's choice is among the five fastest: shown once
        "#8 plan 7: eng7",
    ]
    assert table.columns == ["median (µs)"] and table.title == "selected plans"
    assert table.value("#1 plan 1: eng1", "median (µs)") == pytest.approx(100, rel=1e-2)
    slow_heuristic = autotuning.selected_plans(result([0.9, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8]), fastest=2)
    assert slow_heuristic.rows == ["#1 plan 1: eng1", "#2 plan 2: eng2", "#8 plan 0: eng0"]


def test_store_tuned_plan_stores_the_serialized_plan_with_its_uids_and_removes_the_folder(monkeypatch):
    key = plan_cache.PlanKey("conv|tuned", "H200", "9.0", 91900, "1.32.0")
    monkeypatch.setattr(plan_cache, "current_key", lambda description: key)
    stored = []
    real_store = plan_cache.PlanCache.store

    def store(self, k, blob, uids):
        path = real_store(self, k, blob, uids)
        stored.append((k, blob, uids, path, path.read_bytes()))
        return path

    monkeypatch.setattr(plan_cache.PlanCache, "store", store)

    class Tensor:
        def __init__(self, uid):
            self.uid = uid

        def get_uid(self):
            return self.uid

    class Graph:
        def serialize(self, as_bytes):
            assert as_bytes
            return list(b"plan" * 512)

    text = autotuning.store_tuned_plan(Graph(), {"x": Tensor(1), "y": Tensor(4)}, "conv|tuned")
    (k, blob, uids, path, written) = stored[0]
    assert k is key and blob == b"plan" * 512 and uids == {"x": 1, "y": 4}
    assert text == f"tuned plan stored: {path.name} ({len(written) / 1024:.0f} KiB)"
    assert path.name.endswith(".cudnnplan") and not path.parent.exists()


def test_plan_launcher_points_the_handle_at_the_current_stream_then_runs_that_plan(monkeypatch):
    from cudnn_guide import graphs

    calls = []
    monkeypatch.setattr(graphs, "bind_to_current_stream", lambda handle: calls.append(("bind", handle)))

    class Graph:
        def execute_plan_at_index(self, pack, workspace, index, handle=None):
            calls.append(("run", pack, workspace, index, handle))

    run = autotuning.plan_launcher(Graph(), "pack", "ws", 3, handle="h")
    assert calls == []  # nothing runs until the launcher is called
    run()
    run()
    assert calls == [("bind", "h"), ("run", "pack", "ws", 3, "h")] * 2


def test_winner_text_gives_the_speed_up_interval_verdict_and_tie_band():
    from types import SimpleNamespace

    v = {"value": 1.0312, "low": 1.0101, "high": 1.0523, "verdict": "faster"}
    text = autotuning.winner_text(SimpleNamespace(versus={HEURISTIC: v}, tie_band=0.0125))
    assert text == "winner over plan 0: 1.031× (1.010–1.052)\nverdict: faster (tie band ±1.2%)"
    assert HEURISTIC == "heuristic's first choice (plan 0)"  # the comparison's contender, as recorded


@pytest.mark.parametrize(
    "slow, word",
    [
        ((1.10, 1.08, 1.12), "slower beyond the noise"),
        ((1.00, 0.98, 1.02), "a tie within the noise (the interval includes 0)"),
        ((0.90, 0.89, 0.91), "faster beyond the noise"),
    ],
)
def test_behind_says_slower_faster_or_a_tie_from_the_interval_of_the_ratio(slow, word):
    from types import SimpleNamespace

    fast = SimpleNamespace(median_ms=1.0, median_ci_ms=(0.99, 1.01))
    text = autotuning.behind(SimpleNamespace(median_ms=slow[0], median_ci_ms=slow[1:]), fast)
    assert text.startswith(f"{100 * (slow[0] - 1):+.2f}% (interval ") and text.endswith(word)


def test_median_us_quotes_a_plans_median_with_its_interval_or_says_it_has_none():
    assert autotuning.median_us(PlanTiming(0, "eng0", error="no")) == "no time (it could not be timed)"
    text = autotuning.median_us(timing(0, 0.25))
    assert text.startswith("250.0 µs (in-run 95% interval ") and text.endswith(")")


def comparison(winner):
    from cudnn_guide.measure.compare import Comparison

    name = f"winner (plan {winner})"
    med = {name: [1.0] * 7, HEURISTIC: [1.1] * 7}
    ms = {n: Measurement(n, v, "cold") for n, v in med.items()}
    versus = {HEURISTIC: {"value": 1.1, "low": 1.08, "high": 1.12, "verdict": "faster"}}
    return Comparison(name, 7, ms, med, versus, 0.01)


def test_conclusions_when_the_passes_agree_and_the_winner_beats_the_heuristics_choice():
    first = result([0.10, 0.08, 0.30, 5.0], seconds=3.0, calls={3: 7})
    second = result([0.10, 0.07, 0.31, 5.0], seconds=5.0)
    passes = Passes(first, second)
    search = Halving(result([0.2, 0.1, 0.3, 0.4], seconds=1.0, method="halving"), first, second)
    sentences = autotuning.conclusions(
        passes, search, comparison(1), distinct=4, build_s=1.234, picked=1, sizes=[0, 64, 0, 0]
    )
    assert (
        sentences[0] == "4 distinct plans; building all of them took 1.23 s (build_plans with build_plan_policy.ALL)."
    )
    assert sentences[1].startswith("The heuristic's first choice ranks 2 of 4 at 100.0 µs")
    assert "; the winner, plan 1, runs in 80.0 µs" in sentences[1]
    assert ": in interleaved rounds it is 1.10× faster than heuristic's first choice (plan 0)" in sentences[1]
    assert sentences[1].endswith("its speed-up over plan 0 is +10.00% (in-run 95% interval +8.00% to +12.00%).")
    assert (
        sentences[2]
        == "The lesson's pick by workspace (the smallest, 64 B) was plan 1, the same as the tuner's winner."
    )
    assert sentences[3] == "Two exhaustive passes agree: rank correlation 1.000, same winner."
    found = "Successive halving found the exhaustive winner itself, in 25% of the exhaustive time"
    assert sentences[4] == found + " (1.00 s against 4.00 s)."
    assert sentences[5].startswith(
        "Timed calls per plan: 7 of 8 plan timings got the full 200, 0 got 20 to 199, and 1 got"
    )
    assert sentences[5].endswith(
        "fewer than 20 (plan 3 in pass 1: 7): the fastest of them takes 62× the winner's time."
    )


def test_conclusions_when_plan_0_wins_and_the_passes_and_the_search_disagree():
    first = result([0.10, 0.11, 0.30], seconds=2.0)
    second = result([0.12, 0.11, 0.30], seconds=2.0)
    search = Halving(result([0.2, 0.1, 0.3], seconds=1.0, method="halving"), first, second)
    sentences = autotuning.conclusions(
        Passes(first, second), search, None, distinct=3, build_s=0.5, picked=2, sizes=[8, 8, 0]
    )
    assert sentences[1].endswith(", and it is the heuristic's choice.")
    assert sentences[2].startswith("The lesson's pick by workspace (the smallest, 0 B) was plan 2; against the winner")
    assert sentences[3].startswith("Two exhaustive passes agree on the order (rank correlation 0.500) but not on")
    assert "pass 2's winner, plan 1, against plan 0 in pass 1 (200 and 200 calls): +10.00%" in sentences[3]
    assert sentences[4].startswith("Successive halving found plan 1; against the exhaustive winner, in pass 1: +10.00%")
    assert sentences[5].endswith("and 0 got fewer than 20.")
