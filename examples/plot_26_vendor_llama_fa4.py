"""
cuDNN against FlashAttention-4 at NVIDIA's Llama 3.1 shapes
===========================================================

NVIDIA publishes its own H200 comparison of cuDNN and FlashAttention-4 (cudnn-frontend's
``benchmark/attention_training``): the heads of Llama 3.1 70B, batch 2, 64 query heads,
8 key/value heads, head dim 128, 2k to 32k tokens, causal and not, forward and backward.
This page builds that layer with the frontend, runs the same tensors through
FlashAttention-4, checks both against PyTorch, and then re-measures every one of the
vendor's bf16 shapes, with the vendor's numbers beside ours. What each backend's first
call costs a fresh process (cuDNN's plan build, FlashAttention-4's compile), and
whether PyTorch's SDPA routes to FlashAttention-4, is on the
:ref:`first-call page <sphx_glr_auto_examples_plot_28_first_call.py>`.

What you will learn:

* grouped-query attention (64 query heads sharing 8 K/V heads) in one ``sdpa`` node;
* the ``B×S×H×D`` memory layout that FlashAttention-4 takes, handed to cuDNN as strides;
* the training pair: ``sdpa`` with ``generate_stats=True`` and ``sdpa_backward``;
* how the cuDNN on this GPU compares with FlashAttention-4 at each shape (faster, tied
  or slower), and where our measurements agree with NVIDIA's table.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((9, 0), "FlashAttention-4 (Hopper or newer)")
env = environment.collect()
env

# %%
# The lesson: one Llama 3.1 attention layer in cuDNN
# --------------------------------------------------
# FlashAttention-4 keeps tensors as ``B×S×H×D`` (tokens outer, heads inner). cuDNN takes
# any strides, so the same memory is described as ``B×H×S×D`` with ``transpose(1, 2)``:
# no copy. K and V have 8 heads for Q's 64; cuDNN reads the head ratio from the shapes.
# Causal masking is the diagonal band ``TOP_LEFT`` with right bound 0; the graph is
# built in five steps (validate, lower, heuristics' plans, support, build).
import cudnn
import torch

B, S, H, HKV, D = 2, 4096, 64, 8, 128
CAUSAL = dict(
    diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0
)

torch.manual_seed(0)
q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)  # B×S×H×D
k = torch.randn(B, S, HKV, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, S, HKV, D, device="cuda", dtype=torch.bfloat16)
o = torch.empty_like(q)


def bhsd(t):
    return t.transpose(1, 2)  # the same memory, seen as B×H×S×D


handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)

g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
Q = g.tensor_like(bhsd(q))
K = g.tensor_like(bhsd(k))
V = g.tensor_like(bhsd(v))
O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, **CAUSAL)
O.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
O.set_dim(list(bhsd(o).shape)).set_stride(list(bhsd(o).stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute({Q: bhsd(q), K: bhsd(k), V: bhsd(v), O: bhsd(o)}, workspace, handle=handle)
print(f"plan {g.get_plan_name_at_index(0)}, workspace {g.get_workspace_size()} B")

# The reference: PyTorch's attention on fp32 copies (``enable_gqa`` repeats the 8 K/V
# heads for the 64 query heads).
ref = torch.nn.functional.scaled_dot_product_attention(
    *(bhsd(t).float() for t in (q, k, v)), is_causal=True, enable_gqa=True
)
torch.testing.assert_close(bhsd(o).float(), ref, atol=2e-2, rtol=2e-2)
print(f"max abs error against fp32 PyTorch: {(bhsd(o).float() - ref).abs().max():.1e}")
del ref

# %%
# Measuring against FlashAttention-4: the training pair, checked
# --------------------------------------------------------------
# NVIDIA's table times the forward with statistics (what training runs) and the
# backward. Both graphs are built for any mask; the causal pair at the lesson's shape
# is filled with NaN, then checked against fp32 PyTorch autograd by relative norm,
# before anything is timed.
import torch.nn.functional as F

from cudnn_guide import check

BF16, FP32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
CUDNN = "cuDNN graph (heuristics A)"


def output(node, t):
    node.set_output(True).set_data_type(BF16 if t.dtype == torch.bfloat16 else FP32)
    node.set_dim(list(t.shape)).set_stride(list(t.stride()))


def attention_graphs(mask, q, k, v, o, d_o, dq, dk, dv, stats):
    """The forward with statistics and the backward; returns their two launchers."""
    graph = dict(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32)
    fwd = cudnn.pygraph(handle=handle, **graph)
    Q, K, V = (fwd.tensor_like(bhsd(t)) for t in (q, k, v))
    O, STATS = fwd.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=True, **mask)
    output(O, bhsd(o))
    output(STATS, stats)
    fwd.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])

    bwd = cudnn.pygraph(handle=handle, **graph)
    bQ, bK, bV, bO, bdO = (bwd.tensor_like(bhsd(t)) for t in (q, k, v, o, d_o))
    bST = bwd.tensor_like(stats)
    dQ, dK, dV = bwd.sdpa_backward(
        q=bQ, k=bK, v=bV, o=bO, dO=bdO, stats=bST, attn_scale=D**-0.5, **mask
    )
    for node, t in ((dQ, dq), (dK, dk), (dV, dv)):
        output(node, bhsd(t))
    bwd.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])

    fwd_pack = {Q: bhsd(q), K: bhsd(k), V: bhsd(v), O: bhsd(o), STATS: stats}
    bwd_pack = {bQ: bhsd(q), bK: bhsd(k), bV: bhsd(v), bO: bhsd(o), bdO: bhsd(d_o)}
    bwd_pack |= {bST: stats, dQ: bhsd(dq), dK: bhsd(dk), dV: bhsd(dv)}
    size = max(fwd.get_workspace_size(), bwd.get_workspace_size())
    workspace = torch.empty(size, device="cuda", dtype=torch.uint8)
    return (
        lambda: fwd.execute(fwd_pack, workspace, handle=handle),
        lambda: bwd.execute(bwd_pack, workspace, handle=handle),
    )


def layer_tensors(s):
    """Q, K, V and dO (B×S×H×D, bf16), the outputs, and the fp32 statistics."""
    t = {
        n: torch.randn(B, s, h, D, device="cuda", dtype=torch.bfloat16)
        for n, h in (("q", H), ("k", HKV), ("v", HKV), ("d_o", H))
    }
    pairs = (("o", "q"), ("dq", "q"), ("dk", "k"), ("dv", "v"))
    t |= {n: torch.empty_like(t[like]) for n, like in pairs}
    t["stats"] = torch.empty(B, H, s, 1, device="cuda", dtype=torch.float32)
    return t


def passed(c):
    """One short line for a check that passed (``check.check`` raises on a failure)."""
    return f"{c.name}: rel. error {c.rel_error:.1e} (tolerance {c.tolerance:.1e})"


def gqa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


t = layer_tensors(S)
cudnn_fwd, cudnn_bwd = attention_graphs(CAUSAL, **t)
check.poison(t["o"], t["stats"], t["dq"], t["dk"], t["dv"])
cudnn_fwd()
cudnn_bwd()
ref_o, ref_grads = check.reference_grads(
    gqa_causal, {n: bhsd(t[n]) for n in "qkv"}, bhsd(t["d_o"])
)
print(passed(check.check(bhsd(t["o"]), ref_o, name=f"{CUDNN} O")))
for n in "qkv":
    got = bhsd(t["d" + n])
    print(passed(check.check(got, ref_grads[n], name=f"{CUDNN} d{n.upper()}")))

# %%
# PyTorch's fp32 reference holds all ``B·H·S²`` attention scores, several times over
# for autograd: at 4096 tokens one copy is 8 GiB, at 32k tokens 512 GiB, more than the
# GPU has. The timing loop therefore checks against a reference computed in blocks:
# the query rows ``i0:i1`` of the 8 query heads that share one K/V head. Each block
# holds complete rows of scores (every key a row can see), so its softmax, output and
# dQ rows are exact, and its share of dK and dV is added to the K/V head's sums. At
# most two fp32 score blocks of up to 1 GiB each are alive at a time. Computed in fp32
# with TF32 off, it must match PyTorch's dense fp32 autograd at S=4096 to fp32
# accuracy (the tolerance for fp32 outputs).
import time

REF_BLOCK = 2**28  # fp32 values in one block of scores: 1 GiB


def block_reference(q, k, v, d_o, causal):
    """fp32 output and gradients ("o", "q", "k", "v"), B×S×H×D like the inputs."""
    batch, s, h, d = q.shape
    group = h // k.shape[2]  # query heads per K/V head
    rows = max(1, min(s, REF_BLOCK // (group * s)))
    like = zip("oqkv", (q, q, k, v))
    ref = {n: torch.empty(x.shape, device=x.device) for n, x in like}  # fp32
    with check.full_precision():  # fp32 matmuls, TF32 off
        for b in range(batch):
            for g in range(k.shape[2]):
                heads = slice(g * group, (g + 1) * group)
                kg, vg = k[b, :, g].float(), v[b, :, g].float()  # S×D
                dk, dv = torch.zeros_like(kg), torch.zeros_like(vg)
                for i0 in range(0, s, rows):
                    i1 = min(i0 + rows, s)
                    n = i1 if causal else s  # causal: keys after row i1-1 are masked
                    qs = q[b, i0:i1, heads].transpose(0, 1).float() * d**-0.5
                    do = d_o[b, i0:i1, heads].transpose(0, 1).float()  # group×rows×D
                    p = qs @ kg[:n].T  # scaled scores, group×rows×n
                    if causal:
                        i = torch.arange(i0, i1, device=q.device)[:, None]
                        later = i < torch.arange(n, device=q.device)  # key j > row i
                        p.masked_fill_(later, -torch.inf)
                    p = p.softmax(-1)
                    o = p @ vg[:n]
                    # dS = P ⊙ (dO·Vᵀ − rowsum(dO ⊙ O)), in place
                    ds = (do @ vg[:n].T).sub_((do * o).sum(-1, keepdim=True)).mul_(p)
                    ref["o"][b, i0:i1, heads] = o.transpose(0, 1)
                    ref["q"][b, i0:i1, heads] = (ds @ kg[:n] * d**-0.5).transpose(0, 1)
                    dk[:n] += ds.reshape(-1, n).T @ qs.reshape(-1, d)
                    dv[:n] += p.reshape(-1, n).T @ do.reshape(-1, d)
                ref["k"][b, :, g], ref["v"][b, :, g] = dk, dv
    return ref


blocks = block_reference(t["q"], t["k"], t["v"], t["d_o"], causal=True)
dense = {"o": ref_o, **ref_grads}  # B×H×S×D: bhsd() swaps them back to B×S×H×D
for n, name in zip("oqkv", ("O", "dQ", "dK", "dV")):
    block_check = check.check(blocks[n], bhsd(dense[n]), name=f"block reference {name}")
    print(passed(block_check))
blocks = dense = None

# %%
# The same layer in FlashAttention-4
# ----------------------------------
# ``flash_attn_func`` takes the ``B×S×H×D`` tensors as they are, and is checked against
# the same fp32 reference. It compiles its kernels with the CuTe DSL on first use (the
# :ref:`first-call page <sphx_glr_auto_examples_plot_28_first_call.py>` measures what
# that costs); without it installed, the page says so and goes on. The CuTe DSL
# compiler warns that an ``aux_data`` argument "cannot be converted to a JitArgument"
# on every new kernel; the warning says nothing about the result, so it is silenced
# here.
import warnings

from cudnn_guide.measure import fa4

warnings.filterwarnings("ignore", message=".*aux_data.*", category=UserWarning)
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if FA4_OK:
    from flash_attn.cute import flash_attn_func

    leaves = [t[n].detach().clone().requires_grad_() for n in "qkv"]
    out4 = flash_attn_func(*leaves, causal=True)
    out4 = out4[0] if isinstance(out4, tuple) else out4
    grads4 = torch.autograd.grad(out4, leaves, t["d_o"])
    print(passed(check.check(bhsd(out4), ref_o, name=f"{FA4} O")))
    for n, g4 in zip("qkv", grads4):
        print(passed(check.check(bhsd(g4), ref_grads[n], name=f"{FA4} d{n.upper()}")))
else:
    print(f"{FA4}: {FA4_DETAIL}")
t = leaves = out4 = grads4 = ref_o = ref_grads = None
torch.cuda.empty_cache()

# %%
# Measuring the vendor's shapes
# -----------------------------
# Every bf16 shape of NVIDIA's table: 2k to 32k tokens, causal and not, forward and
# backward. Before a shape is timed, the block reference above computes its fp32 output
# and gradients, and cuDNN's and FlashAttention-4's O, dQ, dK and dV (cuDNN's filled
# with NaN first) are checked against them; a failure stops the page there.
# Each pair is timed in interleaved rounds with CUDA events (GPU time, close to the
# vendor's CUPTI time), cold L2, and judged against its own rounds' tie band (>= ±1%).
# A call at 32k tokens takes about 50-320 ms, so there each round times 3 calls per
# contender instead of 5; from 16k tokens on, the host cost is sampled from 2 calls.
# cuDNN's forward writes its softmax statistics for the backward; FlashAttention-4's
# forward is timed on tensors without ``requires_grad``, so it is asked for its
# log-sum-exp (``return_lse=True``, where its ``flash_attn_func`` takes it) and writes
# the same statistics.
import inspect
from functools import partial

from cudnn_guide.measure import compare

SEQS = [2048, 4096, 8192, 16384, 32768]
OUTPUTS = {"O": "o", "dQ": "q", "dK": "k", "dV": "v"}  # output → reference entry
results, checked = {}, []
FA4_LSE = {}  # FA4's forward keywords: return_lse=True where its signature has it
if FA4_OK and "return_lse" in inspect.signature(flash_attn_func).parameters:
    FA4_LSE = {"return_lse": True}


def layer_flops(s, causal, backward):
    dense = 4 * B * H * s * s * D * (2.5 if backward else 1.0)
    return dense / 2 if causal else dense


def timing(s):
    """Rounds, timed calls per round and host-timed calls at length ``s``."""
    if s <= 4096:
        return {"rounds": 7}
    if s < 16384:
        return {"rounds": 5}
    if s == 16384:
        return {"rounds": 5, "host_reps": 2}
    return {"rounds": 5, "min_reps": 3, "host_reps": 2}


def reference_at(t, causal):
    """The block reference for these tensors, with its wall time and peak memory."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    held, start = torch.cuda.memory_allocated(), time.perf_counter()
    ref = block_reference(t["q"], t["k"], t["v"], t["d_o"], causal)
    torch.cuda.synchronize()
    cost = {
        "fp32 reference (s)": time.perf_counter() - start,
        "fp32 reference peak (GiB)": (torch.cuda.max_memory_allocated() - held) / 2**30,
    }
    return ref, cost


