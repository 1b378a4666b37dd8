"""Attention input checks refuse what cuDNN would misread; the reference and band masks are right."""

from __future__ import annotations

import pytest
import torch

from cudnn_guide.errors import InputError
from cudnn_guide.graphs import attention_inputs as ai


def test_group_size_and_head_counts_that_do_not_group():
    q, kv = torch.empty(1, 32, 4, 64), torch.empty(1, 8, 4, 64)
    assert ai.check_heads(q, kv, kv) == 4
    assert ai.check_heads(q, torch.empty(1, 1, 4, 64), torch.empty(1, 1, 4, 64)) == 32
    with pytest.raises(InputError, match="not a multiple of K/V's 5"):
        ai.check_heads(q, torch.empty(1, 5, 4, 64), torch.empty(1, 5, 4, 64))
    with pytest.raises(InputError, match="K has 8 heads but V has 4"):
        ai.check_heads(q, kv, torch.empty(1, 4, 4, 64))


@pytest.mark.parametrize(
    "lens, match",
    [
        (torch.tensor([3, 1], dtype=torch.int64).reshape(2, 1, 1, 1), "int32"),
        (torch.tensor([3, 1], dtype=torch.int32), r"shape \(2, 1, 1, 1\)"),
        (torch.tensor([5, 1], dtype=torch.int32).reshape(2, 1, 1, 1), r"lie in \[0, 4\]"),
        (torch.tensor([-1, 1], dtype=torch.int32).reshape(2, 1, 1, 1), r"lie in \[0, 4\]"),
    ],
)
def test_bad_sequence_lengths_are_named(lens, match):
    with pytest.raises(InputError, match=match):
        ai.check_seq_lens(lens, batch=2, max_len=4)


def test_good_sequence_lengths_pass_including_zero():
    ai.check_seq_lens(torch.tensor([4, 0], dtype=torch.int32).reshape(2, 1, 1, 1), batch=2, max_len=4)


def test_ragged_offsets_are_element_offsets_and_must_not_decrease():
    off = ai.ragged_offsets(torch.tensor([0, 3, 3, 7], dtype=torch.int32), 16)
    assert off.dtype == torch.int64 and off.shape == (4, 1, 1, 1)
    assert off.flatten().tolist() == [0, 48, 48, 112]  # a zero-length sequence repeats its start
    with pytest.raises(InputError, match="entry 2 .* is below entry 1"):
        ai.ragged_offsets(torch.tensor([0, 5, 3]), 8)
    with pytest.raises(InputError, match="must start at 0"):
        ai.ragged_offsets(torch.tensor([1, 5]), 8)
    with pytest.raises(InputError, match="1-D"):
        ai.ragged_offsets(torch.tensor([[0, 5]]), 8)


def test_a_window_wider_than_the_sequence_or_empty_is_refused():
    ai.check_window(4096, 4096)
    with pytest.raises(InputError, match="wider than the sequence"):
        ai.check_window(4097, 4096)
    with pytest.raises(InputError, match="no key visible"):
        ai.check_window(0, 4096)


def test_band_matches_its_definition():
    causal = ai.band(5, 5)
    assert torch.equal(causal, torch.ones(5, 5, dtype=torch.bool).tril())
    window = ai.band(6, 6, left=2)
    for i in range(6):
        assert window[i].nonzero().flatten().tolist() == [j for j in range(6) if i - 2 < j <= i]
    br = ai.band(2, 5, bottom_right=True)
    assert br.sum(1).tolist() == [4, 5]  # the last query sees every key


def test_reference_expands_grouped_heads_and_zeroes_empty_rows():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True
    )
    assert torch.allclose(ai.reference(q, k, v, visible=ai.band(6, 6)), want, atol=1e-5)
    nothing = torch.zeros(6, 6, dtype=torch.bool)
    assert torch.equal(ai.reference(q, k, v, visible=nothing), torch.zeros(2, 4, 6, 8))


def _visible_keys(ends, seq):
    """``mask_func`` columns expanded into each query's visible keys: ``[0, F0) ∪ [F1, F2) ∪ …``."""
    j = torch.arange(seq)
    rows = []
    for col in ends[0].T.tolist():  # one column per query
        visible = j < col[0]
        for start, end in zip(col[1::2], col[2::2]):
            visible |= (j >= start) & (j < end)
        rows.append(visible)
    return torch.stack(rows)


@pytest.mark.parametrize("window", [None, 1, 3, 8, 20])
def test_key_intervals_make_the_bands_keys_visible_in_every_sequence(window):
    batch, seq = 3, 11
    ends = ai.key_intervals(batch, seq, window=window, device="cpu")
    assert ends.dtype == torch.int32 and ends.is_contiguous()
    assert tuple(ends.shape) == (1, 1 if window is None else 3, batch * seq)
    per_sequence = _visible_keys(ends, seq).reshape(batch, seq, seq)
    expected = ai.band(seq, seq, left=window)  # a window wider than the sequence is causal
    assert all(torch.equal(visible, expected) for visible in per_sequence)
    if window is not None:
        assert int(ends[0, 0].abs().sum()) == 0 and int(ends.min()) == 0  # [0, 0), starts clamped at 0
