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
# timed back-to-back with a **hot** L2 they read the cache, not HBM, and run faster.
# With a **cold** L2 (a buffer of twice the L2 size written before every call, outside
# the timed region) they report what a kernel reading fresh data sees. The sweep shows
# both, timed the **same way**: one call between two CUDA events, raw event times (the
# launch cost is not subtracted from either row: at 1-4 MiB it is most of the event, so
# those rows show launch cost more than bandwidth, for hot and cold alike).
# For each size the sweep asks for, ``copies.of`` makes a float32 source and destination
# and returns one copy's launcher
# (:class:`~cudnn_guide.studies.ceiling_sweeps.DeviceCopies`).
import torch

from cudnn_guide.studies import ceiling_sweeps

sizes_mib = [1, 4, 16, 64, 256, 1024, 4096]
copies = ceiling_sweeps.DeviceCopies()

# %%
# Check first: a timed copy must actually copy.
print(copies.check(64))  # one 64 MiB copy against its source; its buffers then freed

# %%
from cudnn_guide.measure import sweep

copy_results = {}
for l2 in ("hot", "cold"):
    copy_results[l2] = sweep.sweep(
        sizes_mib,
        {f"copy, {l2} L2": copies.of},
        x="size_mib",
        l2=l2,
        bytes=lambda s: 2 * s * 2**20,
        budget_ms=150,
        subtract_launch_cost=False,
    )
    copies.clear()
copy_measurements = copy_results["hot"].measurements + copy_results["cold"].measurements

# %%
# bf16 matmul: the compute ceiling
# --------------------------------
# cuBLAS through ``torch.matmul`` on random bf16 square matrices (random, not zeros:
# zeros run faster and would inflate the ceiling), cold L2
# (:class:`~cudnn_guide.studies.ceiling_sweeps.SquareMatmuls`). The matmul we time must
# compute the product: checked against an fp32 reference, TF32 off.
matrices = ceiling_sweeps.SquareMatmuls()
print(matrices.check(2048))

matmul_result = sweep.sweep(
    [1024, 2048, 4096, 8192, 16384],
    {"bf16 matmul (cuBLAS)": matrices.of},
    x="n",
    l2="cold",
    flops=lambda n: 2 * n**3,
    budget_ms=300,
)
matrices.clear()
torch.cuda.empty_cache()

# %%
# The ceilings other pages use: :func:`~cudnn_guide.measure.ceilings.measure_ceilings`
# times a 2 GiB copy and 4096³, 6144³, 8192³ bf16 matmuls (keeping the best), cold L2:
# separate runs, each at the clock the power cap left it, so the sweep can beat them.
from cudnn_guide.measure.ceilings import measure_ceilings

ceilings = measure_ceilings()
print(ceiling_sweeps.ceiling_lines(ceilings))

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
# raw event times. (The :doc:`methodology page </methodology>` checks it against the
# profiler.) This is the value this page's measurements used:
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
# Each sweep against its measured ceiling; the copy's panel marks the L2's size.
import matplotlib.pyplot as plt

fig = ceiling_sweeps.ceiling_figure(
    copy_measurements, matmul_result.measurements, ceilings, env.l2_mib
)
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
# Every number here is computed from the measurements above
# (``ceiling_sweeps.conclusions``).
from cudnn_guide.report.prose import Prose

lines = ceiling_sweeps.conclusions(
    env, ceilings, copy_results, matmul_result, launch_cost, sizes_mib
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
