"""The same code on two leases: the report comes from the committed histories, the split from each side's records."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "scale"))

import lease_check  # noqa: E402


def test_the_report_matches_the_committed_data_and_the_split_reads_each_sides_records(tmp_path):
    committed = json.loads((ROOT / "docs" / "data" / "lease_check.json").read_text())
    shard = tmp_path / "shard" / "auto_examples"
    shard.mkdir(parents=True)
    for page in committed["split"]["first"][:3]:  # a shard holding three of the pages, as recorded on the site
        for suffix in (".record.json", ".cost.json"):
            shutil.copy(ROOT / "docs" / "auto_examples" / f"{page['example']}{suffix}", shard)
    fresh = json.loads(json.dumps(lease_check.main(tmp_path / "shard", tmp_path / "l.json")))
    assert fresh["report"] == committed["report"]  # both sides' histories are committed
    assert fresh["split"]["first"] == committed["split"]["first"]
    assert fresh["split"]["second"] == committed["split"]["first"][:3]
    assert fresh["report"]["pages"] == 15 and len(fresh["split"]["first"]) == 14  # plot_15 needs Blackwell
    for row in fresh["split"]["first"]:
        assert abs(row["total"] - sum(row[k] for k in ("timing", "fresh processes", "compile", "rest"))) < 1e-9
