"""Comparison tables (HTML in the gallery, text in a terminal), ratios, and links between pages.

A :class:`ComparisonTable` pivots measurements into one row per implementation and one column per
problem size, with the best entry of each column marked, in one unit.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable
from typing import Any

from cudnn_guide.measure.measurement import Measurement

__all__ = ["ratio", "ratio_estimate", "ComparisonTable", "Html", "page_link", "html_table", "sweep_table"]

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

    Example
    -------
    >>> ComparisonTable(ms, row="impl", column="seq_len", metric="tflops")
    """

    def __init__(
        self,
        measurements: Iterable[Measurement],
        *,
        row: str = "impl",
        column: str = "size",
        metric: str = "median_ms",
        title: str = "",
    ) -> None:
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; choose from {sorted(METRICS)}")
        self.metric, self.title = metric, title
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

    def best_row(self, c: Any) -> Any:
        vals = [(self.value(r, c), r) for r in self.rows if self.value(r, c) is not None]
        if not vals:
            return None
        return (max if self.higher_is_better else min)(vals, key=lambda t: t[0])[1]

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
                cells.append(text + (" *" if self.best_row(c) == r else ""))
            body.append([str(r)] + cells)
        widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
        lines = [self.title] if self.title else []
        lines.append(
            f"{self.unit}; * best per column; ± half the IQR"
            if self.metric.startswith("median")
            else f"{self.unit}; * best per column"
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
                tds.append(f"<td><b>{text}</b></td>" if self.best_row(c) == r else f"<td>{text}</td>")
            rows.append(f"<tr><th>{esc(str(r))}</th>{''.join(tds)}</tr>")
        caption = esc(self.title + (" — " if self.title else "") + self.unit + "; best per column in bold")
        return (
            f'<table class="cg-compare"><caption>{caption}</caption>'
            f"<thead><tr><th>{esc(self.row_name)} \\ {esc(self.column_name)}</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
        )


def sweep_table(result: Any, metric: str = "median_ms", title: str = "") -> ComparisonTable:
    """A :class:`~cudnn_guide.measure.sweep.SweepResult` as a :class:`ComparisonTable`: one row per
    implementation, one column per size, in ``metric``.

    Parameters
    ----------
    result
        The sweep.
    metric
        ``median_ms``, ``median_us``, ``tflops`` or ``gbps``.
    title
        The table's caption.

    Returns
    -------
    ComparisonTable
        The table (HTML in the gallery, text in a terminal).

    Example
    -------
    >>> sweep_table(sweep.sweep([1024, 2048], impls, x="seq_len", l2="cold"), "tflops", title="TFLOP/s")
    """
    return ComparisonTable(result.measurements, row="impl", column=result.x, metric=metric, title=title)


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
