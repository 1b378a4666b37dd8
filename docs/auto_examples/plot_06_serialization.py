"""
Plan serialization and a persistent plan cache
==============================================

Building a cuDNN graph queries heuristics and may compile kernels: a cost paid in
every new process, at the worst moment: start-up. ``serialize()`` turns a built plan
into bytes and ``deserialize(handle, bytes)`` turns them back into an executable
graph, skipping the build. This page builds a fused convolution, saves its plan,
reloads it into an empty graph and runs it; then it measures what the saved plan buys
a new process.

The gain is easy to mismeasure. Inside one warm process cuDNN has loaded its kernels
and caches what it can, so rebuild against reload is not what a new process sees: it
can hide the gain or overstate it (the conclusions say which, for this page's conv
graph). What matters is a **fresh process**: the time to first result, with and without
a plan on disk, without and with the CUDA context and cuDNN handle creation before it,
for three graphs: ``conv`` (this page's), ``sdpa`` (causal attention) and ``matmul``
(:ref:`matmul-epilogue page <sphx_glr_auto_examples_plot_04_matmul_epilogue.py>`).

What you will learn:

* how to serialize a built graph, reload it into an empty graph, and execute it **by
  UID**;
* why in-process timing misstates the gain, and how fresh processes measure it;
* what makes a saved plan invalid (another GPU architecture or cuDNN), and how this
  guide's ``PlanCache`` (:doc:`API </api/graphs>`) keys, checks and rebuilds entries.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

env = environment.collect()
env

# %%
# The lesson: build, serialize, reload, execute by UID
# ----------------------------------------------------
# The graph is ``relu(conv(x, w) + b)`` in bf16, channels-last. ``serialize`` turns the
# built graph (its operations and its selected plan) into bytes; ``deserialize`` makes a
# graph of them on a handle, here or in another process, without the heuristics or the
# build. A deserialized graph has no tensor objects: its variant pack maps the UIDs the
# original graph's tensors had (``get_uid()``) to torch tensors.
import cudnn
import torch

n, c, h, w, k = 32, 128, 56, 56, 256  # NCHW dims; memory is channels-last (NHWC)
# (weights scaled by 1/34 ≈ 1/sqrt(c·3·3): outputs of order one)
bf16, nhwc = torch.bfloat16, torch.channels_last
x = torch.randn(n, c, h, w, device="cuda", dtype=bf16).to(memory_format=nhwc)
wt = (torch.randn(k, c, 3, 3, device="cuda", dtype=bf16) / 34).to(memory_format=nhwc)
b = torch.randn(1, k, 1, 1, device="cuda", dtype=bf16).to(memory_format=nhwc)
y = torch.empty(n, k, h, w, device="cuda", dtype=bf16).to(memory_format=nhwc)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)


def build_conv():
    """Declare and build the graph; return it and its variant pack."""
    g = cudnn.pygraph(
        handle=handle,
        name="conv_bias_relu",
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    X = g.tensor_like(x, name="x")
    W = g.tensor_like(wt, name="w")
    B = g.tensor_like(b, name="b")
    # a 3×3 "same" convolution; it computes in fp32, the graph's compute_data_type
    conv = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    Y = g.relu(input=g.bias(input=conv, bias=B))
    Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    Y.set_dim(list(y.shape)).set_stride(list(y.stride()))
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, {X: x, W: wt, B: b, Y: y}


g, pack = build_conv()
blob = bytes(g.serialize(as_bytes=True))
by_uid = {int(t.get_uid()): data for t, data in pack.items()}
ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
g.execute(pack, ws, handle=handle)
original = y.clone()

# an empty graph made from the bytes: no declaration, no heuristics, no build
loaded = cudnn.pygraph(handle=handle)
loaded.deserialize(handle, blob)
y.fill_(float("nan"))  # so that a graph that wrote nothing cannot pass
ws = torch.empty(max(loaded.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
loaded.execute(by_uid, ws, handle=handle)

torch.backends.cudnn.allow_tf32 = False  # an fp32 reference, not TF32
ref = torch.conv2d(x.float(), wt.float(), b.float().flatten(), padding=1).relu()
torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
print(f"serialized plan: {len(blob) / 1024:.1f} KiB; UIDs {sorted(by_uid)}")
print(f"bit-identical to the original graph: {torch.equal(y, original)}")

# %%
# Measuring the gain inside one warm process
# -------------------------------------------
# First the reloaded output joins the page's record as a check (the same reference as
# above, by relative L2 error). Then rebuild the same graph five times and reload it
# five times, in this process, alternately
# (``plan_serialization.warm_process_times``).
import statistics

from cudnn_guide import check
from cudnn_guide.studies import plan_serialization

reload_check = check.check(y, ref, name="reloaded plan")
print(reload_check)
rebuild_s, reload_s = plan_serialization.warm_process_times(
    build_conv,  # the lesson's declaration and build
    lambda: cudnn.pygraph(handle=handle).deserialize(handle, blob),  # its reload
    reps=5,
)
print(
    f"warm process, medians of 5: rebuild {statistics.median(rebuild_s) * 1e3:.1f} ms,"
    f" reload {statistics.median(reload_s) * 1e3:.1f} ms"
)

# %%
# Measuring fresh processes: time to first result, with the JIT cache under control
# ---------------------------------------------------------------------------------
# :func:`cudnn_guide.studies.coldstart.run_fresh` runs each measurement in a new
# process that creates the CUDA context and cuDNN handle, then either **builds** the
# graph or **loads** it from a :class:`~cudnn_guide.graphs.plan_cache.PlanCache` on
# disk, executes it once and synchronizes. It reports the plan step and the time to
# first result (both from the end of context creation), the context and handle
# creation itself (``context_s``), and checks the result against PyTorch.
#
# The CUDA driver keeps a disk cache of the kernels it compiled
# (``~/.nv/ComputeCache``), so a "cold" build on a machine that ran the graph before
# is not cold. Each process here gets its cache folder through ``CUDA_CACHE_PATH``,
# set before CUDA starts, in four cases, three runs each
# (``plan_serialization.fresh_first_results``):
#
# * **cold**: a new, empty JIT cache, and a build (a first deployment on a fresh
#   machine);
# * **warm JIT**: a build, with the JIT cache that the first cold build filled (a
#   restart);
# * **plan from disk**: a deserialized plan, with that warm JIT cache (a restart with a
#   plan cache);
# * **plan from disk, cold JIT**: a deserialized plan, with a new, empty JIT cache (a
#   first deployment on a fresh machine that ships the saved plan).
#
# So each way of getting a plan, built or loaded, is timed with a cold and with a warm
# JIT cache, and the saved plan can be compared with a build like for like.
#
# Each is a new Python interpreter. They are all started at once, before the first run
# (:class:`~cudnn_guide.studies.fresh_process.InterpreterPool`): each imports torch and
# this package, then waits for its turn, so none spends seconds importing while the page
# waits, and none imports while another measures. A control (:doc:`measurement studies
# </maintainers/measurement_studies>`) compares them with ones started on demand.
# Recorded in lanes, they run in consecutive pairs, each on half of the page's cores
# (``CUDNN_GUIDE_POOL_AT_ONCE``), never beside the build whose cache they read; the
# printed line says how they ran.
import pandas as pd

from cudnn_guide.report import html_table
from cudnn_guide.studies import coldstart
from cudnn_guide.studies.plan_serialization import COLD_LOAD

fresh = plan_serialization.fresh_first_results(coldstart.GRAPHS, reps=3)
table = plan_serialization.first_result_rows(fresh)  # each run checked against PyTorch
html_table(pd.DataFrame(table), precision=1)

# %%
# Measuring, as a plot
# --------------------
import matplotlib.pyplot as plt

coldstart.plot_first_results(
    fresh, title="built or loaded from disk, each with a cold or a warm JIT cache"
)
plt.show()

# %%
# Measuring what makes a saved plan invalid
# -----------------------------------------
# A serialized plan names engine configurations and may embed compiled kernels for one
# GPU architecture under one cuDNN version. Loading it under another is at best
# rejected by cuDNN, at worst undefined, so the cache never lets cuDNN decide. Each
# entry's header holds its key (graph description, GPU name, SM version, cuDNN backend
# version, frontend version) and a SHA-256 of the plan bytes; a mismatch is found
# *before* deserialization and the entry is rebuilt.
import tempfile

from cudnn_guide.graphs import conv, plan_cache

problem = conv.ConvProblem()  # the lesson's shapes: N32 C128 56×56 → K256, 3×3
inputs = problem.make_inputs(seed=0)
plans_dir = tempfile.TemporaryDirectory(prefix="cudnn-guide-plans-")
cache = plan_cache.PlanCache(plans_dir.name)
key = plan_cache.current_key(f"conv_bias_relu_graph|{problem!r}")
build = lambda: conv.conv_bias_relu_graph(problem, inputs)  # noqa: E731


def lookup(when):
    _, source = cache.get_or_build(key, build)
    print(f"{when}: {cache.last_event} → {source}")


lookup("first lookup")
lookup("second lookup")
plan_serialization.corrupt_one_byte(cache.path(key), -100)  # one byte of the plan
lookup("after corrupting one byte")
plan_serialization.as_if_from_backend(cache.path(key), 90100)  # as if by cuDNN 9.1
lookup("an entry written by another cuDNN")
lookup("after the rebuild")
plans_dir.cleanup()

# %%
# Conclusions
# -----------
# Computed from the fresh-process runs above. "Time to first result" starts after the
# CUDA context and cuDNN handle exist; each ratio is given without and with them
# (``context_s``, added to each run). A saved plan is compared with a build like for
# like: both with a cold JIT cache (a fresh machine), or both with a warm one (a
# restart). A third ratio, a restart's load against a fresh machine's build, credits
# the plan with the warm JIT cache's gain as well, and says so. Each ratio comes with
# its min–max over the runs (slowest build over fastest load, and the reverse): above
# 1 at both ends, loading won in every pairing of processes; below 1 at both, it lost; a
# range that spans 1 is a tie at this number of runs.
from cudnn_guide.report.prose import Prose

# (graph, build case) → (speed-up, min, max) of a load with a warm, or a cold, JIT cache
speedups = coldstart.first_result_speedups(fresh)
cold_speedups = coldstart.first_result_speedups(fresh, cached=COLD_LOAD)
sentences = plan_serialization.conclusions(
    fresh, speedups, cold_speedups, rebuild_s, reload_s
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline, keep

for g in coldstart.GRAPHS:
    plan = f"{g}: first-result speed-up from a cached plan"
    for name, (ratio, low, high), case in (
        (
            f"{plan}, against a cold build, cold JIT cache on both",
            cold_speedups[(g, "cold")],
            "cold",
        ),
        (f"{plan}, against a warm JIT build", speedups[(g, "warm JIT")], "warm JIT"),
        (
            f"{plan} and a warm JIT cache, against a cold build",
            speedups[(g, "cold")],
            "cold",
        ),
    ):
        headline(
            name,
            ratio,
            "x",
            low=low,
            high=high,
            baseline=f"{case} build in a fresh process",
            kind="cache",
            interval="min–max of the runs",
        )
keep(fresh_runs={f"{g}/{c}": runs for (g, c), runs in fresh.items()})
# sphinx_gallery_end_ignore
Prose(*sentences)
