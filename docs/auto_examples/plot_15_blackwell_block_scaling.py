"""
MXFP8 and block-scale quantization (Blackwell)
==============================================

Per-tensor FP8 scaling (see the FP8 page) gives a whole tensor one scale, so one outlier
shrinks the resolution left for every other value. *Block scaling* gives each run of 32
consecutive values its own scale. The MXFP8 format stores the values in FP8 E4M3 and
each block's scale as an 8-bit power of two (E8M0): ``x ≈ x8 · 2^e``. Blackwell (SM
10.0) tensor cores read block-scaled operands directly, so a matmul consumes MXFP8
without dequantizing first. This page builds that matmul as a cuDNN graph
(``block_scale_dequantize`` on both operands feeding ``matmul``), then measures cuDNN's
``block_scale_quantize``: its error next to per-tensor FP8's, and its speed.

Hopper and older GPUs have no block-scaled tensor-core instructions, and cuDNN has no
engines for these operations there. On such a GPU this page is recorded as skipped: it
shows no numbers rather than numbers from an emulation. Its code has not yet run on a
Blackwell GPU: the first Blackwell recording is also its first check.

What you will learn:

* how MXFP8 represents a tensor: E4M3 values, one E8M0 scale per block of 32 along K;
* how a block-scaled matmul is declared: FP8 operands, their scales as ``FP8_E8M0``
  tensors in the ``F8_128x4`` order the tensor cores read, ``block_scale_dequantize``
  with ``block_size`` ``[1, 32]`` for A and ``[32, 1]`` for B, then ``matmul``; NVFP4
  is the same graph with ``FP4_E2M1`` values and ``FP8_E4M3`` scales per 16;
* how ``block_scale_quantize`` is declared and checked by dequantizing in PyTorch;
* its quantization error next to per-tensor FP8's on the same data, and its speed
  against the copy bandwidth (it reads bf16 and writes about half as many bytes).
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((10, 0), "MXFP8 block scaling (Blackwell tensor cores)")
env = environment.collect()
env

# %%
# The lesson: an MXFP8 block-scaled matmul
# ----------------------------------------
# C = A · Wᵀ, with the activations A (M×K) and the weights W (N×K, as a checkpoint
# stores them) in MXFP8: E4M3 values and one E8M0 scale (a byte, 127 + the exponent)
# per 32 values along K. ``to_mxfp8`` picks each block's power of two as OCP MX does:
# its largest value lands in [256, 512) and saturates at E4M3's largest, 448. The scales
# are read in cuDNN's ``F8_128x4`` order (tiles of 128 rows × 4 scales, 32 × 16 bytes
# each), which ``swizzle`` lays out.
import cudnn
import torch

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
m, n, k, block = 4096, 4096, 4096, 32  # C[m, n] = A[m, k] · W[n, k]ᵀ


def to_mxfp8(x):
    blocks = x.float().view(x.shape[0], -1, block)
    # 2^8 is E4M3's largest power of two
    exp = blocks.abs().amax(-1, keepdim=True).clamp(min=2**-100).log2().floor() - 8
    values = (blocks / torch.exp2(exp)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return values.view(x.shape), (exp.squeeze(-1) + 127).to(torch.uint8)


def swizzle(scales):  # row 128t + 32i + j, scale 4u + v: tile (t, u), byte 16j + 4i + v
    tiles = scales.view(-1, 4, 32, scales.shape[1] // 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(-1).view(torch.float8_e8m0fnu)


a8, a_scales = to_mxfp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
w8, w_scales = to_mxfp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
sk = k // block  # scales per row
graph = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
E4M3, E8M0 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FP8_E8M0
SCALES = dict(data_type=E8M0, reordering_type=cudnn.tensor_reordering.F8_128x4)
A = graph.tensor(dim=[1, m, k], stride=[m * k, k, 1], data_type=E4M3)
B = graph.tensor(dim=[1, k, n], stride=[k * n, 1, k], data_type=E4M3)  # Wᵀ, K-major
SA = graph.tensor(dim=[1, m, sk], stride=[m * sk, sk, 1], **SCALES)
SB = graph.tensor(dim=[1, sk, n], stride=[sk * n, 1, sk], **SCALES)
A_deq = graph.block_scale_dequantize(input=A, descale=SA, block_size=[1, block])
B_deq = graph.block_scale_dequantize(input=B, descale=SB, block_size=[block, 1])
C = graph.matmul(A=A_deq, B=B_deq)
C.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
graph.validate()
graph.build_operation_graph()
graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
graph.check_support()
graph.build_plans()
c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
workspace = torch.empty(graph.get_workspace_size(), device="cuda", dtype=torch.uint8)
pack = {A: a8, B: w8, SA: swizzle(a_scales), SB: swizzle(w_scales), C: c}
graph.execute(pack, workspace, handle=handle)

# %%
# The check: the same product in fp32 from the dequantized operands, x8 · 2^(e − 127).
# Both sides use the same MXFP8 values, so what remains is the accumulation order and
# the bf16 rounding of C.


def expand(scales):  # one power of two per value
    return torch.exp2(scales.float() - 127).repeat_interleave(block, dim=1)


ref = (a8.float() * expand(a_scales)) @ (w8.float() * expand(w_scales)).T
torch.testing.assert_close(c.float(), ref, atol=0.5, rtol=2e-2)

# %%
# Measuring MXFP8 quantization: its error and its speed
# -----------------------------------------------------
# cuDNN's ``block_scale_quantize`` on 16,384 × 4,096 bf16 activations with a few large
# outliers, quantized along the last axis in blocks of 32: it writes 16,384 × 4,096 E4M3
# values and 16,384 × 128 E8M0 scales (here in plain row-major order, for the check).
from cudnn_guide import check, graphs
from cudnn_guide.graphs import fp8, tensors

M, K, BLOCK = 16384, 4096, 32
gen = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=gen)
x[::997, ::31] *= 50  # outliers: one per ~30k values, as activations have
y8 = torch.empty(M, K, device="cuda", dtype=torch.float8_e4m3fn)
scales = torch.empty(M, K // BLOCK, device="cuda", dtype=torch.uint8)  # E8M0 bytes

qgraph = cudnn.pygraph(
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
    handle=graphs.handle_for_current_device(),
)
X = tensors.graph_tensor(qgraph, x, "x")
Y, S = qgraph.block_scale_quantize(
    input=X, block_size=BLOCK, axis=1, transpose=False, name="mxfp8_quantize"
)
Y.set_output(True).set_data_type(cudnn.data_type.FP8_E4M3)
Y.set_dim([M, K]).set_stride([K, 1])
S.set_output(True).set_data_type(cudnn.data_type.FP8_E8M0)
S.set_dim([M, K // BLOCK]).set_stride([K // BLOCK, 1])
built = graphs.build(qgraph, name="mxfp8_quantize", timed=True)  # print its step times
print(built.report)
qpack = {X: x, Y: y8, S: scales}
built.execute(qpack)

# %%
# Check by dequantizing
# ---------------------
# An E8M0 byte ``e`` is the scale 2^(e − 127). Dequantized values must match the input
# to FP8 E4M3 precision (3 mantissa bits: 2⁻⁴ relative rounding per value).
block_scale = torch.exp2(scales.float() - 127.0).repeat_interleave(BLOCK, dim=1)
dequant = y8.float() * block_scale
mx_check = check.check(dequant, x.float(), name="MXFP8 round trip", tol=0.08)
x8, _, descale = fp8.quantize(x, rank=2)
per_tensor = check.compare(
    fp8.dequantize(x8, descale), x.float(), name="per-tensor FP8 round trip", tol=0.08
)
print(mx_check)
print(per_tensor)
small = x.float().abs() < 1
err_mx = ((dequant - x.float())[small].norm() / x.float()[small].norm()).item()
err_pt = (
    (fp8.dequantize(x8, descale) - x.float())[small].norm() / x.float()[small].norm()
).item()
print("relative error on the non-outlier values:")
print(f"MXFP8 {err_mx:.1e}, per-tensor FP8 {err_pt:.1e}")

# %%
# Speed
# -----
# Bytes: read 2 per value, write 1 per value plus one scale byte per 32.
from cudnn_guide.measure import bench
from cudnn_guide.measure.ceilings import measure_ceilings

ceil = measure_ceilings()
quant = bench.benchmark(
    built.bind(qpack),
    label="cuDNN MXFP8 quantize",
    l2="cold",
    bytes=M * K * 3 + M * K // BLOCK,
    params={"impl": "cuDNN MXFP8 quantize"},
)
share = 100 * quant.gbps / ceil.copy_gbps
print(quant)
print(f"{share:.0f}% of the copy bandwidth")

# %%
# Plot
# ----
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
ax.bar(["MXFP8 (block 32)", "per-tensor FP8"], [err_mx, err_pt])
ax.set_ylabel("relative error, non-outlier values")
ax.set_yscale("log")
ax.set_title("quantization error with outliers present")
plt.show()

# %%
# Conclusions
# -----------
from cudnn_guide.report.prose import Prose

if err_mx < err_pt:
    errors = (
        f"With outliers present, MXFP8 keeps the ordinary values' relative error at "
        f"{err_mx:.1e}; per-tensor FP8 lets it grow to {err_pt:.1e} "
        f"({err_pt / err_mx:.0f}× larger)."
    )
else:
    errors = (
        f"With outliers present, MXFP8's relative error on the ordinary values "
        f"({err_mx:.1e}) is not below per-tensor FP8's ({err_pt:.1e})."
    )
Prose(
    f"The block-scaled MXFP8 matmul built and matched its fp32 reference to within "
    f"{(c.float() - ref).abs().max():.2f} (|C| up to {ref.abs().max():.0f}).",
    errors,
    f"Quantizing runs at {quant.gbps:.0f} GB/s, {share:.0f}% of the copy bandwidth.",
)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline

headline("MXFP8 quantize, % of copy bandwidth", share, "%")
headline("non-outlier error, per-tensor FP8 / MXFP8", err_pt / err_mx, "x")
# sphinx_gallery_end_ignore
