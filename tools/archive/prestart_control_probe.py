"""Control for pre-started interpreters: do they measure what an interpreter started on demand does? Run on a GPU.

The start-up studies (plot_06, plot_07) and the recording run each call in a new interpreter that
was started, and imported torch, ahead of time (cudnn_guide.studies.fresh_process.InterpreterPool). This
probe times cudnn_guide.studies.coldstart's matmul (the graph with the longest cold build: it compiles a
fused kernel at run time) both ways, alternating a pre-started interpreter with one started on
demand (``python -m cudnn_guide.studies.coldstart``, which imports first), ROUNDS times per mode, all
against one plan cache.

``python tools/archive/prestart_control_probe.py docs/data/prestart_control.json``; the methodology page renders it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from cudnn_guide import environment
from cudnn_guide.studies import coldstart, fresh_process

ROUNDS = 4


def on_demand(mode: str, cache_dir: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "cudnn_guide.studies.coldstart", "matmul", mode, cache_dir],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=os.getcwd(),
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return {
        **json.loads(proc.stdout.strip().splitlines()[-1]),
        "process_s": time.perf_counter() - t0,
        "process": "on demand",
    }


def main(path: str) -> None:
    cache_dir = tempfile.mkdtemp(prefix="prestart-control-")
    on_demand("build", cache_dir)  # fills the plan cache, untimed
    runs = []
    with fresh_process.InterpreterPool(2 * ROUNDS, preload=coldstart.PRELOAD) as pool:
        for mode in ("build", "cache"):
            for _ in range(ROUNDS):
                runs.append({**coldstart.run_fresh("matmul", mode, cache_dir, pool=pool), "process": "pre-started"})
                print(json.dumps(runs[-1]), flush=True)
                runs.append(on_demand(mode, cache_dir))
                print(json.dumps(runs[-1]), flush=True)
    env = environment.collect().to_dict()
    with open(path, "w") as f:
        json.dump({"environment": env, "graph": "matmul", "rounds": ROUNDS, "runs": runs}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
