"""Packed (THD, ragged-offset) attention: the helpers the varlen pages share.

A packed batch holds only the real tokens, T×H×D; sequence ``b`` is the rows ``start:end`` of
``cu_seqlens`` (the B+1 prefix sums of the lengths). cuDNN declares such a tensor B×H×S_max×D
with the token-major strides of T×H×D and a ragged-offset tensor (where each sequence starts, in
elements). Here: the spans of the sequences, packed tensors padded to B×H×S_max×D, the rows of
one sequence in either layout (for checks sequence by sequence), the causal padding-mask graph
in either layout (:func:`sdpa_graph`, forward or backward), the tensors one training step writes,
and PyTorch's own packed contenders (FlexAttention with a document mask, ``varlen_attn``, and
the kernel its SDPA picks for nested tensors).

The checks and the timing of these contenders live above this layer:
:func:`cudnn_guide.check.worst_sequence`, :func:`cudnn_guide.measure.baselines.admit_backward`,
:func:`cudnn_guide.measure.fa4.varlen_attention`, :func:`cudnn_guide.report.prose.verdict_text`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors

__all__ = [
    "bhsd_rows",
    "document_causal_mask",
    "flex_document_attention",
    "nested_sdpa_backend",
    "packed_rows",
    "padded",
    "padded_rows",
    "sdpa_graph",
    "spans",
    "thd_layout",
    "torch_varlen_attn",
    "training_tensors",
]


# ---------------------------------------------------------------------------------------------
# Sequences, layouts and rows
# ---------------------------------------------------------------------------------------------


def spans(cu_seqlens: Any) -> list[tuple[int, tuple[int, int]]]:
    """Each sequence's index and its rows ``(start, end)`` in the packed tensor.

    Parameters
    ----------
    cu_seqlens
        The B+1 prefix sums of the lengths, ``[0, n0, n0+n1, …, T]`` (any device).

    Returns
    -------
    list[tuple[int, tuple[int, int]]]
        ``[(b, (start, end)), …]``, one entry per sequence, in order.

    Example
    -------
    >>> import torch
    >>> spans(torch.tensor([0, 3, 3, 5]))
    [(0, (0, 3)), (1, (3, 3)), (2, (3, 5))]
    """
    return list(enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())))


def thd_layout(batch: int, heads: int, max_len: int, head_dim: int) -> tuple[list[int], list[int]]:
    """The dims and strides a packed T×H×D tensor is declared with: B×H×S_max×D, token-major.

    The strides are those of T×H×D (a token's heads next to each other); the batch stride is
    never used, since the ragged offsets say where each sequence starts.

    Parameters
    ----------
    batch
        The number of sequences B.
    heads
        Heads H.
    max_len
        The longest sequence S_max.
    head_dim
        Head dimension D.

    Returns
    -------
    tuple[list[int], list[int]]
        ``([B, H, S_max, D], [S_max·H·D, D, H·D, 1])``.

    Example
    -------
    >>> thd_layout(4, 2, 5, 8)
    ([4, 2, 5, 8], [80, 8, 16, 1])
    """
    return [batch, heads, max_len, head_dim], [max_len * heads * head_dim, head_dim, heads * head_dim, 1]


def padded(t: Any, spans: list[tuple[int, tuple[int, int]]], max_len: int | None = None) -> Any:
    """A packed T×H×D tensor as padded B×H×S_max×D, zeros past each sequence's length.

    Parameters
    ----------
    t
        The packed tensor, T×H×D.
    spans
        The sequences' rows (:func:`spans`).
    max_len
        S_max; default the longest sequence.

    Returns
    -------
    Any
        A new contiguous B×H×S_max×D tensor of ``t``'s dtype, on ``t``'s device.

    Example
    -------
    >>> import torch
    >>> t = torch.arange(5.0).reshape(5, 1, 1)  # lengths 3 and 2, one head, D = 1
    >>> padded(t, spans(torch.tensor([0, 3, 5]))).flatten().tolist()
    [0.0, 1.0, 2.0, 3.0, 4.0, 0.0]
    """
    import torch

    if max_len is None:
        max_len = max((end - start for _, (start, end) in spans), default=0)
    heads, head_dim = t.shape[1:]
    out = torch.zeros(len(spans), max_len, heads, head_dim, device=t.device, dtype=t.dtype)
    for b, (start, end) in spans:
        out[b, : end - start] = t[start:end]
    return out.transpose(1, 2).contiguous()


def packed_rows(y: Any, b: int, start: int, end: int) -> Any:
    """Sequence ``b`` of a packed T×H×D tensor, as 1×H×n×D (a view).

    Parameters
    ----------
    y
        The packed tensor.
    b
        The sequence's index (unused: the rows say where it is).
    start
        Its first row.
    end
        One past its last row.

    Returns
    -------
    Any
        ``y[start:end]`` as 1×H×n×D.

    Example
    -------
    >>> import torch
    >>> packed_rows(torch.zeros(5, 2, 8), 1, 3, 5).shape
    torch.Size([1, 2, 2, 8])
    """
    return y[start:end].transpose(0, 1)[None]


def padded_rows(y: Any, b: int, start: int, end: int) -> Any:
    """Sequence ``b`` of a padded B×H×S×D tensor, its real rows only, as 1×H×n×D (a view).

    Parameters
    ----------
    y
        The padded tensor.
    b
        The sequence's index.
    start
        Its first row in the packed tensor.
    end
        One past its last row there (only ``end - start``, its length, is used).

    Returns
    -------
    Any
        ``y[b : b + 1, :, : end - start]``.

    Example
    -------
    >>> import torch
    >>> padded_rows(torch.zeros(2, 2, 3, 8), 1, 3, 5).shape
    torch.Size([1, 2, 2, 8])
    """
    return y[b : b + 1, :, : end - start]


def bhsd_rows(y: Any, b: int, start: int, end: int) -> Any:
    """Sequence ``b`` of the packed tokens seen as one 1×H×T×D batch (FlexAttention's layout).

    Parameters
    ----------
    y
        The 1×H×T×D tensor.
    b
        The sequence's index (unused: the rows say where it is).
    start
        Its first token.
    end
        One past its last token.

    Returns
    -------
    Any
        ``y[:, :, start:end]``, 1×H×n×D.

    Example
    -------
    >>> import torch
    >>> bhsd_rows(torch.zeros(1, 2, 5, 8), 1, 3, 5).shape
    torch.Size([1, 2, 2, 8])
    """
    return y[:, :, start:end]


# ---------------------------------------------------------------------------------------------
# The cuDNN graphs
# ---------------------------------------------------------------------------------------------


def sdpa_graph(
    x: dict[str, Any],
    lens: Any,
    *,
    handle: Any,
    offsets: Any = None,
    backward: bool = False,
    max_len: int | None = None,
) -> Callable[[], None]:
    """Causal SDPA with a padding mask over ``x``, built, as a zero-argument launcher.

    Packed T×H×D tensors (declared with :func:`thd_layout` and the ragged offsets) when
    ``offsets`` is given, padded B×H×S×D ones (declared as they are) otherwise; the statistics
    are always declared as they are (padded, B×H×S_max×1 fp32). The forward reads ``q``, ``k``,
    ``v`` and writes ``o`` (and ``stats``, if ``x`` has them); the backward reads ``q``, ``k``,
    ``v``, ``o``, ``d_o``, ``stats`` and writes ``dq``, ``dk``, ``dv``. Causal is the top-left
    band ending on the diagonal (key j visible to query i when j ≤ i), the scale ``1/sqrt(D)``;
    inputs and outputs take ``x["q"]``'s dtype, intermediates and compute fp32.

    Parameters
    ----------
    x
        Name → tensor, as above.
    lens
        The true lengths, int32 B×1×1×1 on the GPU: ``seq_len_q`` and ``seq_len_kv`` both.
    handle
        The cuDNN handle.
    offsets
        The ragged offsets, int64 (B+1)×1×1×1, in elements, for packed tensors; None for padded.
    backward
        Build ``sdpa_backward`` instead of the forward.
    max_len
        S_max of the packed declaration; default the longest of ``lens``.

    Returns
    -------
    Callable[[], None]
        The built graph's launcher (:meth:`~cudnn_guide.graphs.builder.BuiltGraph.bind`).

    Example
    -------
    >>> x = training_tensors(q, k, v, d_o, batch=B, max_len=S_MAX)
    >>> sdpa_graph(x, seq_lens, handle=handle, offsets=offsets)()  # forward: o and stats
    >>> backward = sdpa_graph(x, seq_lens, handle=handle, offsets=offsets, backward=True)
    """
    import cudnn

    io, f32 = tensors.cudnn_dtype(x["q"].dtype), cudnn.data_type.FLOAT
    g = cudnn.pygraph(handle=handle, io_data_type=io, intermediate_data_type=f32, compute_data_type=f32)
    t = {n: g.tensor_like(lens, name=n) for n in ("seq_len_q", "seq_len_kv")}
    pack = {t["seq_len_q"]: lens, t["seq_len_kv"]: lens}
    dims = strides = None  # packed only
    ragged = None if offsets is None else g.tensor_like(offsets, name="ragged_offsets")
    if ragged is not None:
        pack[ragged] = offsets
        heads, head_dim = x["q"].shape[1:]
        max_len = int(lens.max()) if max_len is None else max_len
        dims, strides = thd_layout(lens.shape[0], heads, max_len, head_dim)
    as_is = {"stats"} if ragged is not None else set(x)  # stats stay B×H×S_max×1
    ins = ("q", "k", "v", "o", "d_o", "stats") if backward else ("q", "k", "v")
    for n in ins:
        t[n] = (
            g.tensor_like(x[n], name=n)
            if n in as_is
            else g.tensor(name=n, data_type=io, dim=dims, stride=strides, ragged_offset=ragged)
        )
        pack[t[n]] = x[n]
    mask = dict(use_padding_mask=True, seq_len_q=t["seq_len_q"], seq_len_kv=t["seq_len_kv"])
    causal = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
    mask |= dict(attn_scale=x["q"].shape[-1] ** -0.5, **causal)
    if backward:
        qkvo = dict(q=t["q"], k=t["k"], v=t["v"], o=t["o"], dO=t["d_o"], stats=t["stats"])
        outs = dict(zip(("dq", "dk", "dv"), g.sdpa_backward(**qkvo, **mask)))
    else:
        train = "stats" in x
        O, STATS = g.sdpa(q=t["q"], k=t["k"], v=t["v"], generate_stats=train, **mask)
        outs = {"o": O, "stats": STATS} if train else {"o": O}
    for n, node_out in outs.items():
        node_out.set_output(True).set_data_type(f32 if n == "stats" else io)
        if n in as_is:
            node_out.set_dim(list(x[n].shape)).set_stride(list(x[n].stride()))
        else:
            node_out.set_dim(dims).set_stride(strides).set_ragged_offset(ragged)
        pack[node_out] = x[n]
    return graphs.build(g, handle=handle).bind(pack)


def training_tensors(q: Any, k: Any, v: Any, d_o: Any, *, batch: int, max_len: int) -> dict[str, Any]:
    """The tensors of one training step in one layout: its inputs, and empty outputs to write.

    Parameters
    ----------
    q
        Queries, packed T×H×D or padded B×H×S×D.
    k
        Keys, laid out like ``q``.
    v
        Values, laid out like ``q``.
    d_o
        The output's gradient, laid out like ``q``.
    batch
        The number of sequences B.
    max_len
        S_max: the statistics are B×H×S_max×1 in either layout.

    Returns
    -------
    dict[str, Any]
        ``q``, ``k``, ``v``, ``d_o``; ``o``, ``dq``, ``dk``, ``dv`` (empty, like ``q``) and
        ``stats`` (empty, fp32, B×H×S_max×1, on ``q``'s device): the keys :func:`sdpa_graph` reads.

    Example
    -------
    >>> import torch
    >>> x = training_tensors(*torch.zeros(4, 7, 2, 8), batch=2, max_len=5)
    >>> tuple(x["stats"].shape), tuple(x["dq"].shape)
    ((2, 2, 5, 1), (7, 2, 8))
    """
    import torch

    x = dict(q=q, k=k, v=v, d_o=d_o, o=torch.empty_like(q))
    x["stats"] = torch.empty(batch, q.shape[1], max_len, 1, device=q.device, dtype=torch.float32)
    return x | {n: torch.empty_like(q) for n in ("dq", "dk", "dv")}


# ---------------------------------------------------------------------------------------------
# PyTorch's packed contenders
# ---------------------------------------------------------------------------------------------


def document_causal_mask(lengths: Any, device: Any = "cuda") -> Callable[..., Any]:
    """FlexAttention's ``mask_mod`` for packed sequences: the same sequence, and causal.

    Parameters
    ----------
    lengths
        The sequences' lengths (a 1-D integer tensor, any device).
    device
        Where the token → sequence index lives (where the mask is evaluated).

    Returns
    -------
    Callable[..., Any]
        ``mask_mod(b, h, q_idx, kv_idx)``: True where key ``kv_idx`` is in query ``q_idx``'s
        sequence and not after it.

    Example
    -------
    >>> import torch
    >>> visible = document_causal_mask(torch.tensor([2, 1]), device="cpu")
    >>> qi, ki = torch.arange(3)[:, None], torch.arange(3)[None]
    >>> visible(0, 0, qi, ki).int().tolist()
    [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    """
    import torch

    doc = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths.to(device))

    def doc_mask(b: Any, h: Any, qi: Any, ki: Any) -> Any:  # the same sequence, and causal
        return (doc[qi] == doc[ki]) & (ki <= qi)

    return doc_mask


def flex_document_attention(lengths: Any, device: Any = "cuda") -> Callable[..., Any]:
    """Compiled FlexAttention over the packed tokens with :func:`document_causal_mask`.

    The block mask is made once, here (over T×T, T the sum of the lengths, on the current
    accelerator); the compiled kernel on the first call.

    Parameters
    ----------
    lengths
        The sequences' lengths (a 1-D integer tensor).
    device
        Where the mask's token → sequence index lives.

    Returns
    -------
    Callable[..., Any]
        ``attend(q, k, v)`` on the packed tokens seen as 1×H×T×D (rows: :func:`bhsd_rows`).

    Example
    -------
    >>> flex = flex_document_attention(lengths)
    >>> out = flex(*[t.transpose(0, 1)[None] for t in (q, k, v)])  # 1×H×T×D
    """
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    total = int(lengths.sum())
    block_mask = create_block_mask(document_causal_mask(lengths, device), None, None, total, total)
    flex = torch.compile(flex_attention, fullgraph=True)

    def attend(q: Any, k: Any, v: Any) -> Any:
        return flex(q, k, v, block_mask=block_mask)

    return attend


def torch_varlen_attn(cu_seqlens: Any, max_len: int) -> Callable[..., Any]:
    """PyTorch's ``varlen_attn`` (FlashAttention-2 inside), causal, over packed T×H×D tensors.

    Parameters
    ----------
    cu_seqlens
        The B+1 prefix sums of the lengths, int32 on the GPU, for queries and keys both.
    max_len
        The longest sequence.

    Returns
    -------
    Callable[..., Any]
        ``attend(q, k, v)`` returning the packed T×H×D output.

    Raises
    ------
    ImportError
        This PyTorch has no ``torch.nn.attention.varlen``.

    Example
    -------
    >>> varlen_attn = torch_varlen_attn(cu_seqlens, S_MAX)
    >>> out = varlen_attn(q, k, v)
    """
    from torch.nn.attention.varlen import varlen_attn

    window = dict(window_size=(-1, 0))  # causal

    def attend(q: Any, k: Any, v: Any) -> Any:
        return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, **window)

    return attend


def nested_sdpa_backend(q: Any, k: Any, v: Any) -> tuple[Any, str]:
    """The kernel PyTorch's SDPA dispatch picks for jagged nested tensors, causal, and its name.

    Asks PyTorch's private ``torch.nested._internal.sdpa._select_sdp_backend`` (no dropout, no
    mask, ``is_causal=True``); a PyTorch without it, or one where it fails, leaves the kernel
    unnamed rather than stopping the page.

    Parameters
    ----------
    q
        Queries, a jagged nested tensor B×H×j×D.
    k
        Keys, the same layout.
    v
        Values, the same layout.

    Returns
    -------
    tuple[Any, str]
        What the dispatch picked (an ``SDPBackend``, or ``"not determined (<ExceptionType>)"``)
        and a name for a label: ``"flash backend (FlashAttention-2)"``, ``"memory-efficient
        backend"``, ``"math backend"``, ``"cuDNN backend"``, else ``"default dispatch"``.

    Example
    -------
    >>> nested = [torch.nested.nested_tensor_from_jagged(t, cu).transpose(1, 2) for t in (q, k, v)]
    >>> picked, kernel = nested_sdpa_backend(*nested)
    """
    from torch.nn.attention import SDPBackend

    try:  # the kernel SDPA's dispatch picks for these jagged tensors (a private function)
        from torch.nested._internal.sdpa import _select_sdp_backend

        picked = _select_sdp_backend(q, k, v, None, 0.0, True, False)
    except Exception as exc:  # another PyTorch may lack it: the backend stays unnamed
        picked = f"not determined ({type(exc).__name__})"
    kernels = {
        SDPBackend.FLASH_ATTENTION: "flash backend (FlashAttention-2)",
        SDPBackend.EFFICIENT_ATTENTION: "memory-efficient backend",
        SDPBackend.MATH: "math backend",
        SDPBackend.CUDNN_ATTENTION: "cuDNN backend",
    }
    return picked, kernels.get(picked, "default dispatch")
