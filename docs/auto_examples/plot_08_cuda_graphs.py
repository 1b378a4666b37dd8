"""
CUDA graphs around an execution plan
====================================

Every ``graph.execute()`` costs host time — Python, the frontend's dispatch, the driver launch —
before the GPU does anything. When the kernel is long, that cost hides behind the GPU's work of
the previous call. When it is short, the GPU waits for the host, and the host cost *is* the
time per call. Capturing the calls into a CUDA graph records the launches once; replaying them
is one cheap call.

Showing this on a big kernel shows nothing: there, launch overhead is invisible. This page
sweeps the problem size from tiny to large to find where the host stops mattering.

What you will learn:

* how to capture ``execute`` into a ``torch.cuda.CUDAGraph`` with the cuDNN handle bound to
  the capture stream;
* the host cost of ``execute()``, and how much this package's launcher adds to it;
* per-iteration time of an eager loop against graph replay, across sizes;
* that a replay reads whatever is in the captured input buffers: new data is copied in, not
  re-captured.
* that a host-bound number is one process's draw: measure it in several fresh processes.

Graph: 1 × s×s @ s×s → scale → bias → GELU, bf16, s from 64 to 4096.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

env = environment.collect()
env

# %%
# Capture with the handle on the capture stream
# ---------------------------------------------
# ``torch.cuda.graph`` captures on its own stream. A cuDNN handle still bound to the default
# stream would launch there, outside the capture: inside the capture, bind the handle to the
# capture stream (``cudnn.set_stream``) before ``execute``. The graph is the matmul epilogue of
# the matmul page (without its AMAX); warm it up once before capturing.
import cudnn
import torch

from cudnn_guide import check, graphs
from cudnn_guide.graphs import matmul, tensors


def build(s, seed=0):
    p = matmul.MatmulProblem(batch=1, m=s, k=s, n=s, alpha=0.5)
    ins = p.make_inputs(seed=seed)
    f = matmul.matmul_epilogue_graph(p, ins, amax=False)
    pack = f.pack(**{k: v for k, v in ins.items() if k != "amax"}, alpha=tensors.scalar_value(p.alpha))
    return p, ins, f, pack


p, ins, f, pack = build(1024)
mm, handle, workspace = f.graph, f.handle, f.workspace
streams = {}
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
mm.execute(pack, workspace, handle=handle)  # warm-up before capture
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    streams["capture"] = torch.cuda.current_stream().cuda_stream
    cudnn.set_stream(handle, streams["capture"])
    mm.execute(pack, workspace, handle=handle)
    streams["handle during capture"] = handle.stream
streams["default"] = torch.cuda.default_stream().cuda_stream
print({k: hex(v) for k, v in streams.items()})
assert streams["handle during capture"] == streams["capture"] != streams["default"]

# %%
# The launchers of :meth:`~cudnn_guide.graphs.BuiltGraph.bind`, used for timing on this site, do
# the same on every call: they rebind the handle to torch's *current* stream if it changed
# (:func:`~cudnn_guide.graphs.bind_to_current_stream`), so they capture correctly too.

# %%
# A replay reads new data
# -----------------------
# The captured graph holds the *addresses* of ``a``, ``b`` and ``y``. To run it on new inputs,
# copy them into those buffers and replay. We check the replay's output against a reference for
# the new inputs, and that it differs from the old output.
check.poison(ins["y"])
g.replay()
old_out = ins["y"].clone()
first_check = check.check(old_out, check.reference(p.torch_forward, ins["a"], ins["b"], ins["bias"])[0],
                          name="first replay")
new = p.make_inputs(seed=42)
ins["a"].copy_(new["a"])
ins["b"].copy_(new["b"])
check.poison(ins["y"])
g.replay()
replay_check = check.check(ins["y"], check.reference(p.torch_forward, new["a"], new["b"], ins["bias"])[0],
                           name="replay after copying new inputs")
print(first_check)
print(replay_check)
print(f"output changed with the inputs: {not torch.equal(old_out, ins['y'])}")

# %%
# The host cost of ``execute()``
# ------------------------------
# Measured one way on this page: the wall time per call of a loop of 100 back-to-back calls on a
# tiny problem (s = 64), ending in a synchronize, where the GPU work per call is far shorter
# than the host's and the loop is host-bound. Three ways to launch are interleaved in 21 rounds
# (a shuffled order each round): the frontend's raw ``graph.execute`` with the handle already
# bound, this package's ``bind`` launcher (rebinds the handle, then calls ``graph.execute``),
# and ``BuiltGraph.execute`` (which also checks the variant pack on every call). The launcher's
# overhead is the median of the per-round differences, with a bootstrap 95% interval: the host
# drifts between rounds, and pairing within a round cancels the drift.
import random
import statistics
import time

from cudnn_guide.measure import verdicts

tp, tins, tf, tpack = build(64)
tl = tf.bind(tpack)
raw_graph, ws, h = tf.graph, tf.workspace, tf.handle
graphs.bind_to_current_stream(h)
variants = {
    "raw graph.execute": lambda: raw_graph.execute(tpack, ws, handle=h),
    "cudnn_guide bind() launcher": tl,
    "cudnn_guide BuiltGraph.execute (checks pack)": lambda: tf.execute(tpack),
}
host_us = {name: [] for name in variants}
order, rng = list(variants), random.Random(0)
for _ in range(21):
    rng.shuffle(order)
    for name in order:
        fn = variants[name]
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        host_us[name].append((time.perf_counter() - t0) / 100 * 1e6)
for name, xs in host_us.items():
    print(f"{name:46s} {statistics.median(xs):6.2f} µs/call (rounds {min(xs):.2f}–{max(xs):.2f})")
diffs = [b - r for b, r in zip(host_us["cudnn_guide bind() launcher"], host_us["raw graph.execute"])]
low, high = verdicts.bootstrap_median_ci(diffs)
overhead = {"value": statistics.median(diffs), "low": low, "high": high}  # µs per call, with its 95% CI
overhead_text = f"{overhead['value']:+.2f} µs/call, 95% CI {low:+.2f} to {high:+.2f} µs"
if low <= 0 <= high:
    overhead_text = f"no overhead this measurement can resolve: {overhead_text}"
print(f"launcher over raw graph.execute: {overhead_text}")

# %%
# Sweep: eager loop against graph replay
# --------------------------------------
# For each size: the GPU time of one call (the harness hides the host behind a GPU spin and
# subtracts the launch cost, so this is the kernel alone; for the smallest sizes that cost is
# most of the event time, and the harness says so); the per-call time of a loop of 100 eager calls, wall clock to the
# end of a synchronize (what a loop really costs); and the same for one replay of a CUDA graph
# holding those 100 calls. All hot L2: the point is launch overhead, not memory.
from cudnn_guide.measure import bench, cudagraphs

sizes = [64, 128, 256, 512, 1024, 2048, 4096]
rows = []
for s in sizes:
    sp, sins, sf, spack = build(s, seed=s)
    check.poison(sins["y"])
    sf.execute(spack)
    check.check(sins["y"], check.reference(sp.torch_forward, sins["a"], sins["b"], sins["bias"])[0], name=f"s={s}")
    fn = sf.bind(spack)
    flops = sp.flops
    gpu = bench.benchmark(fn, label=f"GPU time s={s}", l2="hot", flops=flops, budget_ms=100,
                          params={"impl": "GPU time of one call", "s": s})
    loop = cudagraphs.time_loop(fn, label=f"eager loop s={s}", calls=100, reps=20, flops=flops,
                                params={"impl": "eager loop, per call", "s": s})
    captured = cudagraphs.capture(fn, calls=100, label=f"s={s}")
    replay = cudagraphs.time_replay(captured, label=f"replay s={s}", reps=20, flops=flops,
                                    params={"impl": "graph replay, per call", "s": s})
    rows += [gpu, loop, replay]
    print(f"s={s:5d}: GPU {gpu.median_ms * 1e3:8.2f} µs, host {gpu.host_median_ms * 1e3:6.2f} µs, "
          f"eager loop {loop.median_ms * 1e3:8.2f} µs, replay {replay.median_ms * 1e3:8.2f} µs")

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_lines

launcher_us = host_us["cudnn_guide bind() launcher"]  # µs per call, measured above: median, min–max of the rounds
host_line = statistics.median(launcher_us)
ax = plot_lines(rows, x="s", metric="median_us", logx=True, logy=True,
                title="per-call time: eager loop vs. CUDA-graph replay",
                ceiling=host_line, ceiling_label=f"host cost per call (100-call loop at s=64): {host_line:.1f} µs")
ax.set_xlabel("s (problem: s×s @ s×s + epilogue)")
plt.show()

# %%
from cudnn_guide.report import ComparisonTable

ComparisonTable(rows, row="impl", column="s", metric="median_us", title="per-call time (µs)")

# %%
# A host-bound number is one process's draw
# -----------------------------------------
# Everything host-bound above ran in this one process. On the GPU builder the same launches run
# at one of two host speeds: fresh processes land on either, and a process can switch (the
# methodology page measures both), so a re-recording can move an eager loop far beyond its noise
# with nothing changed. The s=64 loop and replay once more, in five fresh interpreters one after
# another (each builds and checks the graph first); the record keeps their range:
from cudnn_guide.studies import host_levels

per_process = host_levels.in_fresh_processes(host_levels.loop_and_replay, sizes[0], processes=5)
for i, r in enumerate(per_process, 1):
    print(f"process {i}: eager loop {r['eager_us']:6.2f} µs/call, replay {r['replay_us']:5.2f} µs/call: "
          f"{r['speedup']:5.2f}×")

# %%
# Takeaways
# ---------
from cudnn_guide.report import ratio, ratio_estimate

by = {(m.params["impl"], m.params["s"]): m for m in rows}
crossover = next((s for s in sizes if by[("GPU time of one call", s)].median_ms * 1e3 > host_line), None)
small, large = sizes[0], sizes[-1]
print(f"* One call through the launcher costs {host_line:.1f} µs of host time (a host-bound 100-call loop at s=64; "
      f"the sweep's eager loop at s={small} gives {by[('eager loop, per call', small)].median_ms * 1e3:.1f} µs the same "
      f"way). Against the raw graph.execute, the launcher shows {overhead_text}.")
replay = ratio_estimate(by[("eager loop, per call", small)], by[("graph replay, per call", small)])
print(f"* At s={small}, an eager loop takes {by[('eager loop, per call', small)].median_ms * 1e3:.1f} µs per call for "
      f"{by[('GPU time of one call', small)].median_ms * 1e3:.1f} µs of GPU work; replay takes "
      f"{by[('graph replay, per call', small)].median_ms * 1e3:.1f} µs: "
      f"{replay['value']:.1f}× faster ({replay['low']:.1f}–{replay['high']:.1f}× {replay['interval']}).")
print(f"* At s={large}, eager and replay are {ratio(by[('eager loop, per call', large)], by[('graph replay, per call', large)]):.2f}× "
      f"apart: the GPU work hides the host.")
print(f"* The GPU time of one call first exceeds the host cost at s={crossover}." if crossover
      else "* The GPU time never exceeds the host cost in this sweep.")
eager_levels = sorted(r["eager_us"] for r in per_process)
speedups = sorted(r["speedup"] for r in per_process)
print(f"* In {len(per_process)} fresh processes the s={small} eager loop took {eager_levels[0]:.1f}–{eager_levels[-1]:.1f} µs "
      f"per call and replay was {speedups[0]:.1f}–{speedups[-1]:.1f}× faster: a host-bound number is one process's "
      "draw, so its range across processes is the interval the record keeps.")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline
headline("host cost of one launch (100-call loop, s=64)", statistics.median(eager_levels), "µs", low=eager_levels[0],
         high=eager_levels[-1], interval=f"min–max of {len(per_process)} fresh processes")
headline("launcher overhead over raw graph.execute", unit="µs/call (signed)", **overhead,
         interval="bootstrap 95% CI of the median paired difference")
headline(f"replay speed-up at s={small}", statistics.median(speedups), "x", low=speedups[0], high=speedups[-1],
         kind="replay", interval=f"min–max of {len(per_process)} fresh processes")
# sphinx_gallery_end_ignore
