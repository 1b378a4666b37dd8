"""Conclusions as prose: paragraphs computed from the data, rendered as HTML in a gallery page.

A page's conclusions are sentences built from its measurements (f-strings over the results), not
``print`` output: :class:`Prose`, as the last expression of a cell, renders them as paragraphs
(sphinx-gallery and Jupyter call ``_repr_html_``), and as plain wrapped text in a terminal.
Every sentence is HTML-escaped: labels come from recorded data. :func:`verdict_text` words one
verdict of a comparison for such a sentence, :func:`loop_note` one contender's host time against
its GPU time, :func:`sdpa_kernel_note` which kernel PyTorch's SDPA ran, and :func:`listed` joins
names into a list in words. :func:`gpu_and_loop_text` words
a GPU verdict with its back-to-back loop's, :func:`loop_stretch_text` what such a loop does to the
candidate against the others, and :func:`span` a range of values.
"""

from __future__ import annotations

import dataclasses
import html
import textwrap
from typing import Any

__all__ = [
    "Prose",
    "gpu_and_loop_text",
    "listed",
    "loop_note",
    "loop_stretch_text",
    "sdpa_kernel_note",
    "span",
    "verdict_text",
]


class Prose:
    """Paragraphs of conclusions, escaped, rendered as HTML in a page and as wrapped text elsewhere.

    Parameters
    ----------
    paragraphs
        One string per paragraph; a paragraph that starts with ``"* "`` becomes a list item.

    Example
    -------
    >>> Prose(f"cuDNN was faster at {3} of {5} lengths.", "* one", "* two")
    cuDNN was faster at 3 of 5 lengths.
    <BLANKLINE>
    * one
    * two
    """

    def __init__(self, *paragraphs: str) -> None:
        if not paragraphs or not all(isinstance(p, str) and p.strip() for p in paragraphs):
            raise ValueError("Prose: give one or more non-empty strings, one per paragraph")
        self.paragraphs = [p.strip() for p in paragraphs]

    def _repr_html_(self) -> str:
        out: list[str] = []
        items: list[str] = []
        for p in self.paragraphs:
            if p.startswith("* "):
                items.append(f"<li>{html.escape(p[2:])}</li>")
                continue
            if items:
                out.append("<ul>" + "".join(items) + "</ul>")
                items = []
            out.append(f"<p>{html.escape(p)}</p>")
        if items:
            out.append("<ul>" + "".join(items) + "</ul>")
        return '<div class="guide-prose">' + "".join(out) + "</div>"

    def __repr__(self) -> str:
        lines: list[str] = []
        for i, p in enumerate(self.paragraphs):
            if i and not (p.startswith("* ") and self.paragraphs[i - 1].startswith("* ")):
                lines.append("")
            indent = "  " if p.startswith("* ") else ""
            lines.append(textwrap.fill(p, 88, subsequent_indent=indent))
        return "\n".join(lines)


def verdict_text(cmp: Any, baseline: str | None = None) -> str:
    """A comparison's verdict against ``baseline`` in words, with the loop's tie band beside a loop verdict.

    The text is ``cmp.describe(baseline)`` (:meth:`~cudnn_guide.measure.compare.Comparison.describe`);
    where the contenders were also raced in a back-to-back loop (``cmp.wall``), that loop's tie
    band joins the loop's verdict, inside its closing parenthesis.

    Parameters
    ----------
    cmp
        A :class:`~cudnn_guide.measure.compare.Comparison`.
    baseline
        The contender the candidate is compared with; default the fastest (``cmp.best_baseline``).

    Returns
    -------
    str
        One clause, e.g. ``1.27× faster than X (in-run 95% interval 1.22–1.31; …)``.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> wall = SimpleNamespace(versus={"X": {}}, tie_band=0.02)
    >>> cmp = SimpleNamespace(best_baseline="X", wall=wall, describe=lambda b: f"a tie with {b} (1.00×)")
    >>> verdict_text(cmp)
    'a tie with X (1.00×; loop tie band ±2.0%)'
    """
    baseline = baseline or cmp.best_baseline
    text = cmp.describe(baseline)
    if cmp.wall is not None and baseline in cmp.wall.versus and "loop tie band" not in text:  # "…: tie (v×, lo–hi)"
        band = f"loop tie band ±{100 * cmp.wall.tie_band:.1f}%"
        text = f"{text[:-1]}; {band})" if text.endswith(")") else f"{text} ({band})"
    return text


