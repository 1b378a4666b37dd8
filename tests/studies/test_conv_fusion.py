"""conv_fusion: the fused-convolution page's work lines, its baselines and their admission, its verdict and
profiler lines, its figure and its sentences.

On the CPU the baselines run on small float32 tensors (``torch.compile`` is the function itself and
PyTorch's fused binding a stand-in that computes the layer), the profiler is a stand-in, and the
comparisons are written by hand. The GPU test admits the real baselines on a small convolution.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import conv
from cudnn_guide.measure import compare
from cudnn_guide.measure.ceilings import Ceilings
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import conv_fusion
from cudnn_guide.studies.conv_fusion import CANDIDATE, COMPILED, EAGER_OFF, EAGER_ON, FUSED_BINDING
from cudnn_guide.studies.profiling import ProfiledKernels


def test_the_contenders_keep_the_names_the_records_key_on():
    assert CANDIDATE == "cuDNN graph (fused)"
    assert EAGER_OFF == "PyTorch eager, benchmark off"
    assert EAGER_ON == "PyTorch eager, benchmark on"
    assert COMPILED == "torch.compile (max-autotune-no-cudagraphs)"
    assert FUSED_BINDING == "torch.cudnn_convolution_relu"


def _m(label, ms, *, flops=None, launch_cost_ms=0.0, clocks=None):
    return Measurement(
        label,
        [ms] * 5,
        "cold",
        flops=flops,
        params={"impl": label, "size": "s"},
        clocks=clocks or {},
        launch_cost_ms=launch_cost_ms,
    )


def _ceilings(mhz=1395):
    copy = _m("device copy", 0.9)
    matmul = _m("bf16 matmul 8192³", 1.5, clocks={"sm_mhz_end": mhz} if mhz else {})
    return Ceilings(4700.0, 730.0, copy, matmul, 989.4, 4800.0)


def test_work_lines_give_the_pages_problem_its_work_the_peaks_and_its_floor():
    problem = conv.ConvProblem(n=32, c=128, h=56, w=56, k=256, r=3, s=3, padding=1, dtype="bfloat16")
    # 2·N·K·P·Q·C·R·S = 59.19 GFLOP; 2 bytes × (x + w + b + y) = 77,660,672 B = 74.06 MiB; 762 FLOP/B;
    # the datasheet's ridge is 989.4e12 / 4800e9 = 206 FLOP/B: compute-bound, 59.19e9 / 989.4e12 s = 59.8 µs
    assert conv_fusion.work_lines(problem, _ceilings()).splitlines() == [
        "N32 C128 56×56 → K256 3×3 pad 1 stride 1, bfloat16, NHWC",
        "work: 59.2 GFLOP, 74.1 MiB moved at least (762 FLOP/B)",
        "datasheet peaks: 989 TFLOP/s bf16, 4800 GB/s",
        "measured now: 730 TFLOP/s (bf16 matmul 8192³, SM clock 1395 MHz at its end), 4700 GB/s copy",
        "floor at the datasheet peaks: 59.8 µs (compute-bound)",
    ]
    thin = conv.ConvProblem(n=32, c=8, h=56, w=56, k=8, r=1, s=1, padding=0)
    assert conv_fusion.work_lines(thin, _ceilings(mhz=None)).splitlines()[3:] == [
        "measured now: 730 TFLOP/s (bf16 matmul 8192³, SM clock ? MHz at its end), 4700 GB/s copy",
        f"floor at the datasheet peaks: {thin.bytes / 4800e9 * 1e6:.1f} µs (memory-bound)",
    ]


@pytest.fixture
def layer(monkeypatch):
    """A small float32 conv → bias → ReLU on the CPU, a ``torch.compile`` that returns the function and a
    stand-in for PyTorch's fused binding; every step is logged."""
    from cudnn_guide.measure import baselines

    log = []

    def compile_quietly(fn, *args, **kwargs):
        log.append(("compile", fn, args, kwargs))
        return fn

    def fused_binding(x, w, b, stride, padding, dilation, groups):
        log.append(("binding", tuple(b.shape), stride, padding, dilation, groups))
        return F.relu(F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups))

    monkeypatch.setattr(baselines, "compile_quietly", compile_quietly)
    monkeypatch.setattr(torch, "cudnn_convolution_relu", fused_binding, raising=False)

    def make(**kwargs):
        p = conv.ConvProblem(n=2, c=4, h=6, w=6, k=8, dtype="float32", **kwargs)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(p.n, p.c, p.h, p.w, generator=g).to(memory_format=torch.channels_last)
        w = torch.randn(p.k, p.c, p.r, p.s, generator=g).to(memory_format=torch.channels_last)
        b = torch.randn(1, p.k, 1, 1, generator=g)
        return p, x, w, b, p.torch_forward(x, w, b)

    return log, make


