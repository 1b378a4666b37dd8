"""The running example's collector: checks and measurements register with it as they are made.

The way pytest-benchmark's session collects every ``benchmark`` fixture: the docs build starts a
collector before each example (:func:`cudnn_guide.report.records.begin`) and writes what it
gathered afterwards. :func:`cudnn_guide.check.check` and
:func:`cudnn_guide.measure.bench.benchmark` report to it; with no collector running (a script, a
training loop) they keep nothing. Helpers that time many trial runs and report a summary (a
comparison's rounds, an autotuner's candidates) time them :func:`paused` and register the
summary.

The collector also keeps where the example's time went: :func:`spending` counts the wall time of
the measuring helpers (timing loops, fresh processes), and the build writes it with the record,
so a slow page can be told apart from a slow measurement. :func:`measuring` marks the library's blocks whose
wall time a page reports (a plan build, a first call), :func:`spending` blocks included. When pages
are recorded side by side (lanes, with the default ``CUDNN_GUIDE_TURN_SCOPE=measured``), the docs
build holds the GPU alone around each (:func:`hold_while_measuring`) while the pages share it for
the rest (a page that reads a clock in its own code holds it alone in the cells from its first own
clock reading to its last).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["start", "stop", "current", "add_check", "add_measurements", "paused"]
# add_environment, spending, spending_now, measuring, measuring_now, measuring_holds, hold_while_measuring,
# between_steps, give_way_with, seconds_spent and compile_seconds serve the package's own modules (and the
# docs build)

_TARGET: Any = None
_PAUSED = 0
_SPENT: dict[str, float] = {}
_SPENDING: list[str] = []
_MEASURING: list[contextlib.ExitStack] = []  # the holders entered for the open measuring blocks, once
_DEPTH = [0]  # measuring blocks open, nested or not
_DEPTH_LOCK = threading.Lock()  # the recorder's lane threads open interpreter pools at once
_HOLDERS: list[Callable[[], contextlib.AbstractContextManager[Any]]] = []
_GIVE_WAY: list[Callable[[], Any]] = []


def start(target: Any) -> None:
    """Collect into ``target`` (anything with ``add(*measurements)`` and ``add_check(result)``).

    Parameters
    ----------
    target
        Usually a :class:`~cudnn_guide.report.records.Record`.

    Example
    -------
    >>> class Bag:
    ...     def add(self, *ms): self.ms = ms
    ...     def add_check(self, c): pass
    >>> start(Bag()); current() is not None
    True
    >>> _ = stop()
    """
    global _TARGET
    _TARGET = target
    _SPENT.clear()


def stop() -> Any:
    """Stop collecting; return what was collected into (``None`` if nothing was running).

    Returns
    -------
    Any
        The target given to :func:`start`.

    Example
    -------
    >>> stop() is None
    True
    """
    global _TARGET
    target, _TARGET = _TARGET, None
    return target


def current() -> Any:
    """The running collector's target, or ``None``.

    Returns
    -------
    Any
        The target given to :func:`start`.

    Example
    -------
    >>> current() is None
    True
    """
    return _TARGET


def add_check(result: Any) -> None:
    """Register a passing check with the running collector, if any.

    Parameters
    ----------
    result
        A :class:`~cudnn_guide.check.CheckResult`.

    Example
    -------
    >>> add_check(object())  # nothing is running: nothing kept
    """
    if _TARGET is not None:
        _TARGET.add_check(result)


def add_measurements(*measurements: Any) -> None:
    """Register measurements with the running collector, unless collection is :func:`paused`.

    Parameters
    ----------
    measurements
        :class:`~cudnn_guide.measure.measurement.Measurement` objects, or iterables of them.

    Example
    -------
    >>> add_measurements()  # nothing is running: nothing kept
    """
    if _TARGET is not None and not _PAUSED:
        _TARGET.add(*measurements)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Measurements made inside are not collected (trial runs; the caller registers a summary).

    Returns
    -------
    Iterator[None]
        A context manager.

    Example
    -------
    >>> with paused():
    ...     add_measurements()  # ignored
    """
    global _PAUSED
    _PAUSED += 1
    try:
        yield
    finally:
        _PAUSED -= 1


def add_environment(environment: Any) -> None:
    """Give the running collector's target the example's environment, if a collector is running.

    :func:`cudnn_guide.environment.collect` calls it, so a page need not pass its environment on.

    Parameters
    ----------
    environment
        An :class:`~cudnn_guide.environment.EnvironmentRecord`.

    Example
    -------
    >>> add_environment(object())  # nothing is running: nothing kept
    """
    if _TARGET is not None and hasattr(_TARGET, "environment"):
        _TARGET.environment = environment


@contextlib.contextmanager
def spending(what: str) -> Iterator[None]:
    """Count the wall time inside as spent on ``what`` (``"timing"``, ``"fresh processes"``).

    Only the outermost of nested blocks counts, so a comparison's rounds are not counted again
    by the benchmarks inside them; time ``torch.compile`` spends compiling inside is left out
    (:func:`compile_seconds` counts it). Works as a decorator too.

    Parameters
    ----------
    what
        The kind of work.

    Returns
    -------
    Iterator[None]
        A context manager.

    Example
    -------
    >>> _ = stop(); start(object())
    >>> with spending("timing"):
    ...     with spending("fresh processes"):  # inside another: not counted again
    ...         pass
    >>> sorted(seconds_spent())
    ['timing']
    >>> _ = stop()
    """
    if _SPENDING:
        yield
        return
    with measuring():  # held before the clock starts: a wait for the GPU is not counted
        _SPENDING.append(what)
        t0, c0 = time.perf_counter(), compile_seconds()
        try:
            yield
        finally:
            _SPENDING.pop()
            compiling = compile_seconds() - c0  # torch.compile's first calls inside: compiling, not timing
            _SPENT[what] = _SPENT.get(what, 0.0) + time.perf_counter() - t0 - compiling


