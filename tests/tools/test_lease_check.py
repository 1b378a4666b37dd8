"""The same code on two leases: the report comes from the committed histories, the split from each side's records."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from gallery_build.cell_times import time_spent

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "scale"))

import lease_check  # noqa: E402


def _gallery(tmp_path: Path, name: str, commit: str | None, pages: list[str]) -> Path:
    """Three of the site's pages' records and costs; their commit rewritten when ``commit`` is given (a fixture)."""
    gallery = tmp_path / name / "auto_examples"
    gallery.mkdir(parents=True)
    for page in pages:
        shutil.copy(ROOT / "docs" / "auto_examples" / f"{page}.cost.json", gallery)
        record = json.loads((ROOT / "docs" / "auto_examples" / f"{page}.record.json").read_text())
        if commit:
            record["environment"]["commit"] = commit
        (gallery / f"{page}.record.json").write_text(json.dumps(record))
    return gallery


def test_the_report_matches_the_committed_data_and_the_split_reads_each_sides_records(tmp_path):
    committed = json.loads((ROOT / "docs" / "data" / "lease_check.json").read_text())
    pages = [row["example"] for row in committed["split"]["first"][:3]]
    first = _gallery(tmp_path, "first", lease_check.FIRST["commit"] + "0" * 33, pages)
    second = _gallery(tmp_path, "second", None, pages)
    fresh = json.loads(json.dumps(lease_check.main(second.parent, tmp_path / "l.json", first)))
    assert fresh["report"] == committed["report"]  # both sides' histories are committed
    assert fresh["split"]["first"] == time_spent(first) and fresh["split"]["second"] == time_spent(second)
    assert fresh["report"]["pages"] == 15 and len(committed["split"]["first"]) == 14  # plot_15 needs Blackwell
    for row in fresh["split"]["first"] + committed["split"]["first"] + committed["split"]["second"]:
        assert abs(row["total"] - sum(row[k] for k in ("timing", "fresh processes", "compile", "rest"))) < 1e-9


def test_a_first_side_recorded_at_another_commit_is_refused_naming_the_file(tmp_path):
    committed = json.loads((ROOT / "docs" / "data" / "lease_check.json").read_text())
    pages = [row["example"] for row in committed["split"]["first"][:2]]
    moved_on = _gallery(tmp_path, "site", "1234567" + "0" * 33, pages)
    with pytest.raises(SystemExit, match=r"plot_0\d_.*\.record\.json was recorded at 1234567, not da317ad"):
        lease_check.main(moved_on.parent, tmp_path / "l.json", moved_on)
