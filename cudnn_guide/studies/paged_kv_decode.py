"""Paged KV-cache decode raced against PyTorch's decodes and FlashAttention-4: the paged-decode page's study.

The page builds its own cuDNN graph over the paged pools (its lesson's ``paged_decode(d, max_kv)``,
which returns the graph and its variant pack); this module times it against the others.
:class:`DecodeContenders` makes every contender at one maximum context, each checked against the
fp32 reference over the gathered pages before it is timed: the cuDNN graph, PyTorch's decodes
(:func:`~cudnn_guide.graphs.paged.torch_decoders`, the padded SDPA named :data:`PADDED_NAME`) and
FlashAttention-4 reading the pages in place (:func:`fa4_paged`). It keeps one context's set at a
time, so a sweep over contexts can ask for each as it reaches it
(:meth:`DecodeContenders.launchers`, :meth:`DecodeContenders.kv_bytes`), and makes the cuDNN graph
and FlashAttention-4 at another page size (:meth:`DecodeContenders.at_page_size`).
:func:`conclusions` words the verdicts as the page's conclusions.

The contenders need a GPU; the conclusions do not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cudnn_guide import check, graphs
from cudnn_guide.graphs import paged
from cudnn_guide.graphs.paged import PagedDecodeProblem
from cudnn_guide.measure import baselines, fa4
from cudnn_guide.report.prose import verdict_text

__all__ = ["CANDIDATE", "PADDED", "PADDED_NAME", "DecodeContenders", "conclusions", "fa4_paged"]

CANDIDATE = "cuDNN paged"
"""The cuDNN graph's name among the contenders."""

PADDED = "PyTorch gather + padded SDPA"
""":func:`~cudnn_guide.graphs.paged.torch_decoders`' padded path, whose SDPA runs with no backend forced."""

PADDED_NAME = f"{PADDED}, default dispatch"
"""The padded path's contender name: it says that PyTorch's default dispatch picks the kernel."""


def fa4_paged(d: dict[str, Any]) -> Callable[[], Any]:
    """A launcher of FlashAttention-4's paged decode over ``d``'s pools; its output seen as B×H×1×D.

    ``flash_attn_varlen_func`` with ``page_table`` (B × pages-per-sequence, int32) and ``seqused_k``
    (each sequence's length), over copies of the pools laid out pages × page × H × D and of Q as
    B×1×H×D, made once here, untimed.

    Parameters
    ----------
    d
        The inputs of :meth:`~cudnn_guide.graphs.paged.PagedDecodeProblem.make_inputs` (``q``,
        ``k_pool``, ``v_pool``, ``page_table``, ``lengths``).

    Returns
    -------
    Callable[[], Any]
        The launcher; building it raises :class:`ImportError` where FlashAttention-4 is missing.

    Example
    -------
    >>> launch = fa4_paged(p.make_inputs(seed=8192))
    >>> out = launch()  # B×H×1×D
    """
    import torch
    from flash_attn.cute import flash_attn_varlen_func

    q = d["q"].transpose(1, 2).contiguous()  # B×1×H×D
    k_pool, v_pool = (
        d[n].permute(0, 2, 1, 3).contiguous()  # pages × page × H × D
        for n in ("k_pool", "v_pool")
    )
    table = d["page_table"].reshape(q.shape[0], -1).contiguous()  # B × pages, int32
    used = d["lengths"].to(torch.int32).cuda()
    scale = q.shape[-1] ** -0.5

    def launch() -> Any:
        r = flash_attn_varlen_func(q, k_pool, v_pool, page_table=table, seqused_k=used, softmax_scale=scale)
        return (r[0] if isinstance(r, tuple) else r).transpose(1, 2)

    return launch


