"""Check attention inputs before cuDNN sees them, and compute the fp32 reference every variant is checked against.

cuDNN reports a bad attention input late (at ``validate`` or ``check_support``, or never: a
non-monotonic ragged offset reads the wrong tokens). These checks name the problem, the
tensor and the fix first. :func:`reference` is the one reference the cookbook pages use:
dense fp32 attention with grouped heads expanded, an optional visibility mask and bias.
:func:`band` is cuDNN's diagonal band as a visibility mask, and :func:`key_intervals` the same
causal or sliding-window mask as ``cudnn.flex_attention`` takes it: key intervals per query.
"""

from __future__ import annotations

from typing import Any

from cudnn_guide.errors import InputError

__all__ = ["check_heads", "check_seq_lens", "ragged_offsets", "check_window", "band", "key_intervals", "reference"]


def check_heads(q: Any, k: Any, v: Any) -> int:
    """Check B×H×S×D (or T×H×D) Q, K, V for grouped-query attention; return the group size Hq / Hkv.

    Parameters
    ----------
    q
        The query tensor, heads on dim 1 (B×H×S×D) or dim -2 (T×H×D).
    k
        The key tensor, laid out like ``q``.
    v
        The value tensor, laid out like ``q``.

    Returns
    -------
    int
        How many query heads share one K/V head (1: MHA, Hq: MQA).

    Raises
    ------
    InputError
        K and V head counts differ, or Hq is not a multiple of them.

    Example
    -------
    >>> import torch
    >>> check_heads(torch.empty(1, 32, 8, 64), torch.empty(1, 8, 8, 64), torch.empty(1, 8, 8, 64))
    4
    """
    axis = 1 if q.dim() == 4 else -2
    hq, hk, hv = q.shape[axis], k.shape[axis], v.shape[axis]
    if hk != hv:
        raise InputError(f"attention: K has {hk} heads but V has {hv}; grouped-query attention needs the same count")
    if hk == 0 or hq % hk:
        raise InputError(
            f"attention: Q has {hq} heads, which is not a multiple of K/V's {hk}; each K/V head must serve "
            "a whole group of query heads (choose Hkv dividing Hq)"
        )
    return hq // hk


def check_seq_lens(seq_lens: Any, batch: int, max_len: int, name: str = "seq_len") -> None:
    """Check a per-sequence length tensor for ``use_padding_mask``: int32, B×1×1×1, on the GPU, 0 ≤ len ≤ max.

    Parameters
    ----------
    seq_lens
        The tensor cuDNN will read.
    batch
        The batch size B.
    max_len
        The padded length S the Q or K/V tensor was declared with.
    name
        Its name in messages.

    Raises
    ------
    InputError
        Wrong dtype, shape, device, or a length outside ``[0, max_len]``.

    Example
    -------
    >>> import torch
    >>> check_seq_lens(torch.tensor([3, 1], dtype=torch.int32).reshape(2, 1, 1, 1), batch=2, max_len=4)
    """
    import torch

    if not isinstance(seq_lens, torch.Tensor) or seq_lens.dtype != torch.int32:
        got = getattr(seq_lens, "dtype", type(seq_lens).__name__)
        raise InputError(f"{name}: must be an int32 tensor, got {got} (use .to(torch.int32))")
    if tuple(seq_lens.shape) != (batch, 1, 1, 1):
        raise InputError(
            f"{name}: must have shape ({batch}, 1, 1, 1), one length per sequence; got {tuple(seq_lens.shape)}"
        )
    lo, hi = int(seq_lens.min()), int(seq_lens.max())
    if lo < 0 or hi > max_len:
        raise InputError(f"{name}: lengths must lie in [0, {max_len}] (the padded length); got {lo}..{hi}")


def ragged_offsets(cu_seqlens: Any, elements_per_token: int) -> Any:
    """Turn token prefix sums (``cu_seqlens``, B+1 entries from 0) into cuDNN's ragged offsets.

    cuDNN's ``set_ragged_offset`` reads, per sequence, where it starts in the packed T×H×D
    buffer, in *elements*: ``cu_seqlens · H · D``, int64, shaped (B+1)×1×1×1.

    Parameters
    ----------
    cu_seqlens
        Integer tensor ``[0, n0, n0+n1, …, T]``.
    elements_per_token
        Elements between consecutive tokens in the packed tensor (``H · D`` for T×H×D).

    Returns
    -------
    Any
        int64 (B+1)×1×1×1 offsets, on the device of ``cu_seqlens``.

    Raises
    ------
    InputError
        Not 1-D, not starting at 0, or decreasing somewhere (a negative length).

    Example
    -------
    >>> import torch
    >>> ragged_offsets(torch.tensor([0, 3, 5]), 8).flatten().tolist()
    [0, 24, 40]
    """
    import torch

    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise InputError(f"cu_seqlens: must be 1-D with B+1 entries, got shape {tuple(cu_seqlens.shape)}")
    if int(cu_seqlens[0]) != 0:
        raise InputError(f"cu_seqlens: must start at 0, starts at {int(cu_seqlens[0])}")
    steps = cu_seqlens[1:] - cu_seqlens[:-1]
    if bool((steps < 0).any()):
        bad = int(torch.nonzero(steps < 0)[0])
        raise InputError(
            f"cu_seqlens: must not decrease, but entry {bad + 1} ({int(cu_seqlens[bad + 1])}) is below entry {bad} "
            f"({int(cu_seqlens[bad])}); it is a running sum of lengths (torch.cumsum of the lengths, with a 0 in front)"
        )
    return (cu_seqlens.to(torch.int64) * elements_per_token).reshape(-1, 1, 1, 1).contiguous()


