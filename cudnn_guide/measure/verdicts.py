"""From paired ratios to a verdict: a bootstrap interval of the median, and ``faster``,
``slower`` or ``tie`` against a measured tie band.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from typing import Any

from cudnn_guide.errors import BenchmarkError

MIN_ROUNDS = 5
"""Fewer rounds than this give no usable interval: :func:`~cudnn_guide.measure.compare.compare` refuses them."""

__all__ = ["bootstrap_median_ci", "judge", "MIN_TIE_BAND", "python_uniforms", "RESAMPLES"]
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
    medians = _resampled_medians(values, resamples, seed)
    tail = (1 - confidence) / 2
    lo, hi = medians[int(tail * (resamples - 1))], medians[int(round((1 - tail) * (resamples - 1)))]
    point = statistics.median(values)
    return min(lo, point), max(hi, point)  # a percentile interval can miss its own estimate: widen to hold it


def _resampled_medians(values: list[float], resamples: int, seed: int) -> list[float]:
    """The sorted medians of ``resamples`` resamples of ``values``, drawn as ``random.Random(seed).choices`` draws them.

    ``choices`` picks ``values[floor(random() * n)]``, one ``random()`` per pick, resample after
    resample. For finite floats (a comparison's ratios and differences) the same uniforms, drawn in
    the same order, index the values in one array, and NumPy takes the medians row by row (the mean
    of the middle two for an even count, as :func:`statistics.median`): the same medians (a ``-0.0``
    may come back as ``0.0``), without a Python median per resample, whose cost held the GPU's turn
    (1.4 s of a page's profile on the H200). Anything else (NaN, infinities, integers) takes the
    resample-by-resample path, whose ordering of NaN and whose exact integers NumPy does not share.

    The uniforms themselves come from NumPy's Mersenne Twister started in ``random.Random(seed)``'s
    state (:func:`python_uniforms`): the same numbers, bit for bit, without a Python call each (the
    bootstrap was 3-10% of three pages' comparisons in a profile on the H200, ``docs/data/compare_profile.json``).
    """
    n = len(values)
    if not all(isinstance(v, float) and math.isfinite(v) for v in values):
        rng = random.Random(seed)
        return sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    import numpy as np

    draws = python_uniforms(seed, resamples * n)
    picks = np.asarray(values, dtype=np.float64)[np.floor(draws * float(n)).astype(np.intp)]
    return np.sort(np.median(picks.reshape(resamples, n), axis=1)).tolist()


def python_uniforms(seed: int, count: int) -> Any:
    """The first ``count`` numbers ``random.Random(seed).random()`` returns, as a NumPy array, drawn by NumPy.

    Both are MT19937 with the same 53-bit doubles (two 32-bit outputs, ``(a >> 5) * 2**26 + (b >> 6)``
    over ``2**53``): NumPy's generator set to Python's state after seeding gives the same stream.

    Parameters
    ----------
    seed
        Any ``int`` that :class:`random.Random` takes.
    count
        How many.

    Returns
    -------
    numpy.ndarray
        ``float64``, in ``[0, 1)``.

    Example
    -------
    >>> r = random.Random(7)
    >>> python_uniforms(7, 3).tolist() == [r.random() for _ in range(3)]
    True
    """
    import numpy as np

    state = random.Random(seed).getstate()[1]  # 624 words and the position
    mt = np.random.RandomState()
    mt.set_state(("MT19937", np.asarray(state[:624], dtype=np.uint32), state[624]))
    return mt.random_sample(count)


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
