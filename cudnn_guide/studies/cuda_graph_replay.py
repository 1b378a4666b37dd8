"""An eager loop of cuDNN calls against the replay of a CUDA graph: the CUDA-graphs page's study and its prose.

The page's graph is the s×s matmul epilogue ``gelu(alpha · (a @ b) + bias)`` in bf16
(:func:`matmul_epilogue`, :func:`~cudnn_guide.graphs.matmul.matmul_epilogue_graph` without AMAX).
The page measures it three ways:

* the host cost of ``graph.execute`` in several fresh processes
  (:func:`~cudnn_guide.studies.host_levels.loop_and_replay`), grouped into host levels
  (:func:`~cudnn_guide.studies.host_levels.levels`): the most common level
  (:func:`most_common_level`) and its processes (:func:`at_level`), one row per process
  (:func:`process_rows`), the levels in words (:func:`level_text`);
* what this package's launchers add to a raw ``graph.execute``, paired per round
  (:func:`added_rows`, :func:`overhead_text`);
* the GPU time of one call, an eager loop and a replay, across sizes (:func:`sweep`); where the
  GPU time is the raw event time (:func:`raw_events`), its series' name says it is an upper
  bound there (:func:`gpu_time_name`).

:func:`conclusions` words the three. The builds and timings need a GPU; the rows and the prose
do not.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "GPU_TIME",
    "added_rows",
    "at_level",
    "conclusions",
    "gpu_time_name",
    "level_text",
    "less_or_more",
    "matmul_epilogue",
    "most_common_level",
    "overhead_text",
    "process_rows",
    "raw_events",
    "sweep",
]

GPU_TIME = "GPU time of one call"
"""The sweep's GPU-time series; :func:`gpu_time_name` adds where it holds raw event times."""


def matmul_epilogue(s: int, seed: int = 0) -> tuple[Any, dict[str, Any], Any, dict[Any, Any]]:
    """The page's s×s matmul epilogue, built, with its inputs and its variant pack.

    ``gelu(0.5 · (a @ b) + bias)`` on one s×s @ s×s matmul, bf16
    (:func:`~cudnn_guide.graphs.matmul.matmul_epilogue_graph` with ``amax=False``); the pack holds
    every input but ``amax``, and ``alpha`` as a pass-by-value scalar.

    Parameters
    ----------
    s
        Problem size.
    seed
        Seed of the inputs.

    Returns
    -------
    tuple[Any, dict[str, Any], Any, dict[Any, Any]]
        The :class:`~cudnn_guide.graphs.matmul.MatmulProblem`, its inputs (``a``, ``b``, ``bias``,
        ``y``, ``amax``), the :class:`~cudnn_guide.graphs.BuiltGraph` and its pack.

    Example
    -------
    >>> problem, inputs, fused, pack = matmul_epilogue(64)
    >>> fused.execute(pack)
    """
    from cudnn_guide.graphs import matmul, tensors

    p = matmul.MatmulProblem(batch=1, m=s, k=s, n=s, alpha=0.5)
    ins = p.make_inputs(seed=seed)
    f = matmul.matmul_epilogue_graph(p, ins, amax=False)
    kept = {k: v for k, v in ins.items() if k != "amax"}
    return p, ins, f, f.pack(**kept, alpha=tensors.scalar_value(p.alpha))


