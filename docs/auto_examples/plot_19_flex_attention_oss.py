"""
Frontend 1.32's open-source attention kernels on Hopper
=======================================================

cuDNN Frontend 1.32 ships attention kernels written in the CuTe DSL (``nvidia-cutlass-dsl``),
in source, beside the closed cuDNN library:

* ``cudnn.flex_attention``: attention under an *interval mask*. For every query you list the
  key intervals it may see; ``create_mask_plan`` turns that into a reusable plan and
  ``flex_attn_func`` runs it, forward and backward, on fixed (BSHD) or packed (THD) batches;
* ``heur_mode.OPENSOURCE``: asks a graph's planner for these open-source engines instead of
  the library's;
* ``torch.ops.cudnn.sdpa_fwd``: a PyTorch op over the same SDPA graphs.

What you will learn: how to write causal and sliding-window masks as intervals, check the
kernels, what their plan and first-call compilation cost in a fresh process, how they compare
with cuDNN's graph SDPA and PyTorch on the same masks, and which ``OPENSOURCE`` graphs this
GPU serves, shown as cuDNN answers.
"""

# %%
# Environment
# -----------
# The open-source kernels need the CuTe DSL; without it, importing ``cudnn.flex_attention``
# fails and this page says how to install it.
from cudnn_guide import CapabilityError, environment

environment.require_sm((9, 0), "cudnn.flex_attention (CuTe DSL kernels)")
env = environment.collect()
print(env.stamp())
try:
    import cudnn.flex_attention as cfa
    import cutlass
except ImportError as exc:
    raise CapabilityError("cudnn.flex_attention", "the CuTe DSL: pip install 'nvidia-cutlass-dsl[cu13]'",
                          f"no CuTe DSL ({exc})") from exc
print(f"CuTe DSL {cutlass.__version__}")

# %%
# Masks as key intervals
# ----------------------
# ``mask_func`` is an int32 tensor ``[Hmask, nfunc, total_q]`` (``Hmask`` 1 or Hq, ``nfunc``
# odd). For query ``i`` its column ``F0, F1, F2, …`` means: keys in ``[0, F0) ∪ [F1, F2) ∪ …``
# are visible, counted within the query's own sequence. Causal is one endpoint per query,
# ``F0 = i + 1``; a window of W keys is three, ``[0, 0) ∪ [i − W + 1, i + 1)``.
import torch

from cudnn_guide.graphs import attention_inputs
from cudnn_guide import check

B, H, S, D, W = 4, 16, 4096, 128, 512
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
pos = torch.arange(S, device="cuda", dtype=torch.int32)
causal_ends = (pos + 1).repeat(B).reshape(1, 1, B * S).contiguous()
window_ends = torch.stack([torch.zeros_like(pos), (pos - W + 1).clamp_min(0), pos + 1]).repeat(1, B)
window_ends = window_ends.reshape(1, 3, B * S).contiguous()

causal_plan = cfa.create_mask_plan(causal_ends, q, k, v)
window_plan = cfa.create_mask_plan(window_ends, q, k, v)
out_causal = cfa.flex_attn_func(q, k, v, mask_plan=causal_plan)
out_window = cfa.flex_attn_func(q, k, v, mask_plan=window_plan)

bhsd = [t.transpose(1, 2) for t in (q, k, v)]  # the reference works on B×H×S×D
ref_causal = attention_inputs.reference(*bhsd, visible=attention_inputs.band(S, S, device="cuda")).transpose(1, 2)
ref_window = attention_inputs.reference(*bhsd, visible=attention_inputs.band(S, S, left=W, device="cuda"))
ref_window = ref_window.transpose(1, 2)
checks = [check.check(out_causal, ref_causal, name="cudnn.flex_attention, causal"),
          check.check(out_window, ref_window, name=f"cudnn.flex_attention, window {W}")]
for c in checks:
    print(c)

