"""Conclusions render as escaped HTML paragraphs and lists, and as wrapped text in a terminal."""

from __future__ import annotations

import pytest
from conftest import fake_benchmark

from cudnn_guide.report.prose import Prose, verdict_text


def test_paragraphs_and_list_items_render_as_html_with_every_string_escaped():
    html = Prose("cuDNN <b>won</b> at 3 of 5.", "* one & two", "* three", "After.")._repr_html_()
    assert html == (
        '<div class="guide-prose"><p>cuDNN &lt;b&gt;won&lt;/b&gt; at 3 of 5.</p>'
        "<ul><li>one &amp; two</li><li>three</li></ul><p>After.</p></div>"
    )


def test_the_terminal_form_wraps_at_88_columns():
    text = repr(Prose("word " * 40))
    assert max(len(line) for line in text.splitlines()) <= 88


@pytest.mark.parametrize("bad", [(), ("",), ("  ",), (3,)])
def test_empty_or_non_text_conclusions_are_refused(bad):
    with pytest.raises(ValueError, match="non-empty strings"):
        Prose(*bad)


class _Comparison:
    """What verdict_text reads of a Comparison: describe(), best_baseline, and the loop race (wall)."""

    def __init__(self, wall=None):
        self.best_baseline, self.wall = "FA2", wall

    def describe(self, baseline):
        text = f"1.20× faster than {baseline} (in-run 95% interval 1.10–1.30; tie band ±1.5%, 9 rounds)"
        if self.wall is not None and baseline in self.wall.versus:
            text += "; in a back-to-back loop, host time included: tie (1.01×, 0.98–1.04)"
        return text


def test_a_verdict_without_a_loop_race_is_the_comparisons_own_words():
    from types import SimpleNamespace

    assert verdict_text(_Comparison()) == _Comparison().describe("FA2")
    wall = SimpleNamespace(versus={"FA2": {}}, tie_band=0.03)
    assert verdict_text(_Comparison(wall), "Flex") == _Comparison(wall).describe("Flex")  # no loop for Flex


def test_a_loop_verdict_gets_the_loops_tie_band_inside_its_parenthesis():
    from types import SimpleNamespace

    cmp = _Comparison(SimpleNamespace(versus={"FA2": {}}, tie_band=0.025))
    assert verdict_text(cmp) == (
        "1.20× faster than FA2 (in-run 95% interval 1.10–1.30; tie band ±1.5%, 9 rounds); in a back-to-back "
        "loop, host time included: tie (1.01×, 0.98–1.04; loop tie band ±2.5%)"
    )
    cmp.describe = lambda b: f"a tie with {b}"  # no closing parenthesis: the band gets its own
    assert verdict_text(cmp, "FA2") == "a tie with FA2 (loop tie band ±2.5%)"


def _with_host(host_ms, gpu_us, wall_ms=None):
    from types import SimpleNamespace

    cmp = SimpleNamespace(
        measurements={"step": SimpleNamespace(host_median_ms=host_ms)}, estimate=lambda n: {"value": gpu_us}
    )
    wall = None if wall_ms is None else SimpleNamespace(round_medians_ms={"step": wall_ms})
    return cmp, wall


def test_a_loop_note_compares_host_and_gpu_time_and_adds_the_wall_clock():
    from cudnn_guide.report.prose import loop_note

    cmp, wall = _with_host(2.5, 1800.0, [3.0, 2.9, 3.1, 3.0, 3.2])
    assert loop_note(cmp, "step", wall) == (
        "* step: host 2,500 µs to enqueue one step, GPU 1,800 µs, wall clock 3,000 µs: "
        "host time per step above GPU time per step."
    )
    cmp, _ = _with_host(0.2, 1800.0)
    assert loop_note(cmp, "step").endswith("GPU 1,800 µs: host time per step below GPU time per step.")
    cmp, _ = _with_host(None, 1800.0)
    assert loop_note(cmp, "step") == "* step: host time per step not measured; GPU 1,800 µs."


@pytest.mark.parametrize("names, text", [(["a"], "a"), (["a", "b"], "a and b"), (("a", "b", "c"), "a, b and c")])
def test_names_are_listed_in_words(names, text):
    from cudnn_guide.report.prose import listed

    assert listed(names) == text