def worst_error(ref, outputs, who, where):
    """Check O, dQ, dK and dV against the reference; the largest relative error."""
    done = [
        check.check(out, ref[OUTPUTS[n]], name=f"{who} {n} {where}")
        for n, out in zip(OUTPUTS, outputs)
    ]
    return max(c.rel_error for c in done)


for s in SEQS:
    t = layer_tensors(s)
    for causal in (True, False):
        fwd, bwd = attention_graphs(CAUSAL if causal else {}, **t)
        mask = "causal" if causal else "no mask"
        ref, cost = reference_at(t, causal)  # first: the check, before any timing
        check.poison(t["o"], t["stats"], t["dq"], t["dk"], t["dv"])
        fwd()
        bwd()
        tol = check.tolerance(t["o"].dtype)
        row = {"S": s, "mask": mask, "checked": ", ".join(OUTPUTS), "tolerance": tol}
        outs = [t[n] for n in ("o", "dq", "dk", "dv")]
        row[f"{CUDNN}: worst rel. error"] = worst_error(
            ref, outs, CUDNN, f"@ S={s} {mask}"
        )
        contenders = {"fwd": {CUDNN: fwd}, "bwd": {CUDNN: bwd}}
        if FA4_OK:
            leaves = [t[n].detach().clone().requires_grad_() for n in "qkv"]
            out4 = flash_attn_func(*leaves, causal=causal)
            out4 = out4[0] if isinstance(out4, tuple) else out4
            grads4 = torch.autograd.grad(out4, leaves, t["d_o"], retain_graph=True)
            outs = [out4, *grads4]
            row[f"{FA4}: worst rel. error"] = worst_error(
                ref, outs, FA4, f"@ S={s} {mask}"
            )
            contenders["fwd"][FA4] = partial(
                flash_attn_func, t["q"], t["k"], t["v"], causal=causal, **FA4_LSE
            )
            contenders["bwd"][FA4] = partial(
                torch.autograd.grad, out4, leaves, t["d_o"], retain_graph=True
            )
        checked.append(row | cost)
        ref = outs = grads4 = None  # the reference and the checked copies: not timed
        for phase in ("fwd", "bwd"):
            if len(contenders[phase]) < 2:
                continue
            results[(s, causal, phase)] = compare.compare(
                contenders[phase],
                candidate=CUDNN,
                l2="cold",
                flops=layer_flops(s, causal, phase == "bwd"),
                params={"seq_len": s, "causal": causal, "phase": phase},
                tag=f"@ S={s} {'causal' if causal else 'full'} {phase}",
                **timing(s),
            )
    t = contenders = leaves = out4 = None  # free this length's tensors before the next
    torch.cuda.empty_cache()

