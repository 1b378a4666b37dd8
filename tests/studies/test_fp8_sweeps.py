"""fp8_sweeps: the FP8 page's sweep factories (one size at a time, checked first), its attention checks,
its figure, and the words of its conclusions.

The factories and checks run here on the CPU through stand-ins for the graphs, for
``torch._scaled_mm`` and for PyTorch's flash backend; the words are pure. A GPU test runs the real
factories at small sizes.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.nn.attention import SDPBackend

from cudnn_guide import check
from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import attention, fp8
from cudnn_guide.measure import baselines
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.measure.sweep import SweepResult
from cudnn_guide.studies import fp8_sweeps


def fake_scaled_mm(a, b, *, scale_a, scale_b, out_dtype):
    """``torch._scaled_mm``'s arithmetic on the CPU: the FP8 product, both descales, ``out_dtype``."""
    assert scale_a.shape == () and scale_b.shape == ()
    return (a.float() @ b.float() * scale_a * scale_b).to(out_dtype)


@pytest.fixture
def checked(monkeypatch):
    """The names of the checks that ran (each still judged by the real ``check.check``)."""
    names = []
    real = check.check

    def spy(actual, expected, *, name="output", tol=None):
        names.append(name)
        return real(actual, expected, name=name, tol=tol)

    monkeypatch.setattr(check, "check", spy)
    return names


def cpu_fp8_matmul_inputs(n, seed):
    """What ``Fp8MatmulProblem.make_inputs`` returns, on the CPU."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(1, n, n, generator=g).bfloat16()
    b = torch.randn(1, n, n, generator=g).bfloat16().transpose(1, 2)
    a8, _, descale_a = fp8.quantize(a, rank=3)
    b8, _, descale_b = fp8.quantize(b, rank=3)
    return {
        "a": a,
        "b": b,
        "a8": a8,
        "b8": b8,
        "descale_a": descale_a,
        "descale_b": descale_b,
        "c": torch.empty(1, n, n, dtype=torch.bfloat16),
    }


class FakeBuilt:
    """A built graph's ``io``, ``pack`` and ``bind``; its launch runs ``body(pack)``."""

    def __init__(self, names, body):
        self.io = {n: n for n in names}
        self.body = body
        self.launches = 0

    def pack(self, **data):
        return dict(data)

    def bind(self, pack):
        def launch():
            self.launches += 1
            self.body(pack)

        return launch

    def execute(self, pack):
        self.launches += 1
        self.body(pack)


@pytest.fixture
def cpu_matmul(monkeypatch):
    """MatmulSizes' graph, problem inputs and cache emptying, on the CPU; the graphs it built."""
    built = {}

    class Problem:
        def __init__(self, m, n, k):
            self.n = n

        def make_inputs(self, seed):
            return cpu_fp8_matmul_inputs(self.n, seed)

    def graph(p, d, name):
        def body(pack):  # the dequantized FP8 product, as the cuDNN graph writes it
            pack["c"].copy_(
                fake_scaled_mm(
                    pack["a8"][0],
                    pack["b8"][0],
                    scale_a=pack["descale_a"].reshape(()),
                    scale_b=pack["descale_b"].reshape(()),
                    out_dtype=torch.bfloat16,
                )
            )

        built[name] = FakeBuilt(("a8", "b8", "descale_a", "descale_b", "c"), body)
        return built[name]

    emptied = []
    monkeypatch.setattr(fp8, "Fp8MatmulProblem", Problem)
    monkeypatch.setattr(fp8, "fp8_matmul_graph", graph)
    monkeypatch.setattr(torch, "_scaled_mm", fake_scaled_mm)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    return SimpleNamespace(built=built, emptied=emptied)


def test_scaled_mm_launcher_runs_the_first_batch_with_scalar_descales(monkeypatch):
    monkeypatch.setattr(torch, "_scaled_mm", fake_scaled_mm)
    d = cpu_fp8_matmul_inputs(8, seed=1)
    out = fp8_sweeps.scaled_mm_launcher(d)()
    assert out.shape == (8, 8) and out.dtype == torch.bfloat16
    rel = ((out.float() - d["a"][0] @ d["b"][0]).norm() / (d["a"][0] @ d["b"][0]).norm()).item()
    assert rel < 0.1


