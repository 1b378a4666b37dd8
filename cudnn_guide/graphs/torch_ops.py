"""cuDNN's fused attention as a PyTorch operator: autograd, ``torch.compile(fullgraph=True)`` and CUDA graphs.

``torch.ops.cudnn_guide.sdpa(q, k, v, causal)`` runs a cuDNN SDPA forward graph that also
writes the softmax statistics; its registered autograd formula runs cuDNN's ``sdpa_backward``
graph on them. Both are ``torch.library.custom_op`` s with fake (meta) implementations, so
``torch.compile`` traces them without graph breaks, and both only execute prebuilt graphs on
torch's current stream, so a warmed-up call can be captured in a CUDA graph.

Graphs are cached per everything that changes the graph: op, causality, and each tensor's
shape, strides, dtype and device. Inputs are checked at the op boundary (:func:`check_inputs`)
so that a bad call raises :class:`~cudnn_guide.errors.InputError` naming the problem, never a
cuDNN error from deep inside.
"""

from __future__ import annotations

from typing import Any

from cudnn_guide.errors import InputError

__all__ = ["attention", "cached_graphs", "forward_graph", "backward_graph", "register_ops"]

_GRAPHS: dict[tuple[Any, ...], Any] = {}


def reset_caches() -> None:
    """Forget every cached graph (the next call builds again).

    Example
    -------
    >>> reset_caches()
    """
    _GRAPHS.clear()


def cached_graphs() -> int:
    """How many graphs the operators have built and cached in this process.

    Returns
    -------
    int
        Forward and backward graphs together.

    Example
    -------
    >>> cached_graphs()
    0
    """
    return len(_GRAPHS)


def graph_key(op: str, causal: bool, *tensors: Any) -> tuple[Any, ...]:
    """The cache key of a graph: the op, the mask, and every tensor's shape, strides, dtype and device.

    Parameters
    ----------
    op
        ``"forward"`` or ``"backward"``.
    causal
        The mask.
    tensors
        Every tensor the graph binds.

    Returns
    -------
    tuple[Any, ...]
        A hashable key; two calls share a graph exactly when their keys are equal.

    Example
    -------
    >>> import torch
    >>> x = torch.empty(1, 2, 4, 8)
    >>> graph_key("fwd", True, x) == graph_key("fwd", True, x.transpose(1, 2).contiguous().transpose(1, 2))
    False
    """
    return (op, causal, *((tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device)) for t in tensors))


