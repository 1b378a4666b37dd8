"""Plots of measurements: the median of each implementation as a line with its inter-quartile band.

The measure layer returns results; every plot of them lives here: :func:`plot_sweep` and
:func:`plot_relative` of a :class:`~cudnn_guide.measure.sweep.SweepResult`, :func:`plot_comparison`
of a :class:`~cudnn_guide.measure.compare.Comparison`, :func:`plot_plans` of an autotuning result.

Every plot keeps its words inside its figure, on axes of its own or on a page's (a panel of
``plt.subplots``): a contender's name longer than :data:`NAME_WIDTH` characters is wrapped onto
more lines (on a tick or in a legend), a title or an axis label wider than the room its axes will
have is wrapped too, and an x label moves down clear of the axis's offset text (``1e6``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.report.tables import METRICS

__all__ = ["NAME_WIDTH", "plot_bars", "plot_comparison", "plot_lines", "plot_plans", "plot_relative", "plot_sweep"]

NAME_WIDTH = 30
"""The most characters on one line of a name on a tick or in a legend; a longer name is wrapped."""

_NUMBER_TICKS_PT = 36.0
"""What an axis of numbers takes beside its axes, in points: its tick labels and its label."""
_PADS_PT = 30.0
"""Layout pads, ticks and an end tick label's overhang, in points, across an axes' width or height."""


def _is_math(line: str) -> bool:
    """Whether matplotlib renders ``line`` as mathtext (an even number of unescaped ``$``): never split."""
    dollars = line.count("$") - line.count(r"\$")
    return dollars > 0 and dollars % 2 == 0


def _wrap_name(name: Any) -> str:
    """``name`` as text, wrapped to :data:`NAME_WIDTH` characters a line (unchanged when it fits)."""
    return "\n".join(
        line
        if len(line) <= NAME_WIDTH or _is_math(line)
        else "\n".join(textwrap.wrap(line, NAME_WIDTH, break_on_hyphens=False))
        for line in str(name).split("\n")
    )


def _width_pt(text: str, prop: Any) -> float:
    """The width of ``text``'s widest line in points, in the font ``prop``."""
    from matplotlib.textpath import TextToPath

    measure = TextToPath().get_text_width_height_descent
    return max((measure(line, prop, ismath=False)[0] for line in text.split("\n") if line), default=0.0)


def _wrap_to(text: str, room_pt: float, prop: Any) -> str:
    """``text`` wrapped at spaces so that no line is wider than ``room_pt`` points (unchanged when it fits)."""
    if not text or _width_pt(text, prop) <= room_pt:
        return text
    out: list[str] = []
    for line in text.split("\n"):
        width = _width_pt(line, prop)
        if width <= room_pt or _is_math(line):
            out.append(line)
            continue
        chars = max(12, int(len(line) * room_pt / width))
        while True:
            lines = textwrap.wrap(line, chars, break_on_hyphens=False) or [line]
            if chars <= 12 or all(_width_pt(part, prop) <= room_pt for part in lines):
                break
            chars -= 2
        out.extend(lines)
    return "\n".join(out)


def _panel_pt(ax: Any) -> tuple[float, float]:
    """The width and height in points of the part of the figure given to ``ax``: its grid cells, or its box."""
    fig = ax.get_figure()
    width, height = fig.bbox.width * 72 / fig.dpi, fig.bbox.height * 72 / fig.dpi
    spec = ax.get_subplotspec()
    if spec is None:
        box = ax.get_position()
        return width * box.width, height * box.height
    grid = spec.get_gridspec()
    nrows, ncols = grid.get_geometry()
    wide = list(grid.get_width_ratios() or [1] * ncols)
    tall = list(grid.get_height_ratios() or [1] * nrows)
    return (
        width * sum(wide[c] for c in spec.colspan) / sum(wide),
        height * sum(tall[r] for r in spec.rowspan) / sum(tall),
    )


def _fit(ax: Any, left_pt: float = _NUMBER_TICKS_PT, panel: tuple[float, float] | None = None) -> None:
    """Wrap ``ax``'s title and x label to its axes' width and its y label to their height, all estimated
    from its panel less ``left_pt`` (the y axis's tick labels and label); then clear the x offset text."""
    width, height = panel or _panel_pt(ax)
    across = max(width - left_pt - _PADS_PT, 72.0)
    for text, room in ((ax.title, across), (ax.xaxis.label, across), (ax.yaxis.label, height - 4 * _PADS_PT)):
        text.set_text(_wrap_to(text.get_text(), max(room, 72.0), text.get_fontproperties()))
    _clear_offset_text(ax)


