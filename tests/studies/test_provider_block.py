"""provider_block: FlashAttention-4's block in the cudnn.torch provider page's race, and what the page says of it.

The contender is built on the CPU from a small real block, checked against its fp32 reference by a
real ``check.ModuleCheck``, with FlashAttention-4 absent (its import fails), present (a fake
``flash_attn_func`` on B×S×H×D tensors), refusing the block, or wrong. The sentences read real
``Comparison`` objects with fixed rounds, as ``compare.compare`` and ``compare_host`` leave them.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from cudnn_guide import check
from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import block
from cudnn_guide.measure import compare, fa4
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import provider_block

FA4 = "FlashAttention-4 (flash-attn-4 4.0.0b36)"
PROVIDER, EAGER = "cudnn.torch provider (eager)", "cuDNN op, eager"
FLASH = "PyTorch eager, flash backend (FlashAttention-2)"
HEADS, HEAD_DIM = 2, 8

# -- FlashAttention-4 absent, present, refusing, wrong ------------------------------------------------


def _page():
    """A small CPU block, its fp32 check and its training step, as the page makes them at full size."""
    torch.manual_seed(0)
    template = block.transformer_block(block.torch_attention, heads=HEADS, head_dim=HEAD_DIM, hidden=32)
    x = torch.randn(2, 6, HEADS * HEAD_DIM)
    dy = torch.randn_like(x)
    check_block = check.ModuleCheck(template, x, dy)
    return template, check_block, lambda model: block.training_step(model, x, dy, lr=1e-5)


def _installed(monkeypatch, flash_attn_func):
    monkeypatch.setattr(fa4, "_load", lambda: (flash_attn_func, "4.0.0b36"))


def test_fa4_absent_is_a_not_installed_line_with_the_install_command_and_no_contender(monkeypatch, capsys):
    monkeypatch.setattr(fa4, "_load", lambda: (None, "ModuleNotFoundError: No module named 'flash_attn'"))

    def never(*args):
        raise AssertionError("nothing is checked or stepped without FlashAttention-4")

    label, steps, why = provider_block.fa4_contender("template", never, never, scale=HEAD_DIM**-0.5)
    assert (label, steps) == ("FlashAttention-4", {})
    assert why == f"not installed ({fa4.INSTALL}): ModuleNotFoundError: No module named 'flash_attn'"
    assert capsys.readouterr().out == f"FlashAttention-4: {why}\n"
    gpu, wall = _races(with_fa4=False)
    said = provider_block.fa4_sentences(gpu, wall, label, why)
    assert said == [f"FlashAttention-4 was not timed in the block: {why}."]
    assert "pip install flash-attn-4==4.0.0b36" in said[0]


def test_fa4_present_is_checked_against_the_same_reference_and_raced_under_its_label(monkeypatch, capsys):
    calls = []

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False):  # B×S×H×D in and out, (out, lse)
        calls.append((tuple(q.shape), softmax_scale, causal))
        out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=causal)
        return out.transpose(1, 2), None

    _installed(monkeypatch, flash_attn_func)
    template, check_block, step = _page()
    label, steps, why = provider_block.fa4_contender(template, check_block, step, scale=HEAD_DIM**-0.5)
    assert (label, list(steps), why) == (FA4, [FA4], None)
    out = capsys.readouterr().out
    assert f"check block with {FA4}: output:" in out and out.count("PASS") == 2  # output, worst gradient
    assert calls[0] == ((2, 6, HEADS, HEAD_DIM), HEAD_DIM**-0.5, True)  # B×S×H×D, causal, the page's scale
    before = len(calls)
    weights = [p.detach().clone() for p in template.parameters()]
    steps[FA4]()  # a training step of its own copy of the block: the template's weights do not move
    assert len(calls) == before + 1
    assert all(torch.equal(w, p) for w, p in zip(weights, template.parameters()))
    gpu, wall = _races(with_fa4=True)
    assert FA4 in gpu.versus and FA4 in wall.versus  # raced with the others, in the same rounds
    assert len(provider_block.fa4_sentences(gpu, wall, label, why)) == 2


def test_a_block_fa4_refuses_is_shown_with_its_error_and_left_out(monkeypatch, capsys):
    def refuses(q, k, v, **kw):
        raise RuntimeError("head_dim 8 is not supported\nmore detail")

    _installed(monkeypatch, refuses)
    template, check_block, step = _page()
    label, steps, why = provider_block.fa4_contender(template, check_block, step, scale=HEAD_DIM**-0.5)
    assert (label, steps, why) == (FA4, {}, "RuntimeError: head_dim 8 is not supported")
    assert capsys.readouterr().out == f"{FA4}: unavailable here ({why})\n"
    gpu, wall = _races(with_fa4=False)
    assert provider_block.fa4_sentences(gpu, wall, label, why) == [
        f"{FA4} was not timed in the block: RuntimeError: head_dim 8 is not supported."
    ]


def test_a_wrong_fa4_block_stops_the_page(monkeypatch):
    _installed(monkeypatch, lambda q, k, v, **kw: torch.zeros_like(q) + 0 * (q + k + v))
    template, check_block, step = _page()
    with pytest.raises(CheckFailedError, match=re.escape(f"check block with {FA4}: output failed")):
        provider_block.fa4_contender(template, check_block, step, scale=HEAD_DIM**-0.5)


# -- what the page says of it -----------------------------------------------------------------------


def _race(ms, candidate=PROVIDER):
    medians = {n: list(t) for n, t in ms.items()}
    measured = {n: Measurement(n, list(t), "cold") for n, t in ms.items()}
    raw = Comparison(candidate, len(next(iter(ms.values()))), measured, medians, {}, 0.02)
    return compare.rejudged(raw, candidate, [n for n in ms if n != candidate])


def _races(with_fa4=True):
    """GPU time: FA4 faster than the provider and FA2, a tie with the cuDNN op; wall clock: slower than the op."""
    gpu = {
        PROVIDER: [11.0, 11.1, 10.9, 11.0, 11.0],
        EAGER: [10.0, 10.1, 9.9, 10.0, 10.0],
        FLASH: [12.0, 12.1, 11.9, 12.0, 12.0],
    }
    wall = {
        PROVIDER: [13.0, 13.1, 12.9, 13.0, 13.0],
        EAGER: [11.0, 11.1, 10.9, 11.0, 11.0],
        FLASH: [14.0, 14.1, 13.9, 14.0, 14.0],
    }
    if with_fa4:
        gpu[FA4] = [10.0, 10.0, 10.0, 10.0, 10.0]
        wall[FA4] = [12.0, 12.0, 12.0, 12.0, 12.0]
    return _race(gpu), _race(wall)


def test_where_fa4_raced_the_provider_is_judged_against_it_on_both_clocks_and_fa4s_wins_are_said():
    gpu, wall = _races()
    first, where = provider_block.fa4_sentences(gpu, wall, FA4, None)
    assert first == (
        f"Against {FA4} as the block's attention (its flash_attn_func, eager, the rest of the block the "
        f"same): the provider's block is {gpu.describe(FA4)} on GPU time, and {wall.describe(FA4)} on "
        "the wall clock."
    )
    assert gpu.describe(FA4).startswith("1.10× slower than " + FA4)  # honest: FA4 is the faster one here
    assert where == (
        f"Where {FA4} is faster, on the same rounds' paired ratios (its speed-up over each other block): "
        f"on GPU time its block is faster than {PROVIDER} (1.10×) and {FLASH} (1.20×), a tie with {EAGER} "
        f"(1.00×); on the wall clock it is faster than {PROVIDER} (1.08×) and {FLASH} (1.17×), slower "
        f"than {EAGER} (0.92×)."
    )


def test_fa4_not_raced_without_a_reason_still_says_so():
    gpu, wall = _races(with_fa4=False)
    assert provider_block.fa4_sentences(gpu, wall, "FlashAttention-4", None) == [
        "FlashAttention-4 was not timed in the block: not raced."
    ]
