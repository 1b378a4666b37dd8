"""
Matmul with a fused epilogue: scale → bias → GELU → AMAX
========================================================

A transformer MLP's first projection, followed by what FP8 training needs: the output's
absolute maximum (AMAX), to choose the next scaling factor. In eager PyTorch that is
seven kernels (matmul, multiply, add, GELU, absolute value, a max reduction and a
one-element cast), the first six each passing over the whole activation. As one cuDNN
graph, cuDNN can run the scale, bias and GELU in the matmul's epilogue and reduce the
AMAX on the way out; the timings below say what that buys, and where not.

What you will learn:

* how to declare a matmul with an epilogue (``matmul``, ``mul``, ``add``, ``gelu``) in a
  ``cudnn.pygraph``, build it and ``execute`` it;
* how to pass a **scalar by value** (``alpha``: a host number baked into the launch, no
  device buffer, no extra kernel to fill one);
* how to add a **reduction output** (AMAX) to a fused graph and check it;
* when epilogue fusion pays, and where it loses: a sweep over the reduction dimension K,
  from epilogue-dominated (small K) to GEMM-dominated (large K), against the PyTorch
  chain, ``torch.compile`` and the bare matmul, with a verdict at every K.

Problem: batch 16, 512×1024 by 1024×512, bf16.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

env = environment.collect()
env

# %%
# The lesson: declare, build, run and check the graph
# ---------------------------------------------------
# ``matmul → mul(alpha) → add(bias) → gelu`` with ``reduction(AMAX)`` on the GELU
# output; ``y`` and ``amax`` are both graph outputs. ``alpha`` is a **pass-by-value**
# tensor (``is_pass_by_value=True``): the variant pack binds it to a host (CPU) tensor
# whose value is copied into the launch. The operands are row-major: ``a`` is
# batch×M×K, ``b`` batch×K×N, ``bias`` 1×1×N (broadcast over batch and rows).
import cudnn
import torch

batch, m, k, n = 16, 512, 1024, 512
bf16 = dict(device="cuda", dtype=torch.bfloat16)
a = torch.randn(batch, m, k, **bf16)
b = torch.randn(batch, k, n, **bf16) / k**0.5
bias = torch.randn(1, 1, n, **bf16)
y = torch.empty(batch, m, n, **bf16)
amax = torch.empty(1, 1, 1, device="cuda", dtype=torch.float32)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
FLOAT = cudnn.data_type.FLOAT


def matmul_epilogue(a, b, bias, y, amax, alpha):
    """Declare and build y = gelu(alpha·(a@b) + bias), amax = max|y|.

    Returns the graph and its variant pack."""
    g = cudnn.pygraph(
        handle=handle,
        name="matmul_scale_bias_gelu_amax",
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=FLOAT,
        compute_data_type=FLOAT,
    )
    A = g.tensor_like(a, name="a")
    B = g.tensor_like(b, name="b")
    BIAS = g.tensor_like(bias, name="bias")
    ALPHA = g.tensor(name="alpha", dim=[1] * 3, is_pass_by_value=True, data_type=FLOAT)
    mm = g.matmul(A, B, compute_data_type=FLOAT, name="matmul")
    scaled = g.mul(a=mm, b=ALPHA, name="scale")
    biased = g.add(a=scaled, b=BIAS, name="bias")
    Y = g.gelu(input=biased, name="gelu")
    Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    Y.set_dim(list(y.shape)).set_stride(list(y.stride()))
    AMAX = g.reduction(
        input=Y, mode=cudnn.reduction_mode.AMAX, compute_data_type=FLOAT, name="amax"
    )
    AMAX.set_output(True).set_data_type(FLOAT)
    AMAX.set_dim([1, 1, 1]).set_stride([1, 1, 1])
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    alpha_host = torch.full((1, 1, 1), alpha)  # a CPU tensor: passed by value
    return g, {A: a, B: b, BIAS: bias, ALPHA: alpha_host, Y: y, AMAX: amax}


g, pack = matmul_epilogue(a, b, bias, y, amax, alpha=0.5)
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute(pack, workspace, handle=handle)

# %%
# Check both outputs against the chain computed in float32 (TF32 off by default).
ref = torch.nn.functional.gelu(torch.matmul(a.float(), b.float()) * 0.5 + bias.float())
torch.testing.assert_close(y.float(), ref, atol=5e-2, rtol=2e-2)
torch.testing.assert_close(amax, ref.abs().amax().view(1, 1, 1), atol=0.0, rtol=1e-2)

# %%
# Measuring the fused graph against PyTorch
# -----------------------------------------
# The harness wraps the graph built above (:func:`~cudnn_guide.graphs.builder.adopt`:
# variant packs checked against the declaration, a launcher that follows torch's current
# stream) and checks both outputs again, NaN-poisoned first, before anything is timed.
from cudnn_guide import check, graphs
from cudnn_guide.graphs import matmul

problem = matmul.MatmulProblem(batch=batch, m=m, k=k, n=n, alpha=0.5)
built = graphs.adopt(g, handle, name="matmul epilogue")
print(problem)

check.poison(y, amax)
built.execute(pack)
ref_y, ref_amax = check.reference(problem.torch_forward, a, b, bias)
print(check.check(y, ref_y, name="y = gelu(alpha·(a@b) + bias)"))
print(check.check(amax, ref_amax, name="amax = max|y|", tol=1e-2))

# %%
# The same chain in PyTorch, eager and compiled, must agree too. ``torch.compile`` runs
# in both modes an engineer would ship: max-autotune benchmarks Triton and cuBLAS
# candidates while it compiles, so its pick can change from one cold compile to the next
# (:doc:`methodology page </methodology>`: its range over every recording); the default
# mode does not autotune. The headline verdict is against the fastest of the three.
# The contenders' names, and what the sweep below needs besides the lesson's graph, are
# in :mod:`cudnn_guide.studies.epilogue_fusion`.
from cudnn_guide.measure import baselines
from cudnn_guide.studies import epilogue_fusion
from cudnn_guide.studies.epilogue_fusion import BARE, CANDIDATE, EAGER
from cudnn_guide.studies.epilogue_fusion import COMPILED, DEFAULT  # torch.compile's

print(check.check(problem.torch_forward(a, b, bias)[0], ref_y, name=EAGER))
# compile_quietly's own mode, max-autotune-no-cudagraphs, then the default mode
compiled = baselines.compile_quietly(problem.torch_forward)
print(check.check(compiled(a, b, bias)[0], ref_y, name=COMPILED))
compiled_default = baselines.compile_quietly(problem.torch_forward, mode="default")
print(check.check(compiled_default(a, b, bias)[0], ref_y, name=DEFAULT))

# %%
# Measuring at the base size
# --------------------------
# Cold L2 for everyone, in interleaved rounds, each timing every contender in a
# shuffled order (``rounds`` is a cap: they stop once every verdict is settled; the last
# line says how many ran). The verdict rests on the per-round ratio to the cuDNN graph
# with its 95% interval (:mod:`cudnn_guide.measure.compare`). The bare ``torch.matmul``
# is a floor, not a competitor (it skips the epilogue). Each line: the cuDNN graph's
# speed-up (above 1: cuDNN is faster) in GPU time per call, then in wall-clock time per
# call of a back-to-back loop (``wall_clock=True``: host time included), with tie bands.
from cudnn_guide.measure import bench, compare
from cudnn_guide.report import ComparisonTable

mm_out = torch.empty_like(y)
contenders = {
    CANDIDATE: built.bind(pack),
    EAGER: lambda: problem.torch_forward(a, b, bias),
    COMPILED: lambda: compiled(a, b, bias),
    DEFAULT: lambda: compiled_default(a, b, bias),
}
base_cmp = compare.compare(
    contenders,
    candidate=CANDIDATE,
    l2="cold",
    rounds=15,
    flops=problem.flops,
    bytes=problem.bytes,
    params={"size": str(problem)},
    wall_clock=True,
)
bare = bench.benchmark(
    lambda: torch.matmul(a, b, out=mm_out),
    label=BARE,
    l2="cold",
    flops=problem.flops,
    params={"impl": BARE, "size": str(problem)},
)
base = [*base_cmp.measurements.values(), bare]
print(epilogue_fusion.gpu_and_loop_lines(base_cmp))
ComparisonTable(base, metric="median_us", title="matmul + scale + bias + GELU + AMAX")

# %%
# Measuring across the reduction dimension
# ----------------------------------------
# With M = N = 512 fixed, the epilogue's work (∝ M·N) stays constant while the GEMM's
# (∝ M·N·K) grows with K. Every fused graph (the lesson's ``matmul_epilogue`` at each K,
# in ``epilogue_fusion.KSweep``) is checked before it is timed. At each K the
# contenders run in interleaved rounds, as at the base size, so each K has its verdicts;
# then they race in back-to-back loops timed by the wall clock (host time included).
# ``wall_clock=True`` runs that race at every K: by default the harness runs it only
# where some contender's host time per call reaches
# :data:`~cudnn_guide.measure.compare.HOST_BOUND` of its GPU time, so a K where none
# does would get no loop verdict. The sweep's ``torch.compile`` uses the default
# mode, compiled for each K (``dynamic=False``): max-autotune at eight shapes would cost
# minutes of autotuning; the base size above has both.
from cudnn_guide.measure import sweep

ks = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
cases = epilogue_fusion.KSweep(matmul_epilogue, handle, batch=16, m=512, n=512)
impls = cases.factories()  # CANDIDATE, EAGER, DEFAULT, BARE: each a factory of K
result = sweep.sweep(
    ks,
    impls,
    x="K",
    l2="cold",
    flops=lambda kk: 2 * 16 * 512 * 512 * kk,
    candidate=CANDIDATE,
    rounds=7,
    round_budget_ms=20.0,
    wall_clock=True,
)

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_relative, plot_sweep

fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 8), layout="constrained")
plot_sweep(
    result, "median_us", ax=ax1, logx=True, logy=True, title="time per call (cold L2)"
)
plot_relative(result, BARE, ax=ax2, title="time over the bare matmul's")
plt.show()

# %%
from cudnn_guide.report import sweep_table

sweep_table(result, "median_us", title="time per call, µs (M = N = 512, batch 16)")

# %%
# The verdicts at every K: the cuDNN graph's speed-up over each contender (above 1:
# cuDNN is faster), in GPU time per call, then in the wall-clock time per call of the
# back-to-back loops, each with its own interval and tie band. The bare matmul skips the
# epilogue: it is a floor, not a competitor.
epilogue_fusion.verdict_table(result)

# %%
# Conclusions
# -----------
# Computed from the measurements and verdicts above when the page is recorded
# (``epilogue_fusion.conclusions``).
from cudnn_guide.report.prose import Prose

f_est = base_cmp.estimate(CANDIDATE, "µs")
real = [name for name in impls if name not in (CANDIDATE, BARE)]  # the PyTorch chains
sentences = epilogue_fusion.conclusions(base_cmp, bare, result, ks, real)

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

headline("fused median (base size)", unit="µs", **f_est)
comparison("speed-up over best baseline", base_cmp)
comparison(
    "speed-up over torch.compile (max-autotune-no-cudagraphs)", base_cmp, COMPILED
)
# each K's verdict against the fastest PyTorch chain there (not against the floor)
for kk in ks:
    c = result.comparisons[kk]
    fastest = min(real, key=lambda name: c.measurements[name].median_ms)
    comparison(f"K={kk}: speed-up over the fastest PyTorch chain", c, fastest)
# sphinx_gallery_end_ignore
Prose(*sentences)
