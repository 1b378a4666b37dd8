"""Autotune a graph across cuDNN's engine configurations.

cuDNN's heuristics rank the engine configurations ("plans") that can run a graph; the first is a
good guess, not a measurement. Tuning builds every plan (``build_plan_policy.ALL``) and times
each one. :func:`tune` does that exhaustively or by successive halving, which gives many plans a
few calls each, keeps the faster half, and spends the rest of its time on the survivors.

Each plan is selected in turn (``build_plan_at_index``) and timed through the ordinary execute
path, exactly like everything else (:func:`~cudnn_guide.measure.bench.benchmark`: events, warm-up, cold
L2, spread); the graph is left on the plan it had. The winner is selected on the graph with ``build_plan_at_index``, so
:meth:`~cudnn_guide.graphs.BuiltGraph.execute` and ``serialize()`` then use it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from typing import Any

from cudnn_guide import collector
from cudnn_guide.errors import BenchmarkError, GraphExecutionError
from cudnn_guide.graphs.builder import BuiltGraph
from cudnn_guide.measure.bench import benchmark
from cudnn_guide.measure.measurement import Measurement

__all__ = ["PlanTiming", "TuneResult", "ensure_workspace", "tune"]


@dataclasses.dataclass
class PlanTiming:
    """One plan's measurement, or why it could not be timed.

    Example
    -------
    >>> t = result.best
    >>> print(t.index, t.name, t.median_ms)
    """

    index: int
    name: str
    measurement: Measurement | None = None
    error: str | None = None
    finalist: bool = True
    """False for a plan successive halving eliminated early (its measurement is a short one)."""

    @property
    def median_ms(self) -> float:
        return self.measurement.median_ms if self.measurement else math.inf


@dataclasses.dataclass
class TuneResult:
    """The outcome of tuning: per-plan timings, the winner, and what tuning cost.

    Example
    -------
    >>> result = tune(built, pack)
    >>> print(result.best.index, result.rank_of(0), result.seconds)
    """

    method: str
    timings: list[PlanTiming]
    seconds: float
    """Wall time spent timing plans (building them not included)."""

    @property
    def ranked(self) -> list[PlanTiming]:
        """Finalists first, fastest first; then plans eliminated early, by their short timing."""
        timed = [t for t in self.timings if t.measurement]
        return sorted(timed, key=lambda t: (not t.finalist, t.median_ms))

    @property
    def best(self) -> PlanTiming:
        if not self.ranked:
            raise BenchmarkError("no plan could be timed")
        return self.ranked[0]

    def rank_of(self, index: int) -> int | None:
        """1-based rank of plan ``index`` (``None`` if it was not timed to the end)."""
        for r, t in enumerate(self.ranked, 1):
            if t.index == index:
                return r
        return None

    def by_index(self, index: int) -> PlanTiming | None:
        return next((t for t in self.timings if t.index == index), None)

    def rank_correlation(self, other: TuneResult) -> float:
        """Spearman's rank correlation of the plans both passes timed: 1 when they order them alike."""
        common = [t.index for t in self.ranked if (o := other.by_index(t.index)) is not None and o.measurement]
        if len(common) < 2:
            raise BenchmarkError("rank_correlation: fewer than two plans were timed in both passes")
        ranks = []
        for result in (self, other):
            order = sorted(common, key=lambda i: result.by_index(i).median_ms)
            ranks.append({i: r for r, i in enumerate(order)})
        n = len(common)
        d2 = sum((ranks[0][i] - ranks[1][i]) ** 2 for i in common)
        return 1 - 6 * d2 / (n * (n * n - 1))


def plan_names(built: BuiltGraph) -> list[str]:
    """Names of every plan in the graph's ranked list (heuristics' order).

    Parameters
    ----------
    built
        A graph built with ``policy=build_plan_policy.ALL``.

    Returns
    -------
    list[str]
        Plan names, in the heuristics' order.

    Example
    -------
    >>> names = plan_names(fused)
    >>> print(len(names), names[0])
    """
    g = built.graph
    return [str(g.get_plan_name_at_index(i)) for i in range(int(g.get_execution_plan_count()))]


