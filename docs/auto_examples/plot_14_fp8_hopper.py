"""
FP8 on Hopper: scaled matmul and scaled attention
=================================================

Hopper's tensor cores run FP8 at twice the bf16 rate. FP8 E4M3 has 3 mantissa bits and a
largest value of 448, so every FP8 tensor carries a per-tensor scale, and the graph applies the
matching *descale* to get real values back. The question for a reader is the trade: how much
faster, for how much less accuracy.

What you will learn:

* per-tensor scaling: ``t8 = t · scale`` stored in FP8, ``descale = 1/scale`` applied in the
  graph's fp32 epilogue;
* an FP8 matmul as a cuDNN graph (FP8 operands, fp32 accumulation, descales, bf16 output),
  against PyTorch's ``torch._scaled_mm`` (cuBLASLt FP8) and a bf16 matmul;
* FP8 attention with ``sdpa_fp8``: descales for Q, K, V and the softmax, a scale for the FP8
  output, and the ``amax`` outputs that the next step's scales are computed from;
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
# FP8 matmul, checked
# -------------------
# 8192³. The real-valued operands are bf16 normals; each is quantized with the scale that maps
# its largest magnitude onto 448. ``b`` is column-major, the layout FP8 tensor cores read.
# Quantizing is not timed: in training it is fused into the producer of each operand.
#
# The graph reads the two FP8 (E4M3) operands, multiplies in fp32, and undoes the two
# quantization scales on the way out (``mul`` by each operand's descale, pass-in tensors), so
# the bf16 result is in real units.
import cudnn
import torch

from cudnn_guide import check, graphs
from cudnn_guide.graphs import fp8

handle = graphs.handle_for_current_device()
FLOAT = cudnn.data_type.FLOAT


def new_graph(name):
    return cudnn.pygraph(handle=handle, name=name, io_data_type=cudnn.data_type.BFLOAT16,
                         intermediate_data_type=FLOAT, compute_data_type=FLOAT)


def output(graph_output, t):
    graph_output.set_output(True).set_data_type(t.dtype).set_dim(list(t.shape)).set_stride(list(t.stride()))
    return t


def fp8_matmul(d):
    """c = (a8 @ b8) · descale_a · descale_b, E4M3 operands, fp32 accumulation, bf16 out; returns graph, pack."""
    g = new_graph("fp8_matmul")
    T = {n: g.tensor_like(d[n], name=n) for n in ("a8", "b8", "descale_a", "descale_b")}
    mm = g.matmul(A=T["a8"], B=T["b8"], compute_data_type=FLOAT, name="matmul")
    mm.set_data_type(FLOAT)
    C = g.mul(a=g.mul(a=mm, b=T["descale_a"], name="descale_a"), b=T["descale_b"], name="descale_b")
    pack = {t: d[n] for n, t in T.items()} | {C: output(C, d["c"])}
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])  # the five build steps
    return g, pack


problem = fp8.Fp8MatmulProblem(m=8192, n=8192, k=8192)
data = problem.make_inputs(seed=0)
g_mm, mm_pack = fp8_matmul(data)
mm = graphs.adopt(g_mm, handle, name="fp8 matmul")
print(problem)
print(mm.report)
check.poison(data["c"])
workspace = torch.empty(g_mm.get_workspace_size(), device="cuda", dtype=torch.uint8)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)  # run on torch's stream
g_mm.execute(mm_pack, workspace, handle=handle)

reference = check.reference(torch.matmul, data["a"], data["b"])
a2, b2 = data["a8"][0], data["b8"][0]
scale_args = dict(scale_a=data["descale_a"].reshape(()), scale_b=data["descale_b"].reshape(()), out_dtype=torch.bfloat16)
bf16_out = torch.matmul(data["a"], data["b"])
scaled_mm_out = torch._scaled_mm(a2, b2, **scale_args).unsqueeze(0)
FP8_TOL = 0.1  # E4M3 rounds each operand to 2⁻⁴ relative; two operands, summed over K, land near 4e-2
mm_checks = [
    check.check(data["c"], reference, name="cuDNN FP8 matmul", tol=FP8_TOL),
    check.check(scaled_mm_out, reference, name="torch._scaled_mm FP8", tol=FP8_TOL),
    check.check(bf16_out, reference, name="bf16 matmul"),
]
for c in mm_checks:
    print(c)

# %%
# FP8 matmul speed across sizes
# -----------------------------
# Square problems 2k–16k, cold L2, FP8 and bf16 side by side. Each size is a comparison in
# interleaved rounds (:mod:`cudnn_guide.measure.compare`): the cuDNN graph against each baseline, with
# the 95% interval of the per-round ratio and a verdict at every size, not one picked size.
from cudnn_guide.measure import sweep
from cudnn_guide.graphs import attention

sizes = [2048, 4096, 8192, 16384]
made = {}


def setup(n):
    if n not in made:
        made.clear()
        torch.cuda.empty_cache()
        p = fp8.Fp8MatmulProblem(m=n, n=n, k=n)
        d = p.make_inputs(seed=n)
        gn, pn = fp8_matmul(d)
        launch = graphs.adopt(gn, handle, name=f"fp8 matmul {n}").bind(pn)
        check.poison(d["c"])
        launch()
        check.check(d["c"], check.reference(torch.matmul, d["a"], d["b"]), name=f"FP8 {n}³", tol=FP8_TOL)
        made[n] = (p, d, launch, torch.empty_like(d["c"]))
    return made[n]


def scaled_mm(n):
    _, d, _, _ = setup(n)
    a, b = d["a8"][0], d["b8"][0]
    kw = dict(scale_a=d["descale_a"].reshape(()), scale_b=d["descale_b"].reshape(()), out_dtype=torch.bfloat16)
    return lambda: torch._scaled_mm(a, b, **kw)


mm_impls = {
    "cuDNN FP8 graph": lambda n: setup(n)[2],
    "torch._scaled_mm FP8 (cuBLASLt)": scaled_mm,
    "torch.matmul bf16 (cuBLAS)": lambda n: (lambda d=setup(n)[1], o=setup(n)[3]: torch.matmul(d["a"], d["b"], out=o)),
}
mm_result = sweep.sweep(sizes, mm_impls, x="n", l2="cold", flops=lambda n: 2 * n ** 3, candidate="cuDNN FP8 graph")
made.clear()
torch.cuda.empty_cache()

# %%
# FP8 attention, checked
# ----------------------
# Causal, 8 sequences of 2048 tokens, 16 heads of 128. ``make_sdpa_fp8_inputs`` quantizes Q, K
# and V per tensor; the softmax probabilities are in [0, 1] and get ``scale_s = 448``; the output
# is a convex combination of rows of V, so ``scale_o = 448 / max|V|`` cannot overflow. The bf16
# cuDNN graph on the same real values is the accuracy and speed reference point.


def fp8_attention(d, causal=True):
    """Causal attention on E4M3 Q, K, V with per-tensor scales; writes E4M3 O and the AMAX of S and O."""
    g = new_graph("sdpa_fp8")
    names = ("q8", "k8", "v8", "descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
    T = {n: g.tensor_like(d[n], name=n) for n in names}
    # sdpa_fp8 names the band's right edge ``right_bound`` (sdpa: ``diagonal_band_right_bound``)
    mask = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, right_bound=0) if causal else {}
    O, _stats, AMAX_S, AMAX_O = g.sdpa_fp8(
        name="sdpa_fp8", q=T["q8"], k=T["k8"], v=T["v8"], descale_q=T["descale_q"], descale_k=T["descale_k"],
        descale_v=T["descale_v"], descale_s=T["descale_s"], scale_s=T["scale_s"], scale_o=T["scale_o"],
        generate_stats=False, attn_scale=d["q8"].shape[-1] ** -0.5, compute_data_type=FLOAT, **mask)
    pack = {t: d[n] for n, t in T.items()}
    pack |= {O: output(O, d["o8"]), AMAX_S: output(AMAX_S, d["amax_s"]), AMAX_O: output(AMAX_O, d["amax_o"])}
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, pack


att = attention.SdpaProblem(batch=8, heads=16, seq=2048, head_dim=128, causal=True)
att_in = att.make_inputs(seed=3)
f8 = fp8.make_sdpa_fp8_inputs(att_in["q"], att_in["k"], att_in["v"])
g8, att8_pack = fp8_attention(f8)
att8 = graphs.adopt(g8, handle, name="fp8 attention")
att16 = attention.sdpa_graph(att, att_in)  # the bf16 graph of the attention page
att16_pack = att16.pack(**att_in)
print(att8.report)
g8.execute(att8_pack, torch.empty(g8.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)
att16.execute(att16_pack)
att_ref = check.reference(att.torch_forward, att_in["q"], att_in["k"], att_in["v"])
o_fp8 = fp8.dequantize(f8["o8"], f8["descale_o"])
true_amax_o = float(att_ref.abs().max())
att_checks = [
    check.check(o_fp8, att_ref, name="cuDNN FP8 attention (dequantized O)", tol=FP8_TOL),
    check.check(att_in["o"], att_ref, name="cuDNN bf16 attention"),
    check.check(f8["amax_o"].reshape(1), torch.tensor([true_amax_o], device="cuda"), name="amax_O vs max|O| of the reference",
                tol=FP8_TOL),
]
for c in att_checks:
    print(c)
print(f"amax_S = {f8['amax_s'].item():.4f} (the largest softmax probability; at most 1)")
assert 0 < f8["amax_s"].item() <= 1.0 + 1e-3

# %%
# FP8 attention speed across sequence lengths
# -------------------------------------------
# 16,384 tokens per point (B = 16384 / S), causal, head dim 128, cold L2.
from torch.nn.attention import SDPBackend

from cudnn_guide.measure import baselines

seqs = [2048, 4096, 8192, 16384]
att_made = {}


def att_setup(s):
    if s not in att_made:
        att_made.clear()
        p = attention.SdpaProblem(batch=16384 // s, heads=16, seq=s, head_dim=128, causal=True)
        d = p.make_inputs(seed=s)
        q8 = fp8.make_sdpa_fp8_inputs(d["q"], d["k"], d["v"])
        (gq, pq), g16 = fp8_attention(q8), attention.sdpa_graph(p, d)
        l8, l16 = graphs.adopt(gq, handle, name=f"fp8 attention {s}").bind(pq), g16.bind(g16.pack(**d))
        l8()
        ref = check.reference(p.torch_forward, d["q"], d["k"], d["v"])
        check.check(fp8.dequantize(q8["o8"], q8["descale_o"]), ref, name=f"FP8 attention S={s}", tol=FP8_TOL)
        att_made[s] = (p, d, l8, l16)
    return att_made[s]


def flash(s):
    p, d, _, _ = att_setup(s)
    attend = baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True, scale=p.scale)
    return lambda: attend(d["q"], d["k"], d["v"])


att_impls = {
    "cuDNN FP8 graph": lambda s: att_setup(s)[2],
    "cuDNN bf16 graph": lambda s: att_setup(s)[3],
    "PyTorch flash bf16": flash,
}
att_result = sweep.sweep(seqs, att_impls, x="seq_len", l2="cold",
                         flops=lambda s: attention.SdpaProblem(batch=16384 // s, heads=16, seq=s, head_dim=128).flops,
                         candidate="cuDNN FP8 graph")

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.measure.ceilings import measure_ceilings

ceil = measure_ceilings()
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
from cudnn_guide.report import plot_sweep
plot_sweep(mm_result, "tflops", ax=ax1, logx=True, title="matmul, n × n × n", ceiling=ceil.bf16_tflops,
               ceiling_label="measured bf16 matmul ceiling")
plot_sweep(att_result, "tflops", ax=ax2, logx=True, title="causal attention forward, head dim 128")
plt.show()

# %%
from cudnn_guide.report import sweep_table
sweep_table(mm_result, "tflops", title="matmul TFLOP/s")

# %%
# The verdicts, at every size: cuDNN FP8's speed-up over each baseline (above 1: cuDNN is faster).
import pandas as pd

from cudnn_guide.report import html_table

html_table(pd.DataFrame(mm_result.verdicts()), {"speed-up": "{:.2f}×"})

# %%
sweep_table(att_result, "tflops", title="causal attention TFLOP/s")

# %%
html_table(pd.DataFrame(att_result.verdicts()), {"speed-up": "{:.2f}×"})

# %%
# Accuracy and speed, side by side
# --------------------------------
from collections import Counter

SCALED = "torch._scaled_mm FP8 (cuBLASLt)"
tally = Counter(mm_result.comparisons[n].versus[SCALED]["verdict"] for n in sizes)
print(f"* Matmul, cuDNN FP8 against torch._scaled_mm across {len(sizes)} sizes: "
      + ", ".join(f"{k} at {v}" for k, v in sorted(tally.items())) + "; "
      + "; ".join(f"{n}³ {mm_result.comparisons[n].describe(SCALED)}" for n in sizes) + ".")
m8 = mm_result.comparisons[8192]
print(f"* At 8192³ cuDNN FP8 runs at {m8.measurements['cuDNN FP8 graph'].tflops:.0f} TFLOP/s and is "
      f"{m8.describe('torch.matmul bf16 (cuBLAS)')}; its relative error is {mm_checks[0].rel_error:.1e} against bf16's "
      f"{mm_checks[2].rel_error:.1e} ({mm_checks[0].rel_error / mm_checks[2].rel_error:.0f}× larger).")
a2 = att_result.comparisons[2048]
print(f"* Attention at S=2048: cuDNN FP8 is {a2.describe('cuDNN bf16 graph')} and {a2.describe('PyTorch flash bf16')}; "
      f"relative error {att_checks[0].rel_error:.1e} against bf16's {att_checks[1].rel_error:.1e}.")
peak8 = max((m for m in att_result.measurements if m.params["impl"] == "cuDNN FP8 graph"), key=lambda m: m.tflops)
peak16 = max((m for m in att_result.measurements if m.params["impl"] == "cuDNN bf16 graph"), key=lambda m: m.tflops)
print(f"* Peak attention throughput: FP8 {peak8.tflops:.0f} TFLOP/s (S={peak8.params['seq_len']}), "
      f"bf16 {peak16.tflops:.0f} TFLOP/s (S={peak16.params['seq_len']}).")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
headline("FP8 matmul 8192³ TFLOP/s", unit="TFLOP/s", **m8.estimate("cuDNN FP8 graph", "TFLOP/s"))
for n in sizes:
    comparison(f"FP8 matmul {n}³, speed-up over torch._scaled_mm", mm_result.comparisons[n], SCALED)
comparison("FP8 attention S=2048, speed-up over cuDNN bf16", a2, "cuDNN bf16 graph")
headline("FP8 attention relative error", att_checks[0].rel_error, "")
# sphinx_gallery_end_ignore
