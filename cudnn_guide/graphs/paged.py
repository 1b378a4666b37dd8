"""Paged-KV decode: K and V read from fixed-size pages in one pool through a page table per
sequence, with each sequence's true length.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from cudnn_guide import graphs
from cudnn_guide.graphs import tensors
from cudnn_guide.graphs.declare import Problem, new_graph

__all__ = ["CONTROL", "PagedDecodeProblem", "gather_pages", "torch_decoders"]

CONTROL = "varlen_attn on pre-packed K/V (control, no gather)"
"""The name of :func:`torch_decoders`' control: attention alone on K/V packed beforehand."""


# ---------------------------------------------------------------------------------------------
# Decode from a paged KV cache
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PagedDecodeProblem(Problem):
    """One decode step (one new query token per sequence) over a paged K/V cache.

    Each of ``batch`` sequences has its own length, drawn uniformly from
    ``[max_context // 8, max_context]``; its keys and values live in pages of ``page_size``
    tokens scattered through one pool (``num_pages × heads × page_size × head_dim``), found
    through its row of the page table.

    Example
    -------
    >>> p = PagedDecodeProblem(batch=32, heads=32, head_dim=128, max_context=8192, page_size=64)
    >>> ins = p.make_inputs()
    """

    batch: int = 32
    heads: int = 32
    head_dim: int = 128
    max_context: int = 8192
    page_size: int = 64
    dtype: str = "bfloat16"

    @property
    def scale(self) -> float:
        return self.head_dim**-0.5

    @property
    def pages_per_sequence(self) -> int:
        return math.ceil(self.max_context / self.page_size)

    def kv_bytes(self, lengths: Any) -> int:
        """Bytes of K and V a decode step must read: each sequence's true length, not the maximum."""
        item = 2 if self.dtype in ("bfloat16", "float16") else 4
        return int(2 * item * self.heads * self.head_dim * int(lengths.sum()))

    def flops(self, lengths: Any) -> int:
        """Two matrix-vector products per head per sequence, 2 FLOPs per multiply-add."""
        return int(4 * self.heads * self.head_dim * int(lengths.sum()))

    def __str__(self) -> str:
        return (
            f"decode: {self.batch} sequences of up to {self.max_context} tokens, H{self.heads} D{self.head_dim}, "
            f"pages of {self.page_size} tokens, {self.dtype}"
        )

    def make_inputs(self, seed: int = 0) -> dict[str, Any]:
        """The pools, a shuffled page table, the lengths, the query and an empty output.

        Keys: ``q`` (B×H×1×D), ``k_pool``/``v_pool`` (pages×H×page×D), ``page_table``
        (B×1×pages-per-sequence×1, int32), ``seq_len_q`` (all 1) and ``seq_len_kv`` (B×1×1×1,
        int32), ``o`` (B×H×1×D), and ``lengths`` (host copy of the KV lengths).
        """
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        cpu = torch.Generator().manual_seed(seed)
        dt, b, h, d = self.torch_dtype, self.batch, self.heads, self.head_dim
        pps = self.pages_per_sequence
        pool = (b * pps, h, self.page_size, d)
        lengths = torch.randint(
            max(1, self.max_context // 8), self.max_context + 1, (b,), generator=cpu, dtype=torch.int32
        )
        table = torch.randperm(b * pps, generator=cpu, dtype=torch.int32).reshape(b, 1, pps, 1)
        return {
            "q": torch.randn(b, h, 1, d, device="cuda", dtype=dt, generator=g),
            "k_pool": torch.randn(pool, device="cuda", dtype=dt, generator=g),
            "v_pool": torch.randn(pool, device="cuda", dtype=dt, generator=g),
            "page_table": table.cuda(),
            "seq_len_q": torch.ones(b, 1, 1, 1, device="cuda", dtype=torch.int32),
            "seq_len_kv": lengths.reshape(b, 1, 1, 1).cuda(),
            "o": torch.empty(b, h, 1, d, device="cuda", dtype=dt),
            "lengths": lengths,
        }

    def key_mask(self, seq_len_kv: Any) -> Any:
        """Boolean B×1×1×S mask, True where key position < the sequence's length."""
        import torch

        s = self.pages_per_sequence * self.page_size
        return (torch.arange(s, device=seq_len_kv.device) < seq_len_kv.reshape(-1, 1)).reshape(self.batch, 1, 1, s)

    def torch_forward(self, q: Any, k: Any, v: Any, mask: Any) -> Any:
        """Attention of each query over its own sequence's keys (``mask`` hides the rest)."""
        import torch.nn.functional as F

        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)


def gather_pages(pool: Any, page_table: Any) -> Any:
    """Copy each sequence's pages out of the pool into a contiguous B×H×S×D tensor.

    What a framework without paged attention must do before calling ordinary attention.

    Parameters
    ----------
    pool
        pages × H × page × D.
    page_table
        B × 1 × pages-per-sequence × 1 page indices (int32).

    Returns
    -------
    Any
        B × H × (pages-per-sequence · page) × D, contiguous.

    Example
    -------
    >>> k = gather_pages(ins['k_pool'], ins['page_table'])
    """
    b, _, pps, _ = page_table.shape
    _, h, page, d = pool.shape
    pages = pool[page_table.reshape(b, pps).long()]  # B × pps × H × page × D
    return pages.permute(0, 2, 1, 3, 4).reshape(b, h, pps * page, d)