def test_admit_baselines_compiles_first_then_checks_and_adds_each_in_the_pages_order(layer, capsys):
    log, make = layer
    problem, x, w, b, ref = make(padding=1)
    contenders = {CANDIDATE: lambda: None}
    unavailable = conv_fusion.admit_baselines(contenders, problem, x, w, b, ref)
    assert unavailable == {}
    assert list(contenders) == [CANDIDATE, EAGER_OFF, EAGER_ON, COMPILED, FUSED_BINDING]
    assert log[0][0] == "compile" and log[0][2:] == ((), {})  # compile_quietly's own mode
    assert log[0][1] == problem.torch_forward
    assert log[1] == ("binding", (8,), [1, 1], [1, 1], [1, 1], 1)  # the page's: stride 1, padding 1
    out = capsys.readouterr().out
    assert all(f"check {n}:" in out for n in list(contenders)[1:]) and "FAIL" not in out
    torch.backends.cudnn.benchmark = False
    torch.testing.assert_close(contenders[EAGER_ON](), ref)
    assert torch.backends.cudnn.benchmark is False  # set for the baseline's own calls only
    torch.testing.assert_close(contenders[EAGER_OFF](), ref)
    torch.testing.assert_close(contenders[COMPILED](), ref)
    torch.testing.assert_close(contenders[FUSED_BINDING](), ref)


def test_the_fused_binding_takes_the_problems_stride_and_padding(layer):
    log, make = layer
    problem, x, w, b, ref = make(padding=0, stride=2)
    conv_fusion.admit_baselines({CANDIDATE: lambda: None}, problem, x, w, b, ref)
    assert log[-1] == ("binding", (8,), [2, 2], [0, 0], [1, 1], 1)


def test_a_baseline_that_cannot_run_is_left_out_and_one_that_is_wrong_stops_the_page(layer, monkeypatch, capsys):
    _, make = layer
    problem, x, w, b, ref = make(padding=1)

    def refuses(*args):
        raise RuntimeError("cudnn_convolution_relu: not supported here\nmore")

    monkeypatch.setattr(torch, "cudnn_convolution_relu", refuses)
    contenders = {CANDIDATE: lambda: None}
    unavailable = conv_fusion.admit_baselines(contenders, problem, x, w, b, ref)
    assert unavailable == {FUSED_BINDING: "RuntimeError: cudnn_convolution_relu: not supported here"}
    assert FUSED_BINDING not in contenders and len(contenders) == 4
    assert f"{FUSED_BINDING}: unavailable here" in capsys.readouterr().out
    monkeypatch.setattr(torch, "cudnn_convolution_relu", lambda x, w, b, *rest: F.conv2d(x, w, b, padding=1))
    with pytest.raises(CheckFailedError, match=FUSED_BINDING):  # no ReLU: a wrong result
        conv_fusion.admit_baselines({CANDIDATE: lambda: None}, problem, x, w, b, ref)


def _v(value, verdict, half=0.05):
    return {"value": value, "low": value - half, "high": value + half, "verdict": verdict}


def _comparison(times, versus, *, rounds=9, cap=15, band=0.012, flops=5e10):
    """A comparison whose every round took ``times[name]`` ms (the candidate first)."""
    measured = {n: _m(n, t, flops=flops) for n, t in times.items()}
    medians = {n: [t] * rounds for n, t in times.items()}
    return Comparison(next(iter(times)), rounds, measured, medians, versus, band, rounds_cap=cap)


TIMES = {CANDIDATE: 0.1, EAGER_OFF: 0.3, EAGER_ON: 0.2, COMPILED: 0.15, FUSED_BINDING: 0.09}
VERSUS = {
    EAGER_OFF: _v(3.0, "faster"),
    EAGER_ON: _v(2.0, "faster"),
    COMPILED: _v(1.5, "faster"),
    FUSED_BINDING: _v(0.9, "slower", 0.01),
}


