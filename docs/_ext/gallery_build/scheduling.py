"""Which GPU records which pages, in which order: longest first, host-bound pages alone."""

from __future__ import annotations

__all__ = ["page_costs", "schedule", "RECORD_ALONE", "plan_lanes", "SPARE_INTERPRETERS", "steal"]


def page_costs(pages: list[str], previous_seconds: dict[str, float]) -> dict[str, float]:
    """Each page's expected seconds: its time in the last recording, else the longest known one.

    A page with no previous time (new) or a zero one (a "skipped: needs …" page, which this GPU
    may run) counts as the longest known page, so it is planned early and never estimated at 0 s.

    Parameters
    ----------
    pages
        Example file names.
    previous_seconds
        Each page's seconds in the last recording (``recording.json``'s ``example_seconds``).

    Returns
    -------
    dict[str, float]
        Page → expected seconds (1 s each when nothing was recorded before).

    Example
    -------
    >>> page_costs(["a.py", "new.py"], {"a.py": 60, "b.py": 90})
    {'a.py': 60, 'new.py': 90}
    """
    default = max(previous_seconds.values(), default=1.0) or 1.0
    return {p: previous_seconds.get(p, default) or default for p in pages}


def schedule(pages: list[str], previous_seconds: dict[str, float], workers: int) -> list[list[str]]:
    """Spread pages over ``workers`` GPUs, longest first, each onto the least-loaded GPU (LPT).

    A page without a previous time counts as the longest known one, so it starts early.

    Parameters
    ----------
    pages
        Example file names.
    previous_seconds
        Each page's seconds in the last recording (``recording.json``).
    workers
        How many GPUs.

    Returns
    -------
    list[list[str]]
        One list of pages per GPU, in the order each runs them.

    Example
    -------
    >>> schedule(["a.py", "b.py", "c.py"], {"a.py": 60, "b.py": 40, "c.py": 30}, 2)
    [['a.py'], ['b.py', 'c.py']]
    """
    if workers <= 1:
        return [list(pages)] if pages else []  # one GPU: the pages' own order (a failure stops the rest)
    cost = page_costs(pages, previous_seconds)
    lanes: list[list[str]] = [[] for _ in range(max(1, workers))]
    load = [0.0] * len(lanes)
    for page in sorted(pages, key=lambda p: (-cost[p], p)):
        i = min(range(len(lanes)), key=lambda k: (load[k], k))
        lanes[i].append(page)
        load[i] += cost[page]
    return [lane for lane in lanes if lane]


RECORD_ALONE = {
    # pages whose results are host times: no other page's CPU work runs beside them. Their host times
    # still jump between recordings, on one GPU as on two: the methodology page's "Host-bound pages
    # beside other GPUs" traces that to the process (two levels between fresh processes), not to neighbours
    "plot_08_cuda_graphs.py",
    "plot_21_call_overhead.py",
}


def plan_lanes(pages: list[str], previous_seconds: dict[str, float], workers: int) -> tuple[list[str], list[list[str]]]:
    """:func:`schedule`, with the :data:`RECORD_ALONE` pages first on GPU 0 while the other GPUs wait.

    Parameters
    ----------
    pages
        Example file names.
    previous_seconds
        Each page's seconds in the last recording (``recording.json``).
    workers
        How many GPUs.

    Returns
    -------
    tuple[list[str], list[list[str]]]
        The pages that run alone, and the lanes (GPU 0's starts with them).

    Example
    -------
    >>> plan_lanes(["plot_08_cuda_graphs.py", "a.py", "b.py"], {"a.py": 60, "b.py": 40}, 2)
    (['plot_08_cuda_graphs.py'], [['plot_08_cuda_graphs.py', 'a.py'], ['b.py']])
    """
    alone = [p for p in pages if p in RECORD_ALONE] if workers > 1 else []
    lanes = schedule([p for p in pages if p not in alone], previous_seconds, workers)
    if alone:
        lanes = [alone + (lanes[0] if lanes else [])] + lanes[1:]
    return alone, lanes


SPARE_INTERPRETERS = 2
"""Interpreters each lane starts beyond its own pages, for pages it may take over from another lane (:func:`steal`)."""


def steal(remaining: list[list[str]], thief: int, costs: dict[str, float], alone: list[str]) -> str | None:
    """A page for a lane that has run its own list: the last (shortest) page of the lane with the most left.

    The plan (:func:`schedule`) is fixed from the last recording's times, which pages miss (b9f08ae's
    took 0.85 to 1.41 times d51459d's, ``docs/data/recording_benchmark.json``); a lane that runs out
    early takes a page not yet started from the lane with the most expected seconds left, so that fewer
    lanes sit idle while one works through its list. A page already running stays where it is, and pages
    that run alone first (:data:`RECORD_ALONE`) are never taken.

    Parameters
    ----------
    remaining
        Each lane's pages not yet started, in its order (changed in place: the page is removed).
    thief
        The lane asking (its own list is empty).
    costs
        :func:`page_costs` of the pages.
    alone
        The pages that run alone first.

    Returns
    -------
    str | None
        The page, or ``None`` when no other lane has one left.

    Example
    -------
    >>> left = [[], ["a.py", "b.py"], ["c.py"]]
    >>> steal(left, 0, {"a.py": 30, "b.py": 10, "c.py": 20}, []), left
    ('b.py', [[], ['a.py'], ['c.py']])
    """
    candidates = [k for k in range(len(remaining)) if k != thief and any(p not in alone for p in remaining[k])]
    if not candidates:
        return None
    victim = max(candidates, key=lambda k: (sum(costs.get(p, 0.0) for p in remaining[k]), -k))
    last = max(i for i, page in enumerate(remaining[victim]) if page not in alone)  # a candidate has one
    return remaining[victim].pop(last)
