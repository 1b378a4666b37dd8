"""
Packed sequences in training: the ragged backward
=================================================

You build the training pair for packed (ragged) sequences: the causal forward over
only the real tokens, T×H×D, that also saves its softmax statistics, and an
``sdpa_backward`` graph that reads the same ragged offsets and writes dQ, dK and dV in
the packed layout. You check both against PyTorch's fp32 autograd one sequence at a
time, then time the packed backward against the same graphs on padded tensors and
against PyTorch's varlen paths, FlexAttention and FlashAttention-4.

The packed layout, its ragged offsets and the padding mask are introduced, and the
forward timed, on the
:ref:`varlen page <sphx_glr_auto_examples_plot_17_varlen_attention.py>`; the
statistics and the backward graph on the
:ref:`attention backward page <sphx_glr_auto_examples_plot_09_sdpa_backward.py>`.

What you will learn:

* that the backward declares Q, K, V, O, dO, dQ, dK and dV with the forward's ragged
  offsets, while the statistics stay padded, B×H×S_max×1 fp32;
* that ``sdpa_backward`` takes the forward's padding mask (``seq_len_q`` /
  ``seq_len_kv``), scale and causal band;
* how to check packed gradients against fp32 autograd, one sequence at a time;
* the packed backward against the padded one (the same cuDNN backward, told the
  lengths, without ragged offsets) and against PyTorch's padded SDPA, FlexAttention,
  ``varlen_attn`` and FlashAttention-4's varlen backward.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: a training step over packed sequences
# -------------------------------------------------
# 4 sequences of 300, 37, 512 and 100 tokens, 16 heads of dimension 128, bf16, causal.
# Q, K, V, O, dO and the gradients hold only the T real tokens, T×H×D; the statistics,
# one fp32 log-sum-exp per query row, stay padded, B×H×S_max×1. The lengths (int32,
# B×1×1×1) and the offsets (int64, B+1 prefix sums in elements) are built as on the
# varlen page: cuDNN reads them as raw integers.
import cudnn
import torch

lengths = torch.tensor([300, 37, 512, 100], dtype=torch.int32)
B, H, D, S_MAX, T = len(lengths), 16, 128, int(lengths.max()), int(lengths.sum())
cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).int().cuda()
torch.manual_seed(0)
q, k, v, d_o = torch.randn(4, T, H, D, device="cuda", dtype=torch.bfloat16)
o, dq, dk, dv = (torch.full_like(q, float("nan")) for _ in range(4))  # until written
stats = torch.empty(B, H, S_MAX, 1, device="cuda", dtype=torch.float32)
offsets = (cu_seqlens.long() * H * D).reshape(B + 1, 1, 1, 1)  # sequence b starts here
seq_lens = lengths.cuda().reshape(B, 1, 1, 1)
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
dims, strides = [B, H, S_MAX, D], [S_MAX * H * D, D, H * D, 1]  # token-major
top_left = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=top_left, diagonal_band_right_bound=0)
BF16 = cudnn.data_type.BFLOAT16
types = dict(
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)

# %%
# The forward: the packed graph of the varlen page with ``generate_stats=True``. O is
# packed like Q; the statistics are declared with the padded tensor's dims and strides.
gf = cudnn.pygraph(handle=handle, **types)
RAGGED = gf.tensor_like(offsets, name="ragged_offsets")
LEN_Q = gf.tensor_like(seq_lens, name="seq_len_q")
LEN_KV = gf.tensor_like(seq_lens, name="seq_len_kv")
thd = dict(dim=dims, stride=strides, ragged_offset=RAGGED)
Q, K, V = (gf.tensor(name=n, data_type=BF16, **thd) for n in ("q", "k", "v"))
mask = dict(use_padding_mask=True, seq_len_q=LEN_Q, seq_len_kv=LEN_KV, **causal)
O, STATS = gf.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=True, **mask)
O.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(RAGGED)
STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT)  # padded: B×H×S_max×1
STATS.set_dim(list(stats.shape)).set_stride(list(stats.stride()))
fwd_pack = {Q: q, K: k, V: v, O: o, STATS: stats}
fwd_pack |= {RAGGED: offsets, LEN_Q: seq_lens, LEN_KV: seq_lens}

# %%
# The backward declares its own ragged offsets and lengths the same way. Q, K, V, O,
# dO and the three gradients are packed with them; the statistics are read padded, as
# the forward wrote them; the padding mask, scale and causal band are the forward's.
gb = cudnn.pygraph(handle=handle, **types)
RAGGED = gb.tensor_like(offsets, name="ragged_offsets")
LEN_Q = gb.tensor_like(seq_lens, name="seq_len_q")
LEN_KV = gb.tensor_like(seq_lens, name="seq_len_kv")
thd = dict(dim=dims, stride=strides, ragged_offset=RAGGED)
inputs = dict(q=q, k=k, v=v, o=o, dO=d_o)
ins = {n: gb.tensor(name=n, data_type=BF16, **thd) for n in inputs}
ins["stats"] = gb.tensor_like(stats, name="stats")  # B×H×S_max×1, fp32
mask = dict(use_padding_mask=True, seq_len_q=LEN_Q, seq_len_kv=LEN_KV, **causal)
dQ, dK, dV = gb.sdpa_backward(**ins, attn_scale=D**-0.5, **mask)  # q=, …, stats=
for grad in (dQ, dK, dV):
    grad.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(RAGGED)
bwd_pack = {ins[n]: t for n, t in inputs.items()} | {ins["stats"]: stats}
bwd_pack |= {dQ: dq, dK: dk, dV: dv, RAGGED: offsets, LEN_Q: seq_lens, LEN_KV: seq_lens}
for g in (gf, gb):
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
# One workspace serves both graphs: they run one after the other on one stream.
size = max(gf.get_workspace_size(), gb.get_workspace_size())
workspace = torch.empty(size, device="cuda", dtype=torch.uint8)
gf.execute(fwd_pack, workspace, handle=handle)
gb.execute(bwd_pack, workspace, handle=handle)

# %%
# The check: each sequence alone, causal attention in fp32 with PyTorch's autograd,
# backpropagating the same dO; O, dQ, dK and dV compared as 1×H×n×D.
torch.cuda.set_device(q.device)  # autograd's backward thread needs this device
worst = 0.0
for a, e in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
    leaf = [t[a:e].transpose(0, 1)[None].float().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaf, is_causal=True)
    out.backward(d_o[a:e].transpose(0, 1)[None].float())
    for mine, want in zip((o, dq, dk, dv), (out.detach(), *(t.grad for t in leaf))):
        got = mine[a:e].transpose(0, 1)[None].float()
        torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)
        worst = max(worst, (got - want).abs().max().item())
print(f"O, dQ, dK, dV of {B} sequences: max |error| {worst:.1e} against fp32")

# %%
# Measuring the backward pass
# ---------------------------
# The problem of the varlen page: 16 sequences whose lengths are drawn (seed 0) from a
# log-normal distribution with median 1024 tokens, clipped to [32, 4096]: a stand-in
# with the long right tail of chat data, not lengths measured from a dataset. The
# same causal attention on padded B×H×S_max×D tensors, told the lengths by the same
# padding mask but with no ragged offsets, is the cuDNN control. ``varlen.sdpa_graph``
# (in ``cudnn_guide/graphs/varlen.py``) declares either layout, forward or backward, as
# the lesson does; ``cudnn_guide/studies/varlen_race.py`` builds, checks and admits
# the contenders. Every output is checked sequence by sequence; the worst sequence is
# printed.
from cudnn_guide.graphs import varlen
from cudnn_guide.graphs.varlen import packed_rows, padded_rows
from cudnn_guide.studies import varlen_race

torch.manual_seed(0)
log_normal = torch.distributions.LogNormal(torch.log(torch.tensor(1024.0)), 0.8)
lengths = log_normal.sample((16,)).clamp(32, 4096).int()
B, H, D, S_MAX, T = len(lengths), 16, 128, int(lengths.max()), int(lengths.sum())
cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).int().cuda()
q, k, v = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
offsets = (cu_seqlens.long() * H * D).reshape(B + 1, 1, 1, 1)  # sequence b starts here
seq_lens = lengths.cuda().reshape(B, 1, 1, 1)
spans = varlen.spans(cu_seqlens)
print(f"{T} real tokens in {B} sequences; {B * S_MAX} slots padded to the longest")
qp, kp, vp = (varlen.padded(t, spans) for t in (q, k, v))

# %%
# The other contenders, as the varlen page builds them: PyTorch's flash backend
# (FlashAttention-2), forced, on the padded tensors with ``is_causal=True``;
# FlexAttention (compiled) with a document mask over the packed tokens;
# ``torch.nn.attention.varlen``'s ``varlen_attn`` and FlashAttention-4's
# ``flash_attn_varlen_func`` on the packed T×H×D tensors with the same ``cu_seqlens``
# (int32), each if this PyTorch has it or FlashAttention-4 is installed. The varlen
# page's nested tensors have no backward contender here.
# ``varlen_race.backward_baselines`` makes their forwards, each with the layout it
# reads, and says which cannot run here.
from cudnn_guide.measure import compare, fa4

paths, unavailable = varlen_race.backward_baselines(cu_seqlens, lengths, head_dim=D)
real_flops = sum(4 * H * D * n * n / 2 for n in lengths.tolist())

# %%
# Training on packed sequences needs the forward to save its softmax statistics (fp32,
# in the padded B×H×S_max×1 layout) and an ``sdpa_backward`` graph with the same ragged
# offsets on Q, K, V, O, dO and the three gradients, as in the lesson. The same pair
# on the padded tensors is the control (``varlen_race.cudnn_backward``). Each
# contender's dQ, dK and dV are checked sequence by sequence against fp32 autograd on
# that sequence alone (``varlen_race.reference_grads``). The PyTorch, FlexAttention
# and FlashAttention-4 gradients come from one retained autograd graph
# (``retain_graph=True``, ``varlen_race.admit_autograd``), so only the backward is
# timed; its useful FLOPs are 2.5× the forward's over each sequence's causal pairs.
d_o = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16)
expected_grads = varlen_race.reference_grads((q, k, v), d_o, spans)
d_op = varlen.padded(d_o, spans)
cudnn_pairs = {  # name: (q, k, v, d_o) of one layout, its ragged offsets, its rows
    "cuDNN packed (THD) backward": ((q, k, v, d_o), offsets, packed_rows),
    "cuDNN padding mask backward (control)": ((qp, kp, vp, d_op), None, padded_rows),
}
backward_contenders = {}
step = dict(handle=handle, max_len=S_MAX)
for name, (qkvd, offs, rows) in cudnn_pairs.items():
    args = (name, qkvd, seq_lens, offs, rows, expected_grads, spans)
    backward_contenders[name] = varlen_race.cudnn_backward(*args, **step)
layouts = dict(packed=(q, k, v), padded=(qp, kp, vp), d_o=d_o, d_o_padded=d_op)
unavailable |= varlen_race.admit_autograd(
    backward_contenders, paths, **layouts, expected=expected_grads, spans=spans
)
backward_result = compare.compare(
    backward_contenders,
    candidate="cuDNN packed (THD) backward",
    l2="cold",
    rounds=9,
    flops=2.5 * real_flops,
)

# %%
import pandas as pd

from cudnn_guide.report import html_table

rows = varlen_race.timing_rows(backward_result)
formats = {"µs": "{:.1f}", "useful TFLOP/s": "{:.0f}"}
html_table(pd.DataFrame(rows).sort_values("µs"), formats)

# %%
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison

plot_comparison(
    backward_result,
    "µs",
    logx=True,
    xlabel="µs per backward call",
    title=f"causal attention backward over {B} sequences, {T} real tokens",
)
plt.show()

# %%
# The verdicts (above 1: the packed cuDNN backward is faster):
from cudnn_guide.measure import sweep

passes = {"backward": backward_result}
verdicts = sweep.SweepResult.from_comparisons("pass", passes).verdicts()
html_table(pd.DataFrame(verdicts), {"speed-up": "{:.2f}×"})

# %%
# Conclusions
# -----------
# Computed from the comparison above (``varlen_race.backward_conclusions``). Each
# verdict is on GPU time. ``compare`` races the contenders in back-to-back loops (host
# time included) only where a contender's host time per call reaches
# ``compare.HOST_BOUND`` of its GPU time; only then does a loop verdict follow, with
# its own interval and tie band.
from cudnn_guide.report.prose import Prose

sentences = varlen_race.backward_conclusions(
    backward_result, unavailable, fa4_label=fa4.label()
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

comparison("packed THD backward: speed-up over the fastest contender", backward_result)
headline(
    "packed THD backward",
    unit="µs",
    **backward_result.estimate("cuDNN packed (THD) backward"),
)
# sphinx_gallery_end_ignore
Prose(*sentences)
