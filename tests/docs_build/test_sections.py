"""The gallery index in sections (gallery_build.sections)."""

from __future__ import annotations

import re

import pytest
from gallery_build import sections


def test_every_page_is_in_exactly_one_section(root):
    pages = sorted(p.stem for p in (root / "examples").glob("plot_*.py"))
    placed = [n for _, _, numbers in sections.SECTIONS for n in numbers]
    assert len(placed) == len(set(placed)), "a page is in two sections"
    assert sorted(placed) == sorted("_".join(p.split("_")[:2]) for p in pages)
    with pytest.raises(ValueError, match="add 'plot_99' to SECTIONS"):
        sections.section_of("plot_99_new_topic")


def test_the_index_keeps_every_thumbnail_under_its_sections_heading(root):
    rst = (root / "docs" / "auto_examples" / "index.rst").read_text(encoding="utf-8")
    grouped = sections.group_index(rst)
    assert grouped.count("sphx-glr-thumbcontainer") == rst.count("sphx-glr-thumbcontainer")
    titles = [t for t, _, _ in sections.SECTIONS]
    found = re.findall(r"^(.+)\n-+\n", grouped, re.M)
    assert found == titles
    attention = grouped[grouped.index("Attention\n---") : grouped.index("Training and normalization\n---")]
    assert ":doc:`/auto_examples/plot_26_vendor_llama_fa4`" in attention
    assert ":doc:`/auto_examples/plot_02_conv_bias_relu`" not in attention
    # each section in the reading order SECTIONS lists, not by page number
    for title, _, pages in sections.SECTIONS:
        start = grouped.index(f"{title}\n---")
        nxt = [grouped.index(f"{t}\n---") for t, _, _ in sections.SECTIONS if grouped.index(f"{t}\n---") > start]
        shown = re.findall(r":doc:`/auto_examples/(plot_\d+)", grouped[start : min(nxt, default=len(grouped))])
        assert shown == [p for p in pages if p in shown], title
    assert grouped.count('<div class="sphx-glr-thumbnails">') == len(titles)
    assert grouped.count("    </div>\n") - rst.count("    </div>\n") == len(titles) - 1  # one close per grid


def test_the_built_gallery_shows_the_sections_in_order(site):
    html = (site / "auto_examples" / "index.html").read_text(encoding="utf-8")
    heads = [h for h in re.findall(r"<h2>(.*?)<a", html)]
    assert heads == [t for t, _, _ in sections.SECTIONS]
