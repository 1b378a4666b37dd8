"""Ready-made problems and graphs that several examples share.

Each problem is a small dataclass that knows its shapes, its FLOP and byte counts, how to make
random inputs, and its PyTorch reference; each ``*_graph`` function declares and builds the cuDNN
graph for it and returns a :class:`Fused` (the built graph plus its named graph tensors).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import graphs, tensors

__all__ = [
    "Fused",
    "ConvProblem",
    "conv_bias_relu_graph",
    "declare_conv_bias_relu",
    "MatmulProblem",
    "matmul_epilogue_graph",
    "SdpaProblem",
    "sdpa_graph",
]


@dataclasses.dataclass
class Fused:
    """A built graph and its named I/O tensors; :meth:`pack` maps torch tensors onto them.

    Example
    -------
    >>> fused = conv_bias_relu_graph(problem, inputs)
    >>> fused.built.execute(fused.pack(**inputs))
    """

    built: graphs.BuiltGraph
    io: dict[str, Any]

    def pack(self, **data: Any) -> dict[Any, Any]:
        missing = set(self.io) - set(data)
        if missing:
            raise KeyError(f"pack() needs tensors for {sorted(missing)}")
        return {self.io[k]: v for k, v in data.items()}

    @property
    def uids(self) -> dict[str, int]:
        """Name → UID of each I/O tensor: how a deserialized plan is fed (it has no tensor objects)."""
        return {k: int(t.get_uid()) for k, t in self.io.items()}


def _new_graph(problem: Any, name: str, handle: Any, graph_kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """A ``cudnn.pygraph`` with the problem's I/O dtype, fp32 intermediates and compute, on ``handle``."""
    import cudnn

    handle = handle if handle is not None else graphs.handle_for_current_device()
    graph = cudnn.pygraph(
        name=name,
        io_data_type=tensors.cudnn_dtype(problem.torch_dtype),
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
        **graph_kwargs,
    )
    return graph, handle


class _Problem:
    """Shared by the problem classes: ``dtype`` names a torch dtype."""

    dtype: str

    @property
    def torch_dtype(self) -> Any:
        """The problem's ``dtype`` as a ``torch.dtype``."""
        import torch

        return getattr(torch, self.dtype)


@dataclasses.dataclass(frozen=True)
class ConvProblem(_Problem):
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
) -> Fused:
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
    Fused
        The built graph and its tensors ``x``, ``w``, ``b``, ``y``.

    Example
    -------
    >>> inputs = problem.make_inputs()
    >>> fused = conv_bias_relu_graph(problem, inputs)
    >>> fused.built.execute(fused.pack(**inputs))
    """
    g, handle = _new_graph(problem, name, handle, graph_kwargs)
    io = declare_conv_bias_relu(g, **inputs, padding=problem.padding, stride=problem.stride)
    built = graphs.build(g, name=name, heuristics=heuristics, policy=policy, handle=handle)
    return Fused(built, io)


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


# ---------------------------------------------------------------------------------------------
# Matmul with a fused epilogue: scale (pass-by-value) → bias → GELU, plus AMAX of the result
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MatmulProblem(_Problem):
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
) -> Fused:
    """Declare and build matmul → scale → bias → GELU with an AMAX reduction, as one graph.

    ``alpha`` is a pass-by-value scalar: feed it with ``tensors.scalar_value(problem.alpha)``
    under the key ``"alpha"`` in :meth:`Fused.pack`. ``amax=False`` leaves the reduction out
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
    Fused
        The built graph and its tensors ``a``, ``b``, ``bias``, ``alpha``, ``y`` (and ``amax``).

    Example
    -------
    >>> fused = matmul_epilogue_graph(p, inputs)
    >>> fused.built.execute(fused.pack(**inputs, alpha=tensors.scalar_value(p.alpha)))
    """
    import cudnn

    g, handle = _new_graph(problem, name, handle, graph_kwargs)
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
    built = graphs.build(g, name=name, handle=handle)
    return Fused(built, io)


# ---------------------------------------------------------------------------------------------
# Scaled dot-product attention (forward, inference)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SdpaProblem(_Problem):
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


def _causal_mask(problem: SdpaProblem) -> dict[str, Any]:
    """``sdpa``/``sdpa_backward`` keywords for the problem's mask: causal is the top-left band
    ending on the diagonal (key j visible to query i when j ≤ i); empty for full attention."""
    import cudnn

    return (
        dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
        if problem.causal
        else {}
    )


def sdpa_graph(
    problem: SdpaProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "sdpa", **graph_kwargs: Any
) -> Fused:
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
    Fused
        The built graph and its tensors ``q``, ``k``, ``v``, ``o``.

    Example
    -------
    >>> fused = sdpa_graph(p, inputs)
    >>> fused.built.execute(fused.pack(**inputs))
    """
    import cudnn

    g, handle = _new_graph(problem, name, handle, graph_kwargs)
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
        **_causal_mask(problem),
    )
    o = inputs["o"]
    O.set_output(True).set_data_type(tensors.cudnn_dtype(o.dtype)).set_dim(list(o.shape)).set_stride(list(o.stride()))
    built = graphs.build(g, name=name, handle=handle)
    return Fused(built, {"q": Q, "k": K, "v": V, "o": O})
