"""grouped_query: the GQA page's K/V-cache table, race, sweeps, verdicts and conclusions.

The race runs here on the CPU with stand-ins: the inputs are made on the CPU, the cuDNN graph writes the
reference attention, PyTorch's forced SDPA refuses with a reason (or, in one test, computes the
reference), and ``compare.compare`` only records what it was given. The comparisons read by the sweeps and
the conclusions are real ``Comparison`` objects with fixed rounds.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import attention, attention_inputs
from cudnn_guide.measure import baselines, compare
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import grouped_query as gqa
from cudnn_guide.studies.grouped_query import CACHE, CANDIDATE, SELF

FA4 = "FlashAttention-4 (flash-attn-4 4.0.0b36)"
FA2 = baselines.SDPA_BACKEND_NAMES["PyTorch flash"]


def test_the_kv_cache_table_gives_bytes_per_token_and_the_cache_in_gib():
    rows = gqa.kv_cache_rows(128)
    assert [list(r) for r in rows] == [["K/V heads", "kind", "K/V bytes per token per layer", CACHE]] * 3
    assert [(r["K/V heads"], r["kind"]) for r in rows] == [(32, "MHA"), (8, "GQA"), (1, "MQA")]
    assert [r["K/V bytes per token per layer"] for r in rows] == [16384, 4096, 512]
    assert [r[CACHE] for r in rows] == [16.0, 4.0, 0.5]  # × 32768 tokens × 32 layers
    assert CACHE == "K/V cache, 32k tokens × 32 layers (GiB)"


# --------------------------------------------------------------------------------------------------
# The race, with stand-ins
# --------------------------------------------------------------------------------------------------


class FakeGraph:
    """``sdpa_graph``'s result: ``bind(pack(...))`` gives a launcher that writes the reference into ``o``."""

    def __init__(self, problem, inputs, *, handle, factor=1.0):
        self.problem, self.inputs, self.handle, self.factor = problem, inputs, handle, factor

    def pack(self, **tensors):
        return tensors

    def bind(self, pack):
        def launch():
            q, k, v, o = (pack[n] for n in "qkvo")
            s_q, s_kv = q.shape[2], k.shape[2]
            band = attention_inputs.band(s_q, s_kv) if self.problem.causal else None
            o.copy_(attention_inputs.reference(q, k, v, visible=band) * self.factor)

        return launch


@pytest.fixture
def stand_ins(monkeypatch):
    """CPU inputs, the stand-in graph, a band made on the CPU, and a compare that only records."""
    made, compared = [], []

    def qkv(q_heads, heads, seq, batch, head_dim, seed):
        gen = torch.Generator().manual_seed(seed)
        shapes = ((batch, q_heads, seq, head_dim), (batch, heads, seq, head_dim), (batch, heads, seq, head_dim))
        return [torch.randn(x, generator=gen).to(torch.bfloat16) for x in shapes]

    def sdpa_graph(problem, inputs, *, handle):
        made.append(problem)
        return FakeGraph(problem, inputs, handle=handle)

    band = attention_inputs.band

    def fake_compare(contenders, **kwargs):
        compared.append((list(contenders), kwargs))
        return ("comparison", kwargs["tag"])

    def refusing_sdpa(backend, **kwargs):
        def attend(q, k, v):
            warnings.warn(f"{backend.name} kernel not used because:", stacklevel=1)
            warnings.warn(
                "The stand-in refuses every layout on purpose, with a reason long enough to wrap", stacklevel=1
            )
            raise RuntimeError("No available kernel. Aborting execution.")

        return attend

    monkeypatch.setattr(gqa, "qkv", qkv)
    monkeypatch.setattr(baselines, "forced_sdpa", refusing_sdpa)
    monkeypatch.setattr(attention, "sdpa_graph", sdpa_graph)
    monkeypatch.setattr(attention_inputs, "band", lambda s_q, s_kv, device=None: band(s_q, s_kv))
    monkeypatch.setattr(compare, "compare", fake_compare)
    return made, compared


PHASES = {"prefill": (2, 16, 16), "decode": (3, 1, 32)}