# %%
# What was checked before each shape was timed, against the block fp32 reference
# (the largest relative L2 error of the four outputs, and the bf16 tolerance), and what
# the reference cost: its wall time and its peak memory on top of the layer's tensors.
import pandas as pd

from cudnn_guide.report import html_table

formats = {c: "{:.1e}" for c in checked[0] if "error" in c or c == "tolerance"}
formats |= {"fp32 reference (s)": "{:.1f}", "fp32 reference peak (GiB)": "{:.2f}"}
html_table(pd.DataFrame(checked), formats)

# %%
# The vendor's table
# ------------------
# NVIDIA's numbers for the same shapes, quoted from the CSV committed in
# NVIDIA/cudnn-frontend, ``benchmark/attention_training/results/llama3.1/h200/
# llama3.1_20260928_130009.csv`` (commit 816ea45): an H200 with cuDNN 9.27.0 and
# frontend 1.31.0, timed with CUPTI over 10 iterations; bf16, non-deterministic
# backward.
# Columns: S, causal, phase, cuDNN ms, FlashAttention-4 ms.
VENDOR_CUDNN = "9.27.0"  # the vendor's cuDNN, from the CSV's metadata
VENDOR_CSV = """
32768,1,fwd,56.813,55.166
32768,1,bwd,166.714,144.246
32768,0,fwd,113.197,103.706
32768,0,bwd,323.816,284.486
16384,1,fwd,13.888,12.527
16384,1,bwd,40.803,36.265
16384,0,fwd,27.502,25.632
16384,0,bwd,80.092,70.876
8192,1,fwd,3.357,3.260
8192,1,bwd,10.448,8.743
8192,0,fwd,6.271,5.817
8192,0,bwd,19.572,16.764
4096,1,fwd,0.893,0.888
4096,1,bwd,2.779,2.466
4096,0,fwd,1.600,1.499
4096,0,bwd,4.768,4.321
2048,1,fwd,0.257,0.264
2048,1,bwd,0.856,0.771
2048,0,fwd,0.416,0.410
2048,0,bwd,1.323,1.222
"""
vendor = {}
for line in VENDOR_CSV.split():
    s, causal, phase, cudnn_ms, fa4_ms = line.split(",")
    vendor[(int(s), causal == "1", phase)] = (float(cudnn_ms), float(fa4_ms))

