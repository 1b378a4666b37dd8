from types import SimpleNamespace

import matplotlib

from cudnn_guide.measure import measurement

matplotlib.use("Agg")

from cudnn_guide import report


def _m(impl, size, med, flops=None):
    return measurement.Measurement(
        f"{impl}@{size}",
        [med * 0.95, med, med * 1.05],
        "hot-L2 events",
        flops=flops,
        params={"impl": impl, "size": size},
    )


def test_table_pivots_marks_best_and_shows_missing():
    ms = [_m("cudnn", 1, 1.0), _m("torch", 1, 2.0), _m("cudnn", 2, 4.0), _m("torch", 2, 3.0), _m("flash", 2, 5.0)]
    t = report.ComparisonTable(ms, row="impl", column="size", metric="median_ms", title="demo")
    assert t.rows == ["cudnn", "torch", "flash"] and t.columns == [1, 2]
    assert t.best_row(1) == "cudnn" and t.best_row(2) == "torch"
    text = str(t)
    assert "demo" in text and "—" in text  # flash has no size-1 entry
    assert text.count("*") >= 2
    html = t._repr_html_()
    assert html.count("<b>") == 2 and "<caption>" in html


def test_grouped_tables_mark_the_best_of_each_group_in_each_column():
    # training is slower than inference throughout: ungrouped, only inference cells would be marked
    ms = [
        _m("cuDNN training", 1, 2.0),
        _m("eager training", 1, 3.0),
        _m("cuDNN inference", 1, 1.5),
        _m("eager inference", 1, 1.0),
        _m("cuDNN training", 2, 4.0),
        _m("eager training", 2, 5.0),
        _m("cuDNN inference", 2, 2.5),
        _m("eager inference", 2, 3.0),
    ]
    sweep = SimpleNamespace(x="size", measurements=ms)
    t = report.sweep_table(sweep, "median_ms", group=lambda impl: impl.split()[-1], group_name="mode")
    marked = {(r, c) for r in t.rows for c in t.columns if t.is_best(r, c)}
    assert marked == {
        ("cuDNN training", 1),
        ("eager inference", 1),
        ("cuDNN training", 2),
        ("cuDNN inference", 2),
    }
    html = t._repr_html_()
    assert html.count("<b>") == 4 and "best per column within each mode in bold" in html
    assert "<th>cuDNN training</th><td><b>2 " in html
    text = str(t)
    assert "* best per column within each mode" in text
    assert sum(line.count(" *") for line in text.splitlines()[-4:]) == 4  # one mark per mode and column
    # ungrouped, the column's single best is marked, as before
    plain = report.sweep_table(sweep, "median_ms")
    ungrouped = [(r, c) for r in plain.rows for c in plain.columns if plain.is_best(r, c)]
    assert ungrouped == [("cuDNN inference", 2), ("eager inference", 1)]
    assert "best per column in bold" in plain._repr_html_()


def test_rate_tables_prefer_higher():
    ms = [_m("a", 1, 1.0, flops=1e9), _m("b", 1, 2.0, flops=1e9)]
    assert report.ComparisonTable(ms, metric="tflops").best_row(1) == "a"


def test_ratio_uses_medians():
    assert report.ratio(_m("slow", 1, 3.0), _m("fast", 1, 1.5)) == 2.0


def test_plot_lines_draws_one_line_and_band_per_impl():
    ms = [_m("a", s, s * 1.0, flops=1e9) for s in (1, 2, 4)] + [_m("b", s, s * 2.0, flops=1e9) for s in (1, 2, 4)]
    ax = report.plot_lines(ms, x="size", metric="tflops", ceiling=10.0)
    assert len([line for line in ax.get_lines() if line.get_marker() == "o"]) == 2
    assert len(ax.collections) == 2  # the IQR bands
    ys = list(ax.get_lines()[0].get_ydata())
    assert ys == [1.0, 0.5, 0.25]  # 1 GFLOP in s milliseconds is 1/s TFLOP/s


def test_named_sizes_keep_their_order_and_numbers_ascend():
    stages = ["64×56×56", "128×28×28", "256×14×14"]  # sorted as text, 128 would come first
    ax = report.plot_lines([_m("a", s, 1.0) for s in stages], x="size")
    assert [t.get_text() for t in ax.get_xticklabels()] == stages
    ax = report.plot_lines([_m("a", s, float(s)) for s in (4, 1, 2)], x="size")
    assert list(ax.get_lines()[0].get_xdata()) == [1, 2, 4]


