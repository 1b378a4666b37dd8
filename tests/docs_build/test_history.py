import json
import os
import subprocess
import sys

import pytest
from gallery_build import history
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cudnn_guide.errors import CorruptDataError
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


def test_a_change_of_the_lesson_alone_keeps_two_recordings_comparable_and_says_so():
    lesson_a = "import torch\nx = torch.ones(2)\ny = x + 1\n"
    lesson_b = "import torch\ny = torch.ones(2) + 1\n"  # the same lesson, trimmed
    measuring = "# %%\n# Measuring the add\n# -------------\nt = time_it(y)\n"
    other = "# %%\n# Measuring the add\n# -------------\nt = time_it(y, rounds=3)\n"
    b, c, d = _entry("2026-12-01T02", 1.0, 0.0), _entry("2026-12-01T03", 1.01, 0.0), _entry("2026-12-01T04", 1.0, 0.0)
    for entry, page in ((b, lesson_a + measuring), (c, lesson_b + measuring), (d, lesson_b + other)):
        entry["code_md5"], entry["measure_md5"] = history.code_digest(page), history.measuring_digest(page)
    assert b["code_md5"] != c["code_md5"] and history.comparable(b, c) is None and history.lesson_only(b, c)
    report = history.reproducibility([b, c])
    assert report["pages"] == 1 and report["lesson_only"] == ["plot_x"]
    assert "lesson edited, measuring code unchanged: plot_x" in history.format_reproducibility(report)
    assert history.comparable(c, d).startswith("the example's code changed")  # the measuring code changed
    assert history.measuring_digest(lesson_a) is None  # a page without a "Measuring" cell: whole-code rule only
    del b["measure_md5"]
    assert history.comparable(b, c).startswith("the example's code changed")


def test_history_entries_carry_the_digest_of_the_example_copy_that_ran(tmp_path):
    import json

    record = {"example": "plot_x", "measurements": [], "headlines": []}
    (tmp_path / "plot_x.record.json").write_text(json.dumps(record))
    (entry,) = history.entries_from_gallery(tmp_path)
    assert "code_md5" not in entry  # no copy of the example beside the record
    (tmp_path / "plot_x.py").write_text("x = 1\n")
    (entry,) = history.entries_from_gallery(tmp_path)
    assert entry["code_md5"] == history.code_digest("x = 1\n") and "measure_md5" not in entry
    (tmp_path / "plot_x.py").write_text("x = 1\n# %%\n# Measuring x\ny = 2\n")
    (entry,) = history.entries_from_gallery(tmp_path)
    assert entry["measure_md5"] == history.code_digest("# %%\n# Measuring x\ny = 2\n")


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


def test_changes_leave_out_a_pair_recorded_on_another_gpu_or_software():
    """The probe: "What moved" compared an H200 recording with a B200 one and flagged 421 of 428 as moved."""
    h200, b200 = _entry("2026-12-01T01", 1.0, 0.0), _entry("2026-12-01T02", 0.5, 0.0)
    b200["gpu"] = "B200"
    assert history.comparable(h200, b200) == "recorded on different GPUs (H200 vs B200)"
    assert history.changes([h200, b200]) == []
    newer = _entry("2026-12-01T02", 0.5, 0.0)
    h200["software"], newer["software"] = {"cudnn_backend": "9.19.0"}, {"cudnn_backend": "9.20.0"}
    assert history.changes([h200, newer]) == []  # another cuDNN: another machine, not a move
    newer["software"] = {"cudnn_backend": "9.19.0"}
    (row,) = history.changes([h200, newer])  # the same setup: compared, and a halving moved
    assert row["moved"]


