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
# the same arguments without ``bias`` and returns only ``inv_var``.
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
# PyTorch autograd in fp32: the output, the saved statistics, and every gradient.
from cudnn_guide import check
from cudnn_guide.graphs import norms

lesson_stats = norms.NormProblem(tokens=tokens, hidden=hidden, eps=eps).torch_stats(x)
lesson_checks = [
    check.check(y, ref, name="lesson: LayerNorm y"),
    check.check(mean, lesson_stats["mean"], name="lesson: LayerNorm mean", tol=1e-4),
    check.check(inv_var, lesson_stats["inv_var"], name="lesson: inv_var", tol=1e-4),
]
del ref, lesson_stats


def norm_launchers(p, d):
    """The forward and backward graphs of ``p`` on the buffers ``d``, as launchers."""
    f, b = norms.norm_forward_graph(p, d), norms.norm_backward_graph(p, d)
    return f.bind(norms.pack_norm(f, d, eps=p.eps)), b.bind(norms.pack_norm(b, d))


def grad_params(p, data):
    names = ("x", "scale", "bias") if p.kind == "layer" else ("x", "scale")
    return {n: data[n] for n in names}


TOKENS, HIDDEN = tokens, hidden
CUDNN, FUSED = "cuDNN graphs (heuristics A)", "cuDNN graph (fused, heuristics A)"
graphs_by_kind, checks = {}, list(lesson_checks)
for kind in ("layer", "rms"):
    p = norms.NormProblem(tokens=TOKENS, hidden=HIDDEN, kind=kind)
    data = p.make_inputs(seed=1)
    fwd_launch, bwd_launch = norm_launchers(p, data)
    check.poison(data["y"], data["inv_var"], data["dx"], data["dscale"])
    fwd_launch()
    bwd_launch()
    params = grad_params(p, data)
    ref_y, ref_grads = check.reference_grads(
        lambda **kw: p.torch_forward(**kw), params, data["dy"]
    )
    stats = p.torch_stats(data["x"])
    checks.append(check.check(data["y"], ref_y, name=f"{p} y"))
    checks += [check.check(data[n], stats[n], name=f"{p} {n}") for n in stats]
    checks += [
        check.check(data["d" + n], ref_grads[n], name=f"{p} d{n}") for n in params
    ]
    graphs_by_kind[kind] = (p, data, fwd_launch, bwd_launch)  # launchers for timing
for r in checks:
    print(r)

# %%
# Measuring: the PyTorch baselines, checked
# -----------------------------------------
# PyTorch runs the same training step through autograd: ``F.layer_norm``/``F.rms_norm``
# with ``requires_grad`` inputs (so the forward saves its statistics, as in training),
# then ``backward(dy)``. ``torch.compile`` (default mode; max-autotune, which also tunes
# reductions, is not timed on this page) generates fused Triton kernels for
# both passes. Each baseline's gradients are checked too.
from cudnn_guide.measure import baselines


def torch_training(p, data, fn):
    names = ("x", "scale", "bias") if p.kind == "layer" else ("x", "scale")
    leaves = {n: data[n].detach().clone().requires_grad_(True) for n in names}
    return (
        (lambda: fn(**leaves)),
        baselines.training_step(fn, leaves, data["dy"]),
        leaves,
    )


impls = {}
for kind, (p, data, fwd_launch, bwd_launch) in graphs_by_kind.items():
    label = "LayerNorm" if kind == "layer" else "RMSNorm"
    eager = torch_training(p, data, p.torch_forward)
    compiled = torch_training(
        p, data, baselines.compile_quietly(p.torch_forward, mode="default")
    )
    for name, (forward, step, leaves) in (
        ("PyTorch eager", eager),
        ("torch.compile (default)", compiled),
    ):
        step()
        checks.append(
            check.check(
                leaves["x"].grad,
                check.reference_grads(
                    lambda **kw: p.torch_forward(**kw),
                    {n: data[n] for n in leaves},
                    data["dy"],
                )[1]["x"],
                name=f"{name} {label} dx",
            )
        )
        impls[(label, name)] = (p, forward, step)

    def cudnn_step(f=fwd_launch, b=bwd_launch):
        f()
        b()

    impls[(label, CUDNN)] = (p, fwd_launch, cudnn_step)
