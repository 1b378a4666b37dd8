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

import dataclasses
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


def selected_plans(result: Any, *, fastest: int = 5) -> Any:
    """A table of the ``fastest`` plans, the heuristic's choice (plan 0) and the slowest, with their medians.

    Each row is named ``#<rank> plan <index>: <name, 40 characters at most>``; a plan that is
    more than one of these is shown once, where it first comes.

    Parameters
    ----------
    result
        A :class:`~cudnn_guide.measure.autotune.TuneResult` whose plan 0 was timed.
    fastest
        How many of the fastest plans to show.

    Returns
    -------
    Any
        A :class:`~cudnn_guide.report.ComparisonTable` of medians in µs, titled "selected plans".

    Example
    -------
    >>> selected_plans(pass1)
    """
    from cudnn_guide.report import ComparisonTable

    ranked = result.ranked
    shown = {t.index: t for t in ranked[:fastest] + [result.by_index(0)] + ranked[-1:]}
    rows = [
        dataclasses.replace(
            t.measurement,
            params={"impl": f"#{result.rank_of(i)} plan {i}: {t.name[:40]}", "size": "median (µs)"},
        )
        for i, t in shown.items()
    ]
    return ComparisonTable(rows, row="impl", column="size", metric="median_us", title="selected plans")


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


def winner_text(plan_cmp: Any) -> str:
    """The winner's speed-up over the heuristic's choice (:data:`HEURISTIC`), with its interval and verdict.

    Parameters
    ----------
    plan_cmp
        A :class:`~cudnn_guide.measure.compare.Comparison` of the winner against :data:`HEURISTIC`.

    Returns
    -------
    str
        Two lines: the speed-up with its in-run 95% interval, then the verdict and the tie band.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> v = {"value": 1.05, "low": 1.02, "high": 1.08, "verdict": "faster"}
    >>> print(winner_text(SimpleNamespace(versus={HEURISTIC: v}, tie_band=0.01)))
    winner over plan 0: 1.050× (1.020–1.080)
    verdict: faster (tie band ±1.0%)
    """
    v = plan_cmp.versus[HEURISTIC]
    return (
        f"winner over plan 0: {v['value']:.3f}× ({v['low']:.3f}–{v['high']:.3f})\n"
        f"verdict: {v['verdict']} (tie band ±{100 * plan_cmp.tie_band:.1f}%)"
    )


def behind(slow: Any, fast: Any) -> str:
    """``slow``'s median over ``fast``'s, in %, with the interval from both medians' 95% intervals, in words.

    The interval runs from ``slow``'s low end over ``fast``'s high end to ``slow``'s high end over
    ``fast``'s low end; inside it, 0 means a tie.

    Parameters
    ----------
    slow
        A :class:`~cudnn_guide.measure.measurement.Measurement`.
    fast
        The measurement it is compared with.

    Returns
    -------
    str
        e.g. ``"+1.20% (interval -0.50% to +2.90%): a tie within the noise (the interval includes 0)"``.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> fast = SimpleNamespace(median_ms=1.0, median_ci_ms=(0.99, 1.01))
    >>> slow = SimpleNamespace(median_ms=1.1, median_ci_ms=(1.08, 1.12))
    >>> behind(slow, fast)
    '+10.00% (interval +6.93% to +13.13%): slower beyond the noise'
    """
    (f_lo, f_hi), (s_lo, s_hi) = fast.median_ci_ms, slow.median_ci_ms
    pct = 100 * (slow.median_ms / fast.median_ms - 1)
    lo, hi = 100 * (s_lo / f_hi - 1), 100 * (s_hi / f_lo - 1)
    if lo <= 0 <= hi:
        word = "a tie within the noise (the interval includes 0)"
    else:
        word = "slower beyond the noise" if lo > 0 else "faster beyond the noise"
    return f"{pct:+.2f}% (interval {lo:+.2f}% to {hi:+.2f}%): {word}"


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
    calls each plan timing got. Two plans timed one after another are compared by :func:`behind`.

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
        v = plan_cmp.versus[HEURISTIC]
        said = (
            f": in interleaved rounds it is {plan_cmp.describe()}; its speed-up over plan "
            f"0 is {100 * (v['value'] - 1):+.2f}% (in-run 95% interval "
            f"{100 * (v['low'] - 1):+.2f}% to {100 * (v['high'] - 1):+.2f}%)."
        )
    else:
        said = ", and it is the heuristic's choice."
    sentences = [
        f"{distinct} distinct plans; building all of them took {build_s:.2f} s "
        "(build_plans with build_plan_policy.ALL).",
        f"The heuristic's first choice ranks {heur_rank} of {len(ranked)} at "
        f"{median_us(heur)}; the winner, plan {winner.index}, runs in "
        f"{median_us(winner)}" + said,
    ]
    quick_t = getattr(pass1.by_index(picked), "measurement", None)
    if picked == winner.index:
        quick_said = ", the same as the tuner's winner."
    elif quick_t is None:
        quick_said = ", which has no pass 1 timing."
    else:
        quick_said = f"; against the winner, in pass 1: {behind(quick_t, winner.measurement)}."
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
            f"calls): {behind(b, a)}."
        )
    pick = search.pick
    if pick == pass1.best.index:
        found = "the exhaustive winner itself"
    else:
        found = (
            f"plan {pick}; against the exhaustive winner, in pass 1: "
            f"{behind(pass1.by_index(pick).measurement, pass1.best.measurement)}"
        )
    sentences.append(
        f"Successive halving found {found}, in {100 * search.cost_ratio:.0f}% of the exhaustive "
        f"time ({search.result.seconds:.2f} s against {search.exhaustive_seconds:.2f} s)."
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
