"""Report measurements: tables and plots on the page, and the records the site is built from.

* :mod:`~cudnn_guide.report.tables` and :mod:`~cudnn_guide.report.plots` (re-exported here);
* :mod:`~cudnn_guide.report.records`: each example's machine-readable record, collected as it runs.
"""

from cudnn_guide.report.plots import plot_bars, plot_comparison, plot_lines, plot_plans
from cudnn_guide.report.tables import ComparisonTable, Html, html_table, page_link, ratio, ratio_estimate

__all__ = [
    "ComparisonTable",
    "Html",
    "html_table",
    "page_link",
    "plot_bars",
    "plot_comparison",
    "plot_lines",
    "plot_plans",
    "ratio",
    "ratio_estimate",
]
