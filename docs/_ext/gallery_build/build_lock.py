"""One docs build at a time per checkout; a build cut short never spoils the next; a render leaves the tree clean.

* **The lock.** :func:`acquire` takes ``docs/_build/.lock`` (``fcntl.flock``, released by the
  kernel when its process ends, so a killed build never leaves it held) and writes who holds it.
  The recorder (``gallery_build.recording record``), every Sphinx build of the site
  (``conf.py``'s ``setup``) and the ``nox -s docs`` session take it; a second build in the same
  checkout stops at once with the holder's pid, command and start time. A process started by
  the holder (nox runs the recorder, then Sphinx) inherits it through ``CUDNN_GUIDE_BUILD_LOCK``.
* **Interrupted builds.** Sphinx writes ``searchindex.js``, the pages and the pickled
  environment in place: a build killed while writing leaves files that make the next build
  fail ("search index couldn't be loaded") or skip pages it believes current.
  :func:`guard_sphinx_build` marks the output folder at the start of a build and removes the
  mark only when the build finished cleanly (no exception, no warning under ``-W``); a build
  that finds the mark wipes the output and doctree folders first, so it is a clean build.
* **The gallery-wide zips.** sphinx-gallery rewrites ``auto_examples_{python,jupyter}.zip`` in
  the committed gallery on every build, stamped with the files' modification times and in
  directory order, so a render left ``git status`` dirty. :func:`keep_zips_reproducible` makes
  it write them in name order with fixed timestamps and permissions, and leave a zip alone when
  it already holds exactly those files: a render of a committed tree changes nothing.

This module imports only the standard library at load (the nox session imports it).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import io
import json
import os
import shutil
import sys
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "LOCK_FILE",
    "HELD_ENV",
    "MARK",
    "BuildLockError",
    "BuildLock",
    "acquire",
    "recover_interrupted",
    "guard_sphinx_build",
    "reproducible_zip",
    "keep_zips_reproducible",
]

LOCK_FILE = Path("_build") / ".lock"
"""The lock, relative to the docs folder: ``docs/_build/.lock``."""
HELD_ENV = "CUDNN_GUIDE_BUILD_LOCK"
"""Set by the holder for the processes it starts: ``<pid>:<lock path>``."""
MARK = ".cudnn-guide-build-incomplete"
"""In a Sphinx output folder while a build writes it; found at the start of a build: wipe first."""
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
"""The timestamp of every member of a reproducible zip (the earliest a zip can hold)."""


class BuildLockError(RuntimeError):
    """Another build holds this checkout's lock."""


