"""The errors :mod:`cudnn_guide` raises.

Every error names its cause and, where there is one, the fix. They share one base class,
:class:`GuideError`, so a caller can catch everything this package raises in one place while
still telling the cases apart.
"""

from __future__ import annotations

__all__ = [
    "GuideError",
    "NoGPUError",
    "CapabilityError",
    "CudnnLibraryError",
    "InputError",
    "GraphBuildError",
    "GraphNotSupportedError",
    "GraphExecutionError",
    "CheckFailedError",
    "BenchmarkError",
    "CorruptDataError",
]


class GuideError(Exception):
    """Base class of every error raised by :mod:`cudnn_guide`.

    Example
    -------
    >>> try:
    ...     fused = recipes.sdpa_graph(problem, inputs)
    ... except GuideError as exc:
    ...     print(exc)
    """


class NoGPUError(GuideError):
    """No CUDA GPU is visible to PyTorch in this process.

    Example
    -------
    >>> try:
    ...     environment.collect()
    ... except NoGPUError as exc:
    ...     print(exc)  # names the missing GPU and the fix
    """

    def __init__(self, what: str = "this operation") -> None:
        super().__init__(
            f"{what} needs a CUDA GPU, but torch.cuda.is_available() is False in this process. "
            "Run it on a machine with an NVIDIA GPU and a CUDA build of PyTorch "
            "(check CUDA_VISIBLE_DEVICES and `nvidia-smi`). Without a GPU the docs render "
            "from the committed recording instead."
        )


class CapabilityError(GuideError):
    """The GPU is present but lacks a feature (SM version, dtype, memory) that is needed.

    Example
    -------
    >>> environment.require_sm((9, 0), 'FP8 SDPA')  # CapabilityError on an A100
    """

    def __init__(self, feature: str, needed: str, found: str) -> None:
        self.feature, self.needed, self.found = feature, needed, found
        super().__init__(f"{feature} needs {needed}; this GPU has {found}.")


class CudnnLibraryError(GuideError):
    """libcudnn could not be loaded, or the frontend cannot reach it.

    Example
    -------
    >>> environment.require_cudnn()  # CudnnLibraryError lists where libcudnn was looked for
    """


class InputError(GuideError, ValueError):
    """A tensor or argument handed to the package is unusable (device, dtype, shape, stride).

    Example
    -------
    >>> tensors.describe(torch.empty(0, 3, device='cuda'))  # InputError: zero-size dimension
    """


class GraphBuildError(GuideError):
    """One of the five cuDNN build steps failed.

    Attributes
    ----------
    step:
        The step that failed: ``validate``, ``build_operation_graph``,
        ``create_execution_plans``, ``check_support`` or ``build_plans``.
    graph:
        The graph's name.
    cudnn_message:
        cuDNN's own message, verbatim.

    Example
    -------
    >>> try:
    ...     graphs.build(g)
    ... except GraphBuildError as exc:
    ...     print(exc.step, exc.graph, exc.cudnn_message)
    """

    def __init__(self, step: str, graph: str, cudnn_message: str) -> None:
        self.step, self.graph, self.cudnn_message = step, graph, cudnn_message
        super().__init__(f"graph {graph!r} failed at step {step!r}: {cudnn_message}")


class GraphNotSupportedError(GraphBuildError):
    """cuDNN has no engine for this graph on this GPU (``cudnnGraphNotSupportedError``).

    Unlike other build failures this is not a bug in the graph: the same graph may run on another
    GPU, cuDNN version, layout or dtype.

    Example
    -------
    >>> try:
    ...     graphs.build(g)
    ... except GraphNotSupportedError:
    ...     ...  # try another layout or dtype
    ... except GraphBuildError:
    ...     raise  # a real bug
    """

    def __init__(self, step: str, graph: str, cudnn_message: str) -> None:
        super().__init__(step, graph, cudnn_message)
        self.args = (
            f"graph {self.graph!r} is not supported by cuDNN on this GPU (step {self.step!r}): "
            f"{self.cudnn_message}. Try another layout, dtype or shape, or a newer cuDNN.",
        )


class GraphExecutionError(GuideError):
    """Executing a built graph failed.

    Example
    -------
    >>> built.execute(pack)  # GraphExecutionError if cuDNN fails at run time
    """


class CheckFailedError(GuideError, AssertionError):
    """An output disagrees with its reference, holds NaN, or was never written.

    Example
    -------
    >>> check.check(y, y_ref)  # CheckFailedError: relative error 3e-1 exceeds 1.6e-02
    """


class BenchmarkError(GuideError):
    """The benchmark harness could not produce a trustworthy measurement.

    Example
    -------
    >>> bench.benchmark(lambda: 1 / 0, label='bad', l2='hot')  # BenchmarkError: ... raised ZeroDivisionError
    """


class CorruptDataError(GuideError):
    """A committed data file (record, manifest, history, figure) is missing, unreadable or inconsistent.

    The message names the file, the line where there is one, what is wrong, and the fix.

    Example
    -------
    >>> print(CorruptDataError("docs/data/history.jsonl", "line is not valid JSON", line=4))
    docs/data/history.jsonl:4: line is not valid JSON. Fix: restore it from git (`git checkout -- <file>`) or re-record the page on a GPU.
    """  # noqa: E501

    def __init__(
        self,
        path: object,
        problem: str,
        line: int | None = None,
        fix: str = "restore it from git (`git checkout -- <file>`) or re-record the page on a GPU",
    ) -> None:
        self.path, self.problem, self.line = str(path), problem, line
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {problem}. Fix: {fix}.")