def torch_decoders(p: PagedDecodeProblem, d: dict[str, Any], mask: Any) -> dict[str, Any]:
    """PyTorch's decode paths over the same paged inputs, by name: each value *builds* a zero-argument launcher.

    Building may raise (a ``torch.nn.attention.varlen`` this PyTorch lacks): call each one where its
    refusal is reported. PyTorch's own pool layout (pages × page × heads × dim) and the valid-token
    index are made once here, untimed.

    * ``PyTorch varlen_attn on the paged pool``: FlashAttention reading the pages in place (``block_table``);
    * ``PyTorch gather valid tokens + varlen_attn``: one ``index_select`` of exactly the valid tokens, then
      variable-length attention;
    * ``PyTorch gather + padded SDPA``: every sequence's full page list copied out, attention over the
      padded maximum with ``mask``;
    * :data:`CONTROL`: ``varlen_attn`` on K and V packed beforehand, the attention alone.

    Parameters
    ----------
    p
        The problem.
    d
        Its inputs (:meth:`PagedDecodeProblem.make_inputs`).
    mask
        :meth:`PagedDecodeProblem.key_mask` of those inputs, for the padded path.

    Returns
    -------
    dict[str, Any]
        Name → a function that returns the launcher.

    Example
    -------
    >>> run = torch_decoders(p, d, p.key_mask(d["seq_len_kv"]))["PyTorch gather + padded SDPA"]()
    >>> out = run()
    """
    import torch

    def varlen():
        from torch.nn.attention.varlen import varlen_attn  # PyTorch ≥ 2.10

        return varlen_attn

    dev = d["q"].device
    lengths = d["lengths"].to(torch.int64)
    table = d["page_table"].reshape(p.batch, -1).long().cpu()
    pos = torch.arange(p.pages_per_sequence * p.page_size)
    token = torch.cat(
        [table[i, pos[:n] // p.page_size] * p.page_size + pos[:n] % p.page_size for i, n in enumerate(lengths.tolist())]
    ).to(dev)
    k_pool = d["k_pool"].permute(0, 2, 1, 3).contiguous()
    v_pool = d["v_pool"].permute(0, 2, 1, 3).contiguous()
    cu_k = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32).to(dev)
    cu_q = torch.arange(p.batch + 1, dtype=torch.int32, device=dev)
    q, max_k = d["q"].reshape(p.batch, p.heads, p.head_dim), int(lengths.max())
    used_k, block_table = d["lengths"].to(torch.int32).to(dev), d["page_table"].reshape(p.batch, -1).contiguous()

    def gathered():
        return k_pool.flatten(0, 1).index_select(0, token), v_pool.flatten(0, 1).index_select(0, token)

    def in_place():
        attn = varlen()
        return lambda: attn(
            q, k_pool, v_pool, cu_q, None, 1, max_k, scale=p.scale, seqused_k=used_k, block_table=block_table
        )

    def gather_varlen():
        attn = varlen()
        return lambda: attn(q, *gathered(), cu_q, cu_k, 1, max_k, scale=p.scale)

    def padded():
        return lambda: p.torch_forward(
            d["q"], gather_pages(d["k_pool"], d["page_table"]), gather_pages(d["v_pool"], d["page_table"]), mask
        )

    def control():
        attn, (k, v) = varlen(), gathered()
        return lambda: attn(q, k, v, cu_q, cu_k, 1, max_k, scale=p.scale)

    return {
        "PyTorch varlen_attn on the paged pool": in_place,
        "PyTorch gather valid tokens + varlen_attn": gather_varlen,
        "PyTorch gather + padded SDPA": padded,
        CONTROL: control,
    }


def paged_decode_graph(
    problem: PagedDecodeProblem,
    inputs: dict[str, Any],
    *,
    handle: Any = None,
    name: str = "paged_decode",
    **graph_kwargs: Any,
) -> graphs.BuiltGraph:
    """Build cuDNN attention that reads K and V straight from the paged pools.

    The pools stand in for K and V; ``paged_attention_k_table``/``_v_table`` map each sequence's
    logical pages to pool pages (one table serves both here), ``seq_len_q``/``seq_len_kv`` with
    ``use_padding_mask=True`` hide the keys past each sequence's length.

    Parameters
    ----------
    problem
        The decode problem.
    inputs
        From :meth:`PagedDecodeProblem.make_inputs`.
    handle
        cuDNN handle; default the device's.
    name
        Graph name.
    graph_kwargs
        More ``cudnn.pygraph`` arguments.

    Returns
    -------
    graphs.BuiltGraph
        Tensors ``q, k_pool, v_pool, page_table, seq_len_q, seq_len_kv, o``.

    Example
    -------
    >>> f = paged_decode_graph(p, ins)
    >>> f.execute(f.pack(**{k: ins[k] for k in f.io}))
    """
    import cudnn

    g, handle = new_graph(problem, name, handle, graph_kwargs)
    io = {
        n: tensors.graph_tensor(g, inputs[n], n)
        for n in ("q", "k_pool", "v_pool", "page_table", "seq_len_q", "seq_len_kv")
    }
    O, _ = g.sdpa(
        name="sdpa_paged",
        q=io["q"],
        k=io["k_pool"],
        v=io["v_pool"],
        generate_stats=False,
        attn_scale=problem.scale,
        use_padding_mask=True,
        seq_len_q=io["seq_len_q"],
        seq_len_kv=io["seq_len_kv"],
        paged_attention_k_table=io["page_table"],
        paged_attention_v_table=io["page_table"],
        paged_attention_max_seq_len_kv=problem.pages_per_sequence * problem.page_size,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    io["o"] = tensors.output_like(O, inputs["o"])
    return graphs.build(g, name=name, handle=handle, io=io)
