"""
A transformer block trained with cuDNN attention
================================================

You build the two cuDNN graphs behind the attention operator of the
:ref:`custom op page <sphx_glr_auto_examples_plot_23_pytorch_custom_op.py>` as the guide
packages it (``torch.ops.cudnn_guide.sdpa``): a causal SDPA forward that also saves its
softmax statistics and the ``sdpa_backward`` that reads them, both checked against
PyTorch. Then the operator goes into a pre-norm transformer block (RMSNorm, attention,
RMSNorm, a SwiGLU MLP, two residual adds) and a whole training step is measured; only
the attention is swapped, the rest stays PyTorch. The same block on PyTorch's own cuDNN
SDPA backend, served by frontend 1.32's ``cudnn.torch`` provider, is trained on the
:ref:`provider page <sphx_glr_auto_examples_plot_30_cudnn_torch_provider.py>`.

What you will learn:

* the forward-with-statistics and backward graphs that make attention trainable;
* how the op drops into an ``nn.Module`` and trains under
  ``torch.compile(fullgraph=True)``;
* how to check a whole block, output and every weight gradient, against an fp32
  reference;
* tokens per second for a training step (forward, backward, AdamW), like for like:
  eager against eager (PyTorch's SDPA and FlashAttention-4), compiled against
  ``torch.compile``, with intervals and verdicts on GPU time and on a wall-clock loop,
  host time per step, and the peak memory of each.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: the block's attention as two cuDNN graphs
# -----------------------------------------------------
# The forward writes O and, with ``generate_stats=True``, one fp32 log-sum-exp per
# query row (``stats``, B×H×S×1). The backward reads Q, K, V, O, dO and those
# statistics, and writes dQ, dK, dV without recomputing the softmax's normalisation.
# Both are causal with cuDNN's own band: top-left diagonal, nothing to the right of it.
import cudnn
import torch

B, S, H, D = 8, 2048, 16, 128
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
torch.manual_seed(0)
q, k, v, d_o = torch.randn(4, B, H, S, D, device="cuda", dtype=torch.bfloat16)
o, dq, dk, dv = (torch.empty_like(t) for t in (q, q, k, v))
stats = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)


def new_graph():
    return cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )


def build(g):
    """The five build steps; returns the graph's workspace."""
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)


fwd = new_graph()
Q, K, V = (fwd.tensor_like(t, name=n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
O, STATS = fwd.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=True, **causal)
O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT)
STATS.set_dim(list(stats.shape)).set_stride(list(stats.stride()))
fwd.execute({Q: q, K: k, V: v, O: o, STATS: stats}, build(fwd), handle=handle)

bwd = new_graph()
io = dict(q=q, k=k, v=v, o=o, dO=d_o, stats=stats)
T = {n: bwd.tensor_like(t, name=n) for n, t in io.items()}
DQ, DK, DV = bwd.sdpa_backward(name="sdpa_backward", **T, attn_scale=D**-0.5, **causal)
for node, t in zip((DQ, DK, DV), (dq, dk, dv)):
    node.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
bwd_pack = {**{T[n]: t for n, t in io.items()}, DQ: dq, DK: dk, DV: dv}
bwd.execute(bwd_pack, build(bwd), handle=handle)

# The fp32 reference: PyTorch's own attention on fp32 copies, with autograd.
# autograd's backward thread needs this device's context
torch.cuda.set_device(q.device)
leaves = [t.float().requires_grad_() for t in (q, k, v)]
ref = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True)
ref.backward(d_o.float())
for name, got, want in zip(["O", "dQ", "dK", "dV"], [o, dq, dk, dv], [ref, *leaves]):
    want = want.detach() if name == "O" else want.grad
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)
    print(f"{name}: max |cuDNN − fp32| = {(got.float() - want).abs().max():.1e}")

