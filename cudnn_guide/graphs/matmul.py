"""Matmul recipes: a batched matmul with a fused bias and activation epilogue."""

from __future__ import annotations

import dataclasses
from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors
from cudnn_guide.graphs.declare import Problem, new_graph

__all__ = ["MatmulProblem", "matmul_epilogue_graph"]


# ---------------------------------------------------------------------------------------------
# Matmul with a fused epilogue: scale (pass-by-value) → bias → GELU, plus AMAX of the result
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MatmulProblem(Problem):
    """``y = gelu(alpha · (a @ b) + bias)`` and ``amax = max|y|``, batched, row-major.

    ``a`` is batch×M×K, ``b`` batch×K×N, ``bias`` 1×1×N; ``alpha`` is a host scalar.

    Example
    -------
    >>> p = MatmulProblem(batch=16, m=512, k=1024, n=512, alpha=0.5)
    >>> inputs = p.make_inputs()
    """

    batch: int = 16
    m: int = 512
    k: int = 1024
    n: int = 512
    alpha: float = 0.5
    dtype: str = "bfloat16"

    @property
    def flops(self) -> int:
        """The GEMM's multiply-adds as 2 FLOPs each (the epilogue's few FLOPs per output not counted)."""
        return 2 * self.batch * self.m * self.n * self.k

    @property
    def bytes(self) -> int:
        """Fewest bytes for the fused graph: read a, b, bias once; write y once."""
        return 2 * (self.batch * (self.m * self.k + self.k * self.n + self.m * self.n) + self.n)

    def __str__(self) -> str:
        return f"batch {self.batch}, {self.m}×{self.k} @ {self.k}×{self.n}, {self.dtype}"

    def make_inputs(self, seed: int = 0) -> dict[str, Any]:
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        dt = self.torch_dtype
        a = torch.randn(self.batch, self.m, self.k, device="cuda", dtype=dt, generator=g)
        b = torch.randn(self.batch, self.k, self.n, device="cuda", dtype=dt, generator=g) / self.k**0.5
        bias = torch.randn(1, 1, self.n, device="cuda", dtype=dt, generator=g)
        y = torch.empty(self.batch, self.m, self.n, device="cuda", dtype=dt)
        amax = torch.empty(1, 1, 1, device="cuda", dtype=torch.float32)
        return {"a": a, "b": b, "bias": bias, "y": y, "amax": amax}

    def torch_forward(self, a: Any, b: Any, bias: Any) -> tuple[Any, Any]:
        """The PyTorch chain: matmul, scale, bias, GELU, then ``abs(y)`` and its max — six kernels in eager mode
        (plus a one-element cast of the amax)."""
        import torch
        import torch.nn.functional as F

        y = F.gelu(torch.matmul(a, b) * self.alpha + bias)
        return y, y.abs().amax().float().reshape(1, 1, 1)


def matmul_epilogue_graph(
    problem: MatmulProblem,
    inputs: dict[str, Any],
    *,
    handle: Any = None,
    name: str = "matmul_scale_bias_gelu_amax",
    amax: bool = True,
    **graph_kwargs: Any,
) -> graphs.BuiltGraph:
    """Declare and build matmul → scale → bias → GELU with an AMAX reduction, as one graph.

    ``alpha`` is a pass-by-value scalar: feed it with ``tensors.scalar_value(problem.alpha)``
    under the key ``"alpha"`` in :meth:`~cudnn_guide.graphs.BuiltGraph.pack`. ``amax=False`` leaves the reduction out
    (and the ``amax`` tensor out of the pack).

    Parameters
    ----------
    problem
        Shapes, ``alpha`` and dtype.
    inputs
        Tensors from :meth:`MatmulProblem.make_inputs`.
    handle
        cuDNN handle; default the device's.
    name
        Graph name.
    amax
        Include the AMAX reduction.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    graphs.BuiltGraph
        The built graph and its tensors ``a``, ``b``, ``bias``, ``alpha``, ``y`` (and ``amax``).

    Example
    -------
    >>> fused = matmul_epilogue_graph(p, inputs)
    >>> fused.execute(fused.pack(**inputs, alpha=tensors.scalar_value(p.alpha)))
    """
    import cudnn

    g, handle = new_graph(problem, name, handle, graph_kwargs)
    A = tensors.graph_tensor(g, inputs["a"], "a")
    B = tensors.graph_tensor(g, inputs["b"], "b")
    bias = tensors.graph_tensor(g, inputs["bias"], "bias")
    alpha = tensors.scalar(g, "alpha")
    mm = g.matmul(A, B, compute_data_type=cudnn.data_type.FLOAT, name="matmul")
    scaled = g.mul(a=mm, b=alpha, name="scale")
    biased = g.add(a=scaled, b=bias, name="bias")
    Y = g.gelu(input=biased, name="gelu")
    y = inputs["y"]
    Y.set_output(True).set_data_type(tensors.cudnn_dtype(y.dtype)).set_dim(list(y.shape)).set_stride(list(y.stride()))
    io = {"a": A, "b": B, "bias": bias, "alpha": alpha, "y": Y}
    if amax:
        AMAX = g.reduction(
            input=Y, mode=cudnn.reduction_mode.AMAX, compute_data_type=cudnn.data_type.FLOAT, name="amax"
        )
        AMAX.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim([1, 1, 1]).set_stride([1, 1, 1])
        io["amax"] = AMAX
    return graphs.build(g, name=name, handle=handle, io=io)