# %%
# Ours beside theirs: each backend's time (ms) with its interval over rounds, the
# vendor's time, and cuDNN's speed-up over FlashAttention-4 in both (ours in-run; the
# Measurement notes at the end widen it for re-recording drift). Our time is the median
# over rounds of a backend's per-round medians (``Comparison.estimate``), not the median
# of its pooled samples that the record's measurements show. Where our verdict and
# NVIDIA's point opposite ways, the last column compares our two times with NVIDIA's.
OURS = "ours, median of round medians"


def against_vendor(ours_ms, vendor_ms):
    """How much slower or faster our time is than the vendor's, in words."""
    gap = ours_ms / vendor_ms - 1
    return f"{100 * abs(gap):.1f}% {'slower' if gap > 0 else 'faster'}"


rows = []  # empty without FlashAttention-4: then the vendor's table is all there is
for (s, causal, phase), c in sorted(results.items()):
    ours_cudnn, ours_fa4 = c.estimate(CUDNN, "ms"), c.estimate(FA4, "ms")
    v_cudnn, v_fa4 = vendor[(s, causal, phase)]
    ratio = c.versus[FA4]
    vendor_way = "faster" if v_fa4 / v_cudnn > 1 else "slower"
    same_direction = ratio["verdict"] in (vendor_way, "tie")  # a tie agrees with both
    rows.append(
        {
            "S": s,
            "mask": "causal" if causal else "none",
            "pass": phase,
            f"cuDNN ms ({OURS})": f"{ours_cudnn['value']:.3f} "
            f"[{ours_cudnn['low']:.3f}, {ours_cudnn['high']:.3f}]",
            "cuDNN ms (NVIDIA)": f"{v_cudnn:.3f}",
            f"FA4 ms ({OURS})": f"{ours_fa4['value']:.3f} "
            f"[{ours_fa4['low']:.3f}, {ours_fa4['high']:.3f}]",
            "FA4 ms (NVIDIA)": f"{v_fa4:.3f}",
            "cuDNN speed-up (ours)": f"{ratio['value']:.2f}× "
            f"[{ratio['low']:.2f}, {ratio['high']:.2f}]",
            "verdict (ours)": ratio["verdict"],
            "cuDNN speed-up (NVIDIA)": f"{v_fa4 / v_cudnn:.2f}×",
            "same direction": same_direction,
            "where it differs: ours against NVIDIA's": None
            if same_direction
            else f"our cuDNN {against_vendor(ours_cudnn['value'], v_cudnn)}, "
            f"our FA4 {against_vendor(ours_fa4['value'], v_fa4)}",
        }
    )
