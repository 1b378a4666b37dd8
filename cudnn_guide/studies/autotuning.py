"""The autotuning page's study: every plan checked, two exhaustive passes and a halving search read side by side.

The autotuning page builds every plan of one graph (``build_plan_policy.ALL``) and times them with
:func:`cudnn_guide.measure.autotune.tune`. This module holds what the page does around that:

* :func:`check_plans` runs each distinct plan once through ``execute_plan_at_index``, its output
  poisoned first, and checks it against the reference (:func:`checks_text` says how that went);
* :class:`Passes` reads two exhaustive passes together: their rank correlation, the top five
  of each, and how many timed calls each plan got (the harness caps a slow plan's calls);
* :class:`Halving` reads a successive-halving search against the two passes: its pick, how far
  that pick is from the best exhaustive time, and what the search cost;
* :func:`selected_plans` tables the five fastest plans, the heuristic's choice and the slowest;
* :func:`store_tuned_plan` stores the selected plan in a :class:`~cudnn_guide.graphs.plan_cache.PlanCache`;
* :func:`plan_launcher` runs one built plan without selecting it, for the race of the winner
  against the heuristic's first choice (:data:`HEURISTIC`; :func:`winner_text`);
* :func:`conclusions` writes the page's conclusions from all of it, with :func:`behind` and
  :func:`median_us` for the numbers they quote.

The checks, the plan cache's key and the launchers need a GPU; the reading of tuning results and
the sentences do not.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "HEURISTIC",
    "Halving",
    "Passes",
    "behind",
    "check_plans",
    "checks_text",
    "conclusions",
    "median_us",
    "plan_launcher",
    "selected_plans",
    "store_tuned_plan",
    "winner_text",
]

HEURISTIC = "heuristic's first choice (plan 0)"
"""The contender name of plan 0 (what a default build runs) in the race against the tuner's winner."""


