"""
Paged KV-cache attention for decode
===================================

An LLM server keeps each sequence's keys and values in fixed-size *pages* drawn from one
shared pool, so sequences grow without reallocating. At every decode step each sequence
adds one query token that attends to all of its cached tokens. Here you build the cuDNN
graph that reads the pages in place through a page table, check it against PyTorch on
the gathered pages, then race it against the PyTorch decodes and FlashAttention-4.

What you will learn:

* the paged-attention arguments of ``sdpa``: the pools stand in for K and V,
  ``paged_attention_k_table``/``paged_attention_v_table`` give each sequence's
  pages, and ``seq_len_q``/``seq_len_kv`` with ``use_padding_mask=True`` give its
  true length;
* how to check decode output against an fp32 reference over the gathered pages;
* why decode is a bandwidth problem: GB/s of K and V actually read, against the measured
  read bandwidth;
* how cuDNN compares with PyTorch's decodes (variable-length FlashAttention-2 after a
  gather, and a padded SDPA) and with FlashAttention-4, which reads the pages in place
  too, at pages of 64 tokens and of 128 (the size its paged path is tuned for).
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN paged attention")
env = environment.collect()
env

# %%
# The lesson: one decode step over a shuffled page pool
# -----------------------------------------------------
# 32 sequences of 1k to 8k tokens, 32 heads of 128, bf16. The K/V *pools* hold every
# page of 64 tokens, pages × H × page × D. The page table (B × 1 × pages-per-sequence
# × 1, int32) lists each sequence's pages in order: here a random permutation of the
# pool, as after a server has run a while. One query token per sequence.
import cudnn
import torch

b, h, d, page, pages = 32, 32, 128, 64, 128  # 128 pages of 64: up to 8192 tokens
data = dict(
    q=torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16),
    k_pool=torch.randn(b * pages, h, page, d, device="cuda", dtype=torch.bfloat16),
    v_pool=torch.randn(b * pages, h, page, d, device="cuda", dtype=torch.bfloat16),
    page_table=torch.randperm(b * pages, device="cuda").int().view(b, 1, pages, 1),
    seq_len_q=torch.ones(b, 1, 1, 1, device="cuda", dtype=torch.int32),  # 1 query
    seq_len_kv=torch.randint(1024, 8193, (b, 1, 1, 1), device="cuda").int(),  # 1k-8k
    o=torch.full((b, h, 1, d), float("nan"), device="cuda", dtype=torch.bfloat16),
)
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)


# %%
# The ``sdpa`` node takes the pools as K and V and reads them through the page table
# (``paged_attention_k_table`` / ``_v_table``, one table for both here);
# ``seq_len_kv`` gives each sequence's true length and ``use_padding_mask=True`` hides
# the rest of its last page. The function is reused below at other context lengths.
def paged_decode(d, max_kv):
    """Declare and build one decode step over the paged K/V in ``d``; graph and pack.

    ``max_kv`` is the longest K/V a sequence can have: pages per sequence × page size.
    """
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    Q = g.tensor_like(d["q"], name="q")
    K = g.tensor_like(d["k_pool"], name="k_pool")  # the pools stand in for K and V
    V = g.tensor_like(d["v_pool"], name="v_pool")
    TABLE = g.tensor_like(d["page_table"], name="page_table")
    LEN_Q = g.tensor_like(d["seq_len_q"], name="seq_len_q")
    LEN_KV = g.tensor_like(d["seq_len_kv"], name="seq_len_kv")
    # fmt: off
    O, _ = g.sdpa(
        q=Q, k=K, v=V, generate_stats=False, attn_scale=d["q"].shape[-1] ** -0.5,
        compute_data_type=cudnn.data_type.FLOAT, use_padding_mask=True,
        seq_len_q=LEN_Q, seq_len_kv=LEN_KV, paged_attention_max_seq_len_kv=max_kv,
        paged_attention_k_table=TABLE, paged_attention_v_table=TABLE,  # the pages
    )
    # fmt: on
    O.set_output(True).set_data_type(d["o"].dtype)
    O.set_dim(list(d["o"].shape))
    O.set_stride(list(d["o"].stride()))
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    pack = {Q: d["q"], K: d["k_pool"], V: d["v_pool"], O: d["o"], LEN_Q: d["seq_len_q"]}
    return g, pack | {TABLE: d["page_table"], LEN_KV: d["seq_len_kv"]}


g, pack = paged_decode(data, pages * page)
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
g.execute(pack, workspace, handle=handle)

# %%
# The check: gather each sequence's pages in page-table order, then attention in fp32
# with a mask hiding the keys past each length. A cuDNN that read the table in another
# order, or ignored a length, would fail here.
table = data["page_table"].flatten(1).long()  # B × pages
k, v = (data[n][table].transpose(1, 2).flatten(2, 3) for n in ("k_pool", "v_pool"))
mask = torch.arange(pages * page, device="cuda") < data["seq_len_kv"]  # B×1×1×S
sdpa = torch.nn.functional.scaled_dot_product_attention
ref = sdpa(data["q"].float(), k.float(), v.float(), attn_mask=mask)
torch.testing.assert_close(data["o"].float(), ref, atol=2e-2, rtol=2e-2)

# %%
# Measuring the decode step against PyTorch and FlashAttention-4
# --------------------------------------------------------------
# The PyTorch decodes keep their own pool layout (pages × page × heads × dim, converted
# once, untimed):
#
# * **varlen_attn on the paged pool** (``torch.nn.attention.varlen``, ``block_table``):
#   FlashAttention-2 reads the pages in place, like cuDNN, where this PyTorch has it;
# * **gather valid tokens + varlen_attn**: one ``index_select`` copies exactly the valid
#   tokens into packed K and V, then variable-length FlashAttention-2;
# * **gather + padded SDPA, default dispatch**: what a framework without either does,
#   copying every sequence's full page list and attending over the padded maximum with
#   a mask; ``scaled_dot_product_attention`` is called with no backend forced, so
#   PyTorch's default dispatch picks the kernel.
#
# As a **control**, not a baseline, ``varlen_attn`` also runs on K and V packed
# beforehand (no gather in the timed call): the attention alone, reading exactly the
# bytes cuDNN reads, which no paged server could run without first paying for the
# gather.
#
# **FlashAttention-4** reads the pages in place too: ``flash_attn_varlen_func`` with
# ``page_table`` (B × pages-per-sequence, int32) and ``seqused_k`` (each length), over
# pools laid out pages × page × heads × dim (converted once, untimed); its
# ``flash_attn_func`` takes no page table.
#
# Each contender is checked against the fp32 reference at every context before it is
# timed; one that cannot run here is shown with its error, not dropped.
# :func:`~cudnn_guide.graphs.paged.torch_decoders` builds the PyTorch ones.
import warnings

from cudnn_guide import check, graphs
from cudnn_guide.graphs import paged
from cudnn_guide.graphs.paged import PagedDecodeProblem
from cudnn_guide.measure import baselines, fa4

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
# the CuTe DSL warns once per kernel that it cannot convert FA4's aux_data argument;
# the kernel runs and is checked all the same
warnings.filterwarnings("ignore", message="Argument aux_data", category=UserWarning)


def fa4_paged(d):
    """A launcher of FA4's paged decode over ``d``'s pools; output seen as B×H×1×D."""
    from flash_attn.cute import flash_attn_varlen_func

    q = d["q"].transpose(1, 2).contiguous()  # B×1×H×D
    k_pool, v_pool = (
        d[n].permute(0, 2, 1, 3).contiguous()  # pages × page × H × D
        for n in ("k_pool", "v_pool")
    )
    table = d["page_table"].reshape(q.shape[0], -1).contiguous()  # B × pages, int32
    used = d["lengths"].to(torch.int32).cuda()
    scale = q.shape[-1] ** -0.5

    def launch():
        r = flash_attn_varlen_func(
            q, k_pool, v_pool, page_table=table, seqused_k=used, softmax_scale=scale
        )
        return (r[0] if isinstance(r, tuple) else r).transpose(1, 2)

    return launch


contexts = [1024, 2048, 4096, 8192, 16384]
unavailable = {} if FA4_OK else {FA4: FA4_DETAIL}
PADDED = "PyTorch gather + padded SDPA"  # no SDPA backend forced: say so in its name
NAMES = {PADDED: f"{PADDED}, default dispatch"}
made = {}


def setup(ctx):
    """Every contender at one maximum context, each checked first; cached."""
    if ctx not in made:
        made.clear()
        torch.cuda.empty_cache()
        p = PagedDecodeProblem(batch=32, heads=32, head_dim=128, max_context=ctx)
        d = p.make_inputs(seed=ctx)
        gc, pc = paged_decode(d, p.pages_per_sequence * p.page_size)
        runs = {
            "cuDNN paged": graphs.adopt(gc, handle, name=f"paged decode {ctx}").bind(pc)
        }
        m = p.key_mask(d["seq_len_kv"])
        k, v = (paged.gather_pages(d[n], d["page_table"]) for n in ("k_pool", "v_pool"))
        ref = check.reference(p.torch_forward, d["q"], k, v, m)
        del k, v
        check.poison(d["o"])
        runs["cuDNN paged"]()
        check.check(d["o"], ref, name=f"paged decode, context {ctx}")
        builders = {
            NAMES.get(n, n): b for n, b in paged.torch_decoders(p, d, m).items()
        }
        if FA4_OK:
            builders[FA4] = lambda: fa4_paged(d)
        for name, build in builders.items():
            if name in unavailable:
                continue

            def checked(out, n=f"{name}, context {ctx}"):
                return check.check(out.reshape(d["o"].shape), ref, name=n)

            try:
                run = build()
            except ImportError as error:  # a PyTorch without torch.nn.attention.varlen
                unavailable[name] = f"{type(error).__name__}: {error}"
                continue
            if ctx == contexts[0]:  # the first context prints each check or refusal
                if why := baselines.admit(runs, name, run, check=checked):
                    unavailable[name] = why
                continue
            try:
                out = run()
            except Exception as error:  # a refusal at one context shows as "—"
                print(f"{name}, context {ctx}: {type(error).__name__}")
                continue
            checked(out)
            runs[name] = run
        made[ctx] = (runs, p, d)
    return made[ctx]


ran = list(setup(contexts[0])[0])  # the contenders that ran at the first context

# %%
# Maximum context 1k–16k (lengths drawn from [max/8, max]). Bytes are K and V for each
# sequence's *true* length: what any implementation must read. Cold L2, in interleaved
# rounds per context, each baseline judged by the interval of its per-round ratio to
# cuDNN.
from cudnn_guide.measure import sweep

impls = {name: lambda c, name=name: setup(c)[0].get(name) for name in ran}
result = sweep.sweep(
    contexts,
    impls,
    x="max_context",
    l2="cold",
    bytes=lambda c: setup(c)[1].kv_bytes(setup(c)[2]["lengths"]),
    candidate="cuDNN paged",
)

# %%
# Decode only reads K and V, so its ceiling is the read bandwidth of a 2 GiB
# ``torch.sum`` (a measured reference, not a hard limit), not the copy bandwidth.
import matplotlib.pyplot as plt

from cudnn_guide.measure import ceilings
from cudnn_guide.report import plot_sweep

read = ceilings.measure_read_bandwidth()
print(f"measured read bandwidth: {read.gbps:.0f} GB/s")
plot_sweep(
    result,
    "gbps",
    logx=True,
    title="decode step: GB/s of K and V read",
    ceiling=read.gbps,
    ceiling_label="measured read bandwidth",
)
plt.show()

# %%
from cudnn_guide.report import sweep_table

sweep_table(
    result,
    "median_ms",
    title="decode step, ms (32 sequences, 32 heads × 128, pages of 64)",
)

# %%
# The verdicts at every context length (above 1: cuDNN is faster):
import pandas as pd

from cudnn_guide.report import html_table

html_table(pd.DataFrame(result.verdicts()), {"speed-up": "{:.2f}×"})

# %%
# Measuring pages of 128 tokens
# -----------------------------
# FlashAttention-4's paged path is tuned for pages of 128 tokens. At 8k maximum context,
# the same decode step over pages of 128: cuDNN against FlashAttention-4, each checked
# against the fp32 reference, in interleaved rounds. A refusal by either is printed;
# the verdict is recorded beside the one at pages of 64.
import dataclasses

from cudnn_guide.measure import compare

at_128 = None
if FA4 not in unavailable:
    made.clear()
    torch.cuda.empty_cache()
    p64 = PagedDecodeProblem(batch=32, heads=32, head_dim=128, max_context=8192)
    p128 = dataclasses.replace(p64, page_size=128)
    d128 = p128.make_inputs(seed=8192)
    k128, v128 = (
        paged.gather_pages(d128[n], d128["page_table"]) for n in ("k_pool", "v_pool")
    )
    mask128 = p128.key_mask(d128["seq_len_kv"])
    ref128 = check.reference(p128.torch_forward, d128["q"], k128, v128, mask128)
    del k128, v128
    contenders_128 = {}
    try:  # a page size cuDNN refuses is printed, not fatal
        g128, pack128 = paged_decode(d128, p128.pages_per_sequence * p128.page_size)
    except Exception as error:
        print(f"cuDNN paged, pages of 128: {type(error).__name__}: {error}")
    else:
        adopted = graphs.adopt(g128, handle, name="paged decode, pages of 128")
        contenders_128["cuDNN paged"] = adopted.bind(pack128)
        check.poison(d128["o"])
        contenders_128["cuDNN paged"]()
        check.check(d128["o"], ref128, name="cuDNN paged decode, pages of 128")
        baselines.admit(
            contenders_128,
            FA4,
            fa4_paged(d128),
            check=lambda out: check.check(
                out.reshape(d128["o"].shape), ref128, name=f"{FA4}, pages of 128"
            ),
        )
    if len(contenders_128) == 2:
        at_128 = compare.compare(
            contenders_128,
            candidate="cuDNN paged",
            l2="cold",
            rounds=11,
            bytes=p128.kv_bytes(d128["lengths"]),
            tag="pages of 128",
        )
        s128 = at_128.versus[FA4]
        print(
            f"pages of 128: speed-up over FA4 {s128['value']:.3f}× ({s128['verdict']})"
        )

# %%
# Conclusions
# -----------
# Computed from the verdicts above when the page is recorded.
from cudnn_guide.report.prose import Prose


def verdict_text(cmp, baseline=None):
    """``cmp.describe(baseline)``, with the loop's tie band beside a loop verdict."""
    baseline = baseline or cmp.best_baseline
    text = cmp.describe(baseline)
    if cmp.wall is not None and baseline in cmp.wall.versus:  # "…: tie (v×, lo–hi)"
        band = f"loop tie band ±{100 * cmp.wall.tie_band:.1f}%"
        text = f"{text[:-1]}; {band})" if text.endswith(")") else f"{text} ({band})"
    return text


