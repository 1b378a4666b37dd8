"""plot_11's compile order, replayed on the CPU: its stages got symbolic-shape graphs; per-shape compiles are static."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "archive"))

import dynamic_compile_probe  # noqa: E402


def test_the_pages_stages_are_compiled_for_symbolic_shapes_and_a_per_shape_compile_is_static(tmp_path):
    fresh = dynamic_compile_probe.main(tmp_path / "probe.json")
    page, per_shape = fresh["page (dynamic=None)"], fresh["per-shape (dynamic=False)"]
    assert [g["symbolic"] for g in page if g["call"].startswith("base")] == [False, False]
    stage_graphs = [g for g in page if g["call"].startswith("stage")]
    assert stage_graphs and all(g["symbolic"] for g in stage_graphs)  # later stages reuse them: fewer graphs than calls
    assert len(stage_graphs) < 2 * len(dynamic_compile_probe.STAGES)
    assert len(per_shape) == 2 + 2 * len(dynamic_compile_probe.STAGES) and not any(g["symbolic"] for g in per_shape)
    committed = json.loads((ROOT / "docs" / "data" / "dynamic_compile_probe.json").read_text())
    assert {k: v for k, v in committed.items() if k != "torch"} == {k: v for k, v in fresh.items() if k != "torch"}
