"""
Frontend 1.32's open-source attention kernels on Hopper
=======================================================

cuDNN Frontend 1.32 ships attention kernels written in the CuTe DSL
(``nvidia-cutlass-dsl``), in source, beside the closed cuDNN library. This page first
builds the sliding-window attention that those kernels are measured on (beside plain
causal), as a cuDNN graph, checks it against PyTorch, then measures the kernels on both.

What you will learn:

* ``cudnn.flex_attention``: attention under an *interval mask*. For every query you list
  the key intervals it may see; ``create_mask_plan`` turns that into a reusable plan and
  ``flex_attn_func`` runs it, forward and backward, here on fixed (BSHD) batches (it
  also takes packed THD batches, which this page does not show);
* ``torch.ops.cudnn.sdpa_fwd``, a PyTorch op over the same graphs (a contender below);
* what ``cudnn.flex_attention``'s plan and first-call compilation cost in a fresh
  process, and how its kernels compare with cuDNN's graph SDPA, FlashAttention-4 and
  PyTorch on both masks (causal, W=512), in GPU time and in a loop of eager calls.

A graph's planner can also be asked for these open-source engines instead of the
library's (``heur_mode.OPENSOURCE``); which graphs they then serve on this GPU is on the
:ref:`open-source engines page <sphx_glr_auto_examples_plot_31_opensource_engines.py>`.
"""

# %%
# Environment
# -----------
# The open-source kernels need the CuTe DSL; without it, importing
# ``cudnn.flex_attention`` fails and this page says how to install it.
import cudnn_guide
from cudnn_guide import environment

environment.require_sm((9, 0), "cudnn.flex_attention (CuTe DSL kernels)")
env = environment.collect()
try:
    import cudnn.flex_attention as cfa
    import cutlass
except ImportError as exc:
    raise cudnn_guide.CapabilityError(
        "cudnn.flex_attention",
        "the CuTe DSL: pip install 'nvidia-cutlass-dsl[cu13]'",
        f"no CuTe DSL ({exc})",
    ) from exc
print(f"CuTe DSL {cutlass.__version__}")
env

# %%
# The lesson: sliding-window attention as a cuDNN graph
# -----------------------------------------------------
# Each query sees itself and the W - 1 keys before it: a causal band
# (``diagonal_band_right_bound=0``) with a left edge (``diagonal_band_left_bound=W``).
# This is the graph that ``cudnn.flex_attention`` races below.
import cudnn
import torch

B, H, S, D, W = 4, 16, 4096, 128, 512
qb, kb, vb = torch.randn(3, B, H, S, D, device="cuda", dtype=torch.bfloat16)
ob = torch.empty_like(qb)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
Q = g.tensor_like(qb, name="q")
K = g.tensor_like(kb, name="k")
V = g.tensor_like(vb, name="v")
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)
window = dict(causal, diagonal_band_left_bound=W)
O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, **window)
O.set_output(True).set_dim(list(ob.shape)).set_stride(list(ob.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute({Q: qb, K: kb, V: vb, O: ob}, workspace, handle=handle)

# %%
# The same window for PyTorch, in fp32.
i = torch.arange(S, device="cuda")
visible = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - W)
scores = (qb.float() @ kb.float().transpose(-1, -2)) * D**-0.5
ref = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1) @ vb.float()
torch.testing.assert_close(ob.float(), ref, atol=2e-2, rtol=2e-2)
print(f"window W={W}: max abs error {(ob.float() - ref).abs().max().item():.1e}")
del scores, ref

# %%
# Measuring ``cudnn.flex_attention``: masks as key intervals
# ----------------------------------------------------------
# ``mask_func`` is an int32 tensor ``[Hmask, nfunc, total_q]`` (``Hmask`` 1 or Hq,
# ``nfunc`` odd). For query ``i`` its column ``F0, F1, F2, …`` means: keys in
# ``[0, F0) ∪ [F1, F2) ∪ …`` are visible, counted within the query's own sequence.
# Causal is one endpoint per query, ``F0 = i + 1``; a window of W keys is three,
# ``[0, 0) ∪ [i − W + 1, i + 1)``, which ``attention_inputs.key_intervals``
# (``cudnn_guide/graphs/attention_inputs.py``) builds. ``flex_attn_func`` takes B×S×H×D
# tensors. Compiling prints a log (``Compiled … in N s``) and an experimental-API note.
# The outputs, and the lesson's graph, are checked against each mask's fp32 reference
# (``flex_attention_race``, in ``cudnn_guide/studies/flex_attention_race.py``).
from cudnn_guide.graphs import attention_inputs
from cudnn_guide.studies import flex_attention_race

