"""
Frontend 1.32's open-source attention kernels on Hopper
=======================================================

cuDNN Frontend 1.32 ships attention kernels written in the CuTe DSL
(``nvidia-cutlass-dsl``), in source, beside the closed cuDNN library. This page first
builds the sliding-window attention that those kernels are measured on (beside plain
causal), as a cuDNN graph, checks it against PyTorch, then measures the kernels on both.

What you will learn:

* ``cudnn.flex_attention``: attention under an *interval mask*. For every query you list
  the key intervals it may see; ``create_mask_plan`` turns that into a reusable plan and
  ``flex_attn_func`` runs it, forward and backward, here on fixed (BSHD) batches (it
  also takes packed THD batches, which this page does not show);
* ``torch.ops.cudnn.sdpa_fwd``: a PyTorch op over the same SDPA graphs;
* what ``cudnn.flex_attention``'s plan and first-call compilation cost in a fresh
  process, and how both compare with cuDNN's graph SDPA, FlashAttention-4 and PyTorch
  on the same masks, in GPU time and in a back-to-back loop of eager calls.

A graph's planner can also be asked for these open-source engines instead of the
library's (``heur_mode.OPENSOURCE``); which graphs they then serve on this GPU is on the
:ref:`open-source engines page <sphx_glr_auto_examples_plot_31_opensource_engines.py>`.
"""

# %%
# Environment
# -----------
# The open-source kernels need the CuTe DSL; without it, importing
# ``cudnn.flex_attention`` fails and this page says how to install it.
import cudnn_guide
from cudnn_guide import environment

environment.require_sm((9, 0), "cudnn.flex_attention (CuTe DSL kernels)")
env = environment.collect()
try:
    import cudnn.flex_attention as cfa
    import cutlass
except ImportError as exc:
    raise cudnn_guide.CapabilityError(
        "cudnn.flex_attention",
        "the CuTe DSL: pip install 'nvidia-cutlass-dsl[cu13]'",
        f"no CuTe DSL ({exc})",
    ) from exc
print(f"CuTe DSL {cutlass.__version__}")
env

# %%
# The lesson: sliding-window attention as a cuDNN graph
# -----------------------------------------------------
# Each query sees itself and the W - 1 keys before it: a causal band
# (``diagonal_band_right_bound=0``) with a left edge (``diagonal_band_left_bound=W``).
# This is the graph that ``cudnn.flex_attention`` races below.
import cudnn
import torch

B, H, S, D, W = 4, 16, 4096, 128, 512
qb, kb, vb = torch.randn(3, B, H, S, D, device="cuda", dtype=torch.bfloat16)
ob = torch.empty_like(qb)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
Q = g.tensor_like(qb, name="q")
K = g.tensor_like(kb, name="k")
V = g.tensor_like(vb, name="v")
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)
window = dict(causal, diagonal_band_left_bound=W)
O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, **window)
O.set_output(True).set_dim(list(ob.shape)).set_stride(list(ob.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute({Q: qb, K: kb, V: vb, O: ob}, workspace, handle=handle)

# %%
# The same window for PyTorch, in fp32.
i = torch.arange(S, device="cuda")
visible = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - W)
scores = (qb.float() @ kb.float().transpose(-1, -2)) * D**-0.5
ref = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1) @ vb.float()
torch.testing.assert_close(ob.float(), ref, atol=2e-2, rtol=2e-2)
print(f"window W={W}: max abs error {(ob.float() - ref).abs().max().item():.1e}")
del scores, ref

# %%
# Measuring ``cudnn.flex_attention``: masks as key intervals
# ----------------------------------------------------------
# ``mask_func`` is an int32 tensor ``[Hmask, nfunc, total_q]`` (``Hmask`` 1 or Hq,
# ``nfunc`` odd). For query ``i`` its column ``F0, F1, F2, …`` means: keys in
# ``[0, F0) ∪ [F1, F2) ∪ …`` are visible, counted within the query's own sequence.
# Causal is one endpoint per query, ``F0 = i + 1``; a window of W keys is three,
# ``[0, 0) ∪ [i − W + 1, i + 1)``. ``flex_attn_func`` takes B×S×H×D tensors.
from cudnn_guide.graphs import attention_inputs
from cudnn_guide import check

