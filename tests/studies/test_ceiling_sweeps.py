"""ceiling_sweeps: the environment page's copy and matmul factories with their checks, its ceiling lines, its
figure and its sentences.

On the CPU, torch's factories make CPU tensors where the module asks for CUDA ones; the ceilings and the
sweeps are built from known medians. The GPU test makes and checks the real buffers.
"""

from __future__ import annotations

import pytest
import torch

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.measure.ceilings import Ceilings
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.measure.sweep import SweepResult
from cudnn_guide.studies import ceiling_sweeps
from cudnn_guide.studies.ceiling_sweeps import COPY_CHECK, MATMUL, DeviceCopies, SquareMatmuls


def test_the_checks_keep_the_names_the_records_key_on():
    assert COPY_CHECK == "device copy"
    assert MATMUL == "bf16 matmul (cuBLAS)"


@pytest.fixture
def on_cpu(monkeypatch):
    """``torch.randn`` and ``torch.empty`` ignore ``device``: the module's CUDA tensors are made on the CPU."""
    for name in ("randn", "empty"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, real=real, device=None, **k: real(*a, **k))


def test_a_copy_launcher_copies_its_size_and_its_buffers_are_held_until_cleared(on_cpu):
    copies = DeviceCopies()
    launch = copies.of(1)
    src, dst = copies.held[1]
    assert src.dtype == torch.float32 and src.numel() == 2**20 // 4 and dst.shape == src.shape
    assert launch() is dst
    assert torch.equal(dst, src)
    copies.of(2)
    assert sorted(copies.held) == [1, 2] and copies.held[2][0].numel() == 2 * 2**20 // 4
    copies.clear()
    assert copies.held == {}


def test_the_copy_check_copies_once_checks_and_lets_the_buffers_go(on_cpu):
    copies = DeviceCopies()
    result = copies.check(1)
    assert result.passed and result.name == COPY_CHECK and result.rel_error == 0.0
    assert result.numel == 2**20 // 4
    assert copies.held == {}


def test_a_copy_that_does_not_copy_fails_its_check(on_cpu, monkeypatch):
    monkeypatch.setattr(torch.Tensor, "copy_", lambda self, src: self.zero_())
    with pytest.raises(CheckFailedError, match=COPY_CHECK):
        DeviceCopies().check(1)


def test_a_matmul_launcher_multiplies_random_bf16_matrices_into_its_own_output(on_cpu):
    matrices = SquareMatmuls()
    launch = matrices.of(32)
    a, b, c = matrices.held[32]
    assert all(t.shape == (32, 32) and t.dtype == torch.bfloat16 for t in (a, b, c))
    assert a.abs().sum() > 0 and b.abs().sum() > 0  # random, not zeros
    out = launch()
    assert out.data_ptr() == c.data_ptr()
    torch.testing.assert_close(c, a @ b)
    matrices.clear()
    assert matrices.held == {}


def test_the_matmul_check_compares_with_fp32_and_lets_only_its_size_go(on_cpu):
    matrices = SquareMatmuls()
    matrices.of(16)
    result = matrices.check(32)
    assert result.passed and result.name == MATMUL and result.dtype == "bfloat16"
    assert list(matrices.held) == [16]  # the checked size popped, the others kept


def test_a_matmul_that_computes_the_wrong_product_fails_its_check(on_cpu, monkeypatch):
    real = torch.matmul

    def wrong(a, b, out=None):
        if out is None:
            return real(a, b)  # the reference
        return out.copy_(-real(a, b))

    monkeypatch.setattr(torch, "matmul", wrong)
    with pytest.raises(CheckFailedError, match="bf16 matmul"):
        SquareMatmuls().check(32)


def _m(label, ms, *, clocks=None, bytes=None, flops=None, warnings=(), **params):
    return Measurement(
        label,
        [ms] * 5,
        "cold",
        bytes=bytes,
        flops=flops,
        params=params,
        clocks=clocks or {},
        warnings=list(warnings),
    )


def _ceilings(peaks=(989.4, 4800.0), mhz=1395):
    copy = _m("device copy", 0.9, clocks={"sm_mhz_end": 1980}, bytes=2 * 2**31)
    matmul = _m("bf16 matmul 8192³", 1.5, clocks={} if mhz is None else {"sm_mhz_end": mhz}, flops=2 * 8192**3)
    return Ceilings(4700.0, 730.0, copy, matmul, *peaks)


