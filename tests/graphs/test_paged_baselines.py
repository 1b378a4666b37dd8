"""PyTorch's decode paths over a paged cache read each sequence's own tokens: checked on CPU against attention
over the gathered pages, with a stand-in for the varlen kernel (the real one runs on the GPU page)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from cudnn_guide.graphs import paged


def _varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, *, scale, seqused_k=None, block_table=None):
    """Reference varlen attention: one query per sequence over its packed (or paged) keys."""
    out = []
    for b in range(q.shape[0]):
        if block_table is None:
            kb, vb = k[cu_k[b] : cu_k[b + 1]], v[cu_k[b] : cu_k[b + 1]]
        else:  # pages × page × H × D, read through the table
            n, page = int(seqused_k[b]), k.shape[1]
            kb = torch.cat([k[i] for i in block_table[b].tolist()])[:n]
            vb = torch.cat([v[i] for i in block_table[b].tolist()])[:n]
            assert page * block_table.shape[1] >= n
        s = torch.einsum("hd,nhd->hn", q[b].float(), kb.float()) * scale
        out.append(torch.einsum("hn,nhd->hd", s.softmax(-1), vb.float()))
    return torch.stack(out)


@pytest.fixture
def fake_varlen(monkeypatch):
    module = types.ModuleType("torch.nn.attention.varlen")
    module.varlen_attn = _varlen_attn
    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", module)


def _inputs(p, seed=0):
    g = torch.Generator().manual_seed(seed)
    pps, b, h, d = p.pages_per_sequence, p.batch, p.heads, p.head_dim
    lengths = torch.tensor([5, 16, 33], dtype=torch.int32)
    table = torch.randperm(b * pps, generator=g, dtype=torch.int32).reshape(b, 1, pps, 1)
    return {
        "q": torch.randn(b, h, 1, d, generator=g),
        "k_pool": torch.randn(b * pps, h, p.page_size, d, generator=g),
        "v_pool": torch.randn(b * pps, h, p.page_size, d, generator=g),
        "page_table": table,
        "seq_len_kv": lengths.reshape(b, 1, 1, 1),
        "lengths": lengths,
    }


def test_every_pytorch_decode_path_computes_each_sequences_own_attention(fake_varlen):
    p = paged.PagedDecodeProblem(batch=3, heads=2, head_dim=8, max_context=40, page_size=8, dtype="float32")
    d = _inputs(p)
    mask = p.key_mask(d["seq_len_kv"])
    k, v = paged.gather_pages(d["k_pool"], d["page_table"]), paged.gather_pages(d["v_pool"], d["page_table"])
    ref = p.torch_forward(d["q"], k, v, mask)
    decoders = paged.torch_decoders(p, d, mask)
    assert list(decoders) == [
        "PyTorch varlen_attn on the paged pool",
        "PyTorch gather valid tokens + varlen_attn",
        "PyTorch gather + padded SDPA",
        paged.CONTROL,
    ]
    for name, build in decoders.items():
        out = build()().reshape(ref.shape)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4, msg=name)


def test_a_pytorch_without_varlen_refuses_when_built_not_when_listed(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", None)  # import fails
    p = paged.PagedDecodeProblem(batch=3, heads=2, head_dim=8, max_context=40, page_size=8, dtype="float32")
    d = _inputs(p)
    decoders = paged.torch_decoders(p, d, p.key_mask(d["seq_len_kv"]))
    with pytest.raises(ImportError):
        decoders[paged.CONTROL]()
    assert decoders["PyTorch gather + padded SDPA"]()() is not None