q, k, v = (t.transpose(1, 2).contiguous() for t in (qb, kb, vb))
gen = torch.Generator(device="cuda").manual_seed(0)
pos = torch.arange(S, device="cuda", dtype=torch.int32)
causal_ends = (pos + 1).repeat(B).reshape(1, 1, B * S).contiguous()
window_ends = torch.stack(
    [torch.zeros_like(pos), (pos - W + 1).clamp_min(0), pos + 1]
).repeat(1, B)
window_ends = window_ends.reshape(1, 3, B * S).contiguous()

causal_plan = cfa.create_mask_plan(causal_ends, q, k, v)
window_plan = cfa.create_mask_plan(window_ends, q, k, v)
out_causal = cfa.flex_attn_func(q, k, v, mask_plan=causal_plan)
out_window = cfa.flex_attn_func(q, k, v, mask_plan=window_plan)

bhsd = [qb, kb, vb]  # the reference works on B×H×S×D
ref_causal = attention_inputs.reference(
    *bhsd, visible=attention_inputs.band(S, S, device="cuda")
).transpose(1, 2)
ref_window = attention_inputs.reference(
    *bhsd, visible=attention_inputs.band(S, S, left=W, device="cuda")
)
ref_window = ref_window.transpose(1, 2)
checks = [
    check.check(ob, ref_window.transpose(1, 2), name=f"cuDNN graph, window {W}"),
    check.check(out_causal, ref_causal, name="cudnn.flex_attention, causal"),
    check.check(out_window, ref_window, name=f"cudnn.flex_attention, window {W}"),
]
for c in checks:
    print(c)