table = pd.DataFrame(rows or [{"FlashAttention-4": FA4_DETAIL}])
html_table(table)

# %%
# Throughput per shape: blue is cuDNN, orange FlashAttention-4; solid lines with error
# bars are ours, dotted lines with crosses NVIDIA's, on ours where the two agree.
import matplotlib.pyplot as plt

fig, axes = plt.subplots(2, 2, figsize=(9, 7.5), layout="constrained", sharex=True)
for ax, (causal, phase) in zip(
    axes.flat, [(True, "fwd"), (True, "bwd"), (False, "fwd"), (False, "bwd")]
):
    for who, colour, col in ((CUDNN, "C0", 0), (FA4, "C1", 1)) if results else ():
        est = [results[(s, causal, phase)].estimate(who, "TFLOP/s") for s in SEQS]
        ax.errorbar(
            SEQS,
            [e["value"] for e in est],
            yerr=[
                [e["value"] - e["low"] for e in est],
                [e["high"] - e["value"] for e in est],
            ],
            color=colour,
            marker="o",
            capsize=3,
            label=f"{who.split(' (')[0]}, ours",
        )
        ax.plot(
            SEQS,
            [
                layer_flops(s, causal, phase == "bwd")
                / vendor[(s, causal, phase)][col]
                / 1e9
                for s in SEQS
            ],
            color=colour,
            marker="x",
            linestyle=":",
            label="same, NVIDIA's table",
        )
    ax.set_xscale("log", base=2)
    ax.set_title(f"{'causal' if causal else 'no mask'}, {phase}", fontsize=10)
    ax.set_ylabel("TFLOP/s")
