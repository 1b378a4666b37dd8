"""
Environment, libcudnn and this GPU's ceilings
=============================================

Before any graph: what is this machine, where does cuDNN come from, and how fast can
this GPU move bytes and multiply matrices at best? Later pages give their results as a
share of the two ceilings measured here; their floors use the datasheet peaks.

What you will learn:

* how cuDNN Frontend finds ``libcudnn`` (it does not ship it), how to see what it
  loaded, and how to fix a missing library;
* what goes into the environment record printed on every page;
* how to measure the two roofline ceilings — device-copy bandwidth and bf16 matmul
  throughput — and why the L2 cache must be flushed to measure bandwidth honestly.
"""

# %%
# Where libcudnn comes from
# -------------------------
# ``import cudnn`` loads the frontend's bindings only. At import it looks for
# ``libcudnn.so.9`` in ``LD_LIBRARY_PATH``, then in site-packages (``nvidia/cudnn/lib``,
# installed by the ``nvidia-cudnn-cu12``/``-cu13`` wheel that a CUDA build of PyTorch
# depends on), then through the system loader. The import succeeds even if nothing is
# found; the first backend call then fails. :func:`cudnn_guide.libcudnn.find_libcudnn`
# retraces that search:
from cudnn_guide import environment, libcudnn

print(libcudnn.find_libcudnn().explain())

# %%
# and :func:`~cudnn_guide.libcudnn.require_cudnn` makes the first backend call. Had it
# failed, it would have raised :class:`~cudnn_guide.errors.CudnnLibraryError` listing
# the places above and the fix (install the cuDNN wheel matching your CUDA major
# version, or point ``LD_LIBRARY_PATH`` at ``libcudnn.so.9``). The library actually
# mapped into this process:
backend = libcudnn.require_cudnn()
print(f"cuDNN backend {backend} loaded from {libcudnn.loaded_libcudnn()}")

# %%
# The environment record
# ----------------------
# This is what every page of the gallery prints first and stores in its JSON record.
env = environment.collect()
env

# %%
# Copy bandwidth: the memory ceiling
# ----------------------------------
# A device-to-device copy reads and writes every byte once, so ``2 × size / time`` is
# the bandwidth a memory-bound kernel can hope for. Small copies fit in the L2 cache:
# timed back-to-back with a **hot** L2 they report the cache's bandwidth, not HBM's.
# With a **cold** L2 (a buffer of twice the L2 size written before every call, outside
# the timed region) they report what a kernel reading fresh data sees. The sweep shows
# both, timed the **same way**: one call between two CUDA events, raw event times (the
# launch cost is not subtracted from either row: at 1-4 MiB it is most of the event, so
# those rows show launch cost more than bandwidth, for hot and cold alike).
import torch

sizes_mib = [1, 4, 16, 64, 256, 1024, 4096]
buffers = {}


def copy_of(size_mib):
    n = size_mib * 2**20 // 4
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    buffers[size_mib] = (src, dst)
    return lambda: dst.copy_(src)


# %%
# Check first: a timed copy must actually copy.
from cudnn_guide import check

copy_check = check.check(copy_of(64)(), buffers[64][0], name="device copy")
print(copy_check)
buffers.clear()

# %%
from cudnn_guide.measure import sweep

copy_results = {}
for l2 in ("hot", "cold"):
    copy_results[l2] = sweep.sweep(
        sizes_mib,
        {f"copy, {l2} L2": copy_of},
        x="size_mib",
        l2=l2,
        bytes=lambda s: 2 * s * 2**20,
        budget_ms=150,
        subtract_launch_cost=False,
    )
    buffers.clear()
copy_measurements = copy_results["hot"].measurements + copy_results["cold"].measurements

# %%
# bf16 matmul: the compute ceiling
# --------------------------------
# cuBLAS through ``torch.matmul`` on random bf16 square matrices (random, not zeros:
# zeros run faster and would inflate the ceiling), cold L2.
matrices = {}


def matmul_of(n):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    matrices[n] = (a, b, c)
    return lambda: torch.matmul(a, b, out=c)


