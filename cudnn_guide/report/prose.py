"""Conclusions as prose: paragraphs computed from the data, rendered as HTML in a gallery page.

A page's conclusions are sentences built from its measurements (f-strings over the results), not
``print`` output: :class:`Prose`, as the last expression of a cell, renders them as paragraphs
(sphinx-gallery and Jupyter call ``_repr_html_``), and as plain wrapped text in a terminal.
Every sentence is HTML-escaped: labels come from recorded data. :func:`verdict_text` words one
verdict of a comparison for such a sentence.
"""

from __future__ import annotations

import html
import textwrap
from typing import Any

__all__ = ["Prose", "verdict_text"]


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
    if cmp.wall is not None and baseline in cmp.wall.versus:  # "…: tie (v×, lo–hi)"
        band = f"loop tie band ±{100 * cmp.wall.tie_band:.1f}%"
        text = f"{text[:-1]}; {band})" if text.endswith(")") else f"{text} ({band})"
    return text
