"""Timing primitives under :func:`~cudnn_guide.measure.bench.benchmark`: the L2 flush, the spin, calls
timed one at a time with events, and the launch cost those events add.

:func:`launch_cost` measures, once per process, what events around one call add to its kernel
time; :func:`kernel_samples` subtracts it, and says when a call is too short for that to be
trusted. :func:`spin` holds the GPU for a chosen time so the host can enqueue a whole call first.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from cudnn_guide import collector
from cudnn_guide.errors import BenchmarkError
from cudnn_guide.measure.measurement import format_ms

__all__ = ["call_checked", "l2_flush_buffer", "launch_cost", "spin_for", "spin", "measure_launch_overhead"]


def reset_caches() -> None:
    """Forget this process's launch-cost calibration, spin rate and L2 flush buffer.

    Example
    -------
    >>> reset_caches()
    """
    _FLUSH.clear()
    _LAUNCH_COST.clear()
    _CYCLES_PER_MS.clear()


L2_MODES = ("hot", "cold")


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


@collector.measuring()
def launch_cost(refresh: bool = False) -> dict[str, float]:
    """This process's launch cost on the current GPU (:func:`measure_launch_overhead`), measured once.

    :func:`~cudnn_guide.measure.bench.benchmark` subtracts ``overhead_us`` from every event sample.

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


@collector.measuring()
def _cycles_per_ms(dev: int) -> float:
    """``torch.cuda._sleep`` cycles per millisecond on device ``dev``, timed once with events."""
    import torch

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
    return rate


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
    rate = _CYCLES_PER_MS.get(dev) or _cycles_per_ms(dev)  # called per timed call: no block once calibrated
    torch.cuda._sleep(int(ms * rate))


@collector.measuring()
def time_each(fn: Callable[[], Any], flush: Any, reps: int, label: str, spin_ms: float) -> list[float]:
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


@collector.measuring()
def measure_launch_overhead(cycles: tuple[int, int] = (2_000, 100_000), reps: int = 300) -> dict[str, float]:
    """What a timed call's events add to its GPU work on this GPU: the per-launch cost.

    Times, exactly as :func:`~cudnn_guide.measure.bench.benchmark` times a cold call (spin kernel, L2 flush, start
    event, call, end event), kernels of two known lengths: ``torch.cuda._sleep(c)`` for ``c`` in
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

    from cudnn_guide.environment import require_gpu

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
        medians.append(statistics.median(time_each(sleep, flush, reps, "known-length kernel", spin_ms=0.05)))
    us_per_cycle = (medians[1] - medians[0]) * 1e3 / (long - short)
    return {
        "overhead_us": medians[0] * 1e3 - short * us_per_cycle,
        "short_events_us": medians[0] * 1e3,
        "long_events_us": medians[1] * 1e3,
        "cycles_per_us": 1 / us_per_cycle,
        "calls": float(reps),
    }
