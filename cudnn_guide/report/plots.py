"""Plots of measurements: the median of each implementation as a line with its inter-quartile band.

The measure layer returns results; every plot of them lives here: :func:`plot_sweep` and
:func:`plot_relative` of a :class:`~cudnn_guide.measure.sweep.SweepResult`, :func:`plot_comparison`
of a :class:`~cudnn_guide.measure.compare.Comparison`, :func:`plot_plans` of an autotuning result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.report.tables import METRICS

__all__ = ["plot_bars", "plot_comparison", "plot_lines", "plot_plans", "plot_relative", "plot_sweep"]


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
        ends = [_iqr_band(m, metric) for m in ms]
        err = [[v - lo for v, (lo, _) in zip(vals, ends)], [hi - v for v, (_, hi) in zip(vals, ends)]]
        ax.bar(pos, vals, width, label=str(name), yerr=err, capsize=2)
    ax.set_xticks([j + width * (len(groups) - 1) / 2 for j in range(len(xs))], [str(v) for v in xs])
    ax.set_xlabel(x)
    ax.set_ylabel(f"{unit} (error bars: inter-quartile range)")
    if title:
        ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
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

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.9 + 0.45 * len(c.measurements)), layout="constrained")
    ests = {n: c.estimate(n, unit) for n in c.measurements}
    if per is not None:
        ests = {n: per(e) for n, e in ests.items()}
    higher_is_better = per is not None or "/s" in unit
    names = sorted(ests, key=lambda n: ests[n]["value"], reverse=higher_is_better)
    vals = [ests[n]["value"] for n in names]
    ends = [sorted((ests[n]["low"], ests[n]["high"])) for n in names]  # a rate's ``per`` may swap them
    err = [[v - lo for v, (lo, _) in zip(vals, ends)], [hi - v for v, (_, hi) in zip(vals, ends)]]
    colors = ["#76b900" if n == c.candidate else "#8c8c8c" for n in names]
    ax.barh(names, vals, xerr=err, capsize=3, color=colors)
    ax.invert_yaxis()
    if logx:
        ax.set_xscale("log")
    stat = f"median over {c.rounds} rounds, in-run 95% interval"
    ax.set_xlabel(f"{xlabel or unit} ({stat}{'; log scale' if logx else ''})")
    if title:
        ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
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
        ax.plot(list(ratios), list(ratios.values()), "o-", label=f"{impl} / {to}")
    ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(result.x)
    ax.set_ylabel(f"time relative to {to}")
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax
