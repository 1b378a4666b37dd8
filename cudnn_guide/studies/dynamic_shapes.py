"""Dynamic shapes with a kernel cache: one compiled kernel set for many batch sizes.

``cudnn.create_kernel_cache()`` returns a cache that graphs share when built with
``kernel_cache=cache`` and ``is_dynamic_shape_enabled=True``: a graph that differs from an
earlier one only in its shapes can reuse that graph's compiled kernels instead of compiling
its own.

Build times are easily confounded by what a process has already done (lazy library loading,
heuristics caches). :func:`run_fresh_sequence` therefore builds each sequence of batch sizes in
a new interpreter of its own (:mod:`cudnn_guide.studies.fresh_process`; ``python -m
cudnn_guide.studies.dynamic_shapes`` does the same from a shell), so the cache's effect can be compared
against controls — no cache, and another order — on equal terms.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from cudnn_guide import collector

__all__ = ["PRELOAD", "run_fresh_sequence", "run_fresh_sequences", "plot_build_times"]


@collector.measuring()
def build_sequence(
    batches: Sequence[int],
    *,
    kernel_cache: bool,
    m: int = 512,
    k: int = 1024,
    n: int = 512,
    time_execution: bool = True,
) -> list[dict[str, Any]]:
    """Build ``matmul → scale → bias → GELU`` for each batch size in order; time each build.

    With ``kernel_cache=True`` all graphs share one ``cudnn.create_kernel_cache()`` and are
    built with ``is_dynamic_shape_enabled=True``. Each graph's output is checked against PyTorch
    and, if ``time_execution``, its execution is timed (cold L2). Run beside another interpreter by
    :meth:`~cudnn_guide.studies.fresh_process.InterpreterPool.run_all`, everything but the builds holds the pair's
    lock (:func:`~cudnn_guide.studies.fresh_process.timing_alone`): the builds overlap, the GPU work never does.

    Parameters
    ----------
    batches
        Batch sizes, in build order.
    kernel_cache
        Share one kernel cache with dynamic shapes on.
    m
        Rows of each matrix product.
    k
        Reduction dimension.
    n
        Columns.
    time_execution
        Also time each graph's execution.

    Returns
    -------
    list[dict[str, Any]]
        One row per batch size: build time, plan, check, execution time.

    Example
    -------
    >>> rows = build_sequence([1, 2, 4, 8], kernel_cache=True)
    >>> print([r['build_s'] for r in rows])
    """
    import cudnn
    import torch

    from cudnn_guide import check, graphs
    from cudnn_guide.graphs import matmul, tensors
    from cudnn_guide.measure import bench
    from cudnn_guide.studies import fresh_process

    handle = graphs.handle_for_current_device()
    cache = cudnn.create_kernel_cache() if kernel_cache else None
    extra = dict(kernel_cache=cache, is_dynamic_shape_enabled=True) if kernel_cache else {}
    rows = []
    for batch in batches:
        problem = matmul.MatmulProblem(batch=batch, m=m, k=k, n=n)
        with fresh_process.timing_alone():  # beside a paired run: none of its GPU work runs while this runs
            inputs = problem.make_inputs(seed=batch)
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fused = matmul.matmul_epilogue_graph(problem, inputs, handle=handle, amax=False, **extra)
        build_s = time.perf_counter() - t0
        with fresh_process.timing_alone():
            pack = fused.pack(
                **{k_: v for k_, v in inputs.items() if k_ != "amax"}, alpha=tensors.scalar_value(problem.alpha)
            )
            check.poison(inputs["y"])
            fused.execute(pack)
            ref, _ = check.reference(problem.torch_forward, inputs["a"], inputs["b"], inputs["bias"])
            result = check.compare(inputs["y"], ref, name=f"batch {batch}")
            row = {
                "batch": batch,
                "build_s": build_s,
                "steps_s": fused.report.step_seconds,
                "plan": fused.report.plan_name,
                "rel_error": result.rel_error,
                "check": result.to_dict(),
            }
            if time_execution:
                m_ = bench.benchmark(
                    fused.bind(pack),
                    label=f"batch {batch}",
                    l2="cold",
                    flops=problem.flops,
                    budget_ms=60,
                    min_reps=20,
                )
                row["exec_median_ms"] = m_.median_ms
                row["exec"] = m_.to_dict()
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    """Entry point of a new interpreter: ``cache|nocache B1,B2,...``; prints :func:`build_sequence`'s rows as JSON.

    Parameters
    ----------
    argv
        ``[cache|nocache, B1,B2,...]``; default ``sys.argv[1:]``.

    Example
    -------
    .. code-block:: bash

       python -m cudnn_guide.studies.dynamic_shapes cache 1,2,4,8
    """
    argv = sys.argv[1:] if argv is None else argv
    mode, batches = argv[0], [int(b) for b in argv[1].split(",")]
    if mode not in ("cache", "nocache"):
        raise SystemExit("usage: python -m cudnn_guide.studies.dynamic_shapes cache|nocache B1,B2,...")
    print(json.dumps(build_sequence(batches, kernel_cache=mode == "cache")))


PRELOAD = (
    "torch",
    "numpy",
    "cudnn",
    "cudnn_guide.measure.bench",
    "cudnn_guide.check",
    "cudnn_guide.graphs",
    "cudnn_guide.graphs",
    "cudnn_guide.graphs.tensors",
)
"""What a sequence's interpreter imports before its turn (what :func:`build_sequence` uses)."""


