"""
Per-call overhead: every way to launch a graph, and the frontend's native CUDA graphs
=====================================================================================

At decode sizes a fused attention kernel runs for a few microseconds, and the CPU time
spent *launching* it decides the throughput. The frontend offers several launch paths
for one built graph; this page measures what each adds to, or saves on, the host time
of a plain ``execute`` per call, at a workload where the GPU keeps up, so that the time
is the path's own. Then it builds a CUDA graph the frontend's way
(``populate_cuda_graph`` / ``update_cuda_graph``) beside PyTorch's stream capture.

The host cost of a plain ``graph.execute`` is measured on the
:ref:`CUDA-graphs page <sphx_glr_auto_examples_plot_08_cuda_graphs.py>`, for its
matmul graph, in fresh processes: a host number measured in one process is one draw.
This page measures only what each path adds to a plain ``execute``, or saves.

What you will learn:

* ``execute`` with a variant pack keyed by graph tensors, by uids, or as an ordered
  buffer list with ``tensor_uids``; ``execute_plan_at_index``; the cost of
  ``cudnn.set_stream``;
* how each compares with an eager PyTorch SDPA call and a CUDA-graph replay;
* when the native CUDA-graph API works, and what an update costs against a new populate.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: one decode graph, every way to launch it
# ----------------------------------------------------
# One query token per sequence, 8 sequences of 512 cached tokens, 8 heads of 128: a
# kernel of a few microseconds. The graph is built once; then each launch path runs it
# and is checked against PyTorch's attention in fp32.
import cudnn
import torch

B, H, S_KV, D = 8, 8, 512, 128  # batch, heads, cached tokens, head dim; B×H×S×D
q, k, v = (torch.randn(B, H, n, D, device="cuda").bfloat16() for n in (1, S_KV, S_KV))
o = torch.empty_like(q)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
BF16, F32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
TYPES = dict(io_data_type=BF16, intermediate_data_type=F32, compute_data_type=F32)
g = cudnn.pygraph(handle=handle, **TYPES)
Q, K, V = g.tensor_like(q, name="q"), g.tensor_like(k, name="k"), g.tensor_like(v)
O, _ = g.sdpa(name="decode", q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False)
O.set_output(True)
O.set_dim(list(o.shape))
O.set_stride(list(o.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())

# %%
# Each launch path is a zero-argument function doing exactly what a serving loop would
# per token: a pack keyed by graph tensors, by their UIDs, or an ordered buffer list
# with ``tensor_uids``; ``execute_plan_at_index`` with the plan's index; and
# ``cudnn.set_stream`` on torch's current stream every call (needed only on a change).
by_tensor = {Q: q, K: k, V: v, O: o}
by_uid = {t.get_uid(): data for t, data in by_tensor.items()}
uids, buffers = list(by_uid), list(by_uid.values())


def set_stream_every_call():
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    g.execute(by_tensor, ws, handle=handle)


paths = {
    "execute, pack keyed by tensors": lambda: g.execute(by_tensor, ws, handle=handle),
    "execute, pack keyed by uids": lambda: g.execute(by_uid, ws, handle=handle),
    "execute, buffer list + tensor_uids": lambda: g.execute(
        buffers, ws, handle=handle, tensor_uids=uids
    ),
    "execute_plan_at_index(0)": lambda: g.execute_plan_at_index(
        by_tensor, ws, 0, handle=handle
    ),
    "set_stream + execute, every call": set_stream_every_call,
}

# %%
# One more path: a CUDA graph replay of the same call, captured by PyTorch, the floor
# for one launch. The graph runs once before the capture (a first call may do one-time
# set-up that a capture cannot record); inside the capture, the handle is bound to the
# capture stream, and afterwards back to the current one. Then every path, the replay
# included, runs once and is checked.
g.execute(by_tensor, ws, handle=handle)  # once before the capture
replay_graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(replay_graph):
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    g.execute(by_tensor, ws, handle=handle)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
paths["CUDA graph replay (stream capture)"] = replay_graph.replay
for launch in paths.values():
    o.fill_(float("nan"))  # so that a path that wrote nothing cannot pass
    launch()
    torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)

# %%
# Measuring what each launch path adds, per call
# ----------------------------------------------
# Every path's output joins the page's record as a check first (relative L2 error
# against the same fp32 reference), and PyTorch's own SDPA call joins the paths. They
# are timed the one way the site times a host cost,
# :func:`~cudnn_guide.measure.compare.compare_host`: after a synchronize, 400
# back-to-back calls per path per round in 5 batches, each batch timed with
# ``perf_counter`` and divided by its calls, in 11 interleaved rounds of shuffled
# order. Per call means one launch among those back-to-back calls; for the replay, one
# replay of a graph that captured one call (nothing amortised).
#
# The host cost of a plain ``graph.execute`` is one process's draw; the site's number
# for it is measured on the :ref:`CUDA-graphs page
# <sphx_glr_auto_examples_plot_08_cuda_graphs.py>`, for its matmul graph, with the same
# ``compare_host`` in five fresh processes. This page, in one process, measures only
# what each path adds to (or, negative, saves on) the tensor-keyed ``execute`` of this
# decode graph: in each round, the path's host µs per call minus that ``execute``'s,
# then the median over the rounds with a bootstrap 95% interval, and the ratio of the
# two times with its verdict. Pairing within a round cancels the host's drift between
# rounds.
import statistics

from cudnn_guide import check
from cudnn_guide.measure import compare

# the stream the handle is bound to since the capture
stream = torch.cuda.current_stream().cuda_stream

check.poison(o)
g.execute(by_tensor, ws, handle=handle)
checks = [check.check(o, ref, name="decode graph")]
paths["PyTorch SDPA (default dispatch)"] = lambda: (
    torch.nn.functional.scaled_dot_product_attention(q, k, v)
)
for name, fn in paths.items():
    check.poison(o)
    out = fn()
    checks.append(check.check(o if out is None else out, ref, name=name))
# which kernel PyTorch's default dispatch runs: its output and the graph's, bit for bit
g.execute(by_tensor, ws, handle=handle)
sdpa_same = torch.equal(paths["PyTorch SDPA (default dispatch)"](), o)
same_words = "equals" if sdpa_same else "does not equal"
print(
    f"PyTorch SDPA (default dispatch) {same_words} the cuDNN graph's output bit for bit"
)

BASE = "execute, pack keyed by tensors"
host = compare.compare_host(paths, candidate=BASE, rounds=11, calls=400)


adds = {name: host.added(name) for name in paths if name != BASE}

import pandas as pd

from cudnn_guide.report import html_table

VERDICT = {"faster": "more time", "slower": "less time", "tie": "tie"}
rows = []
for name, e in adds.items():
    s = host.versus[name]
    rows.append(
        {
            "launch path": name,
            "host µs added per call": e["value"],
            "95% interval": f"{e['low']:+.2f} to {e['high']:+.2f}",
            "time / tensor-keyed execute's": (
                f"{s['value']:.2f}× ({s['low']:.2f}–{s['high']:.2f})"
            ),
            "verdict": VERDICT[s["verdict"]],
        }
    )
html_table(
    pd.DataFrame(rows).sort_values("host µs added per call"),
    {"host µs added per call": "{:+.2f}"},
)

# %%
import matplotlib.pyplot as plt

names = sorted(adds, key=lambda n: adds[n]["value"])
values = [adds[n]["value"] for n in names]
errors = [
    [adds[n]["value"] - adds[n]["low"] for n in names],
    [adds[n]["high"] - adds[n]["value"] for n in names],
]
fig, ax = plt.subplots(figsize=(8, 0.9 + 0.45 * len(names)), layout="constrained")
ax.barh(names, values, xerr=errors, capsize=3, color="#8c8c8c")
ax.axvline(0, color="#76b900", label="tensor-keyed execute")
ax.invert_yaxis()
ax.set_xlabel(
    f"host µs per call added (median of {host.rounds} paired rounds, 95% interval)"
)
ax.set_title(f"launching one decode attention call ({B}×{H} heads, {S_KV} keys)")
ax.legend(loc="lower right")
plt.show()

# %%
# Measuring the frontend's native CUDA-graph API
# ----------------------------------------------
# ``populate_cuda_graph(handle, {uid: device pointer}, workspace pointer,
# cudaGraph_t)`` records the backend plan's kernels into an empty CUDA graph that
# *you* own and instantiate; ``update_cuda_graph`` rewrites the pointers in that graph
# (new buffers), after which ``cudaGraphExecUpdate`` refreshes the instantiated graph
# without a new capture. The graph handles come from CUDA's runtime API
# (``cuda-python``). The updates alternate between two buffer sets of identical shapes
# and strides (the originals, and copies with a new output), so each one re-points
# every tensor; a new graph (create, populate, instantiate) is timed 20 times beside
# them. Both are host costs with rare slow calls, so each is reported as its median
# with its quartiles, and the slow calls (above twice the median) are counted apart.
native = {}
try:
    from cuda.bindings import runtime as cudart
except ImportError as exc:
    cudart = None
    native["skipped"] = f"needs cuda-python (pip install cuda-python): {exc}"
    print(native["skipped"])


def summary(us):
    """Median and quartiles of host times (µs); how many took over twice the median."""
    q1, median, q3 = statistics.quantiles(us, n=4)
    slow = [x for x in us if x > 2 * median]
    return {
        "median": median,
        "q1": q1,
        "q3": q3,
        "n": len(us),
        "slow": len(slow),
        "slowest": max(us),
    }


def describe(x):
    return (
        f"median {x['median']:.1f} µs (quartiles {x['q1']:.1f}–{x['q3']:.1f}) over "
        f"{x['n']}; {x['slow']} above twice the median (slowest {x['slowest']:.0f})"
    )


def native_cuda_graph():
    """populate, launch, update, launch again; check each launch; return the times."""
    import time

    def ok(result):
        err, *value = result if isinstance(result, tuple) else (result,)
        if err != cudart.cudaError_t.cudaSuccess:
            raise RuntimeError(f"CUDA runtime: {err}")
        return value[0] if value else None

    pointers = {t.get_uid(): data.data_ptr() for t, data in by_tensor.items()}
    cuda_graph = ok(cudart.cudaGraphCreate(0))
    t0 = time.perf_counter()
    g.populate_cuda_graph(handle, pointers, ws.data_ptr(), int(cuda_graph))
    native["populate_ms"] = 1e3 * (time.perf_counter() - t0)
    graph_exec = ok(cudart.cudaGraphInstantiate(cuda_graph, 0))
    check.poison(o)
    ok(cudart.cudaGraphLaunch(graph_exec, stream))
    torch.cuda.synchronize()
    checks.append(check.check(o, ref, name="populate_cuda_graph, launched"))
    print(checks[-1])

    o2 = torch.empty_like(o)  # a second buffer set: copies of q, k, v and a new output
    copies = {Q: q.clone(), K: k.clone(), V: v.clone(), O: o2}
    assert all(
        copies[t].shape == d.shape and copies[t].stride() == d.stride()
        for t, d in by_tensor.items()
    )
    moved = {t.get_uid(): data.data_ptr() for t, data in copies.items()}
    updates = []
    for i in range(50):  # alternate: every update re-points all four tensors
        t0 = time.perf_counter()
        target = (moved, pointers)[i % 2]
        g.update_cuda_graph(handle, target, ws.data_ptr(), int(cuda_graph))
        ok(cudart.cudaGraphExecUpdate(graph_exec, cuda_graph))
        updates.append(1e6 * (time.perf_counter() - t0))
    check.poison(o)  # 50 updates: the graph points at the original buffers again
    ok(cudart.cudaGraphLaunch(graph_exec, stream))
    torch.cuda.synchronize()
    checks.append(
        check.check(o, ref, name="update_cuda_graph, back to the original buffers")
    )
    print(checks[-1])
    g.update_cuda_graph(handle, moved, ws.data_ptr(), int(cuda_graph))
    ok(cudart.cudaGraphExecUpdate(graph_exec, cuda_graph))
    check.poison(o2)
    ok(cudart.cudaGraphLaunch(graph_exec, stream))
    torch.cuda.synchronize()
    checks.append(check.check(o2, ref, name="update_cuda_graph, new output buffer"))
    print(checks[-1])
    native["update_us"] = summary(updates)
    print(f"populate_cuda_graph: {native['populate_ms']:.2f} ms once")
    print(f"update_cuda_graph + cudaGraphExecUpdate: {describe(native['update_us'])}")
    fresh = []
    for _ in range(20):  # a new graph each time: create, populate, instantiate
        t0 = time.perf_counter()
        new_graph = ok(cudart.cudaGraphCreate(0))
        g.populate_cuda_graph(handle, pointers, ws.data_ptr(), int(new_graph))
        new_exec = ok(cudart.cudaGraphInstantiate(new_graph, 0))
        fresh.append(1e6 * (time.perf_counter() - t0))
        ok(cudart.cudaGraphExecDestroy(new_exec))
        ok(cudart.cudaGraphDestroy(new_graph))
    native["new_graph_us"] = fresh_summary = summary(fresh)
    print(f"a new graph (create, populate, instantiate): {describe(fresh_summary)}")
    return native


if cudart is not None:
    try:
        native_cuda_graph()
    except Exception as exc:  # cuDNN's or CUDA's refusal, shown as it is
        native["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        print(f"native CUDA-graph API: {native['error']}")

# %%
# Conclusions
# -----------
# Computed from the data when the page is recorded.
from cudnn_guide.report.prose import Prose


def signed(e):
    """A difference with its interval: '+0.41 µs (+0.30 to +0.52)'."""
    return f"{e['value']:+.2f} µs ({e['low']:+.2f} to {e['high']:+.2f})"


def judged(name):
    """A path's added time, its interval, and what the interval says."""
    e, ratio = adds[name], host.versus[name]["verdict"]
    if e["low"] <= 0 <= e["high"]:
        return f"{signed(e)}, no difference this measurement resolves"
    word = "more host time" if e["low"] > 0 else "less host time"
    if ratio == "tie":  # the table's verdict: the ratio against the tie band
        word += f", though a tie by the ratio (tie band ±{100 * host.tie_band:.1f}%)"
    return f"{signed(e)}, {word}"


