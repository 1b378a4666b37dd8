"""Grouped-query and multi-query attention raced against PyTorch and FlashAttention-4: the GQA page's study.

K and V with fewer heads than Q (GQA; MQA with one) shrink the K/V cache (:func:`kv_cache_rows`).
:func:`race` times, for each phase (prefill, decode) and each K/V head count, the cuDNN graph
(:func:`~cudnn_guide.graphs.attention.sdpa_graph`, named :data:`CANDIDATE`) against PyTorch's SDPA
with ``enable_gqa=True`` forced onto each of its backends and against FlashAttention-4, every
contender checked against the fp32 reference first; a backend that refuses is printed with its
error and PyTorch's reasons (:func:`~cudnn_guide.measure.baselines.refusal`).
:func:`by_phase` reads each phase's comparisons as
one sweep over the K/V heads, :func:`phase_verdicts` lists their verdicts, and :func:`conclusions`
words them, judging the cuDNN graph against the fastest implementation that is not cuDNN itself
(:func:`fastest_other`; :data:`SELF`, PyTorch's SDPA on its cuDNN backend, is not counted) and
naming the fastest of all (:func:`fastest`).

The race needs a GPU; the table, the verdicts and the conclusions do not.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from cudnn_guide.measure import baselines
from cudnn_guide.measure.baselines import refusal
from cudnn_guide.report.prose import listed

__all__ = [
    "CACHE",
    "CANDIDATE",
    "KV_HEADS",
    "SELF",
    "by_phase",
    "conclusions",
    "fastest",
    "fastest_other",
    "kv_cache_rows",
    "median_us",
    "phase_verdicts",
    "qkv",
    "race",
    "short",
    "times",
]

CANDIDATE = "cuDNN graph"
"""The cuDNN graph's name among the contenders."""

SELF = baselines.SDPA_BACKEND_NAMES["PyTorch cuDNN"]
"""PyTorch's SDPA on its cuDNN backend: cuDNN's own kernel, shown but not counted as a rival."""

KV_HEADS = (32, 8, 1)
"""The K/V head counts raced with 32 query heads: MHA, GQA and MQA."""

CACHE = "K/V cache, 32k tokens × 32 layers (GiB)"
"""The column of :func:`kv_cache_rows` with the cache's size."""

_WRAP = dict(subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)


def kv_cache_rows(head_dim: int, heads: Sequence[int] = KV_HEADS) -> list[dict[str, Any]]:
    """The K/V bytes per token per layer, and the cache of 32k tokens × 32 layers, for each K/V head count.

    Each token keeps ``2 · Hkv · D`` bf16 values per layer (K and V).

    Parameters
    ----------
    head_dim
        Head dimension D.
    heads
        The K/V head counts, each one of 32 (MHA), 8 (GQA) or 1 (MQA).

    Returns
    -------
    list[dict[str, Any]]
        One row per head count: ``"K/V heads"``, ``"kind"``, ``"K/V bytes per token per layer"``
        and :data:`CACHE`.

    Example
    -------
    >>> [row["K/V bytes per token per layer"] for row in kv_cache_rows(128)]
    [16384, 4096, 512]
    """
    rows = []
    for h in heads:
        per_token = 2 * h * head_dim * 2  # K and V, bf16
        rows.append(
            {
                "K/V heads": h,
                "kind": {32: "MHA", 8: "GQA", 1: "MQA"}[h],
                "K/V bytes per token per layer": per_token,
                CACHE: per_token * 32768 * 32 / 2**30,
            }
        )
    return rows


def qkv(q_heads: int, heads: int, seq: int, batch: int, head_dim: int, seed: int) -> list[Any]:
    """Q with ``q_heads`` heads, K and V with ``heads``: B×H×S×D bf16 on the GPU, from one seeded generator.

    Parameters
    ----------
    q_heads
        Query heads Hq.
    heads
        K/V heads Hkv.
    seq
        Tokens S of each.
    batch
        Sequences B.
    head_dim
        Head dimension D.
    seed
        The CUDA generator's seed; Q, K and V are drawn in that order.

    Returns
    -------
    list[Any]
        ``[q, k, v]``.

    Example
    -------
    >>> q, k, v = qkv(32, 8, seq=4096, batch=4, head_dim=128, seed=8)
    """
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = ((batch, q_heads, seq, head_dim), (batch, heads, seq, head_dim), (batch, heads, seq, head_dim))
    return [torch.randn(x, device="cuda", dtype=torch.bfloat16, generator=gen) for x in shapes]


