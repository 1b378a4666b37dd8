"""Several comparisons, each also raced in back-to-back loops, as table rows and as sentences: what a page
such as plot_19 shows of GPU time against a loop's wall clock."""

from __future__ import annotations

import pytest

from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.report import comparison_rows, loop_rows
from cudnn_guide.report.prose import gpu_and_loop_text, loop_stretch_text, span
from cudnn_guide.report.tables import GPU_US, HOST_US, LOOP_US


def _v(value, verdict):
    return {"value": value, "low": value - 0.05, "high": value + 0.05, "verdict": verdict}


def _comparison(ms, versus, tie_band, *, host=None, flops=1e9, wall=None, rounds=7):
    """A comparison whose every round took ``ms[name]`` (so each estimate is exactly that)."""
    medians = {n: [t] * rounds for n, t in ms.items()}
    measured = {
        n: Measurement(n, [t] * 3, "cold", flops=flops, host_samples_ms=list((host or {}).get(n, [])))
        for n, t in ms.items()
    }
    return Comparison("cand", rounds, measured, medians, versus, tie_band, wall=wall)


def _raced(gpu_ms, loop_ms, gpu_versus, loop_versus, host=None):
    wall = _comparison(loop_ms, loop_versus, 0.02, flops=None)
    return _comparison(gpu_ms, gpu_versus, 0.01, host=host, wall=wall)


@pytest.fixture
def host_bound():
    """The candidate: 100 µs on the GPU, 300 µs a call in a loop, 150 µs of host time per call."""
    return _raced(
        {"cand": 0.1, "A": 0.09, "B": 0.2},
        {"cand": 0.3, "A": 0.095, "B": 0.22},
        {"A": _v(0.9, "slower"), "B": _v(2.0, "faster")},
        {"A": _v(0.32, "slower"), "B": _v(0.73, "slower")},
        host={"cand": [0.15], "A": [0.01]},
    )


def test_comparison_rows_give_time_rate_and_speed_up_per_contender(host_bound):
    rows = comparison_rows({"causal": host_bound}, key="mask", speedup="cand's speed-up")
    assert [list(r) for r in rows] == [["mask", "implementation", "µs", "TFLOP/s", "cand's speed-up"]] * 3
    assert [r["implementation"] for r in rows] == ["cand", "A", "B"] and rows[0]["cand's speed-up"] == ""
    assert rows[1]["µs"] == pytest.approx(90) and rows[0]["TFLOP/s"] == pytest.approx(10)
    assert rows[2]["cand's speed-up"] == "2.00× (1.95–2.05) faster"


def test_loop_rows_give_host_gpu_and_loop_times_and_both_verdicts_with_their_bands(host_bound):
    rows = loop_rows({"causal": host_bound, "window": host_bound}, key="mask")
    assert [r["mask"] for r in rows] == ["causal"] * 3 + ["window"] * 3
    cand, a, b = rows[:3]
    assert list(cand) == ["mask", "implementation", HOST_US, GPU_US, LOOP_US, "GPU verdict", "loop verdict"]
    assert cand[HOST_US] == pytest.approx(150) and b[HOST_US] is None  # B's host time was not measured
    assert a[GPU_US] == pytest.approx(90) and a[LOOP_US] == pytest.approx(95)
    assert cand["GPU verdict"] == cand["loop verdict"] == ""
    assert a["GPU verdict"] == "0.90× (0.85–0.95) slower, tie band ±1.0%"
    assert a["loop verdict"] == "0.32× (0.27–0.37) slower, tie band ±2.0%"


def test_span_is_one_number_when_both_ends_print_the_same():
    assert span([2.34, 1.21], ".1f") == "1.2–2.3" and span([1.21, 1.24, 1.23], ".1f") == "1.2"
    assert span([0.5], ".2f") == "0.50"


def test_gpu_and_loop_text_gives_the_loop_verdict_its_own_band_and_rounds(host_bound):
    gpu_only = "1.11× slower than A (speed-up 0.90×, in-run 95% interval 0.85–0.95; tie band ±1.0%, 7 rounds)"
    assert gpu_and_loop_text(host_bound) == (
        f"{gpu_only}; in a back-to-back loop, host time included: slower (0.32×, 0.27–0.37; loop tie band "
        "±2.0%, 7 rounds)"
    )
    host_bound.wall = None
    assert gpu_and_loop_text(host_bound, "A") == gpu_only


def test_a_candidate_the_loop_stretches_most_and_whose_host_time_exceeds_its_gpu_time_is_host_bound(host_bound):
    assert loop_stretch_text(host_bound) == (
        "cand runs at 10 TFLOP/s; in GPU time per call it is 1.11× slower than A (speed-up 0.90×, in-run 95% "
        "interval 0.85–0.95; tie band ±1.0%, 7 rounds). In this run, a plain eager loop of cand calls, host "
        "time included, is 3.1× slower than a loop of A calls (0.32×, 0.27–0.37; loop tie band ±2.0%, 7 "
        "rounds; the same verdict as GPU time per call). In the loop a call takes 300 µs of wall clock against "
        "100 µs of GPU time (medians of round medians): 3.00× its GPU time. The other contenders' loops take "
        "1.06× (A) to 1.10× (B) of theirs: the loop stretches it more than any other, and its host time per "
        "call (150 µs) lies between its GPU time and its loop's time per call: the host bounds its loop."
    )


def test_a_candidate_inside_the_others_stretch_is_not_called_host_bound():
    c = _raced(
        {"cand": 0.1, "A": 0.09, "B": 0.2},
        {"cand": 0.12, "A": 0.095, "B": 0.3},
        {"A": _v(0.9, "tie"), "B": _v(2.0, "faster")},
        {"A": _v(1.0, "tie"), "B": _v(2.5, "faster")},
        host={"cand": [0.05], "A": [0.02], "B": [0.01]},
    )
    text = loop_stretch_text(c)
    assert "is a tie with a loop of A calls" in text and "while in GPU time per call" not in text
    assert text.endswith(
        "1.06× (A) to 1.50× (B) of theirs: the loop stretches some of the others as much or more, so this does "
        "not show the host bounding it. B, with 10 µs of host time per call, takes 1.50× in its loop."
    )
    c.wall.versus["A"] = _v(1.6, "faster")
    c.wall.round_medians_ms["cand"] = [0.1] * 7  # stretch 1.00: below every other
    text = loop_stretch_text(c)
    assert "is 1.6× faster than a loop of A calls" in text and "while in GPU time per call it is a tie" in text
    assert text.endswith("of theirs: the loop stretches it less than any other.")
