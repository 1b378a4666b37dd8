"""Interleaved, paired comparisons with intervals and verdicts; the reproducibility report."""

from __future__ import annotations

import contextlib
import random

import pytest
import torch
from conftest import fake_benchmark

from cudnn_guide import report
from cudnn_guide.errors import BenchmarkError
from cudnn_guide.measure import bench, compare, measurement, verdicts
from cudnn_guide.report.records import Record


def test_bootstrap_interval_is_deterministic_and_contains_the_median():
    values = [1.0 + 0.01 * ((i * 7) % 5 - 2) for i in range(15)]
    lo, hi = verdicts.bootstrap_median_ci(values)
    assert lo <= sorted(values)[7] <= hi
    assert verdicts.bootstrap_median_ci(values) == (lo, hi)


def test_too_few_rounds_is_a_clear_error():
    with pytest.raises(BenchmarkError, match="at least 5 rounds"):
        verdicts.bootstrap_median_ci([1.0, 1.1, 0.9])
    with pytest.raises(BenchmarkError, match="use at least 5"):
        compare.compare({"a": lambda: None, "b": lambda: None}, candidate="a", l2="cold", rounds=3)
    with pytest.raises(BenchmarkError, match="candidate 'c' is not one of"):
        compare.compare({"a": lambda: None}, candidate="c", l2="cold")
    with pytest.raises(BenchmarkError, match="at least one baseline"):
        compare.compare({"a": lambda: None}, candidate="a", l2="cold")


@pytest.mark.parametrize(
    "low, high, band, verdict",
    [
        (1.05, 1.10, 0.02, "faster"),
        (1.01, 1.10, 0.02, "tie"),
        (0.90, 0.97, 0.02, "slower"),
        (0.90, 0.985, 0.01, "slower"),
        (0.99, 1.01, 0.0, "tie"),
    ],
)
def test_a_verdict_needs_the_whole_interval_outside_the_band(low, high, band, verdict):
    assert verdicts.judge(low, high, band) == verdict


class _FakeGPU:
    """Stands in for bench.benchmark: each contender has a true time; each round the clock drifts."""

    def __init__(self, times, noise=0.002, seed=1):
        self.times, self.noise, self.rng, self.calls, self.drift = times, noise, random.Random(seed), [], 1.0

    def __call__(self, fn, *, label, l2, flops=None, bytes=None, budget_ms, precision, params, **kw):
        self.calls.append(label)
        if len(self.calls) % 4 == 1:
            self.drift *= 1 + self.rng.uniform(-0.05, 0.05)  # power-cap drift between rounds
        base = self.times[label.removesuffix(" (repeat)")] * self.drift
        samples = [base * (1 + self.rng.gauss(0, self.noise)) for _ in range(10)]
        return measurement.Measurement(label, samples, "cold-L2 events", flops, bytes, dict(params))


def test_interleaved_paired_rounds_see_through_clock_drift(monkeypatch):
    fake = _FakeGPU({"cudnn": 0.080, "torch": 0.100, "twin": 0.1003})
    fake_benchmark(monkeypatch, fake)
    c = compare.compare(
        {"cudnn": None, "torch": None, "twin": None}, candidate="cudnn", l2="cold", rounds=11, min_rounds=11
    )
    assert len(fake.calls) == 11 * 4  # every contender and the baseline's repeat, each round
    orders = [tuple(fake.calls[i : i + 4]) for i in range(0, len(fake.calls), 4)]
    assert len(set(orders)) > 1  # shuffled per round
    s = c.versus["torch"]
    assert s["verdict"] == "faster" and s["low"] <= s["value"] <= s["high"] and 1.2 < s["value"] < 1.3
    assert c.best_baseline == "torch"
    assert verdicts.MIN_TIE_BAND <= c.tie_band < 0.05
    assert len(c.measurements["cudnn"].samples_ms) == 110
    text = c.describe()
    assert text.startswith("1.2") and "faster than torch" in text and "in-run 95% interval" in text
    est = c.estimate("cudnn", "µs")
    assert est["low"] <= est["value"] <= est["high"] and 60 < est["value"] < 100  # 80 µs under a drifting clock


def test_a_clear_verdict_stops_early_and_keeps_the_verdict_of_the_full_run(monkeypatch):
    times = {"cudnn": 0.080, "torch": 0.100, "eager": 0.2}
    fake = _FakeGPU(times)
    fake_benchmark(monkeypatch, fake)
    early = compare.compare(dict.fromkeys(times), candidate="cudnn", l2="cold", rounds=15)
    assert early.rounds == compare.ADAPTIVE_MIN_ROUNDS and early.rounds_cap == 15
    assert len(fake.calls) == compare.ADAPTIVE_MIN_ROUNDS * 4
    assert early.to_dict()["rounds_cap"] == 15 and f"{compare.ADAPTIVE_MIN_ROUNDS} rounds" in early.describe()
    fake_benchmark(monkeypatch, _FakeGPU(times))
    full = compare.compare(dict.fromkeys(times), candidate="cudnn", l2="cold", rounds=15, min_rounds=15)
    assert full.rounds == 15
    for b in ("torch", "eager"):
        assert early.versus[b]["verdict"] == full.versus[b]["verdict"] == "faster"
        assert early.versus[b]["low"] <= full.versus[b]["value"] <= early.versus[b]["high"]