axes[0, 0].legend(fontsize=7)
axes[1, 0].set_xlabel("tokens per sequence")
axes[1, 1].set_xlabel("tokens per sequence")
plt.show()

# %%
# Conclusions
# -----------
# From the rows above, in-run; the Measurement notes add drift widening and clocks.
import statistics

from cudnn_guide.report.prose import Prose


def shape(key):
    return f"S={key[0]}, {'causal' if key[1] else 'no mask'}, {key[2]}"


if results:
    verdicts = table["verdict (ours)"].value_counts().to_dict()
    agree = int(table["same direction"].sum())
    ours_fa4 = {key: c.estimate(FA4, "ms")["value"] for key, c in results.items()}
    ours_cudnn = {key: c.estimate(CUDNN, "ms")["value"] for key, c in results.items()}
    gaps = {key: ours_fa4[key] / vendor[key][1] - 1 for key in results}
    cudnn_gaps = {key: ours_cudnn[key] / vendor[key][0] - 1 for key in results}
    same = zip(sorted(results), table["same direction"])
    disagree = [shape(k) for k, ok in same if not ok]
    speedups = {key: c.versus[FA4] for key, c in sorted(results.items())}
    below = [key for key, r in speedups.items() if r["value"] < 1]
    point_sentence = (
        f"The point estimate of cuDNN's speed-up is below 1 (cuDNN slower) at "
        f"{len(below)} of {len(speedups)} shapes; over all of them it runs from "
        f"{min(r['value'] for r in speedups.values()):.2f}× to "
        f"{max(r['value'] for r in speedups.values()):.2f}×."
    )
    ties = [key for key, r in speedups.items() if r["verdict"] == "tie"]
    for side, off in (
        ("below", lambda r: r["high"] < 1),
        ("above", lambda r: r["low"] > 1),
    ):
        lopsided = [key for key in ties if off(speedups[key])]
        if not lopsided:
            continue
        bands = [results[key].tie_band for key in speedups if key not in ties]
        point_sentence += (
            f" {len(lopsided)} of the {len(ties)} ties have an interval wholly {side} "
            f"1: "
            + "; ".join(
                f"{shape(key)} ({speedups[key]['value']:.2f}× "
                f"[{speedups[key]['low']:.2f}, {speedups[key]['high']:.2f}], tie band "
                f"±{100 * results[key].tie_band:.1f}%)"
                for key in lopsided
            )
            + ". They are ties only because the tie band measured in their own "
            "rounds (cuDNN against its own repeat) was that wide"
            + (
                f", against a median of ±{100 * statistics.median(bands):.1f}% at the "
                f"{len(bands)} shapes with a verdict"
                if bands
                else ""
            )
            + ": there the interval of identical code's ratio to itself reached that "
            "far from 1 (the clock sentence below gives the clocks and the power cap)."
        )


