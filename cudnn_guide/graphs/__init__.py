"""Declare, build and run cuDNN graphs.

:mod:`~cudnn_guide.graphs.builder` (re-exported here) builds a declared graph in its five timed
steps and executes it on torch's stream. The other modules are the recipes the pages share, one
per domain, each declared with the frontend's own calls:

* :mod:`~cudnn_guide.graphs.tensors`: torch tensors described to a graph;
* :mod:`~cudnn_guide.graphs.declare`: what every recipe declares with;
* :mod:`~cudnn_guide.graphs.conv`, :mod:`~cudnn_guide.graphs.conv_training`: convolutions;
* :mod:`~cudnn_guide.graphs.matmul`, :mod:`~cudnn_guide.graphs.fp8`: matmuls;
* :mod:`~cudnn_guide.graphs.attention`, :mod:`~cudnn_guide.graphs.paged`,
  :mod:`~cudnn_guide.graphs.varlen`, :mod:`~cudnn_guide.graphs.attention_inputs`: attention
  (packed variable-length batches too), and its input checks and reference;
* :mod:`~cudnn_guide.graphs.norms`, :mod:`~cudnn_guide.graphs.batchnorm`: normalizations;
* :mod:`~cudnn_guide.graphs.plan_cache`: built plans kept on disk;
* :mod:`~cudnn_guide.graphs.torch_ops`: a graph as a PyTorch operator, and
  :mod:`~cudnn_guide.graphs.block`: the transformer block the training pages put it in.
"""

from cudnn_guide.graphs.builder import (
    BuildReport,
    BuiltGraph,
    adopt,
    bind_to_current_stream,
    build,
    handle_for_current_device,
    reset_caches,
)

__all__ = [
    "BuildReport",
    "BuiltGraph",
    "adopt",
    "bind_to_current_stream",
    "build",
    "handle_for_current_device",
    "reset_caches",
]
