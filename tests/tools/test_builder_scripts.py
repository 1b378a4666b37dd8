"""tools/builder: the GPU builder's call scripts refuse to stamp pages with an unknown commit, and parse."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILDER = ROOT / "tools" / "builder"


@pytest.mark.parametrize("script", sorted(p.name for p in BUILDER.glob("*.sh")))
def test_each_builder_script_is_valid_bash(script):
    done = subprocess.run(["bash", "-n", str(BUILDER / script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", ["record_call.sh", "site_call.sh", "whole_call.sh"])
def test_a_call_without_the_commit_stops_before_installing_anything(tmp_path, script):
    env = {k: v for k, v in os.environ.items() if k != "CUDNN_GUIDE_COMMIT"} | {"OUT": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(BUILDER / script), "A", "10", "3"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    said = done.stdout + done.stderr
    assert "set CUDNN_GUIDE_COMMIT=<the full sha you committed>" in said, said
    assert "builder ready" not in said and "pip" not in said  # install.sh never ran
