"""FP8 graphs for Hopper: per-tensor scaled matmul and scaled attention.

FP8 E4M3 holds magnitudes up to 448 with 3 mantissa bits, so every FP8 tensor travels with a
scale: a tensor is stored as ``t · scale`` in FP8 and the graph multiplies by
``descale = 1/scale`` to recover real values. Outputs that are FP8 themselves get a ``scale``
going in and report their ``amax`` (largest magnitude) coming out, which is what the next step's
scale is computed from.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors
from cudnn_guide.graphs.attention import SdpaProblem
from cudnn_guide.graphs.declare import Problem, new_graph

__all__ = ["quantize", "dequantize", "Fp8MatmulProblem", "make_sdpa_fp8_inputs", "fp8_matmul_graph", "sdpa_fp8_graph"]

E4M3_MAX = 448.0
"""Largest finite FP8 E4M3 value."""


def quantize(t: Any, amax: float | None = None, rank: int = 4) -> tuple[Any, Any, Any]:
    """Per-tensor FP8 E4M3 quantization with the scale that maps ``amax`` onto 448.

    Parameters
    ----------
    t
        A CUDA tensor.
    amax
        The magnitude to map onto the FP8 maximum; default ``t``'s own.
    rank
        Rank of the returned scale tensors (all dimensions 1).

    Returns
    -------
    tuple[Any, Any, Any]
        ``(t_fp8, scale, descale)``; the two scales are fp32 device tensors.

    Example
    -------
    >>> q8, scale_q, descale_q = quantize(q)
    """
    import torch

    amax = float(t.abs().max()) if amax is None else float(amax)
    scale = E4M3_MAX / max(amax, 1e-12)
    t8 = (t.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    shape = (1,) * rank
    return (
        t8,
        torch.full(shape, scale, device=t.device, dtype=torch.float32),
        torch.full(shape, 1.0 / scale, device=t.device, dtype=torch.float32),
    )


def dequantize(t8: Any, descale: Any) -> Any:
    """Real values of an FP8 tensor: ``t8 · descale`` in fp32.

    Parameters
    ----------
    t8
        FP8 tensor.
    descale
        Its descale (1/scale).

    Returns
    -------
    Any
        fp32 tensor.

    Example
    -------
    >>> o = dequantize(o8, 1 / scale_o)
    """
    return t8.float() * descale.reshape(()).float()


@dataclasses.dataclass(frozen=True)
class Fp8MatmulProblem(Problem):
    """``c = (a8 @ b8) · descale_a · descale_b`` with FP8 E4M3 operands and a bf16 result.

    ``a`` is M×K row-major, ``b`` K×N column-major (the layout FP8 tensor cores read), both
    declared with a leading batch dimension of 1.

    Example
    -------
    >>> p = Fp8MatmulProblem(m=8192, n=8192, k=8192)
    >>> ins = p.make_inputs()
    """

    m: int = 8192
    n: int = 8192
    k: int = 8192
    dtype: str = "bfloat16"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def __str__(self) -> str:
        return f"{self.m}×{self.k} @ {self.k}×{self.n}, FP8 E4M3 in, {self.dtype} out"

    def make_inputs(self, seed: int = 0) -> dict[str, Any]:
        """bf16 ``a``, ``b`` (the real values), their FP8 versions and descales, and a ``c`` buffer."""
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        a = torch.randn(1, self.m, self.k, device="cuda", dtype=self.torch_dtype, generator=g)
        b = torch.randn(1, self.n, self.k, device="cuda", dtype=self.torch_dtype, generator=g).transpose(1, 2)
        a8, _, descale_a = quantize(a, rank=3)
        b8, _, descale_b = quantize(b, rank=3)
        return {
            "a": a,
            "b": b,
            "a8": a8,
            "b8": b8.transpose(1, 2).contiguous().transpose(1, 2),
            "descale_a": descale_a,
            "descale_b": descale_b,
            "c": torch.empty(1, self.m, self.n, device="cuda", dtype=self.torch_dtype),
        }


def fp8_matmul_graph(
    problem: Fp8MatmulProblem,
    inputs: dict[str, Any],
    *,
    handle: Any = None,
    name: str = "fp8_matmul",
    **graph_kwargs: Any,
) -> graphs.BuiltGraph:
    """Build the FP8 matmul with both descales applied in the epilogue (fp32 accumulate).

    Parameters
    ----------
    problem
        Shapes.
    inputs
        From :meth:`Fp8MatmulProblem.make_inputs`.
    handle
        cuDNN handle; default the device's.
    name
        Graph name.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    graphs.BuiltGraph
        Tensors ``a8, b8, descale_a, descale_b, c``.

    Example
    -------
    >>> f = fp8_matmul_graph(p, ins)
    >>> f.execute(f.pack(**{k: ins[k] for k in f.io}))
    """
    import cudnn

    g, handle = new_graph(problem, name, handle, graph_kwargs)
    io = {n: tensors.graph_tensor(g, inputs[n], n) for n in ("a8", "b8", "descale_a", "descale_b")}
    mm = g.matmul(A=io["a8"], B=io["b8"], compute_data_type=cudnn.data_type.FLOAT, name="matmul")
    mm.set_data_type(cudnn.data_type.FLOAT)
    c = g.mul(a=g.mul(a=mm, b=io["descale_a"], name="descale_a"), b=io["descale_b"], name="descale_b")
    io["c"] = tensors.output_like(c, inputs["c"])
    return graphs.build(g, name=name, handle=handle, io=io)


def make_sdpa_fp8_inputs(q: Any, k: Any, v: Any) -> dict[str, Any]:
    """Quantize real-valued ``q, k, v`` for :func:`sdpa_fp8_graph` and allocate its outputs.

    Each input gets its own per-tensor scale. The softmax probabilities lie in [0, 1], so they
    are quantized with ``scale_s = 448``. The output is a convex combination of rows of ``v``,
    so ``max|o| ≤ max|v|``: ``scale_o = 448 / max|v|`` can never overflow.

    Parameters
    ----------
    q
        Queries (B×H×S×D, bf16 or fp16).
    k
        Keys.
    v
        Values.

    Returns
    -------
    dict[str, Any]
        ``q8, k8, v8``, ``descale_q/k/v``, ``descale_s``, ``scale_s``, ``scale_o``, ``descale_o``,
        and empty ``o8`` (FP8), ``amax_s``, ``amax_o``.

    Example
    -------
    >>> f8 = make_sdpa_fp8_inputs(ins['q'], ins['k'], ins['v'])
    >>> o = dequantize(f8['o8'], f8['descale_o'])
    """
    import torch

    out: dict[str, Any] = {}
    for name, t in (("q", q), ("k", k), ("v", v)):
        out[name + "8"], _, out["descale_" + name] = quantize(t)
    one = dict(size=(1, 1, 1, 1), device=q.device, dtype=torch.float32)
    scale_o = E4M3_MAX / max(float(v.abs().max()), 1e-12)
    out.update(
        scale_s=torch.full(fill_value=E4M3_MAX, **one),
        descale_s=torch.full(fill_value=1 / E4M3_MAX, **one),
        scale_o=torch.full(fill_value=scale_o, **one),
        descale_o=torch.full(fill_value=1 / scale_o, **one),
        o8=torch.empty(q.shape, device=q.device, dtype=torch.float8_e4m3fn),
        amax_s=torch.zeros(**one),
        amax_o=torch.zeros(**one),
    )
    return out


def sdpa_fp8_graph(
    problem: SdpaProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "sdpa_fp8", **graph_kwargs: Any
) -> graphs.BuiltGraph:
    """Build FP8 attention: FP8 ``q, k, v`` with their descales; the softmax probabilities are
    re-quantized inside with ``scale_s``/``descale_s``; the FP8 output takes ``scale_o``; the
    graph reports ``amax_s`` and ``amax_o``.

    Parameters
    ----------
    problem
        Shapes and masking (its ``dtype`` is the real-valued precision, not the storage).
    inputs
        ``q8, k8, v8``, the fp32 1×1×1×1 ``descale_q, descale_k, descale_v, descale_s, scale_s,
        scale_o``, and buffers ``o8`` (FP8), ``amax_s``, ``amax_o`` (fp32 1×1×1×1).
    handle
        cuDNN handle; default the device's.
    name
        Graph name.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    graphs.BuiltGraph
        The tensors named as in ``inputs``.

    Example
    -------
    >>> f = sdpa_fp8_graph(p, ins)
    >>> f.execute(f.pack(**{k: ins[k] for k in f.io}))
    """
    import cudnn

    g, handle = new_graph(problem, name, handle, graph_kwargs)
    names = ("q8", "k8", "v8", "descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
    io = {n: tensors.graph_tensor(g, inputs[n], n) for n in names}
    # sdpa_fp8 names the band's right edge ``right_bound`` (sdpa: ``diagonal_band_right_bound``)
    mask = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, right_bound=0) if problem.causal else {}
    O, _stats, amax_s, amax_o = g.sdpa_fp8(
        name="sdpa_fp8",
        q=io["q8"],
        k=io["k8"],
        v=io["v8"],
        descale_q=io["descale_q"],
        descale_k=io["descale_k"],
        descale_v=io["descale_v"],
        descale_s=io["descale_s"],
        scale_s=io["scale_s"],
        scale_o=io["scale_o"],
        generate_stats=False,
        attn_scale=problem.scale,
        compute_data_type=cudnn.data_type.FLOAT,
        **mask,
    )
    io["o8"] = tensors.output_like(O, inputs["o8"])
    io["amax_s"] = tensors.output_like(amax_s, inputs["amax_s"])
    io["amax_o"] = tensors.output_like(amax_o, inputs["amax_o"])
    return graphs.build(g, name=name, handle=handle, io=io)
