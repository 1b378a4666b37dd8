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
    frame = table.data
    assert list(frame.columns) == ["rank", "plan", "name", "median (µs)", "± half the IQR", "note"]
    assert list(frame["plan"]) == [1, 2, 3, 4, 0, 7]  # the heuristic's choice is among the five: shown once
    assert list(frame["rank"]) == ["1 of 8", "2 of 8", "3 of 8", "4 of 8", "5 of 8", "8 of 8"]
    assert frame["median (µs)"][0] == pytest.approx(100, rel=1e-2) and table.caption == "selected plans"
    slow_heuristic = autotuning.selected_plans(result([0.9, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8]), fastest=2)
    assert list(slow_heuristic.data["plan"]) == [1, 2, 0]  # plan 0 is also the slowest
    assert list(slow_heuristic.data["rank"]) == ["1 of 8", "2 of 8", "8 of 8"]


def test_selected_plans_marks_the_heuristics_choice_and_names_its_columns_plainly():
    table = autotuning.selected_plans(result([0.5, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8]), fastest=5)
    notes = dict(zip(table.data["plan"], table.data["note"]))
    assert notes == {
        1: "fastest (the tuner's winner)",
        2: "",
        3: "",
        4: "",
        0: "the heuristic's first choice (a default build runs it)",
        7: "slowest",
    }
    html = table.to_html()
    assert "\\" not in html and "impl" not in html and "size" not in html  # no "impl \\ size" header
    winner_is_heuristic = autotuning.selected_plans(result([0.1, 0.2, 0.3]), fastest=1)
    assert list(winner_is_heuristic.data["note"]) == [
        "fastest (the tuner's winner); the heuristic's first choice (a default build runs it)",
        "slowest",
    ]


def test_selected_plans_prints_large_medians_without_scientific_notation():
    html = autotuning.selected_plans(result([0.0810, 0.0800, 120.7123]), fastest=1).to_html()
    assert "120,712.30" in html and "81.00" in html and "80.00" in html
    assert "e+0" not in html


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
    assert text == "winner over plan 0: 1.031× (1.010–1.052)\nverdict in this run: faster (tie band ±1.2%)"
    assert HEURISTIC == "heuristic's first choice (plan 0)"  # the comparison's contender, as recorded


def test_winner_text_gives_an_interval_below_1_enough_digits_not_to_read_as_reaching_1():
    from types import SimpleNamespace

    v = {"value": 0.99484, "low": 0.99362, "high": 0.999504, "verdict": "tie"}
    text = autotuning.winner_text(SimpleNamespace(versus={HEURISTIC: v}, tie_band=0.01))
    assert text.splitlines()[0] == "winner over plan 0: 0.9948× (0.9936–0.9995)"  # 3 digits: 0.999–1.000


@pytest.mark.parametrize(
    "slow, word",
    [
        ((1.10, 1.08, 1.12), "slower in that pass (the interval excludes 0)"),
        ((1.00, 0.98, 1.02), "a tie (the interval includes 0)"),
        ((0.90, 0.89, 0.91), "faster in that pass (the interval excludes 0)"),
    ],
)
def test_behind_says_slower_faster_or_a_tie_from_the_interval_of_the_ratio(slow, word):
    from types import SimpleNamespace

    fast = SimpleNamespace(median_ms=1.0, median_ci_ms=(0.99, 1.01))
    text = autotuning.behind(SimpleNamespace(median_ms=slow[0], median_ci_ms=slow[1:]), fast)
    assert text.startswith(f"{100 * (slow[0] - 1):+.2f}% (interval ") and text.endswith(word)


def test_behind_says_it_is_one_pass_without_a_tie_band_never_beyond_the_noise():
    from types import SimpleNamespace

    fast = SimpleNamespace(median_ms=0.0800, median_ci_ms=(0.0799, 0.0801))
    slow = SimpleNamespace(median_ms=0.0804, median_ci_ms=(0.0803, 0.0805))  # +0.5%: inside a ±1% band
    text = autotuning.behind(slow, fast)
    assert "beyond the noise" not in text
    assert "; one pass, timed one after another, no tie band): slower in that pass" in text


def test_behind_gives_an_interval_that_excludes_0_enough_digits_not_to_read_as_reaching_0():
    from types import SimpleNamespace

    fast = SimpleNamespace(median_ms=1.0, median_ci_ms=(1.0, 1.0))
    slow = SimpleNamespace(median_ms=1.001, median_ci_ms=(1.00004, 1.002))
    assert autotuning.behind(slow, fast).startswith("+0.100% (interval +0.004% to +0.200%;")


def test_median_us_quotes_a_plans_median_with_its_interval_or_says_it_has_none():
    assert autotuning.median_us(PlanTiming(0, "eng0", error="no")) == "no time (it could not be timed)"
    text = autotuning.median_us(timing(0, 0.25))
    assert text.startswith("250.0 µs (in-run 95% interval ") and text.endswith(")")