def _unique_plans(built: BuiltGraph) -> list[tuple[int, str]]:
    """(index, name) of each distinct plan; modes A, B and fallback may repeat a configuration."""
    seen, out = set(), []
    for i, name in enumerate(plan_names(built)):
        if name not in seen:
            seen.add(name)
            out.append((i, name))
    return out


def ensure_workspace(built: BuiltGraph, indices: list[int]) -> Any:
    """Grow the graph's workspace to the largest any of the plans at ``indices`` needs.

    Parameters
    ----------
    built
        The built graph.
    indices
        Plan indices that may run.

    Returns
    -------
    Any
        The (possibly enlarged) workspace tensor.

    Example
    -------
    >>> ensure_workspace(fused, range(len(plan_names(fused))))
    """
    import torch

    need = 1
    for i in indices:
        try:
            need = max(need, int(built.graph.get_workspace_size_plan_at_index(i)))
        except Exception:
            pass
    if built.workspace.numel() < need:
        built.workspace = torch.empty(need, device="cuda", dtype=torch.uint8)
    return built.workspace


def _time_plan(
    built: BuiltGraph,
    pack: Mapping[Any, Any],
    index: int,
    name: str,
    *,
    l2: str,
    reps: int,
    flops: float | None,
    bytes: float | None,
    max_ms_per_plan: float,
) -> PlanTiming:
    # Select the plan, then time the ordinary execute path: exactly what runs once this plan wins.
    try:
        built.graph.build_plan_at_index(index)
    except Exception as exc:
        return PlanTiming(index, name, error=f"could not select: {exc}")
    launch = built.bind(pack)
    try:
        # reps calls, unless that would take longer than max_ms_per_plan: then as many as fit, at least 5
        m = benchmark(
            launch,
            label=name,
            l2=l2,
            flops=flops,
            bytes=bytes,
            budget_ms=max_ms_per_plan,
            warmup_ms=5.0,
            min_reps=min(5, reps),
            max_reps=reps,
            precision=None,
            params={"impl": name, "plan_index": index},
        )
    except BenchmarkError as exc:
        return PlanTiming(index, name, error=str(exc.__cause__ or exc))
    return PlanTiming(index, name, m)


@collector.measuring()
def _screen(
    built: BuiltGraph,
    pack: Mapping[Any, Any],
    index: int,
    name: str,
    *,
    l2: str,
    flops: float | None,
    bytes: float | None,
) -> PlanTiming:
    """One warm call, then one timed call (events, L2 as asked): enough to drop hopeless plans."""
    import torch

    from cudnn_guide.measure.bench import l2_flush_buffer

    try:
        built.graph.build_plan_at_index(index)
        launch = built.bind(pack)
        launch()
        if l2 == "cold":
            l2_flush_buffer().zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
    except Exception as exc:
        return PlanTiming(index, name, error=f"{type(exc).__name__}: {exc}", finalist=False)
    m = Measurement(
        name, [start.elapsed_time(end)], f"{l2}-L2 screen x1", flops, bytes, {"impl": name, "plan_index": index}
    )
    return PlanTiming(index, name, m, finalist=False)


