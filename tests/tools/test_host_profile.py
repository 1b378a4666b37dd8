"""The host-time summary: every own second lands in one kind, and the kinds name what was profiled."""

from __future__ import annotations

import cProfile
import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import host_profile  # noqa: E402


def work():
    time.sleep(0.2)
    sum(i * i for i in range(200_000))


def test_the_kinds_add_up_to_the_profiled_time_and_a_sleep_is_waiting(tmp_path):
    profile = cProfile.Profile()
    profile.runcall(work)
    profile.dump_stats(tmp_path / "plot_99_probe.pstats")
    out = tmp_path / "summary.json"
    result = host_profile.main(tmp_path, out)
    page = result["pages"]["plot_99_probe"]
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert sum(page["by_kind"].values()) == pytest.approx(page["seconds"], abs=0.01)
    assert page["by_kind"]["waiting on threads and processes"] >= 0.19
    assert page["top_own_time"][0]["function"] == "~:0(<built-in method time.sleep>)"
    assert set(page) == {"seconds", "by_kind", "top_own_time"}


@pytest.mark.parametrize(
    "where, kind",
    [
        ("~:0(<built-in method torch._C._cuda_synchronize>)", "GPU wait"),
        ("/x/cudnn_guide/measure/bench.py:10(benchmark)", "cudnn_guide (Python)"),
        ("/site/torch/_inductor/codecache.py:1(load)", "torch, Dynamo and Inductor (Python)"),
        ("/site/cudnn/_pygraph.py:949(validate)", "cuDNN Frontend (Python)"),
        ("<frozen importlib._bootstrap>:1165(_find_and_load)", "imports and code loading"),
        ("/somewhere/else.py:1(f)", "other"),
    ],
)
def test_each_function_falls_in_its_kind(where, kind):
    assert host_profile.kind_of(where) == kind


def test_no_profiles_is_one_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no .pstats files"):
        host_profile.main(tmp_path)
