"""custom_op_comparison: the training steps, their admission and bit comparison, the tables and the sentences the
custom-op-against-shipped page shows, on the CPU with small forwards and comparisons written by hand."""

from __future__ import annotations

import pytest
import torch

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import custom_op_comparison

CAND = "this page's op"
SHIPPED = "torch.ops.cudnn.sdpa_fwd (frontend 1.32)"
CUDNN = "PyTorch SDPA, cuDNN backend"
FLASH = "PyTorch SDPA, flash backend (FlashAttention-2)"


def _attend(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2), -1) @ v


def _inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v, d_o = (torch.randn(1, 2, 8, 4, generator=gen, dtype=torch.float64) for _ in range(4))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    _attend(*ref).backward(d_o)
    return leaves, d_o, ref[0].grad


def test_a_training_step_clears_the_gradients_then_runs_forward_and_backward():
    leaves, d_o, ref_dq = _inputs()
    calls = []

    def forward(q, k, v):
        calls.append([t.grad is None for t in (q, k, v)])
        return _attend(q, k, v)

    step = custom_op_comparison.training_step(forward, leaves, d_o)
    assert step() is None and step() is None
    assert calls == [[True, True, True]] * 2  # no step accumulates into the previous one's gradients
    torch.testing.assert_close(leaves[0].grad, ref_dq)


def test_each_step_is_checked_on_its_dq_and_one_that_cannot_run_is_said_unavailable(capsys):
    leaves, d_o, ref_dq = _inputs()

    def refuses(q, k, v):
        raise RuntimeError("No available kernel. Aborting execution.")

    forwards = {CAND: _attend, SHIPPED: refuses, CUDNN: lambda q, k, v: _attend(q, k, v) * 1.0}
    contenders, unavailable = custom_op_comparison.admit_steps(forwards, leaves, d_o, ref_dq)
    assert list(contenders) == [CAND, CUDNN]
    assert unavailable == {SHIPPED: "RuntimeError: No available kernel. Aborting execution."}
    out = capsys.readouterr().out
    assert f"check {CAND}: dQ: PASS" in out and f"check {CUDNN}: dQ:\n    PASS" in out  # a long name wraps
    # the reason is wrapped at the line width: read it with its line breaks undone
    assert f"{SHIPPED}: unavailable here (RuntimeError: No available kernel." in " ".join(out.split())
    contenders[CUDNN]()  # a contender is the step itself
    torch.testing.assert_close(leaves[0].grad, ref_dq)
    with pytest.raises(CheckFailedError):  # a wrong gradient stops the page
        custom_op_comparison.admit_steps({FLASH: lambda q, k, v: _attend(k, q, v)}, leaves, d_o, ref_dq)


def test_bit_equality_is_against_the_candidates_first_output_and_its_own_rerun():
    leaves, _, _ = _inputs()
    runs = []

    def noisy(q, k, v):  # differs from itself between runs
        runs.append(1)
        return _attend(q, k, v) + len(runs) * 1e-12

    forwards = {CAND: _attend, SHIPPED: lambda q, k, v: _attend(q, k, v).clone(), FLASH: noisy}
    assert custom_op_comparison.same_forward_bits(forwards, [CAND, SHIPPED, FLASH], leaves, CAND) == {
        CAND: True,
        SHIPPED: True,
        FLASH: False,
    }
    assert custom_op_comparison.same_forward_bits(forwards, [FLASH, SHIPPED], leaves, FLASH) == {
        FLASH: False,
        SHIPPED: False,
    }


def test_the_frontends_op_is_called_causal_with_its_statistics_and_gives_o(monkeypatch):
    calls = []

    class _Cudnn:
        @staticmethod
        def sdpa_fwd(q, k, v, scale, **kw):
            calls.append((q, k, v, scale, kw))
            return "O", "lse"

    monkeypatch.setattr(torch.ops, "cudnn", _Cudnn, raising=False)
    assert custom_op_comparison.frontend_sdpa(0.125)(1, 2, 3) == "O"
    assert calls == [(1, 2, 3, 0.125, {"is_causal": True, "return_lse": True})]


def _v(value, verdict, low=None, high=None):
    return {
        "value": value,
        "low": value - 0.05 if low is None else low,
        "high": value + 0.05 if high is None else high,
        "verdict": verdict,
    }


