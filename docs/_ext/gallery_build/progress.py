"""Which pages a run records, and what it says while it runs: start, end, the time left, a summary.

Everything here is plain Python (no torch, Sphinx or ``cudnn_guide``), so ``noxfile.py`` imports
it to check the page names it was given before it installs or starts anything, and the tests run
it on a CPU with a clock of their own.

* :func:`resolve_pages` — page names or numbers (``plot_05``, ``05``, ``5``, a file name) → example files.
* :func:`split_docs_args` — ``nox -s docs`` arguments → pages, and Sphinx's own arguments.
* :class:`Progress` — one line per page started or finished, with an estimate of what remains.
* :func:`page_verdicts`, :func:`changed_verdicts`, :func:`summary_line` — the closing summary.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from .scheduling import page_costs

__all__ = [
    "UnknownPageError",
    "resolve_pages",
    "split_docs_args",
    "Progress",
    "VerdictChange",
    "page_verdicts",
    "changed_verdicts",
    "summary_line",
]

PREFIX = "cudnn-guide: "
_NUMBERED = re.compile(r"plot_(\d+)_")
_NUMBER = re.compile(r"(?:plot_)?(\d+)")


class UnknownPageError(ValueError):
    """A page name or number that names no example (or more than one); the message lists the valid ones.

    Example
    -------
    >>> resolve_pages(["99"], ["plot_01_environment.py"])
    Traceback (most recent call last):
    ...
    gallery_build.progress.UnknownPageError: unknown page '99'. ...
    """


def resolve_pages(requested: Iterable[str], available: Iterable[str]) -> list[str]:
    """The example files that page names or numbers name, in the examples' order.

    Each of ``requested`` may be a file name (``plot_05_sdpa_causal.py``), its stem
    (``plot_05_sdpa_causal``), ``plot_NN`` or a number (``05``, ``5``). Repeats are dropped.

    Parameters
    ----------
    requested
        What the reader typed; empty for none.
    available
        The example file names (``examples/plot_*.py``).

    Returns
    -------
    list[str]
        Example file names, each once, in the order of ``available`` (empty when nothing was requested).

    Raises
    ------
    UnknownPageError
        Some of ``requested`` name no example, or a number names several; the message names each
        and lists every valid page, before anything has started.

    Example
    -------
    >>> resolve_pages(["5", "plot_01"], ["plot_01_environment.py", "plot_05_sdpa_causal.py"])
    ['plot_01_environment.py', 'plot_05_sdpa_causal.py']
    """
    names = sorted(available)
    by_number: dict[int, list[str]] = {}
    for name in names:
        m = _NUMBERED.match(name)
        if m:
            by_number.setdefault(int(m.group(1)), []).append(name)
    chosen: set[str] = set()
    problems: list[str] = []
    for raw in requested:
        token = raw.strip()
        if token in names or f"{token}.py" in names:
            chosen.add(token if token in names else f"{token}.py")
            continue
        m = _NUMBER.fullmatch(token)
        hits = by_number.get(int(m.group(1)), []) if m else []
        if len(hits) == 1:
            chosen.add(hits[0])
        elif hits:
            problems.append(f"page {raw!r} is ambiguous: it names {', '.join(hits)}; give the file name")
        else:
            problems.append(f"unknown page {raw!r}")
    if problems:
        valid = "\n".join(f"  {_number(n)}  {n}" for n in names) or "  (none: examples/ holds no plot_*.py)"
        raise UnknownPageError(
            "; ".join(problems) + ". Name a page by its file name, its stem, plot_NN or its number; "
            "Sphinx options that take a value go after a second '--' (nox -s docs -- 5 -- -D key=value). "
            f"Valid pages:\n{valid}"
        )
    return [n for n in names if n in chosen]


def _number(name: str) -> str:
    m = _NUMBERED.match(name)
    return m.group(1) if m else "--"


def split_docs_args(args: Iterable[str]) -> tuple[list[str], list[str]]:
    """``nox -s docs`` arguments → (pages, Sphinx arguments).

    Before a second ``--``, an argument starting with ``-`` goes to Sphinx (``-E``, ``-v``) and any
    other names a page; everything after a second ``--`` goes to Sphinx unchanged (an option with a
    value: ``-D key=value``).

    Parameters
    ----------
    args
        The session's positional arguments (what follows the first ``--``).

    Returns
    -------
    tuple[list[str], list[str]]
        The page names or numbers, and the arguments for ``sphinx``.

    Example
    -------
    >>> split_docs_args(["5", "-E", "plot_07", "--", "-D", "x=1"])
    (['5', 'plot_07'], ['-E', '-D', 'x=1'])
    """
    args = list(args)
    rest: list[str] = []
    if "--" in args:
        args, rest = args[: args.index("--")], args[args.index("--") + 1 :]
    return [a for a in args if not a.startswith("-")], [a for a in args if a.startswith("-")] + rest


RUNNING_CREDIT = 0.9
"""The most of a running page's last-recording seconds the shared estimate counts as done: it has not finished."""


