import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cudnn_guide import check
from cudnn_guide.errors import CheckFailedError, InputError


def test_tolerances_scale_with_precision():
    assert check.tolerance(torch.float32) < check.tolerance(torch.float16) < check.tolerance(torch.bfloat16)
    with pytest.raises(InputError, match="tolerance"):
        check.tolerance(torch.int32)


def test_matching_output_passes_and_reports_error():
    ref = torch.randn(1000, dtype=torch.float64)
    out = ref.to(torch.bfloat16)
    result = check.check(out, ref, name="rounded")
    assert result.passed
    assert 1e-4 < result.rel_error < check.tolerance(torch.bfloat16)
    assert "PASS" in str(result)


def test_wrong_output_fails_loudly():
    ref = torch.randn(1000)
    with pytest.raises(CheckFailedError, match="relative error .* exceeds"):
        check.check(ref + 0.1 * torch.randn(1000), ref, name="bad")
    assert not check.compare(ref * 1.1, ref).passed


def test_nan_always_fails_even_with_a_huge_tolerance():
    ref = torch.randn(10)
    out = ref.clone()
    out[3] = float("nan")
    result = check.compare(out, ref, tol=1e9)
    assert not result.passed and result.nan_count == 1
    with pytest.raises(CheckFailedError, match="1 of 10 elements are NaN"):
        check.check(out, ref, tol=1e9)


def test_poison_makes_unwritten_outputs_fail():
    ref = torch.randn(8, 8)
    out = torch.empty(8, 8)
    check.poison(out)
    out[:4] = ref[:4]  # a "kernel" that writes only half its output
    with pytest.raises(CheckFailedError, match="32 of 64 elements are NaN"):
        check.check(out, ref)
    with pytest.raises(InputError, match="no NaN"):
        check.poison(torch.zeros(3, dtype=torch.int32))


def test_shape_mismatch_is_an_input_error():
    with pytest.raises(InputError, match="shape"):
        check.compare(torch.zeros(3), torch.zeros(4))


def test_reference_upcasts_and_restores_tf32_flags():
    before = torch.backends.cuda.matmul.allow_tf32
    a = torch.randn(4, 4, dtype=torch.bfloat16)
    out = check.reference(lambda x: x @ x, a)
    assert out.dtype == torch.float32
    assert torch.backends.cuda.matmul.allow_tf32 == before


@settings(max_examples=50, deadline=None)
@given(st.floats(1e-6, 1e-1))
def test_relative_error_of_a_uniform_scale_is_the_scale(eps):
    ref = torch.randn(256, dtype=torch.float64) + 3.0
    res = check.compare(ref * (1 + eps), ref, tol=1.0)
    assert math.isclose(res.rel_error, eps, rel_tol=1e-6)


def test_a_childs_check_is_judged_and_collected_like_a_local_one():
    from cudnn_guide import collector
    from cudnn_guide.report import records

    ref = torch.randn(1000, dtype=torch.float64)
    good = check.compare(ref.to(torch.bfloat16), ref, name="y").to_dict()  # what a child process returns
    bad = check.compare(ref + 0.5 * torch.randn(1000, dtype=torch.float64), ref, name="y").to_dict()
    records.begin()
    try:
        kept = check.from_child(good, name="y in a fresh process")
        assert kept.passed and kept.name == "y in a fresh process" and kept.rel_error == good["rel_error"]
        with pytest.raises(CheckFailedError, match="check y in child 2 failed: relative error"):
            check.from_child(bad, name="y in child 2")
        assert records.page().checks == [kept]  # the failure was not recorded as a check
    finally:
        collector.stop()


LONG_NAME = "dQ of the packed THD varlen backward against PyTorch SDPA's flash backend (FlashAttention-2), padded"


def test_a_short_check_prints_on_one_line_as_before():
    r = check.CheckResult("conv_bias_relu", "bfloat16", 2.1e-3, 1.6e-2, 0, 8)
    assert str(r) == "check conv_bias_relu: PASS rel. error 2.10e-03 (tolerance 1.6e-02, bfloat16)"
    nan = check.CheckResult("y", "float16", float("nan"), 3e-3, 2, 8)
    assert str(nan) == "check y: FAIL rel. error nan (tolerance 3.0e-03, float16, 2 NaN of 8)"


@pytest.mark.parametrize("name", [LONG_NAME[:60], LONG_NAME, "x" * 150, f"{LONG_NAME}, {LONG_NAME}"])
def test_a_long_check_puts_its_verdict_on_an_indented_line_of_its_own(name):
    r = check.CheckResult(name, "float8_e4m3fn", float("nan"), 8e-2, 123456, 1234567)
    one_line = f"check {name}: FAIL rel. error nan (tolerance 8.0e-02, float8_e4m3fn, 123456 NaN of 1234567)"
    assert len(one_line) > check.LINE_WIDTH
    lines = str(r).splitlines()
    assert all(len(line) <= check.LINE_WIDTH for line in lines), [len(line) for line in lines]
    assert lines[-1] == "    FAIL rel. error nan (tolerance 8.0e-02, float8_e4m3fn, 123456 NaN of 1234567)"
    assert "".join(lines[:-1]).replace(" ", "") == f"check {name}:".replace(" ", "")  # the name, whole
    assert not lines[0].startswith(" ") and lines[0].startswith("check ")


