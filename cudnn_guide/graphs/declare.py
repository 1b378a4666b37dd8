"""What every recipe declares with: a new graph on this device's handle, a problem's shared
fields, the causal band, and :class:`Fused`, a built graph with its named tensors.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors

__all__ = ["Fused"]


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


def new_graph(problem: Any, name: str, handle: Any, graph_kwargs: dict[str, Any]) -> tuple[Any, Any]:
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


class Problem:
    """Shared by the problem classes: ``dtype`` names a torch dtype."""

    dtype: str

    @property
    def torch_dtype(self) -> Any:
        """The problem's ``dtype`` as a ``torch.dtype``."""
        import torch

        return getattr(torch, self.dtype)


def causal_mask(problem: Any) -> dict[str, Any]:
    """``sdpa``/``sdpa_backward`` keywords for the problem's mask: causal is the top-left band
    ending on the diagonal (key j visible to query i when j ≤ i); empty for full attention."""
    import cudnn

    return (
        dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
        if problem.causal
        else {}
    )