def test_the_race_checks_each_layout_then_compares_it(stand_ins, capsys):
    made, compared = stand_ins
    checks = ["the lesson's"]
    results, kv_bytes = gqa.race(
        "handle", PHASES, q_heads=4, head_dim=8, fa4_name=None, checks=checks, kv_heads=(4, 2, 1)
    )
    keys = [(p, h) for p in ("prefill", "decode") for h in (4, 2, 1)]
    assert list(results) == keys and list(kv_bytes) == keys
    assert results[("decode", 2)] == ("comparison", "decode Hkv=2")
    assert [c.name for c in checks[1:]] == [f"cuDNN {p}, Hkv={h}" for p, h in keys]
    assert [(p.batch, p.heads, p.seq, p.head_dim, p.causal) for p in made[:1] + made[3:4]] == [
        (2, 4, 16, 8, True),
        (3, 4, 32, 8, False),
    ]
    assert kv_bytes[("prefill", 2)] == 2 * (2 * 2 * 16 * 8) * 2  # K and V, bf16
    contenders, kwargs = compared[0]
    assert contenders == [CANDIDATE]  # every backend refused
    assert kwargs == {
        "candidate": CANDIDATE,
        "l2": "cold",
        "rounds": 9,
        "flops": 4 * 2 * 4 * 16 * 16 * 8 / 2,
        "bytes": kv_bytes[("prefill", 4)] + 2 * (2 * 4 * 16 * 8) * 2,
        "tag": "prefill Hkv=4",
    }
    assert compared[3][1]["flops"] == 4 * 3 * 4 * 1 * 32 * 8  # decode: no mask, one query
    printed = capsys.readouterr().out
    assert all(len(line) <= 88 for line in printed.splitlines())
    assert printed.count("\n    ") > 0  # wrapped, the rest indented
    said = " ".join(printed.split())
    for short_name, backend in baselines.sdpa_backends().items():
        name = baselines.SDPA_BACKEND_NAMES[short_name]
        assert said.count(
            f"{name}: unavailable here (RuntimeError: No available kernel. Aborting execution. "
            f"({backend.name} kernel not used because: The stand-in refuses every layout on purpose, "
            "with a reason long enough to wrap))"
        ) == len(keys)


def test_a_backend_that_runs_is_admitted_after_its_check(stand_ins, monkeypatch):
    _, compared = stand_ins
    ran = []

    def forced_sdpa(backend, **kwargs):
        assert kwargs == {"is_causal": True, "enable_gqa": True}

        def attend(q, k, v):
            ran.append(backend)
            band = attention_inputs.band(q.shape[2], k.shape[2])
            return attention_inputs.reference(q, k, v, visible=band).to(q.dtype)

        return attend

    monkeypatch.setattr(baselines, "forced_sdpa", forced_sdpa)
    gqa.race("handle", {"prefill": PHASES["prefill"]}, q_heads=4, head_dim=8, fa4_name=None, checks=[], kv_heads=(2,))
    assert compared[0][0] == [CANDIDATE, *baselines.SDPA_BACKEND_NAMES.values()]
    assert len(ran) == 2 * len(baselines.sdpa_backends())  # once to see that it runs, once for its check


def test_a_wrong_cudnn_output_stops_the_race(stand_ins, monkeypatch):
    monkeypatch.setattr(attention, "sdpa_graph", lambda p, i, handle: FakeGraph(p, i, handle=handle, factor=2.0))
    with pytest.raises(CheckFailedError):
        gqa.race("handle", PHASES, q_heads=4, head_dim=8, fa4_name=None, checks=[], kv_heads=(2,))


def test_fa4_is_raced_when_named(stand_ins, monkeypatch):
    _, compared = stand_ins
    from cudnn_guide.measure import fa4

    def forward(q, k, v, *, causal, scale):
        assert scale == 8**-0.5
        band = attention_inputs.band(q.shape[2], k.shape[2]) if causal else None
        return lambda: attention_inputs.reference(q, k, v, visible=band).to(q.dtype)

    monkeypatch.setattr(fa4, "forward", forward)
    gqa.race("handle", PHASES, q_heads=4, head_dim=8, fa4_name=FA4, checks=[], kv_heads=(2,))
    assert [c[0] for c in compared] == [[CANDIDATE, FA4]] * 2


@pytest.mark.gpu
def test_qkv_gives_q_with_its_heads_and_k_v_with_theirs():
    q, k, v = gqa.qkv(32, 8, seq=64, batch=2, head_dim=128, seed=8)
    assert q.shape == (2, 32, 64, 128) and k.shape == v.shape == (2, 8, 64, 128)
    assert q.dtype == torch.bfloat16 and q.is_cuda
    assert torch.equal(gqa.qkv(32, 8, seq=64, batch=2, head_dim=128, seed=8)[1], k)


