"""
Attention for training: forward with statistics, then backward
==============================================================

Training needs attention twice: the forward pass, which must now also save the softmax
statistics, and the backward pass, which turns the gradient of the output into gradients
of Q, K and V. cuDNN builds each as one fused graph; the statistics from the forward
feed the backward, so the backward never recomputes the softmax normalisation.

What you will learn:

* ``generate_stats=True``: the forward writes one fp32 log-sum-exp per query row;
* ``sdpa_backward``: its inputs (Q, K, V, O, dO and the statistics) and outputs (dQ, dK,
  dV), with the same mask and scale as the forward;
* how to check gradients against PyTorch autograd in fp32;
* forward-plus-backward throughput from 1k to 16k tokens against PyTorch's fused SDPA
  backends (flash, memory-efficient, cuDNN; not math), each forced and checked, and
  FlashAttention-4, a beta (not FlashAttention-3; PyTorch's flash is FlashAttention-2).
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention (forward and backward)")
env = environment.collect()
env

# %%
# The lesson: two graphs, one training step
# -----------------------------------------
# 2 sequences of 4096 tokens, 16 heads of dimension 128, bf16, causal, all B×H×S×D. The
# forward writes ``o`` and ``stats`` (B×H×S×1, fp32): it is the inference graph of the
# :ref:`causal attention page <sphx_glr_auto_examples_plot_05_sdpa_causal.py>` with
# ``generate_stats=True``. ``sdpa_backward`` reads the forward's inputs, output and
# statistics and the gradient ``d_o`` (same scale and mask) and writes dQ, dK, dV.
import cudnn
import torch

b, h, s, d = 2, 16, 4096, 128  # batch, heads, tokens, head dim
q, k, v, d_o = (
    torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in "1234"
)
o, dq, dk, dv = (torch.empty_like(q) for _ in "1234")
stats = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)  # one LSE per row

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
CAUSAL = dict(  # the mask, and fp32 math inside the node: the same in both graphs
    diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
    diagonal_band_right_bound=0,
    compute_data_type=cudnn.data_type.FLOAT,
)


def new_graph(name):
    return cudnn.pygraph(
        handle=handle,
        name=name,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )


def like(node_output, t):
    """Mark a node's result as an output laid out like the torch tensor ``t``."""
    node_output.set_output(True).set_data_type(t.dtype)
    node_output.set_dim(list(t.shape)).set_stride(list(t.stride()))


def sdpa_training_forward(q, k, v, o, stats):
    """Causal attention that also writes the softmax statistics; built."""
    g = new_graph("sdpa_forward_training")
    Q = g.tensor_like(q, name="q")
    K = g.tensor_like(k, name="k")
    V = g.tensor_like(v, name="v")
    common = dict(attn_scale=q.shape[-1] ** -0.5, **CAUSAL)  # the backward's too
    O, STATS = g.sdpa(name="sdpa", q=Q, k=K, v=V, generate_stats=True, **common)
    like(O, o)
    like(STATS, stats)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, {Q: q, K: k, V: v, O: o, STATS: stats}


def sdpa_backward(q, k, v, o, d_o, stats, dq, dk, dv):
    """dQ, dK, dV of causal attention from the forward's tensors and d_o; built."""
    g = new_graph("sdpa_backward")
    Q = g.tensor_like(q, name="q")
    K = g.tensor_like(k, name="k")
    V = g.tensor_like(v, name="v")
    O = g.tensor_like(o, name="o")
    dO = g.tensor_like(d_o, name="d_o")
    STATS = g.tensor_like(stats, name="stats")
    common = dict(attn_scale=q.shape[-1] ** -0.5, **CAUSAL)  # as in the forward
    dQ, dK, dV = g.sdpa_backward(
        name="sdpa_backward", q=Q, k=K, v=V, o=O, dO=dO, stats=STATS, **common
    )
    for node_output, t in ((dQ, dq), (dK, dk), (dV, dv)):
        like(node_output, t)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    pack = {Q: q, K: k, V: v, O: o, dO: d_o, STATS: stats}
    return g, pack | {dQ: dq, dK: dk, dV: dv}


