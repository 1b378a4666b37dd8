"""Normalization graphs: LayerNorm and RMSNorm (training forward, backward, residual-add fusion)
and BatchNorm → ReLU in NHWC (training with running statistics, and inference).

cuDNN normalizes a 4-D tensor: for the token-wise norms a ``tokens × hidden`` activation is
declared as ``tokens × hidden × 1 × 1`` (channels innermost), with per-token statistics
``tokens × 1 × 1 × 1`` in fp32. Norms are memory-bound: their speed is bytes moved per second,
reported against the measured copy bandwidth.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import graphs, tensors
from .recipes import Fused, _new_graph, _Problem

__all__ = [
    "NormProblem",
    "norm_forward_graph",
    "norm_backward_graph",
    "pack_norm",
    "BatchNormProblem",
    "batchnorm_relu_graph",
    "fold_batchnorm",
    "folded_batchnorm_relu_graph",
]


def _as_4d(t: Any) -> Any:
    """A tokens × hidden tensor viewed as tokens × hidden × 1 × 1, channels innermost."""
    n, c = t.shape
    return t.as_strided((n, c, 1, 1), (c, 1, c, c))


@dataclasses.dataclass(frozen=True)
class NormProblem(_Problem):
    """LayerNorm (``kind="layer"``) or RMSNorm (``kind="rms"``) over the last dimension of a
    ``tokens × hidden`` activation; with ``residual=True`` the input is ``x + r``, and the sum is
    written out too (the next block's residual), as in a pre-norm transformer.

    Example
    -------
    >>> p = NormProblem(tokens=16384, hidden=4096, kind="rms")
    >>> ins = p.make_inputs()
    """

    tokens: int = 16384
    hidden: int = 4096
    kind: str = "layer"
    residual: bool = False
    eps: float = 1e-5
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        if self.kind not in ("layer", "rms"):
            from .errors import InputError

            raise InputError(f"NormProblem.kind must be 'layer' or 'rms', got {self.kind!r}")

    @property
    def item(self) -> int:
        return 2 if self.dtype in ("bfloat16", "float16") else 4

    @property
    def forward_bytes(self) -> int:
        """Fewest bytes for the forward: read x (and r), write y (and the sum); parameters and
        statistics are negligible and not counted."""
        n = self.tokens * self.hidden * self.item
        return n * (4 if self.residual else 2)

    @property
    def backward_bytes(self) -> int:
        """Fewest bytes for the backward: read x and dy, write dx."""
        return 3 * self.tokens * self.hidden * self.item

    def __str__(self) -> str:
        name = "LayerNorm" if self.kind == "layer" else "RMSNorm"
        return f"{'residual add → ' if self.residual else ''}{name}, {self.tokens} tokens × {self.hidden}, {self.dtype}"

    def make_inputs(self, seed: int = 0) -> dict[str, Any]:
        """``x`` (and ``r``), ``scale``, ``bias`` (LayerNorm), the incoming gradient ``dy``, and
        empty buffers ``y``, ``mean`` (LayerNorm), ``inv_var``, ``dx``, ``dscale``, ``dbias``
        (and ``s`` = x + r). 2-D tensors; :func:`norm_forward_graph` declares their 4-D views."""
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        dt, n, c = self.torch_dtype, self.tokens, self.hidden
        data = {
            "x": 2 * torch.randn(n, c, device="cuda", dtype=dt, generator=g) + 0.5,
            "scale": 1 + 0.1 * torch.randn(c, device="cuda", dtype=dt, generator=g),
            "dy": torch.randn(n, c, device="cuda", dtype=dt, generator=g),
            "y": torch.empty(n, c, device="cuda", dtype=dt),
            "inv_var": torch.empty(n, 1, device="cuda", dtype=torch.float32),
            "dx": torch.empty(n, c, device="cuda", dtype=dt),
            "dscale": torch.empty(c, device="cuda", dtype=dt),
        }
        if self.kind == "layer":
            data["bias"] = 0.1 * torch.randn(c, device="cuda", dtype=dt, generator=g)
            data["mean"] = torch.empty(n, 1, device="cuda", dtype=torch.float32)
            data["dbias"] = torch.empty(c, device="cuda", dtype=dt)
        if self.residual:
            data["r"] = torch.randn(n, c, device="cuda", dtype=dt, generator=g)
            data["s"] = torch.empty(n, c, device="cuda", dtype=dt)
        return data

    def torch_forward(self, x: Any, scale: Any, bias: Any = None, r: Any = None) -> Any:
        """PyTorch's norm on ``x`` (or ``x + r``): ``F.layer_norm`` or ``F.rms_norm``."""
        import torch.nn.functional as F

        if r is not None:
            x = x + r
        if self.kind == "layer":
            return F.layer_norm(x, (self.hidden,), scale, bias, self.eps)
        return F.rms_norm(x, (self.hidden,), scale, self.eps)

    def torch_stats(self, x: Any) -> dict[str, Any]:
        """Per-token ``mean`` (LayerNorm) and ``inv_var`` = 1/√(var + eps) in fp32, as the forward saves them."""
        import torch

        x = x.float()
        if self.kind == "layer":
            return {
                "mean": x.mean(-1, keepdim=True),
                "inv_var": torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + self.eps),
            }
        return {"inv_var": torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)}


