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
# beat. ``varlen.sdpa_graph`` (``cudnn_guide/graphs/varlen.py``) declares it from the
# padded tensors and binds it for timing. Every output is checked sequence by sequence
# against the fp32 reference (``check.worst_sequence``); the worst one is printed.
from cudnn_guide import check
from cudnn_guide.graphs import attention_inputs, varlen
from cudnn_guide.graphs.varlen import packed_rows, padded_rows

spans = varlen.spans(cu_seqlens)
print(f"{T} real tokens in {B} sequences; {B * S_MAX} slots padded to the longest")


def per_sequence_check(label, outputs, rows, expected):
    """Each sequence's ``rows`` of each output against ``expected[name][b]``."""
    worst = check.worst_sequence(label, outputs, rows, expected, spans)
    print(f"{worst.name}: rel. error {worst.rel_error:.1e}, the worst")


expected_o = {"O": [packed_rows(ref, b, a, e) for b, (a, e) in spans]}
per_sequence_check("packed THD", {"O": o}, packed_rows, expected_o)
qp, kp, vp = (varlen.padded(t, spans) for t in (q, k, v))
op = torch.empty_like(qp)
padded_run = varlen.sdpa_graph(dict(q=qp, k=kp, v=vp, o=op), seq_lens, handle=handle)
check.poison(op)
padded_run()
per_sequence_check("padding mask", {"O": op}, padded_rows, expected_o)
pad_rows = torch.cat([op[b, :, e - a :].flatten() for b, (a, e) in spans])
print(f"padded rows past each length: {pad_rows.isnan().sum().item()} NaN, ", end="")
print(f"max |value| {pad_rows.nan_to_num().abs().max().item():g}")

# %%
# Edge cases: a zero-length and a one-token sequence
# --------------------------------------------------
# Both are legal padding-mask inputs. A one-token sequence is ordinary attention over
# one key. A zero-length sequence has no query rows at all; its output slots are
# poisoned (NaN) before the call, and we look at what is left in them. Compare the
# padded run above: its rows past each length were poisoned too (NaN count printed).
edge_lens = torch.tensor([S_MAX, 1, 0, 37], dtype=torch.int32, device="cuda")
edge_lens = edge_lens.reshape(4, 1, 1, 1)
attention_inputs.check_seq_lens(edge_lens, 4, S_MAX)
eq, ek, ev = (t[:4].contiguous() for t in (qp, kp, vp))
eo = torch.empty_like(eq)
edges = varlen.sdpa_graph(dict(q=eq, k=ek, v=ev, o=eo), edge_lens, handle=handle)
check.poison(eo)
edges()
for b, n in enumerate(edge_lens.flatten().tolist()):
    if n == 0:
        left = eo[b].isnan().float().mean().item()
        print(f"sequence {b}, 0 tokens: {left:.0%} of its output slots still NaN")
        continue
    seq = [t[b : b + 1, :, :n] for t in (eq, ek, ev)]
    visible = attention_inputs.band(n, n, device="cuda")
    expected = attention_inputs.reference(*seq, visible=visible)
    edge = check.check(eo[b : b + 1, :, :n], expected, name=f"{n}-token edge")
    print(f"sequence {b}, {n} tokens: rel. error {edge.rel_error:.1e}")
zero_len_poison_left = eo[2].isnan().float().mean().item()

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
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from cudnn_guide import graphs
from cudnn_guide.measure import baselines, compare, fa4

contenders = {
    "cuDNN packed (THD)": graphs.adopt(g, handle, name="varlen").bind(pack),
    "cuDNN padding mask": padded_run,
}
unavailable = {}
flash = baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)
nested = [
    torch.nested.nested_tensor_from_jagged(t, cu_seqlens.long()).transpose(1, 2)
    for t in (q, k, v)
]
picked, kernel = varlen.nested_sdpa_backend(*nested)  # or "not determined (…)"
print(f"nested tensors: SDPA's dispatch picks {picked}")
NESTED = f"PyTorch nested tensors, {kernel}"
FLASH = "PyTorch padded SDPA, flash backend (FlashAttention-2)"
flex = varlen.flex_document_attention(lengths)  # compiled, the document mask built once
packed_bhsd = [t.transpose(0, 1)[None] for t in (q, k, v)]
candidates = {
    FLASH: (lambda: flash(qp, kp, vp), padded_rows),
    NESTED: (
        lambda: F.scaled_dot_product_attention(*nested, is_causal=True),
        lambda y, b, a, e: packed_rows(y.transpose(1, 2).values(), b, a, e),
    ),
    "FlexAttention, document mask": (lambda: flex(*packed_bhsd), varlen.bhsd_rows),
}
try:  # causal, window_size=(-1, 0)
    varlen_attn = varlen.torch_varlen_attn(cu_seqlens, S_MAX)
    candidates["PyTorch varlen_attn"] = (lambda: varlen_attn(q, k, v), packed_rows)
