"""
Convolution backward: data and weight gradients
===============================================

Training a convolution costs three convolutions per step: the forward, the data gradient
(*dgrad*, which the layer below needs) and the weight gradient (*wgrad*, which the
optimizer needs). This page builds all three as cuDNN graphs for the convolution of the
core pages, checks the gradients against autograd, and times each against PyTorch's own
calls, which also run cuDNN, so the honest expectation is a tie unless the plan choice
differs.

What you will learn:

* ``conv_dgrad`` (inputs: the loss gradient and the filter) and ``conv_wgrad``
  (inputs: the image and the loss gradient), with the forward's padding, stride and
  dilation;
* how to check the gradients against PyTorch autograd in fp32;
* a fair per-pass baseline: ``torch.ops.aten.convolution_backward`` with an output
  mask asks PyTorch for exactly one gradient;
* how PyTorch's ``cudnn.benchmark`` autotuning changes its side of the comparison.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN convolution graphs")
env = environment.collect()
env

# %%
# The lesson: forward, dgrad and wgrad as three graphs
# ----------------------------------------------------
# N32 C128 56×56 → K256 3×3, pad 1, bf16, NHWC: the core pages' convolution (without its
# bias and ReLU, whose backward is elementwise). Tensors keep the logical N×C×H×W order
# and channels-last strides, which cuDNN reads from ``tensor_like``.
#
# Each pass is its own graph with one convolution node: ``conv_fprop`` (image, weight →
# y), ``conv_dgrad`` (loss = dy, filter = w → dx) and ``conv_wgrad`` (image = x, loss =
# dy → dw), all with the forward's padding, stride and dilation.
import cudnn
import torch

n, c, hw, k = 32, 128, 56, 256  # batch, channels, height = width, filters (3×3)
bf16, nhwc = dict(device="cuda", dtype=torch.bfloat16), torch.channels_last
torch.manual_seed(0)
x = torch.randn(n, c, hw, hw, **bf16).to(memory_format=nhwc)
w = (torch.randn(k, c, 3, 3, **bf16) / (c * 9) ** 0.5).to(memory_format=nhwc)
dy = torch.randn(n, k, hw, hw, **bf16).to(memory_format=nhwc)  # the loss gradient
y, dx, dw = torch.empty_like(dy), torch.empty_like(x), torch.empty_like(w)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
TYPES = dict(
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
CONV = dict(padding=[1, 1], stride=[1, 1], dilation=[1, 1])
CONV["compute_data_type"] = cudnn.data_type.FLOAT

gf = cudnn.pygraph(handle=handle, name="conv_fprop", **TYPES)  # y = conv(x, w)
X, W = gf.tensor_like(x, name="x"), gf.tensor_like(w, name="w")
Y = gf.conv_fprop(image=X, weight=W, name="conv_fprop", **CONV)

gd = cudnn.pygraph(handle=handle, name="conv_dgrad", **TYPES)  # dx = dL/dx
DY_d, W_d = gd.tensor_like(dy, name="dy"), gd.tensor_like(w, name="w")
DX = gd.conv_dgrad(loss=DY_d, filter=W_d, name="conv_dgrad", **CONV)

gw = cudnn.pygraph(handle=handle, name="conv_wgrad", **TYPES)  # dw = dL/dw
X_w, DY_w = gw.tensor_like(x, name="x"), gw.tensor_like(dy, name="dy")
DW = gw.conv_wgrad(image=X_w, loss=DY_w, name="conv_wgrad", **CONV)

for out, t in ((Y, y), (DX, dx), (DW, dw)):  # outputs in the buffers' own layout
    out.set_output(True).set_data_type(t.dtype)
    out.set_dim(list(t.shape)).set_stride(list(t.stride()))

for g in (gf, gd, gw):  # the five build steps
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()

size = max(gf.get_workspace_size(), gd.get_workspace_size(), gw.get_workspace_size())
workspace = torch.empty(size, device="cuda", dtype=torch.uint8)
gf.execute({X: x, W: w, Y: y}, workspace, handle=handle)
gd.execute({DY_d: dy, W_d: w, DX: dx}, workspace, handle=handle)
gw.execute({X_w: x, DY_w: dy, DW: dw}, workspace, handle=handle)

# the reference: PyTorch autograd in fp32 (TF32 off) on the same values
torch.backends.cudnn.allow_tf32 = False
xr, wr = x.float().requires_grad_(), w.float().requires_grad_()
y_ref = torch.nn.functional.conv2d(xr, wr, padding=1)
y_ref.backward(dy.float())
for name, got, ref in (
    ("y", y, y_ref.detach()),
    ("dx", dx, xr.grad),
    ("dw", dw, wr.grad),
):
    scale = ref.abs().max().item()
    torch.testing.assert_close(got.float(), ref, atol=0.02 * scale, rtol=0.02)
    err = (got.float() - ref).abs().max().item() / scale
    print(f"{name}: max error {err:.1e} of max|{name}|")

# %%
# Measuring each pass against PyTorch's own calls
# -----------------------------------------------
# The lesson's graphs are wrapped for timing (``graphs.adopt``: the launcher follows
# torch's current stream) and its results join the page's record through
# ``check.check``. ``aten.convolution_backward`` computes any subset of (dx, dw, dbias)
# chosen by ``output_mask``; asking for one is the fair counterpart of one cuDNN graph.
# The full step is autograd: ``conv2d`` forward, then ``backward(dy)``.
import statistics

import torch.nn.functional as F

from cudnn_guide import check, graphs
from cudnn_guide.graphs import conv, conv_training

problem = conv.ConvProblem(n=n, c=c, h=hw, w=hw, k=k)
checks = [
    check.check(y, y_ref.detach(), name="y (forward)"),
    check.check(dx, xr.grad, name="dx (dgrad)"),
    check.check(dw, wr.grad, name="dw (wgrad)"),
]
del xr, wr, y_ref
packs = {
    "forward": {X: x, W: w, Y: y},
    "dgrad": {DY_d: dy, W_d: w, DX: dx},
    "wgrad": {X_w: x, DY_w: dy, DW: dw},
}
graphs_by_pass = dict(zip(packs, (gf, gd, gw)))
passes = {p: graphs.adopt(g, handle, name=p) for p, g in graphs_by_pass.items()}
print(problem)
for name, built in passes.items():
    r = built.report
    print(f"{name}: plan {r.plan_name}, workspace {r.workspace_bytes} B")
conv_args = ([problem.stride] * 2, [problem.padding] * 2, [1, 1], False, [0, 0], 1)


def torch_pass(name):
    if name == "forward":
        return lambda: F.conv2d(x, w, stride=problem.stride, padding=problem.padding)
    mask = [name == "dgrad", name == "wgrad", False]
    return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, *conv_args, mask)


torch_dx = torch_pass("dgrad")()[0]
torch_dw = torch_pass("wgrad")()[1]
tol = check.tolerance(torch.bfloat16)
checks += [
    check.check(torch_dx, dx.float(), name="PyTorch dgrad vs cuDNN", tol=tol),
    check.check(torch_dw, dw.float(), name="PyTorch wgrad vs cuDNN", tol=tol),
]
for c_ in checks:
    print(c_)

# %%
# Measuring each pass and the full step
# -------------------------------------
# Cold L2, in interleaved rounds per pass (:mod:`cudnn_guide.measure.compare`): each
# round times the cuDNN graph and both PyTorch settings in a shuffled order, and the
# verdict rests on the per-round ratio with its in-run 95% interval. PyTorch runs with
# its default algorithm choice and with ``torch.backends.cudnn.benchmark = True``, which
# times cuDNN's algorithms on first use of a shape and keeps the fastest (that first
# call runs before the rounds).
from cudnn_guide.measure import baselines, compare

CUDNN = "cuDNN graphs (heuristics A)"
launchers = {name: built.bind(packs[name]) for name, built in passes.items()}


def cudnn_step():
    launchers["forward"]()
    launchers["dgrad"]()
    launchers["wgrad"]()


torch_step = conv_training.torch_training_step(problem, {"x": x, "w": w, "dy": dy})
torch.backends.cudnn.benchmark = False
results, rows = {}, []
for name in ("forward", "dgrad", "wgrad", "training step"):
    step = name == "training step"
    theirs = torch_step if step else torch_pass(name)
    contenders = {CUDNN: cudnn_step if step else launchers[name]}
    for on in (False, True):
        label = f"PyTorch (cudnn.benchmark={on})"
        contenders[label] = baselines.with_cudnn_benchmark(theirs, on)
        contenders[label]()  # benchmark=True picks its algorithm now
    results[name] = compare.compare(
        contenders,
        candidate=CUDNN,
        l2="cold",
        rounds=11,
        flops=problem.flops * (3 if step else 1),
        params={"pass": name},
        tag=name,
    )
    rows += results[name].measurements.values()

# %%
from cudnn_guide.report import ComparisonTable

ComparisonTable(
    rows,
    row="impl",
    column="pass",
    metric="median_us",
    title=f"{problem}: µs per pass (cold L2)",
)

# %%
# Measuring, as a plot
# --------------------
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_bars

plot_bars(
    rows, x="pass", metric="tflops", title="convolution training passes, bf16 NHWC"
)
plt.show()

# %%
# Conclusions
# -----------
from cudnn_guide.report.prose import Prose

ms = {p: statistics.median(res.round_medians_ms[CUDNN]) for p, res in results.items()}
step = results["training step"]
items = []
for p, res in results.items():
    est = res.estimate(CUDNN, "µs")
    loop = res.wall  # the back-to-back loops, raced when host time may bound a loop
    band = ""
    if loop is not None:
        band = (
            f"; the loop's tie band ±{100 * loop.tie_band:.1f}%, {loop.rounds} rounds"
        )
    items.append(
        f"* {p}: the cuDNN graph takes {est['value']:.1f} µs (in-run 95% interval "
        f"{est['low']:.1f}–{est['high']:.1f}), {res.measurements[CUDNN].tflops:.0f} "
        f"TFLOP/s: {res.describe()}{band}."
    )
backward_share = (ms["dgrad"] + ms["wgrad"]) / ms["forward"]
verdicts = [v["verdict"] for res in results.values() for v in res.versus.values()]
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

headline(
    "conv training step TFLOP/s", unit="TFLOP/s", **step.estimate(CUDNN, "TFLOP/s")
)
comparison("training step, speed-up over best PyTorch", step)
# sphinx_gallery_end_ignore

Prose(
    f"Against PyTorch's own cuDNN calls, the graphs were faster in "
    f"{verdicts.count('faster')}, tied in {verdicts.count('tie')} and slower in "
    f"{verdicts.count('slower')} of {len(verdicts)} comparisons.",
    *items,
    f"The backward passes together take {backward_share:.2f}× the forward's time; the "
    f"whole step runs at {step.measurements[CUDNN].tflops:.0f} TFLOP/s.",
)
