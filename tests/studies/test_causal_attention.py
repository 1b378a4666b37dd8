"""causal_attention: the causal-SDPA page's backend names, forced PyTorch SDPA, checks, sweep shapes and sweep wiring
(with stand-ins for the graphs and the timing), figure, peaks and sentences, on the CPU; the one-hot probe of the
causal mask on the GPU."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from cudnn_guide import graphs
from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import attention
from cudnn_guide.measure import fa4, sweep
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.measure.sweep import SweepResult
from cudnn_guide.studies import causal_attention as study

FA4 = "FA4 (test)"
FLASH = "PyTorch SDPA, flash backend (FlashAttention-2)"
MEM = "PyTorch SDPA, memory-efficient backend"
SELF = "PyTorch SDPA, cuDNN backend"


def test_the_backends_get_the_pages_names_in_pytorchs_order():
    got = study.backends()
    assert list(got) == [FLASH, MEM, SELF]
    assert list(got.values()) == [
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
    ]


def test_forced_sdpa_runs_the_problems_causal_attention_with_its_scale():
    problem = attention.SdpaProblem(batch=1, heads=2, seq=16, head_dim=8, causal=True)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=gen) for _ in range(3))
    launch = study.torch_sdpa(SDPBackend.MATH, problem, q, k, v)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=8**-0.5)
    torch.testing.assert_close(launch(), want)


def test_a_check_prints_one_line_and_a_wrong_output_raises():
    ref = torch.linspace(1, 2, 64)
    line = study.checked(ref, "PyTorch SDPA, flash backend")(ref.clone())
    assert line.startswith("PyTorch SDPA, flash backend: rel. error 0.0e+00 (tolerance ")
    with pytest.raises(CheckFailedError):
        study.checked(ref, "wrong")(ref * 2)


def test_every_sweep_point_holds_16384_tokens_at_a_width_of_2048():
    p = study.problem_at(4096, 128)
    assert (p.batch, p.heads, p.seq, p.head_dim, p.causal) == (4, 16, 4096, 128, True)
    for s in (1024, 2048, 4096, 8192, 16384):
        for d in (64, 128):
            p = study.problem_at(s, d)
            assert p.batch * p.seq == 16384 and p.heads * p.head_dim == 2048
            assert p.flops == 4 * p.batch * p.heads * s * s * d / 2  # causal: half


# --------------------------------------------------------------------------------------------------
# The sweep, with stand-ins
# --------------------------------------------------------------------------------------------------


class _Adopted:
    def __init__(self, graph, handle, name):
        self.graph, self.handle, self.name = graph, handle, name

    def bind(self, pack):
        return lambda: ("cudnn", self.name, pack)


def test_the_sweep_builds_the_graph_first_and_races_every_contender_on_its_inputs(monkeypatch):
    calls, built, forced, fa4_calls, emptied = [], [], [], [], []

    def make_inputs(self, seed=0):
        shape = (self.batch, self.heads, self.seq, self.head_dim)
        return {n: torch.full(shape, float(seed)) for n in "qkvo"}

    def build(q, k, v, o):
        built.append((tuple(q.shape), q.flatten()[0].item()))
        return "graph", {"pack": tuple(q.shape)}

    def torch_sdpa(backend, p, q, k, v):
        forced.append((backend, p.seq, p.head_dim, q.flatten()[0].item()))
        if backend == "refuses" and p.seq == 2048:
            return lambda: (_ for _ in ()).throw(RuntimeError("no kernel"))
        return lambda: backend

    def fake_forward(q, k, v, *, causal, scale):
        fa4_calls.append((tuple(q.shape), causal, scale))
        return lambda: "fa4"

    def fake_sweep(xs, impls, **kw):
        contenders = {x: {n: f(x) for n, f in impls.items()} for x in xs}
        calls.append((list(xs), list(impls), kw, contenders))
        return SweepResult(kw["x"], [], {})

    monkeypatch.setattr(attention.SdpaProblem, "make_inputs", make_inputs)
    monkeypatch.setattr(graphs, "adopt", _Adopted)
    monkeypatch.setattr(study, "torch_sdpa", torch_sdpa)
    monkeypatch.setattr(fa4, "forward", fake_forward)
    monkeypatch.setattr(sweep, "sweep", fake_sweep)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(len(calls)))

    backends = {"torch A": "ok", "torch B": "refuses"}
    got = study.sweep_lengths(build, "handle", [1024, 2048], [64, 128], backends, fa4_name=FA4, rounds=7)
    assert list(got) == [64, 128] and emptied == [1, 2]  # the cache emptied after each head dim
    (xs, names, kw, contenders), second = calls
    assert xs == [1024, 2048]
    assert names == ["cuDNN graph, d=64", "torch A, d=64", "torch B, d=64", f"{FA4}, d=64"]
    assert second[1][0] == "cuDNN graph, d=128"
    assert {k: v for k, v in kw.items() if k != "flops"} == dict(
        x="seq_len", l2="cold", candidate="cuDNN graph, d=64", rounds=7
    )
    assert kw["flops"](2048) == study.problem_at(2048, 64).flops
    assert second[2]["flops"](1024) == study.problem_at(1024, 128).flops
    # each length's inputs: seed s + d, built by the page's builder before the others use them
    assert built[:2] == [((16, 32, 1024, 64), 1088.0), ((8, 32, 2048, 64), 2112.0)]
    assert forced[:2] == [("ok", 1024, 64, 1088.0), ("refuses", 1024, 64, 1088.0)]
    assert contenders[1024]["cuDNN graph, d=64"]() == ("cudnn", "sdpa S=1024 D=64", {"pack": (16, 32, 1024, 64)})
    assert contenders[2048]["torch B, d=64"] is None  # refused at this length: "—"
    assert contenders[1024]["torch B, d=64"]() == "refuses"
    assert fa4_calls[0] == ((16, 32, 1024, 64), True, 64**-0.5)


def test_without_flashattention_4_the_sweep_races_cudnn_and_pytorch_only(monkeypatch):
    names = []

    def fake_sweep(xs, impls, **kw):
        names.append(list(impls))
        return SweepResult(kw["x"], [], {})

    monkeypatch.setattr(sweep, "sweep", fake_sweep)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    study.sweep_lengths(None, None, [1024], [128], {"torch A": "ok"})
    assert names == [["cuDNN graph, d=128", "torch A, d=128"]]


# --------------------------------------------------------------------------------------------------
# The figure, the peaks and the sentences, from fixed comparisons
# --------------------------------------------------------------------------------------------------

SEQS = [1024, 2048, 4096]


def _v(value, verdict):
    return {"value": value, "low": value * 0.98, "high": value * 1.02, "verdict": verdict}


def _comparison(d, s, ms, versus):
    flops = study.problem_at(s, d).flops
    measured = {
        n: Measurement(f"{n} @ seq_len={s}", [t] * 3, "cold", flops=flops, params={"impl": n, "seq_len": s})
        for n, t in ms.items()
    }
    return Comparison(f"cuDNN graph, d={d}", 7, measured, {n: [t] * 7 for n, t in ms.items()}, versus, 0.01)


def _sweeps(fa4_timed=True):
    out = {}
    for d in (64, 128):
        cand = f"cuDNN graph, d={d}"
        comparisons = {}
        for s, cand_ms, flash in zip(SEQS, (1.0, 1.5, 2.0), ("faster", "tie", "faster")):
            ms = {cand: cand_ms, f"{FLASH}, d={d}": cand_ms * 1.3, f"{SELF}, d={d}": cand_ms}
            versus = {f"{FLASH}, d={d}": _v(1.3, flash), f"{SELF}, d={d}": _v(1.0, "tie")}
            if fa4_timed and s != 2048:  # FA4 refused one length
                ms[f"{FA4}, d={d}"] = cand_ms * (0.9 if s == 4096 else 1.1)
                versus[f"{FA4}, d={d}"] = _v(0.9 if s == 4096 else 1.1, "slower" if s == 4096 else "faster")
            comparisons[s] = _comparison(d, s, ms, versus)
        measurements = [m for c in comparisons.values() for m in c.measurements.values()]
        out[d] = SweepResult("seq_len", measurements, comparisons)
    return out


def test_cudnns_own_kernel_is_not_counted_among_the_others_and_the_fastest_other_is_by_time():
    c = _sweeps()[128].comparisons[1024]
    assert study.others(c) == {f"{FLASH}, d=128": "faster", f"{FA4}, d=128": "faster"}
    assert study.fastest_other(c) == f"{FA4}, d=128"  # 1.1 ms: faster than flash's 1.3, cuDNN's 1.0 not counted
    assert study.fastest_other(_sweeps(fa4_timed=False)[128].comparisons[1024]) == f"{FLASH}, d=128"


def test_each_head_dims_peak_is_where_the_cudnn_graph_reaches_the_most_tflops():
    sweeps = _sweeps()
    peaks = study.peaks(sweeps, SEQS)
    assert list(peaks) == [64, 128]
    s, est = peaks[64]
    want = study.problem_at(s, 64).flops / (2.0e-3 * 1e12)  # the 4096 point: 2 ms
    assert s == 4096 and est["value"] == pytest.approx(want)
    assert est["measurement"] == "cuDNN graph, d=64 @ seq_len=4096"


def test_the_conclusions_count_lengths_won_and_tied_and_say_flashattention_4s_verdicts():
    sweeps = _sweeps()
    peaks = study.peaks(sweeps, SEQS)
    out = study.conclusions(sweeps, SEQS, peaks, peak_tflops=989.0, fa4_name=FA4, fa4_detail="unused")
    value = peaks[64][1]["value"]
    assert out[0] == (
        f"At head dim 64 the cuDNN graph (heuristics A) peaks at {value:.0f} TFLOP/s (S=4096, "
        f"{100 * value / 989:.0f}% of the datasheet bf16 peak). In this run it is faster than every other "
        "implementation at 1 of 3 lengths, and at 1 more it is slower than none of them (PyTorch's cuDNN backend "
        "runs cuDNN's own kernel and is not counted)."
    )
    # in-run verdicts, which the record may widen into ties: "in this run"; the zero count of ties is left unsaid
    assert (
        out[1]
        == f"Against {FA4} alone, at head dim 64, in this run cuDNN is faster at 1 and is slower at 1 of 2 lengths."
    )
    bullets = [line for line in out if line.startswith("* ")]
    assert bullets[0] == "* In this run, " + sweeps[64].describe_verdicts().splitlines()[0].strip()
    assert out[len(out) // 2].startswith("At head dim 128")
    assert len(out) == 2 * (2 + 3)  # per head dim: peak, FA4, one line per other contender


def _with_verdicts(sweeps, d, flash, fa4_verdicts):
    """``sweeps`` with head dim ``d``'s verdicts against flash and FlashAttention-4 replaced, length by length."""
    for s, f, a in zip(SEQS, flash, fa4_verdicts):
        versus = sweeps[d].comparisons[s].versus
        versus[f"{FLASH}, d={d}"]["verdict"] = f
        if a is None:
            versus.pop(f"{FA4}, d={d}", None)
        else:
            versus[f"{FA4}, d={d}"] = _v(1.0, a)
    return sweeps


