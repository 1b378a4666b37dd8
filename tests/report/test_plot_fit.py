"""Every visible label of a plot lies inside its figure, however long the contenders' names.

Pages draw :func:`~cudnn_guide.report.plot_comparison` on axes of their own (``figsize=(8, 3.5)``,
or two panels of ``figsize=(12, 4)``, constrained layout); long names such as "PyTorch SDPA, flash
backend (FlashAttention-2), padded" used to push the axes so far right that the title and the x
label ran off the figure's right edge.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
from matplotlib.text import Text

from cudnn_guide import report
from cudnn_guide.measure import measurement

LONG = {
    "cuDNN frontend SDPA, packed THD (ragged offsets), varlen backward": 210.0,
    "PyTorch SDPA, flash backend (FlashAttention-2), padded": 455.0,
    "FlashAttention-4 (flash-attn-4 4.0.0b36), varlen backward": 190.0,
    "PyTorch SDPA, efficient backend (memory-efficient attention), padded to the longest sequence": 610.0,
    "torch.compile(flex_attention), block mask, packed document mask": 330.0,
    "cuDNN frontend SDPA, padded (control)": 260.0,
}
CANDIDATE = "cuDNN frontend SDPA, packed THD (ragged offsets), varlen backward"
TITLE = "causal attention backward over 16 sequences, 32768 real tokens, 16 heads × 128, bfloat16, on NVIDIA H200"


class _Comparison:
    """What :func:`plot_comparison` reads of a :class:`~cudnn_guide.measure.compare.Comparison`."""

    def __init__(self, times_us, candidate, rounds=11, flops=4e12):
        self.candidate = candidate
        self.rounds = rounds
        self.times_us = times_us
        self.measurements = {
            n: measurement.Measurement(n, [t * 1e-3] * 5, "cold-L2 events", flops=flops) for n, t in times_us.items()
        }

    def estimate(self, name, unit="µs", scale=1.0):
        us = self.times_us[name]
        lo, hi = 0.97 * us, 1.04 * us
        if unit == "µs":
            return {"value": us, "low": lo, "high": hi}
        if unit == "TFLOP/s":
            rate = self.measurements[name].flops / 1e12 / 1e-6
            return {"value": rate / us, "low": rate / hi, "high": rate / lo}
        raise ValueError(unit)


def _drawn_tick_labels(axis):
    """The tick labels matplotlib draws: those of ticks inside the view interval."""
    lo, hi = sorted(axis.get_view_interval())
    slack = 1e-9 * max(abs(lo), abs(hi), 1.0)
    drawn, hidden = set(), set()
    for tick in axis.get_major_ticks() + axis.get_minor_ticks():
        inside = lo - slack <= tick.get_loc() <= hi + slack
        for label in (tick.label1, tick.label2):
            (drawn if inside else hidden).add(id(label))
    return drawn, hidden


def _texts(fig):
    """Every Text artist of ``fig`` that is visible, says something and is drawn."""
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            hidden |= _drawn_tick_labels(axis)[1]
    return [
        t
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and id(t) not in hidden and t.get_figure() is not None
    ]


def _assert_inside(fig):
    fig.canvas.draw()
    box = fig.bbox
    outside = []
    for t in _texts(fig):
        e = t.get_window_extent()
        if e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1:
            outside.append(f"{t.get_text()!r}: {e.bounds} outside {box.bounds}")
    assert not outside, "\n".join(outside)
    for ax in fig.axes:  # the x label clears the offset text ("1e6") at the axis's right end
        offset = ax.xaxis.get_offset_text()
        if offset.get_visible() and offset.get_text():
            assert not ax.xaxis.label.get_window_extent().overlaps(offset.get_window_extent()), ax.get_xlabel()
        offset = ax.yaxis.get_offset_text()
        if offset.get_visible() and offset.get_text():
            assert not ax.title.get_window_extent().overlaps(offset.get_window_extent()), ax.get_title()


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("logx", [False, True])
@pytest.mark.parametrize("unit", ["µs", "TFLOP/s"])
def test_a_comparison_on_a_pages_own_axes_keeps_its_labels_inside_the_figure(unit, logx):
    fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
    c = _Comparison(LONG, CANDIDATE)
    report.plot_comparison(c, unit, ax=ax, logx=logx, xlabel=f"{unit} per backward call", title=TITLE)
    _assert_inside(fig)


def test_two_comparisons_side_by_side_keep_their_labels_inside_the_figure():
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
    for ax, mask in zip(axes, ("causal", "sliding window of 1024 keys with 64 sink tokens and a document mask")):
        report.plot_comparison(
            _Comparison(LONG, CANDIDATE),
            "TFLOP/s",
            ax=ax,
            xlabel="TFLOP/s of visible pairs",
            title=f"{mask}: 8×16 heads × 8192 tokens, d=128",
        )
    _assert_inside(fig)


def test_a_comparison_on_its_own_figure_keeps_its_labels_inside_and_clears_the_offset_text():
    c = _Comparison(LONG, CANDIDATE)
    tokens = 32768

    def tokens_per_s(est):  # a rate in the millions: matplotlib writes "1e6" at the axis's end
        return {
            "value": tokens / (est["value"] * 1e-6),
            "low": tokens / (est["high"] * 1e-6),
            "high": tokens / (est["low"] * 1e-6),
        }

    ax = report.plot_comparison(c, per=tokens_per_s, xlabel="tokens per second, training step", title=TITLE)
    _assert_inside(ax.figure)
    fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
    report.plot_comparison(c, per=tokens_per_s, ax=ax, xlabel="tokens per second, training step", title=TITLE)
    _assert_inside(fig)


def test_long_names_are_wrapped_but_keep_their_order_colours_and_values():
    import matplotlib.colors

    c = _Comparison(LONG, CANDIDATE)
    ax = report.plot_comparison(c, "µs", title="t")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    names = sorted(LONG, key=LONG.get)  # a time: the shortest at the top
    assert [label.replace("\n", " ") for label in labels] == names
    assert all(len(line) <= 32 for label in labels for line in label.splitlines())
    assert [p.get_width() for p in ax.patches] == [LONG[n] for n in names]
    green = matplotlib.colors.to_rgb("#76b900")
    assert [p.get_facecolor()[:3] == green for p in ax.patches] == [n == CANDIDATE for n in names]
    assert ax.get_title() == "t" and ax.yaxis_inverted()
    short = report.plot_comparison(_Comparison({"cudnn": 1.0, "torch": 2.0}, "cudnn"), "µs", title="t")
    assert [t.get_text() for t in short.get_yticklabels()] == ["cudnn", "torch"]  # short names as given
    assert "\n" not in short.get_xlabel()


def test_the_other_plots_keep_long_titles_and_labels_inside_the_figure():
    ms = [
        measurement.Measurement(
            f"{impl}@{s}",
            [s * k * 0.95, s * k, s * k * 1.05],
            "cold-L2 events",
            flops=1e9,
            params={"impl": impl, "size": s},
        )
        for k, impl in ((1.0, "PyTorch SDPA, flash backend (FlashAttention-2), padded"), (2.0, "cuDNN frontend"))
        for s in (1024, 2048, 4096)
    ]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    report.plot_lines(ms, x="size", metric="tflops", logx=True, ax=axes[0], title=TITLE)
    report.plot_bars(ms, x="size", metric="median_us", ax=axes[1], title=TITLE)
    _assert_inside(fig)
