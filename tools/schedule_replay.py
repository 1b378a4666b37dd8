"""What another schedule could win: a recording's pages replayed on a model of the GPU's turn.

Each page of a recording made with ``CUDNN_GUIDE_TURN_TRACE`` is read from its trace as a sequence of
segments (``tools/turn_timeline.read_traces``): a turn held alone (a measured block), a turn held shared
(a code cell), and the time between turns, when the page held nothing (CPU-only work set aside, Sphinx's
own work). The wait for each turn is dropped: the model makes its own. Lanes then run the pages on one
simulated clock, by the rules of ``gallery_build.gpu_turns``: an alone turn waits until nobody holds the
turn, a shared one until nobody holds it alone and nobody waits to (a lane waiting to measure goes first),
shared turns run beside each other, and time between turns runs beside anything. A lane starts its next
page ``gap`` seconds after its last one ends (the recorder's own work between pages: the median such gap
in the recording).

It does not model what the trace cannot say: a segment's length as it would be beside other work (each
keeps its recorded length), give-way inside a cell (recorded turns already end where the cell gave way),
or the host's speed. So it answers one question, how much of a recording's span the order of its pages,
the length of its alone turns, or its shared turns decide, not how long another recording would take.
The first scenario replays the recording's own lanes and order: how close that comes to the recorded span
is the model's error.

Run from the repository root (traces: a folder, or a member folder of a ``.tar.gz``)::

    PYTHONPATH=docs/_ext:.:tools python tools/schedule_replay.py docs/data/schedule_replay.json \\
        --traces docs/data/turn_traces_5a51bec.tar.gz:A/trace_A --log docs/data/recorder_logs/5a51bec_A.log \\
        --timeline docs/data/pairs_timeline.json:A --holdout docs/data/turn_traces_5a51bec.tar.gz:B/trace_B \\
        docs/data/recorder_logs/b2b5b74_B.log docs/data/pairs_timeline.json:B
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from turn_timeline import read_traces

Segment = tuple[str, float]  # ("alone" | "shared" | "free", seconds)


def segments(turns: Sequence[Mapping[str, Any]]) -> list[Segment]:
    """A page's turns as segments: each turn held (alone or shared) and the time between turns, waits dropped.

    Example
    -------
    >>> segments([{"mode": "shared", "asked": 0, "taken": 1, "given": 2},
    ...           {"mode": "exclusive", "asked": 3, "taken": 3, "given": 5}])
    [('shared', 1), ('free', 1), ('alone', 2)]
    """
    out: list[Segment] = []
    last = turns[0]["asked"] if turns else 0.0
    for t in turns:
        if t["asked"] - last > 1e-6:
            out.append(("free", t["asked"] - last))
        out.append(("alone" if t["mode"] == "exclusive" else "shared", t["given"] - t["taken"]))
        last = t["given"]
    return out


def simulate(
    pages: Mapping[str, Sequence[Segment]],
    lanes: int | None = None,
    *,
    plan: Sequence[Sequence[str]] | None = None,
    queue: Sequence[str] | None = None,
    first: Sequence[str] = (),
    gap: float = 0.0,
) -> float:
    """Seconds from the first page's start to the last page's end, on the model of the module docstring.

    Either ``plan`` (each lane's pages, in order: the recording's own) or ``queue`` (one list; a lane that
    finishes a page takes the next) with ``lanes``. ``first`` runs before the lanes start, one page at a
    time, nothing beside it (the recorder's pages that run alone first).

    Example
    -------
    >>> pages = {"a": [("alone", 2.0)], "b": [("alone", 3.0)], "c": [("shared", 4.0)], "d": [("shared", 4.0)]}
    >>> simulate(pages, 2, queue=["a", "b"]), simulate(pages, 2, queue=["c", "d"]), simulate(pages, 2, queue=["a", "c"])
    (5.0, 4.0, 6.0)
    """
    start = sum(sum(d for _, d in pages[p]) for p in first) + gap * len(first)
    if plan is not None:
        todo = [list(lane) for lane in plan]
        take: Callable[[int], str | None] = lambda i: todo[i].pop(0) if todo[i] else None
        lanes = len(todo)
    else:
        left = list(queue or [])
        take = lambda i: left.pop(0) if left else None
    assert lanes
    state = [{"page": None, "seg": 0, "holds": None} for _ in range(lanes)]
    events: list[tuple[float, int, int, str]] = []
    order = 0  # ties on the clock go in the order they were scheduled
    holders = {"alone": set(), "shared": set()}
    waiting: dict[str, list[int]] = {"alone": [], "shared": []}
    end = start

    def push(at: float, lane: int, what: str) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (at, order, lane, what))

    def begin(lane: int, now: float) -> None:
        s = state[lane]
        segs = pages[s["page"]]
        if s["seg"] >= len(segs):
            s["page"] = None
            push(now + gap, lane, "next")
            return
        kind, seconds = segs[s["seg"]]
        if kind == "free":
            push(now + seconds, lane, "done")
        else:
            waiting[kind].append(lane)

    def grant(now: float) -> None:
        if not holders["alone"] and not holders["shared"] and waiting["alone"]:
            lane = waiting["alone"].pop(0)
            holders["alone"].add(lane)
            state[lane]["holds"] = "alone"
            push(now + pages[state[lane]["page"]][state[lane]["seg"]][1], lane, "done")
        if not holders["alone"] and not waiting["alone"]:
            for lane in waiting["shared"]:
                holders["shared"].add(lane)
                state[lane]["holds"] = "shared"
                push(now + pages[state[lane]["page"]][state[lane]["seg"]][1], lane, "done")
            waiting["shared"].clear()

    for lane in range(lanes):
        push(start, lane, "next")
    while events:
        now, _, lane, what = heapq.heappop(events)
        s = state[lane]
        if what == "next":
            page = take(lane)
            if page is None:
                end = max(end, now - gap) if now > start else end
            else:
                s["page"], s["seg"] = page, 0
                begin(lane, now)
        else:
            if s["holds"]:
                holders[s["holds"]].discard(lane)
                s["holds"] = None
            s["seg"] += 1
            begin(lane, now)
        grant(now)
    return end


def recorded_plan(traces: Mapping[str, Sequence[Mapping[str, Any]]], log: str) -> tuple[list[str], list[list[str]]]:
    """The recording's pages that ran alone first, and each lane's pages in the order they started.

    Read from the recorder log's ``recording <page> in a fresh interpreter on lane N`` lines.
    """
    lanes: dict[int, list[str]] = {}
    alone = ""
    for line in log.splitlines():
        if "alone first on lane 0: " in line:
            alone = line.split("alone first on lane 0: ", 1)[1].split(": lane 0:", 1)[0]
        if line.startswith("cudnn-guide: recording ") and " in a fresh interpreter on lane " in line:
            page = line.split()[2]
            lane = int(line.split(" on lane ", 1)[1].split()[0])
            if page in traces:
                lanes.setdefault(lane, []).append(page)
    first = [p for p in (s.strip() for s in alone.split(",")) if p in traces]
    plan = [[p for p in lanes[k] if p not in first] for k in sorted(lanes)]
    return first, plan


def study(traces: Mapping[str, Sequence[Mapping[str, Any]]], log: str, span: float, seed: int = 1) -> dict[str, Any]:
    """Every scenario's modelled span, with the recording's own first (the model's error)."""
    pages = {p: segments(t) for p, t in traces.items()}
    first, plan = recorded_plan(traces, log)
    ends = sorted((min(t["asked"] for t in ts), max(t["given"] for t in ts), p) for p, ts in traces.items())
    by_lane = {p: k for k, lane in enumerate(plan) for p in lane}
    gaps = []
    for k in range(len(plan)):
        mine = [(a, b) for a, b, p in ends if by_lane.get(p) == k]
        gaps += [b2[0] - b1[1] for b1, b2 in zip(mine, mine[1:], strict=False) if b2[0] >= b1[1]]
    gap = statistics.median(gaps) if gaps else 0.0
    rest = [p for lane in plan for p in lane]
    size = {p: sum(d for _, d in pages[p]) for p in pages}
    alone = {p: sum(d for k, d in pages[p] if k == "alone") for p in pages}
    lanes = len(plan)

    def run(ps: Mapping[str, Sequence[Segment]], **kw: Any) -> float:
        return round(simulate(ps, lanes, first=first, gap=gap, **kw), 1)

    longest = sorted(rest, key=lambda p: -size[p])
    rng = random.Random(seed)
    best, best_order = run(pages, queue=longest), longest
    for _ in range(3000):  # swaps kept when no worse: how far the best order of these pages goes
        order = best_order[:]
        i, j = rng.sample(range(len(order)), 2)
        order[i], order[j] = order[j], order[i]
        if (s := run(pages, queue=order)) <= best:
            best, best_order = s, order

    def scaled(kind: str, factor: float, only: Sequence[str] | None = None) -> dict[str, list[Segment]]:
        return {
            p: [(k, d * factor if k == kind and (only is None or p in only) else d) for k, d in segs]
            for p, segs in pages.items()
        }

    pooled = [p for p in pages if alone[p] and any(x in p for x in ("plot_06", "plot_07", "plot_28"))]
    scenarios = {
        "the recording's lanes and order": run(pages, plan=plan),
        "one queue, longest first": run(pages, queue=longest),
        "the best order found (3000 swaps)": best,
        "host-bound pages in the lanes, not first": round(
            simulate(pages, lanes, queue=sorted(rest + first, key=lambda p: -size[p]), gap=gap), 1
        ),
        "every alone turn 10% shorter": run(scaled("alone", 0.9), plan=plan),
        "the pooled pages' alone turns 25% shorter": run(scaled("alone", 0.75, pooled), plan=plan),
        "shared turns set aside (run beside anything)": run(
            {p: [("free" if k == "shared" else k, d) for k, d in segs] for p, segs in pages.items()}, plan=plan
        ),
    }
    return {
        "recorded_span": span,
        "gap_seconds": round(gap, 2),
        "lanes": lanes,
        "pages": len(pages),
        "first": first,
        "alone_seconds": round(sum(alone.values()), 1),
        "shared_seconds": round(sum(d for s in pages.values() for k, d in s if k == "shared"), 1),
        "free_seconds": round(sum(d for s in pages.values() for k, d in s if k == "free"), 1),
        "scenarios": scenarios,
        "best_order": best_order,
    }


def holdout(
    traces: Mapping[str, Sequence[Mapping[str, Any]]], log: str, order: Sequence[str], gap: float
) -> dict[str, float]:
    """Another recording's pages under its own plan, one queue longest first, and ``order`` (found on another
    recording's traces): whether that order's gain holds on segments it was not found on."""
    pages = {p: segments(t) for p, t in traces.items()}
    first, plan = recorded_plan(traces, log)
    size = {p: sum(d for _, d in pages[p]) for p in pages}
    rest = [p for lane in plan for p in lane]
    lanes = len(plan)
    return {
        "the recording's lanes and order": round(simulate(pages, plan=plan, first=first, gap=gap), 1),
        "one queue, longest first": round(
            simulate(pages, lanes, queue=sorted(rest, key=lambda p: -size[p]), first=first, gap=gap), 1
        ),
        "the order found on the other recording": round(
            simulate(pages, lanes, queue=[p for p in order if p in rest], first=first, gap=gap), 1
        ),
    }


def _folder(spec: str, work: Path) -> Path:
    if ".tar.gz:" in spec:
        archive, member = spec.split(".tar.gz:", 1)
        with tarfile.open(archive + ".tar.gz") as tar:
            tar.extractall(work, filter="data")
        return work / member
    return Path(spec)


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--traces", required=True, help="FOLDER or ARCHIVE.tar.gz:MEMBER_FOLDER")
    parser.add_argument("--log", required=True, type=Path, help="the recorder's log of that call")
    parser.add_argument("--timeline", required=True, help="TIMELINE.json:CALL (turn_timeline.py's), for the span")
    parser.add_argument(
        "--holdout",
        nargs=3,
        metavar=("TRACES", "LOG", "TIMELINE:CALL"),
        help="another recording of the same pages, to try the best order on",
    )
    parser.add_argument("--about", default="")
    args = parser.parse_args(argv)

    def span_of(spec: str) -> float:
        path, call = spec.rsplit(":", 1)
        return json.loads(Path(path).read_text())["calls"][call]["span"]

    with tempfile.TemporaryDirectory() as work:
        traces = read_traces(_folder(args.traces, Path(work) / "a"))
        result = {"about": args.about, **study(traces, args.log.read_text(encoding="utf-8"), span_of(args.timeline))}
        if args.holdout:
            other = read_traces(_folder(args.holdout[0], Path(work) / "b"))
            result["holdout"] = {
                "recorded_span": span_of(args.holdout[2]),
                **holdout(
                    other,
                    Path(args.holdout[1]).read_text(encoding="utf-8"),
                    result["best_order"],
                    result["gap_seconds"],
                ),
            }
    span = result["recorded_span"]
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for name, seconds in result["scenarios"].items():
        print(f"{name}: {seconds} s (recorded span {span} s)")
    for name, seconds in result.get("holdout", {}).items():
        print(f"holdout, {name}: {seconds} s")


if __name__ == "__main__":
    main()
