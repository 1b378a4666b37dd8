"""Comparison tables (HTML in the gallery, text in a terminal), ratios, and links between pages.

A :class:`ComparisonTable` pivots measurements into one row per implementation and one column per
problem size, with the best entry of each column marked (or of each group of rows in it: each mode), in one
unit. :func:`comparison_rows` and
:func:`loop_rows` lay out several comparisons (one per mask, size, …) as rows for :func:`html_table`:
time, rate and speed-up, or GPU time against a back-to-back loop's wall clock.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable
from typing import Any

from cudnn_guide.measure.measurement import Measurement

__all__ = [
    "GPU_US",
    "HOST_US",
    "LOOP_US",
    "ratio",
    "ratio_estimate",
    "ComparisonTable",
    "Html",
    "page_link",
    "html_table",
    "sweep_table",
    "comparison_rows",
    "contender_rows",
    "loop_rows",
    "time_rows",
    "verdict_rows",
]

METRICS: dict[str, tuple[str, bool, Callable[[Measurement], float | None]]] = {
    # name: (unit label, higher is better, getter)
    "median_ms": ("median time (ms)", False, lambda m: m.median_ms),
    "median_us": ("median time (µs)", False, lambda m: m.median_ms * 1e3),
    "tflops": ("TFLOP/s (at the median)", True, lambda m: m.tflops),
    "gbps": ("GB/s (at the median)", True, lambda m: m.gbps),
}


def ratio(slow: Measurement, fast: Measurement) -> float:
    """Speed-up of ``fast`` over ``slow`` from their medians (``slow.median / fast.median``).

    Parameters
    ----------
    slow
        The reference measurement.
    fast
        The one compared.

    Returns
    -------
    float
        ``slow.median_ms / fast.median_ms``.

    Example
    -------
    >>> speedup = ratio(eager, fused)  # eager.median / fused.median
    """
    return slow.median_ms / fast.median_ms


def ratio_estimate(slow: Measurement, fast: Measurement) -> dict[str, Any]:
    """:func:`ratio` with an interval from the two medians' 95% intervals (their extremes divided).

    Wider than a paired comparison's interval (:mod:`cudnn_guide.measure.compare`): use it for
    two measurements that were not taken in interleaved rounds.

    Parameters
    ----------
    slow
        The reference measurement.
    fast
        The one compared.

    Returns
    -------
    dict[str, Any]
        ``value``, ``low``, ``high`` and ``interval`` (its description): keywords for
        :meth:`~cudnn_guide.report.records.Record.headline`.

    Example
    -------
    >>> r = ratio_estimate(eager, replay)
    >>> print(f"{r['value']:.1f}x [{r['low']:.1f}, {r['high']:.1f}]")
    """
    (s_lo, s_hi), (f_lo, f_hi) = slow.median_ci_ms, fast.median_ci_ms
    return {
        "value": ratio(slow, fast),
        "low": s_lo / f_hi,
        "high": s_hi / f_lo,
        "interval": "from the two medians' 95% CIs",
    }


class ComparisonTable:
    """One row per implementation, one column per problem size, one metric.

    Parameters
    ----------
    measurements:
        Measurements carrying ``params[row]`` and ``params[column]`` (missing column → one column).
    row, column:
        The ``params`` keys to pivot on.
    metric:
        A key of :data:`METRICS`.
    title:
        The caption.
    group:
        Row → its group's key (``lambda impl: impl.split()[-1]``): each column's best is then marked
        within each group of rows, so that rows that do different work (training and inference) are
        not ranked against each other. Default: one group, every row.
    group_name:
        What a group is, for the caption (``"mode"``: "best per column within each mode").

    Example
    -------
    >>> ComparisonTable(ms, row="impl", column="seq_len", metric="tflops")
    >>> ComparisonTable(ms, column="stage", group=lambda impl: impl.split()[-1], group_name="mode")
    """

    def __init__(
        self,
        measurements: Iterable[Measurement],
        *,
        row: str = "impl",
        column: str = "size",
        metric: str = "median_ms",
        title: str = "",
        group: Callable[[Any], Any] | None = None,
        group_name: str = "group",
    ) -> None:
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; choose from {sorted(METRICS)}")
        self.metric, self.title = metric, title
        self.group, self.group_name = group, group_name
        self.unit, self.higher_is_better, getter = METRICS[metric]
        self.rows: list[Any] = []
        self.columns: list[Any] = []
        self.cells: dict[tuple[Any, Any], Measurement | None] = {}
        for m in measurements:
            r, c = m.params.get(row, m.label), m.params.get(column, "")
            if r not in self.rows:
                self.rows.append(r)
            if c not in self.columns:
                self.columns.append(c)
            self.cells[(r, c)] = m
        self._get = getter
        self.row_name, self.column_name = row, column

    def value(self, r: Any, c: Any) -> float | None:
        m = self.cells.get((r, c))
        return None if m is None else self._get(m)

    def best_row(self, c: Any, among: Iterable[Any] | None = None) -> Any:
        """The row with the best value in column ``c``, of ``among`` (default every row); None if none has one."""
        vals = [(self.value(r, c), r) for r in (self.rows if among is None else among) if self.value(r, c) is not None]
        if not vals:
            return None
        return (max if self.higher_is_better else min)(vals, key=lambda t: t[0])[1]

    def is_best(self, r: Any, c: Any) -> bool:
        """Whether row ``r`` is marked in column ``c``: the best of its group there (of every row, ungrouped)."""
        if self.group is None:
            return self.best_row(c) == r
        key = self.group(r)
        return self.best_row(c, [q for q in self.rows if self.group(q) == key]) == r

    def _best_text(self) -> str:
        """``best per column``, and ``within each <group_name>`` when the rows are grouped."""
        return "best per column" + ("" if self.group is None else f" within each {self.group_name}")

    def _cell_text(self, r: Any, c: Any) -> str:
        m = self.cells.get((r, c))
        v = self.value(r, c)
        if m is None or v is None:
            return "—"
        spread = f" ±{100 * m.rel_iqr / 2:.0f}%" if self.metric.startswith("median") else ""
        return f"{v:.4g}{spread}"

    def __str__(self) -> str:
        head = [f"{self.row_name} \\ {self.column_name}"] + [str(c) for c in self.columns]
        body = []
        for r in self.rows:
            cells = []
            for c in self.columns:
                text = self._cell_text(r, c)
                cells.append(text + (" *" if self.is_best(r, c) else ""))
            body.append([str(r)] + cells)
        widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
        lines = [self.title] if self.title else []
        lines.append(
            f"{self.unit}; * {self._best_text()}; ± half the IQR"
            if self.metric.startswith("median")
            else f"{self.unit}; * {self._best_text()}"
        )
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in body]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(f"<th>{esc(str(c))}</th>" for c in self.columns)
        rows = []
        for r in self.rows:
            tds = []
            for c in self.columns:
                text = esc(self._cell_text(r, c))
                tds.append(f"<td><b>{text}</b></td>" if self.is_best(r, c) else f"<td>{text}</td>")
            rows.append(f"<tr><th>{esc(str(r))}</th>{''.join(tds)}</tr>")
        caption = esc(self.title + (" — " if self.title else "") + self.unit + f"; {self._best_text()} in bold")
        return (
            f'<table class="cg-compare"><caption>{caption}</caption>'
            f"<thead><tr><th>{esc(self.row_name)} \\ {esc(self.column_name)}</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
        )


def sweep_table(
    result: Any,
    metric: str = "median_ms",
    title: str = "",
    *,
    group: Callable[[Any], Any] | None = None,
    group_name: str = "group",
) -> ComparisonTable:
    """A :class:`~cudnn_guide.measure.sweep.SweepResult` as a :class:`ComparisonTable`: one row per
    implementation, one column per size, in ``metric``, each column's best marked (within each group).

    Parameters
    ----------
    result
        The sweep.
    metric
        ``median_ms``, ``median_us``, ``tflops`` or ``gbps``.
    title
        The table's caption.
    group
        Implementation → its group's key: each column's best is marked within each group (two
        sweeps merged, training and inference, each ranked on its own). Default: one group.
    group_name
        What a group is, for the caption (``"mode"``).

    Returns
    -------
    ComparisonTable
        The table (HTML in the gallery, text in a terminal).

    Example
    -------
    >>> sweep_table(sweep.sweep([1024, 2048], impls, x="seq_len", l2="cold"), "tflops", title="TFLOP/s")
    """
    return ComparisonTable(
        result.measurements,
        row="impl",
        column=result.x,
        metric=metric,
        title=title,
        group=group,
        group_name=group_name,
    )


class Html(str):
    """Text that is already HTML (a link made by :func:`page_link`); :func:`html_table` keeps it as is.

    Example
    -------
    >>> isinstance(page_link("plot_02_conv_bias_relu", "Conv"), Html)
    True
    """


def page_link(example: str, title: str, prefix: str = "auto_examples/") -> Html:
    """A link to a gallery page whose text (a title from a record) is HTML-escaped.

    Parameters
    ----------
    example
        The page's stem.
    title
        The link text, escaped.
    prefix
        The gallery's folder, relative to the linking page.

    Returns
    -------
    Html
        The ``<a>`` element.

    Example
    -------
    >>> page_link("plot_x", "<b>")
    '<a href="auto_examples/plot_x.html">&lt;b&gt;</a>'
    """
    from urllib.parse import quote

    return Html(f'<a href="{html.escape(prefix + quote(example))}.html">{html.escape(str(title))}</a>')


def html_table(frame: Any, formats: dict[str, Any] | None = None, **format_kwargs: Any) -> Any:
    """A pandas ``Styler`` without the index, with every text cell HTML-escaped unless it is :class:`Html`.

    Titles and labels come from recorded data, so a ``<script>`` in one must show as text, never run.

    Parameters
    ----------
    frame
        A pandas ``DataFrame``.
    formats
        Per-column formats for ``Styler.format`` (numbers).
    format_kwargs
        More keywords for ``Styler.format`` (``precision``; ``na_rep``, default ``"—"``: a missing
        value never shows as ``nan``).

    Returns
    -------
    Any
        The ``Styler``, which a notebook renders as a table.

    Example
    -------
    >>> import pandas as pd
    >>> html_table(pd.DataFrame({"label": ["<b>x</b>"], "ms": [1.5]}), {"ms": "{:.1f}"}).to_html().count("&lt;b&gt;")
    1
    """
    na_rep = format_kwargs.pop("na_rep", "—")  # a cell with no value says so, never "nan"
    text_cols = list(frame.select_dtypes(exclude="number").columns)
    styler = frame.style.hide(axis="index").format(na_rep=na_rep, **format_kwargs)
    if formats:
        styler = styler.format(formats, na_rep=na_rep, **format_kwargs)
    if text_cols:

        def text(v: Any) -> Any:
            if v is None or (isinstance(v, float) and math.isnan(v)):
                return na_rep
            return v if isinstance(v, Html) else html.escape(str(v))

        styler = styler.format(text, subset=text_cols)
    return styler


HOST_US = "host µs per call"
""":func:`loop_rows`' column of the host time per call (median of the first round's host samples)."""
GPU_US = "GPU µs per call (median of round medians)"
""":func:`loop_rows`' column of the GPU time per call."""
LOOP_US = "loop µs per call (median of round medians)"
""":func:`loop_rows`' column of the wall-clock time per call in a back-to-back loop."""


