"""
When cuDNN says no: the common failures, reproduced, with their fixes
=====================================================================

Every message on this page was produced by running the code above it on the GPU named in
the environment table. First a graph that cuDNN refuses, caught, and its fix. Then the
failures most reported against cuDNN Frontend and PyTorch's cuDNN attention, tried one
by one: "No valid engine configs", "No execution plans support the graph", head dims,
dtypes, layouts, workspaces, a tensor bound with other strides than declared, and which
libcudnn was loaded. For each case the page records what happened (it builds, it fails
with a message, or it raises nothing), the build step where a failure surfaced, cuDNN's
own words, and the fix.

What you will learn:

* to catch a refusal (``cudnn.cudnnGraphNotSupportedError``) and read which of the five
  build steps raised it: ``validate`` (the graph itself), ``create_execution_plans``
  (the heuristics), ``check_support`` and ``build_plans`` (the engines), ``execute``
  (the buffers);
* the tools that diagnose a failure: ``CUDNN_FRONTEND_LOG_INFO``,
  ``python -m cudnn.collect_env``, plan names, behaviour notes and plan filters;
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
# when no mode proposes one this graph can use, it raises "No valid engine configs". The
# same graph, with FALLBACK alone and with A then FALLBACK:
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
# listed something, but no listed engine runs this graph on this GPU. Frontend
# 1.32's open-source engines (``heur_mode.OPENSOURCE``, most of them written for SM
# 10.0), asked alone, on this GPU:
attempt(
    "heuristics: OPENSOURCE only",
    "add heur_mode.A (then FALLBACK): no open-source engine served this graph here",
    sdpa_graph()[0],
    modes=("OPENSOURCE",),
)

# %%
# Head dims, dtypes and layouts
# -----------------------------
# Which head dims, dtypes and layouts an engine serves depends on the GPU and the cuDNN
# version; the answers below hold for the GPU and cuDNN of the environment table.
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
# Most plans need scratch memory; ``get_workspace_size()`` says how much, after
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
from cudnn_guide import InputError, libcudnn

built = graphs.adopt(g, handle, name="sdpa")
try:
    built.execute({Q: qp, K: k_other_layout, V: vp, O: o})
    guarded = "BuiltGraph.execute raised nothing"
except InputError as exc:
    guarded = f"InputError: {exc}"
print(textwrap.fill(guarded, 88))

# %%
# Which libcudnn, which versions
# ------------------------------
# The frontend does not bundle libcudnn: it loads ``libcudnn.so.9`` from the
# nvidia-cudnn wheel that PyTorch brings, ``LD_LIBRARY_PATH`` or the system.
# ``python -m cudnn.collect_env`` prints what it found; the guide's
# ``libcudnn.find_libcudnn()`` explains its search:
import os
import subprocess
import sys

print(libcudnn.find_libcudnn().explain())
collect = subprocess.run(
    [sys.executable, "-m", "cudnn.collect_env"],
    capture_output=True,
    text=True,
    timeout=120,
)
words = ("cudnn", "torch", "cuda", "gpu", "driver")
lines = [
    ln
    for ln in (collect.stdout + collect.stderr).splitlines()
    if any(w in ln.lower() for w in words) and "brand=" not in ln
]
print("\n".join(textwrap.fill(ln, 88, subsequent_indent="    ") for ln in lines[:25]))

# %%
# Two ways to load the wrong libcudnn, each tried in a fresh process that imports the
# frontend, prints the backend version it loaded, then creates a handle. What each one
# did is read from what that process printed and its exit code; the running process
# loaded backend ``cudnn.backend_version()``.
import tempfile

PROBE = """
import cudnn
print("imported; backend version:", cudnn.backend_version())
maps = [ln.split()[-1] for ln in open("/proc/self/maps") if "/libcudnn" in ln]
main = [p for p in maps if "/libcudnn.so" in p] + maps + ["not mapped"]
print("libcudnn file:", main[0])
cudnn.create_handle()
print("a handle was created")
"""
ours = str(cudnn.backend_version())
our_file = libcudnn.loaded_libcudnn()


def dotted(v):
    """91400 -> 9.14.0 (backend_version is major·10000 + minor·100 + patch)."""
    return f"{int(v) // 10000}.{int(v) // 100 % 100}.{int(v) % 100}" if v else "?"


def probe(case, python, fix, hide="", **env_vars):
    """Run PROBE with ``python`` and ``env_vars``; keep what happened as an outcome."""
    run = subprocess.run(
        [python, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **env_vars),
    )
    text = run.stdout + run.stderr
    said = [
        ln
        for ln in (text.replace(hide, "<dir>") if hide else text).splitlines()
        if ln.strip()
    ]
    version = next(
        (ln.split(":")[-1].strip() for ln in said if "backend version" in ln), None
    )
    lib = next(
        (ln.split(":", 1)[1].strip() for ln in said if "libcudnn file:" in ln), "?"
    )
    last = said[-1] if said else "(nothing)"
    if run.returncode:
        where = "creating a handle" if version else "import cudnn"
        outcome(case, "fails with a message", where, last.split(":")[0], last, fix)
    elif version == ours:
        what = f"loaded libcudnn {dotted(version)} from {lib}, as here"
        outcome(case, "runs", "—", "none", what, "—")
    else:
        what = (
            f"loaded libcudnn {dotted(version)} from {lib}; this process runs "
            f"{dotted(ours)} from {our_file}"
        )
        kind = f"raises nothing, loads another libcudnn ({dotted(version)})"
        outcome(case, kind, "nowhere", "none", what, fix)
    print(f"{case}: exit code {run.returncode}; the last lines it printed:")
    print("\n".join(textwrap.fill(ln, 88, initial_indent=" " * 4) for ln in said[-4:]))


# %%
# A broken ``libcudnn.so.9`` earlier on ``LD_LIBRARY_PATH`` (an empty file standing in
# for a stale or half-copied library):
with tempfile.TemporaryDirectory() as stale:
    open(os.path.join(stale, "libcudnn.so.9"), "wb").close()
    path = stale + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")
    probe(
        "a broken libcudnn.so.9 first on LD_LIBRARY_PATH",
        sys.executable,
        "remove that directory from LD_LIBRARY_PATH "
        "(libcudnn.find_libcudnn().explain() names the file that would load)",
        hide=stale,
        LD_LIBRARY_PATH=path,
    )

# %%
# No ``nvidia-cudnn`` wheel where the frontend looks (a virtual environment on top of
# this Python, with no ``nvidia/cudnn`` in its own site-packages; the probe imports the
# frontend from this Python's) and nothing on ``LD_LIBRARY_PATH``: the frontend asks
# the dynamic linker, which may find none, or a system copy of another version.
import venv

with tempfile.TemporaryDirectory() as bare:
    venv.create(bare, system_site_packages=True, with_pip=False)
    probe(
        "no nvidia-cudnn wheel where the frontend looks",
        os.path.join(bare, "bin", "python"),
        "pip install nvidia-cudnn-cu13 (or torch, which brings it) into the same "
        "environment, or put libcudnn's directory on LD_LIBRARY_PATH",
        LD_LIBRARY_PATH="",
    )

# %%
# The frontend's log, captured
# ----------------------------
# ``CUDNN_FRONTEND_LOG_INFO=1`` with ``CUDNN_FRONTEND_LOG_FILE=stdout`` (or a path) logs
# each step: the graph as JSON, the checks, the heuristics' answer and the plan chosen.
# The lines below come from building a causal SDPA graph in a fresh process with logging
# on:
script = """
import torch, cudnn
h = cudnn.create_handle()
x = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)
g = cudnn.pygraph(handle=h, io_data_type=cudnn.data_type.BFLOAT16,
                  compute_data_type=cudnn.data_type.FLOAT)