def _param(t: Any) -> Any:
    return t.reshape(1, -1, 1, 1)


def norm_forward_graph(
    problem: NormProblem,
    inputs: dict[str, Any],
    *,
    training: bool = True,
    handle: Any = None,
    name: str = "",
    **graph_kwargs: Any,
) -> Fused:
    """Build the norm's forward; in training mode it also writes the statistics the backward needs.

    Feed ``epsilon`` with ``tensors.scalar_value(problem.eps, rank=4)``.

    Parameters
    ----------
    problem
        Norm kind, shapes, residual fusion.
    inputs
        From :meth:`NormProblem.make_inputs`.
    training
        Save ``mean``/``inv_var`` (TRAINING phase) or not (INFERENCE).
    handle
        cuDNN handle; default the device's.
    name
        Graph name; default from the problem.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    Fused
        Tensors ``x``, ``scale``, ``epsilon``, ``y`` and, as they apply, ``bias``, ``r``, ``s``,
        ``mean``, ``inv_var``; :func:`pack_norm` maps the 2-D buffers onto them.

    Example
    -------
    >>> f = norm_forward_graph(p, ins)
    >>> f.built.execute(pack_norm(f, ins, eps=p.eps))
    """
    import cudnn

    name = name or f"{problem.kind}norm_forward{'_residual' if problem.residual else ''}"
    g, handle = _new_graph(problem, name, handle, graph_kwargs)
    io = {
        "x": tensors.graph_tensor(g, _as_4d(inputs["x"]), "x"),
        "scale": tensors.graph_tensor(g, _param(inputs["scale"]), "scale"),
        "epsilon": tensors.scalar(g, "epsilon", rank=4),
    }
    src = io["x"]
    if problem.residual:
        io["r"] = tensors.graph_tensor(g, _as_4d(inputs["r"]), "r")
        src = g.add(a=io["x"], b=io["r"], name="residual_add")
        io["s"] = tensors.output_like(src, _as_4d(inputs["s"]))
    phase = cudnn.norm_forward_phase.TRAINING if training else cudnn.norm_forward_phase.INFERENCE
    if problem.kind == "layer":
        io["bias"] = tensors.graph_tensor(g, _param(inputs["bias"]), "bias")
        Y, mean, inv_var = g.layernorm(
            name="layernorm",
            norm_forward_phase=phase,
            input=src,
            scale=io["scale"],
            bias=io["bias"],
            epsilon=io["epsilon"],
        )
        if training:
            io["mean"] = tensors.output_like(mean, _as_4d(inputs["mean"]))
    else:
        Y, inv_var = g.rmsnorm(
            name="rmsnorm", norm_forward_phase=phase, input=src, scale=io["scale"], epsilon=io["epsilon"]
        )
    if training:
        io["inv_var"] = tensors.output_like(inv_var, _as_4d(inputs["inv_var"]))
    io["y"] = tensors.output_like(Y, _as_4d(inputs["y"]))
    built = graphs.build(g, name=name, handle=handle)
    return Fused(built, io)