# %%
# ``cudnn.flex_attention`` backward
# ---------------------------------
# A plan built from inputs that require gradients carries the backward kernels too
# (``build_backward``); ``flex_attn_func`` is then differentiable.
S_BWD = 2048
qg, kg, vg = (
    torch.randn(
        2, S_BWD, H, D, device="cuda", dtype=torch.bfloat16, generator=gen
    ).requires_grad_()
    for _ in range(3)
)
ends_bwd = (
    (torch.arange(S_BWD, device="cuda", dtype=torch.int32) + 1)
    .repeat(2)
    .reshape(1, 1, 2 * S_BWD)
)
bwd_plan = cfa.create_mask_plan(ends_bwd.contiguous(), qg, kg, vg)
d_out = torch.randn(2, S_BWD, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
cfa.flex_attn_func(qg, kg, vg, mask_plan=bwd_plan).backward(d_out)
ref_leaves = [t.detach().float().transpose(1, 2).requires_grad_() for t in (qg, kg, vg)]
with check.full_precision():
    torch.nn.functional.scaled_dot_product_attention(
        *ref_leaves, is_causal=True
    ).backward(d_out.float().transpose(1, 2))
for name, got, ref in zip(("dQ", "dK", "dV"), (qg.grad, kg.grad, vg.grad), ref_leaves):
    checks.append(
        check.check(
            got, ref.grad.transpose(1, 2), name=f"cudnn.flex_attention backward, {name}"
        )
    )
    print(checks[-1])

# %%
# Plan and compile cost, in a fresh process
# -----------------------------------------
# The CuTe DSL compiles each kernel on its first call, in the calling process (its disk
# cache is off by default). A new interpreter with an empty CUDA JIT cache
# (``CUDA_CACHE_PATH``) shows what a server pays once per process. The second call,
# compiled already, is still not the steady state: it takes longer than a call in the
# loops below. One process is run (earlier recordings ran two, up to ~20% apart).
import tempfile

from cudnn_guide.studies import coldstart, fresh_process

cold = []
for _ in range(1):
    with (
        tempfile.TemporaryDirectory() as jit_cache,
        fresh_process.InterpreterPool(
            1,
            preload=("torch", "cudnn", "cudnn.flex_attention"),
            env={"CUDA_CACHE_PATH": jit_cache},
        ) as pool,
    ):
        cold.append(
            pool.run(coldstart.flex_attention_first_call, B, H, S, D, timeout=600).value
        )
for i, c in enumerate(cold):
    print(
        f"fresh process {i + 1}: create_mask_plan {c['plan_s']:.2f} s, "
        f"first call {c['first_call_s']:.2f} s, second call "
        f"{1e3 * c['second_call_s']:.2f} ms (rel. error {c['rel_error']:.1e})"
    )

# %%
# Against cuDNN's graph, FlashAttention-4 and PyTorch, on the same masks
# ----------------------------------------------------------------------
# Contenders, each checked: ``cudnn.flex_attention``; cuDNN's graph SDPA with the same
# mask as a diagonal band (as in the lesson); FlashAttention-4
# (``causal=True``, and ``window_size=(W - 1, 0)`` for the window: the W - 1 keys before
# the query, none after it); PyTorch's FlexAttention (compiled) with a block mask;
# PyTorch's SDPA, flash backend, for the causal case; and the frontend's own
# ``torch.ops.cudnn.sdpa_fwd``. Each races in interleaved rounds with a bootstrap
# interval, in GPU time per call; ``wall_clock=True`` also races them in back-to-back
# loops timed by the wall clock (``compare_loops``, below).
import textwrap

import cudnn.sdpa.fwd.torch_op  # noqa: F401  (registers torch.ops.cudnn.sdpa_fwd)
from torch.nn.attention import SDPBackend
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from cudnn_guide.measure import baselines, compare, fa4
from cudnn_guide import graphs

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if not FA4_OK:
    print(textwrap.fill(f"{FA4}: {FA4_DETAIL}", 88))
GRAPH = "cuDNN graph (heuristics A)"
FLASH2 = "PyTorch SDPA, flash backend (FlashAttention-2)"
flex = torch.compile(flex_attention, fullgraph=True)


def graph_sdpa(left_bound):
    """cuDNN's graph SDPA over B×H×S×D, causal, with an optional window."""
    o = torch.empty_like(qb)
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    Q, K, V = (
        g.tensor_like(qb, name="q"),
        g.tensor_like(kb, name="k"),
        g.tensor_like(vb, name="v"),
    )
    O, _ = g.sdpa(
        q=Q,
        k=K,
        v=V,
        attn_scale=D**-0.5,
        generate_stats=False,
        diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
        diagonal_band_right_bound=0,
        diagonal_band_left_bound=left_bound,
    )
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return graphs.adopt(g, handle, name="sdpa").bind({Q: qb, K: kb, V: vb, O: o}), o


CAND = "cudnn.flex_attention"
results = {}
for mask, left, plan, ref in (
    ("causal", None, causal_plan, ref_causal),
    (f"window {W}", W, window_plan, ref_window),
):
    run_graph, o_graph = graph_sdpa(left)
    run_graph()
    checks.append(check.check(o_graph.transpose(1, 2), ref, name=f"{GRAPH}, {mask}"))
    visible = (
        (lambda b, h, qi, ki: ki <= qi)
        if left is None
        else (lambda b, h, qi, ki: (ki <= qi) & (qi - ki < W))
    )
    block_mask = create_block_mask(visible, None, None, S, S)
    contenders = {
        CAND: lambda plan=plan: cfa.flex_attn_func(q, k, v, mask_plan=plan),
        GRAPH: run_graph,
        "PyTorch FlexAttention (compiled)": lambda m=block_mask: flex(
            qb, kb, vb, block_mask=m
        ),
        "torch.ops.cudnn.sdpa_fwd": lambda left=left: torch.ops.cudnn.sdpa_fwd(
            qb,
            kb,
            vb,
            D**-0.5,
            is_causal=True,
            window_left=-1 if left is None else left,
            return_lse=False,
        ),
    }
    if left is None:
        attend = baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)
        contenders[FLASH2] = lambda: attend(qb, kb, vb)
    for name, fn in contenders.items():
        if name not in (CAND, GRAPH):
            out = fn()
            out = out[0] if isinstance(out, tuple) else out
            checks.append(check.check(out.transpose(1, 2), ref, name=f"{name}, {mask}"))
    if FA4_OK:  # prints why FA4 cannot run this mask, if it cannot
        size = {} if left is None else {"window_size": (left - 1, 0)}
        run_fa4 = fa4.forward(qb, kb, vb, causal=True, scale=D**-0.5, **size)
        baselines.admit(contenders, FA4, run_fa4, ref.transpose(1, 2))
    pairs = int(attention_inputs.band(S, S, left=left).sum())
    results[mask] = compare.compare(
        contenders,
        candidate=CAND,
        l2="cold",
        rounds=7,
        flops=4 * B * H * D * pairs,
        tag=mask,
        wall_clock=True,
    )
    for name, s in results[mask].versus.items():
        print(f"{mask}: {CAND} vs {name}: {s['value']:.2f}× ({s['verdict']})")

