"""Run a function in a fresh process that has imported torch but has no CUDA state.

Start-up studies (plan caches, kernel caches) and the gallery recording each need a process
with no CUDA context, no cuDNN handle, no built graph and no cache left by earlier work. A new
Python interpreter gives that, but it also imports torch every time: 3–4.5 s on the GPU builder,
more than most of what such a process measures.

:func:`run` gets the same state for a fraction of that. It uses ``multiprocessing``'s
*forkserver*: a server process, started once from a new interpreter, imports the modules named
in ``preload`` and never touches CUDA. Each call forks a new child from that server. The child
starts with those modules imported and nothing else: CUDA is initialized lazily, so its
context, its cuDNN handle and every library state come into being inside the child, as in a new
interpreter. On entry the child checks that torch's CUDA state is not initialized, and refuses
to run otherwise.

What a forked child does **not** pay is the import itself. A study that wants the import in its
numbers (a new interpreter's whole start-up) must start one: see
:func:`cudnn_guide.coldstart.run_fresh`'s ``new_interpreter`` control.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import sys
import time
import traceback
import types
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .errors import GuideError

__all__ = ["FreshProcessError", "FreshResult", "PRELOAD", "run"]

PRELOAD: tuple[str, ...] = ("torch", "numpy")
"""Modules the server imports before forking, unless :func:`run` is given others."""

_server_preload: tuple[str, ...] | None = None


class FreshProcessError(GuideError):
    """The function failed, died or timed out in its fresh process.

    Attributes
    ----------
    what:
        The function's qualified name.
    detail:
        The child's traceback, or how it ended.

    Example
    -------
    >>> try:
    ...     fresh_process.run(my_study)
    ... except FreshProcessError as exc:
    ...     print(exc.detail)  # the child's traceback
    """

    def __init__(self, what: str, detail: str) -> None:
        self.what, self.detail = what, detail
        super().__init__(f"{what} failed in its fresh process:\n{detail}")


@dataclass(frozen=True)
class FreshResult:
    """What :func:`run` returns.

    Example
    -------
    >>> done = fresh_process.run(os.getpid)
    >>> done.value == done.pid != os.getpid(), f"started in {done.start_seconds:.3f} s"
    """

    value: Any
    """The function's return value (it must pickle)."""
    seconds: float
    """Wall time from asking for the process to its exit, seen by the caller."""
    start_seconds: float
    """From asking for the process to the child starting the function: the start-up a new
    interpreter would spend importing (the first call in a process also starts the server)."""
    pid: int
    """The child's process id (never the caller's)."""


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _context(preload: Sequence[str]) -> Any:
    """The forkserver context; the server imports ``preload`` when it starts.

    The server is one per calling process, started at the first :func:`run`; the preload list of
    that first call is the one it keeps.
    """
    global _server_preload
    ctx = multiprocessing.get_context("forkserver")
    if _server_preload is None:
        _server_preload = tuple(preload)
        ctx.set_forkserver_preload(list(_server_preload))
    return ctx


def _cuda_untouched() -> str | None:
    """Why this process is not fresh, or None when it is."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if torch.cuda.is_initialized():
        return "torch's CUDA state was already initialized when the child started"
    return None


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
           environ: dict[str, str]) -> None:
    """Body of the forked child: check freshness, run ``fn``, send ``(ok, value, t_started)``."""
    t_started = time.time()
    os.environ.clear()
    os.environ.update(environ)
    try:
        reason = _cuda_untouched()
        if reason:
            raise RuntimeError(f"not a fresh process: {reason}")
        message = (True, fn(*args, **kwargs), t_started)
    except BaseException:  # noqa: BLE001 - every failure goes back to the caller, with its traceback
        message = (False, traceback.format_exc(), t_started)
    sys.stdout.flush()
    sys.stderr.flush()
    conn.send(message)
    conn.close()
    atexit._run_exitfuncs()  # what a normal interpreter exit runs; multiprocessing's exit skips it


def run(fn: Callable[..., Any], *args: Any, preload: Sequence[str] = PRELOAD, timeout: float | None = 600,
        **kwargs: Any) -> FreshResult:
    """Call ``fn(*args, **kwargs)`` in a new process forked from a server that imported ``preload``.

    The child gets the caller's current environment variables and working directory. Its standard
    output and error go where the caller's went when the server started. It runs the ``atexit``
    handlers a normal exit would (torch.compile's worker pool, for one), then exits.

    Parameters
    ----------
    fn
        A module-level function (it is pickled by name), with picklable arguments and result.
    args
        Its positional arguments.
    preload
        Modules the server imports once, before any fork. Only the first call in a process
        starts the server, so only its list counts. Never name a module that initializes CUDA
        at import.
    timeout
        Seconds before the child is killed; ``None`` waits forever.
    kwargs
        Its keyword arguments.

    Returns
    -------
    FreshResult
        The value, the wall time, the start-up time and the child's pid.

    Raises
    ------
    FreshProcessError
        ``fn`` raised (the child's traceback is in the message), the child died without an
        answer, it timed out, or it found CUDA already initialized; or ``fn`` was defined in
        ``__main__``, where the child cannot find it.

    Example
    -------
    >>> from cudnn_guide import coldstart, fresh_process
    >>> r = fresh_process.run(coldstart.measure, "conv", "build", "/tmp/plans")
    >>> r.value["first_result_s"], r.start_seconds
    """
    what = _qualname(fn)
    if getattr(fn, "__module__", None) == "__main__":
        raise FreshProcessError(what, "a function defined in __main__ cannot be found by name in the child; "
                                      "define it in an importable module")
    ctx = _context(preload)
    receive, send = ctx.Pipe(duplex=False)
    t_asked = time.time()
    t0 = time.perf_counter()
    proc = ctx.Process(target=_child, args=(send, fn, args, kwargs, dict(os.environ)))
    # multiprocessing re-imports the caller's __main__ in the child, and a script without an
    # ``if __name__ == "__main__"`` guard (a gallery example run by hand) would run again there.
    # The child needs nothing from __main__, so it is shown an empty one while the child starts.
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        proc.start()
    finally:
        if main is not None:
            sys.modules["__main__"] = main
    send.close()
    try:
        if not receive.poll(timeout):
            proc.kill()
            proc.join()
            raise FreshProcessError(what, f"no answer within {timeout} s; the child was killed")
        try:
            ok, value, t_started = receive.recv()
        except EOFError:
            proc.join()
            raise FreshProcessError(what, f"the child died without an answer (exit code {proc.exitcode})") from None
    finally:
        receive.close()
    proc.join(timeout=60)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if not ok:
        raise FreshProcessError(what, value)
    return FreshResult(value=value, seconds=time.perf_counter() - t0, start_seconds=max(0.0, t_started - t_asked),
                       pid=proc.pid)
