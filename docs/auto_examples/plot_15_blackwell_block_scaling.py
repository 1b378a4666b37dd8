"""
MXFP8 and block-scale quantization (Blackwell)
==============================================

Per-tensor FP8 scaling (see the FP8 page) gives a whole tensor one scale, so one outlier
shrinks the resolution left for every other value. *Block scaling* gives each run of 32
consecutive values its own scale. The MXFP8 format stores the values in FP8 E4M3 and each
block's scale as an 8-bit power of two (E8M0): ``x ≈ x8 · 2^e``. Blackwell (SM 10.0) tensor
cores read block-scaled operands directly, so a matmul or attention can consume MXFP8 without
dequantizing first; cuDNN exposes this through ``block_scale_quantize``,
``block_scale_dequantize``, block-scaled ``matmul`` and ``sdpa_mxfp8``.

Hopper and older GPUs have no block-scaled tensor-core instructions, and cuDNN has no engines
for these operations there. On such a GPU this page is recorded as skipped: it shows no
numbers rather than numbers from an emulation.

What you will learn:

* how MXFP8 represents a tensor: E4M3 values, one E8M0 scale per block of 32 along a chosen
  axis;
* how ``block_scale_quantize`` is declared (``block_size=32``, the axis), what it outputs (the
  FP8 values and the scales), and how to check it by dequantizing in PyTorch;
* its quantization error next to per-tensor FP8's on the same data, and its speed against
  the copy bandwidth (it reads bf16 and writes about half as many bytes).

The measurement cells below run only on a GPU with SM 10.0 or newer. They have not yet been
recorded on one: the first Blackwell recording is also their first check.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((10, 0), "MXFP8 block scaling (Blackwell tensor cores)")
env = environment.collect()
env

# %%
# Quantize a bf16 activation to MXFP8
# -----------------------------------
# 16,384 × 4,096 bf16 values with a few large outliers, quantized along the last axis in
# blocks of 32: the output is 16,384 × 4,096 E4M3 values and 16,384 × 128 E8M0 scales.
import cudnn
import torch

from cudnn_guide import check, graphs
from cudnn_guide.graphs import fp8, tensors

M, K, BLOCK = 16384, 4096, 32
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
x[::997, ::31] *= 50  # outliers: one per ~30k values, as activations have
y8 = torch.empty(M, K, device="cuda", dtype=torch.float8_e4m3fn)
scales = torch.empty(M, K // BLOCK, device="cuda", dtype=torch.uint8)  # E8M0 bytes

graph = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=graphs.handle_for_current_device())
X = tensors.graph_tensor(graph, x, "x")
Y, S = graph.block_scale_quantize(input=X, block_size=BLOCK, axis=1, transpose=False, name="mxfp8_quantize")
Y.set_output(True).set_data_type(cudnn.data_type.FP8_E4M3).set_dim([M, K]).set_stride([K, 1])
S.set_output(True).set_data_type(cudnn.data_type.FP8_E8M0).set_dim([M, K // BLOCK]).set_stride([K // BLOCK, 1])
built = graphs.build(graph, name="mxfp8_quantize")
print(built.report)
pack = {X: x, Y: y8, S: scales}
built.execute(pack)

# %%
# Check by dequantizing
# ---------------------
# An E8M0 byte ``e`` is the scale 2^(e − 127). Dequantized values must match the input to FP8
# E4M3 precision (3 mantissa bits: 2⁻⁴ relative rounding per value).
block_scale = torch.exp2(scales.float() - 127.0).repeat_interleave(BLOCK, dim=1)
dequant = y8.float() * block_scale
mx_check = check.check(dequant, x.float(), name="MXFP8 round trip", tol=0.08)
x8, _, descale = fp8.quantize(x, rank=2)
per_tensor = check.compare(fp8.dequantize(x8, descale), x.float(), name="per-tensor FP8 round trip", tol=0.08)
print(mx_check)
print(per_tensor)
small = x.float().abs() < 1
err_mx = ((dequant - x.float())[small].norm() / x.float()[small].norm()).item()
err_pt = ((fp8.dequantize(x8, descale) - x.float())[small].norm() / x.float()[small].norm()).item()
print(f"relative error on the non-outlier values: MXFP8 {err_mx:.1e}, per-tensor FP8 {err_pt:.1e}")

# %%
# Speed
# -----
# Bytes: read 2 per value, write 1 per value plus one scale byte per 32.
from cudnn_guide.measure import bench
from cudnn_guide.measure.ceilings import measure_ceilings

ceil = measure_ceilings()
quant = bench.benchmark(built.bind(pack), label="cuDNN MXFP8 quantize", l2="cold",
                        bytes=M * K * 3 + M * K // BLOCK, params={"impl": "cuDNN MXFP8 quantize"})
print(quant, f"  {100 * quant.gbps / ceil.copy_gbps:.0f}% of copy bandwidth")

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
# Takeaways
# ---------
print(f"* With outliers present, MXFP8 keeps the ordinary values' relative error at {err_mx:.1e}; "
      f"per-tensor FP8 lets it grow to {err_pt:.1e} ({err_pt / err_mx:.0f}×).")
print(f"* Quantizing runs at {quant.gbps:.0f} GB/s, {100 * quant.gbps / ceil.copy_gbps:.0f}% of the copy bandwidth.")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import headline
headline("MXFP8 quantize, % of copy bandwidth", 100 * quant.gbps / ceil.copy_gbps, "%")
headline("non-outlier error, per-tensor FP8 / MXFP8", err_pt / err_mx, "x")
# sphinx_gallery_end_ignore