def most_common_level(levels: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The host level most processes fell on; of equally common ones, the lowest.

    Parameters
    ----------
    levels
        :func:`~cudnn_guide.studies.host_levels.levels` of the processes' host costs.

    Returns
    -------
    Mapping[str, Any]
        That level (``value``, ``low``, ``high``, ``n``, ``values``).

    Example
    -------
    >>> most_common_level([{"n": 2, "value": 13.0}, {"n": 2, "value": 20.0}])["value"]
    13.0
    """
    return max(levels, key=lambda lv: (lv["n"], -lv["value"]))


def at_level(per_process: Sequence[Mapping[str, Any]], level: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The processes whose host cost lies within ``level``'s range.

    Parameters
    ----------
    per_process
        :func:`~cudnn_guide.studies.host_levels.loop_and_replay` results, one per process.
    level
        One of :func:`~cudnn_guide.studies.host_levels.levels`.

    Returns
    -------
    list[Mapping[str, Any]]
        The results with ``level["low"] <= host_us <= level["high"]``, in order.

    Example
    -------
    >>> at_level([{"host_us": 13.0}, {"host_us": 20.0}], {"low": 12.0, "high": 14.0})
    [{'host_us': 13.0}]
    """
    return [r for r in per_process if level["low"] <= r["host_us"] <= level["high"]]


def level_text(levels: Sequence[Mapping[str, Any]]) -> str:
    """The host levels in words: how many processes at which median, and their range.

    Parameters
    ----------
    levels
        :func:`~cudnn_guide.studies.host_levels.levels`.

    Returns
    -------
    str
        ``"4 at 13.1 µs (12.9–13.4); 1 at 20.6 µs (20.6–20.6)"``.

    Example
    -------
    >>> level_text([{"n": 4, "value": 13.1, "low": 12.9, "high": 13.4}])
    '4 at 13.1 µs (12.9–13.4)'
    """
    return "; ".join(f"{lv['n']} at {lv['value']:.1f} µs ({lv['low']:.1f}–{lv['high']:.1f})" for lv in levels)


def process_rows(per_process: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One table row per fresh process: its host cost, eager loop and replays, all per call.

    Parameters
    ----------
    per_process
        :func:`~cudnn_guide.studies.host_levels.loop_and_replay` results, in the order they ran.

    Returns
    -------
    list[dict[str, Any]]
        ``process`` (from 1), ``graph.execute host µs``, ``eager loop µs``, ``replay of 100 calls
        µs``, ``replay of 1 call µs`` and ``loop / replay of 100`` (``"3.10×"``).

    Example
    -------
    >>> html_table(pd.DataFrame(process_rows(per_process)), precision=2)
    """
    return [
        {
            "process": i,
            "graph.execute host µs": r["host_us"],
            "eager loop µs": r["eager_us"],
            "replay of 100 calls µs": r["replay_us"],
            "replay of 1 call µs": r["replay_one_us"],
            "loop / replay of 100": f"{r['speedup']:.2f}×",
        }
        for i, r in enumerate(per_process, 1)
    ]


def added_rows(adds: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """One table row per launcher: the host µs it adds per call over the raw call, with its interval.

    Parameters
    ----------
    adds
        Launcher → :meth:`~cudnn_guide.measure.compare.Comparison.added` (``value``, ``low``,
        ``high``, µs per call).

    Returns
    -------
    list[dict[str, Any]]
        ``launch``, ``host µs added per call`` and ``95% interval`` (``"-0.20 to +0.80"``).

    Example
    -------
    >>> added_rows({"launcher": {"value": 0.3, "low": -0.2, "high": 0.8}})[0]["95% interval"]
    '-0.20 to +0.80'
    """
    return [
        {
            "launch": name,
            "host µs added per call": e["value"],
            "95% interval": f"{e['low']:+.2f} to {e['high']:+.2f}",
        }
        for name, e in adds.items()
    ]


def overhead_text(overhead: Mapping[str, float]) -> str:
    """A launcher's added host time per call in words, saying so when its interval holds zero.

    Parameters
    ----------
    overhead
        :meth:`~cudnn_guide.measure.compare.Comparison.added` of the launcher (µs per call).

    Returns
    -------
    str
        ``"+0.30 µs/call, in-run 95% interval -0.20 to +0.80 µs"``; when the interval holds 0, prefixed with
        ``"no overhead this measurement can resolve:"`` and a line break (with four spaces), so
        that a printed line stays short.

    Example
    -------
    >>> overhead_text({"value": 0.5, "low": 0.25, "high": 0.75})
    '+0.50 µs/call, in-run 95% interval +0.25 to +0.75 µs'
    >>> print(overhead_text({"value": 0.5, "low": -0.25, "high": 0.75}))
    no overhead this measurement can resolve:
        +0.50 µs/call, in-run 95% interval -0.25 to +0.75 µs
    """
    low, high = overhead["low"], overhead["high"]
    text = f"{overhead['value']:+.2f} µs/call, in-run 95% interval {low:+.2f} to {high:+.2f} µs"
    if low <= 0 <= high:
        text = f"no overhead this measurement can resolve:\n    {text}"
    return text


def raw_events(m: Any) -> bool:
    """Whether a GPU time is the raw event time, an upper bound on the kernel.

    The harness subtracts its launch cost from each event sample unless that would not be
    trusted (the call is too short, or the calibration is out of range); it then keeps the raw
    event times, subtracts nothing (``launch_cost_ms`` 0) and says so in a warning.

    Parameters
    ----------
    m
        A :class:`~cudnn_guide.measure.measurement.Measurement` of
        :func:`~cudnn_guide.measure.bench.benchmark`.

    Returns
    -------
    bool
        True when nothing was subtracted and a warning says the times are raw event times.

    Example
    -------
    >>> from cudnn_guide.measure.measurement import Measurement
    >>> raw = Measurement("t", [0.005], "events", warnings=["the raw event times are reported"])
    >>> raw_events(raw), raw_events(Measurement("t", [0.005], "events", launch_cost_ms=0.003))
    (True, False)
    """
    return not m.launch_cost_ms and any("raw event times" in w for w in m.warnings)


def _sizes_text(upper: Sequence[int], sizes: Sequence[int]) -> str:
    """``"s ≤ 512"`` when ``upper`` are the smallest of ``sizes``, else ``"s = 64, 256"``."""
    if list(upper) == sorted(sizes)[: len(upper)]:
        return f"s ≤ {max(upper)}" if len(upper) > 1 else f"s = {upper[0]}"
    return "s = " + ", ".join(str(s) for s in upper)


def gpu_time_name(gpu: Sequence[Any]) -> str:
    """The name of the GPU-time series, saying at which sizes it holds raw event times.

    Parameters
    ----------
    gpu
        The sweep's GPU-time measurements, ``params["s"]`` on each.

    Returns
    -------
    str
        :data:`GPU_TIME`, with ``" (s ≤ 512: raw events, an upper bound)"`` when some sizes'
        times are raw event times (:func:`raw_events`).

    Example
    -------
    >>> from cudnn_guide.measure.measurement import Measurement
    >>> note = ["the raw event times are reported"]
    >>> gpu = [Measurement("t", [0.005], "events", params={"s": s}, warnings=note) for s in (64, 128)]
    >>> gpu_time_name(gpu + [Measurement("t", [0.01], "x", params={"s": 256}, launch_cost_ms=0.003)])
    'GPU time of one call (s ≤ 128: raw events, an upper bound)'
    """
    upper = [m.params["s"] for m in gpu if raw_events(m)]
    if not upper:
        return GPU_TIME
    where = _sizes_text(upper, [m.params["s"] for m in gpu])
    return f"{GPU_TIME} ({where}: raw events, an upper bound)"


def sweep(sizes: Sequence[int]) -> list[Any]:
    """For each size: check the graph, then time one call on the GPU, an eager loop and a replay.

    Each size's graph (:func:`matmul_epilogue`, seeded with the size) runs once on a poisoned
    output and is checked against PyTorch (:func:`cudnn_guide.check.check`, named ``s=<s>``)
    before anything is timed. Then, all hot L2: the GPU time of one call
    (:func:`~cudnn_guide.measure.bench.benchmark`, 100 ms budget); a loop of 100 eager calls, 20
    times (:func:`~cudnn_guide.measure.cudagraphs.time_loop`); and 20 replays of a CUDA graph
    holding 100 calls (:func:`~cudnn_guide.measure.cudagraphs.time_replay`), each per call. One
    line per size gives the three in µs; a GPU time that is the raw event time, an upper bound
    (:func:`raw_events`), is marked ``≤`` and a last line says so. Once every size is timed, the
    GPU-time series is named by :func:`gpu_time_name`, so that the table and the plot say where
    it is an upper bound.

    Parameters
    ----------
    sizes
        Problem sizes s, in the order they are measured.

    Returns
    -------
    list[Any]
        Three :class:`~cudnn_guide.measure.measurement.Measurement` per size, in order: GPU time,
        eager loop, replay; ``params`` ``impl`` (:func:`gpu_time_name`, ``"eager loop, per
        call"``, ``"graph replay, per call"``) and ``s``.

    Example
    -------
    >>> rows = sweep([64, 128, 256, 512, 1024, 2048, 4096])
    >>> ComparisonTable(rows, row="impl", column="s", metric="median_us")
    """
    from cudnn_guide import check
    from cudnn_guide.measure import bench, cudagraphs

    rows, gpus = [], []
    for s in sizes:
        sp, sins, sf, spack = matmul_epilogue(s, seed=s)
        check.poison(sins["y"])
        sf.execute(spack)
        expected = check.reference(sp.torch_forward, sins["a"], sins["b"], sins["bias"])[0]
        check.check(sins["y"], expected, name=f"s={s}")
        fn = sf.bind(spack)
        flops = sp.flops
        gpu = bench.benchmark(
            fn,
            label=f"GPU time s={s}",
            l2="hot",
            flops=flops,
            budget_ms=100,
            params={"impl": GPU_TIME, "s": s},
        )
        loop = cudagraphs.time_loop(
            fn,
            label=f"eager loop s={s}",
            calls=100,
            reps=20,
            flops=flops,
            params={"impl": "eager loop, per call", "s": s},
        )
        captured = cudagraphs.capture(fn, calls=100, label=f"s={s}")
        replayed = cudagraphs.time_replay(
            captured,
            label=f"replay s={s}",
            reps=20,
            flops=flops,
            params={"impl": "graph replay, per call", "s": s},
        )
        rows += [gpu, loop, replayed]
        gpus.append(gpu)
        gpu_text = ("≤" if raw_events(gpu) else "") + f"{gpu.median_ms * 1e3:.2f}"
        print(
            f"s={s:5d}: GPU {gpu_text:>7} µs, "
            f"eager loop {loop.median_ms * 1e3:7.2f} µs, "
            f"replay {replayed.median_ms * 1e3:7.2f} µs"
        )
    if any(raw_events(m) for m in gpus):
        print("≤: the raw event time, launch cost not subtracted: an upper bound on the GPU time")
    name = gpu_time_name(gpus)
    for m in gpus:
        m.params["impl"] = name  # the table's row and the plot's line say where it is an upper bound
    return rows


def less_or_more(x: float) -> str:
    """A ratio of times as less or more time: ``"2.0× less"`` for 2, ``"2.0× more"`` for 0.5.

    Parameters
    ----------
    x
        The slower time over the faster (eager over replay).

    Returns
    -------
    str
        ``"<x>× less"`` from 1 up, ``"<1/x>× more"`` below 1.

    Example
    -------
    >>> less_or_more(2.0), less_or_more(0.5)
    ('2.0× less', '2.0× more')
    """
    return f"{x:.1f}× less" if x >= 1 else f"{1 / x:.1f}× more"


def conclusions(
    per_process: Sequence[Mapping[str, Any]],
    levels: Sequence[Mapping[str, Any]],
    rows: Sequence[Any],
    sizes: Sequence[int],
    small: int,
    overhead: str,
) -> list[str]:
    """The CUDA-graphs page's conclusions, computed from its fresh processes, launchers and sweep.

    The host cost of ``graph.execute`` (the median of the most common host level, and the levels
    when there are several); the launcher's overhead; at ``small``, the eager loop against the
    replays of a 100-call and of a one-call graph in the processes of the most common level (the
    median of their per-process ratios, its range there and over all processes); at the largest
    size, which of eager and replay is slower and by how much, or that they take about the same
    time: the interval of the two medians (:func:`~cudnn_guide.report.tables.ratio_estimate`)
    judged against a ±1% tie band (:func:`~cudnn_guide.measure.verdicts.judge`,
    :data:`~cudnn_guide.measure.verdicts.MIN_TIE_BAND`); and the first size whose GPU time exceeds
    the host cost.

    Parameters
    ----------
    per_process
        :func:`~cudnn_guide.studies.host_levels.loop_and_replay` results at ``small``, one per
        fresh process.
    levels
        :func:`~cudnn_guide.studies.host_levels.levels` of their ``host_us``.
    rows
        :func:`sweep`'s measurements over ``sizes``.
    sizes
        The sweep's sizes, smallest first; ``small`` among them.
    small
        The size the fresh processes ran.
    overhead
        :func:`overhead_text` of the launcher.

    Returns
    -------
    list[str]
        One paragraph each, for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(per_process, host_levels_us, rows, sizes, 64, overhead_text))
    """
    from cudnn_guide.measure.verdicts import MIN_TIE_BAND, judge
    from cudnn_guide.report import ratio_estimate

    main = most_common_level(levels)
    host_us = main["value"]
    at_main = at_level(per_process, main)
    by = {(GPU_TIME if m.params["impl"].startswith(GPU_TIME) else m.params["impl"], m.params["s"]): m for m in rows}
    crossover = next(
        (s for s in sizes if by[(GPU_TIME, s)].median_ms * 1e3 > host_us),
        None,
    )
    large = sizes[-1]
    speedups = sorted(r["speedup"] for r in at_main)
    eager_main, replay_main, one_call = (
        statistics.median(r[key] for r in at_main) for key in ("eager_us", "replay_us", "replay_one_us")
    )
    gpu_small = by[(GPU_TIME, small)]
    gpu_us = gpu_small.median_ms * 1e3
    gpu_read = (
        f"one call's raw events read {gpu_us:.1f} µs"
        if raw_events(gpu_small)
        else f"one call's GPU time, launch cost subtracted, reads {gpu_us:.1f} µs"
    )
    sentences = [
        f"One call of graph.execute keeps the host busy {host_us:.1f} µs (per call among "
        f"back-to-back calls; compare_host, s={small}; the median of the most common "
        f"level of {len(per_process)} fresh processes: {main['low']:.1f}–"
        f"{main['high']:.1f} µs over {main['n']} of them). "
        + (
            f"The processes fell on {len(levels)} levels: {level_text(levels)}: a host "
            "cost is a property of the process as much as of the call."
            if len(levels) > 1
            else "All processes fell on one level."
        ),
        "This package's bind() launcher over the raw graph.execute, paired per round in this process: "
        + " ".join(overhead.split())  # overhead_text may break its line
        + ".",
    ]
    speedup = statistics.median(speedups)
    every = sorted(r["speedup"] for r in per_process)  # all processes, every host level
    sentences.append(
        f"At s={small}, in the {len(at_main)} fresh processes of that level, a loop of "
        f"100 eager calls takes {eager_main:.1f} µs per call for at most "
        f"{min(gpu_us, replay_main):.1f} µs of GPU work (the replay below bounds it; "
        f"{gpu_read}); replaying a graph of 100 calls takes "
        f"{replay_main:.1f} µs per call, {less_or_more(speedup)} (median of the "
        f"per-process ratios; {speedups[0]:.1f}–{speedups[-1]:.1f}× over those "
        f"{len(at_main)} of {len(per_process)} processes, {every[0]:.1f}–{every[-1]:.1f}× "
        f"over all {len(per_process)}). That is per call "
        "inside a 100-call graph: the replay's own launch is amortised over the 100 "
        f"calls. A graph holding one call takes {one_call:.1f} µs per replay, "
        f"{less_or_more(eager_main / one_call)} than an eager call: what a replay saves "
        "without amortising its own launch."
    )
    eager_large, replay_large = by[("eager loop, per call", large)], by[("graph replay, per call", large)]
    # eager over replay, with the interval of the two medians' 95% intervals, judged against the tie band
    far = ratio_estimate(eager_large, replay_large)
    verdict = judge(far["low"], far["high"], MIN_TIE_BAND)
    times = f"{eager_large.median_ms * 1e3:.1f} µs per call eager, {replay_large.median_ms * 1e3:.1f} replayed"
    if verdict == "tie":
        sentences.append(
            f"At s={large}, the replay takes about the same time as the eager loop (eager over replay "
            f"{far['value']:.2f}×, 95% interval {far['low']:.2f}–{far['high']:.2f}×, which reaches "
            f"into 1 ± {MIN_TIE_BAND:.0%}; {times}): the GPU work hides the host."
        )
    else:
        slower, faster, x, low, high = (
            ("the eager loop", "the replay", far["value"], far["low"], far["high"])
            if verdict == "faster"
            else ("the replay", "the eager loop", 1 / far["value"], 1 / far["high"], 1 / far["low"])
        )
        hides = "the GPU work hides the host" if verdict == "slower" else "the GPU work does not hide all of the host"
        sentences.append(
            f"At s={large}, {slower} is {x:.2f}× slower than {faster} (95% interval {low:.2f}–{high:.2f}×, "
            f"beyond 1 ± {MIN_TIE_BAND:.0%}; {times}): {hides}."
        )
    sentences.append(
        f"The GPU time of one call first exceeds the host cost of graph.execute at s={crossover}."
        if crossover
        else "The GPU time never exceeds the host cost of graph.execute in this sweep."
    )
    return sentences
