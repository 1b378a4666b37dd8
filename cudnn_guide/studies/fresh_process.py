"""Run functions in fresh Python interpreters, started ahead of time so their imports cost no wait.

Start-up studies (plan caches, kernel caches) and the gallery recording each need a process with
no CUDA context, no cuDNN handle, no built graph and no cache left by earlier work: a new
interpreter. Started on demand, each pays Python's and torch's imports first, seconds on the
GPU builder (the methodology page's controls measure them), more than most of what such a
process measures.

An :class:`InterpreterPool` starts the interpreters it will need **all at once, before the first
call**: they import the ``preload`` modules concurrently (a few seconds in all, on a multi-core
host), check that CUDA is untouched, and wait. Each :meth:`InterpreterPool.run` hands the next
one a function to call; it runs it, answers, and exits at once (``os._exit``). Every call thus gets a genuine new
interpreter, with its imports done but nothing else; and no interpreter imports while another
one measures. Importing needs no GPU, but a pool's imports (plot_06 starts 36 interpreters importing torch
at once) load the whole host (in the recorder they import on every core of their GPU's lanes, even
where the caller is pinned to a few; each call then runs on the caller's cores): in a page recorded in
lanes, the wait for them holds the page's turn as its cell does (shared), so no page beside it
measures meanwhile. Set aside through 5d281fa, they ran
beside another lane's timing loops: in that recording plot_06's pool imported during plot_04's first
comparisons, whose ``torch.compile`` chain measured 101 µs (31 µs in 2cd522f's, 37 µs in eedf3ae's
with the imports holding the turn). That they caused it is not shown (the chain came out at 48-104 µs
in three of 34 earlier recordings; the measurement studies, "One recorder call"). From the first call
on, the pool holds the turn alone until it closes. Its ``start_seconds`` is how long the imports took.

Why not fork children from one pre-imported server, which is cheaper still? That was tried: in a
control, forked children loaded a saved cuDNN plan faster than a new interpreter, a difference
pre-started interpreters did not show. Both kinds built a cold graph slower than an interpreter
that builds straight after importing (the methodology page shows the runs, the ratios computed
from them, and what they do and do not establish).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cudnn_guide import collector
from cudnn_guide.errors import GuideError
from cudnn_guide.studies.interpreter import at_once_setting, core_share, receive, send

__all__ = ["FreshProcessError", "FreshResult", "InterpreterPool", "AT_ONCE_ENV", "PAIR_LOCK_ENV", "timing_alone"]

AT_ONCE_ENV = "CUDNN_GUIDE_POOL_AT_ONCE"
"""``2``: :meth:`InterpreterPool.run_all` runs its calls two at a time, each interpreter on its own half of the
caller's cores; unset or ``1``: one at a time. The recorder sets it to ``2`` for pages recorded in lanes unless it is
set (issue 34: a pool's calls hold the GPU's turn alone, and two at once shorten that hold); a reader's plain run of
a page keeps one at a time. ``run`` is always one call."""

PRELOAD: tuple[str, ...] = ("torch", "numpy")
"""Modules each interpreter imports before it is ready, unless it is given others."""

_WORKER = (
    "import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
    "from cudnn_guide.studies.interpreter import worker_main; worker_main(int(sys.argv[2]), sys.argv[3:])"
)


class FreshProcessError(GuideError):
    """The function failed, died or timed out in its fresh process, or the process could not start.

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
    """What :meth:`InterpreterPool.run` and :func:`run` return.

    Example
    -------
    >>> done = fresh_process.run(os.getpid)
    >>> done.value == done.pid != os.getpid(), f"{done.seconds:.2f} s"
    """

    value: Any
    """The function's return value (it must pickle)."""
    seconds: float
    """Wall time from handing over the call to the interpreter's exit, seen by the caller."""
    start_seconds: float
    """From handing over the call to the function starting (the imports were done before)."""
    import_seconds: float
    """How long this interpreter took to import its ``preload`` modules."""
    pid: int
    """The interpreter's process id (never the caller's)."""


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _payload(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """A call, pickled for an interpreter; a function it cannot find, or that does not pickle, is refused here."""
    if getattr(fn, "__module__", None) == "__main__":
        raise FreshProcessError(
            _qualname(fn),
            "a function defined in __main__ cannot be found by name in a new interpreter; define it in an importable "
            "module",
        )
    try:
        return pickle.dumps((fn, args, kwargs))
    except Exception as exc:  # any pickling error, named for the caller
        raise FreshProcessError(_qualname(fn), f"its call cannot be sent to an interpreter: {exc!r}") from None


def _cores() -> list[int] | None:
    """The cores this process may run on (``None`` where the OS cannot say)."""
    get = getattr(os, "sched_getaffinity", None)
    return sorted(get(0)) if get is not None else None


IMPORT_CPUS_ENV = "CUDNN_GUIDE_IMPORT_CPUS"
"""Cores a new interpreter may import on, beyond its caller's (``"0,1,2"``); unset: only the caller's."""


def _widen_for_imports(pid: int) -> None:
    """Let a new interpreter import on the cores :data:`IMPORT_CPUS_ENV` names, not only its caller's.

    The recorder names there the cores of every lane on the caller's GPU: a page recorded in a lane is pinned
    to its lane's cores (a third of the builder's), and its interpreters with it; plot_06's 36 imported on 5
    cores for 13 s, holding the page's shared turn, so that no other lane of its GPU could measure meanwhile.
    Nothing is measured on that GPU while they import (the pool's measured block starts after), so they may use
    those lanes' cores; each call then runs on its caller's cores again
    (:func:`~cudnn_guide.studies.interpreter.worker_main` pins every thread of the interpreter before it starts
    the call). Unset (a reader's build, any use outside the recorder), or where the OS cannot pin: nothing
    changes.
    """
    set_affinity = getattr(os, "sched_setaffinity", None)
    spec = os.environ.get(IMPORT_CPUS_ENV, "").strip()
    if set_affinity is None or not spec:
        return
    try:
        cores = sorted({int(c) for c in spec.split(",") if c.strip()})
    except ValueError:
        return  # not a list of cores: the caller's, as without it
    with contextlib.suppress(OSError):  # a process already gone, or cores outside this machine's cpuset
        set_affinity(pid, cores)


class _Interpreter:
    def __init__(self, preload: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        read, write = os.pipe()
        self.launched = time.monotonic()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *subprocess._args_from_interpreter_flags(),
                "-c",
                _WORKER,
                json.dumps(sys.path),
                str(write),
                *preload,
            ],
            stdin=subprocess.PIPE,
            pass_fds=(write,),
            cwd=os.getcwd(),
            env={**os.environ, **(env or {})},
        )
        os.close(write)
        _widen_for_imports(self.proc.pid)
        self.answers = read
        self._closing = threading.Lock()
        self.import_seconds: float | None = None

    def wait_ready(self, timeout: float | None) -> None:
        if self.import_seconds is not None:
            return
        try:
            _, self.import_seconds, not_fresh = receive(self.answers, timeout)
        except EOFError:
            raise FreshProcessError(
                "interpreter start", f"it exited while importing (exit code {self.proc.wait()})"
            ) from None
        except TimeoutError:
            self.kill()
            raise FreshProcessError("interpreter start", f"not ready within {timeout} s; it was killed") from None
        if not_fresh:
            self.kill()
            raise FreshProcessError("interpreter start", f"importing its modules touched CUDA: {not_fresh}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.close()

    def close(self) -> None:
        # a pair's caller may kill an interpreter while the thread that talks to it closes it too: once, under a lock
        with self._closing:
            if self.proc.stdin and not self.proc.stdin.closed:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
            if self.answers >= 0:
                answers, self.answers = self.answers, -1
                os.close(answers)


class InterpreterPool:
    """``size`` new Python interpreters, started together now; each runs one call, then exits.

    Parameters
    ----------
    size
        How many calls the pool will serve: all of its interpreters start at once, so none
        imports while another one's call runs.
    preload
        Modules each interpreter imports before it is ready. Never name one that initializes
        CUDA at import: an interpreter that did is refused.
    ready_timeout
        Seconds the first call waits for the interpreters to be ready.
    env
        Environment variables set in its interpreters on top of the caller's, from their start
        (``{"CUDA_VISIBLE_DEVICES": "1"}`` pins them to one GPU).
    exit_fast
        Each interpreter ends with ``os._exit`` right after answering (the default), instead of
        a normal exit (``atexit`` handlers, Inductor's compile workers, CUDA teardown: seconds
        after a ``torch.compile``, as ``tools/archive/exit_cost_probe.py`` measures) that the caller
        would wait for. What a call writes to disk stays: a cold build's CUDA JIT cache served
        the next process as well after either ending (``tools/archive/jit_exit_probe.py``,
        ``docs/data/jit_exit.json``). ``False`` for a call that needs its ``atexit`` handlers.

    Raises
    ------
    ValueError
        ``size`` is not positive.

    Example
    -------
    >>> with InterpreterPool(3, preload=("torch",)) as pool:
    ...     results = [pool.run(coldstart.measure, "conv", mode, "/tmp/plans") for mode in ("build", "cache", "cache")]
    """

    def __init__(
        self,
        size: int,
        preload: Sequence[str] = PRELOAD,
        ready_timeout: float = 300.0,
        env: Mapping[str, str] | None = None,
        exit_fast: bool = True,
        at_once: int | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"an InterpreterPool needs a positive size, got {size}")
        at_once = at_once_setting(AT_ONCE_ENV) if at_once is None else at_once
        if at_once not in (1, 2):
            raise ValueError(f"an InterpreterPool runs 1 or 2 calls at once, got {at_once!r}")
        cores = _cores()
        self.at_once = 1 if cores is not None and len(cores) < at_once else at_once
        """How many calls :meth:`run_all` runs at a time: 2 where asked and the caller has two cores or more."""
        self.preload, self.ready_timeout, self.env = tuple(preload), ready_timeout, dict(env or {})
        self.exit_fast = exit_fast
        self._alone = contextlib.ExitStack()  # a measuring block, from the interpreters' readiness to close
        self._t0 = time.perf_counter()
        self._idle = [_Interpreter(self.preload, self.env) for _ in range(size)]
        self._busy: list[_Interpreter] = []
        self.start_seconds: float | None = None
        """Wall time from creating the pool until all its interpreters were ready."""

    def __enter__(self) -> InterpreterPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def left(self) -> int:
        """Interpreters not used yet."""
        return len(self._idle)

    def close(self) -> None:
        """End the interpreters that were not used (they exit without running anything)."""
        for interp in self._idle:
            interp.close()
            try:
                interp.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                interp.kill()
        self._idle = []
        for interp in list(self._busy):  # a call still running (its caller was interrupted): it ends here
            interp.kill()
        self._busy = []
        self._alone.close()

    def wait_ready(self) -> None:
        """Wait until every interpreter has finished its imports (the first :meth:`run` waits too).

        All start together; waiting for all means none imports during a measured call. The wait
        holds the caller's turn as it is (in lanes, a shared cell's: pages beside this one may run
        their cells, not measure, since the imports load every core); from its end until
        :meth:`close`, the pool is one measuring block.

        Raises
        ------
        FreshProcessError
            An interpreter died or was not ready within ``ready_timeout``.

        Example
        -------
        >>> with InterpreterPool(4, preload=["torch"]) as pool:
        ...     pool.wait_ready()  # before anything else on this machine is timed
        """
        if self.start_seconds is not None:
            return
        for interp in self._idle:
            interp.wait_ready(self.ready_timeout)
        self.start_seconds = time.perf_counter() - self._t0
        self._alone.enter_context(collector.measuring())

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = 600, **kwargs: Any) -> FreshResult:
        """Call ``fn(*args, **kwargs)`` in the next interpreter, which then exits.

        The interpreter gets the caller's current environment variables (plus the pool's
        ``env``), working directory and ``sys.path``. Its standard output and error are the
        caller's. It exits after answering: normally (``atexit`` handlers run), or at once with ``exit_fast``.

        Parameters
        ----------
        fn
            A module-level function (it is pickled by name), with picklable arguments and result.
        args
            Its positional arguments.
        timeout
            Seconds before the interpreter is killed; ``None`` waits forever.
        kwargs
            Its keyword arguments.

        Returns
        -------
        FreshResult
            The value, the wall time, the start-up time and the interpreter's pid.

        Raises
        ------
        FreshProcessError
            ``fn`` raised (its traceback is in the message), the interpreter died without an
            answer or timed out, the pool is used up, or ``fn`` was defined in ``__main__``,
            where a new interpreter cannot find it.

        Example
        -------
        >>> with InterpreterPool(1) as pool:
        ...     print(pool.run(os.getpid).value)
        """
        return self.run_all([(fn, args, kwargs)], timeout=timeout)[0]

    def run_all(
        self, calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]], timeout: float | None = 600
    ) -> list[FreshResult]:
        """Each ``(fn, args, kwargs)`` of ``calls`` in its own interpreter, :attr:`at_once` at a time, in order.

        With ``at_once=2`` the calls run in consecutive pairs (the first two, then the next two...): both
        interpreters of a pair get their call at once, each pinned to its own half of the caller's cores
        (:func:`~cudnn_guide.studies.interpreter.core_share`; where the OS cannot say which cores the caller has,
        both run unpinned), and the next pair starts when both have answered, so a call may depend on anything
        done two places or more before it, never on its neighbour. A caller with one core runs one at a time. A
        pair's two interpreters share a lock for the GPU work they time (:func:`timing_alone`), so that neither
        times its kernels while the other runs its own. When one call of a pair fails, its neighbour is stopped
        (its result would be thrown away); an interrupt (Ctrl-C, the recorder's SIGTERM) stops both.

        Parameters
        ----------
        calls
            Module-level functions with their positional and keyword arguments (all picklable).
        timeout
            Seconds before each interpreter is killed; ``None`` waits forever.

        Returns
        -------
        list[FreshResult]
            One per call, in the order of ``calls``.

        Raises
        ------
        FreshProcessError
            As :meth:`run`, or a call that cannot be pickled (before any interpreter starts its call); with two
            at once, the first failing call's, once its neighbour has been stopped (a second failure is noted on
            it).

        Example
        -------
        >>> with InterpreterPool(4, at_once=2) as pool:
        ...     pids = [r.value for r in pool.run_all([(os.getpid, (), {})] * 4)]
        """
        calls = list(calls)
        payloads = [_payload(fn, args, kwargs) for fn, args, kwargs in calls]  # every call checked before any starts
        if len(calls) > len(self._idle):
            raise FreshProcessError(
                _qualname(calls[0][0]) if calls else "run_all",
                (
                    f"this InterpreterPool has {len(self._idle)} interpreter(s) left for {len(calls)} calls"
                    if self._idle
                    else "this InterpreterPool has no interpreter left"
                )
                + ": make it as large as the number of calls",
            )
        if not calls:
            return []
        self.wait_ready()  # outside the spending block: the imports are not the study's time
        cores, width = _cores(), self.at_once
        whats = [_qualname(fn) for fn, _, _ in calls]
        results: list[FreshResult] = []
        with contextlib.ExitStack() as stack:
            lock = ""  # a pair's lock for the GPU work its calls time (timing_alone); made before the timed block
            if width == 2 and len(calls) > 1:
                lock = os.path.join(
                    stack.enter_context(tempfile.TemporaryDirectory(prefix="cudnn-guide-pair-")), "lock"
                )
            with collector.spending("fresh processes"):
                for start in range(0, len(calls), width):
                    group = range(start, min(start + width, len(calls)))
                    results.extend(
                        self._group([whats[k] for k in group], [payloads[k] for k in group], timeout, cores, lock)
                    )
        return results

    def _group(
        self, whats: list[str], payloads: list[bytes], timeout: float | None, cores: list[int] | None, lock: str
    ) -> list[FreshResult]:
        """Calls started together, each in the next interpreter on its share of ``cores``; their results in order."""
        if len(payloads) == 1:
            return [self._exchange(self._idle.pop(0), whats[0], payloads[0], timeout, cores)]
        interps = [self._idle.pop(0) for _ in payloads]
        self._busy.extend(interps)
        shares = [None if cores is None else core_share(i, len(payloads), cores) for i in range(len(payloads))]
        answers: list[FreshResult | BaseException | None] = [None] * len(payloads)
        stopped: set[int] = set()

        def one(i: int) -> None:
            try:
                answers[i] = self._exchange(
                    interps[i], whats[i], payloads[i], timeout, shares[i], {PAIR_LOCK_ENV: lock}
                )
            except BaseException as exc:  # raised in the caller's thread, below
                answers[i] = exc

        threads = [
            threading.Thread(target=one, args=(i,), name=f"fresh process {i}", daemon=True)
            for i in range(len(payloads))
        ]
        try:
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.05)
                for i, answer in enumerate(answers):  # a failed call: its neighbour's result would be thrown away
                    if isinstance(answer, BaseException) and threads[1 - i].is_alive() and 1 - i not in stopped:
                        stopped.add(1 - i)
                        interps[1 - i].kill()
        except BaseException:  # an interrupt: no interpreter of the pair runs on after it
            for interp in interps:
                interp.kill()
            for t in threads:
                t.join(5)
            raise
        finally:
            for interp in interps:
                self._busy.remove(interp)
        failures = [(i, a) for i, a in enumerate(answers) if isinstance(a, BaseException)]
        if failures:
            first = next((a for i, a in failures if i not in stopped), failures[0][1])
            for i, other in failures:
                if other is not first and i not in stopped:
                    first.add_note(f"its neighbour {whats[i]} failed too: {other}")
            raise first
        return [a for a in answers if isinstance(a, FreshResult)]

    def _exchange(
        self,
        interp: _Interpreter,
        what: str,
        payload: bytes,
        timeout: float | None,
        cores: list[int] | None,
        extra_env: Mapping[str, str] | None = None,
    ) -> FreshResult:
        # called only inside run_all's measured block, which holds the GPU's turn alone
        t_asked, t0 = time.time(), time.perf_counter()
        try:
            send(
                interp.proc.stdin.fileno(),
                (
                    {**os.environ, **self.env, **(extra_env or {})},
                    os.getcwd(),
                    list(sys.path),
                    payload,
                    self.exit_fast,
                    cores,
                ),
            )
            interp.proc.stdin.close()
            status, t_started, value = receive(interp.answers, timeout)
        except TimeoutError:
            interp.kill()
            raise FreshProcessError(what, f"no answer within {timeout} s; the interpreter was killed") from None
        except (EOFError, BrokenPipeError, OSError):
            interp.kill()
            raise FreshProcessError(
                what, f"the interpreter died without an answer (exit code {interp.proc.returncode})"
            ) from None
        try:
            interp.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            interp.proc.kill()
            interp.proc.wait()
        interp.close()
        if status != "ok":
            raise FreshProcessError(what, value)
        return FreshResult(
            value=value,
            seconds=time.perf_counter() - t0,
            start_seconds=max(0.0, t_started - t_asked),
            import_seconds=interp.import_seconds or 0.0,
            pid=interp.proc.pid,
        )


