"""Chunked prefill over a paged K/V cache: the chunked-prefill page's study.

The page builds its cuDNN graphs itself (its lesson's ``masked_attention``); this module makes what
they are raced against. :func:`page_kv` scatters contiguous K and V into the pages of a pool, as a
serving engine keeps them, with their page table (:class:`PagedKV`); :func:`gather_then_sdpa` is the
PyTorch way of reading them (gather the pages, then SDPA), :func:`fa4_paged` FlashAttention-4's
(``page_table`` in place). :func:`conclusions` words the comparison as the page's conclusions.

The launchers run where their tensors are (FlashAttention-4 needs a GPU); the pools, the gather and
the conclusions run on the CPU too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cudnn_guide.report.prose import gpu_and_loop_text

__all__ = ["CANDIDATE", "CONTIGUOUS", "GATHER", "PagedKV", "conclusions", "fa4_paged", "gather_then_sdpa", "page_kv"]

CANDIDATE = "cuDNN paged"
"""The cuDNN graph over the paged cache, the comparison's candidate."""

GATHER = "PyTorch gather pages + SDPA"
""":func:`gather_then_sdpa`'s contender name."""

CONTIGUOUS = "cuDNN contiguous K/V (control)"
"""The control: the same cuDNN attention on contiguous K/V."""


@dataclass
class PagedKV:
    """K and V scattered into the pages of a pool, and the table that finds each sequence's pages.

    Example
    -------
    >>> cache = page_kv(k, v, page=64)
    >>> cache.k_pool.shape  # pool pages × H × page × D
    """

    k_pool: Any
    """Pool pages × H × page × D: the keys, each sequence's in its own pages."""
    v_pool: Any
    """The values, in the same pages as the keys."""
    page_table: Any
    """B × 1 × pages-per-sequence × 1, int32: the pool page of each sequence's page, in order."""
    page: int
    """Tokens per page."""
    pages_per_seq: int
    """Pages per sequence: the keys per sequence over the page size."""


def page_kv(k: Any, v: Any, *, page: int = 64, spare_pages: int = 13, seed: int = 1) -> PagedKV:
    """Scatter B×H×S×D keys and values into a pool of pages at random places, with their page table.

    The pool holds ``spare_pages`` more pages than the batch uses, as a real pool does; which pool
    page each sequence's page lands in is a random permutation drawn on the CPU (``seed``). Pages
    no sequence uses stay zero.

    Parameters
    ----------
    k
        B×H×S×D keys; S a multiple of ``page``.
    v
        B×H×S×D values, on the same device and of the same dtype.
    page
        Tokens per page.
    spare_pages
        Pool pages beyond the batch's.
    seed
        The seed of the permutation.

    Returns
    -------
    PagedKV
        The pools (on ``k``'s device, of its dtype) and the int32 page table (B × 1 × pages × 1).

    Example
    -------
    >>> cache = page_kv(k, v, page=64, spare_pages=13, seed=1)
    """
    import torch

    B, H, S, D = k.shape
    pages_per_seq = S // page
    pool_pages = B * pages_per_seq + spare_pages
    perm = torch.randperm(pool_pages, generator=torch.Generator().manual_seed(seed))[: B * pages_per_seq]
    page_table = perm.to(torch.int32).to(k.device).reshape(B, 1, pages_per_seq, 1)
    k_pool = torch.zeros(pool_pages, H, page, D, device=k.device, dtype=k.dtype)
    v_pool = torch.zeros_like(k_pool)
    for b in range(B):  # scatter each sequence's keys and values into its pages
        k_pool[page_table[b, 0, :, 0].long()] = k[b].reshape(H, pages_per_seq, page, D).transpose(0, 1)
        v_pool[page_table[b, 0, :, 0].long()] = v[b].reshape(H, pages_per_seq, page, D).transpose(0, 1)
    return PagedKV(k_pool, v_pool, page_table, page, pages_per_seq)


def gather_then_sdpa(q: Any, cache: PagedKV, attn_mask: Any) -> Callable[[], Any]:
    """The PyTorch way: a launcher that gathers each sequence's pages into contiguous K/V, then runs SDPA.

    Each call indexes the pools through the page table and runs
    ``torch.nn.functional.scaled_dot_product_attention`` with ``attn_mask``.

    Parameters
    ----------
    q
        B×H×Sq×D queries.
    cache
        The paged K/V (:func:`page_kv`).
    attn_mask
        The mask SDPA gets (e.g. ``causal_lower_right(Sq, S)``).

    Returns
    -------
    Callable[[], Any]
        The launcher; its output is B×H×Sq×D.

    Example
    -------
    >>> gather = gather_then_sdpa(q_chunk, cache, causal_lower_right(512, 4096))
    >>> out = gather()
    """
    import torch

    B, H, _, D = q.shape
    pages, page, page_table = cache.pages_per_seq, cache.page, cache.page_table
    k_pool, v_pool = cache.k_pool, cache.v_pool

    def gather() -> Any:
        idx = page_table.reshape(B, pages).long()
        kc = k_pool[idx].permute(0, 2, 1, 3, 4).reshape(B, H, pages * page, D)
        vc = v_pool[idx].permute(0, 2, 1, 3, 4).reshape(B, H, pages * page, D)
        return torch.nn.functional.scaled_dot_product_attention(q, kc, vc, attn_mask=attn_mask)

    return gather


