"""Furo's navigation tree is computed once per folder for viewcode's source pages, and for each document."""

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


def _app(builder="html", docs=("index", "api/graphs")):
    return types.SimpleNamespace(
        config=types.SimpleNamespace(html_theme="furo"),
        builder=types.SimpleNamespace(name=builder),
        env=types.SimpleNamespace(all_docs=dict.fromkeys(docs)),
    )


def test_source_pages_share_their_folders_tree_and_every_other_page_keeps_its_own():
    compute, calls = _counting()
    app = _app()
    tree = navigation_cache.per_folder(compute, lambda page: navigation_cache.source_page(app, page))
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
    # one computation per folder of source pages (two); the index, search and every document each time
    assert calls == [
        "_modules/cudnn_guide/check",
        "_modules/cudnn_guide/graphs/conv",
        "genindex",
        "search",
        "api/graphs",
        "api/graphs",
        "index",
    ]


@pytest.mark.parametrize("builder", ["dirhtml", "singlehtml"])
def test_other_builders_whose_links_do_not_follow_the_folder_are_never_cached(builder):
    compute, calls = _counting()
    app = _app(builder)
    tree = navigation_cache.per_folder(compute, lambda page: navigation_cache.source_page(app, page))
    tree({"pagename": "_modules/index", "toctree": None})
    tree({"pagename": "_modules/re", "toctree": None})
    assert calls == ["_modules/index", "_modules/re"]


def test_a_page_without_a_toctree_is_never_served_from_the_cache():
    compute, calls = _counting()
    tree = navigation_cache.per_folder(compute, lambda page: True)
    tree({"pagename": "_modules/a", "toctree": None})
    tree({"pagename": "_modules/b"})  # furo computes an empty tree for it: not another page's
    assert calls == ["_modules/a", "_modules/b"]


def test_each_build_gets_its_own_cache_over_furos_own_function(monkeypatch):
    import furo

    original = furo._compute_navigation_tree
    monkeypatch.setattr(furo, "_compute_navigation_tree", original)  # restored after the test
    first, second = _app(), _app()
    assert navigation_cache.install(first) and navigation_cache.install(second)
    assert furo._compute_navigation_tree.uncached is original  # never a wrapper of a wrapper
    other = _app()
    other.config.html_theme = "alabaster"
    assert navigation_cache.install(other) is False
    assert navigation_cache.install(types.SimpleNamespace()) is False  # a stand-in app without a config (tests)
