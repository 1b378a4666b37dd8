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


def test_a_drift_that_is_the_sites_fallback_is_not_called_machine_dependent():
    """A page with no comparable past recording is widened by the whole site's drift: that says nothing of how
    far its own numbers move between machines, so the results page must not show it as a range (issue 35)."""
    from gallery_build import drift_bands

    bands = {"global_p95": 0.3, "global_headline_p95": 0.3, "global_ratio_p90": 0.2, "examples": {}}
    h = {
        "name": "x: speed-up",
        "value": 1.0,
        "low": 0.99,
        "high": 1.01,
        "unit": "x",
        "kind": "comparison",
        "verdict": "tie",
        "tie_band": 0.02,
        "baseline_measurement": "a",
        "candidate_measurement": "b",
    }
    (w,) = drift_bands.widen_headlines([dict(h)], bands, "plot_new")
    assert w["drift"] == 0.2 and w["drift_basis"] == "site"
    assert not md.is_machine_dependent(w)
    steps = [{"a": 0.3, "b": 0.0}, {"a": -0.3, "b": 0.0}]  # the ratio's own past: it moved ±30%
    bands["examples"]["plot_old"] = {"p95": 0.3, "changes": steps, "ratio_p90": 0.3, "ratio_floor": 0.3}
    (w,) = drift_bands.widen_headlines([dict(h)], bands, "plot_old")
    assert w["drift_basis"] == "own" and md.is_machine_dependent(w)


def test_the_schema_refuses_an_unknown_drift_basis():
    import pytest
    from gallery_build import schema

    rec_h = {"name": "t", "value": 1.0, "unit": "ms", "drift": 0.1, "drift_basis": "<script>"}
    with pytest.raises(schema.SchemaError, match="drift_basis"):
        schema._check_headline(rec_h, ("headlines", 0))
