"""Scripts written before the table and plot methods moved to report get the replacement by name."""

from __future__ import annotations

import re

import pytest

from cudnn_guide.measure.sweep import SweepResult


@pytest.mark.parametrize(
    ("method", "function"), [("table", "sweep_table"), ("plot", "plot_sweep"), ("plot_relative", "plot_relative")]
)
def test_a_moved_method_names_the_report_function_that_replaces_it(method, function):
    result = SweepResult("seq_len", [])
    with pytest.raises(AttributeError, match=re.escape(f"cudnn_guide.report.{function}(result")):
        getattr(result, method)("tflops", title="x")
