"""
FP8 on Hopper: scaled matmul and scaled attention
=================================================

Hopper's tensor cores run FP8 at twice the bf16 rate. FP8 E4M3 has 3 mantissa bits and a
largest value of 448, so every FP8 tensor carries a per-tensor scale, and the graph
applies the matching *descale* to get real values back. The question for a reader is the
trade: how much faster, for how much less accuracy.

What you will learn:

* per-tensor scaling: ``t8 = t · scale`` stored in FP8, ``descale = 1/scale`` applied
  in the graph's fp32 epilogue;
* an FP8 matmul as a cuDNN graph (FP8 operands, fp32 accumulation, descales, bf16
  output), against PyTorch's ``torch._scaled_mm`` (cuBLASLt FP8) and a bf16 matmul;
* FP8 attention with ``sdpa_fp8``: descales for Q, K, V and the softmax, a scale for
  the FP8 output, and the ``amax`` outputs that the next step's scales are computed
  from;
* accuracy against an fp32 reference, for FP8 and for bf16, side by side with the speed.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((9, 0), "FP8 tensor cores (Hopper)")
env = environment.collect()
env

# %%
# The lesson: an FP8 matmul with its scales
# -----------------------------------------
# 8192³. The real-valued operands are bf16 normals; each is quantized with the scale
# that maps its largest magnitude onto 448, the E4M3 maximum. ``b`` is column-major, the
# layout FP8 tensor cores read. Quantizing is not timed: in training it is fused into
# the producer of each operand.
#
# The graph reads the two FP8 (E4M3) operands, multiplies in fp32, and undoes the two
# quantization scales on the way out (``mul`` by each operand's descale, pass-in
# tensors), so the bf16 result is in real units.
import cudnn
import torch

m = n = k = 8192
torch.manual_seed(0)
a = torch.randn(1, m, k, device="cuda", dtype=torch.bfloat16)  # batch 1, M×K row-major
b_nk = torch.randn(1, n, k, device="cuda", dtype=torch.bfloat16)
b = b_nk.transpose(1, 2)  # K×N, column-major
scale_a, scale_b = 448 / a.abs().max().float(), 448 / b.abs().max().float()
a8 = (a.float() * scale_a).clamp(-448, 448).to(torch.float8_e4m3fn)
b8 = (b_nk.float() * scale_b).clamp(-448, 448).to(torch.float8_e4m3fn).transpose(1, 2)
descale_a, descale_b = (1 / scale_a).reshape(1, 1, 1), (1 / scale_b).reshape(1, 1, 1)
c = torch.empty(1, m, n, device="cuda", dtype=torch.bfloat16)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
FLOAT = cudnn.data_type.FLOAT
g = cudnn.pygraph(
    handle=handle,
    name="fp8_matmul",
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
A8, B8 = g.tensor_like(a8, name="a8"), g.tensor_like(b8, name="b8")
DESCALE_A = g.tensor_like(descale_a, name="descale_a")
DESCALE_B = g.tensor_like(descale_b, name="descale_b")
AB = g.matmul(A=A8, B=B8, compute_data_type=FLOAT, name="matmul")
AB.set_data_type(FLOAT)  # the product stays fp32 until the descales are applied
C_a = g.mul(a=AB, b=DESCALE_A, name="descale_a")
C = g.mul(a=C_a, b=DESCALE_B, name="descale_b")
C.set_output(True).set_data_type(c.dtype)
C.set_dim(list(c.shape)).set_stride(list(c.stride()))

g.validate()  # the five build steps
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()

workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
pack = {A8: a8, B8: b8, DESCALE_A: descale_a, DESCALE_B: descale_b, C: c}
g.execute(pack, workspace, handle=handle)

ref = a.float() @ b.float()  # the real-valued product, in fp32
scale = ref.abs().max().item()
torch.testing.assert_close(c.float(), ref, atol=0.1 * scale, rtol=0.1)  # FP8 tolerance
rel = ((c.float() - ref).norm() / ref.norm()).item()
print(f"cuDNN FP8 matmul: relative error {rel:.1e}, plan {g.get_plan_name_at_index(0)}")

# %%
# Measuring: the lesson's result against PyTorch's FP8 and bf16 matmuls
# ---------------------------------------------------------------------
# The same product through ``torch._scaled_mm`` (cuBLASLt FP8) and a bf16 matmul, each
# checked against the fp32 reference, for the page's record.
from cudnn_guide import check
from cudnn_guide.graphs import fp8

FP8_TOL = 0.1  # E4M3 rounds each operand to 2⁻⁴ relative; two operands over K: ~4e-2
descales = dict(scale_a=descale_a.reshape(()), scale_b=descale_b.reshape(()))
scaled_mm_out = torch._scaled_mm(a8[0], b8[0], **descales, out_dtype=torch.bfloat16)
mm_checks = [
    check.check(c, ref, name="cuDNN FP8 matmul", tol=FP8_TOL),
    check.check(
        scaled_mm_out.unsqueeze(0), ref, name="torch._scaled_mm FP8", tol=FP8_TOL
    ),
    check.check(torch.matmul(a, b), ref, name="bf16 matmul"),
]
for r in mm_checks:
    print(r)
same = torch.equal(c[0], scaled_mm_out)
print(f"cuDNN's output equals torch._scaled_mm's, bit for bit: {same}")
del ref, scaled_mm_out

# %%
# Measuring FP8 matmul speed across sizes
# ---------------------------------------
# Square problems 2k–16k, cold L2, FP8 and bf16 side by side. Each size is a comparison
# in interleaved rounds (:mod:`cudnn_guide.measure.compare`): the cuDNN graph against
# each baseline, with the 95% interval of the per-round ratio and a verdict at every
# size, not one picked size. At each size the cuDNN output is also compared bit for bit
# with ``torch._scaled_mm``'s (untimed): equal bits point to the same kernel.
from cudnn_guide.measure import sweep

sizes = [2048, 4096, 8192, 16384]
made, same_bits = {}, {}


def scaled_mm_of(d):
    a, b = d["a8"][0], d["b8"][0]
    kw = dict(
        scale_a=d["descale_a"].reshape(()),
        scale_b=d["descale_b"].reshape(()),
        out_dtype=torch.bfloat16,
    )
    return lambda: torch._scaled_mm(a, b, **kw)


def setup(n):
    if n not in made:
        made.clear()
        torch.cuda.empty_cache()
        p = fp8.Fp8MatmulProblem(m=n, n=n, k=n)
        d = p.make_inputs(seed=n)
        built = fp8.fp8_matmul_graph(p, d, name=f"fp8 matmul {n}")
        launch = built.bind(built.pack(**{key: d[key] for key in built.io}))
        check.poison(d["c"])
        launch()
        check.check(
            d["c"],
            check.reference(torch.matmul, d["a"], d["b"]),
            name=f"FP8 {n}³",
            tol=FP8_TOL,
        )
        same_bits[n] = torch.equal(d["c"][0], scaled_mm_of(d)())
        made[n] = (p, d, launch, torch.empty_like(d["c"]))
    return made[n]


def scaled_mm(n):
    return scaled_mm_of(setup(n)[1])


mm_impls = {
    "cuDNN FP8 graph": lambda n: setup(n)[2],
    "torch._scaled_mm FP8 (cuBLASLt)": scaled_mm,
    "torch.matmul bf16 (cuBLAS)": lambda n: (
        lambda d=setup(n)[1], o=setup(n)[3]: torch.matmul(d["a"], d["b"], out=o)
    ),
}
mm_result = sweep.sweep(
    sizes,
    mm_impls,
    x="n",
    l2="cold",
    flops=lambda n: 2 * n**3,
    candidate="cuDNN FP8 graph",
)
made.clear()
torch.cuda.empty_cache()
for n in sizes:
    print(f"{n}³: cuDNN FP8 equals torch._scaled_mm bit for bit: {same_bits[n]}")

# %%
# Measuring FP8 attention: the scaled graph, checked
# --------------------------------------------------
# Causal, 8 sequences of 2048 tokens, 16 heads of 128. ``make_sdpa_fp8_inputs``
# quantizes Q, K and V per tensor; the softmax probabilities are in [0, 1] and get
# ``scale_s = 448``; the output is a convex combination of rows of V, so
# ``scale_o = 448 / max|V|`` cannot overflow. ``sdpa_fp8`` takes the descales of Q, K,
# V and the softmax, the scale of the FP8 output, and returns the ``amax`` of S and O
# that the next step's scales come from (its causal edge is ``right_bound``; ``sdpa``
# calls it ``diagonal_band_right_bound``). The bf16 cuDNN graph on the same real values
# is the accuracy and speed reference point.
from cudnn_guide.graphs import attention

att = attention.SdpaProblem(batch=8, heads=16, seq=2048, head_dim=128, causal=True)
att_in = att.make_inputs(seed=3)
f8 = fp8.make_sdpa_fp8_inputs(att_in["q"], att_in["k"], att_in["v"])
att8 = fp8.sdpa_fp8_graph(att, f8, name="fp8 attention")
att8_pack = att8.pack(**{key: f8[key] for key in att8.io})
att16 = attention.sdpa_graph(att, att_in)  # the bf16 graph of the attention page
att16_pack = att16.pack(**att_in)
print(f"fp8 attention: plan {att8.report.plan_name}")
att8.execute(att8_pack)
att16.execute(att16_pack)
att_ref = check.reference(att.torch_forward, att_in["q"], att_in["k"], att_in["v"])
o_fp8 = fp8.dequantize(f8["o8"], f8["descale_o"])
true_amax_o = torch.tensor([float(att_ref.abs().max())], device="cuda")
att_checks = [
    check.check(
        o_fp8, att_ref, name="cuDNN FP8 attention (dequantized O)", tol=FP8_TOL
    ),
    check.check(att_in["o"], att_ref, name="cuDNN bf16 attention"),
    check.check(
        f8["amax_o"].reshape(1),
        true_amax_o,
        name="amax_O vs max|O| of the reference",
        tol=FP8_TOL,
    ),
]
for r in att_checks:
    print(r)
print(
    f"amax_S = {f8['amax_s'].item():.4f} (the largest softmax probability; at most 1)"
)
assert 0 < f8["amax_s"].item() <= 1.0 + 1e-3

# %%
# Measuring FP8 attention speed across sequence lengths
# -----------------------------------------------------
# 16,384 tokens per point (B = 16384 / S), causal, head dim 128, cold L2.
from torch.nn.attention import SDPBackend

from cudnn_guide.measure import baselines

FLASH = "PyTorch SDPA, flash backend (FlashAttention-2), bf16"
seqs = [2048, 4096, 8192, 16384]
att_made = {}


def att_setup(s):
    if s not in att_made:
        att_made.clear()
        p = attention.SdpaProblem(
            batch=16384 // s, heads=16, seq=s, head_dim=128, causal=True
        )
        d = p.make_inputs(seed=s)
        q8 = fp8.make_sdpa_fp8_inputs(d["q"], d["k"], d["v"])
        g8 = fp8.sdpa_fp8_graph(p, q8, name=f"fp8 attention {s}")
        g16 = attention.sdpa_graph(p, d)
        l8 = g8.bind(g8.pack(**{key: q8[key] for key in g8.io}))
        l16 = g16.bind(g16.pack(**d))
        l8()
        ref = check.reference(p.torch_forward, d["q"], d["k"], d["v"])
        check.check(
            fp8.dequantize(q8["o8"], q8["descale_o"]),
            ref,
            name=f"FP8 attention S={s}",
            tol=FP8_TOL,
        )
        att_made[s] = (p, d, l8, l16)
    return att_made[s]


def flash(s):
    p, d, _, _ = att_setup(s)
    attend = baselines.forced_sdpa(
        SDPBackend.FLASH_ATTENTION, is_causal=True, scale=p.scale
    )
    return lambda: attend(d["q"], d["k"], d["v"])


att_impls = {
    "cuDNN FP8 graph": lambda s: att_setup(s)[2],
    "cuDNN bf16 graph": lambda s: att_setup(s)[3],
    FLASH: flash,
}

# FlashAttention-4 in bf16 (flash-attn-4, a beta), checked at each length
from cudnn_guide.measure import fa4

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = f"{fa4.label()}, bf16"


def fa4_at(s):
    p, d, _, _ = att_setup(s)
    run = fa4.forward(d["q"], d["k"], d["v"], causal=True, scale=p.scale)
    ref = check.reference(p.torch_forward, d["q"], d["k"], d["v"])
    check.check(run(), ref, name=f"FA4 bf16 S={s}")
    return run


if FA4_OK:
    att_impls[FA4] = fa4_at
else:
    print(f"{FA4}: {FA4_DETAIL}")
att_result = sweep.sweep(
    seqs,
    att_impls,
    x="seq_len",
    l2="cold",
    flops=lambda s: (
        attention.SdpaProblem(batch=16384 // s, heads=16, seq=s, head_dim=128).flops
    ),
    candidate="cuDNN FP8 graph",
)

# %%
# Measuring: the plots
# --------------------
import matplotlib.pyplot as plt

from cudnn_guide.measure.ceilings import measure_ceilings

ceil = measure_ceilings()
from cudnn_guide.report import plot_sweep

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
plot_sweep(
    mm_result,
    "tflops",
    ax=ax1,
    logx=True,
    title="matmul, n × n × n",
    ceiling=ceil.bf16_tflops,
    ceiling_label="measured bf16 matmul ceiling",
)
plot_sweep(
    att_result,
    "tflops",
    ax=ax2,
    logx=True,
    title="causal attention forward, head dim 128",
)
plt.show()

# %%
from cudnn_guide.report import sweep_table

sweep_table(mm_result, "tflops", title="matmul TFLOP/s")

# %%
# The verdicts, at every size: cuDNN FP8's speed-up over each baseline (above 1: cuDNN
# is faster).
import pandas as pd

from cudnn_guide.report import html_table

html_table(pd.DataFrame(mm_result.verdicts()), {"speed-up": "{:.2f}×"})

# %%
sweep_table(att_result, "tflops", title="causal attention TFLOP/s")

# %%
html_table(pd.DataFrame(att_result.verdicts()), {"speed-up": "{:.2f}×"})

# %%
# Conclusions
# -----------
from collections import Counter

from cudnn_guide.report.prose import Prose

SCALED = "torch._scaled_mm FP8 (cuBLASLt)"
tally = Counter(mm_result.comparisons[n].versus[SCALED]["verdict"] for n in sizes)
m8 = mm_result.comparisons[8192]
a2 = att_result.comparisons[2048]
equal_at = [n for n in sizes if same_bits[n]]
if len(equal_at) == len(sizes):
    kernel = (
        "equals torch._scaled_mm's bit for bit at every size, so the two "
        "almost certainly run the same kernel, and the GPU-time comparison times that "
        "kernel against itself"
    )
elif equal_at:
    kernel = (
        f"equals torch._scaled_mm's bit for bit at "
        f"{', '.join(f'{n}³' for n in equal_at)} (the same kernel there, almost "
        f"certainly) and differs at the other sizes (different kernels)"
    )
else:
    kernel = (
        "differs from torch._scaled_mm's at every size: the two run different kernels"
    )
clocks, looped = [], []  # sizes where GPU time and a back-to-back loop disagree
for n in sizes:
    c_ = mm_result.comparisons[n]
    if c_.wall is None or SCALED not in c_.wall.versus:
        continue
    looped.append(f"{n}³")
    gpu, loop = c_.versus[SCALED]["verdict"], c_.wall.versus[SCALED]
    if gpu != loop["verdict"]:
        word = {"tie": "a tie", "faster": "faster", "slower": "slower"}
        clocks.append(
            f"at {n}³ cuDNN FP8 is {word[gpu]} by GPU time and {word[loop['verdict']]} "
            f"in a back-to-back loop ({loop['value']:.2f}×, {loop['low']:.2f}–"
            f"{loop['high']:.2f}; the loop's tie band ±{100 * c_.wall.tie_band:.1f}%)"
        )
if clocks:
    clocks_text = (
        "* The two clocks disagree: "
        + "; ".join(clocks)
        + ". The GPU-time verdict is the one that applies to launches under CUDA "
        "graphs, where a call's host time is gone; the loop's applies to plain eager "
        "launching, host time included."
    )
elif looped:
    clocks_text = (
        f"* At {', '.join(looped)} a back-to-back loop, host time included, was also "
        "timed: it gives the same verdict as GPU time."
    )
else:
    clocks_text = (
        "* No back-to-back loop was timed: no contender's host time per call came near "
        "its GPU time."
    )


def error_ratio(fp8_check, bf16_check):
    r = fp8_check.rel_error / bf16_check.rel_error
    return f"{r:.0f}× larger" if r >= 1 else f"{1 / r:.1f}× smaller"


def peak(impl):
    ms = [m for m in att_result.measurements if m.params["impl"] == impl]
    best = max(ms, key=lambda m: m.tflops)
    return f"{best.tflops:.0f} TFLOP/s (S={best.params['seq_len']})"


# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

headline(
    "FP8 matmul 8192³ TFLOP/s",
    unit="TFLOP/s",
    **m8.estimate("cuDNN FP8 graph", "TFLOP/s"),
)
for n in sizes:
    comparison(
        f"FP8 matmul {n}³, speed-up over torch._scaled_mm",
        mm_result.comparisons[n],
        SCALED,
    )
comparison("FP8 attention S=2048, speed-up over cuDNN bf16", a2, "cuDNN bf16 graph")
headline("FP8 attention relative error", att_checks[0].rel_error, "")
# sphinx_gallery_end_ignore

Prose(
    f"* Matmul, cuDNN FP8 against torch._scaled_mm across {len(sizes)} sizes: "
    + ", ".join(
        f"{v_} at {n_} of {len(sizes)} sizes" for v_, n_ in sorted(tally.items())
    )
    + "; "
    + "; ".join(f"{n_}³ {mm_result.comparisons[n_].describe(SCALED)}" for n_ in sizes)
    + f". The cuDNN graph's output {kernel}.",
    clocks_text,
    f"* At 8192³ cuDNN FP8 runs at {m8.measurements['cuDNN FP8 graph'].tflops:.0f} "
    f"TFLOP/s and is {m8.describe('torch.matmul bf16 (cuBLAS)')}; its relative error "
    f"is "
    f"{mm_checks[0].rel_error:.1e} against bf16's {mm_checks[2].rel_error:.1e} "
    f"({error_ratio(mm_checks[0], mm_checks[2])}).",
    f"* Attention at S=2048: cuDNN FP8 is {a2.describe('cuDNN bf16 graph')} and "
    f"{a2.describe(FLASH)}; relative error {att_checks[0].rel_error:.1e} against "
    f"bf16's "
    f"{att_checks[1].rel_error:.1e} ({error_ratio(att_checks[0], att_checks[1])}).",
    f"* Peak attention throughput: FP8 {peak('cuDNN FP8 graph')}, "
    f"bf16 {peak('cuDNN bf16 graph')}" + (f", {FA4} {peak(FA4)}." if FA4_OK else "."),
    (
        f"* Against {FA4} at S=2048, cuDNN FP8 is {a2.describe(FA4)}: the gain mixes "
        "the precision change with the implementation."
        if FA4_OK
        else f"* {FA4} was not timed: {FA4_DETAIL}."
    ),
)
