"""
The first call: what building an attention graph costs
======================================================

You build the forward of one Llama 3.1 attention layer (batch 2, 4096 tokens, 64
query heads sharing 8 key/value heads, head dim 128, causal, bf16) in cuDNN one build
step at a time, timing each step with the host clock, then run it twice and check it
against PyTorch. Then the page measures what the first call of each backend costs a
fresh Python process: cuDNN's plan build, and FlashAttention-4's compile with the CuTe
DSL; and whether PyTorch's own SDPA can route to FlashAttention-4.

The same layer, timed against FlashAttention-4 at every one of NVIDIA's shapes, is on
the :ref:`vendor comparison page <sphx_glr_auto_examples_plot_26_vendor_llama_fa4.py>`;
how a saved plan spares a new process the build is on the
:ref:`plan serialization page <sphx_glr_auto_examples_plot_06_serialization.py>`.

What you will learn:

* the five build steps of a graph (``validate``, ``build_operation_graph``,
  ``create_execution_plans``, ``check_support``, ``build_plans``) and which of them
  holds the time of a first call;
* how the first ``execute`` of a freshly built plan compares with the second;
* what a fresh process pays before its first attention output with cuDNN and with
  FlashAttention-4: starting torch and CUDA, the import, the build or the compile;
* whether PyTorch's SDPA routes to FlashAttention-4 with the versions installed here.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((9, 0), "FlashAttention-4 (Hopper or newer)")
env = environment.collect()
env

# %%
# The lesson: the Llama 3.1 attention forward, one timed build step at a time
# ---------------------------------------------------------------------------
# The tensors are kept ``B×S×H×D`` (tokens outer, heads inner), as FlashAttention-4
# takes them, and handed to cuDNN as ``B×H×S×D`` with ``transpose(1, 2)``: no copy. K
# and V have 8 heads for Q's 64; cuDNN reads the head ratio from the shapes. Declaring
# the graph only records it; the five build steps do the work, each timed here:
# ``validate`` checks the declaration, ``build_operation_graph`` lowers it to the cuDNN
# library's graph, ``create_execution_plans`` ranks candidate plans (heuristics A),
# ``check_support`` asks whether the chosen one runs here, and ``build_plans`` builds
# the first that does. The first ``execute`` is timed too, then the second, each up to
# the GPU's finish. At 4096 tokens PyTorch's fp32 reference, which holds all
# ``B·H·S²`` scores (8 GiB), still fits the GPU.
import time

import cudnn
import torch

B, S, H, HKV, D = 2, 4096, 64, 8, 128
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)
seconds = {}  # host seconds of each timed step, in order


def timed(step, call):
    start = time.perf_counter()
    call()
    torch.cuda.synchronize()  # and the GPU work the step launched, if any
    seconds[step] = time.perf_counter() - start
    print(f"{step:>22}: {1e3 * seconds[step]:9.2f} ms")


def bhsd(t):
    return t.transpose(1, 2)  # the same memory, seen as B×H×S×D


torch.manual_seed(0)
q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)  # B×S×H×D
k = torch.randn(B, S, HKV, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, S, HKV, D, device="cuda", dtype=torch.bfloat16)
o = torch.empty_like(q)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
g = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
Q = g.tensor_like(bhsd(q))
K = g.tensor_like(bhsd(k))
V = g.tensor_like(bhsd(v))
O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, **causal)
O.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
O.set_dim(list(bhsd(o).shape))
O.set_stride(list(bhsd(o).stride()))

timed("validate", lambda: g.validate())
timed("build_operation_graph", lambda: g.build_operation_graph())
timed("create_execution_plans", lambda: g.create_execution_plans([cudnn.heur_mode.A]))
timed("check_support", lambda: g.check_support())
timed("build_plans", lambda: g.build_plans())
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
pack = {Q: bhsd(q), K: bhsd(k), V: bhsd(v), O: bhsd(o)}
timed("first execute", lambda: g.execute(pack, workspace, handle=handle))
timed("second execute", lambda: g.execute(pack, workspace, handle=handle))

# The reference: PyTorch's attention on fp32 copies (``enable_gqa`` repeats the 8 K/V
# heads for the 64 query heads).
ref = torch.nn.functional.scaled_dot_product_attention(
    *(bhsd(t).float() for t in (q, k, v)), is_causal=True, enable_gqa=True
)
torch.testing.assert_close(bhsd(o).float(), ref, atol=2e-2, rtol=2e-2)

# %%
# Measuring the first call: what each backend costs a fresh process
# -----------------------------------------------------------------
# First the guide's check of the lesson's graph: its output filled with NaN, the graph
# run again, and the output compared with the fp32 reference by relative norm.
from cudnn_guide import check
from cudnn_guide.measure import fa4

CUDNN = "cuDNN graph (heuristics A)"
FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if not FA4_OK:
    print(f"{FA4}: {FA4_DETAIL}")

check.poison(o)
g.execute(pack, workspace, handle=handle)
print(check.check(bhsd(o), ref, name=f"{CUDNN} O (the lesson's graph)"))
del ref

# %%
# cuDNN builds a plan; FlashAttention-4 compiles its kernels with the CuTe DSL on first
# use. Both are measured the same way: a new Python process with empty CUDA, CuTe and
# temp caches, timing the import, the first causal forward at S=4096 (build or compile
# included) and the second call; three processes each, interleaved; the table gives
# medians, the fastest and slowest in brackets. The OS file cache is *not* emptied
# (that needs root), so this is the first call of a fresh process on a machine that
# has read the libraries before, not a cold boot. The cuDNN child builds the lesson's
# graph (its shapes, layout, mask and heuristics) in one ``build``.
import json
import subprocess
import sys
import tempfile

import pandas as pd

from cudnn_guide.report import html_table

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter()
q = torch.randn(2, 4096, 64, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(2, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn(2, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
if sys.argv[1] == "fa4":
    from flash_attn.cute import flash_attn_func
    t2 = time.perf_counter()
    run = lambda: flash_attn_func(q, k, v, causal=True)
else:
    import cudnn
    t2 = time.perf_counter()
    def run(state={}):
        if not state:
            h = cudnn.create_handle()
            cudnn.set_stream(h, torch.cuda.current_stream().cuda_stream)
            g = cudnn.pygraph(handle=h, io_data_type=cudnn.data_type.BFLOAT16,
                              intermediate_data_type=cudnn.data_type.FLOAT,
                              compute_data_type=cudnn.data_type.FLOAT)
            Q, K = g.tensor_like(q.transpose(1, 2)), g.tensor_like(k.transpose(1, 2))
            V = g.tensor_like(v.transpose(1, 2))
            o = torch.empty_like(q)
            O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=128**-0.5, generate_stats=False,
                          diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                          diagonal_band_right_bound=0)
            O.set_output(True).set_dim(list(o.transpose(1, 2).shape))
            O.set_stride(list(o.transpose(1, 2).stride()))
            g.build([cudnn.heur_mode.A])
            size = g.get_workspace_size() + 1
            ws = torch.empty(size, device="cuda", dtype=torch.uint8)
            pack = {Q: q.transpose(1, 2), K: k.transpose(1, 2), V: v.transpose(1, 2),
                    O: o.transpose(1, 2)}
            state["run"] = lambda: g.execute(pack, ws, handle=h)
        state["run"]()
run(); torch.cuda.synchronize(); t3 = time.perf_counter()
run(); torch.cuda.synchronize(); t4 = time.perf_counter()
print(json.dumps({"torch_and_context_s": t1 - t0, "import_s": t2 - t1,
                  "first_call_s": t3 - t2, "second_call_s": t4 - t3}))
"""
# the child's tensors are the lesson's: B×S×H×D, 64 query and 8 K/V heads
assert f"torch.randn({B}, {S}, {H}, {D}," in CHILD
assert f"torch.randn({B}, {S}, {HKV}, {D}," in CHILD


