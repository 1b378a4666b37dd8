"""The fused-convolution page's study: one cuDNN graph for conv → bias → ReLU against PyTorch's baselines.

The page times the lesson's fused graph against PyTorch eager (``torch.backends.cudnn.benchmark``
off and on), ``torch.compile`` and PyTorch's own binding of cuDNN's fused kernel, in interleaved
rounds with a cold L2, then times two of them once more with the profiler's clock. This module
holds what that takes besides the lesson's graph:

* the contenders' names (:data:`CANDIDATE`, :data:`EAGER_OFF`, :data:`EAGER_ON`,
  :data:`COMPILED`, :data:`FUSED_BINDING`), which the page's records key on;
* :func:`work_lines`: the problem's work, the datasheet peaks, the measured ceilings and the floor;
* :func:`admit_baselines`: the four baselines, each run once and checked before it is timed;
* :func:`verdict_lines`: the comparison's verdicts and its stopping rule;
* :func:`profile_contenders`, :func:`profiler_gaps` and :func:`profiler_lines`: the harness
  against the profiler;
* :func:`comparison_figure`, :func:`fastest_rival` and :func:`conclusions`.

The baselines and the profiler need a GPU; the lines, the figure and the sentences do not.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from cudnn_guide.check import LINE_WIDTH

__all__ = [
    "CANDIDATE",
    "COMPILED",
    "EAGER_OFF",
    "EAGER_ON",
    "FUSED_BINDING",
    "admit_baselines",
    "comparison_figure",
    "conclusions",
    "fastest_rival",
    "profile_contenders",
    "profiler_gaps",
    "profiler_lines",
    "verdict_lines",
    "work_lines",
]

CANDIDATE = "cuDNN graph (fused)"
"""The lesson's fused graph: the candidate of the comparison."""
EAGER_OFF = "PyTorch eager, benchmark off"
"""PyTorch eager, ``torch.backends.cudnn.benchmark`` off: its heuristics pick the conv algorithm."""
EAGER_ON = "PyTorch eager, benchmark on"
"""PyTorch eager, ``torch.backends.cudnn.benchmark`` on: it times several algorithms on first use."""
COMPILED = "torch.compile (max-autotune-no-cudagraphs)"
"""The layer compiled by :func:`~cudnn_guide.measure.baselines.compile_quietly` in its own mode."""
FUSED_BINDING = "torch.cudnn_convolution_relu"
"""PyTorch's binding of cuDNN's fused convolution + bias + ReLU: cuDNN's own kernel, not a rival."""


def work_lines(problem: Any, ceilings: Any) -> str:
    """The problem, its work, the datasheet peaks, the ceilings measured now, and the floor.

    The floor is :meth:`~cudnn_guide.measure.ceilings.Ceilings.floor_ms` (the work at the
    datasheet peaks); it is compute-bound where the problem's FLOP per byte exceeds the
    datasheet's ridge point.

    Parameters
    ----------
    problem
        The :class:`~cudnn_guide.graphs.conv.ConvProblem` (its ``flops`` and ``bytes``).
    ceilings
        The :class:`~cudnn_guide.measure.ceilings.Ceilings`, with the datasheet peaks.

    Returns
    -------
    str
        Five lines: the problem; ``work: <GFLOP>, <MiB> moved at least (<FLOP/B>)``; the
        datasheet peaks; the ceilings measured now (with the SM clock at the matmul's end); the
        floor in µs and whether it is compute- or memory-bound.

    Example
    -------
    >>> print(work_lines(problem, measure_ceilings()))
    """
    floor_ms = ceilings.floor_ms(problem.flops, problem.bytes)
    intensity = problem.flops / problem.bytes
    ridge = ceilings.peak_bf16_tflops * 1e12 / (ceilings.peak_hbm_gbps * 1e9)
    bound = "compute" if intensity > ridge else "memory"
    sm_end = ceilings.matmul.clocks.get("sm_mhz_end", "?")
    return "\n".join(
        [
            str(problem),
            f"work: {problem.flops / 1e9:.1f} GFLOP, {problem.bytes / 2**20:.1f} MiB moved "
            f"at least ({intensity:.0f} FLOP/B)",
            f"datasheet peaks: {ceilings.peak_bf16_tflops:.0f} TFLOP/s bf16, {ceilings.peak_hbm_gbps:.0f} GB/s",
            f"measured now: {ceilings.bf16_tflops:.0f} TFLOP/s ({ceilings.matmul.label}, "
            f"SM clock {sm_end} MHz at its end), {ceilings.copy_gbps:.0f} GB/s copy",
            f"floor at the datasheet peaks: {floor_ms * 1e3:.1f} µs ({bound}-bound)",
        ]
    )