def _clear_offset_text(ax: Any) -> None:
    """Move the x label down past the x axis's offset text (``1e6``, ``+1.2e3``) when it has one: that text
    sits at the axis's right end, at the x label's height."""
    from matplotlib import rcParams
    from matplotlib.ticker import ScalarFormatter

    fmt = ax.xaxis.get_major_formatter()
    if not isinstance(fmt, ScalarFormatter) or not ax.xaxis.label.get_text():
        return
    fmt.set_locs(ax.xaxis.get_majorticklocs())
    if fmt.get_offset():
        clear = rcParams["axes.labelpad"] + 1.3 * ax.xaxis.get_offset_text().get_fontsize()
        ax.xaxis.labelpad = max(ax.xaxis.labelpad, clear)


def _iqr_band(m: Measurement, metric: str) -> tuple[float, float]:
    """The samples' 25th–75th percentile in ``metric``: a time scales with the time, a rate with its
    inverse (so the slow quartile is a rate's lower edge)."""
    _, higher_is_better, getter = METRICS[metric]
    at_median = getter(m)
    if higher_is_better:
        return at_median * m.median_ms / m.q3_ms, at_median * m.median_ms / m.q1_ms
    return at_median * m.q1_ms / m.median_ms, at_median * m.q3_ms / m.median_ms


def plot_lines(
    measurements: Sequence[Measurement],
    *,
    x: str,
    line: str = "impl",
    metric: str = "median_ms",
    ax: Any = None,
    logx: bool = False,
    logy: bool = False,
    title: str = "",
    ceiling: float | None = None,
    ceiling_label: str = "",
) -> Any:
    """Plot ``metric`` against ``params[x]``, one line per ``params[line]``, with an IQR band.

    For time metrics the band spans the 25th–75th percentile of the samples; for rates it is the
    same band converted to the rate. Returns the matplotlib ``Axes``.

    Parameters
    ----------
    measurements
        Measurements with ``params[x]`` and ``params[line]``.
    x
        The ``params`` key on the x axis.
    line
        The ``params`` key naming each line.
    metric
        A key of :data:`METRICS`.
    ax
        Axes to draw on; default a new figure.
    logx
        Base-2 log x axis.
    logy
        Log y axis.
    title
        Axes title.
    ceiling
        Draw this value as a dashed line.
    ceiling_label
        Its legend label.

    Returns
    -------
    Any
        The axes.

    Example
    -------
    >>> ax = plot_lines(result.measurements, x='seq_len', metric='tflops', logx=True)
    """
    import matplotlib.pyplot as plt

    unit, _, getter = METRICS[metric]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    groups: dict[Any, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(m.params.get(line, m.label), []).append(m)
    for name, ms in groups.items():
        if all(isinstance(m.params[x], (int, float)) for m in ms):
            ms = sorted(ms, key=lambda m: m.params[x])  # numeric sizes ascend; named ones keep their given order
        xs = [m.params[x] for m in ms]
        ys = [getter(m) for m in ms]
        lo, hi = zip(*(_iqr_band(m, metric) for m in ms))
        (handle,) = ax.plot(xs, ys, marker="o", label=_wrap_name(name))
        ax.fill_between(xs, lo, hi, alpha=0.25, color=handle.get_color(), linewidth=0)
    if ceiling is not None:
        ax.axhline(ceiling, color="0.4", linestyle="--", linewidth=1, label=ceiling_label or "measured ceiling")
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(unit)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    _fit(ax)
    return ax


def plot_bars(
    measurements: Sequence[Measurement],
    *,
    x: str,
    group: str = "impl",
    metric: str = "median_ms",
    ax: Any = None,
    title: str = "",
) -> Any:
    """Grouped bars: ``metric`` for each ``params[x]`` (a group of bars), one colour per ``params[group]``,
    with the samples' inter-quartile range as error bars.

    Parameters
    ----------
    measurements
        Measurements with ``params[x]`` and ``params[group]``.
    x
        The ``params`` key whose values are the groups along the x axis.
    group
        The ``params`` key naming each bar's colour.
    metric
        A key of :data:`METRICS`.
    ax
        Axes to draw on; default a new figure.
    title
        Axes title.

    Returns
    -------
    Any
        The axes.

    Example
    -------
    >>> plot_bars(measurements, x="pass", metric="tflops")
    """
    import matplotlib.pyplot as plt

    unit, _, getter = METRICS[metric]
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.2), layout="constrained")
    xs = list(dict.fromkeys(m.params[x] for m in measurements))
    groups = list(dict.fromkeys(m.params[group] for m in measurements))
    width = 0.8 / len(groups)
    for i, name in enumerate(groups):
        at = {m.params[x]: m for m in measurements if m.params[group] == name}
        pos = [j + i * width for j, v in enumerate(xs) if v in at]
        ms = [at[v] for v in xs if v in at]
        vals = [getter(m) for m in ms]
        ends = [_iqr_band(m, metric) for m in ms]
        err = [[v - lo for v, (lo, _) in zip(vals, ends)], [hi - v for v, (_, hi) in zip(vals, ends)]]
        ax.bar(pos, vals, width, label=_wrap_name(name), yerr=err, capsize=2)
    ax.set_xticks([j + width * (len(groups) - 1) / 2 for j in range(len(xs))], [_wrap_name(v) for v in xs])
    ax.set_xlabel(x)
    ax.set_ylabel(f"{unit} (error bars: inter-quartile range)")
    if title:
        ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    _fit(ax)
    return ax