STREAM, SDPA = "set_stream + execute, every call", "PyTorch SDPA (default dispatch)"
REPLAY = "CUDA graph replay (stream capture)"
others = [n for n in adds if n.startswith("execute")]  # the frontend's other calls
cheapest = min(adds, key=lambda n: adds[n]["value"])
sentences = [
    "Per call, against execute with a tensor-keyed pack, in this process (median of "
    "the per-round differences, bootstrap 95% interval): "
    + "; ".join(f"{n} {judged(n)}" for n in others)
    + ".",
    "set_stream on every call, against setting it once: the tensor-keyed execute is "
    f"{host.describe(STREAM)}; per call, set_stream adds {judged(STREAM)}. That "
    "includes the torch.cuda.current_stream() lookup that feeds it, which the path "
    "also does on every call.",
    "Against the tensor-keyed execute, a replay of the CUDA graph holding one call: "
    f"{judged(REPLAY)} per replay (one call per replay, nothing amortised); an "
    f"eager PyTorch SDPA call: {judged(SDPA)}. "
    + (
        "PyTorch's call returns the cuDNN graph's output bit for bit: its default "
        "dispatch here is cuDNN's attention, so the difference is PyTorch's own "
        "launch path around the same kernel. "
        if sdpa_same
        else "PyTorch's call does not return the cuDNN graph's output bit for bit: "
        "its default dispatch here runs another kernel. "
    )
    + (
        f"The cheapest path is {cheapest}."
        if adds[cheapest]["value"] < 0
        else "No path is cheaper than the tensor-keyed execute."
    ),
    "These are differences within one process, paired per round. The host cost of a "
    "plain graph.execute is one process's draw of the builder's host levels; the "
    "CUDA-graphs page measures it the same way (compare_host) in fresh processes, "
    "and that is the site's number.",
]
if "update_us" in native:
    upd, new = native["update_us"], native.get("new_graph_us")
    against = (
        ""
        if new is None
        else "; a new graph (create, populate, instantiate) takes "
        f"{new['median']:.0f} µs "
        f"(median of {new['n']}, quartiles {new['q1']:.0f}–{new['q3']:.0f}): "
        + (
            f"updating is {new['median'] / upd['median']:.1f}× cheaper"
            if new["median"] >= upd["median"]
            else f"updating costs {upd['median'] / new['median']:.1f}× as much"
        )
    )
    sentences.append(
        "The native CUDA-graph API works for this backend plan; re-pointing the "
        "graph at another buffer set (update_cuda_graph + cudaGraphExecUpdate) costs "
        f"{upd['median']:.0f} µs (median of {upd['n']}, alternating two sets; "
        f"quartiles {upd['q1']:.0f}–{upd['q3']:.0f}, {upd['slow']} of them above "
        f"twice the median){against}."
    )
elif native:
    sentences.append(
        "The native CUDA-graph API did not run here: "
        f"{native.get('error') or native.get('skipped')}"
    )

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

headline(
    "execute, buffer list + tensor_uids: host time added over a tensor-keyed pack",
    unit="µs/call (signed)",
    **adds["execute, buffer list + tensor_uids"],
    interval="bootstrap 95% CI of the median paired difference",
)
comparison(
    "host time: set_stream once, speed-up over set_stream every call",
    host,
    "set_stream + execute, every call",
)
# sphinx_gallery_end_ignore
Prose(*sentences)