def test_ratio_estimate_brackets_the_ratio_with_the_medians_intervals():
    slow = measurement.Measurement("slow", [2.0 + 0.01 * i for i in range(-20, 21)], "hot-L2 events")
    fast = measurement.Measurement("fast", [1.0 + 0.01 * i for i in range(-20, 21)], "hot-L2 events")
    r = report.ratio_estimate(slow, fast)
    assert r["value"] == report.ratio(slow, fast) == 2.0
    (s_lo, s_hi), (f_lo, f_hi) = slow.median_ci_ms, fast.median_ci_ms
    assert r["low"] == s_lo / f_hi < 2.0 < r["high"] == s_hi / f_lo
    assert "95%" in r["interval"]


def test_html_table_shows_a_missing_value_as_a_dash_never_nan():
    import pandas as pd

    frame = pd.DataFrame({"case": ["prefill", None], "GB/s": [float("nan"), 915.1], "µs": [1.0, float("nan")]})
    html = report.html_table(frame, {"GB/s": "{:.0f}"}).to_html()
    assert "nan" not in html.lower() and "None" not in html
    assert html.count("—") == 3 and ">915<" in html


def test_plot_bars_groups_by_x_with_one_colour_per_impl_and_iqr_error_bars():
    import pytest

    ms = [_m("cudnn", "fwd", 1.0, flops=1e9), _m("torch", "fwd", 2.0, flops=1e9), _m("cudnn", "bwd", 4.0, flops=1e9)]
    ax = report.plot_bars(ms, x="size", metric="tflops", title="t")
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([1.0, 0.25, 0.5])  # cudnn fwd, cudnn bwd, then torch fwd
    assert [t.get_text() for t in ax.get_xticklabels()] == ["fwd", "bwd"] and ax.get_xlabel() == "size"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["cudnn", "torch"]
    lows = [seg[0][1] for c in ax.collections for seg in c.get_segments()]  # error bars: the IQR, below and above
    assert all(low < h for low, h in zip(lows, heights)) and ax.get_title() == "t"


def test_verdict_rows_give_one_row_per_like_for_like_pair():
    from types import SimpleNamespace

    from cudnn_guide.report.tables import verdict_rows

    eager = SimpleNamespace(
        candidate="cuDNN op, eager",
        versus={"PyTorch eager": {"value": 1.2, "low": 1.1, "high": 1.3, "verdict": "faster"}},
    )
    compiled = SimpleNamespace(
        candidate="cuDNN op, compiled",
        versus={"PyTorch, compiled": {"value": 0.99, "low": 0.97, "high": 1.01, "verdict": "tie"}},
    )
    rows = verdict_rows([(eager, "PyTorch eager"), (compiled, "PyTorch, compiled")], "speed-up", candidate="op")
    assert rows == [
        {
            "op": "cuDNN op, eager",
            "against": "PyTorch eager",
            "speed-up": 1.2,
            "in-run 95% interval": "1.10–1.30",
            "verdict": "faster",
        },
        {
            "op": "cuDNN op, compiled",
            "against": "PyTorch, compiled",
            "speed-up": 0.99,
            "in-run 95% interval": "0.97–1.01",
            "verdict": "tie",
        },
    ]


def test_time_rows_give_gpu_host_and_wall_clock_times_in_the_comparisons_order():
    from types import SimpleNamespace

    from cudnn_guide.report.tables import time_rows

    measurements = {"b": SimpleNamespace(host_median_ms=0.5), "a": SimpleNamespace(host_median_ms=None)}
    gpu = {"a": 700.0, "b": 900.0}
    cmp = SimpleNamespace(measurements=measurements, estimate=lambda n: {"value": gpu[n]})
    wall = SimpleNamespace(round_medians_ms={"a": [1.0, 1.2, 1.1], "b": [2.0, 2.0, 2.1]})
    rows = time_rows(cmp, wall, "training step")
    assert [r["training step"] for r in rows] == ["b", "a"]
    assert rows[0] == {"training step": "b", "GPU µs": 900.0, "host µs to enqueue": 500.0, "wall-clock µs": 2000.0}
    assert rows[1]["host µs to enqueue"] is None and rows[1]["wall-clock µs"] == 1100.0