class Progress:
    """A recording's progress: one line per page started or finished, and the time left.

    The estimate starts from each page's seconds in the last recording (:func:`page_costs`: a
    page without one counts as the longest) and follows the plan of GPUs (each GPU's pages run
    one after another; the others wait while GPU 0 records the pages that run alone). When the
    first page with a previous time finishes, every remaining page's time is scaled by that
    page's ratio (this GPU against the recording's), and the lines say so.

    Thread-safe: each GPU's worker reports its own pages.

    Parameters
    ----------
    previous_seconds
        Each page's seconds in the last recording (``recording.json``'s ``example_seconds``).
    clock
        Seconds, monotonic (``time.perf_counter``; a test passes its own).

    Example
    -------
    >>> p = Progress({"a.py": 10.0, "b.py": 30.0}, clock=lambda: 0.0)
    >>> p.plan([], [["a.py", "b.py"]])
    "cudnn-guide: progress: 2 page(s) to record, about 40 s from the last recording's per-page times"
    >>> _ = p.start("a.py", 0)
    >>> print(p.finish("a.py", 0, 20.0))  # doctest: +NORMALIZE_WHITESPACE
    cudnn-guide: recorded a.py in 20.0 s on GPU 0 (last recording 10.0 s); 1 of 2 finished,
    about 60 s left (estimate ×2.00 from a on this GPU)
    """

    def __init__(self, previous_seconds: dict[str, float], *, clock: Callable[[], float] = time.perf_counter):
        self.previous = {k: float(v) for k, v in previous_seconds.items()}
        self.clock = clock
        self.lanes: list[list[str]] = []
        self.alone: list[str] = []
        self.started: dict[str, float] = {}
        self.ended_at: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.failed: list[str] = []
        self.scale = 1.0
        self.scaled_from: str | None = None
        self.gpu_of_lane: list[int] | None = None  # lanes sharing GPUs (share): lane → its GPU
        self._cost: dict[str, float] = {}
        self._lock = threading.Lock()
        self.unit = "GPU"  # "lane" when several pages share a GPU (recording's --lanes)

    @property
    def pages(self) -> list[str]:
        """Every planned page, GPU by GPU."""
        return [p for lane in self.lanes for p in lane]

    def plan(self, alone: list[str], lanes: list[list[str]]) -> str:
        """Take the plan (:func:`~gallery_build.scheduling.plan_lanes`); returns the line with the first estimate."""
        with self._lock:
            self.alone, self.lanes = list(alone), [list(lane) for lane in lanes]
            self._cost = page_costs(self.pages, self.previous)
            unknown = [p for p in self.pages if not self.previous.get(p)]
            note = f"; {len(unknown)} without one counted as the longest" if unknown else ""
            if self.gpu_of_lane is not None:
                note += ", one page at a time on each GPU, until the lanes' own rate is known"
            return (
                f"{PREFIX}progress: {len(self.pages)} page(s) to record, about {self._remaining():.0f} s "
                f"from the last recording's per-page times{note}"
            )

    def share(self, gpus: int, lanes: int) -> None:
        """The plan's lanes share ``gpus`` GPUs (lane ``i`` on GPU ``i % gpus``), taking turns on each.

        Pages that share a GPU wait for each other, so a page's own seconds say little about the
        time left. The estimate becomes each GPU's rate instead: the last recording's seconds of the
        work it has done, over the time since it started (before any page has finished, one page at
        a time, as in the last recording); the unfinished pages' last-recording seconds not yet done,
        at that rate, are its time left. The work done counts the finished pages' seconds and, for
        each page still running, the time it has run at the finished pages' pace (last-recording
        seconds per second of their wall time), at most :data:`RUNNING_CREDIT` of its seconds.
        Counting finished pages alone put a GPU's rate low while long pages ran, and the estimate
        high: replayed on 4f40a0d's two recorder calls (``tools/eta_replay.py``,
        ``docs/data/eta_replay.json``), its error against the time that was really left averaged 55%
        and 63% (once about 970 s for 236 s), with the running pages counted 21% and 14%. The 90% is a
        cap (a running page has not finished), not a value fitted to those logs.

        Parameters
        ----------
        gpus
            How many GPUs the lanes share.
        lanes
            How many lanes the plan (:meth:`plan`, before or after) has.
        """
        with self._lock:
            self.unit = "lane"
            self.gpu_of_lane = [i % max(1, gpus) for i in range(lanes)]

    def start(self, page: str, gpu: int) -> str:
        """A page starts on ``gpu``; returns its line. A page planned on another lane (taken over by this one,
        :func:`~gallery_build.scheduling.steal`) moves to this one, so the estimate charges it where it runs."""
        with self._lock:
            planned = next((lane for lane in self.lanes if page in lane), None)
            if 0 <= gpu < len(self.lanes) and planned is not None and planned is not self.lanes[gpu]:
                if page not in self.alone:  # pages recorded alone first stay where they are counted
                    planned.remove(page)
                    self.lanes[gpu].append(page)
            self.started[page] = self.clock()
            return (
                f"{PREFIX}recording {page} in a fresh interpreter on {self.unit} {gpu} "
                f"({len(self.started)} of {len(self.pages)}; {self._previous_note(page)})"
            )

    def finish(self, page: str, gpu: int, seconds: float) -> str:
        """A page was recorded in ``seconds`` (and kept); returns its line with the time left."""
        with self._lock:
            self.finished[page] = seconds
            self.ended_at[page] = self.clock()
            if self.gpu_of_lane is None and self.scaled_from is None and self.previous.get(page) and seconds > 0:
                self.scale, self.scaled_from = seconds / self.previous[page], page
            return (
                f"{PREFIX}recorded {page} in {seconds:.1f} s on {self.unit} {gpu} ({self._previous_note(page)}); "
                + self._left()
            )

    def fail(self, page: str, gpu: int) -> str:
        """A page failed (nothing of it kept); returns its line with the time left."""
        with self._lock:
            self.failed.append(page)
            self.ended_at[page] = self.clock()
            spent = self.clock() - self.started.get(page, self.clock())
            kept = "its committed files unchanged"
            return f"{PREFIX}failed {page} after {spent:.1f} s on {self.unit} {gpu}, {kept}; " + self._left()

    def remaining(self) -> float:
        """Seconds until the last planned page should finish, from now."""
        with self._lock:
            return self._remaining()

    def unfinished(self) -> tuple[list[str], list[str]]:
        """(pages started but neither recorded nor failed, pages never started), each in plan order."""
        with self._lock:
            ended = set(self.finished) | set(self.failed)
            running = [p for p in self.pages if p in self.started and p not in ended]
            return running, [p for p in self.pages if p not in self.started]

    def interrupted_note(self) -> str:
        """What an interrupted run did not finish (the recorder keeps the pages it did)."""
        running, waiting = self.unfinished()
        parts = [f"{', '.join(running)} (cut short)"] if running else []
        parts += [f"{', '.join(waiting)} (not started)"] if waiting else []
        return "not finished: " + ("; ".join(parts) if parts else "none")

    def _previous_note(self, page: str) -> str:
        last = self.previous.get(page)
        return f"last recording {last:.1f} s" if last else "no previous time"

    def _left(self) -> str:
        done = len(self.finished) + len(self.failed)
        text = f"{done} of {len(self.pages)} finished"
        if done >= len(self.pages):
            return text
        if self.gpu_of_lane is not None:
            left, rates = self._shared_remaining()
            waiting = sorted(set(self.gpu_of_lane) - set(rates))  # no page finished there yet
            how = (
                "estimate from the pages finished and running so far: last-recording seconds per second taken, "
                + ", ".join(f"{rate:.2f} on GPU {gpu}" for gpu, rate in sorted(rates.items()))
                + (
                    "; from the last recording's times, one page at a time, on GPU "
                    + ", ".join(str(g) for g in waiting)
                    if waiting
                    else ""
                )
                if rates
                else "estimate from the last recording's times, one page at a time"
            )
            return f"{text}, about {left:.0f} s left ({how})"
        how = (
            f"estimate ×{self.scale:.2f} from {Path(self.scaled_from).stem} on this GPU"
            if self.scaled_from
            else "estimate from the last recording's times"
        )
        return f"{text}, about {self._remaining():.0f} s left ({how})"

    def _shared_remaining(self) -> tuple[float, dict[int, float]]:
        """Lanes sharing GPUs: (seconds left, each GPU's measured rate where one has finished a page)."""
        assert self.gpu_of_lane is not None
        now, ended = self.clock(), set(self.finished) | set(self.failed)
        left: dict[int, float] = {}
        rates: dict[int, float] = {}
        for gpu in sorted(set(self.gpu_of_lane)):
            pages = [p for lane, g in zip(self.lanes, self.gpu_of_lane) if g == gpu for p in lane]
            starts = [self.started[p] for p in pages if p in self.started]
            finished = [p for p in pages if p in self.finished]
            done = sum(self._cost.get(p, 0.0) for p in finished)
            wall = sum(self.ended_at[p] - self.started[p] for p in finished if p in self.started)
            pace = done / wall if done > 0 and wall > 0 else 0.0  # last-recording seconds per second of a page's wall
            credit = sum(  # what the running pages have done, at the finished pages' pace
                min(RUNNING_CREDIT * self._cost.get(p, 0.0), (now - self.started[p]) * pace)
                for p in pages
                if p in self.started and p not in ended
            )
            rate = (done + credit) / (now - min(starts)) if done > 0 and starts and now > min(starts) else 1.0
            if done > 0:
                rates[gpu] = rate
            todo = sum(self._cost.get(p, 0.0) for p in pages if p not in ended) - (credit if done > 0 else 0.0)
            left[gpu] = max(0.0, todo) / rate
        return max(left.values(), default=0.0), rates

    def _remaining(self) -> float:
        if self.gpu_of_lane is not None:
            return self._shared_remaining()[0]
        now = self.clock()
        ended = set(self.finished) | set(self.failed)

        def left(page: str) -> float:
            if page in ended:
                return 0.0
            expected = self._cost.get(page, 0.0) * self.scale
            return max(0.0, expected - (now - self.started[page])) if page in self.started else expected

        lanes = [sum(left(p) for p in lane) for lane in self.lanes]
        alone_left = sum(left(p) for p in self.alone)  # the other GPUs wait for these
        return max([lanes[0], *(alone_left + w for w in lanes[1:])], default=0.0)