def test_a_check_line_that_just_fits_stays_on_one_line():
    tail = ": PASS rel. error 2.10e-03 (tolerance 1.6e-02, bfloat16)"
    name = "n" * (check.LINE_WIDTH - len("check ") - len(tail))
    assert str(check.CheckResult(name, "bfloat16", 2.1e-3, 1.6e-2, 0, 8)) == f"check {name}{tail}"
    assert len(str(check.CheckResult(name + "n", "bfloat16", 2.1e-3, 1.6e-2, 0, 8)).splitlines()) == 2


def test_an_admitted_baseline_prints_its_check_within_the_line_width(capsys):
    from cudnn_guide.measure import baselines

    ref = torch.randn(64, dtype=torch.float64)
    out = ref.to(torch.bfloat16)
    name = "PyTorch SDPA, efficient backend (memory-efficient attention), padded"
    contenders = {}
    assert baselines.admit(contenders, name, lambda: out, ref) is None
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"check {name}:" and printed[1].startswith("    PASS rel. error ")
    assert all(len(line) <= check.LINE_WIDTH for line in printed) and name in contenders


def test_the_worst_sequence_is_returned_and_every_sequence_is_checked_by_its_name():
    from cudnn_guide import collector
    from cudnn_guide.graphs import varlen
    from cudnn_guide.report import records

    cu = torch.tensor([0, 3, 5, 9])
    spans = varlen.spans(cu)
    ref = torch.randn(9, 2, 4, dtype=torch.float64)
    out = ref.clone()
    out[3:5] *= 1 + 1e-12  # sequence 1 off by 1e-12 (within float64's 1e-10), the others exact
    expected = {"O": [varlen.packed_rows(ref, b, a, e) for b, (a, e) in spans]}
    records.begin()
    try:
        worst = check.worst_sequence("packed", {"O": out}, varlen.packed_rows, expected, spans)
        assert worst.name == "packed O, seq. 1" and worst.rel_error == pytest.approx(1e-12, rel=1e-3)
        assert [r.name for r in records.page().checks] == [f"packed O, seq. {b}" for b in range(3)]
        out[6] = float("nan")
        with pytest.raises(CheckFailedError, match="check packed O, seq. 2 failed"):
            check.worst_sequence("packed", {"O": out}, varlen.packed_rows, expected, spans)
    finally:
        collector.stop()


def _small_block():
    from cudnn_guide.graphs import block

    torch.manual_seed(0)
    return block.transformer_block(block.torch_attention, heads=2, head_dim=8, hidden=32)


