"""An A/B in one lease of what 20c2571 and a0c1f68 changed in the turn, on the four pages they touch.

plot_06, plot_07, plot_26 and plot_28 recorded in three lanes by dcab682's code (``old``), then by the
new code (``new``), in one device call of one lease of one H200 after the CuTe parks (the old tree is
the new one with ``git diff HEAD dcab682`` of ``cudnn_guide``, ``docs/_ext``, ``docs/conf.py`` and
``examples`` applied). Per arm: the recorder's seconds (its log's summary), the turns' timeline
(:func:`turn_timeline.timeline`: held alone, shared while a page waited to measure, shared, idle; the
seconds alone by measured block; the seconds each page's shared turns kept a measurement waiting),
each page's line of turns, and the host loop read before and after (``python3 -m timeit -n 2000000
'sum(range(10))'``, best of 5, in ns). One run of each, old first: it shows where the seconds went,
not an interval. Run from the repository root::

    PYTHONPATH=docs/_ext:.:tools python tools/clock_cells_ab.py docs/data/clock_cells_ab.json /tmp/ab
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from turn_scope_study import read_log
from turn_timeline import read_traces, timeline

from cudnn_guide import datafiles

HOST = re.compile(r"best of 5: (?P<ns>[\d.]+) nsec per loop")


def host_loop(lines: list[str]) -> list[float]:
    """The host loop's readings in ns, in the order the device call took them."""
    return [float(m["ns"]) for line in lines if (m := HOST.search(line))]


def study(folder: Path) -> dict[str, Any]:
    """Both arms from one device call's files: ``log_<arm>.txt``, ``trace_<arm>/`` and ``host_ab.txt``."""
    arms: dict[str, Any] = {}
    for arm in ("old", "new"):
        log = read_log((folder / f"log_{arm}.txt").read_text(encoding="utf-8").splitlines())
        spans = timeline(read_traces(folder / f"trace_{arm}"))
        arms[arm] = {"recorder_seconds": log["recorder_seconds"], "pages": log["pages"], "timeline": spans}
    readings = host_loop((folder / "host_ab.txt").read_text(encoding="utf-8").splitlines())
    host = dict(zip(("before old", "before new", "after new"), readings, strict=True))
    return {"arms": arms, "host_loop_ns": host}


def cli(argv: list[str] | None, doc: str, run: Any, about: str, old: str, new: str) -> None:  # pragma: no cover
    """An A/B tool's command line: ``OUT FOLDER``; writes ``about``, ``old``, ``new`` and ``run(FOLDER)`` to ``OUT``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    datafiles.write_json(args.out, {"about": about, "old": old, "new": new, **run(args.folder)})


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    about = (
        "plot_06, 07, 26 and 28 recorded in three lanes in one device call of one lease of one H200 after "
        "the CuTe parks: first by dcab682's code (old), then by a0c1f68's (new: plot_26's fp32 reference not "
        "timed and giving way between K/V heads, only the clock-reading cells of plot_07 and plot_28 held "
        "alone, interpreter pools importing on every core). Written by tools/clock_cells_ab.py."
    )
    cli(argv, __doc__, study, about, "dcab682", "a0c1f68")


if __name__ == "__main__":
    main()