def norm_backward_graph(
    problem: NormProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "", **graph_kwargs: Any
) -> Fused:
    """Build the norm's backward: ``dx``, ``dscale`` (and ``dbias``) from ``dy``, ``x``, the scale
    and the forward's saved statistics.

    With ``residual=True`` the forward's input was ``s = x + r``: pass ``s`` as ``x`` here.

    Parameters
    ----------
    problem
        Norm kind and shapes.
    inputs
        From :meth:`NormProblem.make_inputs`, with the forward's ``mean``/``inv_var`` filled.
    handle
        cuDNN handle; default the device's.
    name
        Graph name; default from the problem.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    Fused
        Tensors ``dy``, ``x``, ``scale``, ``inv_var``, ``dx``, ``dscale`` (and ``mean``, ``dbias``).

    Example
    -------
    >>> b = norm_backward_graph(p, ins)
    >>> b.built.execute(pack_norm(b, ins))
    """
    name = name or f"{problem.kind}norm_backward"
    g, handle = _new_graph(problem, name, handle, graph_kwargs)
    io = {
        "dy": tensors.graph_tensor(g, _as_4d(inputs["dy"]), "dy"),
        "x": tensors.graph_tensor(g, _as_4d(inputs["x"]), "x"),
        "scale": tensors.graph_tensor(g, _param(inputs["scale"]), "scale"),
        "inv_var": tensors.graph_tensor(g, _as_4d(inputs["inv_var"]), "inv_var"),
    }
    if problem.kind == "layer":
        io["mean"] = tensors.graph_tensor(g, _as_4d(inputs["mean"]), "mean")
        DX, DScale, DBias = g.layernorm_backward(
            name="layernorm_backward",
            grad=io["dy"],
            input=io["x"],
            scale=io["scale"],
            mean=io["mean"],
            inv_variance=io["inv_var"],
        )
        io["dbias"] = tensors.output_like(DBias, _param(inputs["dbias"]))
    else:
        DX, DScale, _ = g.rmsnorm_backward(
            name="rmsnorm_backward",
            grad=io["dy"],
            input=io["x"],
            scale=io["scale"],
            inv_variance=io["inv_var"],
            has_dbias=False,
        )
    io["dx"] = tensors.output_like(DX, _as_4d(inputs["dx"]))
    io["dscale"] = tensors.output_like(DScale, _param(inputs["dscale"]))
    built = graphs.build(g, name=name, handle=handle)
    return Fused(built, io)


def pack_norm(fused: Fused, inputs: dict[str, Any], eps: float | None = None) -> dict[Any, Any]:
    """The variant pack for a norm graph: 2-D buffers viewed as the graph's 4-D tensors.

    Parameters
    ----------
    fused
        From :func:`norm_forward_graph` or :func:`norm_backward_graph`.
    inputs
        The 2-D buffers by name.
    eps
        The epsilon value, for a forward graph.

    Returns
    -------
    dict[Any, Any]
        Graph tensor → torch tensor.

    Example
    -------
    >>> fused.built.execute(pack_norm(fused, ins, eps=1e-5))
    """
    pack = {}
    for key, gt in fused.io.items():
        if key == "epsilon":
            if eps is None:
                from .errors import InputError

                raise InputError("pack_norm: this forward graph needs eps=")
            pack[gt] = tensors.scalar_value(eps, rank=4)
        elif inputs[key].dim() == 1:
            pack[gt] = _param(inputs[key])
        else:
            pack[gt] = _as_4d(inputs[key])
    return pack


