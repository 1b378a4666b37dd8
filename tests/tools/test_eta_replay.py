"""tools/eta_replay.py drives the recorder's real estimate through a log's timeline; the committed replay holds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import eta_replay  # noqa: E402
from gallery_build import progress  # noqa: E402

LOGS = sorted((ROOT / "docs" / "data" / "recorder_logs").glob("*.log"))


def _log(alone: str = "") -> list[str]:
    plan = "cudnn-guide: 3 page(s) on 2 lane(s) of 1 GPU(s), taking turns on each, longest first"
    plan += (f"; alone first on lane 0: {alone}" if alone else "") + ": lane 0: " + (f"{alone}, " if alone else "")
    plan += "long.py; lane 1: s1.py, s2.py"
    lines = [plan]
    for page, last, seconds, waited in (
        ("long.py", 60.0, 60.0, 30.0),
        ("s1.py", 20.0, 20.0, 10.0),
        ("s2.py", 20.0, 20.0, 10.0),
    ):
        lines += [
            f"cudnn-guide: recording {page} in a fresh interpreter on lane 0 (1 of 3; last recording {last} s)",
            f"cudnn-guide: {page}: 5 turns on the GPU, {waited} s waiting for one, 0.0 s of CPU-only work beside "
            f"other lanes, {seconds} s holding the GPU ({seconds} s of it alone)",
            f"cudnn-guide: recorded {page} in {seconds} s on lane 0 (last recording {last} s); 1 of 3 finished",
        ]
    return lines


def test_a_plan_line_gives_the_pages_alone_the_lanes_and_the_last_recordings_seconds():
    alone, lanes, last = eta_replay.read_plan(_log("first.py"))
    assert alone == ["first.py"] and lanes == [["first.py", "long.py"], ["s1.py", "s2.py"]]
    assert last == {"long.py": 60.0, "s1.py": 20.0, "s2.py": 20.0}
    assert eta_replay.read_plan(_log())[:2] == ([], [["long.py"], ["s1.py", "s2.py"]])


def test_a_replay_sets_the_credit_back_and_counts_the_running_page():
    # lane 0: long (90 s of wall), lane 1: s1 then s2 (30 s each): at 30 s, 60 s left; at 60 s, 30 s left
    running = eta_replay.replay(_log(), progress.RUNNING_CREDIT)
    finished = eta_replay.replay(_log(), 0.0)
    assert progress.RUNNING_CREDIT == 0.9  # put back
    assert [(q["at"], q["left"]) for q in running] == [(30.0, 60.0), (60.0, 30.0)]
    # finished pages only: 20 s of page done in 30 s, 80 s of pages left at that rate: 120 s; counting long's
    # 30 s run at the finished page's pace (20 s per 30 s): 20 s of it done, (80 - 20) / (40 / 30) = 45 s
    assert finished[0]["estimate"] == 120.0 and running[0]["estimate"] == 45.0


def test_the_committed_replay_is_what_the_committed_logs_give_and_running_pages_make_it_closer():
    committed = json.loads((ROOT / "docs" / "data" / "eta_replay.json").read_text())
    assert LOGS and committed["logs"] == eta_replay.study(LOGS)
    assert committed["running_credit"] == progress.RUNNING_CREDIT
    # closer over the logs as a whole, not in each: on dcab682's calls B and D (no page runs alone first, and
    # the longest pages start together) counting the running pages was further off than finished pages only
    logs = committed["logs"].values()
    mean = {
        rule: sum(log[rule]["mean_relative_error"] for log in logs) / len(logs) for rule in ("running", "finished only")
    }
    assert mean["running"] < mean["finished only"]
    assert sum(log["running"]["mean_relative_error"] < log["finished only"]["mean_relative_error"] for log in logs) >= 4


def test_a_log_with_a_failed_page_or_several_gpus_is_refused():
    import pytest

    failed = [
        *_log(),
        "cudnn-guide: failed s2.py after 3.0 s on lane 1, its committed files unchanged; 2 of 3 finished",
    ]
    with pytest.raises(SystemExit, match="failed page"):
        eta_replay.replay(failed, 0.9)
    two_gpus = [_log()[0].replace("of 1 GPU(s)", "of 2 GPU(s)"), *_log()[1:]]
    with pytest.raises(SystemExit, match="more than one GPU"):
        eta_replay.replay(two_gpus, 0.9)
