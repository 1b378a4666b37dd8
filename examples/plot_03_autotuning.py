"""
Autotuning across engine configurations
=======================================

cuDNN can usually run a graph with several *engine configurations* (plans). Its
heuristics rank them and the default build takes the first. Autotuning builds them all
and times each. This page does that for the fused conv → bias → ReLU layer, times every
plan twice to test whether the ranking holds, races the winner against the heuristic's
choice, and asks whether a cheaper search finds the same winner.

What you will learn:

* how to get every plan: heuristic modes ``A``, ``B`` and ``FALLBACK`` with
  ``build_plan_policy.ALL``, and what building them all costs;
* how to list the plans and select one with ``build_plan_at_index`` (the measuring part
  runs any one without selecting it, through ``execute_plan_at_index``);
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
# The same layer as the :ref:`fused-conv page
# <sphx_glr_auto_examples_plot_02_conv_bias_relu.py>`: N=32, C=128, 56×56 → K=256, 3×3,
# bf16, NHWC (channels-last: channels innermost in memory). What changes is the build:
# ``create_execution_plans`` asks three heuristic modes, and ``build_plans`` with
# ``build_plan_policy.ALL`` builds every plan passing ``check_support``, not the first.
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
# The harness wraps the graph built above
# (:func:`~cudnn_guide.graphs.builder.adopt`, with the build times measured in the
# lesson) to check variant packs and give timing loops a launcher that follows torch's
# current stream. What this page does around the tuner (the checks, the summaries of
# its passes, the conclusions) is in :mod:`cudnn_guide.studies.autotuning`.
from cudnn_guide import check, graphs
from cudnn_guide.graphs import conv as conv_recipes
from cudnn_guide.measure import autotune
from cudnn_guide.studies import autotuning

problem = conv_recipes.ConvProblem(n=n, c=c, h=h, w=w, k=k)
inputs = {"x": x, "w": weight, "b": bias, "y": y}
io = {"x": X, "w": W, "b": B, "y": Y}
seconds = {"build_plans": build_s}  # timed in the lesson
built = graphs.adopt(g, handle, name="conv_bias_relu", step_seconds=seconds, io=io)
pack = built.pack(**inputs)  # the lesson's variant pack, {X: x, W: weight, ...}
names = [g.get_plan_name_at_index(i) for i in range(count)]
unique = sorted(set(names), key=names.index)
print(f"{len(names)} plans from modes A, B and FALLBACK; {len(unique)} distinct")

# %%
# Check every plan
# ----------------
# A plan that computes the wrong thing must never win on speed. Each distinct plan runs
# through ``execute_plan_at_index`` on the same inputs, its output poisoned first, and
# is compared with the fp32 reference (``autotuning.check_plans``).
reference = check.reference(problem.torch_forward, x, weight, bias)
autotune.ensure_workspace(built, list(range(count)))  # the timing launchers need it too
plan_checks, failed_plans = autotuning.check_plans(
    g, names, pack, workspace, y, reference, handle=handle
)
print(autotuning.checks_text(plan_checks, failed_plans))

# %%
# Time every plan, twice
# ----------------------
# Each plan gets up to 200 timed calls after a warm-up, cold L2, and the median is its
# time. A plan too slow for 200 calls in 250 ms gets only as many as fit (at least 5):
# it cannot win anyway. The counts each plan actually got are printed below. The whole
# tuning pass is then **repeated**: if the ranking is real, the second pass agrees with
# the first (``autotuning.Passes``: Spearman's rank correlation, 1 when both passes
# order the plans alike).
flops, nbytes = problem.flops, problem.bytes
tuning = dict(reps=200, flops=flops, bytes=nbytes)
pass1 = autotune.tune(built, pack, method="exhaustive", **tuning)
pass2 = autotune.tune(built, pack, method="exhaustive", **tuning)
passes = autotuning.Passes(pass1, pass2, reps=200, short_below=20)
rho = passes.rho
print(passes)

# %%
# The ranking
# -----------
# Median and IQR of each plan (pass 1), fastest first; x counts from 0 (rank r at r−1).
# The winner is green; the heuristic's first choice (plan 0, a default build's) orange.
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_plans

ranked = pass1.ranked
heur_rank = pass1.rank_of(0)
plot_plans(pass1, title=f"conv→bias→ReLU: {len(ranked)} plans on {env.gpu}")
plt.show()

# %%
# The five fastest, the heuristic's choice, and the slowest:
autotuning.selected_plans(pass1, fastest=5)

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
halving = autotune.tune(built, pack, method="halving", first_round_reps=10, **tuning)
search = autotuning.Halving(halving, pass1, pass2)
gap, cost_ratio = search.gap, search.cost_ratio
print(search)

# %%
# Use the winner, and keep it
# ---------------------------
# ``build_plan_at_index`` makes the winner the graph's plan, so ``execute`` and
# ``serialize`` use it; the on-disk :class:`~cudnn_guide.graphs.plan_cache.PlanCache`
# keeps it for later processes (:ref:`sphx_glr_auto_examples_plot_06_serialization.py`);
# here ``autotuning.store_tuned_plan`` stores it in a temporary one.
winner = pass1.best
g.build_plan_at_index(winner.index)  # execute and serialize now use the winner
check.poison(y)
ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
g.execute(pack, ws, handle=handle)
winner_check = check.check(y, reference, name=f"winner, plan {winner.index}")
print(winner_check)
print(autotuning.store_tuned_plan(g, io, f"conv_bias_relu_graph|{problem!r}|tuned"))

# %%
# Does the winner beat the heuristic's choice beyond the noise?
# -------------------------------------------------------------
# A tuning pass times the plans one after another. The two plans that matter race
# in interleaved rounds (15 at most, fewer once the verdict is settled) through
# ``execute_plan_at_index``, which runs a built plan without selecting it; the per-round
# ratio is judged by its 95% interval and tie band (:mod:`cudnn_guide.measure.compare`).
from cudnn_guide.measure import compare

plan_cmp = None
if winner.index != 0:

    def plan_at(index):
        return autotuning.plan_launcher(g, pack, workspace, index, handle=handle)

    check.poison(y)
    plan_at(0)()
    print(check.check(y, reference, name="heuristic's choice, execute_plan_at_index"))
    WINNER = f"winner (plan {winner.index})"
    contenders = {WINNER: plan_at(winner.index), autotuning.HEURISTIC: plan_at(0)}
    gpu = dict(l2="cold", rounds=15, flops=flops, bytes=nbytes)
    plan_cmp = compare.compare(contenders, candidate=WINNER, **gpu)
    print(autotuning.winner_text(plan_cmp))

# %%
# Conclusions
# -----------
# Computed from the data when the page is recorded (``autotuning.conclusions``). Two
# plans timed one after another are compared by the interval of their medians' ratio (a
# tie if it holds 0): no tie band, and blind to drift between the two timings, so where
# it disagrees with the interleaved race above, the race is the better evidence.
from cudnn_guide.report.prose import Prose

facts = dict(distinct=len(unique), build_s=build_s, picked=pick_ws, sizes=sizes)
sentences = autotuning.conclusions(passes, search, plan_cmp, **facts)

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
