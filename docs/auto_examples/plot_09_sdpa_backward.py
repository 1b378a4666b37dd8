"""
Attention for training: forward with statistics, then backward
==============================================================

Training needs attention twice: the forward pass, which must now also save the softmax
statistics, and the backward pass, which turns the gradient of the output into gradients of
Q, K and V. cuDNN builds each as one fused graph; the statistics from the forward feed the
backward, so the backward never recomputes the softmax normalisation.

What you will learn:

* ``generate_stats=True``: the forward writes one fp32 log-sum-exp per query row;
* ``sdpa_backward``: its inputs (Q, K, V, O, dO and the statistics) and outputs (dQ, dK, dV),
  with the same mask and scale as the forward;
* how to check gradients against PyTorch autograd in fp32;
* forward-plus-backward throughput from 1k to 16k tokens against each of PyTorch's SDPA
  backends, each forced and checked, and against FlashAttention-4, the kernel Hopper users
  ship (PyTorch's own flash backend is FlashAttention-2).
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention (forward and backward)")
env = environment.collect()
env

# %%
# Two graphs, one training step
# -----------------------------
# 2 sequences of 4096 tokens, 16 heads of dimension 128, bf16, causal. The forward writes
# ``o`` and ``stats`` (B×H×S×1, fp32); the backward reads both, plus the incoming gradient
# ``d_o``.
# The forward is the inference graph of the previous page with ``generate_stats=True``;
# ``sdpa_backward`` takes the forward's inputs, its output and statistics, and ``dO``, with the
# same scale and mask, and returns dQ, dK, dV.
import cudnn
import torch

from cudnn_guide.graphs import attention
from cudnn_guide import check, graphs

handle = graphs.handle_for_current_device()
CAUSAL = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)


def new_graph(name):
    return cudnn.pygraph(handle=handle, name=name, io_data_type=cudnn.data_type.BFLOAT16,
                         intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)


def like(graph_output, t):
    """Mark a node's result as an output laid out like the torch tensor ``t`` that receives it."""
    return graph_output.set_output(True).set_data_type(t.dtype).set_dim(list(t.shape)).set_stride(list(t.stride()))


def sdpa_training_forward(q, k, v, o, stats):
    """Causal attention that also writes the softmax statistics; returns the built graph and its pack."""
    g = new_graph("sdpa_forward_training")
    Q, K, V = g.tensor_like(q, name="q"), g.tensor_like(k, name="k"), g.tensor_like(v, name="v")
    O, STATS = g.sdpa(name="sdpa", q=Q, k=K, v=V, generate_stats=True, attn_scale=q.shape[-1] ** -0.5,
                      compute_data_type=cudnn.data_type.FLOAT, **CAUSAL)
    like(O, o)
    like(STATS, stats)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, {Q: q, K: k, V: v, O: o, STATS: stats}


def sdpa_backward(q, k, v, o, d_o, stats, dq, dk, dv):
    """dQ, dK, dV of causal attention from the forward's tensors and d_o; returns the built graph and its pack."""
    g = new_graph("sdpa_backward")
    T = {n: g.tensor_like(t, name=n) for n, t in (("q", q), ("k", k), ("v", v), ("o", o), ("d_o", d_o),
                                                   ("stats", stats))}
    dQ, dK, dV = g.sdpa_backward(name="sdpa_backward", q=T["q"], k=T["k"], v=T["v"], o=T["o"], dO=T["d_o"],
                                 stats=T["stats"], attn_scale=q.shape[-1] ** -0.5,
                                 compute_data_type=cudnn.data_type.FLOAT, **CAUSAL)
    for node_out, t in ((dQ, dq), (dK, dk), (dV, dv)):
        like(node_out, t)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    pack = {T[n]: t for n, t in (("q", q), ("k", k), ("v", v), ("o", o), ("d_o", d_o), ("stats", stats))}
    return g, pack | {dQ: dq, dK: dk, dV: dv}


def training_pair(ins):
    """Both graphs for the tensors of ``attention.make_training_inputs``, adopted for the sweep's timing."""
    gf, fwd_pack = sdpa_training_forward(*(ins[n] for n in ("q", "k", "v", "o", "stats")))
    gb, bwd_pack = sdpa_backward(*(ins[n] for n in ("q", "k", "v", "o", "d_o", "stats", "dq", "dk", "dv")))
    return graphs.adopt(gf, handle, name="forward"), fwd_pack, graphs.adopt(gb, handle, name="backward"), bwd_pack


