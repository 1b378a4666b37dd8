"""Baselines are admitted only with a passing check; one that cannot run is said, one that is wrong stops the page."""

from __future__ import annotations

import warnings

import pytest
import torch

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.measure import baselines


def test_a_baseline_that_checks_is_admitted_and_its_check_printed(capsys):
    ref = torch.ones(64)
    contenders = {"cudnn": lambda: ref}
    fn = lambda: ref.clone()
    assert baselines.admit(contenders, "torch", fn, ref) is None
    assert contenders["torch"] is fn
    assert "torch" in capsys.readouterr().out


def test_a_baseline_that_cannot_run_is_left_out_with_its_reason(capsys):
    contenders = {}

    def missing():
        raise RuntimeError("no kernel for sm_90\nsecond line")

    why = baselines.admit(contenders, "torch flash", missing, torch.ones(4))
    assert why == "RuntimeError: no kernel for sm_90" and contenders == {}
    assert capsys.readouterr().out.strip() == "torch flash: unavailable here (RuntimeError: no kernel for sm_90)"


def test_a_long_reason_is_printed_wrapped_at_the_line_width_and_returned_whole(capsys):
    def paged():  # plot_13's recorded reason: 129 characters on one line
        raise TypeError("varlen_attn() got an unexpected keyword argument 'seqused_k'")

    why = baselines.admit({}, "PyTorch varlen_attn on the paged pool", paged, torch.ones(4))
    assert why == "TypeError: varlen_attn() got an unexpected keyword argument 'seqused_k'"
    assert capsys.readouterr().out.splitlines() == [
        "PyTorch varlen_attn on the paged pool: unavailable here (TypeError: varlen_attn() got an",
        "    unexpected keyword argument 'seqused_k')",
    ]


def test_a_baseline_with_a_wrong_result_stops_the_page_instead_of_being_called_unavailable():
    contenders = {}
    with pytest.raises(CheckFailedError, match="torch"):
        baselines.admit(contenders, "torch", lambda: torch.zeros(64), torch.ones(64))
    assert contenders == {}

    def custom_check(out):
        raise CheckFailedError("check torch: dQ off by 3%")

    with pytest.raises(CheckFailedError, match="dQ"):
        baselines.admit(contenders, "torch", lambda: torch.ones(4), check=custom_check)
    assert contenders == {}


def test_admit_needs_exactly_one_way_to_check():
    with pytest.raises(ValueError, match="exactly one"):
        baselines.admit({}, "x", lambda: 1)
    with pytest.raises(ValueError, match="exactly one"):
        baselines.admit({}, "x", lambda: 1, torch.ones(1), check=lambda out: None)


def test_the_warnings_a_refusing_backend_gives_join_its_reason_and_a_running_ones_are_kept(capsys):
    import warnings

    def refuses():
        warnings.warn(
            "Memory efficient kernel not used because: (Triggered internally at /pytorch/aten/x.cpp:986.)", stacklevel=1
        )
        warnings.warn("head dims of q and v differ\nat /tmp/staging/x.py", stacklevel=1)
        raise RuntimeError("No available kernel. Aborting execution.")

    why = baselines.admit({}, "efficient", refuses, torch.ones(2))
    assert why == (
        "RuntimeError: No available kernel. Aborting execution. "
        "(Memory efficient kernel not used because: head dims of q and v differ)"
    )
    assert "/tmp/staging" not in capsys.readouterr().out

    def warns_and_runs():
        warnings.warn("slow path", UserWarning, stacklevel=1)
        return torch.ones(2)

    with pytest.warns(UserWarning, match="slow path"):
        assert baselines.admit({}, "ok", warns_and_runs, torch.ones(2)) is None


