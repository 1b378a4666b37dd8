"""
Training extras: attention dropout, and a bit-identical backward
================================================================

Two switches on cuDNN's attention graphs matter for training runs you want to reproduce.
This page builds a causal attention forward and its deterministic backward with the
frontend, checks the gradients against PyTorch, and then measures what each switch costs
at a training shape.

What you will learn:

* **deterministic backward**: ``sdpa_backward(..., use_deterministic_algorithm=True)``.
  The default backward accumulates dQ with atomics, whose order varies from run to run;
  the deterministic one does not, at a price in time and workspace that this page
  measures, beside FlashAttention-4's own deterministic backward;
* **dropout** inside the fused kernel: ``dropout=(probability, seed, offset)``, where
  ``seed`` and ``offset`` are device tensors, so a captured CUDA graph can advance the
  offset without a rebuild. The dropped probabilities are never written to memory, so
  the check is statistical, and the determinism under a fixed seed and offset is exact.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: a causal forward and its deterministic backward
# -----------------------------------------------------------
# Causal attention, 2 × 4096 tokens, 16 heads of 128. The forward writes O and the
# softmax statistics (``generate_stats=True``), as a training forward does; the backward
# reads them and writes dQ, dK, dV. ``use_deterministic_algorithm=True`` is the only
# change from the default backward.
import cudnn
import torch

B, H, S, D = 2, 16, 4096, 128
q, k, v, d_o = torch.randn(4, B, H, S, D, device="cuda", dtype=torch.bfloat16)
o, dq, dk, dv = (torch.empty_like(t) for t in (q, q, k, v))
stats = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
BF16, FP32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
TYPES = dict(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32)
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT
CAUSAL = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)


def build(g):
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()


fwd = cudnn.pygraph(handle=handle, **TYPES)
Q, K, V = (fwd.tensor_like(t) for t in (q, k, v))
O, STATS = fwd.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=True, **CAUSAL)
O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
STATS.set_output(True).set_data_type(FP32)
STATS.set_dim(list(stats.shape)).set_stride(list(stats.stride()))
build(fwd)

bwd = cudnn.pygraph(handle=handle, **TYPES)
inputs = dict(q=q, k=k, v=v, o=o, dO=d_o, stats=stats)
T = {name: bwd.tensor_like(t, name=name) for name, t in inputs.items()}
dQ, dK, dV = bwd.sdpa_backward(
    **T, attn_scale=D**-0.5, use_deterministic_algorithm=True, **CAUSAL
)
for node, t in ((dQ, dq), (dK, dk), (dV, dv)):
    node.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
build(bwd)

fwd_pack = {Q: q, K: k, V: v, O: o, STATS: stats}
bwd_pack = {T[name]: t for name, t in inputs.items()} | {dQ: dq, dK: dk, dV: dv}
size = max(fwd.get_workspace_size(), bwd.get_workspace_size())
workspace = torch.empty(size, device="cuda", dtype=torch.uint8)
fwd.execute(fwd_pack, workspace, handle=handle)
bwd.execute(bwd_pack, workspace, handle=handle)
print(f"deterministic backward: {bwd.get_workspace_size() / 2**20:.0f} MiB workspace")

# %%
# Checked against PyTorch's attention in fp32, forward and backward.
qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
ref = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=True)
ref.backward(d_o.float())
pairs = {"O": (o, ref), "dQ": (dq, qf.grad), "dK": (dk, kf.grad), "dV": (dv, vf.grad)}
for name, (got, want) in pairs.items():
    torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=3e-2)
    print(f"{name}: max abs error {(got.float() - want).abs().max().item():.1e}")

# %%
# Measuring the deterministic backward
# ------------------------------------
# The backward graph is built twice, deterministic and default; each is checked against
# the fp32 reference, then run ten times to count the distinct dQ bit patterns, then the
# two race in interleaved rounds.
from cudnn_guide import check, graphs
from cudnn_guide.measure import compare, fa4
from cudnn_guide.studies import dropout_determinism as study  # this page's measuring

BWD_SHAPE = (B, S)
backward = {  # deterministic → the built graph, its launcher, the dQ, dK, dV it writes
    det: study.backward_graph(handle, inputs, deterministic=det, mask=CAUSAL)
    for det in (True, False)
}
ref_grads = study.fp32_grads(q, k, v, d_o)  # causal SDPA on fp32 copies, TF32 off
checks, distinct = study.check_and_count(backward, ref_grads)
assert distinct[True] == 1

det_cost = compare.compare(
    {
        "deterministic": backward[True].launch,
        "default (atomics)": backward[False].launch,
    },
    candidate="deterministic",
    l2="cold",
    rounds=9,
    tag="backward",
)
s = det_cost.versus["default (atomics)"]
print(f"deterministic backward over default: {s['value']:.2f}× ({s['verdict']})")

# %%
# Measuring against FlashAttention-4's deterministic backward
# -----------------------------------------------------------
# FlashAttention-4 has a deterministic backward too (``deterministic=True``). It runs
# inside autograd, forward and backward together, so the like-for-like cuDNN contender
# is one forward graph plus the deterministic backward graph: one training step each,
# checked against the same fp32 gradients, bit patterns counted the same way.
import textwrap

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
CUDNN_STEP = "cuDNN graph (heuristics A), forward + deterministic backward"
FA4_STEP = f"{FA4}, deterministic"
forward = graphs.adopt(fwd, handle, name="forward").bind(fwd_pack)
det_launch = backward[True].launch


def cudnn_step():
    forward()
    det_launch()


cudnn_step()
checks += study.check_grads(backward[True].grads, ref_grads, "cuDNN training step")
steps = {CUDNN_STEP: cudnn_step}
fa4_distinct = None
if FA4_OK:  # checked and admitted to steps, its dQ bit patterns counted (scale D**-0.5)
    fa4_distinct = study.admit_fa4(steps, FA4_STEP, q, k, v, d_o, ref_grads)
else:
    print(textwrap.fill(f"{FA4}: {FA4_DETAIL}", 88))
fa4_cmp = None
if FA4_STEP in steps:
    fa4_cmp = compare.compare(
        steps, candidate=CUDNN_STEP, l2="cold", rounds=7, tag="deterministic step"
    )
    s = fa4_cmp.versus[FA4_STEP]
    print(f"cuDNN step over {FA4}: {s['value']:.2f}× ({s['verdict']})")

# %%
# Measuring dropout
# -----------------
# Dropout at a training shape, 4 × 2048 tokens, 16 heads of 128, no mask (not causal),
# so that the kernel runs long enough for launch overhead not to matter; forward only.
# Seed and offset are int64 1×1×1×1 tensors on the GPU, passed to the graph as
# ``sdpa(..., dropout=(p, SEED, OFFSET))`` (``study.dropout_graph``; p = 0: no dropout).
# It also writes the statistics. Printed: the plan cuDNN picked and its workspace.
from cudnn_guide.graphs import attention_inputs

B, H, S, D, P = 4, 16, 2048, 128, 0.1
dd = study.dropout_inputs(B, H, S, D)  # q, k, v, o, stats; seed 1234, offset 0
dropout, pack, _ = study.dropout_graph(handle, dd, P)
plain, plain_pack, o0 = study.dropout_graph(handle, dd, 0)
dropout.execute(pack)
print(dropout.report.plan_name, f"workspace {dropout.report.workspace_bytes} B")

# %%
# Dropout keeps each probability with chance 1 − p and scales it by 1 / (1 − p), so its
# *expected* output is attention without dropout. Averaging N runs with different
# **seeds** (offset 0: independent random streams) must approach the fp32 reference,
# with an error that falls like 1/√N; a wrong scale or a biased mask would leave an
# error that does not fall.
reference = attention_inputs.reference(dd["q"], dd["k"], dd["v"])
plain.execute(plain_pack)
checks.append(check.check(o0, reference, name="forward without dropout"))
run_dropout = lambda: dropout.execute(pack)
errors = study.dropout_mean_errors(run_dropout, dd["o"], dd["seed"], reference)
falls = errors[1] / errors[64]
print(f"from 1 to 64 runs the error falls {falls:.1f}× (1/√N predicts 8×)")
assert 5 < falls < 11, f"the dropout average does not converge like 1/√N: {errors}"
del reference

# %%
# Bit-identical under a fixed seed and offset; a different output at the next offset.
same, differs = study.replay_and_advance(run_dropout, dd["o"], dd["offset"], at=7)
print(f"same seed and offset: bit-identical: {same}; next offset differs: {differs}")
assert same and differs

# %%
# The dropout forward against the same graph without dropout, in interleaved rounds.
dropout_cost = compare.compare(
    {"with dropout": dropout.bind(pack), "without dropout": plain.bind(plain_pack)},
    candidate="with dropout",
    l2="cold",
    rounds=9,
    tag="dropout",
)
s = dropout_cost.versus["without dropout"]
print(f"forward with dropout p={P} over without: {s['value']:.2f}× ({s['verdict']})")

# %%
import matplotlib.pyplot as plt

study.plot_costs(errors, P, dropout_cost, det_cost)  # convergence; each switch's cost
plt.show()

# %%
# Conclusions
# -----------
from cudnn_guide.report.prose import Prose

ws = {det: backward[det].built.report.workspace_bytes for det in (True, False)}
fa4_sentence = study.fa4_sentence(
    fa4_cmp, FA4_STEP, fa4_distinct, FA4_OK, FA4, FA4_DETAIL
)
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, keep

comparison("dropout forward: speed-up over no dropout", dropout_cost)
comparison("deterministic backward: speed-up over default", det_cost)
if fa4_cmp is not None:
    comparison(
        "deterministic training step: speed-up over FlashAttention-4", fa4_cmp, FA4_STEP
    )
keep(dropout_errors=errors, distinct_bit_patterns=distinct, workspace_bytes=ws)
if fa4_distinct is not None:
    keep(fa4_distinct_bit_patterns=fa4_distinct)
# sphinx_gallery_end_ignore

Prose(
    f"Both switches are measured at training shapes: the backward at "
    f"{BWD_SHAPE[0]}×{BWD_SHAPE[1]} tokens, dropout at {B}×{S} tokens, "
    f"{H} heads of {D}.",
    f"* The deterministic backward gave {distinct[True]} bit "
    f"pattern{'' if distinct[True] == 1 else 's'} in 10 runs "
    f"(the default gave {distinct[False]}); it is {det_cost.describe()}, and needs "
    f"{ws[True] / 2**20:.0f} MiB of workspace instead of {ws[False] / 2**20:.0f} MiB.",
    fa4_sentence,
    f"* Dropout p={P}: the mean of 64 runs with different seeds is within "
    f"{errors[64]:.3f} (relative) of attention without dropout, falling {falls:.1f}× "
    f"from one run, as an unbiased mask should; the forward with dropout is "
    f"{dropout_cost.describe()}.",
)
