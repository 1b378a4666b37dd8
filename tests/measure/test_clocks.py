"""Throttle detection from clock readings, and a quiet ``None`` where clocks cannot be read."""

from cudnn_guide.measure import clocks, measurement


def reading(mask=0, power=0, thermal=0, counters=True, mhz=1980):
    return clocks.ClockSample(mhz, 1980, mask, {"power": power, "thermal": thermal} if counters else None, "nvml")


def summary(before, after, run_ms=100.0):
    return clocks.throttle_summary(before, after, run_ms)


def test_clean_run_has_no_warning():
    s = summary(reading(), reading())
    assert s["power_capped_fraction"] == 0 and s["thermal_fraction"] == 0
    assert clocks.throttle_warnings(s) == []


def test_no_reading_means_no_claim():
    assert summary(None, None) == {"read_with": None}
    assert clocks.throttle_warnings(summary(None, None)) == []


def test_power_cap_time_is_a_fraction_of_the_run():
    s = summary(reading(power=5_000_000), reading(power=55_000_000, mask=0x4, mhz=1965), run_ms=100.0)
    assert s["power_capped_fraction"] == 0.5
    assert s["active_end"] == ["software power cap"]


def test_power_cap_that_barely_moves_the_clock_is_recorded_but_not_a_warning():
    s = summary(reading(), reading(power=80_000_000, mask=0x4, mhz=1965))
    assert clocks.throttle_warnings(s) == []


def test_power_cap_that_holds_the_clock_down_is_a_warning_naming_the_clock():
    (w,) = clocks.throttle_warnings(summary(reading(), reading(power=80_000_000, mask=0x4, mhz=1500)))
    assert "software power cap" in w and "1500 of 1980 MHz" in w


def test_any_thermal_throttling_is_a_warning():
    (w,) = clocks.throttle_warnings(summary(reading(), reading(thermal=20_000_000, mhz=1980)))
    assert w.startswith("thermal throttling during 20% of the run")


def test_counters_that_did_not_move_are_not_throttling_even_if_large():
    assert clocks.throttle_warnings(summary(reading(thermal=10**12), reading(thermal=10**12))) == []


def test_an_idle_gpu_after_the_run_is_not_throttling():
    # the clock drops when the GPU idles after the run: no reason active, no counter growth
    assert clocks.throttle_warnings(summary(reading(), reading(mask=0x1, mhz=345))) == []


def test_idle_and_application_clock_bits_are_not_throttle_reasons():
    assert reading(mask=0x1 | 0x2 | 0x100).active == []


def test_sample_is_none_without_a_gpu():
    import torch

    if not torch.cuda.is_available():
        assert clocks.sample() is None


def test_clock_info_survives_a_record_round_trip():
    read = {"read_with": "nvml", "power_capped_fraction": 0.5}
    m = measurement.Measurement("x", [1.0, 1.1], "cold-L2 events", clocks=read)
    assert measurement.Measurement.from_dict(m.to_dict()).clocks == read


def test_an_nvml_sample_reads_the_max_clock_once_per_gpu_and_the_live_readings_every_time(monkeypatch):
    import sys
    import types

    calls = {"max": 0, "now": 0, "violation": 0}

    def max_clock(handle, _clock):
        calls["max"] += 1
        return 1980 if handle == "gpu0" else 1755

    def clock(handle, _clock):
        calls["now"] += 1
        return 1900

    def violation(handle, _policy):
        calls["violation"] += 1
        return types.SimpleNamespace(violationTime=7)

    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=0,
        NVML_PERF_POLICY_POWER=0,
        NVML_PERF_POLICY_THERMAL=1,
        nvmlDeviceGetMaxClockInfo=max_clock,
        nvmlDeviceGetClockInfo=clock,
        nvmlDeviceGetViolationStatus=violation,
        nvmlDeviceGetCurrentClocksEventReasons=lambda handle: 0,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(clocks, "_nvml_handle", lambda index: f"gpu{index}")
    clocks._max_sm_mhz.cache_clear()
    index = iter([0, 0, 0, 1])
    monkeypatch.setattr(clocks, "_nvml_index", lambda: next(index))
    samples = [clocks._sample_nvml() for _ in range(4)]
    clocks._max_sm_mhz.cache_clear()
    assert [s.max_sm_mhz for s in samples] == [1980, 1980, 1980, 1755]  # each GPU its own maximum
    assert calls == {"max": 2, "now": 4, "violation": 8}  # the maximum once per GPU; the rest every sample
    index = iter([0, 0])
    light = [clocks._sample_nvml(counters=False) for _ in range(2)]
    clocks._max_sm_mhz.cache_clear()
    assert calls["violation"] == 8 and calls["now"] == 6  # without the counters: the clock and reasons only
    summary = clocks.throttle_summary(light[0], light[1], 10.0)
    assert summary["sm_mhz_end"] == 1900 and "power_capped_fraction" not in summary
