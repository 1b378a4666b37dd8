from gallery_build import history
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cudnn_guide.measure import measurement


def _entry(when, median, iqr, commit="c"):
    return {
        "example": "plot_x",
        "recorded_utc": when,
        "commit": commit,
        "gpu": "H200",
        "measurements": {"k": {"median_ms": median, "q1_ms": median - iqr / 2, "q3_ms": median + iqr / 2, "n": 100}},
        "headlines": [],
    }


@settings(max_examples=80, deadline=None)
@given(st.floats(0.01, 100.0), st.floats(0.0, 0.5))
def test_an_unchanged_measurement_never_moves(median, rel_iqr):
    rows = history.changes([_entry("1", median, median * rel_iqr), _entry("2", median, median * rel_iqr)])
    assert len(rows) == 1 and not rows[0]["moved"] and rows[0]["change_pct"] == 0


@settings(max_examples=80, deadline=None)
@given(st.floats(0.01, 100.0), st.floats(0.0, 0.2), st.floats(-0.9, 3.0))
def test_moved_exactly_when_the_change_exceeds_the_band(median, rel_iqr, change):
    prev, cur = _entry("1", median, median * rel_iqr), _entry("2", median * (1 + change), median * rel_iqr)
    (row,) = history.changes([prev, cur])
    band = max(history.BAND_IQR_FACTOR * median * rel_iqr, history.BAND_MIN_FRACTION * median)  # same IQR in both
    assume(abs(abs(median * change) - band) > 1e-9 * median)  # not on the boundary, where rounding decides
    assert row["moved"] == (abs(median * change) > band)


def test_only_the_last_two_recordings_are_compared_in_time_order():
    entries = [
        _entry("2026-11-29T03", 3.0, 0.0, "c3"),
        _entry("2026-11-29T01", 1.0, 0.0, "c1"),
        _entry("2026-11-29T02", 1.0, 0.0, "c2"),
    ]
    (row,) = history.changes(entries)
    assert (row["previous_commit"], row["latest_commit"]) == ("c2", "c3")
    assert row["moved"] and round(row["change_pct"]) == 200


def test_append_and_load_round_trip(tmp_path):
    path = tmp_path / "h.jsonl"
    history.append(path, [_entry("1", 1.0, 0.1)])
    history.append(path, [_entry("2", 1.5, 0.1)])
    assert [e["recorded_utc"] for e in history.load(path)] == ["1", "2"]
    assert history.load(tmp_path / "missing.jsonl") == []


def test_compare_and_by_example_pair_any_two_recordings():
    def entry(example, utc, commit, median):
        m = {"median_ms": median, "q1_ms": median * 0.99, "q3_ms": median * 1.01}
        return {"example": example, "recorded_utc": utc, "commit": commit, "measurements": {"k": m}}

    hist = [
        entry("a", "2026-01-02", "c2", 1.10),
        entry("a", "2026-01-01", "c1", 1.00),
        entry("a", "2026-01-03", "c3", 1.11),
        entry("b", "2026-01-01", "c1", 2.0),
    ]
    pages = history.by_example(hist)
    assert [e["commit"] for e in pages["a"]] == ["c1", "c2", "c3"] and len(pages["b"]) == 1
    first = history.compare(pages["a"][0], pages["a"][1])
    assert first[0]["moved"] and round(first[0]["change_pct"], 6) == 10.0  # beyond a 2% band
    latest = history.changes(hist)  # the last two of each page with two or more
    assert len(latest) == 1 and latest[0]["previous_commit"] == "c2" and not latest[0]["moved"]


def test_a_change_of_timing_method_is_not_a_move():
    # the previous recording kept raw event times (no launch_cost_ms); the latest subtracted 3.6 µs
    prev = _entry("1", 0.0339, 0.0005)
    cur = _entry("2", 0.0303, 0.0005)
    cur["measurements"]["k"]["launch_cost_ms"] = 0.0036
    (row,) = history.changes([prev, cur])
    assert not row["same_method"] and not row["moved"] and row["change_pct"] < -10
    # the same change with the same method is a move
    prev["measurements"]["k"]["launch_cost_ms"] = 0.0036
    (row,) = history.changes([prev, cur])
    assert row["same_method"] and row["moved"]


def test_history_entries_keep_the_launch_cost():

    m = measurement.Measurement("k", [0.030, 0.031], "cold-L2 events − launch cost", launch_cost_ms=0.0036)
    entry = history.entry_from_record({"example": "plot_x", "measurements": [m.to_dict()]})
    assert entry["measurements"]["k"]["launch_cost_ms"] == 0.0036


def test_a_new_harness_version_is_a_change_of_method_when_both_sides_know_it():
    prev, cur = _entry("1", 0.0850, 0.0005), _entry("2", 0.0800, 0.0005)
    for e, version in ((prev, 1), (cur, 2)):
        e["measurements"]["k"].update(launch_cost_ms=0.0035, timing_method=version)
    (row,) = history.changes([prev, cur])
    assert not row["same_method"] and not row["moved"]
    del prev["measurements"]["k"]["timing_method"]  # unknown on one side: judged by the launch cost alone
    (row,) = history.changes([prev, cur])
    assert row["same_method"] and row["moved"]


