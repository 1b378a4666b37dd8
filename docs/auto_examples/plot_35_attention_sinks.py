"""
Attention sinks with sink_token
===============================

You build a causal attention graph with attention sinks (gpt-oss, StreamingLLM): one
learned logit per head joins every row's softmax without a value, so a row can give
part of its weight to no token at all. cuDNN takes these logits as the ``sink_token``
argument of ``sdpa``. You check the graph against PyTorch, then time it against
FlexAttention with a log-sum-exp rescale and against FlashAttention-4, which takes the
sinks natively.

Soft-capping, the other change current LLMs make to attention, is on the
:ref:`soft-capping page <sphx_glr_auto_examples_plot_24_softcap.py>`.

What you will learn:

* how ``sink_token`` is declared: one fp32 logit per query head, shaped 1×H×1×1, and
  bound in the variant pack like Q, K and V;
* what it computes: ``exp(sink)`` joins each row's softmax denominator, and no value
  joins the output;
* how a kernel without sinks gets the same result from its log-sum-exp
  (``O · sigmoid(lse − sink)``);
* cuDNN's graph against FlexAttention with that rescale, against FlashAttention-4's
  ``learnable_sink``, and against cuDNN's own causal kernel without sinks.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((9, 0), "cuDNN attention with sink_token")
env = environment.collect()
env

# %%
# The lesson: one sink logit per head
# -----------------------------------
# 4 sequences of 4096 tokens, 16 heads of 128 values, bf16, all B×H×S×D, causal through
# cuDNN's own band (key ≤ query). The sinks are one fp32 logit per query head, shaped
# 1×H×1×1 (the shape and type the frontend's checks ask for), declared from their
# tensor like Q, K and V. In each row the softmax weight of key j becomes
# ``exp(s_j) / (Σ_i exp(s_i) + exp(sink))``: the sink takes part of the weight and
# brings no value, so a row's weights sum to less than one.
import cudnn
import torch

B, H, S, D = 4, 16, 4096, 128
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
torch.manual_seed(0)
q, k, v = torch.randn(3, B, H, S, D, device="cuda", dtype=torch.bfloat16)  # B×H×S×D
gen = torch.Generator(device="cuda").manual_seed(0)  # the sinks' own seed
sinks = torch.randn(1, H, 1, 1, device="cuda", dtype=torch.float32, generator=gen) + 2

g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
Q, K, V = (g.tensor_like(t, name=n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
SINK = g.tensor_like(sinks, name="sink_token")  # FLOAT, dim [1, H, 1, 1]
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)
O, _ = g.sdpa(
    q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, sink_token=SINK, **causal
)
o_sink = torch.empty_like(q)
O.set_output(True)
O.set_dim(list(o_sink.shape)).set_stride(list(o_sink.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
sink_pack = {Q: q, K: k, V: v, SINK: sinks, O: o_sink}
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute(sink_pack, workspace, handle=handle)

# The fp32 reference: plain PyTorch, TF32 off. The log of each row's denominator,
# log(Σ_i exp(s_i) + exp(sink)), is logaddexp(logsumexp(s), sink).
torch.backends.cuda.matmul.allow_tf32 = False
visible = torch.ones(S, S, dtype=torch.bool, device="cuda").tril()  # key ≤ query
s = (q.float() @ k.float().mT * D**-0.5).masked_fill(~visible, float("-inf"))
log_denominator = torch.logaddexp(torch.logsumexp(s, -1, keepdim=True), sinks)
ref_sink = torch.exp(s - log_denominator) @ v.float()  # B×H×S×S weights, then × V
torch.testing.assert_close(o_sink.float(), ref_sink, atol=2e-2, rtol=2e-2)
print(f"max |cuDNN − fp32 reference| = {(o_sink.float() - ref_sink).abs().max():.1e}")

# %%
# Measuring sinks against FlexAttention and FlashAttention-4
# ----------------------------------------------------------
# First the guide's check of the lesson's graph (its output filled with NaN, then run
# again), and how much the sinks matter here. The baselines (this cell and the next):
#
# * PyTorch's FlexAttention with a causal block mask, compiled together with the
#   rescale by its log-sum-exp that gives the sinks' result;
# * FlashAttention-4's native ``learnable_sink``;
# * cuDNN's causal graph without sinks (its own causal band), the control: what the
#   sinks cost.
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from cudnn_guide import check, graphs
from cudnn_guide.graphs import attention_inputs
from cudnn_guide.measure import baselines, compare, fa4

sink_graph = graphs.adopt(g, handle, name="sink")
check.poison(o_sink)
sink_graph.execute(sink_pack)
checks = [check.check(o_sink, ref_sink, name="cuDNN sink_token, causal")]
print(checks[-1])
del s  # the lesson's fp32 scores, B×H×S×S
no_sinks = attention_inputs.reference(q, k, v, visible=visible)
sink_effect = ((no_sinks - ref_sink).norm() / ref_sink.norm()).item()
print(f"without the sinks the result differs by {sink_effect:.2f} (relative L2)")

g_causal = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
Qc, Kc, Vc = (
    g_causal.tensor_like(t, name=n) for t, n in ((q, "q"), (k, "k"), (v, "v"))
)
Oc, _ = g_causal.sdpa(
    name="sdpa_causal",
    q=Qc,
    k=Kc,
    v=Vc,
    attn_scale=D**-0.5,
    generate_stats=False,
    **causal,
)
o_causal = torch.empty_like(q)
Oc.set_output(True).set_dim(list(o_causal.shape)).set_stride(list(o_causal.stride()))
g_causal.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
causal_launch = graphs.adopt(g_causal, handle, name="causal").bind(
    {Qc: q, Kc: k, Vc: v, Oc: o_causal}
)
causal_flops = 4 * B * H * D * int(visible.sum())
causal_block = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, S, S)
unavailable = {}  # contender name -> why it did not run
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if not FA4_OK:
    print(f"{FA4}: {FA4_DETAIL}")


# %%
# PyTorch has no sink argument. What engineers ship on FlashAttention-style kernels is
# the rescale: attention without the sink returns its log-sum-exp ``lse``; the sink
# takes ``exp(sink)`` of the denominator, so ``O_sink = O · sigmoid(lse − sink)``.
# FlexAttention returns ``lse``; compiled together with the rescale, that is the
# baseline. FlashAttention-4 takes the sinks natively (``learnable_sink``, shape H).
def flex_with_sinks(q, k, v):
    out, lse = flex_attention(q, k, v, block_mask=causal_block, return_lse=True)
    scale = torch.sigmoid(lse - sinks.view(1, H, 1)).unsqueeze(-1)
    return out * scale.to(out.dtype)


flex_sinks = torch.compile(flex_with_sinks, fullgraph=True)
checks.append(
    check.check(
        flex_sinks(q, k, v), ref_sink, name="FlexAttention + lse rescale (sinks)"
    )
)
print(checks[-1])
FLEX_SINK = "FlexAttention + lse rescale (compiled)"
sink_contenders = {
    "cuDNN sink_token": sink_graph.bind(sink_pack),
    FLEX_SINK: lambda: flex_sinks(q, k, v),
    "cuDNN causal, no sinks (control)": causal_launch,
}
if FA4_OK:  # FlashAttention-4's learnable_sink: one fp32 logit per head, shape (H,)
    fa4_sink = fa4.forward(
        q, k, v, causal=True, scale=D**-0.5, learnable_sink=sinks.view(H)
    )
    name = f"{FA4}, learnable_sink"
    if why := baselines.admit(sink_contenders, name, fa4_sink, ref_sink):
        unavailable[name] = why
sink_cmp = compare.compare(
    sink_contenders,
    candidate="cuDNN sink_token",
    l2="cold",
    rounds=5,
    flops=causal_flops,
    tag="sinks",
)

# %%
# Every contender's time, and cuDNN's speed-up over it with the in-run 95% interval
# over rounds and the verdict against the measured tie band. The time (and the rate
# from it) is the median over rounds of the contender's per-round medians
# (``Comparison.estimate``, as in the plot and the conclusions), not the median of all
# its samples pooled, which the record's measurements show.
import pandas as pd

from cudnn_guide.report import html_table
from cudnn_guide.report.tables import contender_rows

US = "µs, median of round medians"
html_table(
    pd.DataFrame(contender_rows(sink_cmp, US)),
    {US: "{:.0f}", "TFLOP/s": "{:.0f}", "cuDNN's speed-up": "{:.2f}×"},
)

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison

fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
plot_comparison(sink_cmp, "µs", ax=ax, xlabel="µs per call", title="sinks, causal")
plt.show()

# %%
# Conclusions
# -----------
# Computed from the comparison above when the page is recorded.
from cudnn_guide.report.prose import Prose

SINK_CTRL = "cuDNN causal, no sinks (control)"


def others(c, *names, said=None):
    """One bullet per contender in ``names`` that ran and is not ``c``'s fastest
    (``said``: how a bullet names a contender, where not by its label)."""
    said = said or {}
    return [
        f"* vs {said.get(n, n)}: cuDNN is {c.describe(n)}."
        for n in names
        if n in c.versus and n != c.best_baseline
    ]


sentences = [
    f"Sinks in the kernel: against the fastest contender, cuDNN's sink_token graph "
    f"is {sink_cmp.describe()}; against its causal kernel without sinks it is "
    f"{sink_cmp.describe(SINK_CTRL)}."
]
sentences += others(sink_cmp, f"{FA4}, learnable_sink", FLEX_SINK)
sentences += [
    f"* {name} was not timed: {unavailable.get(name, FA4_DETAIL)}."
    for name in (f"{FA4}, learnable_sink",)
    if name not in sink_cmp.versus
]

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison

# against the fastest contender at this shape (the record names which); the slower
# ones, FlexAttention among them, are in the prose
comparison("sinks: speed-up over the fastest contender", sink_cmp)
# sphinx_gallery_end_ignore
Prose(*sentences)
