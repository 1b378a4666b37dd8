"""tools/turn_timeline.py: a recording's turns on one clock, split into alone, shared and idle time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import turn_timeline


def _write(folder: Path, page: str, turns: list[tuple[str, float, float, float]]) -> None:
    rows = [{"mode": m, "asked": a, "taken": t, "given": g} for m, a, t, g in turns]
    (folder / f"{page[:-3]}.turns.json").write_text(json.dumps({"page": page, "turns": rows}))


def test_the_span_splits_into_alone_shared_blocking_shared_and_idle(tmp_path):
    # a.py: a cell 0-4 (shared), b.py asks to measure at 1 and gets it at 4 until 6; then a cell of b 7-9
    _write(tmp_path, "a.py", [("shared", 0, 0, 4)])
    _write(tmp_path, "b.py", [("exclusive", 1, 4, 6), ("shared", 7, 7, 9)])
    t = turn_timeline.timeline(turn_timeline.read_traces(tmp_path))
    assert t["span"] == 9
    assert (t["alone"], t["shared_blocking"], t["shared"], t["idle"]) == (2, 3, 3, 1)
    assert sum(t[k] for k in turn_timeline.KINDS) == t["span"]
    assert t["alone_waited"] == 3 and t["blocking_by_page"] == {"a.py": 3}
    # a.py ends at 4: the idle second (6-7) falls while only b.py was in progress, one of at most two
    assert t["pages_at_most"] == 2 and t["idle_fewer_pages"] == 1


def test_two_sharers_split_the_wait_they_cause(tmp_path):
    _write(tmp_path, "a.py", [("shared", 0, 0, 2)])
    _write(tmp_path, "b.py", [("shared", 0, 0, 2)])
    _write(tmp_path, "c.py", [("exclusive", 0, 2, 3)])
    t = turn_timeline.timeline(turn_timeline.read_traces(tmp_path))
    assert t["blocking_by_page"] == {"a.py": 1, "b.py": 1} and t["shared_blocking"] == 2 and t["alone"] == 1


def test_alone_time_is_charged_to_the_measured_block_that_held_it(tmp_path):
    """Library blocks add up across pages; a page's own blocks and cell-wide turns name the page."""
    rows = {
        "plot_01_a.py": [
            {"mode": "exclusive", "asked": 0, "taken": 0, "given": 3, "owner": "cudnn_guide.measure.compare.compare"},
            {"mode": "exclusive", "asked": 3, "taken": 3, "given": 4, "owner": "plot_01_a.py:12"},
        ],
        "plot_02_b.py": [
            {"mode": "exclusive", "asked": 0, "taken": 4, "given": 6, "owner": "cudnn_guide.measure.compare.compare"},
            {"mode": "exclusive", "asked": 6, "taken": 6, "given": 6.5, "owner": "cell"},
            {"mode": "exclusive", "asked": 7, "taken": 7, "given": 7.25},  # a trace from before owners were kept
        ],
    }
    for page, turns in rows.items():
        (tmp_path / f"{page[:-3]}.turns.json").write_text(json.dumps({"page": page, "turns": turns}))
    t = turn_timeline.timeline(turn_timeline.read_traces(tmp_path))
    assert t["alone_by_owner"] == {
        "cudnn_guide.measure.compare.compare": 5,
        "plot_01_a: plot_01_a.py:12": 1,
        "plot_02_b: cell": 0.5,
        "unknown": 0.25,
    }
    assert sum(t["alone_by_owner"].values()) == t["alone"]


@pytest.mark.parametrize(
    "bad",
    [
        {"page": "a.py", "turns": [{"mode": "shared", "asked": 2, "taken": 1, "given": 3}]},
        {"page": "a.py", "turns": [{"mode": "alone", "asked": 0, "taken": 1, "given": 3}]},
        {"page": "a.py", "turns": [{"mode": "shared", "asked": "0", "taken": 1, "given": 3}]},
        {"page": "a.py", "turns": [{"mode": "shared", "asked": 0, "taken": 1, "given": 3, "owner": 7}]},
        {"page": "a.py"},
        ["not", "a", "trace"],
    ],
)
def test_a_malformed_trace_is_refused_naming_its_file(tmp_path, bad):
    (tmp_path / "a.turns.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="a.turns.json"):
        turn_timeline.read_traces(tmp_path)


def test_an_empty_folder_says_how_to_make_a_trace(tmp_path):
    with pytest.raises(ValueError, match="CUDNN_GUIDE_TURN_TRACE"):
        turn_timeline.read_traces(tmp_path)


def test_the_cells_that_held_the_shared_turn_longest_are_named_by_page_and_line(tmp_path):
    rows = {
        "a.py": [
            {"mode": "shared", "asked": 0, "taken": 0, "given": 1, "line": 5},
            {"mode": "exclusive", "asked": 1, "taken": 1, "given": 2, "line": 5},  # alone: not a shared turn
            {"mode": "shared", "asked": 2, "taken": 2, "given": 4.5, "line": 5},
            {"mode": "shared", "asked": 5, "taken": 5, "given": 5.5, "line": 9},
        ],
        "b.py": [{"mode": "shared", "asked": 0, "taken": 1, "given": 4, "line": 30}],  # its wait is not held
    }
    for page, turns in rows.items():
        (tmp_path / f"{page[:-3]}.turns.json").write_text(json.dumps({"page": page, "turns": turns}))
    t = turn_timeline.timeline(turn_timeline.read_traces(tmp_path))
    assert t["shared_by_cell"] == [
        {"page": "a.py", "line": 5, "seconds": 3.5, "turns": 2},
        {"page": "b.py", "line": 30, "seconds": 3.0, "turns": 1},
        {"page": "a.py", "line": 9, "seconds": 0.5, "turns": 1},
    ]


def test_traces_without_lines_give_no_cells(tmp_path):
    _write(tmp_path, "a.py", [("shared", 0, 0, 4)])
    assert "shared_by_cell" not in turn_timeline.timeline(turn_timeline.read_traces(tmp_path))
