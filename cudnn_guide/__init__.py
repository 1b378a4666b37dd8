"""cudnn_guide: helpers for building, checking, timing and reporting cuDNN Frontend graphs.

The modules follow the flow of every example:

* :mod:`~cudnn_guide.environment` — describe the machine (GPU, driver, CUDA, cuDNN, versions).
* :mod:`~cudnn_guide.tensors` — describe torch tensors to a graph (dtypes, dims, strides).
* :mod:`~cudnn_guide.graphs` — build a graph in five timed steps; execute on torch's stream.
* :mod:`~cudnn_guide.check` — compare with a higher-precision reference; poison outputs.
* :mod:`~cudnn_guide.bench` / :mod:`~cudnn_guide.sweep` — measure, with spread.
* :mod:`~cudnn_guide.report` / :mod:`~cudnn_guide.records` — tables, plots, JSON records.
* :mod:`~cudnn_guide.recipes` — ready-made graphs the examples share.

Importing the package imports neither torch nor cudnn; each module imports them when used.
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
