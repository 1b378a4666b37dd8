"""attention_masks: the window race's contenders, checks and work, ALiBi's slopes and bias, and the sentences the
attention-masks page concludes with.

Everything here runs on the CPU: the cuDNN graphs are stand-ins that write the reference of the mask they were
declared with, FlexAttention runs eagerly, and the comparisons are written by hand.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention

from cudnn_guide.errors import CheckFailedError, InputError
from cudnn_guide.graphs.attention_inputs import band, reference
from cudnn_guide.measure import fa4
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import attention_masks
from cudnn_guide.studies.attention_masks import FLEX, WindowRace

CAUSAL = {"diagonal_alignment": "TOP_LEFT", "diagonal_band_right_bound": 0}
CAND, CONTROL = "cuDNN window", "cuDNN causal, no window (control)"


@pytest.fixture(autouse=True)
def quiet_eager_flex():
    with warnings.catch_warnings():  # FlexAttention warns that it runs uncompiled
        warnings.simplefilter("ignore")
        yield


def _qkv(b=1, h=2, s=256, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, s, d, generator=gen) for _ in range(3))


@pytest.mark.parametrize("seq", [1, 2, 5, 17, 64])
def test_visible_pairs_count_the_bands_visible_entries(seq):
    for window in [None, *range(1, seq + 1), seq + 3]:
        left = None if window is None or window > seq else window
        assert attention_masks.visible_pairs(seq, window) == int(band(seq, seq, left=left).sum())


def test_visible_pairs_of_the_pages_widths():
    for window in [4096, 2048, 1024, 512, 256, 128]:
        assert attention_masks.visible_pairs(4096, window) == int(band(4096, 4096, left=window).sum())
    assert attention_masks.visible_pairs(4096) == 4096 * 4097 // 2


def test_alibi_slopes_are_the_standard_geometric_ones():
    slopes = attention_masks.alibi_slopes(16, device="cpu")
    assert slopes.dtype == torch.float32 and slopes.shape == (16,)
    assert slopes.tolist() == pytest.approx([2 ** (-(h + 1) / 2) for h in range(16)])


def test_alibi_bias_is_slope_times_key_minus_query():
    slopes = attention_masks.alibi_slopes(4, device="cpu")
    bias = attention_masks.alibi_bias(slopes, 6)
    assert bias.shape == (1, 4, 6, 6) and bias.dtype == torch.float32
    for h in range(4):
        for i in range(6):
            for j in range(6):
                assert bias[0, h, i, j].item() == pytest.approx(slopes[h].item() * (j - i))


def test_the_causal_reference_adds_the_bias_and_hides_later_keys():
    q, k, v = _qkv(s=8)
    bias = torch.randn(1, 2, 8, 8)
    s = (q @ k.transpose(-1, -2)) * 16**-0.5 + bias
    s = s.masked_fill(~torch.ones(8, 8, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(attention_masks.causal_reference(q, k, v, bias), torch.softmax(s, -1) @ v)
    torch.testing.assert_close(attention_masks.causal_reference(q, k, v), reference(q, k, v, visible=band(8, 8)))


def test_a_checked_run_poisons_the_output_before_the_graph_runs():
    q, k, v = _qkv(s=8)
    expected = attention_masks.causal_reference(q, k, v)
    out, seen = torch.zeros_like(expected), []

    def run(graph, pack):
        seen.append((graph, pack, bool(out.isnan().all())))
        out.copy_(expected)

    result = attention_masks.checked_run(run, "g", {"pack": 1}, out, expected, name="bias")
    assert seen == [("g", {"pack": 1}, True)]
    assert result.passed and result.name == "bias"
    with pytest.raises(CheckFailedError):  # a graph that writes nothing leaves the NaN
        attention_masks.checked_run(lambda g, p: None, "g", {}, out, expected, name="ALiBi")


def test_flexattentions_alibi_is_the_reference_with_the_alibi_bias():
    q, k, v = _qkv()
    slopes = attention_masks.alibi_slopes(2, device="cpu")
    launch = attention_masks.flex_alibi(flex_attention, q, k, v, slopes)
    expected = attention_masks.causal_reference(q, k, v, attention_masks.alibi_bias(slopes, 256))
    torch.testing.assert_close(launch(), expected, atol=1e-5, rtol=1e-5)


class _Graphs:
    """Stand-ins for the page's ``masked_attention`` and ``launcher``: a "graph" writes the fp32 reference of the
    band it was declared with into its output."""

    def __init__(self):
        self.built, self.launched = [], []

    def build(self, q, k, v, o, **mask):
        self.built.append(mask)
        return ("graph", dict(mask)), {"q": q, "k": k, "v": v, "o": o}

    def launcher(self, graph, pack):
        _, mask = graph
        self.launched.append(mask.get("diagonal_band_left_bound"))
        s = pack["q"].shape[2]
        visible = band(s, s, left=mask.get("diagonal_band_left_bound"))

        def launch():
            pack["o"].copy_(reference(pack["q"], pack["k"], pack["v"], visible=visible))

        return launch


def _race(graphs, fa4_label=None):
    q, k, v = _qkv()
    control = graphs.build(q, k, v, torch.empty_like(q), **CAUSAL)
    return WindowRace(
        graphs.build,
        graphs.launcher,
        (q, k, v),
        mask=CAUSAL,
        flex=flex_attention,
        candidate=CAND,
        control=(CONTROL, *control),
        fa4_label=fa4_label,
    )


def test_a_widths_contenders_are_the_window_graph_flex_and_the_control_each_checked():
    graphs = _Graphs()
    race = _race(graphs)
    contenders = race.contenders(64)
    assert list(contenders) == [CAND, FLEX, CONTROL]
    assert graphs.built[-1] == {**CAUSAL, "diagonal_band_left_bound": 64}
    assert list(graphs.built[-1]) == [*CAUSAL, "diagonal_band_left_bound"]  # the lesson's keyword order
    assert graphs.launched == [64, None]  # the window graph, then the control, launched anew
    assert int(race.window) == 64  # what FlexAttention's mask reads when it runs
    assert [c.name for c in race.checks] == ["cuDNN window W=64", "FlexAttention window W=64"]
    assert all(c.passed for c in race.checks)
    expected = reference(*_qkv(), visible=band(256, 256, left=64))
    torch.testing.assert_close(contenders[FLEX](), expected, atol=1e-5, rtol=1e-5)
    race.contenders(128)
    assert int(race.window) == 128 and len(race.checks) == 4


def test_the_work_of_a_width_is_four_b_h_d_per_visible_pair():
    race = _race(_Graphs())
    assert race.flops(256) == 4 * 1 * 2 * 16 * (256 * 257 // 2)
    assert race.flops(32) == 4 * 1 * 2 * 16 * attention_masks.visible_pairs(256, 32)


@pytest.mark.parametrize("width", [0, 257])
def test_a_width_outside_the_sequence_is_refused_before_anything_is_built(width):
    graphs = _Graphs()
    race = _race(graphs)
    with pytest.raises(InputError, match="sliding window"):
        race.contenders(width)
    assert len(graphs.built) == 1  # the control only


def test_flashattention4_joins_last_with_its_window_size_checked_or_says_why_not(monkeypatch, capsys):
    calls = []

    def forward(q, k, v, *, causal, scale, window_size):
        calls.append((causal, scale, window_size))
        s = q.shape[2]
        return lambda: reference(q, k, v, visible=band(s, s, left=window_size[0] + 1))

    monkeypatch.setattr(fa4, "forward", forward)
    race = _race(_Graphs(), fa4_label="FA4 (test)")
    contenders = race.contenders(32)
    assert list(contenders) == [CAND, FLEX, CONTROL, "FA4 (test)"]
    assert calls == [(True, 16**-0.5, (31, 0))]
    assert "check FA4 (test) window W=32: PASS" in capsys.readouterr().out

    def refuses(q, k, v, **kw):
        def launch():
            raise RuntimeError("window_size is not supported\nmore")

        return launch

    monkeypatch.setattr(fa4, "forward", refuses)
    assert list(race.contenders(32)) == [CAND, FLEX, CONTROL]
    assert "FA4 (test): unavailable here (RuntimeError: window_size is not supported)" in capsys.readouterr().out

    monkeypatch.setattr(fa4, "forward", lambda q, k, v, **kw: lambda: torch.zeros_like(q))
    with pytest.raises(CheckFailedError):  # a wrong result stops the page
        race.contenders(32)


def test_what_fa4_takes_of_alibi_and_bias_is_read_from_its_parameters():
    fa4_masks = attention_masks.fa4_masks_text
    assert fa4_masks("FA4", False, "not installed (pip …)") == "FA4 was not timed: not installed (pip …)."
    assert fa4_masks("FA4 (x)", True, "", parameters=["q", "alibi_slopes"]) == (
        "FA4 (x)'s flash_attn_func takes alibi_slopes, but this page does not time it."
    )
    assert fa4_masks("FA4 (x)", True, "", parameters=["q", "softcap"]) == (
        "FA4: not supported (no ALiBi in flash_attn_func: FA4 (x) takes no alibi_slopes, nor a bias tensor), so "
        "it is not in the ALiBi race. A score_mod written in the CuTe DSL could add ALiBi; this page does not "
        "attempt it."
    )
    assert "takes no alibi_slopes), so" in fa4_masks("FA4 (x)", True, "", parameters=["attn_bias"])


def _v(value, verdict):
    return {"value": value, "low": value - 0.05, "high": value + 0.05, "verdict": verdict}


def _comparison(ms, versus, rounds=7):
    """A comparison whose every round took ``ms[name]`` milliseconds."""
    medians = {n: [t] * rounds for n, t in ms.items()}
    measured = {n: Measurement(n, [t] * 3, "cold", flops=1e9) for n, t in ms.items()}
    return Comparison(CAND, rounds, measured, medians, versus, 0.02)


FA = "FA4 (test)"


def _by_window():
    wide = _comparison(
        {CAND: 1.0, FLEX: 1.2, CONTROL: 1.0, FA: 0.9},
        {FLEX: _v(1.2, "faster"), CONTROL: _v(1.0, "tie"), FA: _v(0.9, "slower")},
    )
    narrow = _comparison(
        {CAND: 0.1, FLEX: 0.15, CONTROL: 1.0, FA: 0.2},
        {FLEX: _v(1.5, "faster"), CONTROL: _v(10.0, "faster"), FA: _v(2.0, "faster")},
    )
    return {4096: wide, 128: narrow}


def test_the_window_sentences_give_times_verdicts_and_counts():
    sentences = attention_masks.window_sentences(
        _by_window(), candidate=CAND, control=CONTROL, fa4_label=FA, fa4_ok=True
    )
    assert sentences[0] == (
        "Shrinking the window from 4096 to 128 keys takes the cuDNN graph from 1000 to 100 µs; the dense causal "
        "graph takes 1000 µs. At each width, against the fastest contender there (then against the others):"
    )
    assert sentences[1].startswith(f"* W=4096: cuDNN is {1 / 0.9:.2f}× slower than {FA} (speed-up 0.90×")
    assert f"; vs {FLEX}: 1.20× faster than {FLEX}" in sentences[1] and sentences[1].endswith(".")
    assert f"; vs {FA}:" not in sentences[1]  # the fastest is not named twice
    assert (
        sentences[2].startswith(f"* W=128: cuDNN is 1.50× faster than {FLEX}") and f"; vs {FA}: 2.00×" in sentences[2]
    )
    assert "(control)" not in sentences[2].split(":")[1]  # the control is never the contender to beat
    assert sentences[3] == (
        "Against the fastest contender at each width, cuDNN is faster at 1, ties at 0 and is slower at 1 of 2 widths."
    )
    assert sentences[4] == (
        f"Against {FA} with window_size, cuDNN is faster at 1, ties at 0 and is slower at 1 of 2 widths."
    )
    assert len(sentences) == 5


def _without_fa4():
    by_window = _by_window()
    for c in by_window.values():
        del c.versus[FA]
    return by_window


def test_fa4_gets_no_count_of_its_own_where_it_was_always_the_fastest_or_never_ran():
    def sentences(by_window, fa4_ok=True):
        return attention_masks.window_sentences(by_window, candidate=CAND, control=CONTROL, fa4_label=FA, fa4_ok=fa4_ok)

    always_fastest = {4096: _by_window()[4096]}
    assert not any("with window_size" in s for s in sentences(always_fastest))
    assert sentences(_without_fa4())[-1] == f"{FA} ran at none of the widths (the reasons are above)."
    assert sentences(_without_fa4(), fa4_ok=False)[-1].startswith("Against the fastest contender at each width")
