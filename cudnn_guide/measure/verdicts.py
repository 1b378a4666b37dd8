"""From paired ratios to a verdict: a bootstrap interval of the median, and ``faster``,
``slower`` or ``tie`` against a measured tie band.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

from cudnn_guide.errors import BenchmarkError

MIN_ROUNDS = 5
"""Fewer rounds than this give no usable interval: :func:`~cudnn_guide.measure.compare.compare` refuses them."""

__all__ = ["bootstrap_median_ci", "judge", "MIN_TIE_BAND", "RESAMPLES"]
MIN_TIE_BAND = 0.01
"""The tie band is never narrower than ±1%, whatever the same-code ratio showed."""
RESAMPLES = 2000
"""Bootstrap resamples behind every interval."""


def bootstrap_median_ci(
    values: Sequence[float], confidence: float = 0.95, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median of ``values``.

    Parameters
    ----------
    values
        Per-round values (at least :data:`MIN_ROUNDS`).
    confidence
        Coverage of the interval.
    resamples
        Bootstrap resamples.
    seed
        Seed of the resampling (the same values always give the same interval).

    Returns
    -------
    tuple[float, float]
        ``(low, high)``, widened where needed to contain the sample median itself.

    Raises
    ------
    BenchmarkError
        Fewer than :data:`MIN_ROUNDS` values.

    Example
    -------
    >>> bootstrap_median_ci([1.00, 1.02, 0.99, 1.01, 1.00, 1.03, 0.98])
    (0.99, 1.02)
    """
    values = list(values)
    if len(values) < MIN_ROUNDS:
        raise BenchmarkError(
            f"an interval needs at least {MIN_ROUNDS} rounds, got {len(values)}: raise rounds= in compare()"
        )
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    lo, hi = medians[int(tail * (resamples - 1))], medians[int(round((1 - tail) * (resamples - 1)))]
    point = statistics.median(values)
    return min(lo, point), max(hi, point)  # a percentile interval can miss its own estimate: widen to hold it


Verdict = str
"""``"faster"``, ``"slower"`` or ``"tie"``."""


def judge(low: float, high: float, band: float) -> Verdict:
    """The verdict of a speed-up interval ``[low, high]`` (baseline time / contender time) against ``1 ± band``.

    Parameters
    ----------
    low
        The interval's lower end.
    high
        The interval's upper end.
    band
        The tie band, as a fraction.

    Returns
    -------
    Verdict
        ``faster`` if the whole interval is above ``1 + band``, ``slower`` if below ``1 − band``, else ``tie``.

    Example
    -------
    >>> judge(1.10, 1.20, 0.02), judge(0.97, 1.05, 0.02), judge(0.80, 0.95, 0.02)
    ('faster', 'tie', 'slower')
    """
    if low > 1 + band:
        return "faster"
    if high < 1 - band:
        return "slower"
    return "tie"
