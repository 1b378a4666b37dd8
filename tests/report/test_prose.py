"""Conclusions render as escaped HTML paragraphs and lists, and as wrapped text in a terminal."""

from __future__ import annotations

import pytest

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
