"""chunked_prefill: K/V scattered into pages, read back by PyTorch and FlashAttention-4, and the conclusion.

Everything here runs without a GPU: the pools are made on the CPU, FlashAttention-4 is a stand-in module
that records what it was given, and the comparisons are real ``Comparison`` objects with fixed rounds.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
from torch.nn.attention.bias import causal_lower_right

from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.report.prose import gpu_and_loop_text
from cudnn_guide.studies import chunked_prefill
from cudnn_guide.studies.chunked_prefill import CANDIDATE, CONTIGUOUS, GATHER

FA4 = "FlashAttention-4 (flash-attn-4 4.0.0b36)"
SDPA_CONTROL = "PyTorch SDPA, contiguous K/V (control)"
B, H, S, D, CHUNK, PAGE = 2, 3, 32, 8, 8, 4


@pytest.fixture
def qkv():
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, n, D, generator=g) for n in (CHUNK, S, S))


def test_the_pages_hold_each_sequence_in_the_order_of_its_table(qkv):
    _, k, v = qkv
    cache = chunked_prefill.page_kv(k, v, page=PAGE, spare_pages=13, seed=1)
    pages = S // PAGE
    assert cache.pages_per_seq == pages and cache.page == PAGE
    assert cache.k_pool.shape == (B * pages + 13, H, PAGE, D) and cache.k_pool.dtype == k.dtype
    assert cache.page_table.shape == (B, 1, pages, 1) and cache.page_table.dtype == torch.int32
    used = cache.page_table.flatten().tolist()
    assert len(set(used)) == B * pages  # no page shared
    for b in range(B):
        for p in range(pages):
            at = int(cache.page_table[b, 0, p, 0])
            assert torch.equal(cache.k_pool[at], k[b, :, p * PAGE : (p + 1) * PAGE])
            assert torch.equal(cache.v_pool[at], v[b, :, p * PAGE : (p + 1) * PAGE])
    spare = sorted(set(range(B * pages + 13)) - set(used))
    assert len(spare) == 13 and not cache.k_pool[spare].any() and not cache.v_pool[spare].any()


def test_the_places_are_the_seeded_permutation(qkv):
    _, k, v = qkv
    pages = S // PAGE
    cache = chunked_prefill.page_kv(k, v, page=PAGE, spare_pages=13, seed=1)
    perm = torch.randperm(B * pages + 13, generator=torch.Generator().manual_seed(1))[: B * pages]
    assert cache.page_table.flatten().tolist() == perm.tolist()
    other = chunked_prefill.page_kv(k, v, page=PAGE, spare_pages=13, seed=2)
    assert other.page_table.flatten().tolist() != perm.tolist()


def test_gathering_the_pages_gives_attention_over_contiguous_kv(qkv):
    q, k, v = qkv
    cache = chunked_prefill.page_kv(k, v, page=PAGE)
    mask = causal_lower_right(CHUNK, S)
    gather = chunked_prefill.gather_then_sdpa(q, cache, mask)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(gather(), expected)


@pytest.fixture
def fake_fa4(monkeypatch):
    calls = []

    def flash_attn_varlen_func(q, k, v, **kw):
        calls.append((q, k, v, kw))
        return torch.zeros(q.shape), torch.zeros(1)  # (out, lse)

    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_varlen_func = flash_attn_varlen_func
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    return calls


def test_fa4_reads_the_same_pages_in_its_own_layout(qkv, fake_fa4):
    q, k, v = qkv
    cache = chunked_prefill.page_kv(k, v, page=PAGE)
    lengths = torch.full((B, 1, 1, 1), S, dtype=torch.int32)
    launch = chunked_prefill.fa4_paged(q, cache, lengths)
    assert fake_fa4 == []  # nothing launched yet
    out = launch()
    assert out.shape == q.shape  # B×H×Sq×D again
    q_fa, k_fa, v_fa, kw = fake_fa4[0]
    assert torch.equal(q_fa, q.transpose(1, 2)) and q_fa.is_contiguous()
    assert torch.equal(k_fa, cache.k_pool.permute(0, 2, 1, 3)) and k_fa.is_contiguous()
    assert torch.equal(v_fa, cache.v_pool.permute(0, 2, 1, 3))
    assert torch.equal(kw["page_table"], cache.page_table.reshape(B, S // PAGE))
    assert kw["seqused_k"].tolist() == [S] * B
    assert kw["softmax_scale"] == D**-0.5 and kw["causal"] is True


def _v(value, verdict):
    return {"value": value, "low": value - 0.05, "high": value + 0.05, "verdict": verdict}


def _comparison(ms, versus, wall=None):
    medians = {n: [t] * 7 for n, t in ms.items()}
    measured = {n: Measurement(n, [t] * 3, "cold") for n, t in ms.items()}
    return Comparison(CANDIDATE, 7, measured, medians, versus, 0.01, wall=wall)


def test_the_conclusion_names_the_fastest_then_fa4_gather_and_the_control():
    ms = {CANDIDATE: 1.0, CONTIGUOUS: 0.9, GATHER: 1.5, SDPA_CONTROL: 1.2, FA4: 1.1}
    versus = {
        CONTIGUOUS: _v(0.9, "slower"),
        GATHER: _v(1.5, "faster"),
        SDPA_CONTROL: _v(1.2, "faster"),
        FA4: _v(1.1, "faster"),
    }
    c = _comparison(ms, versus)
    assert c.best_baseline == FA4
    [said] = chunked_prefill.conclusions(c, FA4, True, None)
    assert said == (
        f"Chunked prefill over a paged cache: against the fastest contender, cuDNN paged is "
        f"{c.describe(FA4)}; vs {GATHER}: {c.describe(GATHER)}; reading pages in place against "
        f"contiguous K/V: {c.describe(CONTIGUOUS)}. "
    )


def test_the_conclusion_says_why_fa4_did_not_race():
    ms = {CANDIDATE: 1.0, CONTIGUOUS: 0.9, GATHER: 1.5}
    c = _comparison(ms, {CONTIGUOUS: _v(0.9, "slower"), GATHER: _v(1.5, "faster")})
    [said] = chunked_prefill.conclusions(c, FA4, True, "RuntimeError: page size")
    assert f"against the fastest contender, cuDNN paged is {c.describe(GATHER)}; reading" in said
    assert said.endswith(f". {FA4} did not run the paged chunked prefill: RuntimeError: page size.")
    [said] = chunked_prefill.conclusions(c, "FlashAttention-4", False, "not installed (pip install x): E")
    assert said.endswith(". FlashAttention-4 was not in the chunked-prefill race: not installed (pip install x): E.")


def test_the_conclusion_gives_the_loop_verdict_with_its_own_band_and_rounds():
    ms = {CANDIDATE: 1.0, CONTIGUOUS: 0.9, GATHER: 1.5}
    wall = _comparison(ms, {GATHER: _v(1.3, "faster")})
    c = _comparison(ms, {CONTIGUOUS: _v(0.9, "slower"), GATHER: _v(1.5, "faster")}, wall=wall)
    [said] = chunked_prefill.conclusions(c, FA4, True, "E: x")
    assert gpu_and_loop_text(c) in said
    assert (
        "; in a back-to-back loop, host time included: faster (1.30×, 1.25–1.35; loop tie band ±1.0%, 7 rounds)" in said
    )
    assert said.count("in a back-to-back loop") == 1  # the control has no loop verdict


def test_the_page_names_its_contenders_as_the_module_does():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "examples" / "plot_33_chunked_prefill.py").read_text()
    for name in (CANDIDATE, CONTIGUOUS, GATHER):
        assert f'"{name}": ' in page
    assert f'candidate="{CANDIDATE}"' in page
