"""varlen_race: the varlen pages' checks, contenders, references, table rows and sentences on the CPU (the
contenders' kernels faked where they need a GPU); the cuDNN graphs on the GPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import varlen
from cudnn_guide.measure import baselines, fa4
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import varlen_race
from cudnn_guide.studies.varlen_race import FLASH, FLEX, VARLEN_ATTN

LENGTHS = torch.tensor([3, 5, 1, 4], dtype=torch.int32)
CU = F.pad(LENGTHS.cumsum(0), (1, 0)).int()
SPANS = varlen.spans(CU)
H, D = 2, 8
FA4 = "FA4 (test)"


def _packed(seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(int(LENGTHS.sum()), H, D, generator=gen) for _ in range(4))


def _per_sequence(q, k, v):
    """Causal attention of each packed sequence alone, packed T×H×D: the contenders' common answer."""
    out = torch.empty_like(q)
    for b, (a, e) in SPANS:
        seq = [varlen.packed_rows(t, b, a, e) for t in (q, k, v)]
        out[a:e] = F.scaled_dot_product_attention(*seq, is_causal=True)[0].transpose(0, 1)
    return out


def _document(q, k, v):
    """Causal attention within each sequence over the packed tokens seen as 1×H×T×D (FlexAttention's view)."""
    t = q.shape[2]
    visible = varlen.document_causal_mask(LENGTHS, device="cpu")(0, 0, torch.arange(t)[:, None], torch.arange(t)[None])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=visible)


def _expected_o(q, k, v):
    return {"O": [varlen.packed_rows(_per_sequence(q, k, v), b, a, e) for b, (a, e) in SPANS]}


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------


def test_check_sequences_prints_the_worst_sequence_and_returns_nothing_for_admit_to_print(capsys):
    q, k, v, _ = _packed()
    out = _per_sequence(q, k, v)
    out[SPANS[1][1][0]] += 1e-5  # sequence 1 is a little off, within the float32 tolerance
    assert varlen_race.check_sequences("packed", {"O": out}, varlen.packed_rows, _expected_o(q, k, v), SPANS) is None
    assert capsys.readouterr().out.startswith("packed O, seq. 1: rel. error ")


def test_check_sequences_wraps_a_long_name_at_the_line_width_as_a_check_line(capsys):
    from cudnn_guide import check

    q, k, v, _ = _packed()
    out = _per_sequence(q, k, v)
    varlen_race.check_sequences(
        f"{FLASH} backward", {"dq": out}, varlen.packed_rows, {"dq": _expected_o(q, k, v)["O"]}, SPANS
    )
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= check.LINE_WIDTH for line in lines)  # 104 characters on one line as recorded
    assert lines[0].startswith(f"{FLASH} backward dq, seq. ") and lines[0].endswith(":")
    assert lines[-1].startswith("    rel. error ") and lines[-1].endswith(", the worst")


def test_check_sequences_stops_at_a_wrong_sequence():
    q, k, v, _ = _packed()
    out = _per_sequence(q, k, v)
    out[SPANS[2][1][0]] = 0.0
    with pytest.raises(CheckFailedError, match="seq. 2"):
        varlen_race.check_sequences("packed", {"O": out}, varlen.packed_rows, _expected_o(q, k, v), SPANS)


# ---------------------------------------------------------------------------------------------
# The forward page
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lengths", [[4, 1, 2], [4, 0, 0, 2]])
def test_edge_cases_need_exactly_one_zero_length_sequence(lengths):
    with pytest.raises(ValueError, match="exactly one length must be 0"):
        varlen_race.edge_cases(None, None, None, lengths, handle=None)


