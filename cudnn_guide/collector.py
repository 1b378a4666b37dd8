"""The running example's collector: checks and measurements register with it as they are made.

The way pytest-benchmark's session collects every ``benchmark`` fixture: the docs build starts a
collector before each example (:func:`cudnn_guide.report.records.begin`) and writes what it
gathered afterwards. :func:`cudnn_guide.check.check` and
:func:`cudnn_guide.measure.bench.benchmark` report to it; with no collector running (a script, a
training loop) they keep nothing. Helpers that time many trial runs and report a summary (a
comparison's rounds, an autotuner's candidates) time them :func:`paused` and register the
summary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["start", "stop", "current", "add_check", "add_measurements", "paused"]

_TARGET: Any = None
_PAUSED = 0


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