def _write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_a_history_line_holding_nan_is_refused_naming_file_line_and_field(tmp_path):
    """The probe: an entry of NaNs counted as "not moved", a recording that reproduced."""
    good, bad = _entry("1", 1.0, 0.1), _entry("2", 1.0, 0.1)
    bad["measurements"]["k"].update(median_ms=float("nan"), q1_ms=float("nan"), q3_ms=float("nan"))
    path = _write_lines(tmp_path / "h.jsonl", [json.dumps(good), "", json.dumps(bad)])
    with pytest.raises(CorruptDataError, match=r"h\.jsonl:3: field measurements\.k\.median_ms is nan"):
        history.load(path)
    bad = _entry("2", 1.0, 0.1)
    bad["headlines"] = [{"name": "speed-up", "value": 1.2, "low": float("-inf"), "high": 1.3}]
    _write_lines(path, [json.dumps(good), json.dumps(bad)])
    with pytest.raises(CorruptDataError, match=r"h\.jsonl:2: field headlines\[0\]\.low is -inf"):
        history.load(path)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('"extra": {"deep": [1, {"x": 1e999}]}', r"extra\.deep\[1\]\.x is inf"),  # JSON's overflow: an infinity
        ('"extra": [[[NaN]]]', r"extra\[0\]\[0\]\[0\] is nan"),
        ('"extra": {"ok": [1, "a", null, true, 2.5], "bad": -Infinity}', r"extra\.bad is -inf"),
    ],
)
def test_a_number_that_is_not_finite_is_refused_wherever_it_sits(tmp_path, line, field):
    entry = json.dumps(_entry("1", 1.0, 0.1))
    path = _write_lines(tmp_path / "h.jsonl", [entry, entry[:-1] + ", " + line + "}"])
    with pytest.raises(CorruptDataError, match=r"h\.jsonl:2: field " + field):
        history.load(path)


def test_an_entry_built_in_python_is_checked_as_a_parsed_one():
    """Beyond what JSON parses to (a float subclass, a tuple), the check walks the entry as it always did."""
    import numpy as np

    entry = _entry("1", 1.0, 0.1)
    entry["measurements"]["k"]["n"] = np.float64("nan")  # a float: refused
    with pytest.raises(CorruptDataError, match=r"field measurements\.k\.n is nan"):
        history.check_entry(entry, "h.jsonl", 1)
    entry["measurements"]["k"]["n"] = (float("nan"),)  # a tuple is no JSON list: never read, as before
    assert history.check_entry(entry, "h.jsonl", 1) is entry
    assert not history._plainly_finite({"a": (1.0,)}) and not history._plainly_finite([np.float64(1.0)])
    assert history._plainly_finite({"a": [1, "x", None, False, 2.5, {"b": -0.0}]})
    assert not history._plainly_finite({"a": [1, {"b": float("inf")}]})


def test_a_history_line_of_another_shape_is_refused_naming_file_and_line(tmp_path):
    good = json.dumps(_entry("1", 1.0, 0.1))
    no_median = _entry("2", 1.0, 0.1)
    del no_median["measurements"]["k"]["median_ms"]
    for line, why in [
        ("[1,2,3]", r"not a history entry \(a JSON list"),
        ('"plot_x"', r"not a history entry \(a JSON string"),
        ('{"example": "plot_x"}', r"field 'measurements' is missing"),
        ('{"measurements": {}}', r"field 'example' is missing"),
        (json.dumps(no_median), r"field measurements\['k'\]\.median_ms is missing or not a number"),
        (json.dumps(dict(_entry("2", 1.0, 0.1), headlines={"a": 1})), r"field 'headlines' is not a list"),
    ]:
        path = _write_lines(tmp_path / "h.jsonl", [good, line])
        with pytest.raises(CorruptDataError, match=rf"h\.jsonl:2: {why}.*Fix: "):
            history.load(path)


def test_the_history_command_refuses_a_path_that_does_not_exist(tmp_path, root):
    """The probe: it printed "0 pages compared" and exited 0."""

    def run(*args):
        env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{root / 'docs' / '_ext'}")
        cmd = [sys.executable, "-m", "gallery_build.history", *map(str, args)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)

    missing = run(tmp_path / "no-such-history.jsonl")
    assert missing.returncode == 2 and "0 pages compared" not in missing.stdout
    assert f"{tmp_path / 'no-such-history.jsonl'}: no such history file" in missing.stderr
    _write_lines(tmp_path / "bad.jsonl", ["[1,2,3]"])
    corrupt = run(tmp_path / "bad.jsonl")
    assert corrupt.returncode == 1 and "bad.jsonl:1: not a history entry" in corrupt.stderr
    _write_lines(tmp_path / "ok.jsonl", [json.dumps(_entry("1", 1.0, 0.1)), json.dumps(_entry("2", 1.0, 0.1))])
    ok = run(tmp_path / "ok.jsonl")
    assert ok.returncode == 0 and "1 pages compared" in ok.stdout
