"""
Grouped-query and multi-query attention
=======================================

Most current LLMs give K and V fewer heads than Q: grouped-query attention (GQA, e.g. 32
query heads sharing 8 K/V heads) or multi-query attention (MQA, one K/V head). cuDNN's
SDPA takes such K and V as they are: declare K and V with ``Hkv`` heads, and each group
of ``Hq / Hkv`` query heads reads the same K/V head. Nothing is repeated in memory. Here
you build the GQA forward and backward graphs, check them against PyTorch, then time
prefill and decode against PyTorch's SDPA and FlashAttention-4.

What you will learn:

* how a GQA graph differs from an MHA one (only the K/V head count), forward and
  backward;
* how to check it against an fp32 reference that repeats the K/V heads explicitly;
* what GQA saves: the K/V bytes per token, and the decode time that follows them;
* the cuDNN graph against PyTorch's SDPA with ``enable_gqa=True`` on each backend
  that runs it (its flash backend is FlashAttention-2), and against FlashAttention-4,
  which also takes GQA and MQA K/V heads as they are.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: K and V simply have fewer heads
# -------------------------------------------
# Q is B×Hq×S×D, K and V are B×Hkv×S×D. The ``sdpa`` node reads the head counts from the
# tensors; the five build steps and ``execute`` are the same as for any attention graph.
# This forward keeps its softmax statistics (one fp32 log-sum-exp per query row) for
# the backward graph below.
import cudnn
import torch

b, hq, hkv, s, d = 2, 32, 8, 1024, 128  # 4 query heads share each K/V head
q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
o = torch.empty_like(q)
stats = torch.empty(b, hq, s, 1, device="cuda", dtype=torch.float32)
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)

g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
Q = g.tensor_like(q, name="q")
K = g.tensor_like(k, name="k")  # Hkv heads: all cuDNN needs to know
V = g.tensor_like(v, name="v")
# causal: key j is visible to query i when j ≤ i
top_left = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=top_left, diagonal_band_right_bound=0)
O, STATS = g.sdpa(
    name="sdpa", q=Q, k=K, v=V, attn_scale=d**-0.5, generate_stats=True, **causal
)
O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT)
STATS.set_dim(list(stats.shape)).set_stride(list(stats.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute({Q: q, K: k, V: v, O: o, STATS: stats}, workspace, handle=handle)

# %%
# The backward graph: ``sdpa_backward`` reads the forward's output and statistics and
# writes dK and dV with Hkv heads, each the sum of the gradients of the query heads in
# its group.
d_o = torch.randn_like(q)
dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
gb = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
QB = gb.tensor_like(q, name="q")
KB = gb.tensor_like(k, name="k")
VB = gb.tensor_like(v, name="v")
OB = gb.tensor_like(o, name="o")
DOB = gb.tensor_like(d_o, name="dO")
STATS_B = gb.tensor_like(stats, name="stats")
DQ, DK, DV = gb.sdpa_backward(
    q=QB, k=KB, v=VB, o=OB, dO=DOB, stats=STATS_B, attn_scale=d**-0.5, **causal
)
DQ.set_output(True).set_dim(list(dq.shape)).set_stride(list(dq.stride()))
DK.set_output(True).set_dim(list(dk.shape)).set_stride(list(dk.stride()))
DV.set_output(True).set_dim(list(dv.shape)).set_stride(list(dv.stride()))
gb.validate()
gb.build_operation_graph()
gb.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
gb.check_support()
gb.build_plans()
bwd_pack = {QB: q, KB: k, VB: v, OB: o, DOB: d_o, STATS_B: stats}
bwd_pack |= {DQ: dq, DK: dk, DV: dv}
bwd_workspace = torch.empty(gb.get_workspace_size(), device="cuda", dtype=torch.uint8)
gb.execute(bwd_pack, bwd_workspace, handle=handle)

# %%
# The check: fp32 autograd on K and V with each head repeated for its group of query
# heads (``repeat_interleave``); autograd sums the group's gradients back into each
# K/V head, as cuDNN does.
qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
group = hq // hkv
ref = torch.nn.functional.scaled_dot_product_attention(
    qr, kr.repeat_interleave(group, 1), vr.repeat_interleave(group, 1), is_causal=True
)
ref.backward(d_o.float())
torch.testing.assert_close(o.float(), ref.detach(), atol=2e-2, rtol=2e-2)
for name, ours, r in (("dQ", dq, qr.grad), ("dK", dk, kr.grad), ("dV", dv, vr.grad)):
    torch.testing.assert_close(ours.float(), r, atol=5e-2, rtol=5e-2)
    print(f"{name}: max |cuDNN - fp32 autograd| = {(ours.float() - r).abs().max():.1e}")

# %%
# Measuring what GQA saves
# ------------------------
# The K/V cache holds ``2 · Hkv · D`` values per token per layer. With 32 query heads of
# 128 (``grouped_query.kv_cache_rows``):
import pandas as pd

from cudnn_guide.report import html_table
from cudnn_guide.studies import grouped_query as gqa

B, HQ, S, D = 4, 32, 4096, 128  # the prefill measured below
html_table(pd.DataFrame(gqa.kv_cache_rows(D)), {gqa.CACHE: "{:.2f}"})

# %%
# Measuring prefill and decode against PyTorch and FlashAttention-4
# -----------------------------------------------------------------
# For each head layout, the cuDNN graph (heuristics A, declared by
# :func:`~cudnn_guide.graphs.attention.sdpa_graph`) races PyTorch's SDPA with
# ``enable_gqa=True`` on each backend, forced with ``sdpa_kernel`` (its flash backend is
# FlashAttention-2; its cuDNN backend calls cuDNN's own kernel, so it should tie) and
# FlashAttention-4 (``flash_attn.cute.flash_attn_func``, on its own B×S×H×D copy), in
# interleaved rounds. Prefill is 4 × 4096 tokens, causal; decode is one new token for
# each of 32 sequences over 8192 cached ones, where the K/V reads dominate.
#
# First the lesson's outputs, checked the way every contender is (relative L2 error
# against the fp32 reference, recorded with the page).
import warnings

from cudnn_guide import check
from cudnn_guide.measure import fa4

checks = [check.check(o, ref, name="GQA forward, Hq=32, Hkv=8")]
for name, ours, r in (("dq", dq, qr.grad), ("dk", dk, kr.grad), ("dv", dv, vr.grad)):
    checks.append(check.check(ours, r, name=f"GQA backward {name}, Hkv=8"))
worst = max(c.rel_error for c in checks)
print(f"the lesson's {len(checks)} outputs pass; worst rel. error {worst:.1e}")
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
# the CuTe DSL warns once per kernel that it cannot convert FA4's aux_data argument;
# the kernel runs and is checked all the same
warnings.filterwarnings("ignore", message="Argument aux_data", category=UserWarning)

# %%
# ``grouped_query.race`` checks every contender against the fp32 reference before it is
# timed (a backend that refuses a layout is printed with PyTorch's reasons), then races
# them with ``compare.compare`` (cold L2, 9 rounds at most).
PHASES = {"prefill": (B, S, S), "decode": (32, 1, 8192)}  # batch, queries, keys
fa4_name = FA4 if FA4_OK else None
results, kv_bytes = gqa.race(
    handle, PHASES, q_heads=HQ, head_dim=D, fa4_name=fa4_name, checks=checks
)

# %%
# Each phase's three comparisons read as one sweep over the K/V heads
# (``SweepResult.from_comparisons``): the time per call, GB/s (K/V and Q read, O
# written; the K/V reads bound decode), and the cuDNN graph's speed-up over each backend
# that ran.
from cudnn_guide.report import sweep_table

by_phase = gqa.by_phase(results)
sweep_table(by_phase["prefill"], "median_us", title="prefill: µs per call (median)")

# %%
sweep_table(
    by_phase["decode"],
    "gbps",
    title="decode: GB/s of K/V and Q read and O written (higher is better)",
)

# %%
html_table(pd.DataFrame(gqa.phase_verdicts(by_phase)), {"speed-up": "{:.2f}×"})

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_bars

fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
for ax, (phase, res) in zip(axes, by_phase.items()):
    title = f"{phase}: 32 query heads"
    plot_bars(res.measurements, x="K/V heads", metric="median_us", ax=ax, title=title)
plt.show()

# %%
# Conclusions
# -----------
# Computed from the comparisons above. Each verdict, and every count of them, judges GPU
# time; where a contender's host time per call came close to its GPU time
# (``compare.host_bound``), the comparison also raced the contenders in back-to-back
# loops, host time included, and that loop verdict is printed beside the GPU one without
# being counted. "Fastest" is judged the way the comparisons judge: by the cuDNN graph's
# speed-up over each contender, round by round, and a tie where that comparison is a
# tie. The times quoted are each contender's median over all its timed calls, as in the
# prefill table and the plot.
# Each layout's cuDNN graph is judged against the fastest *other* implementation
# (``grouped_query.fastest_other``): the cuDNN backend calls cuDNN's own kernel, so it
# stays in the tables above but is not counted as a rival. Verdicts use the in-run
# interval; the page's record also keeps it widened by the run-to-run drift.
from cudnn_guide.report.prose import Prose

fa4_said = dict(fa4_name=FA4, fa4_ok=FA4_OK, fa4_detail=FA4_DETAIL)
sentences = gqa.conclusions(results, kv_bytes, **fa4_said)
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

for (phase, heads), c in results.items():
    other = gqa.fastest_other(c)  # the fastest implementation that is not cuDNN
    if other:
        comparison(  # the title stays the same whichever wins; the record names it
            f"{phase}, Hkv={heads}: speed-up over the fastest other implementation",
            c,
            other,
        )
headline(
    "decode time, Hkv=8", unit="µs", **results[("decode", 8)].estimate(gqa.CANDIDATE)
)
# sphinx_gallery_end_ignore
Prose(*sentences)