def loop_note(cmp: Any, name: str, wall: Any = None) -> str:
    """A list item: ``name``'s host time to enqueue one call against its GPU time, both as measured.

    The host time is the one :func:`~cudnn_guide.measure.compare.compare` measured in its first
    round (``host_median_ms``, one call on an idle GPU); the GPU time is the comparison's estimate.
    With ``wall`` (the same contenders timed on the wall clock,
    :func:`~cudnn_guide.measure.compare.compare_host`), its median over rounds joins them.

    Parameters
    ----------
    cmp
        A :class:`~cudnn_guide.measure.compare.Comparison` on GPU time.
    name
        One of its contenders.
    wall
        The wall-clock comparison of the same contenders, or ``None``.

    Returns
    -------
    str
        ``"* <name>: host … µs to enqueue one step, GPU … µs, wall clock … µs: host time per step
        above/below GPU time per step."``, or a line saying the host time was not measured.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> m = SimpleNamespace(host_median_ms=0.25)
    >>> cmp = SimpleNamespace(measurements={"X": m}, estimate=lambda n: {"value": 1200.0})
    >>> loop_note(cmp, "X")
    '* X: host 250 µs to enqueue one step, GPU 1,200 µs: host time per step below GPU time per step.'
    """
    import statistics

    host_ms, gpu = cmp.measurements[name].host_median_ms, cmp.estimate(name)["value"]
    if host_ms is None:
        return f"* {name}: host time per step not measured; GPU {gpu:,.0f} µs."
    side = "above" if host_ms * 1e3 > gpu else "below"
    clock = ""
    if wall is not None:
        wall_us = statistics.median(wall.round_medians_ms[name]) * 1e3
        clock = f", wall clock {wall_us:,.0f} µs"
    return (
        f"* {name}: host {host_ms * 1e3:,.0f} µs to enqueue one step, GPU {gpu:,.0f} µs"
        f"{clock}: host time per step {side} GPU time per step."
    )


def listed(names: Any) -> str:
    """Names joined in words: ``"a"``, ``"a and b"``, ``"a, b and c"``.

    Parameters
    ----------
    names
        One or more names (any iterable of strings).

    Returns
    -------
    str
        The list as prose.

    Example
    -------
    >>> listed(["the cuDNN op", "PyTorch SDPA", "FlashAttention-4"])
    'the cuDNN op, PyTorch SDPA and FlashAttention-4'
    """
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def span(values: Any, fmt: str) -> str:
    """The range of ``values`` formatted with ``fmt``: ``lo–hi``, or one number when both ends print the same.

    Parameters
    ----------
    values
        Numbers (at least one).
    fmt
        A format spec, e.g. ``".2f"``.

    Returns
    -------
    str
        ``"1.2–1.5"``, or ``"1.2"``.

    Example
    -------
    >>> span([1.21, 1.49], ".1f"), span([1.21, 1.24], ".1f")
    ('1.2–1.5', '1.2')
    """
    lo, hi = min(values), max(values)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}–{hi:{fmt}}"


def gpu_and_loop_text(cmp: Any, baseline: str | None = None) -> str:
    """The GPU-time verdict against ``baseline``, then the back-to-back loop's, with its own tie band and rounds.

    ``cmp.describe(baseline)`` without its loop clause (GPU time only), followed, where the
    contenders were also raced in a loop (``cmp.wall``), by ``; in a back-to-back loop, host time
    included: <verdict> (<value>×, <low>–<high>; loop tie band ±x%, N rounds)``.

    Parameters
    ----------
    cmp
        A :class:`~cudnn_guide.measure.compare.Comparison`.
    baseline
        The contender the candidate is compared with; default the fastest (``cmp.best_baseline``).

    Returns
    -------
    str
        One clause for a sentence.

    Example
    -------
    >>> gpu_and_loop_text(c, "FlashAttention-4")
    '1.10× faster than FlashAttention-4 (…); in a back-to-back loop, host time included: tie (…, 7 rounds)'
    """
    baseline = baseline or cmp.best_baseline
    text = dataclasses.replace(cmp, wall=None).describe(baseline)  # GPU time only
    if cmp.wall is not None and baseline in cmp.wall.versus:
        w = cmp.wall.versus[baseline]
        text += (
            f"; in a back-to-back loop, host time included: {w['verdict']} "
            f"({w['value']:.2f}×, {w['low']:.2f}–{w['high']:.2f}; loop tie band "
            f"±{100 * cmp.wall.tie_band:.1f}%, {cmp.wall.rounds} rounds)"
        )
    return text


