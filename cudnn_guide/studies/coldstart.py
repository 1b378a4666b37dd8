"""Time to first result in a fresh process: cold build against a plan reloaded from disk.

In-process measurements hide start-up costs: the second build of a graph in a warm process
reuses cuDNN's loaded kernels and caches. :func:`measure` must therefore run at the start of a
new interpreter, and :func:`run_fresh` starts one (from an
:class:`~cudnn_guide.studies.fresh_process.InterpreterPool`, whose interpreters imported torch ahead of
time, or on demand). ``python -m cudnn_guide.studies.coldstart GRAPH MODE CACHE_DIR`` does the same from
a shell. It reports:

* ``import_s``: importing torch and this package, if the interpreter had not already;
* ``context_s``: CUDA context and cuDNN handle creation (the same in both modes);
* ``plan_s``: building the graph (``build``) or reading, checking and deserializing the cached
  plan (``cache``);
* ``first_result_s``: from the start of ``plan_s`` to the first output on the host side of a
  synchronize: what a fresh process waits before its first answer;
* ``rel_error``: the first output checked against PyTorch.

:func:`flex_attention_fresh` asks the same of ``cudnn.flex_attention``: its mask plan and its
first call, which compiles the CuTe DSL kernel (:func:`flex_attention_first_call`).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudnn_guide import collector

__all__ = [
    "FLEX_PRELOAD",
    "GRAPHS",
    "PRELOAD",
    "first_result_speedups",
    "plot_first_results",
    "run_fresh",
    "run_fresh_all",
    "flex_attention_first_call",
    "flex_attention_fresh",
]

GRAPHS = ("matmul", "conv", "sdpa")

PRELOAD = (
    "torch",
    "numpy",
    "cudnn",
    "cudnn_guide.check",
    "cudnn_guide.graphs",
    "cudnn_guide.graphs.plan_cache",
    "cudnn_guide.graphs",
)
"""What a start-up study's interpreter imports before its turn: what :func:`measure` imports
before its clock starts, so the numbers are those of an interpreter that has just imported them."""


def _problem(graph: str) -> tuple[Any, Any]:
    from cudnn_guide.graphs import attention, conv, matmul

    if graph == "matmul":
        return matmul.MatmulProblem(), matmul.matmul_epilogue_graph
    if graph == "conv":
        return conv.ConvProblem(), conv.conv_bias_relu_graph
    if graph == "sdpa":
        return attention.SdpaProblem(batch=4, heads=16, seq=4096, head_dim=128), attention.sdpa_graph
    raise ValueError(f"unknown graph {graph!r}; choose from {GRAPHS}")


def _named(graph: str, problem: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    from cudnn_guide.graphs import tensors

    data = dict(inputs)
    if graph == "matmul":
        data["alpha"] = tensors.scalar_value(problem.alpha)
    return data


def _reference(graph: str, problem: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
    from cudnn_guide import check

    if graph == "matmul":
        ref, _ = check.reference(problem.torch_forward, inputs["a"], inputs["b"], inputs["bias"])
        return inputs["y"], ref
    if graph == "conv":
        return inputs["y"], check.reference(problem.torch_forward, inputs["x"], inputs["w"], inputs["b"])
    return inputs["o"], check.reference(problem.torch_forward, inputs["q"], inputs["k"], inputs["v"])


def measure(graph: str, mode: str, cache_dir: str | Path, jit_cache: str | Path | None = None) -> dict[str, Any]:
    """Time one fresh start: context, then build or load the plan, then the first result.

    Call it only at the start of a new process (:func:`run_fresh` does): every cost it measures
    is paid once per process.

    Parameters
    ----------
    graph
        ``"matmul"``, ``"conv"`` or ``"sdpa"``.
    mode
        ``"build"`` or ``"cache"`` (the cache must hold the plan from an earlier ``build``).
    cache_dir
        Directory of the :class:`~cudnn_guide.graphs.plan_cache.PlanCache`.
    jit_cache
        The CUDA JIT disk cache for this process (``CUDA_CACHE_PATH``, set before CUDA starts):
        a new empty folder for a truly cold start, one an earlier process filled for a warm one.
        ``None`` leaves the user's (``~/.nv/ComputeCache``), whose state this process does not control.

    Returns
    -------
    dict[str, Any]
        ``graph``, ``mode``, ``import_s``, ``context_s``, ``plan_s``, ``first_result_s``, ``rel_error``, ``check``,
        ``jit_cache``.

    Example
    -------
    >>> fresh_process.run(measure, "conv", "build", "/tmp/plans").value["first_result_s"]
    """
    if graph not in GRAPHS:
        raise ValueError(f"unknown graph {graph!r}; choose from {GRAPHS}")
    if mode not in ("build", "cache"):
        raise ValueError(f"mode must be 'build' or 'cache', got {mode!r}")
    t_process = time.perf_counter()
    import os

    if jit_cache is not None:
        os.environ["CUDA_CACHE_PATH"] = str(jit_cache)  # read by the driver when CUDA starts, below
    import torch

    if torch.cuda.is_initialized():
        raise RuntimeError("coldstart.measure: CUDA already started in this process; the JIT cache cannot be chosen")

    from cudnn_guide import check, graphs
    from cudnn_guide.graphs import plan_cache

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
        fused.execute(fused.pack(**data))
    elif mode == "cache":
        entry = cache.read(key)
        if entry is None:
            raise RuntimeError(f"coldstart: no valid cache entry ({cache.last_event}); run mode 'build' first")
        plan = plan_cache.load_plan(entry[0], entry[1], handle)
        t_plan = time.perf_counter()
        plan.execute(**data)
    torch.cuda.synchronize()
    t_first = time.perf_counter()

    if mode == "build":  # populate the cache for later 'cache' runs, outside the timed region
        cache.store(key, bytes(fused.graph.serialize(as_bytes=True)), fused.uids)
    out, ref = _reference(graph, problem, inputs)
    checked = check.compare(out, ref, name=f"{graph} {mode}")
    result = {
        "graph": graph,
        "mode": mode,
        "import_s": t_imported - t_process,
        "context_s": t_context - t_imported,
        "plan_s": t_plan - t0,
        "first_result_s": t_first - t0,
        "rel_error": checked.rel_error,
        "check": checked.to_dict(),
        "jit_cache": None if jit_cache is None else str(jit_cache),
    }
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point of a new interpreter: ``GRAPH MODE CACHE_DIR``; prints and returns :func:`measure`'s result.

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

       python -m cudnn_guide.studies.coldstart conv build /tmp/plans
    """
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        raise SystemExit("usage: python -m cudnn_guide.studies.coldstart GRAPH MODE CACHE_DIR")
    result = measure(*argv)
    print(json.dumps(result))
    return result