print(*checks[-4:], sep="\n")

# %%
# Measuring at 16k × 4k
# ---------------------
# Cold L2 (the 128 MiB activation would not fit in this GPU's L2 anyway; its size is
# printed below). Bytes are the fewest a kernel must move: the forward reads x and
# writes y (2 × 128 MiB); the backward reads x and dy and writes dx (3 × 128 MiB).
# Parameters and statistics (< 0.1 MiB) are not counted.
from cudnn_guide.measure import compare
from cudnn_guide.measure.ceilings import measure_ceilings

print(f"activation {TOKENS * HIDDEN * 2 / 2**20:.0f} MiB; L2 {env.l2_mib:.0f} MiB")
ceil = measure_ceilings()
IMPLS = (CUDNN, "PyTorch eager", "torch.compile (default)")
results, base = {}, []
for label in ("LayerNorm", "RMSNorm"):
    p = impls[(label, CUDNN)][0]
    for pass_name, which, nbytes in (
        ("forward (training)", 1, p.forward_bytes),
        ("forward + backward", 2, p.forward_bytes + p.backward_bytes),
    ):
        res = compare.compare(
            {n: impls[(label, n)][which] for n in IMPLS},
            candidate=CUDNN,
            l2="cold",
            rounds=11,
            bytes=nbytes,
            params={"norm": label, "pass": pass_name},
            tag=f"{label} {pass_name}",
        )
        results[(label, pass_name)] = res
        base += res.measurements.values()
        gbps = res.measurements[CUDNN].gbps
        print(
            f"{label} {pass_name}: cuDNN {gbps:.0f} GB/s "
            f"({100 * gbps / ceil.copy_gbps:.0f}% of copy)"
        )

# %%
from cudnn_guide.report import ComparisonTable

ComparisonTable(
    [m for m in base if m.params["norm"] == "LayerNorm"],
    row="impl",
    column="pass",
    metric="gbps",
    title=f"LayerNorm, {TOKENS} × {HIDDEN} bf16: GB/s (higher is better)",
)

# %%
ComparisonTable(
    [m for m in base if m.params["norm"] == "RMSNorm"],
    row="impl",
    column="pass",
    metric="gbps",
    title=f"RMSNorm, {TOKENS} × {HIDDEN} bf16: GB/s (higher is better)",
)

# %%
# Measuring a fused residual add → norm
# -------------------------------------
# In a pre-norm transformer each norm follows a residual add: ``s = x + r`` is the next
# block's residual and ``norm(s)`` feeds the attention or MLP. One cuDNN graph reads x
# and r once and writes s and y; PyTorch eager does the add (reads x and r, writes s),
# then the norm (reads s, writes y). The byte counts are printed below. All three run
# the training forward (the statistics are saved: PyTorch's inputs require gradients).
residual, res_checks = [], []
for kind in ("layer", "rms"):
    p = norms.NormProblem(tokens=TOKENS, hidden=HIDDEN, kind=kind, residual=True)
    label = "LayerNorm" if kind == "layer" else "RMSNorm"
    data = p.make_inputs(seed=2)
    fused = norms.norm_forward_graph(p, data, name=f"{p}")
    res_pack = norms.pack_norm(fused, data, eps=p.eps)
    check.poison(data["y"], data["s"])
    fused.execute(res_pack)
    ref = check.reference(
        p.torch_forward, data["x"], data["scale"], data.get("bias"), data["r"]
    )
    res_checks += [
        check.check(data["y"], ref, name=f"{p} y"),
        check.check(data["s"], data["x"].float() + data["r"].float(), name=f"{p} s"),
    ]
    x, r, w, b = (
        t.detach().clone().requires_grad_(True) if t is not None else None
        for t in (data["x"], data["r"], data["scale"], data.get("bias"))
    )

    def add_then_norm(x, r, w, b, p=p):
        s = x + r
        return s, p.torch_forward(s, w, b)

    compiled = baselines.compile_quietly(add_then_norm, mode="default")
    res_checks.append(
        check.check(
            compiled(x, r, w, b)[1].detach(),
            ref,
            name=f"torch.compile (default) {label} (residual)",
        )
    )
    res_checks.append(
        check.check(
            add_then_norm(x, r, w, b)[1].detach(),
            ref,
            name=f"PyTorch eager {label} (residual)",
        )
    )
    res = compare.compare(
        {
            FUSED: fused.bind(res_pack),
            "PyTorch eager": lambda f=add_then_norm, a=(x, r, w, b): f(*a),
            "torch.compile (default)": lambda f=compiled, a=(x, r, w, b): f(*a),
        },
        candidate=FUSED,
        l2="cold",
        rounds=11,
        bytes=p.forward_bytes,
        params={"norm": label},
        tag=f"residual+{label}",
    )
    results[("residual", label)] = res
    residual += res.measurements.values()