def _speed_up(s: dict[str, Any], band: float | None = None) -> str:
    """``1.23× (1.20–1.26) faster``, with ``, tie band ±1.5%`` when ``band`` is given."""
    text = f"{s['value']:.2f}× ({s['low']:.2f}–{s['high']:.2f}) {s['verdict']}"
    return text if band is None else f"{text}, tie band ±{100 * band:.1f}%"


def comparison_rows(results: Any, *, key: str, speedup: str) -> list[dict[str, Any]]:
    """One row per contender of each comparison: its time, its rate and the candidate's speed-up over it.

    Parameters
    ----------
    results
        Label → :class:`~cudnn_guide.measure.compare.Comparison` (with ``flops``), e.g. one per mask.
    key
        The column that holds each comparison's label (``"mask"``).
    speedup
        The column of the candidate's speed-up over the row's contender: ``value× (low–high) verdict``,
        empty on the candidate's own row.

    Returns
    -------
    list[dict[str, Any]]
        Rows with the columns ``key``, ``"implementation"``, ``"µs"`` and ``"TFLOP/s"`` (medians of
        round medians, :meth:`~cudnn_guide.measure.compare.Comparison.estimate`) and ``speedup``.

    Example
    -------
    >>> rows = comparison_rows({"causal": c}, key="mask", speedup="speed-up")
    >>> html_table(pd.DataFrame(rows), {"µs": "{:.1f}", "TFLOP/s": "{:.0f}"})
    """
    rows = []
    for label, c in results.items():
        for name in c.measurements:
            s = c.versus.get(name)
            rows.append(
                {
                    key: label,
                    "implementation": name,
                    "µs": c.estimate(name)["value"],
                    "TFLOP/s": c.estimate(name, "TFLOP/s")["value"],
                    speedup: _speed_up(s) if s else "",
                }
            )
    return rows


