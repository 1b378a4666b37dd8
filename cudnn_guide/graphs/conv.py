"""Convolution recipes: conv → bias → ReLU in NHWC, declared as the fused-conv page declares it."""

from __future__ import annotations

import dataclasses
from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors
from cudnn_guide.graphs.declare import Problem, new_graph

__all__ = ["ConvProblem", "conv_bias_relu_graph", "declare_conv_bias_relu"]


@dataclasses.dataclass(frozen=True)
class ConvProblem(Problem):
    """A 2-D convolution ``y = relu(conv(x, w) + b)`` in NHWC.

    ``x`` is N×C×H×W, ``w`` K×C×R×S, ``b`` 1×K×1×1, all channels-last; ``y`` is N×K×P×Q.

    Example
    -------
    >>> p = ConvProblem(n=32, c=128, h=56, w=56, k=256)
    >>> inputs = p.make_inputs()
    >>> print(p, p.flops / 1e9, 'GFLOP')
    """

    n: int = 32
    c: int = 128
    h: int = 56
    w: int = 56
    k: int = 256
    r: int = 3
    s: int = 3
    padding: int = 1
    stride: int = 1
    dtype: str = "bfloat16"

    @property
    def p(self) -> int:
        return (self.h + 2 * self.padding - self.r) // self.stride + 1

    @property
    def q(self) -> int:
        return (self.w + 2 * self.padding - self.s) // self.stride + 1

    @property
    def flops(self) -> int:
        """Multiply-adds of the convolution, counted as 2 FLOPs each (bias and ReLU not counted)."""
        return 2 * self.n * self.k * self.p * self.q * self.c * self.r * self.s

    @property
    def bytes(self) -> int:
        """The fewest bytes a fused kernel must move: read x, w, b once; write y once."""
        item = 2 if self.dtype in ("bfloat16", "float16") else 4
        return item * (
            self.n * self.c * self.h * self.w
            + self.k * self.c * self.r * self.s
            + self.k
            + self.n * self.k * self.p * self.q
        )

    def __str__(self) -> str:
        return (
            f"N{self.n} C{self.c} {self.h}×{self.w} → K{self.k} {self.r}×{self.s} "
            f"pad {self.padding} stride {self.stride}, {self.dtype}, NHWC"
        )

    def make_inputs(self, seed: int = 0) -> dict[str, Any]:
        """Random ``x``, ``w``, ``b`` on the GPU (channels-last), and an empty ``y``."""
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        dt = self.torch_dtype
        x = torch.randn(self.n, self.c, self.h, self.w, device="cuda", dtype=dt, generator=g)
        w = (
            torch.randn(self.k, self.c, self.r, self.s, device="cuda", dtype=dt, generator=g)
            / (self.c * self.r * self.s) ** 0.5
        )
        b = torch.randn(1, self.k, 1, 1, device="cuda", dtype=dt, generator=g)
        y = torch.empty(self.n, self.k, self.p, self.q, device="cuda", dtype=dt)
        return {"x": tensors.nhwc(x), "w": tensors.nhwc(w), "b": tensors.nhwc(b), "y": tensors.nhwc(y)}

    def torch_forward(self, x: Any, w: Any, b: Any) -> Any:
        """The same computation in PyTorch."""
        import torch.nn.functional as F

        return F.relu(F.conv2d(x, w, b.reshape(-1), stride=self.stride, padding=self.padding))


def conv_bias_relu_graph(
    problem: ConvProblem,
    inputs: dict[str, Any],
    *,
    handle: Any = None,
    heuristics: Any = ("A", "FALLBACK"),
    policy: Any = None,
    name: str = "conv_bias_relu",
    **graph_kwargs: Any,
) -> graphs.BuiltGraph:
    """Declare and build ``relu(conv(x, w) + b)`` as one cuDNN graph.

    ``inputs`` supplies tensors of the right shape, layout and dtype (from
    :meth:`ConvProblem.make_inputs`); their data is not read. Extra keyword arguments go to
    ``cudnn.pygraph`` (for example ``kernel_cache``).

    Parameters
    ----------
    problem
        The convolution's shapes and dtype.
    inputs
        Tensors from :meth:`ConvProblem.make_inputs` (layout and dtype only).
    handle
        cuDNN handle; default the device's.
    heuristics
        Heuristic modes for the plan list.
    policy
        ``cudnn.build_plan_policy``; ``ALL`` for tuning.
    name
        Graph name.
    graph_kwargs
        More ``cudnn.pygraph`` arguments (``kernel_cache``, ...).

    Returns
    -------
    graphs.BuiltGraph
        The built graph and its tensors ``x``, ``w``, ``b``, ``y``.

    Example
    -------
    >>> inputs = problem.make_inputs()
    >>> fused = conv_bias_relu_graph(problem, inputs)
    >>> fused.execute(fused.pack(**inputs))
    """
    g, handle = new_graph(problem, name, handle, graph_kwargs)
    io = declare_conv_bias_relu(g, **inputs, padding=problem.padding, stride=problem.stride)
    return graphs.build(g, name=name, heuristics=heuristics, policy=policy, handle=handle, io=io)


def declare_conv_bias_relu(g: Any, x: Any, w: Any, b: Any, y: Any, padding: int, stride: int) -> dict[str, Any]:
    """Declare ``relu(conv(x, w) + b)`` on ``g``, writing ``y``; return the graph tensors by name.

    The fused-conv page writes this function out; pages that build the layer another way
    (every plan, a kernel cache) declare it with this and run the build steps themselves.

    Parameters
    ----------
    g
        A ``cudnn.pygraph`` (bf16 I/O, fp32 compute).
    x
        The input image, N×C×H×W channels-last (lends dims, strides and dtype; not read).
    w
        The filter, K×C×R×S channels-last.
    b
        The bias, 1×K×1×1.
    y
        The output buffer, N×K×P×Q channels-last.
    padding
        The convolution's padding, both spatial dims.
    stride
        Its stride, both spatial dims.

    Returns
    -------
    dict[str, Any]
        Graph tensors ``x``, ``w``, ``b``, ``y``.

    Example
    -------
    >>> io = declare_conv_bias_relu(g, **problem.make_inputs(), padding=1, stride=1)
    """
    import cudnn

    X, W, B = g.tensor_like(x, name="x"), g.tensor_like(w, name="w"), g.tensor_like(b, name="b")
    conv = g.conv_fprop(
        image=X,
        weight=W,
        padding=[padding] * 2,
        stride=[stride] * 2,
        dilation=[1, 1],
        compute_data_type=cudnn.data_type.FLOAT,
        name="conv",
    )
    biased = g.bias(input=conv, bias=B, name="bias")
    Y = g.relu(input=biased, name="relu")
    Y.set_output(True).set_data_type(y.dtype).set_dim(list(y.shape)).set_stride(list(y.stride()))
    return {"x": X, "w": W, "b": B, "y": Y}
