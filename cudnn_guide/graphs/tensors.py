"""Describe torch tensors to a cuDNN graph.

cuDNN's graph tensors carry *logical* dims in NCHW order and *physical* strides. A PyTorch tensor
in ``torch.channels_last`` already has exactly that: logical NCHW shape, NHWC strides. So
describing a tensor is reading its shape, strides and dtype, after checking they are usable.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cudnn_guide.errors import InputError

__all__ = ["TensorSpec", "graph_tensor", "output_like", "scalar_value", "nhwc"]


def _dtype_table() -> dict[Any, Any]:
    import cudnn
    import torch

    table = {
        torch.float32: cudnn.data_type.FLOAT,
        torch.float16: cudnn.data_type.HALF,
        torch.bfloat16: cudnn.data_type.BFLOAT16,
        torch.float64: cudnn.data_type.DOUBLE,
        torch.int32: cudnn.data_type.INT32,
        torch.int64: cudnn.data_type.INT64,
        torch.int8: cudnn.data_type.INT8,
        torch.uint8: cudnn.data_type.UINT8,
        torch.bool: cudnn.data_type.BOOLEAN,
    }
    for name, cu in (("float8_e4m3fn", "FP8_E4M3"), ("float8_e5m2", "FP8_E5M2")):
        if hasattr(torch, name) and hasattr(cudnn.data_type, cu):
            table[getattr(torch, name)] = getattr(cudnn.data_type, cu)
    return table


def cudnn_dtype(dtype: Any) -> Any:
    """Map a ``torch.dtype`` to ``cudnn.data_type``.

    Parameters
    ----------
    dtype
        A ``torch.dtype``.

    Returns
    -------
    Any
        The ``cudnn.data_type``.

    Raises
    ------
    InputError
        For a dtype cuDNN graphs cannot take, naming the dtypes that work.

    Example
    -------
    >>> import torch
    >>> cudnn_dtype(torch.bfloat16)
    <data_type.BFLOAT16: 9>
    """
    table = _dtype_table()
    try:
        return table[dtype]
    except (KeyError, TypeError):
        names = ", ".join(sorted(str(k).replace("torch.", "") for k in table))
        raise InputError(f"dtype {dtype} has no cuDNN equivalent; use one of: {names}") from None


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """The dims, strides and dtype that describe one tensor to cuDNN.

    Example
    -------
    >>> spec = describe(x)
    >>> print(spec.dims, spec.strides, spec.layout)
    """

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: Any  # torch.dtype

    @property
    def layout(self) -> str:
        """``"NHWC"``/``"NDHWC"`` when channels are innermost (4-D/5-D), else ``"packed"`` or ``"strided"``."""
        if len(self.dims) in (4, 5) and self.strides[1] == 1 and self.dims[1] > 1:
            return "NHWC" if len(self.dims) == 4 else "NDHWC"
        expected, acc = [], 1
        for d in reversed(self.dims):
            expected.append(acc)
            acc *= d
        return "packed" if tuple(reversed(expected)) == self.strides else "strided"


def describe(t: Any, *, name: str = "tensor", allow_cpu: bool = False) -> TensorSpec:
    """Check a torch tensor and return its :class:`TensorSpec`.

    Parameters
    ----------
    t:
        The tensor.
    name:
        Used in error messages.
    allow_cpu:
        Accept a CPU tensor (for shape-only descriptions); graph operands must live on the GPU.

    Returns
    -------
    TensorSpec
        Dims, strides and dtype.

    Raises
    ------
    InputError
        Not a tensor; a CPU tensor where a GPU one is needed; a zero-size dimension; an
        unsupported dtype; overlapping strides.

    Example
    -------
    >>> import torch
    >>> x = torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)
    >>> describe(x, allow_cpu=True).layout
    'NHWC'
    """
    import torch

    if not isinstance(t, torch.Tensor):
        raise InputError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not allow_cpu and t.device.type != "cuda":
        raise InputError(
            f"{name}: tensor is on {t.device}, but cuDNN graph operands must be CUDA tensors; move it with .cuda()"
        )
    if t.dim() == 0:
        raise InputError(f"{name}: a 0-d tensor cannot be a graph operand; use scalar() for scalars")
    if any(d == 0 for d in t.shape):
        raise InputError(f"{name}: shape {tuple(t.shape)} has a zero-size dimension; cuDNN needs every dim >= 1")
    cudnn_dtype(t.dtype)  # raises a clear error for unsupported dtypes
    if not _non_overlapping(tuple(t.shape), tuple(t.stride())):
        raise InputError(
            f"{name}: strides {tuple(t.stride())} for shape {tuple(t.shape)} overlap (an expanded or "
            f"broadcast view); call .contiguous() or .to(memory_format=torch.channels_last)"
        )
    return TensorSpec(tuple(int(d) for d in t.shape), tuple(int(s) for s in t.stride()), t.dtype)


def _non_overlapping(dims: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True when no two indices of a tensor with these dims and strides share memory."""
    pairs = sorted((s, d) for d, s in zip(dims, strides) if d > 1)
    reach = 1
    for stride, dim in pairs:
        if stride < reach:
            return False
        reach = stride * dim
    return True


