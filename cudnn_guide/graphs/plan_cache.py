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
0600, and refuses to read from a folder that group or others may write. Never point it at a
shared or world-writable folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles
from cudnn_guide.errors import GraphExecutionError

__all__ = ["PlanKey", "LoadedPlan", "PlanCache", "current_key"]

MAGIC = "cudnn-guide-plan"
FORMAT = 1


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
        """The entry's plan bytes and UIDs if it exists and is valid for ``key``; else ``None``.

        ``last_event`` says which: ``miss``, ``hit``, or the reason the entry was rejected
        (unreadable header, other key, checksum mismatch, malformed uids, a folder others may write).
        """
        path = self.path(key)
        if not path.exists():
            self.last_event = "miss"
            return None
        if self.directory.stat().st_mode & 0o022:
            self.last_event = (
                f"rejected: {self.directory} is writable by group or others, who could choose the "
                "plan bytes cuDNN loads (chmod 700 it)"
            )
            return None
        raw = path.read_bytes()
        head, sep, blob = raw.partition(b"\n")
        try:
            header = json.loads(head)
        except ValueError:
            header = None
        if not sep or not isinstance(header, dict) or header.get("magic") != MAGIC or header.get("format") != FORMAT:
            self.last_event = "rejected: unreadable header"
            return None
        if header.get("key") != key.to_dict():
            self.last_event = "rejected: saved for another GPU, cuDNN or graph"
            return None
        if header.get("size") != len(blob) or header.get("sha256") != hashlib.sha256(blob).hexdigest():
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

        ``build`` returns a :class:`~cudnn_guide.graphs.declare.Fused` (a built graph and its tensors).
        Returns ``(plan, source)`` where ``source`` is ``"cache"`` (a :class:`LoadedPlan`) or
        ``"built"`` (the ``Fused`` that ``build`` returned; its plan is now on disk).
        """
        entry = self.read(key)
        if entry is not None:
            blob, uids = entry
            return load_plan(blob, uids, handle), "cache"
        fused = build()
        blob = bytes(fused.built.graph.serialize(as_bytes=True))
        self.store(key, blob, fused.uids)
        return fused, "built"