def _fake_kernels(monkeypatch, *, fa4_ok: bool, has_varlen_attn: bool, calls: list):
    def forced_sdpa(backend, **kw):
        calls.append(("forced_sdpa", backend, kw))
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw)

    def flex_document_attention(lengths, device="cuda"):
        calls.append(("flex", lengths.tolist()))
        return _document

    def torch_varlen_attn(cu_seqlens, max_len):
        calls.append(("varlen_attn", max_len))
        if not has_varlen_attn:
            raise ImportError("No module named 'torch.nn.attention.varlen'")
        return _per_sequence

    def varlen_attention(cu_seqlens, max_len, *, causal, scale=None):
        calls.append(("fa4", max_len, causal, scale))
        return _per_sequence

    monkeypatch.setattr(baselines, "forced_sdpa", forced_sdpa)
    monkeypatch.setattr(varlen, "flex_document_attention", flex_document_attention)
    monkeypatch.setattr(varlen, "torch_varlen_attn", torch_varlen_attn)
    monkeypatch.setattr(varlen, "nested_sdpa_backend", lambda q, k, v: ("picked (test)", "test kernel"))
    monkeypatch.setattr(fa4, "status", lambda: (fa4_ok, "4.0 (test)" if fa4_ok else "not installed (pip …)"))
    monkeypatch.setattr(fa4, "label", lambda: FA4 if fa4_ok else "FlashAttention-4")
    monkeypatch.setattr(fa4, "varlen_attention", varlen_attention)


def test_the_forward_baselines_are_checked_and_join_the_race_in_the_pages_order(monkeypatch, capsys):
    from torch.nn.attention import SDPBackend

    calls = []
    _fake_kernels(monkeypatch, fa4_ok=True, has_varlen_attn=True, calls=calls)
    q, k, v, _ = _packed()
    padded = tuple(varlen.padded(t, SPANS) for t in (q, k, v))
    contenders = {"cuDNN packed (THD)": lambda: None}
    unavailable = varlen_race.admit_forward_baselines(
        contenders, (q, k, v), padded, CU, LENGTHS, _expected_o(q, k, v), SPANS
    )
    nested = "PyTorch nested tensors, test kernel"
    # the nested tensors run PyTorch's own jagged SDPA: this CPU build may refuse it, and it is then said
    assert set(unavailable) <= {nested}
    order = ["cuDNN packed (THD)", FLASH, nested, FLEX, VARLEN_ATTN, f"{FA4}, varlen"]
    assert list(contenders) == [n for n in order if n not in unavailable]
    assert calls == [
        ("forced_sdpa", SDPBackend.FLASH_ATTENTION, {"is_causal": True}),
        ("flex", LENGTHS.tolist()),
        ("varlen_attn", 5),
        ("fa4", 5, True, D**-0.5),
    ]
    out = capsys.readouterr().out
    assert out.startswith("nested tensors: SDPA's dispatch picks picked (test)\n")
    for name in (FLASH, FLEX, VARLEN_ATTN, f"{FA4}, varlen"):
        assert f"{name} O, seq. " in out  # each checked before it is timed
        contenders[name]()


def test_forward_baselines_that_cannot_run_are_said_in_order(monkeypatch):
    _fake_kernels(monkeypatch, fa4_ok=False, has_varlen_attn=False, calls=[])
    q, k, v, _ = _packed()
    padded = tuple(varlen.padded(t, SPANS) for t in (q, k, v))
    contenders = {}
    unavailable = varlen_race.admit_forward_baselines(
        contenders, (q, k, v), padded, CU, LENGTHS, _expected_o(q, k, v), SPANS
    )
    assert list(unavailable)[:2] == [VARLEN_ATTN, "FlashAttention-4"]
    assert unavailable[VARLEN_ATTN] == "No module named 'torch.nn.attention.varlen'"
    assert unavailable["FlashAttention-4"] == "not installed (pip …)"
    assert VARLEN_ATTN not in contenders and not any(n.startswith("FlashAttention-4") for n in contenders)


