"""
CUDA graphs around an execution plan
====================================

Every ``graph.execute()`` costs host time (Python, the frontend's dispatch, the driver
launch) before the GPU does anything. When the kernel is long, that cost hides behind
the GPU's work of the previous call. When it is short, the GPU waits for the host, and
the host cost *is* the time per call. Capturing the calls into a CUDA graph records
the launches once; replaying them is one cheap call. This page captures a cuDNN graph
into a ``torch.cuda.CUDAGraph``, replays it on new data, and then sweeps the problem
size from tiny to large to find where the host stops mattering.

What you will learn:

* how to capture ``execute`` into a ``torch.cuda.CUDAGraph`` with the cuDNN handle bound
  to the capture stream;
* that a replay reads whatever is in the captured input buffers: new data is copied in,
  not re-captured;
* the host cost of ``execute()``, and how much this package's launcher adds to it;
* per-call time of an eager loop against graph replay, across sizes, and what a replay
  amortises;
* that a host-bound number is one process's draw: measure it in several fresh processes.

Graph: 1 × s×s @ s×s → scale → bias → GELU, bf16; s = 1024 in the lesson, 64 to 4096 in
the sweep.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

env = environment.collect()
env

# %%
# The lesson: capture a cuDNN graph, replay it on new data
# --------------------------------------------------------
# ``torch.cuda.graph`` captures on its own stream. A cuDNN handle still bound to the
# default stream would launch there, outside the capture: inside the capture, bind the
# handle to the capture stream (``cudnn.set_stream``) before ``execute``. The graph is
# the matmul epilogue ``gelu(alpha · (a @ b) + bias)``; it runs once before the capture.
import cudnn
import torch

s, alpha = 1024, 0.5  # one (s×s) @ (s×s) matmul and its epilogue, bf16, row-major
a = torch.randn(1, s, s, device="cuda", dtype=torch.bfloat16)
b = torch.randn(1, s, s, device="cuda", dtype=torch.bfloat16) / s**0.5
bias = torch.randn(1, 1, s, device="cuda", dtype=torch.bfloat16)
y = torch.empty(1, s, s, device="cuda", dtype=torch.bfloat16)

handle = cudnn.create_handle()
BF16, F32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
TYPES = dict(io_data_type=BF16, intermediate_data_type=F32, compute_data_type=F32)
g = cudnn.pygraph(handle=handle, **TYPES)
A, B, BIAS = g.tensor_like(a), g.tensor_like(b), g.tensor_like(bias)
ALPHA = g.tensor(dim=[1] * 3, stride=[1] * 3, is_pass_by_value=True, data_type=F32)
scaled = g.mul(a=g.matmul(A, B, compute_data_type=F32), b=ALPHA)
Y = g.gelu(input=g.add(a=scaled, b=BIAS))
Y.set_output(True).set_data_type(BF16)
Y.set_dim(list(y.shape))
Y.set_stride(list(y.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
pack = {A: a, B: b, BIAS: bias, ALPHA: torch.full((1, 1, 1), alpha), Y: y}
ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)

cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
g.execute(pack, ws, handle=handle)  # once before the capture
replay = torch.cuda.CUDAGraph()
with torch.cuda.graph(replay):
    capture_stream = torch.cuda.current_stream().cuda_stream
    cudnn.set_stream(handle, capture_stream)
    g.execute(pack, ws, handle=handle)  # recorded, not run
    assert handle.stream == capture_stream
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)

outputs = []
for seed in (None, 42):  # the inputs of the capture, then new data copied in
    if seed is not None:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        a.copy_(torch.randn(a.shape, device="cuda", generator=gen))
        b.copy_(torch.randn(b.shape, device="cuda", generator=gen) / s**0.5)
    y.fill_(float("nan"))  # so that a replay that wrote nothing cannot pass
    replay.replay()
    ref = torch.nn.functional.gelu(alpha * (a.float() @ b.float()) + bias.float())
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
    outputs.append((y.clone(), ref))
    print(f"replay, max abs error {(y.float() - ref).abs().max():.2e}")
print(
    f"the output changed with the inputs: {not torch.equal(*(o for o, _ in outputs))}"
)

# %%
# The launchers of :meth:`~cudnn_guide.graphs.BuiltGraph.bind`, used for timing on this
# site, do the same on every call: they rebind the handle to torch's *current* stream if
# it changed (:func:`~cudnn_guide.graphs.bind_to_current_stream`), so they capture
# correctly too.

# %%
# Measuring the host cost of ``execute()``
# ----------------------------------------
# The lesson's two replays join the page's record as checks first. Host cost is timed
# the one way the site times it, :func:`~cudnn_guide.measure.compare.compare_host` (as
# on the per-call overhead page): after a synchronize, 400 back-to-back calls in 5
# batches, each timed with ``perf_counter``, in 11 interleaved rounds of shuffled order,
# on a tiny problem (s = 64) whose GPU work per call is far shorter than the host's.
# Three ways to launch: the frontend's raw ``graph.execute`` with the handle already
# bound, this package's ``bind`` launcher (rebinds the handle, then calls
# ``graph.execute``), and ``BuiltGraph.execute`` (which also checks the variant pack on
# every call). The launcher's overhead is the median of the per-round differences, with
# a bootstrap 95% interval: the host drifts between rounds, and pairing within a round
# cancels the drift.
import statistics

import pandas as pd

from cudnn_guide import check, graphs
from cudnn_guide.graphs import matmul, tensors
from cudnn_guide.measure import compare, verdicts
from cudnn_guide.report import html_table

first_check = check.check(*outputs[0], name="first replay")
replay_check = check.check(*outputs[1], name="replay after copying new inputs")


def build(s, seed=0):
    p = matmul.MatmulProblem(batch=1, m=s, k=s, n=s, alpha=0.5)
    ins = p.make_inputs(seed=seed)
    f = matmul.matmul_epilogue_graph(p, ins, amax=False)
    kept = {k: v for k, v in ins.items() if k != "amax"}
    return p, ins, f, f.pack(**kept, alpha=tensors.scalar_value(p.alpha))


tp, tins, tf, tpack = build(64)
raw_graph, tws, th = tf.graph, tf.workspace, tf.handle
graphs.bind_to_current_stream(th)
RAW, LAUNCHER = "raw graph.execute", "cudnn_guide bind() launcher"
variants = {
    RAW: lambda: raw_graph.execute(tpack, tws, handle=th),
    LAUNCHER: tf.bind(tpack),
    "cudnn_guide BuiltGraph.execute (checks pack)": lambda: tf.execute(tpack),
}
host = compare.compare_host(variants, candidate=RAW, rounds=11, calls=400)
table = []
for name in variants:
    e = host.estimate(name)
    table.append(
        {
            "launch": name,
            "host µs per call": e["value"],
            "in-run interval": f"{e['low']:.2f}–{e['high']:.2f}",
        }
    )
diffs = [
    1e3 * (lnc - raw)
    for lnc, raw in zip(host.round_medians_ms[LAUNCHER], host.round_medians_ms[RAW])
]
low, high = verdicts.bootstrap_median_ci(diffs)
overhead = {"value": statistics.median(diffs), "low": low, "high": high}  # µs per call
overhead_text = f"{overhead['value']:+.2f} µs/call, 95% CI {low:+.2f} to {high:+.2f} µs"
if low <= 0 <= high:
    overhead_text = f"no overhead this measurement can resolve: {overhead_text}"
print(f"launcher over raw graph.execute: {overhead_text}")
html_table(pd.DataFrame(table), {"host µs per call": "{:.2f}"})

# %%
# Measuring an eager loop against graph replay, across sizes
# ----------------------------------------------------------
# For each size: the GPU time of one call (the harness hides the host behind a GPU spin
# and subtracts the launch cost; where that cost is over half the event time it keeps
# the raw event time, an upper bound on the kernel, and says so); the per-call time of a
# loop of 100 eager calls, wall clock to the end of a synchronize (what a loop really
# costs); and the same for one replay of a CUDA graph holding those 100 calls (one
# launch for 100 calls: the replay's own launch cost is shared by the 100). All hot L2:
# the point is launch overhead, not memory.
from cudnn_guide.measure import bench, cudagraphs

sizes = [64, 128, 256, 512, 1024, 2048, 4096]
rows = []
for s in sizes:
    sp, sins, sf, spack = build(s, seed=s)
    check.poison(sins["y"])
    sf.execute(spack)
    expected = check.reference(sp.torch_forward, sins["a"], sins["b"], sins["bias"])[0]
    check.check(sins["y"], expected, name=f"s={s}")
    fn = sf.bind(spack)
    flops = sp.flops
    gpu = bench.benchmark(
        fn,
        label=f"GPU time s={s}",
        l2="hot",
        flops=flops,
        budget_ms=100,
        params={"impl": "GPU time of one call", "s": s},
    )
    loop = cudagraphs.time_loop(
        fn,
        label=f"eager loop s={s}",
        calls=100,
        reps=20,
        flops=flops,
        params={"impl": "eager loop, per call", "s": s},
    )
    captured = cudagraphs.capture(fn, calls=100, label=f"s={s}")
    replayed = cudagraphs.time_replay(
        captured,
        label=f"replay s={s}",
        reps=20,
        flops=flops,
        params={"impl": "graph replay, per call", "s": s},
    )
    rows += [gpu, loop, replayed]
    print(
        f"s={s:5d}: GPU {gpu.median_ms * 1e3:7.2f} µs, "
        f"eager loop {loop.median_ms * 1e3:7.2f} µs, "
        f"replay {replayed.median_ms * 1e3:7.2f} µs"
    )

# %%
# Measuring, as a plot
# --------------------
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_lines

host_line = host.estimate(RAW)["value"]  # µs per call, this process (measured above)
ax = plot_lines(
    rows,
    x="s",
    metric="median_us",
    logx=True,
    logy=True,
    title="per-call time: eager loop vs. CUDA-graph replay",
    ceiling=host_line,
    ceiling_label=f"host cost of graph.execute, this process: {host_line:.1f} µs",
)
ax.set_xlabel("s (problem: s×s @ s×s + epilogue)")
plt.show()

# %%
from cudnn_guide.report import ComparisonTable

ComparisonTable(
    rows, row="impl", column="s", metric="median_us", title="per-call time (µs)"
)

# %%
# Measuring in fresh processes: a host-bound number is one process's draw
# -----------------------------------------------------------------------
# Everything host-bound above ran in this one process. On the GPU builder the same
# launches run at one of several host speeds: fresh processes land on any, and a
# process can switch (the methodology page measures them), so a re-recording can move
# an eager loop far beyond its noise with nothing changed. At s=64, in five fresh
# interpreters one after another, each builds and checks the graph, then times the
# host cost of ``graph.execute`` the same way as above, the 100-call eager loop, the
# replay of a 100-call graph and the replay of a one-call graph. The processes are
# then grouped into levels (:func:`~cudnn_guide.studies.host_levels.levels`: a process
# more than 1.2× above the next lower one starts a new level), and each level is
# reported on its own.
from cudnn_guide.studies import host_levels

per_process = host_levels.in_fresh_processes(
    host_levels.loop_and_replay, sizes[0], processes=5
)
host_levels_us = host_levels.levels([r["host_us"] for r in per_process])
table = [
    {
        "process": i,
        "graph.execute host µs": r["host_us"],
        "eager loop µs": r["eager_us"],
        "replay of 100 calls µs": r["replay_us"],
        "replay of 1 call µs": r["replay_one_us"],
        "loop / replay of 100": f"{r['speedup']:.2f}×",
    }
    for i, r in enumerate(per_process, 1)
]
html_table(pd.DataFrame(table), precision=2)

# %%
# Conclusions
# -----------
# Computed from the data when the page is recorded.
from cudnn_guide.report import ratio, ratio_estimate
from cudnn_guide.report.prose import Prose

by = {(m.params["impl"], m.params["s"]): m for m in rows}
crossover = next(
    (s for s in sizes if by[("GPU time of one call", s)].median_ms * 1e3 > host_line),
    None,
)
small, large = sizes[0], sizes[-1]
main = max(host_levels_us, key=lambda lv: (lv["n"], -lv["value"]))
at_main = [r for r in per_process if main["low"] <= r["host_us"] <= main["high"]]
speedups = sorted(r["speedup"] for r in at_main)
one_call = statistics.median(r["replay_one_us"] for r in at_main)
eager_main = statistics.median(r["eager_us"] for r in at_main)
level_text = "; ".join(
    f"{lv['n']} at {lv['value']:.1f} µs ({lv['low']:.1f}–{lv['high']:.1f})"
    for lv in host_levels_us
)
sentences = [
    f"One call of graph.execute keeps the host busy {main['value']:.1f} µs "
    f"(compare_host, s={small}, the most common level of {len(per_process)} fresh "
    f"processes: {main['low']:.1f}–{main['high']:.1f} µs over {main['n']} of them). "
    + (
        f"The processes fell on {len(host_levels_us)} levels: {level_text}: a host "
        "cost is a property of the process as much as of the call."
        if len(host_levels_us) > 1
        else "All processes fell on one level."
    ),
    f"This package's bind() launcher over the raw graph.execute: {overhead_text}.",
]
rep = ratio_estimate(
    by[("eager loop, per call", small)], by[("graph replay, per call", small)]
)
eager_us, gpu_us, replay_us = (
    by[(impl, small)].median_ms * 1e3
    for impl in (
        "eager loop, per call",
        "GPU time of one call",
        "graph replay, per call",
    )
)
one_vs_eager = eager_main / one_call


def less_or_more(x):
    """'2.0× less' for a ratio of 2, '2.0× more' for one of 0.5."""
    return f"{x:.1f}× less" if x >= 1 else f"{1 / x:.1f}× more"


sentences.append(
    f"At s={small}, an eager loop takes {eager_us:.1f} µs per call for {gpu_us:.1f} µs "
    f"of GPU work; replaying a graph of 100 calls takes {replay_us:.1f} µs per call, "
    f"{less_or_more(rep['value'])} ({rep['low']:.1f}–{rep['high']:.1f}× "
    f"{rep['interval']}). That is per call inside a 100-call graph: one replay launch "
    "is shared by the 100 calls. A graph holding one call takes "
    f"{one_call:.1f} µs per replay (median at the common host level), "
    f"{less_or_more(one_vs_eager)} than an eager call there: what a replay saves "
    "without amortising its own launch."
)
far = ratio(by[("eager loop, per call", large)], by[("graph replay, per call", large)])
sentences.append(
    f"At s={large}, eager and replay are {far:.2f}× apart: the GPU work hides the host."
)
sentences.append(
    f"The GPU time of one call first exceeds this process's host cost at s={crossover}."
    if crossover
    else "The GPU time never exceeds this process's host cost in this sweep."
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline, keep

headline(
    "host cost of graph.execute (compare_host, s=64)",
    main["value"],
    "µs",
    low=main["low"],
    high=main["high"],
    interval=f"min–max of the {main['n']} of {len(per_process)} fresh processes at the "
    "most common host level",
)
headline(
    "launcher overhead over raw graph.execute",
    unit="µs/call (signed)",
    **overhead,
    interval="bootstrap 95% CI of the median paired difference",
)
headline(
    f"replay speed-up at s={small}",
    statistics.median(speedups),
    "x",
    low=speedups[0],
    high=speedups[-1],
    kind="replay",
    interval=f"min–max of the {len(at_main)} fresh processes at the most common host "
    "level; per call inside a 100-call graph",
)
keep(host_levels=host_levels_us, fresh_processes=per_process)
# sphinx_gallery_end_ignore
Prose(*sentences)
