"""
Training extras: attention dropout, and a bit-identical backward
================================================================

Two switches on cuDNN's attention graphs matter for training runs you want to reproduce.
This page builds a causal attention forward and its deterministic backward with the
frontend, checks the gradients against PyTorch, and then measures what each switch costs
at a training shape.

What you will learn:

* **deterministic backward**: ``sdpa_backward(..., use_deterministic_algorithm=True)``.
  The default backward accumulates dQ with atomics, whose order varies from run to run;
  the deterministic one does not, at a price in time and workspace that this page
  measures, beside FlashAttention-4's own deterministic backward;
* **dropout** inside the fused kernel: ``dropout=(probability, seed, offset)``, where
  ``seed`` and ``offset`` are device tensors, so a captured CUDA graph can advance the
  offset without a rebuild. The dropped probabilities are never written to memory, so
  the check is statistical, and the determinism under a fixed seed and offset is exact.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: a causal forward and its deterministic backward
# -----------------------------------------------------------
# Causal attention, 2 × 4096 tokens, 16 heads of 128. The forward writes O and the
# softmax statistics (``generate_stats=True``), as a training forward does; the backward
# reads them and writes dQ, dK, dV. ``use_deterministic_algorithm=True`` is the only
# change from the default backward.
import cudnn
import torch

B, H, S, D = 2, 16, 4096, 128
q, k, v, d_o = torch.randn(4, B, H, S, D, device="cuda", dtype=torch.bfloat16)
o, dq, dk, dv = (torch.empty_like(t) for t in (q, q, k, v))
stats = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
BF16, FP32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
TYPES = dict(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32)
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT
CAUSAL = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)


def build(g):
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()


fwd = cudnn.pygraph(handle=handle, **TYPES)
Q, K, V = (fwd.tensor_like(t) for t in (q, k, v))
O, STATS = fwd.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=True, **CAUSAL)
O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
STATS.set_output(True).set_data_type(FP32)
STATS.set_dim(list(stats.shape)).set_stride(list(stats.stride()))
build(fwd)

bwd = cudnn.pygraph(handle=handle, **TYPES)
inputs = dict(q=q, k=k, v=v, o=o, dO=d_o, stats=stats)
T = {name: bwd.tensor_like(t, name=name) for name, t in inputs.items()}
dQ, dK, dV = bwd.sdpa_backward(
    **T, attn_scale=D**-0.5, use_deterministic_algorithm=True, **CAUSAL
)
for node, t in ((dQ, dq), (dK, dk), (dV, dv)):
    node.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
build(bwd)

fwd_pack = {Q: q, K: k, V: v, O: o, STATS: stats}
bwd_pack = {T[name]: t for name, t in inputs.items()} | {dQ: dq, dK: dk, dV: dv}
size = max(fwd.get_workspace_size(), bwd.get_workspace_size())
workspace = torch.empty(size, device="cuda", dtype=torch.uint8)
fwd.execute(fwd_pack, workspace, handle=handle)
bwd.execute(bwd_pack, workspace, handle=handle)
print(f"deterministic backward: {bwd.get_workspace_size() / 2**20:.0f} MiB workspace")

# %%
# Checked against PyTorch's attention in fp32, forward and backward.
qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
ref = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=True)
ref.backward(d_o.float())
pairs = {"O": (o, ref), "dQ": (dq, qf.grad), "dK": (dk, kf.grad), "dV": (dv, vf.grad)}
for name, (got, want) in pairs.items():
    torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=3e-2)
    print(f"{name}: max abs error {(got.float() - want).abs().max().item():.1e}")

# %%
# Measuring the deterministic backward
# ------------------------------------
# The backward graph is built twice, deterministic and default; each is checked against
# the fp32 reference, then run ten times to count the distinct dQ bit patterns, then the
# two race in interleaved rounds.
from cudnn_guide import check, graphs
from cudnn_guide.measure import baselines, compare, fa4

BWD_SHAPE = (B, S)


def backward_graph(deterministic):
    """Build sdpa_backward for the tensors above; return its launcher and the dQ, dK,
    dV it writes."""
    gb = cudnn.pygraph(
        handle=handle,
        io_data_type=BF16,
        intermediate_data_type=FP32,
        compute_data_type=FP32,
    )
    io = dict(q=q, k=k, v=v, o=o, dO=d_o, stats=stats)
    T = {n: gb.tensor_like(t, name=n) for n, t in io.items()}
    dQ, dK, dV = gb.sdpa_backward(
        name="sdpa_backward",
        q=T["q"],
        k=T["k"],
        v=T["v"],
        o=T["o"],
        dO=T["dO"],
        stats=T["stats"],
        attn_scale=D**-0.5,
        use_deterministic_algorithm=deterministic,
        **CAUSAL,
    )
    grads = [torch.empty_like(t) for t in (q, k, v)]
    for node_out, t in zip((dQ, dK, dV), grads):
        node_out.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
    gb.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    p = {T[n]: t for n, t in io.items()} | dict(zip((dQ, dK, dV), grads))
    built = graphs.adopt(gb, handle, name=f"backward, deterministic={deterministic}")
    return built, built.bind(p), grads


backward = {det: backward_graph(det) for det in (True, False)}
ref_leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
with check.full_precision():
    torch.nn.functional.scaled_dot_product_attention(
        *ref_leaves, is_causal=True
    ).backward(d_o.float())
checks = []
distinct = {}
for det, (built, launch, grads) in backward.items():
    launch()
    for name, got, want in zip(("dQ", "dK", "dV"), grads, ref_leaves):
        checks.append(check.check(got, want.grad, name=f"{name}, deterministic={det}"))
    runs = set()
    for _ in range(10):
        launch()
        runs.add(hash(grads[0].view(torch.int16).cpu().numpy().tobytes()))
    distinct[det] = len(runs)
    print(
        f"deterministic={det}: {distinct[det]} distinct dQ bit patterns in 10 runs; "
        f"workspace {built.report.workspace_bytes / 2**20:.0f} MiB"
    )
assert distinct[True] == 1

det_cost = compare.compare(
    {"deterministic": backward[True][1], "default (atomics)": backward[False][1]},
    candidate="deterministic",
    l2="cold",
    rounds=9,
    tag="backward",
)
s = det_cost.versus["default (atomics)"]
print(f"deterministic backward over default: {s['value']:.2f}× ({s['verdict']})")

# %%
# Measuring against FlashAttention-4's deterministic backward
# -----------------------------------------------------------
# FlashAttention-4 has a deterministic backward too (``deterministic=True``). It runs
# inside autograd, forward and backward together, so the like-for-like cuDNN contender
# is one forward graph plus the deterministic backward graph: one training step each,
# checked against the same fp32 gradients, bit patterns counted the same way.
import textwrap

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
CUDNN_STEP = "cuDNN graph (heuristics A), forward + deterministic backward"
FA4_STEP = f"{FA4}, deterministic"
forward = graphs.adopt(fwd, handle, name="forward").bind(fwd_pack)
det_launch, det_grads = backward[True][1], backward[True][2]


def cudnn_step():
    forward()
    det_launch()


cudnn_step()
for name, got, want in zip(("dQ", "dK", "dV"), det_grads, ref_leaves):
    checks.append(check.check(got, want.grad, name=f"{name}, cuDNN training step"))
steps = {CUDNN_STEP: cudnn_step}
fa4_distinct = None
if FA4_OK:
    fa4_step, fa4_grads = fa4.training_step(
        q, k, v, d_o, causal=True, scale=D**-0.5, deterministic=True
    )

    def fa4_check(_):
        return [
            check.check(got, want.grad, name=f"{name}, {FA4_STEP}")
            for name, got, want in zip(("dQ", "dK", "dV"), fa4_grads(), ref_leaves)
        ]

    why = baselines.admit(steps, FA4_STEP, fa4_step, check=fa4_check)
    if why is None:
        patterns = set()
        for _ in range(10):
            fa4_step()
            dq4 = fa4_grads()[0].contiguous()
            patterns.add(hash(dq4.view(torch.int16).cpu().numpy().tobytes()))
        fa4_distinct = len(patterns)
        print(f"{FA4_STEP}: {fa4_distinct} distinct dQ bit patterns in 10 runs")
else:
    print(textwrap.fill(f"{FA4}: {FA4_DETAIL}", 88))
fa4_cmp = None
if FA4_STEP in steps:
    fa4_cmp = compare.compare(
        steps, candidate=CUDNN_STEP, l2="cold", rounds=7, tag="deterministic step"
    )
    s = fa4_cmp.versus[FA4_STEP]
    print(f"cuDNN step over {FA4}: {s['value']:.2f}× ({s['verdict']})")

# %%
# Measuring dropout
# -----------------
# Dropout at a training shape, 4 × 2048 tokens, 16 heads of 128, no mask (not causal),
# so that the kernel runs long enough for launch overhead not to matter; forward only.
# Seed and offset are int64 1×1×1×1 tensors on the GPU. It also writes the statistics.
from cudnn_guide.graphs import attention_inputs

B, H, S, D, P = 4, 16, 2048, 128, 0.1
gen = torch.Generator(device="cuda").manual_seed(0)
qd, kd, vd = (
    torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    for _ in range(3)
)
od = torch.empty_like(qd)
statsd = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
seed = torch.full((1, 1, 1, 1), 1234, dtype=torch.int64, device="cuda")
offset = torch.zeros((1, 1, 1, 1), dtype=torch.int64, device="cuda")


def dropout_graph(p):
    """The forward with stats, with dropout ``p`` (or none): graph, pack, output."""
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=BF16,
        intermediate_data_type=FP32,
        compute_data_type=FP32,
    )
    Q, K, V = (g.tensor_like(t, name=n) for t, n in ((qd, "q"), (kd, "k"), (vd, "v")))
    pack = {Q: qd, K: kd, V: vd}
    extra = {}
    if p:
        SEED, OFFSET = g.tensor_like(seed, name="seed"), g.tensor_like(offset)
        extra["dropout"] = (p, SEED, OFFSET)
        pack |= {SEED: seed, OFFSET: offset}
    O, STATS = g.sdpa(
        q=Q,
        k=K,
        v=V,
        attn_scale=D**-0.5,
        generate_stats=True,
        **extra,
    )
    out = od if p else torch.empty_like(od)
    O.set_output(True).set_dim(list(out.shape)).set_stride(list(out.stride()))
    STATS.set_output(True).set_data_type(FP32)
    STATS.set_dim(list(statsd.shape)).set_stride(list(statsd.stride()))
    pack |= {O: out, STATS: statsd}
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    name = "sdpa_dropout" if p else "sdpa"
    return graphs.adopt(g, handle, name=name), pack, out


dropout, pack, _ = dropout_graph(P)
plain, plain_pack, o0 = dropout_graph(0)
dropout.execute(pack)
print(dropout.report.plan_name, f"workspace {dropout.report.workspace_bytes} B")

# %%
# Dropout keeps each probability with chance 1 − p and scales it by 1 / (1 − p), so its
# *expected* output is attention without dropout. Averaging N runs with different
# **seeds** (offset 0: independent random streams) must approach the fp32 reference,
# with an error that falls like 1/√N; a wrong scale or a biased mask would leave an
# error that does not fall.
reference = attention_inputs.reference(qd, kd, vd)
plain.execute(plain_pack)
checks.append(check.check(o0, reference, name="forward without dropout"))
total, errors = torch.zeros_like(reference), {}
for i in range(64):
    seed.fill_(i)
    dropout.execute(pack)
    total += od.float()
    if i + 1 in (1, 4, 16, 64):
        mean = total / (i + 1)
        rel = torch.linalg.vector_norm(mean - reference) / torch.linalg.vector_norm(
            reference
        )
        errors[i + 1] = rel.item()
        print(f"mean of {i + 1:2d} runs: relative error {errors[i + 1]:.3f}")
seed.fill_(1234)
falls = errors[1] / errors[64]
print(f"from 1 to 64 runs the error falls {falls:.1f}× (1/√N predicts 8×)")
assert 5 < falls < 11, f"the dropout average does not converge like 1/√N: {errors}"
del total, reference

# %%
# Bit-identical under a fixed seed and offset; a different output at the next offset.
offset.fill_(7)
dropout.execute(pack)
first = od.clone()
dropout.execute(pack)
same = torch.equal(first, od)
offset.fill_(8)
dropout.execute(pack)
differs = not torch.equal(first, od)
print(f"same seed and offset: bit-identical: {same}; next offset differs: {differs}")
assert same and differs

# %%
# The dropout forward against the same graph without dropout, in interleaved rounds.
dropout_cost = compare.compare(
    {"with dropout": dropout.bind(pack), "without dropout": plain.bind(plain_pack)},
    candidate="with dropout",
    l2="cold",
    rounds=9,
    tag="dropout",
)
s = dropout_cost.versus["without dropout"]
print(f"forward with dropout p={P} over without: {s['value']:.2f}× ({s['verdict']})")

# %%
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
ns = list(errors)
axes[0].loglog(ns, [errors[n] for n in ns], "o-", label="measured")
axes[0].loglog(ns, [errors[1] / n**0.5 for n in ns], "--", label="1/√N from N=1")
axes[0].set_xlabel("dropout runs averaged (N)")
axes[0].set_ylabel("relative error vs no dropout")
axes[0].set_title(f"dropout p={P}: the average converges")
axes[0].legend()
for i, (cmp_, names) in enumerate(
    (
        (dropout_cost, ("without dropout", "with dropout")),
        (det_cost, ("default (atomics)", "deterministic")),
    )
):
    for j, name in enumerate(names):
        e = cmp_.estimate(name)
        err = [[e["value"] - e["low"]], [e["high"] - e["value"]]]
        axes[1].bar(
            i * 3 + j, e["value"], yerr=err, capsize=3, color=f"C{j}", label=name
        )
axes[1].set_xticks([0, 1, 3, 4], ["no dropout", "dropout", "default", "deterministic"])
axes[1].set_ylabel("µs per call (median, in-run interval)")
axes[1].set_title("what each switch costs")
plt.show()

# %%
# Conclusions
# -----------
from cudnn_guide.report.prose import Prose

ws = {det: backward[det][0].report.workspace_bytes for det in (True, False)}
if fa4_cmp is not None:
    v4 = fa4_cmp.versus[FA4_STEP]["verdict"]
    fa4_sentence = (
        f"* Against {FA4_STEP} ({fa4_distinct} dQ bit pattern(s) in 10 runs), one "
        f"cuDNN training step (forward + deterministic backward) is "
        f"{fa4_cmp.describe(FA4_STEP)}"
        + ("." if v4 == "tie" else f": cuDNN is the {v4} of the two.")
    )
elif FA4_OK:
    fa4_sentence = f"* {FA4_STEP} could not run here (its reason is printed above)."
else:
    fa4_sentence = f"* {FA4} was not timed: {FA4_DETAIL}."
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, keep

comparison("dropout forward: speed-up over no dropout", dropout_cost)
comparison("deterministic backward: speed-up over default", det_cost)
if fa4_cmp is not None:
    comparison(
        "deterministic training step: speed-up over FlashAttention-4", fa4_cmp, FA4_STEP
    )
keep(
    dropout_errors=errors,
    distinct_bit_patterns=distinct,
    workspace_bytes=ws,
)
if fa4_distinct is not None:
    keep(fa4_distinct_bit_patterns=fa4_distinct)
# sphinx_gallery_end_ignore

Prose(
    f"Both switches are measured at training shapes: the backward at "
    f"{BWD_SHAPE[0]}×{BWD_SHAPE[1]} tokens, dropout at {B}×{S} tokens, "
    f"{H} heads of {D}.",
    f"* The deterministic backward gave {distinct[True]} bit pattern(s) in 10 runs "
    f"(the default gave {distinct[False]}); it is {det_cost.describe()}, and needs "
    f"{ws[True] / 2**20:.0f} MiB of workspace instead of {ws[False] / 2**20:.0f} MiB.",
    fa4_sentence,
    f"* Dropout p={P}: the mean of 64 runs with different seeds is within "
    f"{errors[64]:.3f} (relative) of attention without dropout, falling {falls:.1f}× "
    f"from one run, as an unbiased mask should; the forward with dropout is "
    f"{dropout_cost.describe()}.",
)