def test_a_wrong_forward_baseline_stops_the_page(monkeypatch):
    _fake_kernels(monkeypatch, fa4_ok=False, has_varlen_attn=False, calls=[])
    monkeypatch.setattr(varlen, "flex_document_attention", lambda lengths, device="cuda": lambda q, k, v: q)
    q, k, v, _ = _packed()
    padded = tuple(varlen.padded(t, SPANS) for t in (q, k, v))
    with pytest.raises(CheckFailedError, match=FLEX):
        varlen_race.admit_forward_baselines({}, (q, k, v), padded, CU, LENGTHS, _expected_o(q, k, v), SPANS)


def _v(value, verdict):
    return {"value": value, "low": value - 0.02, "high": value + 0.02, "verdict": verdict}


def _comparison(candidate, ms, versus):
    """A comparison whose every round took ``ms[name]`` milliseconds."""
    medians = {n: [t] * 7 for n, t in ms.items()}
    measured = {n: Measurement(n, [t] * 7, "cold", flops=1e9) for n, t in ms.items()}
    return Comparison(candidate, 7, measured, medians, versus, 0.01)


def _forward_race(padded_ms=0.3, padded_verdict="faster", fa4_ms=0.25):
    ms = {"cuDNN packed (THD)": 0.2, "cuDNN padding mask": padded_ms, FLASH: 0.5, f"{FA4}, varlen": fa4_ms}
    versus = {
        "cuDNN padding mask": _v(padded_ms / 0.2, padded_verdict),
        FLASH: _v(2.5, "faster"),
        f"{FA4}, varlen": _v(fa4_ms / 0.2, "faster" if fa4_ms > 0.2 else "slower"),
    }
    return _comparison("cuDNN packed (THD)", ms, versus)


def _forward_conclusions(result, poison_left=1.0, unavailable=None):
    return varlen_race.forward_conclusions(
        result,
        LENGTHS,
        heads=H,
        head_dim=D,
        zero_len_poison_left=poison_left,
        unavailable=unavailable or {},
        fa4_label=FA4,
    )


def test_the_forward_conclusions_compute_the_padding_work_and_the_verdicts():
    result = _forward_race()
    sentences = _forward_conclusions(result, unavailable={VARLEN_ATTN: "ImportError: no varlen"})
    squares = 9 + 25 + 1 + 16  # Σ n²; B·S_max² = 4·25 = 100
    assert sentences[0] == (
        f"Padding to the longest sequence (S_max = 5) would do {100 / squares:.2f}× the attention work of the real "
        f"tokens: causal work grows with each length squared, so the ratio is B·S_max² / Σ n² = 4·5² / {squares} = "
        f"100 / {squares}, over the lengths [3, 5, 1, 4] (in tokens, 13 real of 20 slots)."
    )
    avoided = (100 / squares - 1.5) / (100 / squares - 1)
    assert sentences[1] == (
        f"The padded cuDNN graph with a padding mask takes 1.50× the packed graph's time for {100 / squares:.2f}× "
        f"the work, between a full skip (1×) and none ({100 / squares:.2f}×): the padding mask avoids about "
        f"{avoided:.0%} of the padding's extra time, not all of it."
    )
    assert sentences[2] == (
        f"The packed cuDNN graph, in this run: against the fastest contender it is "
        f"{result.describe(f'{FA4}, varlen')}; against the padded tensors with a padding mask it is "
        f"{result.describe('cuDNN padding mask')}."
    )
    assert sentences[2].count(f"{FA4}, varlen") == 1
    assert sentences[3] == (
        "A zero-length sequence: 100% of its output slots still held the poison after the call (cuDNN does not "
        "write them: zero them yourself if anything reads them); a one-token sequence is checked like any other."
    )
    # FlashAttention-4 is the fastest, named in sentences[2]: no bullet repeats it
    assert sentences[4:] == [f"* Not available here: {VARLEN_ATTN}: ImportError: no varlen"]


