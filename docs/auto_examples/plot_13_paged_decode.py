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
# pools laid out pages × page × heads × dim (converted once, untimed;
# ``paged_kv_decode.fa4_paged``); its ``flash_attn_func`` takes no page table.
#
# ``paged_kv_decode.DecodeContenders`` makes them all at one maximum context (cuDNN's
# with the lesson's ``paged_decode``, PyTorch's with ``paged.torch_decoders``), each
# checked against the fp32 reference at every context before it is timed; one that
# cannot run here is shown with its error, not dropped.
import warnings

from cudnn_guide.studies import paged_kv_decode

contexts = [1024, 2048, 4096, 8192, 16384]
setup = paged_kv_decode.DecodeContenders(
    paged_decode, handle, first_context=contexts[0], batch=32, heads=32, head_dim=128
)
FA4 = setup.fa4
# the CuTe DSL warns once per kernel that it cannot convert FA4's aux_data argument;
# the kernel runs and is checked all the same
warnings.filterwarnings("ignore", message="Argument aux_data", category=UserWarning)
ran = list(setup(contexts[0])[0])  # the contenders that ran at the first context

# %%
# Maximum context 1k–16k (lengths drawn from [max/8, max]). Bytes are K and V for each
# sequence's *true* length: what any implementation must read. Cold L2, in interleaved
# rounds per context, each baseline judged by the interval of its per-round ratio to
# cuDNN.
from cudnn_guide.measure import sweep

result = sweep.sweep(
    contexts,
    setup.launchers(ran),
    x="max_context",
    l2="cold",
    bytes=setup.kv_bytes,
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
# against the fp32 reference (``DecodeContenders.at_page_size``), in interleaved rounds.
# A refusal by either is printed; the verdict is recorded beside the one at pages of 64.
import dataclasses

from cudnn_guide.graphs.paged import PagedDecodeProblem
from cudnn_guide.measure import compare

at_128 = None
if FA4 not in setup.unavailable:
    p64 = PagedDecodeProblem(batch=32, heads=32, head_dim=128, max_context=8192)
    p128 = dataclasses.replace(p64, page_size=128)
    contenders_128, d128 = setup.at_page_size(p128)
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
# Computed from the verdicts above when the page is recorded
# (``paged_kv_decode.conclusions``).
from cudnn_guide.report.prose import Prose

sentences = paged_kv_decode.conclusions(
    result, contexts, read.gbps, at_128, setup.unavailable, FA4
)
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