def plot_comparison(
    c: Any,
    unit: str = "µs",
    *,
    ax: Any = None,
    title: str = "",
    xlabel: str = "",
    logx: bool = False,
    per: Callable[[dict[str, float]], dict[str, float]] | None = None,
) -> Any:
    """Each contender of a :class:`~cudnn_guide.measure.compare.Comparison` as a horizontal bar: its
    :meth:`~cudnn_guide.measure.compare.Comparison.estimate` in ``unit`` with the 95% interval, the
    candidate in green, the best at the top.

    A name longer than :data:`NAME_WIDTH` characters is wrapped on its tick (in a smaller font, down to
    7 pt, where the rows are too tight for its lines), and the title and the x label are wrapped to
    the room the axes will have, so that on a page's own axes too every word stays inside the figure.

    Parameters
    ----------
    c
        The comparison.
    unit
        ``µs``, ``ms``, ``TFLOP/s`` or ``GB/s``.
    ax
        Axes to draw on; default a new figure.
    title
        Axes title.
    xlabel
        The x label's quantity (default ``unit``); name it when ``per`` converts.
    logx
        Log x axis.
    per
        Maps an estimate to another (e.g. time to tokens per second); its values are then a rate,
        highest first.

    Returns
    -------
    Any
        The axes.

    Example
    -------
    >>> plot_comparison(c, "TFLOP/s", title="causal attention, S=4096")
    """
    import matplotlib.pyplot as plt
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties

    ests = {n: c.estimate(n, unit) for n in c.measurements}
    if per is not None:
        ests = {n: per(e) for n, e in ests.items()}
    higher_is_better = per is not None or "/s" in unit
    names = sorted(ests, key=lambda n: ests[n]["value"], reverse=higher_is_better)
    labels = [_wrap_name(n) for n in names]  # a long name on two or three lines, so the axes keep their room
    tick_font = FontProperties(size=rcParams["ytick.labelsize"])
    tick_lines = max((label.count("\n") + 1 for label in labels), default=1)
    if ax is None:
        extra = 0.16 * max(0, tick_lines - 2) * len(labels)  # the rows grow for names of three lines or more
        _, ax = plt.subplots(figsize=(8, 0.9 + 0.45 * len(c.measurements) + extra), layout="constrained")
    width, height = _panel_pt(ax)
    left = max((_width_pt(label, tick_font) for label in labels), default=0.0) + 12
    vals = [ests[n]["value"] for n in names]
    ends = [sorted((ests[n]["low"], ests[n]["high"])) for n in names]  # a rate's ``per`` may swap them
    err = [[v - lo for v, (lo, _) in zip(vals, ends)], [hi - v for v, (_, hi) in zip(vals, ends)]]
    colors = ["#76b900" if n == c.candidate else "#8c8c8c" for n in names]
    ax.barh(range(len(names)), vals, xerr=err, capsize=3, color=colors)
    ax.set_yticks(range(len(names)), labels)
    ax.invert_yaxis()
    if logx:
        ax.set_xscale("log")
    stat = f"median over {c.rounds} rounds, in-run 95% interval{'; log scale' if logx else ''}"
    ax.set_xlabel(f"{xlabel or unit} ({stat})")
    if _width_pt(ax.get_xlabel(), ax.xaxis.label.get_fontproperties()) > width - left - _PADS_PT:
        ax.set_xlabel(f"{xlabel or unit}\n({stat})")  # the quantity on a line of its own, then how it is summed up
    if title:
        ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    _fit(ax, left, (width, height))
    title_lines = ax.get_title().count("\n") + 1 if ax.get_title() else 0
    above_below = 40.0 + 17.0 * title_lines + 14.0 * (ax.get_xlabel().count("\n") + 1)  # pads, x ticks, words
    row = (height - above_below) / max(1, len(names))
    if tick_lines > 1 and 1.2 * tick_font.get_size_in_points() * tick_lines > row:
        ax.tick_params(axis="y", labelsize=max(7.0, row / (1.2 * tick_lines)))  # a row's lines kept apart, to 7 pt
    return ax