# --------------------------------------------------------------------------------------------------
# Sweeps, verdicts and conclusions
# --------------------------------------------------------------------------------------------------


def _v(value, verdict):
    return {"value": value, "low": value - 0.05, "high": value + 0.05, "verdict": verdict}


def _comparison(ms, versus, *, host=None, wall=None):
    medians = {n: [t] * 7 for n, t in ms.items()}
    measured = {
        n: Measurement(n, [t] * 3, "cold", bytes=1e6, host_samples_ms=list((host or {}).get(n, [])))
        for n, t in ms.items()
    }
    return Comparison(CANDIDATE, 7, measured, medians, versus, 0.01, wall=wall)


def _results(decode_ms=(0.04, 0.012, 0.004)):
    out = {}
    for phase in ("prefill", "decode"):
        for heads, ms in zip((32, 8, 1), decode_ms if phase == "decode" else (1.0, 1.0, 1.0)):
            out[(phase, heads)] = _comparison(
                {CANDIDATE: ms, FA2: ms * 1.2, SELF: ms, FA4: ms * 0.95},
                {FA2: _v(1.2, "faster"), SELF: _v(1.0, "tie"), FA4: _v(0.95, "slower")},
            )
    return out


KV_BYTES = {(p, h): 2 * 32 * h * 8192 * 128 * 2 for p in ("prefill", "decode") for h in (32, 8, 1)}


def test_each_phase_reads_as_one_sweep_over_the_kv_heads():
    sweeps = gqa.by_phase(_results())
    assert list(sweeps) == ["prefill", "decode"]
    decode = sweeps["decode"]
    assert decode.x == "K/V heads" and list(decode.comparisons) == [32, 8, 1]
    assert [m.params["K/V heads"] for m in decode.measurements] == [32] * 4 + [8] * 4 + [1] * 4
    rows = gqa.phase_verdicts(sweeps)
    assert len(rows) == 2 * 3 * 3
    assert rows[0] == {"phase": "prefill", **sweeps["prefill"].verdicts()[0]}
    assert [r["phase"] for r in rows] == ["prefill"] * 9 + ["decode"] * 9


def test_the_fastest_other_leaves_out_cudnn_itself_and_controls():
    c = _comparison(
        {CANDIDATE: 1, SELF: 0.9, "a (control x)": 0.5, FA2: 1.1},
        {SELF: _v(0.9, "slower"), "a (control x)": _v(0.5, "slower"), FA2: _v(1.1, "faster")},
    )
    assert gqa.fastest_other(c) == FA2
    assert gqa.fastest_other(_comparison({CANDIDATE: 1, SELF: 1}, {SELF: _v(1.0, "tie")})) is None
    assert gqa.median_us(c, SELF) == pytest.approx(900)


def test_the_fastest_is_the_graph_or_the_lead_with_those_tied():
    none_beat = _comparison({}, {"A": _v(1.2, "faster"), "B": _v(1.0, "tie")})
    assert gqa.fastest(none_beat) == (CANDIDATE, ["B"])
    tied_lead = _comparison({}, {"A": _v(0.98, "tie"), "B": _v(1.01, "tie"), "C": _v(1.5, "faster")})
    assert gqa.fastest(tied_lead) == ("A", [CANDIDATE, "B"])
    clear_lead = _comparison({}, {"A": _v(0.8, "slower"), "B": _v(1.0, "tie")})
    assert gqa.fastest(clear_lead) == ("A", [])
    assert gqa.fastest(_comparison({}, {"x (control y)": _v(0.5, "slower")})) == (CANDIDATE, [])


def test_short_names_and_times_in_words():
    assert gqa.short(CANDIDATE) == "the cuDNN graph" and gqa.short(FA4) == "FlashAttention-4"
    assert (
        gqa.short("PyTorch SDPA, flash backend (FlashAttention-2)") == "PyTorch SDPA, flash backend (FlashAttention-2)"
    )
    assert [gqa.times(r) for r in (3.33, 1.004, 0.25)] == ["3.3× less time", "the same time", "4.0× more time"]


