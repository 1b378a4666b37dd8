"""The headline backtest reuses each example's drift between recording times: the same result, faster.

The results page runs :func:`gallery_build.drift_bands.headline_backtest` over the whole history,
which takes :func:`~gallery_build.drift_bands.drift` of the recordings made up to each recording
(hundreds of them). Each example's part is computed once per set of its recordings; these tests
check, on the committed history, that nothing it returns changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gallery_build import drift_bands, history

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"


@pytest.fixture(scope="module")
def committed():
    return history.load(DATA / "history.jsonl"), drift_bands.recordings(DATA)


@pytest.mark.parametrize("latest_only", [True, False])
def test_the_backtest_with_reused_drift_equals_the_one_computed_afresh(committed, latest_only):
    site, recs = committed
    reused = drift_bands.headline_backtest(site, recs, latest_only=latest_only)
    assert reused == drift_bands.headline_backtest(site, recs, latest_only=latest_only, memo=False)
    assert reused["pairs"] > 0 and reused["headlines"] > 0


def test_drift_with_a_memo_equals_drift_at_the_recording_times(committed):
    _, recs = committed
    memo: dict = {}
    every = sorted({str(e.get("recorded_utc", "")) for e in recs})
    stamps = [*every[::8], every[-1]]  # a sample in order (all of them: as slow as the uncached backtest)
    for stamp in stamps:
        made = [e for e in recs if str(e.get("recorded_utc", "")) <= stamp]
        assert drift_bands._drift(made, memo) == drift_bands.drift(made), stamp
    assert len(memo) < len(stamps) * len(history.by_example(recs))  # parts were reused, not all recomputed


def test_a_memoised_part_is_not_shared_with_the_result():
    entry = {
        "example": "plot_x",
        "gpu": "NVIDIA H200",
        "measurements": {"m": {"median_ms": 1.0, "q1_ms": 0.99, "q3_ms": 1.01}},
        "headlines": [],
    }
    later = {**entry, "measurements": {"m": {"median_ms": 1.1, "q1_ms": 1.09, "q3_ms": 1.11}}}
    memo: dict = {}
    first = drift_bands._drift([entry, later], memo)
    first["examples"]["plot_x"]["p95"] = 99.0  # a caller changing its result leaves the memo alone
    assert drift_bands._drift([entry, later], memo) == drift_bands.drift([entry, later])