lse_sentence = (
    f"{FA4}'s forward was timed with return_lse=True, so it writes its log-sum-exp "
    f"as cuDNN's forward writes its softmax statistics."
    if FA4_LSE
    else f"{FA4}'s forward was timed on tensors without requires_grad and without "
    "return_lse (its flash_attn_func here has no such keyword), so it may skip the "
    "log-sum-exp that cuDNN's forward writes as its statistics."
)


def largest_gap(gaps):
    """The largest gap's size, its direction (ours slower or faster) and its shape."""
    key = max(gaps, key=lambda key: abs(gaps[key]))
    way = "slower" if gaps[key] > 0 else "faster"
    return f"by at most {100 * abs(gaps[key]):.0f}% (ours {way}, at {shape(key)})"


def vendor_pattern(name, gaps):
    """Where our ``name`` was faster than NVIDIA's, and what those shapes share."""
    faster = [key for key in sorted(gaps) if gaps[key] < 0]
    if len(faster) in (0, len(gaps)):
        way = "faster" if faster else "slower"
        return f"Our {name} was {way} than NVIDIA's at all {len(gaps)} shapes."
    masks = {True: "causal", False: "no-mask"}
    passes = {"fwd": "forward", "bwd": "backward"}
    by_pair = (lambda key: key[1:], lambda v: f"{masks[v[0]]} {passes[v[1]]}")
    by_pass = (lambda key: key[2], lambda v: f"{passes[v]} (either mask)")
    by_mask = (lambda key: key[1], lambda v: f"{masks[v]} (either pass)")
    for part, words in (by_pair, by_pass, by_mask):
        if len({part(key) for key in faster}) > 1:
            continue  # the faster shapes differ in this part: no pattern in it
        group = [key for key in sorted(gaps) if part(key) == part(faster[0])]
        not_faster = [key for key in group if gaps[key] >= 0]
        at = (  # the pair names mask and pass: S alone tells its shapes apart
            (lambda keys: "S=" + ", ".join(str(key[0]) for key in keys))
            if part is by_pair[0]
            else (lambda keys: "; ".join(shape(key) for key in keys))
        )
        return (
            f"Our {name} was faster than NVIDIA's only on {words(part(faster[0]))} "
            f"shapes, at {at(faster)}"
            + (f" (not at {at(not_faster)})" if not_faster else "")
            + f": {len(faster)} of {len(gaps)} shapes, and at none of the others."
        )
    return (
        f"Our {name} was faster than NVIDIA's at {len(faster)} of {len(gaps)} shapes "
        f"({'; '.join(shape(key) for key in faster)}), which share no mask or pass."
    )