def admit_baselines(
    contenders: MutableMapping[str, Callable[[], Any]],
    problem: Any,
    x: Any,
    weight: Any,
    bias: Any,
    reference: Any,
) -> dict[str, str]:
    """Run each baseline once, check it against ``reference`` and add it to ``contenders``.

    First the layer is compiled (:func:`~cudnn_guide.measure.baselines.compile_quietly`, its
    default mode); then, in this order, :data:`EAGER_OFF` (``problem.torch_forward``),
    :data:`EAGER_ON` (the same with ``torch.backends.cudnn.benchmark`` on for its calls only),
    :data:`COMPILED` and :data:`FUSED_BINDING` (``torch.cudnn_convolution_relu`` with the
    problem's stride and padding, dilation 1, one group) go through
    :func:`~cudnn_guide.measure.baselines.admit`: one that cannot run here is said and left
    out, one that computes a wrong result stops the page.

    Parameters
    ----------
    contenders
        Name → launcher, the candidate already in; updated in place.
    problem
        The :class:`~cudnn_guide.graphs.conv.ConvProblem`.
    x
        The input, N×C×H×W channels-last.
    weight
        The filter, K×C×R×S channels-last.
    bias
        The bias, 1×K×1×1.
    reference
        The fp32 reference output.

    Returns
    -------
    dict[str, str]
        Each baseline left out → why (empty when all four run).

    Raises
    ------
    CheckFailedError
        A baseline computed the wrong result.

    Example
    -------
    >>> torch.backends.cudnn.benchmark = False
    >>> contenders = {CANDIDATE: built.bind(pack)}
    >>> unavailable = admit_baselines(contenders, problem, x, weight, bias, reference)
    """
    import torch

    from cudnn_guide.measure import baselines

    compiled = baselines.compile_quietly(problem.torch_forward)
    stride, padding = [problem.stride] * 2, [problem.padding] * 2
    unavailable = {}
    for name, fn in {
        EAGER_OFF: lambda: problem.torch_forward(x, weight, bias),
        EAGER_ON: baselines.with_cudnn_benchmark(lambda: problem.torch_forward(x, weight, bias), True),
        COMPILED: lambda: compiled(x, weight, bias),
        FUSED_BINDING: lambda: torch.cudnn_convolution_relu(x, weight, bias.reshape(-1), stride, padding, [1, 1], 1),
    }.items():
        if why := baselines.admit(contenders, name, fn, reference):
            unavailable[name] = why
    return unavailable


def verdict_lines(cmp: Any) -> str:
    """The candidate's speed-up over each baseline, then the tie band, the rounds and the stopping rule.

    Parameters
    ----------
    cmp
        The :class:`~cudnn_guide.measure.compare.Comparison`.

    Returns
    -------
    str
        ``"<baseline>: <v>× (<low>–<high>), <verdict>"`` per baseline, then three lines: the tie
        band and how many rounds ran of the cap; from how many rounds ``compare`` may stop; and
        the widest interval it accepts (:data:`~cudnn_guide.measure.compare.ADAPTIVE_MIN_ROUNDS`,
        :data:`~cudnn_guide.measure.compare.ADAPTIVE_HALF_WIDTH`).

    Example
    -------
    >>> print(verdict_lines(result_cmp))
    """
    from cudnn_guide.measure import compare

    lines = [
        f"{name}: {v['value']:.2f}× ({v['low']:.2f}–{v['high']:.2f}), {v['verdict']}" for name, v in cmp.versus.items()
    ]
    lines += [
        f"tie band ±{100 * cmp.tie_band:.1f}%; {cmp.rounds} rounds ran, of a cap of {cmp.rounds_cap}:",
        f"from {compare.ADAPTIVE_MIN_ROUNDS} rounds on, compare stops once every interval "
        "lies wholly outside or inside the tie band",
        f"and is no wider than ±{100 * compare.ADAPTIVE_HALF_WIDTH:.0f}% of its value",
    ]
    return "\n".join(lines)


