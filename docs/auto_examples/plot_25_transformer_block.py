"""
A transformer block trained with cuDNN attention
================================================

The attention operator of the custom-op page (``torch.ops.cudnn_guide.sdpa``: a cuDNN forward
graph that saves its softmax statistics, and a cuDNN ``sdpa_backward`` graph as its autograd
formula) inside a pre-norm transformer block: RMSNorm, attention, RMSNorm, a SwiGLU MLP, two
residual adds. The norms, projections and MLP stay PyTorch: the page measures what swapping
the attention does to a whole training step.

What you will learn:

* how the op drops into an ``nn.Module`` and trains under ``torch.compile(fullgraph=True)``;
* how to check a whole block, output and every weight gradient, against an fp32 reference;
* tokens per second for a training step (forward, backward, AdamW), like for like:
  eager against eager PyTorch, compiled against ``torch.compile``, with intervals,
  verdicts, host time per step, and the peak memory of each;
* frontend 1.32's ``cudnn.torch`` provider, which serves PyTorch's own cuDNN SDPA backend from
  the frontend's Python API, in the same block.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
print(env.stamp())

# %%
# The block
# ---------
# ``attend`` is the only thing that differs between the variants below: the cuDNN op, or
# PyTorch's ``scaled_dot_product_attention`` (with whichever backend PyTorch picks).
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from cudnn_guide.graphs import torch_ops

B, S, H, D = 8, 2048, 16, 128
DIM, HIDDEN = H * D, 5632


def cudnn_attention(q, k, v):
    return torch_ops.attention(q, k, v, causal=True)


def torch_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Block(nn.Module):
    def __init__(self, attend):
        super().__init__()
        self.attend = attend
        self.norm1, self.norm2 = nn.RMSNorm(DIM), nn.RMSNorm(DIM)
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.gate_up, self.down = nn.Linear(DIM, 2 * HIDDEN, bias=False), nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, H, D).permute(2, 0, 3, 1, 4).contiguous()
        x = x + self.out(self.attend(q, k, v).transpose(1, 2).reshape(b, s, DIM))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


torch.manual_seed(0)
template = Block(torch_attention).cuda().to(torch.bfloat16)
gen = torch.Generator(device="cuda").manual_seed(1)
x = torch.randn(B, S, DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
dy = torch.randn(B, S, DIM, device="cuda", dtype=torch.bfloat16, generator=gen)


def variant(attend):
    """A copy of the same initial block with ``attend`` as its attention."""
    block = copy.deepcopy(template)
    block.attend = attend
    return block


# %%
# Check forward and every weight gradient
# ---------------------------------------
# The reference is the same block in float32 with TF32 off. Rounding to bf16 compounds through
# two norms, five projections and attention, so the gradients get twice the bf16 tolerance;
# PyTorch's own bf16 block must pass the same check, which shows the bound is fair.
from cudnn_guide import check

reference = copy.deepcopy(template).float()
with check.full_precision():
    ref_y = reference(x.float())
    ref_y.backward(dy.float())
ref_grads = {n: p.grad for n, p in reference.named_parameters()}
GRAD_TOL = 2 * check.tolerance(torch.bfloat16)

checks = []


def check_block(block, label):
    for p in block.parameters():
        p.grad = None
    y = block(x)
    y.backward(dy)
    checks.append(check.check(y, ref_y, name=f"{label}: output"))
    worst = max((check.check(p.grad, ref_grads[n.removeprefix("_orig_mod.")], name=f"{label}: d{n.removeprefix('_orig_mod.')}", tol=GRAD_TOL)
                 for n, p in block.named_parameters()), key=lambda r: r.rel_error)
    checks.append(worst)
    print(checks[-2])
    print(worst, f"(the worst of {len(ref_grads)} weight gradients)")


eager_cudnn, eager_torch = variant(cudnn_attention), variant(torch_attention)
check_block(eager_cudnn, "block with the cuDNN op")
check_block(eager_torch, "PyTorch block (SDPA)")

# %%
# Which kernel does PyTorch's default SDPA run here? Its output is compared bit for bit with
# each backend forced in turn (forward kernels are deterministic):
from torch.nn.attention import SDPBackend, sdpa_kernel

q_, k_, v_ = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
with torch.no_grad():
    default_out = F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)
    picked = []
    for b in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        with sdpa_kernel([b]):
            if torch.equal(default_out, F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)):
                picked.append(b.name)
print(f"PyTorch's default SDPA matches, bit for bit: {', '.join(picked) or 'none of the forced backends'}")
del q_, k_, v_, default_out

# %%
# The same blocks compiled. The cuDNN op is a ``torch.library.custom_op`` with a fake
# implementation, so ``fullgraph=True`` holds: any graph break would be an error.
compiled_cudnn = torch.compile(variant(cudnn_attention), fullgraph=True)
compiled_torch = torch.compile(variant(torch_attention), fullgraph=True)
check_block(compiled_cudnn, "block with the cuDNN op, compiled")
check_block(compiled_torch, "PyTorch block, compiled")

# %%
# A training step, timed
# ----------------------
# One step is forward, backward of ``dy`` and a fused AdamW update (learning rate 1e-5, so the
# weights barely move across the thousands of timed steps). Each variant has its own copy of
# the weights and its own optimizer; the contenders run in interleaved rounds.
from cudnn_guide.measure import compare


def training_step(block):
    opt = torch.optim.AdamW(block.parameters(), lr=1e-5, fused=True)

    def step():
        block(x).backward(dy)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


contenders = {"cuDNN op, compiled": training_step(compiled_cudnn),
              "cuDNN op, eager": training_step(eager_cudnn),
              "PyTorch, compiled (default mode)": training_step(compiled_torch),
              "PyTorch eager": training_step(eager_torch)}
CAND = "cuDNN op, compiled"
tokens = B * S
linear_flops = 2 * tokens * DIM * (3 * DIM + DIM + 2 * HIDDEN) + 2 * tokens * HIDDEN * DIM
attention_flops = 4 * B * H * S * S * D / 2  # causal
step_flops = 3 * linear_flops + 3.5 * attention_flops  # backward: 2× the linears, 2.5× attention
result = compare.compare(contenders, candidate=CAND, l2="cold", rounds=9, flops=step_flops, tag="training step")
print(result)

# %%
# Peak memory of one step, above what the weights, optimizer state and inputs already hold
# (``torch.cuda.max_memory_allocated``, an exact count, not a sample).
peak_mib = {}
for name, step in contenders.items():
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak_mib[name] = (torch.cuda.max_memory_allocated() - base) / 2 ** 20

import pandas as pd

from cudnn_guide.report import html_table


def tokens_per_s(est):
    return {"value": tokens / (est["value"] * 1e-6), "low": tokens / (est["high"] * 1e-6),
            "high": tokens / (est["low"] * 1e-6)}


rows = []
for name in result.measurements:
    t = tokens_per_s(result.estimate(name))
    rows.append({"training step": name, "ms": result.estimate(name)["value"] / 1e3,
                 "tokens/s": t["value"],
                 "in-run interval": f"{t['low']:,.0f}–{t['high']:,.0f}",
                 "TFLOP/s": result.estimate(name, "TFLOP/s")["value"], "peak MiB": peak_mib[name]})
html_table(pd.DataFrame(rows).sort_values("ms"), {"ms": "{:.2f}", "tokens/s": "{:,.0f}", "TFLOP/s": "{:.0f}",
                                                  "peak MiB": "{:.0f}"})

# %%
# The ``cudnn.torch`` provider
# ----------------------------
# Frontend 1.32 can serve PyTorch's *own* cuDNN SDPA backend from its Python API:
# ``cudnn.torch.install_sdpa_overrides()`` replaces the CUDA kernels of
# ``aten::_scaled_dot_product_cudnn_attention`` and its backward, and returns a handle whose
# ``remove()`` undoes it. The model code does not change: it selects PyTorch's cuDNN backend.
# It is timed against this guide's op in the same (eager) block, and PyTorch's flash
# backend (FlashAttention-2).
import warnings

import cudnn.torch

from cudnn_guide import CheckFailedError


from cudnn_guide.measure import baselines


def backend(b):
    return baselines.forced_sdpa(b, is_causal=True)  # F.sdpa under sdpa_kernel([b]): a refusal raises


provider_block, flash_block = variant(backend(SDPBackend.CUDNN_ATTENTION)), variant(backend(SDPBackend.FLASH_ATTENTION))
provider_cmp, provider_error, served = None, "", 0
with warnings.catch_warnings():  # PyTorch warns that a kernel is overridden: that is what the provider does
    warnings.filterwarnings("ignore", message="Warning only once for all operators")
    overrides = cudnn.torch.install_sdpa_overrides()
try:
    served_before = cudnn.torch.calls["fwd"]
    check_block(provider_block, "PyTorch block, cuDNN backend via cudnn.torch")
    served = cudnn.torch.calls["fwd"] - served_before
    print(f"forward calls the provider served on the Python API: {served}")
    check_block(flash_block, "PyTorch block, flash backend")
    provider_cmp = compare.compare(
        {"cudnn.torch provider (eager)": training_step(provider_block), "cuDNN op, eager": training_step(eager_cudnn),
         "PyTorch eager, flash backend": training_step(flash_block)},
        candidate="cudnn.torch provider (eager)", l2="cold", rounds=7, flops=step_flops, tag="provider")
except CheckFailedError:  # a wrong result stops the page
    raise
except Exception as exc:  # the provider cannot serve this torch: shown with its error, not hidden
    provider_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    print("cudnn.torch provider unavailable here:", provider_error)
finally:
    overrides.remove()
if provider_cmp:
    print(provider_cmp)

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison
plot_comparison(result, per=tokens_per_s, xlabel="tokens per second, training step",
            title=f"pre-norm block, {B}×{S} tokens, {H} heads × {D}, MLP {HIDDEN}")
plt.show()

# %%
# Takeaways
# ---------
# Like for like: the eager block with the cuDNN op against eager PyTorch, and the
# compiled one against ``torch.compile``; both pairs were timed in the same interleaved
# rounds above, so the eager pair's ratio is taken per round from those rounds. Beside
# each GPU verdict, the host time to enqueue one step: where it exceeds the GPU time, a
# loop of steps is host-bound. Computed from the data when the page is recorded.
import dataclasses
import statistics

from cudnn_guide.measure.verdicts import bootstrap_median_ci, judge
from cudnn_guide.report.prose import Prose

EAGER, COMPILED = "cuDNN op, eager", "PyTorch, compiled (default mode)"
eager_ratios = [b / c for b, c in zip(result.round_medians_ms["PyTorch eager"],
                                      result.round_medians_ms[EAGER])]
e_lo, e_hi = bootstrap_median_ci(eager_ratios)
eager_cmp = dataclasses.replace(  # the same rounds, the eager cuDNN block as candidate
    result, candidate=EAGER, versus={"PyTorch eager": {
        "value": statistics.median(eager_ratios), "low": e_lo, "high": e_hi,
        "verdict": judge(e_lo, e_hi, result.tie_band)}})


def host_note(cmp, name):
    host_ms, gpu_us = cmp.measurements[name].host_median_ms, cmp.estimate(name)["value"]
    if host_ms is None:
        return f"* {name}: host time per step not measured; GPU {gpu_us:,.0f} µs."
    bound = ("host-bound" if host_ms * 1e3 > gpu_us
             else "GPU-bound (host time fits under it)")
    return (f"* {name}: host {host_ms * 1e3:,.0f} µs to enqueue one step, GPU "
            f"{gpu_us:,.0f} µs: a loop of steps is {bound}.")


cand = tokens_per_s(result.estimate(CAND))
sentences = [
    "Eager against eager: the block with the cuDNN op is "
    f"{eager_cmp.describe('PyTorch eager')}.",
    "Compiled against compiled: the block with the cuDNN op is "
    f"{result.describe(COMPILED)}.",
    f"The compiled block with the cuDNN op trains at {cand['value']:,.0f} tokens/s "
    f"(in-run interval {cand['low']:,.0f}–{cand['high']:,.0f}); torch.compile's own "
    "share, the same op eager against compiled: the compiled block is "
    f"{result.describe(EAGER)}.",
    "Host time per step, beside the GPU time of the comparison above:",
    *(host_note(result, name) for name in result.measurements),
    f"Peak memory of a step: {peak_mib[CAND]:.0f} MiB with the cuDNN op compiled, "
    f"{peak_mib[EAGER]:.0f} MiB eager; {peak_mib['PyTorch eager']:.0f} MiB eager "
    f"PyTorch, {peak_mib[COMPILED]:.0f} MiB compiled PyTorch."]
if "CUDNN_ATTENTION" in picked:
    sentences.append(
        "PyTorch's default SDPA runs cuDNN's attention kernel on this GPU: the "
        "PyTorch baselines already use cuDNN attention, and the comparison measures "
        "how the op is called, not another kernel.")
else:
    sentences.append("PyTorch's default SDPA runs the "
                     f"{', '.join(picked) or 'unidentified'} kernel on this GPU.")
if provider_cmp:
    sentences += [
        f"The cudnn.torch provider served {served} forward call(s) in the checks; "
        f"against this guide's op it is {provider_cmp.describe(EAGER)}; against "
        "PyTorch's flash backend (FlashAttention-2) it is "
        f"{provider_cmp.describe('PyTorch eager, flash backend')}.",
        *(host_note(provider_cmp, name) for name in provider_cmp.measurements)]
else:
    sentences.append(f"The cudnn.torch provider could not run here: {provider_error}")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
comparison("training step: eager cuDNN op's speed-up over eager PyTorch", eager_cmp,
           "PyTorch eager")
comparison("training step: speed-up over torch.compile", result, "PyTorch, compiled (default mode)")
headline("training tokens/s, cuDNN op compiled", unit="tokens/s", **tokens_per_s(result.estimate(CAND)))
if provider_cmp:
    comparison("cudnn.torch provider: speed-up over this guide's op", provider_cmp, "cuDNN op, eager")
# sphinx_gallery_end_ignore
Prose(*sentences)
