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
from cudnn_guide.studies import fp8_sweeps

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
# size, not one picked size. ``fp8_sweeps.MatmulSizes`` builds one size at a time,
# checks all three contenders there against fp32 before timing them, and compares the
# cuDNN output bit for bit with ``torch._scaled_mm``'s (untimed): equal bits point to
# the same kernel.
from cudnn_guide.measure import sweep

sizes = [2048, 4096, 8192, 16384]
SCALED = "torch._scaled_mm FP8 (cuBLASLt)"
mm = fp8_sweeps.MatmulSizes(tol=FP8_TOL)
mm_impls = {
    "cuDNN FP8 graph": mm.cudnn_fp8,
    SCALED: mm.scaled_mm,
    "torch.matmul bf16 (cuBLAS)": mm.bf16_matmul,
}
timing = dict(l2="cold", candidate="cuDNN FP8 graph")
mm_result = sweep.sweep(sizes, mm_impls, x="n", flops=lambda n: 2 * n**3, **timing)
mm.release()
same_bits = mm.same_bits
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
# is the accuracy and speed reference point; ``fp8_sweeps.check_attention`` runs both
# and checks them, and ``amax_O``, against PyTorch's attention in fp32.
from cudnn_guide.graphs import attention

att = attention.SdpaProblem(batch=8, heads=16, seq=2048, head_dim=128, causal=True)
att_in = att.make_inputs(seed=3)
f8 = fp8.make_sdpa_fp8_inputs(att_in["q"], att_in["k"], att_in["v"])
att8 = fp8.sdpa_fp8_graph(att, f8, name="fp8 attention")
att16 = attention.sdpa_graph(att, att_in)  # the bf16 graph of the attention page
print(f"fp8 attention: plan {att8.report.plan_name}")
att_checks = fp8_sweeps.check_attention(att, att_in, f8, att8, att16, tol=FP8_TOL)
for r in att_checks:
    print(r)
amax_s = f8["amax_s"].item()
print(f"amax_S = {amax_s:.4f} (the largest softmax probability; at most 1)")
assert 0 < amax_s <= 1.0 + 1e-3

# %%
# Measuring FP8 attention speed across sequence lengths
# -----------------------------------------------------
# 16,384 tokens per point (B = 16384 / S), causal, head dim 128, cold L2
# (``fp8_sweeps.AttentionLengths``: one length at a time, every contender checked
# against fp32 there before it is timed). FlashAttention-4 in bf16 is flash-attn-4, a
# beta.
from cudnn_guide.measure import fa4

FLASH = "PyTorch SDPA, flash backend (FlashAttention-2), bf16"
seqs = [2048, 4096, 8192, 16384]
at = fp8_sweeps.AttentionLengths(tokens=16384, heads=16, head_dim=128, tol=FP8_TOL)
att_impls = {
    "cuDNN FP8 graph": at.cudnn_fp8,
    "cuDNN bf16 graph": at.cudnn_bf16,
    FLASH: at.flash,
}
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = f"{fa4.label()}, bf16"
if FA4_OK:
    att_impls[FA4] = at.fa4
else:
    print(f"{FA4}: {FA4_DETAIL}")
att_result = sweep.sweep(seqs, att_impls, x="seq_len", flops=at.flops, **timing)

# %%
# Measuring: the plots
# --------------------
import matplotlib.pyplot as plt
import pandas as pd

from cudnn_guide.measure.ceilings import measure_ceilings
from cudnn_guide.report import html_table, sweep_table

ceil = measure_ceilings()
fp8_sweeps.plot_fp8_sweeps(mm_result, att_result, ceiling=ceil.bf16_tflops)
plt.show()

# %%
sweep_table(mm_result, "tflops", title="matmul TFLOP/s")

# %%
# The verdicts, at every size: cuDNN FP8's speed-up over each baseline (above 1: cuDNN
# is faster).
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

tally = Counter(mm_result.comparisons[n].versus[SCALED]["verdict"] for n in sizes)
m8 = mm_result.comparisons[8192]
a2 = att_result.comparisons[2048]
kernel = fp8_sweeps.same_kernel_text(same_bits, sizes)
clocks_text = fp8_sweeps.clocks_text(mm_result, sizes, SCALED)
error_ratio = fp8_sweeps.error_ratio
peak = lambda impl: fp8_sweeps.peak_text(att_result, impl)  # best TFLOP/s, its S

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

m8_rate = m8.estimate("cuDNN FP8 graph", "TFLOP/s")
headline("FP8 matmul 8192³ TFLOP/s", unit="TFLOP/s", **m8_rate)
for n in sizes:
    name = f"FP8 matmul {n}³, speed-up over torch._scaled_mm"
    comparison(name, mm_result.comparisons[n], SCALED)
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
    f"is {mm_checks[0].rel_error:.1e} against bf16's {mm_checks[2].rel_error:.1e} "
    f"({error_ratio(mm_checks[0], mm_checks[2])}).",
    f"* Attention at S=2048: cuDNN FP8 is {a2.describe('cuDNN bf16 graph')} and "
    f"{a2.describe(FLASH)}; relative error {att_checks[0].rel_error:.1e} against "
    f"bf16's {att_checks[1].rel_error:.1e} "
    f"({error_ratio(att_checks[0], att_checks[1])}).",
    f"* Peak attention throughput: FP8 {peak('cuDNN FP8 graph')}, "
    f"bf16 {peak('cuDNN bf16 graph')}" + (f", {FA4} {peak(FA4)}." if FA4_OK else "."),
    (
        f"* At S=2048, cuDNN FP8 is {a2.describe(FA4)}: the gain mixes "
        "the precision change with the implementation."
        if FA4_OK
        else f"* {FA4} was not timed: {FA4_DETAIL}."
    ),
)