def loop_rows(results: Any, *, key: str) -> list[dict[str, Any]]:
    """One row per contender of each comparison: host, GPU and loop time per call, and both verdicts.

    For comparisons that also raced their contenders in back-to-back loops (``compare(...,
    wall_clock=True)``, whose loop comparison is ``c.wall``). The GPU and loop µs are each the median
    over rounds of a round's median, as the verdicts use them; each verdict carries its own tie band.

    Parameters
    ----------
    results
        Label → :class:`~cudnn_guide.measure.compare.Comparison` with its ``wall``.
    key
        The column that holds each comparison's label (``"mask"``).

    Returns
    -------
    list[dict[str, Any]]
        Rows with the columns ``key``, ``"implementation"``, :data:`HOST_US` (None where not measured),
        :data:`GPU_US`, :data:`LOOP_US`, ``"GPU verdict"`` and ``"loop verdict"`` (the candidate's
        speed-up, ``value× (low–high) verdict, tie band ±x%``; empty on its own row).

    Example
    -------
    >>> rows = loop_rows({"causal": c}, key="mask")
    >>> html_table(pd.DataFrame(rows), dict.fromkeys([HOST_US, GPU_US, LOOP_US], "{:.0f}"))
    """
    rows = []
    for label, c in results.items():
        for name, m in c.measurements.items():
            gpu, loop = c.versus.get(name), c.wall.versus.get(name)
            rows.append(
                {
                    key: label,
                    "implementation": name,
                    HOST_US: m.host_median_ms * 1e3 if m.host_median_ms else None,
                    GPU_US: c.estimate(name)["value"],
                    LOOP_US: c.wall.estimate(name)["value"],
                    "GPU verdict": _speed_up(gpu, c.tie_band) if gpu else "",
                    "loop verdict": _speed_up(loop, c.wall.tie_band) if loop else "",
                }
            )
    return rows


