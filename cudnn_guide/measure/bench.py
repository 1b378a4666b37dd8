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
during the run becomes a warning on the measurement, and the reading is kept in its record. A
re-primed measurement (below) reads the clock and the active reasons only, without NVML's throttle
counters: it has no throttled fractions, and it warns only of a clock held down at its end.

A callable measured again and again in one comparison (:func:`~cudnn_guide.measure.compare.compare`'s
rounds) can carry a :class:`Rewarm` (``rewarm=``): its first measurement is made as above and keeps
what its warm-up learned; each later one skips the first-call check, re-primes with
:attr:`Rewarm.calls` calls (one for a call of at least :data:`LONG_CALL_MS`, none from
:data:`SELF_PRIMING_MS`) instead of the timed warm-up, and sizes its spin and its number of timed calls
from the first one's warm-up. The timed calls are made exactly as before.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cudnn_guide import collector
from cudnn_guide.errors import BenchmarkError
from cudnn_guide.measure import clocks
from cudnn_guide.measure.cudagraphs import CapturedGraph
from cudnn_guide.measure.events import (
    L2_MODES,
    call_checked,
    kernel_samples,
    l2_flush_buffer,
    launch_cost,
    spin_for,
    time_each,
)
from cudnn_guide.measure.measurement import (
    TIMING_METHOD,
    Measurement,
    format_ms,
    median_ci,
    spread_warnings,
)

__all__ = [
    "BenchOptions",
    "LONG_CALL_MS",
    "Rewarm",
    "SELF_PRIMING_MS",
    "benchmark",
    "first_call",
    "measure",
    "peak_memory_mib",
]

LONG_CALL_MS = 20.0
"""A call this long (wall time with its flush, from the first warm-up) is re-primed with one call, not
:attr:`Rewarm.calls`. The re-prime brings a contender's code and data back after other work ran; one call of
20 ms or more runs the same kernels far longer than two calls of the short contenders do. Since 4f40a0d (issue
34); that recording's headlines on the pages it reaches stayed inside their intervals (measurement studies,
"Less spent around each timing")."""
SELF_PRIMING_MS = 50.0
"""A call this long is not re-primed at all: a re-prime adds a whole call of GPU time to each round, while what
it brings back (the callable's code and data, after the other contenders ran) is a small part of a call of 50 ms
or more. At 32k tokens plot_26's calls take 53-321 ms: their re-primes were about 8 s of a recording's alone
turn, by its record. Since dcab682 (issue 34)."""


