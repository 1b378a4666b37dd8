"""BatchNorm → ReLU in NHWC: training with running statistics, and inference with the
statistics folded into a scale and a shift.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors
from cudnn_guide.graphs.declare import Problem, new_graph

__all__ = ["BatchNormProblem", "fold_batchnorm", "batchnorm_relu_graph", "folded_batchnorm_relu_graph"]


# ---------------------------------------------------------------------------------------------
# BatchNorm → ReLU, NHWC
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BatchNormProblem(Problem):
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
) -> graphs.BuiltGraph:
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
    graphs.BuiltGraph
        The built graph and its tensors, named as above.

    Example
    -------
    >>> f = batchnorm_relu_graph(p, ins, training=True)
    """

    name = name or ("batchnorm_relu_training" if training else "batchnorm_relu_inference")
    g, handle = new_graph(problem, name, handle, graph_kwargs)
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
    return graphs.build(g, name=name, handle=handle, io=io)


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
) -> graphs.BuiltGraph:
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
    graphs.BuiltGraph
        Tensors ``x, a, b, y``.

    Example
    -------
    >>> ins['a'], ins['b'] = fold_batchnorm(...)
    >>> f = folded_batchnorm_relu_graph(p, ins)
    """
    g, handle = new_graph(problem, name, handle, graph_kwargs)
    io = {n: tensors.graph_tensor(g, inputs[n], n) for n in ("x", "a", "b")}
    affine = g.add(a=g.mul(a=io["x"], b=io["a"], name="scale"), b=io["b"], name="shift")
    io["y"] = tensors.output_like(g.relu(input=affine, name="relu"), inputs["y"])
    return graphs.build(g, name=name, handle=handle, io=io)