def test_an_interval_on_the_tie_band_edge_runs_to_the_cap(monkeypatch):
    seen = []

    def fake(fn, *, label, l2, flops=None, bytes=None, budget_ms, precision, params, **kw):
        seen.append(label)
        t = 0.100 if label != "torch" else (0.100, 0.103)[seen.count("torch") % 2]  # 1.00× or 1.03×: astride 1.01
        return measurement.Measurement(label, [t] * 10, "cold-L2 events", flops, bytes, dict(params))

    fake_benchmark(monkeypatch, fake)
    c = compare.compare({"cudnn": None, "torch": None}, candidate="cudnn", l2="cold", rounds=13)
    assert c.tie_band == verdicts.MIN_TIE_BAND and c.versus["torch"]["low"] < 1.01 < c.versus["torch"]["high"]
    assert c.rounds == 13 and len(seen) == 13 * 3


@pytest.mark.parametrize("low", [4, 12])
def test_a_floor_outside_five_to_the_cap_is_refused(monkeypatch, low):
    fake_benchmark(monkeypatch, _FakeGPU({"cudnn": 0.1, "torch": 0.2}))
    with pytest.raises(BenchmarkError, match="min_rounds"):
        compare.compare({"cudnn": None, "torch": None}, candidate="cudnn", l2="cold", rounds=11, min_rounds=low)


def test_settled_needs_a_decided_and_narrow_interval():
    assert compare.settled({"value": 1.30, "low": 1.27, "high": 1.33}, 0.02)  # faster
    assert compare.settled({"value": 0.70, "low": 0.68, "high": 0.72}, 0.02)  # slower
    assert compare.settled({"value": 1.00, "low": 0.99, "high": 1.01}, 0.02)  # a tie, wholly in the band
    assert not compare.settled({"value": 1.02, "low": 0.99, "high": 1.05}, 0.02)  # straddles the band edge
    assert not compare.settled({"value": 2.0, "low": 1.5, "high": 2.5}, 0.02)  # decided but ±25%


def test_host_times_are_taken_in_each_contenders_first_round_only(monkeypatch):
    asked = []

    def fake(fn, *, label, host_reps=None, **kw):
        asked.append((label, host_reps))
        return _FakeGPU({"cudnn": 0.08, "torch": 0.1})(fn, label=label, **kw)

    fake_benchmark(monkeypatch, fake)
    compare.compare({"cudnn": None, "torch": None}, candidate="cudnn", l2="cold", rounds=5)
    measured = [(i, label) for i, (label, reps) in enumerate(asked) if reps is None]  # None: the default count
    assert sorted(label for _, label in measured) == ["cudnn", "torch"]  # once each; the candidate's repeat never
    assert sum(reps == 0 for _, reps in asked) == 15 - 2  # every other timing skips it
    assert all(i == [label for label, _ in asked].index(label) for i, label in measured)  # in its first round
    asked.clear()
    compare.compare({"cudnn": None, "torch": None}, candidate="cudnn", l2="cold", rounds=5, host_reps=7)
    assert sorted(reps for _, reps in asked if reps) == [7, 7]  # a caller's count, in the first rounds only


def test_a_baseline_within_the_noise_is_a_tie(monkeypatch):
    fake_benchmark(monkeypatch, _FakeGPU({"cudnn": 0.1000, "torch": 0.1003}))
    c = compare.compare({"cudnn": None, "torch": None}, candidate="cudnn", l2="cold", rounds=11)
    assert c.versus["torch"]["verdict"] == "tie" and c.describe().startswith("a tie with torch")


def test_a_slower_candidate_is_described_with_its_speed_up_interval_and_controls_are_not_baselines(monkeypatch):
    fake_benchmark(monkeypatch, _FakeGPU({"cudnn": 0.1, "torch": 0.08, "torch (control, no gather)": 0.05}))
    c = compare.compare(
        {"cudnn": None, "torch": None, "torch (control, no gather)": None}, candidate="cudnn", l2="cold", rounds=9
    )
    assert c.best_baseline == "torch"  # the control is faster, but it is a reference, not a baseline
    text = c.describe()
    assert (
        text.startswith("1.25× slower than torch (speed-up 0.80×, in-run 95% interval 0.8")
        and c.versus["torch"]["verdict"] == "slower"
    )


def test_a_comparison_headline_carries_its_interval_and_verdict(monkeypatch):
    fake_benchmark(monkeypatch, _FakeGPU({"a": 0.05, "b": 0.10}))
    c = compare.compare({"a": None, "b": None}, candidate="a", l2="cold")
    rec = Record("plot_x", title="x")
    rec.comparison("speed-up over b", c)
    h = rec.headlines[0]
    assert h["verdict"] == "faster" and h["low"] <= h["value"] <= h["high"] and h["baseline"] == "b"
    assert {m.label for m in rec.measurements} == {"a", "b"}
    assert (h["candidate_measurement"], h["baseline_measurement"]) == ("a", "b")  # whose ratio it is
    assert (h["low"], h["high"]) == (c.versus["b"]["low"], c.versus["b"]["high"])  # in-run: the library widens nothing
    assert "run_low" not in h and "drift" not in h


def test_a_comparison_reports_its_in_run_interval_whatever_the_environment(monkeypatch, tmp_path):
    import json

    # the variables the docs build once used to widen intervals inside the library change nothing now
    (tmp_path / "drift.json").write_text(json.dumps({"global_p95": 0.5, "examples": {}}))
    fake_benchmark(monkeypatch, _FakeGPU({"cudnn": 0.080, "torch": 0.100}))
    plain = compare.compare({"cudnn": None, "torch": None}, candidate="cudnn", l2="cold", rounds=11)
    monkeypatch.setenv("CUDNN_GUIDE_DRIFT", str(tmp_path / "drift.json"))
    monkeypatch.setenv("CUDNN_GUIDE_PAGE", "plot_a")
    fake_benchmark(monkeypatch, _FakeGPU({"cudnn": 0.080, "torch": 0.100}))
    again = compare.compare({"cudnn": None, "torch": None}, candidate="cudnn", l2="cold", rounds=11)
    assert again.versus == plain.versus and set(plain.versus["torch"]) == {"value", "low", "high", "verdict"}
    assert "in-run 95% interval" in again.describe() and "widened" not in again.describe()
    est = again.estimate("torch")
    assert est["measurement"] == "torch" and "drift" not in est