@dataclasses.dataclass
class Rewarm:
    """A callable's first full warm-up, kept for its later measurements in the same comparison.

    :func:`measure` fills it in on the first measurement that carries it (the first-call check, unless
    :attr:`checked`, and the timed warm-up of ``warmup_ms``, as without it); every later measurement that carries it
    skips the check (the callable passed it), reads the clocks without NVML's throttle counters (no
    ``power_capped_fraction`` or ``thermal_fraction`` in its clock summary), runs ``calls`` calls (one
    for a call of at least :data:`LONG_CALL_MS`, none from :data:`SELF_PRIMING_MS`; flush before each,
    one synchronize after) instead of the timed warm-up, and sizes its spin and its number of timed
    calls from ``host_ms`` and ``est_ms``.
    :func:`~cudnn_guide.measure.compare.compare` gives each contender its own, so that from its
    second round on a contender pays a few calls, not a warm-up.

    Example
    -------
    >>> primed = Rewarm(calls=2)
    >>> first = measure(launch, "cudnn", BenchOptions(l2="cold", rewarm=primed))  # full warm-up
    >>> later = measure(launch, "cudnn", BenchOptions(l2="cold", rewarm=primed))  # 2 calls, same sizing
    """

    calls: int = 2
    """Warm-up calls of a later measurement (at least one); a call of at least :data:`LONG_CALL_MS` gets one
    whatever this says, one of at least :data:`SELF_PRIMING_MS` none (:attr:`prime_calls`)."""
    host_ms: float | None = None
    """Median host time per call in the full warm-up: sizes the spin before each timed call."""
    est_ms: float | None = None
    """Wall time per call (flush included) of the full warm-up's last batch: sizes the timed run."""
    checked: bool = False
    """Whether the callable's first-call check was made already (:func:`first_call`, as
    :func:`~cudnn_guide.measure.compare.compare` makes it before its measured block): the first measurement
    then skips it."""

    def __post_init__(self) -> None:
        if self.calls < 1:
            raise ValueError(f"Rewarm.calls must be at least 1, got {self.calls}")

    @property
    def primed(self) -> bool:
        """Whether a full warm-up has filled it in."""
        return self.host_ms is not None and self.est_ms is not None

    @property
    def prime_calls(self) -> int:
        """Calls of a later measurement's re-prime: :attr:`calls`; one for a call of at least
        :data:`LONG_CALL_MS` (its first call runs long past anything the other work left behind); none for
        one of at least :data:`SELF_PRIMING_MS`."""
        if self.est_ms is not None and self.est_ms >= SELF_PRIMING_MS:
            return 0
        return 1 if self.est_ms is not None and self.est_ms >= LONG_CALL_MS else self.calls


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """How :func:`measure` times a call: every setting of :func:`benchmark` but the callable and its label.

    Notes
    -----
    The fields:

    ``l2``
        ``"cold"`` (flush L2 before each call) or ``"hot"``. Required: the choice changes the
        answer, so it is never implicit.
    ``flops``, ``bytes``
        FLOPs and bytes per call you counted, for TFLOP/s and GB/s.
    ``budget_ms``
        Time budget of the timed calls: at most ``budget_ms`` over a first estimate of one call
        (with its L2 flush and the spin kernel before it), clamped to ``[min_reps, max_reps]``.
    ``warmup_ms``
        Warm-up runs for this long, GPU time included (at least two calls), before timing.
    ``min_reps``, ``max_reps``
        Fewest (at least 32 when stopping early) and most timed calls.
    ``precision``
        Stop early once the 95% interval of the median is within ± ``precision`` of it
        (checked after 32, 64, 128, ... calls); ``None`` always spends the whole budget.
    ``host_reps``
        Calls timed one at a time on an idle GPU queue for the host time (default: the number of
        timed calls, at most 20); ``0`` skips it.
    ``cuda_graph``
        Capture ``calls_per_graph`` calls in one CUDA graph and time replays (``l2`` must be ``"hot"``).
    ``calls_per_graph``
        Calls captured per graph (default: about 2 ms of work).
    ``subtract_launch_cost``
        Subtract this process's measured launch cost from each event sample (the default).
    ``expect_shape``
        If given and the call returns a tensor, its shape must match.
    ``params``
        Free-form metadata (implementation, problem size) carried into tables and records.
    ``rewarm``
        A :class:`Rewarm` shared by the measurements of one callable in one comparison: the first
        warms up in full and fills it in, the later ones re-prime with a few calls and reuse its
        sizing. ``None`` (the default): a full warm-up and first-call check every time.

    Raises
    ------
    ValueError
        An unknown ``l2`` mode, or cold L2 with CUDA graphs.

    Example
    -------
    >>> BenchOptions(l2="hot", cuda_graph=True).cuda_graph
    True
    """

    l2: str
    flops: float | None = None
    bytes: float | None = None
    budget_ms: float = 300.0
    warmup_ms: float = 50.0
    min_reps: int = 20
    max_reps: int = 2_000
    precision: float | None = 0.005
    host_reps: int | None = None
    cuda_graph: bool = False
    calls_per_graph: int | None = None
    subtract_launch_cost: bool = True
    expect_shape: Sequence[int] | None = None
    params: Mapping[str, Any] | None = None
    rewarm: Rewarm | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.l2 not in L2_MODES:
            raise ValueError(f"l2 must be one of {L2_MODES}, got {self.l2!r}")
        if self.cuda_graph and self.l2 == "cold":
            raise ValueError(
                "cuda_graph=True times back-to-back replays, which cannot flush L2 between calls; use l2='hot'"
            )


def benchmark(fn: Callable[[], Any], *, label: str, l2: str, **settings: Any) -> Measurement:
    """Time ``fn`` on the GPU and return a :class:`~cudnn_guide.measure.measurement.Measurement`.

    The keyword form of :func:`measure`: ``benchmark(fn, label=..., l2=..., flops=...)`` is
    ``measure(fn, label, BenchOptions(l2=..., flops=...))``.

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
    settings:
        Any other field of :class:`BenchOptions` (``flops``, ``bytes``, ``budget_ms``,
        ``warmup_ms``, ``min_reps``, ``max_reps``, ``precision``, ``host_reps``, ``cuda_graph``,
        ``calls_per_graph``, ``subtract_launch_cost``, ``expect_shape``, ``params``, ``rewarm``).

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
    TypeError
        A setting that :class:`BenchOptions` does not have.

    Example
    -------
    >>> m = benchmark(launch, label="cudnn fused", l2="cold", flops=2 * M * N * K)
    >>> print(m)
    """
    return measure(fn, label, BenchOptions(l2=l2, **settings))