def test_a_modules_reference_is_an_fp32_copy_run_with_tf32_off_and_the_module_is_untouched():
    template = _small_block().to(torch.bfloat16)
    before = [p.detach().clone() for p in template.parameters()]
    x = torch.randn(2, 4, 16, dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    ref_y, ref_grads = check.module_reference(template, x, dy)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == flags
    assert ref_y.dtype == torch.float32 and ref_y.shape == x.shape and not ref_y.requires_grad
    assert list(ref_grads) == [n for n, _ in template.named_parameters()]
    assert all(g.dtype == torch.float32 for g in ref_grads.values())
    assert all(p.grad is None for p in template.parameters())
    assert all(torch.equal(p, b) for p, b in zip(template.parameters(), before))
    by_hand = template.float()  # the same weights upcast: the same output and gradients
    y = by_hand(x.float())
    y.backward(dy.float())
    torch.testing.assert_close(ref_y, y.detach())
    for n, p in by_hand.named_parameters():
        torch.testing.assert_close(ref_grads[n], p.grad)


def test_a_module_is_checked_on_its_output_and_every_gradient_and_the_worst_is_returned():
    from cudnn_guide import collector
    from cudnn_guide.graphs import block
    from cudnn_guide.report import records

    template = _small_block()
    x, dy = torch.randn(2, 4, 16), torch.randn(2, 4, 16)
    ref_y, ref_grads = check.module_reference(template, x, dy)
    records.begin()
    try:
        out, worst = check.check_module(
            block.variant(template, block.torch_attention).to(torch.bfloat16),
            x.to(torch.bfloat16),
            dy.to(torch.bfloat16),
            ref_y,
            ref_grads,
            name="bf16 block",
            grad_tol=0.032,
        )
        collected = list(records.page().checks)
    finally:
        collector.stop()
    assert out.name == "bf16 block: output" and out.tolerance == check.tolerance(torch.bfloat16)
    assert [r.name for r in collected] == ["bf16 block: output", *(f"bf16 block: d{n}" for n in ref_grads)]
    assert worst.tolerance == 0.032 and worst == max(collected[1:], key=lambda r: r.rel_error)


def test_a_compiled_modules_prefix_is_dropped_and_a_wrong_gradient_fails():
    import torch.nn as nn

    template = _small_block()
    x, dy = torch.randn(2, 4, 16), torch.randn(2, 4, 16)
    ref_y, ref_grads = check.module_reference(template, x, dy)

    class Wrapped(nn.Module):  # what torch.compile's OptimizedModule names its parameters
        def __init__(self, inner):
            super().__init__()
            self._orig_mod = inner

        def forward(self, x):
            return self._orig_mod(x)

    out, worst = check.check_module(Wrapped(template), x, dy, ref_y, ref_grads, name="compiled")
    assert out.passed and worst.name.startswith("compiled: d") and "_orig_mod" not in worst.name

    wrong = _small_block()
    with torch.no_grad():
        wrong.down.weight.mul_(-1)  # the output changes too; its check fails first
    with pytest.raises(CheckFailedError, match="check wrong: output failed"):
        check.check_module(wrong, x, dy, ref_y, ref_grads, name="wrong")
    ref_grads = {**ref_grads, "qkv.weight": -ref_grads["qkv.weight"]}
    with pytest.raises(CheckFailedError, match=r"check grads: dqkv\.weight failed"):
        check.check_module(template, x, dy, ref_y, ref_grads, name="grads")


def test_a_module_check_runs_its_reference_once_and_prints_the_output_and_the_worst_gradient(capsys):
    from cudnn_guide.graphs import block

    template = _small_block()
    x, dy = torch.randn(2, 4, 16), torch.randn(2, 4, 16)
    check_block = check.ModuleCheck(template, x, dy, grad_tol=1e-3)
    out, worst = check_block(block.variant(template, block.torch_attention), "PyTorch block")
    assert capsys.readouterr().out == f"{out}\n{worst} (the worst of 6 weight gradients)\n"
    assert worst.tolerance == 1e-3 and out.name == "PyTorch block: output"


def test_split_line_keeps_a_short_line_whole_and_puts_a_long_tail_under_its_head():
    from cudnn_guide.check import LINE_WIDTH, split_line

    assert split_line("check O:", "PASS") == "check O: PASS"
    head = "check " + "a-very-long-contender-name " * 4 + ":"
    lines = split_line(head, "PASS rel. error 1.0e-03").splitlines()
    assert lines[-1] == "    PASS rel. error 1.0e-03" and all(len(x) <= LINE_WIDTH for x in lines)


def test_a_sequence_whose_reference_is_rounding_noise_is_judged_against_its_outputs_scale():
    # a one-token causal sequence's dQ is zero in exact arithmetic: its fp32 reference held 2e-7 of noise and
    # the kernel 0, a relative error of 1 against the noise (seen on an AVX2 host in the varlen-backward test)
    from cudnn_guide.graphs import varlen

    cu = torch.tensor([0, 4, 5, 9])
    spans = varlen.spans(cu)
    ref = torch.randn(9, 2, 4, dtype=torch.float32)
    ref[4:5] = 2e-7  # sequence 1: noise only
    out = ref.clone()
    out[4:5] = 0.0
    expected = {"dq": [varlen.packed_rows(ref, b, a, e) for b, (a, e) in spans]}
    assert not check.compare(out[4:5], ref[4:5]).passed  # alone, against its own noise: a relative error of 1
    worst = check.worst_sequence("packed", {"dq": out}, varlen.packed_rows, expected, spans)
    assert worst.rel_error < 1e-4  # against a share of the output's typical norm
    out[4:5] = 0.5  # a real error in that sequence still fails
    with pytest.raises(CheckFailedError, match="check packed dq, seq. 1 failed"):
        check.worst_sequence("packed", {"dq": out}, varlen.packed_rows, expected, spans)
    out[4:5] = 0.0
    out[0] = ref[0] * 1.01  # a sequence of ordinary size is judged against its own norm, as before
    with pytest.raises(CheckFailedError, match="check packed dq, seq. 0 failed"):
        check.worst_sequence("packed", {"dq": out}, varlen.packed_rows, expected, spans)


def test_a_reference_with_inf_gives_no_sequence_a_floor():
    from cudnn_guide.graphs import varlen

    cu = torch.tensor([0, 4, 8])
    spans = varlen.spans(cu)
    ref = torch.randn(8, 2, 4, dtype=torch.float32)
    ref[5, 0, 0] = float("inf")
    out = ref.clone()
    out[0:4] *= 2.0  # sequence 0 wrong: judged on its own norm, not hidden by the inf in sequence 1
    expected = {"O": [varlen.packed_rows(ref, b, a, e) for b, (a, e) in spans]}
    with pytest.raises(CheckFailedError, match="check packed O, seq. 0 failed"):
        check.worst_sequence("packed", {"O": out}, varlen.packed_rows, expected, spans)


def test_a_check_is_a_point_where_a_shared_lane_may_give_way():
    import torch

    from cudnn_guide import check, collector

    seen = []
    collector.give_way_with(lambda: seen.append("gave way"))
    try:
        check.check(torch.ones(4), torch.ones(4), name="a")
        with collector.measuring():  # never inside a measured block
            check.check(torch.ones(4), torch.ones(4), name="b")
    finally:
        collector.give_way_with(None)
    assert seen == ["gave way"]