class DecodeContenders:
    """Every contender of one decode step at a maximum context, each checked first; one context kept.

    Calling it with a maximum context makes (or returns, when that context is the one kept) its
    contenders over :meth:`~cudnn_guide.graphs.paged.PagedDecodeProblem.make_inputs` (``seed`` the
    context): the cuDNN graph from ``build``, run into a NaN-filled output and checked; then
    PyTorch's decodes (:func:`~cudnn_guide.graphs.paged.torch_decoders`) and, where it imports,
    FlashAttention-4 (:func:`fa4_paged`), each checked against the fp32 reference over the gathered
    pages. At ``first_context`` each is admitted with :func:`~cudnn_guide.measure.baselines.admit`,
    which prints its check or why it cannot run; one that cannot is kept in :attr:`unavailable` and
    not tried again. At the other contexts one that raises is printed (``"<name>, context <ctx>:
    <error type>"``) and left out there only. A decoder this PyTorch cannot build (an
    :class:`ImportError`) joins :attr:`unavailable` at any context.

    Parameters
    ----------
    build
        ``build(d, max_kv)``: declares and builds the paged decode over the inputs ``d`` with
        ``max_kv`` tokens per sequence at most, and returns the graph and its variant pack.
    handle
        The cuDNN handle the graph was built with.
    first_context
        The context at which each contender is admitted (the sweep's first).
    batch
        Sequences B.
    heads
        Heads H (of Q, K and V).
    head_dim
        Head dimension D.

    Notes
    -----
    ``fa4`` is FlashAttention-4's contender name, with its version
    (:func:`~cudnn_guide.measure.fa4.label`); ``unavailable`` maps a name to why it did not run
    here (FlashAttention-4 from the start when it does not import).

    Example
    -------
    >>> setup = DecodeContenders(paged_decode, handle, first_context=1024)
    >>> runs, problem, inputs = setup(1024)
    >>> result = sweep.sweep(contexts, setup.launchers(list(runs)), x="max_context", l2="cold",
    ...                      bytes=setup.kv_bytes, candidate=CANDIDATE)
    """

    def __init__(
        self,
        build: Callable[[dict[str, Any], int], tuple[Any, dict[Any, Any]]],
        handle: Any,
        *,
        first_context: int,
        batch: int = 32,
        heads: int = 32,
        head_dim: int = 128,
    ) -> None:
        self.build, self.handle, self.first_context = build, handle, first_context
        self.batch, self.heads, self.head_dim = batch, heads, head_dim
        self.fa4_ok, fa4_detail = fa4.status()
        self.fa4 = fa4.label()
        self.unavailable: dict[str, str] = {} if self.fa4_ok else {self.fa4: fa4_detail}
        self.made: dict[int, tuple[dict[str, Callable[[], Any]], PagedDecodeProblem, dict[str, Any]]] = {}

    def clear(self) -> None:
        """Drop the context kept, and return its memory to the GPU."""
        import torch

        self.made.clear()
        torch.cuda.empty_cache()

    def __call__(self, ctx: int) -> tuple[dict[str, Callable[[], Any]], PagedDecodeProblem, dict[str, Any]]:
        """The contenders at maximum context ``ctx``, each checked; made once, the previous context dropped.

        Parameters
        ----------
        ctx
            The maximum context (lengths drawn from ``[ctx // 8, ctx]``).

        Returns
        -------
        tuple
            ``(runs, problem, inputs)``: name → launcher (the cuDNN graph first), the
            :class:`~cudnn_guide.graphs.paged.PagedDecodeProblem` and its inputs.
        """
        if ctx not in self.made:
            self.clear()
            p = PagedDecodeProblem(batch=self.batch, heads=self.heads, head_dim=self.head_dim, max_context=ctx)
            d = p.make_inputs(seed=ctx)
            gc, pc = self.build(d, p.pages_per_sequence * p.page_size)
            runs = {CANDIDATE: graphs.adopt(gc, self.handle, name=f"paged decode {ctx}").bind(pc)}
            m = p.key_mask(d["seq_len_kv"])
            k, v = (paged.gather_pages(d[n], d["page_table"]) for n in ("k_pool", "v_pool"))
            ref = check.reference(p.torch_forward, d["q"], k, v, m)
            del k, v
            check.poison(d["o"])
            runs[CANDIDATE]()
            check.check(d["o"], ref, name=f"paged decode, context {ctx}")
            builders = {PADDED_NAME if n == PADDED else n: b for n, b in paged.torch_decoders(p, d, m).items()}
            if self.fa4_ok:
                builders[self.fa4] = lambda: fa4_paged(d)
            for name, make in builders.items():
                if name in self.unavailable:
                    continue

                def checked(out: Any, n: str = f"{name}, context {ctx}") -> Any:
                    return check.check(out.reshape(d["o"].shape), ref, name=n)

                try:
                    run = make()
                except ImportError as error:  # a PyTorch without torch.nn.attention.varlen
                    self.unavailable[name] = f"{type(error).__name__}: {error}"
                    continue
                if ctx == self.first_context:  # the first context prints each check or refusal
                    if why := baselines.admit(runs, name, run, check=checked):
                        self.unavailable[name] = why
                    continue
                try:
                    out = run()
                except Exception as error:  # a refusal at one context shows as "—"
                    print(f"{name}, context {ctx}: {type(error).__name__}")
                    continue
                checked(out)
                runs[name] = run
            self.made[ctx] = (runs, p, d)
        return self.made[ctx]

    def launchers(self, names: Sequence[str]) -> dict[str, Callable[[int], Callable[[], Any] | None]]:
        """A sweep's implementations: name → ``factory(ctx)``, the contender at ``ctx`` or ``None``.

        Parameters
        ----------
        names
            The contenders, in the order the sweep times them (the cuDNN graph first).

        Returns
        -------
        dict[str, Callable[[int], Callable[[], Any] | None]]
            For :func:`~cudnn_guide.measure.sweep.sweep`; ``None`` where a contender refused
            that context (the sweep's tables show "—").
        """
        return {name: lambda c, name=name: self(c)[0].get(name) for name in names}

    def kv_bytes(self, ctx: int) -> int:
        """The bytes of K and V one decode step at ``ctx`` must read: each sequence's true length.

        Parameters
        ----------
        ctx
            The maximum context.

        Returns
        -------
        int
            :meth:`~cudnn_guide.graphs.paged.PagedDecodeProblem.kv_bytes` of that context's lengths.
        """
        _, p, d = self(ctx)
        return p.kv_bytes(d["lengths"])

    def at_page_size(self, p: PagedDecodeProblem) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
        """The cuDNN graph and FlashAttention-4 over ``p``'s pages (another page size), each checked first.

        The context kept is dropped first. The inputs are made with ``seed=p.max_context``. A page
        size the cuDNN graph refuses is printed (``"cuDNN paged, pages of N: <error>"``) and
        leaves no contender; otherwise FlashAttention-4 is admitted after it
        (:func:`~cudnn_guide.measure.baselines.admit`: its check printed, or why it cannot run).

        Parameters
        ----------
        p
            The decode problem, e.g. ``dataclasses.replace(p64, page_size=128)``.

        Returns
        -------
        tuple
            ``(contenders, inputs)``: name → launcher (both when both ran), and ``p``'s inputs.
        """
        self.clear()
        d = p.make_inputs(seed=p.max_context)
        k, v = (paged.gather_pages(d[n], d["page_table"]) for n in ("k_pool", "v_pool"))
        mask = p.key_mask(d["seq_len_kv"])
        ref = check.reference(p.torch_forward, d["q"], k, v, mask)
        del k, v
        contenders: dict[str, Callable[[], Any]] = {}
        pages = f"pages of {p.page_size}"
        try:  # a page size cuDNN refuses is printed, not fatal
            g, pack = self.build(d, p.pages_per_sequence * p.page_size)
        except Exception as error:
            print(f"{CANDIDATE}, {pages}: {type(error).__name__}: {error}")
        else:
            adopted = graphs.adopt(g, self.handle, name=f"paged decode, {pages}")
            contenders[CANDIDATE] = adopted.bind(pack)
            check.poison(d["o"])
            contenders[CANDIDATE]()
            check.check(d["o"], ref, name=f"cuDNN paged decode, {pages}")
            baselines.admit(
                contenders,
                self.fa4,
                fa4_paged(d),
                check=lambda out: check.check(out.reshape(d["o"].shape), ref, name=f"{self.fa4}, {pages}"),
            )
        return contenders, d


