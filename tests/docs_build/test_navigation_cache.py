"""Furo's navigation tree is computed once per folder for pages that are not documents, and for each document."""

from __future__ import annotations

import types

import pytest
from gallery_build import navigation_cache


def _counting():
    calls = []

    def compute(context):
        calls.append(context["pagename"])
        depth = context["pagename"].count("/")
        return f"<nav>{'../' * depth}index.html</nav>"  # links relative to the page's folder, as Sphinx writes them

    return compute, calls


def test_pages_outside_the_documents_share_their_folders_tree_and_documents_keep_their_own():
    compute, calls = _counting()
    docs = {"index", "api/graphs", "auto_examples/plot_05_sdpa_causal"}
    tree = navigation_cache.per_folder(compute, lambda: docs)
    pages = [
        "_modules/cudnn_guide/check",
        "_modules/cudnn_guide/errors",
        "_modules/cudnn_guide/graphs/conv",
        "_modules/cudnn_guide/graphs/norms",
        "genindex",
        "search",
        "api/graphs",
        "api/graphs",
        "index",
    ]
    got = {p: tree({"pagename": p, "toctree": None}) for p in pages}
    assert got["_modules/cudnn_guide/check"] == got["_modules/cudnn_guide/errors"] == "<nav>../../index.html</nav>"
    assert got["_modules/cudnn_guide/graphs/norms"] == "<nav>../../../index.html</nav>"  # its own folder's links
    assert got["search"] == got["genindex"] == "<nav>index.html</nav>"
    # one computation per folder of non-documents (three), and every document's own, each time
    assert calls == [
        "_modules/cudnn_guide/check",
        "_modules/cudnn_guide/graphs/conv",
        "genindex",
        "api/graphs",
        "api/graphs",
        "index",
    ]


def test_a_page_without_a_toctree_is_never_served_from_the_cache():
    compute, calls = _counting()
    tree = navigation_cache.per_folder(compute, lambda: set())
    tree({"pagename": "_modules/a", "toctree": None})
    tree({"pagename": "_modules/b"})  # furo computes an empty tree for it: not another page's
    assert calls == ["_modules/a", "_modules/b"]


@pytest.mark.parametrize("theme, installed", [("furo", True), ("alabaster", False)])
def test_install_wraps_furo_once_and_leaves_other_themes_alone(monkeypatch, theme, installed):
    import furo

    original = furo._compute_navigation_tree
    monkeypatch.setattr(furo, "_compute_navigation_tree", original)  # restored after the test
    app = types.SimpleNamespace(config=types.SimpleNamespace(html_theme=theme), env=types.SimpleNamespace(all_docs={}))
    assert navigation_cache.install(app) is installed
    assert navigation_cache.install(app) is False  # never wrapped twice
    assert (furo._compute_navigation_tree is not original) is installed
