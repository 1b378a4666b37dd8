import math
import statistics

import pytest
import torch
from conftest import HAS_GPU, SMALL_CONV, fake_benchmark

from cudnn_guide import check, report
from cudnn_guide.errors import BenchmarkError, NoGPUError
from cudnn_guide.graphs import conv
from cudnn_guide.measure import bench, ceilings, cudagraphs, events, measurement, sweep
from cudnn_guide.studies import profiling


def _m(samples, **kw):
    return measurement.Measurement("x", list(samples), "cold-L2 events", **kw)


def test_statistics_from_known_samples():
    m = _m([1.0, 2.0, 3.0, 4.0, 100.0], flops=4e9, bytes=2e9)
    assert m.median_ms == 3.0
    assert m.q1_ms == 2.0 and m.q3_ms == 4.0 and m.iqr_ms == 2.0
    assert m.min_ms == 1.0 and m.n == 5
    assert math.isclose(m.tflops, 4e9 / 3e-3 / 1e12)
    assert math.isclose(m.gbps, 2e9 / 3e-3 / 1e9)
    # the outlier moves the mean but not the median: the median is what rates use
    assert m.median_ms < sum(m.samples_ms) / m.n


def test_percent_of_ceilings():
    m = _m([1.0], flops=1e12 * 1e-3 * 500)  # 500 TFLOP/s at 1 ms
    ceil = ceilings.Ceilings(copy_gbps=4000, bf16_tflops=1000, copy=m, matmul=m)
    assert math.isclose(m.percent_of(ceil)["compute"], 50.0)


def test_round_trip_through_dict():
    m = _m([1.0, 1.1, 1.2], flops=1.0, params={"impl": "a", "size": 3}, host_samples_ms=[0.01, 0.02, 0.03])
    again = measurement.Measurement.from_dict(m.to_dict())
    assert again.samples_ms == m.samples_ms and again.params == m.params and again.median_ms == m.median_ms
    assert again.host_median_ms == 0.02


def test_spread_and_drift_warnings():
    steady = [1.0] * 30
    assert measurement.spread_warnings(steady) == []
    drifting = [1.0] * 10 + [1.05] * 10 + [1.2] * 10
    assert any("drifted +20%" in w for w in measurement.spread_warnings(drifting))
    noisy = [1.0, 2.0] * 15
    assert any("large spread" in w for w in measurement.spread_warnings(noisy))


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="l2 must be one of"):
        bench.benchmark(lambda: None, label="f", l2="warm")
    with pytest.raises(ValueError, match="cannot flush L2"):
        bench.benchmark(lambda: None, label="f", l2="cold", cuda_graph=True)
    with pytest.raises(BenchmarkError, match="expected a callable"):
        bench.benchmark(42, label="f", l2="hot")
    with pytest.raises(ValueError, match="two increasing positive lengths"):
        events.measure_launch_overhead(cycles=(100_000, 2_000))


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_benchmark_without_gpu_names_the_missing_gpu():
    with pytest.raises(NoGPUError, match="benchmark 'f' needs a CUDA GPU"):
        bench.benchmark(lambda: None, label="f", l2="hot")
    with pytest.raises(NoGPUError, match="measure_launch_overhead needs a CUDA GPU"):
        events.measure_launch_overhead()


def test_empty_sweep_is_an_error():
    with pytest.raises(ValueError, match="no problem sizes"):
        sweep.sweep([], {"a": lambda x: None}, l2="hot")
    with pytest.raises(ValueError, match="no implementations"):
        sweep.sweep([1], {}, l2="hot")


def test_quantile_interpolates():
    assert measurement.sorted_quantile([0.0, 10.0], 0.25) == 2.5
    assert math.isnan(measurement.sorted_quantile([], 0.5))


def test_median_ci_uses_order_statistics_and_covers_the_true_median():
    assert measurement.median_ci(list(range(1, 101))) == (40, 61)  # ranks 40 and 61 of 100
    assert measurement.median_ci([5.0]) == (5.0, 5.0)
    with pytest.raises(ValueError, match="at least one sample"):
        measurement.median_ci([])
    with pytest.raises(ValueError, match="confidence"):
        measurement.median_ci([1.0], confidence=0.9)
    # skewed timings (exponential, true median ln 2): the 95% interval covers it ~95% of the time
    import random

    rng = random.Random(0)
    trials = 2000
    hits = sum(
        lo <= math.log(2) <= hi
        for lo, hi in (measurement.median_ci([rng.expovariate(1.0) for _ in range(50)]) for _ in range(trials))
    )
    assert 0.93 <= hits / trials <= 0.985


