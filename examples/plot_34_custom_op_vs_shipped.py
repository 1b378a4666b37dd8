"""
Your own cuDNN attention op against torch.ops.cudnn.sdpa_fwd and PyTorch SDPA
=============================================================================

You write causal attention as a differentiable PyTorch operator, cuDNN's ``sdpa`` and
``sdpa_backward`` graphs behind ``torch.library.custom_op``, check one training step of
it against PyTorch, then time that step against what frontend 1.32 ships for the same
job (``torch.ops.cudnn.sdpa_fwd``), PyTorch's SDPA with its cuDNN and flash backends,
and FlashAttention-4 (``flash-attn-4``): on the GPU, and by the wall clock of a
training loop.

The op is the one the
:ref:`custom op page <sphx_glr_auto_examples_plot_23_pytorch_custom_op.py>` builds and
explains, where it also compiles with ``torch.compile`` and replays inside a CUDA graph;
here it is written again, in short.

What you will learn:

* how little a differentiable cuDNN attention op takes: a forward graph that writes the
  softmax statistics, a backward graph that reads them, each built once per layout and
  registered with ``custom_op``, ``register_fake`` and ``register_autograd``;
* what a training step of it costs the GPU against ``torch.ops.cudnn.sdpa_fwd``,
  PyTorch SDPA's cuDNN and flash (FlashAttention-2) backends and FlashAttention-4, and
  whether bit equality shows which of them run the same cuDNN kernels;
* what each costs the host to launch, and which of the two a loop of steps waits on.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
environment.collect()  # the GPU and the software this page ran on

# %%
# The lesson: the op, written again in short
# ------------------------------------------
# ``run`` builds a graph once per layout of its buffers (the five build steps), then
# executes it on torch's current stream. The forward graph writes O and the softmax
# statistics (fp32, one per query row); the backward graph reads both and writes dQ, dK
# and dV. ``custom_op`` makes each a PyTorch operator, ``register_fake`` gives their
# output shapes without data, and ``register_autograd`` makes the backward the
# forward's gradient. As written, the op takes bf16 B×H×S×D tensors whose head dim is
# contiguous.
import cudnn
import torch
from torch import Tensor

handle, graphs = cudnn.create_handle(), {}  # graphs: by each buffer's shape, strides
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT  # causal: query i sees the keys j <= i
MASK = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)


def run(declare, *buffers):
    if (key := (declare, *[(t.shape, t.stride()) for t in buffers])) not in graphs:
        g = cudnn.pygraph(
            handle=handle,
            io_data_type=cudnn.data_type.BFLOAT16,
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
        )
        tensors = declare(g, *buffers)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        graphs[key] = lambda xs: g.execute(dict(zip(tensors, xs)), ws, handle=handle)
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    graphs[key](buffers)  # the built graph, executed on these buffers
    return buffers


def forward_graph(g, q, k, v, o, stats):
    Q = g.tensor_like(q)
    K = g.tensor_like(k)
    V = g.tensor_like(v)
    O, S = g.sdpa(Q, K, V, attn_scale=q.shape[-1] ** -0.5, generate_stats=True, **MASK)
    O.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    O.set_dim(list(o.shape)).set_stride(list(o.stride()))
    S.set_output(True).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
    return Q, K, V, O, S.set_data_type(cudnn.data_type.FLOAT)


def backward_graph(g, q, k, v, o, stats, d_o, dq, dk, dv):
    Q = g.tensor_like(q)
    K = g.tensor_like(k)
    V = g.tensor_like(v)
    O = g.tensor_like(o)
    S = g.tensor_like(stats)
    dO = g.tensor_like(d_o)
    scale = q.shape[-1] ** -0.5
    dQ, dK, dV = g.sdpa_backward(Q, K, V, O, dO, S, attn_scale=scale, **MASK)
    dQ.set_output(True).set_dim(list(dq.shape)).set_stride(list(dq.stride()))
    dK.set_output(True).set_dim(list(dk.shape)).set_stride(list(dk.stride()))
    dV.set_output(True).set_dim(list(dv.shape)).set_stride(list(dv.stride()))
    return Q, K, V, O, S, dO, dQ, dK, dV


@torch.library.custom_op("mylib_vs::cudnn_attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    return run(forward_graph, q, k, v, *empty_outputs(q))[3:]


@torch.library.custom_op("mylib_vs::cudnn_attention_backward", mutates_args=())
def attention_backward(
    q: Tensor, k: Tensor, v: Tensor, o: Tensor, stats: Tensor, d_o: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    return run(backward_graph, q, k, v, o, stats, d_o, *empty_grads(q, k, v))[6:]


@attention.register_fake  # shapes and dtypes, no data: what torch.compile traces
def empty_outputs(q, *_):
    return q.new_empty(q.shape), q.new_empty(*q.shape[:-1], 1, dtype=torch.float32)


@attention_backward.register_fake
def empty_grads(q, k, v, *_):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


attention.register_autograd(  # the backward, and what it needs saved: q, k, v, o, stats
    lambda ctx, d_o, _: attention_backward(*ctx.saved_tensors, d_o.contiguous()),
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs, *output),
)

# %%
# One training step through the op, checked against PyTorch in fp32: the output and the
# gradients, element by element.
b, h, s, d = 4, 16, 2048, 128  # batch, heads, tokens, head dim: B×H×S×D, contiguous
q, k, v, d_o = torch.randn(4, b, h, s, d, device="cuda", dtype=torch.bfloat16)
leaves = [t.clone().requires_grad_() for t in (q, k, v)]
ref_leaves = [t.float().requires_grad_() for t in (q, k, v)]
out, _ = attention(*leaves)
ref = torch.nn.functional.scaled_dot_product_attention(*ref_leaves, is_causal=True)
torch.autograd.backward([out, ref], [d_o, d_o.float()])  # both training steps
for x, y in zip([out, *(t.grad for t in leaves)], [ref, *(r.grad for r in ref_leaves)]):
    torch.testing.assert_close(x.float(), y, atol=2e-2, rtol=2e-2)  # O, dQ, dK, dV

# %%
# Measuring the op against what frontend 1.32 ships, and PyTorch
# --------------------------------------------------------------
# A training step of attention alone (forward, then backward of ``d_o``), each checked
# (its dQ against the fp32 reference's, ``custom_op_comparison.admit_steps`` in
# ``cudnn_guide/studies/custom_op_comparison.py``):
#
# * this page's op;
# * ``torch.ops.cudnn.sdpa_fwd`` from ``cudnn.sdpa.fwd.torch_op`` (differentiable, with
#   ``return_lse=True``);
# * PyTorch's SDPA with the cuDNN backend, and with the flash backend, which on torch
#   2.11 is FlashAttention-2 (each backend forced);
# * FlashAttention-4 (``flash-attn-4``, CuTe DSL kernels, ``fa4.training_step``) on its
#   own B×S×H×D copies of the inputs, made once outside the timed calls
#   (``custom_op_comparison.admit_fa4``). Where it refuses this case its error is
#   shown; where it is not installed, that is printed with the install command, and
#   the verdict table and the conclusions list it as not timed.
#
# First their GPU time, in interleaved rounds with the L2 flushed before each call;
# ``wall_clock=True`` also races the same steps in back-to-back loops, timed by the wall
# clock (``training.wall``, below).
import cudnn.sdpa.fwd.torch_op  # noqa: F401  (registers torch.ops.cudnn.sdpa_fwd)
from torch.nn.attention import SDPBackend

from cudnn_guide.measure import baselines, compare, fa4
from cudnn_guide.studies import custom_op_comparison

leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
CAND = "this page's op"
forced = baselines.forced_sdpa  # PyTorch's SDPA on the one backend it is given
forwards = {
    CAND: lambda q_, k_, v_: attention(q_, k_, v_)[0],
    "torch.ops.cudnn.sdpa_fwd (frontend 1.32)": custom_op_comparison.frontend_sdpa(
        d**-0.5
    ),
    "PyTorch SDPA, cuDNN backend": forced(SDPBackend.CUDNN_ATTENTION, is_causal=True),
    "PyTorch SDPA, flash backend (FlashAttention-2)": forced(
        SDPBackend.FLASH_ATTENTION, is_causal=True
    ),
}
contenders, unavailable = custom_op_comparison.admit_steps(
    forwards, leaves, d_o, ref_leaves[0].grad
)
FA4 = fa4.label()  # "FlashAttention-4 (flash-attn-4 <version>)" where it is installed
custom_op_comparison.admit_fa4(
    contenders, unavailable, forwards, FA4, leaves, d_o, ref_leaves[0].grad
)
flops = 3.5 * 4 * b * h * s * s * d / 2  # forward + backward (2.5× forward), causal
training = compare.compare(
    contenders,
    candidate=CAND,
    l2="cold",
    rounds=7,
    flops=flops,
    tag="training step",
    wall_clock=True,
)

# %%
# The op, ``torch.ops.cudnn.sdpa_fwd`` and PyTorch SDPA's cuDNN backend all call
# cuDNN's SDPA. One more forward of each contender, on the same inputs, compared bit for
# bit (``torch.equal``) with the op's O. The forward is deterministic, so bit-identical
# outputs point to the same forward kernel; the backward, most of a step's FLOPs, is
# not compared: cuDNN's default backward accumulates dQ with atomics, so even the op
# differs from itself there, and this check cannot tell its kernels apart. The op run
# a second time shows that its forward repeats bit for bit. FlashAttention-2 and -4
# (this on its B×S×H×D copies) run kernels of their own: no equality is expected there.
names = list(contenders)
bitwise = custom_op_comparison.same_forward_bits(forwards, names, leaves, CAND)
for n, same_bits in bitwise.items():
    who = f"{n}, run again" if n == CAND else n
    print(f"{who}: O {'bit-identical to' if same_bits else 'differs from'} the op's")

# %%
# Then what a loop of steps waits on. The host time to launch one step (the median of
# the first round's host calls, one at a time on an idle GPU) can exceed what a step
# costs the host inside a loop. ``training.wall`` raced the same steps in back-to-back
# loops (``compare.compare_loops``), each timed by the wall clock from a synchronized
# start to a synchronized end, in interleaved rounds. Where a step takes over ``MARGIN``
# (1.1) times its GPU time in the loop, the loop waits on the host: the GPU idles.
# Each time is the median over rounds of a contender's per-round medians
# (``Comparison.estimate``), not the pooled median the record's measurements show; the
# round medians are kept in the record's ``extra``.
import pandas as pd

from cudnn_guide.report import html_table

wall = training.wall
MARGIN = 1.1  # a loop waits on the host when a step takes this many times its GPU time
per_step = custom_op_comparison.step_times(training, margin=MARGIN)
html_table(
    pd.DataFrame([{"contender": n, **row} for n, row in per_step.items()]),
    {
        "GPU µs": "{:,.0f}",
        "host µs, one call": "{:,.0f}",
        "wall-clock µs in a loop": "{:,.0f}",
        "loop ÷ GPU": "{:.2f}",
    },
)

# %%
# The verdicts, per baseline: the op's speed-up (in-run 95% interval) by GPU time, and
# by the wall clock of a loop, each judged against its own comparison's tie band; then
# each contender that was not timed, and why.
verdicts = custom_op_comparison.verdict_rows(training, CAND, unavailable=unavailable)
html_table(pd.DataFrame(verdicts))

# %%
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison

fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), layout="constrained")
plot_comparison(
    training,
    "TFLOP/s",
    ax=top,
    xlabel="TFLOP/s, GPU time",
    title=f"causal attention training step, {b}×{h} heads × {s} tokens, d={d}",
)
plot_comparison(
    wall, "µs", ax=bottom, xlabel="wall-clock µs per step, back-to-back loop"
)
plt.show()

# %%
# Conclusions
# -----------
# Computed from the comparisons above (``custom_op_comparison.conclusions``).
from cudnn_guide.report.prose import Prose

sentences = custom_op_comparison.conclusions(
    training, per_step, bitwise, candidate=CAND, margin=MARGIN, unavailable=unavailable
)
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, keep

comparison("training step: speed-up over best alternative", training)
comparison("training step, wall-clock loop: speed-up over best alternative", wall)
keep(round_medians_ms={"GPU": training.round_medians_ms, "loop": wall.round_medians_ms})
# sphinx_gallery_end_ignore

Prose(*sentences)
