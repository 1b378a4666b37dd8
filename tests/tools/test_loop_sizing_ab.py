"""cc933e0's loop-sizing A/B: the old arm looped 50 calls, the new one sized them."""

from __future__ import annotations

import json
from pathlib import Path

import loop_sizing_ab

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"


def test_the_old_arm_looped_50_calls_and_the_new_one_sized_its_loops():
    ab = json.loads((DATA / "loop_sizing_ab.json").read_text())
    old, new = ab["arms"]["old"]["wall_clock_loops"], ab["arms"]["new"]["wall_clock_loops"]
    assert old["calls_per_loop"] == [50]
    assert min(new["calls_per_loop"]) >= 10 and max(new["calls_per_loop"]) <= 50 and len(new["calls_per_loop"]) > 1


def test_loops_reads_calls_per_loop_from_params_and_50_where_absent(tmp_path):
    loop = {"mode": "wall-clock loop", "samples_ms": [2.0, 2.0], "median_ms": 2.0}
    record = {
        "measurements": [loop, {**loop, "params": {"loop_calls": 10}}, {"mode": "cold-L2 events", "samples_ms": [1]}]
    }
    (tmp_path / "p.record.json").write_text(json.dumps(record))
    assert loop_sizing_ab.loops(tmp_path) == {
        "measurements": 2,
        "calls_per_loop": [10, 50],
        "at_most_calls": 1,
        "seconds": 0.24,
        "by_page": {"p": 0.24},
        "loop_ms": {"min": 20.0, "median": 60.0, "max": 100.0},
    }
