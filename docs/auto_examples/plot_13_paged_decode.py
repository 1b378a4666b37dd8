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
  read bandwidth; and what the gather costs a framework that has to do it.
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
from cudnn_guide import attention, check

problem = attention.PagedDecodeProblem(batch=32, heads=32, head_dim=128, max_context=8192, page_size=64)
data = problem.make_inputs(seed=0)
paged = attention.paged_decode_graph(problem, data)
pack = paged.pack(**{k: data[k] for k in paged.io})
print(problem)
print(f"lengths: min {int(data['lengths'].min())}, median {int(data['lengths'].median())}, "
      f"max {int(data['lengths'].max())}; pool {tuple(data['k_pool'].shape)}; page table {tuple(data['page_table'].shape)}")
print(paged.built.report)

check.poison(data["o"])
paged.built.execute(pack)

# %%
# Check
# -----
# The reference gathers each sequence's pages (in page-table order) and computes attention in
# fp32 with a mask hiding the keys past each sequence's length. A cuDNN that read the table in
# another order, or ignored a length, would fail here.
k_gathered = attention.gather_pages(data["k_pool"], data["page_table"])
v_gathered = attention.gather_pages(data["v_pool"], data["page_table"])
mask = problem.key_mask(data["seq_len_kv"])
reference = check.reference(problem.torch_forward, data["q"], k_gathered, v_gathered, mask)
checks = [check.check(data["o"], reference, name="cuDNN paged decode")]
print(checks[-1])

# %%
# The baselines
# -------------
# *Gather + SDPA* is what a framework without paged attention does every step: copy the pages
# into contiguous K and V, then call ``scaled_dot_product_attention`` with the length mask
# (PyTorch picks the backend that accepts a mask). As a control, *SDPA on pre-gathered K/V*
# times the attention alone, as if the cache were contiguous: a lower bound for any
# gather-based approach, not a way a paged server could run.
import torch


def gather_then_sdpa(p, d, m):
    def run():
        k = attention.gather_pages(d["k_pool"], d["page_table"])
        v = attention.gather_pages(d["v_pool"], d["page_table"])
        return p.torch_forward(d["q"], k, v, m)
    return run


def sdpa_pregathered(p, d, k, v, m):
    return lambda: p.torch_forward(d["q"], k, v, m)


checks.append(check.check(gather_then_sdpa(problem, data, mask)(), reference, name="PyTorch gather + SDPA"))
print(checks[-1])

# %%
# Measure across context lengths
# ------------------------------
# Maximum context 1k–16k (lengths drawn from [max/8, max]). Bytes are K and V for each
# sequence's *true* length: what any implementation must read. Cold L2.
from cudnn_guide import bench, sweep

contexts = [1024, 2048, 4096, 8192, 16384]
made = {}


def setup(ctx):
    if ctx not in made:
        made.clear()
        torch.cuda.empty_cache()
        p = attention.PagedDecodeProblem(batch=32, heads=32, head_dim=128, max_context=ctx, page_size=64)
        d = p.make_inputs(seed=ctx)
        f = attention.paged_decode_graph(p, d)
        launch = f.built.bind(f.pack(**{k: d[k] for k in f.io}))
        m = p.key_mask(d["seq_len_kv"])
        k, v = attention.gather_pages(d["k_pool"], d["page_table"]), attention.gather_pages(d["v_pool"], d["page_table"])
        check.poison(d["o"])
        launch()
        check.check(d["o"], check.reference(p.torch_forward, d["q"], k, v, m), name=f"paged decode, context {ctx}")
        made[ctx] = (p, d, launch, m, k, v)
    return made[ctx]


impls = {
    "cuDNN paged": lambda c: setup(c)[2],
    "PyTorch gather + SDPA": lambda c: gather_then_sdpa(setup(c)[0], setup(c)[1], setup(c)[3]),
    "PyTorch SDPA on pre-gathered K/V (control)": lambda c: sdpa_pregathered(*[setup(c)[i] for i in (0, 1, 4, 5, 3)]),
}
result = sweep.sweep(contexts, impls, x="max_context", l2="cold",
                     bytes=lambda c: setup(c)[0].kv_bytes(setup(c)[1]["lengths"]), budget_ms=150)

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_lines

# Decode only reads K and V, so its ceiling is the read bandwidth (a 2 GiB ``torch.sum``), not
# the copy bandwidth, which counts bytes read plus written.
read = bench.measure_read_bandwidth()
print(read)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
plot_lines(result.measurements, x="max_context", metric="gbps", ax=ax1, logx=True,
           title="decode step: GB/s of K and V read", ceiling=read.gbps, ceiling_label="measured read bandwidth")
plot_lines(result.measurements, x="max_context", metric="median_us", ax=ax2, logx=True, logy=True,
           title="decode step: µs per step (32 sequences)")
ax1.legend(fontsize=8)
if ax2.get_legend() is not None:
    ax2.get_legend().remove()
plt.show()

# %%
result.table("median_us", title="decode step, µs (32 sequences, 32 heads × 128, pages of 64)")

# %%
# Takeaways
# ---------
from cudnn_guide.report import versus

for c in contexts:
    ours = result.get("cuDNN paged", c)
    gathered = result.get("PyTorch gather + SDPA", c)
    control = result.get("PyTorch SDPA on pre-gathered K/V (control)", c)
    print(f"* max context {c}: cuDNN reads K/V at {ours.gbps:.0f} GB/s ({100 * ours.gbps / read.gbps:.0f}% of the "
          f"measured read bandwidth); it is {versus(ours, gathered)} gather + SDPA and {versus(ours, control)} SDPA on "
          f"already-contiguous K/V.")

# sphinx_gallery_start_ignore
from cudnn_guide import records

rec = records.Record("plot_13_paged_decode", title="Paged KV-cache attention for decode", environment=env)
for c in checks:
    rec.add_check(c)
rec.add(read, result.measurements)
ours, base = result.get("cuDNN paged", 8192), result.get("PyTorch gather + SDPA", 8192)
rec.headline("paged decode at 8k context, % of read bandwidth", 100 * ours.gbps / read.gbps, "%")
rec.headline("paged decode at 8k context, time ratio gather+SDPA / cuDNN", base.median_ms / ours.median_ms, "x",
             baseline=base.label)
_record_path = rec.write()
# sphinx_gallery_end_ignore
