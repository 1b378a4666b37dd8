"""Normalization graphs: LayerNorm and RMSNorm (training forward, backward, residual-add fusion).

cuDNN normalizes a 4-D tensor: a ``tokens × hidden`` activation is declared as
``tokens × hidden × 1 × 1`` (channels innermost), with per-token statistics ``tokens × 1 × 1 × 1``
in fp32. Norms are memory-bound: their speed is bytes moved per second, reported against the
measured copy bandwidth.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors
from cudnn_guide.graphs.declare import Problem, new_graph

__all__ = ["NormProblem", "norm_forward_graph", "norm_backward_graph", "pack_norm"]


def _as_4d(t: Any) -> Any:
    """A tokens × hidden tensor viewed as tokens × hidden × 1 × 1, channels innermost."""
    n, c = t.shape
    return t.as_strided((n, c, 1, 1), (c, 1, c, c))


@dataclasses.dataclass(frozen=True)
class NormProblem(Problem):
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
            from cudnn_guide.errors import InputError

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
) -> graphs.BuiltGraph:
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
    graphs.BuiltGraph
        Tensors ``x``, ``scale``, ``epsilon``, ``y`` and, as they apply, ``bias``, ``r``, ``s``,
        ``mean``, ``inv_var``; :func:`pack_norm` maps the 2-D buffers onto them.

    Example
    -------
    >>> f = norm_forward_graph(p, ins)
    >>> f.execute(pack_norm(f, ins, eps=p.eps))
    """
    import cudnn

    name = name or f"{problem.kind}norm_forward{'_residual' if problem.residual else ''}"
    g, handle = new_graph(problem, name, handle, graph_kwargs)
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
    return graphs.build(g, name=name, handle=handle, io=io)


def norm_backward_graph(
    problem: NormProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "", **graph_kwargs: Any
) -> graphs.BuiltGraph:
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
    graphs.BuiltGraph
        Tensors ``dy``, ``x``, ``scale``, ``inv_var``, ``dx``, ``dscale`` (and ``mean``, ``dbias``).

    Example
    -------
    >>> b = norm_backward_graph(p, ins)
    >>> b.execute(pack_norm(b, ins))
    """
    name = name or f"{problem.kind}norm_backward"
    g, handle = new_graph(problem, name, handle, graph_kwargs)
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
    return graphs.build(g, name=name, handle=handle, io=io)


def pack_norm(fused: graphs.BuiltGraph, inputs: dict[str, Any], eps: float | None = None) -> dict[Any, Any]:
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
    >>> fused.execute(pack_norm(fused, ins, eps=1e-5))
    """
    pack = {}
    for key, gt in fused.io.items():
        if key == "epsilon":
            if eps is None:
                from cudnn_guide.errors import InputError

                raise InputError("pack_norm: this forward graph needs eps=")
            pack[gt] = tensors.scalar_value(eps, rank=4)
        elif inputs[key].dim() == 1:
            pack[gt] = _param(inputs[key])
        else:
            pack[gt] = _as_4d(inputs[key])
    return pack