gf, fwd_pack = sdpa_training_forward(q, k, v, o, stats)
gb, bwd_pack = sdpa_backward(q, k, v, o, d_o, stats, dq, dk, dv)
# One workspace serves both graphs: they run one after the other on one stream, so the
# backward sees the forward's O and statistics.
size = max(gf.get_workspace_size(), gb.get_workspace_size())
workspace = torch.empty(size, device="cuda", dtype=torch.uint8)
gf.execute(fwd_pack, workspace, handle=handle)
gb.execute(bwd_pack, workspace, handle=handle)
print("plans:", gf.get_plan_name_at_index(0), gb.get_plan_name_at_index(0))

# The reference: PyTorch's attention on fp32 copies, backpropagating the same d_o.
q32, k32, v32 = (t.float().requires_grad_() for t in (q, k, v))
ref = torch.nn.functional.scaled_dot_product_attention(q32, k32, v32, is_causal=True)
ref.backward(d_o.float())
for got, want in ((o, ref.detach()), (dq, q32.grad), (dk, k32.grad), (dv, v32.grad)):
    torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=3e-2)
print(f"max abs error of dQ: {(dq.float() - q32.grad).abs().max().item():.1e}")

# %%
# Measuring against autograd and every backend
# --------------------------------------------
# Before anything is timed, the outputs are filled with NaN (an element never written
# fails) and both graphs run again; each output is compared with the fp32 reference by
# relative norm. The statistics are checked directly: the log-sum-exp of each row of
# scaled, masked scores.
from cudnn_guide import graphs
from cudnn_guide.graphs import attention
from cudnn_guide.studies import attention_backward as study  # this page's measuring

problem = attention.SdpaProblem(batch=b, heads=h, seq=s, head_dim=d, causal=True)
ins = dict(q=q, k=k, v=v, o=o, d_o=d_o, stats=stats, dq=dq, dk=dk, dv=dv)
ref_grads = {"q": q32.grad, "k": k32.grad, "v": v32.grad}
print(problem)


def run_both():
    gf.execute(fwd_pack, workspace, handle=handle)
    gb.execute(bwd_pack, workspace, handle=handle)


checks = study.check_forward_backward(run_both, ins, ref, ref_grads, problem.scale)
for c in checks:
    print(c)
del q32, k32, v32, ref

# %%
# The baselines, each forced and checked
# --------------------------------------
# PyTorch computes the same step through autograd: ``scaled_dot_product_attention``
# forward, then ``backward(d_o)``, one backend pinned by ``sdpa_kernel``, the gradients
# reset to ``None`` before each step. On this torch the flash backend is
# FlashAttention-2; the cuDNN backend calls cuDNN's own fused kernels, so a tie with it
# is expected, not a rival's result.
from cudnn_guide.measure import baselines, fa4

BACKENDS = study.sdpa_backends()  # display name → SDPBackend
for name, backend in BACKENDS.items():  # each one's gradients checked, or its refusal
    step, grads = study.torch_training_step(backend, problem, ins)
    baselines.admit({}, name, step, check=study.grads_checked(name, grads, ref_grads))

# %%
# FlashAttention-4 (flash-attn-4, a beta): the same step through its autograd function,
# on its own B×S×H×D copies, its gradients checked against the same fp32 reference. Its
# CuTe DSL compiler warns that an ``aux_data`` argument "cannot be converted to a
# JitArgument" on every new kernel; the warning says nothing about the result: silenced.
import warnings

warnings.filterwarnings("ignore", message=".*aux_data.*", category=UserWarning)
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if FA4_OK:
    fa4_step, fa4_grads = fa4.training_step(
        q, k, v, d_o, causal=True, scale=problem.scale
    )
    fa4_check = study.grads_checked(FA4, fa4_grads, ref_grads)
    baselines.admit({}, FA4, fa4_step, check=fa4_check)
