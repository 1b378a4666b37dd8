"""
Training extras: attention dropout, and a bit-identical backward
================================================================

Two switches on cuDNN's attention graphs matter for training runs you want to reproduce:

* **dropout** inside the fused kernel: ``dropout=(probability, seed, offset)``, where ``seed``
  and ``offset`` are device tensors, so a captured CUDA graph can advance the offset without
  a rebuild. The dropped probabilities are never written to memory, so the check is
  statistical, and the determinism under a fixed seed and offset is exact;
* **deterministic backward**: ``sdpa_backward(..., use_deterministic_algorithm=True)``. The
  default backward accumulates dQ with atomics, whose order varies from run to run; the
  deterministic one does not, at a price in time and workspace that this page measures.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
print(env.stamp())

# %%
# Dropout: the declaration
# ------------------------
# Seed and offset are int64 1×1×1×1 tensors on the GPU. The forward also writes the softmax
# statistics, as a training forward does.
import cudnn
import torch

from cudnn_guide.graphs import attention_inputs
from cudnn_guide import check, graphs

handle = graphs.handle_for_current_device()
B, H, S, D, P = 2, 8, 1024, 64, 0.1
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
o, stats = torch.empty_like(q), torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
seed = torch.full((1, 1, 1, 1), 1234, dtype=torch.int64, device="cuda")
offset = torch.zeros((1, 1, 1, 1), dtype=torch.int64, device="cuda")

g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                  intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
Q, K, V = g.tensor_like(q, name="q"), g.tensor_like(k, name="k"), g.tensor_like(v, name="v")
SEED, OFFSET = g.tensor_like(seed, name="seed"), g.tensor_like(offset, name="offset")
O, STATS = g.sdpa(name="sdpa_dropout", q=Q, k=K, v=V, attn_scale=D ** -0.5, generate_stats=True,
                  dropout=(P, SEED, OFFSET))
O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
pack = {Q: q, K: k, V: v, O: o, STATS: stats, SEED: seed, OFFSET: offset}
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)  # run on torch's stream
g.execute(pack, workspace, handle=handle)
dropout = graphs.adopt(g, handle, name="sdpa_dropout")  # a checked launcher, for the timing below
print(dropout.report)

# %%
# Checked by its statistics
# -------------------------
# Dropout keeps each probability with chance 1 − p and scales it by 1 / (1 − p), so its
# *expected* output is attention without dropout. Averaging N runs with different offsets
# must approach the fp32 reference, with an error that falls like 1/√N; a wrong scale or a
# biased mask would leave an error that does not fall. The runs use seeds 0…63 (offset 0):
# independent random streams.
reference = attention_inputs.reference(q, k, v)
outputs = []
for i in range(64):
    seed.fill_(i)
    g.execute(pack, workspace, handle=handle)
    outputs.append(o.float().clone())
seed.fill_(1234)
errors = {}
for n in (1, 4, 16, 64):
    mean = torch.stack(outputs[:n]).mean(0)
    errors[n] = (torch.linalg.vector_norm(mean - reference) / torch.linalg.vector_norm(reference)).item()
    print(f"mean of {n:2d} dropout runs: relative error {errors[n]:.3f} against attention without dropout")
falls = errors[1] / errors[64]
print(f"from 1 to 64 runs the error falls {falls:.1f}× (1/√N predicts 8×)")
assert 5 < falls < 11, f"the dropout average does not converge like 1/√N: errors {errors}"

# %%
# Bit-identical under a fixed seed and offset
# -------------------------------------------
offset.fill_(7)
g.execute(pack, workspace, handle=handle)
first = o.clone()
g.execute(pack, workspace, handle=handle)
same = torch.equal(first, o)
offset.fill_(8)
g.execute(pack, workspace, handle=handle)
differs = not torch.equal(first, o)
print(f"same seed and offset: bit-identical output: {same}; next offset: a different output: {differs}")
assert same and differs

# %%
# What dropout costs in the forward
# ---------------------------------
# The dropout forward against the same graph without dropout, in interleaved rounds.
from cudnn_guide.measure import compare

g0 = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                   intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
Q0, K0, V0 = g0.tensor_like(q, name="q"), g0.tensor_like(k, name="k"), g0.tensor_like(v, name="v")
O0, STATS0 = g0.sdpa(name="sdpa", q=Q0, k=K0, v=V0, attn_scale=D ** -0.5, generate_stats=True)
O0.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
STATS0.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
g0.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
o0 = torch.empty_like(o)
plain = graphs.adopt(g0, handle, name="sdpa")
plain.execute({Q0: q, K0: k, V0: v, O0: o0, STATS0: stats})
checks = [check.check(o0, reference, name="forward without dropout")]
dropout_cost = compare.compare({"with dropout": dropout.bind(pack),
                                "without dropout": plain.bind({Q0: q, K0: k, V0: v, O0: o0, STATS0: stats})},
                               candidate="with dropout", l2="cold", rounds=11, tag="dropout")
print(f"the forward with dropout p={P} is {dropout_cost.describe()}")

# %%
# Deterministic backward
# ----------------------
# Causal attention, 2 × 4096 tokens, 16 heads of 128. One forward saves O and the statistics;
# then two backward graphs differ only in ``use_deterministic_algorithm``.
B, H, S, D = 2, 16, 4096, 128
q, k, v, d_o = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
o, stats = torch.empty_like(q), torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
causal = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)

gf = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                   intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
Qf, Kf, Vf = gf.tensor_like(q, name="q"), gf.tensor_like(k, name="k"), gf.tensor_like(v, name="v")
Of, STf = gf.sdpa(name="sdpa", q=Qf, k=Kf, v=Vf, attn_scale=D ** -0.5, generate_stats=True, **causal)
Of.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
STf.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
gf.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
graphs.adopt(gf, handle, name="forward").execute({Qf: q, Kf: k, Vf: v, Of: o, STf: stats})


def backward_graph(deterministic):
    """Build sdpa_backward for the tensors above; return its launcher and the dQ, dK, dV it writes."""
    gb = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                       intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    T = {n: gb.tensor_like(t, name=n) for n, t in dict(q=q, k=k, v=v, o=o, dO=d_o, stats=stats).items()}
    dQ, dK, dV = gb.sdpa_backward(name="sdpa_backward", q=T["q"], k=T["k"], v=T["v"], o=T["o"], dO=T["dO"],
                                  stats=T["stats"], attn_scale=D ** -0.5, use_deterministic_algorithm=deterministic,
                                  **causal)
    grads = [torch.empty_like(t) for t in (q, k, v)]
    for node_out, t in zip((dQ, dK, dV), grads):
        node_out.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
    gb.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    p = {T[n]: t for n, t in dict(q=q, k=k, v=v, o=o, dO=d_o, stats=stats).items()} | dict(zip((dQ, dK, dV), grads))
    built = graphs.adopt(gb, handle, name=f"backward, deterministic={deterministic}")
    return built, built.bind(p), grads


backward = {det: backward_graph(det) for det in (True, False)}
ref_leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
with check.full_precision():
    torch.nn.functional.scaled_dot_product_attention(*ref_leaves, is_causal=True).backward(d_o.float())
distinct = {}
for det, (built, launch, grads) in backward.items():
    launch()
    for name, got, ref in zip(("dQ", "dK", "dV"), grads, ref_leaves):
        checks.append(check.check(got, ref.grad, name=f"{name}, deterministic={det}"))
    runs = set()
    for _ in range(10):
        launch()
        runs.add(hash(grads[0].view(torch.int16).cpu().numpy().tobytes()))
    distinct[det] = len(runs)
    print(f"deterministic={det}: {distinct[det]} distinct dQ bit patterns in 10 runs; plan "
          f"{built.report.plan_name}, workspace {built.report.workspace_bytes / 2 ** 20:.0f} MiB")
assert distinct[True] == 1

det_cost = compare.compare({"deterministic": backward[True][1], "default (atomics)": backward[False][1]},
                           candidate="deterministic", l2="cold", rounds=11, tag="backward")
print(f"the deterministic backward is {det_cost.describe()}")

# %%
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
ns = list(errors)
axes[0].loglog(ns, [errors[n] for n in ns], "o-", label="measured")
axes[0].loglog(ns, [errors[1] / n ** 0.5 for n in ns], "--", label="1/√N from N=1")
axes[0].set_xlabel("dropout runs averaged (N)")
axes[0].set_ylabel("relative error vs no dropout")
axes[0].set_title(f"dropout p={P}: the average converges")
axes[0].legend()
for i, (cmp_, names) in enumerate(((dropout_cost, ("without dropout", "with dropout")),
                                  (det_cost, ("default (atomics)", "deterministic")))):
    for j, name in enumerate(names):
        e = cmp_.estimate(name)
        axes[1].bar(i * 3 + j, e["value"], yerr=[[e["value"] - e["low"]], [e["high"] - e["value"]]], capsize=3,
                    color=f"C{j}", label=name)
axes[1].set_xticks([0, 1, 3, 4], ["no dropout", "dropout", "default", "deterministic"])
axes[1].set_ylabel("µs per call (median, 95% CI)")
axes[1].set_title("what each switch costs")
plt.show()

# %%
# Takeaways
# ---------
ws = {det: backward[det][0].report.workspace_bytes for det in (True, False)}
print(f"* Dropout p={P}: the mean of 64 runs is within {errors[64]:.3f} (relative) of attention without dropout, "
      f"falling {falls:.1f}× from one run, as an unbiased mask should; the forward with dropout is "
      f"{dropout_cost.describe()}.")
print(f"* The deterministic backward gave {distinct[True]} bit pattern in 10 runs (the default gave {distinct[False]}); "
      f"it is {det_cost.describe()}, and needs {ws[True] / 2 ** 20:.0f} MiB of workspace instead of "
      f"{ws[False] / 2 ** 20:.0f} MiB.")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, keep
comparison("dropout forward: speed-up over no dropout", dropout_cost)
comparison("deterministic backward: speed-up over default", det_cost)
keep(dropout_errors=errors, distinct_bit_patterns=distinct, workspace_bytes=ws)
# sphinx_gallery_end_ignore
