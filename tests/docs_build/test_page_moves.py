"""A page split off another keeps the history its measurements were recorded under (issue 33)."""

from __future__ import annotations

from gallery_build import drift_bands, machine_dependence, page_moves, sections


def _entry(example, utc, value, code="c1", name="t"):
    return {
        "example": example,
        "recorded_utc": utc,
        "gpu": "G",
        "code_md5": code,
        "measurements": {name: {"median_ms": value, "q1_ms": value, "q3_ms": value, "n": 9}},
        "headlines": [{"name": name, "value": value, "unit": "ms"}],
    }


def test_a_new_page_with_no_recording_gets_its_sources_drift(monkeypatch):
    old = [_entry("old", "1", 1.0), _entry("old", "2", 1.3), _entry("old", "3", 1.0)]
    assert "new" not in drift_bands._drift(old)["examples"]
    monkeypatch.setattr(page_moves, "MOVED_FROM", {"new": "old"})
    bands = drift_bands._drift(old)
    assert bands["examples"]["new"] == bands["examples"]["old"] and bands["examples"]["old"]["headlines"]["t"] > 0.2
    # its first recording is widened by the old page's history of that headline, not the site's fallback
    h = {"name": "t", "value": 1.0, "low": 0.99, "high": 1.01, "unit": "ms"}
    (w,) = drift_bands.widen_headlines([h], bands, "new")
    assert w["drift_basis"] == "own" and w["drift"] == bands["examples"]["old"]["headlines"]["t"]


def test_the_drift_file_carries_every_moved_page_whose_source_has_history():
    history = drift_bands.recordings(__import__("pathlib").Path(__file__).parents[2] / "docs" / "data")
    bands = drift_bands.drift(history)
    recorded = {e["example"] for e in history}
    for new, old in page_moves.MOVED_FROM.items():
        if old in recorded and bands["examples"].get(old):
            assert bands["examples"].get(new) == bands["examples"][old] or new in recorded, new


def test_the_old_and_the_new_page_never_pair_across_the_move():
    """Their code differs, so no change is measured from the old page's recording to the new one's."""
    entries = [_entry("old", "1", 1.0), _entry("new", "2", 5.0, code="c2")]
    part = drift_bands._example_drift(entries)
    assert part["pairs"] == 0


def test_a_headlines_range_counts_recordings_under_the_old_name():
    history = [_entry("plot_24_softcap_sinks_mla", "1", 2.0), _entry("plot_35_attention_sinks", "2", 3.0)]
    assert machine_dependence.recorded_range(history, "plot_35_attention_sinks", "t", "G") == (2.0, 3.0, 2)
    assert machine_dependence.recorded_range(history, "plot_24_softcap_sinks_mla", "t", "G") == (2.0, 2.0, 1)


def test_lineage_stops_at_a_cycle():
    assert page_moves.lineage("a", {"a": "b", "b": "a"}) == ("a", "b")


def test_every_moved_page_is_placed_in_a_section():
    for new in page_moves.MOVED_FROM:
        assert sections.section_of(new)


def test_the_sites_quantiles_count_each_recording_pair_once(monkeypatch):
    """A moved page reuses its source's pairs for its own band, never again in the site's quantiles."""
    from pathlib import Path

    history = drift_bands.recordings(Path(__file__).parents[2] / "docs" / "data")
    with_moves = drift_bands.drift(history)
    monkeypatch.setattr(page_moves, "MOVED_FROM", {})
    monkeypatch.setattr(drift_bands, "with_lineage", lambda groups: dict(groups))
    without = drift_bands.drift(history)
    for key in ("global_p95", "global_headline_p95", "global_ratio_p90", "pairs"):
        assert with_moves[key] == without[key], key
    assert set(with_moves["examples"]) > set(without["examples"])