def profile_contenders(
    pairs: Sequence[tuple[Any, Callable[[], Any]]], *, calls: int = 30, l2: str = "cold"
) -> dict[str, Any]:
    """Profile each launcher's kernels (:func:`~cudnn_guide.studies.profiling.profile_kernels`), in order.

    Parameters
    ----------
    pairs
        ``(measurement, launcher)``: the harness's measurement of a contender, and a launcher of
        the same call.
    calls
        Profiled calls per launcher.
    l2
        ``"cold"`` or ``"hot"``, as the harness timed them.

    Returns
    -------
    dict[str, Any]
        The measurement's label → its :class:`~cudnn_guide.studies.profiling.ProfiledKernels`.

    Example
    -------
    >>> profiled = profile_contenders([(measurements[0], contenders[CANDIDATE])], calls=30)
    """
    from cudnn_guide.studies import profiling

    return {m.label: profiling.profile_kernels(fn, calls=calls, l2=l2, label=m.label) for m, fn in pairs}


def profiler_gaps(measurements: Sequence[Any], profiled: Mapping[str, Any]) -> dict[str, float]:
    """How far the harness's median is above the profiler's kernel time per call, in %.

    Parameters
    ----------
    measurements
        The harness's measurements (those of ``profiled`` among them, by label).
    profiled
        Label → :class:`~cudnn_guide.studies.profiling.ProfiledKernels`, as from
        :func:`profile_contenders`.

    Returns
    -------
    dict[str, float]
        Label → ``100 · (harness median / profiler per call − 1)``, in ``profiled``'s order.

    Example
    -------
    >>> gap = profiler_gaps(measurements, profiled)
    """
    by_label = {m.label: m for m in measurements}
    return {label: 100 * (by_label[label].median_ms / prof.per_call_ms - 1) for label, prof in profiled.items()}


def profiler_lines(measurements: Sequence[Any], profiled: Mapping[str, Any], *, top: int = 3) -> str:
    """Each profiled contender: harness against profiler, the events and the launch cost, its top kernels.

    Parameters
    ----------
    measurements
        The harness's measurements (those of ``profiled`` among them, by label).
    profiled
        Label → :class:`~cudnn_guide.studies.profiling.ProfiledKernels`.
    top
        How many of each contender's longest kernels to list.

    Returns
    -------
    str
        Per contender: ``"<label>: harness <t> µs, profiler <t> µs (<gap>%)"``; an indented line
        ``events <t> µs − <t> µs launch cost``; then per kernel its µs per call and its name,
        wrapped at 88 characters under it.

    Example
    -------
    >>> print(profiler_lines(measurements, profiled))
    """
    by_label = {m.label: m for m in measurements}
    gap = profiler_gaps(measurements, profiled)
    lines = []
    for label, prof in profiled.items():
        m = by_label[label]
        lines.append(
            f"{label}: harness {m.median_ms * 1e3:.1f} µs, "
            f"profiler {prof.per_call_ms * 1e3:.1f} µs ({gap[label]:+.1f}%)"
        )
        lines.append(f"    events {m.event_median_ms * 1e3:.1f} µs − {m.launch_cost_ms * 1e3:.1f} µs launch cost")
        for kname, ms in prof.top(top):
            lines.append(f"    {ms / prof.calls * 1e3:8.1f} µs/call")
            lines.append(textwrap.fill(kname, LINE_WIDTH, initial_indent=" " * 8, subsequent_indent=" " * 10))
    return "\n".join(lines)


def comparison_figure(cmp: Any, peak_bf16_tflops: float, gpu: str) -> Any:
    """Each contender's TFLOP/s with its 95% interval, against the datasheet's dense bf16 peak.

    Parameters
    ----------
    cmp
        The :class:`~cudnn_guide.measure.compare.Comparison`.
    peak_bf16_tflops
        The datasheet's dense bf16 peak, drawn as a dashed line.
    gpu
        The GPU's name, in the title.

    Returns
    -------
    Any
        The matplotlib axes (:func:`~cudnn_guide.report.plot_comparison`).

    Example
    -------
    >>> ax = comparison_figure(result_cmp, ceilings.peak_bf16_tflops, env.gpu)
    >>> plt.show()
    """
    from cudnn_guide.report import plot_comparison

    ax = plot_comparison(cmp, "TFLOP/s", title=f"conv→bias→ReLU on {gpu}")
    ax.axvline(peak_bf16_tflops, color="k", linestyle="--", linewidth=1, label="datasheet bf16 peak")
    ax.legend(loc="lower right")
    return ax


