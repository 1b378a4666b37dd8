"""The cuDNN attention operator: clear errors at its boundary, a cache key that sees layouts, a clean trace."""

from __future__ import annotations

import pytest
import torch

from cudnn_guide import check
from cudnn_guide.errors import InputError
from cudnn_guide.graphs import torch_ops


def bf16(*shape, device="cpu"):
    return torch.zeros(*shape, dtype=torch.bfloat16, device=device)


@pytest.mark.parametrize(
    "q, k, v, match",
    [
        (bf16(1, 2, 4, 8), bf16(1, 2, 4, 8), bf16(1, 2, 4, 8), "on cpu; cuDNN attention runs on a CUDA device"),
        (torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8), "float16 or bfloat16"),
        (bf16(1, 2, 4, 8), bf16(1, 2, 4, 8).half(), bf16(1, 2, 4, 8), "but q is torch.bfloat16"),
        (bf16(1, 2, 8, 4).transpose(-1, -2), bf16(1, 2, 4, 8), bf16(1, 2, 4, 8), "contiguous head dim"),
        (bf16(1, 2, 4, 12), bf16(1, 2, 4, 12), bf16(1, 2, 4, 12), "multiple of 8"),
        (bf16(1, 3, 4, 8), bf16(1, 2, 4, 8), bf16(1, 2, 4, 8), "not a multiple"),
        (bf16(2, 4, 8), bf16(2, 4, 8), bf16(2, 4, 8), "4-D"),
    ],
)
def test_bad_input_is_refused_at_the_op_boundary(q, k, v, match):
    with pytest.raises(InputError, match=match):
        torch_ops.attention(q, k, v)


def test_the_cache_key_sees_strides_dtype_and_mask():
    x = bf16(1, 2, 4, 8)
    other_layout = x.transpose(1, 2).contiguous().transpose(1, 2)
    assert torch_ops.graph_key("forward", True, x) == torch_ops.graph_key("forward", True, x.clone())
    assert torch_ops.graph_key("forward", True, x) != torch_ops.graph_key("forward", True, other_layout)
    assert torch_ops.graph_key("forward", True, x) != torch_ops.graph_key("forward", True, x.half())
    assert torch_ops.graph_key("forward", True, x) != torch_ops.graph_key("forward", False, x)


def test_the_op_traces_without_graph_breaks():
    torch._dynamo.reset()

    def block(q, k, v):
        return torch_ops.attention(q, k, v).sum(-1) * 2

    x = bf16(1, 2, 4, 8, device="meta")
    explained = torch._dynamo.explain(block)(x, x, x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    assert torch_ops.register_ops() is torch_ops.register_ops()  # registering twice is harmless


# --- on the GPU (marker gpu; skipped without one) ---


@pytest.mark.gpu
def test_attention_op_gradients_compile_capture_and_rebuild_on_a_new_layout():
    from cudnn_guide.graphs import attention_inputs, torch_ops

    torch_ops.reset_caches()
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, d_o = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = torch_ops.attention(*leaves)
    out.backward(d_o)
    ref_leaves = [t.float().requires_grad_() for t in (q, k, v)]
    with check.full_precision():
        ref = torch.nn.functional.scaled_dot_product_attention(*ref_leaves, is_causal=True)
        ref.backward(d_o.float())
    assert check.check(out, ref).passed
    for got, want in zip(leaves, ref_leaves):
        assert check.check(got.grad, want.grad).passed
    built = torch_ops.cached_graphs()
    torch_ops.attention(q, k, v)
    assert torch_ops.cached_graphs() == built  # the same layout reuses its graph
    other = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert check.check(torch_ops.attention(other, k, v), ref).passed
    assert torch_ops.cached_graphs() == built + 1  # a new stride builds a new graph, never reuses the old one
    compiled = torch.compile(lambda a, b, c: torch_ops.attention(a, b, c) * 2, fullgraph=True)
    assert check.check(compiled(q, k, v), 2 * ref).passed
    gq, gk, gv = (torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    gk, gv = gk[:, :2].contiguous(), gv[:, :2].contiguous()  # GQA: 8 query heads over 2 K/V heads
    want = attention_inputs.reference(gq, gk, gv, visible=attention_inputs.band(128, 128, device="cuda"))
    assert check.check(torch_ops.attention(gq, gk, gv), want).passed
