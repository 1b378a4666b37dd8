"""Attention graphs: causal SDPA for inference, and for training the forward with statistics and
the backward; :func:`sdpa_band_launcher`, causal SDPA with an optional sliding window, built and bound
for timing.

The forward graph for training keeps the softmax statistics (``generate_stats=True``): one fp32
log-sum-exp per query row, which the backward graph reads instead of recomputing the softmax
normalisation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors
from cudnn_guide.graphs.declare import Problem, causal_mask, new_graph

__all__ = [
    "SdpaProblem",
    "sdpa_graph",
    "training_flops",
    "make_training_inputs",
    "sdpa_forward_training_graph",
    "sdpa_backward_graph",
    "sdpa_band_launcher",
]


# ---------------------------------------------------------------------------------------------
# Scaled dot-product attention (forward, inference)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SdpaProblem(Problem):
    """Causal (or full) attention ``softmax(q kᵀ · scale) v`` on B×H×S×D tensors (BHSD, contiguous).

    Example
    -------
    >>> p = SdpaProblem(batch=4, heads=16, seq=4096, head_dim=128, causal=True)
    >>> print(p.flops / 1e12, 'TFLOP')
    """

    batch: int = 4
    heads: int = 16
    seq: int = 4096
    head_dim: int = 128
    causal: bool = True
    dtype: str = "bfloat16"

    @property
    def scale(self) -> float:
        return self.head_dim**-0.5

    @property
    def flops(self) -> float:
        """Two GEMMs (QKᵀ and PV) of 2·S·S·D each per head; causal masking halves the useful work."""
        full = 4.0 * self.batch * self.heads * self.seq * self.seq * self.head_dim
        return full / 2 if self.causal else full

    @property
    def bytes(self) -> int:
        return 2 * 4 * self.batch * self.heads * self.seq * self.head_dim  # q, k, v read; o written

    def __str__(self) -> str:
        return (
            f"B{self.batch} H{self.heads} S{self.seq} D{self.head_dim}, "
            f"{'causal' if self.causal else 'full'}, {self.dtype}"
        )

    def make_inputs(self, seed: int = 0) -> dict[str, Any]:
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        shape = (self.batch, self.heads, self.seq, self.head_dim)
        q, k, v = (torch.randn(shape, device="cuda", dtype=self.torch_dtype, generator=g) for _ in range(3))
        return {"q": q, "k": k, "v": v, "o": torch.empty(shape, device="cuda", dtype=self.torch_dtype)}

    def torch_forward(self, q: Any, k: Any, v: Any) -> Any:
        import torch.nn.functional as F

        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale)


def sdpa_graph(
    problem: SdpaProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "sdpa", **graph_kwargs: Any
) -> graphs.BuiltGraph:
    """Declare and build cuDNN's fused attention for ``problem``.

    Causal masking uses the current API, ``diagonal_alignment=TOP_LEFT`` with
    ``diagonal_band_right_bound=0`` (key j is visible to query i when j ≤ i), and
    ``generate_stats=False`` for inference (it replaces the deprecated ``is_inference``).

    Parameters
    ----------
    problem
        Shapes, masking and dtype.
    inputs
        Tensors from :meth:`SdpaProblem.make_inputs`.
    handle
        cuDNN handle; default the device's.
    name
        Graph name.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    graphs.BuiltGraph
        The built graph and its tensors ``q``, ``k``, ``v``, ``o``.

    Example
    -------
    >>> fused = sdpa_graph(p, inputs)
    >>> fused.execute(fused.pack(**inputs))
    """
    import cudnn

    g, handle = new_graph(problem, name, handle, graph_kwargs)
    Q = tensors.graph_tensor(g, inputs["q"], "q")
    K = tensors.graph_tensor(g, inputs["k"], "k")
    V = tensors.graph_tensor(g, inputs["v"], "v")
    O, _stats = g.sdpa(
        name="sdpa",
        q=Q,
        k=K,
        v=V,
        generate_stats=False,
        attn_scale=problem.scale,
        compute_data_type=cudnn.data_type.FLOAT,
        **causal_mask(problem),
    )
    o = inputs["o"]
    O.set_output(True).set_data_type(tensors.cudnn_dtype(o.dtype)).set_dim(list(o.shape)).set_stride(list(o.stride()))
    return graphs.build(g, name=name, handle=handle, io={"q": Q, "k": K, "v": V, "o": O})


def training_flops(problem: SdpaProblem) -> float:
    """FLOPs of one forward plus backward pass: the backward's five GEMMs are 2.5× the forward's two.

    The usual flash-attention convention (recomputing the scores in the backward is not counted).

    Parameters
    ----------
    problem
        The attention problem.

    Returns
    -------
    float
        3.5 × the forward FLOPs.

    Example
    -------
    >>> training_flops(SdpaProblem(seq=4096)) / problem.flops
    3.5
    """
    return 3.5 * problem.flops


def make_training_inputs(problem: SdpaProblem, seed: int = 0) -> dict[str, Any]:
    """Inputs and output buffers for a forward + backward step.

    ``q, k, v`` and the incoming gradient ``d_o`` are random; ``o``, ``stats`` (B×H×S×1, fp32)
    and ``dq, dk, dv`` are empty buffers.

    Parameters
    ----------
    problem
        Shapes and dtype.
    seed
        Random seed.

    Returns
    -------
    dict[str, Any]
        ``q, k, v, o, stats, d_o, dq, dk, dv``.

    Example
    -------
    >>> ins = make_training_inputs(SdpaProblem(batch=2, seq=1024))
    """
    import torch

    data = problem.make_inputs(seed=seed)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    shape = tuple(data["q"].shape)
    data["stats"] = torch.empty(*shape[:-1], 1, device="cuda", dtype=torch.float32)
    data["d_o"] = torch.randn(shape, device="cuda", dtype=problem.torch_dtype, generator=g)
    for name in ("dq", "dk", "dv"):
        data[name] = torch.empty(shape, device="cuda", dtype=problem.torch_dtype)
    return data


def sdpa_forward_training_graph(
    problem: SdpaProblem,
    inputs: dict[str, Any],
    *,
    handle: Any = None,
    name: str = "sdpa_forward_training",
    **graph_kwargs: Any,
) -> graphs.BuiltGraph:
    """Build the training forward: attention output *and* its softmax statistics.

    Parameters
    ----------
    problem
        Shapes, masking, dtype.
    inputs
        From :func:`make_training_inputs`.
    handle
        cuDNN handle; default the device's.
    name
        Graph name.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    graphs.BuiltGraph
        Tensors ``q, k, v, o, stats``.

    Example
    -------
    >>> fwd = sdpa_forward_training_graph(p, ins)
    >>> fwd.execute(fwd.pack(**{k: ins[k] for k in fwd.io}))
    """
    import cudnn

    g, handle = new_graph(problem, name, handle, graph_kwargs)
    Q, K, V = (tensors.graph_tensor(g, inputs[n], n) for n in ("q", "k", "v"))
    O, stats = g.sdpa(
        name="sdpa",
        q=Q,
        k=K,
        v=V,
        generate_stats=True,
        attn_scale=problem.scale,
        compute_data_type=cudnn.data_type.FLOAT,
        **causal_mask(problem),
    )
    tensors.output_like(O, inputs["o"])
    tensors.output_like(stats, inputs["stats"])
    return graphs.build(g, name=name, handle=handle, io={"q": Q, "k": K, "v": V, "o": O, "stats": stats})


def sdpa_backward_graph(
    problem: SdpaProblem,
    inputs: dict[str, Any],
    *,
    handle: Any = None,
    name: str = "sdpa_backward",
    **graph_kwargs: Any,
) -> graphs.BuiltGraph:
    """Build the backward: ``dq, dk, dv`` from ``q, k, v``, the forward's ``o`` and ``stats``, and ``d_o``.

    The mask and scale must match the forward's (both come from ``problem``).

    Parameters
    ----------
    problem
        Shapes, masking, dtype.
    inputs
        From :func:`make_training_inputs`.
    handle
        cuDNN handle; default the device's.
    name
        Graph name.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    graphs.BuiltGraph
        Tensors ``q, k, v, o, d_o, stats, dq, dk, dv``.

    Example
    -------
    >>> bwd = sdpa_backward_graph(p, ins)
    >>> bwd.execute(bwd.pack(**{k: ins[k] for k in bwd.io}))
    """
    import cudnn

    g, handle = new_graph(problem, name, handle, graph_kwargs)
    io = {n: tensors.graph_tensor(g, inputs[n], n) for n in ("q", "k", "v", "o", "d_o", "stats")}
    dQ, dK, dV = g.sdpa_backward(
        name="sdpa_backward",
        q=io["q"],
        k=io["k"],
        v=io["v"],
        o=io["o"],
        dO=io["d_o"],
        stats=io["stats"],
        attn_scale=problem.scale,
        compute_data_type=cudnn.data_type.FLOAT,
        **causal_mask(problem),
    )
    for n, t in (("dq", dQ), ("dk", dK), ("dv", dV)):
        io[n] = tensors.output_like(t, inputs[n])
    return graphs.build(g, name=name, handle=handle, io=io)


# ---------------------------------------------------------------------------------------------
# Causal SDPA with a sliding window (forward, inference), as a page writes it
# ---------------------------------------------------------------------------------------------


def sdpa_band_launcher(
    q: Any, k: Any, v: Any, *, left_bound: int | None = None, handle: Any = None
) -> tuple[Callable[[], None], Any]:
    """cuDNN's graph SDPA over B×H×S×D tensors, causal, with an optional sliding window: built, bound.

    Declared with the frontend's own calls, as plot_19's lesson declares its window graph: a
    top-left band ending on the diagonal (``diagonal_band_right_bound=0``) and, with
    ``left_bound=W``, starting W keys back (each query sees itself and the W - 1 keys before it);
    scale ``D ** -0.5``, no statistics, fp32 intermediates and compute; planned from heuristics A,
    then FALLBACK (``pygraph.build``).

    Parameters
    ----------
    q
        B×H×S×D queries (their dtype is the graph's I/O type).
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    left_bound
        ``diagonal_band_left_bound``: the window's width W, or None for plain causal attention.
    handle
        cuDNN handle; default the device's.

    Returns
    -------
    tuple[Callable[[], None], Any]
        A zero-argument launcher on torch's current stream (:meth:`~cudnn_guide.graphs.BuiltGraph.bind`),
        and the output tensor (``torch.empty_like(q)``) it writes.

    Example
    -------
    >>> run, o = sdpa_band_launcher(q, k, v, left_bound=512, handle=handle)
    >>> run()  # o holds the windowed attention
    """
    import cudnn
    import torch

    handle = handle if handle is not None else graphs.handle_for_current_device()
    o = torch.empty_like(q)
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=tensors.cudnn_dtype(q.dtype),
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    Q, K, V = (g.tensor_like(q, name="q"), g.tensor_like(k, name="k"), g.tensor_like(v, name="v"))
    O, _ = g.sdpa(
        q=Q,
        k=K,
        v=V,
        attn_scale=q.shape[-1] ** -0.5,
        generate_stats=False,
        diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
        diagonal_band_right_bound=0,
        diagonal_band_left_bound=left_bound,
    )
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return graphs.adopt(g, handle, name="sdpa").bind({Q: q, K: k, V: v, O: o}), o
