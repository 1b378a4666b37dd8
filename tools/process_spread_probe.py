"""Is a host time set per process? The spread of launch cost within one process against between fresh ones.

    python tools/process_spread_probe.py OUT.json [PROCESSES]     (on a GPU machine; GPU 0)

Starts PROCESSES fresh interpreters one after another (default 16). Each times 400 back-to-back
launches of a tiny kernel in 15 batches (host time per call, the GPU kept ahead) and reports every
batch. If host time were a property of the code alone, the batches of one process and the medians of
different processes would spread alike; the JSON holds both, per process and overall.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, time, torch
x = torch.zeros(16, device="cuda")
for _ in range(2000):
    x.add_(1)
torch.cuda.synchronize()
batches = []
for _ in range(15):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(400):
        x.add_(1)
    batches.append((time.perf_counter() - t0) / 400 * 1e6)
torch.cuda.synchronize()
print(json.dumps(batches))
"""


def spread(values: list[float]) -> float:
    """Max over min."""
    return max(values) / min(values)


def summarize(per_process: list[list[float]]) -> dict[str, float]:
    """Within a process: the median over processes of (its batches' IQR over its median). Between processes:
    max over min of the processes' medians, and their IQR over their median."""
    medians = [statistics.median(b) for b in per_process]

    def rel_iqr(v: list[float]) -> float:
        q = statistics.quantiles(v, n=4)
        return (q[2] - q[0]) / statistics.median(v)

    return {
        "processes": len(per_process),
        "within_process_rel_iqr_median": statistics.median(rel_iqr(b) for b in per_process),
        "between_process_rel_iqr": rel_iqr(medians),
        "between_process_max_over_min": spread(medians),
        "median_us": statistics.median(medians),
    }


def main(path: str, processes: int = 16) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
    runs = []
    for _ in range(processes):
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"process {len(runs)}: median {statistics.median(runs[-1]):.2f} µs", flush=True)
    result = {"batches_us": runs, "summary": summarize(runs)}
    Path(path).write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"]))
    return result


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 16)
