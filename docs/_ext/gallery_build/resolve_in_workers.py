"""A parallel HTML build's pages resolved in Sphinx's worker processes, not one after another in its main process.

Under ``-j``, Sphinx 8-9 (``Builder._write_parallel``) resolves every page in its main process
(``get_and_resolve_doctree``: the post-transforms, among them sphinx-gallery's code links and the
cross-reference resolver) and only writes the resolved pages in forked workers. On the H200 builder
the workers waited on that: its 16 cores wrote the site's 55 pages at the pace of one resolving them
(``docs/data/device_calls_688f411/site_build_R2.log``: 16 s from "copying assets" to the last page).

Here each worker resolves the pages it writes, as the main process would have, picks their images (noting the
files to copy at the end) and returns, with those files, each page's words for the search index
(``IndexBuilder._word_collector`` of the resolved page: a resolved reference reads as its target's title, not
its label). The main process feeds the search index page by page, in Sphinx's order, with those words, each
page once every page before it is written (``write_doc_serialized``'s work; a ``nosearch`` page as Sphinx
feeds it). The first page is still written by the main process first, as Sphinx does (it warms the templates,
and its resolving installs :func:`gallery_build.write_phase.install_stem_memo`'s memo there). A failure while
resolving a page is reported as Sphinx reports any failure of a parallel worker (its traceback's text in a
``SphinxParallelError``). The HTML, images and search index are Sphinx's own:
``tests/docs_build/test_resolve_in_workers.py`` builds a small site both ways (pages in subfolders, scaled
images, a ``nosearch`` page, shared index entries, a broken reference's warning), and the whole site built
both ways on the CPU machine differed only where two builds of it can differ
(``docs/data/resolve_in_workers_ab.json``).

Installed for Sphinx's own ``html`` builder only (not a subclass that changes what this replaces, nor with
:data:`OFF_ENV` set), and only where Sphinx has the
functions this replaces (``sphinx.builders._write_docname``, ``sphinx.util.parallel.ParallelTasks`` and
``make_chunks``); anywhere else Sphinx's own method runs.
"""

from __future__ import annotations

import inspect
import os
import types
from collections.abc import Sequence
from typing import Any

__all__ = ["install", "write_parallel", "indexed", "OFF_ENV"]

OFF_ENV = "CUDNN_GUIDE_RESOLVE_IN_MAIN"
"""Set to ``1``, Sphinx's own method runs (an A/B of this module: ``tools/resolve_ab.py``)."""


def write_parallel(builder: Any, docnames: Sequence[str], nproc: int) -> None:
    """``builder._write_parallel(docnames, nproc)``, with each page resolved in the worker that writes it.

    Parameters
    ----------
    builder
        Sphinx's HTML builder.
    docnames
        The pages to write, sorted (as ``write_documents`` passes them).
    nproc
        Worker processes at most.
    """
    from sphinx import addnodes
    from sphinx.builders import _write_docname
    from sphinx.locale import __
    from sphinx.util import logging
    from sphinx.util.build_phase import BuildPhase
    from sphinx.util.display import status_iterator
    from sphinx.util.osutil import relative_uri
    from sphinx.util.parallel import make_chunks

    def write_process(docs: list[str]) -> list[tuple[Any, list[Any], dict[str, str]]]:
        out = []
        for docname in docs:
            builder.phase = BuildPhase.RESOLVING
            doctree = builder.env.get_and_resolve_doctree(docname, builder, tags=builder.tags)
            builder.phase = BuildPhase.WRITING
            known = dict(builder.images)
            # as write_doc_serialized does in the main process: the page's own image path (a scaled image links to
            # the full one), then each image's URI picked and its file noted for copying
            builder.imgpath = relative_uri(builder.get_target_uri(docname), builder.imagedir)
            builder.post_process_images(doctree)
            indexer = getattr(builder, "indexer", None)
            words = indexer._word_collector(doctree) if indexer is not None else None
            entries = [node["entries"] for node in doctree.findall(addnodes.index)]  # as resolved (``only`` gone)
            builder.write_doc(docname, doctree)
            out.append((words, entries, {k: v for k, v in builder.images.items() if k not in known}))
        return out  # per page: the search index's words and entries of the resolved page, and the images it added

    done: dict[str, tuple[Any, list[Any], dict[str, str]]] = {}
    fed = 0  # the pages of ``rest`` fed to the search index so far, in page order

    def feed_in_order() -> None:
        # as Sphinx's main process does, in page order (the index keeps the order it is fed in), each page as soon as
        # every page before it is written: the feeding overlaps the workers still writing
        nonlocal fed
        while fed < len(rest) and rest[fed] in done:
            words, entries, images = done.pop(rest[fed])
            builder.images.update(images)
            indexed(builder, rest[fed], words, entries)
            fed += 1

    def on_chunk_done(docs: list[str], results: list[tuple[Any, list[Any], dict[str, str]]]) -> None:
        done.update(zip(docs, results, strict=True))
        feed_in_order()
        next(progress)

    if not docnames:
        return
    firstname, rest = docnames[0], list(docnames[1:])
    _write_docname(firstname, env=builder.env, builder=builder, tags=builder.tags)
    tasks = _first_failure_kept()(nproc)
    chunks = make_chunks(rest, nproc)
    progress = status_iterator(chunks, __("writing output... "), "darkgreen", len(chunks), builder.config.verbosity)
    builder.phase = BuildPhase.RESOLVING
    for chunk in chunks:
        tasks.add_task(write_process, chunk, on_chunk_done)
    tasks.join()
    if tasks.failure is not None:  # a worker failed while a later chunk was being queued: Sphinx's add_task hid it
        raise tasks.failure
    feed_in_order()
    if fed != len(rest):  # every chunk answered (else join or the kept failure raised): this would be a bug here
        raise RuntimeError(f"resolve_in_workers: {len(rest) - fed} page(s) written but not fed to the search index")
    logging.getLogger(__name__).info("")