def test_the_sdpa_kernel_note_says_when_pytorch_ran_cudnns_own_kernel():
    from cudnn_guide.report.prose import sdpa_kernel_note

    own = sdpa_kernel_note(["CUDNN_ATTENTION"], "compiled")
    assert own.startswith("PyTorch's compiled SDPA here is cuDNN's own attention kernel")
    assert "how the kernel is called" in own
    assert sdpa_kernel_note(["FLASH_ATTENTION", "EFFICIENT_ATTENTION"], "eager") == (
        "PyTorch's eager SDPA here matched, bit for bit: FLASH_ATTENTION and EFFICIENT_ATTENTION."
    )
    assert sdpa_kernel_note([], "eager").endswith("bit for bit: none of the forced backends.")


def _stretched(host_ms, loop_verdict="slower"):
    """A comparison like the flex-attention page's window mask: a tie on the GPU (429 µs each), the candidate's
    loop 510 µs a call, the others' loops 1.05× and 1.16× their GPU time; the candidate's host time ``host_ms``."""
    from cudnn_guide.measure.compare import Comparison
    from cudnn_guide.measure.measurement import Measurement

    def cmp(ms, versus, band, host=None, wall=None, flops=None):
        measured = {
            n: Measurement(n, [t] * 3, "cold", flops=flops, host_samples_ms=[h] if (h := (host or {}).get(n)) else [])
            for n, t in ms.items()
        }
        return Comparison("Flex", 7, measured, {n: [t] * 7 for n, t in ms.items()}, versus, band, wall=wall)

    def v(value, verdict, low, high):
        return {"value": value, "low": low, "high": high, "verdict": verdict}

    wall = cmp(
        {"Flex": 0.510, "FA4": 0.4505, "SDPA": 0.4976},
        {"FA4": v(0.57, loop_verdict, 0.55, 0.63), "SDPA": v(0.98, "tie", 0.95, 1.01)},
        0.148,
    )
    return cmp(
        {"Flex": 0.429, "FA4": 0.429, "SDPA": 0.429},
        {"FA4": v(1.0, "tie", 0.99, 1.01), "SDPA": v(1.0, "tie", 0.99, 1.01)},
        0.01,
        host={"Flex": host_ms, "FA4": 0.2, "SDPA": 0.3},
        wall=wall,
        flops=1e9,
    )


def test_the_loop_stretch_claims_the_host_bound_only_where_the_loop_per_call_is_not_below_the_host_time():
    from cudnn_guide.report.prose import loop_stretch_text

    above_loop = loop_stretch_text(_stretched(0.586))  # 586 µs alone, 510 µs a call in the loop
    assert "the host bounds its loop" not in above_loop
    assert above_loop.endswith(
        "the loop stretches it more than any other. A call in its loop takes longer than its GPU time, so its GPU "
        "waits between calls; its host time for one call on an idle GPU (586 µs) is above the loop's time per "
        "call, so it does not measure what a call costs the host inside the loop."
    )
    within = loop_stretch_text(_stretched(0.480))  # 429 µs < 480 µs ≤ 510 µs
    assert within.endswith(
        "its host time per call (480 µs) lies between its GPU time and its loop's time per call: the host bounds "
        "its loop."
    )
    assert loop_stretch_text(_stretched(0.3)).endswith("the loop stretches it more than any other.")


def test_the_loop_verdict_does_not_follow_from_the_gpu_verdict_with_so():
    from cudnn_guide.report.prose import loop_stretch_text

    text = loop_stretch_text(_stretched(0.3))
    assert "So a plain eager loop" not in text
    assert (
        "(1.00×, in-run 95% interval 0.99–1.01; tie band ±1.0%, 7 rounds). In this run, a plain eager loop of Flex "
        "calls, host time included, is 1.8× slower than a loop of FA4 calls (0.57×, 0.55–0.63; loop tie band "
        "±14.8%, 7 rounds; while in GPU time per call it is a tie)."
    ) in text


def test_a_real_comparisons_loop_tie_band_is_said_once():
    # Comparison.describe names the loop's tie band itself; verdict_text must not add it again
    from cudnn_guide.measure import compare, measurement

    def fake(fn, *, label, **kw):
        gpu, host = (0.120, 0.040) if label.startswith("cudnn") else (0.100, 0.150)
        return measurement.Measurement(label, [gpu] * 5, "cold-L2 events", host_samples_ms=[host] * 3)

    loops = {"cudnn": 0.121, "compiled": 0.152}
    with pytest.MonkeyPatch.context() as mp:
        fake_benchmark(mp, fake)
        mp.setattr(compare, "_time_loop", lambda fn, calls: loops[fn()])
        c = compare.compare(
            {"cudnn": lambda: "cudnn", "compiled": lambda: "compiled"}, candidate="cudnn", l2="cold", rounds=5
        )
    assert c.wall is not None
    assert verdict_text(c).count("loop tie band") == 1
