"""
Asking a graph for the open-source engines: heur_mode.OPENSOURCE
================================================================

You build a causal attention graph and ask its planner for cuDNN Frontend 1.32's
open-source engines (``cudnn.heur_mode.OPENSOURCE``) instead of the library's, read
what ``create_execution_plans`` lists and what ``check_support`` and ``build_plans``
answer on this GPU, fall back to ``heur_mode.A`` when they refuse, and check the
output against PyTorch. Then three graphs are each asked for ``OPENSOURCE`` plans
alone and for ``A``'s, and the page records which of them the open-source engines
serve here.

The same open-source kernels, called directly through ``cudnn.flex_attention`` and
timed against cuDNN's graph, FlashAttention-4 and PyTorch, are on the
:ref:`flex_attention page <sphx_glr_auto_examples_plot_19_flex_attention_oss.py>`.

What you will learn:

* how to ask a graph for open-source plans only, and what its plan list then holds
  (the backend's open-source candidates stand behind one delegating entry,
  ``backend_heuristics``, and are not enumerated);
* where a refusal surfaces, the frontend's exception for it
  (``cudnn.cudnnGraphNotSupportedError``), and why falling back takes a new graph
  (planning is one-shot);
* which of a causal attention forward, the same with its softmax statistics (only its
  output O is checked), and a bf16 matmul ``heur_mode.OPENSOURCE`` builds, runs and
  gets right on this GPU, beside ``heur_mode.A``.
"""

# %%
# Environment
# -----------
# The open-source engines that run in Python are written in the CuTe DSL
# (``nvidia-cutlass-dsl``). Without it they decline at ``build_plans`` (an
# ``ImportError``, one of the frontend's declines); this page then still runs, says so
# here, and its conclusions say so too.
from cudnn_guide import environment

environment.require_sm((9, 0), "heur_mode.OPENSOURCE (CuTe DSL engines)")
env = environment.collect()
try:
    import cutlass

    CUTE_DSL = f"CuTe DSL {cutlass.__version__}"
except ImportError as exc:
    CUTE_DSL = f"no CuTe DSL ({exc}): pip install 'nvidia-cutlass-dsl[cu13]'"
print(CUTE_DSL)
env

# %%
# The lesson: a causal attention graph asked for ``OPENSOURCE`` plans
# -------------------------------------------------------------------
# 4 sequences of 4096 tokens, 16 heads of 128, bf16, all B×H×S×D and contiguous; the
# mask is causal (a diagonal band with no key after the query).
# ``create_execution_plans([cudnn.heur_mode.OPENSOURCE])`` asks for the open-source
# engines only. Many of them are written for SM 10.0 (Blackwell), so on another GPU
# the planner may find none that serves the graph: the frontend says so with
# ``cudnn.cudnnGraphNotSupportedError`` (or, from an engine written in Python,
# ``NotImplementedError`` or ``ImportError``), at whichever step finds out. Planning
# is one-shot, so the fallback declares the graph again and plans it with
# ``heur_mode.A``; a refusal there is raised as it is.
import cudnn
import torch

B, H, S, D = 4, 16, 4096, 128
qb, kb, vb = torch.randn(3, B, H, S, D, device="cuda", dtype=torch.bfloat16)
ob = torch.empty_like(qb)

handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
TOP_LEFT = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=TOP_LEFT, diagonal_band_right_bound=0)
for mode in (cudnn.heur_mode.OPENSOURCE, cudnn.heur_mode.A):
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    Q = g.tensor_like(qb, name="q")
    K = g.tensor_like(kb, name="k")
    V = g.tensor_like(vb, name="v")
    O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, **causal)
    O.set_output(True).set_dim(list(ob.shape)).set_stride(list(ob.stride()))
    g.validate()
    g.build_operation_graph()
    try:
        g.create_execution_plans([mode])
        n = g.get_execution_plan_count()
        print(f"{mode} lists", [g.get_plan_name_at_index(i) for i in range(n)])
        g.check_support()
        g.build_plans()
        break
    except (cudnn.cudnnGraphNotSupportedError, NotImplementedError, ImportError) as exc:
        print(f"{mode} refused the graph: {type(exc).__name__}: {exc}")
        if mode == cudnn.heur_mode.A:
            raise
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute({Q: qb, K: kb, V: vb, O: ob}, workspace, handle=handle)

