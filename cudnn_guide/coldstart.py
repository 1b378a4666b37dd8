"""Time to first result in a fresh process: cold build against a plan reloaded from disk.

In-process measurements hide start-up costs: the second build of a graph in a warm process
reuses cuDNN's loaded kernels and caches. This module is run as its own process,
``python -m cudnn_guide.coldstart GRAPH MODE CACHE_DIR``, and prints one JSON line:

* ``context_s``: CUDA context and cuDNN handle creation (the same in both modes);
* ``plan_s``: building the graph (``build``) or reading, checking and deserializing the cached
  plan (``cache``);
* ``first_result_s``: from the start of ``plan_s`` to the first output on the host side of a
  synchronize: what a fresh process waits before its first answer;
* ``rel_error``: the first output checked against PyTorch.

:func:`run_fresh` starts such a process and parses its answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["GRAPHS", "run_fresh", "main"]

GRAPHS = ("matmul", "conv", "sdpa")


def _problem(graph: str) -> tuple[Any, Any]:
    from . import recipes

    if graph == "matmul":
        return recipes.MatmulProblem(), recipes.matmul_epilogue_graph
    if graph == "conv":
        return recipes.ConvProblem(), recipes.conv_bias_relu_graph
    if graph == "sdpa":
        return recipes.SdpaProblem(batch=4, heads=16, seq=4096, head_dim=128), recipes.sdpa_graph
    raise ValueError(f"unknown graph {graph!r}; choose from {GRAPHS}")


def _named(graph: str, problem: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    from . import tensors

    data = dict(inputs)
    if graph == "matmul":
        data["alpha"] = tensors.scalar_value(problem.alpha)
    return data


def _reference(graph: str, problem: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
    from . import check

    if graph == "matmul":
        ref, _ = check.reference(problem.torch_forward, inputs["a"], inputs["b"], inputs["bias"])
        return inputs["y"], ref
    if graph == "conv":
        return inputs["y"], check.reference(problem.torch_forward, inputs["x"], inputs["w"], inputs["b"])
    return inputs["o"], check.reference(problem.torch_forward, inputs["q"], inputs["k"], inputs["v"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point of the child process: ``GRAPH MODE CACHE_DIR``; prints and returns the JSON result.

    Parameters
    ----------
    argv
        ``[GRAPH, MODE, CACHE_DIR]``; default ``sys.argv[1:]``.

    Returns
    -------
    dict[str, Any]
        The timings and check that were printed.

    Example
    -------
    .. code-block:: bash

       python -m cudnn_guide.coldstart conv build /tmp/plans
    """
    t_process = time.perf_counter()
    argv = sys.argv[1:] if argv is None else argv
    graph, mode, cache_dir = argv
    import torch

    from . import check, graphs, plan_cache

    t_imported = time.perf_counter()
    torch.empty(1, device="cuda")
    handle = graphs.handle_for_current_device()
    torch.cuda.synchronize()
    t_context = time.perf_counter()
    problem, recipe = _problem(graph)
    inputs = problem.make_inputs(seed=1)
    data = _named(graph, problem, inputs)
    cache = plan_cache.PlanCache(cache_dir)
    key = plan_cache.current_key(f"{recipe.__name__}|{problem!r}")
    torch.cuda.synchronize()

    t0 = time.perf_counter()
    if mode == "build":
        fused = recipe(problem, inputs, handle=handle)
        t_plan = time.perf_counter()
        fused.built.execute(fused.pack(**data))
    elif mode == "cache":
        entry = cache.read(key)
        if entry is None:
            raise SystemExit(f"coldstart: no valid cache entry ({cache.last_event}); run mode 'build' first")
        plan = plan_cache.load_plan(entry[0], entry[1], handle)
        t_plan = time.perf_counter()
        plan.execute(**data)
    else:
        raise SystemExit(f"coldstart: mode must be 'build' or 'cache', got {mode!r}")
    torch.cuda.synchronize()
    t_first = time.perf_counter()

    if mode == "build":  # populate the cache for later 'cache' runs, outside the timed region
        cache.store(key, bytes(fused.built.graph.serialize(as_bytes=True)), fused.uids)
    out, ref = _reference(graph, problem, inputs)
    result = {
        "graph": graph, "mode": mode,
        "import_s": t_imported - t_process, "context_s": t_context - t_imported,
        "plan_s": t_plan - t0, "first_result_s": t_first - t0,
        "rel_error": check.compare(out, ref).rel_error,
    }
    print(json.dumps(result))
    return result


def run_fresh(graph: str, mode: str, cache_dir: str | Path, timeout: float = 300) -> dict[str, Any]:
    """Run :func:`main` in a new Python process and return its JSON result, plus ``process_s``
    (the parent's wall time for the whole process, interpreter start-up included).

    Parameters
    ----------
    graph
        ``"matmul"``, ``"conv"`` or ``"sdpa"``.
    mode
        ``"build"`` or ``"cache"``.
    cache_dir
        Directory of the plan cache.
    timeout
        Seconds before the child is killed.

    Returns
    -------
    dict[str, Any]
        The child's timings and check, plus ``process_s``.

    Example
    -------
    >>> cold = run_fresh('sdpa', 'build', cache_dir)
    >>> warm = run_fresh('sdpa', 'cache', cache_dir)
    >>> print(cold['first_result_s'] / warm['first_result_s'])
    """
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cudnn_guide.coldstart", graph, mode, str(cache_dir)],
                          capture_output=True, text=True, timeout=timeout,
                          cwd=str(Path(__file__).resolve().parent.parent))
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"coldstart {graph} {mode} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = wall
    return result


if __name__ == "__main__":  # pragma: no cover
    main()