def test_flashattention4_gets_its_own_bullet_where_it_is_not_the_fastest():
    result = _forward_race(padded_ms=0.21, fa4_ms=0.4)
    assert result.best_baseline == "cuDNN padding mask"
    sentences = _forward_conclusions(result, poison_left=0.5)
    assert sentences[-1] == f"* In this run, cuDNN is {result.describe(f'{FA4}, varlen')}."
    assert sentences[-1].count(f"{FA4}, varlen") == 1
    assert "0.50×" not in sentences[3] and sentences[3].startswith("A zero-length sequence: 50% of its output")
    assert "(cuDNN does not write them" not in sentences[3]


@pytest.mark.parametrize(
    "padded_ms, verdict, says",
    [
        (0.2, "tie", "so the padding costs no measurable time: its tiles are skipped."),
        (0.19, "slower", "so the padding costs no measurable time: its tiles are skipped."),
        (0.5, "faster", "no less than the extra work: this timing shows no padding skipped."),
    ],
)
def test_the_padding_sentence_says_whether_padded_tiles_are_skipped(padded_ms, verdict, says):
    sentences = _forward_conclusions(_forward_race(padded_ms=padded_ms, padded_verdict=verdict))
    assert sentences[1].endswith(says)


# ---------------------------------------------------------------------------------------------
# The backward page
# ---------------------------------------------------------------------------------------------


def test_the_backward_baselines_are_made_in_order_with_their_layouts(monkeypatch):
    from torch.nn.attention import SDPBackend

    calls = []
    _fake_kernels(monkeypatch, fa4_ok=True, has_varlen_attn=True, calls=calls)
    paths, unavailable = varlen_race.backward_baselines(CU, LENGTHS, head_dim=D)
    assert unavailable == {}
    assert {n: layout for n, (_, layout) in paths.items()} == {
        f"{FLASH} backward": "padded",
        "FlexAttention, document mask, backward": "bhsd",
        "PyTorch varlen_attn backward": "packed",
        f"{FA4}, varlen backward": "packed",
    }
    assert list(paths) == [
        f"{FLASH} backward",
        f"{FLEX}, backward",
        f"{VARLEN_ATTN} backward",
        f"{FA4}, varlen backward",
    ]
    assert calls == [
        ("forced_sdpa", SDPBackend.FLASH_ATTENTION, {"is_causal": True}),
        ("flex", LENGTHS.tolist()),
        ("varlen_attn", 5),
        ("fa4", 5, True, D**-0.5),
    ]


def test_backward_baselines_that_cannot_run_are_said_in_order(monkeypatch):
    _fake_kernels(monkeypatch, fa4_ok=False, has_varlen_attn=False, calls=[])
    paths, unavailable = varlen_race.backward_baselines(CU, LENGTHS, head_dim=D)
    assert list(paths) == [f"{FLASH} backward", f"{FLEX}, backward"]
    assert unavailable == {
        "PyTorch varlen_attn backward": "No module named 'torch.nn.attention.varlen'",
        "FlashAttention-4": "not installed (pip …)",
    }


def test_reference_grads_are_each_sequences_own_fp32_autograd():
    q, k, v, d_o = (t.to(torch.bfloat16) for t in _packed(1))
    grads = varlen_race.reference_grads((q, k, v), d_o, SPANS)
    assert list(grads) == ["dq", "dk", "dv"] and all(len(g) == len(SPANS) for g in grads.values())
    for b, (a, e) in SPANS:
        leaf = [t[a:e].transpose(0, 1)[None].float().requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaf, is_causal=True)
        out.backward(d_o[a:e].transpose(0, 1)[None].float())
        for n, t in zip(grads, leaf):
            assert grads[n][b].dtype == torch.float32 and grads[n][b].shape == (1, H, e - a, D)
            torch.testing.assert_close(grads[n][b], t.grad)


