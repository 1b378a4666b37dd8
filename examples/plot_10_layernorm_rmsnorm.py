"""
LayerNorm and RMSNorm: training forward, backward, and residual-add fusion
==========================================================================

Every transformer block normalizes its activations twice. The norms do little arithmetic per
byte, so their speed is set by memory traffic: the question is how close each implementation
gets to the GPU's copy bandwidth, and how many passes over memory a fusion saves.

What you will learn:

* the training forward (``norm_forward_phase=TRAINING``), which also writes the per-token
  statistics (mean and 1/√(var+ε) for LayerNorm, 1/√(mean(x²)+ε) for RMSNorm), and the
  backward that reads them;
* how a token-major activation is declared to cuDNN (``tokens × hidden × 1 × 1``);
* a fused residual add → norm that writes both the sum (the next residual) and the normalized
  output in one pass;
* GB/s against the measured copy bandwidth, compared with PyTorch eager and ``torch.compile``.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN normalization graphs")
env = environment.collect()
env

# %%
# Build and check both norms
# --------------------------
# 16,384 tokens × 4,096 features in bf16 (a batch of 8 sequences of 2,048 tokens at a 4k model
# width). Forward and backward are checked against PyTorch autograd in fp32: the output, the
# saved statistics, and every gradient.
#
# cuDNN's norm operations work on N×C×H×W tensors: the tokens × hidden activation is declared as
# tokens × hidden × 1 × 1 with the features innermost, and the scale and bias as 1 × hidden × 1 × 1.
# ``epsilon`` is a pass-by-value scalar. The forward in the TRAINING phase also writes the
# per-token statistics (``mean`` for LayerNorm, ``inv_var`` = 1/√(var + eps) for both) that the
# backward reads.
import cudnn
import torch

from cudnn_guide import check, graphs
from cudnn_guide.graphs import norms

handle = graphs.handle_for_current_device()


def as_4d(t):
    """tokens × hidden (or a hidden-sized parameter) as cuDNN's N×C×H×W view, features innermost."""
    if t.dim() == 1:
        return t.reshape(1, -1, 1, 1)
    n, c = t.shape
    return t.as_strided((n, c, 1, 1), (c, 1, c, c))


def new_graph(name):
    return cudnn.pygraph(handle=handle, name=name, io_data_type=cudnn.data_type.BFLOAT16,
                         intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)


def output(graph_output, t):
    """Mark a node's result as an output written to the buffer ``t``; return its 4-D view for the pack."""
    t4 = as_4d(t)
    graph_output.set_output(True).set_data_type(t4.dtype).set_dim(list(t4.shape)).set_stride(list(t4.stride()))
    return t4


def norm_forward(kind, d, eps, residual=False, training=True):
    """Declare and build LayerNorm (``kind="layer"``) or RMSNorm of ``d["x"]`` (plus ``d["r"]``); return graph, pack."""
    g = new_graph(f"{kind}norm_forward{'_residual' if residual else ''}")
    X, SCALE = g.tensor_like(as_4d(d["x"]), name="x"), g.tensor_like(as_4d(d["scale"]), name="scale")
    EPS = g.tensor(name="epsilon", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True,
                   data_type=cudnn.data_type.FLOAT)
    pack = {X: as_4d(d["x"]), SCALE: as_4d(d["scale"]), EPS: torch.full((1, 1, 1, 1), eps)}
    src = X
    if residual:  # s = x + r, written out as the next block's residual
        R = g.tensor_like(as_4d(d["r"]), name="r")
        src = g.add(a=X, b=R, name="residual_add")
        pack[R], pack[src] = as_4d(d["r"]), output(src, d["s"])
    phase = cudnn.norm_forward_phase.TRAINING if training else cudnn.norm_forward_phase.INFERENCE
    if kind == "layer":
        BIAS = g.tensor_like(as_4d(d["bias"]), name="bias")
        pack[BIAS] = as_4d(d["bias"])
        Y, MEAN, INV_VAR = g.layernorm(name="layernorm", norm_forward_phase=phase, input=src, scale=SCALE, bias=BIAS,
                                       epsilon=EPS)
        if training:
            pack[MEAN] = output(MEAN, d["mean"])
    else:
        Y, INV_VAR = g.rmsnorm(name="rmsnorm", norm_forward_phase=phase, input=src, scale=SCALE, epsilon=EPS)
    if training:
        pack[INV_VAR] = output(INV_VAR, d["inv_var"])
    pack[Y] = output(Y, d["y"])
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])  # the five build steps
    return g, pack