def measure(fn: Callable[[], Any], label: str, options: BenchOptions) -> Measurement:
    """Time ``fn`` as ``options`` say: check it, warm it up, time it, read the clocks, note what went wrong.

    The checked first call comes before the measured block (:func:`cudnn_guide.collector.spending`): nothing
    of it is timed, so in the docs build's lanes it runs beside the other pages' cells (the shared turn), and
    the GPU is held alone from the warm-up on (issue 34: the alone turns add up across the site). Inside an
    outer measured block (a comparison's rounds with ``rewarm=False``) it runs there, as before.

    Parameters
    ----------
    fn:
        Zero-argument callable that enqueues the work on torch's current stream.
    label:
        Name in tables, plots and errors.
    options:
        How to time it.

    Returns
    -------
    Measurement
        The samples and their statistics; the running example's record keeps it
        (:mod:`cudnn_guide.collector`).

    Raises
    ------
    BenchmarkError
        ``fn`` raised, returned a wrong shape, or no GPU is present.

    Example
    -------
    >>> m = measure(launch, "cudnn fused", BenchOptions(l2="cold", flops=2 * M * N * K))
    """
    rewarm = options.rewarm
    primed = rewarm is not None and rewarm.primed
    if not primed and not (rewarm is not None and rewarm.checked):
        first_call(fn, label, options.expect_shape)
    return _timed(fn, label, options, primed)


@collector.spending("timing")
def _timed(fn: Callable[[], Any], label: str, options: BenchOptions, primed: bool) -> Measurement:
    """:func:`measure` after its first call: the measured block (warm-up, timed run, clocks, host times)."""
    rewarm = options.rewarm
    flush = l2_flush_buffer() if options.l2 == "cold" else None
    subtract = options.subtract_launch_cost and not options.cuda_graph
    cost_ms = launch_cost()["overhead_us"] / 1e3 if subtract else 0.0
    if primed:
        _re_prime(fn, flush, label, rewarm.prime_calls)
        host_ms, est = rewarm.host_ms, rewarm.est_ms
    else:
        host, est = _warm_up(fn, flush, label, options.warmup_ms)
        host_ms = statistics.median(host)
        if rewarm is not None:
            rewarm.host_ms, rewarm.est_ms = host_ms, est

    # NVML's throttle counters in a callable's first measurement only: a comparison keeps that round's clock
    # summary (its pooled measurement's); a later round, re-primed, reads the clock and the active reasons
    # at each end, whose warnings still reach the pooled measurement (clocks.sample's counters cost ms)
    counters = not primed
    clock_before = clocks.sample(counters)
    t_run = time.perf_counter()
    if options.cuda_graph:
        samples, mode, reps = _time_graph_replays(fn, label, options, est)
    else:
        samples, mode, reps = _time_events(fn, flush, label, options, est, host_ms, cost_ms)
    # read the clocks the moment the timed run ends, before anything idles the GPU
    clock_info = clocks.throttle_summary(clock_before, clocks.sample(counters), (time.perf_counter() - t_run) * 1e3)

    host_samples: list[float] = []
    notes: list[str] = []
    if not options.cuda_graph:
        host_samples = _host_times(fn, flush, label, min(reps, 20) if options.host_reps is None else options.host_reps)
        if options.subtract_launch_cost:
            samples, cost_ms, notes = kernel_samples(samples, cost_ms)
            if cost_ms:
                mode += " − launch cost"
    notes = spread_warnings(samples) + notes + clocks.throttle_warnings(clock_info) + _host_bound(host_samples, samples)
    m = Measurement(
        label,
        samples,
        mode,
        options.flops,
        options.bytes,
        dict(options.params or {}),
        notes,
        host_samples,
        clock_info,
        cost_ms if not options.cuda_graph else 0.0,
        TIMING_METHOD,
    )
    collector.add_measurements(m)  # the running example's record keeps it (cudnn_guide.collector)
    return m