problem = attention.SdpaProblem(batch=2, heads=16, seq=4096, head_dim=128, causal=True)
ins = attention.make_training_inputs(problem, seed=0)
gf, fwd_pack = sdpa_training_forward(*(ins[n] for n in ("q", "k", "v", "o", "stats")))
gb, bwd_pack = sdpa_backward(*(ins[n] for n in ("q", "k", "v", "o", "d_o", "stats", "dq", "dk", "dv")))
print(problem)
print(f"forward plan {gf.get_plan_name_at_index(0)}, workspace {gf.get_workspace_size()} B; "
      f"backward plan {gb.get_plan_name_at_index(0)}, workspace {gb.get_workspace_size()} B")

# One workspace serves both graphs (they run one after the other on one stream); the handle runs
# on torch's current stream, so the backward sees the forward's O and statistics.
check.poison(ins["o"], ins["stats"], ins["dq"], ins["dk"], ins["dv"])
workspace = torch.empty(max(gf.get_workspace_size(), gb.get_workspace_size()), device="cuda", dtype=torch.uint8)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
gf.execute(fwd_pack, workspace, handle=handle)
gb.execute(bwd_pack, workspace, handle=handle)

# %%
# Check against autograd
# ----------------------
# The reference runs PyTorch's attention in fp32 (TF32 off) and backpropagates the same
# ``d_o``. The statistics are checked directly: the log-sum-exp of each row of scaled, masked
# scores.
ref_o, ref_grads = check.reference_grads(lambda q, k, v: problem.torch_forward(q, k, v),
                                         {n: ins[n] for n in "qkv"}, ins["d_o"])
checks = [check.check(ins["o"], ref_o, name="O")]
checks += [check.check(ins["d" + n], ref_grads[n], name="d" + n.upper()) for n in "qkv"]
with check.full_precision():
    scores = (ins["q"].float() @ ins["k"].float().transpose(-1, -2)) * problem.scale
    future = torch.ones(problem.seq, problem.seq, dtype=torch.bool, device="cuda").triu(1)
    lse = torch.logsumexp(scores.masked_fill(future, float("-inf")), dim=-1, keepdim=True)
    del scores
checks.append(check.check(ins["stats"], lse, name="stats (log-sum-exp)"))
for c in checks:
    print(c)

# %%
# The baselines, each forced and checked
# --------------------------------------
# PyTorch computes the same step through autograd: ``scaled_dot_product_attention`` forward,
# then ``backward(d_o)``. ``sdpa_kernel`` pins one backend at a time; gradients are reset to
# ``None`` before each step so no step pays for accumulating into the previous one's.
from cudnn_guide.measure import baselines

BACKENDS = baselines.sdpa_backends()


def torch_step(backend, p, data):
    leaves = [data[n].detach().requires_grad_(True) for n in "qkv"]
    attend = baselines.forced_sdpa(backend, is_causal=p.causal, scale=p.scale)
    return baselines.training_step(attend, leaves, data["d_o"]), leaves


for name, backend in BACKENDS.items():  # each backend's gradients checked, or its refusal shown
    step, leaves = torch_step(backend, problem, ins)
    baselines.admit({}, name, step, check=lambda _, leaves=leaves, name=name, ref_grads=ref_grads: [
        check.check(leaf.grad, ref_grads[n], name=f"{name} d{n.upper()}") for n, leaf in zip("qkv", leaves)])

# %%
# FlashAttention-4, the kernel Hopper users ship (PyTorch's own flash backend is
# FlashAttention-2): the same step through its autograd function, on its own B×S×H×D copies,
# its gradients checked against the same fp32 reference.
from cudnn_guide.measure import fa4

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if FA4_OK:
    fa4_step, fa4_grads = fa4.training_step(*(ins[n] for n in ("q", "k", "v", "d_o")), causal=True,
                                            scale=problem.scale)
    baselines.admit({}, FA4, fa4_step, check=lambda _, ref=ref_grads: [
        check.check(g, ref[n], name=f"{FA4} d{n.upper()}") for n, g in zip("qkv", fa4_grads())])
else:
    print(f"{FA4}: {FA4_DETAIL}")
del ref_o, ref_grads
torch.cuda.empty_cache()

# %%
# Where the time goes at 4096 tokens
# ----------------------------------
# Forward (with statistics) and backward timed separately, cold L2. The backward does 2.5×
# the forward's matrix work (five GEMMs to two); how much longer it takes is measured below.
from cudnn_guide.measure import bench

fwd_launch = graphs.adopt(gf, handle, name="forward").bind(fwd_pack)  # checks the pack, launches on the current stream
bwd_launch = graphs.adopt(gb, handle, name="backward").bind(bwd_pack)
split = [
    bench.benchmark(fwd_launch, label="cuDNN forward (with stats)", l2="cold", flops=problem.flops,
                    params={"impl": "cuDNN forward (with stats)", "size": str(problem)}),
    bench.benchmark(bwd_launch, label="cuDNN backward", l2="cold", flops=2.5 * problem.flops,
                    params={"impl": "cuDNN backward", "size": str(problem)}),
]
for m in split:
    print(m)