def race(
    handle: Any,
    phases: Mapping[str, tuple[int, int, int]],
    *,
    q_heads: int,
    head_dim: int,
    fa4_name: str | None,
    checks: list[Any],
    kv_heads: Sequence[int] = KV_HEADS,
    rounds: int = 9,
) -> tuple[dict[tuple[str, int], Any], dict[tuple[str, int], int]]:
    """Race the cuDNN graph against PyTorch's SDPA backends and FlashAttention-4, phase by phase, head by head.

    For each phase and K/V head count: Q, K and V from :func:`qkv` (``seed`` the head count, Q cut
    to its last ``queries`` tokens); the cuDNN graph (:func:`~cudnn_guide.graphs.attention.sdpa_graph`,
    causal for ``"prefill"``, no mask otherwise) run once and checked against the fp32 reference
    (:func:`~cudnn_guide.graphs.attention_inputs.reference`); then each of PyTorch's backends
    (:func:`~cudnn_guide.measure.baselines.sdpa_backends`) forced with ``enable_gqa=True``: one
    that raises is printed whole with :func:`~cudnn_guide.measure.baselines.refusal`,
    wrapped at 88 characters, and left out;
    one that runs is admitted with its check (:func:`~cudnn_guide.measure.baselines.admit`);
    then FlashAttention-4 (:func:`~cudnn_guide.measure.fa4.forward`) the same way, where
    ``fa4_name`` is given. Then :func:`~cudnn_guide.measure.compare.compare` races them in
    interleaved rounds, cold L2, with the attention's FLOPs (halved when causal) and the bytes of
    K and V read and Q read and O written.

    Parameters
    ----------
    handle
        The cuDNN handle the graphs are built with.
    phases
        Phase → ``(batch, queries, keys)``.
    q_heads
        Query heads Hq.
    head_dim
        Head dimension D.
    fa4_name
        FlashAttention-4's contender name, or ``None`` where it does not import.
    checks
        The cuDNN graph's checks are appended here.
    kv_heads
        The K/V head counts, in order.
    rounds
        :func:`~cudnn_guide.measure.compare.compare`'s rounds (a cap).

    Returns
    -------
    tuple
        ``(results, kv_bytes)``: ``(phase, heads)`` → its comparison, and → the bytes of its K and V.

    Example
    -------
    >>> phases = {"prefill": (4, 4096, 4096), "decode": (32, 1, 8192)}
    >>> results, kv_bytes = race(handle, phases, q_heads=32, head_dim=128, fa4_name=FA4, checks=[])
    """
    import torch

    from cudnn_guide import check
    from cudnn_guide.graphs import attention, attention_inputs
    from cudnn_guide.measure import compare, fa4

    backends = {baselines.SDPA_BACKEND_NAMES.get(n, n): be for n, be in baselines.sdpa_backends().items()}
    results, kv_bytes = {}, {}
    for phase, (batch, s_q, s_kv) in phases.items():
        for heads in kv_heads:
            q, k, v = qkv(q_heads, heads, seq=s_kv, batch=batch, head_dim=head_dim, seed=heads)
            q = q[:, :, -s_q:].contiguous()
            o = torch.empty_like(q)
            is_causal = phase == "prefill"  # a decode query sees every cached key: no mask
            problem = attention.SdpaProblem(batch, q_heads, s_kv, head_dim, causal=is_causal)
            fused = attention.sdpa_graph(problem, dict(q=q, k=k, v=v, o=o), handle=handle)
            contenders = {CANDIDATE: fused.bind(fused.pack(q=q, k=k, v=v, o=o))}
            band = attention_inputs.band(s_q, s_kv, device="cuda") if is_causal else None
            reference = attention_inputs.reference(q, k, v, visible=band)
            contenders[CANDIDATE]()
            checks.append(check.check(o, reference, name=f"cuDNN {phase}, Hkv={heads}"))
            for name, backend in backends.items():
                attend = baselines.forced_sdpa(backend, is_causal=is_causal, enable_gqa=True)
                launch = lambda attend=attend, q=q, k=k, v=v: attend(q, k, v)
                why = refusal(launch)
                if why:  # printed whole, wrapped at 88 characters
                    print(textwrap.fill(f"{name}: unavailable here ({why})", 88, **_WRAP))
                    continue
                baselines.admit(
                    contenders,
                    name,
                    launch,
                    check=lambda out, n=f"{name} {phase}, Hkv={heads}", r=reference: check.check(out, r, name=n),
                )
            if fa4_name is not None:  # prints why FA4 cannot run this layout, if it cannot
                baselines.admit(
                    contenders,
                    fa4_name,
                    fa4.forward(q, k, v, causal=is_causal, scale=head_dim**-0.5),
                    check=lambda out, n=f"FA4 {phase}, Hkv={heads}", r=reference: check.check(out, r, name=n),
                )
            kv_bytes[(phase, heads)] = 2 * k.numel() * k.element_size()
            flops = 4 * batch * q_heads * s_q * s_kv * head_dim / (2 if is_causal else 1)
            results[(phase, heads)] = compare.compare(
                contenders,
                candidate=CANDIDATE,
                l2="cold",
                rounds=rounds,
                flops=flops,
                bytes=kv_bytes[(phase, heads)] + 2 * q.numel() * 2,
                tag=f"{phase} Hkv={heads}",
            )
            del fused, contenders, q, k, v, o
    return results, kv_bytes