def _first_failure_kept() -> type:
    """Sphinx's ``ParallelTasks``, keeping the first worker failure it reads.

    ``ParallelTasks.add_task`` reads the answers of running workers and, when one failed, stops them all and
    carries on: the failure is lost unless ``join`` reads it. Sphinx queues one chunk at a time as its main
    process resolves; here every chunk is queued at once, so a worker failing early would go unreported."""
    from sphinx.util.parallel import ParallelTasks

    class FirstFailureKept(ParallelTasks):  # type: ignore[misc]
        def __init__(self, nproc: int) -> None:
            super().__init__(nproc)
            self.failure: BaseException | None = None

        def _join_one(self) -> bool:
            try:
                return super()._join_one()
            except Exception as exc:
                if self.failure is None:
                    self.failure = exc
                raise

    return FirstFailureKept


def indexed(builder: Any, docname: str, words: Any, entries: list[Any]) -> None:
    """Feed one page to ``builder``'s search index as ``write_doc_serialized`` does, with what its worker collected
    from the resolved page: ``words`` (an ``IndexBuilder._word_collector`` result) and ``entries`` (each
    ``index`` node's entries; resolving drops those under an ``only`` directive for another builder).

    A page marked ``nosearch`` (or ``no-search``) is fed as Sphinx feeds it, with nothing."""
    from sphinx import addnodes
    from sphinx.util.docutils import new_document

    indexer = getattr(builder, "indexer", None)
    if indexer is None:
        return
    title_node = builder.env.longtitles.get(docname)
    title = title_node.astext() if title_node else ""
    page = new_document("")  # what feed reads of the page besides its words: its index entries
    for entry in entries:
        page += addnodes.index(entries=entry)
    metadata = builder.env.metadata.get(docname, {})
    if words is None or "no-search" in metadata or "nosearch" in metadata:
        builder.index_page(docname, page, title)
        return
    indexer._word_collector = lambda _doctree: words  # this page's words, resolved
    try:
        builder.index_page(docname, page, title)
    finally:
        del indexer._word_collector


def install(app: Any) -> bool:
    """Make ``app``'s HTML builder resolve its pages in its workers (``conf.py``'s ``setup``; at ``builder-inited``).

    Parameters
    ----------
    app
        The Sphinx application.

    Returns
    -------
    bool
        ``True`` (connected). Whether the builder was changed is decided when it exists: only the ``html``
        builder, and only with a Sphinx that has what :func:`write_parallel` uses.

    Example
    -------
    >>> install(app)  # in conf.py's setup
    True
    """

    def on_builder_inited(app: Any) -> None:
        if os.environ.get(OFF_ENV) == "1":
            return
        builder = getattr(app, "builder", None)
        if getattr(builder, "name", None) != "html" or not hasattr(builder, "_write_parallel"):
            return
        try:
            from sphinx.builders import _write_docname  # noqa: F401
            from sphinx.util.build_phase import BuildPhase  # noqa: F401
            from sphinx.util.display import status_iterator  # noqa: F401
            from sphinx.util.parallel import ParallelTasks, make_chunks  # noqa: F401
        except ImportError:  # another Sphinx: its own method
            return
        if "tags" not in inspect.signature(app.env.get_and_resolve_doctree).parameters:
            return  # a Sphinx that resolves without the tags argument: its own method
        from sphinx.builders import Builder
        from sphinx.builders.html import StandaloneHTMLBuilder

        mine = type(builder)
        if not isinstance(builder, StandaloneHTMLBuilder) or any(  # a builder of its own: what it changed would be lost
            getattr(mine, name, None) is not getattr(base, name, None)
            for name, base in (
                ("_write_parallel", Builder),
                ("write_doc_serialized", StandaloneHTMLBuilder),
                ("index_page", StandaloneHTMLBuilder),
                ("post_process_images", StandaloneHTMLBuilder),
            )
        ):
            return
        from sphinx.search import IndexBuilder

        if not hasattr(IndexBuilder, "_word_collector"):  # the search index's words come another way
            return
        builder._write_parallel = types.MethodType(write_parallel, builder)

    app.connect("builder-inited", on_builder_inited)
    return True
