"""PyTorch's causal and sliding-window attention launchers compute the band they are named for, and
check_each checks every launcher before it races, quietly, stopping the page on a wrong one."""

from __future__ import annotations

import pytest
import torch

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import attention_inputs as ai
from cudnn_guide.measure import baselines

FLEX = "PyTorch FlexAttention (compiled)"
OP = "torch.ops.cudnn.sdpa_fwd"
FLASH2 = "PyTorch SDPA, flash backend (FlashAttention-2)"


@pytest.fixture
def on_cpu(monkeypatch):
    """FlexAttention's block mask built on the CPU and ``torch.compile`` left out; the masks made, recorded."""
    import torch.nn.attention.flex_attention as fa

    masks, compiled = [], []
    make = fa.create_block_mask

    def create_block_mask(mask_mod, b, h, q_len, kv_len, **kwargs):
        masks.append((mask_mod, q_len, kv_len))
        return make(mask_mod, b, h, q_len, kv_len, device="cpu")

    def compile(fn, **kwargs):
        compiled.append(kwargs)
        return fn

    monkeypatch.setattr(fa, "create_block_mask", create_block_mask)
    monkeypatch.setattr(torch, "compile", compile)
    return masks, compiled


def _mask_of(mask_mod, seq):
    i = torch.arange(seq)
    return mask_mod(0, 0, i[:, None], i[None, :])


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("left", [None, 40])
def test_band_attention_names_its_launchers_and_masks_the_band(on_cpu, left):
    masks, compiled = on_cpu
    q, k, v = (torch.randn(1, 2, 256, 16, generator=torch.Generator().manual_seed(n)) for n in range(3))
    launchers = baselines.band_attention(q, k, v, left=left)
    assert list(launchers) == ([FLEX, OP, FLASH2] if left is None else [FLEX, OP])  # flash: causal only
    ((mask_mod, q_len, kv_len),) = masks
    assert (q_len, kv_len) == (256, 256) and compiled == [{"fullgraph": True}]
    assert torch.equal(_mask_of(mask_mod, 256), ai.band(256, 256, left=left))
    ref = ai.reference(q, k, v, visible=ai.band(256, 256, left=left))
    assert torch.allclose(launchers[FLEX](), ref, atol=1e-4)
    if left is None:
        assert torch.allclose(launchers[FLASH2](), ref, atol=1e-4)  # PyTorch's flash backend runs on the CPU too


def test_the_frontends_op_gets_the_scale_and_the_window(on_cpu, monkeypatch):
    import cudnn.sdpa.fwd.torch_op  # noqa: F401  (registers the op, which needs a GPU to run)

    calls = []

    class Ops:
        def sdpa_fwd(self, *args, **kwargs):
            calls.append((args[3:], kwargs))
            return ("o", "lse")

    monkeypatch.setattr(torch.ops, "cudnn", Ops())
    q = torch.randn(1, 2, 128, 64)
    baselines.band_attention(q, q, q)[OP]()
    baselines.band_attention(q, q, q, left=32, scale=0.5)[OP]()
    assert calls == [
        ((64**-0.5,), {"is_causal": True, "window_left": -1, "return_lse": False}),
        ((0.5,), {"is_causal": True, "window_left": 32, "return_lse": False}),
    ]


def test_check_each_checks_every_output_quietly_under_its_tagged_name(capsys):
    ref = torch.ones(2, 8)
    results = baselines.check_each({"a": lambda: ref.clone(), "b": lambda: (ref.clone(), None)}, ref, tag="causal")
    assert [r.name for r in results] == ["a, causal", "b, causal"] and all(r.passed for r in results)
    assert baselines.check_each({"a": lambda: ref}, ref)[0].name == "a"
    assert capsys.readouterr().out == ""


def test_check_each_stops_at_a_wrong_output_or_a_launcher_that_raises():
    ref = torch.ones(8)
    with pytest.raises(CheckFailedError, match="b, window"):
        baselines.check_each({"a": lambda: ref, "b": lambda: torch.zeros(8)}, ref, tag="window")

    def refuses():
        raise RuntimeError("no kernel")

    with pytest.raises(RuntimeError, match="no kernel"):  # not "unavailable": this page runs every one
        baselines.check_each({"a": refuses}, ref)