class VerdictChange(NamedTuple):
    """One comparison whose verdict differs from the committed recording's."""

    page: str
    headline: str
    before: str
    after: str

    def __str__(self) -> str:
        return f"{Path(self.page).stem} / {self.headline}: {self.before} -> {self.after}"


def page_verdicts(gallery_dir: Path, pages: Iterable[str]) -> dict[str, dict[str, str]]:
    """Each page's comparison verdicts, from its ``<stem>.record.json`` in ``gallery_dir``.

    Read them from the committed gallery before any page is promoted, and again after.

    Parameters
    ----------
    gallery_dir
        A recorded gallery.
    pages
        Example file names.

    Returns
    -------
    dict[str, dict[str, str]]
        Page → headline name → verdict (``faster``, ``slower``, ``tie``); a page without a
        readable record, or without comparisons, maps to ``{}``.

    Example
    -------
    >>> page_verdicts(Path('docs/auto_examples'), ['plot_01_environment.py', 'plot_99_missing.py'])
    {'plot_01_environment.py': {}, 'plot_99_missing.py': {}}
    """
    out: dict[str, dict[str, str]] = {}
    for page in pages:
        try:
            record = json.loads((Path(gallery_dir) / f"{Path(page).stem}.record.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {}
        heads = record.get("headlines") if isinstance(record, dict) else None
        out[page] = {
            h["name"]: h["verdict"] for h in heads or [] if isinstance(h, dict) and "verdict" in h and "name" in h
        }
    return out


def changed_verdicts(
    before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]
) -> tuple[int, list[VerdictChange]]:
    """The comparisons present in both recordings, and those whose verdict changed.

    Parameters
    ----------
    before
        :func:`page_verdicts` of the committed recording.
    after
        :func:`page_verdicts` of the new one (the pages recorded).

    Returns
    -------
    tuple[int, list[VerdictChange]]
        How many comparisons were compared, and the changed ones in page order.

    Example
    -------
    >>> changed_verdicts({"a.py": {"x": "tie", "y": "faster"}}, {"a.py": {"x": "faster", "y": "faster"}})
    (2, [VerdictChange(page='a.py', headline='x', before='tie', after='faster')])
    """
    compared, changes = 0, []
    for page, new in after.items():
        old = before.get(page, {})
        for headline, verdict in new.items():
            if headline in old:
                compared += 1
                if old[headline] != verdict:
                    changes.append(VerdictChange(page, headline, old[headline], verdict))
    return compared, changes


def summary_line(
    planned: list[str],
    recorded: dict[str, float],
    wall_seconds: float,
    previous_seconds: dict[str, float],
    compared: int,
    changes: list[VerdictChange],
) -> str:
    """The run's closing line: pages recorded, seconds, verdicts changed against the committed recording.

    Parameters
    ----------
    planned
        The pages the run set out to record.
    recorded
        Page → seconds, for the pages kept (0 for a "skipped: needs …" page).
    wall_seconds
        The run's wall time.
    previous_seconds
        Each page's seconds in the last recording.
    compared, changes
        From :func:`changed_verdicts`.

    Returns
    -------
    str
        One line.

    Example
    -------
    >>> line = summary_line(["a.py", "b.py"], {"a.py": 12.0}, 20.0, {"a.py": 10.0}, 1, [])
    >>> print(line)  # doctest: +NORMALIZE_WHITESPACE
    cudnn-guide: summary: 1 of 2 page(s) recorded in 20 s (pages 12 s; the last recording took 10 s
    for them); not recorded: b.py; verdicts changed against the committed recording: 0 of 1
    """
    before = sum(previous_seconds.get(p, 0.0) for p in recorded)
    was = f"; the last recording took {before:.0f} s for them" if before else ""
    missing = [p for p in planned if p not in recorded]
    text = (
        f"{PREFIX}summary: {len(recorded)} of {len(planned)} page(s) recorded in {wall_seconds:.0f} s "
        f"(pages {sum(recorded.values()):.0f} s{was})"
    )
    text += f"; not recorded: {', '.join(missing)}" if missing else ""
    text += f"; verdicts changed against the committed recording: {len(changes)} of {compared}"
    return text + (f" ({'; '.join(str(c) for c in changes)})" if changes else "")
