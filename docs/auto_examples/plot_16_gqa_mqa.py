"""
Grouped-query and multi-query attention
=======================================

Most current LLMs give K and V fewer heads than Q: grouped-query attention (GQA, e.g. 32
query heads sharing 8 K/V heads) or multi-query attention (MQA, one K/V head). cuDNN's
SDPA takes such K and V as they are: declare K and V with ``Hkv`` heads, and each group
of ``Hq / Hkv`` query heads reads the same K/V head. Nothing is repeated in memory. Here
you build the GQA forward and backward graphs, check them against PyTorch, then time
prefill and decode against PyTorch's SDPA and FlashAttention-4.

What you will learn:

* how a GQA graph differs from an MHA one (only the K/V head count), forward and
  backward;
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
env

# %%
# The lesson: K and V simply have fewer heads
# -------------------------------------------
# Q is B×Hq×S×D, K and V are B×Hkv×S×D. The ``sdpa`` node reads the head counts from the
# tensors; the five build steps and ``execute`` are the same as for any attention graph.
# This forward keeps its softmax statistics (one fp32 log-sum-exp per query row) for
# the backward graph below.
import cudnn
import torch

b, hq, hkv, s, d = 2, 32, 8, 1024, 128  # 4 query heads share each K/V head
q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
o = torch.empty_like(q)
stats = torch.empty(b, hq, s, 1, device="cuda", dtype=torch.float32)
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)

g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
Q = g.tensor_like(q, name="q")
K = g.tensor_like(k, name="k")  # Hkv heads: all cuDNN needs to know
V = g.tensor_like(v, name="v")
# causal: key j is visible to query i when j ≤ i
top_left = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=top_left, diagonal_band_right_bound=0)
O, STATS = g.sdpa(
    name="sdpa", q=Q, k=K, v=V, attn_scale=d**-0.5, generate_stats=True, **causal
)
O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT)
STATS.set_dim(list(stats.shape)).set_stride(list(stats.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute({Q: q, K: k, V: v, O: o, STATS: stats}, workspace, handle=handle)

# %%
# The backward graph: ``sdpa_backward`` reads the forward's output and statistics and
# writes dK and dV with Hkv heads, each the sum of the gradients of the query heads in
# its group.
d_o = torch.randn_like(q)
dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
gb = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
QB = gb.tensor_like(q, name="q")
KB = gb.tensor_like(k, name="k")
VB = gb.tensor_like(v, name="v")
OB = gb.tensor_like(o, name="o")
DOB = gb.tensor_like(d_o, name="dO")
STATS_B = gb.tensor_like(stats, name="stats")
DQ, DK, DV = gb.sdpa_backward(
    q=QB, k=KB, v=VB, o=OB, dO=DOB, stats=STATS_B, attn_scale=d**-0.5, **causal
)
DQ.set_output(True).set_dim(list(dq.shape)).set_stride(list(dq.stride()))
DK.set_output(True).set_dim(list(dk.shape)).set_stride(list(dk.stride()))
DV.set_output(True).set_dim(list(dv.shape)).set_stride(list(dv.stride()))
gb.validate()
gb.build_operation_graph()
gb.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
gb.check_support()
gb.build_plans()
bwd_pack = {QB: q, KB: k, VB: v, OB: o, DOB: d_o, STATS_B: stats}
bwd_pack |= {DQ: dq, DK: dk, DV: dv}
bwd_workspace = torch.empty(gb.get_workspace_size(), device="cuda", dtype=torch.uint8)
gb.execute(bwd_pack, bwd_workspace, handle=handle)

# %%
# The check: fp32 autograd on K and V with each head repeated for its group of query
# heads (``repeat_interleave``); autograd sums the group's gradients back into each
# K/V head, as cuDNN does.
qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
group = hq // hkv
ref = torch.nn.functional.scaled_dot_product_attention(
    qr, kr.repeat_interleave(group, 1), vr.repeat_interleave(group, 1), is_causal=True
)
ref.backward(d_o.float())
torch.testing.assert_close(o.float(), ref.detach(), atol=2e-2, rtol=2e-2)
for name, ours, r in (("dQ", dq, qr.grad), ("dK", dk, kr.grad), ("dV", dv, vr.grad)):
    torch.testing.assert_close(ours.float(), r, atol=5e-2, rtol=5e-2)
    print(f"{name}: max |cuDNN - fp32 autograd| = {(ours.float() - r).abs().max():.1e}")

# %%
# Measuring what GQA saves
# ------------------------
# The K/V cache holds ``2 · Hkv · D`` values per token per layer. With 32 query heads of
# 128:
import pandas as pd

from cudnn_guide.report import html_table

B, HQ, S, D = 4, 32, 4096, 128  # the prefill measured below
CACHE = "K/V cache, 32k tokens × 32 layers (GiB)"
rows = []
for heads in (32, 8, 1):
    per_token = 2 * heads * D * 2  # K and V, bf16
    rows.append(
        {
            "K/V heads": heads,
            "kind": {32: "MHA", 8: "GQA", 1: "MQA"}[heads],
            "K/V bytes per token per layer": per_token,
            CACHE: per_token * 32768 * 32 / 2**30,
        }
    )
html_table(pd.DataFrame(rows), {CACHE: "{:.2f}"})

# %%
# Measuring prefill and decode against PyTorch and FlashAttention-4
# -----------------------------------------------------------------
# For each head layout, the cuDNN graph (heuristics A, declared by
# :func:`~cudnn_guide.graphs.attention.sdpa_graph`) races PyTorch's SDPA with
# ``enable_gqa=True`` on each backend, forced with ``sdpa_kernel`` ("PyTorch flash" is
# FlashAttention-2; "PyTorch cuDNN" calls cuDNN's own kernel, so it should tie) and
# FlashAttention-4 (``flash_attn.cute.flash_attn_func``, on its own B×S×H×D copy), in
# interleaved rounds. Prefill is 4 × 4096 tokens, causal; decode is one new token for
# each of 32 sequences over 8192 cached ones, where the K/V reads dominate.
#
# First the lesson's outputs, checked the way every contender is (relative L2 error
# against the fp32 reference, recorded with the page).
import re
import textwrap
import warnings

from cudnn_guide import check
from cudnn_guide.graphs import attention, attention_inputs
from cudnn_guide.measure import baselines, compare, fa4

checks = [check.check(o, ref, name="GQA forward, Hq=32, Hkv=8")]
for name, ours, r in (("dq", dq, qr.grad), ("dk", dk, kr.grad), ("dv", dv, vr.grad)):
    checks.append(check.check(ours, r, name=f"GQA backward {name}, Hkv=8"))
worst = max(c.rel_error for c in checks)
print(f"the lesson's {len(checks)} outputs pass; worst rel. error {worst:.1e}")
BACKENDS = baselines.sdpa_backends()
CAND = "cuDNN graph"
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
# the CuTe DSL warns once per kernel that it cannot convert FA4's aux_data argument;
# the kernel runs and is checked all the same
warnings.filterwarnings("ignore", message="Argument aux_data", category=UserWarning)


WRAP = dict(subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)


def refusal(launch):
    """Why ``launch`` cannot run here, whole: its error and PyTorch's reasons."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            launch()
        except Exception as error:
            said = [" ".join(str(w.message).split()) for w in caught]
            said = [
                re.sub(r"\s*\(Triggered internally at [^)]*\)", "", m) for m in said
            ]
            # without what forcing one backend causes (the others "runtime disabled"),
            # and a "... not used because:" header only with the reason that follows it
            said = [
                m for m in dict.fromkeys(said) if "has been runtime disabled" not in m
            ]
            said = [
                m
                for m, after in zip(said, said[1:] + [":"])
                if not (m.endswith(":") and after.endswith(":"))
            ]
            why = f"{type(error).__name__}: {' '.join(str(error).split())}"
            return why + (f" ({'; '.join(said).replace(':; ', ': ')})" if said else "")
    return None