def conclusions(
    result: Any,
    contexts: Sequence[int],
    read_gbps: float,
    at_128: Any,
    unavailable: dict[str, str],
    fa4_name: str,
) -> list[str]:
    """The page's conclusions, computed from its verdicts: one paragraph or list item per string.

    By maximum context at pages of 64, cuDNN's share of the read bandwidth and its verdict against
    the fastest contender, which the verdict names (and against
    :data:`~cudnn_guide.graphs.paged.CONTROL` where it ran); the count of verdicts against
    FlashAttention-4 at pages of 64, or why it was not timed; the verdict at pages of 128 (8k
    context) and whether the page size changed it; each context where the back-to-back loop (host
    time included) and the GPU time disagree, with the host and GPU times per call; and each other
    contender that did not run. Verdicts and their count are said to be this run's (in-run): the
    record widens them later.

    Parameters
    ----------
    result
        The sweep at pages of 64 (:class:`~cudnn_guide.measure.sweep.SweepResult` with a
        comparison per context, 8192 among them).
    contexts
        The maximum contexts, in order.
    read_gbps
        The measured read bandwidth, GB/s.
    at_128
        The comparison at pages of 128 tokens and 8k context, or ``None`` where it was not timed.
    unavailable
        Name → why it did not run (:attr:`DecodeContenders.unavailable`).
    fa4_name
        FlashAttention-4's contender name.

    Returns
    -------
    list[str]
        The sentences, for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(result, contexts, read.gbps, at_128, setup.unavailable, FA4))
    """
    FA4 = fa4_name
    sentences = ["At pages of 64 tokens, by maximum context:"]
    for c in contexts:
        cmp = result.comparisons[c]
        ours = cmp.measurements[CANDIDATE]
        control = (
            f"; against the control (attention alone on packed K/V) it is {verdict_text(cmp, paged.CONTROL)}"
            if paged.CONTROL in cmp.versus
            else ""
        )
        sentences.append(
            f"* max context {c}: cuDNN reads K/V at {ours.gbps:.0f} GB/s "
            f"({100 * ours.gbps / read_gbps:.0f}% of the measured read bandwidth); "
            f"against the fastest contender it is {verdict_text(cmp)}{control}."
        )
    fa = [result.comparisons[c].versus[FA4]["verdict"] for c in contexts if FA4 in result.comparisons[c].versus]
    if fa:
        only = (
            "; this count is for pages of 64 only: at pages of 128 just the 8k context was timed (next)"
            if at_128 is not None
            else ""
        )
        sentences.append(
            f"At pages of 64 tokens, against {FA4}, cuDNN is, in this run, faster at "
            f"{fa.count('faster')}, ties at {fa.count('tie')} and is slower at "
            f"{fa.count('slower')} of the {len(fa)} contexts timed{only}."
        )
    else:
        why = unavailable.get(FA4, "it refused every context (its errors are printed above)")
        sentences.append(f"{FA4} was not timed at pages of 64: {why}.")
    if at_128 is not None:
        sentences.append(f"At pages of 128 tokens (8k context), cuDNN is {verdict_text(at_128, FA4)}.")
        if FA4 in result.comparisons[8192].versus:  # the same context at pages of 64
            said = {"faster": "faster", "slower": "slower", "tie": "tied"}
            v64 = said[result.comparisons[8192].versus[FA4]["verdict"]]
            v128 = said[at_128.versus[FA4]["verdict"]]
            if v64 != v128:
                sentences.append(
                    f"So at 8k context the page size decides the winner in this run: "
                    f"against {FA4}, cuDNN is {v64} at pages of 64 and {v128} at pages of "
                    "128 tokens."
                )
            else:
                sentences.append(
                    f"At 8k context the page size does not change the verdict against "
                    f"{FA4} in this run: cuDNN is {v64} at pages of 64 and of 128 tokens."
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
        pairs = [(n, cmp.measurements[n]) for n in (CANDIDATE, best)]
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
    sentences += [f"* {name} did not run here: {why}" for name, why in unavailable.items() if name != FA4]
    return sentences
