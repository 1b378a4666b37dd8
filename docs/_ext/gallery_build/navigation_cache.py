"""Furo's navigation tree, computed once per folder for the API's source pages (``_modules/...``).

Furo renders the whole site's navigation tree into every page it writes: Sphinx's global toctree,
parsed again with BeautifulSoup (``furo._compute_navigation_tree``), about 0.1-0.2 s a page. The
package's highlighted source pages (``sphinx.ext.viewcode``'s ``_modules/...``) are not documents:
nothing in their tree is marked as the current page, and under the ``html`` builder its links differ
only by the folder the page sits in (each link is relative to it). So the tree of one such page serves
every other in its folder. Written by the main process one after another,
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
    compute: Callable[[dict[str, Any]], str], cacheable: Callable[[str], bool]
) -> Callable[[dict[str, Any]], str]:
    """``compute`` (a page's context → its navigation tree), kept once per folder for the pages ``cacheable`` names.

    Parameters
    ----------
    compute
        Furo's ``_compute_navigation_tree``.
    cacheable
        Whether a page's tree may be shared with its folder's (read at each call).

    Returns
    -------
    Callable[[dict[str, Any]], str]
        The same function, which computes a cacheable page's tree only for the first page of its folder
        (pages without a ``toctree`` in their context get ``compute``'s answer every time).

    Example
    -------
    >>> tree = per_folder(lambda context: context["pagename"].count("/") * "../", lambda page: True)
    >>> tree({"pagename": "_modules/a", "toctree": None}), tree({"pagename": "_modules/b", "toctree": None})
    ('../', '../')
    """
    trees: dict[str, str] = {}

    def navigation_tree(context: dict[str, Any]) -> str:
        page = context.get("pagename")
        if not isinstance(page, str) or "toctree" not in context or not cacheable(page):
            return compute(context)
        folder = posixpath.dirname(page)
        if folder not in trees:
            trees[folder] = compute(context)
        return trees[folder]

    navigation_tree.uncached = compute  # type: ignore[attr-defined]
    return navigation_tree


def source_page(app: Any, page: str) -> bool:
    """Whether ``page`` is one of viewcode's source pages written by the ``html`` builder, and no document.

    Example
    -------
    >>> source_page(app, "_modules/cudnn_guide/check"), source_page(app, "api/graphs")
    (True, False)
    """
    builder = getattr(app, "builder", None)
    return getattr(builder, "name", None) == "html" and page.startswith("_modules/") and page not in app.env.all_docs


def install(app: Any) -> bool:
    """Replace furo's navigation tree with :func:`per_folder`'s for ``app``'s source pages (when the theme is furo).

    Each build (each ``app``) gets its own cache: a second build in one process replaces the first's.

    Parameters
    ----------
    app
        The Sphinx application.

    Returns
    -------
    bool
        Whether it was installed (``False``: another theme, or an app without a configuration).

    Example
    -------
    >>> install(app)  # in conf.py's setup
    True
    """
    if getattr(getattr(app, "config", None), "html_theme", None) != "furo":  # a stand-in app may have none
        return False
    import furo

    compute = getattr(furo._compute_navigation_tree, "uncached", furo._compute_navigation_tree)
    furo._compute_navigation_tree = per_folder(compute, lambda page: source_page(app, page))
    return True
