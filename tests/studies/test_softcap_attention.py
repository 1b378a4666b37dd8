"""softcap_attention: FlexAttention's two soft-caps, the approximate-tanh op, the table rows and the sentences the
soft-cap page concludes with, on the CPU; the cuDNN graphs (the control and the refused graph) on the GPU."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention

from cudnn_guide.graphs.attention_inputs import band
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.measure.verdicts import bootstrap_median_ci
from cudnn_guide.studies import softcap_attention
from cudnn_guide.studies.softcap_attention import BAND_REFUSAL

CAND = "cuDNN soft-cap (score_mod)"
FLEX_CAP = "FlexAttention soft-cap (compiled)"
FLEX_APPROX = "FlexAttention soft-cap, tanh.approx (compiled)"
CAP_CTRL = "cuDNN causal, no cap (control)"
FA4 = "FA4 (test)"
REFUSED = "cudnnGraphNotSupportedError: score_mod and a diagonal band cannot be combined"


def _qkv(b=1, h=2, s=256, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, s, d, generator=gen) for _ in range(3))


def _capped_reference(q, k, v, cap):
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = (cap * torch.tanh(s / cap)).masked_fill(~band(q.shape[2], q.shape[2]), float("-inf"))
    return torch.softmax(s, -1) @ v


def test_the_approximate_tanh_op_is_registered_once_with_its_lowering():
    from torch._inductor.lowering import lowerings

    op = softcap_attention.register_approx_tanh()
    assert op is softcap_attention.register_approx_tanh() is torch.ops.approx.tanh
    assert op.default in lowerings  # what Inductor emits tanh.approx.f32 with
    x = torch.linspace(-4, 4, 9)
    assert torch.equal(op(x), torch.tanh(x))  # outside a compiled graph: the exact tanh


def test_flexattentions_two_soft_caps_compute_the_capped_causal_reference():
    q, k, v = _qkv()
    exact, approx = softcap_attention.flex_softcap(flex_attention, q, k, v, 2.0)
    expected = _capped_reference(q, k, v, 2.0)
    with warnings.catch_warnings():  # FlexAttention warns that it runs uncompiled
        warnings.simplefilter("ignore")
        torch.testing.assert_close(exact(), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(approx(), expected, atol=1e-5, rtol=1e-5)


def test_the_soft_caps_differ_only_in_their_tanh_and_share_one_causal_block_mask():
    calls = []
    q, k, v = _qkv()
    exact, approx = softcap_attention.flex_softcap(lambda *a, **kw: calls.append((a, kw)), q, k, v, 3.0)
    exact(), approx()
    (args_e, kw_e), (args_a, kw_a) = calls
    assert all(a is b for a, b in zip(args_e, (q, k, v))) and all(a is b for a, b in zip(args_a, (q, k, v)))
    assert kw_e["block_mask"] is kw_a["block_mask"]
    assert torch.equal(kw_e["block_mask"].to_dense().bool().squeeze(), torch.ones(2, 2, dtype=torch.bool).tril())
    score = torch.linspace(-9, 9, 7)
    torch.testing.assert_close(kw_e["score_mod"](score, 0, 0, 0, 0), 3.0 * torch.tanh(score / 3.0))
    torch.testing.assert_close(kw_a["score_mod"](score, 0, 0, 0, 0), 3.0 * torch.tanh(score / 3.0))


def _v(value, verdict):
    return {"value": value, "low": value - 0.05, "high": value + 0.05, "verdict": verdict}


def _comparison(ms, versus, rounds=7):
    """A comparison whose rounds took ``ms[name]`` milliseconds (a list: one per round)."""
    medians = {n: list(t) for n, t in ms.items()}
    measured = {n: Measurement(n, list(t), "cold", flops=1e9) for n, t in ms.items()}
    return Comparison(CAND, rounds, measured, medians, versus, 0.02)


def _race(approx_ms=(0.8, 0.82, 0.79, 0.8, 0.81, 0.8, 0.8), with_fa4=True):
    ms = {CAND: [1.0] * 7, FLEX_CAP: [1.2] * 7, CAP_CTRL: [0.7] * 7, FLEX_APPROX: list(approx_ms)}
    versus = {FLEX_CAP: _v(1.2, "faster"), CAP_CTRL: _v(0.7, "slower"), FLEX_APPROX: _v(0.8, "slower")}
    if with_fa4:
        ms[f"{FA4}, softcap"] = [0.9] * 7
        versus[f"{FA4}, softcap"] = _v(0.9, "slower")
    return _comparison(ms, versus)


def test_contender_rows_give_each_time_rate_and_speed_up():
    rows = softcap_attention.contender_rows(_race(), "µs, median")
    assert [r["implementation"] for r in rows] == [CAND, FLEX_CAP, CAP_CTRL, FLEX_APPROX, f"{FA4}, softcap"]
    cand, flex = rows[0], rows[1]
    assert list(cand) == [
        "implementation",
        "µs, median",
        "TFLOP/s",
        "cuDNN's speed-up",
        "in-run 95% interval",
        "verdict",
    ]
    assert cand["µs, median"] == pytest.approx(1000) and cand["TFLOP/s"] == pytest.approx(1.0)
    assert cand["cuDNN's speed-up"] is None and cand["verdict"] is None
    assert (
        flex["cuDNN's speed-up"] == 1.2 and flex["in-run 95% interval"] == "1.15–1.25" and flex["verdict"] == "faster"
    )


def _conclusions(cmp, refused=REFUSED, unavailable=None, detail="not installed (pip …)"):
    return softcap_attention.conclusions(
        cmp,
        control=CAP_CTRL,
        flex_exact=FLEX_CAP,
        flex_approx=FLEX_APPROX,
        fa4_label=FA4,
        fa4_detail=detail,
        refused=refused,
        unavailable=unavailable or {},
    )


def test_the_conclusions_judge_the_fastest_the_control_and_each_other_baseline():
    cmp = _race()
    sentences = _conclusions(cmp)
    assert sentences[0] == (
        f"Soft-cap as a score_mod: against the fastest contender, cuDNN is {cmp.describe()}; against its own "
        f"causal kernel without a cap it is {cmp.describe(CAP_CTRL)}."
    )
    assert cmp.best_baseline == FLEX_APPROX  # the control is left out
    assert sentences[1].startswith("cuDNN refuses a score_mod together with its own causal band")
    assert sentences[2].startswith("Whether cuDNN's tanh in the score_mod is exact or approximate")
    assert sentences[3] == f"* vs {FA4}, softcap: cuDNN is {cmp.describe(f'{FA4}, softcap')}."
    assert sentences[4] == f"* vs FlexAttention with the exact tanh (torch.tanh): cuDNN is {cmp.describe(FLEX_CAP)}."
    gain = [1.2 / a for a in cmp.round_medians_ms[FLEX_APPROX]]
    lo, hi = bootstrap_median_ci(gain)
    assert sentences[5] == (
        "* vs FlexAttention with the approximate tanh (tanh.approx.f32): The approximate tanh makes Flex "
        f"1.50× faster than the exact one (1200 → 800 µs, in-run 95% interval {lo:.2f}–{hi:.2f})."
    )
    assert len(sentences) == 6  # the refusal is said once, in sentences[1]


def test_an_approximate_tanh_that_is_not_the_fastest_gets_its_own_verdict_and_a_tie_is_said():
    cmp = _race(approx_ms=[1.2] * 7)
    cmp.versus[FLEX_APPROX] = _v(1.2, "faster")
    approx = next(s for s in _conclusions(cmp, refused="accepted") if "tanh.approx.f32" in s)
    assert approx.startswith(
        f"* vs FlexAttention with the approximate tanh (tanh.approx.f32): cuDNN is {cmp.describe(FLEX_APPROX)}. "
    )
    assert "gives Flex a tie with the exact one (1.00×)" in approx


def test_what_did_not_run_is_said_with_its_reason_and_an_accepted_graph_is_not():
    cmp = _race(with_fa4=False)
    del cmp.versus[FLEX_APPROX]
    sentences = _conclusions(cmp, refused="accepted", unavailable={FLEX_APPROX: "RuntimeError: no lowering"})
    assert not any("cuDNN refuses" in s for s in sentences)
    assert not any("approximate tanh (tanh.approx.f32)" in s for s in sentences)
    assert sentences[-2:] == [
        f"* {FA4}, softcap was not timed: not installed (pip …).",
        f"* Not available here: {FLEX_APPROX}: RuntimeError: no lowering",
    ]
    why = "ValueError: softcap must be positive"
    sentences = _conclusions(cmp, unavailable={f"{FA4}, softcap": why})
    assert f"* {FA4}, softcap was not timed: {why}." in sentences
    assert not any(s.startswith(f"* Not available here: {FA4}") for s in sentences)  # said once, above


def test_the_refusal_is_said_once_and_not_as_a_contender_that_did_not_run():
    sentences = _conclusions(_race(), unavailable={FLEX_APPROX: "RuntimeError: no lowering"})
    assert sum("cuDNN refuses a score_mod together with its own causal band" in s for s in sentences) == 1
    assert not any(BAND_REFUSAL in s or REFUSED in s for s in sentences)
    assert [s for s in sentences if s.startswith("* Not available here: ")] == [
        f"* Not available here: {FLEX_APPROX}: RuntimeError: no lowering"
    ]


@pytest.mark.gpu
def test_cudnn_refuses_a_score_mod_with_its_causal_band_and_builds_the_control():
    import cudnn

    handle = cudnn.create_handle()
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    q, k, v = (t.cuda().to(torch.bfloat16) for t in _qkv(b=1, h=2, s=256, d=64))
    refused = softcap_attention.refusal(handle, q, k, v)
    assert refused == "accepted" or ": " in refused
    launch = softcap_attention.causal_graph(handle, q, k, v)
    launch()
    torch.cuda.synchronize()
