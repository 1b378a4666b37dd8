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

import dataclasses
import math
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import clocks
from .errors import BenchmarkError

__all__ = [
    "estimate",
    "DATASHEET",
    "datasheet_peaks",
    "Measurement",
    "benchmark",
    "median_ci",
    "l2_flush_buffer",
    "flush_kernel_names",
    "Ceilings",
    "measure_ceilings",
    "measure_read_bandwidth",
    "measure_launch_overhead",
    "launch_cost",
    "kernel_samples",
    "spin_for",
    "ProfiledKernels",
    "profile_kernels",
]

L2_MODES = ("hot", "cold")

TIMING_METHOD = 2
"""Version of how :func:`benchmark` times a call, kept in every measurement it makes, so the
history never judges a change of method as a change of speed. 1: L2 flush, then spin, then the
call (recordings up to commit 1a32229); 2: spin, then flush, then the call (since 5a62eb0)."""


def _quantile(sorted_samples: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted samples."""
    if not sorted_samples:
        return float("nan")
    pos = (len(sorted_samples) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median, from order statistics.

    With ``n`` sorted samples the interval runs from the ``j``-th to the ``k``-th, where
    ``j = ⌊(n − z√n)/2⌋`` and ``k = ⌈1 + (n + z√n)/2⌉`` (1-based, clamped to ``[1, n]``) and ``z``
    is the normal quantile of ``confidence``. It assumes independent samples, nothing about their
    distribution, so a skewed or two-moded timing does not fool it.

    Parameters
    ----------
    samples
        The timings (any order).
    confidence
        0.95 or 0.99.

    Returns
    -------
    tuple[float, float]
        The lower and upper bound.

    Raises
    ------
    ValueError
        No samples, or an unsupported confidence.

    Example
    -------
    >>> lo, hi = median_ci(m.samples_ms)
    >>> print(f"median {m.median_ms:.4f} ms, 95% CI [{lo:.4f}, {hi:.4f}]")
    """
    z = {0.95: 1.959964, 0.99: 2.575829}.get(confidence)
    if z is None:
        raise ValueError(f"confidence must be 0.95 or 0.99, got {confidence}")
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        raise ValueError("median_ci needs at least one sample")
    j = max(1, math.floor((n - z * math.sqrt(n)) / 2))
    k = min(n, math.ceil(1 + (n + z * math.sqrt(n)) / 2))
    return xs[j - 1], xs[k - 1]


def estimate(
    median_ms: float, low_ms: float, high_ms: float, *, unit: str = "µs", work: float | None = None, scale: float = 1.0
) -> dict[str, float]:
    """A time and its interval, in milliseconds, as a headline in ``unit``: ``{"value", "low", "high"}``.

    Parameters
    ----------
    median_ms
        The time.
    low_ms
        Its interval's lower end.
    high_ms
        Its interval's upper end.
    unit
        ``µs`` or ``ms`` (times), ``TFLOP/s`` or ``GB/s`` (rates: ``work`` per call, the interval inverts).
    work
        FLOPs or bytes per call, for a rate.
    scale
        A factor applied last (``100 / ceiling`` for a percentage of a ceiling).

    Returns
    -------
    dict[str, float]
        Keywords for :meth:`~cudnn_guide.records.Record.headline`.

    Raises
    ------
    BenchmarkError
        A non-positive time (it cannot be measured), or a rate without its work.

    Example
    -------
    >>> estimate(0.080, 0.079, 0.082, unit="TFLOP/s", work=8e10)
    {'value': 1000.0, 'low': 975.6097560975609, 'high': 1012.6582278481012}
    """
    if not 0 < low_ms <= median_ms <= high_ms:
        raise BenchmarkError(
            f"estimate: {low_ms:g} ≤ {median_ms:g} ≤ {high_ms:g} ms is not a positive time with its "
            "interval (too short to time?)"
        )
    if unit in ("µs", "ms"):
        f = 1e3 if unit == "µs" else 1.0
        return {"value": median_ms * f * scale, "low": low_ms * f * scale, "high": high_ms * f * scale}
    if unit in ("TFLOP/s", "GB/s"):
        if not work:
            raise BenchmarkError(f"estimate: a rate in {unit} needs the work per call")
        per = 1e12 if unit == "TFLOP/s" else 1e9
        rate = lambda ms: work / (ms * 1e-3) / per * scale
        return {"value": rate(median_ms), "low": rate(high_ms), "high": rate(low_ms)}
    raise ValueError(f"estimate: unknown unit {unit!r}")


@dataclasses.dataclass
class Measurement:
    """One timed callable: raw samples and everything derived from them.

    ``samples_ms`` holds one entry per timed call (in CUDA-graph mode, one per replay divided by
    the calls it holds). Derived rates use the median.

    Example
    -------
    >>> m = benchmark(launch, label='fused', l2='cold', flops=problem.flops)
    >>> print(m.median_ms, m.iqr_ms, m.tflops, m.percent_of(measure_ceilings()))
    """

    label: str
    samples_ms: list[float]
    mode: str
    flops: float | None = None
    bytes: float | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)
    host_samples_ms: list[float] = dataclasses.field(default_factory=list)
    """Host (CPU) time to enqueue each timed call, when measured."""
    clocks: dict[str, Any] = dataclasses.field(default_factory=dict)
    """How the GPU's clocks looked around the run (:mod:`cudnn_guide.clocks`); empty if not read."""
    launch_cost_ms: float = 0.0
    """The per-call launch cost subtracted from each event sample (0 when nothing was subtracted):
    ``samples_ms`` plus it are the raw event times."""
    timing_method: int | None = None
    """:data:`TIMING_METHOD` of the harness that made it (``None``: not recorded)."""

    # -- statistics ---------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def quantile(self, q: float) -> float:
        return _quantile(sorted(self.samples_ms), q)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def q1_ms(self) -> float:
        return self.quantile(0.25)

    @property
    def q3_ms(self) -> float:
        return self.quantile(0.75)

    @property
    def iqr_ms(self) -> float:
        return self.q3_ms - self.q1_ms

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def event_median_ms(self) -> float:
        """Median of the raw event times: :attr:`median_ms` plus the subtracted launch cost."""
        return self.median_ms + self.launch_cost_ms

    @property
    def host_median_ms(self) -> float | None:
        """Median host time to enqueue one call (``None`` when not measured)."""
        return statistics.median(self.host_samples_ms) if self.host_samples_ms else None

    @property
    def rel_iqr(self) -> float:
        """IQR / median: the relative spread."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else float("inf")

    @property
    def median_ci_ms(self) -> tuple[float, float]:
        """95% confidence interval of the median (:func:`median_ci`)."""
        return median_ci(self.samples_ms)

    @property
    def median_ci_rel(self) -> float:
        """Half the width of :attr:`median_ci_ms`, relative to the median: how precisely the median is known."""
        lo, hi = self.median_ci_ms
        return (hi - lo) / 2 / self.median_ms if self.median_ms > 0 else float("inf")

    # -- derived rates ------------------------------------------------------------------------
    @property
    def tflops(self) -> float | None:
        return None if self.flops is None else self.flops / (self.median_ms * 1e-3) / 1e12

    @property
    def gbps(self) -> float | None:
        return None if self.bytes is None else self.bytes / (self.median_ms * 1e-3) / 1e9

    def estimate(self, unit: str = "µs", scale: float = 1.0) -> dict[str, float]:
        """The median in ``unit`` (``µs``, ``ms``, ``TFLOP/s``, ``GB/s``) with its 95% interval (:func:`estimate`)."""
        return estimate(
            self.median_ms,
            *self.median_ci_ms,
            unit=unit,
            work=self.flops if unit == "TFLOP/s" else self.bytes,
            scale=scale,
        )

    def percent_of(self, ceilings: Ceilings) -> dict[str, float]:
        """Median rate as a percentage of the measured ceilings (compute and bandwidth)."""
        out = {}
        if self.tflops is not None:
            out["compute"] = 100.0 * self.tflops / ceilings.bf16_tflops
        if self.gbps is not None:
            out["bandwidth"] = 100.0 * self.gbps / ceilings.copy_gbps
        return out

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        d = {
            "label": self.label,
            "mode": self.mode,
            "params": self.params,
            "unit": "ms",
            "n": self.n,
            "median_ms": self.median_ms,
            "median_ci_ms": list(self.median_ci_ms),
            "q1_ms": self.q1_ms,
            "q3_ms": self.q3_ms,
            "p10_ms": self.quantile(0.1),
            "p90_ms": self.quantile(0.9),
            "min_ms": self.min_ms,
            "flops": self.flops,
            "bytes": self.bytes,
            "tflops": self.tflops,
            "gbps": self.gbps,
            "host_median_ms": self.host_median_ms,
            "warnings": list(self.warnings),
            "clocks": dict(self.clocks),
            "launch_cost_ms": self.launch_cost_ms,
            "timing_method": self.timing_method,
        }
        if samples:
            # 5 significant digits: finer than the ~0.5 µs resolution of CUDA events
            d["samples_ms"] = [float(f"{x:.5g}") for x in self.samples_ms]
            d["host_samples_ms"] = [float(f"{x:.4g}") for x in self.host_samples_ms]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measurement:
        return cls(
            d["label"],
            list(d["samples_ms"]),
            d["mode"],
            d.get("flops"),
            d.get("bytes"),
            dict(d.get("params", {})),
            list(d.get("warnings", [])),
            list(d.get("host_samples_ms", [])),
            dict(d.get("clocks", {})),
            float(d.get("launch_cost_ms") or 0.0),
            d.get("timing_method"),
        )

    def __str__(self) -> str:
        parts = [
            f"{self.label}: median {_fmt_ms(self.median_ms)} ±{100 * self.median_ci_rel:.1f}% "
            f"(IQR {_fmt_ms(self.iqr_ms)}, n={self.n}, {self.mode})"
        ]
        if self.tflops is not None:
            parts.append(f"{self.tflops:.1f} TFLOP/s")
        if self.gbps is not None:
            parts.append(f"{self.gbps:.0f} GB/s")
        if self.launch_cost_ms:
            parts.append(f"events {_fmt_ms(self.event_median_ms)} − {_fmt_ms(self.launch_cost_ms)} launch cost")
        if self.host_median_ms is not None:
            parts.append(f"host {_fmt_ms(self.host_median_ms)}/call")
        text = " · ".join(parts)
        for w in self.warnings:
            text += f"\n  warning: {w}"
        return text


def _fmt_ms(ms: float) -> str:
    if ms >= 1:
        return f"{ms:.3f} ms"
    return f"{ms * 1e3:.2f} µs"


def _spread_warnings(samples: list[float]) -> list[str]:
    warnings = []
    s = sorted(samples)
    med = statistics.median(s)
    iqr = _quantile(s, 0.75) - _quantile(s, 0.25)
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


def _call(fn: Callable[[], Any], label: str) -> Any:
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

    out = _call(fn, label)
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
            _call(fn, label)
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
    notes = _spread_warnings(samples) + notes + clocks.throttle_warnings(clock_info)
    if host_samples and statistics.median(host_samples) > statistics.median(samples):
        notes.append(
            f"host time per call ({_fmt_ms(statistics.median(host_samples))}) exceeds GPU time "
            f"({_fmt_ms(statistics.median(samples))}): back-to-back calls are host-bound; see cuda_graph=True"
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
                f"too short to time per call: the launch cost ({_fmt_ms(cost_ms)}) is "
                f"{100 * cost_ms / event_median:.0f}% of the event time ({_fmt_ms(event_median)}), so subtracting it "
                "could give an impossible (non-positive) time; the raw event times are reported, an upper bound on "
                "the kernel time; time it with cuda_graph=True"
            ],
        )
    if cost_ms > LAUNCH_COST_WARN_FRACTION * event_median:
        notes.append(
            f"the launch cost ({_fmt_ms(cost_ms)}) is {100 * cost_ms / event_median:.0f}% of this call's event "
            f"time ({_fmt_ms(event_median)}): its kernel time is known only to a fraction of a microsecond; "
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


def _spin(ms: float) -> None:
    """Keep the GPU busy for about ``ms`` milliseconds (a calibrated ``torch.cuda._sleep``)."""
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
        _spin(spin_ms)
        if flush is not None:
            flush.zero_()
        s.record()
        _call(fn, label)
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
        _call(fn, label)
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


# ---------------------------------------------------------------------------------------------
# Ceilings: what this GPU can do at best, measured rather than quoted
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """Measured ceilings of this GPU, the roofline every page compares against.

    Example
    -------
    >>> c = measure_ceilings()
    >>> print(c.copy_gbps, c.bf16_tflops)
    """

    copy_gbps: float
    """Device-to-device copy, bytes read plus written per second (GB/s)."""
    bf16_tflops: float
    """Dense bf16 matmul, TFLOP/s: the best of the measured sizes."""
    copy: Measurement
    matmul: Measurement
    peak_bf16_tflops: float | None = None
    """The datasheet's dense bf16 peak (:data:`DATASHEET`), ``None`` for a GPU not in it."""
    peak_hbm_gbps: float | None = None
    """The datasheet's memory bandwidth, GB/s."""

    def floor_ms(self, flops: float, bytes: float) -> float:
        """The shortest time any implementation could take: work at the datasheet peaks (measured
        ceilings where the GPU is not in :data:`DATASHEET`). No measurement can beat a datasheet floor;
        a measured ceiling moves with the clock and can be beaten."""
        tflops = self.peak_bf16_tflops or self.bf16_tflops
        gbps = self.peak_hbm_gbps or self.copy_gbps
        return max(flops / (tflops * 1e12), bytes / (gbps * 1e9)) * 1e3

    def to_dict(self) -> dict[str, Any]:
        return {
            "copy_gbps": self.copy_gbps,
            "bf16_tflops": self.bf16_tflops,
            "peak_bf16_tflops": self.peak_bf16_tflops,
            "peak_hbm_gbps": self.peak_hbm_gbps,
            "matmul_sm_mhz_end": self.matmul.clocks.get("sm_mhz_end"),
            "copy": self.copy.to_dict(),
            "matmul": self.matmul.to_dict(),
        }


