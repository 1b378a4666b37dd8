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
# :func:`cudnn_guide.studies.dynamic_shapes.run_fresh_sequence` builds the same graph
# for each batch size in order, checks each output against PyTorch (a failed check
# stops the page), and times each build and execution. Each run is a new interpreter
# (:class:`~cudnn_guide.studies.fresh_process.InterpreterPool`), run in the order below;
# each with the CUDA JIT disk cache off (``CUDA_CACHE_DISABLE=1``): no run reuses
# kernels the lesson or an earlier run compiled: run order cannot pose as build order.
from cudnn_guide import check
from cudnn_guide.studies import dynamic_shapes, fresh_process

api_checks = [
    check.check(y, ref, name=f"batch {batch}, kernel cache shared")
    for batch, (y, ref) in outputs.items()
]

batches = [1, 2, 4, 8, 16, 32, 64, 128, 256]
runs = {}
NO_JIT_CACHE = {
    "CUDA_CACHE_DISABLE": "1"
}  # no process reuses another's compiled kernels
with fresh_process.InterpreterPool(
    4, preload=dynamic_shapes.PRELOAD, env=NO_JIT_CACHE
) as pool:
    for name, order, use_cache in (
        ("cache, ascending", batches, True),
        ("no cache, ascending", batches, False),
        ("cache, descending", batches[::-1], True),
        ("no cache, descending", batches[::-1], False),
    ):
        runs[name] = dynamic_shapes.run_fresh_sequence(
            order, kernel_cache=use_cache, label=name, pool=pool
        )
for name, rows in runs.items():
    print(
        f"{name:22s} builds (ms): "
        + " ".join(f"{r['batch']}:{r['build_s'] * 1e3:.0f}" for r in rows)
    )
largest = max(r["rel_error"] for rows in runs.values() for r in rows)
n_graphs = sum(len(r) for r in runs.values())
print(f"all {n_graphs} graphs passed their check (largest rel. error {largest:.1e})")

# %%
# Measuring build time per graph
# ------------------------------
# Left: each run in the order it built its graphs. Right: the same builds arranged by
# batch size. The first graph of every process is slow whatever the cache; the
# question is what happens to the graphs after it.
import matplotlib.pyplot as plt

dynamic_shapes.plot_build_times(runs)
plt.show()

# %%
# Measuring execution: do dynamic-shape kernels cost anything?
# ------------------------------------------------------------
# Median execution time with and without the cache (ascending runs), cold L2.
import statistics

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
table = []
for b in batches:
    row = {"batch": b}
    for order in ("ascending", "descending"):
        c = next(r for r in runs[f"cache, {order}"] if r["batch"] == b)
        n = next(r for r in runs[f"no cache, {order}"] if r["batch"] == b)
        speedup = n["build_s"] / c["build_s"]
        if runs[f"cache, {order}"][0]["batch"] == b:
            mark = "first"
        else:
            mark = "hit" if speedup >= HIT else "miss"
        row[f"{order}: no cache (ms)"] = n["build_s"] * 1e3
        row[f"{order}: cache (ms)"] = c["build_s"] * 1e3
        row[f"{order}: speed-up"] = f"{speedup:.2f}× ({mark})"
    table.append(row)
html_table(pd.DataFrame(table), precision=1)

# %%
# Conclusions
# -----------
# "Later builds" are every build after the first of its process; the build-order effect
# compares only later builds. A later build with the cache is a hit or a miss by the
# rule of the table above (speed-up at or above ``HIT``). Each group is summarised on
# its own: a median over both would fall between them, a speed-up no build showed.
# The four runs had the CUDA JIT disk cache off, so a run's builds cannot borrow
# kernels an earlier run compiled.
from cudnn_guide.measure.verdicts import MIN_TIE_BAND, judge
from cudnn_guide.report.prose import Prose


def later_builds(order):
    """(batch built before, batch, speed-up, ms with the cache) of each later build."""
    cache = runs[f"cache, {order}"]
    none = {r["batch"]: r["build_s"] for r in runs[f"no cache, {order}"][1:]}
    return [
        (prev["batch"], r["batch"], none[r["batch"]] / r["build_s"], r["build_s"] * 1e3)
        for prev, r in zip(cache, cache[1:])
        if r["batch"] in none
    ]


def group(builds, word, note=""):
    """The builds of one group: how many, after which batch, speed-ups and times."""
    r = [x[2] for x in builds]
    ms = [x[3] for x in builds]
    steps = ", ".join(f"{p}→{b}" for p, b, _, _ in builds)
    return (
        f"{len(builds)} {word} ({steps}; batch built before → batch), the cache's "
        f"speed-up {min(r):.2f}× to {max(r):.2f}× ({note}median "
        f"{statistics.median(r):.2f}×; {min(ms):.0f}–{max(ms):.0f} ms to build)"
    )


def no_cache_build(order, b):
    return next(r["build_s"] for r in runs[f"no cache, {order}"] if r["batch"] == b)


