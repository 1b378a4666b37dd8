"""
Grouped-query and multi-query attention
=======================================

Most current LLMs give K and V fewer heads than Q: grouped-query attention (GQA, e.g. 32
query heads sharing 8 K/V heads) or multi-query attention (MQA, one K/V head). cuDNN's SDPA
takes such K and V as they are: declare K and V with ``Hkv`` heads, and each group of
``Hq / Hkv`` query heads reads the same K/V head. Nothing is repeated in memory.

What you will learn:

* how a GQA graph differs from an MHA one (only the K/V head count), forward and backward;
* how to check it against an fp32 reference that repeats the K/V heads explicitly;
* what GQA saves: the K/V bytes per token, and the decode time that follows them;
* the cuDNN graph against PyTorch's SDPA with ``enable_gqa=True`` on each backend
  that runs it (its flash backend is FlashAttention-2), and against FlashAttention-4,
  which also takes GQA and MQA K/V heads as they are.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
print(env.stamp())

# %%
# The graph: K and V simply have fewer heads
# ------------------------------------------
# Q is B×Hq×S×D, K and V are B×Hkv×S×D. The ``sdpa`` node reads the head counts from the
# tensors; the five build steps and ``execute`` are the same as for any attention graph.
import cudnn
import torch

from cudnn_guide.graphs import attention_inputs
from cudnn_guide import check, graphs

handle = graphs.handle_for_current_device()
B, HQ, S, D = 4, 32, 4096, 128


def attention_graph(q, k, v, o, stats=None, causal=True):
    """Declare and build attention for q, k, v (any Hq that Hkv divides), writing o (and stats)."""
    attention_inputs.check_heads(q, k, v)
    g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                      intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    Q, K, V = g.tensor_like(q, name="q"), g.tensor_like(k, name="k"), g.tensor_like(v, name="v")
    mask = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0) if causal else {}
    O, Stats = g.sdpa(name="sdpa", q=Q, k=K, v=V, attn_scale=D ** -0.5, generate_stats=stats is not None, **mask)
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    pack = {Q: q, K: k, V: v, O: o}
    if stats is not None:
        Stats.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
        pack[Stats] = stats
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, pack


def qkv(hkv, seq=S, batch=B, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, HQ, seq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(batch, hkv, seq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(batch, hkv, seq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    return q, k, v


q, k, v = qkv(hkv=8)
o = torch.empty_like(q)
g, pack = attention_graph(q, k, v, o)
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
check.poison(o)
g.execute(pack, workspace, handle=handle)
visible = attention_inputs.band(S, S, device="cuda")
checks = [check.check(o, attention_inputs.reference(q, k, v, visible=visible), name="GQA forward, Hq=32, Hkv=8")]
print(checks[-1])

# %%
# The backward graph
# ------------------
# ``sdpa_backward`` writes dK and dV with Hkv heads: each is the sum of the gradients of the
# query heads in its group. The forward must save its softmax statistics for it.
S_BWD = 1024
q, k, v = qkv(hkv=8, seq=S_BWD, batch=2, seed=1)
o, d_o = torch.empty_like(q), torch.randn_like(q)
stats = torch.empty(2, HQ, S_BWD, 1, device="cuda", dtype=torch.float32)
fwd, fwd_pack = attention_graph(q, k, v, o, stats)
fwd.execute(fwd_pack, torch.empty(fwd.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)

gb = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                   intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
T = {name: gb.tensor_like(t, name=name) for name, t in dict(q=q, k=k, v=v, o=o, dO=d_o, stats=stats).items()}
dQ, dK, dV = gb.sdpa_backward(name="sdpa_backward", q=T["q"], k=T["k"], v=T["v"], o=T["o"], dO=T["dO"],
                              stats=T["stats"], attn_scale=D ** -0.5,
                              diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
grads = {"dq": torch.empty_like(q), "dk": torch.empty_like(k), "dv": torch.empty_like(v)}
for node_out, t in zip((dQ, dK, dV), grads.values()):
    node_out.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
gb.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])  # the five steps in one call
bwd_pack = {T[n]: t for n, t in dict(q=q, k=k, v=v, o=o, dO=d_o, stats=stats).items()}
bwd_pack.update({dQ: grads["dq"], dK: grads["dk"], dV: grads["dv"]})
check.poison(*grads.values())
gb.execute(bwd_pack, torch.empty(gb.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)

import warnings

qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
# autograd's own GPU thread finds no current CUDA context on its first cuBLAS call and sets the
# primary one itself; PyTorch warns about it, harmlessly
warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
with check.full_precision():
    ref_o = torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=True, enable_gqa=True)
    ref_o.backward(d_o.float())
for name, ref in (("dq", qr.grad), ("dk", kr.grad), ("dv", vr.grad)):
    checks.append(check.check(grads[name], ref, name=f"GQA backward {name}, Hkv=8"))
    print(checks[-1])

# %%
# What GQA saves: K/V bytes
# -------------------------
# The K/V cache holds ``2 · Hkv · D`` values per token per layer. With 32 query heads of 128:
rows = []
for hkv in (32, 8, 1):
    per_token = 2 * hkv * D * 2  # K and V, bf16
    rows.append({"K/V heads": hkv, "kind": {32: "MHA", 8: "GQA", 1: "MQA"}[hkv],
                 "K/V bytes per token per layer": per_token,
                 "K/V cache, 32k tokens × 32 layers (GiB)": per_token * 32768 * 32 / 2 ** 30})
import pandas as pd

from cudnn_guide.report import html_table

html_table(pd.DataFrame(rows), {"K/V cache, 32k tokens × 32 layers (GiB)": "{:.2f}"})

# %%
# Prefill and decode, against PyTorch and FlashAttention-4
# --------------------------------------------------------
# For each head layout, the cuDNN graph races PyTorch's SDPA with ``enable_gqa=True`` on each
# backend (forced with ``sdpa_kernel``; one that cannot run it is shown as
# unavailable) and FlashAttention-4 (``flash_attn.cute.flash_attn_func``, on its own
# B×S×H×D copy of the inputs), in interleaved rounds with a bootstrap interval.
# Prefill is 4 × 4096 tokens, causal; decode is one new token for each of 32 sequences
# over 8192 cached ones, where the K/V reads dominate.
from cudnn_guide.measure import baselines, compare, fa4

BACKENDS = baselines.sdpa_backends()
CAND = "cuDNN graph"
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if not FA4_OK:
    print(f"{FA4}: {FA4_DETAIL}")
results, kv_bytes = {}, {}
for phase, (batch, s_q, s_kv) in {"prefill": (B, S, S), "decode": (32, 1, 8192)}.items():
    for hkv in (32, 8, 1):
        q, k, v = qkv(hkv, seq=s_kv, batch=batch, seed=hkv)
        q = q[:, :, -s_q:].contiguous()
        o = torch.empty_like(q)
        causal = phase == "prefill"  # a decode query sees every cached key: no mask
        g, pack = attention_graph(q, k, v, o, causal=causal)
        contenders = {CAND: graphs.adopt(g, handle, name=f"{phase} Hkv={hkv}").bind(pack)}
        reference = attention_inputs.reference(q, k, v, visible=attention_inputs.band(s_q, s_kv, device="cuda")
                                               if causal else None)
        contenders[CAND]()
        checks.append(check.check(o, reference, name=f"cuDNN {phase}, Hkv={hkv}"))
        for name, backend in BACKENDS.items():
            attend = baselines.forced_sdpa(backend, is_causal=causal, enable_gqa=True)
            run = lambda attend=attend, q=q, k=k, v=v: attend(q, k, v)  # noqa: E731
            baselines.admit(contenders, name, run,  # prints why a backend cannot run this layout
                            check=lambda out, n=f"{name} {phase}, Hkv={hkv}": check.check(out, reference, name=n))
        if FA4_OK:  # prints why FA4 cannot run this layout, if it cannot
            run_fa4 = fa4.forward(q, k, v, causal=causal, scale=D ** -0.5)
            baselines.admit(contenders, FA4, run_fa4,
                            check=lambda out, n=f"FA4 {phase}, Hkv={hkv}":
                            check.check(out, reference, name=n))
        kv_bytes[(phase, hkv)] = 2 * k.numel() * k.element_size()
        flops = 4 * batch * HQ * s_q * s_kv * D / (2 if causal else 1)
        results[(phase, hkv)] = compare.compare(contenders, candidate=CAND, l2="cold", rounds=9, flops=flops,
                                                bytes=kv_bytes[(phase, hkv)] + 2 * q.numel() * 2,
                                                tag=f"{phase} Hkv={hkv}")
        del g, pack, q, k, v, o

# %%
# Each phase's three comparisons read as one sweep over the K/V heads
# (``SweepResult.from_comparisons``): the time per call, the bytes read per second (the K/V cache
# and Q, which bound decode), and the cuDNN graph's speed-up over each backend that ran.
from cudnn_guide.measure import sweep

by_phase = {phase: sweep.SweepResult.from_comparisons("K/V heads", {hkv: results[(phase, hkv)] for hkv in (32, 8, 1)})
            for phase in ("prefill", "decode")}
from cudnn_guide.report import sweep_table
sweep_table(by_phase["prefill"], "median_us", title="prefill: µs per call (median)")

# %%
sweep_table(by_phase["decode"], "gbps", title="decode: GB/s of K/V and Q read and O written (higher is better)")

# %%
html_table(pd.DataFrame([{"phase": phase, **row} for phase, res in by_phase.items() for row in res.verdicts()]),
           {"speed-up": "{:.2f}×"})

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_bars

fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
for ax, (phase, res) in zip(axes, by_phase.items()):
    plot_bars(res.measurements, x="K/V heads", metric="median_us", ax=ax, title=f"{phase}: 32 query heads")
plt.show()

# %%
# What the comparisons say
# ------------------------
# Computed from the comparisons above when the page is recorded.
from cudnn_guide.report.prose import Prose


def times(ratio):
    """``ratio`` (old time / new time) as "N× less time", "N× more time" or the same."""
    if abs(ratio - 1) < 0.005:
        return "the same time"
    return f"{ratio:.1f}× less time" if ratio > 1 else f"{1 / ratio:.1f}× more time"


dec = {hkv: results[("decode", hkv)].estimate(CAND) for hkv in (32, 8, 1)}
pre = {hkv: results[("prefill", hkv)].estimate(CAND) for hkv in (32, 8, 1)}
fewer = kv_bytes[("decode", 32)] / kv_bytes[("decode", 8)]
sentences = [
    f"Decode reads {fewer:.0f}× fewer K/V bytes with 8 K/V heads than with 32: "
    f"the cuDNN graph takes {dec[32]['value']:.1f} µs with 32 K/V heads, "
    f"{dec[8]['value']:.1f} µs with 8 and {dec[1]['value']:.1f} µs with 1 "
    f"(with 8: {times(dec[32]['value'] / dec[8]['value'])}; with 1: "
    f"{times(dec[32]['value'] / dec[1]['value'])}; each against 32).",
    f"Prefill does the same arithmetic with 32, 8 or 1 K/V heads: the cuDNN graph "
    f"takes {pre[32]['value']:.0f}, {pre[8]['value']:.0f} and {pre[1]['value']:.0f} µs "
    "for 32, 8 and 1 K/V heads.",
]
fa = [c.versus[FA4]["verdict"] for c in results.values() if FA4 in c.versus]
if fa:
    sentences.append(
        f"Against {FA4} alone, the cuDNN graph is faster in {fa.count('faster')}, "
        f"ties in {fa.count('tie')} and is slower in {fa.count('slower')} "
        f"of {len(fa)} layouts.")
elif FA4_OK:
    sentences.append(f"{FA4} refused every layout (its errors are printed above).")
else:
    sentences.append(f"{FA4} was not timed: {FA4_DETAIL}.")
sentences += [f"* {phase}, {hkv} K/V heads, against the fastest contender: "
              f"the cuDNN graph is {c.describe()}."
              for (phase, hkv), c in results.items()]
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
for (phase, hkv), c in results.items():
    comparison(f"{phase}, Hkv={hkv}: speed-up over the fastest contender", c)
headline("decode time, Hkv=8", unit="µs", **dec[8])
# sphinx_gallery_end_ignore
Prose(*sentences)