print(f"backward / forward time: {split[1].median_ms / split[0].median_ms:.2f}× for 2.5× the matrix work")

# %%
# Sweep the sequence length
# -------------------------
# 16,384 tokens per point (B = 16384 / S), 16 heads of 128. One training step = forward +
# backward; its FLOPs are 3.5× the causal forward's (:func:`~cudnn_guide.graphs.attention.training_flops`).
# Each cuDNN pair is checked against autograd (dQ) before it is timed.
from cudnn_guide.measure import sweep

seqs = [1024, 2048, 4096, 8192, 16384]
cases = {}


def problem_at(s):
    return attention.SdpaProblem(batch=16384 // s, heads=16, seq=s, head_dim=128, causal=True)


def cudnn_step(s):
    p = problem_at(s)
    data = attention.make_training_inputs(p, seed=s)
    f, f_pack, b, b_pack = training_pair(data)
    fl, bl = f.bind(f_pack), b.bind(b_pack)
    check.poison(data["dq"])
    fl()
    bl()
    _, grads = check.reference_grads(lambda q, k, v: p.torch_forward(q, k, v), {n: data[n] for n in "qkv"}, data["d_o"])
    check.check(data["dq"], grads["q"], name=f"dQ at S={s}")
    del grads
    cases[s] = (p, data)

    def step():
        fl()
        bl()
    return step


def torch_at(backend):
    def factory(s):
        p, data = cases[s]
        step, _ = torch_step(backend, p, data)
        try:
            step()
        except RuntimeError:
            return None  # this backend cannot run this shape: shown as "—"
        return step
    return factory


impls = {"cuDNN graphs (fwd + bwd)": cudnn_step}
impls.update({name: torch_at(backend) for name, backend in BACKENDS.items()})
if FA4_OK:
    impls[FA4] = lambda s: fa4.training_step(*(cases[s][1][n] for n in ("q", "k", "v", "d_o")), causal=True,
                                             scale=cases[s][0].scale)[0]
result = sweep.sweep(seqs, impls, x="seq_len", l2="cold", flops=lambda s: attention.training_flops(problem_at(s)),
                     candidate="cuDNN graphs (fwd + bwd)", rounds=7)  # interleaved rounds and verdicts per length

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.measure.ceilings import measure_ceilings

ceil = measure_ceilings()
from cudnn_guide.report import plot_sweep
plot_sweep(result, "tflops", logx=True, title="causal attention, forward + backward, head dim 128",
            ceiling=ceil.peak_bf16_tflops, ceiling_label="datasheet dense bf16 peak")
plt.show()

# %%
from cudnn_guide.report import sweep_table
sweep_table(result, "tflops", title="causal SDPA forward + backward, TFLOP/s")

# %%
# The verdicts at every length (above 1: the cuDNN step is faster):
import pandas as pd

from cudnn_guide.report import html_table

html_table(pd.DataFrame(result.verdicts()), {"speed-up": "{:.2f}×"})

# %%
# What the sweep says
# -------------------
# Computed from the measurements above when the page is recorded.
from cudnn_guide.report.prose import Prose

CAND = "cuDNN graphs (fwd + bwd)"
peak_s = max(seqs, key=lambda s: result.comparisons[s].measurements[CAND].tflops)
peak = result.comparisons[peak_s]
peak_est = peak.estimate(CAND, "TFLOP/s")
fa = [c.versus[FA4]["verdict"] for c in result.comparisons.values() if FA4 in c.versus]
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
headline("cuDNN fwd+bwd peak TFLOP/s", unit="TFLOP/s", seq_len=peak_s, **peak_est)
comparison("speed-up over the fastest contender at that length", peak)
for s in seqs:  # each length's verdict against the fastest contender there
    comparison(f"S={s}: speed-up over the fastest contender", result.comparisons[s])
# sphinx_gallery_end_ignore
Prose(
    f"One cuDNN training step peaks at {peak_est['value']:.0f} TFLOP/s (S={peak_s}, in-run interval "
    f"{peak_est['low']:.0f}–{peak_est['high']:.0f}), {100 * peak_est['value'] / ceil.peak_bf16_tflops:.0f}% "
    f"of the datasheet bf16 peak.",
    f"At S={problem.seq} the backward takes {split[1].median_ms / split[0].median_ms:.2f}× the forward's "
    f"time for 2.5× its matrix work.",
    (f"Against {FA4} the cuDNN step is faster at {fa.count('faster')}, ties at {fa.count('tie')} and is "
     f"slower at {fa.count('slower')} of {len(fa)} lengths." if fa else f"{FA4} was not timed: {FA4_DETAIL}."),
    *["* " + line.strip() for line in result.describe_verdicts().splitlines() if line.strip()],
)
