"""Headlines whose drift between recordings is above ±15% are shown as their range across recordings."""

from __future__ import annotations

from gallery_build import machine_dependence as md


def _entry(value, gpu="NVIDIA H200", torch="2.11", example="plot_x"):
    return {"example": example, "gpu": gpu, "software": {"torch": torch}, "headlines": [{"name": "t", "value": value}]}


RECORD = {"example": "plot_x", "environment": {"gpu": "NVIDIA H200", "torch": "2.11"}}


def test_a_machine_dependent_headline_is_ranged_over_its_gpu_and_software_only():
    recs = [
        _entry(2.0),
        _entry(3.0),
        _entry(9.0, gpu="NVIDIA B200"),
        _entry(0.1, torch="2.13"),
        _entry(5.0, example="p"),
    ]
    assert md.shown_as_range(recs, RECORD, {"name": "t", "drift": 0.5}) == (2.0, 3.0, 2)
    assert md.range_text((2.0, 3.0, 2), "x") == "2–3 x across 2 recordings"


def test_a_narrow_drift_or_a_single_recording_keeps_the_interval():
    recs = [_entry(2.0), _entry(3.0)]
    assert md.shown_as_range(recs, RECORD, {"name": "t", "drift": 0.1}) is None  # below ±15%
    assert md.shown_as_range(recs[:1], RECORD, {"name": "t", "drift": 0.5}) is None  # new to the site
    assert md.shown_as_range(recs, RECORD, {"name": "t"}) is None  # never widened
    assert not md.is_machine_dependent({"drift": "not a number"})


def test_non_numeric_values_are_not_ranged():
    recs = [_entry(float("nan")), _entry(True), _entry("fast"), _entry(4.0)]
    assert md.recorded_range(recs, "plot_x", "t", "NVIDIA H200") == (4.0, 4.0, 1)
