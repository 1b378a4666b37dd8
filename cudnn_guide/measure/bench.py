"""Time GPU work honestly: events, warm-up, time budgets, cold or hot L2, spread, CUDA graphs.

:func:`benchmark` takes a zero-argument callable and returns a :class:`~cudnn_guide.measure.measurement.Measurement`:
the raw per-call samples, their median and quantiles, and the TFLOP/s and GB/s derived from the FLOPs and
bytes you counted. The L2 mode is always your explicit choice:

``"cold"``
    A buffer twice the size of the device's L2 is written before every timed call (outside the
    timed events), so inputs come from HBM, as they do in a real network.
``"hot"``
    Nothing is flushed: repeated calls find their inputs in L2 when they fit.

Before each timed call the harness enqueues a short GPU *spin* (``torch.cuda._sleep``), sized
from the measured host time of one call, ahead of the L2 flush and the start event. The host then enqueues the
whole call while the GPU is still spinning, so the events time the GPU work alone and not the
Python that launches it (the method nvbench calls a blocking kernel). The host time is measured
separately, one call at a time on an idle GPU queue, and reported (``host_samples_ms``): when it
exceeds the GPU time, a loop of such calls is host-bound, and the measurement says so.

The number of timed calls comes from a time budget, but the run stops sooner once the median is
known precisely: calls are timed in doubling batches until the 95% confidence interval of the
median (:func:`~cudnn_guide.measure.measurement.median_ci`, distribution-free) is within ±0.5% of it. A stable kernel
needs a few dozen calls; a noisy one spends its whole budget, and its interval says how far to trust it.

Events around one call also contain a few microseconds that the GPU spends starting the launch
and signalling its end, which a profiler's kernel durations leave out. The harness measures that
*launch cost* once per process (:func:`~cudnn_guide.measure.events.launch_cost`: kernels of two known lengths, timed
exactly like a call, give a line whose intercept it is) and subtracts it from every event sample, so
a measurement's median is the call's kernel time. The constant is kept in the measurement
(``launch_cost_ms``) and its record, so the raw event times can always be recovered; a call
whose event time is mostly launch cost gets a warning that points to CUDA-graph mode.
``subtract_launch_cost=False`` reports the raw event times.

``cuda_graph=True`` captures many calls into one CUDA graph and times its replays, removing launch
gaps for kernels too short to time one at a time.

Around every timed run the GPU's clock state is read (:mod:`cudnn_guide.measure.clocks`): throttling
during the run becomes a warning on the measurement, and the reading is kept in its record.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cudnn_guide import collector
from cudnn_guide.errors import BenchmarkError
from cudnn_guide.measure import clocks
from cudnn_guide.measure.events import (
    L2_MODES,
    call_checked,
    kernel_samples,
    l2_flush_buffer,
    launch_cost,
    spin_for,
    time_each,
)
from cudnn_guide.measure.measurement import TIMING_METHOD, Measurement, format_ms, median_ci, sorted_quantile

__all__ = ["benchmark"]


def spread_warnings(samples: list[float]) -> list[str]:
    """Warnings about a run's samples: a large spread (IQR above 10% of the median), or drift.

    Parameters
    ----------
    samples
        Per-call times in ms, in the order they were taken.

    Returns
    -------
    list[str]
        One sentence per problem; empty for a steady run.

    Example
    -------
    >>> spread_warnings([1.0] * 20)
    []
    """
    warnings = []
    s = sorted(samples)
    med = statistics.median(s)
    iqr = sorted_quantile(s, 0.75) - sorted_quantile(s, 0.25)
    if med > 0 and iqr / med > 0.10:
        warnings.append(f"large spread: IQR is {100 * iqr / med:.0f}% of the median")
    third = len(samples) // 3
    if third >= 5:
        first, last = statistics.median(samples[:third]), statistics.median(samples[-third:])
        if first > 0 and abs(last / first - 1) > 0.05:
            warnings.append(
                f"timings drifted {100 * (last / first - 1):+.0f}% from the first to the last third "
                "of the run (clock or thermal throttling, or interference)"
            )
    return warnings


@collector.spending("timing")
def benchmark(
    fn: Callable[[], Any],
    *,
    label: str,
    l2: str,
    flops: float | None = None,
    bytes: float | None = None,
    budget_ms: float = 300.0,
    warmup_ms: float = 50.0,
    min_reps: int = 20,
    max_reps: int = 2_000,
    precision: float | None = 0.005,
    host_reps: int | None = None,
    cuda_graph: bool = False,
    calls_per_graph: int | None = None,
    subtract_launch_cost: bool = True,
    expect_shape: Sequence[int] | None = None,
    params: Mapping[str, Any] | None = None,
) -> Measurement:
    """Time ``fn`` on the GPU and return a :class:`~cudnn_guide.measure.measurement.Measurement`.

    Parameters
    ----------
    fn:
        Zero-argument callable that enqueues the work on torch's current stream (a
        :meth:`~cudnn_guide.graphs.BuiltGraph.bind` launcher, or a lambda around torch ops).
    label:
        Name in tables, plots and errors.
    l2:
        ``"cold"`` (flush L2 before each call) or ``"hot"``. Required: the choice changes the
        answer, so it is never implicit.
    flops:
        FLOPs per call you counted, for TFLOP/s.
    bytes:
        Bytes per call you counted, for GB/s.
    budget_ms:
        Time budget of the timed calls: at most ``budget_ms`` over a first estimate of one call
        (with its L2 flush and the spin kernel before it), clamped to ``[min_reps, max_reps]``.
    precision:
        Stop early once the median is known this precisely: the run is checked after
        32, 64, 128, ... calls, and stops once the 95% confidence interval of the median is within
        ± ``precision`` of it (:func:`~cudnn_guide.measure.measurement.median_ci`), or the budget is spent. ``None``
        always spends the whole budget.
    host_reps:
        Calls timed one at a time on an idle GPU queue for the host time (default: the number of
        timed calls, at most 20); ``0`` skips it (a comparison measures it in its first round only).
    warmup_ms:
        Warm-up runs for this long, GPU time included (at least two calls), before timing.
    min_reps:
        Fewest timed calls (at least 32 when stopping early).
    max_reps:
        Most timed calls.
    cuda_graph:
        Capture ``calls_per_graph`` calls in one CUDA graph and time replays (``l2`` must be
        ``"hot"``). For kernels of a few microseconds, where launch gaps would dominate events.
    calls_per_graph:
        Calls captured per graph (default: about 2 ms of work).
    subtract_launch_cost:
        Subtract this process's measured launch cost (:func:`~cudnn_guide.measure.events.launch_cost`) from each event
        sample, so the median is the call's kernel time (the default). ``False`` keeps the raw
        event times. Not used with ``cuda_graph=True``, whose replays spread one launch over
        many calls.
    expect_shape:
        If given and ``fn`` returns a tensor, its shape must match.
    params:
        Free-form metadata (implementation, problem size) carried into tables and records.

    Returns
    -------
    Measurement
        The samples and their statistics.

    Raises
    ------
    BenchmarkError
        ``fn`` raised, returned a wrong shape, or no GPU is present.
    ValueError
        Bad arguments (unknown ``l2`` mode, cold L2 with CUDA graphs).

    Example
    -------
    >>> m = benchmark(launch, label="cudnn fused", l2="cold", flops=2 * M * N * K)
    >>> print(m)
    """
    import torch

    from cudnn_guide.environment import require_gpu

    if l2 not in L2_MODES:
        raise ValueError(f"l2 must be one of {L2_MODES}, got {l2!r}")
    if cuda_graph and l2 == "cold":
        raise ValueError(
            "cuda_graph=True times back-to-back replays, which cannot flush L2 between calls; use l2='hot'"
        )
    if not callable(fn):
        raise BenchmarkError(f"benchmark {label!r}: expected a callable, got {type(fn).__name__}")
    require_gpu(f"benchmark {label!r}")

    out = call_checked(fn, label)
    if expect_shape is not None and isinstance(out, torch.Tensor) and tuple(out.shape) != tuple(expect_shape):
        raise BenchmarkError(f"benchmark {label!r}: output shape {tuple(out.shape)} != expected {tuple(expect_shape)}")
    torch.cuda.synchronize()

    flush = l2_flush_buffer() if l2 == "cold" else None
    cost_ms = launch_cost()["overhead_us"] / 1e3 if subtract_launch_cost and not cuda_graph else 0.0

    # Warm up for warmup_ms of wall time *including the GPU* (at least two calls): calls go in
    # batches that double, each ended by a synchronize. Timing only the enqueueing would let a
    # slow kernel behind a fast launch pile up seconds of queued work (a 120 ms plan launched for
    # 5 ms of host time is 18 s of GPU time). The last batch's wall time per call estimates one
    # call (with its flush) for sizing the run; the host times of all calls size the spin.
    host: list[float] = []
    t_start = time.perf_counter()
    batch = 1
    while True:
        t_batch = time.perf_counter()
        for _ in range(batch):
            if flush is not None:
                flush.zero_()
            t0 = time.perf_counter()
            call_checked(fn, label)
            host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        now = time.perf_counter()
        est = (now - t_batch) * 1e3 / batch
        if len(host) >= 2 and ((now - t_start) * 1e3 >= warmup_ms or len(host) >= 10_000):
            break
        batch = min(2 * batch, 1024)

    host_samples: list[float] = []
    clock_before = clocks.sample()
    t_run = time.perf_counter()
    if cuda_graph:
        inner = calls_per_graph or max(1, min(1000, int(2.0 / max(est, 1e-4))))
        samples = _time_graph_replays(fn, inner, budget_ms, est, min_reps, max_reps, label)
        mode = f"cuda-graph x{inner}"
    else:
        # each timed call also waits for its spin kernel: count it, so budget_ms bounds the run
        spin_ms = spin_for(statistics.median(host))
        reps = int(min(max(budget_ms / max(est + spin_ms, 1e-4), min_reps), max_reps))
        samples = _time_until_precise(fn, flush, reps, label, spin_ms, min_reps, precision, cost_ms)
        mode = f"{l2}-L2 events"
    # read the clocks the moment the timed run ends, before anything idles the GPU
    clock_info = clocks.throttle_summary(clock_before, clocks.sample(), (time.perf_counter() - t_run) * 1e3)
    notes: list[str] = []
    if not cuda_graph:
        host_samples = _host_times(fn, flush, label, min(reps, 20) if host_reps is None else host_reps)
        if subtract_launch_cost:
            samples, cost_ms, notes = kernel_samples(samples, cost_ms)
            if cost_ms:
                mode += " − launch cost"
    notes = spread_warnings(samples) + notes + clocks.throttle_warnings(clock_info)
    if host_samples and statistics.median(host_samples) > statistics.median(samples):
        notes.append(
            f"host time per call ({format_ms(statistics.median(host_samples))}) exceeds GPU time "
            f"({format_ms(statistics.median(samples))}): back-to-back calls are host-bound; see cuda_graph=True"
        )
    m = Measurement(
        label,
        samples,
        mode,
        flops,
        bytes,
        dict(params or {}),
        notes,
        host_samples,
        clock_info,
        cost_ms if not cuda_graph else 0.0,
        TIMING_METHOD,
    )
    collector.add_measurements(m)  # the running example's record keeps it (cudnn_guide.collector)
    return m


def _time_until_precise(
    fn: Callable[[], Any],
    flush: Any,
    reps: int,
    label: str,
    spin_ms: float,
    min_reps: int,
    precision: float | None,
    offset_ms: float = 0.0,
) -> list[float]:
    """Time up to ``reps`` calls, in doubling batches, stopping once the median is precise enough.

    The precision is relative to the median minus ``offset_ms`` (the launch cost that will be
    subtracted), so it holds for the reported kernel time."""
    if precision is None:
        return time_each(fn, flush, reps, label, spin_ms)
    samples: list[float] = []
    batch = min(reps, max(min_reps, 32))
    while True:
        samples += time_each(fn, flush, batch, label, spin_ms)
        if len(samples) >= reps:
            return samples
        if len(samples) >= max(min_reps, 32):
            lo, hi = median_ci(samples)
            med = statistics.median(samples)
            if med - offset_ms > 0 and (hi - lo) / 2 <= precision * (med - offset_ms):
                return samples
        batch = min(len(samples), reps - len(samples))


def _host_times(fn: Callable[[], Any], flush: Any, label: str, n: int) -> list[float]:
    """Host time to enqueue one call, each on an idle GPU queue.

    Inside the timed loop the queue fills whenever the GPU work per iteration outlasts its
    enqueueing, and a launch then blocks until a slot frees: host time measured there tracks
    the GPU time, not the cost of the call. Timing a few calls after a synchronize measures
    the enqueue cost alone."""
    import torch

    out = []
    for _ in range(n):
        if flush is not None:
            flush.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call_checked(fn, label)
        out.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return out


def _time_graph_replays(fn, inner, budget_ms, est, min_reps, max_reps, label) -> list[float]:
    import torch

    from cudnn_guide.measure.cudagraphs import CapturedGraph

    graph = CapturedGraph(fn, calls=inner, label=label)
    graph.replay()
    torch.cuda.synchronize()
    reps = int(min(max(budget_ms / max(est * inner, 1e-4), min_reps), max_reps))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / inner for s, e in zip(starts, ends)]
