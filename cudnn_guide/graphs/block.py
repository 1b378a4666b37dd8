"""A pre-norm transformer block whose attention is a parameter: the block the training pages share.

The block is RMSNorm → a fused QKV projection → attention → an output projection → residual add,
then RMSNorm → a SwiGLU MLP → residual add, with linear layers without bias
(:func:`transformer_block`). Only ``attend(q, k, v)`` differs between the variants a page
compares: the guide's cuDNN operator (:func:`cudnn_attention`, ``torch.ops.cudnn_guide.sdpa`` of
:mod:`~cudnn_guide.graphs.torch_ops`), PyTorch's ``scaled_dot_product_attention``
(:func:`torch_attention`), or any other attention taking B×H×S×D (or B×S×H×D, ``bshd=True``)
tensors. :func:`variant` copies one initial block with another attention, so every variant starts
from the same weights; :func:`training_step` is one forward, backward and fused AdamW update;
:func:`step_flops` counts that step's FLOPs; :func:`output_copied` says whether the reshape of an
attention's output back to B×S×(H·D) copies it.

The checks of a block against its fp32 reference live above this layer
(:class:`cudnn_guide.check.ModuleCheck`, with :func:`~cudnn_guide.check.module_reference` and
:func:`~cudnn_guide.check.check_module`), as do FlashAttention-4 as a B×S×H×D ``attend``
(:func:`cudnn_guide.measure.fa4.attention`) and the helpers the pages race its steps with
(:func:`cudnn_guide.measure.compare.rejudged`, :func:`cudnn_guide.measure.baselines.synchronized`,
:func:`cudnn_guide.measure.bench.peak_memory_mib`).

Importing this module imports neither torch nor cudnn; the block's class is made on first use.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

__all__ = [
    "cudnn_attention",
    "output_copied",
    "step_flops",
    "torch_attention",
    "training_step",
    "transformer_block",
    "variant",
]


def cudnn_attention(q: Any, k: Any, v: Any) -> Any:
    """Causal attention through the guide's cuDNN operator (:func:`~cudnn_guide.graphs.torch_ops.attention`).

    Parameters
    ----------
    q
        B×H×S×D queries, fp16/bf16 on a CUDA device.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.

    Returns
    -------
    Any
        O, B×H×S×D.

    Example
    -------
    >>> block = transformer_block(cudnn_attention, heads=16, head_dim=128, hidden=5632)
    """
    from cudnn_guide.graphs import torch_ops

    return torch_ops.attention(q, k, v, causal=True)


def torch_attention(q: Any, k: Any, v: Any) -> Any:
    """Causal attention through PyTorch's ``scaled_dot_product_attention`` (whichever backend it picks).

    Parameters
    ----------
    q
        B×H×S×D queries.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.

    Returns
    -------
    Any
        O, B×H×S×D.

    Example
    -------
    >>> import torch
    >>> q = torch.randn(1, 2, 4, 8)
    >>> torch_attention(q, q, q).shape
    torch.Size([1, 2, 4, 8])
    """
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@functools.cache
def _block_class() -> type:
    """The block's ``nn.Module`` class, made once (this module does not import torch until used)."""
    import torch.nn as nn
    import torch.nn.functional as F

    class PreNormBlock(nn.Module):
        """Pre-norm transformer block: RMSNorm, attention, residual; RMSNorm, SwiGLU MLP, residual."""

        def __init__(self, attend: Callable[..., Any], heads: int, head_dim: int, hidden: int) -> None:
            super().__init__()
            dim = heads * head_dim
            self.heads, self.head_dim, self.dim = heads, head_dim, dim
            self.attend, self.bshd = attend, False  # bshd: attend takes B×S×H×D
            self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim, bias=False)
            self.out = nn.Linear(dim, dim, bias=False)
            self.gate_up = nn.Linear(dim, 2 * hidden, bias=False)
            self.down = nn.Linear(hidden, dim, bias=False)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, self.head_dim)
            if self.bshd:
                q, k, v = qkv.permute(2, 0, 1, 3, 4).contiguous()
                attn = self.attend(q, k, v)
            else:
                q, k, v = qkv.permute(2, 0, 3, 1, 4).contiguous()
                attn = self.attend(q, k, v).transpose(1, 2)
            x = x + self.out(attn.reshape(b, s, self.dim))
            gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    PreNormBlock.__module__ = __name__
    return PreNormBlock


def transformer_block(attend: Callable[..., Any], *, heads: int, head_dim: int, hidden: int, bshd: bool = False) -> Any:
    """A pre-norm transformer block (an ``nn.Module``) with ``attend`` as its attention.

    ``x + out(attend(qkv(rmsnorm(x))))``, then ``x + down(silu(gate) · up)`` with ``gate, up`` from
    one projection of ``rmsnorm(x)``. The width is ``heads · head_dim``; every linear layer is
    without bias. Its parameters, in order: ``norm1.weight``, ``norm2.weight``, ``qkv.weight``,
    ``out.weight``, ``gate_up.weight``, ``down.weight``. The projection's Q, K and V are each
    copied once into the layout ``attend`` takes; the attention output is reshaped back to
    B×S×(H·D), a view where its memory is already B×S×H×D and a copy otherwise
    (:func:`output_copied`). The weights are initialised from torch's global generator, in
    that order (seed it first for the same block twice).

    Parameters
    ----------
    attend
        ``attend(q, k, v)``: B×H×S×D tensors in and out (B×S×H×D with ``bshd``).
    heads
        Attention heads H.
    head_dim
        Head dimension D.
    hidden
        The MLP's hidden width.
    bshd
        ``attend`` takes and returns B×S×H×D tensors.

    Returns
    -------
    Any
        The block, in float32 on the CPU (move it with ``.cuda().to(torch.bfloat16)``); it maps
        B×S×(H·D) to B×S×(H·D). ``block.attend`` and ``block.bshd`` can be set afterwards.

    Example
    -------
    >>> import torch
    >>> block = transformer_block(torch_attention, heads=2, head_dim=8, hidden=32)
    >>> block(torch.randn(3, 5, 16)).shape
    torch.Size([3, 5, 16])
    >>> sum(p.numel() for p in block.parameters())  # 2·16 + 16·48 + 16·16 + 16·64 + 32·16
    2592
    """
    block = _block_class()(attend, heads, head_dim, hidden)
    block.bshd = bshd
    return block