def test_verdict_lines_give_each_speed_up_then_the_rounds_and_the_stopping_rule():
    lines = conv_fusion.verdict_lines(_comparison(TIMES, VERSUS)).splitlines()
    assert lines == [
        f"{EAGER_OFF}: 3.00× (2.95–3.05), faster",
        f"{EAGER_ON}: 2.00× (1.95–2.05), faster",
        f"{COMPILED}: 1.50× (1.45–1.55), faster",
        f"{FUSED_BINDING}: 0.90× (0.89–0.91), slower",
        "tie band ±1.2%; 9 rounds ran, of a cap of 15:",
        f"from {compare.ADAPTIVE_MIN_ROUNDS} rounds on, compare stops once every interval lies wholly outside or "
        "inside the tie band",
        "and is no wider than ±5% of its value",
    ]


def test_profile_contenders_profiles_each_pair_in_order_under_its_label(monkeypatch):
    from cudnn_guide.studies import profiling

    asked = []

    def profile_kernels(fn, *, calls, l2, label):
        asked.append((fn(), calls, l2, label))
        return ProfiledKernels(0.1, calls, {})

    monkeypatch.setattr(profiling, "profile_kernels", profile_kernels)
    pairs = [(_m(CANDIDATE, 0.1), lambda: "fused"), (_m(EAGER_OFF, 0.3), lambda: "eager")]
    profiled = conv_fusion.profile_contenders(pairs, calls=30, l2="cold")
    assert list(profiled) == [CANDIDATE, EAGER_OFF]
    assert asked == [("fused", 30, "cold", CANDIDATE), ("eager", 30, "cold", EAGER_OFF)]


@pytest.fixture
def profiled():
    long_name = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_" * 2
    return {
        EAGER_OFF: ProfiledKernels(0.25, 30, {"conv": 6.0, long_name: 0.9, "relu": 0.6, "other": 0.1}),
        CANDIDATE: ProfiledKernels(0.104, 30, {"fused": 3.12}),
    }


def test_profiler_gaps_are_the_harness_over_the_profiler_in_profiled_order(profiled):
    measurements = [_m(CANDIDATE, 0.1, launch_cost_ms=0.003), _m(EAGER_OFF, 0.26, launch_cost_ms=0.003)]
    gap = conv_fusion.profiler_gaps(measurements, profiled)
    assert list(gap) == [EAGER_OFF, CANDIDATE]
    assert gap[EAGER_OFF] == pytest.approx(4.0) and gap[CANDIDATE] == pytest.approx(100 * (0.1 / 0.104 - 1))


def test_profiler_lines_give_both_clocks_the_launch_cost_and_the_top_kernels_wrapped(profiled):
    measurements = [_m(CANDIDATE, 0.1, launch_cost_ms=0.003), _m(EAGER_OFF, 0.26, launch_cost_ms=0.003)]
    lines = conv_fusion.profiler_lines(measurements, profiled).splitlines()
    assert lines[:3] == [
        f"{EAGER_OFF}: harness 260.0 µs, profiler 250.0 µs (+4.0%)",
        "    events 263.0 µs − 3.0 µs launch cost",
        "       200.0 µs/call",
    ]
    assert lines[3] == "        conv"
    assert lines[4] == "        30.0 µs/call"
    long_lines = lines[5 : lines.index("        20.0 µs/call")]
    assert len(long_lines) >= 2 and all(len(line) <= 88 for line in long_lines)
    assert long_lines[0].startswith(" " * 8 + "sm90_") and all(x.startswith(" " * 10) for x in long_lines[1:])
    assert "".join(x.strip() for x in long_lines) == profiled[EAGER_OFF].top(3)[1][0]
    assert "other" not in "\n".join(lines)  # the top three only
    assert lines[-4:] == [
        f"{CANDIDATE}: harness 100.0 µs, profiler 104.0 µs (-3.8%)",
        "    events 103.0 µs − 3.0 µs launch cost",
        "       104.0 µs/call",
        "        fused",
    ]