def verdict_rows(
    pairs: Iterable[tuple[Any, str]], measure: str, *, candidate: str = "candidate"
) -> list[dict[str, Any]]:
    """One table row per like-for-like pair: the candidate, its baseline, the speed-up, interval, verdict.

    Parameters
    ----------
    pairs
        ``(comparison, baseline)``: a :class:`~cudnn_guide.measure.compare.Comparison` (e.g. from
        :func:`~cudnn_guide.measure.compare.rejudged`) and one of its baselines.
    measure
        The speed-up's column, e.g. ``"GPU-time speed-up"``.
    candidate
        The candidate's column.

    Returns
    -------
    list[dict[str, Any]]
        Rows with the columns ``candidate``, ``"against"``, ``measure``, ``"in-run 95% interval"``
        and ``"verdict"``, for ``pandas.DataFrame`` and :func:`html_table`.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> s = {"value": 1.2, "low": 1.1, "high": 1.3, "verdict": "faster"}
    >>> cmp = SimpleNamespace(candidate="cuDNN op, eager", versus={"PyTorch eager": s})
    >>> rows = verdict_rows([(cmp, "PyTorch eager")], "speed-up", candidate="cuDNN op")
    >>> rows[0]["cuDNN op"], rows[0]["in-run 95% interval"], rows[0]["verdict"]
    ('cuDNN op, eager', '1.10–1.30', 'faster')
    """
    return [
        {
            candidate: c.candidate,
            "against": b,
            measure: c.versus[b]["value"],
            "in-run 95% interval": "{low:.2f}–{high:.2f}".format(**c.versus[b]),
            "verdict": c.versus[b]["verdict"],
        }
        for c, b in pairs
    ]


