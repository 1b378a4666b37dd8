"""
Autotuning across engine configurations
=======================================

cuDNN can usually run a graph with several *engine configurations* (plans). Its heuristics rank
them and the default build takes the first. Autotuning builds them all and times each. This page
does that for the fused conv → bias → ReLU layer, with enough repeats that the ranking holds
when measured twice, and then asks whether a cheaper search finds the same winner.

What you will learn:

* how to get every plan: heuristic modes ``A``, ``B`` and ``FALLBACK`` with
  ``build_plan_policy.ALL``, and what building them all costs;
* how to check every plan's output, not just the default's;
* how to time plans so the ranking is stable (and how to test that it is);
* where the heuristic's first choice ranks, and what a tuning run costs;
* successive halving: a search that spends most of its time on the contenders;
* how to select the winner and keep it.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

env = environment.collect()
env

# %%
# Build every plan
# ----------------
# The same layer as the fused-conv page: N=32, C=128, 56×56 → K=256, 3×3, bf16, NHWC.
# The graph is declared as on that page (:func:`~cudnn_guide.graphs.conv.declare_conv_bias_relu`
# is the function written out there). What changes is the build: ``create_execution_plans``
# asks three heuristic modes, and ``build_plans(ALL)`` compiles every plan that passes
# ``check_support`` instead of the first one.
import time

import cudnn
import torch

from cudnn_guide.measure import autotune
from cudnn_guide import graphs
from cudnn_guide.graphs import conv

handle = graphs.handle_for_current_device()
problem = conv.ConvProblem()
inputs = problem.make_inputs(seed=0)
g = cudnn.pygraph(handle=handle, name="conv_bias_relu", io_data_type=cudnn.data_type.BFLOAT16,
                  intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
io = conv.declare_conv_bias_relu(g, **inputs, padding=problem.padding, stride=problem.stride)
seconds = {}
for step, call in (("validate", g.validate), ("build_operation_graph", g.build_operation_graph),
                   ("create_execution_plans", lambda: g.create_execution_plans(
                       [cudnn.heur_mode.A, cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK])),
                   ("check_support", g.check_support),
                   ("build_plans", lambda: g.build_plans(cudnn.build_plan_policy.ALL))):
    t0 = time.perf_counter()
    call()
    seconds[step] = time.perf_counter() - t0
built = graphs.adopt(g, handle, name="conv_bias_relu", step_seconds=seconds)
report = built.report
names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
unique = sorted(set(names), key=names.index)
print(report)
print(f"{len(names)} plans from modes A, B and FALLBACK; {len(unique)} distinct configurations")

# %%
# Check every plan
# ----------------
# A plan that computes the wrong thing must never win on speed. ``execute_plan_at_index`` runs
# any built plan without selecting it, given a workspace as large as that plan needs
# (``get_workspace_size_plan_at_index``). Each distinct plan runs on the same inputs, its output
# poisoned first, and is compared with the fp32 reference.
from cudnn_guide import check

reference = check.reference(problem.torch_forward, inputs["x"], inputs["w"], inputs["b"])
pack = {io[n]: inputs[n] for n in ("x", "w", "b", "y")}
workspace = torch.empty(max(max(g.get_workspace_size_plan_at_index(i) for i in range(len(names))), 1),
                        device="cuda", dtype=torch.uint8)
autotune.ensure_workspace(built, list(range(len(names))))  # the timing launchers below need it too
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
plan_checks, failed_plans = {}, {}
for index, name in enumerate(names):
    if name in plan_checks or name in failed_plans:
        continue
    check.poison(inputs["y"])
    try:
        g.execute_plan_at_index(pack, workspace, index, handle=handle)
    except Exception as exc:  # a plan that built but cannot run here is reported, not timed
        failed_plans[name] = f"{type(exc).__name__}: {exc}"[:160]
        continue
    plan_checks[name] = check.check(inputs["y"], reference, name=f"plan {index}")  # a wrong output stops the page
worst = max(plan_checks.values(), key=lambda c: c.rel_error)
print(f"{len(plan_checks)} plans ran and passed their check; "
      f"largest relative error {worst.rel_error:.2e} (tolerance {worst.tolerance:.1e}); "
      f"{len(failed_plans)} could not run")
for n, why in failed_plans.items():
    print(f"  could not run: {n}: {why}")

# %%
# Time every plan — twice
# -----------------------
# Each plan gets 200 timed calls after a warm-up, cold L2, and the median is its time (a plan
# too slow for 200 calls in 250 ms gets as many as fit, at least 5: it cannot win anyway). The
# whole tuning pass is then **repeated**: if the ranking is real, the second pass agrees with the first.
flops, nbytes = problem.flops, problem.bytes
pass1 = autotune.tune(built, pack, method="exhaustive", reps=200, flops=flops, bytes=nbytes)
pass2 = autotune.tune(built, pack, method="exhaustive", reps=200, flops=flops, bytes=nbytes)

rho = pass1.rank_correlation(pass2)  # Spearman: 1 when both passes order the plans alike
top5_1 = [t.index for t in pass1.ranked[:5]]
top5_2 = [t.index for t in pass2.ranked[:5]]
import statistics

host_ms = statistics.median(t.measurement.host_median_ms for t in pass1.ranked)
print(f"exhaustive pass: {pass1.seconds:.2f} s and {pass2.seconds:.2f} s for {len(pass1.ranked)} plans; "
      f"median host time per execute {host_ms * 1e3:.1f} µs")
print(f"rank correlation between the passes: {rho:.3f}; same winner: {pass1.best.index == pass2.best.index}; "
      f"top five, pass 1: {top5_1}, pass 2: {top5_2}")
calls = {(n, t.index): len(t.measurement.samples_ms)
         for n, p in ((1, pass1), (2, pass2)) for t in p.ranked}
(few_pass, few_plan), fewest = min(calls.items(), key=lambda kv: kv[1])
print(f"timed calls per plan in the two passes: min {fewest} (plan {few_plan}, "
      f"pass {few_pass}), median {statistics.median(calls.values()):.0f}, max "
      f"{max(calls.values())}")

# %%
# The ranking
# -----------
# Median and inter-quartile range of every plan (pass 1), fastest first. The heuristic's first
# choice — what a default build runs — is plan 0, marked in orange.
import matplotlib.pyplot as plt

ranked = pass1.ranked
heur_rank = pass1.rank_of(0)
from cudnn_guide.report import plot_plans
plot_plans(pass1, title=f"conv→bias→ReLU: {len(ranked)} engine configurations on {env.gpu}")
plt.show()

# %%
# The five fastest, the heuristic's choice, and the slowest:
from cudnn_guide.report import ComparisonTable

import dataclasses

shown = {t.index: t for t in ranked[:5] + [pass1.by_index(0)] + ranked[-1:]}
rows = [dataclasses.replace(t.measurement, params={"impl": f"#{pass1.rank_of(i)} plan {i}: {t.name[:48]}",
                                                   "size": "median (µs)"})
        for i, t in shown.items()]
ComparisonTable(rows, row="impl", column="size", metric="median_us", title="selected plans")

# %%
# Successive halving
# ------------------
# Exhaustive tuning gives every plan the same attention, hopeless ones included (the harness
# caps a slow plan's calls by a time budget, so they cannot take over the pass, but each still
# gets its warm-up and timed run). Successive halving first screens every plan with a single
# timed call and drops those more than 3× slower than the best screened; it then times the rest
# 10 times each, keeps the faster half, doubles the calls, and repeats; the last two get the
# full 200. We compare the plan it picks with the exhaustive winner (both timed in the
# exhaustive passes) and its cost with one exhaustive pass.
halving = autotune.tune(built, pack, method="halving", reps=200, first_round_reps=10, flops=flops, bytes=nbytes)
pick = halving.best.index
exhaustive_best = min(pass1.best.median_ms, pass2.best.median_ms)
pick_time = min(pass1.by_index(pick).median_ms, pass2.by_index(pick).median_ms)
gap = pick_time / exhaustive_best - 1
cost_ratio = halving.seconds / ((pass1.seconds + pass2.seconds) / 2)
print(f"halving picked plan {pick} in {halving.seconds:.2f} s ({100 * cost_ratio:.0f}% of an exhaustive pass); "
      f"its exhaustive median is {100 * gap:+.2f}% from the best")

# %%
# Use the winner, and keep it
# ---------------------------
# ``build_plan_at_index`` makes the winner the graph's plan, so ``execute`` and ``serialize``
# use it. Serialized, it can be stored in the on-disk
# :class:`~cudnn_guide.graphs.plan_cache.PlanCache` and reloaded by later processes (see the
# serialization page).
import tempfile

from cudnn_guide.graphs import plan_cache

winner = pass1.best
g.build_plan_at_index(winner.index)  # builds and selects it: execute and serialize now use the winner
check.poison(inputs["y"])
g.execute(pack, torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8), handle=handle)
winner_check = check.check(inputs["y"], reference, name=f"winner, plan {winner.index}")
print(winner_check)
plans_dir = tempfile.TemporaryDirectory(prefix="cudnn-guide-plans-")
cache = plan_cache.PlanCache(plans_dir.name)
key = plan_cache.current_key(f"conv_bias_relu_graph|{problem!r}|tuned")
path = cache.store(key, bytes(g.serialize(as_bytes=True)), {n: int(t.get_uid()) for n, t in io.items()})
print(f"tuned plan stored: {path.name} ({path.stat().st_size / 1024:.0f} KiB)")
plans_dir.cleanup()  # a real deployment keeps its cache directory

# %%
# Does the winner beat the heuristic's choice beyond the noise?
# -------------------------------------------------------------
# The ranking times each plan once, one after another. To judge the two plans that matter, run
# them in interleaved rounds through ``execute_plan_at_index``, which executes any built plan
# without selecting it, and judge the per-round ratio by its 95% interval
# (:mod:`cudnn_guide.measure.compare`).
from cudnn_guide.measure import compare

heur = pass1.by_index(0)
plan_cmp = None
if winner.index != 0:
    def plan_at(index):
        def run():
            graphs.bind_to_current_stream(handle)
            g.execute_plan_at_index(pack, workspace, index, handle=handle)
        return run

    check.poison(inputs["y"])
    plan_at(0)()
    print(check.check(inputs["y"], reference, name="heuristic's choice through execute_plan_at_index"))
    plan_cmp = compare.compare({f"winner (plan {winner.index})": plan_at(winner.index),
                                "heuristic's first choice (plan 0)": plan_at(0)},
                               candidate=f"winner (plan {winner.index})", l2="cold", rounds=15, flops=flops, bytes=nbytes)
    print(f"the winner is {plan_cmp.describe()}")

# %%
# Takeaways
# ---------
# Computed from the data when the page is recorded.
from cudnn_guide.report.prose import Prose

sentences = [
    f"{len(unique)} distinct plans; building all of them took "
    f"{report.total_seconds:.2f} s ({report.step_seconds['build_plans']:.2f} s in "
    f"build_plans), against {report.step_seconds['validate'] * 1e3:.1f} ms to "
    "validate.",
    f"The heuristic's first choice ranks {heur_rank} of {len(ranked)} at "
    f"{heur.median_ms * 1e3:.1f} µs; the winner, plan {winner.index}, runs in "
    f"{winner.median_ms * 1e3:.1f} µs"
    + (f": in interleaved rounds it is {plan_cmp.describe()}." if plan_cmp
       else ", and it is the heuristic's choice.")]
if pass1.best.index == pass2.best.index:
    sentences.append(
        f"Two exhaustive passes agree: rank correlation {rho:.3f}, same winner.")
elif getattr(pass1.by_index(pass2.best.index), "measurement", None) is None:
    sentences.append(
        f"The two exhaustive passes pick different winners (rank correlation "
        f"{rho:.3f}); pass 2's winner, plan {pass2.best.index}, has no pass 1 timing "
        "to compare.")
else:
    a, b = pass1.best.measurement, pass1.by_index(pass2.best.index).measurement
    (a_lo, a_hi), (b_lo, b_hi) = a.median_ci_ms, b.median_ci_ms
    behind, lo, hi = (100 * (b.median_ms / a.median_ms - 1), 100 * (b_lo / a_hi - 1),
                      100 * (b_hi / a_lo - 1))
    within = ("the interval includes 0: a tie within the noise" if lo <= 0 <= hi
              else "the interval excludes 0: pass 1 separates them, pass 2 does "
              "not agree")
    sentences.append(
        f"Two exhaustive passes agree on the order (rank correlation {rho:.3f}) but "
        f"not on the winner: pass 2's winner, plan {pass2.best.index}, was "
        f"{behind:.2f}% behind plan {pass1.best.index} in pass 1 (from the two "
        f"medians' in-run 95% intervals, {lo:+.2f}% to {hi:+.2f}%; "
        f"{len(b.samples_ms)} and {len(a.samples_ms)} calls): {within}.")
sentences.append(
    f"Successive halving found a plan {100 * gap:.2f}% from the best in "
    f"{100 * cost_ratio:.0f}% of the exhaustive time ({halving.seconds:.2f} s against "
    f"{(pass1.seconds + pass2.seconds) / 2:.2f} s).")

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