def _comparison(ms, versus, tie_band, *, host=None, wall=None, flops=1e9, rounds=7):
    medians = {n: [t] * rounds for n, t in ms.items()}
    measured = {
        n: Measurement(n, [t] * 3, "cold", flops=flops, host_samples_ms=list((host or {}).get(n, [])))
        for n, t in ms.items()
    }
    return Comparison(CAND, rounds, measured, medians, versus, tie_band, wall=wall)


@pytest.fixture
def training():
    """The op: 1 ms on the GPU; SHIPPED ties with it, CUDNN is slower, FLASH faster. In the loop the op and
    SHIPPED wait on the host (2 ms a step)."""
    wall = _comparison(
        {CAND: 2.0, SHIPPED: 2.1, CUDNN: 1.3, FLASH: 0.85},
        {SHIPPED: _v(1.05, "tie"), CUDNN: _v(0.65, "slower"), FLASH: _v(0.45, "slower")},
        0.03,
        flops=None,
    )
    return _comparison(
        {CAND: 1.0, SHIPPED: 1.0, CUDNN: 1.25, FLASH: 0.8},
        {SHIPPED: _v(1.0, "tie", 0.97, 0.99), CUDNN: _v(1.25, "faster"), FLASH: _v(0.8, "slower")},
        0.02,
        host={CAND: [0.3], SHIPPED: [0.5], CUDNN: [0.05]},
        wall=wall,
    )


def test_step_times_give_each_clock_and_what_a_loop_waits_on(training):
    per_step = custom_op_comparison.step_times(training, margin=1.1)
    assert list(per_step) == [CAND, SHIPPED, CUDNN, FLASH]
    op = per_step[CAND]
    assert list(op) == ["GPU µs", "host µs, one call", "wall-clock µs in a loop", "loop ÷ GPU", "a loop waits on"]
    assert op["GPU µs"] == pytest.approx(1000) and op["host µs, one call"] == pytest.approx(300)
    assert op["wall-clock µs in a loop"] == pytest.approx(2000) and op["loop ÷ GPU"] == pytest.approx(2.0)
    assert [row["a loop waits on"] for row in per_step.values()] == ["host", "host", "GPU", "GPU"]
    assert per_step[FLASH]["host µs, one call"] is None


def test_verdict_rows_give_each_baseline_by_both_clocks_with_their_tie_bands(training):
    rows = custom_op_comparison.verdict_rows(training, CAND)
    assert rows[0] == {
        f"{CAND} against": SHIPPED,
        "GPU time (tie band ±2.0%)": "tie (1.00×, 0.97–0.99)",
        "wall clock, loop (tie band ±3.0%)": "tie (1.05×, 1.00–1.10)",
    }
    assert [r[f"{CAND} against"] for r in rows] == [SHIPPED, CUDNN, FLASH]


def test_the_conclusions_read_both_clocks_the_bits_and_the_loop(training):
    per_step = custom_op_comparison.step_times(training, margin=1.1)
    bitwise = {CAND: True, SHIPPED: True, CUDNN: True, FLASH: False}
    sentences = custom_op_comparison.conclusions(training, per_step, bitwise, candidate=CAND, margin=1.1)
    assert sentences[0] == (
        "By GPU time the op's training step runs at 1 TFLOP/s and, in this run, is a tie only by the tie band "
        f"with {SHIPPED} (1.00×, 0.97–0.99), whose interval lies wholly below 1 (the op slower); "
        f"1.25× faster than {CUDNN}; 1.25× slower than {FLASH} (tie band ±2.0%, 7 rounds; intervals above)."
    )
    assert sentences[1].startswith(
        f"By the wall clock of a back-to-back loop of steps, host time included, it is, in this run, a tie with "
        f"{SHIPPED} (1.05×, 1.00–1.10); "
    )
    assert "1.54× slower than" in sentences[1] and "(tie band ±3.0%, 7 rounds; intervals above)." in sentences[1]
    assert sentences[2] == (  # FLASH is the fastest other contender on both clocks: the headlines' baseline
        "The best alternative, the fastest contender other than the op and the one the headline speed-ups are "
        f"taken over, is {FLASH} on both clocks; the op against it: slower (0.80×, 0.75–0.85) by GPU time, "
        "slower (0.45×, 0.40–0.50) by the loop's wall clock."
    )
    assert sentences[3] == "Per baseline, the op's speed-up by each clock (in-run 95% interval):"
    assert sentences[4] == (
        f"* against {SHIPPED}: by GPU time: tie (1.00×, 0.97–0.99), tie band ±2.0%, but its interval lies wholly "
        "below 1 (the op slower): a tie only by the band; by the loop's wall clock: tie (1.05×, 1.00–1.10), tie "
        "band ±3.0%."
    )
    assert sentences[5].endswith("; the two clocks disagree.")  # CUDNN: faster on the GPU, slower in the loop
    assert sentences[7].startswith(f"{SHIPPED} and {CUDNN} computed a forward output bit-identical to the op's")
    assert sentences[8] == (
        f"A loop of steps waits on the host (a step takes over 10% longer in the loop than on the GPU) for: "
        f"{CAND} and {SHIPPED}."
    )
    assert sentences[9] == (
        f"* {CAND}: GPU 1,000 µs per step; in a loop 2,000 µs of wall clock per step (2.00× its GPU time); host "
        "300 µs for one call on an idle GPU."
    )
    assert sentences[12].endswith("host not measured.")
    assert sentences[13].startswith("GPU time is what a step costs where the GPU is the bottleneck")
    assert len(sentences) == 14  # everything ran: no "Not timed here:" paragraph


