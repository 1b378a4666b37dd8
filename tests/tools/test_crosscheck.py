from types import SimpleNamespace

import pytest
from crosscheck import split_calls

from cudnn_guide.measure import events

FLUSH = {"vectorized_elementwise_kernel<FillFunctor>"}


def _trace(*names):
    return [SimpleNamespace(name=n) for n in names]


def test_timed_calls_are_what_follows_a_spin_and_its_flush():
    fill, sleep = "vectorized_elementwise_kernel<FillFunctor>", "at::cuda::sleep"
    trace = _trace(
        fill,
        "memset",
        "conv",  # warm-up: no spin before it, not a timed call
        sleep,
        fill,
        "Memset (Device)",
        "conv",  # timed call 1 (spin, then flush)
        sleep,
        "Memset (Device)",
        "conv",  # timed call 2 (hot: spin only)
        fill,
        "Memset (Device)",
        "conv",  # a host-time call after the run: no spin
    )
    calls = split_calls(trace, FLUSH)
    assert [[op.name for op in c] for c in calls] == [["Memset (Device)", "conv"], ["Memset (Device)", "conv"]]


def test_the_old_order_flush_then_spin_also_splits():
    fill, sleep = "vectorized_elementwise_kernel<FillFunctor>", "at::cuda::sleep"
    calls = split_calls(_trace(fill, sleep, "a", "b", fill, sleep, "a", "b"), FLUSH)
    assert [[op.name for op in c] for c in calls] == [["a", "b"], ["a", "b"]]


def test_span_and_busy_per_call():
    from crosscheck import is_spin_kernel, span_and_busy

    def op(start, end):
        return SimpleNamespace(time_range=SimpleNamespace(start=start, end=end))

    span, busy = span_and_busy([[op(0, 1), op(3, 10)], [op(20, 25)]])
    assert span == [10, 5] and busy == [8, 5]  # the gap between memset and kernel counts in the span only
    assert is_spin_kernel("at::cuda::(anonymous namespace)::spin_kernel(long)") and not is_spin_kernel("conv")


# --- on the GPU (marker gpu; skipped without one) ---


@pytest.mark.gpu
def test_same_run_matches_every_timed_call_to_its_kernels(small_conv):
    import crosscheck

    inputs, fused = small_conv
    r = crosscheck.same_run(fused.bind(fused.pack(**inputs)), label="conv", budget_ms=30)
    assert r["calls"] >= 20 and r["kernels_per_call"] >= 1
    assert r["cupti_kernels_median_us"] <= r["cupti_span_median_us"] + 0.5  # busy time fits inside the span
    assert r["events_median_us"] >= 0.9 * r["cupti_span_median_us"]  # events bracket the span


@pytest.mark.gpu
def test_launch_overhead_is_a_few_microseconds_and_explains_the_same_run_gap(small_conv):
    import crosscheck

    lo = events.measure_launch_overhead()
    assert 0.2 < lo["overhead_us"] < 15, lo
    assert 500 < lo["cycles_per_us"] < 3000, lo  # the fitted SM clock is a real clock (MHz)
    assert lo["long_events_us"] > lo["short_events_us"]
    inputs, fused = small_conv
    r = crosscheck.same_run(fused.bind(fused.pack(**inputs)), label="conv", budget_ms=60)
    corrected = r["events_median_us"] - lo["overhead_us"]
    assert r["harness_median_us"] == pytest.approx(r["events_median_us"] - r["launch_cost_us"])
    # the constant explains the gap to within 1.5 µs (this conv is only ~5 µs long). Under the
    # profiler a call's second launch starts later, which the span counts and the calibration
    # (made without a profiler) does not: on the gallery's kernels the two differ by up to about 1 µs.
    assert abs(corrected - r["cupti_span_median_us"]) < 1.5, (r, lo)
    assert r["events_median_us"] - r["cupti_span_median_us"] > 0.5 * lo["overhead_us"], (r, lo)


@pytest.mark.gpu
def test_profile_calls_finds_every_call_made_as_the_harness_makes_it(small_conv):
    import crosscheck

    inputs, fused = small_conv
    r = crosscheck.profile_calls(fused.bind(fused.pack(**inputs)), spin_ms=0.05, calls=20, label="conv")
    assert r["calls"] == 20  # the real spin kernel's name separates the calls
    assert 0 < r["kernels_us"] <= r["span_us"] + 0.5