judged = [c.removesuffix(": worst rel. error") for c in checked[0] if "error" in c]
lengths = ", ".join(str(s) for s in sorted({r["S"] for r in checked}))
largest_error = max(r[f"{who}: worst rel. error"] for r in checked for who in judged)
check_sentence = (
    f"Before each of the {len(checked)} shapes was timed (S={lengths}, causal and "
    f"not), the forward output and dQ, dK and dV of {' and '.join(judged)} were "
    f"checked against the block fp32 reference: the largest relative error was "
    f"{largest_error:.1e} (tolerance {checked[0]['tolerance']:.1e}), and the reference "
    f"needed at most {max(r['fp32 reference peak (GiB)'] for r in checked):.1f} GiB "
    f"and {max(r['fp32 reference (s)'] for r in checked):.1f} s for one shape."
)
read = [
    m.clocks
    for c in results.values()
    for m in c.measurements.values()
    if m.clocks.get("read_with")
]
if read:
    ends = sorted({x["sm_mhz_end"] for x in read})
    span = f"{ends[0]}–{ends[-1]}" if len(ends) > 1 else f"{ends[0]}"
    capped = [x["power_capped_fraction"] for x in read if "power_capped_fraction" in x]
    clock_sentence = (
        f"The H200 that built this page may run at a different power cap and clock "
        f"than NVIDIA's, whose CSV records neither: here the SM clock at the end of "
        f"each contender's first timed round was {span} MHz (maximum "
        f"{max(x['max_sm_mhz'] for x in read)} MHz)"
        + (
            f", and the power cap held it during up to {100 * max(capped):.0f}% of "
            "such a round."
            if capped
            else "."
        )
    )
else:
    clock_sentence = (
        "The H200 that built this page may run at a different power cap and clock "
        "than NVIDIA's; neither NVIDIA's CSV nor this run (its clocks could not be "
        "read) records them."
    )

if not results:
    summary = [
        f"{FA4} was not measured here ({FA4_DETAIL}); NVIDIA's table above is all "
        f"this page shows of it."
    ]
else:
    summary = [
        f"Across the vendor's {len(table)} bf16 shapes, the cuDNN graph (heuristics A) "
        f"was faster than {FA4} at {verdicts.get('faster', 0)}, tied at "
        f"{verdicts.get('tie', 0)} and slower at {verdicts.get('slower', 0)} on this "
        f"{env.gpu} (cuDNN {env.cudnn_backend}).",
        point_sentence,
        lse_sentence,
        f"Our verdict points the same way as NVIDIA's table (cuDNN {VENDOR_CUDNN}) at "
        f"{agree} of {len(table)} shapes; a tie counts as agreeing with either "
        f"direction"
        + (
            f". It points the other way at {', '.join(disagree)}; the table's last "
            "column says how far our cuDNN and FlashAttention-4 times lie from "
            "NVIDIA's there."
            if disagree
            else "."
        ),
        f"Our cuDNN {env.cudnn_backend} times differ from NVIDIA's cuDNN "
        f"{VENDOR_CUDNN} times {largest_gap(cudnn_gaps)}, and our FlashAttention-4 "
        f"times from theirs {largest_gap(gaps)}. "
        + vendor_pattern(f"cuDNN {env.cudnn_backend}", cudnn_gaps)
        + " "
        + vendor_pattern("FlashAttention-4", gaps)
        + " Both tables time kernels only. Ours flush L2 before every call; the "
        "vendor's CSV names neither its L2 policy nor its FlashAttention-4 build, so "
        "the cuDNN version, the FA4 build, L2 and the two H200s' clocks are all "
        "candidates for the gaps, and this page cannot separate them.",
    ]

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison

for (s, causal, phase), c in sorted(results.items()):
    comparison(
        f"S={s} {'causal' if causal else 'no mask'} {phase}: "
        f"cuDNN over {FA4.split(' (')[0]}",
        c,
        FA4,
    )
# sphinx_gallery_end_ignore
Prose(*summary, clock_sentence, check_sentence)