@collector.paused()  # trial timings; the caller keeps the summary it wants
@collector.spending("timing")
def tune(
    built: BuiltGraph,
    pack: Mapping[Any, Any],
    *,
    method: str = "exhaustive",
    reps: int = 200,
    l2: str = "cold",
    flops: float | None = None,
    bytes: float | None = None,
    first_round_reps: int = 10,
    keep: float = 0.5,
    max_ms_per_plan: float = 250.0,
    screen_cutoff: float = 3.0,
) -> TuneResult:
    """Time every plan of a graph built with ``policy=build_plan_policy.ALL``.

    Parameters
    ----------
    built:
        From :func:`cudnn_guide.graphs.build` with ``heuristics=("A", "B", "FALLBACK")`` and
        ``policy=cudnn.build_plan_policy.ALL``.
    pack:
        The variant pack to run the plans on.
    method:
        ``"exhaustive"``: ``reps`` timed calls per plan. ``"halving"``: a screen of one timed
        call per plan drops plans more than ``screen_cutoff`` times slower than the best
        screened; then successive halving, starting at ``first_round_reps`` calls per plan,
        keeping the fastest ``keep`` fraction and doubling the calls each round, ending with
        ``reps`` calls for the last two.
    reps:
        Calls per plan (exhaustive), or in the final round (halving).
    l2:
        ``"cold"`` (default) or ``"hot"``, as in :func:`~cudnn_guide.measure.bench.benchmark`.
    flops:
        FLOPs per call, for TFLOP/s.
    bytes:
        Bytes per call, for GB/s.
    first_round_reps:
        Calls per plan in halving's first round.
    keep:
        Fraction of plans kept after each halving round.
    screen_cutoff:
        Halving drops plans whose one screened call is more than this many times the best.
    max_ms_per_plan:
        A slow plan gets only as many calls as fit in this budget (at least 5): a plan ten times
        slower than the best needs no 200 samples to lose.

    Returns
    -------
    TuneResult
        Per-plan timings, the winner (``.best``) and the seconds spent timing.

    Raises
    ------
    ValueError
        Unknown method.
    BenchmarkError
        No plan could run.

    Example
    -------
    >>> fused = recipes.conv_bias_relu_graph(problem, inputs, heuristics=('A', 'B', 'FALLBACK'),
    ...                                      policy=cudnn.build_plan_policy.ALL)
    >>> result = tune(fused, fused.pack(**inputs), method='halving')
    >>> select(fused, result.best.index)
    """
    if method not in ("exhaustive", "halving"):
        raise ValueError(f"method must be 'exhaustive' or 'halving', got {method!r}")
    plans = _unique_plans(built)
    ensure_workspace(built, [i for i, _ in plans])
    built.check_pack(pack)
    original = next((i for i, n in plans if n == built.report.plan_name), plans[0][0])
    kw = dict(l2=l2, flops=flops, bytes=bytes, max_ms_per_plan=max_ms_per_plan)
    t0 = time.perf_counter()
    if method == "exhaustive":
        timings = [_time_plan(built, pack, i, n, reps=reps, **kw) for i, n in plans]
    else:
        timings = {i: _screen(built, pack, i, n, l2=l2, flops=flops, bytes=bytes) for i, n in plans}
        screened = [t.median_ms for t in timings.values() if t.measurement]
        if not screened:
            raise BenchmarkError("no plan could run")
        cutoff = screen_cutoff * min(screened)
        alive = [(i, n) for i, n in plans if timings[i].median_ms <= cutoff]
        r = first_round_reps
        while True:
            final = len(alive) <= 2
            n_reps = reps if final else r
            for i, n in alive:
                timings[i] = _time_plan(built, pack, i, n, reps=n_reps, **kw)
            if final:
                break
            for i, _ in alive:
                timings[i].finalist = False
            alive.sort(key=lambda p: timings[p[0]].median_ms)
            alive = [p for p in alive[: max(2, math.ceil(len(alive) * keep))] if timings[p[0]].measurement]
            if not alive:
                break
            r = min(reps, r * 2)
        # plans eliminated early keep their short measurement but cannot win
        timings = list(timings.values())
    seconds = time.perf_counter() - t0
    built.graph.build_plan_at_index(original)  # leave the graph on the plan it had; select() the winner
    result = TuneResult(method, timings, seconds)
    _ = result.best  # raises if nothing ran
    return result


def select(built: BuiltGraph, index: int) -> None:
    """Make plan ``index`` the graph's selected plan (used by ``execute`` and ``serialize``).

    Parameters
    ----------
    built
        The built graph.
    index
        The plan to make current (an index into its ranked list).

    Raises
    ------
    GraphExecutionError
        cuDNN could not build or select that plan.

    Example
    -------
    >>> select(fused, result.best.index)
    >>> fused.execute(pack)  # now runs the winner
    """
    import torch

    try:
        built.graph.build_plan_at_index(index)
    except Exception as exc:
        raise GraphExecutionError(f"graph {built.name!r}: could not select plan {index}: {exc}") from exc
    need = int(built.graph.get_workspace_size())
    if built.workspace.numel() < need:
        built.workspace = torch.empty(need, device="cuda", dtype=torch.uint8)
    built.report.plan_name = str(built.graph.get_plan_name_at_index(index))
