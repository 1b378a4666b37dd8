"""Time GPU work honestly: events, warm-up, time budgets, cold or hot L2, spread, CUDA graphs.

:func:`benchmark` takes a zero-argument callable and returns a :class:`Measurement`: the raw
per-call samples, their median and quantiles, and the TFLOP/s and GB/s derived from the FLOPs and
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
median (:func:`median_ci`, distribution-free) is within ±0.5% of it. A stable kernel needs a few
dozen calls; a noisy one spends its whole budget, and its interval says how far to trust it.

Events around one call also contain a few microseconds that the GPU spends starting the launch
and signalling its end, which a profiler's kernel durations leave out. The harness measures that
*launch cost* once per process (:func:`launch_cost`: kernels of two known lengths, timed exactly
like a call, give a line whose intercept it is) and subtracts it from every event sample, so
a measurement's median is the call's kernel time. The constant is kept in the measurement
(``launch_cost_ms``) and its record, so the raw event times can always be recovered; a call
whose event time is mostly launch cost gets a warning that points to CUDA-graph mode.
``subtract_launch_cost=False`` reports the raw event times.

``cuda_graph=True`` captures many calls into one CUDA graph and times its replays, removing launch
gaps for kernels too short to time one at a time.

Around every timed run the GPU's clock state is read (:mod:`cudnn_guide.clocks`): throttling
during the run becomes a warning on the measurement, and the reading is kept in its record.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import clocks
from .errors import BenchmarkError
from .measurement import TIMING_METHOD, Measurement, format_ms, median_ci, sorted_quantile

__all__ = [
    "TIMING_METHOD",
    "benchmark",
    "call_checked",
    "spread_warnings",
    "l2_flush_buffer",
    "launch_cost",
    "kernel_samples",
    "spin_for",
    "spin",
    "measure_launch_overhead",
    "reset_caches",
]


def reset_caches() -> None:
    """Forget this process's launch-cost calibration and L2 flush buffer.

    Example
    -------
    >>> reset_caches()
    """
    _FLUSH.clear()
    _LAUNCH_COST.clear()


# Moved to their own modules; ``bench.<name>`` still finds them (the recorded pages use it).
_MOVED = {
    "Measurement": "measurement",
    "median_ci": "measurement",
    "estimate": "measurement",
    "Ceilings": "ceilings",
    "DATASHEET": "ceilings",
    "datasheet_peaks": "ceilings",
    "measure_ceilings": "ceilings",
    "measure_read_bandwidth": "ceilings",
    "ProfiledKernels": "profiling",
    "flush_kernel_names": "profiling",
    "profile_kernels": "profiling",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


L2_MODES = ("hot", "cold")


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


def call_checked(fn: Callable[[], Any], label: str) -> Any:
    """Call ``fn`` once; an exception from it becomes a :class:`~cudnn_guide.errors.BenchmarkError` naming ``label``.

    Parameters
    ----------
    fn
        The zero-argument callable under test.
    label
        Its name in the error.

    Returns
    -------
    Any
        What ``fn`` returned.

    Example
    -------
    >>> call_checked(lambda: 1 + 1, "add")
    2
    """
    try:
        return fn()
    except BenchmarkError:
        raise
    except Exception as exc:
        raise BenchmarkError(f"benchmark {label!r}: the function raised {type(exc).__name__}: {exc}") from exc


_FLUSH: dict[int, Any] = {}


def l2_flush_buffer() -> Any:
    """A device buffer twice the L2 size; writing it (``.zero_()``) evicts the L2.

    Returns
    -------
    Any
        An int8 CUDA tensor of twice the L2 size, allocated once per device.

    Example
    -------
    >>> l2_flush_buffer().zero_()  # evict the L2 before a cold call
    """
    import torch

    dev = torch.cuda.current_device()
    buf = _FLUSH.get(dev)
    if buf is None:
        l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 64 * 2**20
        buf = _FLUSH[dev] = torch.empty(2 * l2, dtype=torch.int8, device="cuda")
    return buf


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
    cuda_graph: bool = False,
    calls_per_graph: int | None = None,
    subtract_launch_cost: bool = True,
    expect_shape: Sequence[int] | None = None,
    params: Mapping[str, Any] | None = None,
) -> Measurement:
    """Time ``fn`` on the GPU and return a :class:`Measurement`.

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
        ± ``precision`` of it (:func:`median_ci`), or the budget is spent. ``None`` always
        spends the whole budget.
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
        Subtract this process's measured launch cost (:func:`launch_cost`) from each event
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

    from .environment import require_gpu

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
        host_samples = _host_times(fn, flush, label, min(reps, 20))
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
    return Measurement(
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


LAUNCH_COST_LIMITS_US = (0.0, 20.0)
"""A launch-cost calibration outside this range is not trusted, and not subtracted."""
LAUNCH_COST_WARN_FRACTION = 0.25
"""Warn when the subtracted launch cost is more than this share of a call's event time."""
TOO_SHORT_FRACTION = 0.5
"""A call whose launch cost is at least this share of its event time is too short to time per call:
nothing is subtracted (the raw event time is an upper bound, never a negative number)."""


def kernel_samples(event_samples_ms: Sequence[float], cost_ms: float) -> tuple[list[float], float, list[str]]:
    """Turn event samples into kernel-time samples by subtracting the measured launch cost.

    Parameters
    ----------
    event_samples_ms
        Raw event times of the timed calls.
    cost_ms
        The launch cost (:func:`launch_cost`), in milliseconds.

    Returns
    -------
    tuple[list[float], float, list[str]]
        The corrected samples, the cost actually subtracted (0 when the calibration is outside
        :data:`LAUNCH_COST_LIMITS_US`, which is then not trusted), and warnings: an untrusted
        calibration, or a cost that is a large share of the call (its kernel time is then only
        known to a fraction of a microsecond, and CUDA-graph mode times it better).

    Example
    -------
    >>> samples, cost, notes = kernel_samples([0.0300, 0.0302], 0.0035)
    >>> [round(x, 6) for x in samples], cost, notes
    ([0.0265, 0.0267], 0.0035, [])
    >>> kernel_samples([0.0040, 0.0031], 0.0035)[:2]  # too short: raw events, never a negative time
    ([0.004, 0.0031], 0.0)
    """
    samples = list(event_samples_ms)
    lo, hi = LAUNCH_COST_LIMITS_US
    if not lo <= cost_ms * 1e3 <= hi:
        return (
            samples,
            0.0,
            [
                f"launch-cost calibration gave {cost_ms * 1e3:.2f} µs, outside {lo:g}–{hi:g} µs: "
                "not subtracted, the times are raw event times"
            ],
        )
    if not samples or cost_ms == 0:
        return samples, cost_ms, []
    notes = []
    event_median = statistics.median(samples)
    if cost_ms >= TOO_SHORT_FRACTION * event_median or min(samples) <= cost_ms:
        return (
            samples,
            0.0,
            [
                f"too short to time per call: the launch cost ({format_ms(cost_ms)}) is "
                f"{100 * cost_ms / event_median:.0f}% of the event time ({format_ms(event_median)}), so subtracting it "
                "could give an impossible (non-positive) time; the raw event times are reported, an upper bound on "
                "the kernel time; time it with cuda_graph=True"
            ],
        )
    if cost_ms > LAUNCH_COST_WARN_FRACTION * event_median:
        notes.append(
            f"the launch cost ({format_ms(cost_ms)}) is {100 * cost_ms / event_median:.0f}% of this call's event "
            f"time ({format_ms(event_median)}): its kernel time is known only to a fraction of a microsecond; "
            "time it with cuda_graph=True"
        )
    return [x - cost_ms for x in samples], cost_ms, notes


_LAUNCH_COST: dict[int, dict[str, float]] = {}


def launch_cost(refresh: bool = False) -> dict[str, float]:
    """This process's launch cost on the current GPU (:func:`measure_launch_overhead`), measured once.

    :func:`benchmark` subtracts ``overhead_us`` from every event sample.

    Parameters
    ----------
    refresh
        Measure again instead of returning the cached value.

    Returns
    -------
    dict[str, float]
        As :func:`measure_launch_overhead`.

    Example
    -------
    >>> print(f"{launch_cost()['overhead_us']:.1f} µs subtracted from each timed call")
    """
    import torch

    dev = torch.cuda.current_device()
    if refresh or dev not in _LAUNCH_COST:
        _LAUNCH_COST[dev] = measure_launch_overhead()
    return dict(_LAUNCH_COST[dev])


_CYCLES_PER_MS: dict[int, float] = {}


def spin_for(host_ms: float) -> float:
    """How long the spin before a timed call lasts, in ms, for a call whose host time is ``host_ms``.

    One and a half times the host time plus 20 µs (the events and the flush are enqueued too),
    at most 20 ms.

    Parameters
    ----------
    host_ms
        Median host time of one call.

    Returns
    -------
    float
        The spin, in milliseconds.

    Example
    -------
    >>> spin_for(0.020)
    0.05
    """
    return min(1.5 * host_ms + 0.02, 20.0)


def spin(ms: float) -> None:
    """Keep the GPU busy for about ``ms`` milliseconds (a calibrated ``torch.cuda._sleep``).

    Parameters
    ----------
    ms
        How long the GPU spins, in milliseconds.

    Example
    -------
    >>> spin(0.2)  # the next work enqueued starts about 0.2 ms later
    """
    import torch

    dev = torch.cuda.current_device()
    rate = _CYCLES_PER_MS.get(dev)
    if rate is None:
        cycles = 2_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles)  # first call loads the kernel
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        rate = _CYCLES_PER_MS[dev] = cycles / max(start.elapsed_time(end), 1e-3)
    torch.cuda._sleep(int(ms * rate))


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
        return _time_each(fn, flush, reps, label, spin_ms)
    samples: list[float] = []
    batch = min(reps, max(min_reps, 32))
    while True:
        samples += _time_each(fn, flush, batch, label, spin_ms)
        if len(samples) >= reps:
            return samples
        if len(samples) >= max(min_reps, 32):
            lo, hi = median_ci(samples)
            med = statistics.median(samples)
            if med - offset_ms > 0 and (hi - lo) / 2 <= precision * (med - offset_ms):
                return samples
        batch = min(len(samples), reps - len(samples))


