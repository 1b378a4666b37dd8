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
# graph (its shapes, layout, mask and heuristics) in one ``build``; the child's script
# is ``first_call.CHILD`` (in ``cudnn_guide/studies/first_call.py``).
from cudnn_guide.report import html_table
from cudnn_guide.studies import first_call

# the child's tensors are the lesson's: B×S×H×D, 64 query and 8 K/V heads
assert f"torch.randn({B}, {S}, {H}, {D}," in first_call.CHILD
assert f"torch.randn({B}, {S}, {HKV}, {D}," in first_call.CHILD

NAMES = {"cudnn": CUDNN, "fa4": FA4}
backends = ["cudnn"] + (["fa4"] if FA4_OK else [])
first_calls = first_call.fresh_processes(backends, rounds=3)  # one of each per round
html_table(first_call.first_call_table(first_calls, NAMES))

# %%
# Where the time goes: left, the lesson's steps in this page's process (torch, CUDA,
# cuDNN and the handle already started); right, a fresh process up to its first
# output, by part (medians over the processes that finished).
import matplotlib.pyplot as plt

first_call.plot_first_call(seconds, first_calls, NAMES)
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
    said = (str(error).splitlines() or [""])[0]  # an error may carry no message
    torch_route = f"fails: {type(error).__name__}: {said}"
print(f"torch {torch.__version__} SDPA routed to FA4: {torch_route}")

# %%
# Conclusions
# -----------
# Computed from the lesson's timings and the fresh processes above
# (``first_call.conclusions``): the build steps in this page's process, then each
# backend's import and first call in a fresh process, alone and together.
from cudnn_guide.report.prose import Prose

sentences = first_call.conclusions(seconds, first_calls, NAMES, seq=S)
sentences.append(first_call.route_sentence(torch_route, FA4_OK, FA4_DETAIL))

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import keep

keep(first_calls=first_calls, torch_fa4_route=torch_route, lesson_steps_s=seconds)
# sphinx_gallery_end_ignore
Prose(*sentences)
