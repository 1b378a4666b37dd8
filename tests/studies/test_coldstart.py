"""coldstart.flex_attention_fresh: each run in a new interpreter with its own empty CUDA JIT cache,
removed after it (the study itself, flex_attention_first_call, needs a GPU and the CuTe DSL)."""

from __future__ import annotations

import os

from cudnn_guide.studies import coldstart


def _first_call(batch, heads, seq, head_dim):
    """Stands in for flex_attention_first_call: where this interpreter's JIT cache is, and what it held."""
    cache = os.environ["CUDA_CACHE_PATH"]
    return {"pid": os.getpid(), "args": [batch, heads, seq, head_dim], "cache": cache, "held": os.listdir(cache)}


def test_each_process_is_new_and_gets_an_empty_jit_cache_of_its_own(monkeypatch):
    monkeypatch.setattr(coldstart, "flex_attention_first_call", _first_call)
    monkeypatch.setattr(coldstart, "FLEX_PRELOAD", ("json",))  # torch and cudnn need not load for this
    cold = coldstart.flex_attention_fresh(2, 4, 64, 32, processes=2, timeout=120)
    assert len(cold) == 2 and len({c["pid"] for c in cold}) == 2 and os.getpid() not in {c["pid"] for c in cold}
    assert all(c["args"] == [2, 4, 64, 32] and c["held"] == [] for c in cold)
    assert cold[0]["cache"] != cold[1]["cache"] and not any(os.path.exists(c["cache"]) for c in cold)


def test_the_interpreters_preload_what_the_study_imports():
    assert coldstart.FLEX_PRELOAD == ("torch", "cudnn", "cudnn.flex_attention")
