"""
BatchNorm → ReLU for a ResNet block (NHWC)
==========================================

A convolutional network normalizes every convolution's output with BatchNorm and applies a
ReLU. In training, BatchNorm uses the batch's own statistics, saves them for the backward and
updates the running statistics; in inference it applies the running statistics. Both are
memory-bound, and fusing the ReLU saves a full pass over the activation.

What you will learn:

* the training ``batchnorm`` operation: its inputs (scale, bias, running mean and variance,
  and the host scalars epsilon and momentum) and five outputs, with the running statistics
  updated in place by binding them to the same buffers;
* inference two ways: cuDNN's ``batchnorm_inference`` node, and the folded form
  ``relu(x · a + b)`` that inference frameworks use;
* how the four stage shapes of a ResNet-50 compare against PyTorch eager and
  ``torch.compile``, in GB/s against the measured copy bandwidth.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN BatchNorm graphs")
env = environment.collect()
env

# %%
# Training forward, checked
# -------------------------
# The first ResNet-50 stage at batch 64: 64 × 256 × 56 × 56 in fp16, channels-last. Scale,
# bias and statistics are fp32 per channel. The running statistics go in as inputs and come
# back updated through the same buffers.
#
# The ``batchnorm`` node takes the running statistics as inputs and returns the output, the
# saved batch statistics and the *next* running statistics; binding those to the same buffers
# updates them in place. ``epsilon`` and ``momentum`` are pass-by-value scalars.
import cudnn
import torch

from cudnn_guide import check, graphs
from cudnn_guide.graphs import batchnorm

handle = graphs.handle_for_current_device()


def new_graph(name):
    return cudnn.pygraph(handle=handle, name=name, io_data_type=cudnn.data_type.HALF,
                         intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)


def output(graph_output, t):
    graph_output.set_output(True).set_data_type(t.dtype).set_dim(list(t.shape)).set_stride(list(t.stride()))
    return t


def host_scalar(g, name):
    return g.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True,
                    data_type=cudnn.data_type.FLOAT)


def batchnorm_relu_training(d, eps, momentum):
    """Declare and build relu(batchnorm(x)) in training; returns the graph and its variant pack."""
    g = new_graph("batchnorm_relu_training")
    T = {n: g.tensor_like(d[n], name=n) for n in ("x", "scale", "bias", "running_mean", "running_var")}
    EPS, MOMENTUM = host_scalar(g, "epsilon"), host_scalar(g, "momentum")
    Y, MEAN, INV_VAR, NEXT_MEAN, NEXT_VAR = g.batchnorm(
        name="batchnorm", input=T["x"], scale=T["scale"], bias=T["bias"], in_running_mean=T["running_mean"],
        in_running_var=T["running_var"], epsilon=EPS, momentum=MOMENTUM)
    RELU = g.relu(input=Y, name="relu")
    pack = {t: d[n] for n, t in T.items()} | {EPS: torch.full((1, 1, 1, 1), eps),
                                              MOMENTUM: torch.full((1, 1, 1, 1), momentum)}
    pack |= {MEAN: output(MEAN, d["mean"]), INV_VAR: output(INV_VAR, d["inv_var"]),
             NEXT_MEAN: output(NEXT_MEAN, d["running_mean"]), NEXT_VAR: output(NEXT_VAR, d["running_var"]),
             RELU: output(RELU, d["y"])}
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])  # the five build steps
    return g, pack


problem = batchnorm.BatchNormProblem(n=64, c=256, h=56, w=56)
data = problem.make_inputs(seed=0)
g_train, train_pack = batchnorm_relu_training(data, problem.eps, problem.momentum)
train = graphs.adopt(g_train, handle, name="batchnorm_relu_training")
print(problem)
print(train.report)

rm_before, rv_before = data["running_mean"].clone(), data["running_var"].clone()
check.poison(data["y"], data["mean"], data["inv_var"])
workspace = torch.empty(g_train.get_workspace_size(), device="cuda", dtype=torch.uint8)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)  # run on torch's stream
g_train.execute(train_pack, workspace, handle=handle)

ref_rm, ref_rv = rm_before.clone(), rv_before.clone()
ref_y = check.reference(lambda x, s, b: problem.torch_forward(x, s, b, ref_rm, ref_rv, training=True),
                        data["x"], data["scale"], data["bias"])
xf = data["x"].float()
checks = [
    check.check(data["y"], ref_y, name="y = relu(bn(x))"),
    check.check(data["mean"], xf.mean((0, 2, 3), keepdim=True), name="saved mean", tol=1e-4),
    check.check(data["inv_var"], torch.rsqrt(xf.var((0, 2, 3), unbiased=False, keepdim=True) + problem.eps),
                name="saved 1/sqrt(var+eps)", tol=1e-4),
    check.check(data["running_mean"], ref_rm, name="updated running mean", tol=1e-4),
    check.check(data["running_var"], ref_rv, name="updated running var (unbiased, as PyTorch)", tol=1e-4),
]
del xf
for c in checks:
    print(c)

# %%
# Inference, two ways
# -------------------
# cuDNN's ``batchnorm_inference`` node takes the running mean and 1/√(var+ε). If this cuDNN has
# no engine for it followed by a ReLU, the page says so and uses the folded form, which is one
# multiply-add per element: ``a = γ/√(var+ε)``, ``b = β − mean·a``.
def batchnorm_relu_inference(d):
    """relu(batchnorm_inference(x)) with the running mean and 1/√(var+ε)."""
    g = new_graph("batchnorm_relu_inference")
    T = {n: g.tensor_like(d[n], name=n) for n in ("x", "scale", "bias", "mean", "inv_var")}
    Y = g.batchnorm_inference(name="batchnorm_inference", input=T["x"], mean=T["mean"], inv_variance=T["inv_var"],
                              scale=T["scale"], bias=T["bias"])
    RELU = g.relu(input=Y, name="relu")
    pack = {t: d[n] for n, t in T.items()} | {RELU: output(RELU, d["y"])}  # outputs are declared before the build
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, pack


def folded_relu(d):
    """relu(x · a + b): the folded per-channel affine map, then the ReLU."""
    g = new_graph("folded_batchnorm_relu")
    T = {n: g.tensor_like(d[n], name=n) for n in ("x", "a", "b")}
    RELU = g.relu(input=g.add(a=g.mul(a=T["x"], b=T["a"], name="scale"), b=T["b"], name="shift"), name="relu")
    pack = {t: d[n] for n, t in T.items()} | {RELU: output(RELU, d["y"])}
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, pack


def inference_graph(p, d):
    """cuDNN's batchnorm_inference node if an engine takes it, otherwise the folded form."""
    d["mean"] = d["running_mean"].clone()
    d["inv_var"] = torch.rsqrt(d["running_var"] + p.eps)
    d["a"], d["b"] = batchnorm.fold_batchnorm(d["scale"], d["bias"], d["running_mean"], d["running_var"], p.eps)
    try:
        g, pack = batchnorm_relu_inference(d)
        return "batchnorm_inference node", graphs.adopt(g, handle, name="batchnorm_inference"), pack
    except Exception as exc:  # cuDNN's refusal, shown
        g, pack = folded_relu(d)
        refusal = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        return f"folded (the node was refused: {refusal})", graphs.adopt(g, handle, name="folded"), pack


