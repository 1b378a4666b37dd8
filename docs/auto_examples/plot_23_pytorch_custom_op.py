"""
A cuDNN graph inside a PyTorch model: custom op, autograd, torch.compile and CUDA graphs
========================================================================================

A graph that runs on its own is half the job; a model needs it as a PyTorch operator that
autograd differentiates, ``torch.compile`` traces without graph breaks, and a CUDA graph can
capture. ``torch.library.custom_op`` gives all three, provided the operator has

* a **fake** (meta) implementation: output shapes and dtypes without running anything, which
  is what ``torch.compile`` traces;
* a registered **autograd** formula: here cuDNN's ``sdpa_backward`` graph, fed by the
  statistics the forward graph saved;
* **graph caches** keyed by everything that changes the graph (shapes, strides, dtype,
  device, mask), so no call rebuilds, and a capture only replays prebuilt work.

The operator lives in ``cudnn_guide.graphs.torch_ops``; its cuDNN calls are printed below. The page
checks it, compiles it with ``fullgraph=True``, captures it, and races it against what
frontend 1.32 ships for the same job (``torch.ops.cudnn.sdpa_fwd``) and PyTorch's own SDPA.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
print(env.stamp())

# %%
# The operator's cuDNN graphs
# ---------------------------
# The forward declares SDPA with ``generate_stats=True``; the backward declares
# ``sdpa_backward`` over the saved O and statistics. Both build with heuristics A then
# FALLBACK, once per key.
import inspect

from cudnn_guide.graphs import torch_ops

print(inspect.getsource(torch_ops.forward_graph))
print(inspect.getsource(torch_ops.backward_graph))

# %%
# Registering it with PyTorch: ``custom_op``, ``register_fake``, ``register_autograd``.
print(inspect.getsource(torch_ops.register_ops))

# %%
# Forward and backward, checked
# -----------------------------
import torch

from cudnn_guide import check

B, H, S, D = 4, 16, 2048, 128
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v, d_o = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
out = torch_ops.attention(*leaves, causal=True)
out.backward(d_o)
ref_leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
with check.full_precision():
    ref = torch.nn.functional.scaled_dot_product_attention(*ref_leaves, is_causal=True)
    ref.backward(d_o.float())
checks = [check.check(out, ref, name="op forward")]
checks += [check.check(a.grad, r.grad, name=f"op backward d{n}") for a, r, n in zip(leaves, ref_leaves, "qkv")]
for c in checks:
    print(c)
print(f"graphs cached after one training step: {torch_ops.cached_graphs()}")

# %%
# Bad input is refused at the operator's boundary
# -----------------------------------------------
from cudnn_guide import InputError

for label, bad in (("CPU tensor", lambda: torch_ops.attention(q.cpu(), k.cpu(), v.cpu())),
                   ("float32", lambda: torch_ops.attention(q.float(), k.float(), v.float())),
                   ("head dim not contiguous", lambda: torch_ops.attention(q.transpose(-1, -2), k, v))):
    try:
        bad()
    except InputError as exc:
        print(f"{label}: InputError: {exc}")

# %%
# A new layout builds a new graph; the same layout reuses it
# ----------------------------------------------------------
before = torch_ops.cached_graphs()
torch_ops.attention(q, k, v)
same = torch_ops.cached_graphs()
q_other = q.transpose(1, 2).contiguous().transpose(1, 2)  # same shape, S-major strides
checks.append(check.check(torch_ops.attention(q_other, k, v), ref, name="op, Q in another layout"))
print(f"cached graphs: {before} → {same} after the same call again → {torch_ops.cached_graphs()} after Q with "
      "other strides (a new graph, checked above)")

# %%
# torch.compile with ``fullgraph=True``
# -------------------------------------
# A small attention block around the op: projections, the op, an output projection. With
# ``fullgraph=True`` any graph break is an error; ``torch._dynamo.explain`` counts them.
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim=H * D, heads=H):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4).contiguous()
        y = torch_ops.attention(q, k, v, causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, -1))


block = Attention().cuda().to(torch.bfloat16)
x = torch.randn(B, S, H * D, device="cuda", dtype=torch.bfloat16, generator=gen)
explained = torch._dynamo.explain(block)(x)
print(f"graphs: {explained.graph_count}, graph breaks: {explained.graph_break_count}")
compiled = torch.compile(block, fullgraph=True)
y_compiled = compiled(x)
y_eager = block(x)
checks.append(check.check(y_compiled, y_eager.float(), name="compiled block vs eager block"))
print(checks[-1])

# %%
# Inside a CUDA graph
# -------------------
# After a warm-up call (which builds and caches the graphs), the op only executes prebuilt
# plans on torch's current stream, so stream capture records it.
static_x = x.clone()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.no_grad():
    block(static_x)
torch.cuda.current_stream().wait_stream(side)
cuda_graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(cuda_graph), torch.no_grad():
    static_y = block(static_x)
static_x.copy_(torch.randn(B, S, H * D, device="cuda", dtype=torch.bfloat16, generator=gen))
cuda_graph.replay()
with torch.no_grad():
    checks.append(check.check(static_y, block(static_x).float(), name="CUDA-graph replay vs eager, new input"))
print(checks[-1])

# %%
# Against what frontend 1.32 ships, and PyTorch
# ---------------------------------------------
# A training step of attention alone (forward, then backward of ``d_o``), each checked:
#
# * this page's op;
# * ``torch.ops.cudnn.sdpa_fwd`` from ``cudnn.sdpa.fwd.torch_op`` (differentiable, with
#   ``return_lse=True``);
# * PyTorch's SDPA with the cuDNN backend, and with the flash backend (each forced).
import cudnn.sdpa.fwd.torch_op  # noqa: F401  (registers torch.ops.cudnn.sdpa_fwd)
from torch.nn.attention import SDPBackend

from cudnn_guide.measure import baselines, compare

leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]


def step(forward):
    def run():
        for t in leaves:
            t.grad = None
        forward(*leaves).backward(d_o)
    return run


def frontend_op(q_, k_, v_):
    return torch.ops.cudnn.sdpa_fwd(q_, k_, v_, D ** -0.5, is_causal=True, return_lse=True)[0]


contenders, unavailable = {}, {}
for name, forward in {"this page's op": lambda q_, k_, v_: torch_ops.attention(q_, k_, v_),
                      "torch.ops.cudnn.sdpa_fwd (frontend 1.32)": frontend_op,
                      "PyTorch SDPA (cuDNN backend)": baselines.forced_sdpa(SDPBackend.CUDNN_ATTENTION, is_causal=True),
                      "PyTorch SDPA (flash backend)": baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)}.items():
    if why := baselines.admit(contenders, name, step(forward),
                              check=lambda _, name=name: check.check(leaves[0].grad, ref_leaves[0].grad, name=f"{name}: dQ")):
        unavailable[name] = why
CAND = "this page's op"
flops = 3.5 * 4 * B * H * S * S * D / 2  # forward + backward (2.5× the forward), causal
training = compare.compare(contenders, candidate=CAND, l2="cold", rounds=9, flops=flops, tag="training step")
print(training)

# %%
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison
plot_comparison(training, "TFLOP/s", xlabel="TFLOP/s, attention forward + backward",
              title=f"causal attention training step, {B}×{H} heads × {S} tokens, d={D}")
plt.show()

# %%
# Takeaways
# ---------
print(f"* The op traces with {explained.graph_break_count} graph breaks under torch.compile(fullgraph=True), "
      "replays inside a CUDA graph, and builds a new cuDNN graph only for a new layout.")
print(f"* Its training step runs at {training.estimate(CAND, 'TFLOP/s')['value']:.0f} TFLOP/s; against the "
      f"fastest alternative it is {training.describe()}.")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
comparison("training step: speed-up over best alternative", training)
headline("graph breaks under fullgraph compile", explained.graph_break_count, "count")
# sphinx_gallery_end_ignore