def plot_plans(result: Any, *, title: str = "", ax: Any = None) -> Any:
    """Every plan of an autotuning :class:`~cudnn_guide.measure.autotune.TuneResult`, fastest first: median,
    IQR (thick) and 5–95% (thin); the heuristic's first choice (plan 0) in orange, the winner in green.

    Parameters
    ----------
    result
        The tuning result.
    title
        Axes title.
    ax
        Axes to draw on; default a new figure.

    Returns
    -------
    Any
        The axes.

    Example
    -------
    >>> plot_plans(autotune.tune(built, pack), title="conv→bias→ReLU")
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4.5), layout="constrained")
    for pos, t in enumerate(result.ranked):
        m = t.measurement
        color = "#e8710a" if t.index == 0 else ("#76b900" if pos == 0 else "0.45")
        ax.vlines(pos, m.q1_ms * 1e3, m.q3_ms * 1e3, color=color, linewidth=6, alpha=0.6)
        ax.plot(pos, m.median_ms * 1e3, "o", color=color, markersize=4)
        ax.vlines(pos, m.quantile(0.05) * 1e3, m.quantile(0.95) * 1e3, color=color, linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel(f"plans, fastest first ({result.method})")
    ax.set_ylabel("time per call (µs): median, IQR (thick), 5–95% (thin)")
    if title:
        ax.set_title(title)
    heur = result.rank_of(0)
    if heur is not None:
        ax.annotate(
            f"heuristic's choice: rank {heur}",
            xy=(heur - 1, result.by_index(0).median_ms * 1e3),
            xytext=(len(result.ranked) * 0.3, result.best.median_ms * 1e3 * 1.8),
            arrowprops={"arrowstyle": "->"},
        )
    ax.grid(True, alpha=0.3, which="both")
    _fit(ax)
    return ax


def plot_sweep(result: Any, metric: str = "median_ms", **kwargs: Any) -> Any:
    """A :class:`~cudnn_guide.measure.sweep.SweepResult` as lines: ``metric`` against the sweep's size,
    one line per implementation, with its IQR band (:func:`plot_lines`).

    Parameters
    ----------
    result
        The sweep.
    metric
        ``median_ms``, ``median_us``, ``tflops`` or ``gbps``.
    kwargs
        More keywords for :func:`plot_lines` (``ax``, ``logx``, ``logy``, ``title``, ``ceiling``, ...).

    Returns
    -------
    Any
        The matplotlib ``Axes``.

    Example
    -------
    >>> plot_sweep(sweep.sweep([1024, 2048], impls, x="seq_len", l2="cold"), "tflops", logx=True)
    """
    return plot_lines(result.measurements, x=result.x, line="impl", metric=metric, **kwargs)


def plot_relative(result: Any, to: str, *, ax: Any = None, title: str = "", logx: bool = True) -> Any:
    """A sweep's :meth:`~cudnn_guide.measure.sweep.SweepResult.relative` against its size: one line per
    other implementation, its time over ``to``'s, with 1 dashed.

    Parameters
    ----------
    result
        The sweep.
    to
        The implementation the others are divided by.
    ax
        Axes to draw on; default a new figure.
    title
        Axes title.
    logx
        Log-2 size axis.

    Returns
    -------
    Any
        The matplotlib ``Axes``.

    Example
    -------
    >>> plot_relative(result, "bare matmul", title="what the epilogue costs")
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    for impl, ratios in result.relative(to).items():
        ax.plot(list(ratios), list(ratios.values()), "o-", label=_wrap_name(f"{impl} / {to}"))
    ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(result.x)
    ax.set_ylabel(f"time relative to {to}")
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    _fit(ax)
    return ax
