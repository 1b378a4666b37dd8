"""A persistent cache of built cuDNN execution plans on disk.

Building a graph costs heuristics queries and, for runtime-fused kernels, compilation: tens to
hundreds of milliseconds per graph, paid again in every new process. ``serialize()`` turns a
built plan into bytes; ``deserialize(handle, blob)`` turns them back into an executable graph.
This module stores those bytes on disk so a fresh process can skip the build.

A saved plan is only valid for the GPU architecture and the cuDNN version that built it, so the
cache key (:class:`PlanKey`) holds the graph's description, the GPU name and SM version, the
cuDNN backend version and the frontend version. Every entry carries a header with that key and a
SHA-256 of the plan bytes; an entry whose key or checksum does not match is rebuilt and
overwritten *before* cuDNN ever sees its bytes.

**Trust model.** ``deserialize`` runs whatever plan bytes an entry holds, and the checksum only
catches accidents: whoever can write the cache folder can write a matching checksum, and so
chooses what cuDNN loads. The cache therefore creates its folder private (0700) and its entries
0600, and uses an entry only if the folder and the entry are owned by this process's user, are
not writable by group or others, and are not links: both are opened with ``O_NOFOLLOW`` and
checked on the open descriptor (``fstat``), so a file swapped in after the check is never read.
Anything else (another owner, loose modes, a link, a directory, a header over 64 KiB or nested
too deep, any error reading it) is a rejection with its reason in ``last_event``, and the plan
is rebuilt. A plan that was built is never lost to a failed store: the failure is a warning.
Never point the cache at a shared or world-writable folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles
from cudnn_guide.errors import GraphExecutionError

__all__ = ["PlanKey", "LoadedPlan", "PlanCache", "current_key"]

MAGIC = "cudnn-guide-plan"
FORMAT = 1
MAX_HEADER_BYTES = 64 * 1024
"""The longest header line read; a longer one is rejected unparsed."""
MAX_HEADER_DEPTH = 8
"""The deepest bracket nesting a header may have (a valid one has 2)."""


@dataclasses.dataclass(frozen=True)
class PlanKey:
    """Everything a saved plan depends on.

    Example
    -------
    >>> key = current_key('conv_bias_relu|N32 C128 ...')
    >>> print(key.digest[:12])
    """

    graph: str
    gpu: str
    sm: str
    cudnn_backend: int
    cudnn_frontend: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def current_key(graph_description: str) -> PlanKey:
    """The key of ``graph_description`` on this process's GPU and cuDNN.

    Parameters
    ----------
    graph_description
        A string that determines the graph (recipe and problem).

    Returns
    -------
    PlanKey
        The key.

    Example
    -------
    >>> key = current_key(f'conv_bias_relu_graph|{problem!r}')
    """
    import cudnn
    import torch

    from cudnn_guide.environment import require_gpu
    from cudnn_guide.libcudnn import require_cudnn

    require_gpu("keying a cached plan")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return PlanKey(graph_description, props.name, f"{props.major}.{props.minor}", require_cudnn(), cudnn.__version__)


class LoadedPlan:
    """A deserialized plan, executed by tensor UID.

    Example
    -------
    >>> plan, source = cache.get_or_build(key, build)
    >>> plan.execute(x=x, w=w, b=b, y=y)  # if source == 'cache'
    """

    def __init__(self, graph: Any, handle: Any, uids: dict[str, int]) -> None:
        import torch

        self.graph, self.handle, self.uids = graph, handle, dict(uids)
        self.workspace = torch.empty(max(int(graph.get_workspace_size()), 1), device="cuda", dtype=torch.uint8)

    def execute(self, **tensors: Any) -> None:
        """Run the plan on named tensors (names as in ``uids``), on torch's current stream."""
        from cudnn_guide.graphs.builder import bind_to_current_stream

        missing = set(self.uids) - set(tensors)
        if missing:
            raise GraphExecutionError(f"cached plan needs tensors for {sorted(missing)}")
        bind_to_current_stream(self.handle)
        self.graph.execute({self.uids[k]: v for k, v in tensors.items()}, self.workspace, handle=self.handle)