def comparison(winner, value=1.1, low=1.08, high=1.12, verdict="faster"):
    from cudnn_guide.measure.compare import Comparison

    name = f"winner (plan {winner})"
    med = {name: [1.0] * 7, HEURISTIC: [value] * 7}
    ms = {n: Measurement(n, v, "cold") for n, v in med.items()}
    versus = {HEURISTIC: {"value": value, "low": low, "high": high, "verdict": verdict}}
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
    assert sentences[1].startswith("In pass 1, the heuristic's first choice ranks 2 of 4 at 100.0 µs")
    assert "; the winner, plan 1, runs in 80.0 µs" in sentences[1]
    assert sentences[1].endswith(
        ". Raced in interleaved rounds (7 rounds), the winner's speed-up over plan 0 is 1.10× (in-run 95% "
        "interval 1.08–1.12; tie band ±1.0%): the winner is faster in this run, so tuning beats the plan a "
        "default build runs."
    )
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
    assert sentences[4].startswith(
        "Successive halving found plan 1, in 50% of the exhaustive time (1.00 s against 2.00 s); against the "
        "exhaustive winner, in pass 1: +10.00%"
    )
    assert "The interleaved race" not in sentences[3] + sentences[4]  # no race: the winner is plan 0
    assert sentences[5].endswith("and 0 got fewer than 20.")


def recorded_like(halving_pick=1):
    """Pass 1's winner is plan 4 and plan 0 is 1.25% behind it there; pass 2's winner is plan 0; the race of
    the two ties, plan 0 ahead by about 0.5% with an interval wholly below 1 (as plot_03 recorded)."""
    first = result([0.0810, 0.0804, 0.0859, 0.0900, 0.0800], seconds=4.0)
    second = result([0.0800, 0.0804, 0.0859, 0.0900, 0.0802], seconds=4.0)
    order = [0.5, 0.5, 0.5, 0.5, 0.5]
    order[halving_pick] = 0.1
    search = Halving(result(order, seconds=1.0, method="halving"), first, second)
    return Passes(first, second), search


def test_conclusions_state_the_race_with_enough_digits_and_say_plainly_that_the_default_plan_is_as_good():
    passes, search = recorded_like()
    race = comparison(4, value=0.99484, low=0.99362, high=0.99504, verdict="tie")
    sentences = autotuning.conclusions(passes, search, race, distinct=5, build_s=0.7, picked=3, sizes=[8, 8, 8, 0, 8])
    assert sentences[1].endswith(
        ". Raced in interleaved rounds (7 rounds), the winner's speed-up over plan 0 is 0.995× (in-run 95% "
        "interval 0.994–0.995; tie band ±1.0%): a tie in this run, so the heuristic's first choice, which a "
        "default build runs, is as good as the winner."
    )
    assert "1.00" not in sentences[1].split("Raced")[1]  # an interval wholly below 1 never reads as reaching it
    assert all("with heuristic's" not in s and "beyond the noise" not in s for s in sentences)


def test_conclusions_call_one_after_another_comparisons_what_they_are_and_defer_to_the_race():
    passes, search = recorded_like()
    race = comparison(4, value=0.99484, low=0.99362, high=0.99504, verdict="tie")
    sentences = autotuning.conclusions(passes, search, race, distinct=5, build_s=0.7, picked=3, sizes=[8, 8, 8, 0, 8])
    one_pass = "; one pass, timed one after another, no tie band): slower in that pass (the interval excludes 0)"
    assert sentences[2].startswith("The lesson's pick by workspace (the smallest, 0 B) was plan 3; against the")
    assert sentences[2].endswith(one_pass + ".")
    assert sentences[3].startswith(
        "Two exhaustive passes agree on the order (rank correlation 0.700) but not on the winner: pass 2's "
        "winner, plan 0, against plan 4 in pass 1 (200 and 200 calls): +1.25% (interval "
    )
    assert sentences[3].endswith(
        one_pass + ". The interleaved race above disagrees, and it is the better evidence: it puts plan 0's "
        "time at 0.995× the winner's (in-run 95% interval 0.994–0.995; tie band ±1.0%), a tie in this run."
    )
    assert sentences[4].startswith("Successive halving found plan 1, in 25% of the exhaustive time")
    assert sentences[4].endswith(one_pass + ".")  # plan 1 was not raced: pass 1's reading alone


def test_conclusions_say_when_the_race_agrees_with_pass_1():
    passes, search = recorded_like(halving_pick=0)
    race = comparison(4, value=1.013, low=1.011, high=1.014, verdict="faster")
    sentences = autotuning.conclusions(passes, search, race, distinct=5, build_s=0.7, picked=4, sizes=[8, 8, 8, 8, 0])
    assert sentences[4].startswith("Successive halving found plan 0, in 25% of the exhaustive time")
    assert sentences[4].endswith(
        "slower in that pass (the interval excludes 0). The interleaved race above agrees: it puts plan 0's "
        "time at 1.013× the winner's (in-run 95% interval 1.011–1.014; tie band ±1.0%), slower in this run."
    )
