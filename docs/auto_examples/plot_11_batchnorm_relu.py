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
* inference two ways: cuDNN's ``batchnorm_inference`` node, and the folded form
  ``relu(x · a + b)`` that inference frameworks use;
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
# The first ResNet-50 stage at batch 64: 64 × 256 × 56 × 56 in fp16, channels-last
# (NHWC: the logical N×C×H×W order with channels innermost). BatchNorm's parameters and
# running statistics are fp32 per channel.
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
# the page prints the form used and times the folded graph of the lesson.
from cudnn_guide import check
from cudnn_guide.graphs import batchnorm, tensors

checks = [check.check(y, ref, name="lesson: folded relu(bn(x))")]
del ref


def training_graph(p, d):
    """The training graph of ``p`` on ``d`` and its launcher; stats update in place."""
    built = batchnorm.batchnorm_relu_graph(p, d, training=True)
    names = (
        "x",
        "scale",
        "bias",
        "running_mean",
        "running_var",
        "mean",
        "inv_var",
        "y",
    )
    pack = built.pack(
        **{k: d[k] for k in names},
        epsilon=tensors.scalar_value(p.eps, rank=4),
        momentum=tensors.scalar_value(p.momentum, rank=4),
        next_running_mean=d["running_mean"],
        next_running_var=d["running_var"],
    )
    return built, built.bind(pack)


problem = batchnorm.BatchNormProblem(n=64, c=256, h=56, w=56)
data = problem.make_inputs(seed=0)
train, train_launch = training_graph(problem, data)
print(problem)
print(f"training graph: plan {train.report.plan_name}")

rm_before, rv_before = data["running_mean"].clone(), data["running_var"].clone()
check.poison(data["y"], data["mean"], data["inv_var"])
train_launch()

ref_rm, ref_rv = rm_before.clone(), rv_before.clone()
ref_y = check.reference(
    lambda x, s, b: problem.torch_forward(x, s, b, ref_rm, ref_rv, training=True),
    data["x"],
    data["scale"],
    data["bias"],
)
xf = data["x"].float()
var_b = xf.var((0, 2, 3), unbiased=False, keepdim=True)
checks += [
    check.check(data["y"], ref_y, name="y = relu(bn(x))"),
    check.check(
        data["mean"], xf.mean((0, 2, 3), keepdim=True), name="saved mean", tol=1e-4
    ),
    check.check(
        data["inv_var"],
        torch.rsqrt(var_b + problem.eps),
        name="saved 1/sqrt(var+eps)",
        tol=1e-4,
    ),
    check.check(data["running_mean"], ref_rm, name="updated running mean", tol=1e-4),
    check.check(
        data["running_var"],
        ref_rv,
        name="updated running var (unbiased, as PyTorch)",
        tol=1e-4,
    ),
]
del xf, var_b


def inference_graph(p, d):
    """cuDNN's batchnorm_inference node if an engine takes it, else the folded form."""
    d["mean"] = d["running_mean"].clone()
    d["inv_var"] = torch.rsqrt(d["running_var"] + p.eps)
    d["a"], d["b"] = batchnorm.fold_batchnorm(
        d["scale"], d["bias"], d["running_mean"], d["running_var"], p.eps
    )
    try:
        built = batchnorm.batchnorm_relu_graph(p, d, training=False)
        names = ("x", "scale", "bias", "mean", "inv_var", "y")
        return "batchnorm_inference node", built, {k: d[k] for k in names}
    except Exception as exc:  # cuDNN's refusal, shown
        built = batchnorm.folded_batchnorm_relu_graph(p, d)
        refusal = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        form = f"folded (the node was refused: {refusal})"
        return form, built, {k: d[k] for k in ("x", "a", "b", "y")}


form, infer, infer_data = inference_graph(problem, data)
import textwrap

print("inference graph:", *textwrap.wrap(form, 84), sep="\n  ")
check.poison(data["y"])
infer.execute(infer.pack(**infer_data))
ref_inf = check.reference(
    lambda x, s, b, m, v: problem.torch_forward(x, s, b, m, v, training=False),
    data["x"],
    data["scale"],
    data["bias"],
    data["running_mean"],
    data["running_var"],
)
checks.append(
    check.check(data["y"], ref_inf, name=f"inference y ({form.split(' (')[0]})")
)
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


def torch_fn(p, d, training, fn):
    rm, rv = d["running_mean"].clone(), d["running_var"].clone()
    x, s, b = d["x"], d["scale"], d["bias"]
    return lambda: fn(x, s, b, rm, rv, training)


compiled_forward = baselines.compile_quietly(problem.torch_forward, mode="default")
for name, fn in (
    ("PyTorch eager", problem.torch_forward),
    ("torch.compile (default)", compiled_forward),
):
    rm, rv = data["running_mean"].clone(), data["running_var"].clone()
    train_ref = check.reference(
        lambda x, s, b: problem.torch_forward(
            x, s, b, rm.clone(), rv.clone(), training=True
        ),
        data["x"],
        data["scale"],
        data["bias"],
    )
    checks.append(
        check.check(
            fn(data["x"], data["scale"], data["bias"], rm.clone(), rv.clone(), True),
            train_ref,
            name=f"{name} training",
        )
    )
    checks.append(
        check.check(
            torch_fn(problem, data, False, fn)(), ref_inf, name=f"{name} inference"
        )
    )
    print(*checks[-2:], sep="\n")

