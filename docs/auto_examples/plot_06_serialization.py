"""
Plan serialization and a persistent plan cache
==============================================

Building a cuDNN graph queries heuristics and may compile kernels: a cost paid in every new
process, at the worst moment — start-up. ``serialize()`` turns a built plan into bytes and
``deserialize(handle, bytes)`` turns them back into an executable graph, skipping the build.

The gain is easy to mismeasure. Inside one warm process the second build is already cheap
(cuDNN has loaded its kernels, and caches what it can), so rebuild and reload look alike. What
matters is a **fresh process**: the time from start to first result, with and without a plan
on disk. This page measures both, for a matmul, the conv layer and attention.

What you will learn:

* how to serialize a built graph, reload it into an empty graph, and execute it **by UID**;
* why in-process timing hides the gain, and how fresh processes reveal it;
* what makes a saved plan invalid (another GPU architecture, another cuDNN), and how
  :class:`~cudnn_guide.plan_cache.PlanCache` keys, checks and rebuilds entries.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

env = environment.collect()
env

# %%
# Serialize, reload, execute by UID
# ---------------------------------
# A deserialized graph has no tensor objects: its inputs and outputs are addressed by the UIDs
# the original graph gave them. :attr:`~cudnn_guide.recipes.Fused.uids` records them.
import torch

from cudnn_guide import check, plan_cache, recipes

problem = recipes.ConvProblem()
inputs = problem.make_inputs(seed=0)
fused = recipes.conv_bias_relu_graph(problem, inputs)
blob = bytes(fused.built.graph.serialize(as_bytes=True))
print(f"serialized plan: {len(blob) / 1024:.1f} KiB; UIDs {fused.uids}")

check.poison(inputs["y"])
fused.built.execute(fused.pack(**inputs))
original = inputs["y"].clone()

reloaded = plan_cache.load_plan(blob, fused.uids)
check.poison(inputs["y"])
reloaded.execute(**inputs)
reference = check.reference(problem.torch_forward, inputs["x"], inputs["w"], inputs["b"])
reload_check = check.check(inputs["y"], reference, name="reloaded plan")
print(reload_check)
print(f"bit-identical to the original graph's output: {torch.equal(inputs['y'], original)}")

# %%
# The misleading measurement: one warm process
# --------------------------------------------
# Rebuild the same graph five times and reload it five times, in this process.
import statistics
import time

rebuild_s, reload_s = [], []
for _ in range(5):
    t0 = time.perf_counter()
    recipes.conv_bias_relu_graph(problem, inputs)
    rebuild_s.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    plan_cache.load_plan(blob, fused.uids)
    reload_s.append(time.perf_counter() - t0)
print(f"warm process: rebuild {statistics.median(rebuild_s) * 1e3:.1f} ms, reload "
      f"{statistics.median(reload_s) * 1e3:.1f} ms (medians of 5); the first build on this page took "
      f"{fused.built.report.total_seconds * 1e3:.1f} ms")

# %%
# Fresh processes: time to first result
# -------------------------------------
# :func:`cudnn_guide.coldstart.run_fresh` runs each measurement in a new process that creates the
# CUDA context and cuDNN handle, then either **builds** the graph or **loads** it from a
# :class:`~cudnn_guide.plan_cache.PlanCache` on disk, executes it once and synchronizes. It
# reports the plan step and the time to first result (both from the end of context creation),
# and checks the result against PyTorch. The first cold run fills the cache.
#
# Each is a new Python interpreter. They are all started at once, before the first run
# (:class:`~cudnn_guide.fresh_process.InterpreterPool`): each imports torch and this package,
# then waits for its turn, so none spends 3–4 s importing while the page waits, and none
# imports while another measures. The methodology page's control compares such interpreters
# with ones started on demand.
import tempfile

from cudnn_guide import coldstart, fresh_process

cache_dir = tempfile.mkdtemp(prefix="cudnn-guide-plans-")
REPS = 3
fresh = {}
with fresh_process.InterpreterPool(len(coldstart.GRAPHS) * 2 * REPS, preload=coldstart.PRELOAD) as pool:
    for graph in coldstart.GRAPHS:
        fresh[(graph, "build")] = [coldstart.run_fresh(graph, "build", cache_dir, pool=pool) for _ in range(REPS)]
        fresh[(graph, "cache")] = [coldstart.run_fresh(graph, "cache", cache_dir, pool=pool) for _ in range(REPS)]
    print(f"{len(fresh) * REPS} interpreters, started together, were ready in {pool.start_seconds:.1f} s")
for graph in coldstart.GRAPHS:
    for mode in ("build", "cache"):
        runs = fresh[(graph, mode)]
        worst = max(r["rel_error"] for r in runs)
        assert worst < check.tolerance(torch.bfloat16), f"{graph} {mode}: rel. error {worst}"
        print(f"{graph:6s} {mode:5s}: plan {statistics.median(r['plan_s'] for r in runs) * 1e3:8.1f} ms, "
              f"first result {statistics.median(r['first_result_s'] for r in runs) * 1e3:8.1f} ms, "
              f"context {statistics.median(r['context_s'] for r in runs) * 1e3:6.0f} ms, "
              f"process from its turn to its exit {statistics.median(r['process_s'] for r in runs):.2f} s, "
              f"max rel. error {worst:.1e}")

# %%
# Plot
# ----
import matplotlib.pyplot as plt
import numpy as np

fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
x = np.arange(len(coldstart.GRAPHS))
for offset, mode, color, label in ((-0.2, "build", "0.5", "cold build"), (0.2, "cache", "#76b900", "plan from disk")):
    meds = [statistics.median(r["first_result_s"] for r in fresh[(g, mode)]) * 1e3 for g in coldstart.GRAPHS]
    lo = [meds[i] - min(r["first_result_s"] for r in fresh[(g, mode)]) * 1e3 for i, g in enumerate(coldstart.GRAPHS)]
    hi = [max(r["first_result_s"] for r in fresh[(g, mode)]) * 1e3 - meds[i] for i, g in enumerate(coldstart.GRAPHS)]
    ax.bar(x + offset, meds, width=0.4, yerr=[lo, hi], color=color, label=label, capsize=3)
ax.set_xticks(x, coldstart.GRAPHS)
ax.set_yscale("log")
ax.set_ylabel("time to first result (ms), fresh process\nmedian, min–max of %d runs" % REPS)
ax.set_title("cold build vs. a plan reloaded from disk")
ax.legend()
ax.grid(True, axis="y", alpha=0.3, which="both")
plt.show()

# %%
# What makes a saved plan invalid
# -------------------------------
# A serialized plan names engine configurations and may embed compiled kernels for one GPU
# architecture under one cuDNN version. Loading it under another is at best rejected by cuDNN,
# at worst undefined — so the cache never lets cuDNN decide. Each entry's header holds its key
# (graph description, GPU name, SM version, cuDNN backend version, frontend version) and a
# SHA-256 of the plan bytes; a mismatch is found *before* deserialization and the entry is
# rebuilt.
import json

cache = plan_cache.PlanCache(tempfile.mkdtemp())
key = plan_cache.current_key(f"conv_bias_relu_graph|{problem!r}")
build = lambda: recipes.conv_bias_relu_graph(problem, inputs)  # noqa: E731
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

# %%
# Takeaways
# ---------
speedups = {}
for g in coldstart.GRAPHS:
    cold = statistics.median(r["first_result_s"] for r in fresh[(g, "build")])
    warm = statistics.median(r["first_result_s"] for r in fresh[(g, "cache")])
    speedups[g] = cold / warm
    print(f"* {g}: a fresh process reaches its first result in {warm * 1e3:.1f} ms from a cached plan against "
          f"{cold * 1e3:.1f} ms with a cold build: {speedups[g]:.1f}× faster.")
for g in coldstart.GRAPHS:
    build_plan = statistics.median(r["plan_s"] for r in fresh[(g, "build")]) * 1e3
    load_plan = statistics.median(r["plan_s"] for r in fresh[(g, "cache")]) * 1e3
    print(f"  {g}: the plan step is {build_plan:.1f} ms to build against {load_plan:.1f} ms to load.")
gains = [g for g in coldstart.GRAPHS if speedups[g] >= 10]
flat = [g for g in coldstart.GRAPHS if speedups[g] < 2]
if gains:
    print(f"* For {', '.join(gains)}, the cold build is dominated by work the cached plan skips (heuristics, and "
          f"compiling runtime-fused kernels).")
if flat:
    print(f"* For {', '.join(flat)}, the build has little to skip: both paths are dominated by what they share, "
          f"cuDNN loading the engine's kernels on first use. A plan cache does not help such a graph.")
print(f"* Inside one warm process the same comparison reads {statistics.median(rebuild_s) * 1e3:.1f} ms "
      f"against {statistics.median(reload_s) * 1e3:.1f} ms: in-process timing understates the gain.")
print("* A new interpreter also pays Python's and torch's imports (seconds; see the methodology page's control), "
      "which no plan cache removes.")

# sphinx_gallery_start_ignore
from cudnn_guide import records

rec = records.Record("plot_06_serialization", title="Plan serialization and a persistent plan cache", environment=env)
rec.add_check(reload_check)
for (g, mode), runs in fresh.items():
    rec.add_check(check.CheckResult(f"{g} {mode} (fresh process, worst of {REPS})", "bfloat16",
                                    max(r["rel_error"] for r in runs), check.tolerance(torch.bfloat16), 0, 1))
for g, s in speedups.items():
    rec.headline(f"{g}: first-result speed-up from cached plan", s, "x", baseline="cold build in a fresh process")
rec.extra["fresh_runs"] = {f"{g}/{m}": runs for (g, m), runs in fresh.items()}
rec.extra["warm_process_ms"] = {"rebuild": [x * 1e3 for x in rebuild_s], "reload": [x * 1e3 for x in reload_s]}
_record_path = rec.write()
# sphinx_gallery_end_ignore