def test_the_kernel_sentence_says_when_bits_show_nothing(training):
    per_step = {
        n: {**row, "a loop waits on": "GPU"} for n, row in custom_op_comparison.step_times(training, margin=1.1).items()
    }

    def kernels(bitwise):
        return custom_op_comparison.conclusions(training, per_step, bitwise, candidate=CAND, margin=1.1)

    assert kernels({CAND: False, SHIPPED: True})[7].startswith("The op's forward output differs between two runs")
    assert (
        kernels({CAND: True, SHIPPED: False})[7] == "No other contender computed an output bit-identical to the op's."
    )
    assert kernels({CAND: True})[8] == (
        "For every contender a step takes about as long in the loop as on the GPU: a loop waits on the GPU."
    )


def test_a_tie_only_by_the_band_is_said_where_the_tie_is_stated():
    """A loop race where one tie's interval spans 1 and another's lies wholly below it: the sentence that states the
    ties keeps them apart and says which is a tie only by the band, not only a later bullet."""
    versus = {SHIPPED: _v(1.24, "tie", 0.94, 1.34), CUDNN: _v(0.72, "tie", 0.66, 0.89), FLASH: _v(1.3, "faster")}
    wall = _comparison({CAND: 1.0, SHIPPED: 1.24, CUDNN: 0.72, FLASH: 1.3}, versus, 0.118, flops=None)
    assert custom_op_comparison._against_each(wall) == (
        f"a tie with {SHIPPED} (1.24×, 0.94–1.34); a tie only by the tie band with {CUDNN} (0.72×, 0.66–0.89), "
        f"whose interval lies wholly below 1 (the op slower); 1.30× faster than {FLASH} "
        "(tie band ±11.8%, 7 rounds; intervals above)"
    )
    above = {SHIPPED: _v(1.003, "tie", 1.001, 1.005), CUDNN: _v(1.004, "tie", 1.002, 1.006)}
    gpu = _comparison({CAND: 1.0, SHIPPED: 1.0, CUDNN: 1.0}, above, 0.01)
    assert custom_op_comparison._against_each(gpu).startswith(
        f"a tie only by the tie band with {SHIPPED} (1.003×, 1.001–1.005) and {CUDNN} (1.004×, 1.002–1.006), "
        "whose intervals lie wholly above 1 (the op faster) (tie band"
    )


def test_an_interval_that_excludes_1_is_printed_with_the_digits_that_show_it():
    """Two decimals would print 1.00–1.00 for an interval wholly below 1; more digits show that it is."""
    below = _v(0.9986, "tie", 0.9972, 0.99953)
    above = _v(1.0004, "tie", 1.00003, 1.0009)
    wall = _comparison({CAND: 1.0, SHIPPED: 1.0, CUDNN: 1.0}, {SHIPPED: _v(1.0, "tie"), CUDNN: _v(1.0, "tie")}, 0.1)
    cmp = _comparison({CAND: 1.0, SHIPPED: 1.0, CUDNN: 1.0}, {SHIPPED: below, CUDNN: above}, 0.01, wall=wall)
    rows = custom_op_comparison.verdict_rows(cmp, CAND)
    assert [r["GPU time (tie band ±1.0%)"] for r in rows] == [
        "tie (0.9986×, 0.9972–0.9995)",
        "tie (1.00040×, 1.00003–1.00090)",
    ]
    assert rows[0]["wall clock, loop (tie band ±10.0%)"] == "tie (1.00×, 0.95–1.05)"  # spans 1: two decimals
    bullet = custom_op_comparison._on_both_clocks(cmp, SHIPPED)
    assert "tie (0.9986×, 0.9972–0.9995), tie band ±1.0%, but its interval lies wholly below 1" in bullet