def peak_memory_mib(fn: Callable[[], Any]) -> float:
    """The peak GPU memory one call of ``fn`` allocates above what is allocated before it, in MiB.

    After a synchronize, the allocated bytes are read and the peak statistics reset; ``fn`` runs
    once, and after another synchronize the peak (``torch.cuda.max_memory_allocated``) less those
    bytes is the call's own: activations, gradients and workspaces, those it frees before it
    returns included. An exact count of torch's caching allocator, not a sample; memory a library
    allocates outside that allocator is not counted.

    Parameters
    ----------
    fn
        A zero-argument launcher (e.g. one training step).

    Returns
    -------
    float
        MiB (2**20 bytes).

    Example
    -------
    >>> peak_memory_mib(step)  # e.g. 3120.0 for a training step's activations and gradients
    """
    import torch

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def first_call(fn: Callable[[], Any], label: str, expect_shape: Sequence[int] | None = None) -> None:
    """One checked call before anything is timed: ``fn`` is callable, runs, and returns ``expect_shape``.

    Untimed: :func:`measure` and :func:`~cudnn_guide.measure.compare.compare` call it before their measured
    blocks, so in the docs build's lanes it runs beside the other pages' cells (but inside a comparison's
    rounds with ``rewarm=False``, each round's own check, as before).

    Parameters
    ----------
    fn
        Zero-argument callable that enqueues the work on torch's current stream.
    label
        Its name in errors.
    expect_shape
        The output's shape, when ``fn`` returns a tensor; ``None``: not checked.

    Raises
    ------
    BenchmarkError
        ``fn`` is not callable, raised, or returned another shape; or no GPU is present.

    Example
    -------
    >>> first_call(launch, "cudnn fused", expect_shape=(8, 1024))
    """
    import torch

    from cudnn_guide.environment import require_gpu

    if not callable(fn):
        raise BenchmarkError(f"benchmark {label!r}: expected a callable, got {type(fn).__name__}")
    require_gpu(f"benchmark {label!r}")
    out = call_checked(fn, label)
    expect = expect_shape
    if expect is not None and isinstance(out, torch.Tensor) and tuple(out.shape) != tuple(expect):
        raise BenchmarkError(f"benchmark {label!r}: output shape {tuple(out.shape)} != expected {tuple(expect)}")
    torch.cuda.synchronize()


@collector.measuring()
def _warm_up(fn: Callable[[], Any], flush: Any, label: str, warmup_ms: float) -> tuple[list[float], float]:
    """Warm up for ``warmup_ms`` of wall time *including the GPU* (at least two calls).

    Calls go in batches that double, each ended by a synchronize; a first call that already lasted ``warmup_ms``
    is followed by one more, not two (until issue 34: three calls however long). Timing only the enqueueing
    would let a slow kernel behind a fast launch pile up seconds of queued work (a 120 ms plan
    launched for 5 ms of host time is 18 s of GPU time). Returns the host time of every call
    (which sizes the spin) and the last batch's wall time per call, an estimate of one call with
    its flush (which sizes the run)."""
    import torch

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
            return host, est
        long_first = len(host) == 1 and (now - t_start) * 1e3 >= warmup_ms  # then one more call is enough
        batch = 1 if long_first else min(2 * batch, 1024)


def _re_prime(fn: Callable[[], Any], flush: Any, label: str, calls: int) -> None:
    """``calls`` calls (perhaps none), each after the flush (cold L2), then a synchronize: a warm-up already paid
    for (:class:`Rewarm`), repeated only to bring the callable's code and data back after other work ran."""
    import torch

    for _ in range(calls):
        if flush is not None:
            flush.zero_()
        call_checked(fn, label)
    torch.cuda.synchronize()


def _time_events(
    fn: Callable[[], Any],
    flush: Any,
    label: str,
    options: BenchOptions,
    est: float,
    host_median_ms: float,
    cost_ms: float,
) -> tuple[list[float], str, int]:
    """Event-timed calls, each behind a spin kernel; returns the samples, the mode and the calls planned."""
    # each timed call also waits for its spin kernel: count it, so budget_ms bounds the run
    spin_ms = spin_for(host_median_ms)
    reps = int(min(max(options.budget_ms / max(est + spin_ms, 1e-4), options.min_reps), options.max_reps))
    samples = _time_until_precise(fn, flush, reps, label, spin_ms, options.min_reps, options.precision, cost_ms)
    return samples, f"{options.l2}-L2 events", reps


def _host_bound(host_samples: list[float], samples: list[float]) -> list[str]:
    """A note when enqueueing a call takes longer than the GPU runs it."""
    if host_samples and statistics.median(host_samples) > statistics.median(samples):
        return [
            f"host time per call ({format_ms(statistics.median(host_samples))}) exceeds GPU time "
            f"({format_ms(statistics.median(samples))}): back-to-back calls are host-bound; see cuda_graph=True"
        ]
    return []


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


@collector.measuring()
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


@collector.measuring()
def _time_graph_replays(
    fn: Callable[[], Any], label: str, options: BenchOptions, est: float
) -> tuple[list[float], str, int]:
    """Replays of a CUDA graph of many calls, each timed with events; per-call samples, the mode, the replays."""
    import torch

    inner = options.calls_per_graph or max(1, min(1000, int(2.0 / max(est, 1e-4))))
    graph = CapturedGraph(fn, calls=inner, label=label)
    graph.replay()
    torch.cuda.synchronize()
    reps = int(min(max(options.budget_ms / max(est * inner, 1e-4), options.min_reps), options.max_reps))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / inner for s, e in zip(starts, ends)], f"cuda-graph x{inner}", reps
