"""attention_backward: the attention-backward page's checks, baselines, timings, sweep factories and sentences.

Everything here runs on the CPU: the graphs are stand-ins that compute attention with PyTorch, the
adoption and the timer are replaced by recorders, and the sweep's results are small fakes with the
fields the sentences read.
"""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from cudnn_guide import check
from cudnn_guide.check import CheckResult
from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import attention
from cudnn_guide.studies import attention_backward as study


def qkv(b=1, h=2, s=5, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=g) for _ in range(4)]


def reference(q, k, v, d_o, scale=None):
    """Causal attention and its gradients by autograd, in fp32."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, is_causal=True, scale=scale)
    out.backward(d_o)
    return out.detach(), {n: t.grad for n, t in zip("qkv", leaves)}


# -- the statistics and the checks before timing ------------------------------------------------


def test_log_sum_exp_is_the_log_of_each_causal_rows_softmax_denominator():
    q, k, _, _ = qkv(s=6)
    scale = 8**-0.5
    lse = study.log_sum_exp(q, k, scale)
    assert lse.shape == (1, 2, 6, 1) and lse.dtype == torch.float32
    scores = (q @ k.transpose(-1, -2)) * scale
    for i in range(6):  # query i sees keys 0..i
        torch.testing.assert_close(lse[..., i, 0], torch.logsumexp(scores[..., i, : i + 1], -1))


def test_log_sum_exp_with_zero_scores_counts_the_visible_keys():
    q = torch.zeros(1, 1, 3, 4)
    assert study.log_sum_exp(q, q, 0.5).flatten().tolist() == pytest.approx([0.0, 0.6931472, 1.0986123])


def fill_outputs(ins, ref_out, grads, lse, *, skip=()):
    """A stand-in for both graphs: write the right values into every output but those in ``skip``."""

    def run():
        values = {"o": ref_out, "dq": grads["q"], "dk": grads["k"], "dv": grads["v"], "stats": lse}
        for name, value in values.items():
            if name not in skip:
                ins[name].copy_(value)

    return run


def training_tensors():
    q, k, v, d_o = qkv()
    ins = dict(q=q, k=k, v=v, d_o=d_o, o=torch.empty_like(q), stats=torch.empty(1, 2, 5, 1))
    ins |= {n: torch.empty_like(q) for n in ("dq", "dk", "dv")}
    return ins


def test_check_forward_backward_checks_every_output_in_order_after_running_the_graphs():
    ins = training_tensors()
    ref_out, grads = reference(ins["q"], ins["k"], ins["v"], ins["d_o"], scale=8**-0.5)
    lse = study.log_sum_exp(ins["q"], ins["k"], 8**-0.5)
    ref_out.requires_grad_()  # detached inside
    run = fill_outputs(ins, ref_out.detach(), grads, lse)
    checks = study.check_forward_backward(run, ins, ref_out, grads, 8**-0.5)
    assert [c.name for c in checks] == ["O", "dQ", "dK", "dV", "stats (log-sum-exp)"]
    assert all(c.passed for c in checks)


def test_check_forward_backward_poisons_first_so_an_output_never_written_fails():
    ins = training_tensors()
    ref_out, grads = reference(ins["q"], ins["k"], ins["v"], ins["d_o"], scale=8**-0.5)
    lse = study.log_sum_exp(ins["q"], ins["k"], 8**-0.5)
    ins["stats"].copy_(lse)  # right values from before: the poison must wipe them
    run = fill_outputs(ins, ref_out, grads, lse, skip=("stats",))
    with pytest.raises(CheckFailedError, match="stats"):
        study.check_forward_backward(run, ins, ref_out, grads, 8**-0.5)


def test_check_forward_backward_raises_on_wrong_statistics():
    ins = training_tensors()
    ref_out, grads = reference(ins["q"], ins["k"], ins["v"], ins["d_o"], scale=8**-0.5)
    wrong = study.log_sum_exp(ins["q"], ins["k"], 1.0)  # another scale
    run = fill_outputs(ins, ref_out, grads, wrong)
    with pytest.raises(CheckFailedError, match="stats"):
        study.check_forward_backward(run, ins, ref_out, grads, 8**-0.5)


# -- the baselines ------------------------------------------------------------------------------


def test_sdpa_backends_are_shown_by_their_page_names_in_pytorchs_order():
    backends = study.sdpa_backends()
    assert list(backends) == list(study.BACKEND_NAMES.values())
    assert list(backends.values()) == [
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
    ]


def test_torch_training_step_computes_autograds_gradients_and_clears_them_between_steps():
    q, k, v, d_o = qkv()
    problem = attention.SdpaProblem(batch=1, heads=2, seq=5, head_dim=8, causal=True, dtype="float32")
    step, grads = study.torch_training_step(SDPBackend.MATH, problem, dict(q=q, k=k, v=v, d_o=d_o))
    _, want = reference(q, k, v, d_o, scale=problem.scale)
    step()
    step()  # a second step replaces the gradients, never adds to them
    for got, n in zip(grads(), "qkv"):
        torch.testing.assert_close(got, want[n])
    assert q.grad is None  # the step's leaves are its own


def test_check_line_is_one_short_line():
    result = CheckResult("PyTorch SDPA, cuDNN backend dV", "bfloat16", 2.3e-3, 1.6e-2, 0, 8)
    assert study.check_line(result) == "PyTorch SDPA, cuDNN backend dV: rel. error 2.3e-03 (tolerance 1.6e-02)"


def test_grads_checked_names_each_gradient_after_the_contender_and_raises_on_a_wrong_one():
    g = {n: torch.randn(2, 3) for n in "qkv"}
    lines = study.grads_checked("flash", lambda: [g["q"], g["k"], g["v"]], g)(None)
    assert [line.split(":")[0] for line in lines] == ["flash dQ", "flash dK", "flash dV"]
    wrong = study.grads_checked("flash", lambda: [g["q"], -g["k"], g["v"]], g)
    with pytest.raises(CheckFailedError, match="flash dK"):
        wrong(None)


def test_grads_checked_reads_the_reference_when_it_checks():
    g = {n: torch.randn(2, 3) for n in "qkv"}
    ref = {}
    checker = study.grads_checked("x", lambda: [g["q"], g["k"], g["v"]], ref)
    ref.update(g)  # filled after the checker was made, as a page may do
    assert len(checker(None)) == 3


# -- timing ---------------------------------------------------------------------------------------


def test_time_split_times_each_part_in_order_cold_with_its_share_of_the_flops(monkeypatch):
    from cudnn_guide.measure import bench

    calls = []
    monkeypatch.setattr(bench, "benchmark", lambda fn, **kw: calls.append((fn, kw)) or kw["label"])
    problem = attention.SdpaProblem(batch=2, heads=16, seq=4096, head_dim=128, causal=True)
    fwd, bwd = object(), object()
    parts = {"cuDNN forward (with stats)": (fwd, 1.0), "cuDNN backward": (bwd, 2.5)}
    assert study.time_split(parts, problem) == ["cuDNN forward (with stats)", "cuDNN backward"]
    assert [fn for fn, _ in calls] == [fwd, bwd]
    for (_, kw), (label, work) in zip(calls, (("cuDNN forward (with stats)", 1.0), ("cuDNN backward", 2.5))):
        assert kw == {
            "label": label,
            "l2": "cold",
            "flops": work * problem.flops,
            "params": {"impl": label, "size": "B2 H16 S4096 D128, causal, bfloat16"},
        }


# -- the sweep ------------------------------------------------------------------------------------


class FakeBuilt:
    """What ``graphs.adopt`` returns, as far as the sweep uses it: ``bind(pack)`` → a launcher."""

    def __init__(self, graph, handle, name):
        self.graph, self.handle, self.name = graph, handle, name

    def bind(self, pack):
        return lambda: self.graph(pack)


def cpu_builders(log):
    """Stand-ins for the page's two builders: each "graph" computes its outputs with PyTorch."""

    def build_forward(q, k, v, o, stats):
        log.append(("forward", (q, k, v, o, stats)))

        def graph(pack):
            pack["o"].copy_(F.scaled_dot_product_attention(q, k, v, is_causal=True))

        return graph, {"o": o}

    def build_backward(q, k, v, o, d_o, stats, dq, dk, dv):
        log.append(("backward", (q, k, v, o, d_o, stats, dq, dk, dv)))

        def graph(pack):
            _, grads = reference(q, k, v, d_o)
            for n, t in zip("qkv", (dq, dk, dv)):
                t.copy_(grads[n])

        return graph, {"dq": dq}

    return build_forward, build_backward