class BuildLock:
    """A held build lock (or one inherited from the process that started this one); release it once.

    Example
    -------
    >>> with acquire(Path('docs'), 'sphinx-build') as lock:
    ...     pass
    """

    def __init__(self, path: Path, fd: int | None, previous_env: str | None) -> None:
        self.path, self.fd, self._previous_env = path, fd, previous_env

    @property
    def inherited(self) -> bool:
        """Held by an ancestor process, not by this one."""
        return self.fd is None

    def release(self) -> None:
        """Unlock (the holder record is cleared first), and restore ``CUDNN_GUIDE_BUILD_LOCK``."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        if self._previous_env is None:
            os.environ.pop(HELD_ENV, None)
        else:
            os.environ[HELD_ENV] = self._previous_env

    def __enter__(self) -> BuildLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _command() -> str:
    try:
        return Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return " ".join([sys.executable, *sys.argv])


def _ancestors() -> list[int]:
    """This process and its ancestors (from ``/proc``; without it, this process and its parent)."""
    chain, pid = [os.getpid()], os.getpid()
    for _ in range(256):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return chain if len(chain) > 1 else [os.getpid(), os.getppid()]
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid <= 0 or pid in chain:
            break
        chain.append(pid)
    return chain


def _holder(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _inherited(path: Path) -> bool:
    """Does an ancestor of this process hold ``path`` (its pid in ``CUDNN_GUIDE_BUILD_LOCK`` and in the file)?"""
    pid, _, held = os.environ.get(HELD_ENV, "").partition(":")
    if not pid.isdigit() or not held or Path(held).resolve() != path.resolve():
        return False
    return int(pid) in _ancestors() and _holder(path).get("pid") == int(pid)


def _describe(info: dict[str, Any]) -> str:
    if not info.get("pid"):
        return "another process (it has not written its name yet)"
    since, age = info.get("since", "?"), ""
    with contextlib.suppress(TypeError, ValueError):
        seconds = (_dt.datetime.now(_dt.timezone.utc) - _dt.datetime.fromisoformat(since)).total_seconds()
        age = f", {seconds / 60:.0f} min ago" if seconds >= 60 else f", {seconds:.0f} s ago"
    return f"pid {info['pid']} ({info.get('what', '?')}: {info.get('command', '?')}), since {since}{age}"


def acquire(docs_dir: str | os.PathLike[str], what: str) -> BuildLock:
    """Take the checkout's build lock (``docs/_build/.lock``) or fail at once naming its holder.

    A process whose ancestor holds the lock (``nox -s docs`` running the recorder and Sphinx)
    gets an inherited lock and goes on. The lock is the kernel's (``flock``): it ends with its
    process, so a killed build never blocks the next.

    Parameters
    ----------
    docs_dir
        The Sphinx source folder of the checkout (``docs``).
    what
        What takes it, for the message another build shows (``"sphinx-build"``, ``"recording"``).

    Returns
    -------
    BuildLock
        Held until :meth:`BuildLock.release` (or the end of a ``with`` block, or of the process).

    Raises
    ------
    BuildLockError
        Another build of this checkout holds it; the message names it and what to do.

    Example
    -------
    >>> with acquire(Path('docs'), 'recording'):
    ...     record_examples(...)
    """
    path = Path(docs_dir).resolve() / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if _inherited(path):
        return BuildLock(path, None, os.environ.get(HELD_ENV))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        info = _holder(path)
        raise BuildLockError(
            f"{path}: another docs build of this checkout is running: {_describe(info)}. "
            "Two builds in one checkout overwrite each other's files in docs/_build and docs/auto_examples. "
            f"Wait for it to finish, or stop it (kill {info.get('pid', '<pid>')}) and start again; the lock ends "
            "with its process, so nothing needs deleting. To build in parallel, use a second checkout "
            "(git worktree add)."
        ) from None
    info = {"pid": os.getpid(), "what": what, "command": _command(), "since": _now()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
    previous = os.environ.get(HELD_ENV)
    os.environ[HELD_ENV] = f"{os.getpid()}:{path}"
    return BuildLock(path, fd, previous)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _wipe(folder: Path, keep: Iterable[Path]) -> list[Path]:
    """Delete everything in ``folder`` except the paths in ``keep`` (and the folders leading to them)."""
    keep = {Path(k).resolve() for k in keep}
    removed = []
    if not folder.is_dir():
        return removed
    for entry in sorted(folder.iterdir()):
        resolved = entry.resolve() if not entry.is_symlink() else entry.parent.resolve() / entry.name
        if resolved in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            if any(k.is_relative_to(resolved) for k in keep):
                removed += _wipe(entry, keep)
                continue
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(entry)
    return removed


def _wipeable(folder: Path, protected: Sequence[Path]) -> bool:
    """May ``folder`` be wiped: it holds none of ``protected`` (the sources, the configuration)?"""
    folder = Path(folder).resolve()
    return not any(Path(p).resolve().is_relative_to(folder) for p in protected)


def recover_interrupted(
    outdir: str | os.PathLike[str],
    doctreedir: str | os.PathLike[str],
    *,
    protected: Sequence[Path] = (),
    keep: Sequence[Path] = (),
) -> list[Path]:
    """If the last build into ``outdir`` did not finish (its mark is there), wipe it and the doctrees.

    Parameters
    ----------
    outdir
        The Sphinx output folder.
    doctreedir
        The doctree folder (the pickled environment).
    protected
        Folders the wipe must never reach (the source and configuration folders): an output or
        doctree folder that contains one is left alone.
    keep
        Files spared inside the wiped folders (the lock).

    Returns
    -------
    list[Path]
        What was deleted (empty when the last build finished).

    Example
    -------
    >>> recover_interrupted(Path('docs/_build/html'), Path('docs/_build/html/.doctrees'), protected=[Path('docs')])
    """
    outdir, doctreedir = Path(outdir), Path(doctreedir)
    mark = outdir / MARK
    if not mark.exists():
        return []
    removed = []
    for folder in (doctreedir, outdir):
        if _wipeable(folder, protected):
            removed += _wipe(folder, [*keep, mark])
    return removed


def guard_sphinx_build(app: Any, docs_dir: str | os.PathLike[str]) -> BuildLock:
    """From ``conf.py``'s ``setup``: lock the checkout, recover from an interrupted build, mark this one.

    Runs before Sphinx loads its pickled environment. If the output folder carries the mark of a
    build that did not finish, the output and doctree folders are wiped (a clean build follows);
    the mark is then written again and removed at ``build-finished`` only when the build had no
    exception and, under ``-W``, no warning. The lock is released then (or when the process ends).

    Parameters
    ----------
    app
        The Sphinx application (``outdir``, ``doctreedir``, ``srcdir``, ``confdir``).
    docs_dir
        The checkout's docs folder (where ``_build/.lock`` lives).

    Returns
    -------
    BuildLock
        The lock this build holds.

    Raises
    ------
    BuildLockError
        Another build of this checkout is running.

    Example
    -------
    >>> def setup(app):
    ...     build_lock.guard_sphinx_build(app, DOCS)
    """
    lock = acquire(docs_dir, "sphinx-build")
    outdir, doctreedir = Path(app.outdir), Path(app.doctreedir)
    protected = [Path(app.srcdir), Path(app.confdir), Path(docs_dir)]
    if not _wipeable(outdir, protected):  # an output folder holding the sources is never wiped: no mark
        print(f"cudnn-guide: {outdir} holds the sources; an interrupted build there is not recovered", flush=True)
        return lock
    removed = recover_interrupted(outdir, doctreedir, protected=protected, keep=[lock.path])
    if removed:
        print(
            f"cudnn-guide: the last build into {outdir} did not finish ({MARK} was left); "
            f"removed its output and doctrees ({len(removed)} entries): this is a clean build",
            flush=True,
        )
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / MARK).write_text(json.dumps({"pid": os.getpid(), "since": _now(), "command": _command()}) + "\n")

    def finished(app: Any, exc: BaseException | None) -> None:
        failed_on_warnings = getattr(app, "_fail_on_warnings", getattr(app, "warningiserror", False)) and getattr(
            app, "_warncount", 0
        )
        if exc is None and not failed_on_warnings:
            (outdir / MARK).unlink(missing_ok=True)
        lock.release()

    app.connect("build-finished", finished, priority=1000)  # after every other hook: a failing one keeps the mark
    return lock


def _members(file_list: Sequence[str | os.PathLike[str]], relative_to: Path, extension: str | None):
    members = []
    for name in file_list:
        path = Path(name)
        if extension is not None:
            path = path.with_suffix(extension)
        members.append((Path(os.path.relpath(path, relative_to)).as_posix(), path.read_bytes()))
    return sorted(members)


def reproducible_zip(
    file_list: Sequence[str | os.PathLike[str]],
    zipname: str | os.PathLike[str],
    relative_to: str | os.PathLike[str],
    extension: str | None = None,
) -> str:
    """sphinx-gallery's ``zip_files``, reproducible: the same files give the same bytes, and a zip
    that already holds exactly those files is not rewritten.

    Members are in name order, dated :data:`ZIP_TIME`, mode 0644, stored (as sphinx-gallery
    stores them); the zip is replaced atomically.

    Parameters
    ----------
    file_list
        The files to zip.
    zipname
        The zip to write.
    relative_to
        Member names are relative to this folder.
    extension
        If given, each file's suffix is replaced by it first (``.ipynb`` for the notebooks).

    Returns
    -------
    str
        ``zipname``.

    Example
    -------
    >>> reproducible_zip(['docs/auto_examples/plot_01_environment.py'], 'all.zip', 'docs/auto_examples')
    """
    zipname, relative_to = Path(zipname), Path(relative_to)
    members = _members(file_list, relative_to, extension)
    if zipname.is_file():
        try:
            with zipfile.ZipFile(zipname) as old:
                if sorted((i.filename, old.read(i)) for i in old.infolist()) == members:
                    return str(zipname)  # the same files: keep its bytes (a committed zip stays untouched)
        except (zipfile.BadZipFile, OSError, ValueError):
            pass
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for arcname, data in members:
            info = zipfile.ZipInfo(arcname, date_time=ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.create_system = 3
            z.writestr(info, data)
    tmp = zipname.with_name(f".{zipname.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, zipname)
    finally:
        tmp.unlink(missing_ok=True)
    return str(zipname)


def keep_zips_reproducible(gallery_dir: str | os.PathLike[str] | None = None) -> None:
    """Make sphinx-gallery write its gallery-wide zips with :func:`reproducible_zip` (from ``conf.py``).

    Also removes the temporary zips a killed build left in ``gallery_dir`` (sphinx-gallery's
    ``*.zip.new``, this module's ``.*.zip.<pid>.tmp``).

    Parameters
    ----------
    gallery_dir
        The gallery folder (``docs/auto_examples``), for the leftovers; optional.

    Raises
    ------
    RuntimeError
        The installed sphinx-gallery no longer writes its zips through ``downloads.zip_files``:
        this function needs updating for it.

    Example
    -------
    >>> keep_zips_reproducible(Path('docs/auto_examples'))
    """
    from sphinx_gallery import downloads

    if not callable(getattr(downloads, "zip_files", None)):
        raise RuntimeError(
            "sphinx_gallery.downloads.zip_files is gone in this sphinx-gallery: the gallery-wide zips would be "
            "rewritten on every build. Update gallery_build.build_lock.keep_zips_reproducible for it."
        )
    downloads.zip_files = reproducible_zip
    if gallery_dir is not None and Path(gallery_dir).is_dir():
        gallery = Path(gallery_dir)
        for leftover in [*gallery.glob(f"{gallery.name}*.zip.new"), *gallery.glob(f".{gallery.name}*.zip.*.tmp")]:
            leftover.unlink(missing_ok=True)