# The matmul we time must compute the product: checked against an fp32 reference, TF32
# off.
matmul_of(2048)()
a, b, c = matrices.pop(2048)
matmul_check = check.check(
    c, check.reference(torch.matmul, a, b), name="bf16 matmul (cuBLAS)"
)
print(matmul_check)

matmul_result = sweep.sweep(
    [1024, 2048, 4096, 8192, 16384],
    {"bf16 matmul (cuBLAS)": matmul_of},
    x="n",
    l2="cold",
    flops=lambda n: 2 * n**3,
    budget_ms=300,
)
matrices.clear()
torch.cuda.empty_cache()

# %%
# The ceilings other pages use: :func:`~cudnn_guide.measure.ceilings.measure_ceilings`
# times a 2 GiB copy and takes the best of 4096³, 6144³ and 8192³ bf16 matmuls, cold L2
# (its 4096³ is a second, separate run of the sweep's n=4096 point above).
from cudnn_guide.measure.ceilings import measure_ceilings

ceilings = measure_ceilings()
for m, value in (
    (ceilings.copy, f"{ceilings.copy_gbps:.0f} GB/s"),
    (ceilings.matmul, f"{ceilings.bf16_tflops:.0f} TFLOP/s"),
):
    mhz = m.clocks.get("sm_mhz_end", "?")
    print(f"{m.label}: {m.median_ms * 1e3:.1f} µs, {value} (SM clock {mhz} MHz at end)")

# %%
# The cost of a timed launch
# --------------------------
# Every call the gallery times is bracketed by CUDA events, and between them the GPU
# also spends a few microseconds starting the launch and signalling its end, which a
# profiler's kernel duration leaves out.
# :func:`~cudnn_guide.measure.events.measure_launch_overhead` measures it without a
# profiler: two ``torch.cuda._sleep`` kernels of known length in clock cycles, timed
# exactly like a call, give a line whose slope is the SM clock and whose intercept is
# the per-launch cost. The harness measures it once per process
# (:func:`~cudnn_guide.measure.events.launch_cost`) and subtracts it from every event
# sample, so every page reports kernel time; each record keeps the constant, and so the
# raw event times. (The methodology page checks the result against the profiler.) This
# is the value this page's measurements used:
from cudnn_guide.measure import events

launch_cost = events.launch_cost()
repeats = [events.measure_launch_overhead(reps=150)["overhead_us"] for _ in range(5)]
print(
    f"per-launch cost: {launch_cost['overhead_us']:.2f} µs "
    f"(SM clock during the probe: {launch_cost['cycles_per_us']:.0f} MHz)"
)
print(f"five more calibrations: {min(repeats):.2f}–{max(repeats):.2f} µs")

# %%
# Plots
# -----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_lines

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
plot_lines(
    copy_measurements,
    x="size_mib",
    metric="gbps",
    ax=ax1,
    logx=True,
    title="device copy (read + write)",
    ceiling=ceilings.copy_gbps,
    ceiling_label=f"ceiling: {ceilings.copy_gbps:.0f} GB/s",
)
ax1.axvline(env.l2_mib, color="0.6", linestyle=":", label=f"L2 = {env.l2_mib:.0f} MiB")
ax1.legend(fontsize=8)
ax1.set_xlabel("buffer size (MiB)")
plot_lines(
    matmul_result.measurements,
    x="n",
    metric="tflops",
    ax=ax2,
    logx=True,
    title="bf16 matmul n×n×n, cold L2",
    ceiling=ceilings.bf16_tflops,
    ceiling_label=f"ceiling: {ceilings.bf16_tflops:.0f} TFLOP/s",
)
ax2.set_xlabel("n")
ax2.legend(fontsize=8)
plt.show()

# %%
# Tables
# ------
from cudnn_guide.report import sweep_table

copy_table = sweep_table(
    sweep.SweepResult("size_mib", copy_measurements), "gbps", title="copy bandwidth"
)
copy_table

# %%
sweep_table(matmul_result, "tflops", title="bf16 matmul")

# %%
# Conclusions
# -----------
# Every number here is computed from the measurements above.
from cudnn_guide.report.prose import Prose

