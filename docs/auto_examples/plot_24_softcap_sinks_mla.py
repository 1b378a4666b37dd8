"""
Soft-capping, attention sinks and MLA head sizes
================================================

Three attention variants from current LLMs that are not a mask:

* **logit soft-capping** (Gemma 2, Grok-1): each score ``s`` becomes ``c·tanh(s/c)``. cuDNN
  takes it as a ``score_mod``: a callback that receives the score tensor inside the SDPA
  graph and returns a new one, built from the graph's own pointwise operations;
* **attention sinks** (gpt-oss, StreamingLLM): one learned logit per head joins every row's
  softmax without a value, so a row may give its attention to "nothing". cuDNN takes it as
  ``sink_token``, a 1×H×1×1 fp32 tensor;
* **MLA head sizes** (DeepSeek V2/V3): Q and K carry 192 values per head (128 + 64 of
  rotary part), V and O carry 128. cuDNN reads the head sizes from the tensors.

What you will learn: each declaration, checked against an fp32 reference; what cuDNN refuses
to combine on this GPU (shown with its own words); and each variant against the strongest
PyTorch path that computes the same thing, and against FlashAttention-4 where it has the
feature (soft-cap, sinks and MLA head sizes all are).
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((9, 0), "cuDNN attention with score_mod, sink_token and MLA head sizes")
env = environment.collect()
print(env.stamp())

# %%
# Soft-capping with ``score_mod``
# -------------------------------
# The callback gets the graph and the (already scaled) score tensor. Scalars enter as
# pass-by-value tensors, bound in the variant pack as CPU tensors. The cap is 2 here, far below
# Gemma 2's 50: with random inputs the scores have a standard deviation near 1, and only a
# small cap makes the capped result measurably different from the uncapped one.
import cudnn
import torch

from cudnn_guide.graphs import attention_inputs
from cudnn_guide import check, graphs

handle = graphs.handle_for_current_device()
B, H, S, D = 4, 16, 4096, 128
CAP = 2.0
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
causal_visible = attention_inputs.band(S, S, device="cuda")
cap_cpu, neg_inf_cpu = torch.full((1, 1, 1, 1), CAP), torch.full((1, 1, 1, 1), -1e9)


def new_graph():
    return cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                         intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)


def softcap_causal(g, score, cap, neg_inf):
    """score_mod: cap·tanh(score/cap), then causal (key index ≤ query index), as graph operations."""
    capped = g.mul(a=g.tanh(input=g.div(a=score, b=cap)), b=cap)
    row = g.gen_index(input=capped, axis=2)
    row.set_data_type(cudnn.data_type.INT32)
    col = g.gen_index(input=capped, axis=3)
    col.set_data_type(cudnn.data_type.INT32)
    keep = g.cmp_ge(input=row, comparison=col, compute_data_type=cudnn.data_type.BOOLEAN)
    keep.set_data_type(cudnn.data_type.BOOLEAN)
    return g.binary_select(input0=capped, input1=neg_inf, mask=keep)


g = new_graph()
Q, K, V = g.tensor_like(q, name="q"), g.tensor_like(k, name="k"), g.tensor_like(v, name="v")
CAP_T = g.tensor(name="cap", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True, data_type=torch.float32)
NEG_INF = g.tensor(name="neg_inf", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True,
                   data_type=torch.float32)
O, _ = g.sdpa(name="sdpa_softcap", q=Q, k=K, v=V, attn_scale=D ** -0.5, generate_stats=False,
              score_mod=lambda graph, score: softcap_causal(graph, score, CAP_T, NEG_INF))
o_cap = torch.empty_like(q)
O.set_output(True).set_dim(list(o_cap.shape)).set_stride(list(o_cap.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
softcap = graphs.adopt(g, handle, name="softcap")
softcap_pack = {Q: q, K: k, V: v, O: o_cap, CAP_T: cap_cpu, NEG_INF: neg_inf_cpu}
check.poison(o_cap)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)  # run on torch's stream
g.execute(softcap_pack, torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)


def softcap_reference(q, k, v):
    with check.full_precision():
        s = (q.float() @ k.float().transpose(-1, -2)) * D ** -0.5
        s = (CAP * torch.tanh(s / CAP)).masked_fill(~causal_visible, float("-inf"))
        return torch.softmax(s, -1) @ v.float()


ref_cap = softcap_reference(q, k, v)
uncapped = attention_inputs.reference(q, k, v, visible=causal_visible)
checks = [check.check(o_cap, ref_cap, name=f"cuDNN score_mod soft-cap {CAP:g}, causal")]
print(checks[-1])
print(f"the cap matters here: the uncapped result differs from the capped one by "
      f"{((uncapped - ref_cap).norm() / ref_cap.norm()).item():.2f} (relative L2)")

# %%
# ``score_mod`` cannot be combined with cuDNN's own masks: the causal mask above is written in
# the callback (``gen_index`` and ``cmp_ge``), so cuDNN is not told through its own band
# parameters that the mask is causal (what the timing says of skipped tiles is below).
# Asking for both is refused:
refusals = {}
g2 = new_graph()
Q2, K2, V2 = g2.tensor_like(q, name="q"), g2.tensor_like(k, name="k"), g2.tensor_like(v, name="v")
CAP2 = g2.tensor(name="cap", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True, data_type=torch.float32)
try:
    O2, _ = g2.sdpa(name="sdpa", q=Q2, k=K2, v=V2, attn_scale=D ** -0.5, generate_stats=False,
                    diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0,
                    score_mod=lambda graph, score: graph.mul(a=graph.tanh(input=graph.div(a=score, b=CAP2)), b=CAP2))
    O2.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
    g2.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    refusals["score_mod + causal band"] = "accepted"
except Exception as exc:  # cuDNN's words, first line
    refusals["score_mod + causal band"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
print("score_mod + diagonal_band_right_bound=0:", refusals["score_mod + causal band"])

# %%
# The baseline is PyTorch's FlexAttention with the same soft-cap as its ``score_mod`` and a
# causal block mask, compiled: it skips the tiles above the diagonal. Its ``torch.tanh``
# is the exact tanh: torch has no approximate-tanh op to write in a ``score_mod``, so
# the approximate variant some Flex users patch in is not timed here. FlashAttention-4
# caps natively (``softcap=``; its source computes the approximate, fastmath tanh),
# checked against the same fp32 reference. cuDNN's causal graph without a cap (its own
# causal band) is the control: what the score_mod costs.
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from cudnn_guide.measure import baselines, compare, fa4

flex = torch.compile(flex_attention, fullgraph=True)
causal_block = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, S, S)


def softcap_mod(score, b, h, qi, ki):
    return CAP * torch.tanh(score / CAP)


checks.append(check.check(flex(q, k, v, score_mod=softcap_mod, block_mask=causal_block), ref_cap,
                          name="FlexAttention soft-cap, causal"))
print(checks[-1])
g3 = new_graph()
Q3, K3, V3 = g3.tensor_like(q, name="q"), g3.tensor_like(k, name="k"), g3.tensor_like(v, name="v")
O3, _ = g3.sdpa(name="sdpa_causal", q=Q3, k=K3, v=V3, attn_scale=D ** -0.5, generate_stats=False,
                diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
o_causal = torch.empty_like(q)
O3.set_output(True).set_dim(list(o_causal.shape)).set_stride(list(o_causal.stride()))
g3.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
causal_launch = graphs.adopt(g3, handle, name="causal").bind({Q3: q, K3: k, V3: v, O3: o_causal})
causal_flops = 4 * B * H * D * int(causal_visible.sum())
softcap_contenders = {
    "cuDNN soft-cap (score_mod)": softcap.bind(softcap_pack),
    "FlexAttention soft-cap (compiled)":
        lambda: flex(q, k, v, score_mod=softcap_mod, block_mask=causal_block),
    "cuDNN causal, no cap (control)": causal_launch}
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
fa4_unavailable = {}  # contender name -> why it did not run
if FA4_OK:
    fa4_cap = fa4.forward(q, k, v, causal=True, scale=D ** -0.5, softcap=CAP)
    if why := baselines.admit(softcap_contenders, f"{FA4}, softcap", fa4_cap, ref_cap):
        fa4_unavailable[f"{FA4}, softcap"] = why
else:
    print(f"{FA4}: {FA4_DETAIL}")
softcap_cmp = compare.compare(
    softcap_contenders,
    candidate="cuDNN soft-cap (score_mod)", l2="cold", rounds=9, flops=causal_flops, tag="softcap")
print(softcap_cmp)

# %%
# Attention sinks
# ---------------
# ``sink_token`` holds one fp32 logit per query head. The reference appends it as an extra
# column of the scores, takes the softmax, and drops that column before multiplying by V.
sinks = torch.randn(1, H, 1, 1, device="cuda", dtype=torch.float32, generator=gen) + 2.0
gs = new_graph()
QS, KS, VS = gs.tensor_like(q, name="q"), gs.tensor_like(k, name="k"), gs.tensor_like(v, name="v")
SINK = gs.tensor_like(sinks, name="sink_token")
OS, _ = gs.sdpa(name="sdpa_sink", q=QS, k=KS, v=VS, attn_scale=D ** -0.5, generate_stats=False, sink_token=SINK,
                diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
o_sink = torch.empty_like(q)
OS.set_output(True).set_dim(list(o_sink.shape)).set_stride(list(o_sink.stride()))
gs.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
sink_graph = graphs.adopt(gs, handle, name="sink")
sink_pack = {QS: q, KS: k, VS: v, SINK: sinks, OS: o_sink}
check.poison(o_sink)
gs.execute(sink_pack, torch.empty(gs.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)

with check.full_precision():
    s = ((q.float() @ k.float().transpose(-1, -2)) * D ** -0.5).masked_fill(~causal_visible, float("-inf"))
    p = torch.softmax(torch.cat([s, sinks.expand(B, H, S, 1)], -1), -1)
    ref_sink = p[..., :-1] @ v.float()
    del s, p
checks.append(check.check(o_sink, ref_sink, name="cuDNN sink_token, causal"))
print(checks[-1])
print(f"the sinks matter here: without them the result differs by "
      f"{((uncapped - ref_sink).norm() / ref_sink.norm()).item():.2f} (relative L2)")

# %%
# PyTorch has no sink argument. What engineers ship on FlashAttention-style kernels is the
# rescale: attention without the sink returns its log-sum-exp ``lse``; the sink takes
# ``exp(sink)`` of the denominator, so ``O_sink = O · sigmoid(lse − sink)``. FlexAttention
# returns ``lse``; compiled together with the rescale, that is the baseline.
def flex_with_sinks(q, k, v):
    out, lse = flex_attention(q, k, v, block_mask=causal_block, return_lse=True)
    return out * torch.sigmoid(lse - sinks.view(1, H, 1)).unsqueeze(-1).to(out.dtype)


flex_sinks = torch.compile(flex_with_sinks, fullgraph=True)
checks.append(check.check(flex_sinks(q, k, v), ref_sink, name="FlexAttention + lse rescale (sinks)"))
print(checks[-1])
sink_contenders = {
    "cuDNN sink_token": sink_graph.bind(sink_pack),
    "FlexAttention + lse rescale (compiled)": lambda: flex_sinks(q, k, v),
    "cuDNN causal, no sinks (control)": causal_launch}
if FA4_OK:  # FlashAttention-4's learnable_sink: one fp32 logit per head, shape (H,)
    fa4_sink = fa4.forward(q, k, v, causal=True, scale=D ** -0.5,
                           learnable_sink=sinks.view(H))
    if why := baselines.admit(sink_contenders, f"{FA4}, learnable_sink", fa4_sink,
                              ref_sink):
        fa4_unavailable[f"{FA4}, learnable_sink"] = why
sink_cmp = compare.compare(
    sink_contenders,
    candidate="cuDNN sink_token", l2="cold", rounds=9, flops=causal_flops, tag="sinks")
print(sink_cmp)

# %%
# MLA head sizes: d_qk = 192, d_v = 128, forward and backward
# -----------------------------------------------------------
# Nothing changes in the declaration: Q and K are declared with 192 values per head, V with
# 128, and O, dO and dV follow V. The forward saves its statistics for the backward.
DQK, DV = 192, 128
qm, km = (torch.randn(B, H, S, DQK, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
vm = torch.randn(B, H, S, DV, device="cuda", dtype=torch.bfloat16, generator=gen)
om, d_om = torch.empty_like(vm), torch.randn_like(vm)
stats = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
causal = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)

gf = new_graph()
QM, KM, VM = gf.tensor_like(qm, name="q"), gf.tensor_like(km, name="k"), gf.tensor_like(vm, name="v")
OM, STATS = gf.sdpa(name="sdpa_mla", q=QM, k=KM, v=VM, attn_scale=DQK ** -0.5, generate_stats=True, **causal)
OM.set_output(True).set_dim(list(om.shape)).set_stride(list(om.stride()))
STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
gf.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
mla_fwd_pack = {QM: qm, KM: km, VM: vm, OM: om, STATS: stats}

gb = new_graph()
T = {n: gb.tensor_like(t, name=n) for n, t in dict(q=qm, k=km, v=vm, o=om, dO=d_om, stats=stats).items()}
DQ, DK, DVG = gb.sdpa_backward(name="sdpa_mla_backward", q=T["q"], k=T["k"], v=T["v"], o=T["o"], dO=T["dO"],
                               stats=T["stats"], attn_scale=DQK ** -0.5, **causal)
mla_grads = {"dq": torch.empty_like(qm), "dk": torch.empty_like(km), "dv": torch.empty_like(vm)}
for node_out, t in zip((DQ, DK, DVG), mla_grads.values()):
    node_out.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
gb.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
mla_bwd_pack = {T[n]: t for n, t in dict(q=qm, k=km, v=vm, o=om, dO=d_om, stats=stats).items()}
mla_bwd_pack.update({DQ: mla_grads["dq"], DK: mla_grads["dk"], DVG: mla_grads["dv"]})
mla_fwd, mla_bwd = graphs.adopt(gf, handle, name="mla forward"), graphs.adopt(gb, handle, name="mla backward")
check.poison(om, *mla_grads.values())
mla_fwd.execute(mla_fwd_pack)
mla_bwd.execute(mla_bwd_pack)

import torch.nn.functional as F

torch.cuda.set_device(qm.device)  # autograd's backward thread needs this device's context
leaves = [t.detach().float().requires_grad_() for t in (qm, km, vm)]
with check.full_precision():
    ref_om = F.scaled_dot_product_attention(*leaves, is_causal=True)
    ref_om.backward(d_om.float())
checks.append(check.check(om, ref_om.detach(), name="MLA forward (192/128)"))
print(checks[-1])
for name, leaf in zip(("dq", "dk", "dv"), leaves):
    checks.append(check.check(mla_grads[name], leaf.grad, name=f"MLA backward {name}"))
    print(checks[-1])
ref_dq = leaves[0].grad
del leaves, ref_om

# %%
# A training step (forward + backward) against PyTorch's SDPA on each backend that accepts a
# V head size different from Q's (forced with ``sdpa_kernel``; its flash backend is
# FlashAttention-2), FlexAttention, and FlashAttention-4 (its own B×S×H×D copies,
# autograd). A backend that refuses the shapes is listed with its error.
from torch.nn.attention import SDPBackend

from cudnn_guide.measure import baselines

mla_fwd_launch, mla_bwd_launch = mla_fwd.bind(mla_fwd_pack), mla_bwd.bind(mla_bwd_pack)


def cudnn_mla_step():
    mla_fwd_launch()
    mla_bwd_launch()


torch_leaves = [t.detach().requires_grad_() for t in (qm, km, vm)]


def torch_step(attend):
    def step():
        return torch.autograd.grad(attend(*torch_leaves), torch_leaves, d_om)
    return step


def backend(b):
    return baselines.forced_sdpa(b, is_causal=True)  # F.sdpa under sdpa_kernel([b]): a refusal raises


mla_block = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, S, S)
flex_mla = torch.compile(lambda q, k, v: flex_attention(q, k, v, block_mask=mla_block), fullgraph=True)
mla_contenders, mla_unavailable = {"cuDNN MLA step": cudnn_mla_step}, {}
for name, attend in (("PyTorch SDPA, flash", backend(SDPBackend.FLASH_ATTENTION)),
                     ("PyTorch SDPA, efficient", backend(SDPBackend.EFFICIENT_ATTENTION)),
                     ("PyTorch SDPA, cuDNN backend", backend(SDPBackend.CUDNN_ATTENTION)),
                     ("FlexAttention (compiled)", flex_mla)):
    if why := baselines.admit(mla_contenders, name, torch_step(attend), check=lambda grads, name=name: check.check(
            grads[0], ref_dq, name=f"{name}: MLA dq")):
        mla_unavailable[name] = why
if FA4_OK:  # dq checked against the same fp32 autograd reference
    fa4_step, fa4_grads = fa4.training_step(qm, km, vm, d_om, causal=True,
                                            scale=DQK ** -0.5)
    if why := baselines.admit(mla_contenders, f"{FA4} step", fa4_step,
                              check=lambda _: check.check(fa4_grads()[0], ref_dq,
                                                          name=f"{FA4}: MLA dq")):
        mla_unavailable[f"{FA4} step"] = fa4_unavailable[f"{FA4} step"] = why
mla_flops = 3.5 * 2 * B * H * (DQK + DV) * int(causal_visible.sum())  # forward + backward (2.5× forward)
mla_cmp = compare.compare(mla_contenders, candidate="cuDNN MLA step", l2="cold", rounds=9, flops=mla_flops,
                          tag="mla")
print(mla_cmp)

# %%
import pandas as pd

from cudnn_guide.report import html_table

rows = [{"variant": tag, "implementation": n, "µs": c.estimate(n)["value"],
         "TFLOP/s": c.estimate(n, "TFLOP/s")["value"]}
        for tag, c in (("soft-cap", softcap_cmp), ("sinks", sink_cmp), ("MLA step", mla_cmp)) for n in c.measurements]
html_table(pd.DataFrame(rows), {"µs": "{:.0f}", "TFLOP/s": "{:.0f}"})

# %%
# Plot
# ----
import matplotlib.pyplot as plt

fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), layout="constrained")  # one row each: the long labels fit
from cudnn_guide.report import plot_comparison
for ax, (title, c) in zip(axes, (("soft-cap, causal", softcap_cmp), ("sinks, causal", sink_cmp),
                                 ("MLA 192/128 training step", mla_cmp))):
    plot_comparison(c, "µs", ax=ax, xlabel="µs per call", title=title)
plt.show()

# %%
# What the measurements say
# -------------------------
# Computed from the comparisons above when the page is recorded.
from cudnn_guide.measure.ceilings import datasheet_peaks
from cudnn_guide.report.prose import Prose

PEAK = datasheet_peaks(torch.cuda.get_device_name())[0]  # dense bf16 TFLOP/s, or None
CAP_NAME, CAP_CTRL = "cuDNN soft-cap (score_mod)", "cuDNN causal, no cap (control)"
cap_us = softcap_cmp.estimate(CAP_NAME)["value"]
dense_tflops = 4 * B * H * S * S * D / (cap_us * 1e-6) / 1e12  # all tiles computed
ctrl_tflops = softcap_cmp.estimate(CAP_CTRL, "TFLOP/s")["value"]
peak_share = ""
if PEAK:
    peak_share = f" ({100 * dense_tflops / PEAK:.0f}% of the datasheet bf16 peak)"
if dense_tflops > ctrl_tflops:
    dense_verdict = (f"more than the causal control reaches on the work it computes "
                     f"({ctrl_tflops:.0f} TFLOP/s): so it is unlikely that the kernel "
                     "computes every tile, although the mask is in the callback "
                     "(not profiled here).")
else:
    dense_verdict = (f"no more than the causal control reaches on the work it computes "
                     f"({ctrl_tflops:.0f} TFLOP/s): this timing alone does not say "
                     "whether the kernel skips the masked tiles.")
FLEX_CAP = "FlexAttention soft-cap (compiled)"
FLEX_SINK = "FlexAttention + lse rescale (compiled)"
sentences = [
    f"Soft-cap as a score_mod: cuDNN is {softcap_cmp.describe(FLEX_CAP)}, and against "
    f"its own causal kernel without a cap it is {softcap_cmp.describe(CAP_CTRL)}.",
    f"If the score_mod kernel computed every tile, its {cap_us:.0f} µs would be "
    f"{dense_tflops:.0f} TFLOP/s of dense attention{peak_share}, {dense_verdict}",
    "FlexAttention's soft-cap is timed with the exact torch.tanh: torch has no "
    "approximate tanh to write in a score_mod, so that variant is not timed; "
    "FlashAttention-4's native softcap computes the approximate (fastmath) tanh.",
    f"Sinks in the kernel: cuDNN's sink_token graph is {sink_cmp.describe(FLEX_SINK)}; "
    f"against its causal kernel without sinks it is "
    f"{sink_cmp.describe('cuDNN causal, no sinks (control)')}.",
    f"MLA training step: {mla_cmp.estimate('cuDNN MLA step')['value']:.0f} µs; "
    f"against the fastest contender ({mla_cmp.best_baseline}) it is "
    f"{mla_cmp.describe()}.",
]
for c, name in ((softcap_cmp, f"{FA4}, softcap"), (sink_cmp, f"{FA4}, learnable_sink"),
                (mla_cmp, f"{FA4} step")):
    if name in c.versus:
        sentences.append(f"* Against {name}: cuDNN is {c.describe(name)}.")
    else:
        why = fa4_unavailable.get(name, FA4_DETAIL)
        sentences.append(f"* {name} was not timed: {why}.")
sentences += [f"* Not available here: {name}: {why}"
              for name, why in {**refusals, **mla_unavailable}.items()
              if why != "accepted" and not name.startswith(FA4)]

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison
comparison("soft-cap: speed-up over FlexAttention", softcap_cmp, "FlexAttention soft-cap (compiled)")
comparison("sinks: speed-up over FlexAttention + lse", sink_cmp, "FlexAttention + lse rescale (compiled)")
comparison("MLA step: speed-up over the fastest contender", mla_cmp)
# sphinx_gallery_end_ignore
Prose(*sentences)