def matmul_checks(n):
    """The checks MatmulSizes runs at size ``n``, in order: one per contender."""
    return [f"FP8 {n}³", f"torch._scaled_mm FP8 {n}³", f"bf16 matmul {n}³"]


def test_matmul_sizes_build_check_and_keep_one_size_at_a_time(cpu_matmul, checked):
    mm = fp8_sweeps.MatmulSizes(tol=0.1)
    launch = mm.cudnn_fp8(16)
    assert list(cpu_matmul.built) == ["fp8 matmul 16"] and checked == matmul_checks(16)
    assert cpu_matmul.built["fp8 matmul 16"].launches == 1  # run once, for its check
    assert mm.same_bits == {16: True}  # the stand-in computes what the fake _scaled_mm does
    assert mm.cudnn_fp8(16) is launch and checked == matmul_checks(16)  # built and checked once
    bf16 = mm.bf16_matmul(16)
    assert mm.bf16_matmul(16) is bf16 and mm.made[16][4] is bf16  # the launcher that was checked
    d = mm.made[16][1]
    out = bf16()
    assert bf16() is out and out is not d["c"] and torch.equal(out, d["a"] @ d["b"])
    scaled = mm.scaled_mm(16)
    assert mm.scaled_mm(16) is scaled and mm.made[16][3] is scaled and scaled().shape == (16, 16)
    assert checked == matmul_checks(16)  # asking for the other contenders checks nothing again
    mm.cudnn_fp8(32)  # a new size drops the previous one
    assert list(mm.made) == [32] and checked == matmul_checks(16) + matmul_checks(32)
    assert len(cpu_matmul.emptied) == 2
    mm.release()
    assert mm.made == {} and mm.same_bits == {16: True, 32: True} and len(cpu_matmul.emptied) == 3


@pytest.mark.parametrize("first", ["cudnn_fp8", "scaled_mm", "bf16_matmul"])
def test_matmul_sizes_check_every_contender_whichever_the_sweep_asks_for_first(cpu_matmul, checked, first):
    mm = fp8_sweeps.MatmulSizes(tol=0.1)
    for n in (16, 32):
        getattr(mm, first)(n)  # the launcher comes back only after all three checks passed
        assert checked[-3:] == matmul_checks(n)
    assert checked == matmul_checks(16) + matmul_checks(32)
    assert all(len(name) <= 60 for name in matmul_checks(16384))


def test_matmul_sizes_stop_at_a_wrong_scaled_mm(cpu_matmul, monkeypatch, checked):
    def wrong(a, b, **kw):
        return fake_scaled_mm(a, b, **kw) * 2

    monkeypatch.setattr(torch, "_scaled_mm", wrong)
    mm = fp8_sweeps.MatmulSizes(tol=0.1)
    with pytest.raises(CheckFailedError, match="torch._scaled_mm FP8 16³"):
        mm.scaled_mm(16)
    assert checked == matmul_checks(16)[:2] and mm.made == {}


def test_matmul_sizes_see_an_unwritten_bf16_output_as_nan(cpu_matmul, monkeypatch):
    real = torch.matmul

    def skips_out(a, b, *, out=None):  # the reference (no ``out``) is right; the launcher writes nothing
        return real(a, b) if out is None else out

    monkeypatch.setattr(torch, "matmul", skips_out)
    mm = fp8_sweeps.MatmulSizes(tol=0.1)
    with pytest.raises(CheckFailedError, match="bf16 matmul 16³ failed: 256 of 256 elements are NaN"):
        mm.bf16_matmul(16)
    assert mm.made == {}