def norm_backward(kind, d):
    """Declare and build the backward: dx, dscale (and dbias) from dy, x, the scale and the saved statistics."""
    g = new_graph(f"{kind}norm_backward")
    T = {n: g.tensor_like(as_4d(d[n]), name=n) for n in ("dy", "x", "scale", "inv_var")}
    if kind == "layer":
        T["mean"] = g.tensor_like(as_4d(d["mean"]), name="mean")
        DX, DSCALE, DBIAS = g.layernorm_backward(name="layernorm_backward", grad=T["dy"], input=T["x"],
                                                 scale=T["scale"], mean=T["mean"], inv_variance=T["inv_var"])
    else:
        DX, DSCALE, _ = g.rmsnorm_backward(name="rmsnorm_backward", grad=T["dy"], input=T["x"], scale=T["scale"],
                                           inv_variance=T["inv_var"], has_dbias=False)
    pack = {t: as_4d(d[n]) for n, t in T.items()} | {DX: output(DX, d["dx"]), DSCALE: output(DSCALE, d["dscale"])}
    if kind == "layer":
        pack[DBIAS] = output(DBIAS, d["dbias"])
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, pack


TOKENS, HIDDEN = 16384, 4096
graphs_by_kind, checks = {}, []
for kind in ("layer", "rms"):
    p = norms.NormProblem(tokens=TOKENS, hidden=HIDDEN, kind=kind)
    data = p.make_inputs(seed=1)
    gf, fwd_pack = norm_forward(kind, data, p.eps)
    gb, bwd_pack = norm_backward(kind, data)
    check.poison(data["y"], data["inv_var"], data["dx"], data["dscale"])
    workspace = torch.empty(max(gf.get_workspace_size(), gb.get_workspace_size()), device="cuda", dtype=torch.uint8)
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    gf.execute(fwd_pack, workspace, handle=handle)
    gb.execute(bwd_pack, workspace, handle=handle)
    params = {"x": data["x"], "scale": data["scale"]} | ({"bias": data["bias"]} if kind == "layer" else {})
    ref_y, ref_grads = check.reference_grads(lambda **kw: p.torch_forward(**kw), params, data["dy"])
    stats = p.torch_stats(data["x"])
    checks.append(check.check(data["y"], ref_y, name=f"{p} y"))
    checks += [check.check(data[n], stats[n], name=f"{p} {n}") for n in stats]
    checks += [check.check(data["d" + n], ref_grads[n], name=f"{p} d{n}") for n in params]
    fwd, bwd = graphs.adopt(gf, handle, name=f"{p} forward"), graphs.adopt(gb, handle, name=f"{p} backward")
    graphs_by_kind[kind] = (p, data, fwd.bind(fwd_pack), bwd.bind(bwd_pack))  # launchers for timing
    print(f"{p}: forward plan {gf.get_plan_name_at_index(0)}, backward plan {gb.get_plan_name_at_index(0)}")
for c in checks:
    print(c)

# %%
# The baselines
# -------------
# PyTorch runs the same training step through autograd: ``F.layer_norm``/``F.rms_norm`` with
# ``requires_grad`` inputs (so the forward saves its statistics, as in training), then
# ``backward(dy)``. ``torch.compile`` (default mode: these are reductions, not GEMMs, so
# autotuning matmuls would not change them) generates fused Triton kernels for both passes.
# Each baseline's gradients are checked too.
from cudnn_guide.measure import baselines


def torch_training(p, data, fn):
    names = ("x", "scale", "bias") if p.kind == "layer" else ("x", "scale")
    leaves = {n: data[n].detach().clone().requires_grad_(True) for n in names}
    return (lambda: fn(**leaves)), baselines.training_step(fn, leaves, data["dy"]), leaves


impls = {}
for kind, (p, data, fwd_launch, bwd_launch) in graphs_by_kind.items():
    label = "LayerNorm" if kind == "layer" else "RMSNorm"
    eager = torch_training(p, data, p.torch_forward)
    compiled = torch_training(p, data, baselines.compile_quietly(p.torch_forward, mode="default"))
    for name, (forward, step, leaves) in (("PyTorch eager", eager), ("torch.compile (default)", compiled)):
        step()
        checks.append(check.check(leaves["x"].grad, check.reference_grads(
            lambda **kw: p.torch_forward(**kw), {n: data[n] for n in leaves}, data["dy"])[1]["x"], name=f"{name} {label} dx"))
        impls[(label, name)] = (p, forward, step)

    def cudnn_step(f=fwd_launch, b=bwd_launch):
        f()
        b()
    impls[(label, "cuDNN graphs")] = (p, fwd_launch, cudnn_step)