def test_a_forced_sdpa_backend_runs_only_that_backend():
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    attend = baselines.forced_sdpa(SDPBackend.MATH, is_causal=True, scale=0.5)
    torch.testing.assert_close(attend(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5))
    with pytest.raises(RuntimeError):  # no cuDNN attention on the CPU: refused, not replaced by another
        baselines.forced_sdpa(SDPBackend.CUDNN_ATTENTION, is_causal=True)(q, k, v)


@pytest.mark.parametrize("as_mapping", [False, True])
def test_a_training_step_leaves_exactly_one_steps_gradients(as_mapping):
    x0, w0 = torch.randn(4, 3), torch.randn(3, 2)
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    grad_out = torch.ones(4, 2)
    if as_mapping:
        step = baselines.training_step(lambda a, b: a @ b, {"a": x, "b": w}, grad_out)
    else:
        step = baselines.training_step(lambda a, b: a @ b, [x, w], grad_out)
    out = step()
    step()  # a second step: gradients are this step's, not two steps' sum
    torch.testing.assert_close(out, x0 @ w0)
    torch.testing.assert_close(x.grad, grad_out @ w0.T)
    torch.testing.assert_close(w.grad, x0.T @ grad_out)


def test_a_check_that_returns_several_results_prints_each(capsys):
    results = ["check dQ: PASS", "check dK: PASS"]
    assert baselines.admit({}, "flash", lambda: 1, check=lambda out: results) is None
    assert capsys.readouterr().out.splitlines() == results


def test_a_refusal_keeps_the_forced_backends_own_reason_cut_at_a_word(capsys):
    import warnings

    def refuses():
        warnings.warn("Memory efficient kernel not used because:", stacklevel=1)
        warnings.warn("Memory Efficient attention has been runtime disabled.", stacklevel=1)
        warnings.warn("Flash attention kernel not used because:", stacklevel=1)
        warnings.warn(
            "Flash attention requires q,k,v to have the same last dimension " + "and more " * 40, stacklevel=1
        )
        raise RuntimeError("No available kernel. Aborting execution.")

    why = baselines.admit({}, "flash", refuses, torch.ones(2))
    assert "runtime disabled" not in why  # a consequence of forcing one backend, not its reason
    assert why.startswith(
        "RuntimeError: No available kernel. Aborting execution. "
        "(Flash attention kernel not used because: Flash attention requires q,k,v"
    )  # the efficient backend's header went with its forced-off reason
    reason = why[why.index("(") + 1 : -1]
    assert reason.endswith("…") and len(reason) <= 240 and reason[:-1].split()[-1] in ("and", "more")  # whole words


def _scaled_sine(x, scale):
    return (x * scale).sin()