def run_fresh(
    graph: str,
    mode: str,
    cache_dir: str | Path,
    *,
    jit_cache: str | Path | None = None,
    pool: Any = None,
    timeout: float = 300,
) -> dict[str, Any]:
    """Run :func:`measure` in a new interpreter; return its result plus the process's wall time.

    Parameters
    ----------
    graph
        ``"matmul"``, ``"conv"`` or ``"sdpa"``.
    mode
        ``"build"`` or ``"cache"``.
    cache_dir
        Directory of the plan cache.
    jit_cache
        The process's CUDA JIT cache folder (see :func:`measure`).
    pool
        An :class:`~cudnn_guide.studies.fresh_process.InterpreterPool` (preloaded with :data:`PRELOAD`)
        whose next interpreter runs it; ``None`` starts one interpreter now and waits for its imports.
    timeout
        Seconds before the interpreter is killed.

    Returns
    -------
    dict[str, Any]
        :func:`measure`'s result, plus ``process_s``: the caller's wall time from handing over
        the call to the interpreter's exit. Its output check joins the running example's record
        (:func:`cudnn_guide.check.from_child`).

    Raises
    ------
    RuntimeError
        The interpreter failed; its traceback is in the message.
    CheckFailedError
        The interpreter's output failed its check.

    Example
    -------
    >>> with fresh_process.InterpreterPool(2, preload=PRELOAD) as pool:
    ...     cold = run_fresh('sdpa', 'build', cache_dir, pool=pool)
    ...     warm = run_fresh('sdpa', 'cache', cache_dir, pool=pool)
    >>> print(cold['first_result_s'] / warm['first_result_s'])
    """
    from cudnn_guide.studies import fresh_process

    if pool is None:
        with fresh_process.InterpreterPool(1, preload=PRELOAD) as own:
            return run_fresh_all([(graph, mode, jit_cache)], cache_dir, own, timeout)[0]
    return run_fresh_all([(graph, mode, jit_cache)], cache_dir, pool, timeout)[0]


