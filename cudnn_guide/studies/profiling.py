"""An independent clock: the profiler's own kernel durations for a callable, to cross-check the harness.

:func:`profile_kernels` runs a callable under ``torch.profiler`` as the harness runs it (L2
flush included, then left out of the sums) and returns the GPU time its kernels took per call.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

from cudnn_guide.errors import BenchmarkError
from cudnn_guide.measure.events import L2_MODES, call_checked, l2_flush_buffer

__all__ = ["ProfiledKernels", "flush_kernel_names", "profile_kernels"]


@dataclasses.dataclass(frozen=True)
class ProfiledKernels:
    """Per-call GPU kernel time seen by the PyTorch profiler (CUPTI), independent of CUDA events.

    Example
    -------
    >>> prof = profile_kernels(launch)
    >>> print(prof.per_call_ms, prof.top(3))
    """

    per_call_ms: float
    calls: int
    kernels: dict[str, float]
    """Kernel (or memset/copy) name → total milliseconds across all profiled calls."""

    def top(self, k: int = 3) -> list[tuple[str, float]]:
        return sorted(self.kernels.items(), key=lambda kv: -kv[1])[:k]


def flush_kernel_names(flush: Any) -> set[str]:
    """The names of the GPU kernels that flushing L2 with ``flush.zero_()`` launches.

    Profiles one flush, so traces of timed runs can leave the flush out.

    Parameters
    ----------
    flush
        The buffer from :func:`~cudnn_guide.measure.events.l2_flush_buffer`.

    Returns
    -------
    set[str]
        Kernel names.

    Example
    -------
    >>> skip = flush_kernel_names(l2_flush_buffer())
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            flush.zero_()
            torch.cuda.synchronize()
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


def profile_kernels(fn: Callable[[], Any], *, calls: int = 50, l2: str = "cold", label: str = "fn") -> ProfiledKernels:
    """Run ``fn`` ``calls`` times under ``torch.profiler`` and sum the GPU work it launched.

    The sum covers the call's kernels and the memsets or copies it issues itself. With
    ``l2="cold"`` the L2 flush runs between calls as in :func:`~cudnn_guide.measure.bench.benchmark`, and its own
    kernel is excluded from the sum. This is a different clock from CUDA events (CUPTI kernel
    timestamps, no launch gaps), which makes it a cross-check of :func:`~cudnn_guide.measure.bench.benchmark`.

    Parameters
    ----------
    fn
        Zero-argument callable that launches the work.
    calls
        Profiled calls.
    l2
        ``"cold"`` or ``"hot"``.
    label
        Name in errors.

    Returns
    -------
    ProfiledKernels
        Kernel time per call and per kernel name.

    Example
    -------
    >>> prof = profile_kernels(launch, calls=30, l2='cold')
    >>> print(f'{prof.per_call_ms * 1e3:.1f} µs per call in kernels')
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if l2 not in L2_MODES:
        raise ValueError(f"l2 must be one of {L2_MODES}, got {l2!r}")
    flush = l2_flush_buffer() if l2 == "cold" else None
    call_checked(fn, label)
    torch.cuda.synchronize()
    flush_names = flush_kernel_names(flush) if flush is not None else set()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                if flush is not None:
                    flush.zero_()
                call_checked(fn, label)
            torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for e in prof.events():
        # the call's own memsets and copies are part of its GPU work (only the flush is left out)
        if e.device_type != torch.autograd.DeviceType.CUDA or e.name in flush_names:
            continue
        dur_us = getattr(e, "device_time", None)
        if dur_us is None:
            dur_us = getattr(e, "cuda_time", 0.0)
        kernels[e.name] = kernels.get(e.name, 0.0) + dur_us / 1e3
    if not kernels:
        raise BenchmarkError(f"profile {label!r}: the profiler saw no CUDA kernels (is CUPTI available?)")
    return ProfiledKernels(sum(kernels.values()) / calls, calls, kernels)
