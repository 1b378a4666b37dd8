"""flex_attention_race: the flex-attention page's references, checks, contenders, figure and conclusions.

The references and checks run on small CPU tensors. The contenders are exercised with stand-ins for
cuDNN's graph, PyTorch's baselines and FlashAttention-4 that return the reference (or a wrong result),
so that the order they join the race and the checks they pass are tested without a GPU. The
comparisons the figure and the conclusions read are real ``Comparison`` objects with fixed rounds.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import attention, attention_inputs
from cudnn_guide.measure import baselines, fa4
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.report.prose import gpu_and_loop_text, loop_stretch_text
from cudnn_guide.studies import flex_attention_race as race
from cudnn_guide.studies.flex_attention_race import CANDIDATE, GRAPH

FA4 = "FlashAttention-4 (test)"
FLEX = "PyTorch FlexAttention (compiled)"
OP = "torch.ops.cudnn.sdpa_fwd"
FLASH = "PyTorch SDPA, flash backend (FlashAttention-2)"


def _bhsd(b=1, h=2, s=16, d=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=gen) for _ in range(3)]


def test_the_references_are_each_masks_attention_laid_out_as_flex_returns_it():
    q, k, v = _bhsd()
    refs = race.band_references(q, k, v, window=4)
    assert list(refs) == ["causal", "window 4"]
    causal = attention_inputs.reference(q, k, v, visible=attention_inputs.band(16, 16))
    window = attention_inputs.reference(q, k, v, visible=attention_inputs.band(16, 16, left=4))
    assert refs["causal"].shape == (1, 16, 2, 8)  # B×S×H×D
    torch.testing.assert_close(refs["causal"], causal.transpose(1, 2))
    torch.testing.assert_close(refs["window 4"], window.transpose(1, 2))
    assert not torch.allclose(refs["causal"], refs["window 4"])  # the window hides keys causal sees


def test_check_forward_checks_the_graph_then_each_flex_output_and_prints_them(capsys):
    q, k, v = _bhsd()
    refs = race.band_references(q, k, v, window=4)
    outs = {"causal": refs["causal"].clone(), "window 4": refs["window 4"].clone()}
    checks = race.check_forward(refs["window 4"].transpose(1, 2).clone(), outs, refs, window=4)
    assert [c.name for c in checks] == [
        "cuDNN graph, window 4",
        "cudnn.flex_attention, causal",
        "cudnn.flex_attention, window 4",
    ]
    assert all(c.passed for c in checks)
    assert capsys.readouterr().out == "".join(f"{c}\n" for c in checks)
    outs["window 4"] = refs["causal"].clone()  # the wrong mask
    with pytest.raises(CheckFailedError, match="cudnn.flex_attention, window 4"):
        race.check_forward(refs["window 4"].transpose(1, 2), outs, refs, window=4)


def _leaves(seed=1):
    gen = torch.Generator().manual_seed(seed)
    leaves = [torch.randn(2, 16, 2, 8, generator=gen).requires_grad_() for _ in range(3)]  # B×S×H×D
    return leaves, torch.randn(2, 16, 2, 8, generator=gen)


def test_check_gradients_checks_dq_dk_dv_against_pytorchs_causal_attention(capsys):
    (q, k, v), d_out = _leaves()
    bhsd = [t.transpose(1, 2) for t in (q, k, v)]  # what flex attention's backward would leave
    torch.nn.functional.scaled_dot_product_attention(*bhsd, is_causal=True).backward(d_out.transpose(1, 2))
    checks = race.check_gradients(q, k, v, d_out)
    assert [c.name for c in checks] == [f"cudnn.flex_attention backward, {g}" for g in ("dQ", "dK", "dV")]
    assert capsys.readouterr().out == "".join(f"{c}\n" for c in checks)
    q.grad.zero_()
    with pytest.raises(CheckFailedError, match="backward, dQ"):
        race.check_gradients(q, k, v, d_out)


def _stand_ins(monkeypatch, refs, mask, *, wrong=None):
    """cuDNN's graph, PyTorch's baselines and FA4 replaced by launchers returning the mask's reference
    (``wrong``: the one that returns zeros); the calls each stand-in received."""
    seen = {}
    bhsd_ref = refs[mask].transpose(1, 2).contiguous()

    def out(name):
        return torch.zeros_like(bhsd_ref) if name == wrong else bhsd_ref.clone()

    def launcher(q, k, v, *, left_bound=None, handle=None):
        seen["graph"] = dict(left_bound=left_bound, handle=handle)
        o = torch.empty_like(bhsd_ref)
        return (lambda: o.copy_(out(GRAPH))), o

    def band_attention(q, k, v, *, left=None, scale=None):
        seen["baselines"] = dict(left=left, scale=scale)
        names = [FLEX, OP] + ([FLASH] if left is None else [])
        return {n: (lambda n=n: (out(n), None) if n == OP else out(n)) for n in names}

    def forward(q, k, v, *, causal, scale=None, **kwargs):
        seen["fa4"] = dict(causal=causal, scale=scale, **kwargs)
        return lambda: out(FA4)

    monkeypatch.setattr(attention, "sdpa_band_launcher", launcher)
    monkeypatch.setattr(baselines, "band_attention", band_attention)
    monkeypatch.setattr(fa4, "forward", forward)
    return seen


def test_add_contenders_adds_the_graph_pytorch_and_fa4_after_the_candidate_each_checked(monkeypatch, capsys):
    q, k, v = _bhsd()
    refs = race.band_references(q, k, v, window=4)
    seen = _stand_ins(monkeypatch, refs, "window 4")
    contenders = {CANDIDATE: lambda: None}
    checks = race.add_contenders(contenders, "window 4", q, k, v, refs, left=4, handle="h", fa4_label=FA4)
    assert list(contenders) == [CANDIDATE, GRAPH, FLEX, OP, FA4]
    assert [c.name for c in checks] == [f"{GRAPH}, window 4", f"{FLEX}, window 4", f"{OP}, window 4"]
    assert seen["graph"] == {"left_bound": 4, "handle": "h"}
    assert seen["baselines"] == {"left": 4, "scale": 8**-0.5}
    assert seen["fa4"] == {"causal": True, "scale": 8**-0.5, "window_size": (3, 0)}  # the W - 1 keys before
    assert capsys.readouterr().out.startswith(f"check {FA4}: PASS")  # admit prints FA4's check


def test_add_contenders_races_the_flash_backend_for_causal_and_leaves_fa4_out_when_it_is_missing(monkeypatch):
    q, k, v = _bhsd()
    refs = race.band_references(q, k, v, window=4)
    seen = _stand_ins(monkeypatch, refs, "causal")
    contenders = {CANDIDATE: lambda: None}
    checks = race.add_contenders(contenders, "causal", q, k, v, refs, left=None, handle=None, fa4_label=None)
    assert list(contenders) == [CANDIDATE, GRAPH, FLEX, OP, FLASH]
    assert len(checks) == 4 and "fa4" not in seen
    seen = _stand_ins(monkeypatch, refs, "causal")
    race.add_contenders({}, "causal", q, k, v, refs, left=None, handle=None, fa4_label=FA4)
    assert seen["fa4"] == {"causal": True, "scale": 8**-0.5}  # no window_size for causal


@pytest.mark.parametrize("wrong", [GRAPH, OP, FA4])
def test_a_contender_with_a_wrong_result_stops_the_race(monkeypatch, wrong):
    q, k, v = _bhsd()
    refs = race.band_references(q, k, v, window=4)
    _stand_ins(monkeypatch, refs, "causal", wrong=wrong)
    with pytest.raises(CheckFailedError):
        race.add_contenders({}, "causal", q, k, v, refs, left=None, handle=None, fa4_label=FA4)


def _v(value, verdict, low, high):
    return {"value": value, "low": low, "high": high, "verdict": verdict}


def _cmp(ms, versus, band, host=None, wall=None):
    measured = {
        n: Measurement(n, [t] * 3, "cold", flops=1e9, host_samples_ms=[h] if (h := (host or {}).get(n)) else [])
        for n, t in ms.items()
    }
    return Comparison(CANDIDATE, 7, measured, {n: [t] * 7 for n, t in ms.items()}, versus, band, wall=wall)


def _race(fa4_fastest=False):
    """A mask's race: the candidate, cuDNN's graph and FA4 on the GPU, and their back-to-back loops."""
    fa4_ms = 0.40 if fa4_fastest else 0.45
    wall = _cmp(
        {CANDIDATE: 0.51, GRAPH: 0.46, FA4: 0.47},
        {GRAPH: _v(0.9, "slower", 0.88, 0.92), FA4: _v(0.92, "slower", 0.9, 0.94)},
        0.05,
    )
    return _cmp(
        {CANDIDATE: 0.43, GRAPH: 0.42, FA4: fa4_ms},
        {GRAPH: _v(0.98, "tie", 0.97, 0.99), FA4: _v(fa4_ms / 0.43, "tie", 0.9, 1.1)},
        0.03,
        host={CANDIDATE: 0.3, GRAPH: 0.05, FA4: 0.1},
        wall=wall,
    )


def test_the_figure_has_one_panel_per_mask_titled_with_the_problem():
    results = {"causal": _race(), "window 512": _race()}
    fig = race.plot_masks(results, "4×16 heads × 4096 tokens, d=128")
    titles = [ax.get_title().replace("\n", " ") for ax in fig.axes]
    assert titles == [
        "causal: 4×16 heads × 4096 tokens, d=128",
        "window 512: 4×16 heads × 4096 tokens, d=128",
    ]
    assert all("TFLOP/s of visible pairs" in ax.get_xlabel().replace("\n", " ") for ax in fig.axes)
    plt.close(fig)


def test_the_conclusions_read_each_masks_loop_fa4_and_the_fresh_process():
    results = {"causal": _race(), "window 512": _race(fa4_fastest=True)}
    cold = [{"plan_s": 0.214, "first_call_s": 9.63, "second_call_s": 0.002, "rel_error": 1e-3}]
    sentences = race.conclusions(results, cold, fa4_label=FA4, fa4_ok=True, fa4_detail="4.0.0b36")
    assert sentences[0] == f"* causal: {loop_stretch_text(results['causal'])}"
    assert sentences[1] == f"* causal, against {FA4}: {gpu_and_loop_text(results['causal'], FA4)}."
    assert sentences[2] == f"* window 512: {loop_stretch_text(results['window 512'])}"  # FA4 the fastest: said above
    assert sentences[3].startswith("Which verdict applies depends on how the calls are launched")
    assert sentences[4] == (
        "A fresh process pays 9.6 s on its first call (compilation) and 0.21 s for the plan; reuse the plan "
        "and keep the process alive."
    )
    assert len(sentences) == 5


def test_the_conclusions_say_why_fa4_was_not_timed_and_give_the_range_of_several_processes():
    results = {"causal": _race()}
    del results["causal"].versus[FA4]
    cold = [{"plan_s": 0.2, "first_call_s": 9.6}, {"plan_s": 0.25, "first_call_s": 11.2}]
    sentences = race.conclusions(results, cold, fa4_label=FA4, fa4_ok=False, fa4_detail="not installed (pip …)")
    assert not any(s.startswith(f"* causal, against {FA4}") for s in sentences)
    assert sentences[-2] == f"{FA4} was not timed: not installed (pip …)."
    assert "pays 9.6–11.2 s on its first call (compilation) and 0.20–0.25 s for the plan" in sentences[-1]


@pytest.mark.gpu
def test_the_race_contenders_build_and_pass_their_checks_on_the_gpu():
    import cudnn

    handle = cudnn.create_handle()
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    q, k, v = (t.cuda().to(torch.bfloat16) for t in _bhsd(b=1, h=2, s=256, d=64))
    refs = race.band_references(q, k, v, window=64)
    contenders = {}
    checks = race.add_contenders(contenders, "window 64", q, k, v, refs, left=64, handle=handle, fa4_label=None)
    assert list(contenders)[:3] == [GRAPH, FLEX, OP] and all(c.passed for c in checks)
