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


@pytest.mark.parametrize("recorder_rc", [124, 1])
def test_a_recorder_cut_or_failed_is_neither_merged_nor_built_and_its_rc_is_the_calls(tmp_path, recorder_rc):
    # whole_call.sh beside a stand-in record_call.sh that writes the host readings of a recorder ended with rc
    tools = tmp_path / "tree" / "tools" / "builder"
    tools.mkdir(parents=True)
    (tools / "whole_call.sh").write_text((BUILDER / "whole_call.sh").read_text())
    (tools / "record_call.sh").write_text(
        f'printf "rec0 1.0\\nrc={recorder_rc}\\nrec1 2.0\\n" > "$OUT/host_$1.txt"\necho recorded some pages\n'
    )
    out = tmp_path / "out"
    out.mkdir()
    env = os.environ | {"OUT": str(out), "CUDNN_GUIDE_COMMIT": "0" * 40}
    done = subprocess.run(
        ["bash", "tools/builder/whole_call.sh", "A", "10", "3"],
        cwd=tmp_path / "tree",
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == recorder_rc, done.stderr
    assert f"rc={recorder_rc}" in done.stderr and "not merged, no site" in done.stderr
    assert "not merged, no site" in (out / "whole_A.txt").read_text()
    assert not (out / "merge_A.txt").exists() and not (out / "site_build_A.log").exists()