def check_plans(
    graph: Any,
    names: Sequence[str],
    pack: Mapping[Any, Any],
    workspace: Any,
    output: Any,
    reference: Any,
    *,
    handle: Any,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Run each distinct plan once with ``execute_plan_at_index`` and check its output against ``reference``.

    Plans are taken in the heuristics' order; a name already seen (modes A, B and FALLBACK may
    list the same configuration) is skipped. Before each run ``output`` is poisoned with NaN. A plan
    whose run raises is kept with the error's type and message (80 characters at most); a plan
    whose output is wrong stops everything (:func:`cudnn_guide.check.check` raises).

    Parameters
    ----------
    graph
        A ``cudnn.pygraph`` whose plans are built (``build_plans(build_plan_policy.ALL)``).
    names
        The name of each plan, by index (``get_plan_name_at_index``).
    pack
        The variant pack the plans run on.
    workspace
        A workspace large enough for every plan.
    output
        The tensor of ``pack`` the plans write, poisoned before each run.
    reference
        What ``output`` must hold.
    handle
        The cuDNN handle.

    Returns
    -------
    tuple[dict[str, Any], dict[str, str]]
        Plan name → its passing :class:`~cudnn_guide.check.CheckResult` (named ``"plan <index>"``),
        and plan name → why it could not run.

    Example
    -------
    >>> plan_checks, failed = check_plans(g, names, pack, workspace, y, reference, handle=handle)
    >>> print(checks_text(plan_checks, failed))
    """
    from cudnn_guide import check

    plan_checks: dict[str, Any] = {}
    failed_plans: dict[str, str] = {}
    for index, name in enumerate(names):
        if name in plan_checks or name in failed_plans:
            continue
        check.poison(output)
        try:
            graph.execute_plan_at_index(pack, workspace, index, handle=handle)
        except Exception as exc:  # a plan that built but cannot run here is reported
            failed_plans[name] = f"{type(exc).__name__}: {exc}"[:80]
            continue
        # a wrong output stops the page
        plan_checks[name] = check.check(output, reference, name=f"plan {index}")
    return plan_checks, failed_plans


def checks_text(plan_checks: Mapping[str, Any], failed_plans: Mapping[str, str]) -> str:
    """What :func:`check_plans` found: how many plans passed, the largest error, which could not run.

    Parameters
    ----------
    plan_checks
        Plan name → its passing check (at least one).
    failed_plans
        Plan name → why it could not run.

    Returns
    -------
    str
        One line each: the plans that passed, the largest relative error with its tolerance, the
        count that could not run, then one line per such plan.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> ok = SimpleNamespace(rel_error=2e-3, tolerance=1.6e-2)
    >>> print(checks_text({"eng0": ok}, {"eng9": "RuntimeError: no"}))
    1 plans ran and passed their check
    largest relative error 2.00e-03 (tolerance 1.6e-02)
    1 could not run
      could not run: eng9: RuntimeError: no
    """
    worst = max(plan_checks.values(), key=lambda r: r.rel_error)
    lines = [
        f"{len(plan_checks)} plans ran and passed their check",
        f"largest relative error {worst.rel_error:.2e} (tolerance {worst.tolerance:.1e})",
        f"{len(failed_plans)} could not run",
    ]
    lines += [f"  could not run: {name}: {why}" for name, why in failed_plans.items()]
    return "\n".join(lines)


class Passes:
    """Two exhaustive tuning passes of the same graph, read together.

    Attributes: ``first`` and ``second`` (the two
    :class:`~cudnn_guide.measure.autotune.TuneResult`), ``rho`` (Spearman's rank correlation of
    the plans both timed: 1 when they order them alike), ``top5`` (each pass's five fastest plan
    indices), ``host_ms`` (the median over the first pass's plans of each plan's host time per
    execute), ``calls`` (``(pass, plan index)`` → the timed calls that plan got), ``full`` (how
    many timings got all ``reps`` calls) and ``short`` (the timings with fewer than
    ``short_below`` calls). Printed, it is the page's summary of both passes.

    Parameters
    ----------
    first
        The first exhaustive pass.
    second
        The second, of the same graph and pack.
    reps
        The calls each plan was asked for.
    short_below
        A timing with fewer calls than this is listed as short.

    Example
    -------
    >>> passes = Passes(pass1, pass2, reps=200)
    >>> print(passes)
    >>> passes.rho, passes.full, len(passes.calls)
    """

    def __init__(self, first: Any, second: Any, *, reps: int = 200, short_below: int = 20) -> None:
        self.first, self.second, self.reps, self.short_below = first, second, reps, short_below
        self.rho: float = first.rank_correlation(second)
        self.top5: tuple[list[int], list[int]] = (
            [t.index for t in first.ranked[:5]],
            [t.index for t in second.ranked[:5]],
        )
        self.host_ms: float = statistics.median(t.measurement.host_median_ms for t in first.ranked)
        self.calls: dict[tuple[int, int], int] = {
            (n_pass, t.index): len(t.measurement.samples_ms)
            for n_pass, p in ((1, first), (2, second))
            for t in p.ranked
        }
        self.full: int = sum(v >= reps for v in self.calls.values())
        self.short: dict[tuple[int, int], int] = {key: v for key, v in self.calls.items() if v < short_below}

    def of(self, n_pass: int) -> Any:
        """The pass numbered ``n_pass``: 1 for :attr:`first`, any other number for :attr:`second`.

        Example
        -------
        >>> passes.of(2) is passes.second
        True
        """
        return self.first if n_pass == 1 else self.second

    def __str__(self) -> str:
        lines = [
            f"exhaustive passes: {self.first.seconds:.2f} s and {self.second.seconds:.2f} s",
            f"median host time per execute: {self.host_ms * 1e3:.1f} µs",
            f"rank correlation between the passes: {self.rho:.3f}",
            f"top five, pass 1: {self.top5[0]}; pass 2: {self.top5[1]}",
            f"timed calls: {self.full} of {len(self.calls)} plan timings got {self.reps}",
            f"fewer than {self.short_below}: {len(self.short)}",
        ]
        for (n_pass, index), v in sorted(self.short.items()):
            t = self.of(n_pass).by_index(index)
            lines.append(f"  pass {n_pass}, plan {index}: {v} calls of {t.median_ms:.1f} ms")
        return "\n".join(lines)


class Halving:
    """A successive-halving search read against two exhaustive passes: its pick, that pick's gap, its cost.

    Attributes: ``result`` (the halving :class:`~cudnn_guide.measure.autotune.TuneResult`),
    ``pick`` (the plan index it picked), ``gap`` (the pick's faster exhaustive median over the
    best exhaustive median, minus 1), ``exhaustive_seconds`` (the mean time of one exhaustive
    pass) and ``cost_ratio`` (the search's time over ``exhaustive_seconds``). Printed, it is the
    page's three lines about the search.

    Parameters
    ----------
    result
        The halving search.
    first
        The first exhaustive pass.
    second
        The second exhaustive pass.

    Example
    -------
    >>> search = Halving(halving, pass1, pass2)
    >>> print(search)
    >>> 100 * search.gap, 100 * search.cost_ratio
    """

    def __init__(self, result: Any, first: Any, second: Any) -> None:
        self.result = result
        self.pick: int = result.best.index
        exhaustive_best = min(first.best.median_ms, second.best.median_ms)
        pick_time = min(first.by_index(self.pick).median_ms, second.by_index(self.pick).median_ms)
        self.gap: float = pick_time / exhaustive_best - 1
        self.exhaustive_seconds: float = (first.seconds + second.seconds) / 2
        self.cost_ratio: float = result.seconds / self.exhaustive_seconds

    def __str__(self) -> str:
        return "\n".join(
            [
                f"halving picked plan {self.pick} in {self.result.seconds:.2f} s",
                f"that is {100 * self.cost_ratio:.0f}% of an exhaustive pass",
                f"its exhaustive median is {100 * self.gap:+.2f}% from the best",
            ]
        )


_SELECTED_COLUMNS = ("rank", "plan", "name", "median (µs)", "± half the IQR", "note")
"""The columns of :func:`selected_plans`."""


def selected_plans(result: Any, *, fastest: int = 5) -> Any:
    """A table of the ``fastest`` plans, the heuristic's choice (plan 0) and the slowest, with their medians.

    One row per plan: its rank (``"3 of 33"``), its index, its name (40 characters at most), its
    median in µs (fixed-point with a thousands separator, never in scientific notation), half its
    IQR as a share of the median, and a note that marks the fastest, the heuristic's first choice
    (what a default build runs) and the slowest. A plan that is more than one of these is shown
    once, where it first comes, with each note that applies.

    Parameters
    ----------
    result
        A :class:`~cudnn_guide.measure.autotune.TuneResult` whose plan 0 was timed.
    fastest
        How many of the fastest plans to show.

    Returns
    -------
    Any
        A pandas ``Styler`` (:func:`~cudnn_guide.report.html_table`) captioned "selected plans",
        with the columns ``rank``, ``plan``, ``name``, ``median (µs)``, ``± half the IQR`` and
        ``note``.

    Example
    -------
    >>> selected_plans(pass1)
    """
    import pandas as pd

    from cudnn_guide.report import html_table

    ranked = result.ranked
    shown = {t.index: t for t in [*ranked[:fastest], result.by_index(0), *ranked[-1:]] if t is not None}
    notes: dict[int, list[str]] = {}
    if ranked:
        notes.setdefault(ranked[0].index, []).append("fastest (the tuner's winner)")
    notes.setdefault(0, []).append("the heuristic's first choice (a default build runs it)")
    if len(ranked) > 1:
        notes.setdefault(ranked[-1].index, []).append("slowest")
    rank, plan, name, median, spread, note = _SELECTED_COLUMNS
    rows = []
    for i, t in shown.items():
        m, r = t.measurement, result.rank_of(i)
        rows.append(
            {
                rank: "—" if r is None else f"{r} of {len(ranked)}",
                plan: i,
                name: t.name[:40],
                median: None if m is None else m.median_ms * 1e3,
                spread: "—" if m is None else f"±{100 * m.rel_iqr / 2:.0f}%",
                note: "; ".join(notes.get(i, [])),
            }
        )
    frame = pd.DataFrame(rows, columns=list(_SELECTED_COLUMNS))
    return html_table(frame, {median: "{:,.2f}"}).set_caption("selected plans")


def store_tuned_plan(graph: Any, io: Mapping[str, Any], description: str) -> str:
    """Store the graph's selected plan in a :class:`~cudnn_guide.graphs.plan_cache.PlanCache` in a temporary folder.

    The plan is serialized (``serialize(as_bytes=True)``) under the key of ``description`` on
    this GPU and cuDNN (:func:`~cudnn_guide.graphs.plan_cache.current_key`), with the UID of each
    named tensor; the folder is removed afterwards (a real deployment keeps its cache directory).

    Parameters
    ----------
    graph
        A ``cudnn.pygraph`` with the plan to keep selected (``build_plan_at_index``).
    io
        Tensor name → the graph's tensor (its ``get_uid()`` is stored).
    description
        What determines the graph, e.g. ``f"conv_bias_relu_graph|{problem!r}|tuned"``.

    Returns
    -------
    str
        ``"tuned plan stored: <file name> (<size> KiB)"``.

    Example
    -------
    >>> print(store_tuned_plan(g, io, f"conv_bias_relu_graph|{problem!r}|tuned"))
    """
    from cudnn_guide.graphs import plan_cache

    plans_dir = tempfile.TemporaryDirectory(prefix="cudnn-guide-plans-")
    try:
        cache = plan_cache.PlanCache(plans_dir.name)
        key = plan_cache.current_key(description)
        uids = {name: int(t.get_uid()) for name, t in io.items()}
        path = cache.store(key, bytes(graph.serialize(as_bytes=True)), uids)
        return f"tuned plan stored: {path.name} ({path.stat().st_size / 1024:.0f} KiB)"
    finally:
        plans_dir.cleanup()  # a real deployment keeps its cache directory


def plan_launcher(
    graph: Any, pack: Mapping[Any, Any], workspace: Any, index: int, *, handle: Any
) -> Callable[[], None]:
    """A zero-argument launcher of plan ``index`` through ``execute_plan_at_index``, on torch's current stream.

    ``execute_plan_at_index`` runs any built plan without selecting it, so two plans of one graph
    can race in the same interleaved rounds.

    Parameters
    ----------
    graph
        A ``cudnn.pygraph`` whose plans are built.
    pack
        The variant pack.
    workspace
        A workspace large enough for the plan.
    index
        The plan, an index into the graph's plan list.
    handle
        The cuDNN handle, pointed at torch's current stream before each run.

    Returns
    -------
    Callable[[], None]
        The launcher.

    Example
    -------
    >>> run = plan_launcher(g, pack, workspace, 0, handle=handle)
    >>> run()  # the heuristic's first choice
    """
    from cudnn_guide import graphs

    def run() -> None:
        graphs.bind_to_current_stream(handle)
        graph.execute_plan_at_index(pack, workspace, index, handle=handle)

    return run


def _places(values: Sequence[float], edges: Sequence[float], start: int, most: int = 4) -> int:
    """Decimal places, from ``start`` to ``most``, at which no value reads as on or across an edge it is not on.

    Example
    -------
    >>> _places([0.9948, 0.9936, 0.99504], [1.0], 2), _places([1.05, 1.02, 1.08], [1.0], 2)
    (3, 2)
    """
    for d in range(start, most):
        if all(x == e or (float(f"{x:.{d}f}") - e) * (x - e) > 0 for x in values for e in edges):
            return d
    return most


def _ratio_texts(v: Mapping[str, Any], band: float, start: int = 2) -> tuple[str, str, str]:
    """A speed-up's value, low and high end, with as many decimals as it takes (from ``start``, at
    most 4) for no end to read as on 1 or on an edge of ``1 ± band`` that it is not on: an interval
    wholly below 1 never prints as reaching 1.

    Example
    -------
    >>> _ratio_texts({"value": 0.9948, "low": 0.9936, "high": 0.99504}, 0.01)
    ('0.995', '0.994', '0.995')
    """
    d = _places([v["value"], v["low"], v["high"]], [1.0, 1.0 - band, 1.0 + band], start)
    return f"{v['value']:.{d}f}", f"{v['low']:.{d}f}", f"{v['high']:.{d}f}"


def winner_text(plan_cmp: Any) -> str:
    """The winner's speed-up over the heuristic's choice (:data:`HEURISTIC`), with its interval and verdict.

    The numbers get three decimals, more where three would make an interval that excludes 1 (or an
    edge of the tie band) read as reaching it.

    Parameters
    ----------
    plan_cmp
        A :class:`~cudnn_guide.measure.compare.Comparison` of the winner against :data:`HEURISTIC`.

    Returns
    -------
    str
        Two lines: the speed-up with its in-run 95% interval, then this run's verdict and the tie band.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> v = {"value": 1.05, "low": 1.02, "high": 1.08, "verdict": "faster"}
    >>> print(winner_text(SimpleNamespace(versus={HEURISTIC: v}, tie_band=0.01)))
    winner over plan 0: 1.050× (1.020–1.080)
    verdict in this run: faster (tie band ±1.0%)
    """
    v = plan_cmp.versus[HEURISTIC]
    value, low, high = _ratio_texts(v, plan_cmp.tie_band, start=3)
    return (
        f"winner over plan 0: {value}× ({low}–{high})\n"
        f"verdict in this run: {v['verdict']} (tie band ±{100 * plan_cmp.tie_band:.1f}%)"
    )


def _behind(slow: Any, fast: Any) -> tuple[str, str]:
    """:func:`behind`'s text, and its word for ``slow``: ``"slower"``, ``"faster"`` or ``"a tie"``."""
    (f_lo, f_hi), (s_lo, s_hi) = fast.median_ci_ms, slow.median_ci_ms
    pct = 100 * (slow.median_ms / fast.median_ms - 1)
    lo, hi = 100 * (s_lo / f_hi - 1), 100 * (s_hi / f_lo - 1)
    d = _places([pct, lo, hi], [0.0], 2)
    if lo <= 0 <= hi:
        direction, word = "a tie", "a tie (the interval includes 0)"
    else:
        direction = "slower" if lo > 0 else "faster"
        word = f"{direction} in that pass (the interval excludes 0)"
    return (
        f"{pct:+.{d}f}% (interval {lo:+.{d}f}% to {hi:+.{d}f}%; one pass, timed one after another, no tie band): {word}"
    ), direction