Q, K, V = (g.tensor_like(x) for _ in range(3))
O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=0.125, generate_stats=False,
              diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
              diagonal_band_right_bound=0)
O.set_output(True)
g.build([cudnn.heur_mode.A])
"""
logged = subprocess.run(
    [sys.executable, "-c", script],
    capture_output=True,
    text=True,
    timeout=300,
    env=dict(os.environ, CUDNN_FRONTEND_LOG_INFO="1", CUDNN_FRONTEND_LOG_FILE="stdout"),
)
log_lines = [
    ln
    for ln in logged.stdout.splitlines()
    if ln.startswith("[cudnn_frontend]") and "Inferrencing" not in ln
]
print(
    "\n".join(textwrap.fill(ln, 88, subsequent_indent="    ") for ln in log_lines[:30])
)
version_notes = [ln for ln in log_lines if "version" in ln.lower()]

# %%
# Heuristic modes, plan names, notes and filters
# ----------------------------------------------
# ``heur_mode.A`` is the fast heuristic, ``B`` the slower more accurate one,
# ``FALLBACK`` the generic engines. Each plan has a name (engine and knobs), behaviour
# notes and a workspace; ``deselect_*`` filters drop plans before ``check_support``.
import time

import pandas as pd

from cudnn_guide.report import html_table

rows = []
for modes in (("A",), ("B",), ("A", "FALLBACK")):
    g2 = sdpa_graph()[0]
    calls = five_steps(g2, modes)
    t0 = time.perf_counter()
    for call in calls[:3]:
        call()
    plans = g2.get_execution_plan_count()
    names = [g2.get_plan_name_at_index(i) for i in range(plans)]
    notes = [g2.get_behavior_notes_for_plan_at_index(i) for i in range(plans)]
    for call in calls[3:]:
        call()
    rows.append(
        {
            "heur_mode": "+".join(modes),
            "plans": plans,
            "plan names": ", ".join(names),
            "behaviour notes": "; ".join(
                ", ".join(str(n).split(".")[-1] for n in ns) or "none" for ns in notes
            ),
            "build s (5 steps)": time.perf_counter() - t0,
            "workspace bytes": g2.get_workspace_size(),
        }
    )
html_table(
    pd.DataFrame(rows), {"build s (5 steps)": "{:.3f}", "workspace bytes": "{:.0f}"}
)

# %%
# The filters drop plans whose engine, notes or workspace you cannot accept, before
# ``check_support`` and ``build_plans`` pick one. Each row below declares the same
# graph, plans with ``A`` then ``FALLBACK``, applies one filter and builds. A filter
# that leaves no plan is itself a way to get "No execution plans support the graph":
first_plan = rows[-1]["plan names"].split(", ")[0]
note, behavior = cudnn.numerical_note, cudnn.behavior_note
filters = {
    "deselect_workspace_greater_than(0)": lambda g: g.deselect_workspace_greater_than(
        0
    ),
    f"deselect_engines([{first_plan}])": lambda g: g.deselect_engines([first_plan]),
    "deselect_numeric_notes([TENSOR_CORE])": lambda g: g.deselect_numeric_notes(
        [note.TENSOR_CORE]
    ),
    "deselect_numeric_notes([NONDETERMINISTIC])": lambda g: g.deselect_numeric_notes(
        [note.NONDETERMINISTIC]
    ),
    "deselect_behavior_notes([RUNTIME_COMPILATION])": lambda g: (
        g.deselect_behavior_notes([behavior.RUNTIME_COMPILATION])
    ),
    "select_behavior_notes([SUPPORTS_CUDA_GRAPH_NATIVE_API])": (
        lambda g: g.select_behavior_notes([behavior.SUPPORTS_CUDA_GRAPH_NATIVE_API])
    ),
}
filtered = []
for label, apply in filters.items():
    g3 = sdpa_graph()[0]
    calls = five_steps(g3)
    for call in calls[:3]:
        call()
    apply(g3)
    try:
        for call in calls[3:]:
            call()
        result = (
            f"builds; the built plan needs {g3.get_workspace_size()} bytes of workspace"
        )
    except Exception as exc:
        result = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    filtered.append({"filter (after create_execution_plans)": label, "result": result})
html_table(pd.DataFrame(filtered))

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 2.8), layout="constrained")
ax.barh(
    [f"{r['heur_mode']} ({r['plans']} plans)" for r in rows],
    [1e3 * r["build s (5 steps)"] for r in rows],
)
ax.set_xlabel("ms to build the causal SDPA graph, five steps (one build each)")
ax.set_title("what each heuristic mode costs at build time")
plt.show()

# %%
# Summary: each case, what happened, where, the fix
# -------------------------------------------------
columns = ["case", "outcome", "surfaces at", "error", "message", "fix"]
html_table(pd.DataFrame(outcomes)[columns])

# %%
# Conclusions
# -----------
# Every count and sentence below is computed from the outcomes above.
from collections import Counter

from cudnn_guide.report.prose import Prose


def listed(rows):
    return ", ".join(r["case"] for r in rows)


failed = [o for o in outcomes if o["outcome"].startswith("fails")]
built_ok = [o for o in outcomes if o["outcome"] in ("builds", "runs")]
silent_rows = [o for o in outcomes if o["outcome"].startswith("raises nothing")]
steps = Counter(o["surfaces at"] for o in failed)
matmul_rows = [o for o in outcomes if o["case"] in matmuls]
emptied = [
    f["filter (after create_execution_plans)"]
    for f in filtered
    if not f["result"].startswith("builds")
]
sentences = [
    f"Of the {len(outcomes)} cases tried, {len(failed)} failed with a message, "
    f"{len(built_ok)} built or ran, and {len(silent_rows)} raised nothing at all.",
    "Where the failures surfaced: "
    + ("; ".join(f"{step}: {n}" for step, n in steps.most_common()) or "nowhere")
    + ". The step says what to change: validate (the graph itself), "
    "create_execution_plans (the heuristics), check_support or build_plans (no engine "
    "for it here, unless the message says a kernel failed to compile), execute (the "
    "buffers), import or handle creation (the library).",
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
        "check of the output, of the variant pack or of the loaded library's version "
        "catches these."
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
    f"{len(emptied)} of the {len(filtered)} plan filters left no plan that builds"
    + (f": {', '.join(emptied)}." if emptied else "."),
    f"The guide's BuiltGraph, handed the same wrongly strided K: {guarded}.",
]
if version_notes:
    note_text = version_notes[0].split("INFO:", 1)[-1].strip()
    sentences.append(f"The frontend's log notes: {note_text}")
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import keep

keep(outcomes=outcomes)
# sphinx_gallery_end_ignore

Prose(*sentences)
