"""mla_training: the MLA page's checks, FLOPs, training steps, refusals, admissions, table and conclusions.

Everything but the cuDNN graphs runs here on the CPU: the steps are PyTorch's SDPA (or FlexAttention,
compiled for the CPU) on small tensors with Q and K of another head size than V, the refusing backends
are stand-ins that warn and raise as PyTorch's forced SDPA does, FlashAttention-4 is a stand-in, and the
comparisons read by the table and the conclusions are real ``Comparison`` objects with fixed rounds.
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import mla_training

CAND = "cuDNN MLA step"
FA4 = "FlashAttention-4 (flash-attn-4 4.0.0b36)"


def mla_inputs(b=1, h=2, s=8, dqk=24, dv=16, seed=0):
    """Q and K with ``dqk`` values per head, V and dO with ``dv``."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, s, dqk, generator=gen) for _ in range(2))
    v, d_o = (torch.randn(b, h, s, dv, generator=gen) for _ in range(2))
    return q, k, v, d_o


def causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def reference_grads(q, k, v, d_o):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    causal(*leaves).backward(d_o)
    return [leaf.grad for leaf in leaves]


# -- the lesson's outputs and the FLOPs -----------------------------------------------------------


def test_the_lessons_outputs_are_checked_and_printed_forward_first(capsys):
    q, k, v, d_o = mla_inputs()
    ref_grads = reference_grads(q, k, v, d_o)
    out = causal(q, k, v)
    grads = dict(zip(mla_training.GRADS, ref_grads))
    checks = mla_training.check_outputs(out, grads, out.clone(), ref_grads)
    assert [c.name for c in checks] == [
        "MLA forward (192/128)",
        "MLA backward dq",
        "MLA backward dk",
        "MLA backward dv",
    ]
    printed = capsys.readouterr().out.splitlines()
    assert printed == [str(c) for c in checks]


def test_a_wrong_gradient_stops_the_check():
    q, k, v, d_o = mla_inputs()
    ref_grads = reference_grads(q, k, v, d_o)
    grads = dict(zip(mla_training.GRADS, [ref_grads[0], -ref_grads[1], ref_grads[2]]))
    out = causal(q, k, v)
    with pytest.raises(CheckFailedError, match="MLA backward dk"):
        mla_training.check_outputs(out, grads, out, ref_grads)


@pytest.mark.parametrize("seq", [1, 5, 128, 4096])
def test_the_step_flops_count_each_visible_pair_of_the_causal_band(seq):
    visible = int(torch.ones(seq, seq, dtype=torch.bool).tril().sum())  # key ≤ query
    assert mla_training.step_flops(4, 16, seq, 192, 128) == 2 * 4 * 16 * (4 * 192 + 3 * 128) * visible