exec_ratios = [
    a["exec_median_ms"] / b["exec_median_ms"]
    for a, b in zip(runs["cache, ascending"], runs["no cache, ascending"])
]
exec_ratio = statistics.median(exec_ratios)
exec_lo, exec_hi = min(exec_ratios), max(exec_ratios)
# the same static graphs, timed in the two no-cache runs (two processes): how far
# identical code moved between processes is the tie band of the execution ratio
same_code = [
    a["exec_median_ms"] / b["exec_median_ms"]
    for a in runs["no cache, ascending"]
    for b in runs["no cache, descending"]
    if a["batch"] == b["batch"]
]
exec_band = max([MIN_TIE_BAND, *(abs(r - 1) for r in same_code)])
exec_verdict = judge(exec_lo, exec_hi, exec_band)  # "faster": static is faster
band_note = (
    f"1 ± {100 * exec_band:.1f}%, the most the same static graphs moved between the "
    "two no-cache runs (same code, two processes)."
)
exec_words = {
    "faster": "slower at every batch size: the whole range lies above " + band_note,
    "slower": "faster at every batch size: the whole range lies below " + band_note,
    "tie": "a tie: the range across batch sizes reaches into " + band_note,
}
sentences = []
hits, misses = {}, {}
for order in ("ascending", "descending"):
    builds = later_builds(order)
    hits[order] = [x for x in builds if x[2] >= HIT]
    misses[order] = [x for x in builds if x[2] < HIT]
    groups = [group(hits[order], "hit")] if hits[order] else []
    if misses[order]:
        slower = "below 1: slower with the cache; "
        groups.append(group(misses[order], "missed", slower))
    sentences.append(
        f"* {order}: of {len(builds)} later builds, " + "; ".join(groups) + ". "
        "First builds take "
        f"{runs[f'cache, {order}'][0]['build_s'] * 1e3:.0f} ms with the cache and "
        f"{runs[f'no cache, {order}'][0]['build_s'] * 1e3:.0f} ms without."
    )
hit_r = [x[2] for o in hits for x in hits[o]]
miss_r = [x[2] for o in misses for x in misses[o]]
if hit_r and miss_r:
    sentences.append(
        f"* No later build's speed-up fell between {max(miss_r):.2f}× (the largest "
        f"miss) and {min(hit_r):.2f}× (the smallest hit): the groups are "
        f"{min(hit_r) / max(miss_r):.0f}× apart, so this page's {HIT}× threshold, or "
        "any other between them, splits the builds the same way."
    )
firsts = {runs[f"no cache, {o}"][0]["batch"] for o in ("ascending", "descending")}
order_effect = {
    b: no_cache_build("descending", b) / no_cache_build("ascending", b)
    for b in batches
    if b not in firsts
}
worst = max(order_effect, key=lambda b: max(order_effect[b], 1 / order_effect[b]))
ratio_o = max(order_effect[worst], 1 / order_effect[worst])


SAME = 2  # two changes within this factor of each other: "about as much as"


def weigh(x, y):
    """How a change of x× compares with one of y× (a factor of SAME either way)."""
    if x > SAME * y:
        return "more than"
    return "less than" if SAME * x < y else "about as much as"


direction = "slower" if order_effect[worst] > 1 else "faster"
against = []
if hit_r:
    hit_gain = statistics.median(hit_r)
    against.append(
        f"{weigh(ratio_o, hit_gain)} the speed-up of a hit (median {hit_gain:.1f}×)"
    )
if miss_r:
    miss_change = max(max(r, 1 / r) for r in miss_r)  # the largest change either way
    against.append(
        f"{weigh(ratio_o, miss_change)} the largest change a miss made, either way "
        f"({miss_change:.1f}×)"
    )
sentences += [
    f"* Without the cache, build order changes batch {worst}'s build time "
    f"{ratio_o:.1f}× ({direction} in the descending run than in the ascending one; a "
    f"later build in both, the largest such change over the {len(order_effect)} "
    "batches that come first in neither order)"
    + (": " + ", and ".join(against) if against else "")
    + (
        f" (about as much as: within a factor of {SAME} either way; more or less "
        "than: beyond it)."
        if against
        else "."
    ),
    f"* Execution with dynamic-shape kernels takes {exec_ratio:.2f}× the time of the "
    f"static ones (median over the {len(exec_ratios)} batch sizes; in-run range "
    f"{exec_lo:.2f}× to {exec_hi:.2f}× across them): {exec_words[exec_verdict]}",
]

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline

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
    ratio_o,
    "x",
    batch=worst,
    kind="cache",
    excludes="the first build of each process",
)
headline(
    "dynamic / static execution time",
    exec_ratio,
    "x",
    low=min(exec_ratios),
    high=max(exec_ratios),
    interval="min–max across batch sizes",
)
# sphinx_gallery_end_ignore
Prose(*sentences)
