"""
A cuDNN graph inside a PyTorch model: custom op, autograd, torch.compile and CUDA graphs
========================================================================================

A graph that runs on its own is half the job; a model needs it as a PyTorch operator
that autograd differentiates, ``torch.compile`` traces without graph breaks, and a CUDA
graph can capture. This page writes that operator for causal attention: cuDNN's
``sdpa`` and ``sdpa_backward`` graphs wrapped with ``torch.library.custom_op``, checked
against PyTorch, then traced by ``torch.compile`` and captured in a CUDA graph. A
training step of it timed against what frontend 1.32 ships for the same job
(``torch.ops.cudnn.sdpa_fwd``), PyTorch's own SDPA and FlashAttention-4, on the GPU and
by the wall clock of a training loop, is on
:ref:`a page of its own <sphx_glr_auto_examples_plot_34_custom_op_vs_shipped.py>`.

What you will learn:

* how ``custom_op``, ``register_fake`` and ``register_autograd`` turn two cuDNN graphs
  (the forward writing the softmax statistics, the backward reading them) into one
  differentiable operator;
* why each graph is cached by the shapes and strides of its buffers, and why the op
  binds the handle to torch's current stream on every call (so that a CUDA-graph
  capture records it);
* how the guide's packaged op refuses bad input at its boundary;
* that the op compiles with ``fullgraph=True`` and replays inside a CUDA graph.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
environment.collect()  # the GPU and the software this page ran on

# %%
# The lesson: causal attention as a differentiable PyTorch operator
# -----------------------------------------------------------------
# ``run`` builds a graph once per layout of its buffers (the five build steps), then
# executes it on torch's current stream. The forward graph writes O and the softmax
# statistics (fp32, one per query row); the backward graph reads both and writes dQ, dK
# and dV. As written, the op takes bf16 B×H×S×D tensors whose head dim is contiguous.
import cudnn
import torch
from torch import Tensor

handle, graphs = cudnn.create_handle(), {}  # graphs: by each buffer's shape, strides
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT  # causal: query i sees the keys j <= i
MASK = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)


def run(declare, *buffers):
    if (key := (declare, *[(t.shape, t.stride()) for t in buffers])) not in graphs:
        g = cudnn.pygraph(
            handle=handle,
            io_data_type=cudnn.data_type.BFLOAT16,
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
        )
        tensors = declare(g, *buffers)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        graphs[key] = lambda xs: g.execute(dict(zip(tensors, xs)), ws, handle=handle)
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    graphs[key](buffers)  # the built graph, executed on these buffers
    return buffers


def forward_graph(g, q, k, v, o, stats):
    Q = g.tensor_like(q)
    K = g.tensor_like(k)
    V = g.tensor_like(v)
    O, S = g.sdpa(Q, K, V, attn_scale=q.shape[-1] ** -0.5, generate_stats=True, **MASK)
    O.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    O.set_dim(list(o.shape)).set_stride(list(o.stride()))
    S.set_output(True).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
    return Q, K, V, O, S.set_data_type(cudnn.data_type.FLOAT)


def backward_graph(g, q, k, v, o, stats, d_o, dq, dk, dv):
    Q = g.tensor_like(q)
    K = g.tensor_like(k)
    V = g.tensor_like(v)
    O = g.tensor_like(o)
    S = g.tensor_like(stats)
    dO = g.tensor_like(d_o)
    scale = q.shape[-1] ** -0.5
    dQ, dK, dV = g.sdpa_backward(Q, K, V, O, dO, S, attn_scale=scale, **MASK)
    dQ.set_output(True).set_dim(list(dq.shape)).set_stride(list(dq.stride()))
    dK.set_output(True).set_dim(list(dk.shape)).set_stride(list(dk.stride()))
    dV.set_output(True).set_dim(list(dv.shape)).set_stride(list(dv.stride()))
    return Q, K, V, O, S, dO, dQ, dK, dV


@torch.library.custom_op("mylib::cudnn_attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    return run(forward_graph, q, k, v, *empty_outputs(q))[3:]


@torch.library.custom_op("mylib::cudnn_attention_backward", mutates_args=())
def attention_backward(
    q: Tensor, k: Tensor, v: Tensor, o: Tensor, stats: Tensor, d_o: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    return run(backward_graph, q, k, v, o, stats, d_o, *empty_grads(q, k, v))[6:]


@attention.register_fake  # shapes and dtypes, no data: what torch.compile traces
def empty_outputs(q, *_):
    return q.new_empty(q.shape), q.new_empty(*q.shape[:-1], 1, dtype=torch.float32)


@attention_backward.register_fake
def empty_grads(q, k, v, *_):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


attention.register_autograd(  # the backward, and what it needs saved: q, k, v, o, stats
    lambda ctx, d_o, _: attention_backward(*ctx.saved_tensors, d_o.contiguous()),
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs, *output),
)

# %%
# One training step through the op, checked against PyTorch in fp32: the output and the
# gradients, element by element.
b, h, s, d = 4, 16, 2048, 128  # batch, heads, tokens, head dim: B×H×S×D, contiguous
q, k, v, d_o = torch.randn(4, b, h, s, d, device="cuda", dtype=torch.bfloat16)
leaves = [t.clone().requires_grad_() for t in (q, k, v)]
ref_leaves = [t.float().requires_grad_() for t in (q, k, v)]
out, _ = attention(*leaves)
ref = torch.nn.functional.scaled_dot_product_attention(*ref_leaves, is_causal=True)
torch.autograd.backward([out, ref], [d_o, d_o.float()])  # both training steps
for x, y in zip([out, *(t.grad for t in leaves)], [ref, *(r.grad for r in ref_leaves)]):
    torch.testing.assert_close(x.float(), y, atol=2e-2, rtol=2e-2)  # O, dQ, dK, dV

# %%
# Measuring the op: checks, the graph cache, torch.compile and CUDA graphs
# ------------------------------------------------------------------------
# The same results through the guide's checks (they join the page's record), then the
# graphs one training step left in the cache.
from cudnn_guide import check

checks = [check.check(out, ref, name="op forward")]
checks += [
    check.check(t.grad, r.grad, name=f"op backward d{n}")
    for t, r, n in zip(leaves, ref_leaves, "qkv")
]
for c in checks:
    print(c)
print(f"graphs cached after one training step: {len(graphs)}")

# %%
# Bad input, refused at the boundary
# ----------------------------------
# The lesson's op trusts its caller. The guide ships the same op with checks at its
# boundary (``cudnn_guide.graphs.torch_ops.attention``): bad input raises an
# ``InputError`` that names the problem, before any cuDNN call.
import pandas as pd

from cudnn_guide import InputError
from cudnn_guide.graphs import torch_ops
from cudnn_guide.report import html_table

refused = []
for label, bad in (
    ("CPU tensor", lambda: torch_ops.attention(q.cpu(), k.cpu(), v.cpu())),
    ("float32", lambda: torch_ops.attention(q.float(), k.float(), v.float())),
    ("head dim not contiguous", lambda: torch_ops.attention(q.transpose(-1, -2), k, v)),
):
    try:
        bad()
    except InputError as exc:
        refused.append(
            {"input": label, "what the packaged op says": f"InputError: {exc}"}
        )
    else:
        refused.append({"input": label, "what the packaged op says": "no error"})
html_table(pd.DataFrame(refused))

# %%
# A new layout builds a new graph; the same layout reuses it
# ----------------------------------------------------------
before = len(graphs)
attention(q, k, v)
same = len(graphs)
# same B×H×S×D shape, strides of a B×S×H×D buffer: H and S swap places in memory,
# the head dim stays innermost
q_other = q.transpose(1, 2).contiguous().transpose(1, 2)
checks.append(
    check.check(attention(q_other, k, v)[0], ref, name="op, Q in another layout")
)
after = len(graphs)
print(f"cached graphs: {before}, then {same} after the same call again,")
print(f"then {after} after Q with other strides (checked above)")

# %%
# torch.compile with ``fullgraph=True``
# -------------------------------------
# A small attention block around the op: projections, the op, an output projection. With
# ``fullgraph=True`` any graph break is an error; ``torch._dynamo.explain`` counts them.
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim=h * d, heads=h):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        n, t, _ = x.shape
        qkv = self.qkv(x).view(n, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q_, k_, v_ = qkv.contiguous()
        y = attention(q_, k_, v_)[0]
        return self.out(y.transpose(1, 2).reshape(n, t, -1))


block = Attention().cuda().to(torch.bfloat16)
x = torch.randn(b, s, h * d, device="cuda", dtype=torch.bfloat16)
explained = torch._dynamo.explain(block)(x)
print(f"graphs: {explained.graph_count}, graph breaks: {explained.graph_break_count}")
compiled = torch.compile(block, fullgraph=True)
y_compiled = compiled(x)
y_eager = block(x)
checks.append(
    check.check(y_compiled, y_eager.float(), name="compiled block vs eager block")
)
print(checks[-1])

# %%
# Inside a CUDA graph
# -------------------
# After a warm-up call (which builds and caches the graphs), the op only executes
# prebuilt plans on torch's current stream, so stream capture records it.
static_x = x.clone()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.no_grad():
    block(static_x)
torch.cuda.current_stream().wait_stream(side)
cuda_graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(cuda_graph), torch.no_grad():
    static_y = block(static_x)
static_x.copy_(torch.randn(b, s, h * d, device="cuda", dtype=torch.bfloat16))
cuda_graph.replay()
with torch.no_grad():
    expected = block(static_x).float()
checks.append(
    check.check(static_y, expected, name="CUDA-graph replay vs eager, new input")
)
print(checks[-1])

# %%
# Every check on this page, as the share of its tolerance that its error used: the
# relative error against the reference divided by the tolerance (above 1 it fails).
# Each bar is labelled with the relative error itself.
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
bars = ax.barh([c.name for c in checks], [c.rel_error / c.tolerance for c in checks])
ax.bar_label(bars, [f"{c.rel_error:.1e}" for c in checks], padding=3, fontsize=8)
ax.set_xlim(0, 1)
ax.invert_yaxis()
ax.set_xlabel("relative error ÷ tolerance (a check fails above 1)")
ax.set_title("the op's checks: how much of each tolerance the error used")
plt.show()

# %%
# Conclusions
# -----------
from cudnn_guide.report.prose import Prose

if same == before and after == same + 1:
    caching = (
        "reuses its graphs for a layout it has seen and builds one for a new layout"
    )
else:
    caching = (
        f"left {before}, {same} and {after} cached graphs after the first step, the "
        "same call again and a new layout"
    )
refusals = sum(r["what the packaged op says"] != "no error" for r in refused)
breaks = explained.graph_break_count
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline

headline("graph breaks under fullgraph compile", explained.graph_break_count, "count")
# sphinx_gallery_end_ignore

Prose(
    f"The op traces with {breaks} graph break{'' if breaks == 1 else 's'} under "
    "torch.compile(fullgraph=True), replays inside a CUDA graph (both checked above), "
    f"and {caching}.",
    f"The guide's packaged op refused {refusals} of the {len(refused)} bad inputs "
    "above with an InputError.",
)