def test_the_step_flops_of_the_page_and_with_equal_head_sizes():
    assert mla_training.step_flops(4, 16, 4096, 192, 128) == 4 * 16 * 2304 * 4096 * 4097 // 2
    forward = 4 * 128 * (4096 * 4097 // 2)  # QKᵀ and PV, 2·d each, per visible pair
    assert mla_training.step_flops(1, 1, 4096, 128, 128) == 3.5 * forward
    assert isinstance(mla_training.step_flops(4, 16, 4096, 192, 128), int)


# -- the steps, the refusals and the admissions -----------------------------------------------------


def test_a_torch_step_returns_the_gradients_of_its_leaves():
    q, k, v, d_o = mla_inputs()
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    grads = mla_training.torch_step(causal, leaves, d_o)()
    for got, want in zip(grads, reference_grads(q, k, v, d_o)):
        torch.testing.assert_close(got, want)
    assert all(leaf.grad is None for leaf in leaves)  # torch.autograd.grad leaves .grad alone


def test_flexattention_with_the_causal_block_mask_computes_causal_attention_of_two_head_sizes():
    q, k, v, _ = mla_inputs(s=256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = mla_training.flex_causal(256)(q, k, v)
    assert out.shape == v.shape
    torch.testing.assert_close(out, causal(q, k, v), atol=1e-5, rtol=1e-5)


def test_the_gradient_check_is_named_after_the_contender_and_stops_on_a_wrong_one():
    q, k, v, d_o = mla_inputs()
    ref = reference_grads(q, k, v, d_o)
    results = mla_training.grads_check("PyTorch SDPA, flash", ref)(ref)
    assert [r.name for r in results] == [f"PyTorch SDPA, flash: MLA {n}" for n in ("dq", "dk", "dv")]
    with pytest.raises(CheckFailedError, match="PyTorch SDPA, flash: MLA dv"):
        mla_training.grads_check("PyTorch SDPA, flash", ref)([ref[0], ref[1], 2 * ref[2]])


def refusing(q, k, v):
    warnings.warn("Flash attention kernel not used because:", stacklevel=1)
    warnings.warn("Flash attention requires the head dims of q, k and v to be the same " * 2, stacklevel=1)
    raise RuntimeError("No available kernel. Aborting execution.")


def test_each_step_is_admitted_after_its_check_and_a_refusal_is_printed_whole(capsys):
    q, k, v, d_o = mla_inputs()
    contenders = {CAND: "launcher"}
    attends = {"PyTorch SDPA, flash": refusing, "PyTorch SDPA, efficient": causal}
    unavailable = mla_training.admit_steps(contenders, attends, (q, k, v), d_o, reference_grads(q, k, v, d_o))
    assert list(contenders) == [CAND, "PyTorch SDPA, efficient"]
    assert list(unavailable) == ["PyTorch SDPA, flash"]
    assert unavailable["PyTorch SDPA, flash"].startswith("RuntimeError: No available kernel. Aborting execution. (")
    printed = capsys.readouterr().out.splitlines()
    first_check = next(i for i, line in enumerate(printed) if line.startswith("check "))
    refusal, checks = printed[:first_check], printed[first_check:]
    assert refusal[0].startswith("PyTorch SDPA, flash: unavailable here (RuntimeError: No available kernel.")
    assert len(refusal) > 1 and all(line.startswith("    ") for line in refusal[1:])  # wrapped, indented
    assert " ".join(line.strip() for line in refusal) == (
        f"PyTorch SDPA, flash: unavailable here ({unavailable['PyTorch SDPA, flash']})"
    )
    assert all(len(line) <= 88 for line in refusal)
    checks = [line.split(":")[0] for line in checks if line.startswith("check ")]
    assert checks == ["check PyTorch SDPA, efficient"] * 3
    contenders["PyTorch SDPA, efficient"]()  # the admitted step runs again


def test_the_steps_share_one_set_of_leaves_detached_from_the_inputs():
    q, k, v, d_o = mla_inputs()
    seen = []

    def recording(*leaves):
        seen.append(leaves)
        return causal(*leaves)

    contenders = {}
    ref = reference_grads(q, k, v, d_o)
    mla_training.admit_steps(contenders, {"a": recording, "b": recording}, (q, k, v), d_o, ref)
    assert len(seen) == 4  # each step once under refusal(), once under admit()
    assert all(a is b for leaves in seen[1:] for a, b in zip(leaves, seen[0]))
    assert all(t.requires_grad and t.is_leaf for t in seen[0]) and not q.requires_grad
    assert all(t.data_ptr() == u.data_ptr() for t, u in zip(seen[0], (q, k, v)))


def test_a_step_with_wrong_gradients_stops_the_page():
    q, k, v, d_o = mla_inputs()
    wrong = lambda q, k, v: causal(q, k, 2 * v)
    with pytest.raises(CheckFailedError, match="FlexAttention"):
        mla_training.admit_steps({}, {"FlexAttention (compiled)": wrong}, (q, k, v), d_o, reference_grads(q, k, v, d_o))


def fa4_stand_in(monkeypatch, seen, *, fails=False, grads=None):
    from cudnn_guide.measure import fa4

    def training_step(q, k, v, d_o, *, causal, scale=None, **kw):
        seen.update(inputs=(q, k, v, d_o), causal=causal, scale=scale, **kw)

        def step():
            if fails:
                raise RuntimeError("no kernel for head dim 192")
            return torch.zeros(1)

        return step, lambda: grads

    monkeypatch.setattr(fa4, "training_step", training_step)


def test_fa4s_step_is_checked_on_its_gradients_and_admitted_by_its_label(monkeypatch, capsys):
    q, k, v, d_o = mla_inputs()
    ref = reference_grads(q, k, v, d_o)
    seen, contenders, unavailable = {}, {CAND: "launcher"}, {}
    fa4_stand_in(monkeypatch, seen, grads=ref)
    mla_training.admit_fa4(contenders, unavailable, FA4, (q, k, v), d_o, ref, scale=192**-0.5)
    assert seen == {"inputs": (q, k, v, d_o), "causal": True, "scale": 192**-0.5}
    assert list(contenders) == [CAND, f"{FA4} step"] and unavailable == {}
    printed = capsys.readouterr().out.splitlines()
    names = [line.split(":")[0] for line in printed if line.startswith("check ")]
    assert names == [f"check {FA4}"] * 3


def test_fa4_that_cannot_run_is_said_and_one_that_is_wrong_stops_the_page(monkeypatch, capsys):
    q, k, v, d_o = mla_inputs()
    ref = reference_grads(q, k, v, d_o)
    contenders, unavailable = {}, {}
    fa4_stand_in(monkeypatch, {}, fails=True)
    mla_training.admit_fa4(contenders, unavailable, FA4, (q, k, v), d_o, ref, scale=0.1)
    assert contenders == {} and unavailable == {f"{FA4} step": "RuntimeError: no kernel for head dim 192"}
    said = " ".join(capsys.readouterr().out.split())  # as printed, however the line is wrapped
    assert "unavailable here (RuntimeError: no kernel for head dim 192)" in said
    fa4_stand_in(monkeypatch, {}, grads=[ref[0], -ref[1], ref[2]])
    with pytest.raises(CheckFailedError, match=re.escape(f"{FA4}: MLA dk")):
        mla_training.admit_fa4(contenders, unavailable, FA4, (q, k, v), d_o, ref, scale=0.1)


# -- the table and the conclusions ------------------------------------------------------------------


def _v(value, verdict):
    return {"value": value, "low": value - 0.05, "high": value + 0.05, "verdict": verdict}


def _comparison(ms, versus):
    """A comparison whose 5 rounds took ``ms[name]`` milliseconds each."""
    medians = {n: [t] * 5 for n, t in ms.items()}
    measured = {n: Measurement(n, [t] * 5, "cold", flops=1e9) for n, t in ms.items()}
    return Comparison(CAND, 5, measured, medians, versus, 0.02)


def _race(fa4_ms=0.9):
    ms = {CAND: 1.0, "PyTorch SDPA, efficient": 1.5, "FlexAttention (compiled)": 1.2}
    versus = {"PyTorch SDPA, efficient": _v(1.5, "faster"), "FlexAttention (compiled)": _v(1.2, "faster")}
    if fa4_ms is not None:
        ms[f"{FA4} step"] = fa4_ms
        versus[f"{FA4} step"] = _v(fa4_ms, "slower" if fa4_ms < 1 else "faster")
    return _comparison(ms, versus)


def test_the_rows_give_each_time_rate_and_speed_up():
    rows = mla_training.contender_rows(_race(), "µs, median of round medians")
    assert [r["implementation"] for r in rows] == [
        CAND,
        "PyTorch SDPA, efficient",
        "FlexAttention (compiled)",
        f"{FA4} step",
    ]
    cand, efficient = rows[0], rows[1]
    assert list(cand) == [
        "implementation",
        "µs, median of round medians",
        "TFLOP/s",
        "cuDNN's speed-up",
        "in-run 95% interval",
        "verdict",
    ]
    assert cand["µs, median of round medians"] == pytest.approx(1000) and cand["TFLOP/s"] == pytest.approx(1.0)
    assert cand["cuDNN's speed-up"] is None and cand["verdict"] is None
    assert efficient["cuDNN's speed-up"] == 1.5 and efficient["in-run 95% interval"] == "1.45–1.55"
    assert efficient["verdict"] == "faster"


def _conclusions(cmp, unavailable=None, detail="not installed (pip install flash-attn-4)"):
    return mla_training.conclusions(cmp, fa4_label=FA4, fa4_detail=detail, unavailable=unavailable or {})


def test_the_conclusions_judge_the_fastest_then_every_other_contender_fastest_first():
    cmp = _race(fa4_ms=1.1)
    assert cmp.best_baseline == f"{FA4} step"
    assert _conclusions(cmp) == [
        f"MLA training step: 1000 µs; in this run, against the fastest contender it is {cmp.describe()}, "
        "and against each other contender, fastest first:",
        f"* {cmp.describe('FlexAttention (compiled)')}.",
        f"* {cmp.describe('PyTorch SDPA, efficient')}.",
    ]
    cmp = _race(fa4_ms=1.3)
    assert cmp.best_baseline == "FlexAttention (compiled)"
    assert _conclusions(cmp)[1:] == [
        f"* {cmp.describe(f'{FA4} step')}.",
        f"* {cmp.describe('PyTorch SDPA, efficient')}.",
    ]


def test_the_conclusions_say_each_contenders_own_verdict_as_recorded_on_plot_27():
    # the recorded race: FlashAttention-4 fastest, a tie with PyTorch's cuDNN backend, two losers
    ms = {
        CAND: 2.576,
        "PyTorch SDPA, efficient": 24.697,
        "PyTorch SDPA, cuDNN backend": 2.582,
        "FlexAttention (compiled)": 7.451,
        f"{FA4} step": 2.377,
    }
    versus = {
        "PyTorch SDPA, efficient": _v(9.61, "faster"),
        "PyTorch SDPA, cuDNN backend": _v(1.00, "tie"),
        "FlexAttention (compiled)": _v(2.89, "faster"),
        f"{FA4} step": _v(0.92, "slower"),
    }
    sentences = _conclusions(_comparison(ms, versus))
    assert sentences[0].startswith(
        f"MLA training step: 2576 µs; in this run, against the fastest contender it is 1.09× slower than {FA4} step ("
    )
    assert [s.split(" (")[0] for s in sentences[1:]] == [
        "* a tie with PyTorch SDPA, cuDNN backend",
        "* 2.89× faster than FlexAttention",
        "* 9.61× faster than PyTorch SDPA, efficient",
    ]
    assert all(s.count(n) <= 1 for s in sentences for n in ms)  # each contender named once per sentence


def test_a_race_with_one_contender_has_no_list_of_others():
    cmp = _comparison({CAND: 1.0, f"{FA4} step": 0.9}, {f"{FA4} step": _v(0.9, "slower")})
    assert _conclusions(cmp) == [
        f"MLA training step: 1000 µs; in this run, against the fastest contender it is {cmp.describe()}.",
    ]


def test_what_did_not_run_is_said_with_its_reason_fa4_first():
    cmp = _race(fa4_ms=None)
    flash = "RuntimeError: No available kernel. Aborting execution."
    sentences = _conclusions(cmp, {"PyTorch SDPA, flash": flash})
    assert sentences[2:] == [
        "Not timed here:",
        f"* {FA4} step: not installed (pip install flash-attn-4)",
        f"* PyTorch SDPA, flash: {flash}",
    ]
    why = "RuntimeError: no kernel for head dim 192"
    sentences = _conclusions(cmp, {f"{FA4} step": why, "PyTorch SDPA, flash": flash})
    assert sentences[2:] == ["Not timed here:", f"* {FA4} step: {why}", f"* PyTorch SDPA, flash: {flash}"]
