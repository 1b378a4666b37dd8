"""The gallery index in sections: Basics, Attention, Training and normalization, Low precision,
In production, When it fails.

sphinx-gallery writes one flat grid of thumbnails (its subsections need one folder per section,
and the recording keeps every page in one folder). :func:`group_index` rewrites the generated
index when Sphinx reads it: the same thumbnails, under a heading per section, in
:data:`SECTIONS`' order, each section's pages in the order it lists them. A page in no section is
refused, so a new page must be placed.
"""

from __future__ import annotations

import re

__all__ = ["SECTIONS", "group_index", "section_of"]

SECTIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "Basics",
        "The machine, a first fused graph, and how cuDNN picks and builds a plan.",
        ("plot_01", "plot_02", "plot_03", "plot_04"),
    ),
    (
        "Attention",
        "Fused attention forward and backward, against FlashAttention-4 and PyTorch's backends.",
        (
            "plot_05",
            "plot_09",
            "plot_13",
            "plot_16",
            "plot_17",
            "plot_32",
            "plot_18",
            "plot_33",
            "plot_19",
            "plot_31",
            "plot_24",
            "plot_35",
            "plot_27",
            "plot_26",
            "plot_28",
        ),
    ),
    (
        "Training and normalization",
        "Norms, BatchNorm, convolution gradients, dropout and determinism, a transformer block.",
        ("plot_10", "plot_11", "plot_12", "plot_20", "plot_25"),
    ),
    ("Low precision", "FP8 on Hopper and block scaling on Blackwell.", ("plot_14", "plot_15")),
    (
        "In production",
        "Shipping plans, the kernel cache, CUDA graphs, per-call overhead and a PyTorch custom op.",
        ("plot_06", "plot_07", "plot_08", "plot_21", "plot_23", "plot_34", "plot_30"),
    ),
    (
        "When it fails",
        "Every way a graph is refused, the message that says why, and which libcudnn answered.",
        ("plot_22", "plot_29"),
    ),
)

_OPEN, _CLOSE = ".. thumbnail-parent-div-open", ".. thumbnail-parent-div-close"
_BLOCK = re.compile(r'\.\. raw:: html\n\n    <div class="sphx-glr-thumbcontainer".*?\n    </div>\n', re.S)
_DOC = re.compile(r":doc:`/[^`]*/(plot_\d+)[^`]*`")


def section_of(stem: str) -> str:
    """The section title of a page (``plot_05_sdpa_causal`` → ``"Attention"``).

    Raises
    ------
    ValueError
        The page is in no section: add its number to :data:`SECTIONS`.

    Example
    -------
    >>> section_of("plot_22_troubleshooting")
    'When it fails'
    """
    number = "_".join(stem.split("_")[:2])
    for title, _, pages in SECTIONS:
        if number in pages:
            return title
    raise ValueError(
        f"{stem} is in no gallery section: add {number!r} to SECTIONS in docs/_ext/gallery_build/sections.py"
    )


def group_index(rst: str) -> str:
    """The generated gallery index with its thumbnails grouped under a heading per section.

    An index without sphinx-gallery's thumbnail markers is returned unchanged.

    Example
    -------
    >>> group_index("no thumbnails") == "no thumbnails"
    True
    """
    start, end = rst.find(_OPEN), rst.find(_CLOSE)
    if start < 0 or end < start:
        return rst
    head = rst[:start]
    grid_open = head.rfind(".. raw:: html")  # the grid's own opening <div>, which each section repeats
    blocks = _BLOCK.findall(rst[start:end])
    by_section: dict[str, list[str]] = {title: [] for title, _, _ in SECTIONS}
    for block in blocks:
        m = _DOC.search(block)
        if m is None:
            raise ValueError("a gallery thumbnail without its page link: sphinx-gallery's index format changed")
        by_section[section_of(m.group(1))].append(block)
    tail = rst[end + len(_CLOSE) :]
    close = tail.find("</div>")
    tail = tail[close + len("</div>") :] if close >= 0 else tail
    parts = [head[:grid_open]]
    for title, blurb, pages in SECTIONS:
        if not by_section[title]:
            continue
        parts.append(f"{title}\n{'-' * len(title)}\n\n{blurb}\n\n")
        parts.append('.. raw:: html\n\n    <div class="sphx-glr-thumbnails">\n\n')
        # in the section's own reading order (a page split off another sits beside it), not by number
        ordered = sorted(by_section[title], key=lambda b: pages.index(_DOC.search(b).group(1)))
        parts.extend(b + "\n" for b in ordered)
        parts.append(".. raw:: html\n\n    </div>\n\n")
    return "".join(parts) + tail
