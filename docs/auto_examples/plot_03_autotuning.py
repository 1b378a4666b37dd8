"""
Autotuning across engine configurations
=======================================

cuDNN can usually run a graph with several *engine configurations* (plans). Its
heuristics rank them and the default build takes the first. Autotuning builds them all
and times each. This page does that for the fused conv → bias → ReLU layer, with enough
repeats that the ranking holds when measured twice, and then asks whether a cheaper
search finds the same winner.

What you will learn:

* how to get every plan: heuristic modes ``A``, ``B`` and ``FALLBACK`` with
  ``build_plan_policy.ALL``, and what building them all costs;
* how to list the plans, run any one with ``execute_plan_at_index``, and select one with
  ``build_plan_at_index``;
* how to check every plan's output, not just the default's;
* how to time plans so the ranking is stable (and how to test that it is);
* where the heuristic's first choice ranks, and what a tuning run costs;
* successive halving: a search that spends most of its time on the contenders.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

env = environment.collect()
env

# %%
# The lesson: build every plan, list them, pick one
# -------------------------------------------------
# The same layer as the fused-conv page: N=32, C=128, 56×56 → K=256, 3×3, bf16, NHWC
# (channels-last: the channel dimension innermost in memory). What changes is the build:
# ``create_execution_plans`` asks three heuristic modes, and
# ``build_plans(build_plan_policy.ALL)`` compiles every plan that passes
# ``check_support`` instead of the first one.
import time

import cudnn
import torch

n, c, h, w, k = 32, 128, 56, 56, 256  # 3×3 filter, padding 1, stride 1


def nhwc(*shape, scale=1.0):  # random bf16, channels-last (NHWC) in memory
    t = torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * scale
    return t.to(memory_format=torch.channels_last)


x, weight = nhwc(n, c, h, w), nhwc(k, c, 3, 3, scale=(c * 9) ** -0.5)
bias, y = nhwc(1, k, 1, 1), nhwc(n, k, h, w)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
X = g.tensor_like(x, name="x")
W = g.tensor_like(weight, name="w")
B = g.tensor_like(bias, name="b")
conv = g.conv_fprop(image=X, weight=W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
Y = g.relu(input=g.bias(input=conv, bias=B, name="bias"), name="relu")
Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
Y.set_dim(list(y.shape)).set_stride(list(y.stride()))

g.validate()
g.build_operation_graph()
modes = [cudnn.heur_mode.A, cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK]
g.create_execution_plans(modes)
g.check_support()
t0 = time.perf_counter()
g.build_plans(cudnn.build_plan_policy.ALL)
build_s = time.perf_counter() - t0
count = g.get_execution_plan_count()
print(f"{count} plans built in {build_s:.2f} s")

# %%
# Each plan has a name (its engine and knob settings) and a workspace size. The list is
# in the heuristics' order: plan 0 is what a default build would run.
for i in range(5):
    print(i, g.get_plan_name_at_index(i), g.get_workspace_size_plan_at_index(i), "B")
sizes = [g.get_workspace_size_plan_at_index(i) for i in range(count)]
workspace = torch.empty(max(sizes + [1]), device="cuda", dtype=torch.uint8)

# %%
# Pick one. Here the criterion is memory: the first plan, in the heuristics' order, with
# the smallest workspace. ``build_plan_at_index`` selects it, so that ``execute`` (and
# ``serialize``) use it; ``execute_plan_at_index`` would run any plan without selecting
# it. The measuring section below times every plan instead.
pick_ws = min(range(count), key=sizes.__getitem__)
g.build_plan_at_index(pick_ws)
print(f"picked plan {pick_ws}: {g.get_plan_name_at_index(pick_ws)}")
g.execute({X: x, W: weight, B: bias, Y: y}, workspace, handle=handle)

# %%
# Check the picked plan against float32 PyTorch (TF32 off).
torch.backends.cudnn.allow_tf32 = False
ref = torch.conv2d(x.float(), weight.float(), bias.float().flatten(), padding=1).relu()
torch.testing.assert_close(y.float(), ref, atol=5e-2, rtol=2e-2)

# %%
# Measuring every plan
# --------------------
# The harness wraps the graph built above (:func:`~cudnn_guide.graphs.adopt`, with the
# build times measured in the lesson) to check variant packs and give timing loops a
# launcher that follows torch's current stream.
import statistics

from cudnn_guide import check, graphs
from cudnn_guide.graphs import conv as conv_recipes
from cudnn_guide.measure import autotune

problem = conv_recipes.ConvProblem(n=n, c=c, h=h, w=w, k=k)
inputs = {"x": x, "w": weight, "b": bias, "y": y}
io = {"x": X, "w": W, "b": B, "y": Y}
seconds = {"build_plans": build_s}  # timed in the lesson
built = graphs.adopt(g, handle, name="conv_bias_relu", step_seconds=seconds, io=io)
pack = built.pack(**inputs)  # the lesson's variant pack, {X: x, W: weight, ...}
report = built.report
names = [g.get_plan_name_at_index(i) for i in range(count)]
unique = sorted(set(names), key=names.index)
print(f"{len(names)} plans from modes A, B and FALLBACK; {len(unique)} distinct")

# %%
# Check every plan
# ----------------
# A plan that computes the wrong thing must never win on speed. Each distinct plan runs
# through ``execute_plan_at_index`` on the same inputs, its output poisoned first, and
# is compared with the fp32 reference.
reference = check.reference(problem.torch_forward, x, weight, bias)
autotune.ensure_workspace(built, list(range(count)))  # the timing launchers need it too
plan_checks, failed_plans = {}, {}
for index, name in enumerate(names):
    if name in plan_checks or name in failed_plans:
        continue
    check.poison(y)
    try:
        g.execute_plan_at_index(pack, workspace, index, handle=handle)
    except Exception as exc:  # a plan that built but cannot run here is reported
        failed_plans[name] = f"{type(exc).__name__}: {exc}"[:80]
        continue
    # a wrong output stops the page
    plan_checks[name] = check.check(y, reference, name=f"plan {index}")
worst = max(plan_checks.values(), key=lambda r: r.rel_error)
print(f"{len(plan_checks)} plans ran and passed their check")
print(f"largest relative error {worst.rel_error:.2e} (tolerance {worst.tolerance:.1e})")
print(f"{len(failed_plans)} could not run")
for name, why in failed_plans.items():
    print(f"  could not run: {name}: {why}")

# %%
# Time every plan, twice
# ----------------------
# Each plan gets up to 200 timed calls after a warm-up, cold L2, and the median is its
# time. A plan too slow for 200 calls in 250 ms gets only as many as fit (at least 5):
# it cannot win anyway. The counts each plan actually got are printed below. The whole
# tuning pass is then **repeated**: if the ranking is real, the second pass agrees with
# the first.
flops, nbytes = problem.flops, problem.bytes
pass1 = autotune.tune(
    built, pack, method="exhaustive", reps=200, flops=flops, bytes=nbytes
)
pass2 = autotune.tune(
    built, pack, method="exhaustive", reps=200, flops=flops, bytes=nbytes
)

rho = pass1.rank_correlation(pass2)  # Spearman: 1 when both passes order plans alike
top5_1 = [t.index for t in pass1.ranked[:5]]
top5_2 = [t.index for t in pass2.ranked[:5]]
host_ms = statistics.median(t.measurement.host_median_ms for t in pass1.ranked)
print(f"exhaustive passes: {pass1.seconds:.2f} s and {pass2.seconds:.2f} s")
print(f"median host time per execute: {host_ms * 1e3:.1f} µs")
print(f"rank correlation between the passes: {rho:.3f}")
print(f"top five, pass 1: {top5_1}; pass 2: {top5_2}")
calls = {
    (n_pass, t.index): len(t.measurement.samples_ms)
    for n_pass, p in ((1, pass1), (2, pass2))
    for t in p.ranked
}
full = sum(v >= 200 for v in calls.values())
short = {key: v for key, v in calls.items() if v < 20}
print(f"timed calls: {full} of {len(calls)} plan timings got 200")
print(f"fewer than 20: {len(short)}")
for (n_pass, index), v in sorted(short.items()):
    t = pass1.by_index(index) if n_pass == 1 else pass2.by_index(index)
    print(f"  pass {n_pass}, plan {index}: {v} calls of {t.median_ms:.1f} ms")

# %%
# The ranking
# -----------
# Median and inter-quartile range of every plan (pass 1), fastest first. The heuristic's
# first choice (what a default build runs) is plan 0, marked in orange.
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_plans

ranked = pass1.ranked
heur_rank = pass1.rank_of(0)
plot_plans(pass1, title=f"conv→bias→ReLU: {len(ranked)} plans on {env.gpu}")
plt.show()

# %%
# The five fastest, the heuristic's choice, and the slowest:
import dataclasses

from cudnn_guide.report import ComparisonTable

shown = {t.index: t for t in ranked[:5] + [pass1.by_index(0)] + ranked[-1:]}
rows = [
    dataclasses.replace(
        t.measurement,
        params={
            "impl": f"#{pass1.rank_of(i)} plan {i}: {t.name[:40]}",
            "size": "median (µs)",
        },
    )
    for i, t in shown.items()
]
ComparisonTable(
    rows, row="impl", column="size", metric="median_us", title="selected plans"
)

# %%
# Successive halving
# ------------------
# Exhaustive tuning gives every plan the same attention, hopeless ones included (the
# harness caps a slow plan's calls by a time budget, so they cannot take over the pass,
# but each still gets its warm-up and timed run). Successive halving first screens every
# plan with a single timed call and drops those more than 3× slower than the best
# screened; it then times the rest 10 times each, keeps the faster half, doubles the
# calls, and repeats; the last two get the full 200. Its pick is compared with the
# exhaustive winner (printed: each plan's faster exhaustive pass; the conclusions: pass
# 1 only, with an interval), and its cost with one exhaustive pass.
halving = autotune.tune(
    built,
    pack,
    method="halving",
    reps=200,
    first_round_reps=10,
    flops=flops,
    bytes=nbytes,
)
pick = halving.best.index
exhaustive_best = min(pass1.best.median_ms, pass2.best.median_ms)
pick_time = min(pass1.by_index(pick).median_ms, pass2.by_index(pick).median_ms)
gap = pick_time / exhaustive_best - 1
cost_ratio = halving.seconds / ((pass1.seconds + pass2.seconds) / 2)
print(f"halving picked plan {pick} in {halving.seconds:.2f} s")
print(f"that is {100 * cost_ratio:.0f}% of an exhaustive pass")
print(f"its exhaustive median is {100 * gap:+.2f}% from the best")

# %%
# Use the winner, and keep it
# ---------------------------
# ``build_plan_at_index`` makes the winner the graph's plan, so ``execute`` and
# ``serialize`` use it. Serialized, it can be stored in the on-disk
# :class:`~cudnn_guide.graphs.plan_cache.PlanCache` and reloaded by later processes (see
# the serialization page).
import tempfile

from cudnn_guide.graphs import plan_cache

winner = pass1.best
g.build_plan_at_index(winner.index)  # execute and serialize now use the winner
check.poison(y)
ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
g.execute(pack, ws, handle=handle)
winner_check = check.check(y, reference, name=f"winner, plan {winner.index}")
print(winner_check)
plans_dir = tempfile.TemporaryDirectory(prefix="cudnn-guide-plans-")
cache = plan_cache.PlanCache(plans_dir.name)
key = plan_cache.current_key(f"conv_bias_relu_graph|{problem!r}|tuned")
uids = {name: int(t.get_uid()) for name, t in io.items()}
path = cache.store(key, bytes(g.serialize(as_bytes=True)), uids)
print(f"tuned plan stored: {path.name} ({path.stat().st_size / 1024:.0f} KiB)")
plans_dir.cleanup()  # a real deployment keeps its cache directory

# %%
# Does the winner beat the heuristic's choice beyond the noise?
# -------------------------------------------------------------
# The ranking times each plan once, one after another. To judge the two plans that
# matter, run them in interleaved rounds through ``execute_plan_at_index``, which
# executes any built plan without selecting it, and judge the per-round ratio by its 95%
# interval (:mod:`cudnn_guide.measure.compare`).
from cudnn_guide.measure import compare

heur = pass1.by_index(0)
plan_cmp = None
if winner.index != 0:

    def plan_at(index):
        def run():
            graphs.bind_to_current_stream(handle)
            g.execute_plan_at_index(pack, workspace, index, handle=handle)

        return run

    check.poison(y)
    plan_at(0)()
    print(check.check(y, reference, name="heuristic's choice, execute_plan_at_index"))
    plan_cmp = compare.compare(
        {
            f"winner (plan {winner.index})": plan_at(winner.index),
            "heuristic's first choice (plan 0)": plan_at(0),
        },
        candidate=f"winner (plan {winner.index})",
        l2="cold",
        rounds=15,
        flops=flops,
        bytes=nbytes,
    )
    v = plan_cmp.versus["heuristic's first choice (plan 0)"]
    print(f"winner over plan 0: {v['value']:.3f}× ({v['low']:.3f}–{v['high']:.3f})")
    print(f"verdict: {v['verdict']} (tie band ±{100 * plan_cmp.tie_band:.1f}%)")

# %%
# Conclusions
# -----------
# Computed from the data when the page is recorded. Where two plans timed one after
# another are compared, the statement rests on the interval of the ratio of their
# medians (from each median's in-run 95% interval): inside it, 0 means a tie.
from cudnn_guide.report.prose import Prose


def behind(slow, fast):
    """slow's median over fast's, in %, with the interval from both medians'."""
    (f_lo, f_hi), (s_lo, s_hi) = fast.median_ci_ms, slow.median_ci_ms
    pct = 100 * (slow.median_ms / fast.median_ms - 1)
    lo, hi = 100 * (s_lo / f_hi - 1), 100 * (s_hi / f_lo - 1)
    if lo <= 0 <= hi:
        word = "a tie within the noise (the interval includes 0)"
    else:
        word = "slower beyond the noise" if lo > 0 else "faster beyond the noise"
    return f"{pct:+.2f}% (interval {lo:+.2f}% to {hi:+.2f}%): {word}"


