"""
cuDNN against FlashAttention-4 at NVIDIA's Llama 3.1 shapes
===========================================================

NVIDIA publishes its own H200 comparison of cuDNN and FlashAttention-4 (cudnn-frontend's
``benchmark/attention_training``): the heads of Llama 3.1 70B, batch 2, 64 query heads,
8 key/value heads, head dim 128, 2k to 32k tokens, causal and not, forward and backward.
This page builds that layer with the frontend, runs the same tensors through
FlashAttention-4, checks both against PyTorch, and then re-measures every one of the
vendor's bf16 shapes (non-deterministic backward), with its numbers beside ours.
What each backend's first call costs a fresh process (cuDNN's plan build,
FlashAttention-4's compile), and whether PyTorch's SDPA routes to FlashAttention-4,
is on the :ref:`first-call page <sphx_glr_auto_examples_plot_28_first_call.py>`.

What you will learn:

* grouped-query attention (64 query heads sharing 8 K/V heads) in one ``sdpa`` node;
* the ``B×S×H×D`` memory layout that FlashAttention-4 takes, handed to cuDNN as strides;
* the training pair: ``sdpa`` with ``generate_stats=True`` and ``sdpa_backward``;
* how the cuDNN on this GPU compares with FlashAttention-4 at each shape (faster, tied
  or slower), and where our measurements agree with NVIDIA's table.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((9, 0), "FlashAttention-4 (Hopper or newer)")
env = environment.collect()
env

# %%
# The lesson: one Llama 3.1 attention layer in cuDNN
# --------------------------------------------------
# FlashAttention-4 keeps tensors as ``B×S×H×D`` (tokens outer, heads inner). cuDNN takes
# any strides, so the same memory is described as ``B×H×S×D`` with ``transpose(1, 2)``:
# no copy. K and V have 8 heads for Q's 64; cuDNN reads the head ratio from the shapes.
# Causal masking is the diagonal band ``TOP_LEFT`` with right bound 0; the graph is
# built in five steps (validate, lower, heuristics' plans, support, build).
import cudnn
import torch

B, S, H, HKV, D = 2, 4096, 64, 8, 128
CAUSAL = dict(
    diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0
)

torch.manual_seed(0)
q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)  # B×S×H×D
k = torch.randn(B, S, HKV, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, S, HKV, D, device="cuda", dtype=torch.bfloat16)
o = torch.empty_like(q)


def bhsd(t):
    return t.transpose(1, 2)  # the same memory, seen as B×H×S×D


handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)

g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
Q = g.tensor_like(bhsd(q))
K = g.tensor_like(bhsd(k))
V = g.tensor_like(bhsd(v))
O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, **CAUSAL)
O.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
O.set_dim(list(bhsd(o).shape)).set_stride(list(bhsd(o).stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute({Q: bhsd(q), K: bhsd(k), V: bhsd(v), O: bhsd(o)}, workspace, handle=handle)
print(f"plan {g.get_plan_name_at_index(0)}, workspace {g.get_workspace_size()} B")

# The reference: PyTorch's attention on fp32 copies (``enable_gqa`` repeats the 8 K/V
# heads for the 64 query heads).
ref = torch.nn.functional.scaled_dot_product_attention(
    *(bhsd(t).float() for t in (q, k, v)), is_causal=True, enable_gqa=True
)
torch.testing.assert_close(bhsd(o).float(), ref, atol=2e-2, rtol=2e-2)
print(f"max abs error against fp32 PyTorch: {(bhsd(o).float() - ref).abs().max():.1e}")
del ref

# %%
# Measuring against FlashAttention-4: the training pair, checked
# --------------------------------------------------------------
# NVIDIA's table times the forward with statistics (what training runs) and the
# backward. Both graphs are built for any mask (``attention_graphs``, in
# ``cudnn_guide/studies/vendor_llama_table.py``: the lesson's graph with
# ``generate_stats=True``, and ``sdpa_backward``); the causal pair at the lesson's
# shape is filled with NaN, then checked against fp32 PyTorch autograd by relative
# norm, before anything is timed.
from cudnn_guide import check
from cudnn_guide.studies import vendor_llama_table

CUDNN = vendor_llama_table.CUDNN  # "cuDNN graph (heuristics A)"
layer = vendor_llama_table.LlamaLayer(batch=B, heads=H, kv_heads=HKV, head_dim=D)
t = layer.tensors(S)  # Q, K, V, dO (B×S×H×D), the outputs and the statistics
cudnn_fwd, cudnn_bwd = vendor_llama_table.attention_graphs(handle, CAUSAL, **t)
check.poison(t["o"], t["stats"], t["dq"], t["dk"], t["dv"])
cudnn_fwd()
cudnn_bwd()
ref_o, ref_grads = vendor_llama_table.dense_reference(t)  # SDPA, enable_gqa=True
outputs = [t["o"], t["dq"], t["dk"], t["dv"]]
checks = vendor_llama_table.check_outputs(CUDNN, outputs, ref_o, ref_grads)

# %%
# PyTorch's fp32 reference holds all ``B·H·S²`` attention scores, several times over
# for autograd: at 4096 tokens one copy is 8 GiB, at 32k tokens 512 GiB, more than the
# GPU has. The timing loop therefore checks against a reference computed in blocks
# (``block_reference``): the query rows ``i0:i1`` of the 8 query heads that share one
# K/V head, complete rows of scores, so that softmax, output and dQ rows are exact and
# dK and dV add up over blocks; at most two fp32 blocks of scores, up to 1 GiB each,
# are alive, beside the fp32 outputs. In fp32 with TF32 off, it must match PyTorch's
# dense fp32 autograd at S=4096 to fp32 accuracy (the tolerance for fp32 outputs).
checks = vendor_llama_table.check_block_reference(t, ref_o, ref_grads, causal=True)

# %%
# The same layer in FlashAttention-4
# ----------------------------------
# ``flash_attn_func`` takes the ``B×S×H×D`` tensors as they are, and is checked against
# the same fp32 reference. It compiles its kernels with the CuTe DSL on first use (the
# :ref:`first-call page <sphx_glr_auto_examples_plot_28_first_call.py>` measures what
# that costs); without it installed, the page says so and goes on. The compiler's
# warning on every new kernel that an ``aux_data`` argument "cannot be converted to a
# JitArgument" says nothing about the result, so it is silenced.
import warnings

from cudnn_guide.measure import fa4

warnings.filterwarnings("ignore", message=".*aux_data.*", category=UserWarning)
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if FA4_OK:
    from flash_attn.cute import flash_attn_func

    # Q, K, V copies that require gradients; O, and dQ, dK, dV of dO by autograd
    leaves, out4, grads4 = vendor_llama_table.fa4_outputs(
        flash_attn_func, t, causal=True
    )
    checks = vendor_llama_table.check_outputs(FA4, [out4, *grads4], ref_o, ref_grads)
else:
    print(f"{FA4}: {FA4_DETAIL}")
t = outputs = leaves = out4 = grads4 = ref_o = ref_grads = None
torch.cuda.empty_cache()

# %%
# Measuring the vendor's shapes
# -----------------------------
# Every bf16 shape of NVIDIA's table: 2k to 32k tokens, causal and not, forward and
# backward. Before a length and mask is timed, ``checked_contenders`` checks cuDNN's
# (filled with NaN first) and FlashAttention-4's O, dQ, dK and dV against the block
# reference; a failure stops the page there. Each pair is timed in interleaved rounds
# with CUDA events (GPU time less the launch cost, not CUPTI's), cold L2, and judged
# against its own rounds' tie band (>= ±1%). From 16k tokens on (about 13-330 ms a
# call) each round times 2 calls per contender instead of 5 (1 from 32k on), and the
# host cost is sampled from 2 calls (``timing``). cuDNN's forward writes its softmax
# statistics for the backward; FlashAttention-4's forward, timed on tensors without
# ``requires_grad``, is asked for its log-sum-exp (``return_lse=True``, where its
# ``flash_attn_func`` takes it) and writes the same statistics.
from cudnn_guide.measure import compare

SEQS = [2048, 4096, 8192, 16384, 32768]
FA4_FUNC = flash_attn_func if FA4_OK else None
FA4_LSE = vendor_llama_table.lse_keywords(FA4_FUNC)  # {"return_lse": True} or {}
FA4_ARGS = dict(flash_attn_func=FA4_FUNC, fa4_label=FA4, fa4_lse=FA4_LSE)
results, checked = {}, []
for s in SEQS:
    t = layer.tensors(s)
    for causal in (True, False):
        contenders, row = vendor_llama_table.checked_contenders(
            handle, t, causal, CAUSAL, **FA4_ARGS
        )
        checked.append(row)  # the checks, before any timing
        for phase in ("fwd", "bwd"):
            if len(contenders[phase]) < 2:
                continue
            results[(s, causal, phase)] = compare.compare(
                contenders[phase],  # cuDNN, then FlashAttention-4
                candidate=CUDNN,
                l2="cold",
                flops=layer.flops(s, causal, phase == "bwd"),
                params={"seq_len": s, "causal": causal, "phase": phase},
                tag=f"@ S={s} {'causal' if causal else 'full'} {phase}",
                **vendor_llama_table.timing(s),
            )
        contenders = None  # timed: freed before the next mask is checked
    t = None  # free this length's tensors before the next
    torch.cuda.empty_cache()

# %%
# What was checked before each length and mask was timed, against the block fp32
# reference (the largest relative L2 error of the four outputs, and the bf16
# tolerance), and the reference's peak memory on top of the layer's tensors (its time
# is not taken: a check shares the GPU with the pages recorded beside this one).
import pandas as pd

from cudnn_guide.report import html_table

html_table(pd.DataFrame(checked), vendor_llama_table.checked_formats(checked[0]))

# %%
# The vendor's table
# ------------------
# NVIDIA's numbers for the same shapes (``VENDOR_CSV``), quoted from the CSV committed
# in NVIDIA/cudnn-frontend, ``benchmark/attention_training/results/llama3.1/h200/
# llama3.1_20260928_130009.csv`` (commit 816ea45): an H200 with cuDNN 9.27.0 and
# frontend 1.31.0, timed with CUPTI over 10 iterations; bf16, non-deterministic
# backward.
VENDOR_CUDNN = vendor_llama_table.VENDOR_CUDNN  # the vendor's cuDNN, from the CSV
vendor = vendor_llama_table.vendor_times()  # (S, causal, phase) → (cuDNN, FA4) ms

# %%
# Ours beside theirs: each backend's time (ms) with its interval over rounds, the
# vendor's time, and cuDNN's speed-up over FlashAttention-4 in both (ours in-run; the
# Measurement notes at the end widen it for re-recording drift). Our time is the median
# over rounds of a backend's per-round medians (``Comparison.estimate``), not the median
# of its pooled samples that the record's measurements show. Where our verdict and
# NVIDIA's point opposite ways, the last column compares our two times with NVIDIA's.
table = vendor_llama_table.beside_vendor(
    results, vendor, fa4_label=FA4, fa4_detail=FA4_DETAIL
)
html_table(table)

# %%
# Throughput per shape: blue is cuDNN, orange FlashAttention-4; solid lines with error
# bars are ours, dotted lines with crosses NVIDIA's, on ours where the two agree.
import matplotlib.pyplot as plt

fig, axes = plt.subplots(2, 2, figsize=(9, 7.5), layout="constrained", sharex=True)
vendor_llama_table.plot_throughput(
    axes, results, vendor, SEQS, layer.flops, fa4_label=FA4, vendor_cudnn=VENDOR_CUDNN
)
plt.show()

# %%
# Conclusions
# -----------
# From the rows above, in-run; the Measurement notes add drift widening and clocks
# (``vendor_llama_table.conclusions``).
from cudnn_guide.report.prose import Prose

fa4_said = dict(fa4_label=FA4, fa4_detail=FA4_DETAIL, fa4_lse=bool(FA4_LSE))
sentences = vendor_llama_table.conclusions(
    results, vendor, checked, gpu=env.gpu, cudnn_version=env.cudnn_backend, **fa4_said
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison

for (s, causal, phase), c in sorted(results.items()):
    comparison(
        f"S={s} {'causal' if causal else 'no mask'} {phase}: "
        f"cuDNN over {FA4.split(' (')[0]}",
        c,
        FA4,
    )
# sphinx_gallery_end_ignore
Prose(*sentences)
