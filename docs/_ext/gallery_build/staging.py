"""Where a page records: a private copy of the docs, empty compile caches, and the files kept when it succeeds."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from cudnn_guide import datafiles

from .drift_bands import DRIFT as DRIFT_FILE

__all__ = ["COLD_CACHES", "cold_caches", "shared_bytecode", "stage_docs", "page_files", "promote_page"]

COLD_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton", "CUDA_CACHE_PATH": "cuda-jit"}
"""The compile caches each page starts empty: Inductor's (autotuning too), Triton's, the CUDA JIT's."""


def cold_caches(folder: Path) -> dict[str, str]:
    """Point this process's compile caches at empty folders under ``folder``, before CUDA starts.

    Every page then starts as cold as on a fresh machine, whichever pages ran before it on the
    same GPU, so neither the schedule nor a second recording on a warm machine moves its numbers
    or its time. A cache variable already set in the environment is kept: export one to record
    warm on purpose.

    Parameters
    ----------
    folder
        Where the empty caches go (the page's private build folder).

    Returns
    -------
    dict[str, str]
        Variable → the folder it now points at.

    Example
    -------
    >>> cold_caches(Path(tempfile.mkdtemp()))["CUDA_CACHE_PATH"]
    """
    chosen = {}
    for var, sub in COLD_CACHES.items():
        if var not in os.environ:
            (folder / sub).mkdir(parents=True, exist_ok=True)
            os.environ[var] = str(folder / sub)
        chosen[var] = os.environ[var]
    return chosen


def shared_bytecode(folder: Path, dont_write: bool | None = None) -> dict[str, str]:
    """Environment for the page interpreters: Python bytecode compiled once per recording, in ``folder``.

    An interpreter told not to write bytecode (``PYTHONDONTWRITEBYTECODE``, as on the GPU builder,
    whose site-packages hold none) compiles every module it imports from source, in every
    process: on the builder, the imports a page with a ``torch.compile`` baseline makes after torch
    took 8.9-10.9 s from source and 2.3-3.3 s with shared bytecode (``tools/bytecode_probe.py``,
    ``docs/data/bytecode_probe.json``). The page
    interpreters, and the fresh processes they start, then write it under ``folder`` instead
    (``PYTHONPYCACHEPREFIX``), so each module compiles once per recording and nothing is written
    into site-packages. Bytecode is no compile cache a page measures: a normal install writes it
    when it installs, and the start-up studies import before their clocks start.

    Parameters
    ----------
    folder
        The recording's bytecode folder (its staging folder's, gone with it).
    dont_write
        Whether this interpreter was told not to write bytecode (default: ``sys.flags``).

    Returns
    -------
    dict[str, str]
        Variables to set in the page interpreters; empty when Python writes bytecode already.

    Example
    -------
    >>> InterpreterPool(3, env=shared_bytecode(stage / "bytecode"))
    """
    if not (sys.flags.dont_write_bytecode if dont_write is None else dont_write):
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(folder)}


def stage_docs(docs_dir: Path, examples_dir: Path, gallery_dir: Path, stage_root: Path) -> Path:
    """A private copy of the docs source in which one page records; returns the copy's gallery.

    The copy holds ``conf.py``, a link to ``_static``, a link to the examples, a copy of
    ``data/drift.json`` (the re-recording drift the record hook widens the page's intervals by:
    without it a staged page would record in-run intervals labelled widened by 0) and a full copy of
    the gallery, so the page's build writes nothing outside ``stage_root`` until
    :func:`promote_page` moves its files in.

    Parameters
    ----------
    docs_dir
        The Sphinx source directory.
    examples_dir
        The example sources.
    gallery_dir
        The recorded gallery.
    stage_root
        An empty or missing private folder.

    Returns
    -------
    Path
        The staged gallery.

    Example
    -------
    >>> staged = stage_docs(Path('docs'), Path('examples'), Path('docs/auto_examples'), Path(tmp) / 'p')
    """
    stage_root = Path(stage_root)
    docs = stage_root / Path(docs_dir).name
    docs.mkdir(parents=True)
    if (Path(docs_dir) / "conf.py").exists():
        shutil.copy2(Path(docs_dir) / "conf.py", docs / "conf.py")
    if (Path(docs_dir) / "_static").is_dir():
        (docs / "_static").symlink_to((Path(docs_dir) / "_static").resolve())
    drift = Path(docs_dir) / "data" / DRIFT_FILE
    if drift.is_file():  # the record hook widens the page's intervals by it; a copy, so nothing writes back
        (docs / "data").mkdir()
        shutil.copy2(drift, docs / "data" / DRIFT_FILE)
    (stage_root / "examples").symlink_to(Path(examples_dir).resolve())
    staged = docs / Path(gallery_dir).name
    shutil.copytree(gallery_dir, staged) if Path(gallery_dir).exists() else staged.mkdir()
    return staged