def test_matmul_sizes_stop_at_a_wrong_fp8_output(cpu_matmul, monkeypatch):
    real = fp8.fp8_matmul_graph

    def wrong(p, d, name):
        built = real(p, d, name)
        built.body = lambda pack: pack["c"].zero_()
        return built

    monkeypatch.setattr(fp8, "fp8_matmul_graph", wrong)
    with pytest.raises(CheckFailedError, match="FP8 16³"):
        fp8_sweeps.MatmulSizes(tol=0.1).cudnn_fp8(16)


def test_matmul_sizes_see_an_unwritten_output_as_nan(cpu_matmul, monkeypatch):
    real = fp8.fp8_matmul_graph

    def idle(p, d, name):
        built = real(p, d, name)
        built.body = lambda pack: None  # writes nothing: the poisoned NaN stays
        return built

    monkeypatch.setattr(fp8, "fp8_matmul_graph", idle)
    with pytest.raises(CheckFailedError):
        fp8_sweeps.MatmulSizes(tol=0.1).cudnn_fp8(16)


def test_attention_lengths_keep_the_tokens_per_point_and_count_causal_flops():
    at = fp8_sweeps.AttentionLengths(tokens=16384, heads=16, head_dim=128, tol=0.1)
    p = at.problem(4096)
    assert (p.batch, p.heads, p.seq, p.head_dim, p.causal) == (4, 16, 4096, 128, True)
    assert at.flops(2048) == attention.SdpaProblem(batch=8, heads=16, seq=2048, head_dim=128).flops
    assert at.flops(2048) == 4.0 * 8 * 16 * 2048 * 2048 * 128 / 2


@pytest.fixture
def cpu_attention(monkeypatch):
    """AttentionLengths' inputs and graphs on the CPU: the FP8 graph writes the quantized reference."""
    built = []

    def make_inputs(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        shape = (self.batch, self.heads, self.seq, self.head_dim)
        q, k, v = (torch.randn(shape, generator=g) for _ in range(3))
        return {"q": q, "k": k, "v": v, "o": torch.empty(shape)}

    def fp8_inputs(q, k, v):
        return {
            "q": q,
            "k": k,
            "v": v,
            "o8": torch.empty(q.shape, dtype=torch.float8_e4m3fn),
            "descale_o": torch.full((1, 1, 1, 1), v.abs().max().item() / 448),
        }

    def fp8_graph(p, f8, name):
        def body(pack):
            o = p.torch_forward(pack["q"], pack["k"], pack["v"])
            pack["o8"].copy_((o / pack["descale_o"].reshape(())).to(torch.float8_e4m3fn))

        built.append((name, FakeBuilt(("q", "k", "v", "o8", "descale_o"), body)))
        return built[-1][1]

    def bf16_graph(p, d):
        def body(pack):
            pack["o"].copy_(p.torch_forward(pack["q"], pack["k"], pack["v"]))

        built.append(("bf16", FakeBuilt(("q", "k", "v", "o"), body)))
        return built[-1][1]

    def forced_sdpa(backend, **kw):
        built.append(("flash", (backend, kw)))
        return lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)

    monkeypatch.setattr(attention.SdpaProblem, "make_inputs", make_inputs)
    monkeypatch.setattr(fp8, "make_sdpa_fp8_inputs", fp8_inputs)
    monkeypatch.setattr(fp8, "sdpa_fp8_graph", fp8_graph)
    monkeypatch.setattr(attention, "sdpa_graph", bf16_graph)
    monkeypatch.setattr(baselines, "forced_sdpa", forced_sdpa)
    return built


def attention_checks(s):
    """The checks AttentionLengths runs at length ``s``, in order: one per contender but FA4."""
    return [f"FP8 attention S={s}", f"cuDNN bf16 attention S={s}", f"SDPA flash (FlashAttention-2) bf16 S={s}"]


