"""Do cuDNN graph builds overlap when they run in threads? Run on a GPU.

A recording's host time is mostly work like the matmul page's sweep, which builds eight graphs
one after another. This builds the same eight matmul-epilogue graphs (batch 16, M = N = 512,
K = 64 … 8192, scale → bias → GELU → AMAX, bf16) in a fresh process with an empty CUDA JIT
cache: one after another, or each in its own thread with its own handle. The two ways alternate,
each run in a new process; every graph built is then executed once and checked against PyTorch.
It prints each run's build wall time and the sum of its graphs' own build times.

``python tools/archive/parallel_build_probe.py [out.json]``
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

KS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)


def _declare(cudnn, handle, a, b, bias, y, amax):
    # The ops and shapes of cudnn_guide.graphs.matmul.matmul_epilogue_graph (the page's sweep), written
    # out so that the clock covers exactly the five build steps. docs/data/parallel_build.json came from
    # this code; a new study would use the recipe (it takes a handle and times each step itself).
    f32 = cudnn.data_type.FLOAT
    g = cudnn.pygraph(
        handle=handle, io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=f32, compute_data_type=f32
    )
    A, B, BIAS = g.tensor_like(a, name="a"), g.tensor_like(b, name="b"), g.tensor_like(bias, name="bias")
    ALPHA = g.tensor(name="alpha", dim=[1, 1, 1], stride=[1, 1, 1], is_pass_by_value=True, data_type=f32)
    Y = g.gelu(input=g.add(a=g.mul(a=g.matmul(A, B, compute_data_type=f32), b=ALPHA), b=BIAS))
    Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16).set_dim(list(y.shape)).set_stride(list(y.stride()))
    AMAX = g.reduction(input=Y, mode=cudnn.reduction_mode.AMAX, compute_data_type=f32)
    AMAX.set_output(True).set_data_type(f32).set_dim([1, 1, 1]).set_stride([1, 1, 1])
    return g, {A: a, B: b, BIAS: bias, Y: y, AMAX: amax}, ALPHA


def build_all(threads: bool) -> dict:
    """In a fresh process: build the eight graphs, one after another or in threads; check each."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import cudnn
    import torch

    torch.zeros(1, device="cuda")  # the CUDA context, before any timing
    # the frontend's heuristics import these on first use; two threads importing them at once saw
    # a half-initialised module (ImportError), so both ways import them before the clock starts
    import cudnn.gemm.frost.compiler
    import cudnn.gemm.frost.heuristics

    inputs = {}
    for k in KS:
        gen = torch.Generator(device="cuda").manual_seed(k)
        a = torch.randn(16, 512, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k**0.5
        b = torch.randn(16, k, 512, device="cuda", dtype=torch.bfloat16, generator=gen)
        bias = torch.randn(1, 1, 512, device="cuda", dtype=torch.bfloat16, generator=gen)
        y = torch.empty(16, 512, 512, device="cuda", dtype=torch.bfloat16)
        inputs[k] = (a, b, bias, y, torch.empty(1, 1, 1, device="cuda", dtype=torch.float32))
    handles = {k: cudnn.create_handle() for k in KS}

    def one(k):
        t0 = time.perf_counter()
        g, pack, alpha = _declare(cudnn, handles[k], *inputs[k])
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        t1 = time.perf_counter()
        g.build_plans()
        t2 = time.perf_counter()
        return k, g, pack, alpha, {"k": k, "build_s": t2 - t0, "build_plans_s": t2 - t1}

    t0 = time.perf_counter()
    if threads:
        with ThreadPoolExecutor(len(KS)) as pool:
            built = list(pool.map(one, KS))
    else:
        built = [one(k) for k in KS]
    wall = time.perf_counter() - t0
    errors = []
    for k, g, pack, alpha, _ in built:
        a, b, bias, y, _amax = inputs[k]
        y.fill_(float("nan"))
        workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        cudnn.set_stream(handles[k], torch.cuda.current_stream().cuda_stream)
        g.execute({**pack, alpha: torch.full((1, 1, 1), 0.5)}, workspace, handle=handles[k])
        ref = torch.nn.functional.gelu(0.5 * (a.float() @ b.float()) + bias.float())
        errors.append(float((y.float() - ref).norm() / ref.norm()))
    return {
        "threads": threads,
        "wall_s": wall,
        "graphs": [row for *_, row in built],
        "largest_rel_error": max(errors),
    }


def main(out: str | None, reps: int = 3) -> None:
    from cudnn_guide.studies import fresh_process

    runs = []
    for rep in range(reps):
        for threads in (False, True) if rep % 2 == 0 else (True, False):
            os.environ["CUDA_CACHE_PATH"] = tempfile.mkdtemp(prefix="build-probe-jit-")  # an empty JIT cache
            with fresh_process.InterpreterPool(1, preload=("torch", "cudnn")) as pool:
                r = pool.run(build_all, threads).value
            r["rep"] = rep
            runs.append(r)
            print(
                f"rep {rep} {'threads   ' if threads else 'one by one'}: {r['wall_s']:.2f} s wall, graphs' own builds "
                f"{sum(x['build_s'] for x in r['graphs']):.2f} s, largest error {r['largest_rel_error']:.1e}",
                flush=True,
            )
    if out:
        with open(out, "w") as f:
            json.dump({"about": __doc__.split("\n")[0], "ks": KS, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    from parallel_build_probe import main as _main  # by module name, so fresh interpreters find build_all

    _main(sys.argv[1] if len(sys.argv) > 1 else None)