def by_phase(
    results: Mapping[tuple[str, int], Any],
    phases: Sequence[str] = ("prefill", "decode"),
    kv_heads: Sequence[int] = KV_HEADS,
) -> dict[str, Any]:
    """Each phase's comparisons read as one sweep over the K/V heads (``SweepResult.from_comparisons``).

    Parameters
    ----------
    results
        ``(phase, heads)`` → comparison, from :func:`race`.
    phases
        The phases, in order.
    kv_heads
        The K/V head counts, in order.

    Returns
    -------
    dict[str, Any]
        Phase → :class:`~cudnn_guide.measure.sweep.SweepResult` with ``x="K/V heads"``.

    Example
    -------
    >>> sweep_table(by_phase(results)["decode"], "gbps")
    """
    from cudnn_guide.measure import sweep

    return {
        phase: sweep.SweepResult.from_comparisons("K/V heads", {heads: results[(phase, heads)] for heads in kv_heads})
        for phase in phases
    }


def phase_verdicts(sweeps: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per phase, K/V head count and baseline: the cuDNN graph's speed-up, interval and verdict.

    Parameters
    ----------
    sweeps
        Phase → sweep, from :func:`by_phase`.

    Returns
    -------
    list[dict[str, Any]]
        ``{"phase": ..., **row}`` for each row of each sweep's ``verdicts()``.

    Example
    -------
    >>> html_table(pd.DataFrame(phase_verdicts(by_phase(results))), {"speed-up": "{:.2f}×"})
    """
    return [{"phase": phase, **row} for phase, res in sweeps.items() for row in res.verdicts()]


def median_us(c: Any, name: str) -> float:
    """``name``'s median over all its timed calls (µs), as the tables and the record.

    Parameters
    ----------
    c
        A :class:`~cudnn_guide.measure.compare.Comparison`.
    name
        One of its contenders.

    Returns
    -------
    float
        Microseconds.

    Example
    -------
    >>> median_us(results[("decode", 8)], CANDIDATE)
    """
    return c.measurements[name].median_ms * 1e3


def fastest_other(c: Any) -> str | None:
    """The fastest baseline that is neither cuDNN itself (:data:`SELF`) nor a control.

    Fastest by the comparison's speed-up of the cuDNN graph over it: the lowest.

    Parameters
    ----------
    c
        A :class:`~cudnn_guide.measure.compare.Comparison`.

    Returns
    -------
    str | None
        Its name, or ``None`` when no such baseline ran.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> c = SimpleNamespace(versus={SELF: {"value": 0.9}, "PyTorch SDPA, flash backend": {"value": 1.2}})
    >>> fastest_other(c)
    'PyTorch SDPA, flash backend'
    """
    others = [n for n in c.versus if n != SELF and "(control" not in n]
    return min(others, key=lambda n: c.versus[n]["value"], default=None)


def fastest(c: Any) -> tuple[str, list[str]]:
    """The fastest contender by the comparison's speed-ups, and those tied with it.

    A control is left out. When no baseline beat the cuDNN graph (every speed-up at least 1), the
    graph is the fastest, tied with each baseline whose verdict is a tie; when the fastest
    baseline's verdict is a tie, it leads, tied with the graph and the graph's other ties;
    otherwise it leads alone.

    Parameters
    ----------
    c
        A :class:`~cudnn_guide.measure.compare.Comparison`.

    Returns
    -------
    tuple[str, list[str]]
        ``(fastest, tied with it)``.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> c = SimpleNamespace(candidate="cuDNN graph", versus={"X": {"value": 0.8, "verdict": "slower"}})
    >>> fastest(c)
    ('X', [])
    """
    rivals = {n: v for n, v in c.versus.items() if "(control" not in n}
    lead = min(rivals, key=lambda n: rivals[n]["value"], default=None)
    tied = [n for n, v in rivals.items() if v["verdict"] == "tie"]  # with the graph
    if lead is None or rivals[lead]["value"] >= 1:  # no one beat the cuDNN graph
        return c.candidate, tied
    if rivals[lead]["verdict"] == "tie":
        return lead, [c.candidate] + [n for n in tied if n != lead]
    return lead, []


def _timed(c: Any, name: str) -> str:
    """``name`` with its median time, inside its own parentheses when it has some (``"X (FlashAttention-2;
    10.1 µs)"``, ``"the cuDNN graph (10.0 µs)"``), so a name holding a comma still reads as one item."""
    said, us = short(name), f"{median_us(c, name):.1f} µs"
    return f"{said[:-1]}; {us})" if said.endswith(")") else f"{said} ({us})"


def short(name: str) -> str:
    """The name without its package version (``"FlashAttention-4 (flash-attn-4 …)"``); the graph as "the cuDNN graph".

    Parameters
    ----------
    name
        A contender's name.

    Returns
    -------
    str
        The name to use in a sentence.

    Example
    -------
    >>> short("FlashAttention-4 (flash-attn-4 4.0.0b36)"), short(CANDIDATE)
    ('FlashAttention-4', 'the cuDNN graph')
    >>> short("PyTorch SDPA, flash backend (FlashAttention-2)")
    'PyTorch SDPA, flash backend (FlashAttention-2)'
    """
    return "the cuDNN graph" if name == CANDIDATE else name.split(" (flash-attn")[0]


def _heads(n: int) -> str:
    """``n`` K/V heads in words: "1 K/V head", "8 K/V heads".

    Parameters
    ----------
    n
        A K/V head count.

    Returns
    -------
    str
        The count and "K/V head", plural unless ``n`` is 1.

    Example
    -------
    >>> _heads(1), _heads(8)
    ('1 K/V head', '8 K/V heads')
    """
    return f"{n} K/V head" + ("" if n == 1 else "s")


def times(ratio: float) -> str:
    """``ratio`` (old time / new time) as "N× less time", "N× more time" or the same.

    Parameters
    ----------
    ratio
        Old time over new time.

    Returns
    -------
    str
        The ratio in words (within 0.5% of 1: "the same time").

    Example
    -------
    >>> times(4.0), times(0.5), times(1.001)
    ('4.0× less time', '2.0× more time', 'the same time')
    """
    if abs(ratio - 1) < 0.005:
        return "the same time"
    return f"{ratio:.1f}× less time" if ratio > 1 else f"{1 / ratio:.1f}× more time"


def conclusions(
    results: Mapping[tuple[str, int], Any],
    kv_bytes: Mapping[tuple[str, int], int],
    *,
    fa4_name: str,
    fa4_ok: bool,
    fa4_detail: str,
) -> list[str]:
    """The page's conclusions, computed from its comparisons: one paragraph or list item per string.

    The decode times with 32, 8 and 1 K/V heads and the bytes they read; the prefill times; which
    implementation was fastest in how many layouts (:func:`fastest`) and the cuDNN graph's verdicts
    against the fastest other one (:func:`fastest_other`); its verdicts against FlashAttention-4
    alone, or why it was not timed; the layouts that were also raced in back-to-back loops
    (:func:`~cudnn_guide.measure.compare.host_bound`); and one list item per layout. Verdicts
    and their counts are said to be this run's (in-run): the record widens them later.

    Parameters
    ----------
    results
        ``(phase, heads)`` → comparison, from :func:`race` (``"decode"`` with 32, 8 and 1 K/V heads,
        ``"prefill"`` too).
    kv_bytes
        ``(phase, heads)`` → the bytes of its K and V.
    fa4_name
        FlashAttention-4's contender name.
    fa4_ok
        Whether FlashAttention-4 imports here.
    fa4_detail
        Why it does not, when it does not.

    Returns
    -------
    list[str]
        The sentences, for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(results, kv_bytes, fa4_name=FA4, fa4_ok=FA4_OK, fa4_detail=FA4_DETAIL))
    """
    from cudnn_guide.measure import compare

    FA4 = fa4_name
    dec_us = {heads: median_us(results[("decode", heads)], CANDIDATE) for heads in (32, 8, 1)}
    pre_us = {heads: median_us(results[("prefill", heads)], CANDIDATE) for heads in (32, 8, 1)}
    rival = {key: fastest_other(c) for key, c in results.items()}
    judged = [c.versus[rival[key]]["verdict"] for key, c in results.items() if rival[key]]
    leads = {key: fastest(c) for key, c in results.items()}
    clear = [short(lead) for lead, tied in leads.values() if not tied]
    won = [f"{name} in {clear.count(name)}" for name in sorted(set(clear), key=clear.count, reverse=True)]
    n_tied = sum(1 for _, tied in leads.values() if tied)
    won += [f"a tie with the cuDNN graph in {n_tied}"] if n_tied else []
    fewer = kv_bytes[("decode", 32)] / kv_bytes[("decode", 8)]
    sentences = [
        f"Decode reads {fewer:.0f}× fewer K/V bytes with 8 K/V heads than with 32: "
        f"the cuDNN graph takes {dec_us[32]:.1f} µs with 32 K/V heads, "
        f"{dec_us[8]:.1f} µs with 8 and {dec_us[1]:.1f} µs with 1 "
        f"(with 8: {times(dec_us[32] / dec_us[8])}; with 1: "
        f"{times(dec_us[32] / dec_us[1])}; each against 32; medians over all timed calls).",
        f"Prefill does the same arithmetic with 32, 8 or 1 K/V heads: the cuDNN graph "
        f"takes {pre_us[32]:.1f}, {pre_us[8]:.1f} and {pre_us[1]:.1f} µs "
        "for 32, 8 and 1 K/V heads (the prefill table's medians).",
        f"By the comparisons' speed-ups in this run, the fastest implementation of the "
        f"{len(leads)} layouts was: {'; '.join(won)}. Against the fastest other implementation "
        f"of each layout ({SELF}: cuDNN's own kernel, not counted), the cuDNN graph is, in "
        f"this run, faster in {judged.count('faster')}, ties in {judged.count('tie')} and is "
        f"slower in {judged.count('slower')} of {len(judged)} layouts.",
    ]
    fa = [c.versus[FA4]["verdict"] for c in results.values() if FA4 in c.versus]
    if fa:
        sentences.append(
            f"Against {FA4} alone, the cuDNN graph is, in this run, faster in "
            f"{fa.count('faster')}, ties in {fa.count('tie')} and is slower in "
            f"{fa.count('slower')} of {len(fa)} layouts."
        )
    elif fa4_ok:
        sentences.append(f"{FA4} refused every layout (its errors are printed above).")
    else:
        sentences.append(f"{FA4} was not timed: {fa4_detail}.")
    looped = {key: compare.host_bound(c) for key, c in results.items() if c.wall is not None}
    if looped:
        sentences.append(
            f"In {len(looped)} of {len(results)} layouts, a contender's host time per "
            f"call reached {compare.HOST_BOUND:.0%} of its GPU time ("
            + "; ".join(
                f"{phase}, {_heads(heads)}" + (f": {listed(map(short, hosts))}" if hosts else "")
                for (phase, heads), hosts in looped.items()
            )
            + "), so the contenders were also raced in back-to-back loops, host time "
            "included. Those loop verdicts are given in the lines below; the counts above "
            "judge GPU time only."
        )
    for (phase, heads), c in results.items():
        (best, tied), other = leads[(phase, heads)], rival[(phase, heads)]
        line = f"* {phase}, {_heads(heads)}, in this run: fastest was "
        if tied:
            line += "a tie of " + listed(_timed(c, n) for n in (best, *tied))
        else:
            line += _timed(c, best)
        if other:
            line += f"; against the fastest other, the cuDNN graph is {c.describe(other)}"
        if SELF in c.versus:
            line += f"; against {SELF}: {c.versus[SELF]['verdict']} "
            line += f"({c.versus[SELF]['value']:.2f}×)"
        sentences.append(line + ".")
    return sentences
