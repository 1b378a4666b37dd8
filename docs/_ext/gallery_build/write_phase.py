"""Work that a parallel Sphinx build does alone in its main process, shared out or done once.

Under ``-j``, Sphinx writes pages in worker processes, but the main process resolves every page,
feeds the search index and, when the pages are written, highlights the package's source for
``sphinx.ext.viewcode`` one module after another: on the 16-core builder those steps ran while the
other cores waited (``docs/data/site_build_dcab682.log``: 5-11 s of "highlighting module code").
Two of them change here, their output the same byte for byte (``docs/data/site_build_ab.json``):

* :func:`install_source_highlighting`: viewcode's modules are highlighted in worker processes
  (as many as ``-j`` allows), before viewcode asks for them; viewcode then gets each module's
  highlighted source from them instead of highlighting it again. A module whose highlighting
  logged anything (a lexing warning) is highlighted again in the main process, which logs it.
* :func:`install_stem_memo`: the search index stems each word of a page once per page; a word
  found on many pages was stemmed on each. The language's stemmer is kept once per word for the
  whole build (a stem depends on its word alone).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["install", "install_source_highlighting", "install_stem_memo", "highlight_in_workers"]

_WORKER: dict[str, Any] = {}
"""What a forked worker highlights with (the main process's highlighter, language and options)."""


def _highlight_in_worker(source: str) -> str | None:
    """One module's highlighted source, or ``None`` when highlighting it logged anything or failed."""
    from sphinx.util import logging as sphinx_logging

    highlighter = _WORKER["highlighter"]
    with sphinx_logging.pending_logging() as memory:
        try:
            out = highlighter.highlight_block(source, _WORKER["lang"], **_WORKER["kwargs"])
        except Exception:  # the main process highlights it again, and reports what it reports
            out = None
        if memory.clear():  # a warning: the main process highlights it again and logs it there
            out = None
    return out


def highlight_in_workers(
    highlighter: Any, sources: list[str], lang: str, processes: int, **kwargs: Any
) -> dict[str, str]:
    """``highlighter.highlight_block(source, lang, **kwargs)`` of each source, in forked worker processes.

    Parameters
    ----------
    highlighter
        Sphinx's ``PygmentsBridge`` (``app.builder.highlighter``); the workers fork with it.
    sources
        The texts to highlight.
    lang
        Their language, as viewcode names it.
    processes
        How many worker processes at most.
    **kwargs
        The highlighter's options (viewcode's ``linenos``).

    Returns
    -------
    dict[str, str]
        Source → its highlighted HTML, for each source whose highlighting logged nothing.

    Example
    -------
    >>> highlight_in_workers(app.builder.highlighter, ["x = 1\\n"], "python", 2, linenos="")
    {'x = 1\\n': '<div class="highlight"><pre><span></span><span class="n">x</span> ...'}
    """
    import multiprocessing

    unique = sorted(set(sources), key=len, reverse=True)  # the longest first: the workers end together
    if not unique:
        return {}
    _WORKER.update(highlighter=highlighter, lang=lang, kwargs=kwargs)
    workers = max(1, min(processes, len(unique)))
    try:
        # leaving the pool ends its workers (SIGTERM, which a worker does not handle: it dies at once)
        with multiprocessing.get_context("fork").Pool(workers, initializer=_default_signals) as pool:
            try:
                done = pool.map_async(_highlight_in_worker, unique, chunksize=1).get(timeout=WORKER_TIMEOUT_S)
            except multiprocessing.TimeoutError:  # the main process highlights them all, as without workers
                return {}
    finally:
        _WORKER.clear()
    return {source: html for source, html in zip(unique, done) if html is not None}


WORKER_TIMEOUT_S = 600.0
"""How long the workers may take in all before the main process highlights every module itself.

Highlighting every module one after another took 5-11 s on the builder (the module's docstring);
only a stuck worker reaches this.
"""


def _default_signals() -> None:
    """A worker's start: SIGTERM ends it at once, and Ctrl-C is left to the main process.

    A forked worker inherits the main process's handlers. The recorder's CLI turns SIGTERM into
    ``KeyboardInterrupt`` (``recording.stop_on_sigterm``); a worker running that handler when the
    pool was ended ran its exit code instead of dying, and could hang in it, with the main process
    waiting in ``Pool.terminate`` for ever (a CI run's test suite, which had left that handler
    installed, stopped at its time limit). No exit code runs in a worker now: ending the pool kills it.
    """
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _viewcode_writes(app: Any) -> bool:
    """Whether viewcode writes source pages with this builder (not ``singlehtml``, nor an epub unless enabled)."""
    builder = app.builder
    if getattr(builder, "format", None) != "html" or getattr(builder, "name", None) == "singlehtml":
        return False
    return not str(getattr(builder, "name", "")).startswith("epub") or bool(app.config.viewcode_enable_epub)


def _viewcode_lang(config: Any) -> str:
    """The language viewcode highlights a module's source in (``sphinx.ext.viewcode.collect_pages``)."""
    return config.highlight_language if config.highlight_language in {"default", "none"} else "python"


def served(
    original: Callable[..., str], ready: dict[str, str], lang: str, kwargs: dict[str, Any]
) -> Callable[..., str]:
    """``original`` (a highlighter's ``highlight_block``), answering from ``ready`` the calls viewcode makes.

    A call with the same source, language and options as one highlighted ahead gets that result
    (once: it is dropped from ``ready``); any other call goes to ``original``.

    Example
    -------
    >>> block = served(lambda source, lang, **kw: "fresh", {"x": "ready"}, "python", {"linenos": ""})
    >>> block("x", "python", linenos=""), block("x", "python", linenos="")
    ('ready', 'fresh')
    """

    def highlight_block(
        source: str, lang_: str, opts: Any = None, force: bool = False, location: Any = None, **kw: Any
    ) -> str:
        if lang_ == lang and opts is None and not force and location is None and kw == kwargs:
            html = ready.pop(source, None) if isinstance(source, str) else None
            if html is not None:
                return html
        return original(source, lang_, opts, force, location, **kw)

    highlight_block.original = original  # type: ignore[attr-defined]
    return highlight_block


def install_source_highlighting(app: Any) -> bool:
    """Highlight viewcode's modules in worker processes before viewcode writes their pages (``-j`` above 1).

    Connected to ``html-collect-pages`` before viewcode's own handler (priority 500), which
    highlights the modules when Sphinx asks for its pages: by then each module's highlighted
    source is ready, and the builder's highlighter hands it over (:func:`served`).

    Parameters
    ----------
    app
        The Sphinx application.

    Returns
    -------
    bool
        Whether it was connected (``False`` without viewcode, or where processes cannot fork).

    Example
    -------
    >>> install_source_highlighting(app)  # in conf.py's setup
    True
    """
    from sphinx.util.parallel import parallel_available

    if "sphinx.ext.viewcode" not in getattr(app, "extensions", {}) or not parallel_available:
        return False

    def ahead(app: Any) -> list[Any]:
        modules = getattr(app.env, "_viewcode_modules", None)
        highlighter = getattr(app.builder, "highlighter", None)
        if not modules or highlighter is None or getattr(app, "parallel", 1) <= 1 or not _viewcode_writes(app):
            return []
        from sphinx.ext import viewcode

        wanted = getattr(viewcode, "should_generate_module_page", lambda app, modname: True)
        sources = [
            entry[0]
            for modname, entry in modules.items()
            if entry and isinstance(entry[0], str) and wanted(app, modname)
        ]
        lang = _viewcode_lang(app.config)
        kwargs = {"linenos": "inline" * app.config.viewcode_line_numbers}
        ready = highlight_in_workers(highlighter, sources, lang, app.parallel, **kwargs)
        restore(app, None)  # a second collection in one build replaces the first's
        own = vars(highlighter).get("highlight_block")  # an instance's own highlight_block, kept to put back
        block = served(highlighter.highlight_block, ready, lang, kwargs)
        block.own = own  # type: ignore[attr-defined]
        highlighter.highlight_block = block
        return []  # no pages of its own: viewcode's handler, next, writes them

    def restore(app: Any, exc: Exception | None) -> None:
        highlighter = getattr(getattr(app, "builder", None), "highlighter", None)
        block = vars(highlighter).get("highlight_block") if hasattr(highlighter, "__dict__") else None
        if block is None or not hasattr(block, "original") or not hasattr(block, "own"):
            return
        if block.own is None:
            del highlighter.highlight_block  # the class's method again
        else:
            highlighter.highlight_block = block.own

    app.connect("html-collect-pages", ahead, priority=400)
    app.connect("build-finished", restore)
    return True


def install_stem_memo(app: Any) -> bool:
    """Stem each word once per build for the search index, not once per page it is on.

    Sphinx's ``IndexBuilder.feed`` keeps its stems for one page; the language's ``stem`` is
    replaced, on the builder's index, by the same function kept per word. The index exists once
    the pages are prepared, so it is installed when the first page is resolved (``doctree-resolved``,
    in the main process, before that page is fed to the index).

    Parameters
    ----------
    app
        The Sphinx application.

    Returns
    -------
    bool
        ``True`` (connected).

    Example
    -------
    >>> install_stem_memo(app)  # in conf.py's setup
    True
    """

    def on_resolved(app: Any, doctree: Any, docname: str) -> None:
        lang = getattr(getattr(app.builder, "indexer", None), "lang", None)
        stem = getattr(lang, "stem", None)
        if stem is not None and not hasattr(stem, "cache_info"):
            lang.stem = functools.cache(stem)

    app.connect("doctree-resolved", on_resolved)
    return True


def install(app: Any) -> None:
    """Both: :func:`install_source_highlighting` and :func:`install_stem_memo` (``conf.py``'s ``setup``)."""
    install_source_highlighting(app)
    install_stem_memo(app)
