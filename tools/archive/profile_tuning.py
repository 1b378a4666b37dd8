"""Where does a tuning pass spend its time? (developer diagnostic; run on a GPU)"""

import cProfile
import pstats
import time

import cudnn

from cudnn_guide.graphs import conv
from cudnn_guide.measure import autotune

problem = conv.ConvProblem()
inputs = problem.make_inputs()
fused = conv.conv_bias_relu_graph(
    problem, inputs, heuristics=("A", "B", "FALLBACK"), policy=cudnn.build_plan_policy.ALL
)
pack = fused.pack(**inputs)
t0 = time.perf_counter()
prof = cProfile.Profile()
prof.enable()
res = autotune.tune(fused, pack, reps=200)
prof.disable()
print(f"exhaustive pass {time.perf_counter() - t0:.2f} s")
for t in res.ranked[:3] + res.ranked[-3:]:
    m = t.measurement
    print(f"plan {t.index}: n={m.n} median {m.median_ms * 1e3:.1f} µs host {m.host_median_ms * 1e3:.1f} µs")
pstats.Stats(prof).sort_stats("cumulative").print_stats(18)