def test_the_kernel_sentence_claims_only_the_forward_that_bits_compared(training):
    per_step = custom_op_comparison.step_times(training, margin=1.1)
    bitwise = {CAND: True, SHIPPED: True, CUDNN: False, FLASH: False}
    kernels = custom_op_comparison.conclusions(training, per_step, bitwise, candidate=CAND, margin=1.1)[7]
    assert kernels.startswith(f"{SHIPPED} computed a forward output bit-identical to the op's: the same cuDNN forward")
    assert "largely a kernel timed against itself" not in kernels
    assert "backward, the rest of each step, was not compared bit for bit" in kernels
    assert "not that one kernel is timed against itself" in kernels


FA4 = "FlashAttention-4 (flash-attn-4 4.0.0b36)"


def _causal(q, k, v, scale):
    s = q.shape[-2]
    mask = torch.ones(s, s, dtype=torch.bool).tril()  # query i sees keys j <= i
    return torch.softmax((q @ k.transpose(-1, -2) * scale).masked_fill(~mask, float("-inf")), -1) @ v


def _causal_inputs():
    leaves, d_o, _ = _inputs()
    ref = [t.detach().clone().requires_grad_() for t in leaves]
    _causal(*ref, 4**-0.5).backward(d_o)
    return leaves, d_o, ref[0].grad


def _fake_fa4(monkeypatch, *, calls=None, refuses=None, wrong=False):
    """flash_attn_func stood in by a CPU causal attention on B×S×H×D tensors, as flash-attn-4 4.0.0b36."""
    from cudnn_guide.measure import fa4

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, **kw):
        if calls is not None:
            calls.append({"shape": tuple(q.shape), "softmax_scale": softmax_scale, "causal": causal, **kw})
        if refuses:
            raise RuntimeError(refuses)
        q_, k_, v_ = (t.transpose(1, 2) for t in ((k if wrong else q), (q if wrong else k), v))
        return _causal(q_, k_, v_, softmax_scale).transpose(1, 2), None  # (out, lse), as FA4 returns

    monkeypatch.setattr(fa4, "_load", lambda: (flash_attn_func, "4.0.0b36"))


def test_fa4_not_installed_is_a_not_installed_row_with_the_install_command_not_an_error(monkeypatch, capsys, training):
    from cudnn_guide.measure import fa4

    monkeypatch.setattr(fa4, "_load", lambda: (None, "ModuleNotFoundError: No module named 'flash_attn'"))
    assert fa4.label() == "FlashAttention-4"
    leaves, d_o, ref_dq = _causal_inputs()
    forwards = {CAND: lambda q, k, v: _causal(q, k, v, 4**-0.5)}
    contenders, unavailable = custom_op_comparison.admit_steps(forwards, leaves, d_o, ref_dq)
    why = custom_op_comparison.admit_fa4(contenders, unavailable, forwards, fa4.label(), leaves, d_o, ref_dq)
    assert why.startswith("not installed (pip install flash-attn-4==4.0.0b36") and "No module named" in why
    assert unavailable == {"FlashAttention-4": why} and list(contenders) == [CAND] and list(forwards) == [CAND]
    assert "FlashAttention-4: not installed (pip install flash-attn-4==4.0.0b36" in " ".join(
        capsys.readouterr().out.split()
    )
    rows = custom_op_comparison.verdict_rows(training, CAND, unavailable=unavailable)
    assert rows[-1] == {
        f"{CAND} against": "FlashAttention-4",
        "GPU time (tie band ±2.0%)": f"not timed: {why}",
        "wall clock, loop (tie band ±3.0%)": "not timed",
    }
    assert len(rows) == 4  # the three timed baselines, then the row that says why FA4 was not
    per_step = custom_op_comparison.step_times(training, margin=1.1)
    bitwise = {CAND: True, SHIPPED: True, CUDNN: True, FLASH: False}
    sentences = custom_op_comparison.conclusions(
        training, per_step, bitwise, candidate=CAND, margin=1.1, unavailable=unavailable
    )
    assert sentences[-2:] == ["Not timed here:", f"* FlashAttention-4: {why}"]