def load_plan(blob: bytes, uids: dict[str, int], handle: Any = None) -> LoadedPlan:
    """Deserialize plan bytes into a :class:`LoadedPlan` (no validation: use :class:`PlanCache`).

    Parameters
    ----------
    blob
        Bytes from ``serialize()``.
    uids
        Tensor name → UID.
    handle
        The cuDNN handle; default the device's.

    Returns
    -------
    LoadedPlan
        The executable plan.

    Example
    -------
    >>> plan = load_plan(bytes(g.serialize(as_bytes=True)), fused.uids)
    >>> plan.execute(**inputs)
    """
    import cudnn

    from cudnn_guide.graphs.builder import handle_for_current_device

    handle = handle if handle is not None else handle_for_current_device()
    graph = cudnn.pygraph(handle=handle)
    graph.deserialize(handle, blob)
    return LoadedPlan(graph, handle, uids)


class PlanCache:
    """Plans on disk, one file per key.

    Example
    -------
    >>> cache = PlanCache("~/.cache/cudnn-guide/plans")
    >>> plan, source = cache.get_or_build(current_key(desc), build)
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()
        self.last_event = ""
        """What the last lookup did: ``hit``, ``miss``, or why an entry was rejected."""
        self.last_store_error = ""
        """Why :meth:`get_or_build` could not store the plan it built (empty: stored, or nothing built)."""

    def path(self, key: PlanKey) -> Path:
        return self.directory / f"{key.digest[:40]}.cudnnplan"

    def store(self, key: PlanKey, blob: bytes, uids: dict[str, int]) -> Path:
        """Write an entry atomically (a temporary file named per process and thread, then a rename).

        The folder is created private (0700) and the entry readable by its owner only (0600)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        header = {
            "magic": MAGIC,
            "format": FORMAT,
            "key": key.to_dict(),
            "uids": uids,
            "sha256": hashlib.sha256(blob).hexdigest(),
            "size": len(blob),
        }
        return datafiles.write_bytes(self.path(key), json.dumps(header).encode() + b"\n" + blob, mode=0o600)

    def read(self, key: PlanKey) -> tuple[bytes, dict[str, int]] | None:
        """The entry's plan bytes and UIDs if it exists, is trusted and is valid for ``key``; else ``None``.

        ``last_event`` says which: ``miss``, ``hit``, or why the entry was rejected: a folder or
        entry that is a link, is not owned by this process's user, or that group or others may
        write (whoever can write it chooses what cuDNN loads); an entry that is not a regular
        file or cannot be read; an unreadable header (not JSON, over 64 KiB, nested too deep);
        another key; a checksum mismatch; malformed uids. A rejected entry never raises: the
        caller rebuilds.
        """
        path = self.path(key)
        try:
            return self._read(path, key)
        except OSError as exc:
            self.last_event = f"rejected: {path} could not be read ({type(exc).__name__}: {exc.strerror or exc})"
            return None

    def _read(self, path: Path, key: PlanKey) -> tuple[bytes, dict[str, int]] | None:
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | os.O_NOFOLLOW
        try:  # O_NOFOLLOW: a link is refused, not followed; the checks below read the opened file itself
            dir_fd = os.open(self.directory, flags | os.O_DIRECTORY)
        except FileNotFoundError:
            self.last_event = "miss"
            return None
        except OSError as exc:
            self.last_event = _refusal(self.directory, "folder", exc)
            return None
        try:
            problem = _untrusted(os.fstat(dir_fd), self.directory, "folder")
            if problem:
                self.last_event = problem
                return None
            try:  # O_NONBLOCK: a FIFO planted as the entry cannot hang the open
                fd = os.open(path.name, flags | os.O_NONBLOCK, dir_fd=dir_fd)
            except FileNotFoundError:
                self.last_event = "miss"
                return None
            except OSError as exc:
                self.last_event = _refusal(path, "entry", exc, dir_fd=dir_fd)
                return None
        finally:
            os.close(dir_fd)
        try:
            st = os.fstat(fd)
            problem = _untrusted(st, path, "entry")
        except OSError:
            os.close(fd)
            raise
        if problem:
            os.close(fd)
            self.last_event = problem
            return None
        with os.fdopen(fd, "rb") as f:
            head = f.readline(MAX_HEADER_BYTES + 1)
            header = _parse_header(head)
            if header is None:
                self.last_event = (
                    f"rejected: unreadable header (not one JSON line of at most {MAX_HEADER_BYTES} bytes "
                    f"nested at most {MAX_HEADER_DEPTH} deep)"
                )
                return None
            if header.get("magic") != MAGIC or header.get("format") != FORMAT:
                self.last_event = "rejected: unreadable header"
                return None
            if header.get("key") != key.to_dict():
                self.last_event = "rejected: saved for another GPU, cuDNN or graph"
                return None
            size = header.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size != st.st_size - len(head):
                self.last_event = "rejected: checksum mismatch (corrupt or truncated)"
                return None
            blob = f.read(size + 1)
        if len(blob) != size or header.get("sha256") != hashlib.sha256(blob).hexdigest():
            self.last_event = "rejected: checksum mismatch (corrupt or truncated)"
            return None
        uids = header.get("uids")
        if not (
            isinstance(uids, dict)
            and uids
            and all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
                for k, v in uids.items()
            )
        ):
            self.last_event = "rejected: malformed uids (expected a non-empty map of tensor name to non-negative int)"
            return None
        self.last_event = "hit"
        return blob, dict(uids)

    def get_or_build(
        self, key: PlanKey, build: Callable[[], Any], *, handle: Any = None
    ) -> tuple[LoadedPlan | Any, str]:
        """Load the plan for ``key``, or build, store and return it.

        ``build`` returns a :class:`~cudnn_guide.graphs.builder.BuiltGraph` (a built graph and its named tensors).
        Returns ``(plan, source)`` where ``source`` is ``"cache"`` (a :class:`LoadedPlan`) or
        ``"built"`` (the ``BuiltGraph`` that ``build`` returned). ``last_event`` says why it was built
        (``miss`` or the reason the entry was rejected). A plan that cannot be stored (an
        unwritable folder, a full disk) is still returned: the failure is a ``RuntimeWarning``
        and ``last_store_error``, never an exception that loses the built plan.
        """
        entry = self.read(key)
        if entry is not None:
            blob, uids = entry
            try:
                return load_plan(blob, uids, handle), "cache"
            except Exception as exc:  # cuDNN refused bytes that passed every check: rebuild, overwrite
                self.last_event = f"rejected: cuDNN could not load the entry ({type(exc).__name__}: {exc})"
        fused = build()
        self.last_store_error = ""
        try:
            blob = bytes(fused.graph.serialize(as_bytes=True))
            self.store(key, blob, fused.uids)
        except Exception as exc:  # storing is an optimisation: report it, keep the plan just built
            self.last_store_error = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"plan cache: the plan was built but not stored in {self.directory} ({self.last_store_error}); "
                "the next process builds it again. Fix: make the folder a private (0700) directory this user "
                "can write, or point the cache elsewhere",
                RuntimeWarning,
                stacklevel=2,
            )
        return fused, "built"