def spending_now() -> str | None:
    """The kind of work :func:`spending` is counting now (the outermost block), or ``None``.

    The docs build asks it before it lets a page set the GPU aside: a wait to get the GPU back
    would be counted in the block's wall time.

    Returns
    -------
    str | None
        ``"timing"``, ``"fresh processes"`` ... or ``None`` outside every block.

    Example
    -------
    >>> spending_now() is None
    True
    """
    return _SPENDING[0] if _SPENDING else None


@contextlib.contextmanager
def measuring() -> Iterator[None]:
    """Mark a block whose wall time is reported (a plan build, a first call, a timing loop).

    Nothing is counted; the first block to open enters every context :func:`hold_while_measuring`
    registered (the docs build: this process holds the GPU alone) before its code runs, so a
    wait they make is outside the block's own clock, and the last to close leaves them, in
    whatever order the blocks close. :func:`spending` blocks are measuring blocks. Works as a
    decorator too.

    Returns
    -------
    Iterator[None]
        A context manager.

    Example
    -------
    >>> with measuring():
    ...     measuring_now()
    True
    >>> measuring_now()
    False
    """
    with _DEPTH_LOCK:
        if _DEPTH[0] == 0:
            stack = contextlib.ExitStack()
            try:
                for holder in list(_HOLDERS):
                    stack.enter_context(holder())
            except BaseException:
                stack.close()
                raise
            _MEASURING.append(stack)
        _DEPTH[0] += 1
    try:
        yield
    finally:  # blocks may close in any order (an interpreter pool's life): the holders go with the last
        with _DEPTH_LOCK:
            _DEPTH[0] -= 1
            last = _MEASURING.pop() if _DEPTH[0] == 0 and _MEASURING else None
        if last is not None:
            last.close()


def measuring_now() -> bool:
    """Whether a :func:`measuring` block (a :func:`spending` block included) is running.

    Returns
    -------
    bool
        ``True`` inside one.

    Example
    -------
    >>> measuring_now()
    False
    """
    return _DEPTH[0] > 0


def measuring_holds() -> bool:
    """Whether a new outermost :func:`measuring` block would take something (:func:`hold_while_measuring`).

    In a plain process nothing is registered and a measuring block costs nothing. Under the docs
    build's lanes it takes the GPU alone, and every other page recorded beside this one waits: a
    helper whose clock is optional (a plan build's step times) reads it only where this is ``False``
    or its caller asks for the time.

    Returns
    -------
    bool
        ``True`` when a holder is registered and no measuring block is open yet.

    Example
    -------
    >>> measuring_holds()  # a script: nothing registered
    False
    """
    return bool(_HOLDERS) and not measuring_now()


def hold_while_measuring(holder: Callable[[], contextlib.AbstractContextManager[Any]] | None) -> None:
    """Enter ``holder()`` around every outermost :func:`measuring` block (``None``: none any more).

    The docs build registers its GPU turn here, so that a page's measured blocks run while no
    other page recorded beside it uses the GPU. One holder at a time: a new one replaces the last.

    Parameters
    ----------
    holder
        A factory of context managers, or ``None``.

    Example
    -------
    >>> hold_while_measuring(contextlib.nullcontext); hold_while_measuring(None)
    """
    _HOLDERS[:] = [] if holder is None else [holder]


def between_steps() -> None:
    """Mark a point between a page's GPU steps (before a plan build, before a check) where it may give way.

    In a plain process this does nothing. Under the docs build's lanes a page that shares the GPU
    with its neighbours holds it for a whole code cell; a neighbour that asks to measure waits for
    the cell to end. The docs build registers here (:func:`give_way_with`) a call that, when a
    neighbour waits, lets that measurement run first: this page's queued GPU work is drained, the
    shared turn given up and taken back after the measurement. Never inside a :func:`measuring`
    block, whose clock would count the wait.

    Example
    -------
    >>> between_steps()  # a script: nothing registered, nothing happens
    """
    if _DEPTH[0] == 0:
        for give_way in list(_GIVE_WAY):
            give_way()


def give_way_with(give_way: Callable[[], Any] | None) -> None:
    """Call ``give_way()`` at every :func:`between_steps` outside a measured block (``None``: nothing any more).

    One at a time: a new one replaces the last.

    Parameters
    ----------
    give_way
        A function of no arguments (the docs build's :meth:`Turn.give_way`), or ``None``.

    Example
    -------
    >>> give_way_with(lambda: None); give_way_with(None)
    """
    _GIVE_WAY[:] = [] if give_way is None else [give_way]


def seconds_spent() -> dict[str, float]:
    """Wall seconds counted by :func:`spending` since the collector started, by kind.

    Returns
    -------
    dict[str, float]
        Kind → seconds.

    Example
    -------
    >>> isinstance(seconds_spent(), dict)
    True
    """
    return dict(_SPENT)


def compile_seconds() -> float:
    """Seconds ``torch.compile`` has spent compiling in this process, forward and lazy backward.

    Read from Dynamo's own clock (``compilation_time_metrics``); 0 while ``torch._dynamo`` is not
    imported, and nothing is imported to find out.

    Returns
    -------
    float
        Seconds since the process started.

    Example
    -------
    >>> compile_seconds() >= 0
    True
    """
    utils = sys.modules.get("torch._dynamo.utils")
    metrics = getattr(utils, "compilation_time_metrics", None) or {}
    return float(sum(sum(metrics.get(key, ())) for key in ("_compile.compile_inner", "backward._backward_impl")))
