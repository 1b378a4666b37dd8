"""
Matmul with a fused epilogue: scale → bias → GELU → AMAX
========================================================

A transformer MLP's first projection, followed by what FP8 training needs: the output's absolute
maximum (AMAX), to choose the next scaling factor. In eager PyTorch that is six kernels —
matmul, multiply, add, GELU, absolute value and a max reduction (plus a one-element cast) — each
reading, and all but the last writing, the whole activation. As one
cuDNN graph the scale, bias and GELU run in the matmul's epilogue and the AMAX is reduced on the
way out.

What you will learn:

* how to declare a matmul with an epilogue (``matmul``, ``mul``, ``add``, ``gelu``) in a
  ``cudnn.pygraph``, build it and ``execute`` it;
* how to pass a **scalar by value** (``alpha``: a host number baked into the launch, no device
  buffer, no extra kernel to fill one);
* how to add a **reduction output** (AMAX) to a fused graph and check it;
* when epilogue fusion pays: a sweep over the reduction dimension K, from epilogue-dominated
  (small K) to GEMM-dominated (large K), against the PyTorch chain and against the bare matmul.

Problem: batch 16, 512×1024 by 1024×512, bf16.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

env = environment.collect()
env

# %%
# Declare and build the graph
# ---------------------------
# ``matmul → mul(alpha) → add(bias) → gelu`` with ``reduction(AMAX)`` on the GELU output; ``y``
# and ``amax`` are both graph outputs. ``alpha`` is a **pass-by-value** tensor
# (``is_pass_by_value=True``): the variant pack binds it to a host (CPU) tensor whose value is
# copied into the launch. ``g.build(modes)`` runs the five build steps of the previous page in
# one call.
import cudnn
import torch

from cudnn_guide import graphs
from cudnn_guide.graphs import matmul

handle = graphs.handle_for_current_device()
FLOAT = cudnn.data_type.FLOAT


def matmul_epilogue(a, b, bias, y, amax, alpha):
    """Declare and build y = gelu(alpha·(a@b) + bias), amax = max|y|; return the graph and its variant pack."""
    g = cudnn.pygraph(handle=handle, name="matmul_scale_bias_gelu_amax", io_data_type=cudnn.data_type.BFLOAT16,
                      intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    A, B, BIAS = g.tensor_like(a, name="a"), g.tensor_like(b, name="b"), g.tensor_like(bias, name="bias")
    ALPHA = g.tensor(name="alpha", dim=[1, 1, 1], stride=[1, 1, 1], is_pass_by_value=True, data_type=FLOAT)
    mm = g.matmul(A, B, compute_data_type=FLOAT, name="matmul")
    scaled = g.mul(a=mm, b=ALPHA, name="scale")
    biased = g.add(a=scaled, b=BIAS, name="bias")
    Y = g.gelu(input=biased, name="gelu")
    Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16).set_dim(list(y.shape)).set_stride(list(y.stride()))
    AMAX = g.reduction(input=Y, mode=cudnn.reduction_mode.AMAX, compute_data_type=FLOAT, name="amax")
    AMAX.set_output(True).set_data_type(FLOAT).set_dim([1, 1, 1]).set_stride([1, 1, 1])
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, {A: a, B: b, BIAS: bias, ALPHA: torch.full((1, 1, 1), alpha), Y: y, AMAX: amax}


problem = matmul.MatmulProblem(batch=16, m=512, k=1024, n=512, alpha=0.5)
inputs = problem.make_inputs(seed=0)
g, pack = matmul_epilogue(**inputs, alpha=problem.alpha)
built = graphs.adopt(g, handle, name="matmul epilogue")
print(problem)
print(built.report)

# %%
# Check both outputs
# ------------------
# Poison ``y`` and ``amax``, run once, compare with the chain computed in fp32.
from cudnn_guide import check

check.poison(inputs["y"], inputs["amax"])
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
g.execute(pack, workspace, handle=handle)
ref_y, ref_amax = check.reference(problem.torch_forward, inputs["a"], inputs["b"], inputs["bias"])
y_check = check.check(inputs["y"], ref_y, name="y = gelu(alpha·(a@b) + bias)")
amax_check = check.check(inputs["amax"], ref_amax, name="amax = max|y|", tol=1e-2)
print(y_check)
print(amax_check)
print(f"amax: cuDNN {inputs['amax'].item():.5f}, reference {ref_amax.item():.5f}")

# %%
# The same chain in PyTorch, eager and compiled, must agree too. ``torch.compile`` runs in both
# modes an engineer would ship: max-autotune benchmarks Triton and cuBLAS candidates while it
# compiles, so what it picks can change from one cold compile to the next (the methodology page
# shows its range over every recording); the default mode does not autotune. The best baseline is
# the one the verdict below is judged against.
from cudnn_guide.measure import baselines

eager_y, eager_amax = problem.torch_forward(inputs["a"], inputs["b"], inputs["bias"])
print(check.check(eager_y, ref_y, name="PyTorch eager chain"))
compiled = baselines.compile_quietly(problem.torch_forward)  # mode max-autotune-no-cudagraphs
comp_y, comp_amax = compiled(inputs["a"], inputs["b"], inputs["bias"])
print(check.check(comp_y, ref_y, name="torch.compile (max-autotune-no-cudagraphs) chain"))
compiled_default = baselines.compile_quietly(problem.torch_forward, mode="default")
print(check.check(compiled_default(inputs["a"], inputs["b"], inputs["bias"])[0], ref_y,
                  name="torch.compile (default) chain"))

# %%
# Benchmark at the base size
# ---------------------------
# Cold L2 for everyone, in interleaved rounds: each round times every contender in a shuffled
# order, and the verdict rests on the per-round ratio to the cuDNN graph with its 95% interval
# (:mod:`cudnn_guide.measure.compare`). The bare ``torch.matmul`` is not a competitor (it skips the
# epilogue) but a floor for any implementation that calls cuBLAS and then does the rest.
from cudnn_guide.measure import bench, compare
from cudnn_guide.report import ComparisonTable

a, b, bias = inputs["a"], inputs["b"], inputs["bias"]
mm_out = torch.empty_like(inputs["y"])
COMPILED = "torch.compile (max-autotune-no-cudagraphs) chain"
contenders = {
    "cuDNN graph (fused)": built.bind(pack),
    "PyTorch eager chain": lambda: problem.torch_forward(a, b, bias),
    COMPILED: lambda: compiled(a, b, bias),
    "torch.compile (default) chain": lambda: compiled_default(a, b, bias),
}
base_cmp = compare.compare(contenders, candidate="cuDNN graph (fused)", l2="cold", rounds=15, flops=problem.flops,
                           bytes=problem.bytes, params={"size": str(problem)})
bare = bench.benchmark(lambda: torch.matmul(a, b, out=mm_out), label="bare matmul (no epilogue)", l2="cold",
                       flops=problem.flops, params={"impl": "bare matmul (no epilogue)", "size": str(problem)})
base = [*base_cmp.measurements.values(), bare]
print(base_cmp)
ComparisonTable(base, metric="median_us", title="matmul + scale + bias + GELU + AMAX")

# %%
# Sweep the reduction dimension
# -----------------------------
# With M = N = 512 fixed, the epilogue's work (∝ M·N) stays constant while the GEMM's (∝ M·N·K)
# grows with K. Every fused graph is checked before it is timed. The sweep's ``torch.compile``
# uses the default mode, compiled for each K (``dynamic=False``): max-autotune at eight shapes
# would cost minutes of autotuning; the base size above has both.
from cudnn_guide.measure import sweep

ks = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
cases = {}


def case(k):
    if k not in cases:
        p = matmul.MatmulProblem(batch=16, m=512, k=k, n=512, alpha=0.5)
        ins = p.make_inputs(seed=k)
        gk, pk = matmul_epilogue(**ins, alpha=p.alpha)
        f = graphs.adopt(gk, handle, name=f"matmul epilogue K={k}")
        check.poison(ins["y"])
        f.execute(pk)
        check.check(ins["y"], check.reference(p.torch_forward, ins["a"], ins["b"], ins["bias"])[0], name=f"K={k}")
        comp = baselines.compile_quietly(p.torch_forward, mode="default", dynamic=False)
        check.check(comp(ins["a"], ins["b"], ins["bias"])[0],
                    check.reference(p.torch_forward, ins["a"], ins["b"], ins["bias"])[0], name=f"compiled K={k}")
        cases[k] = (p, ins, f, pk, torch.empty_like(ins["y"]), comp)
    return cases[k]


impls = {
    "cuDNN graph (fused)": lambda k: case(k)[2].bind(case(k)[3]),
    "PyTorch eager chain": lambda k: (lambda p=case(k)[0], i=case(k)[1]: p.torch_forward(i["a"], i["b"], i["bias"])),
    "torch.compile (default) chain": lambda k: (lambda c=case(k)[5], i=case(k)[1]: c(i["a"], i["b"], i["bias"])),
    "bare matmul (no epilogue)": lambda k: (lambda i=case(k)[1], o=case(k)[4]: torch.matmul(i["a"], i["b"], out=o)),
}
result = sweep.sweep(ks, impls, x="K", l2="cold",
                     flops=lambda k: 2 * 16 * 512 * 512 * k, budget_ms=200)

# %%
# Plot
# ----
import matplotlib.pyplot as plt

BARE = "bare matmul (no epilogue)"
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
result.plot("median_us", ax=ax1, logx=True, logy=True, title="time per call (cold L2)")
result.plot_relative(BARE, ax=ax2, title="what the epilogue costs")
over_mm = result.relative(BARE)  # implementation → {K: its time / the bare matmul's}
plt.show()

# %%
result.table("median_us", title="time per call, µs (M = N = 512, batch 16)")

# %%
# Takeaways
# ---------
f_est = base_cmp.estimate("cuDNN graph (fused)", "µs")
bare_ms = bare.median_ms
print(f"* At the base size the fused graph takes {f_est['value']:.1f} µs (95% CI {f_est['low']:.1f}–{f_est['high']:.1f}): "
      + "; ".join(f"{base_cmp.describe(n)}" for n in base_cmp.versus) + ".")
fused_ms, chain_ms = (base_cmp.measurements[n].median_ms for n in ("cuDNN graph (fused)", "PyTorch eager chain"))
print(f"* Its epilogue costs {100 * (fused_ms / bare_ms - 1):+.0f}% over the bare matmul (timed just after the "
      f"rounds); the eager chain's costs {100 * (chain_ms / bare_ms - 1):+.0f}%.")
chain, comp, fused = (over_mm[n] for n in ("PyTorch eager chain", "torch.compile (default) chain", "cuDNN graph (fused)"))
print(f"* Across the sweep the chain's epilogue overhead falls from {100 * (chain[ks[0]] - 1):.0f}% at K={ks[0]} "
      f"to {100 * (chain[ks[-1]] - 1):.0f}% at K={ks[-1]}; torch.compile's (default mode) from "
      f"{100 * (comp[ks[0]] - 1):.0f}% to {100 * (comp[ks[-1]] - 1):.0f}%.")
print(f"* The fused graph runs at {fused[ks[0]]:.2f}× the bare matmul's time at K={ks[0]} and "
      f"{fused[ks[-1]]:.2f}× at K={ks[-1]}.")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
headline("fused median (base size)", unit="µs", **f_est)
comparison("speed-up over best baseline", base_cmp)
comparison("speed-up over torch.compile (max-autotune-no-cudagraphs)", base_cmp, COMPILED)
# sphinx_gallery_end_ignore
