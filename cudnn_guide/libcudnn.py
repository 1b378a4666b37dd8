"""Which libcudnn the frontend loads: its search order, the file it finds, and the one in use.

Nothing here needs a GPU. :func:`find_libcudnn` explains the search; :func:`require_cudnn` raises
:class:`~cudnn_guide.errors.CudnnLibraryError` naming the fix when nothing is found.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import subprocess
import sysconfig
from pathlib import Path

from cudnn_guide.errors import CudnnLibraryError

__all__ = ["LibcudnnSearch", "find_libcudnn", "loaded_libcudnn", "require_cudnn"]


# ---------------------------------------------------------------------------------------------
# libcudnn: where the frontend looks, and what it found
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LibcudnnSearch:
    """Where the cuDNN frontend looks for libcudnn, in its own order, and what is there.

    The frontend wheel does not bundle libcudnn. At import it tries, in order: each directory of
    ``LD_LIBRARY_PATH``; ``nvidia/cudnn/lib`` in the interpreter's site-packages (the
    ``nvidia-cudnn-cu12``/``-cu13`` wheel, which a CUDA build of PyTorch brings); then the system
    loader (``ldconfig``). Import succeeds even when nothing is found: the first backend call fails.

    Example
    -------
    >>> s = find_libcudnn()
    >>> print(s.found, s.source)
    """

    candidates: tuple[str, ...]
    """Every path or name tried, in order."""
    found: str | None
    """The first candidate that exists, or ``None``."""
    source: str | None
    """``"LD_LIBRARY_PATH"``, ``"site-packages"``, ``"system loader"`` or ``None``."""

    def explain(self) -> str:
        """A multi-line, human-readable account of the search."""
        lines = ["libcudnn search order (as cuDNN Frontend does it):"]
        lines += [f"  {i + 1}. {c}" for i, c in enumerate(self.candidates)]
        if self.found:
            lines.append(f"found via {self.source}:")
            lines.append(f"  {self.found}")
        else:
            lines.append("found: nothing")
        return "\n".join(lines)


def find_libcudnn() -> LibcudnnSearch:
    """Search for libcudnn the way ``import cudnn`` does, without loading it.

    Returns
    -------
    LibcudnnSearch
        The candidates in order and the first that exists.

    Example
    -------
    >>> from cudnn_guide.environment import find_libcudnn
    >>> print(find_libcudnn().explain())
    """
    candidates: list[str] = []
    for directory in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if directory:
            for name in ("libcudnn.so.9", "libcudnn.so"):
                path = os.path.join(directory, name)
                candidates.append(path)
                if os.path.exists(path):
                    return LibcudnnSearch(tuple(candidates), path, "LD_LIBRARY_PATH")
    purelib = sysconfig.get_path("purelib")
    for sub in ("nvidia/cudnn/lib", "nvidia/cudnn_jit/lib"):
        pattern = os.path.join(purelib, sub, "libcudnn.so.*[0-9]")
        candidates.append(pattern)
        hits = sorted(glob.glob(pattern))
        if hits:
            return LibcudnnSearch(tuple(candidates), hits[0], "site-packages")
    for name in ("libcudnn.so.9", "libcudnn.so"):
        candidates.append(f"{name} (system loader)")
        path = _system_library(name)
        if path:
            return LibcudnnSearch(tuple(candidates), path, "system loader")
    return LibcudnnSearch(tuple(candidates), None, None)


def _system_library(name: str) -> str | None:
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        parts = line.strip().split(" => ")
        if len(parts) == 2 and parts[0].split(" ")[0] == name:
            return parts[1].strip()
    return None


def loaded_libcudnn() -> str | None:
    """The path of the libcudnn mapped into this process, read from ``/proc/self/maps``.

    Returns
    -------
    str | None
        The resolved path, or ``None`` if no libcudnn is mapped.

    Example
    -------
    >>> require_cudnn()
    >>> print(loaded_libcudnn())
    """
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        if "/libcudnn.so" in path:
            return os.path.realpath(path)
    return None


def require_cudnn() -> int:
    """Return cuDNN's backend version as an integer (``91900`` for 9.19.0).

    Returns
    -------
    int
        cuDNN's version as an integer.

    Raises
    ------
    CudnnLibraryError
        If the frontend cannot reach libcudnn. The message lists where it was looked for and how
        to install it.

    Example
    -------
    >>> version = require_cudnn()  # 91900 for cuDNN 9.19.0
    """
    import cudnn

    try:
        return int(cudnn.backend_version())
    except Exception as exc:  # the frontend raises RuntimeError("Unable to find symbol ...")
        search = find_libcudnn()
        raise CudnnLibraryError(
            f"cuDNN Frontend {cudnn.__version__} cannot reach libcudnn ({exc}).\n"
            f"{search.explain()}\n"
            "Fix: install the cuDNN 9 wheel that matches your CUDA major version "
            "(`pip install nvidia-cudnn-cu12` or `nvidia-cudnn-cu13`; a CUDA build of PyTorch "
            "brings it), or point LD_LIBRARY_PATH at a directory holding libcudnn.so.9."
        ) from exc