# %%
import pandas as pd

from cudnn_guide.report import html_table

rows = []
for mask, c in results.items():
    for name in c.measurements:
        row = {
            "mask": mask,
            "implementation": name,
            "µs": c.estimate(name)["value"],
            "TFLOP/s": c.estimate(name, "TFLOP/s")["value"],
        }
        s = c.versus.get(name)
        row["flex_attention's speed-up"] = (
            f"{s['value']:.2f}× ({s['low']:.2f}–{s['high']:.2f}) {s['verdict']}"
            if s
            else ""
        )
        rows.append(row)
html_table(pd.DataFrame(rows), {"µs": "{:.1f}", "TFLOP/s": "{:.0f}"})

# %%
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
from cudnn_guide.report import plot_comparison

for ax, (mask, c) in zip(axes, results.items()):
    plot_comparison(
        c,
        "TFLOP/s",
        ax=ax,
        xlabel="TFLOP/s of visible pairs",
        title=f"{mask}: {B}×{H} heads × {S} tokens, d={D}",
    )
plt.show()


# %%
# Measuring the host side: a loop of calls
# ----------------------------------------
# The verdicts above are GPU time per call. A loop of plain eager calls, one after
# another, is bound by the longer of the GPU time and the host time per call. The host
# µs per call is from the first round above, one call after a synchronize, and can
# exceed what a call costs inside a loop: the loop race decides. ``wall_clock=True``
# made each comparison above also race the same contenders in back-to-back loops
# (``compare.compare_loops``): each loop is timed by the wall clock from a synchronized
# start to a synchronized end, so every microsecond the host spends launching counts.
# Its result is ``c.wall``, a comparison of its own, with its own tie band. The GPU and
# loop µs are each the median over rounds of a round's median (``c.estimate``), as the
# verdicts use them; the record's measurements keep the median of all samples pooled.
GPU_US = "GPU µs per call (median of round medians)"
LOOP_US = "loop µs per call (median of round medians)"
host_rows = []
for mask, c in results.items():
    for name, m in c.measurements.items():
        gpu, loop = c.versus.get(name), c.wall.versus.get(name)
        host_rows.append(
            {
                "mask": mask,
                "implementation": name,
                "host µs per call": m.host_median_ms * 1e3
                if m.host_median_ms
                else None,
                GPU_US: c.estimate(name)["value"],
                LOOP_US: c.wall.estimate(name)["value"],
                "GPU verdict": (
                    f"{gpu['value']:.2f}× ({gpu['low']:.2f}–{gpu['high']:.2f}) "
                    f"{gpu['verdict']}, tie band ±{100 * c.tie_band:.1f}%"
                )
                if gpu
                else "",
                "loop verdict": (
                    f"{loop['value']:.2f}× ({loop['low']:.2f}–{loop['high']:.2f}) "
                    f"{loop['verdict']}, tie band ±{100 * c.wall.tie_band:.1f}%"
                )
                if loop
                else "",
            }
        )
html_table(
    pd.DataFrame(host_rows),
    {
        "host µs per call": "{:.0f}",
        GPU_US: "{:.0f}",
        LOOP_US: "{:.0f}",
    },
)


# %%
# Conclusions
# -----------
import dataclasses

from cudnn_guide.report.prose import Prose


def span(values, fmt):
    lo, hi = min(values), max(values)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}–{hi:{fmt}}"


def said(c, name):
    """``c.describe(name)`` in GPU time; the loop verdict with its own tie band."""
    text = dataclasses.replace(c, wall=None).describe(name)
    w = c.wall.versus[name]
    return (
        f"{text}; in a back-to-back loop, host time included: {w['verdict']} "
        f"({w['value']:.2f}×, {w['low']:.2f}–{w['high']:.2f}; loop tie band "
        f"±{100 * c.wall.tie_band:.1f}%, {c.wall.rounds} rounds)"
    )