def fresh_process(backend):
    with tempfile.TemporaryDirectory() as cache:
        env_vars = {
            **__import__("os").environ,
            "CUDA_CACHE_PATH": cache,
            "TMPDIR": cache,
            "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "0",
        }
        done = subprocess.run(
            [sys.executable, "-c", CHILD, backend],
            env=env_vars,
            capture_output=True,
            text=True,
            timeout=300,
        )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


backends = ["cudnn"] + (["fa4"] if FA4_OK else [])
first_calls = {b: [] for b in backends}
for _ in range(3):
    for b in backends:
        first_calls[b].append(fresh_process(b))

first_rows = []
for b, runs in first_calls.items():
    ok = [r for r in runs if "error" not in r]
    if not ok:
        first_rows.append({"backend": b, "error": runs[0]["error"]})
        continue
    row = {"backend": CUDNN if b == "cudnn" else FA4, "processes": len(ok)}
    for key in ("torch_and_context_s", "import_s", "first_call_s", "second_call_s"):
        vals = sorted(r[key] for r in ok)
        row[key.replace("_s", " (s)")] = (
            f"{vals[len(vals) // 2]:.3f} [{vals[0]:.3f}, {vals[-1]:.3f}]"
        )
    first_rows.append(row)
html_table(pd.DataFrame(first_rows))

# %%
# Where the time goes: left, the lesson's steps in this page's process (torch, CUDA,
# cuDNN and the handle already started); right, a fresh process up to its first
# output, by part (medians over the processes that finished).
import matplotlib.pyplot as plt


