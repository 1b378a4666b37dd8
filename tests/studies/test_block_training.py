"""block_training: the block page's FA4 check, SDPA kernel probe, output copies, tables and conclusions.

The check, the probe and the copies run here on the CPU with stand-ins (a check that passes or raises,
PyTorch's ``sdpa_matches`` recording what it was given, a CPU attention in place of the cuDNN op); the
tables and the conclusions read real ``Comparison`` objects with fixed rounds, judged like for like
with ``compare.rejudged`` as the page judges them.
"""

from __future__ import annotations

import re
import statistics

import pytest
import torch
import torch.nn.functional as F

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import block
from cudnn_guide.measure import baselines, compare
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement, per_second
from cudnn_guide.report.prose import listed, loop_note, sdpa_kernel_note
from cudnn_guide.studies import block_training

FA4 = "FlashAttention-4 (flash-attn-4 4.0.0b36)"
FA4_EAGER = f"{FA4}, eager"
CAND, EAGER = "cuDNN op, compiled", "cuDNN op, eager"
COMPILED = "PyTorch, compiled (default mode)"
TORCH = "PyTorch eager"

# -- the FlashAttention-4 block's check -------------------------------------------------------------


def test_a_fa4_block_that_passes_its_check_is_timed(capsys):
    seen = []
    assert block_training.check_fa4_block(lambda m, name: seen.append((m, name)), "model", FA4) is None
    assert seen == [("model", f"block with {FA4}")]
    assert capsys.readouterr().out == ""


def test_a_fa4_block_that_cannot_run_is_said_with_the_first_line_of_its_error(capsys):
    def cannot_run(model, name):
        raise RuntimeError("no kernel for this head dim " + "x" * 200 + "\nsecond line")

    why = block_training.check_fa4_block(cannot_run, "model", FA4)
    assert why == "RuntimeError: " + ("no kernel for this head dim " + "x" * 200)[:160]
    assert capsys.readouterr().out == f"{FA4}: unavailable here ({why})\n"


def test_a_fa4_block_whose_error_has_no_message_is_still_said(capsys):
    def cannot_run(model, name):
        raise AssertionError

    assert block_training.check_fa4_block(cannot_run, "model", FA4) == "AssertionError: "
    assert "unavailable here" in capsys.readouterr().out


def test_a_fa4_block_that_computes_a_wrong_result_stops_the_page():
    def wrong(model, name):
        raise CheckFailedError(f"check {name}: output failed")

    with pytest.raises(CheckFailedError, match=re.escape(f"block with {FA4}")):
        block_training.check_fa4_block(wrong, "model", FA4)


# -- which kernel PyTorch's SDPA runs, and which blocks copy the attention output ---------------------


