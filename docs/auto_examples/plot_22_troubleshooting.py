"""
When cuDNN says no: the common failures, reproduced, with their fixes
=====================================================================

Every message on this page was produced by running the code above it on the GPU named in
the environment table. First a graph that cuDNN refuses, caught, and its fix. Then
common failures tried one by one: where "No valid engine configs" comes from, "No
execution plans support the graph", matmuls written by accident, head dims, dtypes,
layouts, the architecture a feature needs, a workspace too small, and a tensor bound
with other strides than declared. For each case: what happened (it builds, it fails
with a message or a kernel that does not compile, or it raises nothing), where it
surfaced, cuDNN's own words and the fix. A graph that "builds" passed the five build
steps but was not run (the lesson's padded graph is). The libcudnn loaded, the
frontend's log and each heuristic mode's plans (with the filters) are on the
:ref:`libcudnn and logs page <sphx_glr_auto_examples_plot_29_libcudnn_and_logs.py>`.

What you will learn:

* to catch a refusal (``cudnn.cudnnGraphNotSupportedError``) and read which step raised
  it: ``validate`` (the graph itself), ``build_operation_graph``,
  ``create_execution_plans`` (the heuristics), ``check_support`` and ``build_plans``
  (the engines), or ``execute`` when it runs (the buffers);
* which head dims, dtypes, layouts and matmuls this GPU's cuDNN refuses, and at which
  step;
* which failures raise nothing at all, so that you have to check for them yourself.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: a graph cuDNN refuses, and the fix
# ----------------------------------------------
# Causal attention with head dim 100. ``validate``, the first build step, checks the
# graph before any engine is asked; what it says is printed. The fix follows: pad the
# head dim with zeros to the next multiple of 8, which the message asks for (padding to
# 128 is another option, with more zeros to multiply).
import cudnn
import torch

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
b, h, s, d = 2, 8, 1024, 100  # batch, heads, tokens, head dim: B×H×S×D
q, k, v = torch.randn(3, b, h, s, d, device="cuda", dtype=torch.bfloat16)
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT  # causal: query i sees the keys j <= i
CAUSAL = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)


def causal_attention_graph(q, k, v):
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    Q = g.tensor_like(q, name="q")
    K = g.tensor_like(k, name="k")
    V = g.tensor_like(v, name="v")
    O, _ = g.sdpa(Q, K, V, attn_scale=d**-0.5, generate_stats=False, **CAUSAL)
    O.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
    return g, (Q, K, V, O)


g, _ = causal_attention_graph(q, k, v)
try:
    g.validate()
    print(f"validate accepted head dim {d} here")
except cudnn.cudnnGraphNotSupportedError as exc:
    print(f"validate refused head dim {d}: {exc}")

# %%
# The fix. Zeros add nothing to q·k, V's padded columns come out as zeros in O and are
# sliced off, and the softmax scale stays 1/√100: the result is attention at head dim
# 100, checked against PyTorch in fp32.
dp = -(-d // 8) * 8  # the next multiple of 8
qp, kp, vp = (torch.nn.functional.pad(t, (0, dp - d)) for t in (q, k, v))
g, (Q, K, V, O) = causal_attention_graph(qp, kp, vp)
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
o = torch.empty_like(qp)
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute({Q: qp, K: kp, V: vp, O: o}, workspace, handle=handle)
ref = torch.nn.functional.scaled_dot_product_attention(
    q.float(), k.float(), v.float(), is_causal=True
)
torch.testing.assert_close(o[..., :d].float(), ref, atol=2e-2, rtol=2e-2)
print(f"padded to {dp}: max |error| {(o[..., :d].float() - ref).abs().max():.1e}")

# %%
# Measuring where each failure surfaces
# -------------------------------------
# ``attempt`` runs the five build steps of a graph one by one and keeps, for each case,
# what happened: the step that raised, cuDNN's words and the fix, or the plans it built.
# ``sdpa_graph`` declares causal attention on 2×8×1024×head-dim tensors with the given
# head dim, dtype or Q layout.
import re

from cudnn_guide import check, graphs

STEPS = (
    "validate",
    "build_operation_graph",
    "create_execution_plans",
    "check_support",
    "build_plans",
)
IO = {
    torch.bfloat16: cudnn.data_type.BFLOAT16,
    torch.float16: cudnn.data_type.HALF,
    torch.float32: cudnn.data_type.FLOAT,
}
outcomes = []


def sdpa_graph(head_dim=128, dtype=torch.bfloat16, q_layout="BHSD"):
    """Causal SDPA on 2×8×1024×head_dim tensors: the graph and its Q, K, V, O."""
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=IO[dtype],
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    x = torch.empty(2, 8, 1024, head_dim, device="cuda", dtype=dtype)
    q = (
        x.transpose(-1, -2).contiguous().transpose(-1, -2)
        if q_layout == "D-major"
        else x
    )
    Q, K, V = (
        g.tensor_like(q, name="q"),
        g.tensor_like(x, name="k"),
        g.tensor_like(x, name="v"),
    )
    O, _ = g.sdpa(
        name="sdpa",
        q=Q,
        k=K,
        v=V,
        attn_scale=head_dim**-0.5,
        generate_stats=False,
        diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
        diagonal_band_right_bound=0,
    )
    O.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
    return g, (Q, K, V, O)


def five_steps(g, modes=("A", "FALLBACK")):
    """The five build steps of ``g`` as callables, in order."""
    heuristics = [getattr(cudnn.heur_mode, m) for m in modes]
    return (
        g.validate,
        g.build_operation_graph,
        lambda: g.create_execution_plans(heuristics),
        g.check_support,
        g.build_plans,
    )


def outcome(case, what, where, error, message, fix):
    message = " ".join(str(message).split())  # whole, on one line
    outcomes.append(
        {
            "case": case,
            "outcome": what,
            "surfaces at": where,
            "error": error,
            "message": message,
            "fix": fix,
        }
    )


def compile_failures(message):
    """How many plans failed to compile their kernel at run time (NVRTC), of how many
    the message lists (build_plans lists each plan it tried as "[i] name: reason")."""
    plans = re.split(r"\[\d+\] ", str(message))[1:] or [str(message)]
    return sum("COMPILATION_FAILED" in p for p in plans), len(plans)


compiled = {}  # case -> (plans that failed to compile, plans tried)


def attempt(case, fix, g, modes=("A", "FALLBACK")):
    """Run the five steps of ``g``; keep the step that raised and cuDNN's words, or
    the plans it built."""
    for step, call in zip(STEPS, five_steps(g, modes)):
        try:
            call()
        except Exception as exc:
            bad, tried = compile_failures(exc)
            what = "fails to compile a kernel" if bad else "fails with a message"
            if bad:  # an engine took the graph; its kernel did not compile
                compiled[case] = (bad, tried)
            outcome(case, what, step, type(exc).__name__, exc, fix)
            print(f"{case}: {type(exc).__name__} at {step} ({what})")
            return None
    plans = g.get_execution_plan_count()
    first = g.get_plan_name_at_index(0)
    outcome(case, "builds", "—", "none", f"{plans} plan(s), first {first}", "—")
    print(f"{case}: builds ({plans} plan(s))")
    return g


# %%
# The lesson's two cases come first: the head dim cuDNN refused, and the padded graph
# the lesson built.
attempt(
    f"head dim {d}",
    "pad the head dim with zeros to a multiple of 8 (or to 128)",
    causal_attention_graph(q, k, v)[0],
)
outcome(
    f"head dim {d}, zero-padded to {dp}",
    "builds",
    "—",
    "none",
    f"{g.get_execution_plan_count()} plan(s), first {g.get_plan_name_at_index(0)}",
    "—",
)

# %%
# Heuristic modes, and where "No valid engine configs" would come from
# --------------------------------------------------------------------
# ``create_execution_plans`` asks the heuristics in the listed modes for engine configs;
# when no mode proposes one this graph can use, it raises "No valid engine configs"
# (the plans each mode lists, by name, are on the
# :ref:`libcudnn and logs page <sphx_glr_auto_examples_plot_29_libcudnn_and_logs.py>`).
# The same graph, with FALLBACK alone and with A then FALLBACK:
attempt(
    "heuristics: FALLBACK only",
    "ask heur_mode.A first (FALLBACK after it, as a safety net)",
    sdpa_graph()[0],
    modes=("FALLBACK",),
)
_ = attempt("heuristics: A, then FALLBACK", "—", sdpa_graph()[0])

# %%
# Three matmuls that users write by accident: A sliced so that neither of its two inner
# dims is contiguous, the same product in float64, and int8 operands with an int32
# result. Which step, if any, refuses each one on this GPU and this cuDNN is printed.


def matmul_graph(a, b, out_type, compute_type=cudnn.data_type.FLOAT):
    """Declare C = A @ B for torch tensors ``a`` and ``b`` as they are laid out."""
    g = cudnn.pygraph(
        handle=handle,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=compute_type,
    )
    A, B = g.tensor_like(a, name="a"), g.tensor_like(b, name="b")
    C = g.matmul(name="mm", A=A, B=B)
    C.set_output(True).set_data_type(out_type)
    return g


def empties(n, dtype, *shape):
    return [torch.empty(*shape, device="cuda", dtype=dtype) for _ in range(n)]


bf16 = torch.bfloat16
strided = empties(1, bf16, 4, 256, 1024)[0][:, :, ::2]  # strides (262144, 1024, 2)
matmuls = {
    "matmul, A with no contiguous inner dim": (
        "make A contiguous in its last or second-last dim",
        matmul_graph(strided, *empties(1, bf16, 4, 512, 256), cudnn.data_type.BFLOAT16),
    ),
    "matmul in float64": (
        "compute in fp32 or below (or use torch.matmul for float64)",
        matmul_graph(
            *empties(2, torch.float64, 4, 256, 256),
            cudnn.data_type.DOUBLE,
            cudnn.data_type.DOUBLE,
        ),
    ),
    "matmul int8 × int8 → int32": (
        "use the layouts and types cuDNN's int8 engines take, or fp8/bf16",
        matmul_graph(
            *empties(2, torch.int8, 4, 256, 256),
            cudnn.data_type.INT32,
            cudnn.data_type.INT32,
        ),
    ),
}
for case, (fix, g_mm) in matmuls.items():
    attempt(case, fix, g_mm)
no_configs = [o["case"] for o in outcomes if "No valid engine configs" in o["message"]]

# %%
# "No execution plans support the graph" is ``check_support``'s message: the heuristics
# listed something, but no listed engine runs this graph on this GPU. Frontend 1.32's
# open-source engines (``heur_mode.OPENSOURCE``), asked alone for this head dim 128
# graph (on SM 9.0 their SDPA forward engine takes head dims above 256, up to 512):
attempt(
    "heuristics: OPENSOURCE only",
    "add heur_mode.A (then FALLBACK): no open-source engine served this graph here",
    sdpa_graph()[0],
    modes=("OPENSOURCE",),
)

# %%
# Head dims, dtypes and layouts
# -----------------------------
# What an engine serves depends on the GPU and cuDNN of the environment table. A line
# "SdpaFwdDslSm90 is an experimental API" is the SM 9.0 open-source engine's notice:
for hd in (256, 512, 1024):
    attempt(
        f"head dim {hd}",
        "use a head dim cuDNN supports on this GPU, or pad the head dim",
        sdpa_graph(head_dim=hd)[0],
    )
attempt(
    "float32 inputs",
    "cast Q, K, V to bf16 or fp16 (attention runs in fp32 inside)",
    sdpa_graph(dtype=torch.float32)[0],
)
attempt(
    "Q with the head dim not contiguous (stride(-1) ≠ 1)",
    "make the head dim the innermost: .contiguous()",
    sdpa_graph(q_layout="D-major")[0],
)

# %%
# An architecture the feature needs
# ---------------------------------
# Some graphs only run on newer GPUs (MXFP8 and NVFP4 block scaling need SM 10.0). The
# guide's pages check the architecture first and name what is missing:
import textwrap

from cudnn_guide import CapabilityError

try:
    environment.require_sm((10, 0), "MXFP8 block-scaled matmul")
except CapabilityError as exc:
    print(textwrap.fill(f"CapabilityError: {exc}", 88))
    outcome(
        "feature needs a newer GPU",
        "fails with a message",
        "before declaring (the guide's check)",
        "CapabilityError",
        exc,
        "run it on a GPU with the SM it names",
    )
else:
    outcome(
        "feature needs a newer GPU", "runs", "—", "none", f"SM {env.sm} has it", "—"
    )

# %%
# A workspace that is too small
# -----------------------------
# A plan may need scratch memory; ``get_workspace_size()`` says how much, after
# ``build_plans``. The lesson's padded graph, executed with an empty workspace, then
# with the one it asked for:
needed = g.get_workspace_size()
try:
    empty = torch.empty(0, device="cuda", dtype=torch.uint8)
    g.execute({Q: qp, K: kp, V: vp, O: o}, empty, handle=handle)
    torch.cuda.synchronize()
except Exception as exc:
    print(textwrap.fill(f"{type(exc).__name__}: {exc}", 88))
    fix = f"allocate g.get_workspace_size() bytes ({needed} here)"
    error = type(exc).__name__
    outcome("workspace too small", "fails with a message", "execute", error, exc, fix)
else:
    print(f"no error with an empty workspace (the plan needs {needed} bytes)")
    what = f"the plan needs {needed} bytes"
    kind = "runs" if needed == 0 else "raises nothing"
    outcome("workspace too small", kind, "nowhere", "none", what, "—")
g.execute({Q: qp, K: kp, V: vp, O: o}, workspace, handle=handle)
checks = [check.check(o[..., :d], ref, name="with the workspace it asked for")]
print(checks[-1])

# %%
# Wrong strides in the variant pack
# ---------------------------------
# A graph is declared with fixed strides. Hand ``execute`` K in another layout (same
# shape, B×S×H×D memory instead of the declared B×H×S×D: heads and tokens swapped, the
# head dim still innermost) and look at what comes back: whether execute raises, and
# the output checked against the reference.
k_other_layout = kp.transpose(1, 2).contiguous().transpose(1, 2)  # B×S×H×D memory
check.poison(o)
try:
    g.execute({Q: qp, K: k_other_layout, V: vp, O: o}, workspace, handle=handle)
    torch.cuda.synchronize()
    raised = None
except Exception as exc:
    raised = exc
silent = check.compare(o[..., :d], ref, name="K bound with the wrong strides")
if raised is not None:
    print(textwrap.fill(f"execute raised {type(raised).__name__}: {raised}", 88))
    outcome(
        "variant pack with wrong strides",
        "fails with a message",
        "execute",
        type(raised).__name__,
        raised,
        "bind tensors with the declared strides",
    )
else:
    print(textwrap.fill(f"execute raised nothing; the output: {silent}", 88))
    outcome(
        "variant pack with wrong strides",
        "raises nothing, " + ("right output" if silent.passed else "wrong output"),
        "nowhere: execute raised nothing",
        "none",
        f"the output: {silent}",
        "bind tensors with the declared strides; check packs (BuiltGraph.check_pack)",
    )
# The guide's ``BuiltGraph`` checks every binding against the declaration first:
from cudnn_guide import InputError

built = graphs.adopt(g, handle, name="sdpa")
try:
    built.execute({Q: qp, K: k_other_layout, V: vp, O: o})
    guarded = "BuiltGraph.execute raised nothing"
except InputError as exc:
    guarded = f"InputError: {exc}"
print(textwrap.fill(guarded, 88))

# %%
# What happened to the cases above, counted from their outcomes: built or ran, failed
# (at the step named), or raised nothing.
from collections import Counter

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

kinds = Counter(
    o["outcome"]
    + (f" at {o['surfaces at']}" if o["outcome"].startswith("fails") else "")
    for o in outcomes
)
fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
ax.barh(list(kinds), list(kinds.values()))
ax.invert_yaxis()
ax.xaxis.set_major_locator(MaxNLocator(integer=True))
ax.set_xlabel("cases")
ax.set_title("what happened to each case tried on this page")
plt.show()

# %%
# Summary: each case, what happened, where, the fix
# -------------------------------------------------
import pandas as pd

from cudnn_guide.report import html_table

columns = ["case", "outcome", "surfaces at", "error", "message", "fix"]
html_table(pd.DataFrame(outcomes)[columns])

# %%
# Conclusions
# -----------
# Every count and sentence below is computed from the outcomes above.
from cudnn_guide.report.prose import Prose


def listed(rows):
    return ", ".join(r["case"] for r in rows)


failed = [o for o in outcomes if o["outcome"].startswith("fails")]
built_ok = [o for o in outcomes if o["outcome"] in ("builds", "runs")]
silent_rows = [o for o in outcomes if o["outcome"].startswith("raises nothing")]
steps = Counter(o["surfaces at"] for o in failed)
matmul_rows = [o for o in outcomes if o["case"] in matmuls]
sentences = [
    f"Of the {len(outcomes)} cases tried, {len(failed)} failed with a message, "
    f"{len(built_ok)} built or ran, and {len(silent_rows)} raised nothing at all.",
    "Where the failures surfaced: "
    + ("; ".join(f"{step}: {n}" for step, n in steps.most_common()) or "nowhere")
    + ". The step says what to change: validate (the graph itself), "
    "create_execution_plans (the heuristics), check_support or build_plans (no engine "
    "for it here, unless the message says a kernel failed to compile), execute (the "
    "buffers).",
    (
        "A failed compilation, not a missing engine: "
        + "; ".join(
            f"{case}: {bad} of the {tried} plan(s) build_plans tried failed to compile "
            "their kernel at run time (NVRTC; "
            "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)"
            for case, (bad, tried) in compiled.items()
        )
        + "."
        if compiled
        else "No plan failed to compile its kernel here."
    ),
    (
        f"Raised nothing although something was wrong: {listed(silent_rows)}. Only a "
        "check of the output or of the variant pack catches these."
        if silent_rows
        else "Every case that went wrong here raised an error."
    ),
    f"Of the {len(matmul_rows)} matmuls written by accident, "
    + "; ".join(
        f"{o['case']}: {o['outcome']}"
        + (f" at {o['surfaces at']}" if o["outcome"] != "builds" else "")
        for o in matmul_rows
    )
    + ".",
    '"No valid engine configs" (the heuristics proposed nothing) came from: '
    + (", ".join(no_configs) if no_configs else "none of the graphs tried here")
    + ".",
    f"The guide's BuiltGraph, handed the same wrongly strided K: {guarded}.",
]
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import keep

keep(outcomes=outcomes)
# sphinx_gallery_end_ignore

Prose(*sentences)