print(*checks[-4:], sep="\n")

# %%
# Measure at 16k × 4k
# -------------------
# Cold L2 (the 128 MiB activation would not fit in this GPU's L2 anyway; its size is printed
# below). Bytes are the fewest
# a kernel must move: the forward reads x and writes y (2 × 128 MiB); the backward reads x and dy
# and writes dx (3 × 128 MiB). Parameters and statistics (< 0.1 MiB) are not counted.
from cudnn_guide.measure import compare
from cudnn_guide.measure.ceilings import measure_ceilings

print(f"activation {TOKENS * HIDDEN * 2 / 2**20:.0f} MiB; L2 {env.l2_mib:.0f} MiB")
ceil = measure_ceilings()
IMPLS = ("cuDNN graphs", "PyTorch eager", "torch.compile (default)")
results, base = {}, []
for label in ("LayerNorm", "RMSNorm"):
    p = impls[(label, "cuDNN graphs")][0]
    for pass_name, which, nbytes in (("forward (training)", 1, p.forward_bytes),
                                     ("forward + backward", 2, p.forward_bytes + p.backward_bytes)):
        res = compare.compare({n: impls[(label, n)][which] for n in IMPLS}, candidate="cuDNN graphs", l2="cold",
                              rounds=11, bytes=nbytes, params={"norm": label, "pass": pass_name},
                              tag=f"{label} {pass_name}")
        results[(label, pass_name)] = res
        base += res.measurements.values()
        print(f"{label} {pass_name}: cuDNN {res.measurements['cuDNN graphs'].gbps:.0f} GB/s "
              f"({100 * res.measurements['cuDNN graphs'].gbps / ceil.copy_gbps:.0f}% of the measured copy bandwidth), "
              f"{res.describe()}")

# %%
from cudnn_guide.report import ComparisonTable

ComparisonTable([m for m in base if m.params["norm"] == "LayerNorm"], row="impl", column="pass",
                metric="gbps", title=f"LayerNorm, {TOKENS} × {HIDDEN} bf16: GB/s (higher is better)")

# %%
ComparisonTable([m for m in base if m.params["norm"] == "RMSNorm"], row="impl", column="pass",
                metric="gbps", title=f"RMSNorm, {TOKENS} × {HIDDEN} bf16: GB/s (higher is better)")