def time_rows(cmp: Any, wall: Any, label: str) -> list[dict[str, Any]]:
    """One table row per contender: its GPU time, its host time to enqueue one call, its wall-clock time.

    The GPU time is the comparison's estimate (median over rounds), the host time the one
    :func:`~cudnn_guide.measure.compare.compare` measured in its first round (one call on an idle
    GPU; ``None`` where it was not measured), the wall-clock time the median over rounds of
    ``wall``, the same contenders timed by :func:`~cudnn_guide.measure.compare.compare_host`.

    Parameters
    ----------
    cmp
        A :class:`~cudnn_guide.measure.compare.Comparison` on GPU time.
    wall
        The wall-clock comparison of the same contenders.
    label
        The contenders' column, e.g. ``"training step"``.

    Returns
    -------
    list[dict[str, Any]]
        Rows with the columns ``label``, ``"GPU µs"``, ``"host µs to enqueue"`` and
        ``"wall-clock µs"``, in the comparison's order.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> m = SimpleNamespace(host_median_ms=None)
    >>> cmp = SimpleNamespace(measurements={"X": m}, estimate=lambda n: {"value": 900.0})
    >>> wall = SimpleNamespace(round_medians_ms={"X": [1.0, 1.2, 1.1]})
    >>> time_rows(cmp, wall, "step")
    [{'step': 'X', 'GPU µs': 900.0, 'host µs to enqueue': None, 'wall-clock µs': 1100.0}]
    """
    import statistics

    rows = []
    for name, m in cmp.measurements.items():
        host_ms = m.host_median_ms
        rows.append(
            {
                label: name,
                "GPU µs": cmp.estimate(name)["value"],
                "host µs to enqueue": None if host_ms is None else host_ms * 1e3,
                "wall-clock µs": statistics.median(wall.round_medians_ms[name]) * 1e3,
            }
        )
    return rows


def contender_rows(cmp: Any, time_column: str) -> list[dict[str, Any]]:
    """One table row per contender: its time and rate, and the candidate's speed-up over it with its verdict.

    Times and rates are medians of per-round medians
    (:meth:`~cudnn_guide.measure.compare.Comparison.estimate`), not the record's pooled medians.

    Parameters
    ----------
    cmp
        The :class:`~cudnn_guide.measure.compare.Comparison`, with ``flops``.
    time_column
        The name of the time's column (µs).

    Returns
    -------
    list[dict[str, Any]]
        Rows with the columns ``"implementation"``, ``time_column``, ``"TFLOP/s"``,
        ``"cuDNN's speed-up"``, ``"in-run 95% interval"`` and ``"verdict"`` (None on the
        candidate's own row), in the comparison's order.

    Example
    -------
    >>> rows = contender_rows(cmp, "µs, median of round medians")
    >>> html_table(pd.DataFrame(rows), {"TFLOP/s": "{:.0f}", "cuDNN's speed-up": "{:.2f}×"})
    """
    rows = []
    for n in cmp.measurements:
        s = cmp.versus.get(n)
        rows.append(
            {
                "implementation": n,
                time_column: cmp.estimate(n)["value"],
                "TFLOP/s": cmp.estimate(n, "TFLOP/s")["value"],
                "cuDNN's speed-up": s and s["value"],
                "in-run 95% interval": s and f"{s['low']:.2f}–{s['high']:.2f}",
                "verdict": s and s["verdict"],
            }
        )
    return rows
