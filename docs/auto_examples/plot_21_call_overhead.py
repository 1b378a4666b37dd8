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
Here, in one process, each path is timed against this decode graph's ``execute``.

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
# against the same fp32 reference; ``call_overhead.check_paths``), and PyTorch's own
# SDPA call joins the paths. They are timed the one way the site times a host cost,
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
# then the median over the rounds with a bootstrap 95% interval (``host.added``), and
# the ratio of the two times with its verdict. Pairing within a round cancels the
# host's drift between rounds.
from cudnn_guide import check
from cudnn_guide.measure import compare
from cudnn_guide.studies import call_overhead

check.poison(o)
g.execute(by_tensor, ws, handle=handle)
checks = [check.check(o, ref, name="decode graph")]
SDPA = "PyTorch SDPA (default dispatch)"
paths[SDPA] = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)
checks += call_overhead.check_paths(paths, o, ref)  # o poisoned before each path
# which kernel PyTorch's default dispatch runs: its output and the graph's, bit for bit
g.execute(by_tensor, ws, handle=handle)
sdpa_same = torch.equal(paths[SDPA](), o)
same_words = "equals" if sdpa_same else "does not equal"
print(f"{SDPA} {same_words} the cuDNN graph's output bit for bit")

BASE = "execute, pack keyed by tensors"
host = compare.compare_host(paths, candidate=BASE, rounds=11, calls=400)
adds = {name: host.added(name) for name in paths if name != BASE}
call_overhead.added_table(host, adds)

# %%
import matplotlib.pyplot as plt

title = f"launching one decode attention call ({B}×{H} heads, {S_KV} keys)"
call_overhead.plot_added(adds, host.rounds, title=title)
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
# with its quartiles, and the slow calls (above twice the median) are counted apart
# (``native_cuda_graph`` in ``cudnn_guide/studies/call_overhead.py``; slowest: µs).
stream = torch.cuda.current_stream().cuda_stream  # the handle's since the capture
native = call_overhead.native_cuda_graph(
    g, handle, by_tensor, ws, output=O, reference=ref, stream=stream, checks=checks
)

# %%
# Conclusions
# -----------
# Computed from the data when the page is recorded.
from cudnn_guide.report.prose import Prose

judged = lambda name: call_overhead.added_verdict(adds[name], host, name)
STREAM = "set_stream + execute, every call"
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
if native_sentence := call_overhead.native_text(native):
    sentences.append(native_sentence)

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
