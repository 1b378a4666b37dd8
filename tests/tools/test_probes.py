"""The host-time probes' pure parts: sysfs CPU lists, and within- against between-process spread."""

from __future__ import annotations

import pytest
from numa_probe import _cpulist
from process_spread_probe import summarize


def test_a_sysfs_cpu_list_expands_ranges_and_singles():
    assert _cpulist("0-3,8-9,12\n") == [0, 1, 2, 3, 8, 9, 12]


def test_two_process_levels_show_as_between_process_spread_not_within():
    fast = [[6.0, 6.1, 6.0, 5.9, 6.05]] * 3
    slow = [[9.0, 9.1, 8.9, 9.0, 9.05]] * 2
    s = summarize(fast + slow)
    assert s["processes"] == 5 and s["within_process_rel_iqr_median"] < 0.03
    assert s["between_process_max_over_min"] == pytest.approx(9.0 / 6.0)
    assert s["median_us"] == pytest.approx(6.0)