def behind(slow: Any, fast: Any) -> str:
    """``slow``'s median over ``fast``'s, in %, with the interval from both medians' 95% intervals, in words.

    The two were timed one after another, in one pass: the interval runs from ``slow``'s low end
    over ``fast``'s high end to ``slow``'s high end over ``fast``'s low end, and says a tie when it
    includes 0. It has no tie band and does not see drift between the two timings, so its
    "slower" or "faster" is that pass's reading, not a verdict: where it disagrees with an
    interleaved race of the same two plans, the race is the better evidence. The percentages get
    two decimals, more where two would make an interval that excludes 0 read as reaching it.

    Parameters
    ----------
    slow
        A :class:`~cudnn_guide.measure.measurement.Measurement`.
    fast
        The measurement it is compared with, timed in the same pass.

    Returns
    -------
    str
        e.g. ``"+1.20% (interval -0.50% to +2.90%; one pass, timed one after another, no tie band):
        a tie (the interval includes 0)"``.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> fast = SimpleNamespace(median_ms=1.0, median_ci_ms=(0.99, 1.01))
    >>> slow = SimpleNamespace(median_ms=1.1, median_ci_ms=(1.08, 1.12))
    >>> text = behind(slow, fast)
    >>> text.split("; ")[0]
    '+10.00% (interval +6.93% to +13.13%'
    >>> text.split("): ")[1]
    'slower in that pass (the interval excludes 0)'
    """
    return _behind(slow, fast)[0]