@pytest.mark.parametrize(
    ("flash", "fa4_verdicts", "won", "against_fa4"),
    [
        (
            ["faster"] * 3,
            ["faster"] * 3,
            "In this run it is faster than every other implementation at all 3 lengths",
            "cuDNN is faster at all 3 lengths.",
        ),
        (
            ["faster"] * 3,
            ["faster", "slower", "faster"],
            "In this run it is faster than every other implementation at 2 of 3 lengths",
            "cuDNN is faster at 2 and is slower at 1 of 3 lengths.",
        ),
        (
            ["tie", "tie", "faster"],
            ["faster", "slower", "tie"],
            "In this run it is slower than none of the other implementations at 2 of 3 lengths, but faster than "
            "all of them at none",
            "cuDNN is faster at 1, ties at 1 and is slower at 1 of 3 lengths.",
        ),
        (
            ["faster", "faster", "slower"],
            ["slower", "slower", None],
            "In this run some other implementation is faster than it at every one of the 3 lengths",
            "cuDNN is slower at all 2 lengths.",
        ),
    ],
)
def test_the_counts_are_this_runs_and_a_zero_count_is_not_said(flash, fa4_verdicts, won, against_fa4):
    sweeps = _with_verdicts(_sweeps(), 64, flash, fa4_verdicts)
    peaks = study.peaks(sweeps, SEQS)
    out = study.conclusions(sweeps, SEQS, peaks, peak_tflops=989.0, fa4_name=FA4, fa4_detail="unused")
    assert won + " (PyTorch's cuDNN backend runs cuDNN's own kernel and is not counted)." in out[0]
    assert out[1] == f"Against {FA4} alone, at head dim 64, in this run " + against_fa4
    assert not any(" at 0 " in line or " at 0." in line for line in out[:2])


