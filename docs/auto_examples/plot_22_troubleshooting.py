"""
When cuDNN says no: the common failures, reproduced, with their fixes
=====================================================================

Every message on this page was produced by running the code above it on the GPU named in the
stamp. The failures are the ones most reported against cuDNN Frontend and PyTorch's cuDNN
attention: "No valid engine configs", "No execution plans support the graph", head dims and
dtypes, layouts, workspaces, and which libcudnn was loaded. For each: where in the five build
steps it surfaces, cuDNN's own message, and the fix.

What you will learn: to read the build step a failure comes from; the tools that diagnose it
(``CUDNN_FRONTEND_LOG_INFO``, ``python -m cudnn.collect_env``, plan names, notes and filters);
and one failure cuDNN does **not** report, which you must check yourself.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
print(env.stamp())

# %%
# A graph to break
# ----------------
# ``attempt`` declares an SDPA graph with the given changes and runs the five build steps one
# by one, so each failure is reported with the step that raised it.
import cudnn
import torch

from cudnn_guide.graphs import attention_inputs
from cudnn_guide import check, graphs

handle = graphs.handle_for_current_device()
STEPS = ("validate", "build_operation_graph", "create_execution_plans", "check_support", "build_plans")
outcomes = []


def sdpa_graph(head_dim=128, dtype=torch.bfloat16, q_layout="BHSD"):
    """Declare causal SDPA on 2×8×1024×head_dim tensors; return the graph and its Q, K, V, O."""
    io = {torch.bfloat16: cudnn.data_type.BFLOAT16, torch.float16: cudnn.data_type.HALF,
          torch.float32: cudnn.data_type.FLOAT}[dtype]
    g = cudnn.pygraph(handle=handle, io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    x = torch.empty(2, 8, 1024, head_dim, device="cuda", dtype=dtype)
    q = x.transpose(-1, -2).contiguous().transpose(-1, -2) if q_layout == "D-major" else x
    Q, K, V = g.tensor_like(q, name="q"), g.tensor_like(x, name="k"), g.tensor_like(x, name="v")
    O, _ = g.sdpa(name="sdpa", q=Q, k=K, v=V, attn_scale=head_dim ** -0.5, generate_stats=False,
                  diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
    O.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
    return g, (Q, K, V, O)


def five_steps(g, modes=("A", "FALLBACK")):
    """The five build steps of ``g`` as callables, in order."""
    return (g.validate, g.build_operation_graph,
            lambda: g.create_execution_plans([getattr(cudnn.heur_mode, m) for m in modes]),
            g.check_support, g.build_plans)


def attempt(case, fix, g, modes=("A", "FALLBACK")):
    """Run the five steps of ``g``; print and keep where it failed and cuDNN's words."""
    for step, call in zip(STEPS, five_steps(g, modes)):
        try:
            call()
        except Exception as exc:
            message = " ".join(str(exc).split())[:300]
            outcomes.append({"case": case, "surfaces at": step, "error": type(exc).__name__, "message": message,
                             "fix": fix})
            print(f"{case}: {type(exc).__name__} at {step}:\n    {message}")
            return None
    outcomes.append({"case": case, "surfaces at": "—", "error": "none: it builds",
                     "message": f"{g.get_execution_plan_count()} plan(s), {g.get_plan_name_at_index(0)}", "fix": fix})
    print(f"{case}: builds ({g.get_execution_plan_count()} plan(s))")
    return g


# %%
# Heuristic modes, and where "No valid engine configs" comes from
# ---------------------------------------------------------------
# ``create_execution_plans`` asks the heuristics in the listed modes for engine configs; when no
# mode proposes one that this graph can use, it fails with "No valid engine configs". For this graph:
attempt("heuristics: FALLBACK only", "ask heur_mode.A first (FALLBACK after it, as a safety net)",
        sdpa_graph()[0], modes=("FALLBACK",))
attempt("heuristics: A, then FALLBACK", "—", sdpa_graph()[0])

# %%
# The heuristics list nothing when no engine of this cuDNN takes the graph's layout or dtype on
# this GPU. Three matmuls that users write by accident: A sliced so that neither of its two
# inner dims is contiguous, the same in float64, and int8 operands with an int32 result.


def matmul_graph(a, b, out_type, compute_type=cudnn.data_type.FLOAT):
    """Declare C = A @ B for torch tensors ``a`` and ``b`` as they are laid out."""
    g = cudnn.pygraph(handle=handle, intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=compute_type)
    A, B = g.tensor_like(a, name="a"), g.tensor_like(b, name="b")
    C = g.matmul(name="mm", A=A, B=B)
    C.set_output(True).set_data_type(out_type)
    return g


