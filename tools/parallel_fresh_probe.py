"""Do two start-up processes at once measure what one alone does? A probe for issue 34's "start-up studies in parallel".

plot_28's first-call processes (:func:`cudnn_guide.studies.first_call.fresh_process`; ``--backends`` names
the pair: two cuDNN processes by default, ``cudnn,fa4`` for plot_28's round as one pair) are run in blocks
that alternate: a *serial* block (one process at a time, on cores ``0-4``, like a lane of a three-lane
recording) and a *paired* block (two processes at once, one on cores ``0-4`` and one on cores ``5-9``).
Each process's parts (torch and CUDA start, the backend's import, the first call, the second) are kept,
with the block, the slot and the pair; one process of each backend before the first block is not kept
(the first after a machine starts reads its libraries from disk). Nothing else runs on the GPU. Run on a
GPU machine from the repository root::

    PYTHONPATH=. python tools/parallel_fresh_probe.py OUT.json [--blocks 3] [--per-block 4] [--backends cudnn,fa4]

The summary per arm is each part's median and min-max over its processes; it is a probe of one lease, not
a rule: the measurement studies say what it does and does not show. On a machine where Python may not
write bytecode (the GPU builder), every process compiles its imports from source unless the packages'
bytecode was compiled first (``source tools/builder/env.sh`` does it once per lease); the committed runs
were made without it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from cudnn_guide.studies import first_call

CORES = ({0, 1, 2, 3, 4}, {5, 6, 7, 8, 9})
"""The two slots' cores: five each, as a lane of a three-lane recording on 16 cores has five or six."""


def _one(slot: int, backend: str, out: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    os.sched_setaffinity(0, CORES[slot])  # this thread only: the child it starts inherits it
    started = time.time()
    result = first_call.fresh_process(backend)
    out.append({**meta, "backend": backend, "slot": slot, "started": started, "ended": time.time(), **result})


def run(blocks: int, per_block: int, backends: tuple[str, str] = ("cudnn", "cudnn")) -> list[dict[str, Any]]:
    """The processes of ``blocks`` serial and ``blocks`` paired blocks, alternating, serial first.

    A serial block runs ``backends[0]``, ``backends[1]``, ... in turn; a paired block runs the two at once
    (``("cudnn", "fa4")``: plot_28's round as one pair)."""
    runs: list[dict[str, Any]] = []
    for backend in dict.fromkeys(backends):  # not kept: the first process after a machine starts reads from disk
        _one(0, backend, [], {"arm": "warm-up"})
    for b in range(blocks):
        for i in range(per_block):
            _one(0, backends[i % 2], runs, {"arm": "serial", "block": b, "pair": None})
        for p in range(per_block // 2):
            threads = [
                threading.Thread(target=_one, args=(s, backends[s], runs, {"arm": "paired", "block": b, "pair": p}))
                for s in (0, 1)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    return runs


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per backend and arm (``"cudnn serial"``), per part: ``median``, ``min``, ``max`` and ``n`` over the processes
    that finished."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for backend in dict.fromkeys(r["backend"] for r in runs):
        for arm in ("serial", "paired"):
            done = [r for r in runs if r["arm"] == arm and r["backend"] == backend and "error" not in r]
            cell = out.setdefault(f"{backend} {arm}", {})
            for key in (*first_call.PARTS, "second_call_s"):
                xs = [r[key] for r in done]
                if xs:
                    cell[key] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--per-block", type=int, default=4)
    parser.add_argument("--backends", default="cudnn,cudnn", help="the pair's two backends (cudnn, fa4)")
    args = parser.parse_args()
    pair = tuple(args.backends.split(","))
    if len(pair) != 2 or not set(pair) <= {"cudnn", "fa4"}:
        parser.error(f"--backends takes two of cudnn and fa4, comma-separated, got {args.backends!r}")
    missing = set().union(*CORES) - os.sched_getaffinity(0)
    if missing:  # a thread's affinity would fail and its processes go missing from the paired arm
        parser.error(
            f"the probe pins its two slots to cores {sorted(set().union(*CORES))}; this process may not use "
            f"{sorted(missing)}: run it on a machine with ten cores or more"
        )
    wall = time.perf_counter()
    runs = run(args.blocks, args.per_block, pair)
    from cudnn_guide import environment

    data = {
        "about": __doc__.splitlines()[0],
        "environment": environment.collect().to_dict(),
        "cores": [sorted(c) for c in CORES],
        "backends": list(pair),
        "seconds": time.perf_counter() - wall,
        "summary": summary(runs),
        "runs": runs,
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(data["summary"], indent=1))


if __name__ == "__main__":
    main()
