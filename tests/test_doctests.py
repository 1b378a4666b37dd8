"""The docstring examples of the modules that need no GPU run, and show what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest

CPU_MODULES = (
    "collector",
    "graphs.attention_inputs",
    "graphs.block",
    "datafiles",
    "measure.measurement",
    "measure.verdicts",
)
"""Modules whose every docstring example runs without a GPU (the others show GPU objects)."""


@pytest.mark.parametrize("name", CPU_MODULES)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    module = importlib.import_module(f"cudnn_guide.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"cudnn_guide.{name} has no examples to run"
    assert result.failed == 0, f"{result.failed} docstring example(s) of cudnn_guide.{name} failed"
