"""Ready-made problems and graphs that several examples share.

Each problem is a small dataclass that knows its shapes, its FLOP and byte counts, how to make
random inputs, and its PyTorch reference; each ``*_graph`` function declares and builds the cuDNN
graph for it and returns a :class:`Fused` (the built graph plus its named graph tensors).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import graphs, tensors

__all__ = ["Fused", "ConvProblem", "conv_bias_relu_graph"]


@dataclasses.dataclass
class Fused:
    """A built graph and its named I/O tensors; :meth:`pack` maps torch tensors onto them."""

    built: graphs.BuiltGraph
    io: dict[str, Any]

    def pack(self, **data: Any) -> dict[Any, Any]:
        missing = set(self.io) - set(data)
        if missing:
            raise KeyError(f"pack() needs tensors for {sorted(missing)}")
        return {self.io[k]: v for k, v in data.items()}


@dataclasses.dataclass(frozen=True)
class ConvProblem:
    """A 2-D convolution ``y = relu(conv(x, w) + b)`` in NHWC.

    ``x`` is N×C×H×W, ``w`` K×C×R×S, ``b`` 1×K×1×1, all channels-last; ``y`` is N×K×P×Q.
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
    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype)

    @property
    def flops(self) -> int:
        """Multiply-adds of the convolution, counted as 2 FLOPs each (bias and ReLU not counted)."""
        return 2 * self.n * self.k * self.p * self.q * self.c * self.r * self.s

    @property
    def bytes(self) -> int:
        """The fewest bytes a fused kernel must move: read x, w, b once; write y once."""
        item = 2 if self.dtype in ("bfloat16", "float16") else 4
        return item * (self.n * self.c * self.h * self.w + self.k * self.c * self.r * self.s + self.k
                       + self.n * self.k * self.p * self.q)

    def __str__(self) -> str:
        return (f"N{self.n} C{self.c} {self.h}×{self.w} → K{self.k} {self.r}×{self.s} "
                f"pad {self.padding} stride {self.stride}, {self.dtype}, NHWC")

    def make_inputs(self, seed: int = 0) -> dict[str, Any]:
        """Random ``x``, ``w``, ``b`` on the GPU (channels-last), and an empty ``y``."""
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        dt = self.torch_dtype
        x = torch.randn(self.n, self.c, self.h, self.w, device="cuda", dtype=dt, generator=g)
        w = torch.randn(self.k, self.c, self.r, self.s, device="cuda", dtype=dt, generator=g) / (self.c * self.r * self.s) ** 0.5
        b = torch.randn(1, self.k, 1, 1, device="cuda", dtype=dt, generator=g)
        y = torch.empty(self.n, self.k, self.p, self.q, device="cuda", dtype=dt)
        return {"x": tensors.nhwc(x), "w": tensors.nhwc(w), "b": tensors.nhwc(b), "y": tensors.nhwc(y)}

    def torch_forward(self, x: Any, w: Any, b: Any) -> Any:
        """The same computation in PyTorch."""
        import torch.nn.functional as F

        return F.relu(F.conv2d(x, w, b.reshape(-1), stride=self.stride, padding=self.padding))


def conv_bias_relu_graph(problem: ConvProblem, inputs: dict[str, Any], *, handle: Any = None,
                         heuristics: Any = ("A", "FALLBACK"), policy: Any = None, name: str = "conv_bias_relu",
                         **graph_kwargs: Any) -> Fused:
    """Declare and build ``relu(conv(x, w) + b)`` as one cuDNN graph.

    ``inputs`` supplies tensors of the right shape, layout and dtype (from
    :meth:`ConvProblem.make_inputs`); their data is not read. Extra keyword arguments go to
    ``cudnn.pygraph`` (for example ``kernel_cache``).
    """
    import cudnn

    handle = handle if handle is not None else graphs.handle_for_current_device()
    g = cudnn.pygraph(
        name=name,
        io_data_type=tensors.cudnn_dtype(problem.torch_dtype),
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
        **graph_kwargs,
    )
    X = tensors.graph_tensor(g, inputs["x"], "x")
    W = tensors.graph_tensor(g, inputs["w"], "w")
    B = tensors.graph_tensor(g, inputs["b"], "b")
    conv = g.conv_fprop(image=X, weight=W, padding=[problem.padding] * 2, stride=[problem.stride] * 2,
                        dilation=[1, 1], compute_data_type=cudnn.data_type.FLOAT, name="conv")
    biased = g.bias(input=conv, bias=B, name="bias")
    Y = g.relu(input=biased, name="relu")
    y = inputs["y"]
    Y.set_output(True).set_data_type(tensors.cudnn_dtype(y.dtype)).set_dim(list(y.shape)).set_stride(list(y.stride()))
    built = graphs.build(g, name=name, heuristics=heuristics, policy=policy, handle=handle)
    return Fused(built, {"x": X, "w": W, "b": B, "y": Y})
