"""
When cuDNN says no: the common failures, reproduced, with their fixes
=====================================================================

Every message on this page was produced by running the code above it on the GPU named in
the environment table. First a graph that cuDNN refuses, caught, and its fix. Then
common failures one by one: where "No valid engine configs" would come from, "No
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
  (the engines); ``execute`` raises a ``ValueError`` instead (the buffers);
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
# The cases are tried with :mod:`cudnn_guide.studies.failures`. ``cases.attempt`` runs
# the five build steps of a graph one by one and keeps, for each case, what happened:
# the step that raised, cuDNN's words and the fix, or the plans it built.
# ``failures.sdpa_graph`` declares causal attention on 2×8×1024×head-dim tensors with
# the given head dim, dtype or Q layout (by default 128, bf16 and B×H×S×D). The cases
# that execute a graph, and the conclusions, are in
# :mod:`cudnn_guide.studies.troubleshooting`.
from cudnn_guide import check, graphs
from cudnn_guide.studies import failures, troubleshooting

cases = failures.Cases()  # cases.compiled: case -> (plans not compiled, plans tried)
outcomes = cases.rows  # one row per case, keyed by failures.COLUMNS

# %%
# The lesson's two cases come first: the head dim cuDNN refused, and the padded graph
# the lesson built.
cases.attempt(
    f"head dim {d}",
    "pad the head dim with zeros to a multiple of 8 (or to 128)",
    causal_attention_graph(q, k, v)[0],
)
listing = f"{g.get_execution_plan_count()} plan(s), first {g.get_plan_name_at_index(0)}"
cases.add(f"head dim {d}, zero-padded to {dp}", "builds", "—", "none", listing, "—")

# %%
# Heuristic modes, and where "No valid engine configs" would come from
# --------------------------------------------------------------------
# ``create_execution_plans`` asks the heuristics in the listed modes for engine configs;
# when no mode proposes one this graph can use, it raises "No valid engine configs"
# (the plans each mode lists, by name, are on the
# :ref:`libcudnn and logs page <sphx_glr_auto_examples_plot_29_libcudnn_and_logs.py>`).
# The same graph, with FALLBACK alone and with A then FALLBACK:
cases.attempt(
    "heuristics: FALLBACK only",
    "ask heur_mode.A first (FALLBACK after it, as a safety net)",
    failures.sdpa_graph(handle)[0],
    modes=("FALLBACK",),
)
_ = cases.attempt("heuristics: A, then FALLBACK", "—", failures.sdpa_graph(handle)[0])

# %%
# Three matmuls that users write by accident: A sliced so that neither of its two inner
# dims is contiguous, the same product in float64, and int8 operands with an int32
# result (``failures.matmul_graph`` declares C = A @ B for the tensors as they are laid
# out). Which step, if any, refuses each one on this GPU and this cuDNN is printed.
matmuls = troubleshooting.accidental_matmuls()  # case: (fix, (A, B, C's type, ...))
for case, (fix, operands) in matmuls.items():
    cases.attempt(case, fix, failures.matmul_graph(handle, *operands))
no_configs = [o["case"] for o in outcomes if "No valid engine configs" in o["message"]]

# %%
# "No execution plans support the graph" is ``check_support``'s message: the heuristics
# listed something, but no listed engine runs this graph on this GPU. Frontend 1.32's
# open-source engines (``heur_mode.OPENSOURCE``), asked alone for this head dim 128
# graph (on SM 9.0 their SDPA forward engine takes head dims above 256, up to 512):
_ = cases.attempt(
    "heuristics: OPENSOURCE only",
    "add heur_mode.A (then FALLBACK): no open-source engine served this graph here",
    failures.sdpa_graph(handle)[0],
    modes=("OPENSOURCE",),
)

# %%
# Head dims, dtypes and layouts
# -----------------------------
# What an engine serves depends on the GPU and cuDNN of the environment table. A line
# "SdpaFwdDslSm90 is an experimental API" is the SM 9.0 open-source engine's notice:
fix = "use a head dim cuDNN supports on this GPU, or pad the head dim"
for hd in (256, 512, 1024):
    cases.attempt(f"head dim {hd}", fix, failures.sdpa_graph(handle, head_dim=hd)[0])
cases.attempt(
    "float32 inputs",
    "cast Q, K, V to bf16 or fp16 (attention runs in fp32 inside)",
    failures.sdpa_graph(handle, dtype=torch.float32)[0],
)
_ = cases.attempt(
    "Q with the head dim not contiguous (stride(-1) ≠ 1)",
    "make the head dim the innermost: .contiguous()",
    failures.sdpa_graph(handle, q_layout="D-major")[0],
)

# %%
# An architecture the feature needs
# ---------------------------------
# Some graphs only run on newer GPUs (MXFP8 and NVFP4 block scaling need SM 10.0). The
# guide's pages check the architecture first and name what is missing (``cases.raises``
# prints the error a call raises and keeps it as the case's outcome):
from cudnn_guide import CapabilityError

case, fix = "feature needs a newer GPU", "run it on a GPU with the SM it names"
needs = lambda: environment.require_sm((10, 0), "MXFP8 block-scaled matmul")
where = "before declaring (the guide's check)"
if not cases.raises(case, where, fix, needs, catch=CapabilityError):
    cases.add(case, "runs", "—", "none", f"SM {env.sm} has it", "—")

# %%
# A workspace that is too small
# -----------------------------
# A plan may need scratch memory; ``get_workspace_size()`` says how much, after
# ``build_plans``. The lesson's padded graph, executed with an empty workspace
# (``troubleshooting.try_empty_workspace`` keeps what happened), then with the one it
# asked for:
empty = torch.empty(0, device="cuda", dtype=torch.uint8)
no_room = lambda: g.execute({Q: qp, K: kp, V: vp, O: o}, empty, handle=handle)
troubleshooting.try_empty_workspace(cases, no_room, needed=g.get_workspace_size())
g.execute({Q: qp, K: kp, V: vp, O: o}, workspace, handle=handle)
checks = [check.check(o[..., :d], ref, name="with the workspace it asked for")]
print(checks[-1])

# %%
# Wrong strides in the variant pack
# ---------------------------------
# A graph is declared with fixed strides. Hand ``execute`` K in another layout (same
# shape, B×S×H×D memory instead of the declared B×H×S×D: heads and tokens swapped, the
# head dim still innermost) and look at what comes back: whether execute raises, and
# the output checked against the reference (``troubleshooting.try_wrong_strides``).
k_other_layout = kp.transpose(1, 2).contiguous().transpose(1, 2)  # B×S×H×D memory
check.poison(o)
wrong_pack = {Q: qp, K: k_other_layout, V: vp, O: o}
wrong = lambda: g.execute(wrong_pack, workspace, handle=handle)
troubleshooting.try_wrong_strides(cases, wrong, o[..., :d], ref)
# The guide's ``BuiltGraph`` checks every binding against the declaration first
# (``try_guarded`` prints what its ``execute`` raised, or that it raised nothing):
built = graphs.adopt(g, handle, name="sdpa")
guarded = troubleshooting.try_guarded(built, wrong_pack)

# %%
# What happened to the cases above, counted from their outcomes: built or ran, failed
# (at the step named), or raised nothing.
import matplotlib.pyplot as plt

failures.plot_kinds(cases.kinds(), "what happened to each case tried on this page")
plt.show()

# %%
# Summary: each case, what happened, where, the fix
# -------------------------------------------------
cases.table()

# %%
# Conclusions
# -----------
# Every count and sentence below is computed from the outcomes above
# (``troubleshooting.conclusions``).
from cudnn_guide.report.prose import Prose

sentences = troubleshooting.conclusions(
    cases, matmuls=matmuls, no_configs=no_configs, guarded=guarded
)
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import keep

keep(outcomes=outcomes)
# sphinx_gallery_end_ignore

Prose(*sentences)