def fa4_paged(q: Any, cache: PagedKV, seq_len_kv: Any) -> Callable[[], Any]:
    """A launcher of FlashAttention-4 over the same pages (bottom-right causal); its output seen as B×H×Sq×D.

    ``flash_attn_varlen_func`` with ``page_table`` (B × pages, int32), ``seqused_k`` (the keys so far
    per sequence), ``softmax_scale=D**-0.5`` and ``causal=True`` (bottom-right when the queries are
    fewer than the keys), over copies made once here, untimed: Q as B×Sq×H×D and the pools as
    pages × page × H × D.

    Parameters
    ----------
    q
        B×H×Sq×D queries.
    cache
        The paged K/V (:func:`page_kv`).
    seq_len_kv
        B×1×1×1 int32: each sequence's keys so far.

    Returns
    -------
    Callable[[], Any]
        The launcher; making it raises :class:`ImportError` where FlashAttention-4 is missing.

    Example
    -------
    >>> baselines.admit(contenders, FA4, fa4_paged(q_chunk, cache, len_kv), ref_chunk)
    """
    from flash_attn.cute import flash_attn_varlen_func

    B, D = q.shape[0], q.shape[-1]
    q_fa = q.transpose(1, 2).contiguous()  # B × Sq × H × D
    k_fa, v_fa = (t.permute(0, 2, 1, 3).contiguous() for t in (cache.k_pool, cache.v_pool))
    table = cache.page_table.reshape(B, cache.pages_per_seq).contiguous()  # B × pages, int32
    used = seq_len_kv.reshape(B).contiguous()  # keys so far, per sequence
    kw = dict(page_table=table, seqused_k=used, softmax_scale=D**-0.5, causal=True)

    def launch() -> Any:
        r = flash_attn_varlen_func(q_fa, k_fa, v_fa, **kw)  # out, or (out, lse)
        return (r[0] if isinstance(r, tuple) else r).transpose(1, 2)

    return launch


def _also(c: Any, *names: str) -> str:
    """The comparisons of ``c`` against ``names`` other than its fastest contender, each ``"; vs <name>: …"``."""
    return "".join(f"; vs {n}: {gpu_and_loop_text(c, n)}" for n in names if n in c.versus and n != c.best_baseline)


def conclusions(prefill: Any, fa4_name: str, fa4_ok: bool, fa4_why: str | None) -> list[str]:
    """The page's conclusion on the paged chunked prefill, computed from its comparison.

    cuDNN paged against the fastest contender (the fastest non-control), then against
    FlashAttention-4 and :data:`GATHER` where they are not the fastest, then against
    :data:`CONTIGUOUS` (reading pages in place against contiguous K/V); each verdict on GPU time,
    with the back-to-back loop's where the comparison has one
    (:func:`~cudnn_guide.report.prose.gpu_and_loop_text`). Where FlashAttention-4 is not in the
    comparison, why.

    Parameters
    ----------
    prefill
        The :class:`~cudnn_guide.measure.compare.Comparison` with candidate :data:`CANDIDATE`.
    fa4_name
        FlashAttention-4's contender name.
    fa4_ok
        Whether FlashAttention-4 is installed.
    fa4_why
        Why it did not run: what :func:`~cudnn_guide.measure.baselines.admit` returned where it is
        installed, else why it is not installed.

    Returns
    -------
    list[str]
        One paragraph, for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(prefill, FA4, FA4_OK, fa4_prefill))
    """
    if fa4_name in prefill.versus:  # it read the same pages in place: compared above
        fa4_says = ""
    elif fa4_ok:
        fa4_says = f"{fa4_name} did not run the paged chunked prefill: {fa4_why}."
    else:  # not installed: the reason, with the install command
        fa4_says = f"{fa4_name} was not in the chunked-prefill race: {fa4_why}."
    return [
        f"Chunked prefill over a paged cache: against the fastest contender, {CANDIDATE} "
        f"is {gpu_and_loop_text(prefill)}{_also(prefill, fa4_name, GATHER)}; reading pages in place "
        f"against contiguous K/V: {gpu_and_loop_text(prefill, CONTIGUOUS)}. {fa4_says}",
    ]