except ImportError as exc:
    unavailable["PyTorch varlen_attn"] = str(exc)

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if FA4_OK:  # flash_attn_varlen_func, the same cu_seqlens for queries and keys
    fa4_varlen = fa4.varlen_attention(cu_seqlens, S_MAX, causal=True, scale=D**-0.5)
    candidates[f"{FA4}, varlen"] = (lambda: fa4_varlen(q, k, v), packed_rows)
else:
    unavailable[FA4] = FA4_DETAIL
for name, (fn, rows) in candidates.items():  # one that cannot run is said, not dropped
    check_fn = lambda y, name=name, rows=rows: per_sequence_check(
        name, {"O": y}, rows, expected_o
    )
    if why := baselines.admit(contenders, name, fn, check=check_fn):
        unavailable[name] = why

real_flops = sum(4 * H * D * n * n / 2 for n in lengths.tolist())
result = compare.compare(
    contenders, candidate="cuDNN packed (THD)", l2="cold", rounds=9, flops=real_flops
)

# %%
import pandas as pd

from cudnn_guide.report import html_table

rows = [
    {
        "implementation": n,
        "µs": result.estimate(n)["value"],
        "useful TFLOP/s": result.estimate(n, "TFLOP/s")["value"],
    }
    for n in result.measurements
]
formats = {"µs": "{:.1f}", "useful TFLOP/s": "{:.0f}"}
html_table(pd.DataFrame(rows).sort_values("µs"), formats)

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
# Computed from the comparisons above. Each verdict is on GPU time; where a back-to-back
# loop (host time included) was raced too, its verdict follows with its own interval
# and tie band. Had the padding mask made the kernel skip every padded tile, the padded
# graph would take the packed graph's time; had it skipped none, about the padded
# work's ratio of it (time linear in FLOPs).
from cudnn_guide.report.prose import Prose, verdict_text

padded_flops = B * 4 * H * D * S_MAX * S_MAX / 2
work_ratio = padded_flops / real_flops
packed_us = result.estimate("cuDNN packed (THD)")["value"]
time_ratio = result.estimate("cuDNN padding mask")["value"] / packed_us
if time_ratio <= 1 or result.versus["cuDNN padding mask"]["verdict"] == "tie":
    skip = "so the padding costs no measurable time: its tiles are skipped."
elif time_ratio < work_ratio:
    avoided = (work_ratio - time_ratio) / (work_ratio - 1)
    skip = (
        f"between a full skip (1×) and none ({work_ratio:.2f}×): the padding mask "
        f"avoids about {avoided:.0%} of the padding's extra time, not all of it."
    )
else:
    skip = "no less than the extra work: this timing shows no padding skipped."
best = result.best_baseline
unwritten = (
    " (cuDNN does not write them: zero them yourself if anything reads them)"
    if zero_len_poison_left == 1.0
    else ""
)
squares = sum(n * n for n in lengths.tolist())  # causal work grows with length²
sentences = [
    f"Padding to the longest sequence (S_max = {S_MAX}) would do {work_ratio:.2f}× "
    f"the attention work of the real tokens: causal work grows with each length "
    f"squared, so the ratio is B·S_max² / Σ n² = {B}·{S_MAX}² / {squares:,} = "
    f"{B * S_MAX**2:,} / {squares:,}, over the lengths {lengths.tolist()} (in "
    f"tokens, {T} real of {B * S_MAX} slots).",
    f"The padded cuDNN graph with a padding mask takes {time_ratio:.2f}× the packed "
    f"graph's time for {work_ratio:.2f}× the work, {skip}",
    f"The packed cuDNN graph: against the fastest contender ({best}) it is "
    f"{verdict_text(result, best)}; against the padded tensors with a padding mask "
    f"it is {verdict_text(result, 'cuDNN padding mask')}.",
    f"A zero-length sequence: {zero_len_poison_left:.0%} of its output slots still "
    f"held the poison after the call{unwritten}; a one-token sequence is checked "
    "like any other.",
]
fa4_varlen_name = f"{FA4}, varlen"
if fa4_varlen_name in result.versus:
    fa4_verdict = verdict_text(result, fa4_varlen_name)
    sentences.append(f"* Against {fa4_varlen_name}: cuDNN is {fa4_verdict}.")
sentences += [
    f"* Not available here: {name}: {why}" for name, why in unavailable.items()
]

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

comparison("packed THD: speed-up over the fastest contender", result)
headline("packed THD forward", unit="µs", **result.estimate("cuDNN packed (THD)"))
# sphinx_gallery_end_ignore
Prose(*sentences)