def run_fresh_all(
    runs: Sequence[tuple[str, str, str | Path | None]], cache_dir: str | Path, pool: Any, timeout: float = 300
) -> list[dict[str, Any]]:
    """:func:`run_fresh` for each ``(graph, mode, jit_cache)`` of ``runs``, through the pool's
    :meth:`~cudnn_guide.studies.fresh_process.InterpreterPool.run_all`: one at a time, or in consecutive pairs
    (``at_once=2``), each run in its own interpreter. A run may rely on what the runs two places or more before it
    left on disk (a plan stored, a JIT cache filled), not on the run just before it.

    Parameters
    ----------
    runs
        ``(graph, mode, jit_cache)`` each, as :func:`run_fresh` takes them.
    cache_dir
        Directory of the plan cache.
    pool
        An :class:`~cudnn_guide.studies.fresh_process.InterpreterPool` preloaded with :data:`PRELOAD`, with an
        interpreter for each run.
    timeout
        Seconds before each interpreter is killed.

    Returns
    -------
    list[dict[str, Any]]
        :func:`run_fresh`'s result for each run, in order; the output checks join the running example's record in
        that order.

    Raises
    ------
    RuntimeError
        An interpreter failed; its traceback is in the message.
    CheckFailedError
        An interpreter's output failed its check.

    Example
    -------
    >>> with fresh_process.InterpreterPool(4, preload=PRELOAD, at_once=2) as pool:
    ...     cold, cold2, warm, warm2 = run_fresh_all([("conv", "build", j1), ("conv", "build", j2),
    ...                                               ("conv", "cache", j1), ("conv", "cache", j1)], cache, pool)
    """
    from cudnn_guide import check
    from cudnn_guide.studies import fresh_process

    calls = [(measure, (graph, mode, str(cache_dir), jit), {}) for graph, mode, jit in runs]
    try:
        done = pool.run_all(calls, timeout=timeout)
    except fresh_process.FreshProcessError as exc:
        which = ", ".join(dict.fromkeys(f"{graph} {mode}" for graph, mode, _ in runs))
        raise RuntimeError(f"coldstart {which} failed:\n{exc.detail[-2000:]}") from None
    out = []
    for (graph, mode, _), d in zip(runs, done, strict=True):
        check.from_child(d.value["check"], name=f"{graph} {mode} in a fresh process")
        out.append({**d.value, "process_s": d.seconds})
    return out


def first_result_speedups(
    runs: dict[tuple[str, str], list[dict[str, Any]]], *, cached: str = "plan from disk"
) -> dict[tuple[str, str], tuple[float, float, float]]:
    """The plan cache's speed-up of the time to first result, per graph and build case.

    ``runs[(graph, case)]`` holds :func:`run_fresh` results. For each graph and each case other than
    ``cached``: median build time over median cached time, with the min–max range of the ratio
    over the runs (slowest build over fastest load, and the reverse).

    Parameters
    ----------
    runs
        ``(graph, case)`` → the :func:`run_fresh` results of that case.
    cached
        The case that loads the plan from disk.

    Returns
    -------
    dict[tuple[str, str], tuple[float, float, float]]
        ``(graph, case)`` → ``(speed-up, min, max)``.

    Example
    -------
    >>> first_result_speedups(runs)[("conv", "cold")]
    (41.2, 35.0, 47.9)
    """
    out = {}
    for graph, case in runs:
        if case == cached:
            continue
        build = [r["first_result_s"] for r in runs[(graph, case)]]
        load = [r["first_result_s"] for r in runs[(graph, cached)]]
        out[(graph, case)] = (
            statistics.median(build) / statistics.median(load),
            min(build) / max(load),
            max(build) / min(load),
        )
    return out


