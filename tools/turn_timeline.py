"""Where a recording in lanes spends the time its measured blocks do not: its GPU turns on one timeline.

A page recorded with ``CUDNN_GUIDE_TURN_TRACE=<folder>`` writes ``<folder>/<page>.turns.json``: every
turn it held, shared (a code cell) or alone (a measured block), with when it was asked for, taken and
given up (``gallery_build.gpu_turns.TRACE_ENV``). This tool lays the turns of one recorder call on one
clock and splits its span into what the GPU's turn was doing:

* ``alone``: a page held it alone (measuring);
* ``shared_blocking``: only shared holders, while some page waited to hold it alone (the cells that
  keep a measurement waiting: the recording's floor is ``alone`` plus this);
* ``shared``: only shared holders, and nobody waiting to measure;
* ``idle``: nobody held it (pages starting, CPU-only work set aside, the recorder between pages).

Per page: the seconds its shared turns kept another page's measurement waiting. Per measured block
(``alone_by_owner``): the seconds it held the turn alone, by the block's ``owner`` in the trace (the
function, or a page's file and line: ``gpu_turns.block_owner``; ``"unknown"`` in traces made before
owners were kept). Run from the repository root::

    PYTHONPATH=docs/_ext:. python tools/turn_timeline.py docs/data/turn_timeline.json \\
        --call A=/tmp/trace_A --call B=/tmp/trace_B --about "..."
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

KINDS = ("alone", "shared_blocking", "shared", "idle")


def read_traces(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Each page's turns from a trace folder.

    Parameters
    ----------
    folder
        Where the pages wrote ``<page>.turns.json``.

    Returns
    -------
    dict[str, list[dict[str, Any]]]
        Page file name → its turns (``mode``, ``asked``, ``taken``, ``given``), in order.

    Raises
    ------
    ValueError
        No trace in the folder, or a turn that is not a shared or exclusive one with
        ``asked <= taken <= given``, naming the file.
    """
    pages: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(Path(folder).glob("*.turns.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        turns = data.get("turns") if isinstance(data, dict) else None
        if not isinstance(turns, list) or not isinstance(data.get("page"), str):
            raise ValueError(f"{path}: not a turn trace (expected a page and a list of turns)")
        for i, t in enumerate(turns):
            ok = (
                isinstance(t, dict)
                and t.get("mode") in ("shared", "exclusive")
                and all(isinstance(t.get(k), (int, float)) for k in ("asked", "taken", "given"))
                and t["asked"] <= t["taken"] <= t["given"]
                and isinstance(t.get("owner", ""), str)
            )
            if not ok:
                raise ValueError(
                    f"{path}: turn {i} is not a shared or exclusive turn asked <= taken <= given "
                    "(with, if any, a string owner)"
                )
        pages[data["page"]] = turns
    if not pages:
        raise ValueError(f"{folder}: no <page>.turns.json in it (record with CUDNN_GUIDE_TURN_TRACE set)")
    return pages


def timeline(pages: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Split one call's span into :data:`KINDS`, and charge each page's shared turns that kept a measurement waiting.

    Parameters
    ----------
    pages
        :func:`read_traces`'s result.

    Returns
    -------
    dict[str, Any]
        ``span`` (seconds from the first turn asked for to the last given up), a second count for each
        of :data:`KINDS` (they add up to ``span``), ``alone_waited`` (the seconds pages waited to hold
        it alone, summed), ``pages_at_most`` (the most pages in progress at once, each from its first
        turn asked for to its last given up), ``idle_fewer_pages`` (idle seconds while fewer were) and
        ``blocking_by_page`` (page → seconds of ``shared_blocking`` its shared
        turns were part of, each instant split evenly between the pages holding it).

    Example
    -------
    >>> t = timeline({"a.py": [{"mode": "exclusive", "asked": 0, "taken": 0, "given": 2}]})
    >>> t["alone"], t["idle"]
    (2.0, 0.0)
    """
    events: set[float] = set()
    for turns in pages.values():
        for t in turns:
            events.update((t["asked"], t["taken"], t["given"]))
    points = sorted(events)
    out: dict[str, Any] = dict.fromkeys(KINDS, 0.0)
    blocking: dict[str, float] = dict.fromkeys(pages, 0.0)
    flat = [(page, t) for page, turns in pages.items() for t in turns]
    spans = [(turns[0]["asked"], turns[-1]["given"]) for turns in pages.values() if turns]

    def in_progress(at: float) -> int:
        return sum(1 for a, b in spans if a <= at < b)

    most = max((in_progress((lo + hi) / 2) for lo, hi in zip(points, points[1:], strict=False)), default=0)
    idle_fewer = 0.0
    for lo, hi in zip(points, points[1:], strict=False):
        mid, width = (lo + hi) / 2, hi - lo
        alone = any(t["mode"] == "exclusive" and t["taken"] <= mid < t["given"] for _, t in flat)
        sharing = [p for p, t in flat if t["mode"] == "shared" and t["taken"] <= mid < t["given"]]
        waiting = any(t["mode"] == "exclusive" and t["asked"] <= mid < t["taken"] for _, t in flat)
        if alone:
            kind = "alone"
        elif sharing:
            kind = "shared_blocking" if waiting else "shared"
            if waiting:
                for p in sharing:
                    blocking[p] += width / len(sharing)
        else:
            kind = "idle"
            if in_progress(mid) < most:
                idle_fewer += width
        out[kind] += width
    out = {k: round(v, 2) for k, v in out.items()}
    out["span"] = round(points[-1] - points[0], 2) if points else 0.0
    out["pages_at_most"] = most
    out["idle_fewer_pages"] = round(idle_fewer, 2)
    out["alone_waited"] = round(sum(t["taken"] - t["asked"] for _, t in flat if t["mode"] == "exclusive"), 2)
    out["blocking_by_page"] = {p: round(s, 2) for p, s in sorted(blocking.items(), key=lambda kv: -kv[1]) if s > 0}
    owners: dict[str, float] = {}
    for page, t in flat:
        if t["mode"] == "exclusive":
            owner = t.get("owner") or "unknown"
            if owner in ("cell", "open measured block") or ".py:" in owner:  # the page's own: name the page
                owner = f"{Path(page).stem}: {owner}"
            owners[owner] = owners.get(owner, 0.0) + t["given"] - t["taken"]
    out["alone_by_owner"] = {o: round(s, 2) for o, s in sorted(owners.items(), key=lambda kv: -kv[1])}
    if any(t.get("line") is not None for _, t in flat):  # traces since the cell's line was kept
        out["shared_by_cell"] = shared_by_cell(pages)
    return out


def shared_by_cell(pages: Mapping[str, Sequence[Mapping[str, Any]]], top: int = 20) -> list[dict[str, Any]]:
    """The code cells that held the shared turn longest: each ``(page, cell's first line)`` with its seconds, summed.

    The turn's largest lever left is the shared turn (the measurement studies' "What a schedule can win"): a cell
    holds it for all its own work, GPU or not, and a measurement waits for it. This names the cells to look at.

    Parameters
    ----------
    pages
        :func:`read_traces`'s result, from traces that keep each turn's ``line``.
    top
        How many cells.

    Returns
    -------
    list[dict[str, Any]]
        ``{"page", "line", "seconds", "turns"}``, the longest first.

    Example
    -------
    >>> shared_by_cell({"a.py": [{"mode": "shared", "asked": 0, "taken": 0, "given": 2, "line": 7}]})
    [{'page': 'a.py', 'line': 7, 'seconds': 2.0, 'turns': 1}]
    """
    held: dict[tuple[str, int], list[float]] = {}
    for page, turns in pages.items():
        for t in turns:
            if t["mode"] == "shared" and t.get("line") is not None:
                held.setdefault((page, t["line"]), []).append(t["given"] - t["taken"])
    ranked = sorted(held.items(), key=lambda kv: -sum(kv[1]))[:top]
    return [{"page": p, "line": line, "seconds": round(sum(v), 2), "turns": len(v)} for (p, line), v in ranked]


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--call", action="append", required=True, help="NAME=TRACE_FOLDER, one per recorder call")
    parser.add_argument("--about", default="")
    args = parser.parse_args(argv)
    calls = {}
    for spec in args.call:
        name, sep, folder = spec.partition("=")
        if not sep or not name or not folder:
            raise SystemExit(f"turn_timeline: --call {spec!r}: expected NAME=TRACE_FOLDER")
        calls[name] = timeline(read_traces(Path(folder)))
    for name, t in calls.items():
        print(
            f"call {name}: {t['span']:.1f} s from the first turn asked for to the last given up: "
            f"alone {t['alone']:.1f}, shared while a measurement waited {t['shared_blocking']:.1f}, "
            f"shared {t['shared']:.1f}, idle {t['idle']:.1f}"
        )
    args.out.write_text(json.dumps({"about": args.about, "calls": calls}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":  # pragma: no cover
    main()