def test_attention_lengths_check_every_contender_once_per_length(cpu_attention, checked):
    at = fp8_sweeps.AttentionLengths(tokens=64, heads=2, head_dim=16, tol=0.1)
    fp8_launch = at.cudnn_fp8(32)
    assert [n for n, _ in cpu_attention] == ["fp8 attention 32", "bf16", "flash"]
    assert checked == attention_checks(32)
    assert cpu_attention[0][1].launches == 1 and cpu_attention[1][1].launches == 1  # run once, for its check
    p, d, _, _, _ = at.made[32]
    assert cpu_attention[2][1] == (SDPBackend.FLASH_ATTENTION, {"is_causal": True, "scale": p.scale})
    assert at.cudnn_fp8(32) is fp8_launch and at.cudnn_bf16(32) is at.made[32][3]
    assert at.flash(32) is at.made[32][4] and torch.equal(at.flash(32)(), p.torch_forward(d["q"], d["k"], d["v"]))
    assert checked == attention_checks(32)  # asking for the other contenders checks nothing again
    assert p.batch == 2 and d["q"].shape == (2, 2, 32, 16)
    at.cudnn_bf16(16)
    assert list(at.made) == [16] and checked == attention_checks(32) + attention_checks(16)


@pytest.mark.parametrize("first", ["cudnn_fp8", "cudnn_bf16", "flash"])
def test_attention_lengths_check_every_contender_whichever_the_sweep_asks_for_first(cpu_attention, checked, first):
    at = fp8_sweeps.AttentionLengths(tokens=64, heads=2, head_dim=16, tol=0.1)
    for s in (16, 32):
        getattr(at, first)(s)  # the launcher comes back only after all three checks passed
        assert checked[-3:] == attention_checks(s)
    assert checked == attention_checks(16) + attention_checks(32)
    assert all(len(name) <= 60 for name in attention_checks(16384))


def test_attention_lengths_see_an_unwritten_bf16_output_as_nan(cpu_attention, monkeypatch, checked):
    real = attention.sdpa_graph

    def idle(p, d):
        built = real(p, d)
        d["o"].zero_()  # a stale value that is not the answer; poisoning turns it into NaN
        built.body = lambda pack: None
        return built

    monkeypatch.setattr(attention, "sdpa_graph", idle)
    at = fp8_sweeps.AttentionLengths(tokens=64, heads=2, head_dim=16, tol=0.1)
    with pytest.raises(CheckFailedError, match="cuDNN bf16 attention S=32 failed: .* NaN"):
        at.cudnn_bf16(32)
    assert checked == attention_checks(32)[:2] and at.made == {}


def test_attention_lengths_stop_at_a_wrong_flash_output(cpu_attention, monkeypatch, checked):
    monkeypatch.setattr(baselines, "forced_sdpa", lambda backend, **kw: lambda q, k, v: torch.zeros_like(q))
    at = fp8_sweeps.AttentionLengths(tokens=64, heads=2, head_dim=16, tol=0.1)
    with pytest.raises(CheckFailedError, match=r"SDPA flash \(FlashAttention-2\) bf16 S=32"):
        at.flash(32)
    assert checked == attention_checks(32) and at.made == {}


def test_check_attention_runs_both_graphs_then_checks_three_things_in_order(checked):
    p = attention.SdpaProblem(batch=1, heads=2, seq=16, head_dim=16, causal=True)
    g = torch.Generator().manual_seed(0)
    ins = {n: torch.randn(1, 2, 16, 16, generator=g) for n in "qkv"}
    ins["o"] = torch.empty(1, 2, 16, 16)
    ref = p.torch_forward(ins["q"], ins["k"], ins["v"])
    scale_o = 448 / ref.abs().max().item()
    f8 = {
        "o8": torch.empty(1, 2, 16, 16, dtype=torch.float8_e4m3fn),
        "descale_o": torch.full((1, 1, 1, 1), 1 / scale_o),
        "amax_o": torch.zeros(1, 1, 1, 1),
        "q8": ins["q"],
    }
    order = []

    def fp8_body(pack):
        order.append("fp8")
        pack["o8"].copy_((ref * scale_o).to(torch.float8_e4m3fn))
        pack["amax_o"].fill_(ref.abs().max().item())

    def bf16_body(pack):
        order.append("bf16")
        pack["o"].copy_(ref)

    results = fp8_sweeps.check_attention(
        p,
        ins,
        f8,
        FakeBuilt(("q8", "o8", "descale_o", "amax_o"), fp8_body),
        FakeBuilt(("q", "k", "v", "o"), bf16_body),
        tol=0.1,
    )
    assert order == ["fp8", "bf16"]
    assert checked == [
        "cuDNN FP8 attention (dequantized O)",
        "cuDNN bf16 attention",
        "amax_O vs max|O| of the reference",
    ]
    assert [r.name for r in results] == checked and all(r.passed for r in results)