else:
    print(f"{FA4}: {FA4_DETAIL}")
ref_grads.clear()
torch.cuda.empty_cache()

# %%
# Measuring where the time goes at 4096 tokens
# --------------------------------------------
# Forward (with statistics) and backward timed separately, cold L2. The backward does
# 2.5× the forward's matrix work (five GEMMs to two); how much longer it takes is
# measured below.
fwd_launch = graphs.adopt(gf, handle, name="forward").bind(fwd_pack)  # pack checked
bwd_launch = graphs.adopt(gb, handle, name="backward").bind(bwd_pack)
parts = {"cuDNN forward (with stats)": (fwd_launch, 1.0)}  # (launcher, matrix work)
parts["cuDNN backward"] = (bwd_launch, 2.5)
split = study.time_split(parts, problem)  # in this order, cold L2
for m in split:
    print(f"{m.label}: median {1e3 * m.median_ms:.1f} µs, {m.tflops:.0f} TFLOP/s")
bwd_over_fwd = split[1].median_ms / split[0].median_ms
print(f"backward / forward time: {bwd_over_fwd:.2f}× for 2.5× the matrix work")

# %%
# Measuring across sequence lengths
# ---------------------------------
# 16,384 tokens per point (B = 16384 / S), 16 heads of 128. One training step = forward
# + backward; its FLOPs are 3.5× the causal forward's
# (:func:`~cudnn_guide.graphs.attention.training_flops`). Each cuDNN pair (the lesson's
# graphs, rebuilt per length) is checked against autograd (dQ) before it is timed.
from cudnn_guide.measure import sweep

seqs = [1024, 2048, 4096, 8192, 16384]
CAND = "cuDNN graphs (fwd + bwd)"
problem_at = lambda s: attention.SdpaProblem(
    batch=16384 // s, heads=16, seq=s, head_dim=128, causal=True
)
at = study.TrainingSweep(sdpa_training_forward, sdpa_backward, handle, problem_at)
impls = {CAND: at.cudnn_step}
impls.update({name: at.torch_step(backend) for name, backend in BACKENDS.items()})
if FA4_OK:
    impls[FA4] = at.fa4_step
step_flops = lambda s: attention.training_flops(problem_at(s))
settings = dict(x="seq_len", l2="cold", flops=step_flops, candidate=CAND, rounds=7)
result = sweep.sweep(seqs, impls, **settings)  # interleaved rounds, verdicts per length

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.measure.ceilings import measure_ceilings

ceil = measure_ceilings()
study.plot_tflops(result, ceil)  # TFLOP/s by length, under the datasheet bf16 peak
plt.show()

# %%
import pandas as pd

from cudnn_guide.report import html_table, sweep_table

sweep_table(result, "tflops", title="causal SDPA forward + backward, TFLOP/s")

# %%
# The verdicts at every length (above 1: the cuDNN step is faster):
html_table(pd.DataFrame(result.verdicts()), {"speed-up": "{:.2f}×"})

# %%
# Conclusions
# -----------
# Computed from the measurements above; the verdicts compare GPU time, not host time.
from cudnn_guide.report.prose import Prose

peak_s = study.peak_length(result, CAND)
peak = result.comparisons[peak_s]
peak_est = peak.estimate(CAND, "TFLOP/s")
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

headline("cuDNN fwd+bwd peak TFLOP/s", unit="TFLOP/s", seq_len=peak_s, **peak_est)
comparison("speed-up over the fastest contender at that length", peak)
for s in seqs:  # each length's verdict against the fastest contender there
    comparison(f"S={s}: speed-up over the fastest contender", result.comparisons[s])
# sphinx_gallery_end_ignore
sentences = study.conclusions(
    result, CAND, peak_s, ceil, problem.seq, bwd_over_fwd, FA4, FA4_DETAIL
)
Prose(*sentences)
