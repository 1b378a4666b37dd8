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


def test_the_recordings_up_to_a_time_are_those_a_filter_keeps(committed):
    _, recs = committed
    stamps = [str(e.get("recorded_utc", "")) for e in recs]
    every = sorted(set(stamps))
    for stamp in [*every[::25], every[-1], "0000", "9999"]:
        for upto in (True, False):
            kept = [
                e
                for e in recs
                if (str(e.get("recorded_utc", "")) <= stamp if upto else str(e.get("recorded_utc", "")) < stamp)
            ]
            assert drift_bands._made_until(recs, stamps, stamp, upto) == kept  # bisection: they are in order
            shuffled = recs[::-1]
            back = [str(e.get("recorded_utc", "")) for e in shuffled]
            assert drift_bands._made_until(shuffled, back, stamp, upto) == kept[::-1]  # out of order: each tested


def test_ratio_changes_by_class_classes_every_pair_as_pair_class_does():
    step = {"a gpu": 0.01, "b wall-clock loop": -0.02, "c gpu": 0.03, "d": 0.0}
    classes = {"a gpu": "gpu", "b wall-clock loop": "host", "c gpu": "gpu"}
    items = sorted(step.items())
    expected = [
        (drift_bands._pair_class(a, b, classes), abs(x - y))
        for i, (a, x) in enumerate(items)
        for b, y in items[i + 1 :]
    ]
    assert drift_bands._ratio_changes_by_class([step], classes) == expected
    assert ("gpu", abs(0.01 - 0.03)) in expected and any(c == "host" for c, _ in expected)


@pytest.mark.parametrize(
    "n", [0, 1, 7, drift_bands.SELECT_FROM - 1, drift_bands.SELECT_FROM, 3 * drift_bands.SELECT_FROM]
)
def test_the_quantile_of_several_sorted_runs_is_the_one_of_their_values_together(n):
    import random

    rng = random.Random(n)
    values = [rng.choice([0.0, 0.5, 1.0]) if rng.random() < 0.3 else rng.random() for _ in range(n)]
    cuts = sorted(rng.sample(range(n + 1), min(4, n + 1)))
    parts = [{"r": sorted(values[a:b])} for a, b in zip([0, *cuts], [*cuts, n])]
    for q in (0.0, drift_bands.RATIO_FLOOR_QUANTILE, drift_bands.RATIO_QUANTILE, 1.0):
        got = drift_bands._quantile_of_runs(parts, "r", q)
        assert got == drift_bands._quantile_of(values, q) and type(got) is float
        assert drift_bands._quantile_of_runs(parts, "r", q) == got  # again, from the arrays the parts keep


def test_values_with_a_nan_are_sorted_as_before():
    nan = float("nan")
    parts = [{"r": [0.1] * drift_bands.SELECT_FROM}, {"r": [nan, 0.3, 0.2]}]
    together = parts[0]["r"] + parts[1]["r"]
    assert drift_bands._quantile_of_runs(parts, "r", 0.9) == drift_bands._quantile_of(together, 0.9)


def test_the_sites_ratio_drift_is_the_quantile_of_every_pages_ratio_changes_together(committed):
    _, recs = committed
    parts = [drift_bands._example_drift(e) for e in history.by_example(recs).values()]
    every = [v for p in parts if p["summary"] is not None for v in p["ratio_changes"]]
    assert len(every) >= drift_bands.SELECT_FROM  # the selection, not the small case's sort
    assert drift_bands.drift(recs)["global_ratio_p90"] == drift_bands._quantile_of(every, drift_bands.RATIO_QUANTILE)


def test_the_backtest_takes_the_drift_of_each_number_of_recordings_once(committed, monkeypatch):
    """Times with the same recordings made up to them (one side's "up to", the other's "before") share it."""
    site, recs = committed
    expected = drift_bands.headline_backtest(site, recs)
    sizes = []
    drift = drift_bands._drift

    def counted(made, memo=None):
        sizes.append(len(made))
        return drift(made, memo)

    monkeypatch.setattr(drift_bands, "_drift", counted)
    assert drift_bands.headline_backtest(site, recs) == expected
    asked = {
        (str(e.get("recorded_utc", "")), upto)
        for page, entries in history.by_example(site).items()
        for a, b in zip(entries, entries[1:])
        for e, upto in ((a, True), (b, False))
    }
    assert len(sizes) == len(set(sizes)) < len(asked)
