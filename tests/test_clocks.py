"""Throttle detection from clock readings, and a quiet ``None`` where clocks cannot be read."""

from cudnn_guide import bench, clocks


def reading(mask=0, power=0, thermal=0, counters=True):
    return clocks.ClockSample(1980, 1980, mask, {"power": power, "thermal": thermal} if counters else None, "nvml")


def test_clean_run_has_no_warning():
    assert clocks.throttle_warnings(reading(), reading()) == []
    assert clocks.throttle_warnings(None, None) == []


def test_throttle_time_that_grew_during_the_run_is_reported_in_ms():
    warnings = clocks.throttle_warnings(reading(power=5_000_000), reading(power=17_000_000))
    assert warnings == ["GPU throttled for 12.0 ms (power) during the run"]


def test_counters_that_did_not_move_are_not_throttling_even_if_large():
    assert clocks.throttle_warnings(reading(thermal=10**12), reading(thermal=10**12)) == []


def test_an_active_reason_at_the_end_is_named_with_the_clock():
    after = clocks.ClockSample(1410, 1980, 0x4 | 0x1, None, "nvidia-smi")  # power cap + idle
    (w,) = clocks.throttle_warnings(reading(counters=False), after)
    assert "software power cap" in w and "1410 of 1980 MHz" in w
    assert "idle" not in w  # idle is not throttling


def test_idle_and_application_clock_bits_are_not_throttle_reasons():
    assert reading(mask=0x1 | 0x2 | 0x100).active == []


def test_sample_is_none_without_a_gpu():
    import torch

    if not torch.cuda.is_available():
        assert clocks.sample() is None


def test_clock_info_survives_a_record_round_trip():
    m = bench.Measurement("x", [1.0, 1.1], "cold-L2 events", clocks={"read_with": "nvml", "throttled": False})
    assert bench.Measurement.from_dict(m.to_dict()).clocks == {"read_with": "nvml", "throttled": False}
