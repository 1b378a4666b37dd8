"""tools/round_budget_ab.py: the committed A/B of compare's round budget is consistent with itself and the tool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run_tool(tmp_path, args):
    """tools/round_budget_ab.py with ``args``, writing ``tmp_path / "o.json"``, as run from the repository root."""
    path = os.pathsep.join(str(p) for p in (ROOT / "docs" / "_ext", ROOT / "tools", ROOT))
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "round_budget_ab.py"), str(tmp_path / "o.json"), "--baseline", "HEAD"]
        + args,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_committed_ab_counts_what_its_rows_say():
    ab = json.loads((ROOT / "docs" / "data" / "round_budget_ab.json").read_text())
    assert len(ab["runs"]) == 2
    for name, run in ab["runs"].items():
        assert set(run["timing_by_page"]) == set(ab["pages"])
        assert abs(run["timing"] - sum(run["timing_by_page"].values())) < 0.05
        assert run["alone"] <= run["held"] + 1e-9
        assert ab["outside"][name] == sum(1 for r in ab["headlines"] if not r["low"] <= r[name] <= r["high"])
    assert len({run["round_budget_ms"] for run in ab["runs"].values()}) == 2  # two budgets, each named


def test_the_tool_refuses_anything_but_two_differently_named_runs(tmp_path):
    for runs in (["a=x:y"], ["a=x:y", "a=z:w"], ["a=x:y", "b=z:w", "c=u:v"]):
        args = [a for r in runs for a in ("--run", r)]
        done = _run_tool(tmp_path, ["--default-ms", "25", *args])
        assert done.returncode != 0 and "exactly two --run" in done.stderr, done.stderr
        assert not (tmp_path / "o.json").exists()


def test_the_tool_refuses_a_default_budget_that_is_not_a_positive_number(tmp_path):
    for bad in ("0", "-25", "nan", "inf"):
        done = _run_tool(tmp_path, ["--run", "a=x:y", "--run", "b=z:w", "--default-ms", bad])
        assert done.returncode != 0 and "--default-ms must be a positive number" in done.stderr, done.stderr
        assert not (tmp_path / "o.json").exists()


def test_two_runs_with_the_same_budget_are_refused(monkeypatch, tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import round_budget_ab

    def study(runs, committed):
        return {"pages": [], "runs": {name: {} for name in runs}}

    class Shard:
        round_budget_ms = None  # neither kept one: both ran with the commit's default

    monkeypatch.setattr(round_budget_ab, "ab_study", study)
    monkeypatch.setattr(round_budget_ab, "_records", lambda path: {})
    monkeypatch.setattr(round_budget_ab, "read_shard", lambda path: Shard())
    runs = {"12.5 ms": (tmp_path / "a", tmp_path / "la"), "25 ms": (tmp_path / "b", tmp_path / "lb")}
    with pytest.raises(ValueError, match="same budget"):
        round_budget_ab.budget_ab(runs, tmp_path, 25.0)


def test_the_tool_needs_the_default_budget_of_the_runs_commit(tmp_path):
    done = _run_tool(tmp_path, ["--run", "a=x:y", "--run", "b=z:w"])
    assert done.returncode != 0 and "--default-ms" in done.stderr, done.stderr
    assert not (tmp_path / "o.json").exists()
