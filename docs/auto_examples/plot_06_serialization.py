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
graph). What matters is a **fresh process**: the time to first result, with and
without a plan on disk, shown both without and with the CUDA context and cuDNN handle
creation that precede it. This page measures both, for a matmul, the conv layer and
attention.

What you will learn:

* how to serialize a built graph, reload it into an empty graph, and execute it **by
  UID**;
* why in-process timing misstates the gain, and how fresh processes measure it;
* what makes a saved plan invalid (another GPU architecture, another cuDNN), and how
  this guide's ``PlanCache`` (its API reference) keys, checks and rebuilds entries.
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
# First the reloaded output joins the page's record as a check (the same comparison as
# above, by relative L2 error). Then rebuild the same graph five times and reload it
# five times, in this process.
import statistics
import time

from cudnn_guide import check

reload_check = check.check(y, ref, name="reloaded plan")
print(reload_check)
rebuild_s, reload_s = [], []
for _ in range(5):
    t0 = time.perf_counter()
    build_conv()
    rebuild_s.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    cudnn.pygraph(handle=handle).deserialize(handle, blob)  # as the lesson reloads
    reload_s.append(time.perf_counter() - t0)
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
# set before CUDA starts, in three cases:
#
# * **cold**: a new, empty JIT cache, and a build (a first deployment on a fresh
#   machine);
# * **warm JIT**: a build, with the JIT cache that the first cold build filled (a
#   restart);
# * **plan from disk**: a deserialized plan, with that warm JIT cache (a restart with a
#   plan cache).
#
# Each is a new Python interpreter. They are all started at once, before the first run
# (:class:`~cudnn_guide.studies.fresh_process.InterpreterPool`): each imports torch and
# this package, then waits for its turn, so none spends seconds importing while the page
# waits, and none imports while another measures. The methodology page's control
# compares such interpreters with ones started on demand.
import tempfile

import pandas as pd

from cudnn_guide.report import html_table
from cudnn_guide.studies import coldstart, fresh_process

CASES = ("cold", "warm JIT", "plan from disk")
work = tempfile.TemporaryDirectory(prefix="cudnn-guide-")  # removed at the cell's end
cache_dir = tempfile.mkdtemp(prefix="plans-", dir=work.name)
REPS = 3
fresh = {}
RUNS = len(coldstart.GRAPHS) * len(CASES) * REPS


def run(graph, mode, jit, pool):
    return coldstart.run_fresh(graph, mode, cache_dir, jit_cache=jit, pool=pool)


with fresh_process.InterpreterPool(RUNS, preload=coldstart.PRELOAD) as pool:
    for graph in coldstart.GRAPHS:
        # the first cold build fills warm_jit; each build stores its plan in the cache
        jits = [tempfile.mkdtemp(prefix="jit-", dir=work.name) for _ in range(REPS)]
        warm_jit = jits[0]
        fresh[(graph, "cold")] = [run(graph, "build", jit, pool) for jit in jits]
        fresh[(graph, "warm JIT")] = [
            run(graph, "build", warm_jit, pool) for _ in range(REPS)
        ]
        fresh[(graph, "plan from disk")] = [
            run(graph, "cache", warm_jit, pool) for _ in range(REPS)
        ]
    print(
        f"{RUNS} interpreters, started together, were ready in "
        f"{pool.start_seconds:.1f} s"
    )
work.cleanup()  # the plan cache and JIT caches of the fresh processes
table = []
for graph in coldstart.GRAPHS:
    for case in CASES:
        runs = fresh[(graph, case)]
        worst = max(r["rel_error"] for r in runs)
        assert worst < check.tolerance(torch.bfloat16), f"{graph} {case}: {worst}"
        first_ms = [r["first_result_s"] * 1e3 for r in runs]
        table.append(
            {
                "graph": graph,
                "case": case,
                "plan (ms)": statistics.median(r["plan_s"] for r in runs) * 1e3,
                "first result (ms)": statistics.median(first_ms),
                "min–max (ms)": f"{min(first_ms):.1f}–{max(first_ms):.1f}",
                "context + handle (ms)": statistics.median(r["context_s"] for r in runs)
                * 1e3,
                "max rel. error": f"{worst:.1e}",
            }
        )
html_table(pd.DataFrame(table), precision=1)

# %%
# Measuring, as a plot
# --------------------
import matplotlib.pyplot as plt