sentences = ["At pages of 64 tokens, by maximum context:"]
for c in contexts:
    cmp = result.comparisons[c]
    ours = cmp.measurements["cuDNN paged"]
    control = (
        f"; against the control (attention alone on packed K/V) it is "
        f"{verdict_text(cmp, paged.CONTROL)}"
        if paged.CONTROL in cmp.versus
        else ""
    )
    sentences.append(
        f"* max context {c}: cuDNN reads K/V at {ours.gbps:.0f} GB/s "
        f"({100 * ours.gbps / read.gbps:.0f}% of the measured read bandwidth); "
        f"against the fastest contender, {cmp.best_baseline}, it is "
        f"{verdict_text(cmp)}{control}."
    )
fa = [
    result.comparisons[c].versus[FA4]["verdict"]
    for c in contexts
    if FA4 in result.comparisons[c].versus
]
if fa:
    only = (
        "; this count is for pages of 64 only: at pages of 128 just the 8k context "
        "was timed (next)"
        if at_128 is not None
        else ""
    )
    sentences.append(
        f"At pages of 64 tokens, against {FA4} cuDNN is faster at "
        f"{fa.count('faster')}, ties at {fa.count('tie')} and is slower at "
        f"{fa.count('slower')} of the {len(fa)} contexts timed{only}."
    )
