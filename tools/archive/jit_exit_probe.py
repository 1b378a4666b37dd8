"""Does a fresh process that ends with ``os._exit`` still leave the CUDA JIT cache behind? Run on a GPU.

plot_06's start-up study fills an empty JIT cache with one cold build, then times builds that
reuse it. Its interpreters exit normally (CUDA torn down) so that the cache is complete. If a
process that calls ``os._exit`` right after answering leaves the same cache, only the process
that fills a cache needs the normal exit, and the others save its seconds. For each graph and
each ending this runs one cold build into a new cache, then two builds that reuse it, and prints
the plan times and each process's wall time.

``python tools/archive/jit_exit_probe.py [out.json]``
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile

from cudnn_guide.studies import coldstart, fresh_process


def main(out: str | None, reps: int = 2) -> None:
    rows = []
    plans = tempfile.mkdtemp(prefix="jit-probe-plans-")
    for rep in range(reps):
        for ending in ("normal exit", "os._exit"):
            with fresh_process.InterpreterPool(9, preload=coldstart.PRELOAD, exit_fast=ending == "os._exit") as pool:
                for graph in coldstart.GRAPHS:
                    jit = tempfile.mkdtemp(prefix="jit-probe-")
                    for role in ("fills", "reuses", "reuses"):
                        r = coldstart.run_fresh(graph, "build", plans, jit_cache=jit, pool=pool)
                        rows.append(
                            {
                                "rep": rep,
                                "ending": ending,
                                "graph": graph,
                                "role": role,
                                "plan_s": r["plan_s"],
                                "first_result_s": r["first_result_s"],
                                "process_s": r["process_s"],
                            }
                        )
                        print(rows[-1], flush=True)
    summary = {}
    for ending in ("normal exit", "os._exit"):
        for graph in coldstart.GRAPHS:
            for role in ("fills", "reuses"):
                sel = [r for r in rows if r["ending"] == ending and r["graph"] == graph and r["role"] == role]
                summary[f"{ending} / {graph} / {role}"] = {
                    k: statistics.median(r[k] for r in sel) for k in ("plan_s", "process_s")
                }
    print(json.dumps(summary, indent=1))
    if out:
        with open(out, "w") as f:
            json.dump({"about": __doc__.split("\n")[0], "rows": rows, "median": summary}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