def _untrusted(st: os.stat_result, path: Path, what: str) -> str:
    """Why the opened folder or entry ``path`` (its ``fstat``) must not be trusted; empty if it may be."""
    if what == "folder" and not stat.S_ISDIR(st.st_mode):
        return f"rejected: {path} is not a folder"
    if what == "entry" and not stat.S_ISREG(st.st_mode):
        return f"rejected: {path} is not a regular file (a directory or device cannot be a plan)"
    if st.st_uid != os.geteuid():
        return (
            f"rejected: {path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}), who could "
            f"choose the plan bytes cuDNN loads (delete it, or use a cache {what} of your own)"
        )
    if st.st_mode & 0o022:
        fix = "chmod 700 it" if what == "folder" else "delete it; the cache writes entries 0600"
        return f"rejected: {path} is writable by group or others, who could choose the plan bytes cuDNN loads ({fix})"
    return ""


def _refusal(path: Path, what: str, exc: OSError, dir_fd: int | None = None) -> str:
    """The reason a folder or entry could not be opened: a link (refused by ``O_NOFOLLOW``) or another error."""
    try:
        st = os.lstat(path.name if dir_fd is not None else path, dir_fd=dir_fd)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        return f"rejected: {path} is a symbolic link; the cache follows none (its target could be anyone's {what})"
    if what == "folder" and st is not None and not stat.S_ISDIR(st.st_mode):
        return f"rejected: {path} is not a folder"
    return f"rejected: {path} could not be opened ({type(exc).__name__}: {exc.strerror or exc})"


def _parse_header(head: bytes) -> dict[str, Any] | None:
    """The header line as a dict, or ``None``: no newline within the size limit, too deep, or not a JSON object.

    The nesting is counted before parsing (brackets outside strings), so a crafted header cannot
    exhaust the parser's recursion."""
    if len(head) > MAX_HEADER_BYTES or not head.endswith(b"\n"):
        return None
    depth = deepest = 0
    for bracket in re.findall(rb"[\[\]{}]", re.sub(rb'"(?:[^"\\]|\\.)*"', b"", head)):
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_HEADER_DEPTH:
        return None
    try:
        header = json.loads(head)
    except (ValueError, RecursionError):
        return None
    return header if isinstance(header, dict) else None