def test_fa4_installed_is_raced_on_its_own_copies_and_checked_on_dq_like_the_others(monkeypatch, capsys):
    from cudnn_guide.measure import fa4

    calls = []
    _fake_fa4(monkeypatch, calls=calls)
    assert fa4.label() == FA4
    leaves, d_o, ref_dq = _causal_inputs()
    forwards = {CAND: lambda q, k, v: _causal(q, k, v, 4**-0.5)}
    contenders, unavailable = custom_op_comparison.admit_steps(forwards, leaves, d_o, ref_dq)
    assert custom_op_comparison.admit_fa4(contenders, unavailable, forwards, FA4, leaves, d_o, ref_dq) is None
    assert list(contenders) == [CAND, FA4] and unavailable == {}  # raced in the same rounds, last
    assert calls == [{"shape": (1, 8, 2, 4), "softmax_scale": 0.5, "causal": True}]  # B×S×H×D, causal, D**-0.5
    assert f"check {FA4}: dQ:" in capsys.readouterr().out  # checked against the same fp32 reference
    mine = leaves[0].grad.clone()
    contenders[FA4]()  # the contender is the step itself, on its own copies: the shared leaves are untouched
    assert len(calls) == 2 and torch.equal(leaves[0].grad, mine)
    bits = custom_op_comparison.same_forward_bits(forwards, [CAND, FA4], leaves, CAND)
    assert list(bits) == [CAND, FA4] and bits[CAND]
    torch.testing.assert_close(forwards[FA4](*leaves), forwards[CAND](*leaves))  # B×H×S×D out, like the others


def test_fa4_that_refuses_the_case_shows_its_error_and_one_that_is_wrong_stops_the_page(monkeypatch, capsys):
    leaves, d_o, ref_dq = _causal_inputs()
    _fake_fa4(monkeypatch, refuses="head_dim 4 is not supported on this GPU")
    contenders, unavailable, forwards = {}, {}, {}
    why = custom_op_comparison.admit_fa4(contenders, unavailable, forwards, FA4, leaves, d_o, ref_dq)
    assert why == "RuntimeError: head_dim 4 is not supported on this GPU"
    assert unavailable == {FA4: why} and contenders == {} and forwards == {}
    assert f"{FA4}: unavailable here ({why})" in " ".join(capsys.readouterr().out.split())
    _fake_fa4(monkeypatch, wrong=True)
    with pytest.raises(CheckFailedError):
        custom_op_comparison.admit_fa4({}, {}, {}, FA4, leaves, d_o, ref_dq)


def test_fa4_fastest_is_named_as_the_best_alternative_the_headlines_are_taken_over():
    """When FlashAttention-4 is the fastest contender, the conclusions say that the headline speed-up is the op's
    over FlashAttention-4, on each clock where it is the fastest."""
    wall = _comparison(
        {CAND: 1.0, SHIPPED: 1.0, FA4: 0.9},
        {SHIPPED: _v(1.0, "tie"), FA4: _v(0.9, "slower")},
        0.03,
        flops=None,
    )
    gpu = _comparison(
        {CAND: 1.0, SHIPPED: 0.95, FA4: 0.7},
        {SHIPPED: _v(0.95, "tie"), FA4: _v(0.7, "slower", 0.68, 0.72)},
        0.02,
        wall=wall,
    )
    assert gpu.best_baseline == FA4 and wall.best_baseline == FA4
    per_step = custom_op_comparison.step_times(gpu, margin=1.1)
    sentences = custom_op_comparison.conclusions(
        gpu, per_step, {CAND: True, SHIPPED: True, FA4: False}, candidate=CAND, margin=1.1
    )
    assert sentences[2] == (
        "The best alternative, the fastest contender other than the op and the one the headline speed-ups are "
        f"taken over, is {FA4} on both clocks; the op against it: slower (0.70×, 0.68–0.72) by GPU time, "
        "slower (0.90×, 0.85–0.95) by the loop's wall clock."
    )
    assert f"1.43× slower than {FA4}" in sentences[0]
    assert [r[f"{CAND} against"] for r in custom_op_comparison.verdict_rows(gpu, CAND)] == [SHIPPED, FA4]
    # the clocks may disagree on which is fastest: each is named with its own
    wall.round_medians_ms[SHIPPED] = [0.8] * 7
    assert custom_op_comparison._best_alternative(gpu) == (
        "The best alternative, the fastest contender other than the op and the one the headline speed-ups are "
        f"taken over, is {FA4} by GPU time (the op against it: slower (0.70×, 0.68–0.72)) and {SHIPPED} by the "
        "loop's wall clock (the op against it: tie (1.00×, 0.95–1.05))."
    )