strided = torch.empty(4, 256, 1024, device="cuda", dtype=torch.bfloat16)[:, :, ::2]  # strides (262144, 1024, 2)
attempt("matmul, A with no contiguous inner dim", "make A contiguous in its last or second-last dim",
        matmul_graph(strided, torch.empty(4, 512, 256, device="cuda", dtype=torch.bfloat16),
                     cudnn.data_type.BFLOAT16))
attempt("matmul in float64", "compute in fp32 or below (or use torch.matmul for float64)",
        matmul_graph(*(torch.empty(4, 256, 256, device="cuda", dtype=torch.float64) for _ in range(2)),
                     cudnn.data_type.DOUBLE, cudnn.data_type.DOUBLE))
attempt("matmul int8 × int8 → int32", "use the layouts and types cuDNN's int8 engines take, or fp8/bf16",
        matmul_graph(*(torch.empty(4, 256, 256, device="cuda", dtype=torch.int8) for _ in range(2)),
                     cudnn.data_type.INT32, cudnn.data_type.INT32))
no_configs = [o["case"] for o in outcomes if "No valid engine configs" in o["message"]]

# %%
# "No execution plans support the graph" comes from ``check_support``: the heuristics listed
# something, but no listed engine can run this graph on this GPU. Asking only for frontend
# 1.32's open-source engines (``heur_mode.OPENSOURCE``, most of them written for SM 10.0) on
# this GPU reproduces it:
attempt("heuristics: OPENSOURCE only", "add heur_mode.A (then FALLBACK): the open-source engines here do not serve "
        "this graph on this GPU", sdpa_graph()[0], modes=("OPENSOURCE",))

# %%
# Head dims, dtypes and layouts
# -----------------------------
# The head dim must be a multiple of 8 (checked at validate); which head dims, dtypes and
# layouts an engine then serves depends on the GPU and the cuDNN version, so the answers below
# hold for the GPU and cuDNN in the stamp at the top. What they answer:
for d in (100, 256, 512, 1024):
    attempt(f"head dim {d}", "use a head dim that is a multiple of 8 and that cuDNN supports on this GPU, "
            "or pad the head dim", sdpa_graph(head_dim=d)[0])
attempt("float32 inputs", "cast Q, K, V to bf16 or fp16 (attention runs in fp32 inside)",
        sdpa_graph(dtype=torch.float32)[0])
attempt("Q with the head dim not contiguous (stride(-1) ≠ 1)", "make the head dim the innermost: .contiguous()",
        sdpa_graph(q_layout="D-major")[0])

# %%
# An architecture the feature needs
# ---------------------------------
# Some graphs only run on newer GPUs (MXFP8 and NVFP4 block scaling need SM 10.0). The guide's
# pages check the architecture first and name what is missing, instead of letting the build
# fail later:
from cudnn_guide import CapabilityError

try:
    environment.require_sm((10, 0), "MXFP8 block-scaled matmul")
except CapabilityError as exc:
    print("CapabilityError:", exc)
    outcomes.append({"case": "feature needs a newer GPU", "surfaces at": "before declaring",
                     "error": "CapabilityError", "message": str(exc), "fix": "run it on a GPU with the SM it names"})

# %%
# A workspace that is too small
# -----------------------------
# Most plans need scratch memory; ``get_workspace_size()`` says how much, after ``build_plans``.
g, (Q, K, V, O) = sdpa_graph()
for call in five_steps(g):
    call()
B, H, S, D = 2, 8, 1024, 128
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
o = torch.empty_like(q)
pack = {Q: q, K: k, V: v, O: o}
needed = g.get_workspace_size()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
try:
    g.execute(pack, torch.empty(0, device="cuda", dtype=torch.uint8), handle=handle)
    torch.cuda.synchronize()
    print(f"no error with an empty workspace (the plan needs {needed} bytes)")
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")
    outcomes.append({"case": "workspace too small", "surfaces at": "execute", "error": type(exc).__name__,
                     "message": str(exc)[:300], "fix": f"allocate g.get_workspace_size() bytes ({needed} here)"})
g.execute(pack, torch.empty(max(needed, 1), device="cuda", dtype=torch.uint8), handle=handle)
reference = attention_inputs.reference(q, k, v, visible=attention_inputs.band(S, S, device="cuda"))
checks = [check.check(o, reference, name="with the workspace it asked for")]
print(checks[-1])

# %%
# Wrong strides in the variant pack: the failure cuDNN does not report
# --------------------------------------------------------------------
# A graph is declared with fixed strides. Hand ``execute`` K in another layout (same shape,
# S-major memory instead of D-major) and look at what comes back: no exception, and the
# output checked against the reference.
k_other_layout = k.transpose(1, 2).contiguous().transpose(1, 2)  # B×H×S×D, but S-major in memory
check.poison(o)
g.execute({Q: q, K: k_other_layout, V: v, O: o}, torch.empty(max(needed, 1), device="cuda", dtype=torch.uint8),
          handle=handle)
