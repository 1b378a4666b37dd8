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
import textwrap

from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from cudnn_guide import check, graphs
from cudnn_guide.graphs import attention_inputs
from cudnn_guide.measure import baselines, compare, fa4

checks = [check.check(o, ref, name=f"sliding window W={W}")]
print(checks[-1])
del ref


def launcher(g, pack):
    return graphs.adopt(g, handle, name="masked attention").bind(pack)


FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if not FA4_OK:
    print(textwrap.fill(f"{FA4}: {FA4_DETAIL}", 88))

flex = torch.compile(flex_attention, fullgraph=True)
# read by the mask at run time: one compiled kernel serves every width
WINDOW = torch.tensor(0, device="cuda")


def window_mod(b, h, qi, ki):
    return (ki <= qi) & (qi - ki < WINDOW)


causal, causal_pack = masked_attention(
    q,
    k,
    v,
    torch.empty_like(q),
    diagonal_alignment=TOP_LEFT,
    diagonal_band_right_bound=0,
)
CAND, CONTROL = "cuDNN window", "cuDNN causal, no window (control)"
windows, by_window = [4096, 2048, 1024, 512, 256, 128], {}
for w in windows:
    attention_inputs.check_window(w, S)
    o_w = torch.empty_like(q)
    gw, pack_w = masked_attention(
        q,
        k,
        v,
        o_w,
        diagonal_alignment=TOP_LEFT,
        diagonal_band_right_bound=0,
        diagonal_band_left_bound=w,
    )
    WINDOW.fill_(w)
    mask_w = create_block_mask(window_mod, None, None, S, S)
    ref = attention_inputs.reference(
        q, k, v, visible=attention_inputs.band(S, S, left=w, device="cuda")
    )
    launch = launcher(gw, pack_w)
    launch()
    checks.append(check.check(o_w, ref, name=f"cuDNN window W={w}"))
    checks.append(
        check.check(
            flex(q, k, v, block_mask=mask_w), ref, name=f"FlexAttention window W={w}"
        )
    )
    pairs = int(attention_inputs.band(S, S, left=w, device="cuda").sum())
    contenders = {
        CAND: launch,
        "FlexAttention (compiled)": lambda m=mask_w: flex(q, k, v, block_mask=m),
        CONTROL: launcher(causal, causal_pack),
    }
    if FA4_OK:  # prints why FA4 cannot run this window, if it cannot
        run_fa4 = fa4.forward(
            q, k, v, causal=True, scale=D**-0.5, window_size=(w - 1, 0)
        )
        baselines.admit(
            contenders,
            FA4,
            run_fa4,
            check=lambda out: check.check(out, ref, name=f"{FA4} window W={w}"),
        )
    by_window[w] = compare.compare(
        contenders,
        candidate=CAND,
        l2="cold",
        rounds=7,
        flops=4 * B * H * D * pairs,
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
# the standard slopes ``2^(−8(h+1)/H)``. Both with the causal band.
gen = torch.Generator(device="cuda").manual_seed(0)
bias = torch.randn(1, H, S, S, device="cuda", dtype=torch.bfloat16, generator=gen)
with_bias, bias_pack = masked_attention(
    q, k, v, o, bias=bias, diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0
)
check.poison(o)
run(with_bias, bias_pack)
causal_visible = attention_inputs.band(S, S, device="cuda")
checks.append(
    check.check(
        o,
        attention_inputs.reference(q, k, v, visible=causal_visible, bias=bias),
        name="bias",
    )
)
print(checks[-1])

alibi, alibi_pack = masked_attention(
    q,
    k,
    v,
    o,
    use_alibi_mask=True,
    diagonal_alignment=TOP_LEFT,
    diagonal_band_right_bound=0,
)
check.poison(o)
run(alibi, alibi_pack)
slopes = torch.tensor([2 ** (-8 * (h + 1) / H) for h in range(H)], device="cuda")
positions = torch.arange(S, device="cuda")
alibi_bias = (
    slopes[:, None, None] * (positions[None, :] - positions[:, None])[None]
).unsqueeze(0)
checks.append(
    check.check(
        o,
        attention_inputs.reference(q, k, v, visible=causal_visible, bias=alibi_bias),
        name="ALiBi",
    )
)
print(checks[-1])


def alibi_mod(score, b, h, qi, ki):
    return score + slopes[h] * (ki - qi)


causal_block = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, S, S)
checks.append(
    check.check(
        flex(q, k, v, score_mod=alibi_mod, block_mask=causal_block),
        attention_inputs.reference(q, k, v, visible=causal_visible, bias=alibi_bias),
        name="FlexAttention ALiBi",
    )
)
bias_cmp = compare.compare(
    {
        "cuDNN ALiBi": launcher(alibi, alibi_pack),
        "FlexAttention ALiBi (compiled)": lambda: flex(
            q, k, v, score_mod=alibi_mod, block_mask=causal_block
        ),
        "cuDNN bias tensor (control)": launcher(with_bias, bias_pack),
        "cuDNN causal, no bias (control)": launcher(causal, causal_pack),
    },
    candidate="cuDNN ALiBi",
    l2="cold",
    rounds=9,
    tag="alibi",
)
for name, s in bias_cmp.versus.items():
    print(f"cuDNN ALiBi vs {name}: {s['value']:.2f}× ({s['verdict']})")