# %%
# Measuring the ResNet-50 stages
# ------------------------------
# The BatchNorm → ReLU after each stage's 3×3 convolution at batch 64, channels 64 → 512
# as the resolution halves. Bytes: read x, write y (counted once: a two-pass training
# forward reads x twice, so from DRAM it shows at most 2/3). Each stage compiles its own
# ``torch.compile`` with ``dynamic=False``, for that stage's shape as a model with these
# layers would; left at ``dynamic=None``, Dynamo would compile the later stages once for
# symbolic shapes (:doc:`/methodology`, "Fair baselines").
from cudnn_guide.measure import sweep

STAGES = {
    "64×56×56": (64, 56),
    "128×28×28": (128, 28),
    "256×14×14": (256, 14),
    "512×7×7": (512, 7),
}
made = {}


def setup(stage):
    if stage not in made:
        ch, hw = STAGES[stage]
        p = batchnorm.BatchNormProblem(n=64, c=ch, h=hw, w=hw)
        d = p.make_inputs(seed=ch)
        _, t_launch = training_graph(p, d)
        check.poison(d["y"])
        t_launch()
        # already updated once; the reference starts from here
        rm, rv = d["running_mean"].clone(), d["running_var"].clone()
        check.check(
            d["y"],
            check.reference(
                lambda x, s, b: p.torch_forward(x, s, b, rm, rv, True),
                d["x"],
                d["scale"],
                d["bias"],
            ),
            name=f"training {stage}",
        )
        _, inf, inf_data = inference_graph(p, d)
        compiled = baselines.compile_quietly(
            p.torch_forward, mode="default", dynamic=False
        )
        made[stage] = (p, d, t_launch, inf.bind(inf.pack(**inf_data)), compiled)
    return made[stage]


impls = {
    "cuDNN training": lambda st: setup(st)[2],
    "PyTorch eager training": lambda st: torch_fn(
        setup(st)[0], setup(st)[1], True, setup(st)[0].torch_forward
    ),
    "torch.compile (default) training": lambda st: torch_fn(
        setup(st)[0], setup(st)[1], True, setup(st)[4]
    ),
    "cuDNN inference": lambda st: setup(st)[3],
    "PyTorch eager inference": lambda st: torch_fn(
        setup(st)[0], setup(st)[1], False, setup(st)[0].torch_forward
    ),
    "torch.compile (default) inference": lambda st: torch_fn(
        setup(st)[0], setup(st)[1], False, setup(st)[4]
    ),
}
# each stage and mode is a comparison in interleaved rounds, the cuDNN graph against
# both PyTorch ways
results = {
    mode: sweep.sweep(
        list(STAGES),
        {k: v for k, v in impls.items() if k.endswith(mode)},
        x="stage",
        l2="cold",
        bytes=lambda st: setup(st)[0].bytes,
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
import matplotlib.pyplot as plt

from cudnn_guide.measure.ceilings import measure_ceilings
from cudnn_guide.report import plot_lines, sweep_table

ceil = measure_ceilings()
fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained", sharey=True)
for ax, mode in zip(axes, ("training", "inference")):
    plot_lines(
        [m for m in result.measurements if m.params["impl"].endswith(mode)],
        x="stage",
        metric="gbps",
        ax=ax,
        title=f"BatchNorm → ReLU, {mode}, batch 64, fp16",
        ceiling=ceil.copy_gbps,
        ceiling_label="measured copy bandwidth",
    )
    ax.legend(fontsize=8)
plt.show()

# %%
sweep_table(
    result, "median_us", title="BatchNorm → ReLU, µs per call (batch 64, fp16, NHWC)"
)

# %%
# Conclusions
# -----------
# Every verdict below is the interval of the per-round ratio against the tie band; where
# the contenders of one stage were not timed the same way (the harness subtracts the
# launch cost only where it is a small part of the event time), the sentence says so.
from cudnn_guide.report.prose import Prose

items = []
for mode, res in results.items():
    for stage in STAGES:
        cmp = res.comparisons[stage]
        ours = cmp.measurements[f"cuDNN {mode}"]
        methods = {m.mode for m in cmp.measurements.values()}
        caveat = (
            f" The contenders were timed differently here "
            f"({'; '.join(sorted(methods))}): this verdict is not like for like."
            if len(methods) > 1
            else ""
        )
        items.append(
            f"* {mode}, {stage}: cuDNN {ours.median_ms * 1e3:.1f} µs "
            f"({100 * ours.gbps / ceil.copy_gbps:.0f}% of copy bandwidth): "
            + "; ".join(cmp.describe(b) for b in cmp.versus)
            + "."
            + caveat
        )
verdicts = [
    v["verdict"]
    for r in results.values()
    for c_ in r.comparisons.values()
    for v in c_.versus.values()
]
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
    f"Against PyTorch eager and torch.compile (default), the cuDNN graph was faster in "
    f"{verdicts.count('faster')}, tied in {verdicts.count('tie')} and slower in "
    f"{verdicts.count('slower')} of {len(verdicts)} stage comparisons. Inference graph "
    f"used: {form}.",
    *items,
)