# ---------------------------------------------------------------------------------------------
# BatchNorm → ReLU, NHWC
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BatchNormProblem(_Problem):
    """``relu(batchnorm(x))`` on an N×C×H×W activation stored NHWC, as in a ResNet block.

    Training normalizes with the batch's statistics, saves them (mean and 1/√(var+eps)) for the
    backward, and updates the running statistics in place; inference normalizes with the running
    statistics.

    Example
    -------
    >>> p = BatchNormProblem(n=64, c=256, h=56, w=56)
    >>> ins = p.make_inputs()
    """

    n: int = 64
    c: int = 256
    h: int = 56
    w: int = 56
    eps: float = 1e-5
    momentum: float = 0.1
    dtype: str = "float16"

    @property
    def bytes(self) -> int:
        """Fewest bytes: read x once, write y once (a training forward reads x twice unless the
        statistics pass and the normalize pass share one read; counted once here)."""
        item = 2 if self.dtype in ("bfloat16", "float16") else 4
        return 2 * item * self.n * self.c * self.h * self.w

    def __str__(self) -> str:
        return f"BatchNorm → ReLU, N{self.n} C{self.c} {self.h}×{self.w}, {self.dtype}, NHWC"

    def make_inputs(self, seed: int = 0) -> dict[str, Any]:
        """``x`` (NHWC), fp32 ``scale``/``bias``/``running_mean``/``running_var`` (1×C×1×1),
        and buffers ``y``, ``mean``, ``inv_var``."""
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        c = self.c
        per_channel = dict(device="cuda", dtype=torch.float32)
        x = torch.randn(self.n, c, self.h, self.w, device="cuda", dtype=self.torch_dtype, generator=g)
        return {
            "x": tensors.nhwc(x * 1.5 + 0.3),
            "scale": 1 + 0.1 * torch.randn(1, c, 1, 1, generator=g, **per_channel),
            "bias": 0.1 * torch.randn(1, c, 1, 1, generator=g, **per_channel),
            "running_mean": 0.1 * torch.randn(1, c, 1, 1, generator=g, **per_channel),
            "running_var": 1 + 0.1 * torch.rand(1, c, 1, 1, generator=g, **per_channel),
            "y": tensors.nhwc(torch.empty_like(x)),
            "mean": torch.empty(1, c, 1, 1, **per_channel),
            "inv_var": torch.empty(1, c, 1, 1, **per_channel),
        }

    def torch_forward(
        self, x: Any, scale: Any, bias: Any, running_mean: Any, running_var: Any, training: bool = True
    ) -> Any:
        """``relu(F.batch_norm(...))``; in training it updates ``running_mean``/``running_var`` in place."""
        import torch.nn.functional as F

        y = F.batch_norm(
            x,
            running_mean.reshape(-1),
            running_var.reshape(-1),
            scale.reshape(-1),
            bias.reshape(-1),
            training=training,
            momentum=self.momentum,
            eps=self.eps,
        )
        return F.relu(y, inplace=True)