form, infer, infer_pack = inference_graph(problem, data)
print("inference graph:", form)
check.poison(data["y"])
infer.execute(infer_pack)
ref_inf = check.reference(lambda x, s, b, m, v: problem.torch_forward(x, s, b, m, v, training=False),
                          data["x"], data["scale"], data["bias"], data["running_mean"], data["running_var"])
checks.append(check.check(data["y"], ref_inf, name=f"inference y ({form.split(' (')[0]})"))
print(checks[-1])

# %%
# The baselines
# -------------
# PyTorch eager: ``F.batch_norm`` then an in-place ReLU, as torchvision's ResNet does.
# ``torch.compile`` (default mode) fuses both into one generated kernel per pass. Each is
# checked, in training (against the fp32 reference, from the same running statistics) and in
# inference. In inference PyTorch runs its batch-norm op on the running statistics, while the
# cuDNN graph runs the form chosen above: when that is the folded one, its scale and shift were
# computed once beforehand, outside the timed call, as a deployed model would do.
from cudnn_guide.measure import baselines


def torch_fn(p, d, training, fn):
    rm, rv = d["running_mean"].clone(), d["running_var"].clone()
    x, s, b = d["x"], d["scale"], d["bias"]
    return lambda: fn(x, s, b, rm, rv, training)


compiled_forward = baselines.compile_quietly(problem.torch_forward, mode="default")
for name, fn in (("PyTorch eager", problem.torch_forward), ("torch.compile (default)", compiled_forward)):
    rm, rv = data["running_mean"].clone(), data["running_var"].clone()
    train_ref = check.reference(lambda x, s, b: problem.torch_forward(x, s, b, rm.clone(), rv.clone(), training=True),
                                data["x"], data["scale"], data["bias"])
    checks.append(check.check(fn(data["x"], data["scale"], data["bias"], rm.clone(), rv.clone(), True), train_ref,
                              name=f"{name} training"))
    checks.append(check.check(torch_fn(problem, data, False, fn)(), ref_inf, name=f"{name} inference"))
    print(*checks[-2:], sep="\n")

