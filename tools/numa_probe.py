"""Does the CPU a page runs on change its host times? Launch cost from cores near each GPU and far from it.

    python tools/numa_probe.py OUT.json [ROUNDS]          (on a GPU machine; every visible GPU)

For each GPU: its NUMA node and the cores the kernel lists as local to it (sysfs), then ROUNDS rounds
that alternate a child process pinned to those cores with one pinned to the others. Each child times
``calls`` back-to-back launches of a tiny kernel in batches (host time per call, the GPU kept ahead)
and reports the median batch. Written to OUT.json with the topology.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import os, statistics, sys, time, torch
torch.cuda.init()
x = torch.zeros(16, device="cuda")
for _ in range(2000):
    x.add_(1)
torch.cuda.synchronize()
per_call = []
for _ in range(9):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(400):
        x.add_(1)
    per_call.append((time.perf_counter() - t0) / 400 * 1e6)
torch.cuda.synchronize()
print(statistics.median(per_call), sorted(os.sched_getaffinity(0))[:1])
"""


def _cpulist(text: str) -> list[int]:
    cpus = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        cpus += range(int(lo), int(hi or lo) + 1)
    return cpus


def gpu_topology() -> list[dict]:
    """Each visible GPU's PCI bus id, NUMA node and local cores, from nvidia-smi and sysfs."""
    rows = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    out = []
    for row in rows:
        index, bus = (x.strip() for x in row.split(","))
        dev = Path("/sys/bus/pci/devices") / bus.lower()[-12:]
        out.append(
            {
                "gpu": int(index),
                "pci": bus,
                "numa_node": int((dev / "numa_node").read_text()),
                "local_cpus": _cpulist((dev / "local_cpulist").read_text()),
            }
        )
    return out


def main(path: str, rounds: int = 5) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    topo = gpu_topology()
    results = []
    for gpu in topo:
        local = [c for c in gpu["local_cpus"] if c in allowed]
        remote = [c for c in allowed if c not in gpu["local_cpus"]]
        for r in range(rounds):
            for where, cpus in (
                (("local", local), ("remote", remote)) if r % 2 == 0 else (("remote", remote), ("local", local))
            ):
                if not cpus:
                    continue
                env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu["gpu"]))
                us, _ = subprocess.run(
                    [sys.executable, "-c", CHILD],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                    preexec_fn=lambda cpus=cpus: os.sched_setaffinity(0, cpus),
                ).stdout.split(" ", 1)
                results.append({"gpu": gpu["gpu"], "round": r, "cores": where, "host_us_per_call": float(us)})
                print(results[-1], flush=True)
    summary = {
        f"gpu{g['gpu']} {w}": statistics.median(
            x["host_us_per_call"] for x in results if x["gpu"] == g["gpu"] and x["cores"] == w
        )
        for g in topo
        for w in ("local", "remote")
        if any(x["gpu"] == g["gpu"] and x["cores"] == w for x in results)
    }
    Path(path).write_text(
        json.dumps({"topology": topo, "allowed_cpus": allowed, "runs": results, "median": summary}, indent=1)
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5)