@pytest.fixture
def cpu_sweep(monkeypatch):
    """The sweep's collaborators on the CPU: adoption, inputs (float32), and the small problem."""
    from cudnn_guide import graphs

    adopted = []
    monkeypatch.setattr(graphs, "adopt", lambda g, h, *, name: adopted.append((h, name)) or FakeBuilt(g, h, name))

    def make_training_inputs(problem, seed=0):
        q, k, v, d_o = qkv(problem.batch, problem.heads, problem.seq, problem.head_dim, seed=seed)
        data = dict(q=q, k=k, v=v, d_o=d_o, o=torch.empty_like(q), stats=torch.empty(*q.shape[:-1], 1))
        return data | {n: torch.empty_like(q) for n in ("dq", "dk", "dv")}

    monkeypatch.setattr(attention, "make_training_inputs", make_training_inputs)
    return adopted


def small_problem(s):
    return attention.SdpaProblem(batch=64 // s, heads=2, seq=s, head_dim=8, causal=True, dtype="float32")


def test_training_pair_passes_the_tensors_in_the_builders_order_and_adopts_both(cpu_sweep):
    log = []
    ins = attention.make_training_inputs(small_problem(8))
    fwd, fwd_pack, bwd, bwd_pack = study.training_pair(*cpu_builders(log), "handle", ins)
    assert [t for t in log[0][1]] == [ins[n] for n in ("q", "k", "v", "o", "stats")]
    assert [t for t in log[1][1]] == [ins[n] for n in ("q", "k", "v", "o", "d_o", "stats", "dq", "dk", "dv")]
    assert cpu_sweep == [("handle", "forward"), ("handle", "backward")]
    assert (fwd.name, bwd.name) == ("forward", "backward")
    assert fwd_pack == {"o": ins["o"]} and bwd_pack == {"dq": ins["dq"]}


def test_training_sweep_checks_the_cudnn_pair_then_runs_the_others_on_its_tensors(cpu_sweep, monkeypatch):
    log = []
    at = study.TrainingSweep(*cpu_builders(log), "handle", small_problem)
    step = at.cudnn_step(8)
    p, data = at.cases[8]
    assert p == small_problem(8)
    assert not torch.isnan(data["dq"]).any()  # written by the checked run
    data["dq"].fill_(float("nan"))
    step()  # one step: forward, then backward
    assert not torch.isnan(data["dq"]).any()
    flash = at.torch_step(SDPBackend.MATH)(8)
    assert flash is not None
    out = F.scaled_dot_product_attention(data["q"], data["k"], data["v"], is_causal=True, scale=p.scale)
    torch.testing.assert_close(flash().detach(), out)  # PyTorch's step on the same tensors

    seen = {}

    def fa4_training_step(q, k, v, d_o, *, causal, scale=None):
        seen.update(tensors=(q, k, v, d_o), causal=causal, scale=scale)
        return "fa4 step", "fa4 grads"

    from cudnn_guide.measure import fa4

    monkeypatch.setattr(fa4, "training_step", fa4_training_step)
    assert at.fa4_step(8) == "fa4 step"
    assert seen == {"tensors": tuple(data[n] for n in ("q", "k", "v", "d_o")), "causal": True, "scale": p.scale}


def test_training_sweep_uses_the_seed_of_each_length(cpu_sweep, monkeypatch):
    seeds = []
    make = attention.make_training_inputs
    monkeypatch.setattr(attention, "make_training_inputs", lambda p, seed=0: seeds.append(seed) or make(p, seed))
    at = study.TrainingSweep(*cpu_builders([]), "handle", small_problem)
    at.cudnn_step(8)
    at.cudnn_step(16)
    assert seeds == [8, 16] and sorted(at.cases) == [8, 16]


def test_training_sweep_stops_on_a_wrong_cudnn_result(cpu_sweep):
    forward, _ = cpu_builders([])

    def wrong_backward(q, k, v, o, d_o, stats, dq, dk, dv):
        return (lambda pack: dq.zero_()), {}

    at = study.TrainingSweep(forward, wrong_backward, "handle", small_problem)
    with pytest.raises(CheckFailedError, match="dQ at S=8"):
        at.cudnn_step(8)


def test_a_backend_that_cannot_run_a_length_is_left_out_of_it(cpu_sweep, monkeypatch):
    at = study.TrainingSweep(*cpu_builders([]), "handle", small_problem)
    at.cudnn_step(8)

    def refusing(backend, problem, data):
        def step():
            raise RuntimeError("No available kernel")

        return step, list

    monkeypatch.setattr(study, "torch_training_step", refusing)
    assert at.torch_step(SDPBackend.FLASH_ATTENTION)(8) is None


# -- the plot and the sentences --------------------------------------------------------------------


def _tflops_sweep():
    """A sweep whose candidate runs exactly as fast as PyTorch's cuDNN backend, FA4 above both."""
    from cudnn_guide.measure.measurement import Measurement

    times = {"cuDNN graphs (fwd + bwd)": 1.0, "PyTorch SDPA, cuDNN backend": 1.0, "FlashAttention-4": 0.8}
    ms = [
        Measurement(
            f"{impl} S={s}", [t * s / 1024] * 5, "x", flops=4e11 * s / 1024, params={"impl": impl, "seq_len": s}
        )
        for s in (1024, 2048, 4096)
        for impl, t in times.items()
    ]
    return types.SimpleNamespace(
        measurements=ms, x="seq_len", comparisons={1024: types.SimpleNamespace(candidate="cuDNN graphs (fwd + bwd)")}
    )


def test_plot_tflops_draws_the_sweep_under_the_datasheet_peak(monkeypatch):
    import cudnn_guide.report as report

    seen = {}
    real = report.plot_sweep
    monkeypatch.setattr(
        report,
        "plot_sweep",
        lambda result, metric, **kw: seen.update(kw, result=result, metric=metric) or real(result, metric, **kw),
    )
    result = _tflops_sweep()
    study.plot_tflops(result, types.SimpleNamespace(peak_bf16_tflops=989.0))
    assert seen == {
        "result": result,
        "metric": "tflops",
        "logx": True,
        "title": "causal attention, forward + backward, head dim 128",
        "ceiling": 989.0,
        "ceiling_label": "datasheet dense bf16 peak",
    }


def test_plot_tflops_draws_the_pages_contender_on_top_and_the_legend_beside_the_data():
    import matplotlib.pyplot as plt  # Agg: tests/conftest.py

    ax = study.plot_tflops(_tflops_sweep(), types.SimpleNamespace(peak_bf16_tflops=989.0))
    lines = {line.get_label(): line for line in ax.get_lines()}
    own, twin = lines["cuDNN graphs (fwd + bwd)"], lines["PyTorch SDPA, cuDNN backend"]
    others = [a for a in (*ax.get_lines(), *ax.collections) if a is not own]
    assert all(own.get_zorder() > a.get_zorder() for a in others)  # drawn over its twin, not under it
    assert own.get_marker() == "s" and own.get_linestyle() == "--" and twin.get_marker() == "o"
    fig = ax.get_figure()
    fig.canvas.draw()
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()][0] == "cuDNN graphs (fwd + bwd)"
    assert legend.legend_handles[0].get_marker() == "s"  # the legend shows the new style
    box, data = legend.get_window_extent(), ax.get_window_extent()
    assert box.x0 >= data.x1  # beside the axes: it covers no point
    plt.close(fig)