# %%
# Measuring a training step of the block
# --------------------------------------
# The block is pre-norm: RMSNorm, attention, RMSNorm, a SwiGLU MLP, two residual adds
# (``block.transformer_block``, in ``cudnn_guide/graphs/block.py``; ``block.variant``
# copies one initial block with another attention). Only ``attend`` differs between the
# variants: the guide's op (``torch_ops.attention``, the two graphs above behind
# ``torch.library.custom_op``), PyTorch's ``scaled_dot_product_attention`` (whichever
# backend PyTorch picks), or FlashAttention-4's ``flash_attn_func``, which takes
# B×S×H×D tensors. Every variant copies Q, K and V once, into the layout its attention
# takes; whether the way back (the output's reshape to B×S×(H·D)) copies is shown below.
from cudnn_guide.graphs import block
from cudnn_guide.measure import fa4

DIM, HIDDEN = H * D, 5632
torch.manual_seed(0)
shape = dict(heads=H, head_dim=D, hidden=HIDDEN)
template = block.transformer_block(block.torch_attention, **shape).cuda()
template = template.to(torch.bfloat16)
gen = torch.Generator(device="cuda").manual_seed(1)
x = torch.randn(B, S, DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
dy = torch.randn(B, S, DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if FA4_OK:  # flash_attn_func, B×S×H×D in and out
    fa4_attention = fa4.attention(causal=True, scale=D**-0.5)

# %%
# Check forward and every weight gradient
# ---------------------------------------
# The reference is the same block in float32 with TF32 off (``check.ModuleCheck`` runs
# it once and checks a block's output and every weight gradient against it). Rounding
# to bf16 compounds through two norms, five projections and attention, so the gradients
# get twice the bf16 tolerance; PyTorch's own bf16 block and the FlashAttention-4 block
# must pass the same check (FlashAttention-4, another kernel, shows the bound is fair).
# A FlashAttention-4 block that cannot run here is shown with its error; a wrong result
# stops the page (``block_training``, in ``cudnn_guide/studies/block_training.py``).
from cudnn_guide import check
from cudnn_guide.studies import block_training

GRAD_TOL = 2 * check.tolerance(torch.bfloat16)
# the reference, run once; check_block(model, label) prints the output's check and the
# worst weight gradient's
check_block = check.ModuleCheck(template, x, dy, grad_tol=GRAD_TOL)
eager_cudnn = block.variant(template, block.cudnn_attention)
eager_torch = block.variant(template, block.torch_attention)
check_block(eager_cudnn, "block with the cuDNN op")
check_block(eager_torch, "PyTorch block (SDPA)")
FA4_EAGER = f"{FA4}, eager"
fa4_why = None if FA4_OK else FA4_DETAIL
if FA4_OK:
    eager_fa4 = block.variant(template, fa4_attention, bshd=True)
    fa4_why = block_training.check_fa4_block(check_block, eager_fa4, FA4)

# %%
# Which kernel does PyTorch's default SDPA run here? Its output, eager and under
# ``torch.compile``, is compared bit for bit with each backend forced in turn (forward
# kernels are deterministic; ``baselines.sdpa_matches``), on inputs that require
# gradients, as in training. Then what each block does with the attention output:
# reshaped back to B×S×(H·D), is it a view of the output's memory or a copy
# (``block.output_copied``; FlashAttention-4 on B×S×H×D copies of the lesson's tensors)?
picked, picked_compiled = block_training.default_sdpa_kernels(B, H, S, D, gen)
bshd = {FA4: fa4_attention} if fa4_why is None else {}
output_copied = block_training.output_copies(q, k, v, bshd)

# %%
# The same blocks compiled. The cuDNN op is a ``torch.library.custom_op`` with a fake
# implementation, so ``fullgraph=True`` holds: any graph break would be an error.
compiled_cudnn, compiled_torch = (
    torch.compile(block.variant(template, attend), fullgraph=True)
    for attend in (block.cudnn_attention, block.torch_attention)
)
check_block(compiled_cudnn, "block with the cuDNN op, compiled")
_ = check_block(compiled_torch, "PyTorch block, compiled")  # printed, not displayed

# %%
# A training step, timed on the GPU
# ---------------------------------
# One step is forward, backward of ``dy`` and a fused AdamW update (learning rate 1e-5,
# so the weights barely move; ``block.training_step``), each variant with its own copy
# of the weights and its own optimizer. All run in the same interleaved rounds; each
# like-for-like pair (eager against eager, compiled against compiled) is judged on its
# own per-round ratios (``compare.rejudged``). FLOPs: 3× the linears, 3.5× attention.
from cudnn_guide.measure import baselines, bench, compare

CAND, EAGER = "cuDNN op, compiled", "cuDNN op, eager"
COMPILED = "PyTorch, compiled (default mode)"
models = {CAND: compiled_cudnn, EAGER: eager_cudnn, COMPILED: compiled_torch}
models["PyTorch eager"] = eager_torch
if fa4_why is None:
    models[FA4_EAGER] = eager_fa4
contenders = {n: block.training_step(m, x, dy, lr=1e-5) for n, m in models.items()}
tokens = B * S
gpu = dict(l2="cold", rounds=5, min_reps=3, flops=block.step_flops(B, S, H, D, HIDDEN))
result = compare.compare(contenders, candidate=CAND, **gpu, tag="training step")
EAGER_BASELINES = ["PyTorch eager", *([FA4_EAGER] if FA4_EAGER in contenders else [])]
eager_cmp = compare.rejudged(result, EAGER, EAGER_BASELINES)
compiled_cmp = compare.rejudged(result, CAND, [COMPILED])
block_training.verdict_table(eager_cmp, compiled_cmp, "GPU-time speed-up")

# %%
# A training loop, timed on the wall clock
# ----------------------------------------
# The GPU times above leave out the host: a step whose Python and launches take longer
# than its kernels leaves the GPU idle. So each step is also timed in the loop of a
# training run that reads its loss every step: one step, then
# ``torch.cuda.synchronize()`` (``baselines.synchronized``), timed with
# ``time.perf_counter`` (``compare.compare_host``: same interleaved rounds, verdicts).
synced = {n: baselines.synchronized(s) for n, s in contenders.items()}
loop = dict(rounds=5, calls=2, batches=2)
wall = compare.compare_host(synced, candidate=CAND, **loop, tag="wall-clock step")
wall_eager = compare.rejudged(wall, EAGER, EAGER_BASELINES)
wall_compiled = compare.rejudged(wall, CAND, [COMPILED])
block_training.verdict_table(wall_eager, wall_compiled, "wall-clock speed-up")

# %%
# Each step's GPU time (median over rounds), host time to enqueue it on an idle GPU
# (from the GPU timing's first round), and wall-clock time with the synchronize:
block_training.times_table(result, wall, "training step")

# %%
# Peak memory of one step, above what the weights, optimizer state and inputs already
# hold (``bench.peak_memory_mib``: ``torch.cuda.max_memory_allocated``, an exact count,
# not a sample), beside each step's time, tokens per second and TFLOP/s.
peak_mib = {name: bench.peak_memory_mib(step) for name, step in contenders.items()}
block_training.throughput_table(result, tokens, peak_mib)

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.measure.measurement import per_second
from cudnn_guide.report import plot_comparison

plot_comparison(
    result,
    per=lambda est: per_second(est, tokens),  # tokens/s, the interval inverted
    xlabel="tokens per second, training step",
    title=f"pre-norm block, {B}×{S} tokens, {H} heads × {D}, MLP {HIDDEN}",
)
plt.show()

# %%
# Conclusions
# -----------
# Like for like: the eager block with the cuDNN op against eager PyTorch and eager
# FlashAttention-4, and the compiled one against ``torch.compile``, on GPU time and on
# the wall clock. Computed from the data when the page is recorded.
from cudnn_guide.report.prose import Prose

cand = per_second(result.estimate(CAND), tokens)  # tokens/s
sentences = block_training.conclusions(
    result,
    wall,
    eager=(eager_cmp, wall_eager, "PyTorch eager"),
    compiled=(compiled_cmp, wall_compiled, COMPILED),
    kernels=(picked, picked_compiled),
    fa4=(FA4, fa4_why),
    output_copied=output_copied,
    output_bytes=x.nbytes,  # one attention output, B×S×(H·D) like x
    rate=cand,
    peak_mib=peak_mib,
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

comparison(
    "training step: eager cuDNN op's speed-up over eager PyTorch",
    eager_cmp,
    "PyTorch eager",
)
comparison("training step: speed-up over torch.compile", result, COMPILED)
headline("training tokens/s, cuDNN op compiled", unit="tokens/s", **cand)
# sphinx_gallery_end_ignore
Prose(*sentences)