def median_us(t: Any) -> str:
    """A plan's median in µs with its in-run 95% interval, or why it has none.

    Parameters
    ----------
    t
        A :class:`~cudnn_guide.measure.autotune.PlanTiming`.

    Returns
    -------
    str
        ``"<median> µs (in-run 95% interval <low>–<high>)"``, or ``"no time (it could not be timed)"``.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> median_us(SimpleNamespace(measurement=None))
    'no time (it could not be timed)'
    """
    if t.measurement is None:
        return "no time (it could not be timed)"
    e = t.measurement.estimate("µs")
    return f"{e['value']:.1f} µs (in-run 95% interval {e['low']:.1f}–{e['high']:.1f})"


_RACE_SAID = {
    "faster": "the winner is faster in this run, so tuning beats the plan a default build runs",
    "tie": "a tie in this run, so the heuristic's first choice, which a default build runs, is as good as the winner",
    "slower": "the winner is slower in this run, so the heuristic's first choice, which a default build runs, beats it",
}
"""What the race's verdict (the winner against plan 0) means, in :func:`conclusions`."""
_PLAN_0_SAID = {"faster": "slower", "tie": "a tie", "slower": "faster"}
"""The race's verdict (the winner against plan 0) as plan 0's, in :func:`behind`'s words."""