CAND, FA4 = "cuDNN graphs (fwd + bwd)", "FlashAttention-4 (flash-attn-4 4.0.0b36)"


class FakeComparison:
    def __init__(self, tflops, versus):
        self.measurements = {CAND: types.SimpleNamespace(tflops=tflops)}
        self.versus = versus

    def estimate(self, name, unit):
        assert (name, unit) == (CAND, "TFLOP/s")
        t = self.measurements[CAND].tflops
        return {"value": t, "low": t - 10, "high": t + 5}


def fake_sweep(fa4_verdicts):
    tflops = {1024: 300.0, 2048: 420.0, 4096: 460.0, 8192: 460.0, 16384: 450.0}
    comparisons = {}
    for (s, t), verdict in zip(tflops.items(), fa4_verdicts + [None] * 5):
        versus = {FA4: {"verdict": verdict}} if verdict else {}
        comparisons[s] = FakeComparison(t, versus)
    text = "S=1024: faster than PyTorch flash\n\n  S=2048: a tie with FA4  \n"
    return types.SimpleNamespace(comparisons=comparisons, describe_verdicts=lambda: text)


def test_peak_length_is_the_first_length_with_the_most_tflops():
    assert study.peak_length(fake_sweep([]), CAND) == 4096


def test_conclusions_are_computed_from_the_data():
    result = fake_sweep(["faster", "tie", "slower", "faster", "tie"])
    ceil = types.SimpleNamespace(peak_bf16_tflops=920.0)
    sentences = study.conclusions(result, CAND, 4096, ceil, 4096, 2.88, FA4, "unused")
    assert sentences == [
        "One cuDNN training step (both graphs built with heuristics A) peaks at 460 TFLOP/s "
        "(S=4096, in-run interval 450–465), 50% of the datasheet bf16 peak.",
        "At S=4096 the backward takes 2.88× the forward's time for 2.5× its matrix work: "
        "longer than its share of the work alone predicts.",
        f"In this run, against {FA4} the cuDNN step is faster at 2, tied at 2 and slower at 1 of 5 sizes "
        "(sequence lengths).",
        "Against each baseline in this run, the cuDNN step's speed-up and its verdicts over the 5 sizes "
        "(sequence lengths):",
        "* S=1024: faster than PyTorch flash",
        "* S=2048: a tie with FA4",
    ]


