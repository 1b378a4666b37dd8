"""
Variable-length batches: packed (ragged) sequences
==================================================

A batch of real requests has sequences of different lengths, and padding them all to
the longest wastes work on tokens that do not exist. cuDNN attention can read *packed*
sequences instead: only the real tokens, T×H×D, with a *ragged offset* per sequence
(where it starts, in elements) and its true length. This is the layout of the
``flash_attn_varlen_func`` of FlashAttention 2 to 4 and of PyTorch's nested tensors.
Here you build the packed causal graph, check it sequence by sequence, then time its
forward against the same attention on padded tensors, PyTorch's varlen paths,
FlexAttention and FlashAttention-4. Training on packed sequences (the forward that
saves its statistics, and ``sdpa_backward`` with the same ragged offsets) is on the
:ref:`packed backward page <sphx_glr_auto_examples_plot_32_varlen_backward.py>`.

What you will learn:

* how to declare packed (THD) tensors: B×H×S_max×D dims with token-major strides, one
  ragged-offset tensor, and ``seq_len_q`` / ``seq_len_kv`` with ``use_padding_mask``;
* how to check ragged output against an fp32 reference, one sequence at a time;
* what packing saves against padded tensors with a padding mask (the same kernel told
  the lengths), and what a zero-length or a one-token sequence does;
* the cuDNN forward against PyTorch's padded SDPA, nested tensors, ``varlen_attn``,
  FlexAttention and FlashAttention-4's ``flash_attn_varlen_func``.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: causal attention over packed sequences
# --------------------------------------------------
# 16 sequences whose lengths are drawn (seed 0) from a log-normal distribution with
# median 1024 tokens, clipped to [32, 4096]: a stand-in with the long right tail of chat
# data, not lengths measured from a dataset. Q, K, V and O hold only the T real tokens,
# T×H×D. cuDNN reads the lengths (int32, B×1×1×1) and the offsets (int64, B+1 prefix
# sums in elements) as raw integers: a wrong dtype or shape is misread, not refused.
import cudnn
import torch

torch.manual_seed(0)
log_normal = torch.distributions.LogNormal(torch.log(torch.tensor(1024.0)), 0.8)
lengths = log_normal.sample((16,)).clamp(32, 4096).int()
B, H, D, S_MAX, T = len(lengths), 16, 128, int(lengths.max()), int(lengths.sum())
cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).int().cuda()
q, k, v = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
o = torch.full_like(q, float("nan"))  # NaN until cuDNN writes it
offsets = (cu_seqlens.long() * H * D).reshape(B + 1, 1, 1, 1)  # sequence b starts here
seq_lens = lengths.cuda().reshape(B, 1, 1, 1)
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)

# %%
# Declared to cuDNN, each packed tensor is B×H×S_max×D with token-major strides (the
# strides of T×H×D) and the ragged-offset tensor; the batch stride is never used. The
# padding mask (the true lengths) must be set too: it tells cuDNN where each sequence
# ends.
g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
RAGGED = g.tensor_like(offsets, name="ragged_offsets")
dims, strides = [B, H, S_MAX, D], [S_MAX * H * D, D, H * D, 1]  # token-major
thd = dict(dim=dims, stride=strides, ragged_offset=RAGGED)
Q = g.tensor(name="q", data_type=cudnn.data_type.BFLOAT16, **thd)
K = g.tensor(name="k", data_type=cudnn.data_type.BFLOAT16, **thd)
V = g.tensor(name="v", data_type=cudnn.data_type.BFLOAT16, **thd)
LEN_Q = g.tensor_like(seq_lens, name="seq_len_q")
LEN_KV = g.tensor_like(seq_lens, name="seq_len_kv")
padding = dict(use_padding_mask=True, seq_len_q=LEN_Q, seq_len_kv=LEN_KV)
# causal within each sequence: key j is visible to query i when j ≤ i
top_left = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=top_left, diagonal_band_right_bound=0)
O, _ = g.sdpa(
    q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, **padding, **causal
)
O.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(RAGGED)
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
pack = {Q: q, K: k, V: v, O: o, LEN_Q: seq_lens, LEN_KV: seq_lens, RAGGED: offsets}
g.execute(pack, workspace, handle=handle)

# %%
# The check: each sequence alone, causal attention in fp32 with plain PyTorch.
ref = torch.empty(T, H, D, device="cuda")
for a, e in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
    seq = [t[a:e].transpose(0, 1)[None].float() for t in (q, k, v)]  # 1×H×n×D
    out = torch.nn.functional.scaled_dot_product_attention(*seq, is_causal=True)
    ref[a:e] = out[0].transpose(0, 1)
torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)

# %%
# Measuring packing against padding
# ---------------------------------
# The same causal attention on padded B×H×S_max×D tensors, told the lengths by the
# same padding mask but with no ragged offsets, is the cuDNN contender packing must
# beat. ``varlen_race.padded_forward`` (``cudnn_guide/studies/varlen_race.py``) declares
# it from the padded tensors (``varlen.sdpa_graph``), runs it once on a poisoned output
# and binds it for timing. Every output is checked sequence by sequence against the
# fp32 reference (``varlen_race.check_sequences``); the worst one is printed.
from cudnn_guide.graphs import varlen
from cudnn_guide.graphs.varlen import packed_rows
from cudnn_guide.studies import varlen_race

spans = varlen.spans(cu_seqlens)
print(f"{T} real tokens in {B} sequences; {B * S_MAX} slots padded to the longest")
expected_o = {"O": [packed_rows(ref, b, a, e) for b, (a, e) in spans]}
varlen_race.check_sequences("packed THD", {"O": o}, packed_rows, expected_o, spans)
qp, kp, vp = (varlen.padded(t, spans) for t in (q, k, v))
padded_run = varlen_race.padded_forward(
    qp, kp, vp, seq_lens, expected_o, spans, handle=handle
)

# %%
# Edge cases: a zero-length and a one-token sequence
# --------------------------------------------------
# Both are legal padding-mask inputs. A one-token sequence is ordinary attention over
# one key. A zero-length sequence has no query rows at all; its output slots are
# poisoned (NaN) before the call, and we look at what is left in them. Compare the
# padded run above: its rows past each length were poisoned too (NaN count printed).
# ``varlen_race.edge_cases`` runs the padded graph on the first four sequences with
# these lengths and checks each one with tokens against the fp32 reference.
zero_len_poison_left = varlen_race.edge_cases(
    qp, kp, vp, [S_MAX, 1, 0, 37], handle=handle
)

# %%
# Measuring against PyTorch's varlen paths
# ----------------------------------------
# Every contender computes causal attention within each sequence, checked sequence by
# sequence:
#
# * **PyTorch padded SDPA, flash backend (FlashAttention-2)**: PyTorch's flash backend,
#   forced, on the padded tensors with ``is_causal=True``. With right padding, causal
#   attention never lets a real query see a padded key, so the real rows are right;
#   the kernel is not told the lengths and computes every padded tile.
# * **PyTorch nested tensors**: ``scaled_dot_product_attention`` on jagged nested
#   tensors, no backend forced: its name says the backend PyTorch's dispatch for
#   jagged tensors picks here (printed below), or "default dispatch" where this
#   PyTorch cannot say.
# * **PyTorch varlen_attn** (``torch.nn.attention.varlen``, FlashAttention-2 inside).
# * **FlexAttention** (compiled) with a document mask over the packed tokens.
# * **FlashAttention-4** ``flash_attn_varlen_func`` on the packed T×H×D tensors with
#   the same ``cu_seqlens`` (int32), if it is installed.
#
# ``varlen_race.admit_forward_baselines`` makes, checks and adds each (one that cannot
# run here is named, with why); ``rounds=9`` is a cap: the race stops once settled.
from cudnn_guide import graphs
from cudnn_guide.measure import compare, fa4

contenders = {
    "cuDNN packed (THD)": graphs.adopt(g, handle, name="varlen").bind(pack),
    "cuDNN padding mask": padded_run,
}
unavailable = varlen_race.admit_forward_baselines(
    contenders, (q, k, v), (qp, kp, vp), cu_seqlens, lengths, expected_o, spans
)
real_flops = sum(4 * H * D * n * n / 2 for n in lengths.tolist())
result = compare.compare(
    contenders, candidate="cuDNN packed (THD)", l2="cold", rounds=9, flops=real_flops
)

# %%
import pandas as pd

from cudnn_guide.report import html_table

formats = {"µs": "{:.1f}", "useful TFLOP/s": "{:.0f}"}
html_table(pd.DataFrame(varlen_race.timing_rows(result)).sort_values("µs"), formats)

# %%
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison

plot_comparison(
    result,
    "µs",
    logx=True,
    xlabel="µs per forward call",
    title=f"causal attention over {B} sequences, {T} real tokens",
)
plt.show()

# %%
# The verdicts (above 1: the packed cuDNN graph is faster):
from cudnn_guide.measure import sweep

passes = {"forward": result}
verdicts = sweep.SweepResult.from_comparisons("pass", passes).verdicts()
html_table(pd.DataFrame(verdicts), {"speed-up": "{:.2f}×"})

# %%
# Conclusions
# -----------
# Computed from the comparisons above (``varlen_race.forward_conclusions``). Each
# verdict is on GPU time; where a back-to-back loop (host time included) was raced
# too, its verdict follows with its own interval and tie band. Had the padding mask
# made the kernel skip every padded tile, the padded graph would take the packed
# graph's time; had it skipped none, about the padded work's ratio of it (time linear
# in FLOPs).
from cudnn_guide.report.prose import Prose

sentences = varlen_race.forward_conclusions(
    result,
    lengths,
    heads=H,
    head_dim=D,
    zero_len_poison_left=zero_len_poison_left,
    unavailable=unavailable,
    fa4_label=fa4.label(),
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

comparison("packed THD: speed-up over the fastest contender", result)
headline("packed THD forward", unit="µs", **result.estimate("cuDNN packed (THD)"))
# sphinx_gallery_end_ignore
Prose(*sentences)