coldstart.plot_first_results(
    fresh, title="cold JIT cache, warm JIT cache, plan reloaded from disk"
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
import json

from cudnn_guide.graphs import conv, plan_cache

problem = conv.ConvProblem()  # the lesson's shapes: N32 C128 56×56 → K256, 3×3
inputs = problem.make_inputs(seed=0)
plans_dir = tempfile.TemporaryDirectory(prefix="cudnn-guide-plans-")
cache = plan_cache.PlanCache(plans_dir.name)
key = plan_cache.current_key(f"conv_bias_relu_graph|{problem!r}")
build = lambda: conv.conv_bias_relu_graph(problem, inputs)  # noqa: E731
_, source = cache.get_or_build(key, build)
print(f"first lookup: {cache.last_event} → {source}")
_, source = cache.get_or_build(key, build)
print(f"second lookup: {cache.last_event} → {source}")

path = cache.path(key)
raw = bytearray(path.read_bytes())
raw[-100] ^= 0xFF  # one flipped byte in the plan
path.write_bytes(bytes(raw))
_, source = cache.get_or_build(key, build)
print(f"after corrupting one byte: {cache.last_event} → {source}")

head, _, body = path.read_bytes().partition(b"\n")
header = json.loads(head)
header["key"]["cudnn_backend"] = 90100  # as if written by cuDNN 9.1
path.write_bytes(json.dumps(header).encode() + b"\n" + body)
_, source = cache.get_or_build(key, build)
print(f"an entry written by another cuDNN: {cache.last_event} → {source}")
_, source = cache.get_or_build(key, build)
print(f"after the rebuild: {cache.last_event} → {source}")
plans_dir.cleanup()

# %%
# Conclusions
# -----------
# Computed from the fresh-process runs above. "Time to first result" starts after the
# CUDA context and cuDNN handle exist; each ratio is given without and with them
# (``context_s``, added to each run). Every plan-from-disk run has the warm JIT cache:
# a plan shipped to a fresh machine and loaded with a cold one is not measured here.
from cudnn_guide.report.prose import Prose

first = {
    (g, c): statistics.median(r["first_result_s"] for r in fresh[(g, c)])
    for g in coldstart.GRAPHS
    for c in CASES
}
ctx = {
    (g, c): statistics.median(r["context_s"] for r in fresh[(g, c)])
    for g in coldstart.GRAPHS
    for c in CASES
}
speedups = coldstart.first_result_speedups(fresh)  # (graph, case) → speed-up, min–max


def with_context(graph, case):
    """The plan cache's speed-up counting context and handle creation too."""
    build = [r["context_s"] + r["first_result_s"] for r in fresh[(graph, case)]]
    load = [
        r["context_s"] + r["first_result_s"] for r in fresh[(graph, "plan from disk")]
    ]
    return (
        statistics.median(build) / statistics.median(load),
        min(build) / max(load),
        max(build) / min(load),
    )


sentences = []
for g in coldstart.GRAPHS:
    (cold, c_lo, c_hi), (warm, w_lo, w_hi) = (
        speedups[(g, "cold")],
        speedups[(g, "warm JIT")],
    )
    cold_c, cc_lo, cc_hi = with_context(g, "cold")
    warm_c, wc_lo, wc_hi = with_context(g, "warm JIT")
    sentences.append(
        f"* {g}: first result {first[(g, 'cold')] * 1e3:.1f} ms cold, "
        f"{first[(g, 'warm JIT')] * 1e3:.1f} ms with a warm JIT cache, "
        f"{first[(g, 'plan from disk')] * 1e3:.1f} ms from a plan on disk, each after "
        f"{ctx[(g, 'plan from disk')] * 1e3:.0f} ms of context and handle creation "
        "(median, plan-from-disk runs). The plan cache's speed-up without context "
        f"and handle is {cold:.2f}× (min–max of the runs {c_lo:.2f}–{c_hi:.2f}×) on a "
        f"fresh machine and {warm:.2f}× ({w_lo:.2f}–{w_hi:.2f}×) on a restart whose "
        f"JIT cache is warm; with context and handle it is {cold_c:.2f}× "
        f"({cc_lo:.2f}–{cc_hi:.2f}×) and {warm_c:.2f}× ({wc_lo:.2f}–{wc_hi:.2f}×) "
        "(below 1: loading is slower than building)."
    )
gains = [g for g in coldstart.GRAPHS if speedups[(g, "warm JIT")][0] >= 10]
flat = [g for g in coldstart.GRAPHS if speedups[(g, "warm JIT")][0] < 2]
if gains:
    sentences.append(
        f"* For {', '.join(gains)}, even with a warm JIT cache the build is dominated "
        "by work the cached plan skips (heuristics, and building runtime-fused "
        "kernels)."
    )
for g in flat:
    jit = first[(g, "cold")] / first[(g, "warm JIT")]
    effect = (
        f"makes the first result {jit:.2f}× slower"
        if jit >= 1
        else f"did not slow the first result, cold taking {jit:.2f}× the time"
    )
    sentences.append(
        f"* For {g}, with a warm JIT cache the build has little left to skip: a plan "
        "cache barely helps a restart. On a fresh machine the cold JIT cache alone "
        f"{effect} (cold against warm JIT, both building; medians of the runs)."
    )
in_process = statistics.median(rebuild_s) / statistics.median(reload_s)
fresh_conv = first[("conv", "warm JIT")] / first[("conv", "plan from disk")]
word = "understates" if in_process < fresh_conv else "overstates"
sentences += [
    "* Inside one warm process the conv graph rebuilds in "
    f"{statistics.median(rebuild_s) * 1e3:.1f} ms and reloads in "
    f"{statistics.median(reload_s) * 1e3:.1f} ms ({in_process:.1f}×); in fresh "
    "processes with a warm JIT cache the ratio of first results is "
    f"{fresh_conv:.1f}×: in-process timing {word} the gain for this graph.",
    "* A new interpreter also pays Python's and torch's imports (seconds; see the "
    "methodology page's control), which no plan cache removes.",
]

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline, keep

for (g, case), (ratio, low, high) in speedups.items():
    headline(
        f"{g}: first-result speed-up from a cached plan, against a {case} build",
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
