"""
PyTorch's own SDPA served by the frontend: the cudnn.torch provider
===================================================================

You build the causal attention of the
:ref:`transformer block page <sphx_glr_auto_examples_plot_25_transformer_block.py>` as
two cuDNN graphs at its shape, a forward that saves its softmax statistics and the
backward that reads them, and check both against PyTorch. Then PyTorch runs graphs like
them for you: frontend 1.32's ``cudnn.torch.install_sdpa_overrides()`` registers Python
implementations for the CUDA kernels of ``aten::_scaled_dot_product_cudnn_attention``
and its backward (and of PyTorch's varlen attention ops). They call the frontend's own
custom ops, ``torch.ops.cudnn.sdpa_fwd`` and ``sdpa_bwd``, which declare an ``sdpa`` and
an ``sdpa_backward`` graph as the lesson does, build them with the same five steps,
cache one per shape, strides and flags, and execute them with a handle bound to torch's
current stream. PyTorch's autograd wrapper of the op is untouched, and attention bias,
dropout and the backward of padded batches still go to PyTorch's own C++ kernels. A
model that selects PyTorch's cuDNN SDPA backend then runs on the frontend's Python API
with no change to its code, until ``remove()`` on the handle the call returned (PyTorch
versions with ``torch.backends.cuda.enable_cudnn_sdp_python`` make the same call from
that switch).

What you will learn:

* the causal forward-with-statistics and backward graphs that PyTorch's cuDNN SDPA
  backend runs, declared in Python;
* what the provider replaces and what it leaves to PyTorch, how to install and remove
  it, and how to count the calls it served (``cudnn.torch.calls``);
* a training step of the block (forward, backward, AdamW) on the provider, checked
  against an fp32 reference and timed against the block with the guide's own op, with
  PyTorch's flash backend (FlashAttention-2) and with FlashAttention-4, on GPU time and
  on a wall-clock loop.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: causal attention as two cuDNN graphs
# ------------------------------------------------
# The block's attention: 8 sequences of 2048 tokens, 16 heads of 128, bf16, all
# B×H×S×D. The forward writes O and, with ``generate_stats=True``, one fp32
# log-sum-exp per query row (``stats``, B×H×S×1: the layout PyTorch's cuDNN backend
# keeps its log-sum-exp in, so the provider hands it between the two without a copy).
# The backward reads Q, K, V, O, dO and those statistics and writes dQ, dK and dV.
# Both are causal with cuDNN's band: top-left diagonal, nothing to the right of it.
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
types = dict(
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


fwd = cudnn.pygraph(handle=handle, **types)
Q, K, V = (fwd.tensor_like(t, name=n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
O, STATS = fwd.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=True, **causal)
O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT)
STATS.set_dim(list(stats.shape)).set_stride(list(stats.stride()))
fwd.execute({Q: q, K: k, V: v, O: o, STATS: stats}, build(fwd), handle=handle)

bwd = cudnn.pygraph(handle=handle, **types)
io = dict(q=q, k=k, v=v, o=o, dO=d_o, stats=stats)
T = {n: bwd.tensor_like(t, name=n) for n, t in io.items()}
DQ, DK, DV = bwd.sdpa_backward(**T, attn_scale=D**-0.5, **causal)
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
# Measuring a training step of the block on the provider
# ------------------------------------------------------
# The block of the transformer block page (``block.transformer_block``, in
# ``cudnn_guide/graphs/block.py``): pre-norm, RMSNorm, attention, RMSNorm, a SwiGLU MLP,
# two residual adds, in bf16, with ``attend`` its only variable part. Its reference is
# the same block in float32 with TF32 off (``check.ModuleCheck`` checks the output and
# every weight gradient against it); rounding to bf16 compounds through two norms, five
# projections and attention, so the gradients get twice the bf16 tolerance. One
# training step (``block.training_step``) is forward, backward of ``dy`` and a fused
# AdamW update (learning rate 1e-5, so the weights barely move across the timed steps).
# The block with the guide's op (``torch_ops.attention``, the lesson's two graphs behind
# ``torch.library.custom_op``) is checked here, and so is the block with
# FlashAttention-4's ``flash_attn_func`` (flash-attn-4, which takes B×S×H×D:
# ``block.variant(..., bshd=True)``); the others in the next cell. Where
# FlashAttention-4 is not installed, the page prints so with the install command; where
# it refuses the block, its error; either way the race goes on without it
# (``fa4_contender``, in ``cudnn_guide/studies/provider_block.py``).
from torch.nn.attention import SDPBackend

from cudnn_guide import CheckFailedError, check
from cudnn_guide.graphs import block
from cudnn_guide.measure import compare
from cudnn_guide.studies.provider_block import fa4_contender, fa4_sentences

DIM, HIDDEN = H * D, 5632
torch.manual_seed(0)
shape = dict(heads=H, head_dim=D, hidden=HIDDEN)
template = block.transformer_block(block.torch_attention, **shape).cuda()
template = template.to(torch.bfloat16)
gen = torch.Generator(device="cuda").manual_seed(1)
x = torch.randn(B, S, DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
dy = torch.randn(B, S, DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
GRAD_TOL = 2 * check.tolerance(torch.bfloat16)
# the reference, run once; check_block(model, label) prints the output's check and the
# worst weight gradient's
check_block = check.ModuleCheck(template, x, dy, grad_tol=GRAD_TOL)


def training_step(model):
    return block.training_step(model, x, dy, lr=1e-5)


eager_cudnn = block.variant(template, block.cudnn_attention)
check_block(eager_cudnn, "block with the cuDNN op")
EAGER = "cuDNN op, eager"
# FA4 is fa4.label(), with its version; fa4_steps is {FA4: its step}, or {} with why
FA4, fa4_steps, fa4_why = fa4_contender(
    template, check_block, training_step, scale=D**-0.5
)
tokens = B * S
step_flops = block.step_flops(B, S, H, D, HIDDEN)  # 3× the linears, 3.5× attention

# %%
# The ``cudnn.torch`` provider
# ----------------------------
# ``cudnn.torch.install_sdpa_overrides()`` replaces the CUDA kernels of
# ``aten::_scaled_dot_product_cudnn_attention`` and its backward, and returns a handle
# whose ``remove()`` undoes it. The model code does not change: it selects PyTorch's
# cuDNN backend. It is timed against this guide's op in the same (eager) block,
# PyTorch's flash backend (FlashAttention-2) and FlashAttention-4 where it ran above, on
# GPU time (all of them in the same interleaved rounds) and on the wall clock of one
# step then ``torch.cuda.synchronize()`` (``baselines.synchronized``), as a loop that
# reads its loss every step runs it (``compare.compare_host``, the same interleaved
# rounds and verdicts).
import warnings

import cudnn.torch

from cudnn_guide.measure import baselines


def backend(b):  # F.sdpa under sdpa_kernel([b]): a refusal raises
    return baselines.forced_sdpa(b, is_causal=True)


provider_block = block.variant(template, backend(SDPBackend.CUDNN_ATTENTION))
flash_block = block.variant(template, backend(SDPBackend.FLASH_ATTENTION))
PROVIDER = "cudnn.torch provider (eager)"
FLASH = "PyTorch eager, flash backend (FlashAttention-2)"
provider_cmp, provider_wall, provider_error, served = None, None, "", 0
# PyTorch warns that a kernel is overridden: that is what the provider does
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Warning only once for all operators")
    overrides = cudnn.torch.install_sdpa_overrides()
try:
    served_before = cudnn.torch.calls["fwd"]
    check_block(provider_block, "PyTorch block, cuDNN backend via cudnn.torch")
    served = cudnn.torch.calls["fwd"] - served_before
    print(f"forward calls the provider served on the Python API: {served}")
    check_block(flash_block, "PyTorch block, flash backend (FlashAttention-2)")
    provider_steps = {
        PROVIDER: training_step(provider_block),
        EAGER: training_step(eager_cudnn),
        FLASH: training_step(flash_block),
        **fa4_steps,  # FlashAttention-4's block, where it passed its check
    }
    gpu = dict(l2="cold", rounds=5, min_reps=3, flops=step_flops)
    provider_cmp = compare.compare(
        provider_steps, candidate=PROVIDER, **gpu, tag="training step"
    )
    # one step then a synchronize, each
    synced = {n: baselines.synchronized(s) for n, s in provider_steps.items()}
    loop = dict(rounds=5, calls=2, batches=2)
    provider_wall = compare.compare_host(
        synced, candidate=PROVIDER, **loop, tag="wall-clock step"
    )
except CheckFailedError:  # a wrong result stops the page
    raise
except Exception as exc:  # the provider cannot serve this torch: shown with its error
    provider_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    print("cudnn.torch provider unavailable here:")
    print(" ", provider_error)
finally:
    overrides.remove()

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.measure.measurement import per_second
from cudnn_guide.report import plot_comparison


def tokens_per_s(est):  # µs per step as tokens per second, the interval inverted
    return per_second(est, tokens)


if provider_cmp:
    plot_comparison(
        provider_cmp,
        per=tokens_per_s,
        xlabel="tokens per second, training step",
        title=f"pre-norm block, {B}×{S} tokens, {H} heads × {D}, MLP {HIDDEN}",
    )
else:  # the figure says why there is nothing to plot
    fig, ax = plt.subplots(figsize=(8, 1.5), layout="constrained")
    ax.text(0.5, 0.5, f"cudnn.torch provider unavailable here:\n{provider_error}")
    ax.axis("off")
plt.show()

# %%
# Conclusions
# -----------
# The provider's block against the block with this guide's op, PyTorch's flash backend
# and FlashAttention-4 (where it ran; else why not), then FlashAttention-4's against
# each other block, on GPU time and on the wall clock, each clock with its own tie band:
# one speed-up can clear one band and not the other. Computed when the page is recorded.
from cudnn_guide.report.prose import Prose, loop_note

if provider_cmp and provider_wall:
    calls = f"{served} forward call{'' if served == 1 else 's'}"
    sentences = [
        f"The cudnn.torch provider served {calls} in the checks. Against this "
        f"guide's op it is {provider_cmp.describe(EAGER)} on GPU time, and "
        f"{provider_wall.describe(EAGER)} on the wall clock; against PyTorch's flash "
        f"backend it is {provider_cmp.describe(FLASH)} on GPU time, and "
        f"{provider_wall.describe(FLASH)} on the wall clock.",
        *fa4_sentences(provider_cmp, provider_wall, FA4, fa4_why),
        "Host time per step against GPU time:",
        *(
            loop_note(provider_cmp, name, provider_wall)
            for name in provider_cmp.measurements
        ),
    ]
else:
    sentences = [f"The cudnn.torch provider could not run here: {provider_error}"]

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison

if provider_cmp:
    comparison(
        "cudnn.torch provider: speed-up over this guide's op", provider_cmp, EAGER
    )
# sphinx_gallery_end_ignore
Prose(*sentences)
