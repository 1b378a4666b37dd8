"""Conclusions render as escaped HTML paragraphs and lists, and as wrapped text in a terminal."""

from __future__ import annotations

import pytest

from cudnn_guide.report.prose import Prose


def test_paragraphs_and_list_items_render_as_html_with_every_string_escaped():
    html = Prose("cuDNN <b>won</b> at 3 of 5.", "* one & two", "* three", "After.")._repr_html_()
    assert html == (
        '<div class="guide-prose"><p>cuDNN &lt;b&gt;won&lt;/b&gt; at 3 of 5.</p>'
        "<ul><li>one &amp; two</li><li>three</li></ul><p>After.</p></div>"
    )


def test_the_terminal_form_wraps_at_88_columns():
    text = repr(Prose("word " * 40))
    assert max(len(line) for line in text.splitlines()) <= 88


@pytest.mark.parametrize("bad", [(), ("",), ("  ",), (3,)])
def test_empty_or_non_text_conclusions_are_refused(bad):
    with pytest.raises(ValueError, match="non-empty strings"):
        Prose(*bad)
