"""
CUDA graphs around an execution plan
====================================

Every ``graph.execute()`` costs host time (Python, the frontend's dispatch, the driver
launch) before the GPU does anything. When the kernel is long, that cost hides behind
the GPU's work of the previous call. When it is short, the GPU waits for the host, and
the host cost *is* the time per call. Capturing the calls into a CUDA graph records
the launches once; replaying them is one cheap call. This page captures a cuDNN graph
into a ``torch.cuda.CUDAGraph``, replays it on new data, and then sweeps the problem
size from tiny to large to find where the host stops mattering.

What you will learn:

* how to capture ``execute`` into a ``torch.cuda.CUDAGraph`` with the cuDNN handle bound
  to the capture stream;
* that a replay reads whatever is in the captured input buffers: new data is copied in,
  not re-captured;
* the host cost of ``execute()``, per call among back-to-back calls, measured in
  several fresh processes because a host-bound number is one process's draw;
* how much this package's launcher adds to it;
* per-call time of an eager loop against graph replay, across sizes, and what a replay
  amortises: its per-call time is per call inside a 100-call graph.

Graph: 1 × s×s @ s×s → scale → bias → GELU, bf16; s = 1024 in the lesson, 64 to 4096 in
the sweep.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

env = environment.collect()
env

# %%
# The lesson: capture a cuDNN graph, replay it on new data
# --------------------------------------------------------
# ``torch.cuda.graph`` captures on its own stream. A cuDNN handle still bound to the
# default stream would launch there, outside the capture: inside the capture, bind the
# handle to the capture stream (``cudnn.set_stream``) before ``execute``. The graph is
# the matmul epilogue ``gelu(alpha · (a @ b) + bias)``; it runs once before the capture.
# The output is filled with NaN before each replay, so that a replay that wrote nothing
# cannot pass; the second check passes only if the replay read the new inputs.
import cudnn
import torch

s, alpha = 1024, 0.5  # one (s×s) @ (s×s) matmul and its epilogue, bf16, row-major
a = torch.randn(1, s, s, device="cuda", dtype=torch.bfloat16)
b = torch.randn(1, s, s, device="cuda", dtype=torch.bfloat16) / s**0.5
bias = torch.randn(1, 1, s, device="cuda", dtype=torch.bfloat16)
y = torch.empty(1, s, s, device="cuda", dtype=torch.bfloat16)

handle = cudnn.create_handle()
BF16, F32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
TYPES = dict(io_data_type=BF16, intermediate_data_type=F32, compute_data_type=F32)
g = cudnn.pygraph(handle=handle, **TYPES)
A, B, BIAS = g.tensor_like(a), g.tensor_like(b), g.tensor_like(bias)
ALPHA = g.tensor(dim=[1] * 3, stride=[1] * 3, is_pass_by_value=True, data_type=F32)
scaled = g.mul(a=g.matmul(A, B, compute_data_type=F32), b=ALPHA)
Y = g.gelu(input=g.add(a=scaled, b=BIAS))
Y.set_output(True).set_data_type(BF16)
Y.set_dim(list(y.shape))
Y.set_stride(list(y.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
pack = {A: a, B: b, BIAS: bias, ALPHA: torch.full((1, 1, 1), alpha), Y: y}
ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)

cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
g.execute(pack, ws, handle=handle)  # once before the capture
replay = torch.cuda.CUDAGraph()
with torch.cuda.graph(replay):  # in here, the current stream is the capture stream
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    g.execute(pack, ws, handle=handle)  # recorded, not run
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)

outputs = []
for new_inputs in (False, True):  # the inputs of the capture, then new data copied in
    if new_inputs:
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b) / s**0.5)
    y.fill_(float("nan"))
    replay.replay()
    ref = torch.nn.functional.gelu(alpha * (a.float() @ b.float()) + bias.float())
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
    outputs.append((y.clone(), ref))

# %%
# The launchers of this guide's ``BuiltGraph.bind`` (:doc:`API </api/graphs>`), used for
# timing on this site, do the same on every call: they rebind the handle to torch's
# *current* stream if it changed (``bind_to_current_stream``), so they capture
# correctly too.

# %%
# Measuring the host cost of ``execute()``, in fresh processes
# ------------------------------------------------------------
# The lesson's two replays join the page's record as checks first. A host cost is
# timed the one way the site times it,
# :func:`~cudnn_guide.measure.compare.compare_host`: after a synchronize, 400
# back-to-back calls in 5 batches, each batch timed with ``perf_counter`` and divided
# by its calls, in 11 interleaved rounds of shuffled order; the value is the median of
# the rounds. So a host cost here is per call among back-to-back calls, on a tiny
# problem (s = 64) whose GPU work per call is far shorter than the host's: the GPU
# keeps up, and the time per call is the host's.
#
# A host-bound number is one process's draw: on the GPU builder the same launches run
# at one of several host speeds, fresh processes land on any and a process can switch
# (:doc:`the methodology page </methodology>` measures them). So the host cost of
# ``graph.execute`` is measured in five fresh interpreters, one after another
# (:func:`~cudnn_guide.studies.host_levels.loop_and_replay` at s = 64). Each builds and
# checks the graph; times with ``compare_host`` the frontend's raw ``graph.execute``
# (handle already bound) against this package's ``bind`` launcher; then times a loop of
# 100 eager calls, the replay of a CUDA graph holding those 100 calls and the replay of
# a graph holding one call. The processes are grouped into levels
# (:func:`~cudnn_guide.studies.host_levels.levels`: a process more than 1.2× above the
# next lower one starts a new level), each reported on its own. The median of the most
# common level is this site's host cost of ``graph.execute``; the
# :ref:`per-call overhead page <sphx_glr_auto_examples_plot_21_call_overhead.py>`
# measures only what other launch paths add to or save on a plain ``execute``.
#
# In the table every column is per call: host µs per ``graph.execute`` among
# back-to-back calls; the eager loop's wall clock (first launch to the end of a
# synchronize) over its 100 calls; a replay of the 100-call graph over the 100 calls it
# holds (the replay's own launch is amortised over them); a replay of the one-call
# graph, per replay (nothing amortised).
import statistics

import pandas as pd

from cudnn_guide import check
from cudnn_guide.report import html_table
from cudnn_guide.studies import cuda_graph_replay, host_levels

first_check = check.check(*outputs[0], name="first replay")
replay_check = check.check(*outputs[1], name="replay after copying new inputs")

small = 64
per_process = host_levels.in_fresh_processes(
    host_levels.loop_and_replay, small, processes=5
)
host_levels_us = host_levels.levels([r["host_us"] for r in per_process])
main = cuda_graph_replay.most_common_level(host_levels_us)
host_us = main["value"]  # the page's host cost of graph.execute, µs per call
at_main = cuda_graph_replay.at_level(per_process, main)
level_text = cuda_graph_replay.level_text(host_levels_us)
print(f"host cost of graph.execute, by level: {level_text}")
table = cuda_graph_replay.process_rows(per_process)
html_table(pd.DataFrame(table), precision=2)

# %%
# Measuring what this package's launchers add
# -------------------------------------------
# This package's launchers against the raw ``graph.execute``, in this one process, at
# the same size, with the same ``compare_host`` call: the ``bind`` launcher (rebinds the
# handle if torch's stream changed, then calls ``graph.execute``) and
# ``BuiltGraph.execute`` (which also checks the variant pack on every call). Reported is
# a difference, not a host cost: in each round, a launcher's host µs per call minus the
# raw call's, then the median over the 11 rounds with a bootstrap 95% interval. Pairing
# within a round cancels the host's drift between rounds; this process's own host cost
# of ``graph.execute`` is a draw like those above and is not quoted.
from cudnn_guide import graphs
from cudnn_guide.measure import compare

tp, tins, tf, tpack = cuda_graph_replay.matmul_epilogue(small)
raw_graph, tws, th = tf.graph, tf.workspace, tf.handle
graphs.bind_to_current_stream(th)
RAW, LAUNCHER = "raw graph.execute", "cudnn_guide bind() launcher"
variants = {
    RAW: lambda: raw_graph.execute(tpack, tws, handle=th),
    LAUNCHER: tf.bind(tpack),
    "cudnn_guide BuiltGraph.execute (checks pack)": lambda: tf.execute(tpack),
}
host = compare.compare_host(variants, candidate=RAW, rounds=11, calls=400)

adds = {name: host.added(name) for name in variants if name != RAW}
overhead = adds[LAUNCHER]  # µs per call, signed
overhead_text = cuda_graph_replay.overhead_text(overhead)
print(f"launcher over raw graph.execute: {overhead_text}")
table = cuda_graph_replay.added_rows(adds)
html_table(pd.DataFrame(table), {"host µs added per call": "{:+.2f}"})

# %%
# Measuring an eager loop against graph replay, across sizes
# ----------------------------------------------------------
# For each size, in this process, once its output is checked
# (``cuda_graph_replay.sweep``): the GPU time of one call (the harness hides the host
# behind a GPU spin and subtracts the launch cost; where that is over half the event
# time it keeps the raw event time, an upper bound on the kernel, marked "≤" below);
# the per-call time of a loop of 100 eager calls, wall clock to the end of a
# synchronize over the 100 calls (what a loop really costs); and the same for one
# replay of a CUDA graph holding those 100 calls (its own launch amortised over them).
# All hot L2: the point is launch overhead, not memory. At the small sizes these are
# host-bound, so one process's draw: the conclusions quote s = 64 from the fresh
# processes above.
sizes = [small, 128, 256, 512, 1024, 2048, 4096]
rows = cuda_graph_replay.sweep(sizes)

# %%
# Measuring, as a plot
# --------------------
# The horizontal line is the host cost of ``graph.execute`` measured above in fresh
# processes (the most common level).
import matplotlib.pyplot as plt

from cudnn_guide.report import ComparisonTable, plot_lines

title = "per-call time: eager loop vs. replay of a 100-call CUDA graph"
host_line = f"host cost of graph.execute (fresh processes): {host_us:.1f} µs"
axes = dict(x="s", metric="median_us", logx=True, logy=True, title=title)
ax = plot_lines(rows, **axes, ceiling=host_us, ceiling_label=host_line)
ax.set_xlabel("s (problem: s×s @ s×s + epilogue)")
plt.show()

# %%
ComparisonTable(
    rows, row="impl", column="s", metric="median_us", title="per-call time (µs)"
)

# %%
# Conclusions
# -----------
# Computed from the data when the page is recorded.
from cudnn_guide.report.prose import Prose

speedups = sorted(r["speedup"] for r in at_main)  # the most common level's processes
speedup = statistics.median(speedups)
every = sorted(r["speedup"] for r in per_process)  # all processes, every host level
sentences = cuda_graph_replay.conclusions(
    per_process, host_levels_us, rows, sizes, small, overhead_text
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline, keep

headline(
    "host cost of graph.execute (compare_host, s=64)",
    host_us,
    "µs",
    low=main["low"],
    high=main["high"],
    interval=f"min–max of the {main['n']} of {len(per_process)} fresh processes at the "
    "most common host level; per call among back-to-back calls",
    processes_at_level=main["n"],
    processes=len(per_process),
    all_processes_low=min(r["host_us"] for r in per_process),
    all_processes_high=max(r["host_us"] for r in per_process),
)
headline(
    "launcher overhead over raw graph.execute",
    unit="µs/call (signed)",
    **overhead,
    interval="bootstrap 95% CI of the median paired difference",
)
headline(
    f"replay speed-up at s={small}",
    speedup,
    "x",
    low=speedups[0],
    high=speedups[-1],
    kind="replay",
    interval=f"min–max of the {len(at_main)} of {len(per_process)} fresh processes at "
    "the most common host level; per call inside a 100-call graph (the replay's launch "
    "amortised over 100)",
    processes_at_level=len(at_main),
    processes=len(per_process),
    all_processes_low=every[0],
    all_processes_high=every[-1],
)
keep(host_levels=host_levels_us, fresh_processes=per_process)
# sphinx_gallery_end_ignore
Prose(*sentences)
