"""tools/schedule_replay.py: the model of the GPU's turn, and the committed replay of 5a51bec's recordings."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import schedule_replay as sr  # noqa: E402
from turn_timeline import read_traces  # noqa: E402


def test_a_pages_turns_become_segments_without_their_waits():
    turns = [
        {"mode": "shared", "asked": 10.0, "taken": 12.0, "given": 13.0},  # waited 2 s: dropped
        {"mode": "exclusive", "asked": 15.0, "taken": 15.5, "given": 17.5},
        {"mode": "shared", "asked": 17.5, "taken": 17.5, "given": 18.0},
    ]
    assert sr.segments(turns) == [("shared", 1.0), ("free", 2.0), ("alone", 2.0), ("shared", 0.5)]


@pytest.mark.parametrize(
    ("pages", "queue", "lanes", "span"),
    [
        ({"a": [("alone", 2.0)], "b": [("alone", 3.0)]}, ["a", "b"], 2, 5.0),  # one measures at a time
        ({"a": [("shared", 4.0)], "b": [("shared", 4.0)]}, ["a", "b"], 2, 4.0),  # cells run beside each other
        ({"a": [("free", 4.0)], "b": [("alone", 4.0)]}, ["a", "b"], 2, 4.0),  # CPU-only work beside a measurement
        ({"a": [("alone", 2.0)], "b": [("shared", 4.0)]}, ["a", "b"], 2, 6.0),  # a lane waiting to measure goes first
        ({"a": [("shared", 4.0)], "b": [("free", 1.0), ("alone", 1.0)]}, ["a", "b"], 2, 5.0),  # waits for the cell
        ({"a": [("alone", 1.0)], "b": [("alone", 1.0)], "c": [("free", 5.0)]}, ["c", "a", "b"], 2, 5.0),
        ({"a": [("alone", 1.0)], "b": [("alone", 1.0)]}, ["a", "b"], 1, 2.0),  # one lane: one after another
    ],
)
def test_the_model_follows_the_turns_rules(pages, queue, lanes, span):
    assert sr.simulate(pages, lanes, queue=queue) == pytest.approx(span)


def test_pages_first_run_alone_before_the_lanes_and_each_lane_pauses_between_pages():
    pages = {"h": [("alone", 3.0)], "a": [("free", 2.0)], "b": [("free", 2.0)], "c": [("free", 2.0)]}
    assert sr.simulate(pages, 2, queue=["a", "b"], first=["h"]) == pytest.approx(5.0)
    # gap 1 s: h, gap, then a and b at once: 3 + 1 + 2; with c on a lane, one page more after a gap
    assert sr.simulate(pages, 2, queue=["a", "b", "c"], first=["h"], gap=1.0) == pytest.approx(9.0)
    assert sr.simulate(pages, plan=[["a", "c"], ["b"]]) == pytest.approx(4.0)


def test_the_recorders_log_gives_the_lanes_their_order_and_the_pages_first():
    traces = {p: [] for p in ("h.py", "a.py", "b.py", "c.py")}
    log = "\n".join(
        [
            "cudnn-guide: 4 page(s) on 2 lane(s) of 1 GPU(s), taking turns on each, longest first; "
            "alone first on lane 0: h.py: lane 0: h.py, a.py; lane 1: b.py, c.py",
            "cudnn-guide: recording h.py in a fresh interpreter on lane 0 (1 of 4; last recording 3 s)",
            "cudnn-guide: recording b.py in a fresh interpreter on lane 1 (2 of 4; last recording 3 s)",
            "cudnn-guide: recording a.py in a fresh interpreter on lane 0 (3 of 4; last recording 3 s)",
            "cudnn-guide: recording c.py in a fresh interpreter on lane 1 (4 of 4; last recording 3 s)",
        ]
    )
    assert sr.recorded_plan(traces, log) == (["h.py"], [["a.py"], ["b.py", "c.py"]])


def test_the_committed_replay_models_both_recordings_within_one_percent_and_is_what_the_tool_gives(tmp_path):
    committed = json.loads((ROOT / "docs" / "data" / "schedule_replay.json").read_text())
    with tarfile.open(ROOT / "docs" / "data" / "turn_traces_5a51bec.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    logs = ROOT / "docs" / "data" / "recorder_logs"
    traces = read_traces(tmp_path / "A" / "trace_A")
    again = sr.study(traces, (logs / "5a51bec_A.log").read_text(), committed["recorded_span"])
    assert again["scenarios"] == committed["scenarios"] and again["best_order"] == committed["best_order"]
    own = committed["scenarios"]["the recording's lanes and order"]
    assert abs(own - committed["recorded_span"]) < 0.01 * committed["recorded_span"]
    held = committed["holdout"]
    assert abs(held["the recording's lanes and order"] - held["recorded_span"]) < 0.01 * held["recorded_span"]
    other = sr.holdout(
        read_traces(tmp_path / "B" / "trace_B"),
        (logs / "b2b5b74_B.log").read_text(),
        committed["best_order"],
        committed["gap_seconds"],
    )
    assert other == {k: v for k, v in held.items() if k != "recorded_span"}