# %%
# Sweep the ResNet-50 stages
# --------------------------
# The BatchNorm → ReLU after each stage's 3×3 convolution at batch 64, channels 64 → 512 as the
# resolution halves. Bytes: read x, write y (counted once: a two-pass training forward shows at most
# half the copy bandwidth). Each stage compiles its own ``torch.compile`` with ``dynamic=False``, for
# that stage's shape as a model with these layers would; left at ``dynamic=None``, Dynamo would compile
# the later stages once for symbolic shapes (:doc:`/methodology`, "Fair baselines").
from cudnn_guide.measure import sweep

STAGES = {"64×56×56": (64, 56), "128×28×28": (128, 28), "256×14×14": (256, 14), "512×7×7": (512, 7)}
made = {}


def setup(stage):
    if stage not in made:
        c, hw = STAGES[stage]
        p = batchnorm.BatchNormProblem(n=64, c=c, h=hw, w=hw)
        d = p.make_inputs(seed=c)
        gt, tp = batchnorm_relu_training(d, p.eps, p.momentum)
        t = graphs.adopt(gt, handle, name=f"batchnorm {stage}")
        check.poison(d["y"])
        t.execute(tp)
        rm, rv = d["running_mean"].clone(), d["running_var"].clone()  # already updated once; reference starts from here
        check.check(d["y"], check.reference(lambda x, s, b: p.torch_forward(x, s, b, rm, rv, True), d["x"], d["scale"], d["bias"]),
                    name=f"training {stage}")
        _, inf, ip = inference_graph(p, d)
        made[stage] = (p, d, t.bind(tp), inf.bind(ip), baselines.compile_quietly(p.torch_forward, mode="default", dynamic=False))
    return made[stage]


impls = {
    "cuDNN training": lambda st: setup(st)[2],
    "PyTorch eager training": lambda st: torch_fn(setup(st)[0], setup(st)[1], True, setup(st)[0].torch_forward),
    "torch.compile (default) training": lambda st: torch_fn(setup(st)[0], setup(st)[1], True, setup(st)[4]),
    "cuDNN inference": lambda st: setup(st)[3],
    "PyTorch eager inference": lambda st: torch_fn(setup(st)[0], setup(st)[1], False, setup(st)[0].torch_forward),
    "torch.compile (default) inference": lambda st: torch_fn(setup(st)[0], setup(st)[1], False, setup(st)[4]),
}
# each stage and mode is a comparison in interleaved rounds, the cuDNN graph against both PyTorch ways
results = {mode: sweep.sweep(list(STAGES), {k: v for k, v in impls.items() if k.endswith(mode)}, x="stage", l2="cold",
                             bytes=lambda st: setup(st)[0].bytes, candidate=f"cuDNN {mode}", rounds=9)
           for mode in ("training", "inference")}
result = sweep.SweepResult("stage", [m for r in results.values() for m in r.measurements])

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_lines
from cudnn_guide.measure.ceilings import measure_ceilings

ceil = measure_ceilings()
fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained", sharey=True)
for ax, mode in zip(axes, ("training", "inference")):
    plot_lines([m for m in result.measurements if m.params["impl"].endswith(mode)], x="stage", metric="gbps", ax=ax,
               title=f"BatchNorm → ReLU, {mode}, batch 64, fp16", ceiling=ceil.copy_gbps,
               ceiling_label="measured copy bandwidth")
    ax.legend(fontsize=8)
plt.show()

# %%
from cudnn_guide.report import sweep_table
sweep_table(result, "median_us", title="BatchNorm → ReLU, µs per call (batch 64, fp16, NHWC)")

# %%
# Takeaways
# ---------
for mode, res in results.items():
    for stage in STAGES:
        cmp = res.comparisons[stage]
        ours = cmp.measurements[f"cuDNN {mode}"]
        print(f"* {mode}, {stage}: cuDNN {ours.median_ms * 1e3:.1f} µs ({100 * ours.gbps / ceil.copy_gbps:.0f}% of copy "
              f"bandwidth): " + "; ".join(cmp.describe(b) for b in cmp.versus) + ".")
print(f"* Inference graph used: {form}.")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
first = next(iter(STAGES))
for mode, res in results.items():
    cmp = res.comparisons[first]
    headline(f"BN→ReLU {mode} at {first}, % of copy bandwidth", unit="%",
             **cmp.estimate(f"cuDNN {mode}", "GB/s", scale=100 / ceil.copy_gbps))
    comparison(f"BN→ReLU {mode} at {first}, speed-up over best PyTorch", cmp)
# sphinx_gallery_end_ignore
