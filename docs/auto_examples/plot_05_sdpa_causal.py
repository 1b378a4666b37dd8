"""
Causal scaled dot-product attention
===================================

cuDNN's fused attention (flash-attention style: the S×S score matrix never touches memory) as a
frontend graph, with causal masking written the current way, checked against PyTorch, and
measured across sequence lengths against each of PyTorch's own SDPA backends.

What you will learn:

* the current causal-mask API: ``diagonal_alignment=TOP_LEFT`` with
  ``diagonal_band_right_bound=0`` (``use_causal_mask`` is deprecated), and ``generate_stats``
  (``False`` for inference; it replaces the deprecated ``is_inference``);
* how to check attention against an fp32 reference;
* how to force PyTorch's SDPA backends one at a time (flash, memory-efficient, cuDNN) so each
  baseline is what it says it is;
* how the throughput develops from 1k to 16k tokens at head dims 64 and 128.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# One graph, checked
# ------------------
# 16 heads of dimension 128, 4 sequences of 4096 tokens, bf16, causal. Inputs are B×H×S×D.
import torch

from cudnn_guide import check, recipes

problem = recipes.SdpaProblem(batch=4, heads=16, seq=4096, head_dim=128, causal=True)
inputs = problem.make_inputs(seed=0)
fused = recipes.sdpa_graph(problem, inputs)
print(problem)
print(fused.built.report)
check.poison(inputs["o"])
fused.built.execute(fused.pack(**inputs))
reference = check.reference(problem.torch_forward, inputs["q"], inputs["k"], inputs["v"])
sdpa_check = check.check(inputs["o"], reference, name="cuDNN SDPA (causal)")
print(sdpa_check)

# %%
# A causal mask that is off by one would still pass a loose check on random data, so we also
# check the mask itself: with ``v`` one-hot along the sequence, row *i* of the output can only
# mix values of keys ``j ≤ i``; any weight on a future key shows up as output mass there.
small = recipes.SdpaProblem(batch=1, heads=1, seq=128, head_dim=128, causal=True)
s_in = small.make_inputs(seed=1)
s_in["v"] = torch.eye(128, device="cuda", dtype=torch.bfloat16).reshape(1, 1, 128, 128).contiguous()
small_graph = recipes.sdpa_graph(small, s_in)
check.poison(s_in["o"])
small_graph.built.execute(small_graph.pack(**s_in))
probs = s_in["o"][0, 0].float()  # row i = attention weights of query i over keys
future_mass = torch.triu(probs, diagonal=1).abs().max().item()
print(f"largest weight on a future key: {future_mass:.2e}; rows sum to 1 within "
      f"{(probs.sum(-1) - 1).abs().max().item():.2e}")
assert future_mass == 0.0

# %%
# The baselines, each forced and checked
# --------------------------------------
# ``torch.nn.attention.sdpa_kernel`` restricts PyTorch to one backend. A backend that cannot run
# this problem raises, and is shown as unavailable rather than silently replaced by another.
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from cudnn_guide import baselines

BACKENDS = baselines.sdpa_backends()


def torch_sdpa(backend, p, q, k, v):
    def run():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=p.causal, scale=p.scale)
    return run


baseline_checks = {}
for name, backend in BACKENDS.items():
    try:
        out = torch_sdpa(backend, problem, inputs["q"], inputs["k"], inputs["v"])()
        baseline_checks[name] = check.check(out, reference, name=name)
        print(baseline_checks[name])
    except RuntimeError as exc:
        print(f"{name}: unavailable here ({str(exc).splitlines()[0][:120]})")

# %%
# Sweep sequence length and head dimension
# ----------------------------------------
# 16,384 tokens per batch (B = 16384 / S) and a model width of 2048 (H = 2048 / D), so every
# point does work on the same number of tokens; the causal FLOP count is half of ``4·B·H·S²·D``.
from cudnn_guide import bench, sweep

seqs = [1024, 2048, 4096, 8192, 16384]
dims = [64, 128]
built = {}


def problem_at(s, d):
    return recipes.SdpaProblem(batch=16384 // s, heads=2048 // d, seq=s, head_dim=d, causal=True)


def cudnn_at(d):
    def factory(s):
        p = problem_at(s, d)
        ins = p.make_inputs(seed=s + d)
        f = recipes.sdpa_graph(p, ins)
        built[(s, d)] = (p, ins)
        return f.built.bind(f.pack(**ins))
    return factory


def torch_at(backend, d):
    def factory(s):
        p, ins = built[(s, d)]
        fn = torch_sdpa(backend, p, ins["q"], ins["k"], ins["v"])
        try:
            fn()
        except RuntimeError:
            return None  # this backend cannot run this shape: shown as "—"
        return fn
    return factory


measurements = []
for d in dims:
    impls = {f"cuDNN graph, d={d}": cudnn_at(d)}
    impls.update({f"{name}, d={d}": torch_at(backend, d) for name, backend in BACKENDS.items()})
    res = sweep.sweep(seqs, impls, x="seq_len", l2="cold", flops=lambda s, d=d: problem_at(s, d).flops, budget_ms=150)
    measurements += res.measurements
    built.clear()
    torch.cuda.empty_cache()
result = sweep.SweepResult("seq_len", measurements)

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_lines

ceil = bench.measure_ceilings()
fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained", sharey=True)
for ax, d in zip(axes, dims):
    plot_lines([m for m in measurements if m.params["impl"].endswith(f"d={d}")], x="seq_len", metric="tflops",
               ax=ax, logx=True, title=f"causal attention, head dim {d}", ceiling=ceil.bf16_tflops,
               ceiling_label="bf16 matmul ceiling")
    ax.legend(fontsize=8)
plt.show()

# %%
result.table("tflops", title="causal SDPA forward, TFLOP/s")

# %%
# Takeaways
# ---------
for d in dims:
    ours = [m for m in measurements if m.params["impl"] == f"cuDNN graph, d={d}"]
    best_ours = max(ours, key=lambda m: m.tflops)
    wins = 0
    for s in seqs:
        mine = result.get(f"cuDNN graph, d={d}", s)
        others = [result.get(f"{n}, d={d}", s) for n in BACKENDS]
        others = [o for o in others if o is not None]
        if others and mine.median_ms <= min(o.median_ms for o in others):
            wins += 1
    print(f"* d={d}: the cuDNN graph peaks at {best_ours.tflops:.0f} TFLOP/s (S={best_ours.params['seq_len']}, "
          f"{100 * best_ours.tflops / ceil.bf16_tflops:.0f}% of the bf16 matmul ceiling) and is fastest at "
          f"{wins} of {len(seqs)} sequence lengths.")
    for name in BACKENDS:
        pts = [(result.get(f"cuDNN graph, d={d}", s), result.get(f"{name}, d={d}", s)) for s in seqs]
        pts = [(a, b) for a, b in pts if b is not None]
        if pts:
            ratios = [b.median_ms / a.median_ms for a, b in pts]
            print(f"    {name} takes {min(ratios):.2f}× to {max(ratios):.2f}× the cuDNN graph's time "
                  f"({len(pts)} sequence lengths)")
        else:
            print(f"    {name}: unavailable at every size")

# sphinx_gallery_start_ignore
from cudnn_guide import records

rec = records.Record("plot_05_sdpa_causal", title="Causal scaled dot-product attention", environment=env)
rec.add_check(sdpa_check)
for c in baseline_checks.values():
    rec.add_check(c)
rec.add(measurements)
for d in dims:
    best = max((m for m in measurements if m.params["impl"] == f"cuDNN graph, d={d}"), key=lambda m: m.tflops)
    rec.headline(f"cuDNN SDPA peak TFLOP/s, d={d}", best.tflops, "TFLOP/s", seq_len=best.params["seq_len"])
rec.extra["future_mass"] = future_mass
_record_path = rec.write()
# sphinx_gallery_end_ignore