# %%
# Conclusions
# -----------
# Computed from the comparisons above when the page is recorded. Whether
# FlashAttention-4 takes ALiBi or a bias tensor is read from ``flash_attn_func``'s
# signature.
import dataclasses
import inspect

from cudnn_guide.report.prose import Prose

if FA4_OK:
    from flash_attn.cute import flash_attn_func

    fa4_args = set(inspect.signature(flash_attn_func).parameters)
    if "alibi_slopes" in fa4_args:
        fa4_masks = (
            f"{FA4}'s flash_attn_func takes alibi_slopes, but this page does "
            "not time it."
        )
    else:
        no_bias = "" if "attn_bias" in fa4_args else ", nor a bias tensor"
        fa4_masks = (
            f"FA4: not supported (no ALiBi in flash_attn_func: {FA4} takes no "
            f"alibi_slopes{no_bias}), so it is not in the ALiBi race. A "
            "score_mod written in the CuTe DSL could add ALiBi; this page "
            "does not attempt it."
        )
else:
    fa4_masks = f"{FA4} was not timed: {FA4_DETAIL}."
FLEX = "FlexAttention (compiled)"
full, narrow = by_window[windows[0]], by_window[windows[-1]]


def said(c, name=None):
    """``c.describe(name)``; the loop verdict with its own tie band and rounds."""
    name = name or c.best_baseline
    text = dataclasses.replace(c, wall=None).describe(name)  # GPU time only
    if c.wall is not None and name in c.wall.versus:
        w = c.wall.versus[name]
        text += (
            f"; in a back-to-back loop, host time included: {w['verdict']} "
            f"({w['value']:.2f}×, {w['low']:.2f}–{w['high']:.2f}; loop tie band "
            f"±{100 * c.wall.tie_band:.1f}%, {c.wall.rounds} rounds)"
        )
    return text


def also(c, *names):
    """The comparisons of ``c`` against ``names`` other than its fastest contender."""
    return "".join(
        f"; vs {n}: {said(c, n)}"
        for n in names
        if n in c.versus and n != c.best_baseline
    )


sentences = [
    f"Shrinking the window from {windows[0]} to {windows[-1]} keys takes the cuDNN "
    f"graph from {full.estimate(CAND)['value']:.0f} to "
    f"{narrow.estimate(CAND)['value']:.0f} µs; the dense causal graph takes "
    f"{narrow.estimate(CONTROL)['value']:.0f} µs. At each width, against the "
    "fastest contender there (then against the others):",
]
sentences += [
    f"* W={w}: cuDNN is {said(c)}{also(c, FA4, FLEX)}." for w, c in by_window.items()
]
best = [c.versus[c.best_baseline]["verdict"] for c in by_window.values()]
sentences.append(
    f"Against the fastest contender at each width, cuDNN is faster at "
    f"{best.count('faster')}, ties at {best.count('tie')} and is slower at "
    f"{best.count('slower')} of {len(best)} widths."
)
fa = {w: c for w, c in by_window.items() if FA4 in c.versus}
if any(c.best_baseline != FA4 for c in fa.values()):  # else the count above says it
    verdicts = [c.versus[FA4]["verdict"] for c in fa.values()]
    sentences.append(
        f"Against {FA4} with window_size, cuDNN is faster at "
        f"{verdicts.count('faster')}, ties at {verdicts.count('tie')} and is slower at "
        f"{verdicts.count('slower')} of {len(verdicts)} widths."
    )
elif FA4_OK and not fa:
    sentences.append(f"{FA4} ran at none of the widths (the reasons are above).")
flex_alibi = "FlexAttention ALiBi (compiled)"
bias_tensor = "cuDNN bias tensor (control)"
sentences += [
    f"ALiBi in the kernel: {said(bias_cmp, flex_alibi)}; against reading a bias "
    f"tensor instead: {said(bias_cmp, bias_tensor)}.",
    fa4_masks,
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
