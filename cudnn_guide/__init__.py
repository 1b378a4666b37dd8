"""cudnn_guide: helpers for building, checking, timing and reporting cuDNN Frontend graphs.

The subpackages follow the flow of every example:

* :mod:`~cudnn_guide.graphs` — declare and build graphs, execute them on torch's stream; the
  recipes the pages share;
* :mod:`~cudnn_guide.check` — compare an output with its reference before anything is timed;
* :mod:`~cudnn_guide.measure` — time, compare and bound, with intervals and verdicts;
* :mod:`~cudnn_guide.report` — tables, plots and each example's record.

Beside them: :mod:`~cudnn_guide.environment` and :mod:`~cudnn_guide.libcudnn` (the machine, and
which libcudnn loads), :mod:`~cudnn_guide.errors`, and :mod:`~cudnn_guide.datafiles` (atomic
writes of the recording's files).

Importing the package imports neither torch nor cudnn; each module imports them when used.
:func:`reset_caches` returns the process to a clean state between experiments.
"""

__version__ = "0.1.0"

from cudnn_guide.errors import (
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

__all__ = [
    "BenchmarkError",
    "CapabilityError",
    "CheckFailedError",
    "CudnnLibraryError",
    "GraphBuildError",
    "GraphExecutionError",
    "GraphNotSupportedError",
    "GuideError",
    "InputError",
    "NoGPUError",
    "reset_caches",
]


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

    from cudnn_guide import graphs
    from cudnn_guide.graphs import torch_ops
    from cudnn_guide.measure import ceilings, events

    events.reset_caches()
    ceilings.reset_caches()
    graphs.reset_caches()
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