def variant(template: Any, attend: Callable[..., Any], *, bshd: bool = False) -> Any:
    """A copy of ``template`` (the same initial weights) with ``attend`` as its attention.

    Parameters
    ----------
    template
        A block from :func:`transformer_block`, already on its device and in its dtype.
    attend
        The copy's attention, ``attend(q, k, v)``.
    bshd
        ``attend`` takes and returns B×S×H×D tensors (FlashAttention's layout); otherwise B×H×S×D.

    Returns
    -------
    Any
        A deep copy of ``template``; ``template`` itself is unchanged.

    Example
    -------
    >>> template = transformer_block(torch_attention, heads=2, head_dim=8, hidden=32)
    >>> eager_cudnn = variant(template, cudnn_attention)
    """
    block = copy.deepcopy(template)
    block.attend, block.bshd = attend, bshd
    return block


def output_copied(attend: Callable[..., Any], q: Any, k: Any, v: Any, *, bshd: bool = False) -> bool:
    """Whether a block with ``attend`` copies the attention output when it reshapes it to B×S×(H·D).

    It runs ``attend`` once without autograd, seen as B×S×H×D as the block sees it, and compares
    the reshaped tensor's storage with the output's: the same (a view) where the output's memory is
    already B×S×H×D, another (a copy) otherwise.

    Parameters
    ----------
    attend
        The attention.
    q
        B×H×S×D queries (copied to B×S×H×D first with ``bshd``, as the block's projection would).
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    bshd
        ``attend`` takes and returns B×S×H×D tensors.

    Returns
    -------
    bool
        ``True`` for a copy, ``False`` for a view.

    Example
    -------
    >>> import torch
    >>> q = torch.randn(1, 2, 4, 8)
    >>> output_copied(torch_attention, q, q, q)  # SDPA writes B×H×S×D
    True
    """
    import torch

    with torch.no_grad():
        if bshd:
            out = attend(*(t.transpose(1, 2).contiguous() for t in (q, k, v)))
        else:
            out = attend(q, k, v).transpose(1, 2)
        b, s = out.shape[:2]
        return out.reshape(b, s, -1).data_ptr() != out.data_ptr()


def training_step(block: Any, x: Any, grad_out: Any, *, lr: float) -> Callable[[], None]:
    """One training step of ``block`` as a zero-argument launcher: forward, backward, fused AdamW.

    The step runs ``block(x).backward(grad_out)``, then ``AdamW.step()`` (``fused=True``) and
    ``zero_grad(set_to_none=True)``. Each call of this function makes its own optimizer, so
    each variant of a comparison has its own optimizer state for its own copy of the weights.

    Parameters
    ----------
    block
        The module (eager or compiled).
    x
        Its input.
    grad_out
        The gradient of its output.
    lr
        AdamW's learning rate (small, so that the weights barely move across timed steps).

    Returns
    -------
    Callable[[], None]
        The step.

    Example
    -------
    >>> import torch
    >>> block = transformer_block(torch_attention, heads=2, head_dim=8, hidden=32)
    >>> x = torch.randn(1, 4, 16)
    >>> step = training_step(block, x, torch.randn_like(x), lr=1e-5)
    >>> step()
    """
    import torch

    opt = torch.optim.AdamW(block.parameters(), lr=lr, fused=True)

    def step() -> None:
        block(x).backward(grad_out)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def step_flops(batch: int, seq: int, heads: int, head_dim: int, hidden: int) -> float:
    """The FLOPs of one training step of the block with causal attention: forward and backward.

    The linear layers (QKV, output, gate-up and down projections) do ``2 · tokens · in · out``
    each in the forward; causal attention ``4 · B · H · S² · D / 2`` (its two matmuls over half
    the score matrix). The backward costs two forwards' worth of the linears and two and a half
    of the attention, so the step counts ``3×`` the linears and ``3.5×`` the attention. Norms,
    activations, residual adds and the optimizer are left out.

    Parameters
    ----------
    batch
        Sequences B.
    seq
        Tokens per sequence S.
    heads
        Heads H.
    head_dim
        Head dimension D (the width is ``H · D``).
    hidden
        The MLP's hidden width.

    Returns
    -------
    float
        FLOPs per step.

    Example
    -------
    >>> step_flops(1, 2, 1, 8, 16)  # 3 · 2,560 linear + 3.5 · 64 attention
    7904.0
    """
    tokens, dim = batch * seq, heads * head_dim
    linear_flops = 2 * tokens * dim * (3 * dim + dim + 2 * hidden) + 2 * tokens * hidden * dim
    attention_flops = 4 * batch * heads * seq * seq * head_dim / 2  # causal
    return 3 * linear_flops + 3.5 * attention_flops  # backward: 2× linears, 2.5× attention
