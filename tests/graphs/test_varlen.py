"""Packed (THD) attention helpers: spans, layouts, padding and rows agree with each other on CPU tensors."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from cudnn_guide.graphs import varlen

LENGTHS = torch.tensor([3, 0, 5, 1], dtype=torch.int32)
CU = torch.nn.functional.pad(LENGTHS.cumsum(0), (1, 0)).int()
H, D = 2, 4


def packed(seed: int = 0) -> torch.Tensor:
    return torch.randn(int(LENGTHS.sum()), H, D, generator=torch.Generator().manual_seed(seed))


def test_spans_are_each_sequences_rows_including_an_empty_one():
    assert varlen.spans(CU) == [(0, (0, 3)), (1, (3, 3)), (2, (3, 8)), (3, (8, 9))]
    assert [end - start for _, (start, end) in varlen.spans(CU)] == LENGTHS.tolist()


def test_the_thd_layout_is_token_major_and_matches_the_packed_tensors_strides():
    dims, strides = varlen.thd_layout(4, H, 5, D)
    assert dims == [4, H, 5, D]
    t = packed()
    # within a sequence, stepping a head, a token or an element moves as in the packed T×H×D tensor
    assert strides[1:] == [t.stride(1), t.stride(0), t.stride(2)]
    assert strides[0] == 5 * H * D  # B×S_max tokens' worth: never used, the ragged offsets say where b starts


def test_padding_keeps_every_real_row_and_zeros_the_rest():
    t = packed()
    spans = varlen.spans(CU)
    p = varlen.padded(t, spans)
    assert p.shape == (4, H, 5, D) and p.is_contiguous() and p.dtype == t.dtype
    for b, (start, end) in spans:
        assert torch.equal(varlen.padded_rows(p, b, start, end), varlen.packed_rows(t, b, start, end))
        assert not p[b, :, end - start :].any()
    assert varlen.padded(t, spans, max_len=7).shape == (4, H, 7, D)


def test_the_rows_of_one_sequence_are_the_same_in_all_three_layouts():
    t = packed(1)
    bhsd = t.transpose(0, 1)[None]  # FlexAttention's 1×H×T×D view of the packed tokens
    p = varlen.padded(t, varlen.spans(CU))
    for b, (start, end) in varlen.spans(CU):
        want = t[start:end].transpose(0, 1)[None]
        assert varlen.packed_rows(t, b, start, end).shape == (1, H, end - start, D)
        assert torch.equal(varlen.packed_rows(t, b, start, end), want)
        assert torch.equal(varlen.bhsd_rows(bhsd, b, start, end), want)
        assert torch.equal(varlen.padded_rows(p, b, start, end), want)


@pytest.mark.parametrize("layout", ["packed", "padded"])
def test_training_tensors_are_the_inputs_and_empty_outputs_sdpa_graph_reads(layout):
    q, k, v, d_o = (packed(i) for i in range(4))
    if layout == "padded":
        q, k, v, d_o = (varlen.padded(t, varlen.spans(CU)) for t in (q, k, v, d_o))
    x = varlen.training_tensors(q, k, v, d_o, batch=4, max_len=5)
    assert set(x) == {"q", "k", "v", "d_o", "o", "stats", "dq", "dk", "dv"}
    assert x["q"] is q and x["d_o"] is d_o
    assert x["stats"].shape == (4, H, 5, 1) and x["stats"].dtype == torch.float32
    for n in ("o", "dq", "dk", "dv"):
        assert x[n].shape == q.shape and x[n].dtype == q.dtype and x[n].data_ptr() != q.data_ptr()


def test_the_document_mask_sees_only_earlier_keys_of_the_same_sequence():
    lengths = torch.tensor([2, 3])
    visible = varlen.document_causal_mask(lengths, device="cpu")
    qi, ki = torch.arange(5)[:, None], torch.arange(5)[None]
    doc = torch.tensor([0, 0, 1, 1, 1])
    want = (doc[:, None] == doc[None, :]) & (ki <= qi)
    assert torch.equal(visible(0, 0, qi, ki), want)
    assert visible(0, 0, torch.tensor(2), torch.tensor(1)).item() is False  # the previous sequence's last key


def test_torch_varlen_attn_is_causal_over_the_same_cu_seqlens(monkeypatch):
    seen = {}

    def varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, *, window_size=(-1, -1)):
        seen.update(cu_q=cu_q, cu_k=cu_k, max_q=max_q, max_k=max_k, window_size=window_size)
        return q

    module = types.ModuleType("torch.nn.attention.varlen")
    module.varlen_attn = varlen_attn
    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", module)
    t = packed()
    assert varlen.torch_varlen_attn(CU, 5)(t, t, t) is t
    assert seen["cu_q"] is CU and seen["cu_k"] is CU
    assert (seen["max_q"], seen["max_k"], seen["window_size"]) == (5, 5, (-1, 0))


def test_a_pytorch_without_varlen_attn_refuses_with_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", None)
    with pytest.raises(ImportError):
        varlen.torch_varlen_attn(CU, 5)


def test_the_nested_backend_is_named_or_left_unnamed(monkeypatch):
    from torch.nn.attention import SDPBackend

    fake = types.ModuleType("torch.nested._internal.sdpa")
    fake._select_sdp_backend = lambda *args: SDPBackend.FLASH_ATTENTION
    monkeypatch.setitem(sys.modules, "torch.nested._internal.sdpa", fake)
    assert varlen.nested_sdpa_backend(None, None, None) == (
        SDPBackend.FLASH_ATTENTION,
        "flash backend (FlashAttention-2)",
    )
    fake._select_sdp_backend = lambda *args: SDPBackend.ERROR
    assert varlen.nested_sdpa_backend(None, None, None) == (SDPBackend.ERROR, "default dispatch")
    monkeypatch.setitem(sys.modules, "torch.nested._internal.sdpa", None)  # a PyTorch without it
    picked, kernel = varlen.nested_sdpa_backend(None, None, None)
    assert picked.startswith("not determined (") and kernel == "default dispatch"


def _declared(x, lens, **kwargs):
    """``varlen.sdpa_graph``'s declaration on the CPU, unbuilt: (its JSON, the pack it would bind)."""
    import json
    from unittest import mock

    from cudnn_guide import graphs

    seen = {}

    class _Unbuilt:
        def __init__(self, g):
            self.g = g

        def bind(self, pack):
            seen.update(graph=json.loads(str(self.g)), pack=pack)
            return lambda: None

    with mock.patch.object(graphs, "build", lambda g, **kw: _Unbuilt(g)):
        varlen.sdpa_graph(x, lens, handle=None, **kwargs)
    return seen["graph"], seen["pack"]


