"""
BatchNorm → ReLU for a ResNet block (NHWC)
==========================================

A convolutional network normalizes every convolution's output with BatchNorm and applies
a ReLU. In training, BatchNorm uses the batch's own statistics, saves them for the
backward and updates the running statistics; in inference it applies the running
statistics. Both are memory-bound, and fusing the ReLU saves a full pass over the
activation.

What you will learn:

* the training ``batchnorm`` operation: its inputs (scale, bias, running mean and
  variance, and the host scalars epsilon and momentum) and five outputs, with the
  running statistics updated in place by binding them to the same buffers;
* inference: the folded form ``relu(x · a + b)`` that inference frameworks use, and
  cuDNN's ``batchnorm_inference`` node, tried (this cuDNN refused it with a ReLU);
* how the four stage shapes of a ResNet-50 compare against PyTorch eager and
  ``torch.compile`` (default), in GB/s against the measured copy bandwidth.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN BatchNorm graphs")
env = environment.collect()
env

# %%
# The lesson: inference BatchNorm → ReLU, folded, as a cuDNN graph
# ----------------------------------------------------------------
# ResNet-50's first stage at its output width, batch 64: 64 × 256 × 56 × 56 in fp16,
# channels-last (NHWC: N×C×H×W with channels innermost; the stages timed below use the
# 3×3 convolutions' width, 64 here). Parameters and running statistics: fp32.
#
# In inference BatchNorm is one per-channel affine map, so it folds into a scale and a
# shift computed once: ``a = γ/√(var+ε)``, ``b = β − mean·a``. The graph is ``relu(x · a
# + b)``: a ``mul`` and an ``add`` that broadcast the 1×C×1×1 parameters, and a
# ``relu``, fused into one pass over the activation. (cuDNN's own
# ``batchnorm_inference`` node followed by a ReLU is tried in the measuring part; this
# cuDNN refused it.)
import cudnn
import torch

n, c, h, w, eps = 64, 256, 56, 56, 1e-5
torch.manual_seed(0)
x = torch.randn(n, c, h, w, device="cuda", dtype=torch.float16) * 1.5 + 0.3
x = x.to(memory_format=torch.channels_last)
per_channel = dict(size=(1, c, 1, 1), device="cuda")  # fp32
gamma, beta = 1 + 0.1 * torch.randn(**per_channel), 0.1 * torch.randn(**per_channel)
mean, var = 0.1 * torch.randn(**per_channel), 1 + 0.1 * torch.rand(**per_channel)
a = gamma * torch.rsqrt(var + eps)  # the fold, once, outside the graph
b = beta - mean * a
y = torch.empty_like(x)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.HALF,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
X = g.tensor_like(x, name="x")
A = g.tensor_like(a, name="a")
B = g.tensor_like(b, name="b")
Y = g.relu(input=g.add(a=g.mul(a=X, b=A), b=B))  # relu(x · a + b)
Y.set_output(True).set_data_type(y.dtype)
Y.set_dim(list(y.shape)).set_stride(list(y.stride()))

g.validate()  # the five build steps
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()

workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute({X: x, A: a, B: b, Y: y}, workspace, handle=handle)

flat = [t.flatten() for t in (mean, var, gamma, beta)]  # running statistics: inference
ref = torch.relu(torch.nn.functional.batch_norm(x.float(), *flat, eps=eps))  # fp32
torch.testing.assert_close(y.float(), ref, atol=0.02, rtol=0.01)

# %%
# Measuring: the training graph and the inference node, checked
# -------------------------------------------------------------
# The lesson's result joins the page's record through ``check.check``. The training
# ``batchnorm`` operation (from :mod:`cudnn_guide.graphs.batchnorm`) takes the running
# statistics as inputs and returns the output, the saved batch statistics and the *next*
# running statistics; binding those to the same buffers updates them in place.
# ``epsilon`` and ``momentum`` are pass-by-value scalars. Then cuDNN's
# ``batchnorm_inference`` node is tried: if this cuDNN refuses it followed by a ReLU,
# the page prints the form used and times the folded graph of the lesson. The graphs
# and their checks are in ``cudnn_guide/studies/batchnorm_stages.py``.
import textwrap

from cudnn_guide import check
from cudnn_guide.graphs import batchnorm
from cudnn_guide.studies import batchnorm_stages

checks = [check.check(y, ref, name="lesson: folded relu(bn(x))")]
del ref

problem = batchnorm.BatchNormProblem(n=64, c=256, h=56, w=56)
data = problem.make_inputs(seed=0)
train, train_launch = batchnorm_stages.training_graph(problem, data)
print(problem)
print(f"training graph: plan {train.report.plan_name}")
checks += batchnorm_stages.check_training(problem, data, train_launch)

form, infer, infer_data = batchnorm_stages.inference_graph(problem, data)
print("inference graph:", *textwrap.wrap(form, 84), sep="\n  ")
inference_check, ref_inf = batchnorm_stages.check_inference(
    problem, data, infer, infer_data, form
)
checks.append(inference_check)
for r in checks:
    print(r)

# %%
# Measuring: the PyTorch baselines, checked
# -----------------------------------------
# PyTorch eager: ``F.batch_norm`` then an in-place ReLU, as torchvision's ResNet does.
# ``torch.compile`` (default mode) fuses both into one generated kernel per pass. Each
# is checked, in training (against the fp32 reference, from the same running statistics)
# and in inference. In inference PyTorch runs its batch-norm op on the running
# statistics, while the cuDNN graph runs the form chosen above: when that is the folded
# one, its scale and shift were computed once beforehand, outside the timed call, as a
# deployed model would do.
from cudnn_guide.measure import baselines

compiled_forward = baselines.compile_quietly(problem.torch_forward, mode="default")
for name, fn in (
    ("PyTorch eager", problem.torch_forward),
    ("torch.compile (default)", compiled_forward),
):
    checks += batchnorm_stages.check_baseline(problem, data, fn, ref_inf, name=name)
    print(*checks[-2:], sep="\n")

# %%
# Measuring the ResNet-50 stages
# ------------------------------
# The BatchNorm → ReLU after each stage's 3×3 convolution at batch 64, channels 64 → 512
# as the resolution halves. Bytes: read x, write y (counted once: a two-pass training
# forward reads x twice, so its GB/s can understate its DRAM traffic by up to a third).
# Each stage compiles its own ``torch.compile`` with ``dynamic=False``, for that stage's
# shape as a model with these layers would; left at ``dynamic=None``, Dynamo would
# compile the later stages once for symbolic shapes (:doc:`/methodology`, "Fair
# baselines"). Each stage's graphs are built, and its training output checked, when
# first timed (``batchnorm_stages.stage_contenders``).
from cudnn_guide.measure import sweep

STAGES = {
    "64×56×56": (64, 56),
    "128×28×28": (128, 28),
    "256×14×14": (256, 14),
    "512×7×7": (512, 7),
}
impls, stage_bytes = batchnorm_stages.stage_contenders(STAGES)
# each stage and mode is a comparison in interleaved rounds, the cuDNN graph against
# both PyTorch ways
results = {
    mode: sweep.sweep(
        list(STAGES),
        {k: v for k, v in impls.items() if k.endswith(mode)},
        x="stage",
        l2="cold",
        bytes=stage_bytes,
        candidate=f"cuDNN {mode}",
        rounds=9,
    )
    for mode in ("training", "inference")
}
result = sweep.SweepResult(
    "stage", [m for r in results.values() for m in r.measurements]
)

# %%
# Measuring: the stages, plotted
# ------------------------------
# GB/s per stage, training left and inference right (``batchnorm_stages.plot_stages``).
import matplotlib.pyplot as plt

from cudnn_guide.measure.ceilings import measure_ceilings
from cudnn_guide.report import sweep_table

ceil = measure_ceilings()
batchnorm_stages.plot_stages(result, ceil.copy_gbps)
plt.show()

# %%
# The same times as a table, the best of each mode in bold: a training call also
# computes the batch's statistics, so training and inference are not ranked together.
sweep_table(
    result,
    "median_us",
    title="BatchNorm → ReLU, µs per call (batch 64, fp16, NHWC)",
    group=lambda impl: impl.split()[-1],  # "training" or "inference"
    group_name="mode",
)

# %%
# Conclusions
# -----------
# Every verdict below is the interval of the per-round ratio against the tie band. The
# harness subtracts the launch cost unless it is half the event time or more; where it
# is over a quarter, or the contenders were not timed alike, the sentence says so.
from cudnn_guide.report.prose import Prose

items = batchnorm_stages.stage_items(results, STAGES, ceil.copy_gbps)
verdicts = batchnorm_stages.stage_verdicts(results)
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

first = next(iter(STAGES))
for mode, res in results.items():
    cmp = res.comparisons[first]
    headline(
        f"BN→ReLU {mode} at {first}, % of copy bandwidth",
        unit="%",
        **cmp.estimate(f"cuDNN {mode}", "GB/s", scale=100 / ceil.copy_gbps),
    )
    comparison(f"BN→ReLU {mode} at {first}, speed-up over best PyTorch", cmp)
# sphinx_gallery_end_ignore

Prose(
    f"Against PyTorch eager and torch.compile (default), in this run, the cuDNN "
    f"graph was faster in {verdicts.count('faster')}, tied in "
    f"{verdicts.count('tie')} and slower in {verdicts.count('slower')} of "
    f"{len(verdicts)} stage comparisons. Inference graph "
    f"used: {form}.",
    *items,
)
