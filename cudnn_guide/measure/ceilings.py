"""What this GPU can do at best: measured ceilings beside the datasheet's peaks, and the floor they set.

:func:`measure_ceilings` times a device copy and the best of several dense bf16 matmuls with
:func:`~cudnn_guide.measure.bench.benchmark`; :data:`DATASHEET` holds the vendor's peaks, which no
measurement can beat, so :meth:`Ceilings.floor_ms` uses them where the GPU is listed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cudnn_guide import collector
from cudnn_guide.measure.bench import benchmark
from cudnn_guide.measure.measurement import Measurement

__all__ = ["Ceilings", "datasheet_peaks", "measure_ceilings", "measure_read_bandwidth"]


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """Measured ceilings of this GPU, the roofline every page compares against.

    Example
    -------
    >>> c = measure_ceilings()
    >>> print(c.copy_gbps, c.bf16_tflops)
    """

    copy_gbps: float
    """Device-to-device copy, bytes read plus written per second (GB/s)."""
    bf16_tflops: float
    """Dense bf16 matmul, TFLOP/s: the best of the measured sizes."""
    copy: Measurement
    matmul: Measurement
    peak_bf16_tflops: float | None = None
    """The datasheet's dense bf16 peak (:data:`DATASHEET`), ``None`` for a GPU not in it."""
    peak_hbm_gbps: float | None = None
    """The datasheet's memory bandwidth, GB/s."""

    def floor_ms(self, flops: float, bytes: float) -> float:
        """The shortest time any implementation could take: work at the datasheet peaks (measured
        ceilings where the GPU is not in :data:`DATASHEET`). No measurement can beat a datasheet floor;
        a measured ceiling moves with the clock and can be beaten."""
        tflops = self.peak_bf16_tflops or self.bf16_tflops
        gbps = self.peak_hbm_gbps or self.copy_gbps
        return max(flops / (tflops * 1e12), bytes / (gbps * 1e9)) * 1e3

    def to_dict(self) -> dict[str, Any]:
        return {
            "copy_gbps": self.copy_gbps,
            "bf16_tflops": self.bf16_tflops,
            "peak_bf16_tflops": self.peak_bf16_tflops,
            "peak_hbm_gbps": self.peak_hbm_gbps,
            "matmul_sm_mhz_end": self.matmul.clocks.get("sm_mhz_end"),
            "copy": self.copy.to_dict(),
            "matmul": self.matmul.to_dict(),
        }


_CEILINGS: Ceilings | None = None


def reset_caches() -> None:
    """Forget this process's measured ceilings (the next :func:`measure_ceilings` measures again).

    Example
    -------
    >>> reset_caches()
    """
    global _CEILINGS
    _CEILINGS = None


DATASHEET: dict[str, tuple[float, float]] = {
    # substring of torch's device name: (dense bf16 tensor-core TFLOP/s, HBM GB/s), from NVIDIA's datasheets
    "H200": (989.4, 4800.0),
    "H100 80GB HBM3": (989.4, 3350.0),
    "A100-SXM4-80GB": (312.0, 2039.0),
}
"""Datasheet peaks per GPU: the floor no measurement can beat (:meth:`Ceilings.floor_ms`)."""


def datasheet_peaks(gpu_name: str) -> tuple[float | None, float | None]:
    """``(bf16 TFLOP/s, HBM GB/s)`` of ``gpu_name`` from :data:`DATASHEET`, or ``(None, None)``.

    Parameters
    ----------
    gpu_name
        torch's device name.

    Returns
    -------
    tuple[float | None, float | None]
        The dense bf16 peak and the memory bandwidth.

    Example
    -------
    >>> datasheet_peaks("NVIDIA H200")
    (989.4, 4800.0)
    """
    for key, peaks in DATASHEET.items():
        if key in gpu_name:
            return peaks
    return None, None


@collector.paused()  # trial timings; the caller keeps the summary it wants
@collector.spending("timing")
def measure_ceilings(
    copy_mib: int = 2048, matmul_sizes: tuple[int, ...] = (4096, 6144, 8192), refresh: bool = False
) -> Ceilings:
    """Measure device-copy bandwidth and bf16 matmul throughput once per process.

    Copies a ``copy_mib`` buffer (counting bytes read + written), and multiplies random square
    bf16 matrices of each size in ``matmul_sizes`` with ``torch.matmul`` (cuBLAS), all with a
    cold L2. The compute ceiling is the best of those sizes: a ceiling is what the GPU reaches at
    its best on dense, random data.

    Parameters
    ----------
    copy_mib
        Size of the copied buffer, MiB.
    matmul_sizes
        Square matmul sizes to try; the best counts.
    refresh
        Measure again even if this process already did.

    Returns
    -------
    Ceilings
        Bandwidth and compute ceilings, with their measurements.

    Example
    -------
    >>> c = measure_ceilings()
    >>> floor_ms = max(flops / (c.bf16_tflops * 1e12), nbytes / (c.copy_gbps * 1e9)) * 1e3
    """
    import torch

    global _CEILINGS
    if _CEILINGS is not None and not refresh:
        return _CEILINGS
    n_bytes = copy_mib * 2**20
    src = torch.randn(n_bytes // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    copy = benchmark(lambda: dst.copy_(src), label="device copy", l2="cold", bytes=2 * n_bytes, budget_ms=300)
    src = dst = None
    runs = []
    for n in matmul_sizes:
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        runs.append(
            benchmark(
                lambda a=a, b=b, c=c: torch.matmul(a, b, out=c),
                label=f"bf16 matmul {n}³",
                l2="cold",
                flops=2 * n**3,
                budget_ms=300,
            )
        )
    a = b = c = None
    mm = max(runs, key=lambda m: m.tflops)
    torch.cuda.empty_cache()
    _CEILINGS = Ceilings(
        copy.gbps or 0.0,
        mm.tflops or 0.0,
        copy,
        mm,
        *datasheet_peaks(torch.cuda.get_device_name(torch.cuda.current_device())),
    )
    return _CEILINGS


@collector.paused()  # trial timings; the caller keeps the summary it wants
@collector.spending("timing")
def measure_read_bandwidth(mib: int = 2048) -> Measurement:
    """Read-only bandwidth: a sum over a ``mib`` buffer (cold L2), counting the bytes read.

    The copy ceiling counts bytes read *plus* written; a kernel that only reads (attention
    decode streaming its KV cache) can exceed it slightly, so read-only work is compared with
    this instead.

    Parameters
    ----------
    mib
        Buffer size, MiB.

    Returns
    -------
    Measurement
        The sum's timing, with ``gbps`` the read rate.

    Example
    -------
    >>> read = measure_read_bandwidth()
    >>> print(f"{read.gbps:.0f} GB/s read")
    """
    import torch

    src = torch.randn(mib * 2**20 // 4, device="cuda", dtype=torch.float32)
    out = torch.empty((), device="cuda", dtype=torch.float32)
    m = benchmark(
        lambda: torch.sum(src, dim=0, out=out),
        label="device read (sum)",
        l2="cold",
        bytes=src.numel() * 4,
        budget_ms=300,
        params={"impl": "device read (sum)", "size_mib": mib},
    )
    src = out = None  # release the buffer before returning its cache
    torch.cuda.empty_cache()
    return m
