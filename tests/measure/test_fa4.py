"""FlashAttention-4 as a baseline: without it, pages say "not installed" with the install command."""

from __future__ import annotations

import sys

import pytest

from cudnn_guide.measure import fa4


@pytest.fixture
def no_fa4(monkeypatch):
    """Make ``flash_attn.cute`` unimportable, whatever this machine has."""
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", None)


def test_a_missing_flashattention4_is_reported_with_its_install_command(no_fa4):
    ok, detail = fa4.status()
    assert not ok
    assert detail.startswith("not installed (pip install flash-attn-4==")
    assert "ImportError" in detail or "ModuleNotFoundError" in detail
    assert fa4.label() == "FlashAttention-4"


def test_launchers_refuse_up_front_when_flashattention4_is_missing(no_fa4):
    with pytest.raises(ImportError, match="pip install flash-attn-4"):
        fa4.forward(None, None, None, causal=True)
    with pytest.raises(ImportError, match="pip install flash-attn-4"):
        fa4.training_step(None, None, None, None, causal=True)


def test_an_installed_flashattention4_is_named_with_its_exact_version(monkeypatch):
    import types

    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    monkeypatch.setattr("importlib.metadata.version", lambda name: {"flash-attn-4": "4.0.0b36"}[name])
    assert fa4.status() == (True, "4.0.0b36")
    assert fa4.label() == "FlashAttention-4 (flash-attn-4 4.0.0b36)"


def test_the_forward_launcher_hands_fa4_bshd_copies_and_returns_bhsd(monkeypatch):
    """FA4 takes B×S×H×D; the guide's inputs are B×H×S×D: copies in, a view out."""
    import types

    import torch

    seen = {}

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False):
        seen.update(shape=tuple(q.shape), contiguous=q.is_contiguous(), causal=causal, scale=softmax_scale)
        return q * 2, None  # FA4 may return (out, lse)

    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = flash_attn_func
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    monkeypatch.setattr("importlib.metadata.version", lambda name: "4.0.0b36")
    q = torch.randn(2, 4, 16, 8)  # B×H×S×D
    out = fa4.forward(q, q, q, causal=True, scale=0.5)()
    assert seen == {"shape": (2, 16, 4, 8), "contiguous": True, "causal": True, "scale": 0.5}
    assert out.shape == q.shape and torch.equal(out, q * 2)


def test_the_varlen_launcher_passes_packed_tensors_and_the_same_cu_seqlens(monkeypatch):
    import types

    import torch

    seen = {}

    def flash_attn_varlen_func(q, k, v, **kw):
        seen.update(kw, shape=tuple(q.shape))
        return q * 2, None  # (out, lse)

    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = lambda *a, **k: None
    cute.flash_attn_varlen_func = flash_attn_varlen_func
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    monkeypatch.setattr("importlib.metadata.version", lambda name: "4.0.0b36")
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    q = torch.randn(5, 2, 8)  # T×H×D
    out = fa4.varlen_attention(cu, 3, causal=True, scale=0.5)(q, q, q)
    assert torch.equal(out, q * 2) and seen.pop("shape") == (5, 2, 8)
    assert seen.pop("cu_seqlens_q") is cu and seen.pop("cu_seqlens_k") is cu
    assert seen == {"softmax_scale": 0.5, "max_seqlen_q": 3, "max_seqlen_k": 3, "causal": True}


def test_the_varlen_launcher_refuses_up_front_when_flashattention4_is_missing(no_fa4):
    with pytest.raises(ImportError, match="pip install flash-attn-4"):
        fa4.varlen_attention(None, 1, causal=True)


def test_the_bshd_attention_passes_its_tensors_as_they_are_and_returns_the_output(monkeypatch):
    import types

    import torch

    seen = {}

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False):
        seen.update(shape=tuple(q.shape), causal=causal, scale=softmax_scale, same=q.data_ptr())
        return q * 2, None  # (out, lse)

    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = flash_attn_func
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    monkeypatch.setattr("importlib.metadata.version", lambda name: "4.0.0b36")
    q = torch.randn(2, 16, 4, 8)  # B×S×H×D
    out = fa4.attention(causal=True, scale=0.5)(q, q, q)
    assert torch.equal(out, q * 2)
    assert seen == {"shape": (2, 16, 4, 8), "causal": True, "scale": 0.5, "same": q.data_ptr()}


def test_the_bshd_attention_refuses_up_front_when_flashattention4_is_missing(no_fa4):
    with pytest.raises(ImportError, match="pip install flash-attn-4"):
        fa4.attention(causal=True)
