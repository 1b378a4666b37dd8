"""Conclusions as prose: paragraphs computed from the data, rendered as HTML in a gallery page.

A page's conclusions are sentences built from its measurements (f-strings over the results), not
``print`` output: :class:`Prose`, as the last expression of a cell, renders them as paragraphs
(sphinx-gallery and Jupyter call ``_repr_html_``), and as plain wrapped text in a terminal.
Every sentence is HTML-escaped: labels come from recorded data.
"""

from __future__ import annotations

import html
import textwrap

__all__ = ["Prose"]


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