# %%
# Backward
# --------
# A plan built from inputs that require gradients carries the backward kernels too
# (``build_backward``); ``flex_attn_func`` is then differentiable.
S_BWD = 2048
qg, kg, vg = (torch.randn(2, S_BWD, H, D, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
              for _ in range(3))
ends_bwd = (torch.arange(S_BWD, device="cuda", dtype=torch.int32) + 1).repeat(2).reshape(1, 1, 2 * S_BWD)
bwd_plan = cfa.create_mask_plan(ends_bwd.contiguous(), qg, kg, vg)
d_out = torch.randn(2, S_BWD, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
cfa.flex_attn_func(qg, kg, vg, mask_plan=bwd_plan).backward(d_out)
ref_leaves = [t.detach().float().transpose(1, 2).requires_grad_() for t in (qg, kg, vg)]
with check.full_precision():
    torch.nn.functional.scaled_dot_product_attention(*ref_leaves, is_causal=True).backward(d_out.float().transpose(1, 2))
for name, got, ref in zip(("dQ", "dK", "dV"), (qg.grad, kg.grad, vg.grad), ref_leaves):
    checks.append(check.check(got, ref.grad.transpose(1, 2), name=f"cudnn.flex_attention backward, {name}"))
    print(checks[-1])

# %%
# Plan and compile cost, in a fresh process
# -----------------------------------------
# The CuTe DSL compiles each kernel on its first call, in the calling process (its disk cache
# is off by default). A new interpreter with an empty CUDA JIT cache (``CUDA_CACHE_PATH``)
# shows what a server pays once per process; the second call is the steady state.
import tempfile

from cudnn_guide.studies import coldstart, fresh_process

cold = []
for _ in range(2):
    with tempfile.TemporaryDirectory() as jit_cache, fresh_process.InterpreterPool(
            1, preload=("torch", "cudnn", "cudnn.flex_attention"), env={"CUDA_CACHE_PATH": jit_cache}) as pool:
        cold.append(pool.run(coldstart.flex_attention_first_call, B, H, S, D, timeout=600).value)
for i, c in enumerate(cold):
    print(f"fresh process {i + 1}: create_mask_plan {c['plan_s']:.2f} s, first call {c['first_call_s']:.2f} s, "
          f"second call {1e3 * c['second_call_s']:.2f} ms (rel. error {c['rel_error']:.1e})")

# %%
# Against cuDNN's graph SDPA and PyTorch, on the same masks
# ---------------------------------------------------------
# Contenders, each checked: ``cudnn.flex_attention``; cuDNN's graph SDPA with the same mask as
# a diagonal band (written out below); PyTorch's FlexAttention (compiled) with a block mask;
# PyTorch's SDPA, flash backend, for the causal case; and the frontend's own
# ``torch.ops.cudnn.sdpa_fwd``. Each races in interleaved rounds with a bootstrap interval.
import cudnn
import cudnn.sdpa.fwd.torch_op  # noqa: F401  (registers torch.ops.cudnn.sdpa_fwd)
from torch.nn.attention import SDPBackend
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from cudnn_guide.measure import baselines, compare
from cudnn_guide import graphs

handle = graphs.handle_for_current_device()
qb, kb, vb = (t.contiguous() for t in bhsd)
flex = torch.compile(flex_attention, fullgraph=True)


def graph_sdpa(left_bound):
    """cuDNN's graph SDPA over B×H×S×D, causal, with an optional window."""
    o = torch.empty_like(qb)
    g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                      intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    Q, K, V = g.tensor_like(qb, name="q"), g.tensor_like(kb, name="k"), g.tensor_like(vb, name="v")
    O, _ = g.sdpa(name="sdpa", q=Q, k=K, v=V, attn_scale=D ** -0.5, generate_stats=False,
                  diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0,
                  diagonal_band_left_bound=left_bound)
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return graphs.adopt(g, handle, name="sdpa").bind({Q: qb, K: kb, V: vb, O: o}), o


CAND = "cudnn.flex_attention"
results = {}
for mask, left, plan, ref in (("causal", None, causal_plan, ref_causal), (f"window {W}", W, window_plan, ref_window)):
    run_graph, o_graph = graph_sdpa(left)
    run_graph()
    checks.append(check.check(o_graph.transpose(1, 2), ref, name=f"cuDNN graph SDPA, {mask}"))
    visible = (lambda b, h, qi, ki: ki <= qi) if left is None else (
        lambda b, h, qi, ki: (ki <= qi) & (qi - ki < W))
    block_mask = create_block_mask(visible, None, None, S, S)
    contenders = {
        CAND: lambda plan=plan: cfa.flex_attn_func(q, k, v, mask_plan=plan),
        "cuDNN graph SDPA": run_graph,
        "PyTorch FlexAttention (compiled)": lambda m=block_mask: flex(qb, kb, vb, block_mask=m),
        "torch.ops.cudnn.sdpa_fwd": lambda left=left: torch.ops.cudnn.sdpa_fwd(
            qb, kb, vb, D ** -0.5, is_causal=True, window_left=-1 if left is None else left, return_lse=False),
    }
    if left is None:
        attend = baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)
        contenders["PyTorch SDPA (flash)"] = lambda: attend(qb, kb, vb)
    for name, fn in contenders.items():
        if name not in (CAND, "cuDNN graph SDPA"):
            out = fn()
            out = out[0] if isinstance(out, tuple) else out
            checks.append(check.check(out.transpose(1, 2), ref, name=f"{name}, {mask}"))
    pairs = int(attention_inputs.band(S, S, left=left).sum())
    results[mask] = compare.compare(contenders, candidate=CAND, l2="cold", rounds=9, flops=4 * B * H * D * pairs,
                                    tag=mask)
    print(f"{mask}:", results[mask])

# %%
import pandas as pd

from cudnn_guide.report import html_table

rows = []
for mask, c in results.items():
    for name in c.measurements:
        row = {"mask": mask, "implementation": name, "µs": c.estimate(name)["value"],
               "TFLOP/s": c.estimate(name, "TFLOP/s")["value"]}
        s = c.versus.get(name)
        row["flex_attention's speed-up"] = f"{s['value']:.2f}× ({s['low']:.2f}–{s['high']:.2f}) {s['verdict']}" if s else ""
        rows.append(row)
html_table(pd.DataFrame(rows), {"µs": "{:.1f}", "TFLOP/s": "{:.0f}"})

# %%
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
from cudnn_guide.report import plot_comparison
for ax, (mask, c) in zip(axes, results.items()):
    plot_comparison(c, "TFLOP/s", ax=ax, xlabel="TFLOP/s of visible pairs", title=f"{mask}: {B}×{H} heads × {S} tokens, d={D}")
plt.show()

# %%
# Which graphs ``heur_mode.OPENSOURCE`` serves on this GPU
# --------------------------------------------------------
# Asking a graph for ``OPENSOURCE`` plans only. ``create_execution_plans`` then lists one
# delegating entry (``backend_heuristics``): the open-source candidates live inside the backend
# and are not enumerated. Whether one *serves* the graph shows at ``check_support`` and
# ``build_plans``; a graph that builds is then executed and checked. cuDNN's refusals are shown
# verbatim (first line). Many open-source engines target Blackwell (SM 100) only.
def sdpa_forward(g, stats):
    Q, K, V = (g.tensor_like(qb, name=n) for n in "qkv")
    O, Stats = g.sdpa(name="sdpa", q=Q, k=K, v=V, attn_scale=D ** -0.5, generate_stats=stats,
                      diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
    o = torch.empty_like(qb)
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    pack = {Q: qb, K: kb, V: vb, O: o}
    if stats:
        st = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
        Stats.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(list(st.shape)).set_stride(list(st.stride()))
        pack[Stats] = st
    return pack, o.transpose(1, 2), ref_causal


a_mm, b_mm = (torch.randn(1, 4096, 4096, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))


def matmul(g, _):
    A, Bm = g.tensor_like(a_mm, name="a"), g.tensor_like(b_mm, name="b")
    c = torch.empty_like(a_mm)
    C = g.matmul(name="mm", A=A, B=Bm)
    C.set_output(True).set_data_type(cudnn.data_type.BFLOAT16).set_dim(list(c.shape)).set_stride(list(c.stride()))
    with check.full_precision():
        ref = a_mm.float() @ b_mm.float()
    return {A: a_mm, Bm: b_mm, C: c}, c, ref


oss_rows = []
for label, declare, stats in (("SDPA forward, causal", sdpa_forward, False),
                              ("SDPA forward with stats", sdpa_forward, True), ("matmul bf16", matmul, None)):
    for modes in (["OPENSOURCE"], ["A"]):
        g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                          intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
        pack, out, ref = declare(g, stats)
        step = "validate"
        try:
            for step, call in (("validate", g.validate), ("build_operation_graph", g.build_operation_graph),  # noqa: B007
                               ("create_execution_plans",
                                lambda: g.create_execution_plans([getattr(cudnn.heur_mode, m) for m in modes])),
                               ("check_support", g.check_support), ("build_plans", g.build_plans)):
                call()
            listed = f"{g.get_execution_plan_count()} listed, first {g.get_plan_name_at_index(0)}"
            graphs.adopt(g, handle, name=label).execute(pack)
            result = check.compare(out, ref, name=f"{label}, {'+'.join(modes)}")
            answer = f"builds and runs ({listed}); {result}"
            served = result.passed
        except Exception as exc:  # cuDNN's own refusal, shown as it is
            answer = f"refused at {step}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            served = False
        oss_rows.append({"graph": label, "heur_mode": "+".join(modes), "served": served, "cuDNN's answer": answer})
html_table(pd.DataFrame(oss_rows))

# %%
# Takeaways
# ---------
for mask, c in results.items():
    print(f"* {mask}: cudnn.flex_attention runs at {c.estimate(CAND, 'TFLOP/s')['value']:.0f} TFLOP/s; against "
          f"the fastest other contender it is {c.describe()}.")
first = [c["first_call_s"] for c in cold]
print(f"* A fresh process pays {min(first):.1f}–{max(first):.1f} s on its first call (compilation) and "
      f"{min(c['plan_s'] for c in cold):.2f}–{max(c['plan_s'] for c in cold):.2f} s for the plan; reuse the plan "
      "and keep the process alive.")
served = [r["graph"] for r in oss_rows if r["heur_mode"] == "OPENSOURCE" and r["served"]]
print(f"* heur_mode.OPENSOURCE alone built, ran and passed the check for: "
      f"{', '.join(served) if served else 'none of the graphs tried'} (of {len(oss_rows) // 2} tried).")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison
for mask, c in results.items():
    comparison(f"{mask}: flex_attention speed-up over best other", c)
# sphinx_gallery_end_ignore
