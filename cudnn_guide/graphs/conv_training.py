"""Convolution training graphs: forward, data gradient (dgrad) and weight gradient (wgrad).

A training step of ``y = conv(x, w)`` runs three convolutions: the forward; dgrad,
``dx = conv_transpose(dy, w)``, which the previous layer needs; and wgrad, ``dw`` from ``x``
and ``dy``, which the optimizer needs. Each is its own cuDNN graph over the same
:class:`~cudnn_guide.graphs.conv.ConvProblem`.
"""

from __future__ import annotations

from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors
from cudnn_guide.graphs.conv import ConvProblem
from cudnn_guide.graphs.declare import new_graph

__all__ = ["make_training_inputs", "conv_dgrad_graph", "conv_wgrad_graph", "torch_training_step"]


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


def _conv_graph(
    problem: ConvProblem,
    inputs: dict[str, Any],
    op: str,
    ports: dict[str, str],
    out: str,
    handle: Any,
    name: str,
    graph_kwargs: dict[str, Any],
) -> graphs.BuiltGraph:
    """One convolution graph: ``op`` (``conv_fprop``/``conv_dgrad``/``conv_wgrad``) with its input
    ports fed from ``inputs`` (port → input name), the result written to ``inputs[out]``."""
    import cudnn

    g, handle = new_graph(problem, name, handle, graph_kwargs)
    io = {key: tensors.graph_tensor(g, inputs[key], key) for key in ports.values()}
    result = getattr(g, op)(
        **{port: io[key] for port, key in ports.items()},
        compute_data_type=cudnn.data_type.FLOAT,
        name=op,
        padding=[problem.padding] * 2,
        stride=[problem.stride] * 2,
        dilation=[1, 1],
    )
    io[out] = tensors.output_like(result, inputs[out])
    return graphs.build(g, name=name, handle=handle, io=io)


def conv_fprop_graph(
    problem: ConvProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "conv_fprop", **graph_kwargs: Any
) -> graphs.BuiltGraph:
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
    graphs.BuiltGraph
        Tensors ``x, w, y``.

    Example
    -------
    >>> f = conv_fprop_graph(p, ins)
    >>> f.execute(f.pack(x=ins['x'], w=ins['w'], y=ins['y']))
    """
    return _conv_graph(problem, inputs, "conv_fprop", {"image": "x", "weight": "w"}, "y", handle, name, graph_kwargs)


def conv_dgrad_graph(
    problem: ConvProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "conv_dgrad", **graph_kwargs: Any
) -> graphs.BuiltGraph:
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
    graphs.BuiltGraph
        Tensors ``dy, w, dx``.

    Example
    -------
    >>> f = conv_dgrad_graph(p, ins)
    >>> f.execute(f.pack(dy=ins['dy'], w=ins['w'], dx=ins['dx']))
    """
    return _conv_graph(problem, inputs, "conv_dgrad", {"loss": "dy", "filter": "w"}, "dx", handle, name, graph_kwargs)


def conv_wgrad_graph(
    problem: ConvProblem, inputs: dict[str, Any], *, handle: Any = None, name: str = "conv_wgrad", **graph_kwargs: Any
) -> graphs.BuiltGraph:
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
    graphs.BuiltGraph
        Tensors ``x, dy, dw``.

    Example
    -------
    >>> f = conv_wgrad_graph(p, ins)
    >>> f.execute(f.pack(x=ins['x'], dy=ins['dy'], dw=ins['dw']))
    """
    return _conv_graph(problem, inputs, "conv_wgrad", {"image": "x", "loss": "dy"}, "dw", handle, name, graph_kwargs)


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