def median_us(t):
    """A plan's pass 1 median in µs, with its in-run 95% interval."""
    if t.measurement is None:
        return "no time (it could not be timed)"
    e = t.measurement.estimate("µs")
    return f"{e['value']:.1f} µs (in-run 95% interval {e['low']:.1f}–{e['high']:.1f})"


if plan_cmp:
    v = plan_cmp.versus["heuristic's first choice (plan 0)"]
    said = (
        f": in interleaved rounds it is {plan_cmp.describe()}; its speed-up over plan "
        f"0 is {100 * (v['value'] - 1):+.2f}% (in-run 95% interval "
        f"{100 * (v['low'] - 1):+.2f}% to {100 * (v['high'] - 1):+.2f}%)."
    )
else:
    said = ", and it is the heuristic's choice."
sentences = [
    f"{len(unique)} distinct plans; building all of them took {build_s:.2f} s "
    "(build_plans with build_plan_policy.ALL).",
    f"The heuristic's first choice ranks {heur_rank} of {len(ranked)} at "
    f"{median_us(heur)}; the winner, plan {winner.index}, runs in "
    f"{median_us(winner)}" + said,
]
quick_t = getattr(pass1.by_index(pick_ws), "measurement", None)
if pick_ws == winner.index:
    quick_said = ", the same as the tuner's winner."
