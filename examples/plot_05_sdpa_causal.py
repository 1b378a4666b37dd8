"""
Causal scaled dot-product attention
===================================

cuDNN's fused attention (flash-attention style: the S×S score matrix never touches
memory) as one frontend graph, with causal masking written the current way, checked
against PyTorch, then measured from 1k to 16k tokens against each of PyTorch's own SDPA
backends and against FlashAttention-4.

What you will learn:

* the current causal-mask API: ``diagonal_alignment=TOP_LEFT`` with
  ``diagonal_band_right_bound=0`` (``use_causal_mask`` is deprecated), and
  ``generate_stats`` (``False`` for inference; it replaces the deprecated
  ``is_inference``);
* the five build steps, the variant pack and ``execute``;
* how to check attention against an fp32 PyTorch reference;
* how to force PyTorch's SDPA backends one at a time (flash, memory-efficient, cuDNN) so
  each baseline is what it says it is, and how cuDNN compares with FlashAttention-4
  (a beta; FlashAttention-3 is not measured here; PyTorch's flash backend is FA2);
* how the throughput develops from 1k to 16k tokens at head dims 64 and 128.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: causal attention as one cuDNN graph
# -----------------------------------------------
# 4 sequences of 4096 tokens, 16 heads of dimension 128, bf16, laid out B×H×S×D. The
# ``sdpa`` node takes Q, K, V and the score scale. Causal masking is a diagonal band:
# ``diagonal_alignment=TOP_LEFT`` with ``diagonal_band_right_bound=0`` lets query ``i``
# see keys ``j ≤ i``. ``generate_stats=False`` is inference: no softmax statistics are
# written for a backward pass. The graph is built in five steps: validate, lower to an
# operation graph, ask the heuristics for plans (mode A, then the fallback list), check
# that one is supported, and build it.
import cudnn
import torch
import torch.nn.functional as F

torch.manual_seed(0)
b, h, s, d = 4, 16, 4096, 128  # batch, heads, tokens, head dim
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in "qkv")
o = torch.empty_like(q)  # B×H×S×D, written by the graph

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)


def causal_sdpa(q, k, v, o):
    """Declare and build causal attention reading q, k, v and writing o."""
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    Q = g.tensor_like(q, name="q")
    K = g.tensor_like(k, name="k")
    V = g.tensor_like(v, name="v")
    O, _stats = g.sdpa(
        q=Q,
        k=K,
        v=V,
        generate_stats=False,
        attn_scale=q.shape[-1] ** -0.5,
        compute_data_type=cudnn.data_type.FLOAT,
        diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
        diagonal_band_right_bound=0,
    )
    O.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    O.set_dim(list(o.shape)).set_stride(list(o.stride()))
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, {Q: q, K: k, V: v, O: o}  # the variant pack: graph tensor → torch tensor


g, pack = causal_sdpa(q, k, v, o)
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute(pack, workspace, handle=handle)
print(f"plan {g.get_plan_name_at_index(0)}, workspace {g.get_workspace_size()} B")

# The reference: PyTorch's attention on fp32 copies of the same tensors.
ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)

# %%
# Measuring the graph against every backend
# -----------------------------------------
# Before anything is timed, the same output is checked again the way every contender on
# this site is: the output is first filled with NaN (an element the kernel never wrote
# fails), then compared with the fp32 reference by relative norm.
from cudnn_guide import check
from cudnn_guide.graphs import attention

problem = attention.SdpaProblem(batch=b, heads=h, seq=s, head_dim=d, causal=True)
print(problem)
check.poison(o)
g.execute(pack, workspace, handle=handle)
sdpa_check = check.check(o, ref, name="cuDNN SDPA (causal)")
print(sdpa_check)

# %%
# A causal mask that is off by one would still pass a loose check on random data, so we
# also check the mask itself: with ``v`` one-hot along the sequence, row *i* of the
# output can only mix values of keys ``j ≤ i``; any weight on a future key shows up as
# output mass there (``causal_attention.one_hot_probe``: the lesson's graph on one
# sequence of 128 tokens, with ``v`` the 128×128 identity).
from cudnn_guide.studies import causal_attention

future_mass, row_sum = causal_attention.one_hot_probe(causal_sdpa, handle)
print(f"largest weight on a future key: {future_mass:.2e}")
print(f"rows sum to 1 within {row_sum:.2e}")
assert future_mass == 0.0

# %%
# The baselines, each forced and checked
# --------------------------------------
# ``torch.nn.attention.sdpa_kernel`` restricts PyTorch to one backend
# (``causal_attention.torch_sdpa``); one that cannot run this problem raises and is
# shown as unavailable, not silently replaced. On this torch the flash backend is
# FlashAttention-2, and the cuDNN backend calls cuDNN's own fused attention: a tie with
# it is expected, it is not an independent contender.
from cudnn_guide.measure import baselines

BACKENDS = causal_attention.backends()  # the page's names → SDPBackend
available = {}  # each backend that runs here, checked against the reference
for name, backend in BACKENDS.items():
    fn = causal_attention.torch_sdpa(backend, problem, q, k, v)
    baselines.admit(available, name, fn, check=causal_attention.checked(ref, name))

# %%
# FlashAttention-4 (``flash_attn.cute.flash_attn_func``) takes B×S×H×D tensors: it gets
# its own copy in that layout, and its output is checked against the same fp32
# reference. Its CuTe DSL compiler warns that an ``aux_data`` argument "cannot be
# converted to a JitArgument" on every new kernel; the warning says nothing about the
# result, so it is silenced here.
import warnings

from cudnn_guide.measure import fa4

warnings.filterwarnings("ignore", message=".*aux_data.*", category=UserWarning)
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if FA4_OK:
    fa4_fwd = fa4.forward(q, k, v, causal=True, scale=problem.scale)
    baselines.admit(available, FA4, fa4_fwd, check=causal_attention.checked(ref, FA4))
else:
    print(f"{FA4}: {FA4_DETAIL}")
torch.cuda.empty_cache()

# %%
# Measuring across sequence lengths and head dimensions
# -----------------------------------------------------
# 16,384 tokens per batch (B = 16384 / S) and a model width of 2048 (H = 2048 / D), so
# every point does work on the same number of tokens; the causal FLOP count is half of
# ``4·B·H·S²·D`` (``causal_attention.problem_at``). ``causal_attention.sweep_lengths``
# builds the lesson's graph anew at each length, and races it there against every
# backend (one that cannot run a length is shown as "—") and FlashAttention-4 if it was
# admitted above: interleaved rounds, cold L2, a verdict against each contender.
from cudnn_guide.measure import sweep

seqs = [1024, 2048, 4096, 8192, 16384]
dims = [64, 128]
fa4_name = FA4 if FA4 in available else None
sweeps = causal_attention.sweep_lengths(
    causal_sdpa, handle, seqs, dims, BACKENDS, fa4_name=fa4_name, rounds=7
)
measurements = [m for d in dims for m in sweeps[d].measurements]
result = sweep.SweepResult("seq_len", measurements)

# %%
# Plot
# ----
# One panel per head dim, stacked so that each stays readable on a narrow screen.
import matplotlib.pyplot as plt

from cudnn_guide.measure.ceilings import measure_ceilings

ceil = measure_ceilings()
causal_attention.plot_by_head_dim(measurements, dims, ceil.peak_bf16_tflops)
plt.show()

# %%
from cudnn_guide.report import sweep_table

sweep_table(result, "tflops", title="causal SDPA forward, TFLOP/s")

# %%
# The verdicts at every length: the cuDNN graph's speed-up over each PyTorch backend
# and FlashAttention-4 (above 1: cuDNN is faster).
import pandas as pd

from cudnn_guide.report import html_table

verdict_rows = [row for d in dims for row in sweeps[d].verdicts()]
html_table(pd.DataFrame(verdict_rows), {"speed-up": "{:.2f}×"})

# %%
# Conclusions
# -----------
# From the verdicts above; PyTorch's cuDNN backend is cuDNN itself: not counted
# (``causal_attention.others``).
from cudnn_guide.report.prose import Prose

peaks = causal_attention.peaks(sweeps, seqs)  # head dim → (length, TFLOP/s estimate)
said = dict(peak_tflops=ceil.peak_bf16_tflops, fa4_name=FA4, fa4_detail=FA4_DETAIL)
sentences = causal_attention.conclusions(sweeps, seqs, peaks, **said)
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline
from cudnn_guide.report.records import comparison

for d in dims:
    headline(
        f"cuDNN SDPA peak TFLOP/s, d={d}",
        unit="TFLOP/s",
        seq_len=peaks[d][0],
        **peaks[d][1],
    )
    for s in seqs:  # each length's verdict against the fastest other implementation
        cmp = sweeps[d].comparisons[s]
        comparison(
            f"d={d}, S={s}: speed-up over the fastest other implementation",
            cmp,
            causal_attention.fastest_other(cmp),
        )
# sphinx_gallery_end_ignore
Prose(*sentences)
