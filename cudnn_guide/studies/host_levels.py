"""Host-bound numbers measured in several fresh processes, and reported as their range.

On the GPU builder the same host-bound loop runs at one of two speeds: fresh interpreters timing
the same launches fall on one level or the other, and a process can switch between them
(``tools/process_spread_probe.py`` and the methodology page measure both). A host-bound number
measured in one process is one draw, and a re-recording can move it far beyond its noise with
nothing changed. So a page measures such numbers in several fresh interpreters, one after
another, and reports their range.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PRELOAD", "in_fresh_processes", "loop_and_replay"]

PRELOAD = ("torch", "numpy", "cudnn")
"""What each interpreter imports before its turn, so that no process imports while another measures."""


def in_fresh_processes(fn: Callable[..., Any], *args: Any, processes: int = 5, **kwargs: Any) -> list[Any]:
    """Call ``fn(*args, **kwargs)`` in ``processes`` fresh interpreters, one after another; their results.

    The interpreters start together and import :data:`PRELOAD` before the first call
    (:class:`~cudnn_guide.studies.fresh_process.InterpreterPool`). A result that is a dict with a
    ``"check"`` (a ``CheckResult.to_dict()``) is judged here as the page's own checks are: a
    failure raises, a pass joins the record (:func:`cudnn_guide.check.from_child`).

    Parameters
    ----------
    fn
        A function importable by module and name (not one defined on the page).
    args
        Its positional arguments.
    processes
        How many interpreters, each running ``fn`` once.
    kwargs
        Its keyword arguments.

    Returns
    -------
    list[Any]
        One result per process, in the order they ran.

    Raises
    ------
    ValueError
        Fewer than two processes (no range to report).
    CheckFailedError
        A process's output failed its check.

    Example
    -------
    >>> runs = in_fresh_processes(loop_and_replay, 64, processes=5)
    >>> min(r["speedup"] for r in runs), max(r["speedup"] for r in runs)
    """
    from cudnn_guide import check
    from cudnn_guide.studies import fresh_process

    if processes < 2:
        raise ValueError(f"in_fresh_processes: a range needs at least 2 processes, got {processes}")
    out = []
    with fresh_process.InterpreterPool(processes, preload=PRELOAD) as pool:
        for i in range(processes):
            value = pool.run(fn, *args, **kwargs).value
            if isinstance(value, dict) and "check" in value:
                check.from_child(value["check"], name=f"{value['check']['name']} (fresh process {i + 1})")
            out.append(value)
    return out


def loop_and_replay(s: int, calls: int = 100, reps: int = 20) -> dict[str, Any]:
    """The CUDA-graphs page's s×s matmul epilogue, in this process: checked, then an eager loop against a replay.

    Builds ``matmul → scale → bias → GELU`` (:func:`~cudnn_guide.graphs.matmul.matmul_epilogue_graph`
    without AMAX, as the page does), checks it against PyTorch, then times a loop of ``calls``
    launches (:func:`~cudnn_guide.measure.cudagraphs.time_loop`) and the replay of a CUDA graph
    that captured them (:func:`~cudnn_guide.measure.cudagraphs.time_replay`).

    Parameters
    ----------
    s
        Problem size (``s×s @ s×s``).
    calls
        Launches per loop, and calls the graph captures.
    reps
        Timed loops and replays.

    Returns
    -------
    dict[str, Any]
        ``eager_us`` and ``replay_us`` (median µs per call), ``speedup`` (their ratio), ``check``.

    Example
    -------
    >>> r = loop_and_replay(64)
    >>> r["speedup"]
    """
    from cudnn_guide import check
    from cudnn_guide.graphs import matmul, tensors
    from cudnn_guide.measure import cudagraphs

    p = matmul.MatmulProblem(batch=1, m=s, k=s, n=s, alpha=0.5)
    ins = p.make_inputs(seed=s)
    fused = matmul.matmul_epilogue_graph(p, ins, amax=False)
    pack = fused.pack(**{k: v for k, v in ins.items() if k != "amax"}, alpha=tensors.scalar_value(p.alpha))
    launch = fused.bind(pack)
    check.poison(ins["y"])
    launch()
    reference = check.reference(p.torch_forward, ins["a"], ins["b"], ins["bias"])[0]
    checked = check.compare(ins["y"], reference, name=f"s={s}")
    loop = cudagraphs.time_loop(launch, label=f"eager loop s={s}", calls=calls, reps=reps)
    captured = cudagraphs.capture(launch, calls=calls, label=f"s={s}")
    replay = cudagraphs.time_replay(captured, label=f"replay s={s}", reps=reps)
    return {
        "eager_us": loop.median_ms * 1e3,
        "replay_us": replay.median_ms * 1e3,
        "speedup": loop.median_ms / replay.median_ms,
        "check": checked.to_dict(),
    }
