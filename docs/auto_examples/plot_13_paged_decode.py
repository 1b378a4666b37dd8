"""
Paged KV-cache attention for decode
===================================

An LLM server keeps each sequence's keys and values in fixed-size *pages* drawn from one shared
pool, so sequences can grow without reallocating and without reserving memory for their
maximum length. At every decode step each sequence adds one query token that must attend to all
of its cached tokens. cuDNN reads the pages in place through a page table; without paged
attention, a framework must first gather each sequence's pages into a contiguous tensor.

What you will learn:

* the paged-attention arguments of ``sdpa``: the pools stand in for K and V,
  ``paged_attention_k_table``/``paged_attention_v_table`` give each sequence's pages, and
  ``seq_len_q``/``seq_len_kv`` with ``use_padding_mask=True`` give its true length;
* how to check decode output against an fp32 reference over the gathered pages;
* why decode is a bandwidth problem: GB/s of K and V actually read, against the measured
  read bandwidth; and how cuDNN compares with the strongest PyTorch decode that reads only the
  valid tokens (variable-length FlashAttention-2), and with one that gathers and pads;
* how cuDNN compares with FlashAttention-4, which reads the pages in place too, at
  pages of 64 tokens and of 128 (the size its paged path is tuned for).
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN paged attention")
env = environment.collect()
env

# %%
# A decode step over a shuffled page pool
# ---------------------------------------
# 32 sequences with lengths drawn uniformly between 1k and 8k tokens, 32 heads of 128, pages of
# 64 tokens, bf16. The page table is a random permutation of the pool: each sequence's pages are
# scattered, as they are after a server has run for a while.
#
# The K/V *pools* hold pages of ``page_size`` tokens, pages × H × page_size × D. The page table
# (B × 1 × pages-per-sequence × 1, int32) lists each sequence's pages in order; the ``sdpa``
# node reads K and V through it (``paged_attention_k_table`` / ``_v_table``, here one table for
# both). ``seq_len_kv`` gives each sequence's true length and ``use_padding_mask=True`` hides the
# rest of its last page.
import cudnn
import torch

from cudnn_guide import check, graphs
from cudnn_guide.graphs import paged

handle = graphs.handle_for_current_device()


def paged_decode(d, max_seq_len_kv):
    """Declare and build one decode step (one query per sequence) over the paged K/V; returns graph, pack."""
    g = cudnn.pygraph(handle=handle, name="paged_decode", io_data_type=cudnn.data_type.BFLOAT16,
                      intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    T = {n: g.tensor_like(d[n], name=n) for n in ("q", "k_pool", "v_pool", "page_table", "seq_len_q", "seq_len_kv")}
    O, _ = g.sdpa(name="sdpa_paged", q=T["q"], k=T["k_pool"], v=T["v_pool"], generate_stats=False,
                  attn_scale=d["q"].shape[-1] ** -0.5, use_padding_mask=True, seq_len_q=T["seq_len_q"],
                  seq_len_kv=T["seq_len_kv"], paged_attention_k_table=T["page_table"],
                  paged_attention_v_table=T["page_table"], paged_attention_max_seq_len_kv=max_seq_len_kv,
                  compute_data_type=cudnn.data_type.FLOAT)
    o = d["o"]
    O.set_output(True).set_data_type(o.dtype).set_dim(list(o.shape)).set_stride(list(o.stride()))
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])  # the five build steps
    return g, {t: d[n] for n, t in T.items()} | {O: o}


problem = paged.PagedDecodeProblem(batch=32, heads=32, head_dim=128, max_context=8192, page_size=64)
data = problem.make_inputs(seed=0)
g, pack = paged_decode(data, problem.pages_per_sequence * problem.page_size)
decode = graphs.adopt(g, handle, name="paged decode")
print(problem)
print(f"lengths: min {int(data['lengths'].min())}, median {int(data['lengths'].median())}, "
      f"max {int(data['lengths'].max())}; pool {tuple(data['k_pool'].shape)}; page table {tuple(data['page_table'].shape)}")
print(decode.report)

check.poison(data["o"])
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)  # run on torch's stream
g.execute(pack, workspace, handle=handle)

# %%
# Check
# -----
# The reference gathers each sequence's pages (in page-table order) and computes attention in
# fp32 with a mask hiding the keys past each sequence's length. A cuDNN that read the table in
# another order, or ignored a length, would fail here.
k_gathered = paged.gather_pages(data["k_pool"], data["page_table"])
v_gathered = paged.gather_pages(data["v_pool"], data["page_table"])
mask = problem.key_mask(data["seq_len_kv"])
reference = check.reference(problem.torch_forward, data["q"], k_gathered, v_gathered, mask)
checks = [check.check(data["o"], reference, name="cuDNN paged decode")]
print(checks[-1])

# %%
# The baselines
# -------------
# The strongest fair PyTorch decode reads only each sequence's valid tokens, as cuDNN does.
# PyTorch keeps its own pool layout (pages × page × heads × dim, converted once, untimed), and:
#
# * **varlen_attn on the paged pool** (``torch.nn.attention.varlen``, ``block_table``):
#   FlashAttention-2 reads the pages in place, like cuDNN, where this PyTorch has it;
# * **gather valid tokens + varlen_attn**: one ``index_select`` copies exactly the valid tokens
#   into packed K and V, then variable-length FlashAttention-2;
# * **gather + padded SDPA**: what a framework without either does, copying every sequence's full
#   page list and attending over the padded maximum with a mask.
#
# As a **control**, not a baseline, ``varlen_attn`` also runs on K and V packed beforehand (no
# gather in the timed call): the attention alone, reading exactly the bytes cuDNN reads, which no
# paged server could run without first paying for the gather.
#
# Each is checked against the reference before it is timed; one this PyTorch lacks is shown with
# its error, not dropped.
#
# :func:`~cudnn_guide.graphs.paged.torch_decoders` builds all four from the same inputs.
from cudnn_guide.measure import baselines

decoders = paged.torch_decoders(problem, data, mask)
unavailable = {}
for name, build in decoders.items():
    if why := baselines.admit({}, name, lambda build=build: build()(),
                              check=lambda out, name=name: check.check(out.reshape(data["o"].shape), reference, name=name)):
        unavailable[name] = why

# %%
# FlashAttention-4 reads the pages in place too: ``flash_attn_varlen_func`` with
# ``page_table`` (B × pages-per-sequence, int32) and ``seqused_k`` (each sequence's
# length), over pools laid out pages × page × heads × dim (converted once, untimed); its
# ``flash_attn_func`` takes no page table. Its output is checked against the same
# reference.
from cudnn_guide.measure import fa4

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()


def fa4_paged(d):
    """A launcher of FA4's paged decode over ``d``'s pools; output seen as B×H×1×D."""
    from flash_attn.cute import flash_attn_varlen_func

    q = d["q"].transpose(1, 2).contiguous()  # B×1×H×D
    k_pool, v_pool = (d[n].permute(0, 2, 1, 3).contiguous()  # pages × page × H × D
                      for n in ("k_pool", "v_pool"))
    table = d["page_table"].reshape(q.shape[0], -1).contiguous()  # B × pages, int32
    used = d["lengths"].to(torch.int32).cuda()
    scale = q.shape[-1] ** -0.5

    def launch():
        r = flash_attn_varlen_func(q, k_pool, v_pool, page_table=table, seqused_k=used,
                                   softmax_scale=scale)
        return (r[0] if isinstance(r, tuple) else r).transpose(1, 2)

    return launch


if FA4_OK:  # prints FA4's error if it refuses this layout
    FA4_WHY = baselines.admit({}, FA4, lambda: fa4_paged(data)(), reference)
else:
    FA4_WHY = FA4_DETAIL
    print(f"{FA4}: {FA4_DETAIL}")

# %%
# Measure across context lengths
# ------------------------------
# Maximum context 1k–16k (lengths drawn from [max/8, max]). Bytes are K and V for each
# sequence's *true* length: what any implementation must read. Cold L2, in interleaved rounds
# per context, each baseline judged by the interval of its per-round ratio to cuDNN.
from cudnn_guide.measure import sweep

contexts = [1024, 2048, 4096, 8192, 16384]
made = {}


def setup(ctx):
    if ctx not in made:
        made.clear()
        torch.cuda.empty_cache()
        p = paged.PagedDecodeProblem(batch=32, heads=32, head_dim=128, max_context=ctx, page_size=64)
        d = p.make_inputs(seed=ctx)
        gc, pc = paged_decode(d, p.pages_per_sequence * p.page_size)
        launch = graphs.adopt(gc, handle, name=f"paged decode {ctx}").bind(pc)
        m = p.key_mask(d["seq_len_kv"])
        k, v = paged.gather_pages(d["k_pool"], d["page_table"]), paged.gather_pages(d["v_pool"], d["page_table"])
        ref = check.reference(p.torch_forward, d["q"], k, v, m)
        check.poison(d["o"])
        launch()
        check.check(d["o"], ref, name=f"paged decode, context {ctx}")
        runs = {n: build() for n, build in paged.torch_decoders(p, d, m).items() if n not in unavailable}
        for name, run in runs.items():
            check.check(run().reshape(d["o"].shape), ref, name=f"{name}, context {ctx}")
        if FA4_WHY is None:  # FA4's refusal at one context is printed and shown as "—"
            try:
                fa4_run = fa4_paged(d)
                fa4_out = fa4_run()
            except Exception as error:
                print(f"{FA4}, context {ctx}: {type(error).__name__}: {error}")
            else:
                check.check(fa4_out, ref, name=f"{FA4}, context {ctx}")
                runs[FA4] = fa4_run
        made[ctx] = (launch, runs, p, d)
    return made[ctx]


impls = {"cuDNN paged": lambda c: setup(c)[0]}
impls.update({name: lambda c, name=name: setup(c)[1][name] for name in decoders if name not in unavailable})
if FA4_WHY is None:
    impls[FA4] = lambda c: setup(c)[1].get(FA4)  # None (shown as "—") where FA4 refused
result = sweep.sweep(contexts, impls, x="max_context", l2="cold",
                     bytes=lambda c: setup(c)[2].kv_bytes(setup(c)[3]["lengths"]), candidate="cuDNN paged")

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.measure import ceilings

# Decode only reads K and V, so its ceiling is the read bandwidth (a 2 GiB ``torch.sum``), not
# the copy bandwidth, which counts bytes read plus written.
read = ceilings.measure_read_bandwidth()
print(read)
from cudnn_guide.report import plot_sweep
plot_sweep(result, "gbps", logx=True, title="decode step: GB/s of K and V read", ceiling=read.gbps,
            ceiling_label="measured read bandwidth")
plt.show()

# %%
from cudnn_guide.report import sweep_table
sweep_table(result, "median_us", title="decode step, µs (32 sequences, 32 heads × 128, pages of 64)")

# %%
# The verdicts at every context length (above 1: cuDNN is faster):
import pandas as pd

from cudnn_guide.report import html_table

html_table(pd.DataFrame(result.verdicts()), {"speed-up": "{:.2f}×"})

# %%
# Pages of 128 tokens
# -------------------
# FlashAttention-4's paged path is tuned for pages of 128 tokens. At 8k maximum context,
# the same decode step over pages of 128: cuDNN against FlashAttention-4, each checked
# against the fp32 reference, in interleaved rounds. A refusal by either is printed.
from cudnn_guide.measure import compare

at_128 = None
if FA4_WHY is None:
    made.clear()
    torch.cuda.empty_cache()
    p128 = paged.PagedDecodeProblem(batch=32, heads=32, head_dim=128, max_context=8192,
                                    page_size=128)
    d128 = p128.make_inputs(seed=8192)
    k128, v128 = (paged.gather_pages(d128[n], d128["page_table"])
                  for n in ("k_pool", "v_pool"))
    ref128 = check.reference(p128.torch_forward, d128["q"], k128, v128,
                             p128.key_mask(d128["seq_len_kv"]))
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
        print(check.check(d128["o"], ref128, name="cuDNN paged decode, pages of 128"))
        baselines.admit(contenders_128, FA4, fa4_paged(d128), ref128)
    if len(contenders_128) == 2:
        at_128 = compare.compare(contenders_128, candidate="cuDNN paged", l2="cold",
                                 rounds=11, bytes=p128.kv_bytes(d128["lengths"]),
                                 tag="pages of 128")
        print(f"cuDNN paged vs {FA4}, pages of 128: {at_128.describe(FA4)}")

# %%
# What the sweep says
# -------------------
# Computed from the verdicts above when the page is recorded.
from cudnn_guide.report.prose import Prose

sentences = []
for c in contexts:
    cmp = result.comparisons[c]
    ours = cmp.measurements["cuDNN paged"]
    control = (f"; against the control (attention alone on packed K/V) it is "
               f"{cmp.describe(paged.CONTROL)}" if paged.CONTROL in cmp.versus else "")
    sentences.append(
        f"* max context {c}: cuDNN reads K/V at {ours.gbps:.0f} GB/s "
        f"({100 * ours.gbps / read.gbps:.0f}% of the measured read bandwidth); "
        f"against the fastest contender, {cmp.best_baseline}, it is "
        f"{cmp.describe()}{control}.")
fa = [result.comparisons[c].versus[FA4]["verdict"] for c in contexts
      if FA4 in result.comparisons[c].versus]
if fa:
    sentences.append(
        f"Against {FA4} at pages of 64, cuDNN is faster at {fa.count('faster')}, "
        f"ties at {fa.count('tie')} and is slower at {fa.count('slower')} of "
        f"{len(fa)} contexts.")
else:
    why = FA4_WHY or "it refused every context (its errors are printed above)"
    sentences.append(f"{FA4} was not timed at pages of 64: {why}.")
if at_128 is not None:
    sentences.append(f"At pages of 128 tokens (8k context), cuDNN is "
                     f"{at_128.describe(FA4)}.")
sentences += [f"* {name} is not in this PyTorch: {why}"
              for name, why in unavailable.items()]
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline, keep
keep(read)  # the ceiling is timed uncollected; the sweep's comparisons are collected
c8 = result.comparisons[8192]
headline("paged decode at 8k context, % of read bandwidth", unit="%",
         **c8.estimate("cuDNN paged", "GB/s", scale=100 / read.gbps))
comparison("paged decode at 8k context, speed-up over the fastest contender", c8)
# sphinx_gallery_end_ignore
Prose(*sentences)
