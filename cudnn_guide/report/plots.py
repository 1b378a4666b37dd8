"""Plots of measurements: the median of each implementation as a line with its inter-quartile band."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.report.tables import METRICS

__all__ = ["plot_bars", "plot_lines"]


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
        # The band is the samples' 25th–75th percentile, mapped through the metric: a time scales
        # with the time, a rate with its inverse (so the slow quartile is the band's lower edge).
        lo, hi = [], []
        for m in ms:
            at_median = getter(m)
            if metric in ("tflops", "gbps"):
                lo.append(at_median * m.median_ms / m.q3_ms)
                hi.append(at_median * m.median_ms / m.q1_ms)
            else:
                lo.append(at_median * m.q1_ms / m.median_ms)
                hi.append(at_median * m.q3_ms / m.median_ms)
        (handle,) = ax.plot(xs, ys, marker="o", label=str(name))
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
        # the IQR mapped through the metric: a rate's slow quartile is its band's lower edge
        ends = [
            sorted((getter(m) * m.q1_ms / m.median_ms, getter(m) * m.q3_ms / m.median_ms))
            if metric not in ("tflops", "gbps")
            else sorted((getter(m) * m.median_ms / m.q3_ms, getter(m) * m.median_ms / m.q1_ms))
            for m in ms
        ]
        err = [[v - lo for v, (lo, _) in zip(vals, ends)], [hi - v for v, (_, hi) in zip(vals, ends)]]
        ax.bar(pos, vals, width, label=str(name), yerr=err, capsize=2)
    ax.set_xticks([j + width * (len(groups) - 1) / 2 for j in range(len(xs))], [str(v) for v in xs])
    ax.set_ylabel(f"{unit} (error bars: inter-quartile range)")
    if title:
        ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
