"""
Which libcudnn, what the frontend logs, and which plan it picks
===============================================================

You print the version of the libcudnn the frontend loaded, build causal attention, list
the execution plans that the heuristics propose for it in mode ``A`` and in mode
``FALLBACK`` (each plan's name and behaviour notes), then run the graph and check it
against PyTorch. Then the page looks at the machinery behind those plans: where the
frontend finds libcudnn and what happens when it finds the wrong one, what its log
says while it builds, what each heuristic mode lists and costs, and how the plan
filters narrow the list. The failures a graph itself can meet are on the
:ref:`troubleshooting page <sphx_glr_auto_examples_plot_22_troubleshooting.py>`.

What you will learn:

* to read which libcudnn is loaded (``cudnn.backend_version()``), and how
  ``python -m cudnn.collect_env`` and the guide's ``libcudnn.find_libcudnn()`` say
  where it came from;
* two ways to load the wrong libcudnn, each tried in a fresh process, and how to tell
  what each one loaded;
* to capture the frontend's log (``CUDNN_FRONTEND_LOG_INFO``,
  ``CUDNN_FRONTEND_LOG_FILE``);
* what the heuristic modes ``A``, ``B`` and ``FALLBACK`` list, the plans' names and
  behaviour notes, and the ``deselect_*``/``select_*`` filters that drop plans before
  ``check_support``.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: the plans each heuristic mode lists, and the libcudnn behind them
# -----------------------------------------------------------------------------
# The frontend loads libcudnn when it is imported; ``cudnn.backend_version()`` says
# which (major·10000 + minor·100 + patch). Causal attention on B×H×S×D bf16 tensors is
# declared once per heuristic mode, because a graph plans only once: mode ``A`` (the
# fast heuristic), then ``FALLBACK`` (the generic engines). Each lists its execution
# plans, each plan with a name (engine and knobs) and behaviour notes.
import cudnn
import torch

print(f"libcudnn {cudnn.backend_version_string()} ({cudnn.backend_version()})")
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
b, h, s, d = 2, 8, 1024, 128  # batch, heads, tokens, head dim: B×H×S×D
q, k, v = torch.randn(3, b, h, s, d, device="cuda", dtype=torch.bfloat16)
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT  # causal: query i sees the keys j <= i
CAUSAL = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)


def causal_attention_graph(modes):
    """Declare causal attention on q, k, v; list the plans of the heuristic modes."""
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
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(modes)
    return g, (Q, K, V, O)


for mode in (cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK):
    g, _ = causal_attention_graph([mode])
    count = g.get_execution_plan_count()
    print(f"{mode}: {count} plan(s)")
    for i in range(count):
        notes = g.get_behavior_notes_for_plan_at_index(i)
        notes = ", ".join(str(n).split(".")[-1] for n in notes) or "no notes"
        print(f"    [{i}] {g.get_plan_name_at_index(i)} ({notes})")

# %%
# Asked for ``A`` then ``FALLBACK``, the heuristics list the plans of both modes;
# ``check_support`` and ``build_plans`` then pick one and build it. The graph runs, and
# its output is checked against PyTorch in fp32.
g, (Q, K, V, O) = causal_attention_graph([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
print(f"A, then FALLBACK: {g.get_execution_plan_count()} plan(s)")
g.check_support()
g.build_plans()
o = torch.empty_like(q)
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute({Q: q, K: k, V: v, O: o}, workspace, handle=handle)
ref = torch.nn.functional.scaled_dot_product_attention(
    q.float(), k.float(), v.float(), is_causal=True
)
torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)
print(f"max |error| against PyTorch in fp32: {(o.float() - ref).abs().max():.1e}")

# %%
# Measuring which libcudnn loads, what the log says and what each mode lists
# --------------------------------------------------------------------------
# First the guide's check of the lesson's graph: its output filled with NaN, the graph
# run again, and the output compared with the fp32 reference by relative norm. The
# cells below use :mod:`cudnn_guide.studies.failures`: ``cases.probe`` keeps, for each
# case, what happened, where, the message whole and the fix; ``failures.sdpa_graph``
# declares the lesson's causal attention (2×8×1024×128, bf16) afresh, and
# ``failures.timed_build`` and ``failures.filtered_build`` run its five build steps
# with the heuristic modes given. The probes, the log's script, the filters' rows and
# the conclusions are in :mod:`cudnn_guide.studies.libcudnn_and_logs`.
from cudnn_guide import check, libcudnn
from cudnn_guide.studies import failures, libcudnn_and_logs

check.poison(o)
g.execute({Q: q, K: k, V: v, O: o}, workspace, handle=handle)
print(check.check(o, ref, name="causal SDPA, plans of A then FALLBACK"))
cases = failures.Cases()
outcomes = cases.rows  # one row per case, keyed by failures.COLUMNS

# %%
# Which libcudnn, which versions
# ------------------------------
# The frontend does not bundle libcudnn: it loads ``libcudnn.so.9`` from the first of
# ``LD_LIBRARY_PATH``, the nvidia-cudnn wheel that PyTorch brings, and the system.
# ``python -m cudnn.collect_env`` prints what it found (its lines on cuDNN, torch, CUDA,
# the GPU and the driver: ``libcudnn_and_logs.collect_env``); the guide's
# ``libcudnn.find_libcudnn()`` explains its search:
fill = libcudnn_and_logs.fill  # wraps a line at 88 columns

print(libcudnn.find_libcudnn().explain())
print("\n".join(fill(ln) for ln in libcudnn_and_logs.collect_env(most=40)))

# %%
# Two ways to load the wrong libcudnn, each tried in a fresh process that imports the
# frontend, prints the backend version it loaded, then creates a handle
# (``failures.PROBE``). What each one did is read from what that process printed and
# its exit code, and compared with this process's own ``cudnn.backend_version()``.
ours = str(cudnn.backend_version())
our_file = libcudnn.loaded_libcudnn()

# %%
# A broken ``libcudnn.so.9`` earlier on ``LD_LIBRARY_PATH`` (an empty file standing in
# for a stale or half-copied library, in a temporary directory shown as ``<dir>``):
libcudnn_and_logs.probe_broken_copy(cases, ours=ours, our_file=our_file)

# %%
# No ``nvidia-cudnn`` wheel where the frontend looks (a virtual environment on top of
# this Python, with no ``nvidia/cudnn`` in its own site-packages; the probe imports the
# frontend from this Python's) and nothing on ``LD_LIBRARY_PATH``: the frontend asks
# the dynamic linker, which may find none, or a system copy of another version.
libcudnn_and_logs.probe_no_wheel(cases, ours=ours, our_file=our_file)

# %%
# The frontend's log, captured
# ----------------------------
# ``CUDNN_FRONTEND_LOG_INFO=1`` with ``CUDNN_FRONTEND_LOG_FILE=stdout`` (or a path) logs
# each step, from the checks to the heuristics' answer and the plan chosen. Below, from
# building a causal SDPA graph (1×2×128×64 bf16, heuristics A:
# ``libcudnn_and_logs.LOG_SCRIPT``) in a fresh process with logging on
# (``failures.frontend_log``): the log's first 12 lines (validation, then the op graph
# begins), then every later line that names the heuristics, an engine, a plan or an
# execution (at most 20), banners' runs of ``=`` shortened (``failures.log_excerpt``).
log_lines = failures.frontend_log(libcudnn_and_logs.LOG_SCRIPT)
shown = failures.log_excerpt(log_lines, head=12, most=20)
for ln in shown:
    print(fill(ln))
print(f"({len(log_lines)} log lines in all; {len(log_lines) - len(shown)} not shown)")

# %%
# Heuristic modes, plan names, notes and filters
# ----------------------------------------------
# ``heur_mode.A`` is the fast heuristic, ``B`` one meant to rank more accurately at more
# CPU time (it may list the same plans), ``FALLBACK`` the generic engines. Each time
# below is of a single build, its five steps (``failures.timed_build``): a few ms
# between modes is not a measured difference.
import pandas as pd

from cudnn_guide.report import html_table

rows = [
    failures.timed_build(failures.sdpa_graph(handle)[0], modes)
    for modes in (("A",), ("B",), ("A", "FALLBACK"))
]
html_table(
    pd.DataFrame(rows), {"build s (5 steps)": "{:.3f}", "workspace bytes": "{:.0f}"}
)

# %%
# The filters drop plans whose engine, notes or workspace you cannot accept, before
# ``check_support`` and ``build_plans`` pick one. Each row below declares the same
# graph, plans with ``A`` then ``FALLBACK``, applies one filter and builds
# (``libcudnn_and_logs.filter_rows``). A filter that leaves no plan is itself a way to
# get "No execution plans support the graph":
first_plan = rows[-1]["plan names"].split(", ")[0]
note, behavior = cudnn.numerical_note, cudnn.behavior_note
filters = [  # the graph's filter method, and its argument
    ("deselect_workspace_greater_than", 0),
    ("deselect_engines", [first_plan]),
    ("deselect_numeric_notes", [note.TENSOR_CORE]),
    ("deselect_numeric_notes", [note.NONDETERMINISTIC]),
    ("deselect_behavior_notes", [behavior.RUNTIME_COMPILATION]),
    ("select_behavior_notes", [behavior.SUPPORTS_CUDA_GRAPH_NATIVE_API]),
]
filtered = libcudnn_and_logs.filter_rows(handle, filters)
html_table(pd.DataFrame(filtered))

# %%
import matplotlib.pyplot as plt

failures.plot_build_ms(rows, "what each heuristic mode costs at build time")
plt.show()

# %%
# Summary: each case, what happened, where, the fix
# -------------------------------------------------
cases.table()

# %%
# Conclusions
# -----------
# Every count and sentence below is computed from the outcomes, the log and the tables
# above (``libcudnn_and_logs.conclusions``).
from cudnn_guide.report.prose import Prose

sentences = libcudnn_and_logs.conclusions(
    cases,
    ours=ours,
    our_file=our_file,
    rows=rows,
    filtered=filtered,
    log_lines=log_lines,
)
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import keep

keep(outcomes=outcomes)
# sphinx_gallery_end_ignore

Prose(*sentences)