# %%
# Fused residual add → norm
# -------------------------
# In a pre-norm transformer each norm follows a residual add: ``s = x + r`` is the next
# block's residual and ``norm(s)`` feeds the attention or MLP. One cuDNN graph reads x and r
# once and writes s and y; PyTorch eager does the add (reads x and r, writes s), then the norm
# (reads s, writes y). The byte counts are printed below.
# All three run the training forward (the statistics are saved: PyTorch's inputs require
# gradients).
residual, res_checks = [], []
for kind in ("layer", "rms"):
    p = norms.NormProblem(tokens=TOKENS, hidden=HIDDEN, kind=kind, residual=True)
    label = "LayerNorm" if kind == "layer" else "RMSNorm"
    data = p.make_inputs(seed=2)
    g_res, pack = norm_forward(kind, data, p.eps, residual=True)
    check.poison(data["y"], data["s"])
    g_res.execute(pack, torch.empty(g_res.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)
    fused = graphs.adopt(g_res, handle, name=f"{p}")
    ref = check.reference(p.torch_forward, data["x"], data["scale"], data.get("bias"), data["r"])
    res_checks += [check.check(data["y"], ref, name=f"{p} y"),
                   check.check(data["s"], data["x"].float() + data["r"].float(), name=f"{p} s")]
    x, r, w, b = (t.detach().clone().requires_grad_(True) if t is not None else None
                  for t in (data["x"], data["r"], data["scale"], data.get("bias")))

    def add_then_norm(x, r, w, b, p=p):
        s = x + r
        return s, p.torch_forward(s, w, b)
    compiled = baselines.compile_quietly(add_then_norm, mode="default")
    res_checks.append(check.check(compiled(x, r, w, b)[1].detach(), ref, name=f"torch.compile (default) {label} (residual)"))
    res_checks.append(check.check(add_then_norm(x, r, w, b)[1].detach(), ref, name=f"PyTorch eager {label} (residual)"))
    res = compare.compare({"cuDNN graph (fused)": fused.bind(pack),
                           "PyTorch eager": lambda f=add_then_norm, a=(x, r, w, b): f(*a),
                           "torch.compile (default)": lambda f=compiled, a=(x, r, w, b): f(*a)},
                          candidate="cuDNN graph (fused)", l2="cold", rounds=11, bytes=p.forward_bytes,
                          params={"norm": label}, tag=f"residual+{label}")
    results[("residual", label)] = res
    residual += res.measurements.values()
for c in res_checks:
    print(c)
act = TOKENS * HIDDEN * 2  # bytes of one activation
fused_moves, eager_moves = p.forward_bytes / act, (3 + 2) * act / act  # eager: add (x, r → s), then norm (s → y)
print(f"bytes moved, in activations of {act / 2**20:.0f} MiB: fused {fused_moves:.0f}, eager {eager_moves:.0f} "
      f"({eager_moves / fused_moves:.2f}× the fused graph's)")
ComparisonTable(residual, row="impl", column="norm", metric="gbps",
                title="residual add → norm (training forward): GB/s of the fewest bytes")

# %%
# Sweep the model width
# ---------------------
# The training step (forward + backward) at 16,384 tokens for widths 1k–8k.
from cudnn_guide.measure import sweep

widths = [1024, 2048, 4096, 8192]
made = {}


def setup(kind, h):
    if (kind, h) not in made:
        p = norms.NormProblem(tokens=TOKENS, hidden=h, kind=kind)
        data = p.make_inputs(seed=h)
        (gf, fp), (gb, bp) = norm_forward(kind, data, p.eps), norm_backward(kind, data)
        fl, bl = graphs.adopt(gf, handle, name=f"{p} forward").bind(fp), graphs.adopt(gb, handle, name=f"{p} backward").bind(bp)
        check.poison(data["dx"])
        fl()
        bl()
        grads = check.reference_grads(lambda **kw: p.torch_forward(**kw),
                                      {"x": data["x"], "scale": data["scale"]} | ({"bias": data["bias"]} if kind == "layer" else {}),
                                      data["dy"])[1]
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
widths_result = sweep.sweep(widths, sweep_impls, x="hidden", l2="cold",
                            bytes=lambda h: 5 * TOKENS * h * 2, budget_ms=150)  # one line per implementation

# %%
# Plot
# ----
import matplotlib.pyplot as plt

widths_result.plot("gbps", logx=True, title=f"norm training step (forward + backward), {TOKENS} tokens, bf16",
                   ceiling=ceil.copy_gbps, ceiling_label="measured copy bandwidth")
plt.show()

# %%
widths_result.table("gbps", title="forward + backward, GB/s")

# %%
# Takeaways
# ---------
for label in ("LayerNorm", "RMSNorm"):
    res, fwd = results[(label, "forward + backward")], results[(label, "forward (training)")]
    est = res.estimate("cuDNN graphs", "µs")
    print(f"* {label} training step at {TOKENS}×{HIDDEN}: cuDNN {est['value']:.0f} µs (95% CI {est['low']:.0f}–{est['high']:.0f}), "
          f"{100 * res.measurements['cuDNN graphs'].gbps / ceil.copy_gbps:.0f}% of copy bandwidth: "
          f"{res.describe('PyTorch eager')}; {res.describe('torch.compile (default)')}. Its forward alone reaches "
          f"{100 * fwd.measurements['cuDNN graphs'].gbps / ceil.copy_gbps:.0f}%.")
for label in ("LayerNorm", "RMSNorm"):
    res = results[("residual", label)]
    print(f"* Residual add → {label}: the fused graph is {res.describe('PyTorch eager')} (eager moves "
          f"{eager_moves / fused_moves:.2f}× the bytes), and {res.describe('torch.compile (default)')}.")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
for label in ("LayerNorm", "RMSNorm"):
    res = results[(label, "forward + backward")]
    headline(f"{label} training step, % of copy bandwidth", unit="%",
             **res.estimate("cuDNN graphs", "GB/s", scale=100 / ceil.copy_gbps))
    comparison(f"{label} training step, speed-up over best PyTorch", res)
# sphinx_gallery_end_ignore
