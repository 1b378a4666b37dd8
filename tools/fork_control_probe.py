"""Control for the forked fresh processes: do they measure what a new interpreter measures? Run on a GPU.

The start-up studies (plot_06, plot_07) and the recording run in children forked from a server
that imported torch (cudnn_guide.fresh_process). If that server left anything warm that a new
interpreter lacks, a forked child's cold build or plan load would look faster than a new
process's. This probe times cudnn_guide.coldstart's matmul (the graph with the longest cold
build: it compiles a fused kernel at run time) both ways, alternating forked child and new
interpreter, ROUNDS times per mode, all against one plan cache.

``python tools/fork_control_probe.py docs/data/fork_control.json``; the methodology page renders it.
"""

from __future__ import annotations

import json
import sys
import tempfile

from cudnn_guide import coldstart, environment

ROUNDS = 4


def main(path: str) -> None:
    cache_dir = tempfile.mkdtemp(prefix="fork-control-")
    runs = []
    coldstart.run_fresh("matmul", "build", cache_dir)  # fills the cache and starts the fork server, untimed
    for mode in ("build", "cache"):
        for _ in range(ROUNDS):
            for new_interpreter in (False, True):
                r = coldstart.run_fresh("matmul", mode, cache_dir, new_interpreter=new_interpreter)
                runs.append(r)
                print(json.dumps(r), flush=True)
    env = environment.collect().to_dict()
    with open(path, "w") as f:
        json.dump({"environment": env, "graph": "matmul", "rounds": ROUNDS, "runs": runs}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
