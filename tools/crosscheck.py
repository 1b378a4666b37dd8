"""Cross-check the harness against independent clocks on the gallery's main kernels.

For each kernel, in alternating rounds: the harness median (:func:`~cudnn_guide.measure.bench.benchmark`,
CUDA events around one call, cold L2, minus this process's launch cost, so a kernel time); the
per-call span the PyTorch profiler reports (CUPTI timestamps, no events) for calls made exactly
as the harness makes them (:func:`profile_calls`); and the profiler's kernel time for calls
back to back after the L2 flush alone (:func:`~cudnn_guide.studies.profiling.profile_kernels`). Then the
per-call time of a CUDA-graph replay of 100 calls (hot L2, no launch gaps). Run as
``python tools/crosscheck.py OUT.json`` on a GPU; the methodology page renders the
committed result.

The profiler and the harness can also watch the *same* calls: :func:`same_run` runs the
harness under the profiler and splits the CUPTI kernel trace into the harness's calls (each
begins after the harness's spin kernel), so both clocks see identical conditions (clocks, power
state, L2 contents).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "kernels",
    "is_spin_kernel",
    "gpu_ops",
    "span_and_busy",
    "split_calls",
    "profile_calls",
    "same_run",
    "crosscheck",
    "main",
]


def kernels() -> dict[str, tuple[Callable[[], Any], float | None]]:
    """The gallery's main kernels as launchers: name → (launch, flops).

    Returns
    -------
    dict[str, tuple[Callable[[], Any], float | None]]
        Name → (launcher, FLOPs per call).

    Example
    -------
    >>> for name, (launch, flops) in kernels().items(): print(name)
    """
    import torch

    from cudnn_guide.graphs import attention, conv, matmul, tensors

    out: dict[str, tuple[Callable[[], Any], float | None]] = {}
    cp = conv.ConvProblem()
    ci = cp.make_inputs()
    cf = conv.conv_bias_relu_graph(cp, ci)
    out["conv→bias→ReLU (cuDNN graph)"] = (cf.bind(cf.pack(**ci)), cp.flops)
    mm = matmul.MatmulProblem()
    mi = mm.make_inputs()
    mf = matmul.matmul_epilogue_graph(mm, mi)
    out["matmul epilogue + AMAX (cuDNN graph)"] = (
        mf.bind(mf.pack(**mi, alpha=tensors.scalar_value(mm.alpha))),
        mm.flops,
    )
    sd = attention.SdpaProblem(batch=4, heads=16, seq=4096, head_dim=128)
    si = sd.make_inputs()
    sf = attention.sdpa_graph(sd, si)
    out["causal SDPA S=4096 d=128 (cuDNN graph)"] = (sf.bind(sf.pack(**si)), sd.flops)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    out["bf16 matmul 8192³ (cuBLAS)"] = (lambda: torch.matmul(a, b, out=c), 2 * 8192**3)
    return out


def is_spin_kernel(name: str) -> bool:
    """Whether a GPU operation is the harness's spin (``torch.cuda._sleep``'s kernel).

    Parameters
    ----------
    name
        The operation's name in a CUPTI trace.

    Returns
    -------
    bool
        True for the spin kernel.

    Example
    -------
    >>> is_spin_kernel("at::cuda::(anonymous namespace)::spin_kernel(long)")
    True
    """
    name = name.lower()
    return "sleep" in name or "spin" in name


def gpu_ops(prof: Any) -> list[Any]:
    """A finished ``torch.profiler.profile``'s GPU operations, in start order.

    Parameters
    ----------
    prof
        The profiler, after its ``with`` block.

    Returns
    -------
    list[Any]
        Its CUDA events (kernels, memsets, copies), sorted by start time.

    Example
    -------
    >>> calls = split_calls(gpu_ops(prof), flush_names)
    """
    import torch

    return sorted(
        (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda e: e.time_range.start
    )


def span_and_busy(calls: list[list[Any]]) -> tuple[list[float], list[float]]:
    """Each call's span (first start to last end) and busy time (summed durations), in µs.

    Parameters
    ----------
    calls
        Per-call lists of GPU operations (:func:`split_calls`).

    Returns
    -------
    tuple[list[float], list[float]]
        Spans and busy times, one per call.

    Example
    -------
    >>> span, busy = span_and_busy(split_calls(gpu_ops(prof), flush_names))
    """
    span = [c[-1].time_range.end - c[0].time_range.start for c in calls]
    busy = [sum(e.time_range.end - e.time_range.start for e in c) for c in calls]
    return span, busy


def split_calls(gpu_ops: list[Any], flush_names: set[str]) -> list[list[Any]]:
    """Cut a time-ordered CUPTI trace of :func:`~cudnn_guide.measure.bench.benchmark` into its timed calls.

    A timed call is the GPU work that follows a spin kernel (and the L2 flush after it), up to
    the next spin or flush: its kernels and any memset or copy it issues itself. Work that no
    spin precedes (warm-up calls, the host-time calls) belongs to no timed call.

    Parameters
    ----------
    gpu_ops
        The trace's GPU operations, in start order (anything with a ``name``).
    flush_names
        Names of the flush's kernels (:func:`~cudnn_guide.studies.profiling.flush_kernel_names`).

    Returns
    -------
    list[list[Any]]
        One list of operations per timed call, in order.

    Example
    -------
    >>> calls = split_calls(sorted(gpu_events, key=start), profiling.flush_kernel_names(flush))
    """
    calls: list[list[Any]] = []
    current: list[Any] | None = None
    armed = False
    for op in gpu_ops:
        if is_spin_kernel(op.name):
            armed, current = True, None
        elif op.name in flush_names:
            current = None
        elif current is not None:
            current.append(op)
        elif armed:
            current, armed = [op], False
            calls.append(current)
    return calls


def same_run(
    launch: Callable[[], Any], *, label: str, flops: float | None = None, budget_ms: float = 300.0
) -> dict[str, Any]:
    """Time ``launch`` with the harness while the profiler records every kernel, and compare per call.

    The harness enqueues, per timed call: a spin kernel, the L2 flush (cold), the start event,
    the call's kernels, the end event. In the CUPTI trace, the GPU work after a spin (and its
    flush) and before the next spin or flush is one call (its kernels, and the memsets or copies
    it issues itself); work that no spin precedes (warm-up, the host-time calls) is left out.
    A call's *span* runs from its first operation's start to its last one's end, its *kernel
    time* sums their durations.

    Parameters
    ----------
    launch
        The call to time.
    label
        Name in errors.
    flops
        FLOPs per call.
    budget_ms
        The harness's time budget.

    Returns
    -------
    dict[str, Any]
        ``events_median_us`` (raw events), ``harness_median_us`` (events minus the launch cost),
        ``cupti_span_median_us``, ``cupti_kernels_median_us``, ``calls`` matched, and the
        percentage differences.

    Example
    -------
    >>> r = same_run(launch, label='conv')
    >>> print(r['events_vs_span_pct'])
    """
    import statistics
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile

    from cudnn_guide.measure import bench, events
    from cudnn_guide.studies import profiling

    flush_names = profiling.flush_kernel_names(events.l2_flush_buffer())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            m = bench.benchmark(launch, label=label, l2="cold", flops=flops, budget_ms=budget_ms)
            torch.cuda.synchronize()
    calls = split_calls(gpu_ops(prof), flush_names)[-m.n :]
    span, busy = span_and_busy(calls)
    memsets = [sum("memset" in e.name.lower() or "memcpy" in e.name.lower() for e in c) for c in calls]
    ev, kt, sp = m.event_median_ms * 1e3, m.median_ms * 1e3, statistics.median(span)
    return {
        "events_median_us": ev,
        "harness_median_us": kt,
        "launch_cost_us": m.launch_cost_ms * 1e3,
        "events_iqr_us": m.iqr_ms * 1e3,
        "calls": len(calls),
        "cupti_span_median_us": sp,
        "cupti_kernels_median_us": statistics.median(busy),
        "kernels_per_call": statistics.median(len(c) - n for c, n in zip(calls, memsets)),
        "memsets_per_call": statistics.median(memsets),
        "events_vs_span_pct": 100 * (ev / sp - 1),
        "events_minus_span_us": ev - sp,
        "harness_vs_span_pct": 100 * (kt / sp - 1),
    }


def profile_calls(
    launch: Callable[[], Any], *, spin_ms: float, calls: int = 50, label: str = "fn", warmup_ms: float = 50.0
) -> dict[str, Any]:
    """CUPTI's view of calls made exactly as the harness makes them, without the events.

    The harness's warm-up comes first (calls back to back for ``warmup_ms``, which brings a
    power-hungry kernel to the clock it will run at), then each profiled call is preceded by the
    harness's spin and L2 flush, so the kernel runs in the same conditions as in
    :func:`~cudnn_guide.measure.bench.benchmark` (what runs just before a kernel can change its
    duration: ``tools/spin_order_probe.py``); only the clock differs.

    Parameters
    ----------
    launch
        The call.
    spin_ms
        The spin before each call (:func:`~cudnn_guide.measure.events.spin_for` of its host time).
    calls
        Profiled calls.
    label
        Name in errors.
    warmup_ms
        Warm-up before profiling, GPU time included, as in :func:`~cudnn_guide.measure.bench.benchmark`.

    Returns
    -------
    dict[str, Any]
        ``span_us`` and ``kernels_us`` (medians per call), ``calls`` matched, and ``clocks``
        (:func:`~cudnn_guide.measure.clocks.throttle_summary` of the profiled calls).

    Example
    -------
    >>> profile_calls(launch, spin_ms=events.spin_for(m.host_median_ms))['span_us']
    """
    import statistics
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile

    from cudnn_guide.measure import clocks, events
    from cudnn_guide.studies import profiling

    flush = events.l2_flush_buffer()
    flush_names = profiling.flush_kernel_names(flush)
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < warmup_ms:
        for _ in range(4):
            flush.zero_()
            events.call_checked(launch, label)
        torch.cuda.synchronize()
    before, t_run = clocks.sample(), time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                events.spin(spin_ms)
                flush.zero_()
                events.call_checked(launch, label)
            torch.cuda.synchronize()
    clock_info = clocks.throttle_summary(before, clocks.sample(), (time.perf_counter() - t_run) * 1e3)
    cut = split_calls(gpu_ops(prof), flush_names)
    if not cut:
        raise RuntimeError(f"profile_calls {label!r}: no calls found in the trace")
    span, busy = span_and_busy(cut)
    return {
        "span_us": statistics.median(span),
        "kernels_us": statistics.median(busy),
        "calls": float(len(cut)),
        "clocks": clock_info,
    }


def crosscheck(rounds: int = 5) -> list[dict[str, Any]]:
    """Time each of :func:`kernels` with the harness and with the profiler, in alternating rounds.

    Each round runs, on the same kernel: the harness; the profiler on calls made as the harness
    makes them (spin, flush, call; no events: :func:`profile_calls`), the comparison that
    differs only in the clock; and the profiler on calls back to back after the flush alone
    (:func:`~cudnn_guide.studies.profiling.profile_kernels`), which shows how much the spin before a call
    changes the kernel itself. The GPU's clock drifts by a few percent over seconds (power
    capping), so each round pairs the two clocks in time, and the verdict is the median over
    rounds of the paired differences.

    Parameters
    ----------
    rounds
        Alternating rounds per kernel.

    Returns
    -------
    list[dict[str, Any]]
        One dict per kernel: the harness's kernel time and its raw event time, the launch cost
        subtracted, the profiler's kernel time (``profiler_us``, the sum of the call's kernel and
        memset durations) and span per call in the harness's conditions, the harness's difference
        from each in percent (``within_3pct`` judges the kernel time), the back-to-back kernel time, each round,
        a hot-L2 graph replay, and the same-run comparison (:func:`same_run`).

    Example
    -------
    >>> rows = crosscheck()
    >>> print(rows[0]['harness_vs_profiler_pct'])
    """
    import statistics

    from cudnn_guide.measure import bench, cudagraphs, events
    from cudnn_guide.studies import profiling

    cost = events.launch_cost()
    rows = []
    for name, (launch, flops) in kernels().items():
        per_round = []
        for _ in range(rounds):
            m = bench.benchmark(launch, label=name, l2="cold", flops=flops, budget_ms=300)
            matched = profile_calls(launch, spin_ms=events.spin_for(m.host_median_ms), calls=50, label=name)
            b2b = profiling.profile_kernels(launch, calls=50, l2="cold", label=name)
            per_round.append(
                {
                    "harness_us": m.median_ms * 1e3,
                    "events_us": m.event_median_ms * 1e3,
                    "harness_ci_rel": m.median_ci_rel,
                    "profiler_span_us": matched["span_us"],
                    "profiler_kernels_us": matched["kernels_us"],
                    "back_to_back_us": b2b.per_call_ms * 1e3,
                    "harness_sm_mhz_end": m.clocks.get("sm_mhz_end"),
                    "harness_power_capped": m.clocks.get("power_capped_fraction"),
                    "profiler_sm_mhz_end": matched["clocks"].get("sm_mhz_end"),
                    "profiler_power_capped": matched["clocks"].get("power_capped_fraction"),
                }
            )
        med = {
            k: statistics.median(r[k] for r in per_round)
            for k in ("harness_us", "events_us", "profiler_span_us", "profiler_kernels_us", "back_to_back_us")
        }
        replay = cudagraphs.time_replay(cudagraphs.capture(launch, calls=100, label=name), label=name, reps=20)
        # each round pairs the two clocks in time: the median of the paired differences cancels a
        # drift of the GPU's clock across rounds, which a ratio of the two medians would not
        diff = statistics.median(100 * (r["harness_us"] / r["profiler_kernels_us"] - 1) for r in per_round)
        rows.append(
            {
                "kernel": name,
                "harness_median_us": med["harness_us"],
                "harness_events_us": med["events_us"],
                "launch_cost_us": cost["overhead_us"],
                "profiler_us": med["profiler_kernels_us"],
                "profiler_span_us": med["profiler_span_us"],
                "harness_vs_profiler_pct": diff,
                "harness_vs_profiler_span_pct": statistics.median(
                    100 * (r["harness_us"] / r["profiler_span_us"] - 1) for r in per_round
                ),
                "ratio_of_medians_pct": 100 * (med["harness_us"] / med["profiler_kernels_us"] - 1),
                "within_3pct": abs(diff) <= 3,
                "back_to_back_us": med["back_to_back_us"],
                "harness_vs_back_to_back_pct": 100 * (med["harness_us"] / med["back_to_back_us"] - 1),
                "rounds": per_round,
                "replay_hot_us": replay.median_ms * 1e3,
                "same_run": same_run(launch, label=name, flops=flops),
                "kernels": b2b.top(3),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - GPU only
    """``python tools/crosscheck.py [OUT.json]``: run :func:`crosscheck`, print and save the table.

    Parameters
    ----------
    argv
        Optional output path; default ``sys.argv[1:]``.

    Example
    -------
    .. code-block:: bash

       python tools/crosscheck.py docs/data/crosscheck.json
    """
    from cudnn_guide import environment

    argv = sys.argv[1:] if argv is None else argv
    rows = crosscheck()
    data = {"environment": environment.collect().to_dict(), "rows": rows}
    text = json.dumps(data, indent=1)
    if argv:
        with open(argv[0], "w", encoding="utf-8") as f:
            f.write(text + "\n")
    for r in rows:
        sr = r["same_run"]
        print(
            f"{r['kernel']:42s} harness {r['harness_median_us']:9.1f} µs (events {r['harness_events_us']:.1f} − "
            f"{r['launch_cost_us']:.1f})  profiler, same conditions {r['profiler_us']:9.1f} µs "
            f"(span {r['profiler_span_us']:.1f}) "
            f"({r['harness_vs_profiler_pct']:+5.1f}%)  back to back {r['back_to_back_us']:.1f} µs  "
            f"replay(hot) {r['replay_hot_us']:9.1f} µs | same run: harness {sr['harness_median_us']:.1f} µs, "
            f"CUPTI span {sr['cupti_span_median_us']:.1f} µs ({sr['harness_vs_span_pct']:+.1f}%), "
            f"kernels {sr['cupti_kernels_median_us']:.1f} µs, {sr['calls']} calls"
        )


if __name__ == "__main__":  # pragma: no cover
    main()
