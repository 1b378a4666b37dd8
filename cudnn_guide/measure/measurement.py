"""A timing's samples and what follows from them: median, quantiles, a distribution-free interval, rates.

:class:`Measurement` is what :func:`cudnn_guide.measure.bench.benchmark` returns and what records keep;
:func:`median_ci` is the order-statistics interval of a median, and :func:`estimate` turns a
time and its interval into a headline in µs, ms, TFLOP/s or GB/s; :func:`per_second` turns a
headline in µs into items (tokens, images) per second.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from cudnn_guide.errors import BenchmarkError

__all__ = ["median_ci", "per_second", "Measurement"]

TIMING_METHOD = 2
"""Version of how :func:`~cudnn_guide.measure.bench.benchmark` times a call, kept in every measurement it makes, so the
history never judges a change of method as a change of speed. 1: L2 flush, then spin, then the
call (recordings up to commit 1a32229); 2: spin, then flush, then the call (since 5a62eb0)."""


def sorted_quantile(sorted_samples: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted samples (NaN for none).

    Parameters
    ----------
    sorted_samples
        Samples in ascending order.
    q
        The quantile, 0 to 1.

    Returns
    -------
    float
        The interpolated value.

    Example
    -------
    >>> sorted_quantile([0.0, 10.0], 0.25)
    2.5
    """
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
    >>> median_ci([float(x) for x in range(1, 101)])  # ranks 40 and 61 of 100
    (40.0, 61.0)
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
        Keywords for :meth:`~cudnn_guide.report.records.Record.headline`.

    Raises
    ------
    BenchmarkError
        A non-positive time (it cannot be measured), or a rate without its work.

    Example
    -------
    >>> {k: round(v, 1) for k, v in estimate(0.080, 0.079, 0.082, unit="TFLOP/s", work=8e10).items()}
    {'value': 1000.0, 'low': 975.6, 'high': 1012.7}
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


def per_second(est: Mapping[str, float], count: float) -> dict[str, float]:
    """A time per call in µs, with its interval, as ``count`` items per call per second.

    The interval inverts: the longest time gives the lowest rate.

    Parameters
    ----------
    est
        ``{"value", "low", "high"}`` in µs per call (e.g. :meth:`Comparison.estimate
        <cudnn_guide.measure.compare.Comparison.estimate>`).
    count
        Items per call (tokens of a training step, images of a batch).

    Returns
    -------
    dict[str, float]
        ``{"value", "low", "high"}`` in items per second.

    Example
    -------
    >>> per_second({"value": 2000.0, "low": 1000.0, "high": 4000.0}, 16384)
    {'value': 8192000.0, 'low': 4096000.0, 'high': 16384000.0}
    """
    return {
        "value": count / (est["value"] * 1e-6),
        "low": count / (est["high"] * 1e-6),
        "high": count / (est["low"] * 1e-6),
    }


@dataclasses.dataclass
class Measurement:
    """One timed callable: raw samples and everything derived from them.

    ``samples_ms`` holds one entry per timed call (in CUDA-graph mode, one per replay divided by
    the calls it holds). Derived rates use the median.

    Example
    -------
    >>> m = Measurement('fused', [0.080, 0.082, 0.081], 'cold-L2 events', flops=8e10)
    >>> round(m.median_ms, 3), round(m.tflops)
    (0.081, 988)
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
    """How the GPU's clocks looked around the run (:mod:`cudnn_guide.measure.clocks`); empty if not read."""
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
        return sorted_quantile(sorted(self.samples_ms), q)

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

    def percent_of(self, ceilings: Any) -> dict[str, float]:
        """Median rate as a percentage of the measured ceilings (compute and bandwidth): ``ceilings`` is a
        :class:`~cudnn_guide.measure.ceilings.Ceilings` (anything with ``bf16_tflops`` and ``copy_gbps``)."""
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
            f"{self.label}: median {format_ms(self.median_ms)} ±{100 * self.median_ci_rel:.1f}% "
            f"(IQR {format_ms(self.iqr_ms)}, n={self.n}, {self.mode})"
        ]
        if self.tflops is not None:
            parts.append(f"{self.tflops:.1f} TFLOP/s")
        if self.gbps is not None:
            parts.append(f"{self.gbps:.0f} GB/s")
        if self.launch_cost_ms:
            parts.append(f"events {format_ms(self.event_median_ms)} − {format_ms(self.launch_cost_ms)} launch cost")
        if self.host_median_ms is not None:
            parts.append(f"host {format_ms(self.host_median_ms)}/call")
        text = " · ".join(parts)
        for w in self.warnings:
            text += f"\n  warning: {w}"
        return text


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


def format_ms(ms: float) -> str:
    """A time in ms as text in the unit that reads best (``"12.30 µs"``, ``"4.560 ms"``).

    Parameters
    ----------
    ms
        Milliseconds.

    Returns
    -------
    str
        The text.

    Example
    -------
    >>> format_ms(0.0123)
    '12.30 µs'
    """
    if ms >= 1:
        return f"{ms:.3f} ms"
    return f"{ms * 1e3:.2f} µs"
