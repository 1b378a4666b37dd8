"""
MLA head sizes: Q and K of 192, V of 128
========================================

You build the causal attention forward and backward of DeepSeek V2/V3's multi-head
latent attention (MLA) shapes, whose queries and keys carry 192 values per head and
whose values and outputs carry 128, check both against PyTorch's autograd, then time a
training step (forward + backward) against PyTorch's SDPA backends, FlexAttention and
FlashAttention-4, wherever they accept two head sizes.

The two graphs are those of the
:ref:`attention backward page <sphx_glr_auto_examples_plot_09_sdpa_backward.py>`,
declared from tensors of two head sizes. Soft-capping and attention sinks, the other
variants of current LLMs, are on the
:ref:`soft-capping page <sphx_glr_auto_examples_plot_24_softcap.py>` and the
:ref:`attention sinks page <sphx_glr_auto_examples_plot_35_attention_sinks.py>`.

What you will learn:

* that nothing in cuDNN's declaration names the two head sizes: it reads them from the
  tensors, and O, dO and dV follow V;
* how the forward saves its softmax statistics for the backward;
* what a training step costs in FLOPs when d_qk ≠ d_v;
* the cuDNN step against PyTorch's SDPA backends, each forced and checked,
  FlexAttention and FlashAttention-4.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((9, 0), "cuDNN attention with MLA head sizes")
env = environment.collect()
env

# %%
# The lesson: a forward and a backward with d_qk = 192, d_v = 128
# ----------------------------------------------------------------
# 4 sequences of 4096 tokens, 16 heads, bf16, causal, all B×H×S×D. The graphs are
# declared from the tensors: Q and K with 192 values per head, V with 128; cuDNN reads
# the sizes. The forward writes O and its statistics (one fp32 log-sum-exp per query
# row, B×H×S×1); ``sdpa_backward`` reads Q, K, V, O, dO and those statistics, by the
# same names, with the same scale (1/√192: a score sums 192 products) and causal mask,
# and writes dQ, dK and dV, each shaped like its input.
import cudnn
import torch

B, H, S = 4, 16, 4096
DQK, DV = 192, 128  # Q, K: 192 values per head; V, O, dO: 128
SCALE = DQK**-0.5  # a score sums 192 products
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
torch.manual_seed(0)
qm, km = torch.randn(2, B, H, S, DQK, device="cuda", dtype=torch.bfloat16)
vm, d_om = torch.randn(2, B, H, S, DV, device="cuda", dtype=torch.bfloat16)
om = torch.empty_like(vm)
stats = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)
types = dict(
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)

gf = cudnn.pygraph(handle=handle, **types)
QM, KM, VM = (gf.tensor_like(t, name=n) for t, n in ((qm, "q"), (km, "k"), (vm, "v")))
OM, STATS = gf.sdpa(q=QM, k=KM, v=VM, attn_scale=SCALE, generate_stats=True, **causal)
OM.set_output(True).set_dim(list(om.shape)).set_stride(list(om.stride()))
STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT)
STATS.set_dim(list(stats.shape)).set_stride(list(stats.stride()))
gf.validate()
gf.build_operation_graph()
gf.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
gf.check_support()
gf.build_plans()
mla_fwd_pack = {QM: qm, KM: km, VM: vm, OM: om, STATS: stats}

gb = cudnn.pygraph(handle=handle, **types)
mla_inputs = dict(q=qm, k=km, v=vm, o=om, dO=d_om, stats=stats)
T = {n: gb.tensor_like(t, name=n) for n, t in mla_inputs.items()}
DQ, DK, DVG = gb.sdpa_backward(**T, attn_scale=SCALE, **causal)  # q=, k=, ..., stats=
mla_grads = {n: torch.empty_like(t) for n, t in dict(dq=qm, dk=km, dv=vm).items()}
for node_out, t in zip((DQ, DK, DVG), mla_grads.values()):
    node_out.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
gb.validate()
gb.build_operation_graph()
gb.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
gb.check_support()
gb.build_plans()
mla_bwd_pack = {T[n]: t for n, t in mla_inputs.items()}
mla_bwd_pack.update({DQ: mla_grads["dq"], DK: mla_grads["dk"], DVG: mla_grads["dv"]})
# One workspace serves both graphs: they run one after the other on one stream.
size = max(gf.get_workspace_size(), gb.get_workspace_size())
workspace = torch.empty(size, device="cuda", dtype=torch.uint8)
gf.execute(mla_fwd_pack, workspace, handle=handle)
gb.execute(mla_bwd_pack, workspace, handle=handle)

# The reference: PyTorch's attention on fp32 copies (TF32 off), backpropagating dO.
torch.backends.cuda.matmul.allow_tf32 = False
# autograd's backward thread needs this device's context
torch.cuda.set_device(qm.device)
leaves = [t.detach().float().requires_grad_() for t in (qm, km, vm)]
ref_om = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True)
ref_om.backward(d_om.float())
for got, want in zip((om, *mla_grads.values()), (ref_om, *(x.grad for x in leaves))):
    torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=3e-2)
dq_error = (mla_grads["dq"].float() - leaves[0].grad).abs().max()
print(f"max |dQ − fp32 reference| = {dq_error:.1e}")

# %%
# Measuring the MLA training step against PyTorch, FlexAttention and FlashAttention-4
# -----------------------------------------------------------------------------------
# First the guide's check of the lesson's graphs: their outputs filled with NaN, both
# run again, and each output compared with the fp32 reference by relative norm
# (``mla_training.check_outputs``, in ``cudnn_guide/studies/mla_training.py``).
from cudnn_guide import check, graphs
from cudnn_guide.studies import mla_training

mla_fwd = graphs.adopt(gf, handle, name="mla forward")
mla_bwd = graphs.adopt(gb, handle, name="mla backward")
check.poison(om, *mla_grads.values())
mla_fwd.execute(mla_fwd_pack)
mla_bwd.execute(mla_bwd_pack)
ref_grads = [leaf.grad for leaf in leaves]  # fp32 dQ, dK, dV: the baselines' check
checks = mla_training.check_outputs(om, mla_grads, ref_om.detach(), ref_grads)
del leaves, ref_om

# %%
# A training step (forward + backward) against PyTorch's SDPA on each of its backends,
# forced with ``sdpa_kernel`` (flash is FlashAttention-2; efficient, xFormers'
# memory-efficient kernel), FlexAttention, and FlashAttention-4 (its own B×S×H×D
# copies, autograd), each checked first on dQ, dK and dV against the fp32 autograd
# reference (``mla_training.admit_steps`` and ``admit_fa4``). A backend that refuses
# the shapes is listed with its error, whole.
from torch.nn.attention import SDPBackend

from cudnn_guide.measure import baselines, compare, fa4

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if not FA4_OK:
    print(f"{FA4}: {FA4_DETAIL}")
mla_fwd_launch, mla_bwd_launch = mla_fwd.bind(mla_fwd_pack), mla_bwd.bind(mla_bwd_pack)


def cudnn_mla_step():
    mla_fwd_launch()
    mla_bwd_launch()


def backend(b):  # F.sdpa under sdpa_kernel([b]): a refusal raises
    return baselines.forced_sdpa(b, is_causal=True)


mla_contenders = {"cuDNN MLA step": cudnn_mla_step}
attends = {
    "PyTorch SDPA, flash": backend(SDPBackend.FLASH_ATTENTION),
    "PyTorch SDPA, efficient": backend(SDPBackend.EFFICIENT_ATTENTION),
    "PyTorch SDPA, cuDNN backend": backend(SDPBackend.CUDNN_ATTENTION),
    "FlexAttention (compiled)": mla_training.flex_causal(S),  # causal block mask
}
# one autograd step each over the same leaves; contender name -> why it did not run
mla_unavailable = mla_training.admit_steps(
    mla_contenders, attends, (qm, km, vm), d_om, ref_grads
)
if FA4_OK:  # dQ, dK and dV checked against the same fp32 autograd reference
    mla_training.admit_fa4(
        mla_contenders, mla_unavailable, FA4, (qm, km, vm), d_om, ref_grads, scale=SCALE
    )
# FLOPs per visible (query, key) pair: the forward's QKᵀ (2·d_qk) and PV (2·d_v); the
# backward recomputes QKᵀ (2·d_qk), then dV = PᵀdO (2·d_v), dP = dO·Vᵀ (2·d_v),
# dQ = dS·K and dK = dSᵀQ (2·d_qk each). With d_qk = d_v, forward + backward would be
# 3.5× the forward; at 192/128 it is 2(4·192 + 3·128) = 2304 FLOPs per pair.
mla_flops = mla_training.step_flops(B, H, S, DQK, DV)  # S(S + 1)/2 pairs: key ≤ query
mla_cmp = compare.compare(
    mla_contenders,
    candidate="cuDNN MLA step",
    l2="cold",
    rounds=5,
    flops=mla_flops,
    tag="mla",
)

# %%
# Every contender's time, and cuDNN's speed-up over it with the in-run 95% interval
# over rounds and the verdict against the measured tie band. The time (and the rate
# from it) is the median over rounds of the contender's per-round medians
# (``Comparison.estimate``, as in the plot and the conclusions), not the median of all
# its samples pooled, which the record's measurements show.
import pandas as pd

from cudnn_guide.report import html_table

US = "µs, median of round medians"
html_table(
    pd.DataFrame(mla_training.contender_rows(mla_cmp, US)),
    {US: "{:.0f}", "TFLOP/s": "{:.0f}", "cuDNN's speed-up": "{:.2f}×"},
)

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison

fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
plot_comparison(
    mla_cmp, "µs", ax=ax, xlabel="µs per call", title="MLA 192/128 training step"
)
plt.show()

# %%
# Conclusions
# -----------
# Computed from the comparison above when the page is recorded
# (``mla_training.conclusions``).
from cudnn_guide.report.prose import Prose

sentences = mla_training.conclusions(
    mla_cmp, fa4_label=FA4, fa4_detail=FA4_DETAIL, unavailable=mla_unavailable
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison

# against the fastest contender at this shape (the record names which); the slower
# ones are in the prose
comparison("MLA step: speed-up over the fastest contender", mla_cmp)
# sphinx_gallery_end_ignore
Prose(*sentences)