def _time_each(fn: Callable[[], Any], flush: Any, reps: int, label: str, spin_ms: float) -> list[float]:
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        # the spin first, then the flush: the host enqueues flush and call while the GPU spins, and
        # the call starts straight after the flush, as it would after another kernel in a network
        # (the methodology page compares the two orders: docs/data/spin_order.json)
        spin(spin_ms)
        if flush is not None:
            flush.zero_()
        s.record()
        call_checked(fn, label)
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


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

    from .cudagraphs import CapturedGraph

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


def measure_launch_overhead(cycles: tuple[int, int] = (2_000, 100_000), reps: int = 300) -> dict[str, float]:
    """What a timed call's events add to its GPU work on this GPU: the per-launch cost.

    Times, exactly as :func:`benchmark` times a cold call (spin kernel, L2 flush, start event,
    call, end event), kernels of two known lengths: ``torch.cuda._sleep(c)`` for ``c`` in
    ``cycles``. Their event medians lie on a line ``overhead + c / rate``; its slope gives the SM
    clock rate during the measurement and its intercept the cost the GPU spends around a launch
    after the start event, which events include and a profiler's kernel duration does not. No
    profiler is involved, so the cross-check can use it as an independent correction.

    Parameters
    ----------
    cycles
        The two kernel lengths, in SM clock cycles (about 1 µs and 50 µs by default).
    reps
        Timed calls of each.

    Returns
    -------
    dict[str, float]
        ``overhead_us`` (the intercept), ``short_events_us`` and ``long_events_us`` (the two
        medians), ``cycles_per_us`` (the slope's inverse) and ``calls``.

    Example
    -------
    >>> print(f"{measure_launch_overhead()['overhead_us']:.1f} µs per timed call")
    """
    import torch

    from .environment import require_gpu

    short, long = cycles
    if not 0 < short < long:
        raise ValueError(f"cycles must be two increasing positive lengths, got {cycles}")
    require_gpu("measure_launch_overhead")
    flush = l2_flush_buffer()
    medians = []
    for c in (short, long):
        sleep = lambda c=c: torch.cuda._sleep(c)
        for _ in range(5):
            sleep()
        torch.cuda.synchronize()
        medians.append(statistics.median(_time_each(sleep, flush, reps, "known-length kernel", spin_ms=0.05)))
    us_per_cycle = (medians[1] - medians[0]) * 1e3 / (long - short)
    return {
        "overhead_us": medians[0] * 1e3 - short * us_per_cycle,
        "short_events_us": medians[0] * 1e3,
        "long_events_us": medians[1] * 1e3,
        "cycles_per_us": 1 / us_per_cycle,
        "calls": float(reps),
    }
