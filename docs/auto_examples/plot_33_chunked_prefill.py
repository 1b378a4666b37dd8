"""
Chunked prefill: a causal band aligned to the bottom right, over a paged K/V cache
==================================================================================

A serving engine prefills a long prompt in chunks, and each chunk's queries attend to
every key written so far. You build the attention of the last chunk, 512 queries over
4096 keys, as a cuDNN graph whose causal band ends at the last key, check it against
PyTorch, then run the same chunk over a paged K/V cache and time it against gathering
the pages for PyTorch and against FlashAttention-4 reading them in place.

The diagonal band, the sliding window built from it and the additive biases are on the
:ref:`attention masks page <sphx_glr_auto_examples_plot_18_attention_masks.py>`.

What you will learn:

* ``diagonal_alignment=BOTTOM_RIGHT``: the diagonal ends at the last key, so Sq new
  queries attend causally to a longer prefix of Skv keys (chunked prefill, or decoding
  after a prompt); with ``diagonal_band_right_bound=0``, key ``j`` is visible to query
  ``i`` when ``j ≤ i + (Skv − Sq)``;
* that PyTorch spells the same mask ``causal_lower_right``;
* how cuDNN reads K and V from a paged cache in place: page tables and sequence lengths
  as graph inputs;
* chunked prefill over a paged K/V cache against reading contiguous K/V, gathering the
  pages for PyTorch's SDPA, and FlashAttention-4's ``page_table``.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: the last chunk of a prefill, aligned bottom-right
# -------------------------------------------------------------
# A prompt of 4096 tokens is prefilled in chunks of 512. The last chunk's 512 queries
# attend to all 4096 keys, the 3584 the earlier chunks wrote and their own: query ``i``
# of the chunk sits at position ``i + 3584`` of the prompt. Aligned ``BOTTOM_RIGHT``,
# the diagonal ends at the last key, and ``diagonal_band_right_bound=0`` hides every
# key after it. ``masked_attention`` passes its mask keywords straight to ``g.sdpa``; a
# tensor among them (sequence lengths, page tables) becomes an input of the graph. It
# returns the built graph and its variant pack; the graph then executes with a
# workspace, on torch's stream.
import cudnn
import torch

B, H, S, D = 4, 16, 4096, 128  # S: the keys, the whole prompt so far
CHUNK = 512  # the new queries, B×H×CHUNK×D
q_chunk = torch.randn(B, H, CHUNK, D, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in "kv")
o_chunk = torch.empty_like(q_chunk)

handle = cudnn.create_handle()
BOTTOM_RIGHT = cudnn.diagonal_alignment.BOTTOM_RIGHT


def masked_attention(q, k, v, o, **mask):
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    Q = g.tensor_like(q, name="q")
    K = g.tensor_like(k, name="k")
    V = g.tensor_like(v, name="v")
    pack = {Q: q, K: k, V: v}
    for name, value in list(mask.items()):
        if isinstance(value, torch.Tensor):  # lengths, page tables
            mask[name] = g.tensor_like(value, name=name)
            pack[mask[name]] = value
    O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=False, **mask)
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    pack[O] = o
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, pack


CAUSAL = dict(diagonal_alignment=BOTTOM_RIGHT, diagonal_band_right_bound=0)
chunked, chunked_pack = masked_attention(q_chunk, k, v, o_chunk, **CAUSAL)
workspace = torch.empty(chunked.get_workspace_size(), device="cuda", dtype=torch.uint8)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
chunked.execute(chunked_pack, workspace, handle=handle)

# %%
# The same mask written out for PyTorch, in fp32: key ``j`` is visible to query ``i``
# when ``j ≤ i + (S_kv − S_q)``, here ``j ≤ i + 3584``.
i, j = torch.arange(CHUNK, device="cuda")[:, None], torch.arange(S, device="cuda")
visible = j <= i + (S - CHUNK)  # CHUNK × S: S_q = CHUNK queries, S_kv = S keys
scores = (q_chunk.float() @ k.float().transpose(-1, -2)) * D**-0.5
ref = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1) @ v.float()
torch.testing.assert_close(o_chunk.float(), ref, atol=2e-2, rtol=2e-2)

# %%
# Measuring chunked prefill: bottom-right alignment
# -------------------------------------------------
# Checks (relative error against the fp32 reference, by dtype) come first: the lesson's
# graph, its output filled with NaN and run again; then PyTorch's SDPA with the mask it
# spells ``causal_lower_right`` (flash backend, FlashAttention-2), a check not printed:
# a failure would stop the page. ``run`` executes any graph as the lesson does.
from torch.nn.attention.bias import causal_lower_right

from cudnn_guide import check
from cudnn_guide.graphs import attention_inputs


def run(g, pack):
    workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    g.execute(pack, workspace, handle=handle)


check.poison(o_chunk)
run(chunked, chunked_pack)
visible_br = attention_inputs.band(CHUNK, S, bottom_right=True, device="cuda")
ref_chunk = attention_inputs.reference(q_chunk, k, v, visible=visible_br)
chunk_name = "bottom-right causal, 512 queries over 4096 keys"
print(check.check(o_chunk, ref_chunk, name=chunk_name))
lower_right = causal_lower_right(CHUNK, S)
sdpa_lr = torch.nn.functional.scaled_dot_product_attention(
    q_chunk, k, v, attn_mask=lower_right
)
check.check(sdpa_lr, ref_chunk, name="PyTorch SDPA, causal_lower_right")
del sdpa_lr

# %%
# Measuring chunked prefill over a paged K/V cache
# ------------------------------------------------
# In a serving engine the 4096 keys live in a paged cache: fixed-size pages scattered in
# one pool, found through a page table. cuDNN reads them in place: the pools stand in
# for K and V, ``paged_attention_k_table`` / ``_v_table`` map each sequence's pages, and
# the padding mask gives each sequence's true lengths (``seq_len_q`` new queries,
# ``seq_len_kv`` keys so far). FlashAttention-4 reads the same pages through its
# ``page_table`` (``seqused_k`` giving the keys so far); it takes its pools laid out
# pages × page × H × D, a copy made once, outside the timed calls. Its ``causal=True``
# aligns the diagonal bottom-right when the queries are fewer than the keys, as here.
# ``chunked_prefill.page_kv`` (in ``cudnn_guide/studies/chunked_prefill.py``) scatters
# K and V into a pool with 13 spare pages, at places drawn at random; the module also
# makes the gather for PyTorch (checked, not printed) and FlashAttention-4's launcher.
import textwrap

from cudnn_guide import graphs
from cudnn_guide.measure import baselines, compare, fa4
from cudnn_guide.studies import chunked_prefill

PAGE = 64
cache = chunked_prefill.page_kv(k, v, page=PAGE, spare_pages=13, seed=1)
len_q = torch.full((B, 1, 1, 1), CHUNK, dtype=torch.int32, device="cuda")
len_kv = torch.full((B, 1, 1, 1), S, dtype=torch.int32, device="cuda")
attention_inputs.check_seq_lens(len_q, B, CHUNK)
o_paged = torch.empty_like(q_chunk)
paged, paged_pack = masked_attention(
    q_chunk,
    cache.k_pool,
    cache.v_pool,
    o_paged,
    diagonal_alignment=BOTTOM_RIGHT,
    diagonal_band_right_bound=0,
    use_padding_mask=True,
    seq_len_q=len_q,
    seq_len_kv=len_kv,
    paged_attention_k_table=cache.page_table,
    paged_attention_v_table=cache.page_table,
    paged_attention_max_seq_len_kv=cache.pages_per_seq * PAGE,
)
check.poison(o_paged)
run(paged, paged_pack)
print(check.check(o_paged, ref_chunk, name="paged chunked prefill"))

gather_then_sdpa = chunked_prefill.gather_then_sdpa(q_chunk, cache, lower_right)
check.check(gather_then_sdpa(), ref_chunk, name="PyTorch gather pages + SDPA")


def launcher(g, pack):
    return graphs.adopt(g, handle, name="masked attention").bind(pack)


FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
prefill_contenders = {
    "cuDNN paged": launcher(paged, paged_pack),
    "cuDNN contiguous K/V (control)": launcher(chunked, chunked_pack),
    "PyTorch gather pages + SDPA": gather_then_sdpa,
    "PyTorch SDPA, contiguous K/V (control)": lambda: (
        torch.nn.functional.scaled_dot_product_attention(
            q_chunk, k, v, attn_mask=lower_right
        )
    ),
}
if FA4_OK:  # checked against ref_chunk first; a refusal is printed, not fatal
    fa4_launch = chunked_prefill.fa4_paged(q_chunk, cache, len_kv)
    fa4_prefill = baselines.admit(prefill_contenders, FA4, fa4_launch, ref_chunk)
else:
    fa4_prefill = FA4_DETAIL
    print(textwrap.fill(f"{FA4}: {FA4_DETAIL}", 88))
prefill = compare.compare(
    prefill_contenders,
    candidate="cuDNN paged",
    l2="cold",
    rounds=9,
    flops=4 * B * H * D * int(attention_inputs.band(CHUNK, S, bottom_right=True).sum()),
    tag="chunked prefill",
)
for name, s in prefill.versus.items():
    print(f"cuDNN paged vs {name}: {s['value']:.2f}× ({s['verdict']})")

# %%
# Plot
# ----
# Each contender's GPU time per call with its interval over rounds; the controls show
# what reading the pages in place costs against contiguous K/V.
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison

fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
plot_comparison(
    prefill, "µs", ax=ax, xlabel="µs per call", title="last chunk: 512 over 4096 keys"
)
plt.show()

# %%
# Conclusions
# -----------
# Computed from the comparison above (``chunked_prefill.conclusions``); the fastest
# contender is the fastest non-control.
from cudnn_guide.report.prose import Prose

sentences = chunked_prefill.conclusions(prefill, FA4, FA4_OK, fa4_prefill)
# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison

# against the fastest contender at this shape (the record names which); the slower
# ones are in the prose above
comparison("paged chunked prefill: speed-up over the fastest contender", prefill)
# sphinx_gallery_end_ignore
Prose(*sentences)
