"""PyTorch baselines, set up fairly and quietly.

``torch.compile`` with ``mode="max-autotune-no-cudagraphs"`` is the strongest compiled baseline
for a single call (it benchmarks Triton templates against cuBLAS/cuDNN and fuses epilogues), and
leaves CUDA graphs out so that every contender is timed launching its own kernels.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["compile_quietly", "sdpa_backends", "with_cudnn_benchmark"]


def compile_quietly(
    fn: Callable[..., Any], mode: str = "max-autotune-no-cudagraphs", dynamic: bool | None = None
) -> Callable[..., Any]:
    """``torch.compile(fn, mode=mode)`` without Inductor's autotuning report on the page.

    Inductor prints a table of the candidates it benchmarked, and logs each Triton candidate that
    does not fit in shared memory (those are skipped, not errors of the result). Both would
    bury the page's own output, so this turns them off; nothing about the compiled code changes.

    Parameters
    ----------
    fn
        The function to compile.
    mode
        ``torch.compile`` mode.
    dynamic
        ``torch.compile``'s ``dynamic``; ``False`` compiles each shape of a sweep for that shape.

    Returns
    -------
    Callable[..., Any]
        The compiled function.

    Example
    -------
    >>> compiled = compile_quietly(problem.torch_forward)
    >>> y = compiled(x, w, b)
    """
    import torch
    import torch._inductor.config as inductor_config

    for name, value in (("autotune_num_choices_displayed", 0), ("max_autotune_report_choices_stats", False)):
        if hasattr(inductor_config, name):
            setattr(inductor_config, name, value)
    logging.getLogger("torch._inductor").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
    return torch.compile(fn, mode=mode, dynamic=dynamic)


def sdpa_backends() -> dict[str, Any]:
    """PyTorch's fused attention backends, by display name, for ``torch.nn.attention.sdpa_kernel``.

    Each is forced one at a time, so a backend that cannot run a problem raises instead of being
    silently replaced by another (PyTorch's default dispatch falls back quietly).

    Returns
    -------
    dict[str, Any]
        ``{"PyTorch flash": SDPBackend.FLASH_ATTENTION, "PyTorch mem-efficient": ...,
        "PyTorch cuDNN": ...}``.

    Example
    -------
    >>> for name, backend in sdpa_backends().items():
    ...     with sdpa_kernel([backend]):
    ...         out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    """
    from torch.nn.attention import SDPBackend

    return {
        "PyTorch flash": SDPBackend.FLASH_ATTENTION,
        "PyTorch mem-efficient": SDPBackend.EFFICIENT_ATTENTION,
        "PyTorch cuDNN": SDPBackend.CUDNN_ATTENTION,
    }


def with_cudnn_benchmark(fn: Callable[[], Any], enabled: bool) -> Callable[[], Any]:
    """``fn`` run with ``torch.backends.cudnn.benchmark = enabled``, restored after each call.

    Lets the two PyTorch settings be interleaved with other contenders in one comparison: the
    flag is a Python setting (no GPU work). With ``enabled``, PyTorch times cuDNN's algorithms on
    the first call of a shape and reuses the fastest after; call it once before timing.

    Parameters
    ----------
    fn
        A zero-argument launcher that runs PyTorch convolutions.
    enabled
        The value of ``torch.backends.cudnn.benchmark`` during the call.

    Returns
    -------
    Callable[[], Any]
        The wrapped launcher.

    Example
    -------
    >>> tuned = with_cudnn_benchmark(lambda: F.conv2d(x, w, padding=1), True)
    >>> y = tuned()  # first call picks the algorithm
    """
    import torch

    def call() -> Any:
        before = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = enabled
        try:
            return fn()
        finally:
            torch.backends.cudnn.benchmark = before

    return call
