"""cudnn_guide: helpers for building, checking, timing and reporting cuDNN Frontend graphs.

The modules follow the flow of every example:

* :mod:`~cudnn_guide.environment` — describe the machine (GPU, driver, CUDA, cuDNN, versions).
* :mod:`~cudnn_guide.tensors` — describe torch tensors to a graph (dtypes, dims, strides).
* :mod:`~cudnn_guide.graphs` — build a graph in five timed steps; execute on torch's stream.
* :mod:`~cudnn_guide.check` / :mod:`~cudnn_guide.attention_inputs` — references; checks of inputs.
* :mod:`~cudnn_guide.bench` (timing), :mod:`~cudnn_guide.measurement` (samples, intervals),
  :mod:`~cudnn_guide.ceilings`, :mod:`~cudnn_guide.profiling`, :mod:`~cudnn_guide.compare`
  (verdicts), :mod:`~cudnn_guide.drift`, :mod:`~cudnn_guide.sweep` — measure, with spread.
* :mod:`~cudnn_guide.torch_ops` — a cuDNN graph as a PyTorch operator.
* :mod:`~cudnn_guide.report` / :mod:`~cudnn_guide.records` — tables, plots, JSON records.
* :mod:`~cudnn_guide.recipes` — ready-made graphs the examples share.

Importing the package imports neither torch nor cudnn; each module imports them when used.
:func:`reset_caches` returns the process to a clean state between experiments.
"""

__version__ = "0.1.0"

from .errors import (  # noqa: F401  (re-exported: the public error types)
    BenchmarkError,
    CapabilityError,
    CheckFailedError,
    CudnnLibraryError,
    GraphBuildError,
    GraphExecutionError,
    GraphNotSupportedError,
    GuideError,
    InputError,
    NoGPUError,
)


def reset_caches() -> None:
    """Return this process to a clean state: what one example leaves, the next must not inherit.

    Destroys this package's cuDNN handles, forgets the measured ceilings, the launch-cost
    calibration and the L2 flush buffer, resets ``torch.compile``'s caches and PyTorch's cuDNN
    flags to their defaults, collects garbage and returns cached GPU memory to the driver. The
    docs build calls it between gallery examples; call it between independent experiments.

    Example
    -------
    >>> import cudnn_guide
    >>> cudnn_guide.reset_caches()  # safe without a GPU, torch or cudnn imported
    """
    import gc
    import sys

    from . import bench, ceilings, drift, graphs, torch_ops

    bench.reset_caches()
    ceilings.reset_caches()
    graphs.reset_caches()
    drift.reset_caches()
    torch_ops.reset_caches()
    if "torch" in sys.modules:
        import torch

        if "torch._dynamo" in sys.modules:
            torch._dynamo.reset()
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = False
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    else:
        gc.collect()