def test_comparison_figure_draws_the_contenders_against_the_datasheet_peak():
    import matplotlib.pyplot as plt

    ax = conv_fusion.comparison_figure(_comparison(TIMES, VERSUS), 989.4, "NVIDIA H200")
    try:
        assert "conv→bias→ReLU on NVIDIA H200" in ax.get_title().replace("\n", " ")
        assert "datasheet bf16 peak" in ax.get_legend_handles_labels()[1]
        assert any(list(line.get_xdata()) == [989.4, 989.4] for line in ax.get_lines())
    finally:
        plt.close(ax.figure)


def test_fastest_rival_leaves_out_cudnns_own_kernel_through_pytorch():
    cmp = _comparison(TIMES, VERSUS)
    assert conv_fusion.fastest_rival(cmp) == COMPILED  # the binding is faster, but it is cuDNN's kernel


def test_conclusions_say_time_shares_each_verdict_the_floor_the_profiler_and_what_could_not_run():
    cmp = _comparison(TIMES, VERSUS)
    gap = {CANDIDATE: 3.2, EAGER_OFF: -1.5}
    sentences = conv_fusion.conclusions(cmp, _ceilings(), 0.05, gap, {"X": "RuntimeError: no"})
    assert sentences[0] == (
        "The fused cuDNN graph runs in 100.0 µs (in-run 95% interval 100.0–100.0 over 9 rounds), "
        "500 TFLOP/s: 51% of the datasheet bf16 peak, 68% of the GEMM measured just now."
    )
    # the binding (0.09 ms) is faster than torch.compile (0.15 ms) but is cuDNN's own kernel: the rival is
    # the fastest that is not, and each verdict names its baseline once and is this run's
    assert sentences[1] == (
        "* Against the fastest implementation that is not cuDNN's own kernel, in this run it is "
        f"{cmp.describe(COMPILED)}."
    )
    assert sentences[2:5] == [
        f"* In this run it is {cmp.describe(EAGER_OFF)}.",
        f"* In this run it is {cmp.describe(EAGER_ON)}.",
        f"* Against cuDNN's own kernel called through PyTorch, in this run it is {cmp.describe(FUSED_BINDING)}.",
    ]
    for sentence, name in zip(sentences[1:5], [COMPILED, EAGER_OFF, EAGER_ON, FUSED_BINDING]):
        assert sentence.count(name) == 1
    assert sentences[5] == "* It takes 2.00× the floor set by the datasheet peaks (50.0 µs)."
    assert sentences[6].startswith(
        f"* The harness and the profiler differ by +3.2% ({CANDIDATE}), -1.5% ({EAGER_OFF}). They are two runs"
    )
    assert sentences[7:] == ["* X could not run here (RuntimeError: no), so it is not compared."]


def test_the_rival_is_the_fastest_other_implementation_only_when_cudnns_own_kernel_is_not_faster():
    slower_binding = {**TIMES, FUSED_BINDING: 0.2}
    cmp = _comparison(slower_binding, VERSUS)
    sentences = conv_fusion.conclusions(cmp, _ceilings(), 0.05, {}, {})
    assert sentences[1] == f"* Against the fastest other implementation, in this run it is {cmp.describe(COMPILED)}."
    without = {n: t for n, t in TIMES.items() if n != FUSED_BINDING}
    cmp = _comparison(without, {n: v for n, v in VERSUS.items() if n != FUSED_BINDING})
    sentences = conv_fusion.conclusions(cmp, _ceilings(), 0.05, {}, {})
    assert sentences[1].startswith("* Against the fastest other implementation, in this run it is 1.50× faster than ")
    assert sentences[1].count(COMPILED) == 1


@pytest.mark.gpu
def test_the_baselines_admit_on_a_small_convolution_on_the_gpu(small_conv):
    from cudnn_guide import check

    inputs, fused = small_conv
    p = conv.ConvProblem(n=2, c=32, h=16, w=16, k=64)
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    reference = check.reference(p.torch_forward, x, w, b)
    contenders = {CANDIDATE: lambda: None}
    unavailable = conv_fusion.admit_baselines(contenders, p, x, w, b, reference)
    assert set(contenders) | set(unavailable) == {CANDIDATE, EAGER_OFF, EAGER_ON, COMPILED, FUSED_BINDING}
    assert EAGER_OFF in contenders and COMPILED in contenders