elif quick_t is None:
    quick_said = ", which has no pass 1 timing."
else:
    quick_said = (
        f"; against the winner, in pass 1: {behind(quick_t, winner.measurement)}."
    )
sentences.append(
    f"The lesson's pick by workspace (the smallest, {sizes[pick_ws]} B) was plan "
    f"{pick_ws}" + quick_said
)
if pass1.best.index == pass2.best.index:
    sentences.append(
        f"Two exhaustive passes agree: rank correlation {rho:.3f}, same winner."
    )
elif getattr(pass1.by_index(pass2.best.index), "measurement", None) is None:
    sentences.append(
        f"The two exhaustive passes pick different winners (rank correlation "
        f"{rho:.3f}); pass 2's winner, plan {pass2.best.index}, has no pass 1 timing."
    )
else:
    a = pass1.best.measurement
    b = pass1.by_index(pass2.best.index).measurement
    sentences.append(
        f"Two exhaustive passes agree on the order (rank correlation {rho:.3f}) but "
        f"not on the winner: pass 2's winner, plan {pass2.best.index}, against plan "
        f"{pass1.best.index} in pass 1 ({len(b.samples_ms)} and {len(a.samples_ms)} "
        f"calls): {behind(b, a)}."
    )
if pick == pass1.best.index:
    found = "the exhaustive winner itself"
