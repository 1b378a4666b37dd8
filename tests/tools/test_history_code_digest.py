"""The backfill gives old history lines the digest of the code at their commit, and changes nothing else."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gallery_build.history import code_digest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "archive"))

import history_code_digest  # noqa: E402


def test_old_lines_get_the_digest_of_their_commits_code_and_nothing_else_changes(tmp_path):
    lines = [
        {"example": "plot_a", "commit": "c1", "measurements": {"k": {"median_ms": 0.1}}},
        {"example": "plot_a", "commit": "c2", "measurements": {"k": {"median_ms": 0.1}}},
        {"example": "plot_a", "commit": "gone", "measurements": {}},
        {"example": "plot_a", "commit": "c3", "measurements": {}, "code_md5": "kept"},
    ]
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in lines))
    sources = {("c1", "plot_a"): "x = 1\n", ("c2", "plot_a"): "x = 2  # edited\n"}
    asked = []

    def source_at(commit, example):
        asked.append(commit)
        return sources.get((commit, example))

    assert history_code_digest.backfill(path, source_at) == (2, 1)
    out = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e.get("code_md5") for e in out] == [code_digest("x = 1\n"), code_digest("x = 2\n"), None, "kept"]
    assert [{k: v for k, v in e.items() if k != "code_md5"} for e in out] == [
        {k: v for k, v in e.items() if k != "code_md5"} for e in lines
    ]
    assert "c3" not in asked  # a line that has its digest is left alone


def test_git_source_reads_an_example_at_a_commit_and_none_where_git_has_none():
    head = history_code_digest.git_source("HEAD", "plot_01_environment")
    assert head is not None and "import" in head  # the committed file (the work tree may hold edits)
    assert history_code_digest.git_source("HEAD", "plot_99_missing") is None
