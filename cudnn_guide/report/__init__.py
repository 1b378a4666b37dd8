"""Report measurements: tables and plots on the page, and the records the site is built from.

* :mod:`~cudnn_guide.report.tables` and :mod:`~cudnn_guide.report.plots` (re-exported here): every
  table and plot of a measurement, a sweep (:func:`sweep_table`, :func:`plot_sweep`), a comparison
  (:func:`plot_comparison`, :func:`comparison_rows`, :func:`loop_rows`) or a tuning (:func:`plot_plans`);
* :mod:`~cudnn_guide.report.records`: each example's machine-readable record, collected as it runs.
"""

from cudnn_guide.report.plots import plot_bars, plot_comparison, plot_lines, plot_plans, plot_relative, plot_sweep
from cudnn_guide.report.tables import (
    ComparisonTable,
    Html,
    comparison_rows,
    html_table,
    loop_rows,
    page_link,
    ratio,
    ratio_estimate,
    sweep_table,
)

__all__ = [
    "ComparisonTable",
    "Html",
    "comparison_rows",
    "html_table",
    "loop_rows",
    "page_link",
    "plot_bars",
    "plot_comparison",
    "plot_lines",
    "plot_plans",
    "plot_relative",
    "plot_sweep",
    "ratio",
    "ratio_estimate",
    "sweep_table",
]
