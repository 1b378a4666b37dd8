"""Read the GPU's clock and throttle state, so a benchmark can say whether the GPU slowed down
while it was being timed.

Two sources, best first: NVML through ``pynvml`` (cumulative throttle counters, so throttling
*during* a run is caught even if it ended before the run did), and ``nvidia-smi`` (the reasons
active at the moment of the reading). Without either, :func:`sample` returns ``None`` and the
benchmark records that the clocks were not read.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import subprocess
from typing import Any

__all__ = ["ClockSample", "THROTTLE_REASONS", "sample", "throttle_warnings"]

THROTTLE_REASONS = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
"""NVML clock-event bits that mean the GPU ran slower than it could (idle, application-clock
and display settings are not throttling)."""


@dataclasses.dataclass(frozen=True)
class ClockSample:
    """One reading of the GPU's clocks.

    ``violation_ns`` holds NVML's cumulative power and thermal throttle time (``None`` when read
    through ``nvidia-smi``, which has no counters).

    Example
    -------
    >>> s = sample()
    >>> s.sm_mhz, s.max_sm_mhz, s.active
    (1980, 1980, [])
    """

    sm_mhz: int
    max_sm_mhz: int
    reasons_mask: int
    violation_ns: dict[str, int] | None
    method: str

    @property
    def active(self) -> list[str]:
        """Throttle reasons active at the reading."""
        return [name for bit, name in THROTTLE_REASONS.items() if self.reasons_mask & bit]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"active": self.active}


@functools.lru_cache(maxsize=None)
def _nvml_handle(index: int) -> Any:
    import pynvml

    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def _nvml_index() -> int:
    import torch

    dev = torch.cuda.current_device()
    mapper = getattr(torch.cuda, "_get_nvml_device_index", None)
    return int(mapper(dev)) if mapper is not None else dev


def _sample_nvml() -> ClockSample:
    import pynvml

    h = _nvml_handle(_nvml_index())
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    violation = {}
    for name, policy in (("power", pynvml.NVML_PERF_POLICY_POWER), ("thermal", pynvml.NVML_PERF_POLICY_THERMAL)):
        violation[name] = int(pynvml.nvmlDeviceGetViolationStatus(h, policy).violationTime)
    return ClockSample(int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                       int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
                       int(reasons(h)), violation, "nvml")


def _sample_smi() -> ClockSample:
    index = _nvml_index()
    last_error = ""
    for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        proc = subprocess.run(["nvidia-smi", "-i", str(index), f"--query-gpu=clocks.sm,clocks.max.sm,{field}",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        if proc.returncode == 0:
            sm, max_sm, mask = (p.strip() for p in proc.stdout.strip().split(","))
            return ClockSample(int(sm), int(max_sm), int(mask, 16), None, "nvidia-smi")
        last_error = proc.stdout.strip() or proc.stderr.strip()
    raise RuntimeError(last_error)


@functools.lru_cache(maxsize=None)
def _method() -> str | None:
    """The first source that works here, found once per process."""
    try:
        _sample_nvml()
        return "nvml"
    except Exception:
        pass
    if shutil.which("nvidia-smi"):
        try:
            _sample_smi()
            return "nvidia-smi"
        except Exception:
            pass
    return None


def sample() -> ClockSample | None:
    """Read the current GPU's SM clock, its maximum and the throttle state; ``None`` if no
    source is available (no NVML, no ``nvidia-smi``, no GPU).

    Returns
    -------
    ClockSample | None
        The reading.

    Example
    -------
    >>> before = sample(); run(); after = sample()
    >>> throttle_warnings(before, after)
    []
    """
    try:
        import torch

        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    method = _method()
    try:
        if method == "nvml":
            return _sample_nvml()
        if method == "nvidia-smi":
            return _sample_smi()
    except Exception:
        return None
    return None


def throttle_warnings(before: ClockSample | None, after: ClockSample | None) -> list[str]:
    """Warnings for throttling between two readings taken around a timed run.

    With NVML counters: any growth of the power or thermal throttle time. Either way: a
    throttle reason active at the second reading.

    Parameters
    ----------
    before
        Reading at the start of the run.
    after
        Reading at its end.

    Returns
    -------
    list[str]
        One warning per finding; empty when the clocks stayed clean or could not be read.

    Example
    -------
    >>> throttle_warnings(s0, s1)
    ['GPU throttled for 12.0 ms (power) during the run']
    """
    if after is None:
        return []
    out = []
    if before is not None and before.violation_ns is not None and after.violation_ns is not None:
        for name, ns in after.violation_ns.items():
            grew = ns - before.violation_ns.get(name, ns)
            if grew > 0:
                out.append(f"GPU throttled for {grew / 1e6:.1f} ms ({name}) during the run")
    if after.active:
        out.append(f"throttle reason active at the end of the run: {', '.join(after.active)} "
                   f"(SM clock {after.sm_mhz} of {after.max_sm_mhz} MHz)")
    return out
