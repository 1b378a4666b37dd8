"""PyTorch baselines, set up fairly and quietly.

``torch.compile`` with ``mode="max-autotune-no-cudagraphs"`` is the strongest compiled baseline
for a single call (it benchmarks Triton templates against cuBLAS/cuDNN and fuses epilogues), and
leaves CUDA graphs out so that every contender is timed launching its own kernels.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable

__all__ = ["compile_quietly", "sdpa_backends"]


def compile_quietly(fn: Callable[..., Any], mode: str = "max-autotune-no-cudagraphs") -> Callable[..., Any]:
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
    return torch.compile(fn, mode=mode)


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