def _race_sentence(plan_cmp: Any) -> str:
    """The race of the winner against plan 0: its speed-up, interval, tie band and what this run's verdict means."""
    v = plan_cmp.versus[HEURISTIC]
    value, low, high = _ratio_texts(v, plan_cmp.tie_band)
    return (
        f"Raced in interleaved rounds ({plan_cmp.rounds} rounds), the winner's speed-up over plan 0 "
        f"is {value}× (in-run 95% interval {low}–{high}; tie band ±{100 * plan_cmp.tie_band:.1f}%): "
        f"{_RACE_SAID[v['verdict']]}."
    )


def _against_winner(pass1: Any, index: int, plan_cmp: Any) -> str:
    """Plan ``index`` against pass 1's winner in pass 1 (:func:`behind`); where the two are the raced
    pair (``index`` is plan 0), what the race says of them, and whether it agrees."""
    text, direction = _behind(pass1.by_index(index).measurement, pass1.best.measurement)
    if index != 0 or not plan_cmp:
        return text + "."
    v = plan_cmp.versus[HEURISTIC]
    value, low, high = _ratio_texts(v, plan_cmp.tie_band)
    said = _PLAN_0_SAID[v["verdict"]]
    agrees = "agrees" if said == direction else "disagrees, and it is the better evidence"
    return (
        f"{text}. The interleaved race above {agrees}: it puts plan 0's time at {value}× the "
        f"winner's (in-run 95% interval {low}–{high}; tie band ±{100 * plan_cmp.tie_band:.1f}%), "
        f"{said} in this run."
    )