def test_drift_counts_recordings_kept_off_the_site(tmp_path):
    """A second lease's recording, kept off the site in its own history file, is a re-recording all
    the same: the drift the next recording widens by includes how far it moved."""
    import json
    import math

    from gallery_build import drift_bands

    def write(name, entries):
        (tmp_path / name).write_text("".join(json.dumps(e) + "\n" for e in entries))

    write("history.jsonl", [_entry("2026-12-01T01", 1.0, 0.0), _entry("2026-12-01T02", 1.01, 0.0)])
    site_only = drift_bands.drift(drift_bands.recordings(tmp_path))
    assert math.isclose(site_only["examples"]["plot_x"]["labels"]["k"], math.log(1.01))
    write("b2_second_lease.history.jsonl", [_entry("2026-12-01T03", 1.25, 0.0)])
    lines = drift_bands.recordings(tmp_path)
    assert [e["recorded_utc"] for e in lines] == ["2026-12-01T01", "2026-12-01T02", "2026-12-01T03"]
    with_lease = drift_bands.drift(lines)
    assert math.isclose(with_lease["examples"]["plot_x"]["labels"]["k"], math.log(1.25 / 1.01))


def test_the_code_digest_ignores_text_comments_and_layout_but_not_code():
    page = '"""Title\n\nProse."""\n# %%\n# Text block.\nx = compile_quietly(f, dynamic=None)\n'
    reworded = '"""Other title."""\n# %%\n# Other text.\nx = compile_quietly(f,  dynamic=None)\n'
    assert history.code_digest(page) == history.code_digest(reworded)
    assert history.code_digest(page) != history.code_digest(page.replace("dynamic=None", "dynamic=False"))


def test_a_change_of_the_examples_code_is_not_a_move_nor_drift(tmp_path):
    """plot_11's baseline went from symbolic to per-shape compiles: a 2.5x move that is the code's, not noise."""
    import json
    import math

    from gallery_build import drift_bands

    a, b, c = _entry("2026-12-01T01", 1.0, 0.0), _entry("2026-12-01T02", 1.02, 0.0), _entry("2026-12-01T03", 2.5, 0.0)
    a["code_md5"], b["code_md5"], c["code_md5"] = "v1", "v1", "v2"
    assert history.comparable(b, c) == "the example's code changed (c vs c)"
    (row,) = history.changes([a, b, c])
    assert not row["same_method"] and not row["moved"]
    report = history.reproducibility([a, b, c])
    assert report["pages"] == 0 and report["not_compared"][0]["reason"].startswith("the example's code changed")
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in (a, b, c)))
    drift = drift_bands.drift(drift_bands.recordings(tmp_path))
    assert math.isclose(drift["examples"]["plot_x"]["labels"]["k"], math.log(1.02))  # the 2.5x is left out
    del b["code_md5"]  # unknown on one side: compared as before
    assert history.comparable(b, c) is None


def test_history_entries_carry_the_digest_of_the_example_copy_that_ran(tmp_path):
    import json

    record = {"example": "plot_x", "measurements": [], "headlines": []}
    (tmp_path / "plot_x.record.json").write_text(json.dumps(record))
    (entry,) = history.entries_from_gallery(tmp_path)
    assert "code_md5" not in entry  # no copy of the example beside the record
    (tmp_path / "plot_x.py").write_text("x = 1\n")
    (entry,) = history.entries_from_gallery(tmp_path)
    assert entry["code_md5"] == history.code_digest("x = 1\n")


def test_every_committed_history_line_carries_its_code_digest():
    from pathlib import Path

    data = Path(__file__).resolve().parents[2] / "docs" / "data"
    for path in sorted(data.glob("*history.jsonl")):
        missing = [i + 1 for i, e in enumerate(history.load(path)) if not e.get("code_md5")]
        assert not missing, f"{path.name}: lines {missing[:5]} lack code_md5 (run tools/history_code_digest.py)"


def test_the_code_digest_is_the_same_on_every_python_that_parses_alike():
    """The builder records with 3.12, CI and the backfill ran 3.11: ``ast.dump`` differs between them
    (3.12 writes ``type_params=[]``), which would have made every later pair look like a code change.
    This digest was computed on CPython 3.11.7, 3.12.1 and 3.13.0 alike."""
    snippet = (
        '"""A page."""\nimport torch\n# %%\n# Text.\n@torch.no_grad()\ndef f(x: int, *, y=2) -> int:\n'
        "    return [i async for i in x] if y else {k: v for k, v in x.items()}\nclass C:\n    z: float = 1.5\n"
        'print(f"{f(1)!r:>10}", lambda q: q ** 2, ...)\n'
    )
    assert history.code_digest(snippet) == "69a750cfc6db451dd5550b2746b1c246"