def page_files(folder: Path, stem: str, shared: bool = False) -> dict[Path, Path]:
    """The files of page ``stem`` in a gallery folder (``stem.*``, ``sphx_glr_stem_*``): relative path → path.

    Parameters
    ----------
    folder
        A gallery folder.
    stem
        The example's stem.
    shared
        Also the files of no page (the gallery index, the download zips).

    Returns
    -------
    dict[Path, Path]
        Path relative to ``folder`` → path.

    Example
    -------
    >>> sorted(page_files(Path('docs/auto_examples'), 'plot_02_conv_bias_relu'))[:2]
    """

    def ours(name: str) -> bool:
        return name.startswith((f"{stem}.", f"sphx_glr_{stem}_")) or (shared and "plot_" not in name)

    folder = Path(folder)
    if not folder.exists():
        return {}
    return {p.relative_to(folder): p for p in sorted(folder.rglob("*")) if p.is_file() and ours(p.name)}


def promote_page(staged: Path, gallery_dir: Path, example: str) -> list[str]:
    """Move what a successful build of ``example`` changed in ``staged`` into ``gallery_dir``; returns the paths.

    Only the page's own files and the gallery's shared ones (its index) move: sphinx-gallery
    also rewrites other pages' downloads as it passes them, and those stay as committed. Every
    file is replaced atomically. The page's ``.md5`` is removed first and written last: a
    promotion cut short leaves the page stale (the build refuses it and names it), never a
    half-new page that claims to be current.

    Parameters
    ----------
    staged
        The staged gallery the page was recorded into.
    gallery_dir
        The committed gallery.
    example
        The example's file name.

    Returns
    -------
    list[str]
        The paths written, relative to the gallery, the ``.md5`` last.

    Raises
    ------
    RuntimeError
        The staged build wrote no ``.md5`` for ``example`` (sphinx-gallery did not finish it).

    Example
    -------
    >>> promote_page(staged, Path('docs/auto_examples'), 'plot_08_cuda_graphs.py')
    """
    staged, gallery_dir = Path(staged), Path(gallery_dir)
    md5 = Path(f"{example}.md5")
    if not (staged / md5).exists():
        raise RuntimeError(f"recording {example}: its build finished without writing {md5}; nothing was kept")
    stem = Path(example).stem
    new, old = page_files(staged, stem, shared=True), page_files(gallery_dir, stem, shared=True)
    changed = sorted(
        rel
        for rel, path in new.items()
        if rel != md5 and (rel not in old or old[rel].read_bytes() != path.read_bytes())
    )
    (gallery_dir / md5).unlink(missing_ok=True)
    for rel in changed:
        (gallery_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        datafiles.write_bytes(gallery_dir / rel, new[rel].read_bytes())
    for rel in sorted(set(old) - set(new) - {md5}):
        (gallery_dir / rel).unlink()
    datafiles.write_bytes(gallery_dir / md5, new[md5].read_bytes())
    return [str(r) for r in [*changed, md5]]
