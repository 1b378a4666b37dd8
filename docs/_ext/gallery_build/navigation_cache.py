"""Furo's navigation tree, computed once per folder for the pages outside the documents (the API's source pages).

Furo renders the whole site's navigation tree into every page it writes: Sphinx's global toctree,
parsed again with BeautifulSoup (``furo._compute_navigation_tree``), about 0.1-0.2 s a page. The
package's highlighted source pages (``sphinx.ext.viewcode``'s ``_modules/...``), the general
index and the search page are not documents: nothing in their tree is marked as the current page,
and its links differ only by the folder the page sits in (each link is relative to it). So the tree
of one such page serves every other in its folder. Written by the main process one after another,
these pages took about 11 s of the H200 builder's site build (``docs/data/site_build_dcab682.log``,
from "generating indices" to "writing additional pages"); documents keep their own tree. The HTML is
the same with and without it (``docs/data/navigation_cache_ab.json``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

__all__ = ["install", "per_folder"]


def per_folder(
    compute: Callable[[dict[str, Any]], str], documents: Callable[[], Any]
) -> Callable[[dict[str, Any]], str]:
    """``compute`` (a page's context → its navigation tree), kept once per folder for pages that are not documents.

    Parameters
    ----------
    compute
        Furo's ``_compute_navigation_tree``.
    documents
        Returns the build's documents (``app.env.all_docs``), read at each call.

    Returns
    -------
    Callable[[dict[str, Any]], str]
        The same function, which computes a non-document page's tree only for the first page of its
        folder (pages without a ``toctree`` in their context get ``compute``'s answer every time).

    Example
    -------
    >>> tree = per_folder(lambda context: context["pagename"].count("/") * "../", lambda: {"index"})
    >>> tree({"pagename": "_modules/a", "toctree": None}), tree({"pagename": "_modules/b", "toctree": None})
    ('../', '../')
    """
    trees: dict[str, str] = {}

    def navigation_tree(context: dict[str, Any]) -> str:
        page = context.get("pagename")
        if not isinstance(page, str) or "toctree" not in context or page in documents():
            return compute(context)
        folder = posixpath.dirname(page)
        if folder not in trees:
            trees[folder] = compute(context)
        return trees[folder]

    navigation_tree.per_folder = True  # type: ignore[attr-defined]
    return navigation_tree


def install(app: Any) -> bool:
    """Replace furo's navigation tree with :func:`per_folder`'s, for this build (when the theme is furo).

    Parameters
    ----------
    app
        The Sphinx application.

    Returns
    -------
    bool
        Whether it was installed (``False``: another theme, or already installed).

    Example
    -------
    >>> install(app)  # in conf.py's setup
    True
    """
    if getattr(app.config, "html_theme", None) != "furo":
        return False
    import furo

    compute = furo._compute_navigation_tree
    if getattr(compute, "per_folder", False):
        return False
    furo._compute_navigation_tree = per_folder(compute, lambda: app.env.all_docs)
    return True
