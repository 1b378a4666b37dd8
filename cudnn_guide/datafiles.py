"""Reading and writing the recording's data files: atomic writes, locked appends, and reads that name the bad line.

Every JSON, manifest, record and history write goes through here. A write goes to a temporary
file in the same folder (named per process *and* thread), is flushed to disk, then renamed over
the target, so a reader sees the old file or the new one, never a mix. Appends to a JSON-lines
file take an exclusive lock and first end an unterminated last line, so two writers, or a file
left without its final newline, can never merge two lines into one.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["write_bytes", "write_text", "write_json", "append_lines", "read_json", "read_jsonl"]


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}.tmp")


def write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> Path:
    """Replace ``path`` with ``data`` atomically (temporary file, fsync, rename).

    Parameters
    ----------
    path
        The file to replace or create.
    data
        Its new bytes.
    mode
        Permission bits for the file (default: the process's umask).

    Returns
    -------
    Path
        ``path``.

    Example
    -------
    >>> import tempfile
    >>> p = write_bytes(Path(tempfile.mkdtemp()) / "a.bin", b"abc")
    >>> p.read_bytes()
    b'abc'
    """
    path = Path(path)
    tmp = _temp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`write_bytes` for UTF-8 text.

    Parameters
    ----------
    path
        The file to replace or create.
    text
        Its new text.

    Returns
    -------
    Path
        ``path``.

    Example
    -------
    >>> import tempfile
    >>> write_text(Path(tempfile.mkdtemp()) / "a.txt", "hi").read_text()
    'hi'
    """
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], data: Any, **dumps: Any) -> Path:
    r""":func:`write_bytes` for one JSON document, ending in a newline.

    Parameters
    ----------
    path
        The file to replace or create.
    data
        What to serialize; if it cannot be, the old file stays as it was.
    dumps
        Keywords for :func:`json.dumps`.

    Returns
    -------
    Path
        ``path``.

    Example
    -------
    >>> import tempfile
    >>> write_json(Path(tempfile.mkdtemp()) / "a.json", {"a": 1}).read_text()
    '{"a": 1}\n'
    """
    return write_bytes(path, (json.dumps(data, **dumps) + "\n").encode("utf-8"))


def append_lines(path: str | os.PathLike[str], lines: Iterable[str]) -> Path:
    """Append ``lines`` (no newlines inside) to a text file under an exclusive lock.

    If the file does not end in a newline (a writer was killed mid-line), one is added first, so
    the damaged line stays on its own and the new lines parse.

    Parameters
    ----------
    path
        The file (created if missing).
    lines
        The lines, without their newlines.

    Returns
    -------
    Path
        ``path``.

    Example
    -------
    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "h.jsonl"
    >>> _ = p.write_text('{"a": 1}')          # no final newline
    >>> _ = append_lines(p, ['{"b": 2}'])
    >>> p.read_text().splitlines()
    ['{"a": 1}', '{"b": 2}']
    """
    path = Path(path)
    lines = list(lines)
    if any("\n" in line for line in lines):
        raise ValueError(f"{path}: a line to append contains a newline")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            f.seek(0, os.SEEK_END)
            prefix = b""
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    prefix = b"\n"
            f.write(prefix + "".join(line + "\n" for line in lines).encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return path


def _json_problem(exc: ValueError | RecursionError) -> str:
    """What a failed :func:`json.loads` says, for any error it raises.

    A syntax error is a :class:`json.JSONDecodeError` (with ``msg`` and ``colno``); an integer of
    more than 4300 digits is a plain :class:`ValueError`, and nesting too deep a
    :class:`RecursionError`, neither of which carries a position.
    """
    if isinstance(exc, RecursionError):
        return f"not valid JSON (nested too deeply to parse: {exc})"
    msg, column = getattr(exc, "msg", str(exc)), getattr(exc, "colno", None)
    return f"not valid JSON ({msg}, column {column})" if column is not None else f"not valid JSON ({msg})"


def read_json(path: str | os.PathLike[str]) -> Any:
    """Parse one JSON file.

    Parameters
    ----------
    path
        The file.

    Returns
    -------
    Any
        The parsed document.

    Raises
    ------
    CorruptDataError
        The file is missing, not UTF-8 or not JSON; the message names the file and the line.

    Example
    -------
    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "r.json"
    >>> _ = p.write_text('{"a": ')
    >>> read_json(p)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    cudnn_guide.errors.CorruptDataError: .../r.json:1: not valid JSON (Expecting value, column 7). Fix: ...
    """
    from cudnn_guide.errors import CorruptDataError

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorruptDataError(path, "file is missing") from None
    except UnicodeDecodeError as exc:
        raise CorruptDataError(path, f"not UTF-8 text ({exc.reason})") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply to parse
        raise CorruptDataError(path, _json_problem(exc), line=getattr(exc, "lineno", None)) from None


def read_jsonl(path: str | os.PathLike[str]) -> list[Any]:
    r"""Parse a JSON-lines file: blank lines skipped, a missing file is empty.

    Parameters
    ----------
    path
        The file.

    Returns
    -------
    list[Any]
        One parsed document per line.

    Raises
    ------
    CorruptDataError
        A line is not JSON; the message names the file and the line number.

    Example
    -------
    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "h.jsonl"
    >>> _ = p.write_text('{"a": 1}\n\n{"b": 2}\n')
    >>> read_jsonl(p)
    [{'a': 1}, {'b': 2}]
    """
    from cudnn_guide.errors import CorruptDataError

    path = Path(path)
    if not path.exists():
        return []
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply to parse
            raise CorruptDataError(
                path,
                f"line is {_json_problem(exc)}",
                line=number,
                fix="delete or repair that line (each line is one recording's entry), or restore the file from git",
            ) from None
    return out