torch.cuda.synchronize()
silent = check.compare(o, reference, name="K bound with the wrong strides")
print(f"execute raised nothing; the output: {silent}")
# The guide's ``BuiltGraph`` checks every binding against the declaration before executing:
from cudnn_guide import InputError, libcudnn

built = graphs.adopt(g, handle, name="sdpa")
try:
    built.execute({Q: q, K: k_other_layout, V: v, O: o})
except InputError as exc:
    print("InputError:", exc)
    outcomes.append({"case": "variant pack with wrong strides", "surfaces at": "not at all" if not silent.passed
                     else "not at all (the output was right)", "error": "none", "message": f"the output: {silent}",
                     "fix": "bind tensors with the declared strides; check packs (graphs.BuiltGraph.check_pack)"})

# %%
# Which libcudnn, which versions
# ------------------------------
# The frontend does not bundle libcudnn: it loads ``libcudnn.so.9`` from the nvidia-cudnn wheel
# that PyTorch brings, ``LD_LIBRARY_PATH`` or the system. ``python -m cudnn.collect_env`` prints
# what it found; the guide's ``libcudnn.find_libcudnn()`` explains its search:
import os
import subprocess
import sys

print(libcudnn.find_libcudnn().explain())
collect = subprocess.run([sys.executable, "-m", "cudnn.collect_env"], capture_output=True, text=True, timeout=120)
lines = [ln for ln in (collect.stdout + collect.stderr).splitlines()
         if any(w in ln.lower() for w in ("cudnn", "torch", "cuda", "gpu", "driver")) and "brand=" not in ln]
print("\n".join(lines[:25]))

# %%
# A broken ``libcudnn.so.9`` earlier on ``LD_LIBRARY_PATH`` wins over the good one: the
# frontend searches that path first. Reproduced in a fresh process, with an empty file standing
# in for a stale or half-copied library:
import tempfile

with tempfile.TemporaryDirectory() as stale:
    open(os.path.join(stale, "libcudnn.so.9"), "wb").close()
    broken = subprocess.run([sys.executable, "-c", "import cudnn; print(cudnn.backend_version())"],
                            capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, LD_LIBRARY_PATH=stale + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")))
last = (broken.stderr.strip().splitlines() or ["(no error)"])[-1].replace(stale, "<stale dir>")
print(f"import cudnn with the stale library first: exit code {broken.returncode}\n    {last[:300]}")
outcomes.append({"case": "a broken libcudnn.so.9 first on LD_LIBRARY_PATH", "surfaces at": "import cudnn",
                 "error": last.split(":")[0] if broken.returncode else "none", "message": last[:300],
                 "fix": "remove that directory from LD_LIBRARY_PATH (libcudnn.find_libcudnn().explain() names "
                        "the file that would load)"})

# %%
# Without the ``nvidia-cudnn`` wheel where the frontend looks (a virtual environment on top of
# this Python: torch and the frontend import, its site-packages has no ``nvidia/cudnn``) and
# nothing on ``LD_LIBRARY_PATH``, the frontend asks the dynamic linker, which may find none, or a
# system copy of another version. Compare the backend version below with the stamp's cuDNN:
import venv

probe = """
import cudnn
print("imported; backend version:", cudnn.backend_version())
cudnn.create_handle()
print("a handle was created")
"""
with tempfile.TemporaryDirectory() as bare:
    venv.create(bare, system_site_packages=True, with_pip=False)
    absent = subprocess.run([os.path.join(bare, "bin", "python"), "-c", probe], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ, LD_LIBRARY_PATH=""))
said = [ln for ln in (absent.stdout + absent.stderr).strip().splitlines() if ln.strip()]
print(f"exit code {absent.returncode}; the last lines it printed:")
print("\n".join("    " + ln[:240] for ln in said[-4:]))
outcomes.append({"case": "no libcudnn where the frontend looks", "surfaces at": "import cudnn / first call",
                 "error": said[-1].split(":")[0] if absent.returncode else "none",
                 "message": (said[-1] if said else "(nothing)")[:300],
                 "fix": "pip install nvidia-cudnn-cu13 (or torch, which brings it) into the same environment, or "
                        "put libcudnn's directory on LD_LIBRARY_PATH"})