sentences = []
for mask, c in results.items():
    rate = c.estimate(CAND, "TFLOP/s")["value"]
    best = c.best_baseline
    gpu, loop = c.versus[best], c.wall.versus[best]
    in_loop = c.wall.estimate(CAND)["value"]  # µs of wall clock per call, in the loop
    on_gpu = c.estimate(CAND)["value"]  # µs of GPU time per call
    ratio = 1 / loop["value"] if loop["verdict"] == "slower" else loop["value"]
    how = {"slower": "slower than", "faster": "faster than"}.get(loop["verdict"])
    how = f"{ratio:.{1 if ratio >= 1.5 else 2}f}× {how}" if how else "a tie with"
    if loop["verdict"] == gpu["verdict"]:
        versus_gpu = "the same verdict as GPU time per call"
    else:
        word = "a tie" if gpu["verdict"] == "tie" else gpu["verdict"]
        versus_gpu = f"while in GPU time per call it is {word}"
    # each contender's loop time over its GPU time (both medians of round medians)
    stretch = {
        n: c.wall.estimate(n)["value"] / c.estimate(n)["value"] for n in c.measurements
    }
    others = {n: r for n, r in stretch.items() if n != CAND}
    low, high = min(others, key=others.get), max(others, key=others.get)
    host = {n: m.host_median_ms for n, m in c.measurements.items() if m.host_median_ms}
    if stretch[CAND] > others[high]:
        reading = "the loop stretches it more than any other"
        if CAND in host and 1e3 * host[CAND] > on_gpu:
            reading += (
                f", and its host time per call ({1e3 * host[CAND]:.0f} µs) exceeds its "
                "GPU time: the host bounds its loop"
            )
    elif stretch[CAND] < others[low]:
        reading = "the loop stretches it less than any other"
    else:
        reading = (
            "the loop stretches some of the others as much or more, so this does not "
            "show the host bounding it"
        )
        least = min((n for n in host if n != CAND), key=host.get, default=None)
        if least:
            reading += (
                f". {least}, with {1e3 * host[least]:.0f} µs of host time per call, "
                f"takes {stretch[least]:.2f}× in its loop"
            )
    sentences.append(
        f"* {mask}: {CAND} runs at {rate:.0f} TFLOP/s; in GPU time per call it is "
        f"{dataclasses.replace(c, wall=None).describe()}. So a plain eager loop of "
        f"{CAND} calls is {how} a loop of {best} calls ({loop['value']:.2f}×, "
        f"{loop['low']:.2f}–{loop['high']:.2f}; loop tie band "
        f"±{100 * c.wall.tie_band:.1f}%, {c.wall.rounds} rounds; {versus_gpu}). In the "
        f"loop a call takes {in_loop:.0f} µs of wall clock against {on_gpu:.0f} µs of "
        f"GPU time (medians of round medians): {stretch[CAND]:.2f}× its GPU time. The "
        f"other contenders' loops take {others[low]:.2f}× ({low}) to "
        f"{others[high]:.2f}× ({high}) of theirs: {reading}."
    )
    if FA4 in c.versus and FA4 != best:  # the fastest is described above
        sentences.append(f"* {mask}, against {FA4}: {said(c, FA4)}.")
sentences.append(
    "Which verdict applies depends on how the calls are launched: GPU time when the "
    "GPU is the bottleneck (calls replayed from a CUDA graph, where a path can be "
    "captured, which this page does not try, or a host that stays ahead of the GPU); "
    "the loop when plain eager Python launches one call after another."
)
if not FA4_OK:
    sentences.append(f"{FA4} was not timed: {FA4_DETAIL}.")
first = [c["first_call_s"] for c in cold]
plan = [c["plan_s"] for c in cold]
sentences.append(
    f"A fresh process pays {span(first, '.1f')} s on its first call (compilation) and "
    f"{span(plan, '.2f')} s for the plan; reuse the plan and keep the process alive."
)
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, keep

for mask, c in results.items():
    comparison(f"{mask}: flex_attention speed-up over best other", c)
keep(
    loop_verdicts={mask: c.wall.versus for mask, c in results.items()},
    host_us_per_call={
        r["mask"] + ": " + r["implementation"]: r["host µs per call"] for r in host_rows
    },
)
# sphinx_gallery_end_ignore
Prose(*sentences)
