"""The transformer block the training pages share: its shapes, parameters, FLOPs and variants, on the CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from cudnn_guide.errors import InputError
from cudnn_guide.graphs import block, torch_ops

HEADS, HEAD_DIM, HIDDEN = 2, 8, 32
DIM = HEADS * HEAD_DIM


def small(attend=block.torch_attention, **kw):
    torch.manual_seed(0)
    return block.transformer_block(attend, heads=HEADS, head_dim=HEAD_DIM, hidden=HIDDEN, **kw)


def by_hand(blk, x):
    """The block written out: RMSNorm, causal SDPA, residual; RMSNorm, SwiGLU, residual."""
    b, s, _ = x.shape
    w = dict(blk.named_parameters())
    h = F.rms_norm(x, (DIM,), w["norm1.weight"])
    q, k, v = (h @ w["qkv.weight"].T).view(b, s, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, DIM)
    x = x + attn @ w["out.weight"].T
    gate, up = (F.rms_norm(x, (DIM,), w["norm2.weight"]) @ w["gate_up.weight"].T).chunk(2, dim=-1)
    return x + (F.silu(gate) * up) @ w["down.weight"].T


def test_the_block_keeps_its_shape_and_computes_what_it_says():
    blk = small()
    x = torch.randn(3, 5, DIM)
    y = blk(x)
    assert y.shape == x.shape
    torch.testing.assert_close(y, by_hand(blk, x))


def test_the_parameters_are_named_and_counted_as_the_checks_print_them():
    blk = small()
    shapes = {n: tuple(p.shape) for n, p in blk.named_parameters()}
    assert shapes == {
        "norm1.weight": (DIM,),
        "norm2.weight": (DIM,),
        "qkv.weight": (3 * DIM, DIM),
        "out.weight": (DIM, DIM),
        "gate_up.weight": (2 * HIDDEN, DIM),
        "down.weight": (DIM, HIDDEN),
    }
    assert sum(p.numel() for p in blk.parameters()) == 2 * DIM + 4 * DIM * DIM + 3 * DIM * HIDDEN
    page = block.transformer_block(block.torch_attention, heads=16, head_dim=128, hidden=5632)
    assert sum(p.numel() for p in page.parameters()) == 2 * 2048 + 4 * 2048**2 + 3 * 2048 * 5632  # 51,384,320


def test_the_same_seed_gives_the_same_weights():
    a, b = small(), small()
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb and torch.equal(pa, pb)


def test_a_variant_is_a_copy_with_another_attention_and_the_template_is_untouched():
    template = small()
    calls = []

    def counting(q, k, v):
        calls.append(tuple(q.shape))
        return block.torch_attention(q, k, v)

    copy = block.variant(template, counting)
    assert copy is not template and template.attend is block.torch_attention and not template.bshd
    assert copy.attend is counting and not copy.bshd
    for p, q in zip(template.parameters(), copy.parameters()):
        assert torch.equal(p, q) and p.data_ptr() != q.data_ptr()
    x = torch.randn(2, 4, DIM)
    torch.testing.assert_close(copy(x), template(x))
    assert calls == [(2, HEADS, 4, HEAD_DIM)]  # B×H×S×D


def test_a_bshd_attention_gets_bshd_tensors_and_the_same_result():
    seen = []

    def bshd_attention(q, k, v):  # B×S×H×D in and out, as FlashAttention takes them
        seen.append(tuple(q.shape))
        return block.torch_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)

    template = small()
    x = torch.randn(2, 4, DIM)
    torch.testing.assert_close(block.variant(template, bshd_attention, bshd=True)(x), template(x))
    assert seen == [(2, 4, HEADS, HEAD_DIM)]
    assert small(bshd=True).bshd


def test_whether_the_reshape_of_the_attention_output_copies():
    q, k, v = (torch.randn(2, HEADS, 4, HEAD_DIM) for _ in range(3))
    assert block.output_copied(block.torch_attention, q, k, v)  # B×H×S×D memory: a copy

    def bshd_memory(q, k, v):  # the output's memory is B×S×H×D, seen as B×H×S×D
        return block.torch_attention(q, k, v).transpose(1, 2).contiguous().transpose(1, 2)

    assert not block.output_copied(bshd_memory, q, k, v)

    def flash_like(q, k, v):  # takes and returns B×S×H×D
        assert q.is_contiguous() and q.shape == (2, 4, HEADS, HEAD_DIM)
        return block.torch_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2).contiguous()

    assert not block.output_copied(flash_like, q, k, v, bshd=True)


def test_a_training_step_moves_the_weights_by_about_the_learning_rate_and_clears_the_gradients():
    blk = small()
    before = {n: p.detach().clone() for n, p in blk.named_parameters()}
    x = torch.randn(2, 4, DIM)
    step = block.training_step(blk, x, torch.randn_like(x), lr=1e-3)
    step()
    step()
    for n, p in blk.named_parameters():
        assert p.grad is None
        moved = (p.detach() - before[n]).abs().max().item()
        assert 0 < moved <= 2 * 1e-3 * 1.01, n  # AdamW's step is at most about lr per call


def test_the_flop_count_of_a_step():
    # linears 2·T·DIM·(3·DIM + DIM + 2·HIDDEN) + 2·T·HIDDEN·DIM; causal attention 4·B·H·S²·D / 2
    assert block.step_flops(1, 2, 1, 8, 16) == 3 * 2560 + 3.5 * 64
    B, S, H, D, HID = 8, 2048, 16, 128, 5632  # the pages' block
    tokens, dim = B * S, H * D
    linear = 2 * tokens * dim * (3 * dim + dim + 2 * HID) + 2 * tokens * HID * dim
    attention = 4 * B * H * S * S * D / 2
    assert block.step_flops(B, S, H, D, HID) == 3 * linear + 3.5 * attention
    assert round(block.step_flops(B, S, H, D, HID) / 1e12, 3) == 5.532  # TFLOP per step


def test_the_cudnn_attention_is_the_guides_op_and_refuses_the_cpu():
    q = torch.zeros(1, 2, 4, 8, dtype=torch.bfloat16)
    with pytest.raises(InputError, match="CUDA device"):
        block.cudnn_attention(q, q, q)


@pytest.mark.parametrize("attend", ["torch", "cudnn"])
def test_the_block_traces_without_graph_breaks(attend):
    """``torch.compile(fullgraph=True)`` needs one graph: the pages compile both blocks so."""
    torch_ops.register_ops()  # as on the pages, where an eager call has registered the op first
    torch._dynamo.reset()
    if attend == "torch":
        blk, x = small(), torch.randn(2, 4, DIM)
    else:
        blk = small(block.cudnn_attention).to("meta").to(torch.bfloat16)
        x = torch.empty(2, 4, DIM, device="meta", dtype=torch.bfloat16)
    explained = torch._dynamo.explain(blk)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons


def test_importing_the_module_imports_neither_torch_nor_cudnn():
    code = "import sys; import cudnn_guide.graphs.block; print('torch' in sys.modules, 'cudnn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
