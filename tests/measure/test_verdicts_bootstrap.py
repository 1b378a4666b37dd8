"""The bootstrap interval: the same medians as resampling one resample at a time, whatever the values."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from cudnn_guide.measure import verdicts


def _one_at_a_time(values, confidence=0.95, resamples=verdicts.RESAMPLES, seed=0):
    """The definition: ``random.Random(seed).choices`` resample by resample, a median each, sorted."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    lo, hi = medians[int(tail * (resamples - 1))], medians[int(round((1 - tail) * (resamples - 1)))]
    point = statistics.median(values)
    return min(lo, point), max(hi, point)


@pytest.mark.parametrize("case", range(40))
def test_the_interval_is_the_resample_by_resample_one(case):
    rng = random.Random(case)
    n = rng.randint(verdicts.MIN_ROUNDS, 30)  # odd and even counts
    values = [rng.lognormvariate(0, 0.2) for _ in range(n)]
    if case % 4 == 1:
        values = [round(v, 2) for v in values]  # ties among the values
    if case % 4 == 2:
        values = [rng.randint(1, 4) for _ in range(n)]  # integers
    seed, confidence = case % 3, (0.95, 0.9, 0.99)[case % 3]
    assert verdicts.bootstrap_median_ci(values, confidence, seed=seed) == _one_at_a_time(values, confidence, seed=seed)


@pytest.mark.parametrize(
    "values",
    [
        [1.0, 1.1, math.nan, 0.9, 1.05, 1.0],  # NumPy's median of a row with NaN is NaN; statistics' is not
        [1.0, 1.1, math.inf, 0.9, 1.05, 1.0],
        [2**53 + 1] * 5,  # integers beyond a float's precision stay exact
    ],
)
def test_values_numpy_would_change_take_the_one_at_a_time_path(values):
    assert repr(verdicts.bootstrap_median_ci(values)) == repr(_one_at_a_time(values))  # NaN != NaN: compare reprs


def test_the_interval_returns_python_floats():
    lo, hi = verdicts.bootstrap_median_ci([1.0, 1.02, 0.99, 1.01, 1.0, 1.03, 0.98])
    assert type(lo) is float and type(hi) is float


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**32 - 1, 2**32, 2**70 + 3, -5])
def test_numpy_draws_the_uniforms_python_draws(seed):
    rng = random.Random(seed)
    expected = [rng.random() for _ in range(5000)]
    assert verdicts.python_uniforms(seed, 5000).tolist() == expected  # bit for bit, not approximately