def conclusions(
    passes: Passes,
    search: Halving,
    plan_cmp: Any,
    *,
    distinct: int,
    build_s: float,
    picked: int,
    sizes: Sequence[int],
) -> list[str]:
    """The autotuning page's conclusions, computed from its measurements.

    In order: what building every plan cost; where the heuristic's first choice ranks and what the
    winner (the first pass's best) runs in, with the race between them (``plan_cmp``) or the note
    that the winner is the heuristic's choice; the lesson's pick by workspace against the winner;
    whether the two passes agree; what successive halving found and cost; and how many timed
    calls each plan timing got. Two plans timed one after another are compared by :func:`behind`
    (one pass, no tie band); where the two are the raced pair (the winner and plan 0), the race's
    reading follows, and where the two disagree it says that the race is the better evidence. A
    verdict of the race is this run's (in-run).

    Parameters
    ----------
    passes
        The two exhaustive passes; the first ranks the plans.
    search
        The successive-halving search.
    plan_cmp
        The winner raced against :data:`HEURISTIC`, or ``None`` when the winner is plan 0.
    distinct
        How many distinct plans were built.
    build_s
        Seconds ``build_plans(build_plan_policy.ALL)`` took.
    picked
        The plan the lesson picked by its workspace.
    sizes
        Each plan's workspace in bytes, by plan index.

    Returns
    -------
    list[str]
        The sentences, for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> sentences = conclusions(passes, search, plan_cmp, distinct=len(unique), build_s=build_s,
    ...                         picked=pick_ws, sizes=sizes)
    """
    pass1, pass2, rho = passes.first, passes.second, passes.rho
    ranked, winner = pass1.ranked, pass1.best
    heur, heur_rank = pass1.by_index(0), pass1.rank_of(0)
    if plan_cmp:
        said = f". {_race_sentence(plan_cmp)}"
    else:
        said = ", and it is the heuristic's choice."
    sentences = [
        f"{distinct} distinct plans; building all of them took {build_s:.2f} s "
        "(build_plans with build_plan_policy.ALL).",
        f"In pass 1, the heuristic's first choice ranks {heur_rank} of {len(ranked)} at "
        f"{median_us(heur)}; the winner, plan {winner.index}, runs in "
        f"{median_us(winner)}" + said,
    ]
    quick_t = getattr(pass1.by_index(picked), "measurement", None)
    if picked == winner.index:
        quick_said = ", the same as the tuner's winner."
    elif quick_t is None:
        quick_said = ", which has no pass 1 timing."
    else:
        quick_said = f"; against the winner, in pass 1: {_against_winner(pass1, picked, plan_cmp)}"
    sentences.append(f"The lesson's pick by workspace (the smallest, {sizes[picked]} B) was plan {picked}" + quick_said)
    if pass1.best.index == pass2.best.index:
        sentences.append(f"Two exhaustive passes agree: rank correlation {rho:.3f}, same winner.")
    elif getattr(pass1.by_index(pass2.best.index), "measurement", None) is None:
        sentences.append(
            f"The two exhaustive passes pick different winners (rank correlation "
            f"{rho:.3f}); pass 2's winner, plan {pass2.best.index}, has no pass 1 timing."
        )
    else:
        a = pass1.best.measurement
        b = pass1.by_index(pass2.best.index).measurement
        sentences.append(
            f"Two exhaustive passes agree on the order (rank correlation {rho:.3f}) but "
            f"not on the winner: pass 2's winner, plan {pass2.best.index}, against plan "
            f"{pass1.best.index} in pass 1 ({len(b.samples_ms)} and {len(a.samples_ms)} "
            f"calls): {_against_winner(pass1, pass2.best.index, plan_cmp)}"
        )
    pick = search.pick
    cost = (
        f"in {100 * search.cost_ratio:.0f}% of the exhaustive time "
        f"({search.result.seconds:.2f} s against {search.exhaustive_seconds:.2f} s)"
    )
    if pick == pass1.best.index:
        sentences.append(f"Successive halving found the exhaustive winner itself, {cost}.")
    else:
        sentences.append(
            f"Successive halving found plan {pick}, {cost}; against the exhaustive winner, in "
            f"pass 1: {_against_winner(pass1, pick, plan_cmp)}"
        )
    calls, full, short = passes.calls, passes.full, passes.short
    short_ratio = min(
        (passes.of(n_pass).by_index(index).median_ms / winner.median_ms for n_pass, index in short),
        default=0.0,
    )
    listed = ", ".join(f"plan {index} in pass {n_pass}: {v}" for (n_pass, index), v in sorted(short.items()))
    sentences.append(
        f"Timed calls per plan: {full} of {len(calls)} plan timings got the full {passes.reps}, "
        f"{len(calls) - full - len(short)} got {passes.short_below} to {passes.reps - 1}, and "
        f"{len(short)} got fewer than {passes.short_below}"
        + (f" ({listed}): the fastest of them takes {short_ratio:.0f}× the winner's time." if short else ".")
    )
    return sentences