def test_the_sdpa_probe_draws_its_inputs_from_the_generator_and_forces_each_backend(monkeypatch, capsys):
    from torch.nn.attention import SDPBackend

    seen = {}

    def sdpa_matches(attends, inputs, backends, **kw):
        seen.update(attends=attends, inputs=inputs, backends=backends, kw=kw)
        return {"eager": ["CUDNN_ATTENTION"], "compiled": []}

    monkeypatch.setattr(baselines, "sdpa_matches", sdpa_matches)
    gen = torch.Generator().manual_seed(1)
    picked = block_training.default_sdpa_kernels(2, 3, 5, 8, gen, device="cpu")
    assert picked == (["CUDNN_ATTENTION"], [])
    assert seen["backends"] == [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    assert seen["kw"] == {"is_causal": True} and list(seen["attends"]) == ["eager", "compiled"]
    assert seen["attends"]["eager"] is block.torch_attention
    again = torch.Generator().manual_seed(1)
    for t in seen["inputs"]:  # q, k, v in that order, from the same generator
        expected = torch.randn(2, 3, 5, 8, dtype=torch.bfloat16, generator=again)
        assert torch.equal(t, expected) and t.requires_grad and t.is_leaf
    assert capsys.readouterr().out.splitlines() == [
        "PyTorch's default SDPA matches, bit for bit:",
        "  eager: CUDNN_ATTENTION",
        "  compiled: none of the forced backends",
    ]


def test_the_compiled_sdpa_of_the_probe_is_pytorchs_default_causal_sdpa(monkeypatch):
    seen = {}
    monkeypatch.setattr(
        baselines, "sdpa_matches", lambda a, i, b, **kw: seen.update(a=a) or {"eager": [], "compiled": []}
    )
    block_training.default_sdpa_kernels(1, 2, 4, 8, torch.Generator(), device="cpu")
    q, k, v = torch.randn(3, 1, 2, 4, 8)
    torch.testing.assert_close(seen["a"]["compiled"](q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_each_blocks_output_copy_is_found_and_printed_in_order(monkeypatch, capsys):
    monkeypatch.setattr(block, "cudnn_attention", block.torch_attention)  # the op's B×H×S×D output, on the CPU

    def bshd_attention(q, k, v):  # B×S×H×D in and out, as FlashAttention's
        return F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2).contiguous()

    q, k, v = torch.randn(3, 2, 4, 8, 16)
    copied = block_training.output_copies(q, k, v, {FA4: bshd_attention})
    assert copied == {"the cuDNN op": True, "PyTorch SDPA": True, FA4: False}
    assert capsys.readouterr().out.splitlines() == [
        "the cuDNN op: the output's reshape is a copy",
        "PyTorch SDPA: the output's reshape is a copy",
        f"{FA4}: the output's reshape is a view",
    ]
    assert list(block_training.output_copies(q, k, v, {})) == ["the cuDNN op", "PyTorch SDPA"]


# -- the tables -------------------------------------------------------------------------------------


def _race(ms, *, host_ms=None, flops=1e12, candidate=CAND):
    """A comparison whose rounds took ``ms[name]`` milliseconds (one per round), judged like for like later."""
    medians = {n: list(t) for n, t in ms.items()}
    measured = {
        n: Measurement(n, list(t), "cold", flops=flops, host_samples_ms=[host_ms[n]] if host_ms else [])
        for n, t in ms.items()
    }
    return Comparison(candidate, len(next(iter(ms.values()))), measured, medians, {}, 0.02)


def _steps(with_fa4=True, cand=(10.0, 10.2, 9.9, 10.1, 10.0)):
    ms = {
        CAND: list(cand),
        EAGER: [11.0, 11.1, 11.0, 10.9, 11.2],
        COMPILED: [10.5, 10.4, 10.6, 10.5, 10.5],
        TORCH: [12.0, 12.1, 11.9, 12.0, 12.2],
    }
    if with_fa4:
        ms[FA4_EAGER] = [10.8, 10.8, 10.9, 10.7, 10.8]
    host = {n: 2.0 for n in ms} | {EAGER: 14.0}
    result = _race(ms, host_ms=host)
    baselines_ = [n for n in ms if n != CAND]
    result = compare.rejudged(result, CAND, baselines_)
    eager = [TORCH, *([FA4_EAGER] if with_fa4 else [])]
    return result, compare.rejudged(result, EAGER, eager), compare.rejudged(result, CAND, [COMPILED])


def test_the_verdict_table_lists_the_eager_pairs_then_the_compiled_one():
    _, eager, compiled = _steps()
    table = block_training.verdict_table(eager, compiled, "GPU-time speed-up")
    rows = table.data.to_dict("records")
    assert [(r["cuDNN op"], r["against"]) for r in rows] == [(EAGER, TORCH), (EAGER, FA4_EAGER), (CAND, COMPILED)]
    assert list(table.data.columns) == ["cuDNN op", "against", "GPU-time speed-up", "in-run 95% interval", "verdict"]
    assert rows[0]["GPU-time speed-up"] == eager.versus[TORCH]["value"] and rows[0]["verdict"] == "faster"
    assert f"{eager.versus[TORCH]['value']:.2f}×" in table.to_html()
    _, eager, compiled = _steps(with_fa4=False)
    table = block_training.verdict_table(eager, compiled, "wall-clock speed-up")
    assert list(table.data["against"]) == [TORCH, COMPILED]


def test_the_times_table_gives_gpu_host_and_wall_clock_microseconds():
    result, _, _ = _steps()
    wall = _race({n: [2 * t for t in ts] for n, ts in result.round_medians_ms.items()})
    table = block_training.times_table(result, wall, "training step")
    assert list(table.data.columns) == ["training step", "GPU µs", "host µs to enqueue", "wall-clock µs"]
    row = table.data.iloc[1]
    assert row["training step"] == EAGER and row["host µs to enqueue"] == 14000.0
    assert row["wall-clock µs"] == pytest.approx(22000.0)
    assert "14,000" in table.to_html() and "22,000" in table.to_html()


def test_the_throughput_table_is_sorted_fastest_first_with_tokens_per_second_and_peak_memory():
    result, _, _ = _steps()
    peak = {n: 1000.0 + i for i, n in enumerate(result.measurements)}
    table = block_training.throughput_table(result, 16384, peak)
    frame = table.data
    assert list(frame.columns) == ["training step", "ms", "tokens/s", "in-run interval", "TFLOP/s", "peak MiB"]
    assert list(frame["training step"]) == [CAND, COMPILED, FA4_EAGER, EAGER, TORCH]
    first = frame.iloc[0]
    t = per_second(result.estimate(CAND), 16384)
    assert first["ms"] == pytest.approx(10.0) and first["tokens/s"] == pytest.approx(t["value"])
    assert first["in-run interval"] == f"{t['low']:,.0f}–{t['high']:,.0f}"
    assert first["TFLOP/s"] == pytest.approx(100.0) and first["peak MiB"] == 1000.0
    assert ">10.00<" in table.to_html() and ">1,638,400<" in table.to_html()


# -- the conclusions --------------------------------------------------------------------------------


def _conclusions(with_fa4=True, copied=None, why=None, kernels=(["CUDNN_ATTENTION"], ["FLASH_ATTENTION"])):
    result, eager, compiled = _steps(with_fa4)
    wall = _race({n: [1.5 * t for t in ts] for n, ts in result.round_medians_ms.items()})
    wall_eager = compare.rejudged(wall, EAGER, list(eager.versus))
    wall_compiled = compare.rejudged(wall, CAND, [COMPILED])
    peak = {n: 100.0 * (i + 1) for i, n in enumerate(result.measurements)}
    rate = per_second(result.estimate(CAND), 16384)
    sentences = block_training.conclusions(
        result,
        wall,
        eager=(eager, wall_eager, TORCH),
        compiled=(compiled, wall_compiled, COMPILED),
        kernels=kernels,
        fa4=(FA4, why),
        output_copied=copied or {"the cuDNN op": True, "PyTorch SDPA": True},
        output_bytes=8 * 2048 * 2048 * 2,
        rate=rate,
        peak_mib=peak,
    )
    return sentences, (result, eager, compiled, wall, wall_eager, wall_compiled, rate)


def test_the_conclusions_judge_each_pair_on_both_clocks_and_say_rate_host_time_and_memory():
    copied = {"the cuDNN op": True, "PyTorch SDPA": True, FA4: False}
    sentences, (result, eager, compiled, wall, wall_eager, wall_compiled, rate) = _conclusions(copied=copied)
    assert sentences[0] == (
        f"Eager against eager: the block with the cuDNN op is {eager.describe(TORCH)} on GPU time, and "
        f"{wall_eager.describe(TORCH)} on the wall clock. " + sdpa_kernel_note(["CUDNN_ATTENTION"], "eager")
    )
    assert sentences[1] == (
        f"Compiled against compiled: the block with the cuDNN op is {compiled.describe(COMPILED)} on GPU time, "
        f"and {wall_compiled.describe(COMPILED)} on the wall clock. "
        + sdpa_kernel_note(["FLASH_ATTENTION"], "compiled")
    )
    assert sentences[2] == (
        f"Against {FA4} as the block's attention (eager): the block with the cuDNN op is "
        f"{eager.describe(FA4_EAGER)} on GPU time, and {wall_eager.describe(FA4_EAGER)} on the wall clock."
    )
    assert sentences[3] == (
        "The blocks are not copy for copy: each copies Q, K and V once into its attention's layout, but the "
        "attention output's reshape back to B×S×(H·D) is a copy (64 MiB per forward) with "
        f"{listed(['the cuDNN op', 'PyTorch SDPA'])} and a view with {FA4}; the comparisons between them "
        "include that copy."
    )
    assert sentences[4] == (
        f"The compiled block with the cuDNN op trains at {rate['value']:,.0f} tokens/s (in-run interval "
        f"{rate['low']:,.0f}–{rate['high']:,.0f}); torch.compile's own share, the same op eager against "
        f"compiled: the compiled block is {result.describe(EAGER)}."
    )
    assert sentences[5] == "Host time per step against GPU time:"
    assert sentences[6:11] == [loop_note(result, n, wall) for n in result.measurements]
    assert "host 14,000 µs" in sentences[7] and "above GPU time per step" in sentences[7]
    assert sentences[11] == (
        "Peak memory of a step: 100 MiB with the cuDNN op compiled, 200 MiB eager; 400 MiB eager PyTorch, "
        f"300 MiB compiled PyTorch, 500 MiB with {FA4}."
    )
    assert len(sentences) == 12


def test_a_fa4_block_that_was_not_timed_is_said_once_with_its_reason():
    why = "not installed (pip install flash-attn-4)"
    sentences, _ = _conclusions(with_fa4=False, why=why)
    assert sentences[2] == f"{FA4} was not timed in the block: {why}."
    assert not any("as the block's attention" in s for s in sentences)
    assert sentences[-1].endswith("300 MiB compiled PyTorch.")


def test_blocks_that_copy_alike_are_said_alike():
    sentences, _ = _conclusions(copied={"the cuDNN op": True, "PyTorch SDPA": True, FA4: True})
    assert sentences[3] == (
        "Each block copies Q, K and V once into its attention's layout, and the attention output's reshape "
        "back to B×S×(H·D) is a copy in every block."
    )
    sentences, _ = _conclusions(copied={"the cuDNN op": False, "PyTorch SDPA": False})
    assert sentences[3].endswith("is a view in every block.")


def test_the_step_rate_in_the_conclusions_is_the_candidates_median_over_rounds():
    sentences, (result, *_, rate) = _conclusions()
    assert rate["value"] == pytest.approx(16384 / (statistics.median(result.round_medians_ms[CAND]) * 1e-3))
    assert f"{rate['value']:,.0f} tokens/s" in sentences[4]


@pytest.mark.gpu
def test_the_sdpa_probe_and_the_output_copies_run_on_the_gpu(capsys):
    gen = torch.Generator(device="cuda").manual_seed(1)
    picked, picked_compiled = block_training.default_sdpa_kernels(1, 2, 128, 64, gen)
    assert set(picked) <= {"CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"}
    assert set(picked_compiled) <= {"CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"}
    q, k, v = torch.randn(3, 1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)
    copied = block_training.output_copies(q, k, v, {})
    assert list(copied) == ["the cuDNN op", "PyTorch SDPA"] and copied["PyTorch SDPA"] is True
    assert "PyTorch's default SDPA matches, bit for bit:" in capsys.readouterr().out