def loop_stretch_text(cmp: Any) -> str:
    """What a plain eager loop of calls does to the candidate, against its fastest baseline and the others.

    For a comparison with a rate (``flops``) whose contenders also raced in back-to-back loops
    (``cmp.wall``). The sentence gives the candidate's rate and GPU-time verdict against the
    fastest baseline, then the loop's verdict against the same baseline (its interval, tie band and
    rounds, and whether it agrees with the GPU verdict), and how far the loop stretches each
    contender: its loop time over its GPU time, both medians of round medians. The candidate's
    stretch is read against the others' range: above all of them, the host may bound its loop
    (said when its host time per call exceeds its GPU time but not its loop's time per call;
    where the host time of one call, timed alone, is above the loop's time per call, the sentence
    says only that the GPU waits between calls in the loop); below all, the loop costs it least;
    inside, the loop stretches others as much, and the contender with the least host time per call
    is named with its stretch.

    Parameters
    ----------
    cmp
        A :class:`~cudnn_guide.measure.compare.Comparison` with ``wall`` and ``flops``, and at least
        one baseline.

    Returns
    -------
    str
        The sentence, starting with the candidate's name and ending with a full stop.

    Example
    -------
    >>> loop_stretch_text(results["causal"])
    'cudnn.flex_attention runs at 512 TFLOP/s; in GPU time per call it is … of theirs: the loop …'
    """
    cand = cmp.candidate
    rate = cmp.estimate(cand, "TFLOP/s")["value"]
    best = cmp.best_baseline
    gpu, loop = cmp.versus[best], cmp.wall.versus[best]
    in_loop = cmp.wall.estimate(cand)["value"]  # µs of wall clock per call, in the loop
    on_gpu = cmp.estimate(cand)["value"]  # µs of GPU time per call
    ratio = 1 / loop["value"] if loop["verdict"] == "slower" else loop["value"]
    how = {"slower": "slower than", "faster": "faster than"}.get(loop["verdict"])
    how = f"{ratio:.{1 if ratio >= 1.5 else 2}f}× {how}" if how else "a tie with"
    if loop["verdict"] == gpu["verdict"]:
        versus_gpu = "the same verdict as GPU time per call"
    else:
        word = "a tie" if gpu["verdict"] == "tie" else gpu["verdict"]
        versus_gpu = f"while in GPU time per call it is {word}"
    # each contender's loop time over its GPU time (both medians of round medians)
    stretch = {n: cmp.wall.estimate(n)["value"] / cmp.estimate(n)["value"] for n in cmp.measurements}
    others = {n: r for n, r in stretch.items() if n != cand}
    low, high = min(others, key=others.get), max(others, key=others.get)
    host = {n: m.host_median_ms for n, m in cmp.measurements.items() if m.host_median_ms}
    if stretch[cand] > others[high]:
        reading = "the loop stretches it more than any other"
        host_us = 1e3 * host[cand] if cand in host else 0.0
        if on_gpu < host_us <= in_loop:
            reading += (
                f", and its host time per call ({host_us:.0f} µs) lies between its GPU time "
                "and its loop's time per call: the host bounds its loop"
            )
        elif on_gpu < in_loop < host_us:  # the one-call host time is more than the loop pays per call
            reading += (
                ". A call in its loop takes longer than its GPU time, so its GPU waits between "
                f"calls; its host time for one call on an idle GPU ({host_us:.0f} µs) is above "
                "the loop's time per call, so it does not measure what a call costs the host "
                "inside the loop"
            )
    elif stretch[cand] < others[low]:
        reading = "the loop stretches it less than any other"
    else:
        reading = "the loop stretches some of the others as much or more, so this does not show the host bounding it"
        least = min((n for n in host if n != cand), key=host.get, default=None)
        if least:
            reading += (
                f". {least}, with {1e3 * host[least]:.0f} µs of host time per call, "
                f"takes {stretch[least]:.2f}× in its loop"
            )
    return (
        f"{cand} runs at {rate:.0f} TFLOP/s; in GPU time per call it is "
        f"{dataclasses.replace(cmp, wall=None).describe()}. In this run, a plain eager loop "
        f"of {cand} calls, host time included, is {how} a loop of {best} calls ({loop['value']:.2f}×, "
        f"{loop['low']:.2f}–{loop['high']:.2f}; loop tie band "
        f"±{100 * cmp.wall.tie_band:.1f}%, {cmp.wall.rounds} rounds; {versus_gpu}). In the "
        f"loop a call takes {in_loop:.0f} µs of wall clock against {on_gpu:.0f} µs of "
        f"GPU time (medians of round medians): {stretch[cand]:.2f}× its GPU time. The "
        f"other contenders' loops take {others[low]:.2f}× ({low}) to "
        f"{others[high]:.2f}× ({high}) of theirs: {reading}."
    )


def sdpa_kernel_note(found: list[str], how: str) -> str:
    """A sentence saying which forced SDPA backends PyTorch's default SDPA matched, bit for bit.

    When the cuDNN backend is among them, PyTorch's SDPA ran cuDNN's own attention kernel, and
    the sentence says that a comparison of a cuDNN op with it measures how the kernel is called,
    not another kernel.

    Parameters
    ----------
    found
        The matched backends' names (``SDPBackend.name``), as
        :func:`cudnn_guide.measure.baselines.sdpa_matches` returns them.
    how
        ``"eager"`` or ``"compiled"``: how PyTorch's SDPA ran.

    Returns
    -------
    str
        One or two sentences.

    Example
    -------
    >>> sdpa_kernel_note(["FLASH_ATTENTION"], "eager")
    "PyTorch's eager SDPA here matched, bit for bit: FLASH_ATTENTION."
    """
    if "CUDNN_ATTENTION" in found:
        return (
            f"PyTorch's {how} SDPA here is cuDNN's own attention kernel (its output "
            "matched the forced cuDNN backend bit for bit), so this pair is cuDNN's "
            "kernel against itself: the verdict measures how the kernel is called, "
            "not another kernel."
        )
    matched = listed(found) if found else "none of the forced backends"
    return f"PyTorch's {how} SDPA here matched, bit for bit: {matched}."
