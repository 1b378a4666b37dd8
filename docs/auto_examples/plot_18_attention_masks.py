"""
Attention masks: sliding windows, bias, ALiBi
=============================================

Causal is one mask among several that models use. cuDNN's SDPA describes the common
ones without a mask tensor, as a *diagonal band*, and takes the rest as an additive
bias. This page builds a sliding-window graph, checks it against PyTorch, then times
windows against FlexAttention and FlashAttention-4 and ALiBi against FlexAttention.

The band aligned to the last key instead (``diagonal_alignment=BOTTOM_RIGHT``), for a
chunk of new queries over a longer prefix, and chunked prefill over a paged K/V cache
are on the
:ref:`chunked prefill page <sphx_glr_auto_examples_plot_33_chunked_prefill.py>`.

What you will learn:

* ``diagonal_band_right_bound=0``: no key after the query's diagonal position (causal);
* ``diagonal_band_left_bound=W``: only the W most recent keys (a sliding window, as in
  Mistral or Gemma's local layers);
* ``bias=``: an additive tensor broadcast over the scores; ``use_alibi_mask=True``:
  ALiBi's per-head linear bias, computed in the kernel;
* how the time falls as the window shrinks, against the dense causal kernel, PyTorch's
  FlexAttention and FlashAttention-4's ``window_size``; what a bias costs.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: a sliding window as a diagonal band
# -----------------------------------------------
# ``diagonal_band_left_bound=W`` keeps key ``j`` for query ``i`` when ``i - W < j ≤ i``:
# the query itself and the W - 1 keys before it. ``masked_attention`` passes its mask
# keywords straight to ``g.sdpa``; a tensor among them (a bias, further down) becomes an
# input of the graph. It returns the built graph and its variant pack; ``run`` gives it
# a workspace and executes it on torch's stream.
import cudnn
import torch

B, H, S, D, W = 4, 16, 4096, 128, 512  # W: the window, in keys
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in "qkv")
o = torch.empty_like(q)

handle = cudnn.create_handle()
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT


def masked_attention(q, k, v, o, **mask):
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    Q = g.tensor_like(q, name="q")
    K = g.tensor_like(k, name="k")
    V = g.tensor_like(v, name="v")
    pack = {Q: q, K: k, V: v}
    for name, value in list(mask.items()):
        if isinstance(value, torch.Tensor):  # a bias
            mask[name] = g.tensor_like(value, name=name)
            pack[mask[name]] = value
    O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, **mask)
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    pack[O] = o
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, pack


def run(g, pack):
    workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    g.execute(pack, workspace, handle=handle)


CAUSAL = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)
window, window_pack = masked_attention(q, k, v, o, **CAUSAL, diagonal_band_left_bound=W)
run(window, window_pack)

# %%
# The same mask written out for PyTorch, in fp32: ``tril`` keeps the keys ``j ≤ i``,
# ``triu(1 - W)`` the keys ``j > i - W``.
visible = torch.ones(S, S, dtype=torch.bool, device="cuda").tril().triu(1 - W)
scores = (q.float() @ k.float().transpose(-1, -2)) * D**-0.5
ref = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1) @ v.float()
torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)

# %%
# Measuring how the time falls with the window
# --------------------------------------------
# The page's checks (relative error against the fp32 reference, by dtype) come first. At
# each width, the cuDNN window graph races FlexAttention (compiled, with a block mask
# for the same window), FlashAttention-4 (``window_size=(W - 1, 0)``: the W - 1 keys
# before the query, and none after it) and, as a control, cuDNN's dense causal graph, in
# interleaved rounds. The useful work is the number of visible (query, key) pairs.
# ``race.contenders(w)`` (``attention_masks.WindowRace``, in
# ``cudnn_guide/studies/attention_masks.py``) builds the width's graph with
# ``masked_attention`` and checks it, FlexAttention and FlashAttention-4 against that
# window's fp32 reference (all recorded; only FlashAttention-4's are printed below).
import textwrap

from torch.nn.attention.flex_attention import flex_attention

from cudnn_guide import check, graphs
from cudnn_guide.measure import compare, fa4
from cudnn_guide.studies import attention_masks

print(check.check(o, ref, name=f"sliding window W={W}"))
del ref


def launcher(g, pack):
    return graphs.adopt(g, handle, name="masked attention").bind(pack)


FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if not FA4_OK:
    print(textwrap.fill(f"{FA4}: {FA4_DETAIL}", 88))

flex = torch.compile(flex_attention, fullgraph=True)
causal, causal_pack = masked_attention(q, k, v, torch.empty_like(q), **CAUSAL)
CAND, CONTROL = "cuDNN window", "cuDNN causal, no window (control)"
race = attention_masks.WindowRace(
    masked_attention,
    launcher,
    (q, k, v),
    mask=CAUSAL,
    flex=flex,
    candidate=CAND,
    control=(CONTROL, causal, causal_pack),
    fa4_label=FA4 if FA4_OK else None,
)
windows, by_window = [4096, 2048, 1024, 512, 256, 128], {}
for w in windows:  # the width's contenders, checked, then raced
    by_window[w] = compare.compare(
        race.contenders(w),
        candidate=CAND,
        l2="cold",
        rounds=7,
        flops=race.flops(w),
        tag=f"W={w}",
    )

# %%
# One comparison per window, read as one sweep (``SweepResult.from_comparisons``): the
# time per call of each implementation, then the cuDNN graph's speed-up over each other
# one.
import pandas as pd

from cudnn_guide.measure import sweep
from cudnn_guide.report import html_table, sweep_table

windows_result = sweep.SweepResult.from_comparisons("window W", by_window)
sweep_table(windows_result, "median_us", title="µs per call (median)")

# %%
html_table(pd.DataFrame(windows_result.verdicts()), {"speed-up": "{:.2f}×"})

# %%
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_sweep

plot_sweep(
    windows_result,
    "median_us",
    logx=True,
    title=f"sliding-window attention, {B}×{H} heads × {S} tokens, d={D}",
)
plt.show()

# %%
# Measuring bias and ALiBi
# -------------------------
# A bias tensor is read from memory for every score tile (here 1×H×S×S bf16, broadcast
# over the batch); ALiBi's bias ``slope_h · (j − i)`` is computed in the kernel, with
# the standard slopes ``2^(−8(h+1)/H)``. Both with the causal band, each run into a
# poisoned output and checked against the fp32 causal reference with that bias
# (``attention_masks.checked_run``); FlexAttention's ALiBi is its ``score_mod``.
gen = torch.Generator(device="cuda").manual_seed(0)
bias = torch.randn(1, H, S, S, device="cuda", dtype=torch.bfloat16, generator=gen)
with_bias, bias_pack = masked_attention(q, k, v, o, bias=bias, **CAUSAL)
expected = attention_masks.causal_reference(q, k, v, bias)
print(attention_masks.checked_run(run, with_bias, bias_pack, o, expected, name="bias"))

alibi, alibi_pack = masked_attention(q, k, v, o, use_alibi_mask=True, **CAUSAL)
slopes = attention_masks.alibi_slopes(H)
alibi_bias = attention_masks.alibi_bias(slopes, S)
expected = attention_masks.causal_reference(q, k, v, alibi_bias)
print(attention_masks.checked_run(run, alibi, alibi_pack, o, expected, name="ALiBi"))
flex_alibi = attention_masks.flex_alibi(flex, q, k, v, slopes)
check.check(flex_alibi(), expected, name="FlexAttention ALiBi")
del expected

ALIBI, FLEX_ALIBI = "cuDNN ALiBi", "FlexAttention ALiBi (compiled)"
BIAS_TENSOR = "cuDNN bias tensor (control)"
bias_cmp = compare.compare(
    {
        ALIBI: launcher(alibi, alibi_pack),
        FLEX_ALIBI: flex_alibi,
        BIAS_TENSOR: launcher(with_bias, bias_pack),
        "cuDNN causal, no bias (control)": launcher(causal, causal_pack),
    },
    candidate=ALIBI,
    l2="cold",
    rounds=9,
    tag="alibi",
)
for name, s in bias_cmp.versus.items():
    print(f"cuDNN ALiBi vs {name}: {s['value']:.2f}× ({s['verdict']})")

# %%
# Conclusions
# -----------
# Computed when the page is recorded (``attention_masks.window_sentences``). Verdicts
# are on GPU time, then in a back-to-back loop (host time included) where a contender's
# host time per call neared its GPU time. Whether FlashAttention-4 takes ALiBi or a bias
# tensor is read from ``flash_attn_func``'s signature (``fa4_masks_text``).
from cudnn_guide.report.prose import Prose, gpu_and_loop_text

narrow = by_window[windows[-1]]
sentences = attention_masks.window_sentences(
    by_window, candidate=CAND, control=CONTROL, fa4_label=FA4, fa4_ok=FA4_OK
)
sentences += [
    f"ALiBi in the kernel: {gpu_and_loop_text(bias_cmp, FLEX_ALIBI)}; against reading "
    f"a bias tensor instead: {gpu_and_loop_text(bias_cmp, BIAS_TENSOR)}.",
    attention_masks.fa4_masks_text(FA4, FA4_OK, FA4_DETAIL),
]
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison

# each feature against the fastest contender at its shape (the record names which);
# the slower ones are in the prose above
comparison(
    f"window W={windows[-1]}: speed-up over the fastest contender",
    narrow,
)
comparison(
    "ALiBi: speed-up over FlexAttention", bias_cmp, "FlexAttention ALiBi (compiled)"
)
# sphinx_gallery_end_ignore
Prose(*sentences)