# %%
# The same attention in PyTorch, in fp32 (``is_causal`` is the same top-left band).
ref = torch.nn.functional.scaled_dot_product_attention(
    qb.float(), kb.float(), vb.float(), is_causal=True
)
torch.testing.assert_close(ob.float(), ref, atol=2e-2, rtol=2e-2)
print(f"built with {mode}: max abs error {(ob.float() - ref).abs().max():.1e}")

# %%
# Measuring which graphs ``heur_mode.OPENSOURCE`` serves on this GPU
# ------------------------------------------------------------------
# First the guide's check of the lesson's graph: its output filled with NaN, the graph
# run again, and the output compared by relative norm with the guide's fp32 reference
# (``ref_causal``, B×S×H×D, which the graphs below are checked against too).
import pandas as pd

from cudnn_guide import check, graphs
from cudnn_guide.graphs import attention_inputs
from cudnn_guide.report import html_table

served_by = mode.name  # the heuristic mode whose plan the lesson's graph runs
gen = torch.Generator(device="cuda").manual_seed(0)
bhsd = [qb, kb, vb]  # the reference works on B×H×S×D
ref_causal = attention_inputs.reference(
    *bhsd, visible=attention_inputs.band(S, S, device="cuda")
).transpose(1, 2)
check.poison(ob)
graphs.adopt(g, handle, name="causal SDPA").execute({Q: qb, K: kb, V: vb, O: ob})
checks = [
    check.check(
        ob.transpose(1, 2), ref_causal, name=f"causal SDPA, heur_mode.{served_by}"
    )
]
print(checks[-1])
del ref


# %%
# Asking a graph for ``OPENSOURCE`` plans only. ``create_execution_plans`` then lists
# one delegating entry (``backend_heuristics``): the open-source candidates live inside
# the backend and are not enumerated. Whether one *serves* the graph shows at
# ``check_support`` and ``build_plans``; a graph that builds is then executed and its
# output checked (O only). cuDNN's refusals are shown verbatim (first line, at most
# 160 characters). Many open-source engines target Blackwell (SM 100) only.
def sdpa_forward(g, stats):
    Q, K, V = (g.tensor_like(qb, name=n) for n in "qkv")
    O, Stats = g.sdpa(
        name="sdpa",
        q=Q,
        k=K,
        v=V,
        attn_scale=D**-0.5,
        generate_stats=stats,
        diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
        diagonal_band_right_bound=0,
    )
    o = torch.empty_like(qb)
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    pack = {Q: qb, K: kb, V: vb, O: o}
    if stats:
        st = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
        Stats.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(
            list(st.shape)
        ).set_stride(list(st.stride()))
        pack[Stats] = st
    return pack, o.transpose(1, 2), ref_causal


a_mm, b_mm = (
    torch.randn(1, 4096, 4096, device="cuda", dtype=torch.bfloat16, generator=gen)
    for _ in range(2)
)


def matmul(g, _):
    A, Bm = g.tensor_like(a_mm, name="a"), g.tensor_like(b_mm, name="b")
    c = torch.empty_like(a_mm)
    C = g.matmul(name="mm", A=A, B=Bm)
    C.set_output(True).set_data_type(cudnn.data_type.BFLOAT16).set_dim(
        list(c.shape)
    ).set_stride(list(c.stride()))
    with check.full_precision():
        ref = a_mm.float() @ b_mm.float()
    return {A: a_mm, Bm: b_mm, C: c}, c, ref


