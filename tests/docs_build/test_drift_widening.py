"""The docs build widens a recorded page's intervals by the re-recording drift; the library does not.

Moved from tests/measure/test_compare.py and tests/report/test_records.py: the library measures and
returns in-run intervals; :mod:`gallery_build.drift_bands` computes the drift from the history and
widens each interval as :func:`gallery_build.hooks.reset_between_examples` writes the record.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from conftest import fake_benchmark
from gallery_build import drift_bands, history, hooks, machine_dependence

from cudnn_guide import check
from cudnn_guide.measure import compare, measurement
from cudnn_guide.report import records
from cudnn_guide.report.records import Record


class _FakeGPU:
    """Stands in for bench.benchmark: each contender has a true time; each round the clock drifts."""

    def __init__(self, times, noise=0.002, seed=1):
        self.times, self.noise, self.rng, self.calls, self.drift = times, noise, random.Random(seed), [], 1.0

    def __call__(self, fn, *, label, l2, flops=None, bytes=None, budget_ms, precision, params, **kw):
        self.calls.append(label)
        if len(self.calls) % 4 == 1:
            self.drift *= 1 + self.rng.uniform(-0.05, 0.05)
        base = self.times[label.removesuffix(" (repeat)")] * self.drift
        samples = [base * (1 + self.rng.gauss(0, self.noise)) for _ in range(10)]
        return measurement.Measurement(label, samples, "cold-L2 events", flops, bytes, dict(params))


def _entry(gpu="NVIDIA H200", torch="2.11", value=1.2, low=1.1, high=1.3, verdict="faster"):
    return {
        "example": "plot_x",
        "gpu": gpu,
        "software": {"torch": torch},
        "measurements": {"m": {"median_ms": 1.0, "q1_ms": 0.99, "q3_ms": 1.01, "n": 10}},
        "headlines": [{"name": "speed-up", "value": value, "low": low, "high": high, "verdict": verdict}],
    }


def test_reproducibility_counts_headlines_outside_the_old_interval_and_flipped_verdicts():
    same = history.reproducibility([_entry(), _entry(value=1.25)])
    assert same["headlines_inside"] == 1 and same["flipped"] == [] and same["moved"] == []
    flip = history.reproducibility([_entry(), _entry(value=1.02, low=0.98, high=1.05, verdict="tie")])
    assert flip["headlines_inside"] == 0 and flip["outside"][0]["latest"] == 1.02
    assert flip["flipped"][0]["previous"] == "faster" and flip["flipped"][0]["latest"] == "tie"
    text = history.format_reproducibility(flip)
    assert "0 of 1 headlines inside" in text and "verdict changed: plot_x / speed-up: faster -> tie" in text


@pytest.mark.parametrize(
    "other, reason",
    [(dict(gpu="NVIDIA B200"), "different GPUs"), (dict(torch="2.13"), "different software (torch 2.11 vs 2.13)")],
)
def test_recordings_from_other_gpus_or_software_are_not_compared(other, reason):
    report = history.reproducibility([_entry(), _entry(**other)])
    assert report["pages"] == 0 and reason in report["not_compared"][0]["reason"]


def _recording(example, utc, medians, gpu="NVIDIA H200"):
    return {
        "example": example,
        "recorded_utc": utc,
        "gpu": gpu,
        "software": {"torch": "2.11"},
        "measurements": {k: {"median_ms": m, "q1_ms": m, "q3_ms": m, "n": 10} for k, m in medians.items()},
        "headlines": [],
    }


def test_drift_keeps_each_labels_largest_change_and_the_pages_p95():
    import math

    lines = [
        _recording("plot_a", "1", {"fast": 1.0, "wobbly": 1.0}),
        _recording("plot_a", "2", {"fast": 1.01, "wobbly": 1.5}),
        _recording("plot_a", "3", {"fast": 1.0, "wobbly": 1.0}),
        _recording("plot_a", "4", {"fast": 2.0, "wobbly": 2.0}, gpu="NVIDIA B200"),  # not comparable: ignored
    ]
    d = drift_bands.drift(lines)
    page = d["examples"]["plot_a"]
    assert d["pairs"] == 2
    assert page["labels"]["wobbly"] == pytest.approx(math.log(1.5))
    assert page["labels"]["fast"] == pytest.approx(math.log(1.01))
    assert page["p95"] == pytest.approx(math.log(1.5)) and d["global_p95"] == page["p95"]


def _comparison_record(monkeypatch, times=None):
    fake_benchmark(monkeypatch, _FakeGPU(times or {"cudnn": 0.080, "torch": 0.100}))
    c = compare.compare({"cudnn": None, "torch": None}, candidate="cudnn", l2="cold", rounds=11)
    rec = Record("plot_a")
    rec.comparison("speed-up", c)
    return c, rec


def test_recorded_drift_widens_a_comparison_keeps_the_in_run_interval_and_can_turn_its_verdict_into_a_tie(
    monkeypatch,
):
    c, rec = _comparison_record(monkeypatch)
    assert c.versus["torch"]["verdict"] == "faster"  # in-run
    bands = {"global_p95": 0.01, "examples": {"plot_a": {"p95": 0.02, "labels": {"torch": 0.3}}}}
    assert drift_bands.for_label(bands, "plot_a", "torch") == 0.3
    assert drift_bands.for_label(bands, "plot_a", "cudnn") == 0.02  # the page's p95 at least
    assert drift_bands.for_label(bands, "plot_new", "torch") == 0.01  # a page without history: the site's p95
    (h,) = drift_bands.widen_headlines(rec.headlines, bands, "plot_a")
    s = c.versus["torch"]
    assert (h["run_low"], h["run_high"], h["run_verdict"]) == (s["low"], s["high"], "faster")
    assert h["drift"] == pytest.approx(math.hypot(0.3, 0.02)) and h["interval"] == drift_bands.WIDENED
    assert h["low"] == pytest.approx(s["low"] * math.exp(-h["drift"])) and h["verdict"] == "tie"
    again = drift_bands.widen_headlines(rec.headlines, bands, "plot_a")[0]
    assert again["low"] == h["low"]  # widened once


def test_without_a_drift_file_the_record_is_labelled_but_not_widened(tmp_path, monkeypatch):
    _, rec = _comparison_record(monkeypatch)
    bands = drift_bands.load_drift(tmp_path / "missing.json")
    assert bands == {}
    (h,) = drift_bands.widen_headlines(rec.headlines, bands, "plot_a")
    assert (h["low"], h["high"], h["drift"]) == (h["run_low"], h["run_high"], 0.0)


def test_a_headline_interval_is_widened_by_its_own_past_drift_or_its_measurements():
    bands = {
        "examples": {
            "plot_a": {"headline_p95": 0.05, "headlines": {"ceiling": 0.2}, "p95": 0.01, "labels": {"m": 0.4}}
        },
        "global_headline_p95": 0.1,
    }
    rec = Record("plot_a")
    rec.headline("ceiling", 700.0, "TFLOP/s", low=690.0, high=710.0)
    rec.headline("other", 10.0, "µs", low=9.0, high=11.0)
    rec.headline("from a measurement", 2.0, "µs", low=1.5, high=2.5, measurement="m")
    rec.headline("signed", -1.0, "µs/call (signed)", low=-2.0, high=0.5)
    rec.headline("count", 3, "count")
    assert rec.headlines[0]["low"] == 690.0  # the library keeps the in-run interval
    ceiling, other, one, signed, count = drift_bands.widen_headlines(rec.headlines, bands, "plot_a")
    assert ceiling["run_low"] == 690.0 and ceiling["low"] == pytest.approx(690.0 * math.exp(-0.2))
    assert ceiling["high"] == pytest.approx(710.0 * math.exp(0.2)) and ceiling["drift"] == 0.2
    assert other["drift"] == 0.05  # no past of its own: the page's p95
    assert one["drift"] == 0.4  # an estimate of one measurement: that measurement's drift
    assert (signed["low"], signed["high"]) == (-2.0, 0.5) and "drift" not in signed
    assert "low" not in count and "drift" not in count


def test_a_ratio_whose_measurements_drift_together_is_judged_by_its_own_history():
    steps = [{"cudnn": 0.3, "torch": 0.29}, {"cudnn": -0.25, "torch": -0.26}, {"cudnn": 0.2, "torch": 0.2}]
    page = {"p95": 0.3, "labels": {"cudnn": 0.3, "torch": 0.3}, "changes": steps, "ratio_p90": 0.005}
    bands = {"examples": {"plot_a": page}}
    assert drift_bands.for_ratio(bands, "plot_a", "cudnn", "torch") == pytest.approx(0.01)
    assert drift_bands.for_ratio(bands, "plot_a", "cudnn", "new label") == pytest.approx(math.hypot(0.3, 0.3))
    page["changes"] = steps[:1]  # one past pair is too little to trust
    assert drift_bands.for_ratio(bands, "plot_a", "cudnn", "torch") == pytest.approx(math.hypot(0.3, 0.3))
    assert drift_bands.for_ratio({}, "plot_a", "cudnn", "torch") == 0.0


def test_a_ratio_without_its_own_history_takes_the_ratio_drift_of_its_page_or_the_site():
    steps = [{"cudnn": 0.3, "torch": 0.29}]  # one past pair: too little to trust the ratio's own
    page = {"p95": 0.3, "labels": {"cudnn": 0.3, "torch": 0.3}, "changes": steps, "ratio_p90": 0.04}
    bands = {"examples": {"plot_a": page}, "global_ratio_p90": 0.02, "global_p95": 0.3}
    assert drift_bands.for_ratio(bands, "plot_a", "cudnn", "torch") == 0.04  # the page's, above the site's
    assert drift_bands.for_ratio(bands, "plot_new", "cudnn", "torch") == 0.02  # a new page: the site's
    # a page with a history of its own: a ratio new to it takes the page's ratio drift, even below the site's
    page["changes"] = [{"cudnn": 0.3, "torch": 0.29}, {"cudnn": 0.1, "torch": 0.12}]
    page["ratio_p90"] = 0.015
    bands["global_ratio_p90"] = 0.16
    assert drift_bands.for_ratio(bands, "plot_a", "cudnn", "FlashAttention-4") == 0.015
    assert drift_bands.for_ratio(bands, "plot_new", "cudnn", "FlashAttention-4") == 0.16
    made = drift_bands.drift(
        [
            dict(
                _entry(),
                recorded_utc=str(i),
                measurements={
                    "a": {"median_ms": 1.0 * (1 + i / 10), "q1_ms": 0.99, "q3_ms": 1.01, "n": 10},
                    "b": {"median_ms": 2.0 * (1 + i / 10), "q1_ms": 1.98, "q3_ms": 2.02, "n": 10},
                },
            )
            for i in range(3)
        ]
    )
    assert made["global_ratio_p90"] == pytest.approx(0.0, abs=1e-12)  # a and b moved together


def test_the_drift_backtest_scores_both_models_on_the_recordings_before_the_last():
    def rec(utc, a, b):
        return _recording("plot_a", utc, {"a": a, "b": b})

    # a and b move together by up to 20% per recording: independent drifts over-widen their ratio
    lines = [rec("1", 1.0, 2.0), rec("2", 1.2, 2.45), rec("3", 1.0, 2.0), rec("4", 0.85, 1.7), rec("5", 1.0, 2.02)]
    report = drift_bands.drift_backtest(lines)
    assert report["pages"] == 1 and report["ratios"] == 1
    ratio, independent = report["models"]["ratio"], report["models"]["independent"]
    assert ratio["coverage"] == 1.0 and independent["coverage"] == 1.0
    assert ratio["median_width"] < 0.05 < independent["median_width"]


def test_the_build_hook_writes_each_examples_record_named_titled_and_widened(tmp_path, monkeypatch):
    import torch

    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "plot_99_demo.py").write_text('"""\nA demo title\n============\n\nBody.\n"""\n')
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / drift_bands.DRIFT).write_text(
        json.dumps({"examples": {"plot_99_demo": {"headline_p95": 0.1, "headlines": {}}}})
    )
    monkeypatch.setenv("CUDNN_GUIDE_RECORD_DIR", str(tmp_path / "gallery"))
    conf = {"src_dir": str(tmp_path), "examples_dirs": ["examples"]}
    check.check(torch.ones(2), torch.ones(2), name="left over from before")
    hooks.reset_between_examples(conf, "plot_99_demo.py", "before")
    check.check(torch.ones(2), torch.ones(2), name="the example's check")
    records.headline("median", unit="µs", value=10.0, low=9.0, high=11.0)
    hooks.reset_between_examples(conf, "plot_99_demo.py", "after")
    data = records.load(tmp_path / "gallery" / "plot_99_demo.record.json")
    assert (data["example"], data["title"]) == ("plot_99_demo", "A demo title")
    assert [c["name"] for c in data["checks"]] == ["the example's check"]
    (h,) = data["headlines"]
    assert (h["run_low"], h["run_high"], h["drift"], h["interval"]) == (9.0, 11.0, 0.1, drift_bands.WIDENED)
    assert h["low"] == pytest.approx(9.0 * math.exp(-0.1))


def test_a_recorded_page_says_its_comparisons_are_widened_for_re_recording_drift(monkeypatch):
    _, rec = _comparison_record(monkeypatch)
    drift_bands.widen_headlines(rec.headlines, {"global_p95": 0.05}, "plot_a")
    record = {"environment": {"gpu": "NVIDIA H200"}, "headlines": rec.headlines, "measurements": []}
    notes = hooks.notes_rst(record)
    assert "widened for re-recording drift" in notes and "in-run" in notes
    assert drift_bands.widened_rst({"headlines": [{"name": "t", "value": 1.0, "unit": "µs"}]}) == ""


def _widened_by_zero(value=0.93, low=0.92, high=0.94, verdict="slower"):
    """A headline as a staged recording without the drift file wrote it: in-run, labelled widened by 0."""
    h = {
        "name": "speed-up",
        "value": value,
        "unit": "x",
        "low": low,
        "high": high,
        "verdict": verdict,
        "kind": "comparison",
        "tie_band": 0.01,
        "candidate_measurement": "a",
        "baseline_measurement": "b",
    }
    return drift_bands.widen_headlines([h], {}, "plot_x")[0]


def test_a_staged_page_finds_the_drift_file_and_writes_nothing_back(tmp_path):
    from gallery_build import staging

    docs = tmp_path / "docs"
    (docs / "data").mkdir(parents=True)
    (docs / "conf.py").write_text("")
    (docs / "data" / drift_bands.DRIFT).write_text(json.dumps({"global_p95": 0.1, "examples": {}}))
    (docs / "data" / "history.jsonl").write_text("")
    staged = staging.stage_docs(docs, tmp_path, docs / "auto_examples", tmp_path / "stage")
    copy = staged.parent / "data" / drift_bands.DRIFT
    assert json.loads(copy.read_text())["global_p95"] == 0.1  # what the record hook widens by
    assert not copy.is_symlink() and not (staged.parent / "data" / "history.jsonl").exists()
    h = _widened_by_zero()
    drift_bands.widen_headlines(
        [h := {k: v for k, v in h.items() if not k.startswith("run_") and k not in ("drift", "interval")}],
        drift_bands.load_drift(copy),
        "plot_x",
    )
    assert h["drift"] > 0 and h["low"] < 0.92


def test_rewiden_widens_headlines_widened_by_zero_and_leaves_widened_ones_alone():
    bands = {"global_p95": 0.05, "examples": {}}
    h = _widened_by_zero()
    assert h["drift"] == 0 and h["verdict"] == "slower"
    assert drift_bands.rewiden_headlines([h], bands, "plot_x") == 1
    assert h["run_low"] == 0.92 and h["run_verdict"] == "slower" and h["drift"] == pytest.approx(math.hypot(0.05, 0.05))
    assert h["low"] == pytest.approx(0.92 * math.exp(-h["drift"])) and h["verdict"] == "tie"  # 0.86–1.01 meets the band
    before = dict(h)
    assert drift_bands.rewiden_headlines([h], {"global_p95": 0.5, "examples": {}}, "plot_x") == 0
    assert h == before


def test_shards_rewiden_widens_a_shards_records_and_history_alike(tmp_path):
    from gallery_build import shards

    shard = tmp_path / "shard"
    (shard / "auto_examples").mkdir(parents=True)
    record = {"example": "plot_x", "headlines": [_widened_by_zero()]}
    (shard / "auto_examples" / "plot_x.record.json").write_text(json.dumps(record))
    (shard / "history.jsonl").write_text(json.dumps(dict(_entry(), headlines=[_widened_by_zero()])) + "\n")
    drift = tmp_path / "drift.json"
    drift.write_text(json.dumps({"global_p95": 0.05, "examples": {}}))
    assert shards.rewiden(shard, drift) == {"plot_x": 1}
    rec = json.loads((shard / "auto_examples" / "plot_x.record.json").read_text())["headlines"][0]
    line = json.loads((shard / "history.jsonl").read_text())["headlines"][0]
    assert rec["drift"] > 0 and rec == line
    with pytest.raises(shards.ShardError, match="does not exist"):
        shards.rewiden(shard, tmp_path / "missing.json")


def _page_entry(stamp, value, low, high, verdict):
    return dict(
        _entry(value=value, low=low, high=high, verdict=verdict),
        recorded_utc=stamp,
        headlines=[
            {
                "name": "speed-up",
                "value": value,
                "unit": "x",
                "low": low,
                "high": high,
                "verdict": verdict,
                "kind": "comparison",
                "tie_band": 0.01,
            }
        ],
    )


def test_headline_backtest_widens_the_earlier_recording_by_the_drift_known_then():
    hist = [
        _page_entry("2026-01-01", 1.20, 1.19, 1.21, "faster"),
        _page_entry("2026-01-02", 1.30, 1.29, 1.31, "faster"),
        _page_entry("2026-01-03", 1.24, 1.23, 1.25, "faster"),
    ]
    # the first pair has no past drift (widened by 0), so 1.30 lies outside 1.19–1.21; by the
    # second pair the drift of the first (log 1.30/1.20) widens 1.29–1.31 enough to hold 1.24
    all_pairs = drift_bands.headline_backtest(hist, hist)
    assert (all_pairs["pairs"], all_pairs["headlines"], all_pairs["inside"]) == (2, 2, 1)
    assert all_pairs["outside"][0]["value"] == 1.30 and all_pairs["flips"] == 0
    latest = drift_bands.headline_backtest(hist, hist, latest_only=True)
    assert (latest["pairs"], latest["inside"], latest["coverage"]) == (1, 1, 1.0)
    flip = hist[:2] + [_page_entry("2026-01-03", 0.70, 0.69, 0.71, "slower")]
    assert drift_bands.headline_backtest(flip, flip, latest_only=True)["flips"] == 1


def test_the_notes_count_the_printed_verdicts_that_change_once_widened():
    slower = _widened_by_zero()  # 0.92–0.94 in-run: slower; widened by ±10% it meets the tie band
    drift_bands.rewiden_headlines([slower], {"global_p95": 0.1, "global_ratio_p90": 0.1, "examples": {}}, "plot_x")
    held = _widened_by_zero(value=0.5, low=0.49, high=0.51)
    drift_bands.rewiden_headlines([held], {"global_p95": 0.1, "global_ratio_p90": 0.1, "examples": {}}, "plot_x")
    assert (slower["run_verdict"], slower["verdict"], held["verdict"]) == ("slower", "tie", "slower")
    text = drift_bands.widened_rst({"headlines": [slower, held]})
    assert "1 of the 2 verdicts printed above (in-run) are a **tie** once widened" in text
    assert "The verdict printed above holds once widened" in drift_bands.widened_rst({"headlines": [held]})
    assert "All 2 verdicts printed above hold" in drift_bands.widened_rst({"headlines": [held, dict(held)]})


def test_a_stable_ratio_is_floored_by_its_pages_ratio_floor_not_its_noisiest_ratio():
    steps = [{"cudnn": 0.01, "torch": 0.0, "autotune": 0.9}, {"cudnn": -0.01, "torch": 0.0, "autotune": -0.8}]
    page = {"p95": 0.9, "labels": {}, "changes": steps, "ratio_p90": 0.9, "ratio_floor": 0.02}
    bands = {"examples": {"plot_a": page}}
    assert drift_bands.for_ratio(bands, "plot_a", "cudnn", "torch") == pytest.approx(0.02)  # not autotune's 0.9
    assert drift_bands.for_ratio(bands, "plot_a", "cudnn", "autotune") == pytest.approx(0.89)  # its own jumps
    del page["ratio_floor"]  # a drift file written before the floor: the 90th percentile, as then
    assert drift_bands.for_ratio(bands, "plot_a", "cudnn", "torch") == pytest.approx(0.9)


def test_rewiden_every_widens_again_from_the_in_run_interval_whatever_the_old_drift():
    h = _widened_by_zero(value=0.5, low=0.49, high=0.51)
    drift_bands.rewiden_headlines([h], {"global_p95": 0.5, "global_ratio_p90": 0.5, "examples": {}}, "plot_x")
    wide = dict(h)
    assert drift_bands.rewiden_headlines([h], {"global_ratio_p90": 0.05, "examples": {}}, "plot_x") == 0
    assert drift_bands.rewiden_headlines([h], {"global_ratio_p90": 0.05, "examples": {}}, "plot_x", every=True) == 1
    assert (h["run_low"], h["run_high"], h["drift"]) == (0.49, 0.51, 0.05) and h["low"] > wide["low"]
    assert h["low"] == pytest.approx(0.49 * math.exp(-0.05)) and h["verdict"] == "slower"


def test_the_notes_say_when_a_page_was_widened_by_the_sites_drift_alone():
    """A page with no comparable past recording is widened by the whole site's drift; its notes must not claim
    that its own measurements moved that far (issue 35's audit of plot_26)."""
    h = {
        "name": "x: speed-up",
        "value": 0.9,
        "low": 0.8,
        "high": 1.05,
        "run_low": 0.89,
        "run_high": 0.91,
        "unit": "x",
        "kind": "comparison",
        "interval": "widened",
        "drift": 0.16,
        "drift_basis": "site",
        "verdict": "tie",
        "run_verdict": "slower",
        "tie_band": 0.02,
    }
    text = drift_bands.widened_rst({"headlines": [h]})
    assert "by the whole site's drift" in text and "how far this page's measurements moved" not in text
    own = dict(h, drift_basis="own")
    text = drift_bands.widened_rst({"headlines": [h, own]})
    assert "how far this page's measurements moved" in text and "1 of them by the whole site's drift" in text


def test_a_share_of_bandwidth_is_widened_and_rewiden_takes_in_one_recorded_before_its_unit_was():
    bands = {"global_p95": 0.02, "global_headline_p95": 0.02, "examples": {}}
    share = {"name": "LayerNorm, % of copy bandwidth", "value": 73.1, "unit": "%", "low": 73.0, "high": 73.2}
    count = {"name": "cases", "value": 9, "unit": "count", "low": 8, "high": 10}
    drift_bands.widen_headlines([share], bands, "plot_x")
    assert share["run_low"] == 73.0 and share["low"] == pytest.approx(73.0 * math.exp(-0.02))
    # a record written while "%" was not widened: rewiden takes it in, and leaves a count alone
    old = {"name": "RMSNorm, % of copy bandwidth", "value": 90.8, "unit": "%", "low": 90.7, "high": 90.9}
    assert drift_bands.rewiden_headlines([old, count], bands, "plot_x") == 1
    assert old["interval"] == drift_bands.WIDENED and old["high"] == pytest.approx(90.9 * math.exp(0.02))
    assert "run_low" not in count and count["low"] == 8


def test_drift_keeps_a_share_of_bandwidths_past_change_as_its_own():
    def entry(value, stamp):
        e = _entry()
        e["recorded_utc"] = stamp
        e["headlines"] = [{"name": "% of copy bandwidth", "value": value, "unit": "%", "low": value, "high": value}]
        return e

    bands = drift_bands.drift([entry(73.3, "2026-12-01"), entry(73.1, "2026-12-02")])
    assert bands["examples"]["plot_x"]["headlines"]["% of copy bandwidth"] == pytest.approx(math.log(73.3 / 73.1))


def test_a_share_is_widened_by_its_own_history_not_by_its_measurements_time():
    # the kernel's time moved 17% between leases; the share of copy bandwidth moved 0.5%
    bands = {
        "global_p95": 0.2,
        "global_headline_p95": 0.2,
        "examples": {"plot_x": {"p95": 0.17, "labels": {"k": 0.17}, "headline_p95": 0.005, "headlines": {"s": 0.005}}},
    }
    share = {"name": "s", "value": 73.1, "unit": "%", "low": 73.0, "high": 73.2, "measurement": "k"}
    time = {"name": "t", "value": 10.0, "unit": "µs", "low": 9.9, "high": 10.1, "measurement": "k"}
    drift_bands.widen_headlines([share, time], bands, "plot_x")
    assert share["drift"] == pytest.approx(0.005) and share["drift_basis"] == "own"
    assert time["drift"] == pytest.approx(0.17)


def _signed_entry(value, stamp):
    e = _entry()
    e["recorded_utc"] = stamp
    e["headlines"] = [
        {"name": "host time added", "value": value, "unit": "µs/call (signed)", "low": value, "high": value}
    ]
    return e


def test_a_signed_difference_is_widened_by_its_own_past_change_in_its_unit_either_side():
    bands = drift_bands.drift([_signed_entry(-2.28, "2026-12-01"), _signed_entry(-3.02, "2026-12-02")])
    assert bands["examples"]["plot_x"]["headlines_abs"]["host time added"] == pytest.approx(0.74)
    h = {"name": "host time added", "value": -3.0, "unit": "µs/call (signed)", "low": -3.2, "high": -2.7}
    drift_bands.widen_headlines([h], bands, "plot_x")
    assert (h["low"], h["high"]) == (pytest.approx(-3.94), pytest.approx(-1.96))  # ±0.74 µs, not a log change
    assert h["run_low"] == -3.2 and h["drift_unit"] == "µs/call (signed)" and h["drift_basis"] == "own"
    assert not machine_dependence.is_machine_dependent(h)  # 0.74 µs is not a ±109% log drift
    # without a past of its own it keeps its in-run interval: no other headline says how far it moves
    lone = {"name": "other", "value": 0.1, "unit": "µs/call (signed)", "low": -0.1, "high": 0.3}
    drift_bands.widen_headlines([lone], bands, "plot_x")
    assert "run_low" not in lone and lone["low"] == -0.1


def test_the_backtest_counts_a_signed_difference_widened_by_the_drift_known_then():
    stamps = ("2026-12-01", "2026-12-02", "2026-12-03")
    history = [_signed_entry(v, t) for v, t in zip((-2.28, -2.96, -3.5), stamps)]
    for e, (lo, hi) in zip(history, [(-2.5, -2.1), (-3.1, -2.8), (-3.7, -3.3)]):
        e["headlines"][0].update(low=lo, high=hi)
    out = drift_bands.headline_backtest(history, history, latest_only=True)
    # -3.5 against -2.96's in-run -3.1..-2.8 widened by the 0.68 µs known then: inside
    assert out["headlines"] == 1 and out["inside"] == 1


def _moded(example, utc, medians, modes):
    line = _recording(example, utc, medians)
    for label, mode in modes.items():
        line["measurements"][label]["mode"] = mode
    return line


def test_a_gpu_time_is_floored_by_its_pages_gpu_times_not_by_the_pages_host_loops():
    # plot_04's fused kernel (30.2 µs, steady within 1%) was widened ±75% by its page's wall-clock loops
    events, loop = "cold-L2 events − launch cost", "wall-clock loop"
    modes = {"kernel": events, "other kernel": events, "eager wall-clock loop": loop, "graph.execute": "host"}
    lines = [
        _moded(
            "plot_a",
            "1",
            {"kernel": 1.0, "other kernel": 1.0, "eager wall-clock loop": 1.0, "graph.execute": 1.0},
            modes,
        ),
        _moded(
            "plot_a",
            "2",
            {"kernel": 1.01, "other kernel": 1.02, "eager wall-clock loop": 1.6, "graph.execute": 1.5},
            modes,
        ),
        _moded(
            "plot_a",
            "3",
            {"kernel": 1.0, "other kernel": 1.0, "eager wall-clock loop": 1.0, "graph.execute": 1.0},
            modes,
        ),
    ]
    bands = drift_bands.drift(lines)
    page = bands["examples"]["plot_a"]
    assert page["classes"]["graph.execute"] == "host"  # its mode decides, not its label
    assert page["p95"] == pytest.approx(math.log(1.6))  # the page over all, as before
    assert page["p95_by_class"]["gpu"] == pytest.approx(math.log(1.02))
    assert drift_bands.for_label(bands, "plot_a", "kernel") == pytest.approx(math.log(1.02))
    assert drift_bands.for_label(bands, "plot_a", "graph.execute") == pytest.approx(math.log(1.6))
    # a label new to the page is floored by its class, told by its label when no mode was kept
    assert drift_bands.for_label(bands, "plot_a", "new kernel") == pytest.approx(math.log(1.02))
    assert drift_bands.for_label(bands, "plot_a", "new wall-clock loop") == pytest.approx(math.log(1.6))
    # a ratio of two GPU times is floored by the page's GPU ratios, one with a host time by the host's
    assert drift_bands.for_ratio(bands, "plot_a", "kernel", "other kernel") < 0.02
    assert drift_bands.for_ratio(bands, "plot_a", "kernel", "eager wall-clock loop") > 0.4
    h = {"name": "k", "value": 1.0, "unit": "µs", "low": 0.99, "high": 1.01, "measurement": "kernel"}
    widened = drift_bands.widen_headlines([h], bands, "plot_a")[0]
    assert widened["high"] == pytest.approx(1.01 * 1.02) and widened["drift_basis"] == "own"


def test_a_time_headline_is_floored_by_its_pages_headlines_of_its_unit_family():
    # plot_03's winner median (±0.7% across recordings) was widened ±58% by its page's near-zero % gap
    def line(utc, winner, gap):
        return {
            **_recording("plot_a", utc, {"m": 1.0}),
            "headlines": [
                {"name": "winner median", "value": winner, "unit": "µs"},
                {"name": "gap", "value": gap, "unit": "%"},
            ],
        }

    bands = drift_bands.drift([line("1", 80.0, 0.5), line("2", 80.4, 0.1), line("3", 80.0, 0.6)])
    page = bands["examples"]["plot_a"]
    assert page["headline_p95"] == pytest.approx(math.log(6.0))
    assert page["headline_p95_by_class"]["time"] == pytest.approx(math.log(80.4 / 80.0))
    assert drift_bands.for_headline(bands, "plot_a", "gap") == pytest.approx(math.log(6.0))
    winner = {"name": "winner median", "value": 80.0, "unit": "µs", "low": 79.9, "high": 80.1}
    assert drift_bands.widen_headlines([winner], bands, "plot_a")[0]["drift"] == pytest.approx(math.log(80.4 / 80.0))


def test_a_drift_file_without_classes_keeps_the_pages_floor_over_all():
    page = {"p95": 0.5, "labels": {"kernel": 0.01}}
    assert drift_bands.for_label({"examples": {"plot_a": page}}, "plot_a", "kernel") == 0.5


def test_history_keeps_each_measurements_mode():
    rec = {
        "example": "plot_a",
        "environment": {},
        "measurements": [{"label": "k", "median_ms": 1.0, "q1_ms": 1.0, "q3_ms": 1.0, "n": 3, "mode": "host"}],
    }
    assert history.entry_from_record(rec)["measurements"]["k"]["mode"] == "host"


def test_a_label_new_to_the_drift_file_is_classed_by_the_running_records_mode():
    # plot_08's "raw graph.execute" names no host word; its mode says it times the host
    bands = {
        "examples": {"plot_a": {"p95": 0.6, "labels": {}, "classes": {}, "p95_by_class": {"gpu": 0.02, "host": 0.5}}}
    }
    h = {
        "name": "host cost",
        "value": 20.0,
        "unit": "µs",
        "low": 19.0,
        "high": 21.0,
        "measurement": "raw graph.execute",
    }
    by_name = drift_bands.widen_headlines([dict(h)], bands, "plot_a")[0]
    by_mode = drift_bands.widen_headlines([dict(h)], bands, "plot_a", {"raw graph.execute": "host"})[0]
    assert by_name["drift"] == 0.02 and by_mode["drift"] == 0.5


def test_every_label_whose_mode_was_kept_is_classed_even_without_a_recent_change():
    modes = {"kernel": "cold-L2 events", "raw graph.execute": "host"}
    lines = [
        _moded("plot_a", "1", {"kernel": 1.0}, {"kernel": modes["kernel"]}),
        _moded("plot_a", "2", {"kernel": 1.01, "raw graph.execute": 0.02}, modes),
    ]
    page = drift_bands.drift(lines)["examples"]["plot_a"]
    assert page["classes"] == {"kernel": "gpu", "raw graph.execute": "host"}


def test_for_headline_takes_the_floor_of_its_units_family():
    page = {"headline_p95": 0.5, "headlines": {}, "headline_p95_by_class": {"time": 0.01, "%": 0.5}}
    bands = {"examples": {"plot_a": page}}
    assert drift_bands.for_headline(bands, "plot_a", "winner median", "µs") == 0.01
    assert drift_bands.for_headline(bands, "plot_a", "winner median") == 0.5
