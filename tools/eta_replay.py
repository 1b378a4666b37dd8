"""How close the recorder's time-left estimate came to the time really left, replayed on recorder logs.

A recorder call with lanes that share a GPU (``record --lanes 3``) prints, as each page ends, the time
it estimates is left (:class:`gallery_build.progress.Progress`). This tool rebuilds each lane's
timeline from a log (a page's wall time is its own seconds plus the seconds it waited for the GPU's
turn; a lane's pages run one after another; the other lanes start once lane 0 has recorded the pages
that run alone), drives the real :class:`~gallery_build.progress.Progress` through it with a clock
of its own, and at every page's end compares the estimate with the time the rebuilt timeline says
was left. A page's cost is the last-recording seconds its start line gives (the logs replayed here
have one for every page); a log with a failed page, or from lanes on several GPUs, is refused. It
does so twice: as the recorder estimates now, and counting finished pages only
(:data:`~gallery_build.progress.RUNNING_CREDIT` set to 0, the rule before issue 34's change).

Writes ``docs/data/eta_replay.json``; the logs are ``docs/data/recorder_logs/*.log`` (4f40a0d's two
calls, copied from the builder unchanged)::

    PYTHONPATH=docs/_ext:.:tools python tools/eta_replay.py docs/data/eta_replay.json docs/data/recorder_logs/*.log
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gallery_build import progress
from turn_scope_study import read_log

PLAN = re.compile(r"cudnn-guide: \d+ page\(s\) on \d+ lane\(s\).*?longest first(?P<rest>.*)")
STARTED = re.compile(
    r"recording (?P<page>\S+\.py) in a fresh interpreter on lane \d+ \(\d+ of \d+; last recording (?P<last>[\d.]+) s"
)


FAILED = re.compile(r"cudnn-guide: failed \S+\.py after")
ONE_GPU = re.compile(r"lane\(s\) of 1 GPU\(s\)")


def read_plan(lines: Sequence[str]) -> tuple[list[str], list[list[str]], dict[str, float]]:
    """A log's plan: (the pages that run alone first, each lane's pages, each page's last-recording seconds).

    Parameters
    ----------
    lines
        The recorder's output.

    Returns
    -------
    tuple[list[str], list[list[str]], dict[str, float]]
        As :meth:`gallery_build.progress.Progress.plan` takes them, and its ``previous_seconds``.

    Example
    -------
    >>> read_plan(["cudnn-guide: 2 page(s) on 2 lane(s) of 1 GPU(s), taking turns on each, longest first: "
    ...            "lane 0: a.py; lane 1: b.py"])
    ([], [['a.py'], ['b.py']], {})
    """
    plan = next((line for line in lines if PLAN.search(line)), None)
    if plan is None:
        raise SystemExit("eta_replay: no plan line (lanes sharing a GPU) in the log")
    if not ONE_GPU.search(plan):
        raise SystemExit("eta_replay: the log's lanes share more than one GPU; the replay rebuilds one GPU's lanes")
    rest = PLAN.search(plan)["rest"]
    alone: list[str] = []
    if rest.startswith("; alone first on lane 0: "):
        listed, rest = rest[len("; alone first on lane 0: ") :].split(": ", 1)
        alone = [p.strip() for p in listed.split(",")]
    else:
        rest = rest.removeprefix(": ")
    lanes = [[p.strip() for p in part.split(": ", 1)[1].split(",")] for part in rest.split("; ")]
    last = {m["page"]: float(m["last"]) for line in lines if (m := STARTED.search(line))}
    return alone, lanes, last


def replay(lines: Sequence[str], running_credit: float) -> list[dict[str, float]]:
    """At each page's end but the last: the estimated and the real seconds left.

    Parameters
    ----------
    lines
        One recorder call's output.
    running_credit
        :data:`gallery_build.progress.RUNNING_CREDIT` for this replay (0: finished pages only).

    Returns
    -------
    list[dict[str, float]]
        ``at`` (seconds since the first page started), ``left`` (real) and ``estimate``.
    """
    alone, lanes, last = read_plan(lines)
    if any(FAILED.search(line) for line in lines):
        raise SystemExit("eta_replay: the log has a failed page, whose time the replay cannot place; give it another")
    pages = {n: p for n, p in read_log(lines)["pages"].items() if "seconds" in p}
    if set(p for lane in lanes for p in lane) - set(pages) - set(last):
        raise SystemExit("eta_replay: a planned page has neither a recorded time nor a start line in the log")
    wall = {n: p["seconds"] + p["waited"] for n, p in pages.items()}
    lanes = [[n for n in lane if n in pages] for lane in lanes]
    events: list[tuple[float, int, str, int]] = []  # (time, 1 start / 0 end, page, lane)
    alone_end = sum(wall[n] for n in alone if n in wall)
    for i, lane in enumerate(lanes):
        now = 0.0 if i == 0 else alone_end
        for name in lane:
            events += [(now, 1, name, i), (now + wall[name], 0, name, i)]
            now += wall[name]
    end = max(t for t, *_ in events)
    clock = [0.0]
    saved = progress.RUNNING_CREDIT
    progress.RUNNING_CREDIT = running_credit
    try:
        p = progress.Progress(last, clock=lambda: clock[0])
        p.share(1, len(lanes))
        p.plan([n for n in alone if n in pages], lanes)
        out = []
        for t, is_start, name, lane in sorted(events):
            clock[0] = t
            if is_start:
                p.start(name, lane)
                continue
            p.finish(name, lane, pages[name]["seconds"])
            if t < end:
                out.append({"at": round(t, 1), "left": round(end - t, 1), "estimate": round(p.remaining(), 1)})
        return out
    finally:
        progress.RUNNING_CREDIT = saved


def study(logs: Sequence[Path]) -> dict[str, Any]:
    """Each log replayed under both rules, with the mean relative error of each.

    Parameters
    ----------
    logs
        Recorder logs of calls whose lanes shared one GPU.

    Returns
    -------
    dict[str, Any]
        Log name → ``{"running": ..., "finished only": ...}``, each with its ``points`` and
        ``mean_relative_error``.
    """
    out: dict[str, Any] = {}
    for log in logs:
        lines = log.read_text().splitlines()
        out[log.name] = {}
        for rule, credit in (("running", progress.RUNNING_CREDIT), ("finished only", 0.0)):
            points = replay(lines, credit)
            error = statistics.fmean(abs(q["estimate"] - q["left"]) / q["left"] for q in points)
            out[log.name][rule] = {"mean_relative_error": round(error, 3), "points": points}
    return out


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("logs", type=Path, nargs="+")
    args = parser.parse_args(argv)
    data = {
        "about": "The recorder's time-left estimate (lanes sharing one GPU) replayed on recorder logs: at each "
        "page's end, the estimate and the time the log's rebuilt timeline says was left, counting the pages "
        "still running (the rule now) and the finished pages only (the rule before). Written by tools/eta_replay.py.",
        "running_credit": progress.RUNNING_CREDIT,
        "logs": study(sorted(args.logs)),
    }
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":  # pragma: no cover
    main()
