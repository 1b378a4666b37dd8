"""What every recipe declares with: a new graph on this device's handle, a problem's shared
fields, and the causal band. A recipe returns a :class:`~cudnn_guide.graphs.builder.BuiltGraph`
whose ``io`` names its tensors.
"""

from __future__ import annotations

from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors

__all__: list[str] = []  # helpers of the recipes; a page declares with the frontend's own calls


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