@pytest.mark.parametrize("value, unit", [(-1.9e4, "GB/s"), (0.0, "µs"), (-0.2, "x")])
def test_an_impossible_headline_is_refused(value, unit):
    with pytest.raises(BenchmarkError, match="cannot be a measured"):
        Record("plot_x", title="x").headline("n", value, unit)


def test_the_interval_always_holds_its_own_estimate():
    # with few resamples the percentile interval easily misses the sample median (3.0 here)
    for seed in range(20):
        lo, hi = verdicts.bootstrap_median_ci([1.0, 2.0, 3.0, 4.0, 5.0], resamples=1, seed=seed)
        assert lo <= 3.0 <= hi


def test_a_sweep_of_comparisons_refuses_a_budget_it_would_ignore():
    from cudnn_guide.measure import sweep

    with pytest.raises(ValueError, match="round_budget_ms"):
        sweep.sweep([1], {"a": lambda x: None, "b": lambda x: None}, l2="cold", candidate="a", budget_ms=100)


def test_the_running_record_keeps_a_comparisons_pooled_measurements_not_its_rounds(monkeypatch):
    from cudnn_guide import collector
    from cudnn_guide.report import records

    fake = _FakeGPU({"a": 0.05, "b": 0.10, "c": 0.07})

    def benchmark_that_registers(*args, **kw):  # what bench.benchmark does after timing
        m = fake(*args, **kw)
        collector.add_measurements(m)
        return m

    fake_benchmark(monkeypatch, benchmark_that_registers)
    records.begin()
    try:
        c = compare.compare({"a": None, "b": None}, candidate="a", l2="cold", rounds=5)
        kept = records.page().measurements
        assert len(fake.calls) == 15 and len(kept) == 2  # 15 timed rounds, 2 pooled measurements
        assert kept[0] is c.measurements["a"] and kept[1] is c.measurements["b"]
        benchmark_that_registers(None, label="c", l2="cold", budget_ms=1, precision=0.01, params={})
        assert len(kept) == 3  # a measurement outside a comparison is kept as it is made
    finally:
        collector.stop()
    benchmark_that_registers(None, label="a", l2="cold", budget_ms=1, precision=0.01, params={})
    assert collector.current() is None  # with no collection running nothing is kept


# --- on the GPU (marker gpu; skipped without one) ---


@pytest.mark.gpu
def test_compare_on_the_gpu_judges_a_real_difference_and_an_identical_twin():
    from cudnn_guide.measure import compare

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    small = torch.randn(1024, 2048, device="cuda", dtype=torch.bfloat16)
    out_big, out_small = torch.empty_like(a), torch.empty(1024, 2048, device="cuda", dtype=torch.bfloat16)
    c = compare.compare(
        {
            "half the work": lambda: torch.matmul(small, a, out=out_small),
            "full work": lambda: torch.matmul(a, a, out=out_big),
            "half the work, again": lambda: torch.matmul(small, a, out=out_small),
        },
        candidate="half the work",
        l2="cold",
        rounds=7,
    )
    assert c.versus["full work"]["verdict"] == "faster" and 1.5 < c.versus["full work"]["value"] < 2.5
    assert c.versus["half the work, again"]["verdict"] == "tie"
    est = c.estimate("half the work", "µs")
    assert 0 < est["low"] <= est["value"] <= est["high"]


@pytest.mark.gpu
def test_host_comparison_tells_a_slow_path_from_a_fast_one():
    from cudnn_guide.measure import compare

    x = torch.zeros(16, device="cuda")

    def slow():
        for _ in range(20):
            x.add_(1)

    c = compare.compare_host({"fast": lambda: x.add_(1), "slow": slow}, candidate="fast", rounds=5, calls=100)
    assert c.versus["slow"]["verdict"] == "faster" and c.versus["slow"]["value"] > 5
    assert c.estimate("fast")["value"] > 0