oss_rows = []
for label, declare, stats in (
    ("SDPA forward, causal", sdpa_forward, False),
    ("SDPA forward with stats", sdpa_forward, True),
    ("matmul bf16", matmul, None),
):
    for modes in (["OPENSOURCE"], ["A"]):
        g = cudnn.pygraph(
            handle=handle,
            io_data_type=cudnn.data_type.BFLOAT16,
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
        )
        pack, out, ref = declare(g, stats)
        step = "validate"
        try:
            for step, call in (  # noqa: B007
                ("validate", g.validate),
                ("build_operation_graph", g.build_operation_graph),
                (
                    "create_execution_plans",
                    lambda: g.create_execution_plans(
                        [getattr(cudnn.heur_mode, m) for m in modes]
                    ),
                ),
                ("check_support", g.check_support),
                ("build_plans", g.build_plans),
            ):
                call()
            first_plan = g.get_plan_name_at_index(0)
            listed = f"{g.get_execution_plan_count()} listed, first {first_plan}"
            graphs.adopt(g, handle, name=label).execute(pack)
            result = check.compare(out, ref, name=f"{label}, {'+'.join(modes)}")
            answer = f"builds and runs ({listed}); {result}"
            served = result.passed
        except Exception as exc:  # cuDNN's own refusal, shown as it is
            said = str(exc).splitlines()[0][:160]
            answer = f"refused at {step}: {type(exc).__name__}: {said}"
            served = False
        oss_rows.append(
            {
                "graph": label,
                "heur_mode": "+".join(modes),
                "served": served,
                "cuDNN's answer": answer,
            }
        )
html_table(pd.DataFrame(oss_rows))

# %%
# Plot
# ----
# Each graph (row) under each heuristic mode (column): green where it built, ran and
# passed its check, orange where it did not, with the step that refused it.
import matplotlib.pyplot as plt

graph_names = list(dict.fromkeys(r["graph"] for r in oss_rows))
mode_names = list(dict.fromkeys(r["heur_mode"] for r in oss_rows))
grid = [[0.0] * len(mode_names) for _ in graph_names]
fig, ax = plt.subplots(figsize=(9, 2.8), layout="constrained")
for r in oss_rows:
    row, col = graph_names.index(r["graph"]), mode_names.index(r["heur_mode"])
    grid[row][col] = 1.0 if r["served"] else 0.0
    if r["served"]:
        word = "builds, runs, passes"
    elif r["cuDNN's answer"].startswith("refused"):
        word = r["cuDNN's answer"].split(":")[0]
    else:
        word = "builds and runs, check fails"
    ax.text(col, row, word, ha="center", va="center", fontsize=9)
ax.imshow(grid, cmap="RdYlGn", vmin=-0.5, vmax=1.5, aspect="auto")
ax.set_xticks(range(len(mode_names)), [f"heur_mode.{m}" for m in mode_names])
ax.set_yticks(range(len(graph_names)), graph_names)
ax.set_title(f"which heuristic mode serves each graph, {torch.cuda.get_device_name()}")
plt.show()

# %%
# Conclusions
# -----------
# Computed from the lesson and the table above when the page is recorded.
from cudnn_guide.report.prose import Prose


def served_under(heur):
    return [r["graph"] for r in oss_rows if r["heur_mode"] == heur and r["served"]]


tried = len(oss_rows) // 2
served = served_under("OPENSOURCE")
sentences = []
sentences.append(
    "heur_mode.OPENSOURCE alone built, ran and passed the check for: "
    f"{', '.join(served) if served else 'none of the graphs tried'} (of {tried} tried)."
)
sentences.append(
    "heur_mode.A built, ran and passed the check for: "
    f"{', '.join(served_under('A')) or 'none of the graphs tried'} (of {tried} tried)."
)
sentences.append(
    f"The lesson's causal graph ran on heur_mode.{served_by}"
    + (
        ", the open-source engines serving it"
        if served_by == "OPENSOURCE"
        else ", after OPENSOURCE refused it (its words are printed under the lesson)"
    )
    + f"; its check: {checks[0]}."
)
if CUTE_DSL.startswith("no CuTe DSL"):
    sentences.append(
        f"This run had {CUTE_DSL}; the open-source engines written in it declined, "
        "so the answers above may be narrower than with it installed."
    )
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import keep

keep(opensource_answers=oss_rows, cute_dsl=CUTE_DSL)
# sphinx_gallery_end_ignore
Prose(*sentences)