def test_the_conclusions_count_and_describe_every_layout():
    said = gqa.conclusions(_results(), KV_BYTES, fa4_name=FA4, fa4_ok=True, fa4_detail="4.0.0b36")
    assert said[0] == (
        "Decode reads 4× fewer K/V bytes with 8 K/V heads than with 32: the cuDNN graph takes 40.0 µs with 32 "
        "K/V heads, 12.0 µs with 8 and 4.0 µs with 1 (with 8: 3.3× less time; with 1: 10.0× less time; each "
        "against 32; medians over all timed calls)."
    )
    assert said[1] == (
        "Prefill does the same arithmetic with 32, 8 or 1 K/V heads: the cuDNN graph takes 1000.0, 1000.0 and "
        "1000.0 µs for 32, 8 and 1 K/V heads (the prefill table's medians)."
    )
    assert said[2] == (
        "By the comparisons' speed-ups in this run, the fastest implementation of the 6 layouts was: "
        "FlashAttention-4 in 6. Against the fastest other implementation of each layout (PyTorch SDPA, cuDNN backend: "
        "cuDNN's own kernel, not counted), the cuDNN graph is, in this run, faster in 0, ties in 0 and is "
        "slower in 6 of 6 layouts."
    )
    assert said[3] == (
        f"Against {FA4} alone, the cuDNN graph is, in this run, faster in 0, ties in 0 and is slower in 6 of 6 layouts."
    )
    assert len(said) == 4 + 6  # no loop: one line per layout follows
    assert said[4].startswith(
        "* prefill, 32 K/V heads, in this run: fastest was FlashAttention-4 (950.0 µs); against the fastest"
    )
    assert said[4].endswith("; against PyTorch SDPA, cuDNN backend: tie (1.00×).")
    assert f"the cuDNN graph is {_results()[('prefill', 32)].describe(FA4)}" in said[4]


def test_the_conclusions_say_why_fa4_was_not_timed():
    results = _results()
    for c in results.values():
        del c.versus[FA4]
    said = gqa.conclusions(results, KV_BYTES, fa4_name=FA4, fa4_ok=True, fa4_detail="-")
    assert said[3] == f"{FA4} refused every layout (its errors are printed above)."
    said = gqa.conclusions(results, KV_BYTES, fa4_name="FlashAttention-4", fa4_ok=False, fa4_detail="not installed")
    assert said[3] == "FlashAttention-4 was not timed: not installed."


def test_ties_and_host_bound_layouts_are_worded():
    results = _results()
    tie = _comparison(
        {CANDIDATE: 0.01, FA2: 0.0101, SELF: 0.01},
        {FA2: _v(1.01, "tie"), SELF: _v(1.0, "tie")},
        host={CANDIDATE: [0.02], FA2: [0.001]},
        wall=_comparison({CANDIDATE: 0.02}, {}),
    )
    results[("decode", 1)] = tie
    said = gqa.conclusions(results, KV_BYTES, fa4_name=FA4, fa4_ok=True, fa4_detail="")
    assert "FlashAttention-4 in 5; a tie with the cuDNN graph in 1." in said[2]
    assert said[4] == (
        "In 1 of 6 layouts, a contender's host time per call reached "
        f"{compare.HOST_BOUND:.0%} of its GPU time (decode, 1 K/V head: the cuDNN graph), so the contenders were "
        "also raced in back-to-back loops, host time included. Those loop verdicts are given in the lines below; "
        "the counts above judge GPU time only."
    )
    assert said[-1].startswith(
        "* decode, 1 K/V head, in this run: fastest was a tie of the cuDNN graph (10.0 µs), "
        "PyTorch SDPA, flash backend (FlashAttention-2; 10.1 µs) and PyTorch SDPA, cuDNN backend (10.0 µs); "
        "against the fastest other, "
        f"the cuDNN graph is a tie with {FA2}"
    )


def test_the_verdict_counts_are_this_runs_and_one_kv_head_is_singular():
    said = gqa.conclusions(_results(), KV_BYTES, fa4_name=FA4, fa4_ok=True, fa4_detail="")
    counts = [s for s in said if " is slower in " in s]  # the count against the fastest other, and FA4's
    assert len(counts) == 2 and all("in this run" in s for s in counts)
    assert "the fastest implementation" in said[2] and "speed-ups in this run" in said[2]
    layouts = [s for s in said if s.startswith("* ")]
    assert len(layouts) == 6 and all(", in this run: fastest was " in s for s in layouts)
    assert [s.split(", in this run")[0] for s in layouts if s.startswith("* decode")] == [
        "* decode, 32 K/V heads",
        "* decode, 8 K/V heads",
        "* decode, 1 K/V head",
    ]
