"""
Fused convolution → bias → ReLU
===============================

A ResNet-style layer — a 3×3 convolution, a per-channel bias and a ReLU — written as **one
cuDNN graph**, so that cuDNN can run the bias and ReLU in the convolution's epilogue instead of
reading and writing the activation two more times.

What you will learn:

* how to declare a fused graph from torch tensors in NHWC (channels-last) layout, with
  ``cudnn.pygraph``, ``conv_fprop``, ``bias`` and ``relu``;
* the five build steps, and what each costs;
* the variant pack and ``execute``;
* how to check the fused output against a higher-precision PyTorch reference *before* timing;
* how the fused graph compares with the fair baselines: PyTorch eager with
  ``torch.backends.cudnn.benchmark`` off and on, and ``torch.compile``;
* how far from this GPU's measured ceilings it runs, and how to confirm the timing with an
  independent clock (the profiler's kernel durations).

Problem: N=32, C=128, 56×56, K=256, 3×3 filter, padding 1, bf16, NHWC.
"""

# %%
# Where these numbers come from
# -----------------------------
# Every number below was measured on the machine described here, in this run.
from cudnn_guide import environment

env = environment.collect()
env

# %%
# The problem, and what to expect before measuring
# ------------------------------------------------
# Count the work first. The convolution does ``2·N·K·P·Q·C·R·S`` floating-point operations; a
# fused kernel must at least read ``x``, ``w``, ``b`` once and write ``y`` once. At this GPU's
# **datasheet** peaks (dense bf16 tensor-core rate and HBM bandwidth) that gives a floor no
# implementation can beat. The measured ceilings (a large copy and the best of three bf16
# GEMMs, timed just now) are shown beside them: they move with the clock, which the H200's
# power cap lowers under dense tensor-core work, so a measured ceiling can be beaten.
from cudnn_guide.measure.ceilings import measure_ceilings
from cudnn_guide.graphs import conv

problem = conv.ConvProblem(n=32, c=128, h=56, w=56, k=256, r=3, s=3, padding=1, dtype="bfloat16")
ceilings = measure_ceilings()
floor_ms = ceilings.floor_ms(problem.flops, problem.bytes)
compute_bound = problem.flops / problem.bytes > ceilings.peak_bf16_tflops * 1e12 / (ceilings.peak_hbm_gbps * 1e9)
print(problem)
print(f"work: {problem.flops / 1e9:.1f} GFLOP, {problem.bytes / 2**20:.1f} MiB moved at least "
      f"(arithmetic intensity {problem.flops / problem.bytes:.0f} FLOP/B)")
print(f"datasheet peaks: {ceilings.peak_bf16_tflops:.0f} TFLOP/s bf16, {ceilings.peak_hbm_gbps:.0f} GB/s; "
      f"measured now: {ceilings.bf16_tflops:.0f} TFLOP/s ({ceilings.matmul.label}, SM clock "
      f"{ceilings.matmul.clocks.get('sm_mhz_end', '?')} MHz at its end), {ceilings.copy_gbps:.0f} GB/s copy")
print(f"floor at the datasheet peaks: {floor_ms * 1e3:.1f} µs ({'compute' if compute_bound else 'memory'}-bound)")

# %%
# Declare the fused graph
# -----------------------
# A ``cudnn.pygraph`` holds the operations; its tensors take their dims, strides
# (channels-last) and dtype from torch tensors (``tensor_like``), whose data is not read. The
# graph computes in fp32 and stores bf16. ``conv_fprop`` → ``bias`` → ``relu`` are three nodes;
# only the last one's result is an output, so cuDNN is free to keep the others on chip.
import cudnn

from cudnn_guide import graphs

handle = graphs.handle_for_current_device()
inputs = problem.make_inputs(seed=0)


def declare_conv_bias_relu(g, x, w, b, y, padding, stride):
    """Declare relu(conv(x, w) + b) on ``g``, writing ``y``; return the graph tensors by name."""
    X, W, B = g.tensor_like(x, name="x"), g.tensor_like(w, name="w"), g.tensor_like(b, name="b")
    conv = g.conv_fprop(image=X, weight=W, padding=[padding] * 2, stride=[stride] * 2, dilation=[1, 1],
                        compute_data_type=cudnn.data_type.FLOAT, name="conv")
    biased = g.bias(input=conv, bias=B, name="bias")
    Y = g.relu(input=biased, name="relu")
    Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16).set_dim(list(y.shape)).set_stride(list(y.stride()))
    return {"x": X, "w": W, "b": B, "y": Y}