def sweep_of(x, runs, candidate=None):
    """A SweepResult of ``{(impl, size): TFLOP/s}`` (1 ms per call, so the FLOPs are the rate)."""
    ms = [
        Measurement(f"{impl} @ {x}={v}", [1.0] * 3, "cold", flops=t * 1e9, params={"impl": impl, x: v})
        for (impl, v), t in runs.items()
    ]
    return SweepResult(x, ms)


def test_the_figure_has_the_matmul_with_its_ceiling_beside_attention(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cudnn_guide import report

    calls = []
    monkeypatch.setattr(report, "plot_sweep", lambda result, metric, **kw: calls.append((result, metric, kw)))
    mm, att = sweep_of("n", {("torch.matmul bf16 (cuBLAS)", 2048): 650.0}), object()
    fig = fp8_sweeps.plot_fp8_sweeps(mm, att, ceiling=700.0)
    assert len(fig.axes) == 2 and [c[0] for c in calls] == [mm, att]
    assert calls[0][2]["ceiling"] == 700.0
    assert calls[0][2]["ceiling_label"] == "bf16 matmul, separate probe:\n700 TFLOP/s"
    assert calls[0][2]["title"] == "matmul, n × n × n" and "ceiling" not in calls[1][2]
    assert calls[1][2]["title"] == "causal attention forward, head dim 128"
    assert all(c[1] == "tflops" and c[2]["logx"] for c in calls)
    assert [c[2]["ax"] for c in calls] == fig.axes
    plt.close(fig)


def test_the_figure_draws_real_sweeps():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mm = sweep_of("n", {("cuDNN FP8 graph", 2048): 500.0, ("cuDNN FP8 graph", 4096): 900.0})
    att = sweep_of("seq_len", {("cuDNN FP8 graph", 2048): 400.0, ("cuDNN bf16 graph", 2048): 300.0})
    fig = fp8_sweeps.plot_fp8_sweeps(mm, att, ceiling=700.0)
    assert fig.axes[0].get_title() == "matmul, n × n × n"
    plt.close(fig)


def test_each_legend_sits_below_its_panel_clear_of_every_point_and_label():
    # the recorded H200 run's shape: inside the axes, the attention legend hid the FP8 point at S=4096
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sizes = [2048, 4096, 8192, 16384]
    mm_runs = {
        "cuDNN FP8 graph": [1080, 1372, 1473, 1402],
        "torch._scaled_mm FP8 (cuBLASLt)": [1090, 1370, 1423, 1360],
        "torch.matmul bf16 (cuBLAS)": [705, 796, 776, 726],
    }
    att_runs = {
        "cuDNN FP8 graph": [665, 840, 920, 930],
        "cuDNN bf16 graph": [522, 582, 614, 636],
        "PyTorch SDPA, flash backend (FlashAttention-2), bf16": [285, 306, 311, 317],
        "FlashAttention-4 (flash-attn-4 4.0.0b36), bf16": [545, 641, 686, 723],
    }
    mm = sweep_of("n", {(k, n): t for k, ts in mm_runs.items() for n, t in zip(sizes, ts)})
    att = sweep_of("seq_len", {(k, s): t for k, ts in att_runs.items() for s, t in zip(sizes, ts)})
    fig = fp8_sweeps.plot_fp8_sweeps(mm, att, ceiling=772.0)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent(renderer)
        assert not legend.overlaps(ax.get_window_extent(renderer)), ax.get_title()
        labels = [ax.xaxis.label, *ax.get_xticklabels()]
        assert not any(legend.overlaps(t.get_window_extent(renderer)) for t in labels if t.get_text())
        assert fig.bbox.contains(legend.x0, legend.y0) and fig.bbox.contains(legend.x1, legend.y1)
        points = np.concatenate([line.get_transform().transform(line.get_xydata()) for line in ax.get_lines()])
        assert not any(legend.contains(x, y) for x, y in points), ax.get_title()
    assert len(fig.axes[1].get_legend().get_texts()) == 4
    plt.close(fig)


def test_the_probe_line_says_where_the_sweeps_bf16_exceeds_it(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cudnn_guide import report

    labels = []
    monkeypatch.setattr(report, "plot_sweep", lambda result, metric, **kw: labels.append(kw.get("ceiling_label")))
    bf16, fp8_ = "torch.matmul bf16 (cuBLAS)", "cuDNN FP8 graph"
    runs = {(bf16, 2048): 705.0, (bf16, 4096): 792.0, (bf16, 8192): 751.0, (bf16, 16384): 714.0}
    runs |= {(fp8_, n): 1400.0 for n in (2048, 4096, 8192, 16384)}  # FP8 above a bf16 line is no news
    plt.close(fp8_sweeps.plot_fp8_sweeps(sweep_of("n", runs), object(), ceiling=718.0))
    label = labels[0].replace("\N{NO-BREAK SPACE}", " ")
    assert "ceiling" in label and label.startswith("bf16 matmul, separate probe:\n718 TFLOP/s\n(not a ceiling")
    assert " ".join(label.split()).endswith("this sweep's bf16 exceeds it at n = 4096, 8192)")
    assert all(len(line) <= 30 for line in labels[0].splitlines())


@pytest.mark.parametrize(
    "same, says",
    [
        ({1: True, 2: True}, "equals torch._scaled_mm's bit for bit at every size, so the two almost certainly"),
        ({1: True, 2: False}, "equals torch._scaled_mm's bit for bit at 1³ (the same kernel there, almost certainly)"),
        ({1: False, 2: False}, "differs from torch._scaled_mm's at every size: the two run different kernels"),
    ],
)
def test_the_kernel_clause_follows_the_bits(same, says):
    assert fp8_sweeps.same_kernel_text(same, [1, 2]).startswith(says)


def comparison(verdict, wall=None, measurements=None):
    return SimpleNamespace(versus={"S": {"verdict": verdict}}, wall=wall, measurements=measurements or {})


def clocked(*warnings, read_with="nvml"):
    """A measurement whose clocks were read (or not) and that carries ``warnings``."""
    return Measurement("m", [1.0] * 3, "cold", warnings=list(warnings), clocks={"read_with": read_with})


def test_the_clocks_item_names_each_size_where_gpu_time_and_the_loop_disagree():
    loop = SimpleNamespace(
        versus={"S": {"verdict": "slower", "value": 0.95, "low": 0.93, "high": 0.97}}, tie_band=0.012
    )
    agree = SimpleNamespace(versus={"S": {"verdict": "tie", "value": 1.0, "low": 0.99, "high": 1.01}}, tie_band=0.01)
    result = SimpleNamespace(
        comparisons={2048: comparison("tie", loop), 4096: comparison("tie", agree), 8192: comparison("faster")}
    )
    text = fp8_sweeps.clocks_text(result, [2048, 4096, 8192], "S")
    assert text == (
        "* GPU time and a back-to-back loop disagree: at 2048³ cuDNN FP8 is a tie by GPU time and slower in a "
        "back-to-back loop (0.95×, 0.93–0.97; the loop's tie band ±1.2%). The GPU-time verdict is the one that "
        "applies to launches under CUDA graphs, where a call's host time is gone; the loop's applies to plain eager "
        "launching, host time included. The GPU's clocks were not read."
    )
    result.comparisons.pop(2048)
    assert fp8_sweeps.clocks_text(result, [4096, 8192], "S") == (
        "* At 4096³ a back-to-back loop, host time included, was also timed: it gives the same verdict as GPU time. "
        "The GPU's clocks were not read."
    )
    other = SimpleNamespace(versus={"T": {}}, tie_band=0.01)  # a loop without this baseline does not count
    result = SimpleNamespace(comparisons={1: comparison("tie", other)})
    assert fp8_sweeps.clocks_text(result, [1], "S").startswith("* No back-to-back loop was timed")


def test_the_clocks_item_says_where_the_power_cap_held_the_clock_down():
    cap = "software power cap held the clock down (SM clock {} of 1980 MHz at the end); timings may be slower"
    host = "host time per call (37.16 µs) exceeds GPU time (15.86 µs): back-to-back calls are host-bound"
    result = SimpleNamespace(
        comparisons={
            2048: comparison("tie", measurements={"a": clocked(host), "b": clocked()}),
            8192: comparison("tie", measurements={"a": clocked(cap.format(1620), cap.format(1605)), "b": clocked()}),
            16384: comparison("tie", measurements={"a": clocked(cap.format(1545)), "b": clocked(cap.format(1335))}),
        }
    )
    text = fp8_sweeps.clocks_text(result, [2048, 8192, 16384], "S")
    assert text.startswith(
        "* No back-to-back loop was timed: no contender's host time per call came near its GPU time."
    )
    assert text.endswith(
        " The GPU's clock was held down (software power cap) at 8192³ and 16384³: the lowest SM clock read after "
        "a timed run was 1605 of 1980 MHz at 8192³ and 1335 of 1980 MHz at 16384³, so timings there may be slower "
        "than this GPU's best."
    )
    thermal = "thermal throttling during 20% of the run (SM clock 1700 of 1980 MHz at the end)"
    result = SimpleNamespace(comparisons={1: comparison("tie", measurements={"a": clocked(thermal)})})
    assert "held down (thermal throttling) at 1³: the lowest SM clock read after a timed run was 1700 of 1980" in (
        fp8_sweeps.clocks_text(result, [1], "S")
    )
    result = SimpleNamespace(comparisons={1: comparison("tie", measurements={"a": clocked(host)})})
    assert fp8_sweeps.clocks_text(result, [1], "S").endswith(" No timed run reports the GPU's clock held down.")
    result = SimpleNamespace(comparisons={1: comparison("tie", measurements={"a": clocked(read_with=None)})})
    assert fp8_sweeps.clocks_text(result, [1], "S").endswith(" The GPU's clocks were not read.")


def test_error_ratio_and_peak_in_words():
    r = lambda e: SimpleNamespace(rel_error=e)
    assert fp8_sweeps.error_ratio(r(3e-2), r(2e-3)) == "15× larger"
    assert fp8_sweeps.error_ratio(r(1e-3), r(2.5e-3)) == "2.5× smaller"
    att = sweep_of("seq_len", {("A", 2048): 400.0, ("A", 4096): 512.4, ("B", 8192): 900.0})
    assert fp8_sweeps.peak_text(att, "A") == "512 TFLOP/s (S=4096)"


@pytest.mark.gpu
def test_the_real_factories_check_and_time_at_small_sizes(checked):
    from cudnn_guide.measure import sweep

    mm = fp8_sweeps.MatmulSizes(tol=0.1)
    impls = {"cuDNN FP8 graph": mm.cudnn_fp8, "scaled": mm.scaled_mm, "bf16": mm.bf16_matmul}
    result = sweep.sweep(
        [512], impls, x="n", l2="cold", flops=lambda n: 2 * n**3, candidate="cuDNN FP8 graph", rounds=5
    )
    mm.release()
    assert set(result.comparisons[512].versus) == {"scaled", "bf16"} and 512 in mm.same_bits
    at = fp8_sweeps.AttentionLengths(tokens=1024, heads=2, head_dim=128, tol=0.1)
    launchers = [at.cudnn_fp8(512), at.cudnn_bf16(512), at.flash(512)]
    for launch in launchers:
        launch()
    torch.cuda.synchronize()
    assert checked == matmul_checks(512) + attention_checks(512)