@pytest.mark.gpu
def test_the_loop_race_on_the_gpu_sizes_each_loop_and_tells_a_host_bound_path():
    from cudnn_guide.measure import compare

    x = torch.zeros(16, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(a)

    def slow():  # fifty launches of a tiny kernel: host-bound
        for _ in range(50):
            x.add_(1)

    contenders = {"one add": lambda: x.add_(1), "fifty adds": slow, "8k matmul": lambda: torch.matmul(a, a, out=out)}
    c = compare.compare_loops(contenders, candidate="one add", rounds=5)
    calls = {n: c.measurements[n].params["loop_calls"] for n in contenders}
    assert calls["one add"] == calls["fifty adds"] == 50  # calls far under 0.5 ms: the cap
    assert compare.MIN_LOOP_CALLS <= calls["8k matmul"] < 50  # about 1.1 TFLOP a call: a few ms
    per_call = c.estimate("8k matmul", "ms")["value"]
    assert 12 <= calls["8k matmul"] * per_call <= 60  # a loop of about LOOP_MS (sized by a 3-call loop)
    assert c.versus["fifty adds"]["verdict"] == "faster" and c.versus["fifty adds"]["value"] > 5


def test_printing_a_comparison_gives_one_line_per_baseline(monkeypatch):
    fake_benchmark(monkeypatch, _FakeGPU({"cudnn": 0.080, "torch": 0.100, "eager": 0.2}))
    c = compare.compare({"cudnn": None, "torch": None, "eager": None}, candidate="cudnn", l2="cold", rounds=9)
    lines = str(c).splitlines()
    assert lines == [f"cudnn vs torch: {c.describe('torch')}", f"cudnn vs eager: {c.describe('eager')}"]


@pytest.mark.parametrize("unit", ["µs", "TFLOP/s"])
def test_the_comparison_plot_puts_the_best_first_with_its_interval_and_the_candidate_in_green(monkeypatch, unit):
    import matplotlib

    matplotlib.use("Agg")
    fake_benchmark(monkeypatch, _FakeGPU({"cudnn": 0.080, "torch": 0.100, "eager": 0.2}))
    c = compare.compare(
        {"cudnn": None, "torch": None, "eager": None}, candidate="cudnn", l2="cold", rounds=9, flops=1e9
    )
    ax = report.plot_comparison(c, unit, title="t")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    bars = {lab: p for lab, p in zip(labels, ax.patches)}
    assert labels == ["cudnn", "torch", "eager"]  # the fastest at the top, whether a time or a rate
    assert ax.yaxis_inverted()
    for name, bar in bars.items():
        est = c.estimate(name, unit)
        assert bar.get_width() == pytest.approx(est["value"])
        assert est["low"] <= est["value"] <= est["high"]
    assert bars["cudnn"].get_facecolor()[:3] == pytest.approx(matplotlib.colors.to_rgb("#76b900"))
    assert bars["torch"].get_facecolor()[:3] != bars["cudnn"].get_facecolor()[:3]
    assert "in-run 95% interval" in ax.get_xlabel() and unit in ax.get_xlabel() and ax.get_title() == "t"
    per_s = report.plot_comparison(
        c, per=lambda e: {k: 1e3 / v for k, v in e.items() if k in ("value", "low", "high")}, xlabel="calls/ms"
    )
    assert [t.get_text() for t in per_s.get_yticklabels()][0] == "cudnn"  # a rate: the largest first


def test_one_launch_cost_rule_applies_to_every_contender(monkeypatch):
    """plot_11's old verdict: 4.1 µs subtracted from cuDNN's 8.5 µs event, nothing from its rival's 8.2 µs."""

    def fake(fn, *, label, **kw):
        if label.startswith("cudnn"):  # short enough that the harness subtracted the launch cost
            return measurement.Measurement(label, [0.0044] * 5, "cold-L2 events − launch cost", launch_cost_ms=0.0041)
        return measurement.Measurement(label, [0.0082] * 5, "cold-L2 events")  # too short: kept raw

    fake_benchmark(monkeypatch, fake)
    c = compare.compare({"cudnn": None, "compiled": None}, candidate="cudnn", l2="cold", rounds=5)
    assert c.versus["compiled"]["verdict"] == "slower"  # 8.5 µs raw against 8.2 µs raw, not "1.86× faster"
    assert c.versus["compiled"]["value"] == pytest.approx(0.0082 / 0.0085)
    for m in c.measurements.values():
        assert m.launch_cost_ms == 0.0 and "launch cost" not in m.mode
        assert compare.RAW_EVENTS_NOTE in m.warnings
    same = {"a": [measurement.Measurement("a", [0.05], "e − launch cost", launch_cost_ms=0.004)]}
    assert compare.one_launch_rule(same) == same  # one rule already held: untouched


def test_a_host_bound_contender_brings_a_wall_clock_loop_race_beside_the_gpu_verdict(monkeypatch, tmp_path):
    """torch.compile with 150 µs of host time for 100 µs of GPU work: faster on the GPU, slower in a loop."""

    def fake(fn, *, label, **kw):
        gpu, host = (0.120, 0.040) if label.startswith("cudnn") else (0.100, 0.150)
        return measurement.Measurement(label, [gpu] * 5, "cold-L2 events", host_samples_ms=[host] * 3)

    loops = {"cudnn": 0.121, "compiled": 0.152}  # a loop runs at the larger of host and GPU time
    fake_benchmark(monkeypatch, fake)
    monkeypatch.setattr(compare, "_time_loop", lambda fn, calls: loops[fn()])
    c = compare.compare(
        {"cudnn": lambda: "cudnn", "compiled": lambda: "compiled"}, candidate="cudnn", l2="cold", rounds=5
    )
    assert compare.host_bound(c) == ["compiled"]
    assert c.versus["compiled"]["verdict"] == "slower"  # on GPU time
    assert c.wall is not None and c.wall.versus["compiled"]["verdict"] == "faster"  # in a loop
    text = c.describe()
    assert "slower than compiled" in text and "in a back-to-back loop, host time included: faster (1.26×" in text
    # the loop is judged against its own tie band: the line says which
    assert f"; loop tie band ±{100 * c.wall.tie_band:.1f}%)" in text
    rec = Record("plot_99_x")
    rec.comparison("speed-up over compiled", c)
    h = rec.to_dict()["headlines"][0]
    assert h["verdict"] == "slower" and h["wall_verdict"] == "faster" and h["wall_low"] <= h["wall_value"]
    assert any(m["label"] == "compiled wall-clock loop" for m in rec.to_dict()["measurements"])


def test_no_loop_race_when_no_contender_is_host_bound(monkeypatch):
    fake_benchmark(monkeypatch, _FakeGPU({"cudnn": 0.080, "torch": 0.100}))
    monkeypatch.setattr(compare, "_time_loop", lambda fn, calls: pytest.fail("no loop race was needed"))
    c = compare.compare({"cudnn": None, "torch": None}, candidate="cudnn", l2="cold", rounds=5)
    assert c.wall is None and "loop" not in c.describe()


def test_what_a_contender_adds_is_the_paired_difference_of_round_medians_with_its_interval():
    c = compare.Comparison(
        "raw",
        5,
        {},
        {"raw": [0.010, 0.020, 0.010, 0.020, 0.010], "wrap": [0.0103, 0.0203, 0.0103, 0.0203, 0.0103]},
        {},
        0.01,
    )
    added = c.added("wrap")  # µs: the drift between rounds (10 ↔ 20 µs) cancels in each pair
    assert added["value"] == pytest.approx(0.3) and added["low"] == pytest.approx(0.3) == added["high"]


def _three_rounds_of(medians, band=0.02):
    """A comparison of hand-made round medians (ms), five rounds each, candidate ``a``."""
    versus = {"b": {"value": 0.0, "low": 0.0, "high": 0.0, "verdict": "tie"}}
    return compare.Comparison("a", 5, {}, medians, versus, band)


def test_rejudging_takes_another_candidates_per_round_ratios_from_the_same_rounds():
    drift = [1.0, 1.1, 0.9, 1.05, 0.95]  # the clock drifts between rounds; each pair moves together
    medians = {
        "a": [1.0 * d for d in drift],
        "b": [2.0 * d for d in drift],  # b takes twice a's time in every round
        "c": [1.5 * d for d in drift],
        "d": [1.5 * d * (1.005 if i % 2 else 0.995) for i, d in enumerate(drift)],  # c's twin, ±0.5%
    }
    cmp = _three_rounds_of(medians)
    c_vs = compare.rejudged(cmp, "c", ["b", "d"])
    assert c_vs.candidate == "c" and list(c_vs.versus) == ["b", "d"]
    assert c_vs.versus["b"]["value"] == pytest.approx(2.0 / 1.5)
    assert c_vs.versus["b"]["low"] == pytest.approx(2.0 / 1.5) == pytest.approx(c_vs.versus["b"]["high"])
    assert c_vs.versus["b"]["verdict"] == "faster" and c_vs.versus["d"]["verdict"] == "tie"
    assert c_vs.tie_band == cmp.tie_band and c_vs.round_medians_ms is cmp.round_medians_ms
    assert "1.33× faster than b" in c_vs.describe("b")
    slower = compare.rejudged(cmp, "b", ["a"])
    assert slower.versus["a"]["verdict"] == "slower" and slower.versus["a"]["value"] == pytest.approx(0.5)
    assert cmp.candidate == "a" and list(cmp.versus) == ["b"]  # the original is unchanged


class _FakeClockGPU:
    """Runs the real compare → benchmark → measure path on the CPU: each call of a contender advances a
    fake clock by its time, timed calls come from a stand-in ``time_each``, and every call is logged as
    ``(contender, phase)`` where phase is ``"untimed"`` (check, warm-up, host time) or ``"timed"``."""

    def __init__(self, monkeypatch, times_ms):
        from cudnn_guide import environment
        from cudnn_guide.measure import bench

        self.now, self.log, self.times, self.reps = 0.0, [], times_ms, []
        clock = type("clock", (), {"perf_counter": staticmethod(lambda: self.now)})
        monkeypatch.setattr(bench, "time", clock)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
        monkeypatch.setattr(environment, "require_gpu", lambda *a: None)
        monkeypatch.setattr(bench, "launch_cost", lambda: {"overhead_us": 0.0})
        monkeypatch.setattr(bench, "time_each", self.time_each)
        real = compare.benchmark

        def benchmark(fn, *, label, **kw):  # marks where each measurement begins
            self.log.append((label.removesuffix(" (repeat)"), "begin"))
            return real(fn, label=label, **kw)

        monkeypatch.setattr(compare, "benchmark", benchmark)  # the real first-call checks, on the fake clock

    def contender(self, name):
        def call():
            self.log.append((name, "untimed"))
            self.now += self.times[name] / 1e3

        return call

    def time_each(self, fn, flush, reps, label, spin_ms):
        self.reps.append((label, reps))
        name = label.removesuffix(" (repeat)")
        self.log += [(name, "timed")] * reps
        return [self.times[name]] * reps


def _untimed_per_timing(log):
    """Each contender's untimed calls in each of its measurements (check, warm-up, host time), in order; the
    checks compare makes before its measured block, when there are, come first, as a count of their own."""
    out = {}
    for name, phase in log:
        if phase == "begin":
            out.setdefault(name, []).append(0)
        elif phase == "untimed":
            out.setdefault(name, [0])[-1] += 1
    return out


def test_a_contender_warms_up_in_full_in_its_first_round_only(monkeypatch):
    # 1 ms calls: the first-call check (1, before the measured block, once per contender), then the warm-up of
    # warmup_ms=5 in doubling batches (1 + 2 + 4), and in its first round the host time (one call per timed call,
    # at most 20: 5 here, min_reps within the default 12.5 ms budget) - then 2 calls a round
    gpu = _FakeClockGPU(monkeypatch, {"cudnn": 1.0, "torch": 1.0})
    contenders = {n: gpu.contender(n) for n in ("cudnn", "torch")}
    c = compare.compare(contenders, candidate="cudnn", l2="hot", rounds=5, wall_clock=False)
    untimed = _untimed_per_timing(gpu.log)
    assert gpu.log[:2] == [("cudnn", "untimed"), ("torch", "untimed")]  # both checked before anything is timed
    # the candidate runs twice a round (its repeat: its own first round, no check again, no host time)
    assert untimed["torch"] == [1, 7 + 5] + [compare.REWARM_CALLS] * 4
    assert untimed["cudnn"][0] == 1 and sorted(untimed["cudnn"][1:3]) == [7, 7 + 5]
    assert untimed["cudnn"][3:] == [compare.REWARM_CALLS] * 8
    # what each round times is unchanged: the same number of calls every round, sized from the first warm-up
    assert {reps for _, reps in gpu.reps} == {5}
    assert [len(c.measurements[n].samples_ms) for n in contenders] == [25, 25]
    assert c.rounds == 5 and c.versus["torch"]["verdict"] == "tie"


def test_rewarm_off_gives_every_round_the_full_warm_up(monkeypatch):
    gpu = _FakeClockGPU(monkeypatch, {"cudnn": 1.0, "torch": 1.0})
    contenders = {n: gpu.contender(n) for n in ("cudnn", "torch")}
    compare.compare(contenders, candidate="cudnn", l2="hot", rounds=5, rewarm=False, wall_clock=False)
    assert _untimed_per_timing(gpu.log)["torch"] == [1 + 7 + 5] + [1 + 7] * 4
    gpu.log.clear()
    monkeypatch.setattr(compare, "REWARM", False)  # the module-wide switch, for an A/B of whole pages
    compare.compare(contenders, candidate="cudnn", l2="hot", rounds=5, wall_clock=False)
    assert _untimed_per_timing(gpu.log)["torch"] == [1 + 7 + 5] + [1 + 7] * 4


def test_a_long_call_is_re_primed_with_one_call_not_a_warm_up(monkeypatch):
    # 40 ms calls: the warm-up needs two calls (three before issue 34's loop A/B: doubling batches 1 + 2);
    # min_reps 5 timed calls; from the second round on one call re-primes each (bench.LONG_CALL_MS)
    gpu = _FakeClockGPU(monkeypatch, {"cudnn": 40.0, "fa4": 30.0})
    contenders = {n: gpu.contender(n) for n in ("cudnn", "fa4")}
    c = compare.compare(contenders, candidate="cudnn", l2="hot", rounds=5, host_reps=2, wall_clock=False)
    assert _untimed_per_timing(gpu.log)["fa4"] == [1, 2 + 2] + [1] * 4
    untimed = sum(phase == "untimed" for _, phase in gpu.log)
    # two checks (not three: the repeat is the candidate, checked once), three warm-ups of two calls, the host
    # times, one call a re-prime; was 3 * (1 + 2) + ... until the checks left the measured block (issue 34),
    # and 3 * (1 + 3) + 2 * 2 + 2 * 3 * 4 with two calls a re-prime
    assert untimed == 2 * 1 + 3 * 2 + 2 * 2 + 1 * 3 * 4
    assert {reps for _, reps in gpu.reps} == {5} and c.versus["fa4"]["value"] == pytest.approx(0.75)


def test_a_rewarm_fills_in_once_and_is_reused():
    from cudnn_guide.measure import bench

    r = bench.Rewarm(calls=3)
    assert not r.primed and r.calls == 3
    r.host_ms, r.est_ms = 0.01, 1.0
    assert r.primed
    assert bench.BenchOptions(l2="hot", rewarm=r) == bench.BenchOptions(l2="hot")  # not part of the settings
    with pytest.raises(ValueError, match="at least 1"):
        bench.Rewarm(calls=0)


def test_a_long_call_is_re_primed_once_a_round_and_a_short_one_twice(monkeypatch):
    # 25 ms against 1 ms: from its second round on, the long call pays one call before its timed ones
    gpu = _FakeClockGPU(monkeypatch, {"cudnn": 25.0, "torch": 1.0})
    contenders = {n: gpu.contender(n) for n in ("cudnn", "torch")}
    compare.compare(contenders, candidate="cudnn", l2="hot", rounds=5, wall_clock=False)
    untimed = _untimed_per_timing(gpu.log)
    assert bench.LONG_CALL_MS <= 25.0
    # the check before the measured block, the candidate's and its repeat's first rounds, then rounds 2-5
    assert untimed["cudnn"][3:] == [1] * 8
    assert untimed["torch"][2:] == [compare.REWARM_CALLS] * 4
    assert bench.Rewarm(calls=2, host_ms=0.1, est_ms=bench.LONG_CALL_MS).prime_calls == 1
    assert bench.Rewarm(calls=2, host_ms=0.1, est_ms=bench.LONG_CALL_MS * 0.99).prime_calls == 2
    assert bench.Rewarm(calls=3).prime_calls == 3  # not yet primed: its own count


def test_a_call_of_50_ms_or_more_is_not_re_primed(monkeypatch):
    # 60 ms against 1 ms: from its second round on the long call goes straight to its timed calls
    gpu = _FakeClockGPU(monkeypatch, {"cudnn": 60.0, "torch": 1.0})
    contenders = {n: gpu.contender(n) for n in ("cudnn", "torch")}
    compare.compare(contenders, candidate="cudnn", l2="hot", rounds=5, min_rounds=5, wall_clock=False)
    untimed = _untimed_per_timing(gpu.log)
    assert untimed["cudnn"][3:] == [0] * 8 and untimed["torch"][2:] == [compare.REWARM_CALLS] * 4
    assert {reps for label, reps in gpu.reps if label.startswith("cudnn")} == {5}  # what is timed: unchanged
    at = bench.SELF_PRIMING_MS
    assert bench.Rewarm(calls=2, host_ms=0.1, est_ms=at).prime_calls == 0
    assert bench.Rewarm(calls=2, host_ms=0.1, est_ms=at * 0.99).prime_calls == 1


class _BudgetSeen(_FakeGPU):
    """A :class:`_FakeGPU` that also keeps the budget each measurement was given."""

    def __init__(self, times):
        super().__init__(times)
        self.budgets = []

    def __call__(self, fn, *, budget_ms, **kw):
        self.budgets.append(budget_ms)
        return super().__call__(fn, budget_ms=budget_ms, **kw)


@pytest.mark.parametrize(("env", "passed", "want"), [(None, None, 12.5), ("25", None, 25.0), ("25", 20.0, 20.0)])
def test_the_round_budget_comes_from_the_call_then_the_environment_then_the_default(monkeypatch, env, passed, want):
    times = {"cudnn": 0.080, "torch": 0.100}
    fake = _BudgetSeen(times)
    fake_benchmark(monkeypatch, fake)
    if env is None:
        monkeypatch.delenv(compare.BUDGET_ENV, raising=False)
    else:
        monkeypatch.setenv(compare.BUDGET_ENV, env)
    compare.compare(dict.fromkeys(times), candidate="cudnn", l2="cold", rounds=5, round_budget_ms=passed)
    assert fake.budgets and set(fake.budgets) == {want}


@pytest.mark.parametrize("bad", ["fast", "0", "-5", "nan", "inf"])
def test_a_round_budget_in_the_environment_that_is_not_a_positive_number_is_refused_by_name(monkeypatch, bad):
    times = {"cudnn": 0.080, "torch": 0.100}
    fake = _BudgetSeen(times)
    fake_benchmark(monkeypatch, fake)
    monkeypatch.setenv(compare.BUDGET_ENV, bad)
    with pytest.raises(BenchmarkError, match=rf"CUDNN_GUIDE_ROUND_BUDGET_MS='{bad}' is not a positive number"):
        compare.compare(dict.fromkeys(times), candidate="cudnn", l2="cold", rounds=5)
    assert fake.budgets == []  # refused before anything was timed
    for passed in (0, True, "25"):
        with pytest.raises(BenchmarkError, match=rf"round_budget_ms={passed!r} must be a positive"):
            compare.compare(dict.fromkeys(times), candidate="cudnn", l2="cold", rounds=5, round_budget_ms=passed)


def test_throttle_counters_are_read_in_each_contenders_first_round_only(monkeypatch):
    # NVML's counters cost ~1.6 ms a read on the H200: the pooled measurement keeps its first round's clock
    # summary, so later rounds read the clock and the active reasons only - and their warnings still count
    from cudnn_guide.measure import bench, clocks

    gpu = _FakeClockGPU(monkeypatch, {"cudnn": 1.0, "torch": 1.0})
    asked = []

    def sample(counters=True):
        asked.append(counters)
        capped = len(asked) > 8  # from the third round on, the power cap holds the clock down
        return clocks.ClockSample(
            1500 if capped else 1980,
            1980,
            0x4 if capped else 0,
            {"power": 0, "thermal": 0} if counters else None,
            "nvml",
        )

    def timed(fn, flush, reps, label, spin_ms):  # the timed run takes time, so that it has fractions
        gpu.now += reps * 1e-3
        return gpu.time_each(fn, flush, reps, label, spin_ms)

    monkeypatch.setattr(bench.clocks, "sample", sample)
    monkeypatch.setattr(bench, "time_each", timed)
    contenders = {n: gpu.contender(n) for n in ("cudnn", "torch")}
    c = compare.compare(contenders, candidate="cudnn", l2="hot", rounds=5, min_rounds=5, wall_clock=False)
    per_measurement = [asked[i : i + 2] for i in range(0, len(asked), 2)]
    assert len(per_measurement) == 3 * 5  # the candidate, its repeat and the baseline, five rounds
    assert per_measurement[:3] == [[True, True]] * 3 and per_measurement[3:] == [[False, False]] * 12
    for m in c.measurements.values():
        assert m.clocks["power_capped_fraction"] == 0.0  # the first round's summary, counters and all
        assert any("software power cap held the clock down" in w for w in m.warnings)  # a later round's


def test_a_loop_lasts_about_loop_ms_from_ten_calls_up_to_the_cap():
    assert compare.loop_calls(3.6, 50) == 10  # 7 calls would make 25 ms: at least MIN_LOOP_CALLS
    assert compare.loop_calls(1.0, 50) == 25 and compare.loop_calls(0.3, 50) == 50  # 84 wanted, capped
    assert compare.loop_calls(1.0, 50, loop_ms=0) == 50  # the rule before: always the cap
    assert compare.loop_calls(1.0, 4) == 4  # a cap under MIN_LOOP_CALLS wins
    assert compare.loop_calls(float("nan"), 50) == 50 and compare.loop_calls(0.0, 50) == 50  # no estimate
    with pytest.raises(BenchmarkError, match="calls=0"):
        compare.loop_calls(1.0, 0)


def test_each_contender_loops_for_about_loop_ms_and_its_repeat_as_long(monkeypatch):
    per_call = {"cudnn": 3.6, "torch": 0.3}  # ms per call in a loop
    seen = []

    def fake_loop(fn, calls):
        seen.append((fn(), calls))
        return per_call[fn()]

    monkeypatch.setattr(compare, "_time_loop", fake_loop)
    contenders = {n: (lambda n=n: n) for n in per_call}
    c = compare.compare_loops(contenders, candidate="cudnn", rounds=5)
    assert seen[:4] == [("cudnn", 1), ("cudnn", 3), ("torch", 1), ("torch", 3)]  # one call, then a short loop
    timed = seen[4:]
    assert {calls for name, calls in timed if name == "cudnn"} == {10}  # 3.6 ms: MIN_LOOP_CALLS, its repeat too
    assert {calls for name, calls in timed if name == "torch"} == {50}  # 0.3 ms: 84 wanted, the cap
    assert len(timed) == 5 * 3 * 3  # rounds × (contenders + the repeat) × loops
    assert sum(1 for name, _ in timed if name == "cudnn") == 5 * 2 * 3  # the candidate and its repeat, 10 calls each
    assert c.measurements["cudnn"].params["loop_calls"] == 10 and c.measurements["torch"].params["loop_calls"] == 50
    assert c.versus["torch"]["verdict"] == "slower" and c.rounds_cap == 5  # the candidate's loop is slower
    seen.clear()
    compare.compare_loops(contenders, candidate="cudnn", rounds=5, loop_ms=0)
    assert {calls for _, calls in seen} == {50} and len(seen) == 5 * 3 * 3  # no sizing loop, the cap


def test_the_loop_race_refuses_bad_sizes_before_it_runs_anything(monkeypatch):
    monkeypatch.setattr(compare, "_time_loop", lambda fn, calls: pytest.fail("nothing should run"))
    contenders = {"a": lambda: "a", "b": lambda: "b"}
    for bad in ({"calls": 0}, {"loop_ms": -1.0}, {"loop_ms": float("nan")}, {"loop_ms": float("inf")}):
        with pytest.raises(BenchmarkError, match="calls=0|loop_ms="):
            compare.compare_loops(contenders, candidate="a", rounds=5, **bad)


def test_a_cap_of_ten_calls_or_fewer_needs_no_sizing_loop(monkeypatch):
    seen = []
    monkeypatch.setattr(compare, "_time_loop", lambda fn, calls: seen.append(calls) or 1.0)
    compare.compare_loops({"a": lambda: "a", "b": lambda: "b"}, candidate="a", rounds=5, calls=4)
    assert set(seen) == {4}


def test_min_rounds_equal_to_rounds_fixes_the_loop_race_too(monkeypatch):
    fake_benchmark(monkeypatch, _FakeGPU({"cudnn": 0.080, "torch": 0.100}))
    monkeypatch.setattr(compare, "_time_loop", lambda fn, calls: 1.0)
    contenders = {"cudnn": lambda: "cudnn", "torch": lambda: "torch"}
    fixed = compare.compare(contenders, candidate="cudnn", l2="cold", rounds=7, min_rounds=7, wall_clock=True)
    assert fixed.rounds == 7 and fixed.wall.rounds == 7
    adaptive = compare.compare(contenders, candidate="cudnn", l2="cold", rounds=7, wall_clock=True)
    assert adaptive.wall.rounds_cap == adaptive.wall.rounds == 5  # a tie, settled at five


def test_a_settled_loop_race_stops_at_five_rounds_unless_told_not_to(monkeypatch):
    monkeypatch.setattr(compare, "_time_loop", lambda fn, calls: {"cudnn": 1.0, "torch": 2.0}[fn()])
    contenders = {n: (lambda n=n: n) for n in ("cudnn", "torch")}
    assert compare.compare_loops(contenders, candidate="cudnn", rounds=7).rounds == 5
    assert compare.compare_loops(contenders, candidate="cudnn", rounds=7, min_rounds=7).rounds == 7
    with pytest.raises(BenchmarkError, match="min_rounds=4"):
        compare.compare_loops(contenders, candidate="cudnn", rounds=7, min_rounds=4)


def test_the_first_call_checks_run_before_the_measured_block_and_a_broken_contender_stops_it(monkeypatch):
    # issue 34: the untimed checks hold no alone turn in the docs build's lanes (collector.measuring is that turn)
    from cudnn_guide import collector

    gpu = _FakeClockGPU(monkeypatch, {"cudnn": 1.0, "torch": 1.0})
    seen = []
    contenders = {n: (lambda n=n: seen.append((n, collector.measuring_now())) or gpu.contender(n)()) for n in gpu.times}
    compare.compare(contenders, candidate="cudnn", l2="hot", rounds=5, wall_clock=False)
    assert seen[:2] == [("cudnn", False), ("torch", False)] and all(m for _, m in seen[2:])

    opened = []
    monkeypatch.setattr(collector, "_HOLDERS", [lambda: opened.append(1) or contextlib.nullcontext()])

    def broken():
        raise RuntimeError("bad plan")

    with pytest.raises(BenchmarkError, match="bad plan"):
        compare.compare({"cudnn": broken, "torch": gpu.contender("torch")}, candidate="cudnn", l2="hot", rounds=5)
    assert opened == []  # refused before any measured block (the alone turn) was entered


@pytest.mark.parametrize(
    "bad", [{"min_rounds": 4}, {"round_budget_ms": 0}, {"l2": "warm"}, {"cuda_graph": True}, {"no_such_setting": 1}]
)
def test_a_bad_setting_is_refused_before_any_contender_is_called(monkeypatch, bad):
    asked = fake_benchmark(monkeypatch, _FakeGPU({"cudnn": 0.1, "torch": 0.2}))
    settings = {"l2": "cold", "rounds": 5, **bad}
    with pytest.raises((BenchmarkError, TypeError, ValueError)):
        compare.compare({"cudnn": lambda: None, "torch": lambda: None}, candidate="cudnn", **settings)
    assert asked == []  # no first call, no plan build, no compile before the refusal


def test_compare_checks_each_contenders_output_shape_before_timing(monkeypatch):
    from cudnn_guide import environment

    monkeypatch.setattr(environment, "require_gpu", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    timed = []
    monkeypatch.setattr(compare, "benchmark", lambda fn, **kw: timed.append(kw["label"]))
    contenders = {"cudnn": lambda: torch.empty(2, 3), "torch": lambda: torch.empty(3, 3)}
    with pytest.raises(BenchmarkError, match=r"output shape \(3, 3\) != expected \(2, 3\)"):
        compare.compare(contenders, candidate="cudnn", l2="hot", rounds=5, expect_shape=(2, 3))
    assert timed == []