@pytest.mark.parametrize("backward", [False, True])
def test_the_packed_graph_is_token_major_with_padded_statistics(backward):
    pytest.importorskip("cudnn")
    spans = varlen.spans(CU)
    offsets = (CU.long() * H * D).reshape(-1, 1, 1, 1)
    lens = LENGTHS.reshape(-1, 1, 1, 1)
    q, k, v, d_o = (packed(i).bfloat16() for i in range(4))
    x = varlen.training_tensors(q, k, v, d_o, batch=len(spans), max_len=5)
    graph, pack = _declared(x, lens, offsets=offsets, backward=backward)
    (node,) = graph["nodes"]
    assert node["type"] == ("SDPA_BWD" if backward else "SDPA")
    params = node["params"]
    assert params["use_padding_mask"] is True and params["diagonal_band_right_bound"] == 0
    assert params["diagonal_alignment"].endswith("TOP_LEFT") and params["attn_scale"] == D**-0.5
    assert {"seq_len_q", "seq_len_kv"} <= set(node["inputs"].values())
    tensors = graph["tensors"]
    dims, strides = varlen.thd_layout(len(spans), H, 5, D)  # S_max: the longest of the lengths
    for name in ("q", "k", "v", *(["o", "d_o"] if backward else [])):
        assert (tensors[name]["dim"], tensors[name]["stride"]) == (dims, strides), name
    stats = next(t for n, t in tensors.items() if n.lower().endswith("stats"))
    assert stats["dim"] == [len(spans), H, 5, 1] and stats["dtype"].endswith("FLOAT")
    assert tensors["ragged_offsets"]["dim"] == [len(spans) + 1, 1, 1, 1]
    bound = {id(t) for t in pack.values()}
    written = ("dq", "dk", "dv") if backward else ("o", "stats")
    assert all(id(x[n]) in bound for n in written) and id(offsets) in bound and id(lens) in bound


def test_the_padded_graph_declares_the_tensors_as_they_are():
    pytest.importorskip("cudnn")
    spans = varlen.spans(CU)
    qp = varlen.padded(packed().bfloat16(), spans)
    x = dict(q=qp, k=qp, v=qp, o=torch.empty_like(qp))
    graph, pack = _declared(x, LENGTHS.reshape(-1, 1, 1, 1))
    (node,) = graph["nodes"]
    assert node["type"] == "SDPA" and "ragged_offsets" not in graph["tensors"]
    assert graph["tensors"]["q"]["dim"] == list(qp.shape) and graph["tensors"]["q"]["stride"] == list(qp.stride())
    assert id(x["o"]) in {id(t) for t in pack.values()}
