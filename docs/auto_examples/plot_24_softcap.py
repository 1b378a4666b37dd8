"""
Soft-capping attention scores with score_mod
============================================

You build a causal attention graph whose scores are soft-capped (Gemma 2, Grok-1: each
score ``s`` becomes ``c·tanh(s/c)``) through cuDNN's ``score_mod`` callback, check it
against PyTorch, then time it against FlexAttention and FlashAttention-4.

Attention sinks (gpt-oss, StreamingLLM: one learned logit per head joins every row's
softmax without a value, cuDNN's ``sink_token``) are on the
:ref:`attention sinks page <sphx_glr_auto_examples_plot_35_attention_sinks.py>`;
DeepSeek's MLA head sizes (Q and K of 192 values per head, V and O of 128) are on the
:ref:`MLA page <sphx_glr_auto_examples_plot_27_mla.py>`.

What you will learn:

* how a ``score_mod`` callback builds new scores from the graph's own pointwise
  operations, with scalars passed by value, and writes a mask itself;
* what cuDNN refuses to combine with it on this GPU, in its own words;
* the soft-cap against the strongest PyTorch path that computes the same thing
  (FlexAttention, with both an exact and an approximate tanh), against
  FlashAttention-4, which has a soft-cap natively, and against cuDNN's own causal
  kernel without a cap.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((9, 0), "cuDNN attention with score_mod")
env = environment.collect()
env

# %%
# The lesson: soft-capping with ``score_mod``
# -------------------------------------------
# The callback gets the graph and the (already scaled) score tensor and returns new
# scores. Scalars enter as pass-by-value tensors, bound in the variant pack as CPU
# tensors. A ``score_mod`` replaces cuDNN's own masks, so the causal mask is written in
# the callback too: ``gen_index`` gives each score its row and column, ``cmp_ge`` keeps
# key ≤ query, ``binary_select`` puts −1e9 elsewhere. The cap is 2, far below Gemma 2's
# 50: random scores have a standard deviation near 1, and only a small cap changes them.
import cudnn
import torch

B, H, S, D = 4, 16, 4096, 128
CAP = 2.0
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
torch.manual_seed(0)
q, k, v = torch.randn(3, B, H, S, D, device="cuda", dtype=torch.bfloat16)  # B×H×S×D

g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
Q, K, V = (g.tensor_like(t, name=n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
scalar = dict(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True)
CAP_T = g.tensor(name="cap", data_type=torch.float32, **scalar)
NEG_INF = g.tensor(name="neg_inf", data_type=torch.float32, **scalar)


def softcap_causal(g, score):
    """CAP·tanh(score/CAP), then key index ≤ query index, as graph operations."""
    capped = g.mul(a=g.tanh(input=g.div(a=score, b=CAP_T)), b=CAP_T)
    row = g.gen_index(input=capped, axis=2)
    row.set_data_type(cudnn.data_type.INT32)
    col = g.gen_index(input=capped, axis=3)
    col.set_data_type(cudnn.data_type.INT32)
    tri = g.cmp_ge(input=row, comparison=col, compute_data_type=cudnn.data_type.BOOLEAN)
    tri.set_data_type(cudnn.data_type.BOOLEAN)
    return g.binary_select(input0=capped, input1=NEG_INF, mask=tri)


O, _ = g.sdpa(
    q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, score_mod=softcap_causal
)
o_cap = torch.empty_like(q)
O.set_output(True).set_dim(list(o_cap.shape)).set_stride(list(o_cap.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
cap_cpu, neg_inf_cpu = torch.full((1, 1, 1, 1), CAP), torch.full((1, 1, 1, 1), -1e9)
softcap_pack = {Q: q, K: k, V: v, O: o_cap, CAP_T: cap_cpu, NEG_INF: neg_inf_cpu}
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute(softcap_pack, workspace, handle=handle)

# The fp32 reference: plain PyTorch, TF32 off.
torch.backends.cuda.matmul.allow_tf32 = False
visible = torch.ones(S, S, dtype=torch.bool, device="cuda").tril()  # key ≤ query
s = (q.float() @ k.float().transpose(-1, -2)) * D**-0.5
s = (CAP * torch.tanh(s / CAP)).masked_fill(~visible, float("-inf"))
ref_cap = torch.softmax(s, -1) @ v.float()
torch.testing.assert_close(o_cap.float(), ref_cap, atol=2e-2, rtol=2e-2)
print(f"max |cuDNN − fp32 reference| = {(o_cap.float() - ref_cap).abs().max():.1e}")

# %%
# Measuring soft-cap against FlexAttention and FlashAttention-4
# -------------------------------------------------------------
# First the guide's check of the lesson's graph (its output filled with NaN, then run
# again), and how much the cap matters here. The baselines:
#
# * PyTorch's FlexAttention with the same soft-cap as its ``score_mod`` and a causal
#   block mask, compiled: it skips the tiles above the diagonal. Written with
#   ``torch.tanh`` it is the *exact* tanh: Inductor lowers it to libdevice's ``tanh``
#   (its ``use_fast_math`` switch changes tanh only on ROCm), and torch has no
#   approximate-tanh op;
# * the same with the *approximate* tanh Flex users ship (attention-gym's
#   ``approx::tanh``: a custom op that Inductor lowers to the PTX instruction
#   ``tanh.approx.f32`` through ``inline_asm_elementwise``);
# * FlashAttention-4's native ``softcap=`` (its source computes the approximate,
#   fastmath tanh);
# * cuDNN's causal graph without a cap (its own causal band), the control: what the
#   ``score_mod`` costs.
#
# ``softcap_attention.flex_softcap`` (in ``cudnn_guide/studies/softcap_attention.py``)
# writes both FlexAttention variants; ``softcap_attention.causal_graph`` builds the
# control. Each soft-capped contender is checked against the fp32 reference first.
from torch.nn.attention.flex_attention import flex_attention

from cudnn_guide import check, graphs
from cudnn_guide.graphs import attention_inputs
from cudnn_guide.measure import baselines, compare, fa4
from cudnn_guide.studies import softcap_attention

softcap = graphs.adopt(g, handle, name="softcap")
check.poison(o_cap)
softcap.execute(softcap_pack)
print(check.check(o_cap, ref_cap, name=f"cuDNN score_mod soft-cap {CAP:g}, causal"))
uncapped = attention_inputs.reference(q, k, v, visible=visible)
cap_effect = ((uncapped - ref_cap).norm() / ref_cap.norm()).item()
print(f"without the cap the result differs by {cap_effect:.2f} (relative L2)")

flex = torch.compile(flex_attention, fullgraph=True)
flex_exact, flex_approx = softcap_attention.flex_softcap(flex, q, k, v, CAP)
print(check.check(flex_exact(), ref_cap, name="FlexAttention soft-cap, causal"))
FLEX_CAP = "FlexAttention soft-cap (compiled)"
FLEX_APPROX = "FlexAttention soft-cap, tanh.approx (compiled)"
CAP_CTRL = "cuDNN causal, no cap (control)"
softcap_contenders = {
    "cuDNN soft-cap (score_mod)": softcap.bind(softcap_pack),
    FLEX_CAP: flex_exact,
    CAP_CTRL: softcap_attention.causal_graph(handle, q, k, v),
}
unavailable = {}  # contender name -> why it did not run
if why := baselines.admit(softcap_contenders, FLEX_APPROX, flex_approx, ref_cap):
    unavailable[FLEX_APPROX] = why
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if FA4_OK:
    fa4_cap = fa4.forward(q, k, v, causal=True, scale=D**-0.5, softcap=CAP)
    if why := baselines.admit(softcap_contenders, f"{FA4}, softcap", fa4_cap, ref_cap):
        unavailable[f"{FA4}, softcap"] = why
else:
    print(f"{FA4}: {FA4_DETAIL}")
softcap_cmp = compare.compare(
    softcap_contenders,
    candidate="cuDNN soft-cap (score_mod)",
    l2="cold",
    rounds=7,
    flops=4 * B * H * D * int(visible.sum()),  # 4·B·H·D per visible (query, key) pair
    tag="softcap",
)

# %%
# What cuDNN refuses
# ------------------
# ``score_mod`` and cuDNN's own causal band cannot be combined, which is why the lesson
# writes its mask in the callback: the graph that asks for both
# (``softcap_attention.refusal``) is refused (cuDNN's words, first line).
refused = softcap_attention.refusal(handle, q, k, v)  # "accepted", or cuDNN's words
print("score_mod + diagonal_band_right_bound=0:")
print(*refused.split(": ", 1), sep="\n  ")

# %%
# Every contender's time, and cuDNN's speed-up over it (in-run 95% interval over rounds,
# verdict against the measured tie band). Times and rates are medians of per-round
# medians (``Comparison.estimate``, as in the plot and conclusions), not the record's
# pooled medians. A contender whose host time per call reaches 0.8 of its GPU time makes
# ``compare`` also race back-to-back loops of calls: the conclusions' loop verdicts.
import pandas as pd

from cudnn_guide.report import html_table

US = "µs, median of round medians"
html_table(
    pd.DataFrame(softcap_attention.contender_rows(softcap_cmp, US)),
    {US: "{:.0f}", "TFLOP/s": "{:.0f}", "cuDNN's speed-up": "{:.2f}×"},
)

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison

fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
plot_comparison(
    softcap_cmp, "µs", ax=ax, xlabel="µs per call", title="soft-cap, causal"
)
plt.show()

# %%
# Conclusions
# -----------
# Computed when the page is recorded (``softcap_attention.conclusions``); "the fastest
# contender" leaves out the control.
from cudnn_guide.report.prose import Prose

sentences = softcap_attention.conclusions(
    softcap_cmp,
    control=CAP_CTRL,
    flex_exact=FLEX_CAP,
    flex_approx=FLEX_APPROX,
    fa4_label=FA4,
    fa4_detail=FA4_DETAIL,
    refused=refused,
    unavailable=unavailable,
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison

# against the fastest contender at this shape (the record names which); the slower
# ones, FlexAttention among them, are in the prose
comparison("soft-cap: speed-up over the fastest contender", softcap_cmp)
# sphinx_gallery_end_ignore
Prose(*sentences)