def first_call_s(backend, key="first_call_s"):
    """The median ``key`` (by default the first call, build or compile included) over
    the fresh processes."""
    ok = sorted(r[key] for r in first_calls.get(backend, []) if "error" not in r)
    return ok[len(ok) // 2] if ok else None


PARTS = ("torch_and_context_s", "import_s", "first_call_s")
finished = [b for b in first_calls if first_call_s(b) is not None]
fig, (steps_ax, fresh_ax) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
steps_ax.barh(list(seconds), [1e3 * s for s in seconds.values()], color="C0")
steps_ax.invert_yaxis()
steps_ax.set_xscale("log")
steps_ax.set_xlabel("ms, host clock (log scale)")
steps_ax.set_title("the lesson, in this page's process", fontsize=10)
names = [CUDNN if b == "cudnn" else FA4 for b in finished]
starts = [0.0] * len(finished)
for i, part in enumerate(PARTS):
    widths = [first_call_s(b, part) for b in finished]
    fresh_ax.barh(
        names, widths, left=starts, color=f"C{i}", label=part[:-2].replace("_", " ")
    )
    starts = [a + w for a, w in zip(starts, widths)]
fresh_ax.invert_yaxis()
fresh_ax.set_xlabel("s, median over fresh processes")
fresh_ax.set_title("a fresh process, up to its first output", fontsize=10)
fresh_ax.legend(fontsize=7)
plt.show()

# %%
# PyTorch can route its own SDPA flash backend to FlashAttention-4
# (``torch.nn.attention.activate_flash_attention_impl("FA4")``). Does that work here?
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

try:
    from torch.nn.attention import activate_flash_attention_impl

    activate_flash_attention_impl("FA4")
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        F.scaled_dot_product_attention(bhsd(q), bhsd(q), bhsd(q), is_causal=True)
    torch_route = "works"
except Exception as error:  # shown as it is: a failure here is this pair of versions'
    torch_route = f"fails: {type(error).__name__}: {str(error).splitlines()[0]}"
print(f"torch {torch.__version__} SDPA routed to FA4: {torch_route}")
if torch_route != "works" and FA4_OK:  # both installed: most likely their versions
    route_sentence = (
        f"PyTorch's own route to FlashAttention-4 {torch_route}. Most likely this is a "
        f"version mismatch between torch {torch.__version__}'s FA4 hook and "
        f"flash-attn-4 {FA4_DETAIL}, not a property of the route; this page tries no "
        "other pair of versions."
    )
else:
    route_sentence = f"PyTorch's own route to FlashAttention-4 {torch_route}."

# %%
# Conclusions
# -----------
# Computed from the lesson's timings and the fresh processes above.
from cudnn_guide.report.prose import Prose

build = {step: s for step, s in seconds.items() if "execute" not in step}
build_total = sum(build.values())
longest = max(build, key=build.get)
lesson_sentence = (
    f"In this page's process, with torch, CUDA, cuDNN and the handle already started, "
    f"the lesson's five build steps took {build_total:.3f} s, "
    f"{100 * build[longest] / build_total:.0f}% of it in {longest}; the first execute "
    f"then took {1e3 * seconds['first execute']:.2f} ms and the second "
    f"{1e3 * seconds['second execute']:.2f} ms (host clock, up to the GPU's finish)."
)

first_cudnn, first_fa4 = first_call_s("cudnn"), first_call_s("fa4")
if first_cudnn and first_fa4:
    longer = "longer" if first_fa4 > first_cudnn else "shorter"
    first_sentence = (
        f"In a fresh process (OS file cache not emptied), the first causal forward at "
        f"S={S} took {first_cudnn:.2f} s with cuDNN (plan build included) and "
        f"{first_fa4:.2f} s with {FA4} (CuTe compile included): "
        f"{max(first_fa4, first_cudnn) / min(first_fa4, first_cudnn):.1f}× {longer} "
        f"for FlashAttention-4 (medians of {len(first_calls['cudnn'])} processes)."
    )
elif first_cudnn:
    first_sentence = (
        f"In a fresh process, cuDNN's first causal forward at S={S} took "
        f"{first_cudnn:.2f} s (plan build included); {FA4} has no fresh-process row."
    )
else:
    first_sentence = "No fresh process finished its first call: see the table above."
if first_cudnn:
    in_page = build_total + seconds["first execute"]
    first_sentence += (
        f" That first cuDNN call, which also creates its handle and declares the "
        f"graph, took {first_cudnn / in_page:.1f}× the time of the five build steps "
        f"and the first execute in this page's process ({in_page:.2f} s)."
    )

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import keep

keep(first_calls=first_calls, torch_fa4_route=torch_route, lesson_steps_s=seconds)
# sphinx_gallery_end_ignore
Prose(lesson_sentence, first_sentence, route_sentence)