def _backward_setup():
    q, k, v, d_o = _packed(2)
    padded = tuple(varlen.padded(t, SPANS) for t in (q, k, v))
    layouts = dict(packed=(q, k, v), padded=padded, d_o=d_o, d_o_padded=varlen.padded(d_o, SPANS))
    return layouts, varlen_race.reference_grads((q, k, v), d_o, SPANS)


def test_each_autograd_backward_is_checked_in_its_layout_then_admitted(capsys):
    def padded_causal(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def refuses(q, k, v):
        raise RuntimeError("No available kernel. Aborting execution.")

    paths = {
        "padded": (padded_causal, "padded"),
        "document": (_document, "bhsd"),
        "refused": (refuses, "packed"),
        "packed": (_per_sequence, "packed"),
    }
    layouts, expected = _backward_setup()
    contenders = {"cuDNN": lambda: None}
    unavailable = varlen_race.admit_autograd(contenders, paths, **layouts, expected=expected, spans=SPANS)
    assert list(contenders) == ["cuDNN", "padded", "document", "packed"]
    assert unavailable == {"refused": "RuntimeError: No available kernel. Aborting execution."}
    out = capsys.readouterr().out
    for name in ("padded", "document", "packed"):
        assert f"{name} d" in out and ", the worst" in out
        dq, dk, dv = contenders[name]()  # the backward alone, from the retained graph
        assert dq.shape == dk.shape == dv.shape


def test_a_wrong_gradient_stops_the_page_and_an_unknown_layout_is_refused():
    layouts, expected = _backward_setup()
    with pytest.raises(CheckFailedError, match="twice"):
        varlen_race.admit_autograd(
            {},
            {"twice": (lambda q, k, v: 2 * _per_sequence(q, k, v), "packed")},
            **layouts,
            expected=expected,
            spans=SPANS,
        )
    with pytest.raises(ValueError, match="'thd'"):
        varlen_race.admit_autograd({}, {"x": (_per_sequence, "thd")}, **layouts, expected=expected, spans=SPANS)


CONTROL = "cuDNN padding mask backward (control)"


def _backward_race(fa4_ms):
    ms = {"cuDNN packed (THD) backward": 0.8, CONTROL: 0.9, FLASH + " backward": 1.5, f"{FA4}, varlen backward": fa4_ms}
    versus = {
        CONTROL: _v(0.9 / 0.8, "faster"),
        FLASH + " backward": _v(1.5 / 0.8, "faster"),
        f"{FA4}, varlen backward": _v(fa4_ms / 0.8, "faster" if fa4_ms > 0.8 else "slower"),
    }
    return _comparison("cuDNN packed (THD) backward", ms, versus)


def test_the_backward_conclusions_name_flashattention4_once_where_it_is_the_fastest():
    result = _backward_race(fa4_ms=0.7)
    sentences = varlen_race.backward_conclusions(result, {"PyTorch varlen_attn backward": "no varlen"}, fa4_label=FA4)
    fa4_name = f"{FA4}, varlen backward"
    assert result.best_baseline == fa4_name  # the control is left out
    assert sentences == [
        f"Backward (dQ, dK, dV) on the packed layout: 800 µs; in this run, against the fastest contender it is "
        f"{result.describe(fa4_name)}; against the padded layout with a padding mask it is "
        f"{result.describe(CONTROL)}.",
        "* Not available here: PyTorch varlen_attn backward: no varlen",
    ]
    assert sentences[0].count(fa4_name) == 1  # plot_32 named it twice


def test_the_backward_conclusions_give_flashattention4_a_bullet_where_another_is_faster():
    result = _backward_race(fa4_ms=2.0)
    sentences = varlen_race.backward_conclusions(result, {}, fa4_label=FA4)
    assert result.best_baseline == FLASH + " backward"
    assert sentences[0].count(f"{FLASH} backward") == 1
    fa4_name = f"{FA4}, varlen backward"
    assert sentences[1:] == [f"* In this run, cuDNN is {result.describe(fa4_name)}."]


def test_a_loop_verdict_gives_its_tie_band_once():
    result = _backward_race(fa4_ms=0.7)
    result.wall = _backward_race(fa4_ms=0.7)
    sentences = varlen_race.backward_conclusions(result, {}, fa4_label=FA4)
    assert sentences[0].count("loop tie band") == 2  # one per verdict: the fastest's and the control's


def test_timing_rows_give_each_contenders_time_and_useful_rate():
    rows = varlen_race.timing_rows(_backward_race(fa4_ms=2.0))
    assert [r["implementation"] for r in rows] == [
        "cuDNN packed (THD) backward",
        CONTROL,
        FLASH + " backward",
        f"{FA4}, varlen backward",
    ]
    assert list(rows[0]) == ["implementation", "µs", "useful TFLOP/s"]
    assert rows[0]["µs"] == pytest.approx(800) and rows[0]["useful TFLOP/s"] == pytest.approx(1e9 / 0.8e-3 / 1e12)


# ---------------------------------------------------------------------------------------------
# On the GPU: the cuDNN graphs
# ---------------------------------------------------------------------------------------------


def _gpu_problem():
    import cudnn

    handle = cudnn.create_handle()
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    lengths = torch.tensor([70, 5, 128, 33], dtype=torch.int32)
    cu = F.pad(lengths.cumsum(0), (1, 0)).int().cuda()
    spans = varlen.spans(cu)
    gen = torch.Generator(device="cuda").manual_seed(0)
    t = int(lengths.sum())
    q, k, v, d_o = (torch.randn(t, 4, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    seq_lens = lengths.cuda().reshape(-1, 1, 1, 1)
    offsets = (cu.long() * 4 * 64).reshape(-1, 1, 1, 1)
    return handle, lengths, spans, (q, k, v, d_o), seq_lens, offsets


@pytest.mark.gpu
def test_the_padded_forward_and_the_edge_cases_run_and_check_on_the_gpu(capsys):
    handle, lengths, spans, (q, k, v, _), seq_lens, _ = _gpu_problem()
    ref = torch.empty(q.shape, device="cuda")
    for b, (a, e) in spans:
        seq = [varlen.packed_rows(t, b, a, e).float() for t in (q, k, v)]
        ref[a:e] = F.scaled_dot_product_attention(*seq, is_causal=True)[0].transpose(0, 1)
    expected = {"O": [varlen.packed_rows(ref, b, a, e) for b, (a, e) in spans]}
    padded = [varlen.padded(t, spans) for t in (q, k, v)]
    run = varlen_race.padded_forward(*padded, seq_lens, expected, spans, handle=handle)
    run()
    left = varlen_race.edge_cases(*padded, [128, 1, 0, 37], handle=handle)
    assert 0.0 <= left <= 1.0
    out = capsys.readouterr().out
    assert "padding mask O, seq. " in out and "padded rows past each length: " in out
    assert "sequence 2, 0 tokens: " in out and "sequence 1, 1 tokens: rel. error" in out


@pytest.mark.gpu
def test_the_cudnn_backward_pair_checks_its_gradients_on_the_gpu(capsys):
    handle, lengths, spans, (q, k, v, d_o), seq_lens, offsets = _gpu_problem()
    expected = varlen_race.reference_grads((q, k, v), d_o, spans)
    packed = varlen_race.cudnn_backward(
        "packed", (q, k, v, d_o), seq_lens, offsets, varlen.packed_rows, expected, spans, handle=handle, max_len=128
    )
    padded = [varlen.padded(t, spans) for t in (q, k, v, d_o)]
    control = varlen_race.cudnn_backward(
        "padded", padded, seq_lens, None, varlen.padded_rows, expected, spans, handle=handle, max_len=128
    )
    packed(), control()
    out = capsys.readouterr().out
    assert "packed d" in out and "padded d" in out