hot_small = copy_results["hot"].get("copy, hot L2", 16)
cold_small = copy_results["cold"].get("copy, cold L2", 16)
hot_big = copy_results["hot"].get("copy, hot L2", sizes_mib[-1])
cold_big = copy_results["cold"].get("copy, cold L2", sizes_mib[-1])
small_ratio = hot_small.gbps / cold_small.gbps
big_gap = 100 * (hot_big.gbps / cold_big.gbps - 1)
peak_mm = max(matmul_result.measurements, key=lambda m: m.tflops)
ridge = ceilings.bf16_tflops * 1e12 / (ceilings.copy_gbps * 1e9)
sm_end = ceilings.matmul.clocks.get("sm_mhz_end", "?")
cost_us = launch_cost["overhead_us"]
too_short = [
    m.label
    for m in copy_measurements
    if any(w.startswith("too short to time") for w in m.warnings)
]
lines = [
    f"This {env.gpu} copies at {ceilings.copy_gbps:.0f} GB/s (2 GiB, cold L2) and "
    f"multiplies bf16 matrices at {ceilings.bf16_tflops:.0f} TFLOP/s "
    f"({ceilings.matmul.label}, the best of the ceiling's sizes, SM clock {sm_end} MHz "
    f"at its end): the ridge point is {ridge:.0f} FLOP per byte.",
]
if ceilings.peak_bf16_tflops:
    lines.append(
        f"* The datasheet gives {ceilings.peak_bf16_tflops:.0f} TFLOP/s dense bf16 and "
        f"{ceilings.peak_hbm_gbps:.0f} GB/s: measured, "
        f"{100 * ceilings.bf16_tflops / ceilings.peak_bf16_tflops:.0f}% and "
        f"{100 * ceilings.copy_gbps / ceilings.peak_hbm_gbps:.0f}% of them. The "
        "measured ceilings move with the clock (the power cap lowers it under dense "
        "tensor-core work); the pages' floors use the datasheet peaks, which no "
        "measurement can beat."
    )
lines.append(
    f"* A 16 MiB copy reports {hot_small.gbps:.0f} GB/s with a hot L2 and "
    f"{cold_small.gbps:.0f} GB/s with a cold one, timed the same way: "
    + (
        f"timing small inputs without flushing L2 overstates bandwidth by "
        f"{small_ratio:.2f}×."
        if small_ratio > 1
        else f"here the hot L2 did not help ({small_ratio:.2f}×)."
    )
)
lines.append(
    f"* At {sizes_mib[-1]} MiB, far beyond the {env.l2_mib:.0f} MiB L2, the hot copy "
    f"({hot_big.gbps:.0f} GB/s) is {abs(big_gap):.1f}% "
    f"{'above' if big_gap >= 0 else 'below'} the cold one ({cold_big.gbps:.0f} GB/s): "
    "there the flush has nothing left to change."
)
lines.append(
    f"* The fastest matmul in the sweep is n={peak_mm.params['n']} at "
    f"{peak_mm.tflops:.0f} TFLOP/s."
)
lines.append(
    f"* The events around each timed call include {cost_us:.1f} µs of launch cost: "
    f"more than 3% of any call shorter than {cost_us / 0.03:.0f} µs. The harness "
    "subtracts it, so the pages report kernel time (the copy sweep above keeps raw "
    "event times, so that its hot and cold rows follow one rule)."
)
if too_short:
    lines.append(
        f"* Too short to time per call: {', '.join(too_short)}; their times are raw "
        "event times, an upper bound (their GB/s a lower bound)."
    )

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline, keep

keep(
    ceilings.copy, ceilings.matmul
)  # the ceilings are this page's results (their trials are not kept)
headline("copy bandwidth ceiling", unit="GB/s", **ceilings.copy.estimate("GB/s"))
headline(
    "bf16 matmul ceiling",
    unit="TFLOP/s",
    sm_mhz_end=ceilings.matmul.clocks.get("sm_mhz_end"),
    **ceilings.matmul.estimate("TFLOP/s"),
)
headline(
    "launch cost per timed call",
    launch_cost["overhead_us"],
    "µs",
    low=min(repeats + [launch_cost["overhead_us"]]),
    high=max(repeats + [launch_cost["overhead_us"]]),
    interval="min–max of six calibrations",
)
# sphinx_gallery_end_ignore
Prose(*lines)
