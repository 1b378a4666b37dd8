"""An A/B in one lease of cc933e0's loop sizing: five pages with many wall-clock loops, old code then new.

plot_05, plot_09, plot_17, plot_24 and plot_34 recorded in three lanes by 1fd9473's code (``old``: every
wall-clock loop 50 calls, three warm-up calls for a long call), then by cc933e0's (``new``: loops of about
:data:`~cudnn_guide.measure.compare.LOOP_MS`, from 10 to 50 calls, stopping at five rounds once settled; two
warm-up calls for a call that outlasts the warm-up), in one device call of one lease of one H200 after the
CuTe parks. Per arm, as :func:`clock_cells_ab.study` reads it: the recorder's seconds, the turns'
timeline, each page's line of turns, the host loop before and after; and, from each arm's records, the
wall-clock loops: how many measurements, the calls per loop (and how many loops made the most), the seconds their
timed loops took, in all and by page (samples × calls per loop × ms per call; the sizing calls are not in it), and
how long one loop lasted. One run of each, old first: where the
seconds went, not an interval. Run from the repository root::

    PYTHONPATH=docs/_ext:.:tools python tools/loop_sizing_ab.py docs/data/loop_sizing_ab.json /tmp/ab
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from clock_cells_ab import cli
from clock_cells_ab import study as turns_study

OLD_CALLS = 50
"""Calls per loop before cc933e0 (``compare_loops``' ``calls``): the old arm's records do not say it."""


def loops(records: Path) -> dict[str, Any]:
    """The wall-clock loop measurements of the ``*.record.json`` files in ``records``: how many, their calls per loop,
    the seconds their timed loops took (in all and by page), and how long one loop lasted (ms: calls × median ms per
    call; shortest, median, longest)."""
    calls, lengths, by_page = [], [], {}
    for path in sorted(records.glob("*.record.json")):
        page = path.name.removesuffix(".record.json")
        for m in json.loads(path.read_text(encoding="utf-8"))["measurements"]:
            if m["mode"] != "wall-clock loop":
                continue
            n = (m.get("params") or {}).get("loop_calls", OLD_CALLS)
            calls.append(n)
            lengths.append(n * m["median_ms"])
            by_page[page] = by_page.get(page, 0.0) + sum(m["samples_ms"]) * n / 1e3
    return {
        "measurements": len(calls),
        "calls_per_loop": sorted(set(calls)),
        "at_most_calls": sum(1 for n in calls if n == max(calls, default=0)),
        "seconds": round(sum(by_page.values()), 2),
        "by_page": {p: round(v, 2) for p, v in by_page.items()},
        "loop_ms": {
            "min": round(min(lengths), 2),
            "median": round(statistics.median(lengths), 2),
            "max": round(max(lengths), 2),
        }
        if lengths
        else None,
    }


def study(folder: Path) -> dict[str, Any]:
    """Both arms from one device call's files: logs, traces and host readings, and ``records_<arm>/``."""
    found = turns_study(folder)
    for arm in ("old", "new"):
        found["arms"][arm]["wall_clock_loops"] = loops(folder / f"records_{arm}")
    return found


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    about = (
        "plot_05, 09, 17, 24 and 34 recorded in three lanes in one device call of one lease of one H200 after the "
        "CuTe parks: first by 1fd9473's code (old: 50 calls in every wall-clock loop), then by cc933e0's (new: "
        "loops of about 25 ms of calls where a call is over 0.5 ms, 10 to 50 calls, stopping at five rounds once "
        "settled; two warm-up calls for a call longer than the warm-up). Written by tools/loop_sizing_ab.py."
    )
    cli(argv, __doc__, study, about, "1fd9473", "cc933e0")


if __name__ == "__main__":
    main()