def test_ceiling_lines_give_each_ceilings_time_rate_and_end_clock():
    assert ceiling_sweeps.ceiling_lines(_ceilings()).splitlines() == [
        "device copy: 900.0 µs, 4700 GB/s (SM clock 1980 MHz at end)",
        "bf16 matmul 8192³: 1500.0 µs, 730 TFLOP/s (SM clock 1395 MHz at end)",
    ]
    assert ceiling_sweeps.ceiling_lines(_ceilings(mhz=None)).endswith("(SM clock ? MHz at end)")


SIZES = [1, 16, 4096]


def _copies(hot_ms, cold_ms, warned=()):
    """The hot and cold copy sweeps: ``hot_ms[i]``/``cold_ms[i]`` per call at ``SIZES[i]`` MiB."""
    out = {}
    for l2, times in (("hot", hot_ms), ("cold", cold_ms)):
        name = f"copy, {l2} L2"
        ms = [
            _m(
                f"{name} @ size_mib={s}",
                t,
                bytes=2 * s * 2**20,
                warnings=["too short to time per call"] if (l2, s) in warned else (),
                impl=name,
                size_mib=s,
            )
            for s, t in zip(SIZES, times)
        ]
        out[l2] = SweepResult("size_mib", ms)
    return out


def _matmuls():
    ms = [
        _m(f"{MATMUL} @ n={n}", t, flops=2 * n**3, impl=MATMUL, n=n)
        for n, t in ((1024, 0.01), (4096, 0.3), (16384, 14.0))
    ]
    return SweepResult("n", ms)


def test_ceiling_figure_draws_each_sweep_against_its_ceiling_with_the_l2_marked():
    import matplotlib.pyplot as plt

    copies = _copies([0.001, 0.005, 1.0], [0.002, 0.01, 1.0])
    fig = ceiling_sweeps.ceiling_figure(
        copies["hot"].measurements + copies["cold"].measurements, _matmuls().measurements, _ceilings(), 50.0
    )
    try:
        left, right = fig.axes
        assert left.get_title() == "device copy (read + write)" and left.get_xlabel() == "buffer size (MiB)"
        assert right.get_title() == "bf16 matmul n×n×n, cold L2" and right.get_xlabel() == "n"
        labels = left.get_legend_handles_labels()[1]
        assert {"copy, hot L2", "copy, cold L2", "ceiling: 4700 GB/s", "L2 = 50 MiB"} <= set(labels)
        assert set(right.get_legend_handles_labels()[1]) == {MATMUL, "ceiling: 730 TFLOP/s"}
        assert left.get_xscale() == right.get_xscale() == "log"
    finally:
        plt.close(fig)


class Env:
    gpu = "NVIDIA H200"
    l2_mib = 60.0


def test_conclusions_say_the_ceilings_the_flush_and_the_launch_cost():
    copies = _copies([0.001, 0.005, 1.02], [0.002, 0.01, 1.0])
    lines = ceiling_sweeps.conclusions(Env(), _ceilings(), copies, _matmuls(), {"overhead_us": 2.4}, SIZES)
    assert lines[0] == (
        "This NVIDIA H200 copies at 4700 GB/s (2 GiB, cold L2) and multiplies bf16 matrices at 730 TFLOP/s "
        "(bf16 matmul 8192³, the best of the ceiling's sizes, SM clock 1395 MHz at its end): the ridge point "
        "is 155 FLOP per byte."
    )
    assert lines[1].startswith("* The datasheet gives 989 TFLOP/s dense bf16 and 4800 GB/s: measured, 74% and 98%")
    # 16 MiB: 2·16 MiB in 5 µs hot, 10 µs cold
    assert lines[2] == (
        "* A 16 MiB copy reports 6711 GB/s with a hot L2 and 3355 GB/s with a cold one, timed the same way: "
        "timing small inputs without flushing L2 overstates bandwidth by 2.00×."
    )
    assert lines[3] == (
        "* At 4096 MiB, far beyond the 60 MiB L2, the hot copy (8422 GB/s) is 2.0% below the cold one "
        "(8590 GB/s): there the flush has nothing left to change."
    )
    assert lines[4] == "* The fastest matmul in the sweep is n=16384 at 628 TFLOP/s."
    assert lines[5].startswith(
        "* The events around each timed call include 2.4 µs of launch cost: more than 3% of any call shorter "
        "than 80 µs."
    )
    assert len(lines) == 6  # nothing too short to time