def test_flashattention_4_not_timed_is_said_with_why():
    sweeps = _sweeps(fa4_timed=False)
    peaks = study.peaks(sweeps, SEQS)
    out = study.conclusions(sweeps, SEQS, peaks, peak_tflops=989.0, fa4_name=FA4, fa4_detail="not installed")
    assert out[1] == f"{FA4} was not timed at head dim 64: not installed."


def test_the_figure_has_one_panel_per_head_dim_with_the_ceiling():
    import matplotlib.pyplot as plt

    sweeps = _sweeps()
    measurements = [m for d in (64, 128) for m in sweeps[d].measurements]
    fig = study.plot_by_head_dim(measurements, [64, 128], 989.0)
    try:
        titles = [ax.get_title() for ax in fig.axes]
        assert titles == ["causal attention, head dim 64", "causal attention, head dim 128"]
        labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert "datasheet dense bf16 peak" in labels and all("d=128" not in t for t in labels)
    finally:
        plt.close(fig)


def test_the_cudnn_graph_is_drawn_above_pytorchs_cudnn_backend_and_told_apart_from_it():
    import matplotlib.pyplot as plt

    sweeps = _sweeps()
    measurements = [m for d in (64, 128) for m in sweeps[d].measurements]
    fig = study.plot_by_head_dim(measurements, [64, 128], 989.0)
    try:
        for ax, d in zip(fig.axes, (64, 128)):
            fig.canvas.draw()  # Agg
            by_name = {line.get_label().replace("\n", " "): line for line in ax.get_lines()}
            graph, backend = by_name[f"cuDNN graph, d={d}"], by_name[f"{SELF}, d={d}"]
            others = [line for line in ax.get_lines() if line is not graph]
            assert graph.get_zorder() > max(line.get_zorder() for line in others)
            assert graph.get_zorder() > max(c.get_zorder() for c in ax.collections)  # above the IQR bands too
            assert (graph.get_marker(), graph.get_linestyle()) != (backend.get_marker(), backend.get_linestyle())
            legend = {
                t.get_text().replace("\n", " "): h
                for t, h in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles)
            }
            assert legend[f"cuDNN graph, d={d}"].get_marker() == graph.get_marker()
    finally:
        plt.close(fig)


@pytest.mark.gpu
def test_the_one_hot_probe_finds_no_weight_on_a_future_key_and_finds_it_without_the_mask():
    handle = graphs.handle_for_current_device()

    def builder(causal):
        def build(q, k, v, o):
            p = attention.SdpaProblem(batch=1, heads=1, seq=q.shape[2], head_dim=q.shape[3], causal=causal)
            fused = attention.sdpa_graph(p, dict(q=q, k=k, v=v, o=o), handle=handle)
            return fused.graph, fused.pack(q=q, k=k, v=v, o=o)

        return build

    future_mass, row_sum = study.one_hot_probe(builder(True), handle)
    assert future_mass == 0.0 and row_sum < 1e-2
    assert study.one_hot_probe(builder(False), handle)[0] > 0
