"""The warm-up probe's pure parts: its rules, their rotation, and the summary against the full warm-up."""

from __future__ import annotations

import pytest
from warmup_probe import RULES, rotated, rule_settings, summarize


def test_each_rule_sets_compares_switch_and_call_count():
    assert [rule_settings(r) for r in RULES] == [(False, 2), (True, 2), (True, 1)]
    assert [rotated(RULES, rep)[0] for rep in range(3)] == list(RULES)  # none always runs first


def _row(rule, rep, wall, value, low, high, verdict="faster"):
    return {
        "rule": rule,
        "rep": rep,
        "wall_s": wall,
        "timed_s": 0.3 * wall,
        "value": value,
        "low": low,
        "high": high,
        "verdict": verdict,
    }


def test_the_summary_gives_the_saving_and_whether_the_speed_ups_agree():
    rows = [_row("full", rep, 2.0, 1.10, 1.08, 1.12) for rep in range(5)]
    rows += [_row("rewarm 2", rep, 1.0 + 0.01 * rep, 1.11, 1.09, 1.13) for rep in range(5)]
    rows += [_row("rewarm 1", rep, 0.8, 1.30, 1.28, 1.32, "faster") for rep in range(5)]
    s = summarize(rows)
    assert s["full"]["wall_s_median"] == 2.0 and "wall_saving" not in s["full"]
    new = s["rewarm 2"]
    assert new["wall_saving"]["value"] == pytest.approx(2.0 / 1.02)
    assert new["wall_saving"]["low"] <= new["wall_saving"]["value"] <= new["wall_saving"]["high"]
    assert new["overlaps_baseline"] == [5, 5] and new["same_verdict"]
    assert s["rewarm 1"]["overlaps_baseline"] == [0, 5]  # a shifted speed-up shows, though its verdict is the same
    assert s["rewarm 1"]["timed_share_median"] == pytest.approx(0.3)