def test_timing_stops_once_the_median_is_precise_or_the_budget_is_spent(monkeypatch):
    import random

    rng = random.Random(1)
    batches = []

    def fake_time_each(fn, flush, reps, label, spin_ms, spread):
        batches.append(reps)
        return [1.0 + spread * rng.uniform(-1, 1) for _ in range(reps)]

    for spread, reps, precision in ((0.001, 2000, 0.005), (0.05, 2000, 0.005), (0.05, 300, 0.005), (0.001, 300, None)):
        batches.clear()
        monkeypatch.setattr(bench, "time_each", lambda *a, s=spread: fake_time_each(*a, s))
        samples = bench._time_until_precise(None, None, reps, "x", 0.0, 20, precision)
        if precision is None:
            assert batches == [reps]  # no early stop: the whole budget, in one batch
        elif spread < 0.01:
            assert batches == [32]  # a steady kernel: the first batch already pins the median
        elif reps == 300:
            assert len(samples) == 300 and batches == [32, 32, 64, 128, 44]  # noisy: the budget caps it
        else:
            lo, hi = measurement.median_ci(samples)
            assert (hi - lo) / 2 <= 0.005 * statistics.median(samples) and 32 < len(
                samples
            ) < 2000  # stopped when precise
            before = measurement.median_ci(samples[: len(samples) - batches[-1]])  # ... and not a batch sooner
            assert (before[1] - before[0]) / 2 > 0.005 * statistics.median(samples[: len(samples) - batches[-1]])


def test_kernel_samples_subtract_the_launch_cost_and_keep_it():
    samples, cost, notes = events.kernel_samples([0.0340, 0.0338, 0.0342], 0.0036)
    assert cost == 0.0036 and notes == []
    assert [round(x, 7) for x in samples] == [0.0304, 0.0302, 0.0306]
    m = _m(samples, launch_cost_ms=cost)
    # the raw event median is recoverable, from the measurement and from its record
    assert math.isclose(m.event_median_ms, 0.0340) and math.isclose(m.median_ms, 0.0304)
    again = measurement.Measurement.from_dict(m.to_dict())
    assert again.launch_cost_ms == cost and math.isclose(again.event_median_ms, 0.0340)
    versioned = measurement.Measurement.from_dict(_m([1.0], timing_method=measurement.TIMING_METHOD).to_dict())
    assert versioned.timing_method == measurement.TIMING_METHOD
    assert "launch cost" in str(m)


def test_a_call_that_is_mostly_launch_cost_is_flagged():
    samples, cost, notes = events.kernel_samples([0.0100] * 10, 0.0036)  # 36% of the event time
    assert cost == 0.0036 and len(notes) == 1 and "cuda_graph=True" in notes[0]
    _, _, notes = events.kernel_samples([0.0200] * 10, 0.0036)  # 18%: fine
    assert notes == []


@pytest.mark.parametrize("event_ms", [[0.0050] * 10, [0.0100] * 9 + [0.0030], [0.0030, 0.0032, 0.0020]])
def test_a_call_too_short_to_time_is_never_a_non_positive_time(event_ms):
    # half or more of the event time is launch cost, or a sample would go to zero or below
    samples, cost, notes = events.kernel_samples(event_ms, 0.0036)
    assert samples == event_ms and cost == 0.0 and min(samples) > 0
    assert len(notes) == 1 and notes[0].startswith("too short to time per call") and "upper bound" in notes[0]


@pytest.mark.parametrize("bad_us", [-1.0, 25.0])
def test_an_untrusted_launch_cost_is_not_subtracted_and_says_so(bad_us):
    samples, cost, notes = events.kernel_samples([0.05, 0.06], bad_us / 1e3)
    assert samples == [0.05, 0.06] and cost == 0.0
    assert len(notes) == 1 and "not subtracted" in notes[0]


def test_a_record_without_a_launch_cost_reads_as_raw_events():
    d = _m([1.0, 2.0]).to_dict()
    del d["launch_cost_ms"]  # records written before the harness subtracted it
    m = measurement.Measurement.from_dict(d)
    assert m.launch_cost_ms == 0.0 and m.event_median_ms == m.median_ms


def test_precision_is_judged_on_the_kernel_time(monkeypatch):
    # events of 10 ± 0.04 (±0.4%, precise enough raw); minus a launch cost of 5 the same spread
    # is ±0.8% of the kernel time, so the run must go on past the first batch
    import random

    rng = random.Random(2)
    monkeypatch.setattr(
        bench, "time_each", lambda fn, flush, reps, *a: [10 + 0.08 * rng.uniform(-1, 1) for _ in range(reps)]
    )
    raw = bench._time_until_precise(None, None, 4000, "x", 0.0, 20, 0.005)
    corrected = bench._time_until_precise(None, None, 4000, "x", 0.0, 20, 0.005, offset_ms=5.0)
    assert len(raw) == 32 and len(corrected) > 32