def plot_first_results(runs: dict[tuple[str, str], list[dict[str, Any]]], *, ax: Any = None, title: str = "") -> Any:
    """Bars of the median time to first result per graph (x) and case (colour), with min–max error bars;
    log scale.

    Parameters
    ----------
    runs
        ``(graph, case)`` → the :func:`run_fresh` results of that case.
    ax
        Axes to draw on; default a new figure.
    title
        Axes title.

    Returns
    -------
    Any
        The axes.

    Example
    -------
    >>> plot_first_results({("conv", "cold"): runs_cold, ("conv", "plan from disk"): runs_cached})
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    graphs = list(dict.fromkeys(g for g, _ in runs))
    cases = list(dict.fromkeys(c for _, c in runs))
    width = 0.8 / len(cases)
    colors = ["0.35", "0.65", "#76b900", "#1f77b4"]
    for n, case in enumerate(cases):
        ms = [[r["first_result_s"] * 1e3 for r in runs[(g, case)]] for g in graphs]
        meds = [statistics.median(v) for v in ms]
        err = [[m - min(v) for m, v in zip(meds, ms)], [max(v) - m for m, v in zip(meds, ms)]]
        xs = [i + (n - (len(cases) - 1) / 2) * width for i in range(len(graphs))]
        ax.bar(xs, meds, width=width, yerr=err, color=colors[n % len(colors)], label=case, capsize=3)
    runs_per = len(next(iter(runs.values())))
    ax.set_xticks(range(len(graphs)), graphs)
    ax.set_yscale("log")
    ax.set_ylabel(f"time to first result (ms), fresh process\nmedian, min–max of {runs_per} runs")
    if title:
        ax.set_title(title)
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3, which="both")
    return ax


@collector.measuring()
def flex_attention_first_call(batch: int, heads: int, seq: int, head_dim: int) -> dict[str, float]:
    """In this (fresh) process, time ``cudnn.flex_attention``'s causal plan, first call and second call.

    The CuTe DSL compiles the kernel on the first call; its disk cache is off unless
    ``FLEX_ATTENTION_CUTE_DSL_CACHE_ENABLED=1``, so a fresh process pays the compile again.
    Run it through :class:`~cudnn_guide.studies.fresh_process.InterpreterPool` (with an empty
    ``CUDA_CACHE_PATH`` for a cold CUDA JIT cache).

    Parameters
    ----------
    batch
        Sequences.
    heads
        Heads of Q, K and V.
    seq
        Tokens per sequence.
    head_dim
        Head dimension.

    Returns
    -------
    dict[str, float]
        ``plan_s`` (``create_mask_plan``), ``first_call_s`` and ``second_call_s`` (each to the
        output on the host side of a synchronize), and ``rel_error`` of the output against fp32.

    Example
    -------
    >>> fresh_process.run(flex_attention_first_call, 2, 16, 2048, 128, preload=("torch", "cudnn"))
    """
    import cudnn.flex_attention as cfa
    import torch

    from cudnn_guide.check import compare
    from cudnn_guide.graphs.attention_inputs import band, reference

    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(batch, seq, heads, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3)
    )
    ends = (torch.arange(seq, device="cuda", dtype=torch.int32) + 1).repeat(batch).reshape(1, 1, batch * seq)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    plan = cfa.create_mask_plan(ends.contiguous(), q, k, v)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    out = cfa.flex_attn_func(q, k, v, mask_plan=plan)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    cfa.flex_attn_func(q, k, v, mask_plan=plan)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    ref = reference(*(t.transpose(1, 2) for t in (q, k, v)), visible=band(seq, seq, device="cuda")).transpose(1, 2)
    rel = compare(out, ref, name="flex_attention, causal").rel_error
    return {"plan_s": t1 - t0, "first_call_s": t2 - t1, "second_call_s": t3 - t2, "rel_error": rel}


FLEX_PRELOAD = ("torch", "cudnn", "cudnn.flex_attention")
"""What :func:`flex_attention_fresh`'s interpreters import before their turn."""


def flex_attention_fresh(
    batch: int, heads: int, seq: int, head_dim: int, *, processes: int = 1, timeout: float = 600
) -> list[dict[str, float]]:
    """:func:`flex_attention_first_call` in ``processes`` fresh interpreters, each with an empty CUDA JIT cache.

    Each interpreter imports :data:`FLEX_PRELOAD` ahead of its turn and gets a new, empty
    ``CUDA_CACHE_PATH`` (a temporary folder, removed after it), so that neither the CuTe DSL's
    compilation nor the driver's JIT cache is warm: what a server pays once per process.

    Parameters
    ----------
    batch
        Sequences.
    heads
        Heads of Q, K and V.
    seq
        Tokens per sequence.
    head_dim
        Head dimension.
    processes
        Fresh interpreters, one after the other.
    timeout
        Seconds before an interpreter is killed.

    Returns
    -------
    list[dict[str, float]]
        One :func:`flex_attention_first_call` result per process, in order.

    Raises
    ------
    FreshProcessError
        An interpreter failed or timed out (its traceback in the message).

    Example
    -------
    >>> cold = flex_attention_fresh(4, 16, 4096, 128)
    >>> cold[0]["first_call_s"], cold[0]["plan_s"]
    """
    import tempfile

    from cudnn_guide.studies import fresh_process

    cold = []
    for _ in range(processes):
        with (
            tempfile.TemporaryDirectory() as jit_cache,
            fresh_process.InterpreterPool(1, preload=FLEX_PRELOAD, env={"CUDA_CACHE_PATH": jit_cache}) as pool,
        ):
            cold.append(pool.run(flex_attention_first_call, batch, heads, seq, head_dim, timeout=timeout).value)
    return cold


if __name__ == "__main__":  # pragma: no cover
    main()