_CEILINGS: Ceilings | None = None


def reset_caches() -> None:
    """Forget this process's measured ceilings, launch-cost calibration and L2 flush buffer.

    Example
    -------
    >>> reset_caches()
    """
    global _CEILINGS
    _CEILINGS = None
    _FLUSH.clear()
    _LAUNCH_COST.clear()


DATASHEET: dict[str, tuple[float, float]] = {
    # substring of torch's device name: (dense bf16 tensor-core TFLOP/s, HBM GB/s), from NVIDIA's datasheets
    "H200": (989.4, 4800.0),
    "H100 80GB HBM3": (989.4, 3350.0),
    "A100-SXM4-80GB": (312.0, 2039.0),
}
"""Datasheet peaks per GPU: the floor no measurement can beat (:meth:`Ceilings.floor_ms`)."""


def datasheet_peaks(gpu_name: str) -> tuple[float | None, float | None]:
    """``(bf16 TFLOP/s, HBM GB/s)`` of ``gpu_name`` from :data:`DATASHEET`, or ``(None, None)``.

    Parameters
    ----------
    gpu_name
        torch's device name.

    Returns
    -------
    tuple[float | None, float | None]
        The dense bf16 peak and the memory bandwidth.

    Example
    -------
    >>> datasheet_peaks("NVIDIA H200")
    (989.4, 4800.0)
    """
    for key, peaks in DATASHEET.items():
        if key in gpu_name:
            return peaks
    return None, None