def check_window(window: int, seq_len: int) -> None:
    """Check a sliding-window width (``diagonal_band_left_bound``) against the sequence it masks.

    Parameters
    ----------
    window
        The number of keys each query sees (itself and the ``window - 1`` before it).
    seq_len
        The length of the key sequence it masks.

    Raises
    ------
    InputError
        A width below 1 (nothing visible), or wider than the sequence (then it masks nothing:
        use plain causal attention, which is cheaper to describe and to run).

    Example
    -------
    >>> check_window(256, 4096)
    """
    if window < 1:
        raise InputError(f"sliding window: width {window} leaves no key visible; use a width of at least 1")
    if window > seq_len:
        raise InputError(
            f"sliding window: width {window} is wider than the sequence ({seq_len} tokens), so it masks nothing; "
            "drop diagonal_band_left_bound and use causal attention"
        )


def band(
    s_q: int,
    s_kv: int,
    *,
    left: int | None = None,
    right: int | None = 0,
    bottom_right: bool = False,
    device: Any = None,
) -> Any:
    """The S_q×S_kv boolean visibility of cuDNN's diagonal band (True: the key is visible).

    Query ``i`` sits at diagonal position ``i`` (top-left alignment) or ``i + s_kv - s_q``
    (bottom-right). Key ``j`` is visible when ``pos - left < j`` (if ``left`` is set) and
    ``j ≤ pos + right`` (if ``right`` is set): ``right=0`` is causal, ``left=W`` a window of W keys.

    Parameters
    ----------
    s_q
        Queries.
    s_kv
        Keys.
    left
        ``diagonal_band_left_bound``, or None for no left edge.
    right
        ``diagonal_band_right_bound``, or None for no right edge.
    bottom_right
        ``diagonal_alignment=BOTTOM_RIGHT`` instead of top-left.
    device
        Where to build the mask.

    Returns
    -------
    Any
        A boolean S_q×S_kv tensor.

    Example
    -------
    >>> band(3, 3).int().tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    import torch

    pos = torch.arange(s_q, device=device)[:, None] + (s_kv - s_q if bottom_right else 0)
    j = torch.arange(s_kv, device=device)[None, :]
    visible = torch.ones(s_q, s_kv, dtype=torch.bool, device=device)
    if right is not None:
        visible &= j <= pos + right
    if left is not None:
        visible &= j > pos - left
    return visible


def key_intervals(batch: int, seq: int, *, window: int | None = None, device: Any = "cuda") -> Any:
    """``cudnn.flex_attention``'s ``mask_func`` for causal or sliding-window attention over a fixed batch.

    ``mask_func`` is int32 ``[Hmask, nfunc, total_q]``: for query ``i`` its column ``F0, F1, F2, …``
    makes keys ``[0, F0) ∪ [F1, F2) ∪ …`` visible, counted within the query's own sequence. Causal
    is one endpoint per query, ``F0 = i + 1``; a window of ``window`` keys is three,
    ``[0, 0) ∪ [i − window + 1, i + 1)`` (the start clamped at 0). The same mask for every head
    (``Hmask`` 1) and every sequence of the batch, whose ``batch · seq`` queries follow each other.
    The visible keys are those of :func:`band` with ``left=window``.

    Parameters
    ----------
    batch
        Sequences, each of ``seq`` queries and ``seq`` keys.
    seq
        Tokens per sequence.
    window
        Keys each query sees (itself and the ``window - 1`` before it); None: causal.
    device
        Where to build it.

    Returns
    -------
    Any
        A contiguous int32 tensor, ``1×1×(batch·seq)`` (causal) or ``1×3×(batch·seq)`` (window),
        for ``cudnn.flex_attention.create_mask_plan``.

    Example
    -------
    >>> key_intervals(2, 3, device="cpu").tolist()
    [[[1, 2, 3, 1, 2, 3]]]
    >>> key_intervals(1, 4, window=2, device="cpu").tolist()
    [[[0, 0, 0, 0], [0, 0, 1, 2], [1, 2, 3, 4]]]
    """
    import torch

    pos = torch.arange(seq, device=device, dtype=torch.int32)
    if window is None:
        return (pos + 1).repeat(batch).reshape(1, 1, batch * seq).contiguous()
    ends = torch.stack([torch.zeros_like(pos), (pos - window + 1).clamp_min(0), pos + 1]).repeat(1, batch)
    return ends.reshape(1, 3, batch * seq).contiguous()


def reference(q: Any, k: Any, v: Any, *, visible: Any = None, bias: Any = None, scale: float | None = None) -> Any:
    """fp32 attention on B×H×S×D tensors, K/V heads repeated for grouped queries; rows with no visible key give 0.

    Parameters
    ----------
    q
        B×Hq×Sq×D queries.
    k
        B×Hkv×Skv×D keys.
    v
        B×Hkv×Skv×Dv values.
    visible
        Boolean mask broadcastable to B×Hq×Sq×Skv (True: visible), or None.
    bias
        Additive bias broadcastable to the scores, or None.
    scale
        Score scale; default ``1/sqrt(D)``.

    Returns
    -------
    Any
        B×Hq×Sq×Dv, float32.

    Example
    -------
    >>> import torch
    >>> q = torch.randn(1, 4, 3, 8); kv = torch.randn(1, 2, 3, 8)
    >>> reference(q, kv, kv, visible=band(3, 3)).shape
    torch.Size([1, 4, 3, 8])
    """
    import torch

    from cudnn_guide.check import full_precision

    group = check_heads(q, k, v)
    with full_precision(), torch.no_grad():
        k, v = k.float(), v.float()
        if group > 1:
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        s = (q.float() @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
        if bias is not None:
            s = s + bias.float()
        if visible is not None:
            s = s.masked_fill(~visible, float("-inf"))
        return torch.softmax(s, -1).nan_to_num(0.0) @ v
