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
# copies one initial block with another attention). ``attend`` is the only thing that
# differs between the variants below: the guide's op (``torch_ops.attention``, the two
# graphs above behind ``torch.library.custom_op``), PyTorch's
# ``scaled_dot_product_attention`` (with whichever backend PyTorch picks), or
# FlashAttention-4's ``flash_attn_func``. FlashAttention-4 takes B×S×H×D tensors, so its
# block splits the projection in that layout: every variant copies Q, K and V once, into
# the layout its attention takes. The way back differs: the attention output is reshaped
# to B×S×(H·D), a view where its memory is already B×S×H×D and a copy otherwise (which
# variant copies is measured below).
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
# The reference is the same block in float32 with TF32 off (``check.ModuleCheck``, in
# ``cudnn_guide/check.py``, runs it once and checks a block's output and every weight
# gradient against it). Rounding to bf16 compounds through two norms, five projections
# and attention, so the gradients get twice the bf16 tolerance; PyTorch's own bf16
# block and the FlashAttention-4 block (another attention kernel) must pass the same
# check, which shows the bound is fair. A FlashAttention-4 block that cannot run here
# is shown with its error; one that runs and computes a wrong result stops the page.
from cudnn_guide import CheckFailedError, check

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
    try:
        check_block(eager_fa4, f"block with {FA4}")
    except CheckFailedError:  # a wrong result stops the page
        raise
    except Exception as exc:  # FA4 cannot run this block here: said, not hidden
        fa4_why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        print(f"{FA4}: unavailable here ({fa4_why})")

# %%
# Which kernel does PyTorch's default SDPA run here? Its output, eager and under
# ``torch.compile``, is compared bit for bit with each backend forced in turn (forward
# kernels are deterministic; ``baselines.sdpa_matches``), on inputs that require
# gradients, as in training:
from torch.nn.attention import SDPBackend

from cudnn_guide.measure import baselines

qkv_ = [
    torch.randn(
        B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen
    ).requires_grad_()
    for _ in range(3)
]
default_sdpa = {
    "eager": block.torch_attention,
    "compiled": torch.compile(block.torch_attention, fullgraph=True),
}
forced = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]
forced.append(SDPBackend.EFFICIENT_ATTENTION)
matches = baselines.sdpa_matches(default_sdpa, qkv_, forced, is_causal=True)
picked, picked_compiled = matches["eager"], matches["compiled"]
print("PyTorch's default SDPA matches, bit for bit:")
print("  eager:", ", ".join(picked) or "none of the forced backends")
print("  compiled:", ", ".join(picked_compiled) or "none of the forced backends")
del qkv_

# %%
# What each block does with the attention output: reshaped back to B×S×(H·D), is it a
# view of the output's memory or a copy (``block.output_copied``)?
attention_out = {"the cuDNN op": block.cudnn_attention}
attention_out["PyTorch SDPA"] = block.torch_attention
output_copied = {n: block.output_copied(a, q, k, v) for n, a in attention_out.items()}
if fa4_why is None:  # the lesson's B×H×S×D tensors, copied to B×S×H×D
    output_copied[FA4] = block.output_copied(fa4_attention, q, k, v, bshd=True)
for name, copied in output_copied.items():
    print(f"{name}: the output's reshape is {'a copy' if copied else 'a view'}")

# %%
# The same blocks compiled. The cuDNN op is a ``torch.library.custom_op`` with a fake
# implementation, so ``fullgraph=True`` holds: any graph break would be an error.
compiled_cudnn, compiled_torch = (
    torch.compile(block.variant(template, attend), fullgraph=True)
    for attend in (block.cudnn_attention, block.torch_attention)
)
check_block(compiled_cudnn, "block with the cuDNN op, compiled")
# printed once by check_block; the returned pair is not displayed again
_ = check_block(compiled_torch, "PyTorch block, compiled")

# %%
# A training step, timed on the GPU
# ---------------------------------
# One step is forward, backward of ``dy`` and a fused AdamW update (learning rate 1e-5,
# so the weights barely move across the timed steps; ``block.training_step``). Each
# variant has its own copy of the weights and its own optimizer; all contenders run in
# the same interleaved rounds, so each like-for-like pair is judged on its own per-round
# ratios (``compare.rejudged``): eager against eager, compiled against compiled. A
# step's FLOPs (``block.step_flops``): 3× the linears, 3.5× the causal attention.
import pandas as pd

from cudnn_guide.measure import compare
from cudnn_guide.report import html_table
from cudnn_guide.report.tables import time_rows, verdict_rows


def training_step(model):
    return block.training_step(model, x, dy, lr=1e-5)


CAND, EAGER = "cuDNN op, compiled", "cuDNN op, eager"
COMPILED = "PyTorch, compiled (default mode)"
contenders = {
    CAND: training_step(compiled_cudnn),
    EAGER: training_step(eager_cudnn),
    COMPILED: training_step(compiled_torch),
    "PyTorch eager": training_step(eager_torch),
}
if fa4_why is None:
    contenders[FA4_EAGER] = training_step(eager_fa4)
tokens = B * S
gpu = dict(l2="cold", rounds=5, min_reps=3, flops=block.step_flops(B, S, H, D, HIDDEN))
result = compare.compare(contenders, candidate=CAND, **gpu, tag="training step")
EAGER_BASELINES = ["PyTorch eager", *([FA4_EAGER] if FA4_EAGER in contenders else [])]
eager_cmp = compare.rejudged(result, EAGER, EAGER_BASELINES)
compiled_cmp = compare.rejudged(result, CAND, [COMPILED])