# --- on the GPU (marker gpu; skipped without one) ---


@pytest.mark.gpu
def test_harness_rejects_raising_functions_and_wrong_shapes():
    def boom():
        raise RuntimeError("kaput")

    with pytest.raises(BenchmarkError, match="raised RuntimeError: kaput"):
        bench.benchmark(boom, label="boom", l2="hot")
    x = torch.ones(4, device="cuda")
    with pytest.raises(BenchmarkError, match="output shape"):
        bench.benchmark(lambda: x * 2, label="shape", l2="hot", expect_shape=(5,))


@pytest.mark.gpu
def test_harness_agrees_with_the_profiler(small_conv):
    problem = conv.ConvProblem(n=16)
    inputs = problem.make_inputs()
    fused = conv.conv_bias_relu_graph(problem, inputs)
    launch = fused.bind(fused.pack(**inputs))
    m = bench.benchmark(launch, label="conv", l2="cold", budget_ms=200)
    prof = profiling.profile_kernels(launch, calls=30, l2="cold")
    assert abs(m.median_ms / prof.per_call_ms - 1) < 0.10
    # the subtracted launch cost is this process's calibration, and it brings events closer to the kernels
    assert m.launch_cost_ms == events.launch_cost()["overhead_us"] / 1e3 > 0 and "launch cost" in m.mode
    assert m.timing_method == measurement.TIMING_METHOD
    assert abs(m.median_ms - prof.per_call_ms) < abs(m.event_median_ms - prof.per_call_ms)


@pytest.mark.gpu
def test_raw_events_and_graph_replays_subtract_nothing(small_conv):
    inputs, fused = small_conv
    launch = fused.bind(fused.pack(**inputs))
    raw = bench.benchmark(launch, label="conv raw", l2="cold", budget_ms=30, subtract_launch_cost=False)
    assert raw.launch_cost_ms == 0 and raw.mode == "cold-L2 events" and raw.event_median_ms == raw.median_ms
    replay = bench.benchmark(launch, label="conv graph", l2="hot", budget_ms=30, cuda_graph=True, calls_per_graph=10)
    assert replay.launch_cost_ms == 0 and replay.mode.startswith("cuda-graph")


@pytest.mark.gpu
def test_capture_replays_new_data(small_conv):
    inputs, fused = small_conv
    graph = cudagraphs.capture(fused.bind(fused.pack(**inputs)))
    new = SMALL_CONV.make_inputs(seed=99)
    inputs["x"].copy_(new["x"])
    check.poison(inputs["y"])
    graph.replay()
    ref = check.reference(SMALL_CONV.torch_forward, new["x"], inputs["w"], inputs["b"])
    assert check.check(inputs["y"], ref).passed


@pytest.mark.gpu
def test_benchmark_reads_the_clocks_and_host_time_on_an_idle_queue(small_conv):
    inputs, fused = small_conv
    m = bench.benchmark(fused.bind(fused.pack(**inputs)), label="conv", l2="cold", budget_ms=20)
    assert "read_with" in m.clocks
    assert len(m.host_samples_ms) == min(m.n, 20) and min(m.host_samples_ms) > 0


@pytest.mark.gpu
def test_a_call_too_short_to_time_is_never_recorded_as_a_non_positive_time():
    x = torch.empty(1024, device="cuda")
    m = bench.benchmark(lambda: x.zero_(), label="tiny", l2="hot")
    assert m.median_ms > 0 and min(m.samples_ms) > 0


@pytest.mark.gpu
def test_benchmark_joins_the_running_record_and_ceilings_keep_their_trials_out(small_conv):
    from cudnn_guide import collector
    from cudnn_guide.measure import ceilings
    from cudnn_guide.report import records

    inputs, fused = small_conv
    records.begin()
    try:
        ceilings.measure_read_bandwidth(mib=64)  # paused: trial timings
        m = bench.benchmark(fused.bind(fused.pack(**inputs)), label="conv", l2="hot", budget_ms=10)
        assert records.page().measurements == [m]
    finally:
        collector.stop()


def test_a_sweep_relative_to_one_implementation_and_its_plot():
    import matplotlib

    matplotlib.use("Agg")

    def m(impl, k, ms):
        return measurement.Measurement(impl, [ms] * 5, "fake", params={"impl": impl, "K": k})

    res = sweep.SweepResult(
        "K",
        [m("bare", 64, 1.0), m("fused", 64, 1.5), m("chain", 64, 3.0), m("bare", 128, 2.0), m("fused", 128, 2.2)],
    )
    rel = res.relative("bare")
    assert rel == {"fused": {64: 1.5, 128: pytest.approx(1.1)}, "chain": {64: 3.0}}  # chain has no K=128: left out
    ax = report.plot_relative(res, "bare", title="t")
    assert [line.get_label() for line in ax.lines[:2]] == ["fused / bare", "chain / bare"]
    assert list(ax.lines[0].get_xdata()) == [64, 128] and ax.get_ylabel() == "time relative to bare"


