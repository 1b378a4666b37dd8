"""
Fused convolution → bias → ReLU
===============================

A ResNet-style layer (a 3×3 convolution, a per-channel bias and a ReLU) written as **one
cuDNN graph**, so that cuDNN can run the bias and ReLU in the convolution's epilogue
instead of reading and writing the activation two more times.

What you will learn:

* how to declare a fused graph from torch tensors in NHWC (channels-last) layout, with
  ``cudnn.pygraph``, ``conv_fprop``, ``bias`` and ``relu``;
* the five build steps, the variant pack and ``execute``;
* how to check the fused output against a float32 PyTorch reference *before* timing;
* how the fused graph compares with the fair baselines: PyTorch eager with
  ``torch.backends.cudnn.benchmark`` off and on, ``torch.compile`` and PyTorch's own
  fused binding;
* how far from this GPU's measured ceilings it runs, and how to confirm the timing with
  an independent clock (the profiler's kernel durations).

Problem: N=32, C=128, 56×56, K=256, 3×3 filter, padding 1, bf16, NHWC.
"""

# %%
# Environment
# -----------
# Every number below was measured on the machine described here, in this run.
from cudnn_guide import environment

env = environment.collect()
env

# %%
# The lesson: declare, build, run and check the fused graph
# ----------------------------------------------------------
# The tensors are channels-last (NHWC): ``.to(memory_format=torch.channels_last)`` puts
# the channel dimension innermost in memory (stride 1). A ``cudnn.pygraph`` holds the
# operations; its tensors take their dims, strides and dtype from torch tensors
# (``tensor_like``), whose data is not read. The graph computes in fp32 (a node without
# its own ``compute_data_type`` takes the graph's) and stores bf16. ``conv_fprop`` →
# ``bias`` → ``relu`` are three nodes; only the last one's result is an output, so cuDNN
# is free to keep the others on chip.
import cudnn
import torch

n, c, h, w, k = 32, 128, 56, 56, 256  # 3×3 filter, padding 1, stride 1
bf16 = dict(device="cuda", dtype=torch.bfloat16)
x = torch.randn(n, c, h, w, **bf16).to(memory_format=torch.channels_last)
weight = torch.randn(k, c, 3, 3, **bf16) / (c * 9) ** 0.5
weight = weight.to(memory_format=torch.channels_last)
bias = torch.randn(1, k, 1, 1, **bf16).to(memory_format=torch.channels_last)
y = torch.empty(n, k, h, w, **bf16).to(memory_format=torch.channels_last)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)


def declare_conv_bias_relu(g, x, w, b, y, padding, stride):
    """Declare relu(conv(x, w) + b) on ``g``, writing ``y``; return graph tensors."""
    X = g.tensor_like(x, name="x")
    W = g.tensor_like(w, name="w")
    B = g.tensor_like(b, name="b")
    conv = g.conv_fprop(
        X, W, padding=[padding] * 2, stride=[stride] * 2, dilation=[1, 1], name="conv"
    )
    Y = g.relu(input=g.bias(input=conv, bias=B, name="bias"), name="relu")
    Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    Y.set_dim(list(y.shape)).set_stride(list(y.stride()))
    return {"x": X, "w": W, "b": B, "y": Y}