def run_fresh_sequence(
    batches: Sequence[int], *, kernel_cache: bool, label: str | None = None, pool: Any = None, timeout: float = 600
) -> list[dict[str, Any]]:
    """:func:`build_sequence` in a new interpreter (:mod:`cudnn_guide.studies.fresh_process`); returns its rows.

    Each row's output check, and its execution time as a
    :class:`~cudnn_guide.measure.measurement.Measurement` (``row["measurement"]``, labelled
    ``"<label>, batch <b>"``, with params ``impl=label`` and ``batch``), join the running
    example's record, as if made in this process.

    Parameters
    ----------
    batches
        Batch sizes, in build order.
    kernel_cache
        Use the kernel cache.
    label
        The run's name in checks and measurements; default ``"cache"`` or ``"no cache"``.
    pool
        An :class:`~cudnn_guide.studies.fresh_process.InterpreterPool` (preloaded with :data:`PRELOAD`)
        whose next interpreter runs it; ``None`` starts one now and waits for its imports.
    timeout
        Seconds before the interpreter is killed.

    Returns
    -------
    list[dict[str, Any]]
        The interpreter's rows.

    Raises
    ------
    RuntimeError
        The interpreter failed; its traceback is in the message.
    CheckFailedError
        A graph's output failed its check.

    Example
    -------
    >>> rows = run_fresh_sequence([1, 2, 4, 8], kernel_cache=False)  # a control run
    """
    from cudnn_guide.studies import fresh_process

    run = [(batches, kernel_cache, label or ("cache" if kernel_cache else "no cache"))]
    if pool is None:
        with fresh_process.InterpreterPool(1, preload=PRELOAD) as own:
            return run_fresh_sequences(run, own, timeout)[0]
    return run_fresh_sequences(run, pool, timeout)[0]


def run_fresh_sequences(
    runs: Sequence[tuple[Sequence[int], bool, str]], pool: Any, timeout: float = 600
) -> list[list[dict[str, Any]]]:
    """:func:`run_fresh_sequence` for each ``(batches, kernel_cache, label)`` of ``runs``, through the pool's
    :meth:`~cudnn_guide.studies.fresh_process.InterpreterPool.run_all` (one at a time, or two at once with
    ``at_once=2``, each run in its own interpreter on its share of the caller's cores).

    Parameters
    ----------
    runs
        Batch sizes in build order, whether to use the kernel cache, and the run's name, for each run.
    pool
        An :class:`~cudnn_guide.studies.fresh_process.InterpreterPool` preloaded with :data:`PRELOAD`, with an
        interpreter for each run.
    timeout
        Seconds before each interpreter is killed.

    Returns
    -------
    list[list[dict[str, Any]]]
        Each run's rows, in the order of ``runs``; checks and measurements join the running example's record in
        that order, as :func:`run_fresh_sequence`'s do.

    Raises
    ------
    RuntimeError
        An interpreter failed; its traceback is in the message.
    CheckFailedError
        A graph's output failed its check.

    Example
    -------
    >>> with fresh_process.InterpreterPool(2, preload=PRELOAD, at_once=2) as pool:
    ...     cached, plain = run_fresh_sequences([([1, 2], True, "cache"), ([1, 2], False, "no cache")], pool)
    """
    from cudnn_guide.studies import fresh_process

    calls = [(build_sequence, (list(batches),), {"kernel_cache": cache}) for batches, cache, _ in runs]
    try:
        done = pool.run_all(calls, timeout=timeout)
    except fresh_process.FreshProcessError as exc:
        raise RuntimeError(f"dynamic-shapes run failed:\n{exc.detail[-2000:]}") from None
    return [_answered(d, label) for (_, _, label), d in zip(runs, done, strict=True)]


def _answered(done: Any, label: str) -> list[dict[str, Any]]:
    """A run's rows, its checks and measurements added to the running example's record (as if made here)."""
    from cudnn_guide import check, collector
    from cudnn_guide.measure.measurement import Measurement

    for row in done.value:
        check.from_child(row["check"], name=f"{label}, batch {row['batch']} (fresh process)")
        if "exec" in row:
            row["measurement"] = Measurement.from_dict({**row["exec"], "label": f"{label}, batch {row['batch']}"})
            row["measurement"].params = {"impl": label, "batch": row["batch"]}
            collector.add_measurements(row["measurement"])
    return done.value


if __name__ == "__main__":  # pragma: no cover
    main()


def plot_build_times(runs: dict[str, list[dict[str, Any]]]) -> Any:
    """Two panels of build time per graph, one line per run: in the order the process built them, and by
    batch size. A run named ``"cache, …"`` is green, one named ``"… descending"`` dashed.

    Parameters
    ----------
    runs
        Run name → the rows of :func:`run_fresh_sequence` (``batch`` and ``build_s`` each).

    Returns
    -------
    Any
        The matplotlib figure.

    Example
    -------
    >>> plot_build_times({"cache, ascending": rows_cached, "no cache, ascending": rows_plain})
    """
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    for name, rows in runs.items():
        style = {
            "color": "#76b900" if name.startswith("cache") else "0.4",
            "linestyle": "--" if "descending" in name else "-",
            "marker": "o",
            "label": name,
        }
        ax1.plot(range(1, len(rows) + 1), [r["build_s"] * 1e3 for r in rows], **style)
        by_batch = sorted(rows, key=lambda r: r["batch"])
        ax2.plot([r["batch"] for r in by_batch], [r["build_s"] * 1e3 for r in by_batch], **style)
    ax1.set_xlabel("build number within the process")
    ax2.set_xlabel("batch size")
    ax2.set_xscale("log", base=2)
    for ax in (ax1, ax2):
        ax.set_yscale("log")
        ax.set_ylabel("build time (ms)")
        ax.grid(True, alpha=0.3, which="both")
    ax1.legend(fontsize=8)
    ax1.set_title("in build order")
    ax2.set_title("by batch size")
    return fig
