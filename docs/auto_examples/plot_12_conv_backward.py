"""
Convolution backward: data and weight gradients
===============================================

Training a convolution costs three convolutions per step: the forward, the data gradient
(*dgrad*, which the layer below needs) and the weight gradient (*wgrad*, which the optimizer
needs). This page builds all three as cuDNN graphs for the convolution of the core pages,
checks the gradients against autograd, and times each against PyTorch's own calls, which also
run cuDNN, so the honest expectation is a tie unless the plan choice differs.

What you will learn:

* ``conv_dgrad`` (inputs: the loss gradient and the filter) and ``conv_wgrad`` (inputs: the
  image and the loss gradient), with the forward's padding, stride and dilation;
* how to check gradients with :func:`cudnn_guide.check.reference_grads`;
* a fair per-pass baseline: ``torch.ops.aten.convolution_backward`` with an output mask asks
  PyTorch for exactly one gradient;
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
# Three graphs, checked against autograd
# --------------------------------------
# N32 C128 56×56 → K256 3×3, pad 1, bf16, NHWC: the core pages' convolution (without its bias
# and ReLU, whose backward is elementwise).
# Each pass is its own graph with one convolution node: ``conv_fprop`` (image, weight → y),
# ``conv_dgrad`` (loss = dy, filter = w → dx) and ``conv_wgrad`` (image = x, loss = dy → dw),
# all with the forward's padding, stride and dilation.
import statistics

import cudnn
import torch
import torch.nn.functional as F

from cudnn_guide import check, graphs
from cudnn_guide.graphs import conv, conv_training

handle = graphs.handle_for_current_device()
problem = conv.ConvProblem(n=32, c=128, h=56, w=56, k=256)
data = conv_training.make_training_inputs(problem, seed=0)
x, w, y, dy, dx, dw = (data[n] for n in ("x", "w", "y", "dy", "dx", "dw"))
CONV = dict(padding=[problem.padding] * 2, stride=[problem.stride] * 2, dilation=[1, 1],
            compute_data_type=cudnn.data_type.FLOAT)


def conv_graph(name):
    return cudnn.pygraph(handle=handle, name=name, io_data_type=cudnn.data_type.BFLOAT16,
                         intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)


def output_like(graph_output, t):
    graph_output.set_output(True).set_data_type(t.dtype).set_dim(list(t.shape)).set_stride(list(t.stride()))


gf = conv_graph("conv_fprop")  # y = conv(x, w)
X, W = gf.tensor_like(x, name="x"), gf.tensor_like(w, name="w")
Y = gf.conv_fprop(image=X, weight=W, name="conv_fprop", **CONV)
output_like(Y, y)

gd = conv_graph("conv_dgrad")  # dx = the gradient of the loss with respect to x
DY_d, W_d = gd.tensor_like(dy, name="dy"), gd.tensor_like(w, name="w")
DX = gd.conv_dgrad(loss=DY_d, filter=W_d, name="conv_dgrad", **CONV)
output_like(DX, dx)

gw = conv_graph("conv_wgrad")  # dw = the gradient of the loss with respect to w
X_w, DY_w = gw.tensor_like(x, name="x"), gw.tensor_like(dy, name="dy")
DW = gw.conv_wgrad(image=X_w, loss=DY_w, name="conv_wgrad", **CONV)
output_like(DW, dw)

passes, packs = {}, {"forward": {X: x, W: w, Y: y}, "dgrad": {DY_d: dy, W_d: w, DX: dx},
                     "wgrad": {X_w: x, DY_w: dy, DW: dw}}
for name, g in (("forward", gf), ("dgrad", gd), ("wgrad", gw)):
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])  # the five build steps
    passes[name] = graphs.adopt(g, handle, name=name)
print(problem)
for name, built in passes.items():
    print(f"{name}: plan {built.report.plan_name}, workspace {built.report.workspace_bytes} B")

check.poison(y, dx, dw)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)  # run on torch's stream
for name, g in (("forward", gf), ("dgrad", gd), ("wgrad", gw)):
    g.execute(packs[name], torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)
ref_y, ref_grads = check.reference_grads(
    lambda x, w: F.conv2d(x, w, stride=problem.stride, padding=problem.padding),
    {"x": data["x"], "w": data["w"]}, data["dy"])
checks = [check.check(data["y"], ref_y, name="y (forward)"),
          check.check(data["dx"], ref_grads["x"], name="dx (dgrad)"),
          check.check(data["dw"], ref_grads["w"], name="dw (wgrad)")]
for c in checks:
    print(c)
del ref_y, ref_grads

# %%
# PyTorch's side, pass by pass
# ----------------------------
# ``aten.convolution_backward`` computes any subset of (dx, dw, dbias) chosen by
# ``output_mask``; asking for one is the fair counterpart of one cuDNN graph. The full step is
# autograd: ``conv2d`` forward, then ``backward(dy)``.
conv_args = ([problem.stride] * 2, [problem.padding] * 2, [1, 1], False, [0, 0], 1)


def torch_pass(name):
    if name == "forward":
        return lambda: F.conv2d(x, w, stride=problem.stride, padding=problem.padding)
    mask = [name == "dgrad", name == "wgrad", False]
    return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, *conv_args, mask)


torch_dx = torch_pass("dgrad")()[0]
torch_dw = torch_pass("wgrad")()[1]
checks += [check.check(torch_dx, data["dx"].float(), name="PyTorch dgrad vs cuDNN", tol=check.tolerance(torch.bfloat16)),
           check.check(torch_dw, data["dw"].float(), name="PyTorch wgrad vs cuDNN", tol=check.tolerance(torch.bfloat16))]
print(*checks[-2:], sep="\n")

# %%
# Measure each pass and the full step
# -----------------------------------
# Cold L2, in interleaved rounds per pass (:mod:`cudnn_guide.measure.compare`): each round times the
# cuDNN graph and both PyTorch settings in a shuffled order, and the verdict rests on the
# per-round ratio with its 95% interval. PyTorch runs with its default algorithm choice and with
# ``torch.backends.cudnn.benchmark = True``, which times cuDNN's algorithms on first use of a
# shape and keeps the fastest (that first call runs before the rounds).
from cudnn_guide.measure import baselines, compare

launchers = {name: built.bind(packs[name]) for name, built in passes.items()}


def cudnn_step():
    launchers["forward"]()
    launchers["dgrad"]()
    launchers["wgrad"]()


torch_step = conv_training.torch_training_step(problem, data)
torch.backends.cudnn.benchmark = False
results, rows = {}, []
for name in ("forward", "dgrad", "wgrad", "training step"):
    theirs = torch_step if name == "training step" else torch_pass(name)
    contenders = {"cuDNN graphs": cudnn_step if name == "training step" else launchers[name]}
    for bench_mode in (False, True):
        contenders[f"PyTorch (cudnn.benchmark={bench_mode})"] = baselines.with_cudnn_benchmark(theirs, bench_mode)
        contenders[f"PyTorch (cudnn.benchmark={bench_mode})"]()  # benchmark=True picks its algorithm now
    results[name] = compare.compare(contenders, candidate="cuDNN graphs", l2="cold", rounds=11,
                                    flops=problem.flops * (3 if name == "training step" else 1), params={"pass": name},
                                    tag=name)
    rows += results[name].measurements.values()
    print(f"{name}: cuDNN graph is {results[name].describe()}")

# %%
from cudnn_guide.report import ComparisonTable

ComparisonTable(rows, row="impl", column="pass", metric="median_us",
                title=f"{problem}: µs per pass (cold L2)")

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_bars

plot_bars(rows, x="pass", metric="tflops", title="convolution training passes, bf16 NHWC")
plt.show()

# %%
# Takeaways
# ---------
for p, res in results.items():
    est = res.estimate("cuDNN graphs", "µs")
    print(f"* {p}: the cuDNN graph takes {est['value']:.1f} µs (95% CI {est['low']:.1f}–{est['high']:.1f}), "
          f"{res.measurements['cuDNN graphs'].tflops:.0f} TFLOP/s: {res.describe()}.")
ms = {p: statistics.median(res.round_medians_ms["cuDNN graphs"]) for p, res in results.items()}
step = results["training step"]
print(f"* The backward passes together take {(ms['dgrad'] + ms['wgrad']) / ms['forward']:.2f}× the forward's time; "
      f"the whole step runs at {step.measurements['cuDNN graphs'].tflops:.0f} TFLOP/s.")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
headline("conv training step TFLOP/s", unit="TFLOP/s", **step.estimate("cuDNN graphs", "TFLOP/s"))
comparison("training step, speed-up over best PyTorch", step)
# sphinx_gallery_end_ignore