def _others(cmp: Any) -> list[str]:
    """The baselines that are not cuDNN's own kernel called through PyTorch (``torch.cudnn_*``)."""
    return [b for b in cmp.versus if not b.startswith("torch.cudnn_")]


def fastest_rival(cmp: Any) -> str:
    """The fastest baseline (shortest pooled median) that is not cuDNN's own kernel through PyTorch.

    ``torch.cudnn_convolution_relu`` runs cuDNN's fused kernel: a sanity row, not a rival.

    Parameters
    ----------
    cmp
        The :class:`~cudnn_guide.measure.compare.Comparison`.

    Returns
    -------
    str
        The baseline's name.

    Example
    -------
    >>> comparison("speed-up over the fastest other implementation", result_cmp, fastest_rival(result_cmp))
    """
    return min(_others(cmp), key=lambda b: cmp.measurements[b].median_ms)


def conclusions(
    cmp: Any, ceilings: Any, floor_ms: float, gap: Mapping[str, float], unavailable: Mapping[str, str]
) -> list[str]:
    """The fused-convolution page's conclusions, computed from its measurements.

    In order: the fused graph's time (in-run interval), TFLOP/s and shares of the datasheet peak and
    of the GEMM measured just now; its verdict against the fastest rival (:func:`fastest_rival`),
    then against each other baseline; its time over the floor; the harness against the profiler;
    and each baseline that could not run here. The rival is "the fastest other implementation" only
    when no baseline left out of the rivals (cuDNN's own kernel) is faster still; otherwise it is
    "the fastest implementation that is not cuDNN's own kernel". Each verdict names its baseline
    once and is this run's (the record's, widened for drift, can differ).

    Parameters
    ----------
    cmp
        The :class:`~cudnn_guide.measure.compare.Comparison`, with :data:`CANDIDATE`.
    ceilings
        The :class:`~cudnn_guide.measure.ceilings.Ceilings`.
    floor_ms
        The floor at the datasheet peaks, ms.
    gap
        Label → the harness over the profiler, in % (:func:`profiler_gaps`).
    unavailable
        Baseline → why it could not run (:func:`admit_baselines`).

    Returns
    -------
    list[str]
        The sentences, for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> sentences = conclusions(result_cmp, ceilings, floor_ms, gap, unavailable)
    """
    fused_m = cmp.measurements[CANDIDATE]
    others = _others(cmp)
    rival = fastest_rival(cmp)
    fused_est = cmp.estimate(CANDIDATE, "µs")
    floor_ratio = fused_m.median_ms / floor_ms
    rival_ms = cmp.measurements[rival].median_ms
    # "the fastest other" is true only when no baseline left out (cuDNN's own kernel) is faster still
    own_faster = any(cmp.measurements[b].median_ms < rival_ms for b in cmp.versus if b not in others)
    which = (
        "the fastest implementation that is not cuDNN's own kernel"
        if own_faster
        else "the fastest other implementation"
    )
    return [
        f"The fused cuDNN graph runs in {fused_est['value']:.1f} µs (in-run 95% interval "
        f"{fused_est['low']:.1f}–{fused_est['high']:.1f} over {cmp.rounds} "
        f"rounds), {fused_m.tflops:.0f} TFLOP/s: "
        f"{100 * fused_m.tflops / ceilings.peak_bf16_tflops:.0f}% of the datasheet bf16 "
        f"peak, {100 * fused_m.tflops / ceilings.bf16_tflops:.0f}% of the GEMM measured "
        "just now.",
        f"* Against {which}, in this run it is {cmp.describe(rival)}.",
        *[
            f"* In this run it is {cmp.describe(b)}."
            if b in others
            else f"* Against cuDNN's own kernel called through PyTorch, in this run it is {cmp.describe(b)}."
            for b in cmp.versus
            if b != rival
        ],
        f"* It takes {floor_ratio:.2f}× the floor set by the datasheet peaks ({floor_ms * 1e3:.1f} µs).",
        "* The harness and the profiler differ by "
        + ", ".join(f"{v:+.1f}% ({k})" for k, v in gap.items())
        + ". They are two runs seconds apart: the profiler sums kernel durations (CUPTI) "
        "of calls that follow only the L2 flush, the harness reads events around calls "
        "that follow a spin kernel and the flush. The methodology page's cross-check times "
        "the same calls with both clocks.",
        *[f"* {name} could not run here ({why}), so it is not compared." for name, why in unavailable.items()],
    ]