def check_inputs(q: Any, k: Any, v: Any) -> None:
    """Refuse, at the op boundary, what the cuDNN graph cannot take.

    Parameters
    ----------
    q
        The query tensor.
    k
        The key tensor.
    v
        The value tensor.

    Raises
    ------
    InputError
        A tensor that is not 4-D B×H×S×D, not on a CUDA device, not fp16/bf16, of another dtype
        than Q, with a head dim that is not contiguous or not a multiple of 8, or head counts
        that do not group.

    Example
    -------
    >>> import torch
    >>> try:
    ...     check_inputs(*(torch.empty(1, 2, 4, 8, dtype=torch.bfloat16),) * 3)
    ... except InputError as exc:
    ...     print(exc)
    cudnn_guide.sdpa: q is on cpu; cuDNN attention runs on a CUDA device (move it with .cuda())
    """
    import torch

    from cudnn_guide.graphs.attention_inputs import check_heads

    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise InputError(f"cudnn_guide.sdpa: {name} must be 4-D B×H×S×D, got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise InputError(f"cudnn_guide.sdpa: {name} is {t.dtype}; cuDNN attention takes float16 or bfloat16")
        if t.dtype != q.dtype:
            raise InputError(f"cudnn_guide.sdpa: {name} is {t.dtype} but q is {q.dtype}; use one dtype")
        if t.stride(-1) != 1 or t.shape[-1] % 8:
            raise InputError(
                f"cudnn_guide.sdpa: {name} needs a contiguous head dim that is a multiple of 8 "
                f"(shape {tuple(t.shape)}, strides {tuple(t.stride())}); call .contiguous() or pad the head dim"
            )
    check_heads(q, k, v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cuda":
            raise InputError(
                f"cudnn_guide.sdpa: {name} is on {t.device}; cuDNN attention runs on a CUDA device "
                "(move it with .cuda())"
            )


def _problem(q: Any, causal: bool) -> Any:
    """The :class:`~cudnn_guide.graphs.attention.SdpaProblem` whose scale, mask and dtype these tensors need."""
    from cudnn_guide.graphs.attention import SdpaProblem

    b, h, s, d = q.shape
    return SdpaProblem(batch=b, heads=h, seq=s, head_dim=d, causal=causal, dtype=str(q.dtype).removeprefix("torch."))


def forward_graph(q: Any, k: Any, v: Any, o: Any, stats: Any, causal: bool) -> Any:
    """Build (or fetch) the forward graph for these layouts: SDPA writing O and the fp32 log-sum-exp.

    It is :func:`cudnn_guide.graphs.attention.sdpa_forward_training_graph`, declared from these
    tensors (their heads, so grouped K/V too, and their strides), cached by :func:`graph_key`.

    Parameters
    ----------
    q
        Queries, B×Hq×S×D.
    k
        Keys, B×Hkv×S×D.
    v
        Values, B×Hkv×S×Dv.
    o
        The output it will write, B×Hq×S×Dv.
    stats
        The fp32 statistics it will write, B×Hq×S×1.
    causal
        Top-left causal mask, or none.

    Returns
    -------
    Any
        A :class:`~cudnn_guide.graphs.BuiltGraph` with tensors ``q, k, v, o, stats``.

    Example
    -------
    >>> fused = forward_graph(q, k, v, o, stats, causal=True)
    """
    from cudnn_guide.graphs.attention import sdpa_forward_training_graph

    key = graph_key("forward", causal, q, k, v, o, stats)
    if key not in _GRAPHS:
        _GRAPHS[key] = sdpa_forward_training_graph(
            _problem(q, causal), dict(q=q, k=k, v=v, o=o, stats=stats), name="cudnn_guide.sdpa"
        )
    return _GRAPHS[key]


def backward_graph(
    q: Any, k: Any, v: Any, o: Any, stats: Any, d_o: Any, grads: tuple[Any, Any, Any], causal: bool
) -> Any:
    """Build (or fetch) the backward graph for these layouts: ``sdpa_backward`` writing dQ, dK, dV.

    It is :func:`cudnn_guide.graphs.attention.sdpa_backward_graph`, declared from these tensors and
    cached by :func:`graph_key`.

    Parameters
    ----------
    q
        Queries of the forward.
    k
        Keys of the forward.
    v
        Values of the forward.
    o
        The forward's output.
    stats
        The forward's statistics.
    d_o
        The gradient of the output.
    grads
        The dQ, dK, dV tensors it will write.
    causal
        The forward's mask.

    Returns
    -------
    Any
        A :class:`~cudnn_guide.graphs.BuiltGraph` with tensors ``q, k, v, o, d_o, stats, dq, dk, dv``.

    Example
    -------
    >>> fused = backward_graph(q, k, v, o, stats, d_o, (dq, dk, dv), causal=True)
    """
    from cudnn_guide.graphs.attention import sdpa_backward_graph

    key = graph_key("backward", causal, q, k, v, o, stats, d_o, *grads)
    if key not in _GRAPHS:
        data = dict(q=q, k=k, v=v, o=o, stats=stats, d_o=d_o, dq=grads[0], dk=grads[1], dv=grads[2])
        _GRAPHS[key] = sdpa_backward_graph(_problem(q, causal), data, name="cudnn_guide.sdpa_backward")
    return _GRAPHS[key]


def register_ops() -> Any:
    """Register ``torch.ops.cudnn_guide.sdpa`` and ``sdpa_backward`` (once; :func:`attention` calls it).

    Returns
    -------
    Any
        The forward op.

    Example
    -------
    >>> sdpa = register_ops()
    >>> o, stats = torch.ops.cudnn_guide.sdpa(q, k, v, True)
    """
    global _OP
    if _OP is not None:
        return _OP
    import torch

    # The schemas are spelled out: this module's annotations are strings (postponed evaluation).
    @torch.library.custom_op(
        "cudnn_guide::sdpa", mutates_args=(), schema="(Tensor q, Tensor k, Tensor v, bool causal) -> (Tensor, Tensor)"
    )
    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
        check_inputs(q, k, v)
        o = torch.empty(*q.shape[:-1], v.shape[-1], device=q.device, dtype=q.dtype)
        stats = torch.empty(*q.shape[:-1], 1, device=q.device, dtype=torch.float32)
        fused = forward_graph(q, k, v, o, stats, causal)
        # the cache key holds every tensor's layout, so the pack matches the declaration: no re-check per call
        fused.execute(fused.pack(q=q, k=k, v=v, o=o, stats=stats), check=False)
        return o, stats

    @sdpa.register_fake
    def _(q, k, v, causal):
        return q.new_empty(*q.shape[:-1], v.shape[-1]), q.new_empty(*q.shape[:-1], 1, dtype=torch.float32)

    @torch.library.custom_op(
        "cudnn_guide::sdpa_backward",
        mutates_args=(),
        schema="(Tensor q, Tensor k, Tensor v, Tensor o, Tensor stats, Tensor d_o, bool causal)"
        " -> (Tensor, Tensor, Tensor)",
    )
    def sdpa_backward(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        o: torch.Tensor,
        stats: torch.Tensor,
        d_o: torch.Tensor,
        causal: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dq, dk, dv = grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
        fused = backward_graph(q, k, v, o, stats, d_o, grads, causal)
        pack = fused.pack(q=q, k=k, v=v, o=o, stats=stats, d_o=d_o, dq=dq, dk=dk, dv=dv)
        fused.execute(pack, check=False)
        return grads

    @sdpa_backward.register_fake
    def _(q, k, v, o, stats, d_o, causal):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup_context(ctx, inputs, output):
        q, k, v, causal = inputs
        o, stats = output
        ctx.save_for_backward(q, k, v, o, stats)
        ctx.causal = causal

    def backward(ctx, d_o, _d_stats):
        q, k, v, o, stats = ctx.saved_tensors
        d_o = d_o if d_o.stride() == o.stride() else d_o.contiguous()  # autograd may hand an expanded gradient
        dq, dk, dv = torch.ops.cudnn_guide.sdpa_backward(q, k, v, o, stats, d_o, ctx.causal)
        return dq, dk, dv, None

    sdpa.register_autograd(backward, setup_context=setup_context)
    _OP = sdpa
    return sdpa


_OP: Any = None


def attention(q: Any, k: Any, v: Any, causal: bool = True) -> Any:
    """Attention through ``torch.ops.cudnn_guide.sdpa``: differentiable, compilable, capturable.

    Parameters
    ----------
    q
        B×Hq×S×D fp16/bf16 CUDA tensor, head dim contiguous.
    k
        B×Hkv×S×D keys (Hkv dividing Hq), same dtype.
    v
        B×Hkv×S×Dv values, same dtype.
    causal
        Mask future keys (top-left causal).

    Returns
    -------
    Any
        O, B×Hq×S×Dv.

    Raises
    ------
    InputError
        See :func:`check_inputs`.

    Example
    -------
    >>> out = attention(q, k, v)            # eager, with autograd
    >>> torch.compile(model, fullgraph=True)  # traced without graph breaks
    """
    return _op()(q, k, v, causal)[0]


def _op() -> Any:
    return _OP if _OP is not None else register_ops()