q, k, v = (t.transpose(1, 2).contiguous() for t in (qb, kb, vb))
gen = torch.Generator(device="cuda").manual_seed(0)
pos = torch.arange(S, device="cuda", dtype=torch.int32)
causal_ends = (pos + 1).repeat(B).reshape(1, 1, B * S).contiguous()
window_ends = attention_inputs.key_intervals(B, S, window=W)  # 1×3×(B·S)

causal_plan = cfa.create_mask_plan(causal_ends, q, k, v)
window_plan = cfa.create_mask_plan(window_ends, q, k, v)
out_causal = cfa.flex_attn_func(q, k, v, mask_plan=causal_plan)
out_window = cfa.flex_attn_func(q, k, v, mask_plan=window_plan)

bhsd = [qb, kb, vb]  # the reference works on B×H×S×D
refs = flex_attention_race.band_references(*bhsd, window=W)  # mask -> B×S×H×D
outs = {"causal": out_causal, f"window {W}": out_window}
checks = flex_attention_race.check_forward(ob, outs, refs, window=W)

# %%
# ``cudnn.flex_attention`` backward
# ---------------------------------
# A plan built from inputs that require gradients carries the backward kernels too
# (``build_backward``); ``flex_attn_func`` is then differentiable. Its gradients are
# checked against PyTorch's causal SDPA in fp32 (``check_gradients``).
S_BWD = 2048
qg, kg, vg = (
    torch.randn(
        2, S_BWD, H, D, device="cuda", dtype=torch.bfloat16, generator=gen
    ).requires_grad_()
    for _ in range(3)
)
ends_bwd = attention_inputs.key_intervals(2, S_BWD)  # causal, 1×1×(2·S_BWD)
bwd_plan = cfa.create_mask_plan(ends_bwd, qg, kg, vg)
d_out = torch.randn(2, S_BWD, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
cfa.flex_attn_func(qg, kg, vg, mask_plan=bwd_plan).backward(d_out)
checks += flex_attention_race.check_gradients(qg, kg, vg, d_out)

# %%
# Plan and compile cost, in a fresh process
# -----------------------------------------
# The CuTe DSL compiles each kernel on its first call, in the calling process (its disk
# cache is off by default). A new interpreter with an empty CUDA JIT cache
# (``CUDA_CACHE_PATH``) shows what a server pays once per process. The second call,
# compiled already, is still not the steady state: it takes longer than a call in the
# loops below. One process is run (earlier recordings ran two, up to ~20% apart):
# ``coldstart.flex_attention_fresh`` (``cudnn_guide/studies/coldstart.py``) times the
# causal plan and the first two calls there.
from cudnn_guide.studies import coldstart

cold = coldstart.flex_attention_fresh(B, H, S, D, processes=1, timeout=600)
for i, c in enumerate(cold):
    print(
        f"fresh process {i + 1}: create_mask_plan {c['plan_s']:.2f} s, "
        f"first call {c['first_call_s']:.2f} s, second call "
        f"{1e3 * c['second_call_s']:.2f} ms (rel. error {c['rel_error']:.1e})"
    )

# %%
# Against cuDNN's graph, FlashAttention-4 and PyTorch, on the same masks
# ----------------------------------------------------------------------
# Contenders: ``cudnn.flex_attention``; then, each checked against the mask's reference
# before it is timed (``flex_attention_race.add_contenders``), cuDNN's graph SDPA with
# the same mask as a diagonal band (as in the lesson); PyTorch's FlexAttention
# (compiled) with a block mask, the frontend's own ``torch.ops.cudnn.sdpa_fwd`` and, for
# the causal case, PyTorch's SDPA, flash backend; FlashAttention-4 (``causal=True``, and
# ``window_size=(W - 1, 0)`` for the window: the W - 1 keys before the query, none after
# it). Each races in interleaved rounds with a bootstrap interval, in GPU time per call;
# ``wall_clock=True`` also races them in back-to-back loops timed by the wall clock.
import textwrap

from cudnn_guide.measure import compare, fa4

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if not FA4_OK:
    print(textwrap.fill(f"{FA4}: {FA4_DETAIL}", 88))
CAND = "cudnn.flex_attention"
raced_fa4 = FA4 if FA4_OK else None  # None: not raced
masks = {"causal": (None, causal_plan), f"window {W}": (W, window_plan)}
results = {}
for mask, (left, plan) in masks.items():
    contenders = {CAND: lambda plan=plan: cfa.flex_attn_func(q, k, v, mask_plan=plan)}
    # prints why FA4 cannot run this mask, if it cannot
    checks += flex_attention_race.add_contenders(
        contenders, mask, *bhsd, refs, left=left, handle=handle, fa4_label=raced_fa4
    )
    results[mask] = compare.compare(
        contenders,
        candidate=CAND,
        l2="cold",
        rounds=7,
        flops=4 * B * H * D * int(attention_inputs.band(S, S, left=left).sum()),
        tag=mask,
        wall_clock=True,
    )
    for name, s in results[mask].versus.items():
        print(f"{mask}: {CAND} vs {name}: {s['value']:.2f}× ({s['verdict']})")

# %%
import pandas as pd

from cudnn_guide.report import comparison_rows, html_table

# each contender's time, rate and speed-up, per mask (cudnn_guide/report/tables.py)
rows = comparison_rows(results, key="mask", speedup="flex_attention's speed-up")
html_table(pd.DataFrame(rows), {"µs": "{:.1f}", "TFLOP/s": "{:.0f}"})

# %%
import matplotlib.pyplot as plt

flex_attention_race.plot_masks(results, f"{B}×{H} heads × {S} tokens, d={D}")
plt.show()


# %%
# Measuring the host side: a loop of calls
# ----------------------------------------
# The verdicts above are GPU time per call. A loop of plain eager calls, one after
# another, is bound by the longer of the GPU time and the host time per call. The host
# µs per call is from the first round above, one call after a synchronize, and can
# exceed what a call costs inside a loop: the loop race decides. ``wall_clock=True``
# made each comparison above also race the same contenders in back-to-back loops
# (``compare.compare_loops``), each timed by the wall clock from a synchronized start to
# a synchronized end: ``c.wall``, with its own tie band ("tie": not wholly outside it).
# GPU and loop µs: medians over rounds of each round's median (``c.estimate``), as the
# verdicts use them; the record's measurements keep the pooled median of all samples.
from cudnn_guide.report import loop_rows
from cudnn_guide.report.tables import GPU_US, HOST_US, LOOP_US

host_rows = loop_rows(results, key="mask")
html_table(pd.DataFrame(host_rows), dict.fromkeys([HOST_US, GPU_US, LOOP_US], "{:.0f}"))


# %%
# Conclusions
# -----------
# Per mask, ``prose.loop_stretch_text`` (``cudnn_guide/report/prose.py``) reads the
# loop race against the GPU one: the loop's verdict against the fastest contender, and
# how far the loop stretches each contender's GPU time; ``prose.gpu_and_loop_text``
# gives both verdicts against FlashAttention-4 (``flex_attention_race.conclusions``
# puts them together, with the fresh process's cost).
from cudnn_guide.report.prose import Prose

sentences = flex_attention_race.conclusions(
    results, cold, fa4_label=FA4, fa4_ok=FA4_OK, fa4_detail=FA4_DETAIL
)
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, keep

for mask, c in results.items():
    comparison(f"{mask}: flex_attention speed-up over best other", c)
keep(
    loop_verdicts={mask: c.wall.versus for mask, c in results.items()},
    host_us_per_call={
        r["mask"] + ": " + r["implementation"]: r["host µs per call"] for r in host_rows
    },
)
# sphinx_gallery_end_ignore
Prose(*sentences)
