"""
LayerNorm and RMSNorm: training forward, backward, and residual-add fusion
==========================================================================

Every transformer block normalizes its activations twice. The norms do little arithmetic
per byte, so their speed is set by memory traffic: the question is how close each
implementation gets to the GPU's copy bandwidth, and how many passes over memory a
fusion saves.

What you will learn:

* the training forward (``norm_forward_phase=TRAINING``), which also writes the
  per-token statistics (mean and 1/√(var+ε) for LayerNorm, 1/√(mean(x²)+ε) for RMSNorm),
  and the backward that reads them;
* how a token-major activation is declared to cuDNN (``tokens × hidden × 1 × 1``);
* a fused residual add → norm that writes both the sum (the next residual) and the
  normalized output in one pass;
* GB/s against the measured copy bandwidth, compared with PyTorch eager and
  ``torch.compile`` (default).
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN normalization graphs")
env = environment.collect()
env

# %%
# The lesson: a LayerNorm training forward as a cuDNN graph
# ---------------------------------------------------------
# 16,384 tokens × 4,096 features in bf16 (a batch of 8 sequences of 2,048 tokens at a 4k
# model width), checked against ``torch.nn.functional.layer_norm`` in fp32.
#
# cuDNN's norm operations work on N×C×H×W tensors: the tokens × hidden activation is
# declared as tokens × hidden × 1 × 1 with the features innermost, and the scale and
# bias as 1 × hidden × 1 × 1. ``epsilon`` is a pass-by-value scalar (a host tensor in
# the pack). The forward in the TRAINING phase also writes the per-token statistics
# (``mean`` and ``inv_var`` = 1/√(var + eps)) that the backward reads; ``rmsnorm`` takes
# the same arguments without ``bias``, and its only statistic is ``inv_var``.
import cudnn
import torch
import torch.nn.functional as F

tokens, hidden, eps = 16384, 4096, 1e-5
torch.manual_seed(1)
x = 2 * torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) + 0.5
scale = 1 + 0.1 * torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
bias = 0.1 * torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
y, mean = torch.empty_like(x), torch.empty(tokens, 1, device="cuda")  # stats: fp32
inv_var = torch.empty_like(mean)


def nchw(t):  # tokens × hidden as tokens × hidden × 1 × 1, features innermost
    n, c = t.shape
    return t.as_strided((n, c, 1, 1), (c, 1, c, c))


handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
FLOAT = cudnn.data_type.FLOAT
g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
X = g.tensor_like(nchw(x), name="x")
SCALE = g.tensor_like(scale.reshape(1, -1, 1, 1), name="scale")
BIAS = g.tensor_like(bias.reshape(1, -1, 1, 1), name="bias")
EPS = g.tensor(dim=[1] * 4, stride=[1] * 4, is_pass_by_value=True, data_type=FLOAT)
phase = cudnn.norm_forward_phase.TRAINING  # also write the statistics
Y, MEAN, INV_VAR = g.layernorm(
    norm_forward_phase=phase, input=X, scale=SCALE, bias=BIAS, epsilon=EPS
)
for out, t in ((Y, nchw(y)), (MEAN, nchw(mean)), (INV_VAR, nchw(inv_var))):
    out.set_output(True).set_data_type(t.dtype)
    out.set_dim(list(t.shape)).set_stride(list(t.stride()))

g.validate()  # the five build steps
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()

workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
pack = {X: nchw(x), SCALE: scale.reshape(1, -1, 1, 1), BIAS: bias.reshape(1, -1, 1, 1)}
pack |= {EPS: torch.full((1, 1, 1, 1), eps)}  # pass-by-value: a CPU tensor
pack |= {Y: nchw(y), MEAN: nchw(mean), INV_VAR: nchw(inv_var)}
g.execute(pack, workspace, handle=handle)

ref = F.layer_norm(x.float(), (hidden,), scale.float(), bias.float(), eps)  # fp32
torch.testing.assert_close(y.float(), ref, atol=0.03, rtol=0.02)
print(f"layernorm y checked against PyTorch; plan {g.get_plan_name_at_index(0)}")

# %%
# Measuring: both norms, forward and backward, checked
# ----------------------------------------------------
# The lesson's result joins the page's record through ``check.check``. The same graphs
# for LayerNorm and RMSNorm, forward and backward, come from
# :mod:`cudnn_guide.graphs.norms` (declared like the lesson's); each is checked against
# PyTorch autograd in fp32: the output, the saved statistics, and every gradient
# (``norm_training.checked_graphs``, in ``cudnn_guide/studies/norm_training.py``).
from cudnn_guide import check
from cudnn_guide.graphs import norms
from cudnn_guide.studies import norm_training

lesson_stats = norms.NormProblem(tokens=tokens, hidden=hidden, eps=eps).torch_stats(x)
lesson_checks = [
    check.check(y, ref, name="lesson: LayerNorm y"),
    check.check(mean, lesson_stats["mean"], name="lesson: LayerNorm mean", tol=1e-4),
    check.check(inv_var, lesson_stats["inv_var"], name="lesson: inv_var", tol=1e-4),
]
del ref, lesson_stats

TOKENS, HIDDEN = tokens, hidden
CUDNN, FUSED = "cuDNN graphs (heuristics A)", "cuDNN graph (fused, heuristics A)"
graphs_by_kind, checks = {}, list(lesson_checks)
for kind in ("layer", "rms"):
    p = norms.NormProblem(tokens=TOKENS, hidden=HIDDEN, kind=kind)
    graphs_by_kind[kind], kind_checks = norm_training.checked_graphs(p, seed=1)
    checks += kind_checks  # (p, data, forward, backward) kept above for timing
for r in checks:
    print(r)

# %%
# Measuring: the PyTorch baselines, checked
# -----------------------------------------
# PyTorch runs the same training step through autograd: ``F.layer_norm``/``F.rms_norm``
# with ``requires_grad`` inputs (so the forward saves its statistics, as in training),
# then ``backward(dy)``. ``torch.compile`` (default mode; max-autotune, which also tunes
# reductions, is not timed on this page) generates fused Triton kernels for
# both passes. Each baseline's gradients are checked too
# (``norm_training.checked_baselines``).
impls = {}
for p, data, fwd_launch, bwd_launch in graphs_by_kind.values():
    kind_impls, kind_checks = norm_training.checked_baselines(
        p, data, fwd_launch, bwd_launch, candidate=CUDNN
    )
    impls |= kind_impls  # (norm, contender) -> (problem, forward, training step)
    checks += kind_checks
print(*checks[-4:], sep="\n")

# %%
# Measuring at 16k × 4k
# ---------------------
# Cold L2 (the 128 MiB activation would not fit in this GPU's L2 anyway; its size is
# printed below). Bytes are the fewest a kernel must move: the forward reads x and
# writes y (2 × 128 MiB); the backward reads x and dy and writes dx (3 × 128 MiB).
# Parameters and statistics (< 0.1 MiB) are not counted. ``norm_training.compare_pass``
# races the cuDNN graphs, eager and ``torch.compile`` in up to 11 interleaved rounds.
from cudnn_guide.measure.ceilings import measure_ceilings

print(f"activation {TOKENS * HIDDEN * 2 / 2**20:.0f} MiB; L2 {env.l2_mib:.0f} MiB")
ceil = measure_ceilings()
results, base = {}, []
for label in ("LayerNorm", "RMSNorm"):
    for pass_name in norm_training.PASSES:  # the forward, then forward + backward
        res = norm_training.compare_pass(impls, label, pass_name, candidate=CUDNN)
        results[(label, pass_name)] = res
        base += res.measurements.values()
        gbps = res.measurements[CUDNN].gbps
        share = 100 * gbps / ceil.copy_gbps
        print(f"{label} {pass_name}: cuDNN {gbps:.0f} GB/s ({share:.0f}% of copy)")

# %%
norm_training.pass_table(base, "LayerNorm", TOKENS, HIDDEN)

# %%
norm_training.pass_table(base, "RMSNorm", TOKENS, HIDDEN)

# %%
# Measuring a fused residual add → norm
# -------------------------------------
# In a pre-norm transformer each norm follows a residual add: ``s = x + r`` is the next
# block's residual and ``norm(s)`` feeds the attention or MLP. One cuDNN graph reads x
# and r once and writes s and y; PyTorch eager does the add (reads x and r, writes s),
# then the norm (reads s, writes y). The byte counts are printed below. All three run
# the training forward (the statistics are saved: PyTorch's inputs require gradients).
# ``norm_training.residual_comparison`` checks the three, then races them.
residual, res_checks = [], []
for kind in ("layer", "rms"):
    p = norms.NormProblem(tokens=TOKENS, hidden=HIDDEN, kind=kind, residual=True)
    res, kind_checks = norm_training.residual_comparison(p, candidate=FUSED, seed=2)
    results[("residual", norm_training.LABELS[kind])] = res
    residual += res.measurements.values()
    res_checks += kind_checks
for c in res_checks:
    print(c)
act = TOKENS * HIDDEN * 2  # bytes of one activation
fused_moves = p.forward_bytes / act
eager_moves = (3 + 2) * act / act  # eager: add (x, r → s), then norm (s → y)
print(f"bytes moved, in activations of {act / 2**20:.0f} MiB:")
print(f"fused {fused_moves:.0f}, eager {eager_moves:.0f}")
norm_training.residual_table(residual)

# %%
# Measuring across model widths
# -----------------------------
# Training step (forward + backward), 16,384 tokens, widths 1k–8k, against eager only
# (``norm_training.width_contenders``: each width's graphs are built and their dx
# checked when first timed).
from cudnn_guide.measure import sweep

widths = [1024, 2048, 4096, 8192]
sweep_impls = norm_training.width_contenders(TOKENS)
widths_result = sweep.sweep(
    widths,
    sweep_impls,
    x="hidden",
    l2="cold",
    bytes=lambda h: 5 * TOKENS * h * 2,
    budget_ms=150,
)  # one line per implementation

# %%
# Measuring: the width sweep, plotted
# -----------------------------------
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_sweep, sweep_table

plot_sweep(
    widths_result,
    "gbps",
    logx=True,
    title=f"norm training step (forward + backward), {TOKENS} tokens, bf16",
    ceiling=ceil.copy_gbps,
    ceiling_label="measured copy bandwidth",
)
plt.show()

# %%
sweep_table(widths_result, "gbps", title="forward + backward, GB/s")

# %%
# Conclusions
# -----------
from cudnn_guide.report.prose import Prose

shape = dict(candidate=CUDNN, tokens=TOKENS, hidden=HIDDEN)
saved = eager_moves / fused_moves  # eager's bytes over the fused graph's
items = [
    norm_training.step_item(label, results, ceil.copy_gbps, **shape)
    for label in ("LayerNorm", "RMSNorm")
]
items += [
    norm_training.residual_item(label, results[("residual", label)], saved)
    for label in ("LayerNorm", "RMSNorm")
]
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

for label in ("LayerNorm", "RMSNorm"):
    res = results[(label, "forward + backward")]
    headline(
        f"{label} training step, % of copy bandwidth",
        unit="%",
        **res.estimate(CUDNN, "GB/s", scale=100 / ceil.copy_gbps),
    )
    comparison(f"{label} training step, speed-up over best PyTorch", res)
# sphinx_gallery_end_ignore

Prose(*items)
