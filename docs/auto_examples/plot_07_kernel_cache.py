"""
Dynamic shapes with a kernel cache
==================================

A serving process sees many batch sizes. Without help, each new shape is a new graph
with its own build — heuristics, and for runtime-fused kernels, compilation.
``cudnn.create_kernel_cache()`` lets graphs that differ only in shape share compiled
kernels: build the graphs with ``kernel_cache=cache`` and
``is_dynamic_shape_enabled=True``.

Build times are easy to fool yourself with: the first graph of any process pays for
loading cuDNN's libraries, so "the second build was faster" proves nothing. This page
builds the same sequence of batch sizes four ways, **each in a fresh process**: with
and without the cache, in ascending and descending order. The cache's own effect is
the difference between matching runs.

What you will learn:

* how to share a kernel cache across graphs of different batch sizes;
* how to separate the cache's effect from first-build and order effects with controls;
* whether dynamic-shape kernels cost anything at execution time.

Graph: batch × 512×1024 @ 1024×512 → scale → bias → GELU, bf16, batch 1 to 256.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

env = environment.collect()
env

# %%
# The lesson: two batch sizes, one kernel cache
# ---------------------------------------------
# ``cudnn.create_kernel_cache()`` makes a cache; graphs built with ``kernel_cache=``
# and ``is_dynamic_shape_enabled=True`` share it: a graph that differs from one built
# before only in its tensor shapes may reuse that graph's kernels. Here the
# matmul-epilogue graph ``gelu(alpha · (a @ b) + bias)`` is built at batch 64, then
# 128, on one cache, and each is checked against PyTorch. Whether the second build
# reused the first's kernels shows in its build time (a reuse skips the compilation);
# the lesson prints both. They come from this page's warm process, where a first build
# also pays for what the process loads; the fresh-process runs after them are the
# measurement, and say which batch sizes reuse kernels.
import time

import cudnn
import torch

m, k, n, alpha = 512, 1024, 512, 0.5  # each batch: (m×k) @ (k×n), bf16, row-major
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
F32 = cudnn.data_type.FLOAT
kernel_cache = cudnn.create_kernel_cache()


def epilogue_graph(a, b, bias, y):
    """Declare and build the graph on the shared kernel cache; return it, its pack."""
    g = cudnn.pygraph(
        handle=handle,
        kernel_cache=kernel_cache,
        is_dynamic_shape_enabled=True,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    A = g.tensor_like(a)
    B = g.tensor_like(b)
    BIAS = g.tensor_like(bias)
    ALPHA = g.tensor(dim=[1] * 3, stride=[1] * 3, is_pass_by_value=True, data_type=F32)
    scaled = g.mul(a=g.matmul(A, B, compute_data_type=F32), b=ALPHA)
    Y = g.gelu(input=g.add(a=scaled, b=BIAS))
    Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    Y.set_dim(list(y.shape)).set_stride(list(y.stride()))
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, {A: a, B: b, BIAS: bias, ALPHA: torch.full((1, 1, 1), alpha), Y: y}


outputs, build_ms = {}, {}
for batch in (64, 128):
    a = torch.randn(batch, m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(batch, k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
    bias = torch.randn(1, 1, n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(batch, m, n, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    g, pack = epilogue_graph(a, b, bias, y)
    build_ms[batch] = (time.perf_counter() - t0) * 1e3
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute(pack, ws, handle=handle)
    ref = torch.nn.functional.gelu(alpha * (a.float() @ b.float()) + bias.float())
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
    outputs[batch] = (y, ref)
    print(f"batch {batch}: built in {build_ms[batch]:.0f} ms, checked against PyTorch")
ratio = build_ms[128] / build_ms[64]  # below 1: the second build was faster
faster = "faster" if ratio < 1 else "not faster"
print(f"build time, batch 128 / batch 64: {ratio:.2f}× (the second build was {faster})")

# %%
# Measuring build times in four fresh processes
# ---------------------------------------------
# First the lesson's two outputs join the page's record as checks (relative L2 error).
# Then ``kernel_cache_builds.fresh_runs`` makes four runs, in this order: with the
# cache, ascending; without, ascending; with, descending; without, descending. Each is
# :func:`cudnn_guide.studies.dynamic_shapes.run_fresh_sequence`: it builds the same
# graph for each batch size in order, checks each output against PyTorch (a failed
# check stops the page), and times each build and execution. Each run is a new
# interpreter (:class:`~cudnn_guide.studies.fresh_process.InterpreterPool`) with the
# CUDA JIT disk cache off (``CUDA_CACHE_DISABLE=1``): no run reuses kernels the lesson
# or an earlier run compiled: run order cannot pose as build order. Recorded in lanes,
# each order's two runs start together, each on half of the page's cores
# (``CUDNN_GUIDE_POOL_AT_ONCE``); a line below says so when they did.
from cudnn_guide import check
from cudnn_guide.studies import kernel_cache_builds

api_checks = [
    check.check(y, ref, name=f"batch {batch}, kernel cache shared")
    for batch, (y, ref) in outputs.items()
]

batches = [1, 2, 4, 8, 16, 32, 64, 128, 256]
runs = kernel_cache_builds.fresh_runs(batches)
print("\n".join(kernel_cache_builds.build_lines(runs)))

# %%
# Measuring build time per graph
# ------------------------------
# Left: each run in the order it built its graphs. Right: the same builds arranged by
# batch size. The first graph of every process is slow whatever the cache; the
# question is what happens to the graphs after it.
import matplotlib.pyplot as plt

from cudnn_guide.studies import dynamic_shapes

dynamic_shapes.plot_build_times(runs)
plt.show()

# %%
# Measuring execution: do dynamic-shape kernels cost anything?
# ------------------------------------------------------------
# Median execution time, cold L2, ascending runs; the cache's graphs are dynamic-shape.
from cudnn_guide.report import ComparisonTable

rows = [
    r["measurement"]
    for name in ("cache, ascending", "no cache, ascending")
    for r in runs[name]
]
ComparisonTable(
    rows, row="impl", column="batch", metric="median_us", title="execution time (µs)"
)

# %%
# Measuring the speed-up, batch by batch
# --------------------------------------
# One median would hide the shape of these data: later builds fall into a fast group
# and a slow group, and which group a graph lands in depends on the batch and on what
# was built before it. So the table gives every batch's build times and the cache's
# speed-up for that batch, in both orders. The first build of each process is marked
# (first): it pays for everything the process loads. Every later build is marked a
# **hit** when the cache made it at least ``HIT`` times faster than the same build
# without the cache, and a **miss** otherwise: a hit reuses compiled kernels, a miss
# builds much as it would without the cache. The threshold only has to fall between
# the two groups; the conclusions give how far apart they are.
import pandas as pd

from cudnn_guide.report import html_table

HIT = 10  # a later build's speed-up from the cache at or above this: a hit
table = kernel_cache_builds.speedup_rows(runs, batches, hit=HIT)
html_table(pd.DataFrame(table), precision=1)

# %%
# Conclusions
# -----------
# "Later builds" are every build after the first of its process; the build-order effect
# compares only later builds. A later build with the cache is a hit or a miss by the
# rule of the table above (speed-up at or above ``HIT``). Each group is summarised on
# its own: a median over both would fall between them, a speed-up no build showed.
# The four runs had the CUDA JIT disk cache off, so a run's builds cannot borrow
# kernels an earlier run compiled. Execution with and without the cache is judged
# against a tie band of how far the same static graphs moved between the two no-cache
# runs (``kernel_cache_builds.findings``).
import statistics

from cudnn_guide.report.prose import Prose

found = kernel_cache_builds.findings(runs, batches, hit=HIT)
sentences = kernel_cache_builds.conclusions(runs, found)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline

hits, misses = found.hits, found.misses
for order in ("ascending", "descending"):
    headline(
        f"later builds that hit the kernel cache, {order}",
        len(hits[order]),
        "count",
        of_later_builds=len(hits[order]) + len(misses[order]),
        kind="cache",
        rule=f"a hit: the cache's speed-up of the build is at least {HIT}x",
        hit_steps=", ".join(f"{p}->{b}" for p, b, _, _ in hits[order]),
    )
    for word, builds in (("a hit", hits[order]), ("a miss", misses[order])):
        if builds:
            r = [x[2] for x in builds]
            headline(
                f"later-build speed-up from the kernel cache on {word}, {order}",
                statistics.median(r),
                "x",
                low=min(r),
                high=max(r),
                kind="cache",
                interval=f"min–max across the {len(r)} later builds that were {word}",
            )
headline(
    "build-order effect on one graph's build time, no cache",
    found.order_ratio,
    "x",
    batch=found.worst,
    kind="cache",
    excludes="the first build of each process",
)
headline(
    "dynamic / static execution time",
    found.exec_ratio,
    "x",
    low=min(found.exec_ratios),
    high=max(found.exec_ratios),
    interval="min–max across batch sizes",
)
# sphinx_gallery_end_ignore
Prose(*sentences)