else:
    found = (
        f"plan {pick}; against the exhaustive winner, in pass 1: "
        f"{behind(pass1.by_index(pick).measurement, pass1.best.measurement)}"
    )
sentences.append(
    f"Successive halving found {found}, in {100 * cost_ratio:.0f}% of the exhaustive "
    f"time ({halving.seconds:.2f} s against "
    f"{(pass1.seconds + pass2.seconds) / 2:.2f} s)."
)
short_ratio = min(
    (
        (pass1 if n_pass == 1 else pass2).by_index(index).median_ms / winner.median_ms
        for n_pass, index in short
    ),
    default=0.0,
)
sentences.append(
    f"Timed calls per plan: {full} of {len(calls)} plan timings got the full 200, "
    f"{len(calls) - full - len(short)} got 20 to 199, and {len(short)} got fewer than "
    "20"
    + (
        " ("
        + ", ".join(
            f"plan {index} in pass {n_pass}: {v}"
            for (n_pass, index), v in sorted(short.items())
        )
        + f"): the fastest of them takes {short_ratio:.0f}× the winner's time."
        if short
        else "."
    )
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline, keep

keep(t.measurement for t in pass1.ranked)  # the autotuner times its trials uncollected
headline("winner median", unit="µs", **winner.measurement.estimate("µs"))
headline("heuristic choice rank", heur_rank, "rank", of=len(ranked))
if plan_cmp:
    comparison("winner's speed-up over the heuristic's choice", plan_cmp)
headline("ranking rank correlation between passes", rho, "")
headline("halving gap to exhaustive best", 100 * gap, "%")
headline("halving cost / exhaustive cost", 100 * cost_ratio, "%")
# sphinx_gallery_end_ignore
Prose(*sentences)
