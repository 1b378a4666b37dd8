"""tools/scale/benchmark.sh keeps each step's time when a later step fails or the run is stopped, and says which."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for python3: the record step writes a shard, merge passes, sphinx fails as on a stale page.
if [ "$1" = "-m" ] && [ "$2" = "gallery_build.shards" ] && [ "$3" = "record" ]; then
  mkdir -p "$4"
  echo '{"pages": {"plot_01_environment.py": {"seconds": 8.5}, "plot_02_x.py": {"seconds": 20.25}}}' > "$4/shard.json"
  exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "gallery_build.shards" ]; then exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "sphinx" ]; then
  [ "$FAKE_SITE_RC" = kill ] && { kill -KILL "$PPID"; exit 0; }  # a time limit stops the whole run
  [ "$FAKE_SITE_RC" = 0 ] || echo "StaleRecordingError: plot_16 changed" >&2
  exit "$FAKE_SITE_RC"
fi
exec {real} "$@"
"""


def run_benchmark(tmp_path, site_rc):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(FAKE_PYTHON.replace("{real}", sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "b1"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SITE_RC": str(site_rc)}
    proc = subprocess.run(
        ["bash", "tools/scale/benchmark.sh", str(out), "1", "plot_01_environment.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    return proc, json.loads((out / "benchmark.json").read_text())


def test_a_failed_site_step_keeps_the_recording_time_and_names_the_failure(tmp_path):
    proc, result = run_benchmark(tmp_path, site_rc=2)
    assert proc.returncode == 1, proc.stderr
    assert result["seconds"]["record"] >= 0 and result["seconds"]["merge"] >= 0
    assert result["seconds"]["site"] >= 0 and "total" not in result["seconds"]  # no total for a run that failed
    assert result["failed"] == {"site": "exit 2"}
    assert result["page_seconds"] == 28.7 and result["per_page_seconds"]["plot_02_x.py"] == 20.2


def test_a_run_whose_steps_all_pass_has_a_total(tmp_path):
    proc, result = run_benchmark(tmp_path, site_rc=0)
    assert proc.returncode == 0, proc.stderr
    steps = result["seconds"]
    assert "failed" not in result and steps["total"] >= steps["record"] + steps["merge"] + steps["site"] - 1e-6


def test_a_run_stopped_during_the_site_keeps_the_steps_it_finished(tmp_path):
    proc, result = run_benchmark(tmp_path, site_rc="kill")
    assert proc.returncode == -9  # killed, as a device call's time limit kills it
    assert result["seconds"]["record"] >= 0 and result["seconds"]["merge"] >= 0
    assert result["seconds"]["site"] is None and "total" not in result["seconds"]
    assert result["failed"] == {"site": "not finished: the run was stopped before this step ended"}
    assert result["page_seconds"] == 28.7