PAIR_LOCK_ENV = "CUDNN_GUIDE_PAIR_LOCK"
"""Set by :meth:`InterpreterPool.run_all` in the two interpreters of a pair: the lock :func:`timing_alone` takes."""


@contextlib.contextmanager
def timing_alone() -> Iterator[None]:
    """Inside a call that :meth:`InterpreterPool.run_all` runs beside another: hold the pair's lock around GPU work
    that is timed, so that the neighbour's kernels do not run meanwhile (its CPU work, a plan build, goes on).
    Anywhere else, or where the OS has no ``flock``: nothing.

    Returns
    -------
    Iterator[None]
        A context manager.

    Example
    -------
    >>> with timing_alone():
    ...     m = bench.benchmark(graph_call)
    """
    path = os.environ.get(PAIR_LOCK_ENV, "")
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        path = ""
    if not path:
        yield
        return
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the file releases the lock


def run(
    fn: Callable[..., Any], *args: Any, preload: Sequence[str] = PRELOAD, timeout: float | None = 600, **kwargs: Any
) -> FreshResult:
    """Call ``fn(*args, **kwargs)`` in one new interpreter (an :class:`InterpreterPool` of one).

    It waits for the interpreter's imports; to run several calls without that wait, make an
    :class:`InterpreterPool` as large as their number.

    Parameters
    ----------
    fn
        A module-level function, with picklable arguments and result.
    args
        Its positional arguments.
    preload
        Modules the interpreter imports before the call.
    timeout
        Seconds before the interpreter is killed; ``None`` waits forever.
    kwargs
        Its keyword arguments.

    Returns
    -------
    FreshResult
        The value, the wall time, the start-up time and the interpreter's pid.

    Raises
    ------
    FreshProcessError
        As :meth:`InterpreterPool.run`.

    Example
    -------
    >>> from cudnn_guide import coldstart, fresh_process
    >>> r = fresh_process.run(coldstart.measure, "conv", "build", "/tmp/plans")
    >>> r.value["first_result_s"]
    """
    with InterpreterPool(1, preload) as pool:
        return pool.run(fn, *args, timeout=timeout, **kwargs)
