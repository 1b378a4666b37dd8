"""How long does a page's interpreter take to exit after its work is done? Run on a GPU.

The recorder waits for each page's interpreter to exit before it starts the next page on that GPU,
and counts the wait in the page's seconds. A child process here does a page's kinds of work (CUDA
only; a ``torch.compile``; a max-autotune ``torch.compile``), prints the moment it is done, and then
either returns normally (``atexit`` handlers, Inductor's compile workers shut down, CUDA torn down)
or calls ``os._exit(0)`` after flushing. The parent times done → exit, alternating the two endings.

``python tools/archive/exit_cost_probe.py [out.json]``
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

CHILD = r"""
import os, sys, time, torch
work, ending = sys.argv[1], sys.argv[2]
x = torch.randn(1024, 1024, device="cuda")
if work != "cuda":
    mode = "max-autotune-no-cudagraphs" if work == "max-autotune" else "default"
    f = torch.compile(lambda a: torch.relu(a @ a) + 1.0, mode=mode)
    f(x)
torch.cuda.synchronize()
print(repr(time.time()), flush=True)
sys.stderr.flush()
if ending == "os._exit":
    os._exit(0)
"""


def one(work: str, ending: str) -> float:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, work, ending], stdout=subprocess.PIPE, text=True)
    done = float(proc.stdout.readline())
    proc.wait()
    return time.time() - done


def main(out: str | None) -> None:
    rows = []
    for work in ("cuda", "default", "max-autotune"):
        for _ in range(3):
            for ending in ("return", "os._exit"):
                rows.append({"work": work, "ending": ending, "exit_s": one(work, ending)})
                print(rows[-1], flush=True)
    summary = {
        f"{w}/{e}": statistics.median(r["exit_s"] for r in rows if r["work"] == w and r["ending"] == e)
        for w in ("cuda", "default", "max-autotune")
        for e in ("return", "os._exit")
    }
    print(json.dumps(summary, indent=1))
    if out:
        with open(out, "w") as f:
            json.dump({"about": __doc__.split("\n")[0], "rows": rows, "median_exit_s": summary}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