def test_a_sweeps_verdicts_are_summarised_per_baseline():
    from cudnn_guide.measure.compare import Comparison

    def cmp(versus):
        v = {
            b: {"value": x, "low": x * 0.98, "high": x * 1.02, "verdict": verdict} for b, (x, verdict) in versus.items()
        }
        return Comparison("cudnn", 7, {}, {}, v, 0.01)

    def m(impl, s):
        return measurement.Measurement(impl, [1.0] * 5, "fake", params={"impl": impl, "S": s})

    res = sweep.SweepResult(
        "S",
        [m(i, s) for s in (1, 2) for i in ("cudnn", "flash", "math", "gone")],
        {1: cmp({"flash": (1.3, "faster"), "math": (2.0, "faster")}), 2: cmp({"flash": (1.0, "tie")})},
    )
    assert res.describe_verdicts().splitlines() == [
        "against flash: speed-up 1.00× to 1.30× (faster at 1, tie at 1 of 2 sizes)",
        "against math: speed-up 2.00× to 2.00× (faster at 1 of 2 sizes)",
        "against gone: unavailable at every size",
    ]


def test_a_sweep_from_hand_made_comparisons_tables_plots_and_judges_them(monkeypatch):
    import matplotlib

    from cudnn_guide.measure import compare

    matplotlib.use("Agg")

    def fake(fn, *, label, params, **kw):
        base = {"cudnn": 0.08, "flex": 0.10}[params["impl"].removesuffix(" (repeat)")] * (1 + 0.5 * params["w"] / 1024)
        return measurement.Measurement(label, [base] * 5, "fake", params=dict(params))

    fake_benchmark(monkeypatch, fake)
    by_w = {
        w: compare.compare({"cudnn": None, "flex": None}, candidate="cudnn", l2="cold", rounds=5, params={"w": w})
        for w in (128, 1024)
    }
    res = sweep.SweepResult.from_comparisons("window", by_w)
    assert {(m.params["impl"], m.params["window"]) for m in res.measurements} == {
        (i, w) for i in ("cudnn", "flex") for w in (128, 1024)
    }
    assert all("window" not in m.params for c in by_w.values() for m in c.measurements.values())  # copies, not edits
    assert [(r["window"], r["baseline"], r["verdict"]) for r in res.verdicts()] == [
        (128, "flex", "faster"),
        (1024, "flex", "faster"),
    ]
    assert res.get("flex", 1024).median_ms == pytest.approx(0.15)
    ax = report.plot_sweep(res, "median_us", logx=True)
    assert sorted(line.get_label() for line in ax.lines if not line.get_label().startswith("_")) == ["cudnn", "flex"]


def test_the_peak_memory_of_a_call_is_counted_above_what_was_allocated_before(monkeypatch):
    state = {"allocated": 3 * 2**20, "peak": 9 * 2**20}
    seen = []

    def call():
        seen.append("call")
        state["peak"] = max(state["peak"], state["allocated"] + 5 * 2**20)  # 5 MiB more at its peak

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: seen.append("sync"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: state["allocated"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: state.update(peak=state["allocated"]))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: state["peak"])
    assert bench.peak_memory_mib(call) == 5.0  # the earlier 9 MiB peak was reset first
    assert seen == ["sync", "call", "sync"]


def test_a_time_per_call_becomes_items_per_second_with_the_interval_inverted():
    est = {"value": 2000.0, "low": 1000.0, "high": 4000.0}  # µs per step
    rate = measurement.per_second(est, 16384)  # tokens per step
    assert rate == {"value": 16384 / 2e-3, "low": 16384 / 4e-3, "high": 16384 / 1e-3}
    assert rate["low"] < rate["value"] < rate["high"]


def test_a_benchmarks_first_call_is_made_before_its_measured_block(monkeypatch):
    # issue 34: the untimed check holds no alone turn in the docs build's lanes (collector.measuring is that turn)
    from cudnn_guide import collector

    seen = []
    monkeypatch.setattr(
        bench, "first_call", lambda fn, label, shape=None: seen.append(("check", collector.measuring_now()))
    )
    monkeypatch.setattr(bench, "l2_flush_buffer", lambda: seen.append(("timed", collector.measuring_now())) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        bench.benchmark(lambda: None, label="x", l2="cold")
    assert seen == [("check", False), ("timed", True)]