for c in res_checks:
    print(c)
act = TOKENS * HIDDEN * 2  # bytes of one activation
fused_moves = p.forward_bytes / act
eager_moves = (3 + 2) * act / act  # eager: add (x, r → s), then norm (s → y)
print(f"bytes moved, in activations of {act / 2**20:.0f} MiB:")
print(f"fused {fused_moves:.0f}, eager {eager_moves:.0f}")
ComparisonTable(
    residual,
    row="impl",
    column="norm",
    metric="gbps",
    title="residual add → norm (training forward): GB/s of the fewest bytes",
)

# %%
# Measuring across model widths
# -----------------------------
# Training step (forward + backward), 16,384 tokens, widths 1k–8k, against eager only.
from cudnn_guide.measure import sweep

widths = [1024, 2048, 4096, 8192]
made = {}


def setup(kind, h):
    if (kind, h) not in made:
        p = norms.NormProblem(tokens=TOKENS, hidden=h, kind=kind)
        data = p.make_inputs(seed=h)
        fl, bl = norm_launchers(p, data)
        check.poison(data["dx"])
        fl()
        bl()
        grads = check.reference_grads(
            lambda **kw: p.torch_forward(**kw),
            {"x": data["x"], "scale": data["scale"]}
            | ({"bias": data["bias"]} if kind == "layer" else {}),
            data["dy"],
        )[1]
        check.check(data["dx"], grads["x"], name=f"{p} dx")
        made[(kind, h)] = (p, data, fl, bl)
    return made[(kind, h)]


def cudnn_at(kind):
    def factory(h):
        _, _, fl, bl = setup(kind, h)

        def step():
            fl()
            bl()

        return step

    return factory


def eager_at(kind):
    def factory(h):
        p, data, _, _ = setup(kind, h)
        return torch_training(p, data, p.torch_forward)[1]

    return factory


sweep_impls = {}
for kind, label in (("layer", "LayerNorm"), ("rms", "RMSNorm")):
    sweep_impls[f"cuDNN {label}"] = cudnn_at(kind)
    sweep_impls[f"PyTorch eager {label}"] = eager_at(kind)
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

items = []
for label in ("LayerNorm", "RMSNorm"):
    res = results[(label, "forward + backward")]
    fwd = results[(label, "forward (training)")]
    est = res.estimate(CUDNN, "µs")
    share = 100 * res.measurements[CUDNN].gbps / ceil.copy_gbps
    items.append(
        f"* {label} training step at {TOKENS}×{HIDDEN}: cuDNN {est['value']:.0f} µs "
        f"(in-run 95% interval {est['low']:.0f}–{est['high']:.0f}), {share:.0f}% of "
        f"copy bandwidth: {res.describe('PyTorch eager')}; "
        f"{res.describe('torch.compile (default)')}. Its forward alone reaches "
        f"{100 * fwd.measurements[CUDNN].gbps / ceil.copy_gbps:.0f}%."
    )
for label in ("LayerNorm", "RMSNorm"):
    res = results[("residual", label)]
    items.append(
        f"* Residual add → {label}: the fused graph is {res.describe('PyTorch eager')} "
        f"(eager moves {eager_moves / fused_moves:.2f}× the bytes), and "
        f"{res.describe('torch.compile (default)')}."
    )
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