def graph_tensor(graph: Any, t: Any, name: str) -> Any:
    """Declare a graph input with ``t``'s dims, strides and dtype.

    Parameters
    ----------
    graph
        A ``cudnn.pygraph``.
    t
        A CUDA tensor with the operand's shape, layout and dtype.
    name
        The graph tensor's name.

    Returns
    -------
    Any
        The graph tensor.

    Raises
    ------
    InputError
        As :func:`describe`: a CPU tensor, a zero-size dimension, an unsupported dtype or overlapping strides.

    Example
    -------
    >>> X = graph_tensor(graph, x, "X")
    """
    spec = describe(t, name=name)
    return graph.tensor(name=name, dim=list(spec.dims), stride=list(spec.strides), data_type=cudnn_dtype(spec.dtype))


def output_like(node_output: Any, t: Any) -> Any:
    """Mark a graph operation's result as an output laid out exactly like the torch tensor ``t``.

    cuDNN otherwise picks an output's dtype and strides itself; declaring them from the buffer
    that will receive the result makes the variant-pack check exact.

    Parameters
    ----------
    node_output
        A graph tensor returned by an operation.
    t
        The CUDA tensor that will receive it.

    Returns
    -------
    Any
        ``node_output``, now an output with ``t``'s dims, strides and dtype.

    Example
    -------
    >>> Y = output_like(graph.relu(input=X), y)
    """
    spec = describe(t, name=node_output.get_name())
    return (
        node_output.set_output(True)
        .set_data_type(cudnn_dtype(spec.dtype))
        .set_dim(list(spec.dims))
        .set_stride(list(spec.strides))
    )


def scalar(graph: Any, name: str, dtype: Any = None, rank: int = 3) -> Any:
    """Declare a pass-by-value scalar (a host value baked into each launch, no device buffer).

    Feed it in the variant pack with :func:`scalar_value`.

    Parameters
    ----------
    graph
        A ``cudnn.pygraph``.
    name
        The scalar's name.
    dtype
        Its ``torch.dtype`` (default float32).
    rank
        How many (unit) dimensions it has: the rank of the tensors it combines with (norm
        operations take a 4-D epsilon).

    Returns
    -------
    Any
        The graph tensor.

    Raises
    ------
    InputError
        A dtype cuDNN cannot take.

    Example
    -------
    >>> alpha = scalar(graph, "alpha")
    >>> pack = {alpha: scalar_value(0.5)}
    """
    import torch

    dtype = torch.float32 if dtype is None else dtype
    return graph.tensor(
        name=name, dim=[1] * rank, stride=[1] * rank, is_pass_by_value=True, data_type=cudnn_dtype(dtype)
    )


def scalar_value(value: float, dtype: Any = None, rank: int = 3) -> Any:
    """The host tensor that carries a pass-by-value scalar's value into ``execute``.

    Parameters
    ----------
    value
        The number.
    dtype
        Its ``torch.dtype`` (default float32).
    rank
        Its number of unit dimensions, as given to :func:`scalar`.

    Returns
    -------
    Any
        A host tensor of ``rank`` unit dimensions.

    Example
    -------
    >>> pack[alpha] = scalar_value(0.5)
    """
    import torch

    return torch.full((1,) * rank, value, dtype=torch.float32 if dtype is None else dtype)


def nhwc(t: Any) -> Any:
    """Return ``t`` in channels-last (NHWC/NDHWC) memory order, logical NCHW dims unchanged.

    Parameters
    ----------
    t
        A 4-D or 5-D tensor.

    Returns
    -------
    Any
        The same values in channels-last memory order.

    Raises
    ------
    InputError
        Not a 4-D or 5-D tensor.

    Example
    -------
    >>> x = nhwc(torch.randn(8, 64, 56, 56, device='cuda'))  # same dims, channels-last strides
    """
    import torch

    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    raise InputError(f"nhwc(): expected a 4-D or 5-D tensor, got {t.dim()}-D shape {tuple(t.shape)}")


def is_nhwc(t: Any) -> bool:
    """True when ``t`` is 4-D/5-D with channels innermost in memory.

    Parameters
    ----------
    t
        A tensor.

    Returns
    -------
    bool
        Whether channels are innermost.

    Example
    -------
    >>> assert is_nhwc(nhwc(x))
    """
    return t.dim() in (4, 5) and describe(t, allow_cpu=True).layout in ("NHWC", "NDHWC")
