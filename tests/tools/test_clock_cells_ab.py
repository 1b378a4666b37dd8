"""Each committed A/B of one lease (20c2571's turn changes, cc933e0's loop sizing) is what its committed logs, traces
and records give, and the benchmark says so."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import clock_cells_ab
import loop_sizing_ab
import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"


ABS = [("clock_cells_ab", clock_cells_ab), ("loop_sizing_ab", loop_sizing_ab)]


@pytest.mark.parametrize(("name", "tool"), ABS)
def test_the_committed_ab_is_what_its_logs_and_traces_give(tmp_path, name, tool):
    with tarfile.open(DATA / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    committed = json.loads((DATA / f"{name}.json").read_text())
    found = json.loads(json.dumps(tool.study(tmp_path)))  # as written: tuples become lists
    assert {k: committed[k] for k in found} == found


@pytest.mark.parametrize("name", [name for name, _ in ABS])
def test_the_benchmark_reports_both_arms_as_the_ab_has_them(name):
    ab = json.loads((DATA / f"{name}.json").read_text())
    bench = json.loads((DATA / "recording_benchmark.json").read_text())
    run = next(r for r in bench["runs"] if r.get("baseline_commit") == ab["old"] and r["commit"] == ab["new"])
    old, new = ab["arms"]["old"], ab["arms"]["new"]
    assert (run["baseline_record"], run["record"]) == (old["recorder_seconds"], new["recorder_seconds"])
    assert f"Held alone {old['timeline']['alone']} s against {new['timeline']['alone']} s" in run["how"]
    assert run["per_page_seconds"] == {p: v["seconds"] for p, v in new["pages"].items()}
