"""Host-bound numbers measured in several fresh processes, and reported as their range.

On the GPU builder the same host-bound loop runs at one of two speeds: fresh interpreters timing
the same launches fall on one level or the other, and a process can switch between them
(``tools/process_spread_probe.py`` and the methodology page measure both). A host-bound number
measured in one process is one draw, and a re-recording can move it far beyond its noise with
nothing changed. So a page measures such numbers in several fresh interpreters, one after
another, and reports their range, level by level (:func:`levels`): a range that spans two
levels says only that there are two.

Every host cost on the site is timed one way, :func:`cudnn_guide.measure.compare.compare_host`
(back-to-back calls after a synchronize, in interleaved rounds), in this package's fresh
processes (:func:`loop_and_replay`) as on the pages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["LEVEL_GAP", "PRELOAD", "in_fresh_processes", "levels", "loop_and_replay"]

LEVEL_GAP = 1.2
"""A host-bound value more than this factor above the next lower one starts a new level."""

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


def levels(values: Sequence[float], gap: float = LEVEL_GAP) -> list[dict[str, Any]]:
    """Split host-bound values (one per process) into levels, lowest first.

    The values are sorted; a value more than ``gap`` times the one below it starts a new
    level. Each level reports its median and its range, so that a bimodal host cost is
    shown as two levels with their own ranges, not as one range spanning both.

    Parameters
    ----------
    values
        Positive numbers, for example µs per call, one per fresh process.
    gap
        The factor between neighbours that separates two levels.

    Returns
    -------
    list[dict[str, Any]]
        ``value`` (median), ``low``, ``high``, ``n`` and ``values`` of each level.

    Raises
    ------
    ValueError
        No values, a value that is not positive, or ``gap`` not above 1.

    Example
    -------
    >>> [round(lv["value"], 1) for lv in levels([13.1, 20.6, 12.9, 13.4])]
    [13.1, 20.6]
    """
    import statistics

    if not values:
        raise ValueError("levels: no values")
    if min(values) <= 0:
        raise ValueError(f"levels: values must be positive, got {min(values)}")
    if gap <= 1:
        raise ValueError(f"levels: gap must be above 1, got {gap}")
    ordered = sorted(values)
    groups = [[ordered[0]]]
    for v in ordered[1:]:
        if v > groups[-1][-1] * gap:
            groups.append([v])
        else:
            groups[-1].append(v)
    return [{"value": statistics.median(g), "low": g[0], "high": g[-1], "n": len(g), "values": g} for g in groups]


def loop_and_replay(s: int, calls: int = 100, reps: int = 20) -> dict[str, Any]:
    """The CUDA-graphs page's s×s matmul epilogue, in this process: checked, then an eager loop against a replay.

    Builds ``matmul → scale → bias → GELU`` (:func:`~cudnn_guide.graphs.matmul.matmul_epilogue_graph`
    without AMAX, as the page does), checks it against PyTorch, then times a loop of ``calls``
    launches (:func:`~cudnn_guide.measure.cudagraphs.time_loop`), the replay of a CUDA graph
    that captured them (:func:`~cudnn_guide.measure.cudagraphs.time_replay`) and of a graph
    that captured one call, and the host cost of the raw ``graph.execute`` against the
    :meth:`~cudnn_guide.graphs.BuiltGraph.bind` launcher, the one way the site times a host
    cost (:func:`~cudnn_guide.measure.compare.compare_host`, 11 rounds of 400 calls).

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
        ``eager_us`` and ``replay_us`` (median µs per call; the replay's one launch is shared by
        the ``calls`` calls the graph holds), ``speedup`` (their ratio), ``replay_one_us`` (a
        graph holding one call, per replay), ``host_us`` and ``launcher_us`` (host µs per call
        of the raw ``graph.execute`` and of the launcher: medians of the rounds), ``check``.

    Example
    -------
    >>> r = loop_and_replay(64)
    >>> r["speedup"]
    """
    from cudnn_guide import check, graphs
    from cudnn_guide.graphs import matmul, tensors
    from cudnn_guide.measure import compare, cudagraphs

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
    one = cudagraphs.capture(launch, calls=1, label=f"s={s}, one call")
    replay_one = cudagraphs.time_replay(one, label=f"replay of one call s={s}", reps=reps)
    raw, workspace, handle = fused.graph, fused.workspace, fused.handle
    graphs.bind_to_current_stream(handle)
    host = compare.compare_host(
        {"graph.execute": lambda: raw.execute(pack, workspace, handle=handle), "launcher": launch},
        candidate="graph.execute",
    )
    return {
        "eager_us": loop.median_ms * 1e3,
        "replay_us": replay.median_ms * 1e3,
        "speedup": loop.median_ms / replay.median_ms,
        "replay_one_us": replay_one.median_ms * 1e3,
        "host_us": host.estimate("graph.execute")["value"],
        "launcher_us": host.estimate("launcher")["value"],
        "check": checked.to_dict(),
    }
