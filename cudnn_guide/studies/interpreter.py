"""The fresh interpreter's side of :mod:`~cudnn_guide.studies.fresh_process`, and the wire between them.

:class:`~cudnn_guide.studies.fresh_process.InterpreterPool` starts ``python -c`` with
:func:`worker_main`: import the preload modules, say ready (with the import time and whether CUDA is
still untouched), wait for one call, run it, answer, exit. Messages are frames: an 8-byte length,
then a pickle.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import struct
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

__all__: list[str] = []  # used by fresh_process; nothing here is for examples


def cuda_untouched() -> str | None:
    """Why this process is not fresh, or None when it is."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if torch.cuda.is_initialized():
        return "torch's CUDA state was already initialized before the call"
    return None


# -- frames: 8-byte length, then a pickle -------------------------------------------------------
def send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    chunks, left = [], n
    while left:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, timeout: float | None) -> Any:
    """The next frame; ``EOFError`` if the writer is gone, ``TimeoutError`` after ``timeout`` s."""
    deadline = None if timeout is None else time.monotonic() + timeout
    head = _read_exact(fd, 8, deadline)
    if head is None:
        raise EOFError
    body = _read_exact(fd, struct.unpack("<Q", head)[0], deadline)
    if body is None:
        raise EOFError
    return pickle.loads(body)


def core_share(index: int, parts: int, cores: Sequence[int]) -> list[int]:
    """Share ``index`` of ``parts``: contiguous, near-equal slices of ``cores`` (all of them when there are fewer
    cores than parts). The recorder's lanes (``gallery_build.gpu_turns.lane_cpus``) and two first-call processes
    at once (:func:`cudnn_guide.studies.first_call.fresh_processes`) split cores by this one rule."""
    cores = list(cores)
    if parts <= 1 or len(cores) < parts:
        return cores
    return cores[len(cores) * index // parts : len(cores) * (index + 1) // parts]


def at_once_setting(name: str) -> int:
    """How many fresh processes at once the environment variable ``name`` asks for: 1 (unset) or 2.

    Both pairing switches (``CUDNN_GUIDE_POOL_AT_ONCE``, ``CUDNN_GUIDE_FIRST_CALLS_AT_ONCE``) read by this one rule.

    Raises
    ------
    ValueError
        Any other value, naming the variable."""
    raw = os.environ.get(name, "").strip() or "1"
    if raw not in ("1", "2"):
        raise ValueError(f"{name} takes 1 (one process at a time) or 2 (two at once), got {raw!r}")
    return int(raw)


def pin(cores: Sequence[int] | None) -> None:
    """Pin every thread of this process to ``cores`` (in a fresh interpreter, its caller's; the recorder's lanes
    pin their page processes with it too).

    ``None``, or an OS that cannot pin: nothing changes."""
    set_affinity = getattr(os, "sched_setaffinity", None)
    if not cores or set_affinity is None:
        return
    tasks = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]
    for task in tasks:  # setaffinity(0) would pin the calling thread alone
        try:
            set_affinity(int(task), cores)
        except ProcessLookupError:
            pass  # a thread that ended meanwhile


def worker_main(answer_fd: int, preload: Sequence[str]) -> None:
    """Body of each interpreter: import ``preload``, say ready, run one call on the caller's cores, answer, exit.

    It exits normally (``atexit`` handlers, CUDA teardown) unless the pool asked for a fast exit:
    then ``os._exit`` straight after the answer, skipping seconds of teardown nobody waits for.
    """
    t0 = time.time()
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # optional: the call imports what it needs
    try:
        send(answer_fd, ("ready", time.time() - t0, cuda_untouched()))
        request = receive(0, None)
    except (EOFError, BrokenPipeError):
        return  # the pool closed without using this interpreter
    environ, cwd, path, payload, exit_fast, cores = request
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    sys.path[:] = path
    t_started = time.time()
    try:  # CUDA was checked untouched when the interpreter said it was ready; nothing ran since
        pin(cores)  # the caller's cores, before anything is timed (a failure to pin is the call's error)
        fn, args, kwargs = pickle.loads(payload)
        message = ("ok", t_started, fn(*args, **kwargs))
    except BaseException:
        message = ("error", t_started, traceback.format_exc())
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        send(answer_fd, message)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        send(answer_fd, ("error", t_started, f"its result cannot be sent back: {type(exc).__name__}: {exc}"))
    if exit_fast:
        os._exit(0)