def verdicts(eager, compiled, measure):  # one row per like-for-like pair
    pairs = [(eager, b) for b in EAGER_BASELINES] + [(compiled, COMPILED)]
    rows = pd.DataFrame(verdict_rows(pairs, measure, candidate="cuDNN op"))
    return html_table(rows, {measure: "{:.2f}×"})


verdicts(eager_cmp, compiled_cmp, "GPU-time speed-up")

# %%
# A training loop, timed on the wall clock
# ----------------------------------------
# The GPU times above leave out the host: a step whose Python and launches take longer
# than its kernels leaves the GPU idle, and a loop of such steps is host-bound. So each
# step is also timed the way a training loop that reads its loss every step runs it:
# one step, then ``torch.cuda.synchronize()`` (``baselines.synchronized``), timed with
# ``time.perf_counter`` (``compare.compare_host``, the same interleaved rounds and
# verdicts). Beside it, the host time to enqueue one step on an idle GPU, from the GPU
# timing's first round.
synced = {n: baselines.synchronized(s) for n, s in contenders.items()}
loop = dict(rounds=5, calls=2, batches=2)
wall = compare.compare_host(synced, candidate=CAND, **loop, tag="wall-clock step")
wall_eager = compare.rejudged(wall, EAGER, EAGER_BASELINES)
wall_compiled = compare.rejudged(wall, CAND, [COMPILED])

times = pd.DataFrame(time_rows(result, wall, "training step"))
verdicts(wall_eager, wall_compiled, "wall-clock speed-up")

# %%
# Each step's GPU time (median over rounds), host time to enqueue it on an idle GPU, and
# wall-clock time with the synchronize:
html_table(
    times, {c: "{:,.0f}" for c in ("GPU µs", "host µs to enqueue", "wall-clock µs")}
)

# %%
# Peak memory of one step, above what the weights, optimizer state and inputs already
# hold (``bench.peak_memory_mib``: ``torch.cuda.max_memory_allocated``, an exact count,
# not a sample).
from cudnn_guide.measure.bench import peak_memory_mib
from cudnn_guide.measure.measurement import per_second

peak_mib = {name: peak_memory_mib(step) for name, step in contenders.items()}


def tokens_per_s(est):  # µs per step as tokens per second, the interval inverted
    return per_second(est, tokens)


rows = []
for name in result.measurements:
    t = tokens_per_s(result.estimate(name))
    rows.append(
        {
            "training step": name,
            "ms": result.estimate(name)["value"] / 1e3,
            "tokens/s": t["value"],
            "in-run interval": f"{t['low']:,.0f}–{t['high']:,.0f}",
            "TFLOP/s": result.estimate(name, "TFLOP/s")["value"],
            "peak MiB": peak_mib[name],
        }
    )
html_table(
    pd.DataFrame(rows).sort_values("ms"),
    {"ms": "{:.2f}", "tokens/s": "{:,.0f}", "TFLOP/s": "{:.0f}", "peak MiB": "{:.0f}"},
)

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison

plot_comparison(
    result,
    per=tokens_per_s,
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
from cudnn_guide.report.prose import Prose, listed, loop_note, sdpa_kernel_note

cand = tokens_per_s(result.estimate(CAND))
sentences = [
    "Eager against eager: the block with the cuDNN op is "
    f"{eager_cmp.describe('PyTorch eager')} on GPU time, and "
    f"{wall_eager.describe('PyTorch eager')} on the wall clock. "
    + sdpa_kernel_note(picked, "eager"),
    "Compiled against compiled: the block with the cuDNN op is "
    f"{compiled_cmp.describe(COMPILED)} on GPU time, and "
    f"{wall_compiled.describe(COMPILED)} on the wall clock. "
    + sdpa_kernel_note(picked_compiled, "compiled"),
]
if FA4_EAGER in eager_cmp.versus:
    sentences.append(
        f"Against {FA4} as the block's attention (eager): the block with the cuDNN op "
        f"is {eager_cmp.describe(FA4_EAGER)} on GPU time, and "
        f"{wall_eager.describe(FA4_EAGER)} on the wall clock."
    )
else:
    sentences.append(f"{FA4} was not timed in the block: {fa4_why}.")
copied = [n for n, c in output_copied.items() if c]
viewed = [n for n, c in output_copied.items() if not c]
out_mib = B * S * DIM * x.element_size() / 2**20  # one attention output
if copied and viewed:
    sentences.append(
        "The blocks are not copy for copy: each copies Q, K and V once into its "
        "attention's layout, but the attention output's reshape back to B×S×(H·D) is "
        f"a copy ({out_mib:.0f} MiB per forward) with {listed(copied)} and a view with "
        f"{listed(viewed)}; the comparisons between them include that copy."
    )
else:
    sentences.append(
        "Each block copies Q, K and V once into its attention's layout, and the "
        "attention output's reshape back to B×S×(H·D) is "
        f"{'a copy' if copied else 'a view'} in every block."
    )
sentences += [
    f"The compiled block with the cuDNN op trains at {cand['value']:,.0f} tokens/s "
    f"(in-run interval {cand['low']:,.0f}–{cand['high']:,.0f}); torch.compile's own "
    "share, the same op eager against compiled: the compiled block is "
    f"{result.describe(EAGER)}.",
    "Host time per step against GPU time:",
    *(loop_note(result, name, wall) for name in result.measurements),
    f"Peak memory of a step: {peak_mib[CAND]:.0f} MiB with the cuDNN op compiled, "
    f"{peak_mib[EAGER]:.0f} MiB eager; {peak_mib['PyTorch eager']:.0f} MiB eager "
    f"PyTorch, {peak_mib[COMPILED]:.0f} MiB compiled PyTorch"
    + (
        f", {peak_mib[FA4_EAGER]:.0f} MiB with {FA4}." if FA4_EAGER in peak_mib else "."
    ),
]

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