def test_conclusions_say_why_flashattention_4_was_not_timed_and_a_backward_within_its_share():
    result = fake_sweep([])
    ceil = types.SimpleNamespace(peak_bf16_tflops=920.0)
    sentences = study.conclusions(result, CAND, 4096, ceil, 4096, 2.4, FA4, "not installed")
    assert "no longer than its share" in sentences[1]
    assert sentences[2] == f"{FA4} was not timed: not installed."


def test_conclusions_count_fa4_over_the_sizes_the_bullets_count_and_skip_a_verdict_never_given():
    result = fake_sweep(["slower", "slower", "slower", "slower"])  # not timed at the last length
    ceil = types.SimpleNamespace(peak_bf16_tflops=920.0)
    sentences = study.conclusions(result, CAND, 4096, ceil, 4096, 2.88, FA4, "unused")
    assert sentences[2] == (
        f"In this run, against {FA4} the cuDNN step is slower at 4 of 5 sizes (sequence lengths); not timed at 1."
    )
    result.describe_verdicts = lambda: ""
    assert study.conclusions(result, CAND, 4096, ceil, 4096, 2.88, FA4, "unused")[3:] == []


@pytest.mark.gpu
def test_log_sum_exp_matches_cudnns_statistics_on_the_gpu():
    problem = attention.SdpaProblem(batch=1, heads=2, seq=256, head_dim=64, causal=True)
    ins = attention.make_training_inputs(problem)
    fwd = attention.sdpa_forward_training_graph(problem, ins)
    fwd.execute(fwd.pack(**{n: ins[n] for n in fwd.io}))
    check.check(ins["stats"], study.log_sum_exp(ins["q"], ins["k"], problem.scale), name="stats")