def batchnorm_relu_graph(
    problem: BatchNormProblem,
    inputs: dict[str, Any],
    *,
    training: bool = True,
    handle: Any = None,
    name: str = "",
    **graph_kwargs: Any,
) -> Fused:
    """Build BatchNorm → ReLU as one graph, for training or for inference.

    Training: inputs ``x, scale, bias, running_mean, running_var`` and the host scalars
    ``epsilon``, ``momentum``; outputs ``y``, the saved ``mean`` and ``inv_var``, and the updated
    running statistics (bind them to the same buffers to update in place: ``next_running_mean``,
    ``next_running_var``). Inference: inputs ``x, mean, inv_var`` (from the running statistics),
    ``scale, bias``; output ``y``.

    Parameters
    ----------
    problem
        Shapes and dtype.
    inputs
        From :meth:`BatchNormProblem.make_inputs`.
    training
        Training forward (batch statistics) or inference (running statistics).
    handle
        cuDNN handle; default the device's.
    name
        Graph name; default from the mode.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    Fused
        The built graph and its tensors, named as above.

    Example
    -------
    >>> f = batchnorm_relu_graph(p, ins, training=True)
    """

    name = name or ("batchnorm_relu_training" if training else "batchnorm_relu_inference")
    g, handle = _new_graph(problem, name, handle, graph_kwargs)
    x = tensors.graph_tensor(g, inputs["x"], "x")
    scale = tensors.graph_tensor(g, inputs["scale"], "scale")
    bias = tensors.graph_tensor(g, inputs["bias"], "bias")
    io = {"x": x, "scale": scale, "bias": bias}
    if training:
        io["running_mean"] = tensors.graph_tensor(g, inputs["running_mean"], "running_mean")
        io["running_var"] = tensors.graph_tensor(g, inputs["running_var"], "running_var")
        io["epsilon"] = tensors.scalar(g, "epsilon", rank=4)
        io["momentum"] = tensors.scalar(g, "momentum", rank=4)
        Y, mean, inv_var, next_mean, next_var = g.batchnorm(
            name="batchnorm",
            input=x,
            scale=scale,
            bias=bias,
            in_running_mean=io["running_mean"],
            in_running_var=io["running_var"],
            epsilon=io["epsilon"],
            momentum=io["momentum"],
        )
        io["mean"] = tensors.output_like(mean, inputs["mean"])
        io["inv_var"] = tensors.output_like(inv_var, inputs["inv_var"])
        io["next_running_mean"] = tensors.output_like(next_mean, inputs["running_mean"])
        io["next_running_var"] = tensors.output_like(next_var, inputs["running_var"])
    else:
        io["mean"] = tensors.graph_tensor(g, inputs["mean"], "mean")
        io["inv_var"] = tensors.graph_tensor(g, inputs["inv_var"], "inv_var")
        Y = g.batchnorm_inference(
            name="batchnorm_inference", input=x, mean=io["mean"], inv_variance=io["inv_var"], scale=scale, bias=bias
        )
    io["y"] = tensors.output_like(g.relu(input=Y, name="relu"), inputs["y"])
    built = graphs.build(g, name=name, handle=handle)
    return Fused(built, io)


def fold_batchnorm(scale: Any, bias: Any, running_mean: Any, running_var: Any, eps: float) -> tuple[Any, Any]:
    """Fold inference BatchNorm into one per-channel affine map: ``bn(x) = x · a + b``.

    ``a = scale / √(running_var + eps)`` and ``b = bias − running_mean · a``, computed once in
    fp32, as inference frameworks do.

    Parameters
    ----------
    scale
        BatchNorm scale (γ), 1×C×1×1 fp32.
    bias
        BatchNorm shift (β), 1×C×1×1 fp32.
    running_mean
        Running mean, 1×C×1×1 fp32.
    running_var
        Running variance, 1×C×1×1 fp32.
    eps
        The BatchNorm epsilon.

    Returns
    -------
    tuple[Any, Any]
        ``(a, b)``, 1×C×1×1 fp32.

    Example
    -------
    >>> a, b = fold_batchnorm(ins['scale'], ins['bias'], ins['running_mean'], ins['running_var'], 1e-5)
    """
    import torch

    a = scale.float() * torch.rsqrt(running_var.float() + eps)
    return a, bias.float() - running_mean.float() * a


def folded_batchnorm_relu_graph(
    problem: BatchNormProblem,
    inputs: dict[str, Any],
    *,
    handle: Any = None,
    name: str = "folded_batchnorm_relu",
    **graph_kwargs: Any,
) -> Fused:
    """Build inference BatchNorm → ReLU as ``relu(x · a + b)`` with the folded per-channel ``a``, ``b``.

    Parameters
    ----------
    problem
        Shapes and dtype.
    inputs
        ``x``, ``y`` and the folded ``a``, ``b`` from :func:`fold_batchnorm`.
    handle
        cuDNN handle; default the device's.
    name
        Graph name.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    Fused
        Tensors ``x, a, b, y``.

    Example
    -------
    >>> ins['a'], ins['b'] = fold_batchnorm(...)
    >>> f = folded_batchnorm_relu_graph(p, ins)
    """
    g, handle = _new_graph(problem, name, handle, graph_kwargs)
    io = {n: tensors.graph_tensor(g, inputs[n], n) for n in ("x", "a", "b")}
    affine = g.add(a=g.mul(a=io["x"], b=io["a"], name="scale"), b=io["b"], name="shift")
    io["y"] = tensors.output_like(g.relu(input=affine, name="relu"), inputs["y"])
    return Fused(graphs.build(g, name=name, handle=handle), io)
