"""Does a forked fresh process compile as fast as a new interpreter? Run on a GPU.

After the recording moved to forked fresh processes (cudnn_guide.fresh_process), the pages whose
cells compile (torch.compile, cuDNN's runtime-compiled norm kernels) recorded slower than in the
previous, new-interpreter recording, which ran on another machine. This probe compares the two
kinds of process on one machine, alternating them, each run with its own empty compile caches
(Inductor, Triton, the CUDA driver's), for:

* ``cudnn_norm_build_s``: building LayerNorm forward + backward graphs (runtime-compiled);
* ``compile_norm_s``: ``torch.compile`` (default mode) of a LayerNorm training step, first call;
* ``compile_matmul_s``: ``torch.compile`` (max-autotune-no-cudagraphs) of the matmul-epilogue
  chain, first call (only with ``--autotune``);
* ``python_s`` and ``torch_cpu_s``: a pure-Python loop and a CPU float64 matmul.

``python tools/fork_probe.py OUT.json [--autotune]`` writes every run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def probe(autotune: bool) -> dict:
    """Time each task once, in this (fresh) process."""
    t0 = time.perf_counter()
    s = 0
    for i in range(5_000_000):
        s += i * i
    out = {"python_s": time.perf_counter() - t0}

    import torch

    a = torch.randn(2000, 2000, dtype=torch.float64)
    a @ a
    t0 = time.perf_counter()
    for _ in range(5):
        a @ a
    out["torch_cpu_s"] = time.perf_counter() - t0
    out["torch_threads"] = torch.get_num_threads()

    from cudnn_guide import baselines, norms, recipes

    torch.empty(1, device="cuda")
    p = norms.NormProblem(tokens=16384, hidden=3072, kind="layer")
    data = p.make_inputs(seed=0)
    t0 = time.perf_counter()
    norms.norm_forward_graph(p, data)
    norms.norm_backward_graph(p, data)
    out["cudnn_norm_build_s"] = time.perf_counter() - t0

    leaves = {n: data[n].detach().clone().requires_grad_(True) for n in ("x", "scale", "bias")}
    compiled = baselines.compile_quietly(p.torch_forward, mode="default")
    t0 = time.perf_counter()
    compiled(**leaves).backward(data["dy"])
    torch.cuda.synchronize()
    out["compile_norm_s"] = time.perf_counter() - t0

    if autotune:
        mp = recipes.MatmulProblem()
        ins = mp.make_inputs(seed=0)
        chain = baselines.compile_quietly(mp.torch_forward)
        t0 = time.perf_counter()
        chain(ins["a"], ins["b"], ins["bias"])
        torch.cuda.synchronize()
        out["compile_matmul_s"] = time.perf_counter() - t0
    return out


def _fresh_caches() -> dict:
    root = tempfile.mkdtemp(prefix="fork-probe-")
    return {"TORCHINDUCTOR_CACHE_DIR": f"{root}/inductor", "TRITON_CACHE_DIR": f"{root}/triton",
            "CUDA_CACHE_PATH": f"{root}/cuda"}


def run_forked(autotune: bool) -> dict:
    import fork_probe

    from cudnn_guide import fresh_process

    saved = dict(os.environ)
    os.environ.update(_fresh_caches())
    try:
        return {"process": "forked", **fresh_process.run(fork_probe.probe, autotune, timeout=300).value}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_interpreter(autotune: bool) -> dict:
    code = f"import sys, json; sys.path.insert(0, {HERE!r}); import fork_probe; print(json.dumps(fork_probe.probe({autotune})))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **_fresh_caches()))
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return {"process": "new interpreter", **json.loads(proc.stdout.strip().splitlines()[-1])}


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    autotune = "--autotune" in sys.argv
    runs = []
    for _ in range(2):
        for fn in (run_forked, run_interpreter):
            runs.append(fn(autotune))
            print(json.dumps(runs[-1]), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump({"runs": runs}, f, indent=1)
