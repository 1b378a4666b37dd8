"""Convolution training graphs: forward, data gradient (dgrad) and weight gradient (wgrad).

A training step of ``y = conv(x, w)`` runs three convolutions: the forward; dgrad,
``dx = conv_transpose(dy, w)``, which the previous layer needs; and wgrad, ``dw`` from ``x``
and ``dy``, which the optimizer needs. Each is its own cuDNN graph over the same
:class:`~cudnn_guide.recipes.ConvProblem`.
"""

from __future__ import annotations

from typing import Any

from . import graphs, tensors
from .recipes import ConvProblem, Fused, _new_graph

__all__ = ["make_training_inputs", "conv_fprop_graph", "conv_dgrad_graph", "conv_wgrad_graph", "torch_training_step"]


def make_training_inputs(problem: ConvProblem, seed: int = 0) -> dict[str, Any]:
    """The forward's ``x, w, y`` plus the incoming gradient ``dy`` and buffers ``dx, dw`` (all NHWC).

    Parameters
    ----------
    problem
        The convolution.
    seed
        Random seed.

    Returns
    -------
    dict[str, Any]
        ``x, w, y, dy, dx, dw``.

    Example
    -------
    >>> ins = make_training_inputs(ConvProblem())
    """
    import torch

    data = problem.make_inputs(seed=seed)
    data.pop("b")
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    dy = torch.randn(tuple(data["y"].shape), device="cuda", dtype=problem.torch_dtype, generator=g)
    data["dy"] = tensors.nhwc(dy)
    data["dx"] = tensors.nhwc(torch.empty_like(data["x"]))
    data["dw"] = tensors.nhwc(torch.empty_like(data["w"]))
    return data


def _conv_attrs(problem: ConvProblem) -> dict[str, Any]:
    return dict(padding=[problem.padding] * 2, stride=[problem.stride] * 2, dilation=[1, 1])


def conv_fprop_graph(problem: ConvProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "conv_fprop",
                     **graph_kwargs: Any) -> Fused:
    """Build the plain forward ``y = conv(x, w)``.

    Parameters
    ----------
    problem
        The convolution.
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
    Fused
        Tensors ``x, w, y``.

    Example
    -------
    >>> f = conv_fprop_graph(p, ins)
    >>> f.built.execute(f.pack(x=ins['x'], w=ins['w'], y=ins['y']))
    """
    import cudnn

    g, handle = _new_graph(problem, name, handle, graph_kwargs)
    X = tensors.graph_tensor(g, inputs["x"], "x")
    W = tensors.graph_tensor(g, inputs["w"], "w")
    Y = g.conv_fprop(image=X, weight=W, compute_data_type=cudnn.data_type.FLOAT, name="fprop", **_conv_attrs(problem))
    tensors.output_like(Y, inputs["y"])
    return Fused(graphs.build(g, name=name, handle=handle), {"x": X, "w": W, "y": Y})


def conv_dgrad_graph(problem: ConvProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "conv_dgrad",
                     **graph_kwargs: Any) -> Fused:
    """Build the data gradient ``dx`` from ``dy`` and ``w``.

    Parameters
    ----------
    problem
        The convolution.
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
    Fused
        Tensors ``dy, w, dx``.

    Example
    -------
    >>> f = conv_dgrad_graph(p, ins)
    >>> f.built.execute(f.pack(dy=ins['dy'], w=ins['w'], dx=ins['dx']))
    """
    import cudnn

    g, handle = _new_graph(problem, name, handle, graph_kwargs)
    DY = tensors.graph_tensor(g, inputs["dy"], "dy")
    W = tensors.graph_tensor(g, inputs["w"], "w")
    DX = g.conv_dgrad(loss=DY, filter=W, compute_data_type=cudnn.data_type.FLOAT, name="dgrad", **_conv_attrs(problem))
    tensors.output_like(DX, inputs["dx"])
    return Fused(graphs.build(g, name=name, handle=handle), {"dy": DY, "w": W, "dx": DX})


def conv_wgrad_graph(problem: ConvProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "conv_wgrad",
                     **graph_kwargs: Any) -> Fused:
    """Build the weight gradient ``dw`` from ``x`` and ``dy``.

    Parameters
    ----------
    problem
        The convolution.
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
    Fused
        Tensors ``x, dy, dw``.

    Example
    -------
    >>> f = conv_wgrad_graph(p, ins)
    >>> f.built.execute(f.pack(x=ins['x'], dy=ins['dy'], dw=ins['dw']))
    """
    import cudnn

    g, handle = _new_graph(problem, name, handle, graph_kwargs)
    X = tensors.graph_tensor(g, inputs["x"], "x")
    DY = tensors.graph_tensor(g, inputs["dy"], "dy")
    DW = g.conv_wgrad(image=X, loss=DY, compute_data_type=cudnn.data_type.FLOAT, name="wgrad", **_conv_attrs(problem))
    tensors.output_like(DW, inputs["dw"])
    return Fused(graphs.build(g, name=name, handle=handle), {"x": X, "dy": DY, "dw": DW})


def torch_training_step(problem: ConvProblem, inputs: dict[str, Any]) -> Any:
    """PyTorch's own training step for the same conv: autograd forward, then backward of ``dy``.

    Parameters
    ----------
    problem
        The convolution.
    inputs
        From :func:`make_training_inputs` (``x``, ``w``, ``dy``).

    Returns
    -------
    Any
        A zero-argument function running one step (the gradients land in leaf copies).

    Example
    -------
    >>> step = torch_training_step(p, ins); step()
    """
    import torch.nn.functional as F

    x = inputs["x"].detach().clone().requires_grad_(True)
    w = inputs["w"].detach().clone().requires_grad_(True)
    dy = inputs["dy"]

    def step() -> None:
        x.grad = w.grad = None
        y = F.conv2d(x, w, stride=problem.stride, padding=problem.padding)
        y.backward(dy)

    return step