def test_a_function_compiled_at_more_shapes_than_dynamos_default_is_compiled_every_time(monkeypatch):
    """Nine compiles of one function, as plot_04 makes (a base compile and eight sweep sizes): Dynamo's
    default limit of 8 ran the ninth in eager. Each one now compiles; past the raised limit, it raises."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    # Dynamo's defaults, whatever ran before; its own patch restores them (pytest's monkeypatch would
    # delete the entries of Dynamo's config module on undo).
    with torch._dynamo.config.patch(recompile_limit=8, fail_on_recompile_limit_hit=False):
        torch._dynamo.reset()
        counters.clear()
        for n in range(1, 11):
            x = torch.randn(n)
            compiled = baselines.compile_quietly(_scaled_sine, mode="default", dynamic=False)
            assert torch.allclose(compiled(x, 2.0), _scaled_sine(x, 2.0))
        assert counters["frames"]["ok"] == 10  # all ten compiled, none run eager
        assert torch._dynamo.config.fail_on_recompile_limit_hit
        monkeypatch.setattr(baselines, "RECOMPILE_LIMIT", 10)
        torch._dynamo.config.recompile_limit = 10
        with pytest.raises(Exception, match="recompile_limit|Hard failure"):
            baselines.compile_quietly(_scaled_sine, mode="default", dynamic=False)(torch.randn(11), 2.0)
    torch._dynamo.reset()


def test_a_backward_is_admitted_checked_and_timed_without_its_forward(capsys):
    calls = {"forward": 0}

    def forward(x, w):
        calls["forward"] += 1
        return x * w

    x, w, grad_out = torch.randn(4), torch.randn(4), torch.randn(4)
    seen = []
    contenders = {}
    why = baselines.admit_backward(contenders, "torch backward", forward, (x, w), grad_out, check=seen.append)
    assert why is None and calls["forward"] == 1
    (dx, dw) = seen[0]
    torch.testing.assert_close(dx, grad_out * w)
    torch.testing.assert_close(dw, grad_out * x)
    again = contenders["torch backward"]()  # the timed call: the backward alone, repeatable
    assert calls["forward"] == 1
    torch.testing.assert_close(again[0], dx)
    assert contenders["torch backward"]()[1].shape == w.shape
    assert capsys.readouterr().out == ""  # the check printed nothing; it returned None


def test_a_backward_that_cannot_run_is_said_and_a_wrong_one_stops_the_page(capsys):
    def refuses(x):
        raise RuntimeError("No available kernel.\nsecond line")

    contenders = {}
    why = baselines.admit_backward(contenders, "flash backward", refuses, (torch.ones(2),), torch.ones(2), check=print)
    assert why == "RuntimeError: No available kernel." and contenders == {}
    assert capsys.readouterr().out.strip() == "flash backward: unavailable here (RuntimeError)"

    def wrong(grads):
        raise CheckFailedError("check dQ failed")

    with pytest.raises(CheckFailedError, match="dQ"):
        baselines.admit_backward(contenders, "x", lambda t: t * 2, (torch.ones(2),), torch.ones(2), check=wrong)
    assert contenders == {}


def test_a_synchronized_step_waits_for_the_gpu_after_each_call(monkeypatch):
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: events.append("sync"))
    call = baselines.synchronized(lambda: events.append("step"))
    call()
    call()
    assert events == ["step", "sync", "step", "sync"]


def test_each_attention_is_matched_bit_for_bit_against_each_forced_backend():
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    math = baselines.forced_sdpa(SDPBackend.MATH, is_causal=True)
    attends = {
        "math": math,
        "off by a bit": lambda q, k, v: math(q, k, v) * (1 + 2**-20),
        "not causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    }
    found = baselines.sdpa_matches(attends, (q, k, v), [SDPBackend.MATH], is_causal=True)
    assert found == {"math": ["MATH"], "off by a bit": [], "not causal": []}
    with pytest.raises(RuntimeError):  # a forced backend that cannot run raises, as on the page
        baselines.sdpa_matches(attends, (q, k, v), [SDPBackend.CUDNN_ATTENTION], is_causal=True)


def test_a_refusal_says_the_error_and_pytorchs_reasons_once_each():
    # the studies of plot_16 and plot_27 both print a forced backend's refusal with it
    def refuses():
        for message in (
            "Memory efficient kernel not used because:",  # a header whose reason is dropped
            "Flash attention has been runtime disabled.",  # what forcing one backend causes
            "Flash attention kernel not used because:",
            "Flash attention requires q, k, v on CUDA (Triggered internally at /src/sdp_utils.cpp:123.)",
            "Flash attention requires q, k, v on CUDA",  # the same once its location is gone
        ):
            warnings.warn(message, stacklevel=1)
        raise RuntimeError("No available\n kernel.   Aborting.")

    assert baselines.refusal(refuses) == (
        "RuntimeError: No available kernel. Aborting. "
        "(Flash attention kernel not used because: Flash attention requires q, k, v on CUDA)"
    )


def test_a_launch_that_runs_is_no_refusal_and_a_refusal_without_warnings_is_the_error_alone():
    assert baselines.refusal(lambda: 1) is None

    def raises():
        raise ValueError("bad   shape")

    assert baselines.refusal(raises) == "ValueError: bad shape"