g = cudnn.pygraph(handle=handle, name="conv_bias_relu", io_data_type=cudnn.data_type.BFLOAT16,
                  intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
io = declare_conv_bias_relu(g, **inputs, padding=problem.padding, stride=problem.stride)

# %%
# Build it: the five steps
# ------------------------
# ``validate`` checks the declaration; ``build_operation_graph`` lowers it to cuDNN's backend;
# ``create_execution_plans`` asks the heuristics (mode A, then the generic FALLBACK engines)
# for candidate plans; ``check_support`` drops the ones that cannot run here; ``build_plans``
# compiles the first that can. Each step is timed:
import time

seconds = {}
for step, call in (("validate", g.validate), ("build_operation_graph", g.build_operation_graph),
                   ("create_execution_plans", lambda: g.create_execution_plans([cudnn.heur_mode.A,
                                                                                cudnn.heur_mode.FALLBACK])),
                   ("check_support", g.check_support), ("build_plans", g.build_plans)):
    t0 = time.perf_counter()
    call()
    seconds[step] = time.perf_counter() - t0
built = graphs.adopt(g, handle, name="conv_bias_relu", step_seconds=seconds)
print(built.report)
print(f"workspace: {g.get_workspace_size()} bytes")

# %%
# The same declaration is :func:`cudnn_guide.graphs.conv.conv_bias_relu_graph`, which later pages
# (autotuning, serialization, the kernel cache) reuse; a test declares both and checks that they
# build the same nodes. :class:`~cudnn_guide.graphs.BuiltGraph` (``graphs.adopt``) only adds a
# workspace and a variant-pack check to the graph built above.

# %%
# Check before timing
# -------------------
# The variant pack maps each graph tensor to the torch tensor it reads or writes; ``execute``
# runs the built plan on the handle's stream (bound to torch's current stream first). The
# output is poisoned with NaN first, so an element the kernel never writes fails the check.
# The reference runs the same layer in PyTorch in float32 with TF32 off.
import torch

from cudnn_guide import check

pack = {io[name]: inputs[name] for name in ("x", "w", "b", "y")}  # the variant pack: graph tensor → torch tensor
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
check.poison(inputs["y"])
g.execute(pack, workspace, handle=handle)
reference = check.reference(problem.torch_forward, inputs["x"], inputs["w"], inputs["b"])
result = check.check(inputs["y"], reference, name="cuDNN fused conv+bias+relu")
print(result)

# %%
# Benchmark
# ---------
# Every contender is timed the same way: CUDA events around each call, a warm-up, as many
# calls as fit a time budget, and a **cold L2** (a buffer twice the L2 size is written before
# each call, outside the timed region), since in a network the next layer's inputs are not
# L2-resident. The baselines:
#
# * **eager, cudnn.benchmark off** — PyTorch's default: its heuristics pick a conv algorithm,
#   and the bias-add and ReLU run as separate kernels (the profiler section below lists them).
# * **eager, cudnn.benchmark on** — PyTorch times several algorithms on first use and keeps the
#   fastest: the strongest eager baseline.
# * **torch.compile** — Inductor may fuse bias and ReLU into one pointwise kernel after the conv,
#   and with ``max-autotune`` also tries Triton convolution templates.
# * **torch.cudnn_convolution_relu** — PyTorch's own binding of cuDNN's fused
#   convolution + bias + ReLU (used by its inference fusions): the strongest like-for-like
#   baseline, when this PyTorch build has it.
#
# :func:`~cudnn_guide.measure.baselines.admit` runs each baseline once and checks it against the
# same reference; one this machine cannot run is said and left out, one that computes a wrong
# result stops the page.
from cudnn_guide.measure import baselines

x, w, b = inputs["x"], inputs["w"], inputs["b"]
torch.backends.cudnn.benchmark = False
compiled = baselines.compile_quietly(problem.torch_forward)
contenders = {"cuDNN graph (fused)": built.bind(pack)}
unavailable = {}
for name, fn in {
    "PyTorch eager, benchmark off": lambda: problem.torch_forward(x, w, b),
    "PyTorch eager, benchmark on": baselines.with_cudnn_benchmark(lambda: problem.torch_forward(x, w, b), True),
    "torch.compile (max-autotune-no-cudagraphs)": lambda: compiled(x, w, b),
    "torch.cudnn_convolution_relu": lambda: torch.cudnn_convolution_relu(
        x, w, b.reshape(-1), [problem.stride] * 2, [problem.padding] * 2, [1, 1], 1),
}.items():
    if why := baselines.admit(contenders, name, fn, reference):
        unavailable[name] = why

# %%
# The contenders run in **interleaved rounds** (a shuffled order each round), and each round's
# time of a baseline is divided by the cuDNN graph's time in that same round: the GPU's clock
# drifts under its power cap, and pairing within a round cancels that drift. The verdict needs
# the whole 95% interval outside a tie band measured in the same run, from the cuDNN graph
# timed twice per round (:mod:`cudnn_guide.measure.compare`).
from cudnn_guide.measure import compare

result_cmp = compare.compare(contenders, candidate="cuDNN graph (fused)", l2="cold", rounds=15,
                             flops=problem.flops, bytes=problem.bytes, params={"size": str(problem)})
measurements = list(result_cmp.measurements.values())
print(result_cmp)

# %%
# The table below shows the median of each contender over all rounds (± half the inter-quartile range).
from cudnn_guide.report import ComparisonTable

ComparisonTable(measurements, row="impl", column="size", metric="median_us",
                title=str(problem))

# %%
# Is the speed-up real? Cross-check with the profiler
# ---------------------------------------------------
# CUDA events measure wall time on the GPU between two points of the stream; the harness
# subtracts the launch cost it measured (environment page) to report kernel time. The profiler
# reports each kernel's own duration (CUPTI timestamps), a clock the harness does not use. If
# the two agree, the harness is timing the kernels and not launch overhead or an artefact.
from cudnn_guide.studies import profiling

profiled = {m.label: profiling.profile_kernels(fn, calls=30, l2="cold", label=m.label)
            for m, fn in [(measurements[0], contenders["cuDNN graph (fused)"]),
                          (measurements[1], lambda: problem.torch_forward(x, w, b))]}
for label, prof in profiled.items():
    m = next(mm for mm in measurements if mm.label == label)
    print(f"{label}: harness median {m.median_ms * 1e3:.1f} µs (events {m.event_median_ms * 1e3:.1f} µs "
          f"− {m.launch_cost_ms * 1e3:.1f} µs launch cost), profiler kernels {prof.per_call_ms * 1e3:.1f} µs "
          f"({100 * (m.median_ms / prof.per_call_ms - 1):+.1f}%)")
    for kname, ms in prof.top(3):
        print(f"    {ms / prof.calls * 1e3:8.1f} µs/call  {kname[:90]}")

# %%
# Plot
# ----
# Each contender's throughput over the rounds, with its 95% interval, against the datasheet's
# dense bf16 peak.
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison
ax = plot_comparison(result_cmp, "TFLOP/s", title=f"conv→bias→ReLU on {env.gpu}")
ax.axvline(ceilings.peak_bf16_tflops, color="k", linestyle="--", linewidth=1, label="datasheet bf16 peak")
ax.legend(loc="lower right")
plt.show()

# %%
# Takeaways
# ---------
# The numbers in this paragraph are computed from the measurements above.
fused_m = result_cmp.measurements["cuDNN graph (fused)"]
best = result_cmp.best_baseline
fused_est = result_cmp.estimate("cuDNN graph (fused)", "µs")
print(f"* The fused cuDNN graph runs in {fused_est['value']:.1f} µs (95% CI {fused_est['low']:.1f}–{fused_est['high']:.1f} "
      f"over {result_cmp.rounds} rounds), {fused_m.tflops:.0f} TFLOP/s: {100 * fused_m.tflops / ceilings.peak_bf16_tflops:.0f}% "
      f"of the datasheet bf16 peak, {100 * fused_m.tflops / ceilings.bf16_tflops:.0f}% of the GEMM measured just now.")
print(f"* Against the fastest baseline, '{best}', it is {result_cmp.describe(best)}.")
print(f"* It takes {fused_m.median_ms / floor_ms:.2f}× the floor set by the datasheet peaks ({floor_ms * 1e3:.1f} µs).")
gap = {label: 100 * (next(m for m in measurements if m.label == label).median_ms / prof.per_call_ms - 1)
       for label, prof in profiled.items()}
print("* The harness and the profiler differ by " + ", ".join(f"{v:+.1f}% ({k})" for k, v in gap.items())
      + ". They are two runs seconds apart: the profiler sums kernel durations (CUPTI) of calls that follow only "
      "the L2 flush, the harness reads events around calls that follow a spin kernel and the flush. The methodology "
      "page's cross-check times the same calls with both clocks, and measures how far the power cap moves this "
      "kernel between runs.")
for name, why in unavailable.items():
    print(f"* {name} could not run here ({why}), so it is not compared.")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
headline("fused conv+bias+relu median", unit="µs", **fused_est)
headline("fused TFLOP/s", unit="TFLOP/s", **result_cmp.estimate("cuDNN graph (fused)", "TFLOP/s"))
comparison("speed-up over best baseline", result_cmp)
# sphinx_gallery_end_ignore