else:
    why = unavailable.get(
        FA4, "it refused every context (its errors are printed above)"
    )
    sentences.append(f"{FA4} was not timed at pages of 64: {why}.")
if at_128 is not None:
    sentences.append(
        f"At pages of 128 tokens (8k context), cuDNN is {verdict_text(at_128, FA4)}."
    )
    if FA4 in result.comparisons[8192].versus:  # the same context at pages of 64
        said = {"faster": "faster", "slower": "slower", "tie": "tied"}
        v64 = said[result.comparisons[8192].versus[FA4]["verdict"]]
        v128 = said[at_128.versus[FA4]["verdict"]]
        if v64 != v128:
            sentences.append(
                f"So at 8k context the page size decides the winner: against {FA4}, "
                f"cuDNN is {v64} at pages of 64 and {v128} at pages of 128 tokens."
            )
        else:
            sentences.append(
                f"At 8k context the page size does not change the verdict against "
                f"{FA4}: cuDNN is {v64} at pages of 64 and of 128 tokens."
            )
# where the loop (host time included) and the GPU time disagree: which one applies
for c in contexts:
    cmp = result.comparisons[c]
    best = cmp.best_baseline
    if cmp.wall is None or best not in cmp.wall.versus:
        continue
    gpu, loop = cmp.versus[best], cmp.wall.versus[best]
    band = cmp.wall.tie_band  # the loop's interval, give or take its own tie band
    inside = loop["low"] * (1 - band) <= gpu["value"] <= loop["high"] * (1 + band)
    if gpu["verdict"] == loop["verdict"] and inside:
        continue  # the loop agrees with the GPU time
    pairs = [(n, cmp.measurements[n]) for n in ("cuDNN paged", best)]
    spent = "; ".join(
        f"{n}, {1e3 * m.host_median_ms:.0f} against {1e3 * m.median_ms:.0f} µs"
        for n, m in pairs
        if m.host_median_ms is not None
    )
    sentences.append(
        f"At max context {c} the back-to-back loop (host time included) gives a "
        f"speed-up of {loop['value']:.2f}× ({loop['verdict']}, interval "
        f"{loop['low']:.2f}–{loop['high']:.2f}, loop tie band ±{100 * band:.1f}%) "
        f"over {best} where GPU time gives {gpu['value']:.2f}× ({gpu['verdict']}, "
        f"tie band ±{100 * cmp.tie_band:.1f}%)."
        + (f" Host time per call against GPU time: {spent}." if spent else "")
        + " A loop that launches each call from Python pays the host time; a decode "
        "loop captured in a CUDA graph replays the kernels without it, so the GPU "
        "verdict is the one it sees."
    )
sentences += [
    f"* {name} did not run here: {why}"
    for name, why in unavailable.items()
    if name != FA4
]
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline, keep

keep(read)  # the ceiling is timed uncollected; the sweep's comparisons are collected
c8 = result.comparisons[8192]
headline(
    "paged decode at 8k context, pages of 64: % of read bandwidth",
    unit="%",
    **c8.estimate("cuDNN paged", "GB/s", scale=100 / read.gbps),
)
comparison(
    "paged decode at 8k context, pages of 64: speed-up over the fastest contender", c8
)
if at_128 is not None:  # FA4's tuned page size: the verdict may differ from pages of 64
    comparison(
        "paged decode at 8k context, pages of 128: speed-up over the fastest contender",
        at_128,
    )
# sphinx_gallery_end_ignore
Prose(*sentences)
