"""The one-GPU-against-two comparison: the committed data is what the tool computes from the committed histories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "scale"))

import concurrency_check  # noqa: E402


def test_each_pair_compares_one_commit_on_one_gpu_and_on_two_and_matches_the_committed_data(tmp_path):
    fresh = concurrency_check.main(tmp_path / "c.json")
    committed = json.loads((ROOT / "docs" / "data" / "concurrency_check.json").read_text())
    assert json.loads(json.dumps(fresh)) == committed
    full, first15, r19 = (p["report"] for p in fresh["pairs"])
    assert full["pages"] == 25 and first15["pages"] == 15  # R14's pages 01-15 against the one-GPU run of them
    assert r19["pages"] == 15  # R19's pages 01-15 against b5, the one-GPU run of them on the same lease
    for pair in fresh["pairs"]:
        r = pair["report"]
        assert len(r["moved"]) <= r["measurements"] and len(r["flipped"]) <= r["verdicts"]
        commits = {c[:7] for m in r["moved"] for c in (m["previous_commit"], m["latest_commit"])}
        assert commits == {pair["commit"]}  # one commit on both sides: only the GPU count differs