def qkv(heads, seq, batch, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = ((batch, HQ, seq, D), (batch, heads, seq, D), (batch, heads, seq, D))
    return [
        torch.randn(x, device="cuda", dtype=torch.bfloat16, generator=gen)
        for x in shapes
    ]


PHASES = {"prefill": (B, S, S), "decode": (32, 1, 8192)}  # batch, queries, keys
results, kv_bytes = {}, {}
for phase, (batch, s_q, s_kv) in PHASES.items():
    for heads in (32, 8, 1):
        q, k, v = qkv(heads, seq=s_kv, batch=batch, seed=heads)
        q = q[:, :, -s_q:].contiguous()
        o = torch.empty_like(q)
        is_causal = phase == "prefill"  # a decode query sees every cached key: no mask
        problem = attention.SdpaProblem(batch, HQ, s_kv, D, causal=is_causal)
        fused = attention.sdpa_graph(problem, dict(q=q, k=k, v=v, o=o), handle=handle)
        contenders = {CAND: fused.bind(fused.pack(q=q, k=k, v=v, o=o))}
        band = attention_inputs.band(s_q, s_kv, device="cuda") if is_causal else None
        reference = attention_inputs.reference(q, k, v, visible=band)
        contenders[CAND]()
        checks.append(check.check(o, reference, name=f"cuDNN {phase}, Hkv={heads}"))
        for name, backend in BACKENDS.items():
            attend = baselines.forced_sdpa(
                backend, is_causal=is_causal, enable_gqa=True
            )
            launch = lambda attend=attend, q=q, k=k, v=v: attend(q, k, v)
            why = refusal(launch)
            if why:  # printed whole, wrapped at 88 characters
                print(textwrap.fill(f"{name}: unavailable here ({why})", 88, **WRAP))
                continue
            baselines.admit(
                contenders,
                name,
                launch,
                check=lambda out, n=f"{name} {phase}, Hkv={heads}": check.check(
                    out, reference, name=n
                ),
            )
        if FA4_OK:  # prints why FA4 cannot run this layout, if it cannot
            baselines.admit(
                contenders,
                FA4,
                fa4.forward(q, k, v, causal=is_causal, scale=D**-0.5),
                check=lambda out, n=f"FA4 {phase}, Hkv={heads}": check.check(
                    out, reference, name=n
                ),
            )
        kv_bytes[(phase, heads)] = 2 * k.numel() * k.element_size()
        flops = 4 * batch * HQ * s_q * s_kv * D / (2 if is_causal else 1)
        results[(phase, heads)] = compare.compare(
            contenders,
            candidate=CAND,
            l2="cold",
            rounds=9,
            flops=flops,
            bytes=kv_bytes[(phase, heads)] + 2 * q.numel() * 2,
            tag=f"{phase} Hkv={heads}",
        )
        del fused, contenders, q, k, v, o

# %%
# Each phase's three comparisons read as one sweep over the K/V heads
# (``SweepResult.from_comparisons``): the time per call, the bytes read per second (the
# K/V cache and Q, which bound decode), and the cuDNN graph's speed-up over each backend
# that ran.
from cudnn_guide.measure import sweep
from cudnn_guide.report import sweep_table

by_phase = {
    phase: sweep.SweepResult.from_comparisons(
        "K/V heads", {heads: results[(phase, heads)] for heads in (32, 8, 1)}
    )
    for phase in ("prefill", "decode")
}
sweep_table(by_phase["prefill"], "median_us", title="prefill: µs per call (median)")

# %%
sweep_table(
    by_phase["decode"],
    "gbps",
    title="decode: GB/s of K/V and Q read and O written (higher is better)",
)

# %%
verdicts = [
    {"phase": phase, **row} for phase, res in by_phase.items() for row in res.verdicts()
]
html_table(pd.DataFrame(verdicts), {"speed-up": "{:.2f}×"})

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_bars

fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
for ax, (phase, res) in zip(axes, by_phase.items()):
    plot_bars(
        res.measurements,
        x="K/V heads",
        metric="median_us",
        ax=ax,
        title=f"{phase}: 32 query heads",
    )
plt.show()

# %%
# Conclusions
# -----------
# Computed from the comparisons above. Each verdict, and every count of them, judges GPU
# time; where a contender's host time per call came close to its GPU time
# (``compare.host_bound``), the comparison also raced the contenders in back-to-back
# loops, host time included, and that loop verdict is printed beside the GPU one without
# being counted. "Fastest" is judged the way the comparisons judge: by the cuDNN graph's
# speed-up over each contender, round by round, and a tie where that comparison is a
# tie. The times quoted are each contender's median over all its timed calls, as in the
# prefill table and the plot.
# Each layout's cuDNN graph is judged against the fastest *other* implementation:
# "PyTorch cuDNN" calls cuDNN's own kernel, so it stays in the tables above but is not
# counted as a rival (nor is any ``(control …)`` contender).
from cudnn_guide.report.prose import Prose

SELF = "PyTorch cuDNN"  # PyTorch's SDPA on its cuDNN backend: cuDNN itself


def median_us(c, name):
    """``name``'s median over all its timed calls (µs), as the tables and the record."""
    return c.measurements[name].median_ms * 1e3


def fastest_other(c):
    """The fastest baseline that is not cuDNN itself nor a control (None if none)."""
    others = [n for n in c.versus if n != SELF and "(control" not in n]
    return min(others, key=lambda n: c.versus[n]["value"], default=None)


def fastest(c):
    """The fastest contender by the comparisons' speed-ups, and those tied with it."""
    rivals = {n: v for n, v in c.versus.items() if "(control" not in n}
    lead = min(rivals, key=lambda n: rivals[n]["value"], default=None)
    tied = [n for n, v in rivals.items() if v["verdict"] == "tie"]  # with the graph
    if lead is None or rivals[lead]["value"] >= 1:  # no one beat the cuDNN graph
        return c.candidate, tied
    if rivals[lead]["verdict"] == "tie":
        return lead, [c.candidate] + [n for n in tied if n != lead]
    return lead, []


def short(name):
    """The name without its version ("FlashAttention-4 (flash-attn-4 …)")."""
    return "the cuDNN graph" if name == CAND else name.split(" (")[0]


def in_words(names):
    """Names in words: "a", "a and b", "a, b and c"."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def times(ratio):
    """``ratio`` (old time / new time) as "N× less time", "N× more time" or the same."""
    if abs(ratio - 1) < 0.005:
        return "the same time"
    return f"{ratio:.1f}× less time" if ratio > 1 else f"{1 / ratio:.1f}× more time"


dec = {heads: results[("decode", heads)].estimate(CAND) for heads in (32, 8, 1)}
dec_us = {heads: median_us(results[("decode", heads)], CAND) for heads in (32, 8, 1)}
pre_us = {heads: median_us(results[("prefill", heads)], CAND) for heads in (32, 8, 1)}
rival = {key: fastest_other(c) for key, c in results.items()}
judged = [c.versus[rival[key]]["verdict"] for key, c in results.items() if rival[key]]
leads = {key: fastest(c) for key, c in results.items()}
clear = [short(lead) for lead, tied in leads.values() if not tied]
won = [
    f"{name} in {clear.count(name)}"
    for name in sorted(set(clear), key=clear.count, reverse=True)
]
n_tied = sum(1 for _, tied in leads.values() if tied)
won += [f"a tie with the cuDNN graph in {n_tied}"] if n_tied else []
fewer = kv_bytes[("decode", 32)] / kv_bytes[("decode", 8)]
sentences = [
    f"Decode reads {fewer:.0f}× fewer K/V bytes with 8 K/V heads than with 32: "
    f"the cuDNN graph takes {dec_us[32]:.1f} µs with 32 K/V heads, "
    f"{dec_us[8]:.1f} µs with 8 and {dec_us[1]:.1f} µs with 1 "
    f"(with 8: {times(dec_us[32] / dec_us[8])}; with 1: "
    f"{times(dec_us[32] / dec_us[1])}; each against 32; medians over all timed calls).",
    f"Prefill does the same arithmetic with 32, 8 or 1 K/V heads: the cuDNN graph "
    f"takes {pre_us[32]:.1f}, {pre_us[8]:.1f} and {pre_us[1]:.1f} µs "
    "for 32, 8 and 1 K/V heads (the prefill table's medians).",
    f"By the comparisons' speed-ups, the fastest implementation of the {len(leads)} "
    f"layouts was: {'; '.join(won)}. Against the fastest other implementation of each "
    f"layout ({SELF}, cuDNN's own kernel, not counted), the cuDNN graph is faster in "
    f"{judged.count('faster')}, ties in {judged.count('tie')} and is slower in "
    f"{judged.count('slower')} of {len(judged)} layouts.",
]
fa = [c.versus[FA4]["verdict"] for c in results.values() if FA4 in c.versus]
if fa:
    sentences.append(
        f"Against {FA4} alone, the cuDNN graph is faster in {fa.count('faster')}, "
        f"ties in {fa.count('tie')} and is slower in {fa.count('slower')} "
        f"of {len(fa)} layouts."
    )
elif FA4_OK:
    sentences.append(f"{FA4} refused every layout (its errors are printed above).")
else:
    sentences.append(f"{FA4} was not timed: {FA4_DETAIL}.")
looped = {
    key: compare.host_bound(c) for key, c in results.items() if c.wall is not None
}
if looped:
    sentences.append(
        f"In {len(looped)} of {len(results)} layouts, a contender's host time per "
        f"call reached {compare.HOST_BOUND:.0%} of its GPU time ("
        + "; ".join(
            f"{phase}, {heads} K/V heads"
            + (f": {in_words(map(short, hosts))}" if hosts else "")
            for (phase, heads), hosts in looped.items()
        )
        + "), so the contenders were also raced in back-to-back loops, host time "
        "included. Those loop verdicts are given in the lines below; the counts above "
        "judge GPU time only."
    )
for (phase, heads), c in results.items():
    (best, tied), other = leads[(phase, heads)], rival[(phase, heads)]
    line = f"* {phase}, {heads} K/V heads: fastest was "
    if tied:
        line += "a tie of " + in_words(
            f"{short(n)} ({median_us(c, n):.1f} µs)" for n in (best, *tied)
        )
    else:
        line += f"{short(best)} ({median_us(c, best):.1f} µs)"
    if other:
        line += f"; against the fastest other, the cuDNN graph is {c.describe(other)}"
    if SELF in c.versus:
        line += f"; against {SELF}: {c.versus[SELF]['verdict']} "
        line += f"({c.versus[SELF]['value']:.2f}×)"
    sentences.append(line + ".")
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

for (phase, heads), c in results.items():
    other = rival[(phase, heads)]  # the fastest implementation that is not cuDNN
    if other:
        comparison(  # the title stays the same whichever wins; the record names it
            f"{phase}, Hkv={heads}: speed-up over the fastest other implementation",
            c,
            other,
        )
headline("decode time, Hkv=8", unit="µs", **dec[8])
# sphinx_gallery_end_ignore
Prose(*sentences)