def test_conclusions_without_datasheet_peaks_a_useless_hot_l2_and_copies_too_short_to_time():
    copies = _copies([0.002, 0.01, 1.0], [0.001, 0.01, 1.0], warned={("hot", 1), ("cold", 1)})
    lines = ceiling_sweeps.conclusions(
        Env(), _ceilings(peaks=(None, None)), copies, _matmuls(), {"overhead_us": 2.4}, SIZES
    )
    assert not any(line.startswith("* The datasheet") for line in lines)
    assert lines[1].endswith("timed the same way: here the hot L2 did not help (1.00×).")
    assert "is 0.0% above the cold one" in lines[2]
    assert lines[-1] == (
        "* Too short to time per call: copy, hot L2 @ size_mib=1, copy, cold L2 @ size_mib=1; their times are "
        "raw event times, an upper bound (their GB/s a lower bound)."
    )


def test_conclusions_compare_the_small_size_they_are_given():
    copies = _copies([0.001, 0.005, 1.0], [0.004, 0.01, 1.0])
    lines = ceiling_sweeps.conclusions(Env(), _ceilings(), copies, _matmuls(), {"overhead_us": 2.4}, SIZES, small_mib=1)
    assert lines[2].startswith("* A 1 MiB copy reports 2097 GB/s with a hot L2 and 524 GB/s with a cold one")


def _beating_matmuls(mhz):
    """A matmul sweep whose n=4096 point (0.17 ms: 808.5 TFLOP/s) beats the 730 TFLOP/s ceiling."""
    clocks = {} if mhz is None else {"sm_mhz_end": mhz}
    ms = [
        _m(f"{MATMUL} @ n={n}", t, flops=2 * n**3, impl=MATMUL, n=n, clocks=clocks)
        for n, t in ((1024, 0.01), (4096, 0.17), (16384, 14.0))
    ]
    return SweepResult("n", ms)


@pytest.mark.parametrize(
    ("mhz", "ceiling_mhz", "peaks", "why"),
    [
        (
            1860,
            1395,
            (989.4, 4800.0),
            ": its run ended with the SM clock at 1860 MHz, the ceiling's (bf16 matmul 8192³) at 1395 MHz. A "
            "measured ceiling holds at its own run's clock, which the power cap lowers under dense work; it is not "
            "a bound (the datasheet's peak is).",
        ),
        (
            1395,
            1395,
            (989.4, 4800.0),
            ", though its run ended with the SM clock at 1395 MHz, the ceiling's (bf16 matmul 8192³) at 1395 MHz: "
            "a measured ceiling is the best of a few sizes in one run, not a bound (the datasheet's peak is).",
        ),
        (
            None,
            1395,
            (None, None),
            ": a measured ceiling is the best of a few sizes in one run, at whatever clock the GPU held then, not "
            "a bound.",
        ),
    ],
)
def test_a_sweep_matmul_above_the_measured_ceiling_is_said_to_beat_it_and_why_it_can(mhz, ceiling_mhz, peaks, why):
    copies = _copies([0.001, 0.005, 1.02], [0.002, 0.01, 1.0])
    ceilings = _ceilings(peaks=peaks, mhz=ceiling_mhz)
    lines = ceiling_sweeps.conclusions(Env(), ceilings, copies, _beating_matmuls(mhz), {"overhead_us": 2.4}, SIZES)
    said = [line for line in lines if line.startswith("* The fastest matmul")]
    # 2·4096³ / 0.17 ms = 808.5 TFLOP/s, 10.7% above 730
    assert said == [
        "* The fastest matmul in the sweep is n=4096 at 808 TFLOP/s, 10.7% above the measured ceiling "
        "(730 TFLOP/s)" + why
    ]


@pytest.mark.gpu
def test_the_copy_and_matmul_factories_check_on_the_gpu():
    copies, matrices = DeviceCopies(), SquareMatmuls()
    assert copies.check(4).passed and copies.held == {}
    assert matrices.check(256).passed
    matrices.of(512)()
    a, b, c = matrices.held[512]
    assert c.is_cuda and c.dtype == torch.bfloat16
    matrices.clear()
