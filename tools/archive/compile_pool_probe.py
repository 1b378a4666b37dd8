"""Where does a page's first ``torch.compile`` spend its time, cold? Run on a GPU.

Each run is a new interpreter with empty Inductor, Triton and CUDA JIT caches (as a recorded page
has). It compiles plot_04's base-size chain (batched matmul → scale → bias → GELU → AMAX) in
``max-autotune-no-cudagraphs`` or ``default`` mode and times the first call. Half of the runs first
start Inductor's compile-worker pool and wait until it answers (``AsyncCompile.warm_pool`` and
``wait_pool_ready``); that wait is timed on its own. Until the pool answers, Inductor compiles in
the calling process, so the split tells how much of a page's compile is the pool's start-up.
Each run also times 200 calls of what it compiled (CUDA events), to show the result is the same.

``python tools/archive/compile_pool_probe.py [out.json]``
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import torch
from torch._inductor.async_compile import AsyncCompile
from cudnn_guide.graphs import matmul
mode, warm = sys.argv[1], sys.argv[2] == "warm"
p = matmul.MatmulProblem(batch=16, m=512, k=1024, n=512, alpha=0.5)
ins = p.make_inputs(seed=0)
torch.cuda.synchronize()
out = {"mode": mode, "pool": "warmed first" if warm else "on demand", "ready_s": time.perf_counter() - t0}
if warm:
    t = time.perf_counter()
    AsyncCompile.warm_pool()
    AsyncCompile.wait_pool_ready()
    out["pool_s"] = time.perf_counter() - t
f = torch.compile(p.torch_forward, mode=mode)
t = time.perf_counter()
y, amax = f(ins["a"], ins["b"], ins["bias"])
torch.cuda.synchronize()
out["compile_and_first_call_s"] = time.perf_counter() - t
ref = p.torch_forward(ins["a"].float(), ins["b"].float(), ins["bias"].float())[0]
out["rel_error"] = ((y.float() - ref).norm() / ref.norm()).item()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for _ in range(20):
    f(ins["a"], ins["b"], ins["bias"])
start.record()
for _ in range(200):
    f(ins["a"], ins["b"], ins["bias"])
end.record()
torch.cuda.synchronize()
out["us_per_call"] = start.elapsed_time(end) * 1e3 / 200
print(json.dumps(out), flush=True)
os._exit(0)
"""


def one(mode: str, pool: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="compile-probe-") as tmp:
        env = dict(os.environ)
        for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH"):
            env[var] = os.path.join(tmp, var.lower())
            os.makedirs(env[var])
        done = subprocess.run([sys.executable, "-c", CHILD, mode, pool], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        return json.loads(done.stdout.strip().splitlines()[-1])


def main(out: str | None, reps: int = 2) -> None:
    rows = []
    for _ in range(reps):  # alternate the variants, so drift falls on all of them alike
        for mode in ("max-autotune-no-cudagraphs", "default"):
            for pool in ("cold", "warm"):
                rows.append(one(mode, pool))
                print(rows[-1], flush=True)
    summary = {}
    for mode in ("max-autotune-no-cudagraphs", "default"):
        for pool in ("on demand", "warmed first"):
            sel = [r for r in rows if r["mode"] == mode and r["pool"] == pool]
            summary[f"{mode} / pool {pool}"] = {
                k: statistics.median(r[k] for r in sel) for k in ("compile_and_first_call_s", "us_per_call")
            } | ({"pool_s": statistics.median(r["pool_s"] for r in sel)} if "pool_s" in sel[0] else {})
    print(json.dumps(summary, indent=1))
    if out:
        with open(out, "w") as f:
            json.dump({"about": __doc__.split("\n")[0], "rows": rows, "median": summary}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
