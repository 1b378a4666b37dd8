"""paged_kv_decode: the paged-decode page's contenders, made and checked per context, and its conclusions.

Everything here runs without a GPU: the inputs are made on the CPU, the cuDNN graph is a stand-in that
writes attention over the gathered pages, and the varlen kernel is the reference one of
``tests/graphs/test_paged_baselines.py``. The comparisons are real ``Comparison`` objects with fixed
rounds.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.graphs import paged
from cudnn_guide.graphs.paged import PagedDecodeProblem
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import paged_kv_decode
from cudnn_guide.studies.paged_kv_decode import CANDIDATE, PADDED, PADDED_NAME, DecodeContenders

FA4 = "FlashAttention-4 (flash-attn-4 4.0.0b36)"
PYTORCH = [
    "PyTorch varlen_attn on the paged pool",
    "PyTorch gather valid tokens + varlen_attn",
    PADDED_NAME,
    paged.CONTROL,
]


def _varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, *, scale, seqused_k=None, block_table=None):
    """Reference varlen attention: one query per sequence over its packed (or paged) keys."""
    out = []
    for b in range(q.shape[0]):
        if block_table is None:
            kb, vb = k[cu_k[b] : cu_k[b + 1]], v[cu_k[b] : cu_k[b + 1]]
        else:  # pages × page × H × D, read through the table
            n = int(seqused_k[b])
            kb = torch.cat([k[i] for i in block_table[b].tolist()])[:n]
            vb = torch.cat([v[i] for i in block_table[b].tolist()])[:n]
        s = torch.einsum("hd,nhd->hn", q[b].float(), kb.float()) * scale
        out.append(torch.einsum("hn,nhd->hd", s.softmax(-1), vb.float()))
    return torch.stack(out)


@pytest.fixture
def fake_varlen(monkeypatch):
    module = types.ModuleType("torch.nn.attention.varlen")
    module.varlen_attn = _varlen_attn
    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", module)


def _cpu_inputs(self, seed=0):
    """``PagedDecodeProblem.make_inputs`` on the CPU: the same keys, shapes and dtypes."""
    g = torch.Generator().manual_seed(seed)
    dt, b, h, d, pps = self.torch_dtype, self.batch, self.heads, self.head_dim, self.pages_per_sequence
    lengths = torch.randint(max(1, self.max_context // 8), self.max_context + 1, (b,), generator=g, dtype=torch.int32)
    pool = (b * pps, h, self.page_size, d)
    return {
        "q": torch.randn(b, h, 1, d, generator=g).to(dt),
        "k_pool": torch.randn(pool, generator=g).to(dt),
        "v_pool": torch.randn(pool, generator=g).to(dt),
        "page_table": torch.randperm(b * pps, generator=g, dtype=torch.int32).reshape(b, 1, pps, 1),
        "seq_len_q": torch.ones(b, 1, 1, 1, dtype=torch.int32),
        "seq_len_kv": lengths.reshape(b, 1, 1, 1),
        "o": torch.empty(b, h, 1, d, dtype=dt),
        "lengths": lengths,
    }


class FakeAdopted:
    """``graphs.adopt(g, handle, name=...)``: ``bind(pack)`` gives a launcher that writes attention into ``o``."""

    names: list[str] = []

    def __init__(self, g, handle, *, name):
        self.g, self.handle = g, handle
        FakeAdopted.names.append(name)

    def bind(self, pack):
        d, max_kv = pack["d"], pack["max_kv"]

        def launch():
            k, v = (paged.gather_pages(d[n], d["page_table"]) for n in ("k_pool", "v_pool"))
            mask = (torch.arange(max_kv) < d["seq_len_kv"].reshape(-1, 1)).reshape(d["q"].shape[0], 1, 1, max_kv)
            o = torch.nn.functional.scaled_dot_product_attention(d["q"].float(), k.float(), v.float(), attn_mask=mask)
            d["o"].copy_(o)

        return launch


@pytest.fixture
def cpu(monkeypatch):
    """Inputs on the CPU, the stand-in graph, and FlashAttention-4 not installed."""
    monkeypatch.setattr(PagedDecodeProblem, "make_inputs", _cpu_inputs)
    monkeypatch.setattr(paged_kv_decode.graphs, "adopt", FakeAdopted)
    monkeypatch.setattr(paged_kv_decode.fa4, "status", lambda: (False, "not installed (pip …): ImportError: x"))
    monkeypatch.setattr(paged_kv_decode.fa4, "label", lambda: "FlashAttention-4")
    FakeAdopted.names = []
    built = []

    def build(d, max_kv):
        built.append(max_kv)
        return "graph", {"d": d, "max_kv": max_kv}

    return build, built


def small(build, first=128):
    return DecodeContenders(build, "handle", first_context=first, batch=3, heads=2, head_dim=8)


def test_the_names_are_the_pages_own():
    assert CANDIDATE == "cuDNN paged"
    assert PADDED == "PyTorch gather + padded SDPA"
    assert PADDED_NAME == "PyTorch gather + padded SDPA, default dispatch"


def test_every_contender_is_checked_and_admitted_at_the_first_context(cpu, fake_varlen, capsys):
    build, built = cpu
    setup = small(build)
    assert setup.unavailable == {"FlashAttention-4": "not installed (pip …): ImportError: x"}
    runs, p, d = setup(128)
    assert list(runs) == [CANDIDATE, *PYTORCH]
    assert (p.batch, p.heads, p.head_dim, p.max_context, p.page_size) == (3, 2, 8, 128, 64)
    assert built == [128] and FakeAdopted.names == ["paged decode 128"]
    printed = " ".join(capsys.readouterr().out.split())
    for name in PYTORCH:  # admit prints each contender's check
        assert f"check {name}, context 128: PASS" in printed
    assert setup(128)[0] is runs  # kept: not made again
    assert built == [128]


def test_a_later_context_replaces_the_first_and_checks_without_admitting(cpu, fake_varlen, capsys):
    build, built = cpu
    setup = small(build)
    setup(128)
    capsys.readouterr()
    runs, p, d = setup(256)
    assert list(setup.made) == [256] and built == [128, 256]
    assert list(runs) == [CANDIDATE, *PYTORCH]
    assert p.max_context == 256 and d["lengths"].min() >= 32
    assert "PASS" not in capsys.readouterr().out  # checked, not printed


def test_a_contender_that_raises_at_a_later_context_is_left_out_there_only(cpu, fake_varlen, monkeypatch, capsys):
    build, _ = cpu
    setup = small(build)
    setup(128)
    original = paged.torch_decoders

    def refusing(p, d, mask):
        decoders = original(p, d, mask)

        def padded():
            def run():
                raise RuntimeError("no kernel")

            return run

        return {**decoders, PADDED: padded}

    monkeypatch.setattr(paged_kv_decode.paged, "torch_decoders", refusing)
    runs, _, _ = setup(256)
    assert PADDED_NAME not in runs and PADDED_NAME not in setup.unavailable
    assert "PyTorch gather + padded SDPA, default dispatch, context 256: RuntimeError" in capsys.readouterr().out


def test_a_pytorch_without_varlen_makes_those_decoders_unavailable(cpu, monkeypatch):
    build, _ = cpu
    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", None)  # import raises ImportError
    setup = small(build)
    runs, _, _ = setup(128)
    assert list(runs) == [CANDIDATE, PADDED_NAME]
    for name in (PYTORCH[0], PYTORCH[1], paged.CONTROL):
        assert setup.unavailable[name].startswith("ModuleNotFoundError: import of torch.nn.attention.varlen")


def test_a_wrong_output_stops_the_page(cpu, fake_varlen, monkeypatch):
    build, _ = cpu

    class Wrong(FakeAdopted):
        def bind(self, pack):
            launch = super().bind(pack)
            return lambda: (launch(), pack["d"]["o"].mul_(2))

    monkeypatch.setattr(paged_kv_decode.graphs, "adopt", Wrong)
    with pytest.raises(CheckFailedError):
        small(build)(128)


def test_the_sweep_asks_for_each_contender_and_its_bytes_by_context(cpu, fake_varlen):
    build, _ = cpu
    setup = small(build)
    names = list(setup(128)[0])
    impls = setup.launchers([*names, "absent"])
    assert list(impls) == [*names, "absent"]
    assert callable(impls[CANDIDATE](128)) and impls["absent"](128) is None
    _, p, d = setup(128)
    assert setup.kv_bytes(128) == 2 * 2 * 2 * 8 * int(d["lengths"].sum())
    assert impls[CANDIDATE](256) is setup(256)[0][CANDIDATE]


def test_at_a_page_size_cudnn_and_fa4_are_checked_first(cpu, monkeypatch, capsys):
    build, built = cpu
    setup = small(build)
    setup.fa4 = FA4

    def fa4_paged(d):
        def launch():
            k, v = (paged.gather_pages(d[n], d["page_table"]) for n in ("k_pool", "v_pool"))
            mask = (torch.arange(k.shape[2]) < d["seq_len_kv"].reshape(-1, 1)).reshape(3, 1, 1, -1)
            return torch.nn.functional.scaled_dot_product_attention(d["q"], k, v, attn_mask=mask)

        return launch

    monkeypatch.setattr(paged_kv_decode, "fa4_paged", fa4_paged)
    p = PagedDecodeProblem(batch=3, heads=2, head_dim=8, max_context=256, page_size=128)
    contenders, d = setup.at_page_size(p)
    assert list(contenders) == [CANDIDATE, FA4] and not setup.made
    assert d["k_pool"].shape == (3 * 2, 2, 128, 8) and built == [256]  # 2 pages of 128 per sequence
    assert FakeAdopted.names == ["paged decode, pages of 128"]
    assert f"check {FA4}, pages of 128: PASS" in " ".join(capsys.readouterr().out.split())


def test_a_page_size_cudnn_refuses_is_printed_and_leaves_no_contender(cpu, capsys):
    def refuses(d, max_kv):
        raise ValueError("page size 128 not supported")

    p = PagedDecodeProblem(batch=3, heads=2, head_dim=8, max_context=256, page_size=128)
    contenders, _ = small(refuses).at_page_size(p)
    assert contenders == {}
    assert "cuDNN paged, pages of 128: ValueError: page size 128 not supported" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# The conclusions
# --------------------------------------------------------------------------------------------------


def _v(value, verdict, low=None, high=None):
    return {
        "value": value,
        "low": value - 0.05 if low is None else low,
        "high": value + 0.05 if high is None else high,
        "verdict": verdict,
    }


def _comparison(ms, versus, *, host=None, wall=None, nbytes=1e9, tie_band=0.01):
    medians = {n: [t] * 7 for n, t in ms.items()}
    measured = {
        n: Measurement(n, [t] * 3, "cold", bytes=nbytes, host_samples_ms=list((host or {}).get(n, [])))
        for n, t in ms.items()
    }
    return Comparison(CANDIDATE, 7, measured, medians, versus, tie_band, wall=wall)


def _sweep(comparisons):
    return types.SimpleNamespace(comparisons=comparisons)


def test_the_conclusions_give_bandwidth_verdicts_control_and_fa4_count():
    at = {
        1024: _comparison(
            {CANDIDATE: 0.5, FA4: 0.6, paged.CONTROL: 0.45},
            {FA4: _v(1.2, "faster"), paged.CONTROL: _v(0.9, "slower")},
        ),
        8192: _comparison({CANDIDATE: 1.0, FA4: 1.0}, {FA4: _v(1.0, "tie")}),
    }
    said = paged_kv_decode.conclusions(_sweep(at), [1024, 8192], 4000.0, None, {"X": "ImportError: y"}, FA4)
    assert said[0] == "At pages of 64 tokens, by maximum context:"
    assert said[1].startswith("* max context 1024: cuDNN reads K/V at 2000 GB/s (50% of the measured read bandwidth)")
    assert f"; against the fastest contender it is 1.20× faster than {FA4} (in-run 95% interval" in said[1]
    assert all(s.count(FA4) == 1 for s in said[1:3])  # each bullet names the fastest contender once
    assert "; against the control (attention alone on packed K/V) it is 1.11× slower than" in said[1]
    assert "control" not in said[2]
    assert said[3] == (
        f"At pages of 64 tokens, against {FA4}, cuDNN is, in this run, faster at 1, ties at 1 and is slower at "
        "0 of the 2 contexts timed."
    )
    assert said[4:] == ["* X did not run here: ImportError: y"]


def test_each_context_names_its_fastest_contender_once_whatever_the_verdict():
    at = {
        1024: _comparison({CANDIDATE: 0.5, FA4: 0.6, "Y": 0.7}, {FA4: _v(1.2, "faster"), "Y": _v(1.4, "faster")}),
        2048: _comparison({CANDIDATE: 1.0, FA4: 1.0}, {FA4: _v(1.0, "tie")}),
        4096: _comparison({CANDIDATE: 1.0, "Y": 0.8}, {"Y": _v(0.8, "slower")}),
    }
    said = paged_kv_decode.conclusions(_sweep(at), [1024, 2048, 4096], 4000.0, None, {}, FA4)
    assert said[1].endswith(f"; against the fastest contender it is {at[1024].describe()}.")
    assert said[2].endswith(f"; against the fastest contender it is {at[2048].describe()}.")
    assert said[3].endswith(f"; against the fastest contender it is {at[4096].describe()}.")
    assert [s.count(FA4) for s in said[1:4]] == [1, 1, 0] and said[3].count(" than Y (") == 1


def test_the_conclusions_compare_the_page_sizes_at_8k():
    at = {8192: _comparison({CANDIDATE: 1.0, FA4: 1.2}, {FA4: _v(1.2, "faster")})}
    at_128 = _comparison({CANDIDATE: 1.0, FA4: 0.9}, {FA4: _v(0.9, "slower")})
    said = paged_kv_decode.conclusions(_sweep(at), [8192], 4000.0, at_128, {}, FA4)
    assert said[2].endswith(
        "of the 1 contexts timed; this count is for pages of 64 only: at pages of 128 just "
        "the 8k context was timed (next)."
    )
    assert said[3].startswith(f"At pages of 128 tokens (8k context), cuDNN is 1.11× slower than {FA4}")
    assert said[4] == (
        f"So at 8k context the page size decides the winner in this run: against {FA4}, cuDNN is faster at "
        "pages of 64 and slower at pages of 128 tokens."
    )
    same = _comparison({CANDIDATE: 1.0, FA4: 1.2}, {FA4: _v(1.2, "faster")})
    said = paged_kv_decode.conclusions(_sweep(at), [8192], 4000.0, same, {}, FA4)
    assert said[4] == (
        f"At 8k context the page size does not change the verdict against {FA4} in this run: cuDNN is faster "
        "at pages of 64 and of 128 tokens."
    )


def test_the_conclusions_say_why_fa4_was_not_timed():
    at = {1024: _comparison({CANDIDATE: 0.5, "Y": 0.6}, {"Y": _v(1.2, "faster")})}
    said = paged_kv_decode.conclusions(
        _sweep(at), [1024], 4000.0, None, {"FlashAttention-4": "not installed"}, "FlashAttention-4"
    )
    assert said[-1] == "FlashAttention-4 was not timed at pages of 64: not installed."
    said = paged_kv_decode.conclusions(_sweep(at), [1024], 4000.0, None, {}, FA4)
    assert said[-1] == f"{FA4} was not timed at pages of 64: it refused every context (its errors are printed above)."


def test_a_loop_that_disagrees_with_the_gpu_time_is_explained():
    wall = _comparison({CANDIDATE: 0.02, "Y": 0.012}, {"Y": _v(0.6, "slower", 0.55, 0.65)}, tie_band=0.02)
    gpu = _comparison(
        {CANDIDATE: 0.01, "Y": 0.012},
        {"Y": _v(1.2, "faster")},
        host={CANDIDATE: [0.015]},
        wall=wall,
    )
    said = paged_kv_decode.conclusions(_sweep({1024: gpu}), [1024], 4000.0, None, {}, FA4)
    loop = [s for s in said if s.startswith("At max context 1024 the back-to-back loop")]
    assert loop == [
        "At max context 1024 the back-to-back loop (host time included) gives a speed-up of 0.60× (slower, "
        "interval 0.55–0.65, loop tie band ±2.0%) over Y where GPU time gives 1.20× (faster, tie band ±1.0%). "
        "Host time per call against GPU time: cuDNN paged, 15 against 10 µs. A loop that launches each call "
        "from Python pays the host time; a decode loop captured in a CUDA graph replays the kernels without "
        "it, so the GPU verdict is the one it sees."
    ]
    agreeing = _comparison(
        {CANDIDATE: 0.01, "Y": 0.012},
        {"Y": _v(1.2, "faster")},
        wall=_comparison({CANDIDATE: 0.01, "Y": 0.012}, {"Y": _v(1.2, "faster")}),
    )
    said = paged_kv_decode.conclusions(_sweep({1024: agreeing}), [1024], 4000.0, None, {}, FA4)
    assert not [s for s in said if "back-to-back loop (host time included)" in s]


@pytest.mark.gpu
def test_fa4_paged_reads_each_sequences_pages_in_place():
    pytest.importorskip("flash_attn.cute")
    from cudnn_guide import check

    p = PagedDecodeProblem(batch=4, heads=8, head_dim=128, max_context=1024, page_size=128)
    d = p.make_inputs(seed=1)
    k, v = (paged.gather_pages(d[n], d["page_table"]) for n in ("k_pool", "v_pool"))
    ref = check.reference(p.torch_forward, d["q"], k, v, p.key_mask(d["seq_len_kv"]))
    out = paged_kv_decode.fa4_paged(d)()
    assert out.shape == d["o"].shape
    check.check(out, ref, name="FA4 paged decode")