def measure_ceilings(
    copy_mib: int = 2048, matmul_sizes: tuple[int, ...] = (4096, 6144, 8192), refresh: bool = False
) -> Ceilings:
    """Measure device-copy bandwidth and bf16 matmul throughput once per process.

    Copies a ``copy_mib`` buffer (counting bytes read + written), and multiplies random square
    bf16 matrices of each size in ``matmul_sizes`` with ``torch.matmul`` (cuBLAS), all with a
    cold L2. The compute ceiling is the best of those sizes: a ceiling is what the GPU reaches at
    its best on dense, random data.

    Parameters
    ----------
    copy_mib
        Size of the copied buffer, MiB.
    matmul_sizes
        Square matmul sizes to try; the best counts.
    refresh
        Measure again even if this process already did.

    Returns
    -------
    Ceilings
        Bandwidth and compute ceilings, with their measurements.

    Example
    -------
    >>> c = measure_ceilings()
    >>> floor_ms = max(flops / (c.bf16_tflops * 1e12), nbytes / (c.copy_gbps * 1e9)) * 1e3
    """
    import torch

    global _CEILINGS
    if _CEILINGS is not None and not refresh:
        return _CEILINGS
    n_bytes = copy_mib * 2**20
    src = torch.randn(n_bytes // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    copy = benchmark(lambda: dst.copy_(src), label="device copy", l2="cold", bytes=2 * n_bytes, budget_ms=300)
    src = dst = None
    runs = []
    for n in matmul_sizes:
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        runs.append(
            benchmark(
                lambda a=a, b=b, c=c: torch.matmul(a, b, out=c),
                label=f"bf16 matmul {n}³",
                l2="cold",
                flops=2 * n**3,
                budget_ms=300,
            )
        )
    a = b = c = None
    mm = max(runs, key=lambda m: m.tflops)
    torch.cuda.empty_cache()
    _CEILINGS = Ceilings(
        copy.gbps or 0.0,
        mm.tflops or 0.0,
        copy,
        mm,
        *datasheet_peaks(torch.cuda.get_device_name(torch.cuda.current_device())),
    )
    return _CEILINGS


def measure_read_bandwidth(mib: int = 2048) -> Measurement:
    """Read-only bandwidth: a sum over a ``mib`` buffer (cold L2), counting the bytes read.

    The copy ceiling counts bytes read *plus* written; a kernel that only reads (attention
    decode streaming its KV cache) can exceed it slightly, so read-only work is compared with
    this instead.

    Parameters
    ----------
    mib
        Buffer size, MiB.

    Returns
    -------
    Measurement
        The sum's timing, with ``gbps`` the read rate.

    Example
    -------
    >>> read = measure_read_bandwidth()
    >>> print(f"{read.gbps:.0f} GB/s read")
    """
    import torch

    src = torch.randn(mib * 2**20 // 4, device="cuda", dtype=torch.float32)
    out = torch.empty((), device="cuda", dtype=torch.float32)
    m = benchmark(
        lambda: torch.sum(src, dim=0, out=out),
        label="device read (sum)",
        l2="cold",
        bytes=src.numel() * 4,
        budget_ms=300,
        params={"impl": "device read (sum)", "size_mib": mib},
    )
    src = out = None  # release the buffer before returning its cache
    torch.cuda.empty_cache()
    return m


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


# ---------------------------------------------------------------------------------------------
# An independent clock: the profiler's own kernel durations
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProfiledKernels:
    """Per-call GPU kernel time seen by the PyTorch profiler (CUPTI), independent of CUDA events.

    Example
    -------
    >>> prof = profile_kernels(launch)
    >>> print(prof.per_call_ms, prof.top(3))
    """

    per_call_ms: float
    calls: int
    kernels: dict[str, float]
    """Kernel (or memset/copy) name → total milliseconds across all profiled calls."""

    def top(self, k: int = 3) -> list[tuple[str, float]]:
        return sorted(self.kernels.items(), key=lambda kv: -kv[1])[:k]


def flush_kernel_names(flush: Any) -> set[str]:
    """The names of the GPU kernels that flushing L2 with ``flush.zero_()`` launches.

    Profiles one flush, so traces of timed runs can leave the flush out.

    Parameters
    ----------
    flush
        The buffer from :func:`l2_flush_buffer`.

    Returns
    -------
    set[str]
        Kernel names.

    Example
    -------
    >>> skip = flush_kernel_names(l2_flush_buffer())
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            flush.zero_()
            torch.cuda.synchronize()
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


def profile_kernels(fn: Callable[[], Any], *, calls: int = 50, l2: str = "cold", label: str = "fn") -> ProfiledKernels:
    """Run ``fn`` ``calls`` times under ``torch.profiler`` and sum the GPU work it launched.

    The sum covers the call's kernels and the memsets or copies it issues itself. With
    ``l2="cold"`` the L2 flush runs between calls as in :func:`benchmark`, and its own kernel is
    excluded from the sum. This is a different clock from CUDA events (CUPTI kernel
    timestamps, no launch gaps), which makes it a cross-check of :func:`benchmark`.

    Parameters
    ----------
    fn
        Zero-argument callable that launches the work.
    calls
        Profiled calls.
    l2
        ``"cold"`` or ``"hot"``.
    label
        Name in errors.

    Returns
    -------
    ProfiledKernels
        Kernel time per call and per kernel name.

    Example
    -------
    >>> prof = profile_kernels(launch, calls=30, l2='cold')
    >>> print(f'{prof.per_call_ms * 1e3:.1f} µs per call in kernels')
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if l2 not in L2_MODES:
        raise ValueError(f"l2 must be one of {L2_MODES}, got {l2!r}")
    flush = l2_flush_buffer() if l2 == "cold" else None
    _call(fn, label)
    torch.cuda.synchronize()
    flush_names = flush_kernel_names(flush) if flush is not None else set()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                if flush is not None:
                    flush.zero_()
                _call(fn, label)
            torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for e in prof.events():
        # the call's own memsets and copies are part of its GPU work (only the flush is left out)
        if e.device_type != torch.autograd.DeviceType.CUDA or e.name in flush_names:
            continue
        dur_us = getattr(e, "device_time", None)
        if dur_us is None:
            dur_us = getattr(e, "cuda_time", 0.0)
        kernels[e.name] = kernels.get(e.name, 0.0) + dur_us / 1e3
    if not kernels:
        raise BenchmarkError(f"profile {label!r}: the profiler saw no CUDA kernels (is CUPTI available?)")
    return ProfiledKernels(sum(kernels.values()) / calls, calls, kernels)
