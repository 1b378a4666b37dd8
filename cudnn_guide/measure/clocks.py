"""Read the GPU's clock and throttle state, so a benchmark can say whether the GPU slowed down
while it was being timed.

Two sources, best first: NVML through ``pynvml`` (cumulative throttle counters, so throttling
*during* a run is caught even if it ended before the run did, when both readings include them:
``sample(counters=False)`` leaves them out), and ``nvidia-smi`` (the reasons active at the moment
of the reading). Without either, :func:`sample` returns ``None`` and the
benchmark records that the clocks were not read.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import subprocess
from typing import Any

__all__ = ["sample", "throttle_summary"]

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


@functools.cache
def _nvml_handle(index: int) -> Any:
    import pynvml

    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByIndex(index)


@functools.cache
def _max_sm_mhz(index: int) -> int:
    """The SM clock's maximum: a property of the GPU, read once per process (each NVML read costs time
    inside every benchmark's clock samples)."""
    import pynvml

    return int(pynvml.nvmlDeviceGetMaxClockInfo(_nvml_handle(index), pynvml.NVML_CLOCK_SM))


def _nvml_index() -> int:
    import torch

    dev = torch.cuda.current_device()
    mapper = getattr(torch.cuda, "_get_nvml_device_index", None)
    return int(mapper(dev)) if mapper is not None else dev


def _sample_nvml(counters: bool = True) -> ClockSample:
    import pynvml

    index = _nvml_index()
    h = _nvml_handle(index)
    reasons = (
        getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    violation = {} if counters else None
    if counters:  # 1.6-2.0 ms a read on the H200, against microseconds for the clock and the reasons
        for name, policy in (("power", pynvml.NVML_PERF_POLICY_POWER), ("thermal", pynvml.NVML_PERF_POLICY_THERMAL)):
            violation[name] = int(pynvml.nvmlDeviceGetViolationStatus(h, policy).violationTime)
    return ClockSample(
        int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
        _max_sm_mhz(index),
        int(reasons(h)),
        violation,
        "nvml",
    )


def _sample_smi() -> ClockSample:
    index = _nvml_index()
    last_error = ""
    for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        proc = subprocess.run(
            [
                "nvidia-smi",
                "-i",
                str(index),
                f"--query-gpu=clocks.sm,clocks.max.sm,{field}",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if proc.returncode == 0:
            sm, max_sm, mask = (p.strip() for p in proc.stdout.strip().split(","))
            return ClockSample(int(sm), int(max_sm), int(mask, 16), None, "nvidia-smi")
        last_error = proc.stdout.strip() or proc.stderr.strip()
    raise RuntimeError(last_error)


@functools.cache
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


def sample(counters: bool = True) -> ClockSample | None:
    """Read the current GPU's SM clock, its maximum and the throttle state; ``None`` if no
    source is available (no NVML, no ``nvidia-smi``, no GPU).

    Parameters
    ----------
    counters
        Also read NVML's cumulative power and thermal throttle times (:attr:`ClockSample.violation_ns`),
        which give a run's throttled fractions. Each such read costs 1.6-2.0 ms of host time on the
        H200 (the clock and the active reasons, microseconds); ``False`` leaves them out, and a summary
        of two such readings (:func:`throttle_summary`) has the clock and the reasons at the end only.

    Returns
    -------
    ClockSample | None
        The reading.

    Example
    -------
    >>> before = sample(); run(); after = sample()
    >>> throttle_warnings(throttle_summary(before, after, run_ms=600.0))
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
            return _sample_nvml(counters)
        if method == "nvidia-smi":
            return _sample_smi()
    except Exception:
        return None
    return None


def throttle_summary(before: ClockSample | None, after: ClockSample | None, run_ms: float) -> dict[str, Any]:
    """What the clocks did during a run of ``run_ms`` milliseconds, for the measurement's record.

    Parameters
    ----------
    before
        Reading at the start of the run.
    after
        Reading at its end.
    run_ms
        Wall time of the run.

    Returns
    -------
    dict[str, Any]
        ``read_with`` (``"nvml"``, ``"nvidia-smi"`` or ``None``), ``max_sm_mhz``, ``sm_mhz_end``,
        ``active_end`` (throttle reasons at the end) and, with NVML, ``power_capped_fraction`` and
        ``thermal_fraction`` of the run.

    Example
    -------
    >>> throttle_summary(s0, s1, 600.0)['power_capped_fraction']
    0.83
    """
    if after is None:
        return {"read_with": None}
    out: dict[str, Any] = {
        "read_with": after.method,
        "max_sm_mhz": after.max_sm_mhz,
        "sm_mhz_end": after.sm_mhz,
        "active_end": after.active,
    }
    if before is not None and before.violation_ns is not None and after.violation_ns is not None and run_ms > 0:
        for name in ("power", "thermal"):
            grew = after.violation_ns.get(name, 0) - before.violation_ns.get(name, 0)
            key = "power_capped_fraction" if name == "power" else "thermal_fraction"
            out[key] = round(min(max(grew / 1e6 / run_ms, 0.0), 1.0), 3)
    return out


def throttle_warnings(summary: dict[str, Any], min_clock: float = 0.97) -> list[str]:
    """Warnings for throttling that could have changed a measurement.

    Any thermal throttling is reported. Power capping is reported when it held the SM clock
    below ``min_clock`` of its maximum at the end of the run; above that (a GPU at its power
    limit shaving a few MHz, as an H200 under sustained tensor-core load does) it stays in the
    record without a warning.

    Parameters
    ----------
    summary
        From :func:`throttle_summary`.
    min_clock
        Fraction of the maximum SM clock below which power capping is worth a warning.

    Returns
    -------
    list[str]
        One warning per finding; empty when the clocks stayed clean or could not be read.

    Example
    -------
    >>> throttle_warnings({'read_with': 'nvml', 'thermal_fraction': 0.2, 'max_sm_mhz': 1980, 'sm_mhz_end': 1700})
    ['thermal throttling during 20% of the run (SM clock 1700 of 1980 MHz at the end)']
    """
    if not summary.get("read_with"):
        return []
    clock = f"SM clock {summary['sm_mhz_end']} of {summary['max_sm_mhz']} MHz at the end"
    out = []
    if summary.get("thermal_fraction", 0) > 0:
        out.append(f"thermal throttling during {100 * summary['thermal_fraction']:.0f}% of the run ({clock})")
    active = [r for r in summary.get("active_end", []) if "thermal" in r] if out else summary.get("active_end", [])
    low = summary["sm_mhz_end"] < min_clock * summary["max_sm_mhz"]
    if low and (summary.get("power_capped_fraction", 0) > 0 or active):
        why = ", ".join(active) or "power cap"
        out.append(f"{why} held the clock down ({clock}); timings may be slower than this GPU's best")
    return out
