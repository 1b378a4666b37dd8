"""host_levels: a host-bound number measured in several fresh processes, their checks judged here."""

from __future__ import annotations

import os

import pytest

from cudnn_guide import collector
from cudnn_guide.errors import CheckFailedError
from cudnn_guide.report import records
from cudnn_guide.studies import host_levels


def _checked_pid(passed):
    check = {
        "name": "y",
        "dtype": "bfloat16",
        "rel_error": 2e-3 if passed else 0.5,
        "tolerance": 1.6e-2,
        "nan_count": 0,
        "numel": 8,
        "passed": passed,
    }
    return {"pid": os.getpid(), "check": check}


def test_each_run_is_a_new_process_and_its_check_joins_the_record():
    records.begin()
    try:
        runs = host_levels.in_fresh_processes(_checked_pid, True, processes=2)
        kept = records.page().checks
    finally:
        collector.stop()
    pids = {r["pid"] for r in runs}
    assert len(pids) == 2 and os.getpid() not in pids
    assert [c.name for c in kept] == ["y (fresh process 1)", "y (fresh process 2)"]


def test_a_failed_check_in_a_process_stops_the_page_and_one_process_is_no_range():
    with pytest.raises(CheckFailedError):
        host_levels.in_fresh_processes(_checked_pid, False, processes=2)
    with pytest.raises(ValueError, match="at least 2 processes"):
        host_levels.in_fresh_processes(_checked_pid, True, processes=1)


@pytest.mark.gpu
def test_replay_beats_a_host_bound_loop_in_a_fresh_process():
    (run,) = host_levels.in_fresh_processes(host_levels.loop_and_replay, 64, processes=2)[:1]
    assert run["check"]["passed"] and run["speedup"] > 1.5 and run["eager_us"] > run["replay_us"] > 0


def test_levels_split_a_bimodal_host_cost_and_keep_each_range():
    lv = host_levels.levels([13.2, 20.6, 13.1, 12.96, 13.8])
    assert [x["n"] for x in lv] == [4, 1]
    assert lv[0]["low"] == 12.96 and lv[0]["high"] == 13.8 and lv[1]["value"] == 20.6
    assert lv[0]["value"] == (13.1 + 13.2) / 2


def test_levels_of_close_values_are_one_and_bad_input_is_refused():
    assert len(host_levels.levels([10.0, 11.0, 12.0, 13.0])) == 1
    assert len(host_levels.levels([10.0, 11.0], gap=1.05)) == 2
    for bad, kwargs in (([], {}), ([1.0, 0.0], {}), ([1.0], {"gap": 1.0})):
        with pytest.raises(ValueError):
            host_levels.levels(bad, **kwargs)