g = cudnn.pygraph(
    handle=handle,
    name="conv_bias_relu",
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
io = declare_conv_bias_relu(g, x=x, w=weight, b=bias, y=y, padding=1, stride=1)

# %%
# Build it in five steps: ``validate`` checks the declaration; ``build_operation_graph``
# lowers it to cuDNN's backend; ``create_execution_plans`` asks the heuristics (mode A,
# then the generic FALLBACK engines) for candidate plans; ``check_support`` drops the
# ones that cannot run here; ``build_plans`` compiles the first that can.
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
print(f"{g.get_execution_plan_count()} plans; running {g.get_plan_name_at_index(0)}")

# %%
# The variant pack maps each graph tensor to the torch tensor it reads or writes;
# ``execute`` runs the built plan on the handle's stream. The reference runs the same
# layer in PyTorch in float32 (TF32 off).
pack = {io["x"]: x, io["w"]: weight, io["b"]: bias, io["y"]: y}
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute(pack, workspace, handle=handle)

torch.backends.cudnn.allow_tf32 = False
ref = torch.conv2d(x.float(), weight.float(), bias.float().flatten(), padding=1).relu()
torch.testing.assert_close(y.float(), ref, atol=5e-2, rtol=2e-2)

# %%
# Measuring the fused graph against PyTorch
# -----------------------------------------
# Count the work first. The convolution does ``2·N·K·P·Q·C·R·S`` floating-point
# operations; a fused kernel must at least read ``x``, ``w``, ``b`` once and write ``y``
# once. At this GPU's **datasheet** peaks (dense bf16 tensor-core rate and HBM
# bandwidth) that gives a floor no implementation can beat. The measured ceilings (a
# large copy and the best of three bf16 GEMMs, timed just now) are shown beside them:
# they move with the clock, which the H200's power cap lowers under dense tensor-core
# work, so a measured ceiling can be beaten.
from cudnn_guide.graphs import conv
from cudnn_guide.measure.ceilings import measure_ceilings
from cudnn_guide.studies import conv_fusion

problem = conv.ConvProblem(
    n=n, c=c, h=h, w=w, k=k, r=3, s=3, padding=1, dtype="bfloat16"
)
ceilings = measure_ceilings()
floor_ms = ceilings.floor_ms(problem.flops, problem.bytes)
print(conv_fusion.work_lines(problem, ceilings))

# %%
# The harness wraps that graph (:func:`~cudnn_guide.graphs.builder.adopt`: it checks
# variant packs against the declaration and gives timing loops a launcher that follows
# torch's current stream), and checks it once more, its output poisoned with NaN first
# so that an element the kernel never writes fails, before anything is timed.
from cudnn_guide import check, graphs

built = graphs.adopt(g, handle, name="conv_bias_relu", io=io)
check.poison(y)
built.bind(pack)()
reference = check.reference(problem.torch_forward, x, weight, bias)
result = check.check(y, reference, name="cuDNN fused conv+bias+relu")
print(result)

# %%
# Measuring with a cold L2, against every baseline
# ------------------------------------------------
# Every contender is timed the same way: CUDA events around each call, a warm-up, as
# many calls as fit a time budget, and a **cold L2** (a buffer twice the L2 size is
# written before each call, outside the timed region), since in a network the next
# layer's inputs are not L2-resident. The baselines:
#
# * **eager, cudnn.benchmark off**: PyTorch's default: its heuristics pick a conv
#   algorithm, and the bias-add and ReLU run as separate kernels (the profiler section
#   below lists them).
# * **eager, cudnn.benchmark on**: PyTorch times several algorithms on first use and
#   keeps the fastest: the strongest eager baseline.
# * **torch.compile**: Inductor may fuse bias and ReLU into one pointwise kernel after
#   the conv, and with ``max-autotune`` also tries Triton convolution templates.
# * **torch.cudnn_convolution_relu**: PyTorch's own binding of cuDNN's fused convolution
#   + bias + ReLU (used by its inference fusions): the strongest like-for-like baseline,
#   when this PyTorch build has it.
#
# :func:`~cudnn_guide.studies.conv_fusion.admit_baselines` runs each baseline once
# through :func:`~cudnn_guide.measure.baselines.admit`, which checks it against the same
# reference; one this machine cannot run is said and left out, one that computes a
# wrong result stops the page.
from cudnn_guide.studies.conv_fusion import CANDIDATE  # "cuDNN graph (fused)"

torch.backends.cudnn.benchmark = False
contenders = {CANDIDATE: built.bind(pack)}
unavailable = conv_fusion.admit_baselines(
    contenders, problem, x, weight, bias, reference
)

# %%
# The contenders run in **interleaved rounds** (a shuffled order each round), and each
# round's time of a baseline is divided by the cuDNN graph's time in that same round:
# the GPU's clock drifts under its power cap, and pairing within a round cancels that
# drift. The verdict needs the whole 95% interval outside a tie band measured in the
# same run, from the cuDNN graph timed twice per round
# (:mod:`cudnn_guide.measure.compare`). Each line: the cuDNN graph's speed-up over a
# baseline (above 1: cuDNN is faster). ``rounds=15`` is a cap, not a count: past a
# minimum, ``compare`` stops as soon as every interval is settled (wholly outside or
# wholly inside the tie band, and narrow), so fewer rounds may run; the last line says
# how many did and the rule's thresholds.
from cudnn_guide.measure import compare

result_cmp = compare.compare(
    contenders,
    candidate=CANDIDATE,
    l2="cold",
    rounds=15,
    flops=problem.flops,
    bytes=problem.bytes,
    params={"size": str(problem)},
)
measurements = list(result_cmp.measurements.values())
print(conv_fusion.verdict_lines(result_cmp))

# %%
# The median of each contender over all rounds (± half the inter-quartile range):
from cudnn_guide.report import ComparisonTable

ComparisonTable(
    measurements, row="impl", column="size", metric="median_us", title=str(problem)
)

# %%
# Measuring with another clock: the profiler
# ------------------------------------------
# CUDA events measure wall time on the GPU between two points of the stream; the harness
# subtracts the launch cost it measured (:ref:`environment page
# <sphx_glr_auto_examples_plot_01_environment.py>`) to report kernel time. The profiler
# reports each kernel's own duration (CUPTI timestamps), a clock the harness does not
# use. If the two agree, the harness is timing the kernels, not launch overhead.
profiled = conv_fusion.profile_contenders(
    [
        (measurements[0], contenders[CANDIDATE]),
        (measurements[1], lambda: problem.torch_forward(x, weight, bias)),
    ],
    calls=30,
    l2="cold",
)
gap = conv_fusion.profiler_gaps(measurements, profiled)  # harness over profiler, in %
print(conv_fusion.profiler_lines(measurements, profiled))

# %%
# Plot
# ----
# Each contender's throughput over the rounds, with its 95% interval, against the
# datasheet's dense bf16 peak.
import matplotlib.pyplot as plt

ax = conv_fusion.comparison_figure(result_cmp, ceilings.peak_bf16_tflops, env.gpu)
plt.show()

# %%
# Conclusions
# -----------
# Every number here is computed from the measurements above
# (``conv_fusion.conclusions``). torch.cudnn_convolution_relu runs cuDNN's own fused
# kernel: a sanity row, which the rival named in the conclusions leaves out.
from cudnn_guide.report.prose import Prose

fused_est = result_cmp.estimate(CANDIDATE, "µs")
rival = conv_fusion.fastest_rival(result_cmp)
sentences = conv_fusion.conclusions(result_cmp, ceilings, floor_ms, gap, unavailable)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

headline("fused conv+bias+relu median", unit="µs", **fused_est)
headline(
    "fused TFLOP/s",
    unit="TFLOP/s",
    **result_cmp.estimate("cuDNN graph (fused)", "TFLOP/s"),
)
comparison("speed-up over the fastest other implementation", result_cmp, rival)
# sphinx_gallery_end_ignore
Prose(*sentences)