# %%
# The frontend's log, captured
# ----------------------------
# ``CUDNN_FRONTEND_LOG_INFO=1`` with ``CUDNN_FRONTEND_LOG_FILE=stdout`` (or a path) logs each
# step: the graph as JSON, the checks, the heuristics' answer and the plan chosen. The lines
# below come from building the causal SDPA graph in a fresh process with logging on:
script = """
import torch, cudnn
h = cudnn.create_handle()
x = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)
g = cudnn.pygraph(handle=h, io_data_type=cudnn.data_type.BFLOAT16, compute_data_type=cudnn.data_type.FLOAT)
Q, K, V = (g.tensor_like(x) for _ in range(3))
O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=0.125, generate_stats=False,
              diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
O.set_output(True)
g.build([cudnn.heur_mode.A])
"""
logged = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, CUDNN_FRONTEND_LOG_INFO="1", CUDNN_FRONTEND_LOG_FILE="stdout"))
log_lines = [ln for ln in logged.stdout.splitlines() if ln.startswith("[cudnn_frontend]")]
print("\n".join(ln[:200] for ln in log_lines[:30]))
version_notes = [ln for ln in log_lines if "version" in ln.lower()]

# %%
# Heuristic modes, plan names, notes and filters
# ----------------------------------------------
# ``heur_mode.A`` is the fast heuristic, ``B`` the slower more accurate one, ``FALLBACK`` the
# generic engines. Each plan has a name (engine and knobs), behaviour notes and a workspace;
# ``deselect_*`` filters drop plans before ``check_support``.
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
    rows.append({"heur_mode": "+".join(modes), "plans": plans, "plan names": ", ".join(names),
                 "behaviour notes": "; ".join(", ".join(str(n).split(".")[-1] for n in ns) or "none" for ns in notes),
                 "build s (5 steps)": time.perf_counter() - t0, "workspace bytes": g2.get_workspace_size()})
html_table(pd.DataFrame(rows), {"build s (5 steps)": "{:.3f}", "workspace bytes": "{:.0f}"})

# %%
# The filters drop plans whose engine, notes or workspace you cannot accept, before
# ``check_support`` and ``build_plans`` pick one. Each row below declares the same graph, plans
# with ``A`` then ``FALLBACK``, applies one filter and builds. A filter that leaves no plan is
# itself a way to get "No execution plans support the graph":
first_plan = rows[-1]["plan names"].split(", ")[0]
note = cudnn.numerical_note
filters = {
    "deselect_workspace_greater_than(0)": lambda g: g.deselect_workspace_greater_than(0),
    f"deselect_engines(['{first_plan}'])": lambda g: g.deselect_engines([first_plan]),
    "deselect_numeric_notes([TENSOR_CORE])": lambda g: g.deselect_numeric_notes([note.TENSOR_CORE]),
    "deselect_numeric_notes([NONDETERMINISTIC])": lambda g: g.deselect_numeric_notes([note.NONDETERMINISTIC]),
    "deselect_behavior_notes([RUNTIME_COMPILATION])":
        lambda g: g.deselect_behavior_notes([cudnn.behavior_note.RUNTIME_COMPILATION]),
    "select_behavior_notes([SUPPORTS_CUDA_GRAPH_NATIVE_API])":
        lambda g: g.select_behavior_notes([cudnn.behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API]),
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
        result = f"builds; the built plan needs {g3.get_workspace_size()} bytes of workspace"
    except Exception as exc:
        result = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    filtered.append({"filter (after create_execution_plans)": label, "result": result})
html_table(pd.DataFrame(filtered))

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 2.8), layout="constrained")
ax.barh([f"{r['heur_mode']} ({r['plans']} plans)" for r in rows], [1e3 * r["build s (5 steps)"] for r in rows])
ax.set_xlabel("ms to build the causal SDPA graph, five steps (one build each)")
ax.set_title("what each heuristic mode costs at build time")
plt.show()

# %%
# Summary: failure, where it surfaces, the fix
# --------------------------------------------
html_table(pd.DataFrame(outcomes)[["case", "surfaces at", "error", "message", "fix"]])

# %%
# Takeaways
# ---------
refused = [o for o in outcomes if o["error"] not in ("none: it builds",)]
print(f"* {len(refused)} of the {len(outcomes)} cases tried fail with a message; the step in which each failure "
      "surfaces tells what to change: validate (the graph itself), create_execution_plans (the heuristics "
      "found nothing), check_support / build_plans (no engine for it here), execute (the bindings).")
print(f"* A binding with other strides than declared raised nothing in execute; its output "
      f"{'was wrong' if not silent.passed else 'was right'} ({silent.rel_error:.2g} relative error). "
      "Check the variant pack against the declaration.")
print("* \"No valid engine configs\" (the heuristics proposed nothing) came from: "
      + (", ".join(no_configs) if no_configs else "none of the graphs tried here"))
emptied = [f["filter (after create_execution_plans)"] for f in filtered if not f["result"].startswith("builds")]
print(f"* {len(emptied)} of the {len(filtered)} filters left no plan that builds"
      + (f": {', '.join(emptied)}" if emptied else ""))
if version_notes:
    print(f"* The frontend's log notes: {version_notes[0][len('[cudnn_frontend] INFO: '):][:160]}")

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import keep
keep(outcomes=outcomes)
# sphinx_gallery_end_ignore
