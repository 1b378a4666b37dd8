"""Compare implementations so that the verdict survives a re-run: interleaved rounds, paired ratios, intervals.

Timing contenders one after another on a power-capped GPU measures the clock as much as the code.
:func:`compare` times them in **interleaved rounds** (a shuffled order per round, one process),
takes the **per-round ratio** of each baseline's time to the candidate's (paired: both ran
within milliseconds of each other), and reports the median ratio with a **bootstrap 95%
interval** over rounds (percentile method, :data:`~cudnn_guide.measure.verdicts.RESAMPLES` resamples, fixed seed).

The **tie band** is measured, not typed: every round also times the candidate a second time,
and the interval of that same-code ratio (which should be 1) shows how far from 1 identical
code can appear under this run's noise. The candidate is ``faster`` or ``slower`` than a
baseline only when the whole interval lies outside ``1 ± band``; otherwise it is a ``tie``.

**Adaptive rounds.** ``rounds`` is a cap. From :data:`ADAPTIVE_MIN_ROUNDS` rounds on, the
comparison stops as soon as every baseline's interval is settled (:func:`settled`): wholly
outside ``1 ± band`` or wholly inside it, and no wider than ±:data:`ADAPTIVE_HALF_WIDTH` of its
value. An interval that straddles a band edge runs to the cap. ``min_rounds=rounds`` turns this off.

Each contender's host time per call is measured in its first round only (it does not change
between rounds, and each such call waits for the GPU).

**Warm-up once per comparison.** Each contender's checked first call comes before the rounds, outside
the measured block (:func:`~cudnn_guide.measure.bench.first_call`: in the docs build's lanes, beside
other pages). A contender's first round warms it up for ``warmup_ms`` (GPU time included) and sizes its
run, as :func:`~cudnn_guide.measure.bench.benchmark` does alone.
From its second round on it is re-primed with :data:`REWARM_CALLS` calls (one for a call
of at least :data:`~cudnn_guide.measure.bench.LONG_CALL_MS`, none from
:data:`~cudnn_guide.measure.bench.SELF_PRIMING_MS`; after the other contenders ran)
instead: no first-call check, no timed warm-up, and its spin and number of timed calls are sized
from that first warm-up (:class:`~cudnn_guide.measure.bench.Rewarm`, one per contender, the
candidate's repeat included). The GPU was busy with the round's other contenders just before, so
its clocks are already up. What each round times (spin, flush, events, calls) is unchanged.
``rewarm=False``, or :data:`REWARM` set to ``False``, gives every round the full warm-up again
(the rule before issue 34), for an A/B of the two (``tools/warmup_probe.py``).

**One launch-cost rule per comparison.** The harness subtracts the measured launch cost from
each event time unless it is too large a share of the call. A comparison applies one rule to
every contender: when any timed call of any contender kept its raw event times, every contender
is judged on raw event times (:func:`one_launch_rule`), so that no verdict comes from subtracting
a few microseconds from one side only. Kernels of a few microseconds are better timed with
``cuda_graph=True``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cudnn_guide import collector
from cudnn_guide.errors import BenchmarkError
from cudnn_guide.measure.bench import BenchOptions, Rewarm, benchmark, first_call
from cudnn_guide.measure.measurement import Measurement, estimate
from cudnn_guide.measure.verdicts import MIN_ROUNDS, MIN_TIE_BAND, bootstrap_median_ci, judge

__all__ = [
    "ADAPTIVE_HALF_WIDTH",
    "ADAPTIVE_MIN_ROUNDS",
    "BUDGET_ENV",
    "ROUND_BUDGET_MS",
    "default_round_budget_ms",
    "REWARM",
    "REWARM_CALLS",
    "settled",
    "Comparison",
    "compare",
    "compare_host",
    "compare_loops",
    "host_bound",
    "HOST_BOUND",
    "LOOP_MS",
    "MIN_LOOP_CALLS",
    "loop_calls",
    "one_launch_rule",
    "rejudged",
]

_REPEAT = " (repeat)"

ADAPTIVE_MIN_ROUNDS = 5
""":func:`compare` may stop after this many rounds (or ``min_rounds``), once every verdict is settled.

Five paired ratios give a bootstrap interval from their smallest to their largest (the percentile
bootstrap of a median of five resamples the extremes too often to cut them), an order-statistic
interval with 94% coverage of the median; seven gave the second to the sixth, 88%. Stopping at the
first settled round, as the adaptive rule does, leaves the interval it stops at a little less
coverage than that. It was 7 until issue 34's timing study (the measurement studies' "More work
beside the turn, and five rounds")."""
ADAPTIVE_HALF_WIDTH = 0.05
"""A settled interval is no wider than ±5% of its value (the site's headline aim is ±15%)."""
ROUND_BUDGET_MS = 12.5
"""What :func:`compare` spends timing one contender in one round, in ms of GPU time with each call's spin
and flush (a call this long or longer is timed ``min_reps`` times). ``round_budget_ms=`` overrides it
for one comparison, :data:`BUDGET_ENV` for a whole process (an A/B of the budget on the GPU builder).
It was 25 ms until issue 34's A/B of the budget and the whole-site recording after it (the measurement
studies' "The round budget")."""
BUDGET_ENV = "CUDNN_GUIDE_ROUND_BUDGET_MS"
"""An environment variable that replaces :data:`ROUND_BUDGET_MS` for every :func:`compare` that does not
pass its own ``round_budget_ms`` (read at each call): a positive number of milliseconds."""


def default_round_budget_ms() -> float:
    """The round budget of a :func:`compare` that passes none: :data:`BUDGET_ENV` if set, else :data:`ROUND_BUDGET_MS`.

    Returns
    -------
    float
        Milliseconds.

    Raises
    ------
    BenchmarkError
        :data:`BUDGET_ENV` is set to something other than a positive, finite number.

    Example
    -------
    >>> default_round_budget_ms()  # CUDNN_GUIDE_ROUND_BUDGET_MS unset
    12.5
    """
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return ROUND_BUDGET_MS
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise BenchmarkError(
            f"{BUDGET_ENV}={raw!r} is not a positive number of milliseconds. Fix: set it to one "
            f"(e.g. {BUDGET_ENV}=25), or unset it for the default {ROUND_BUDGET_MS:g} ms"
        )
    return value


REWARM = True
""":func:`compare`'s default: warm each contender up in full in its first round only, and re-prime it
with :data:`REWARM_CALLS` calls in the later ones. ``False``: the full warm-up every round."""
REWARM_CALLS = 2
"""Calls that re-prime a contender from its second round on (:data:`REWARM`); one for a call of at least
:data:`~cudnn_guide.measure.bench.LONG_CALL_MS`, none for one of at least
:data:`~cudnn_guide.measure.bench.SELF_PRIMING_MS`, whatever this says."""


@dataclass
class Comparison:
    """The outcome of :func:`compare`: pooled measurements, and the candidate's speed-up over each baseline.

    ``versus[baseline]`` is ``{"value", "low", "high", "verdict"}``: the median over rounds of
    baseline time / candidate time (above 1: the candidate is faster), its in-run bootstrap 95%
    interval, and the verdict of that interval against :attr:`tie_band`. The interval is this
    run's own: how far a re-recording on another day or machine moves it is the docs build's
    business (it widens the intervals it records, and says so), not the measurement's.

    Example
    -------
    >>> c = compare({"cuDNN": fused, "PyTorch": eager}, candidate="cuDNN", l2="cold")
    >>> c.versus["PyTorch"]["verdict"]
    """

    candidate: str
    rounds: int
    measurements: dict[str, Measurement]
    round_medians_ms: dict[str, list[float]]
    versus: dict[str, dict[str, Any]]
    tie_band: float
    same_code: dict[str, float] = field(default_factory=dict)
    rounds_cap: int | None = None
    """The most rounds the comparison could have run (:func:`compare`'s ``rounds``); ``rounds`` ran."""
    wall: Comparison | None = None
    """The same contenders raced in back-to-back loops (:func:`compare_loops`), wall-clock time per call:
    set when a contender's host time per call may bound such a loop (:data:`HOST_BOUND`)."""

    @property
    def best_baseline(self) -> str:
        """The baseline with the shortest time (median of its round medians): the one to beat.
        Contenders named ``(control …)`` are references, not baselines, and are left out."""
        real = [b for b in self.versus if "(control" not in b] or list(self.versus)
        return min(real, key=lambda b: statistics.median(self.round_medians_ms[b]))

    def describe(self, baseline: str | None = None) -> str:
        """One line, e.g. ``1.27× faster than torch.compile (in-run 95% interval 1.22–1.31; tie band ±1.5%,
        11 rounds)``."""
        baseline = baseline or self.best_baseline
        s = self.versus[baseline]
        interval = (
            f"in-run 95% interval {s['low']:.2f}–{s['high']:.2f}; tie band ±{100 * self.tie_band:.1f}%, "
            f"{self.rounds} rounds"
        )
        if s["verdict"] == "tie":
            text = f"a tie with {baseline} ({s['value']:.2f}×, {interval})"
        elif s["verdict"] == "faster":
            text = f"{s['value']:.2f}× faster than {baseline} ({interval})"
        else:
            text = f"{1 / s['value']:.2f}× slower than {baseline} (speed-up {s['value']:.2f}×, {interval})"
        if self.wall is not None and baseline in self.wall.versus:
            w = self.wall.versus[baseline]
            band = f"; loop tie band ±{100 * self.wall.tie_band:.1f}%"  # its own, often wider than GPU time's
            loop = f"{w['verdict']} ({w['value']:.2f}×, {w['low']:.2f}–{w['high']:.2f}{band})"
            text += f"; in a back-to-back loop, host time included: {loop}"
        return text

    def __str__(self) -> str:
        """One line per baseline: ``<candidate> vs <baseline>: <describe(baseline)>``."""
        return "\n".join(f"{self.candidate} vs {b}: {self.describe(b)}" for b in self.versus)

    def estimate(self, name: str, unit: str = "µs", scale: float = 1.0) -> dict[str, float]:
        """``name``'s time over rounds as a headline: median of its round medians, bootstrap interval, in ``unit``.

        The interval spans the rounds, so it includes the clock's drift during the run, which the
        samples of one round do not show; it is this run's own (in-run). ``measurement`` names the
        measurement it came from, so that a record can say which one a headline quotes.
        """
        rounds = self.round_medians_ms[name]
        lo, hi = bootstrap_median_ci(rounds)
        m = self.measurements[name]
        out = estimate(
            statistics.median(rounds), lo, hi, unit=unit, work=m.flops if unit == "TFLOP/s" else m.bytes, scale=scale
        )
        return {**out, "measurement": m.label}

    def added(self, name: str, scale: float = 1e3) -> dict[str, float]:
        """What ``name`` adds per call over the candidate: the median over rounds of the paired difference
        of their round medians (``scale`` 1e3: µs), with its bootstrap 95% interval (in-run).

        Paired within each round, the difference sees through the drift between rounds that an
        unpaired difference of two medians carries.

        Example
        -------
        >>> c = compare_host({"raw": raw, "launcher": launcher}, candidate="raw")
        >>> c.added("launcher")  # {"value": 0.3, "low": -0.2, "high": 0.8}, µs per call
        """
        diffs = [scale * (x - c) for x, c in zip(self.round_medians_ms[name], self.round_medians_ms[self.candidate])]
        low, high = bootstrap_median_ci(diffs)
        return {"value": statistics.median(diffs), "low": low, "high": high}

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "rounds": self.rounds,
            **({"rounds_cap": self.rounds_cap} if self.rounds_cap is not None else {}),
            "tie_band": self.tie_band,
            "same_code": self.same_code,
            "versus": self.versus,
            "round_medians_ms": self.round_medians_ms,
            **({"wall": self.wall.to_dict()} if self.wall is not None else {}),
        }


def _pooled(label: str, parts: list[Measurement]) -> Measurement:
    first = parts[0]
    samples = [x for m in parts for x in m.samples_ms]
    notes = sorted({w for m in parts for w in m.warnings})
    host = [x for m in parts for x in (m.host_samples_ms or [])]
    return Measurement(
        label,
        samples,
        first.mode,
        first.flops,
        first.bytes,
        dict(first.params),
        notes,
        host,
        first.clocks,
        first.launch_cost_ms,
        first.timing_method,
    )


def compare(
    contenders: Mapping[str, Callable[[], Any]],
    *,
    candidate: str,
    l2: str,
    rounds: int = 11,
    min_rounds: int | None = None,
    round_budget_ms: float | None = None,
    flops: float | None = None,
    bytes: float | None = None,
    params: Mapping[str, Any] | None = None,
    tag: str = "",
    seed: int = 0,
    wall_clock: bool | None = None,
    rewarm: bool | None = None,
    **bench_kwargs: Any,
) -> Comparison:
    """Time ``contenders`` in interleaved rounds and judge ``candidate`` against each other one, with an interval.

    Parameters
    ----------
    contenders
        Name → zero-argument launcher (each checked beforehand): the candidate and its baselines.
    candidate
        The implementation being judged (the cuDNN graph).
    l2
        ``"cold"`` or ``"hot"``, as in :func:`~cudnn_guide.measure.bench.benchmark`.
    rounds
        The most rounds; each times every contender (and the candidate twice) in a shuffled order.
    min_rounds
        The fewest rounds (default ``min(rounds, ADAPTIVE_MIN_ROUNDS)``). Between the two, the
        comparison stops once every verdict is :func:`settled`; ``min_rounds=rounds`` always runs
        ``rounds``. :attr:`Comparison.rounds` says how many ran, ``rounds_cap`` the cap.
    round_budget_ms
        Timing budget of one contender in one round, in ms (default :func:`default_round_budget_ms`).
    flops
        FLOPs per call, for rates.
    bytes
        Bytes per call, for rates.
    params
        Metadata kept on each measurement (``impl`` is set to the contender's name).
    tag
        Appended to each measurement's label (``"dgrad"``, ``"@ n=4096"``), so that the
        comparisons of a sweep keep distinct labels in the record and the history.
    seed
        Seed of the round orders and of the bootstrap.
    wall_clock
        Also race the contenders in back-to-back loops (:func:`compare_loops`) and keep that verdict
        in :attr:`Comparison.wall`. ``None`` (default): only when a contender's host time may bound
        such a loop (:func:`host_bound`).
    rewarm
        Warm each contender up in full in its first round only, and re-prime it with
        :data:`REWARM_CALLS` calls (one for a call of at least
        :data:`~cudnn_guide.measure.bench.LONG_CALL_MS`, none from :data:`~cudnn_guide.measure.bench.SELF_PRIMING_MS`;
        sized from that first warm-up) in the later ones, whose clock readings leave out NVML's throttle counters
        (the pooled measurement keeps the first round's); ``False``:
        the full warm-up and first-call check every round. ``None`` (default): :data:`REWARM`.
        What each round times is the same either way.
    bench_kwargs
        More keywords for :func:`~cudnn_guide.measure.bench.benchmark` (``cuda_graph``, ``warmup_ms``
        (each contender's first round), ...).

    Returns
    -------
    Comparison
        Pooled measurements, per-round medians, speed-ups with intervals and verdicts, the tie band.

    Raises
    ------
    BenchmarkError
        Fewer than :data:`MIN_ROUNDS` rounds, an unknown candidate, no baseline, or a round
        median that is not positive (a call too short to time this way).
    ValueError
        A bad ``l2``, or ``cuda_graph`` with a cold L2 (before any contender is called).
    TypeError
        A keyword the benchmark does not take (before any contender is called).

    Example
    -------
    >>> c = compare({"cuDNN": fused, "PyTorch": eager}, candidate="cuDNN", l2="cold", flops=f)
    >>> print(c.describe())
    """
    _check_setup("compare", contenders, candidate, rounds)
    _floor("compare", rounds, min_rounds)  # a bad min_rounds is refused before anything runs
    if round_budget_ms is None:
        round_budget_ms = default_round_budget_ms()
    elif (
        isinstance(round_budget_ms, bool)
        or not isinstance(round_budget_ms, (int, float))
        or not (math.isfinite(round_budget_ms) and round_budget_ms > 0)
    ):
        raise BenchmarkError(f"compare: round_budget_ms={round_budget_ms!r} must be a positive number of milliseconds")
    _check_bench_options(l2, flops, bytes, round_budget_ms, bench_kwargs)  # refused before anything runs
    checked = REWARM if rewarm is None else rewarm
    if checked:  # each contender's checked first call, untimed: before the measured block (beside other lanes)
        for name, fn in contenders.items():
            collector.between_steps()  # a page waiting to measure goes first (docs build lanes)
            first_call(fn, f"{name} {tag}".strip(), bench_kwargs.get("expect_shape"))
    return _compare_timed(
        contenders,
        candidate=candidate,
        l2=l2,
        rounds=rounds,
        min_rounds=min_rounds,
        round_budget_ms=round_budget_ms,
        flops=flops,
        bytes=bytes,
        params=params,
        tag=tag,
        seed=seed,
        wall_clock=wall_clock,
        rewarm=checked,
        **bench_kwargs,
    )


def _check_bench_options(
    l2: str, flops: float | None, bytes: float | None, budget_ms: float, bench_kwargs: Mapping[str, Any]
) -> None:
    """Refuse :func:`compare`'s benchmark settings before any first call runs: ``BenchOptions`` raises
    ``ValueError`` for a bad ``l2`` or a CUDA graph with a cold L2, ``TypeError`` for an unknown keyword.

    Only a check: the measured block then sets its own warm-up and repetition defaults."""
    BenchOptions(l2=l2, flops=flops, bytes=bytes, budget_ms=budget_ms, precision=None, **bench_kwargs)


@collector.spending("timing")
def _compare_timed(
    contenders: Mapping[str, Callable[[], Any]],
    *,
    candidate: str,
    l2: str,
    rounds: int,
    min_rounds: int | None,
    round_budget_ms: float,
    flops: float | None,
    bytes: float | None,
    params: Mapping[str, Any] | None,
    tag: str,
    seed: int,
    wall_clock: bool | None,
    rewarm: bool,
    **bench_kwargs: Any,
) -> Comparison:
    """:func:`compare` after the first-call checks: its measured block (the rounds, the loop race)."""
    bench_kwargs.setdefault("warmup_ms", 5.0)
    bench_kwargs.setdefault("min_reps", 5)

    host_reps = bench_kwargs.pop("host_reps", None)  # a caller's count applies to the first round
    hosted: set[str] = set()
    # one per contender (the repeat its own): a full warm-up in its first round, a few calls after
    # (the first-call check made by compare beforehand: a Rewarm that is already checked)
    primed: dict[str, Rewarm] | None = {} if rewarm else None

    def time_one(name: str, fn: Callable[[], Any]) -> Measurement:
        first = name not in hosted and not name.endswith(_REPEAT)  # host time: first round only
        hosted.add(name)
        warm = {} if primed is None else {"rewarm": primed.setdefault(name, Rewarm(REWARM_CALLS, checked=True))}
        return benchmark(
            fn,
            label=f"{name} {tag}".strip(),
            l2=l2,
            flops=flops,
            bytes=bytes,
            budget_ms=round_budget_ms,
            precision=None,
            params={**(params or {}), "impl": name},
            host_reps=host_reps if first else 0,
            **warm,
            **bench_kwargs,
        )

    floor = _floor("compare", rounds, min_rounds)
    with collector.paused():
        runs = _rounds(
            contenders,
            candidate,
            rounds,
            seed,
            time_one,
            floor=floor,
            enough=_settled_stop(contenders, candidate, seed),
        )
    done = len(runs[candidate])
    result = _judged(one_launch_rule(runs), contenders, candidate, done, tag, seed)
    result.rounds_cap = rounds
    if wall_clock is None:
        wall_clock = bool(host_bound(result))
    if wall_clock:
        loop_rounds = max(MIN_ROUNDS, min(done, 7))
        result.wall = compare_loops(  # min_rounds=rounds fixes the loop race's rounds too
            contenders,
            candidate=candidate,
            rounds=loop_rounds,
            min_rounds=loop_rounds if floor == rounds else None,
            tag=tag,
            seed=seed,
        )
    return result


HOST_BOUND = 0.8
"""A contender whose host time per call reaches this share of its GPU time may bound a loop of calls:
:func:`compare` then also races the contenders in back-to-back loops (:func:`compare_loops`)."""


def host_bound(result: Comparison) -> list[str]:
    """The contenders of a comparison whose host time per call reaches :data:`HOST_BOUND` of their GPU time.

    Parameters
    ----------
    result
        A :class:`Comparison` whose measurements carry host samples.

    Returns
    -------
    list[str]
        Their names, in the comparison's order; empty when no host time was measured.

    Example
    -------
    >>> host_bound(c)  # e.g. ['torch.compile (default)'] when its launch costs more CPU than its kernel GPU
    """
    out = []
    for name, m in result.measurements.items():
        host = m.host_median_ms
        if host is not None and m.samples_ms and host >= HOST_BOUND * m.median_ms:
            out.append(name)
    return out


def rejudged(cmp: Comparison, candidate: str, baselines: list[str]) -> Comparison:
    """The same rounds judged again, with another contender as the candidate: its per-round ratios.

    Every contender ran in the same interleaved rounds, so any two of them have paired round
    medians: ``candidate``'s speed-up over each of ``baselines`` is the median over rounds of
    baseline time / candidate time, with its bootstrap 95% interval and its verdict against the
    comparison's own tie band. Nothing is timed again. A page that races several like-for-like
    pairs in one comparison (eager against eager, compiled against compiled) judges each pair
    this way.

    Parameters
    ----------
    cmp
        A :class:`Comparison` (from :func:`compare` or :func:`compare_host`).
    candidate
        The contender to judge.
    baselines
        The contenders to judge it against.

    Returns
    -------
    Comparison
        A copy of ``cmp`` with ``candidate`` and ``versus`` (``baselines`` only) replaced; its
        measurements, round medians, tie band and rounds are ``cmp``'s.

    Example
    -------
    >>> eager_cmp = rejudged(result, "cuDNN op, eager", ["PyTorch eager"])
    >>> eager_cmp.describe("PyTorch eager")
    """
    versus = {}
    for b in baselines:
        rounds = zip(cmp.round_medians_ms[b], cmp.round_medians_ms[candidate])
        ratios = [t_b / t_c for t_b, t_c in rounds]
        lo, hi = bootstrap_median_ci(ratios)
        versus[b] = {
            "value": statistics.median(ratios),
            "low": lo,
            "high": hi,
            "verdict": judge(lo, hi, cmp.tie_band),
        }
    return dataclasses.replace(cmp, candidate=candidate, versus=versus)


LOOP_MS = 25.0
"""How long a wall-clock loop of :func:`compare_loops` lasts, about, where its calls allow: a contender's calls per
loop are this over its ms per call (from a short loop before the rounds), at least :data:`MIN_LOOP_CALLS` and at
most ``calls`` (so a call of 0.5 ms or less keeps 50 calls and a shorter loop).
Until issue 34's loop A/B every loop made ``calls`` (50) calls, whatever they cost: a 3.6 ms call's loop lasted
180 ms (the profile behind the change: ``docs/data/loop_profile.json``). ``loop_ms=0`` restores that rule."""
MIN_LOOP_CALLS = 10
"""The fewest calls in one wall-clock loop (:data:`LOOP_MS`): ten calls of 2.5 ms or more make a loop of at least
25 ms, whose synchronized start and end (about 20 µs) are under 0.1% of it. A call under 0.5 ms keeps the cap of 50
calls, as before, and its loop is shorter than :data:`LOOP_MS`."""
_CALIBRATION_CALLS = 3


def loop_calls(ms_per_call: float, cap: int, loop_ms: float = LOOP_MS) -> int:
    """Calls in one wall-clock loop for a callable of ``ms_per_call``: ``loop_ms`` of them, from
    :data:`MIN_LOOP_CALLS` (or ``cap``, if fewer) to ``cap``; ``cap`` itself when ``loop_ms`` is 0.

    Parameters
    ----------
    ms_per_call
        Wall time of one call in a back-to-back loop, in ms.
    cap
        The most calls (:func:`compare_loops`' ``calls``).
    loop_ms
        The loop's length to aim at, in ms; 0: always ``cap`` calls.

    Returns
    -------
    int
        Calls per loop.

    Example
    -------
    >>> loop_calls(3.6, 50), loop_calls(0.3, 50), loop_calls(100.0, 50), loop_calls(3.6, 50, loop_ms=0)
    (10, 50, 10, 50)
    """
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise BenchmarkError(f"compare_loops: calls={cap!r} must be a whole number of at least 1")
    if (
        isinstance(loop_ms, bool)
        or not isinstance(loop_ms, (int, float))
        or not (math.isfinite(loop_ms) and loop_ms >= 0)
    ):
        raise BenchmarkError(f"compare_loops: loop_ms={loop_ms!r} must be a finite number of ms, at least 0")
    if not loop_ms:
        return cap
    if not (math.isfinite(ms_per_call) and ms_per_call > 0):
        return cap  # no usable estimate: the most calls
    return max(min(cap, MIN_LOOP_CALLS), min(cap, math.ceil(loop_ms / ms_per_call)))


@collector.measuring()
def _time_loop(fn: Callable[[], Any], calls: int) -> float:
    """Milliseconds per call of ``calls`` back-to-back calls, from a synchronized start to a synchronized end."""
    import time

    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / calls


@collector.spending("timing")
def compare_loops(
    contenders: Mapping[str, Callable[[], Any]],
    *,
    candidate: str,
    rounds: int = 7,
    calls: int = 50,
    loops: int = 3,
    tag: str = "",
    seed: int = 0,
    loop_ms: float = LOOP_MS,
    min_rounds: int | None = None,
) -> Comparison:
    """Like :func:`compare`, for the **wall-clock** time per call of a back-to-back loop, host time included.

    What a training or serving loop sees: a path whose host cost exceeds its GPU time bounds the
    loop by the CPU, which GPU-time verdicts do not show. Before the rounds, one call and then a
    short loop of each contender (3 calls, neither in the verdict) size its loops to about ``loop_ms``
    (:func:`loop_calls`). Each round times every contender (and the candidate twice) in a shuffled
    order: ``loops`` loops of that many calls, each from a synchronized start to a synchronized end.
    Verdicts as in :func:`compare`, and so is the stop: from ``min_rounds`` on, once every verdict
    is :func:`settled`.

    Parameters
    ----------
    contenders
        Name → zero-argument launcher (checked beforehand).
    candidate
        The path being judged.
    rounds
        Rounds (at least :data:`MIN_ROUNDS`).
    calls
        The most calls per loop.
    loops
        Timed loops per contender per round (the samples of its measurement).
    tag
        Appended to each measurement's label, after "wall-clock loop".
    seed
        Seed of the round orders and of the bootstrap.
    loop_ms
        About how long one loop lasts (:data:`LOOP_MS`); 0: every loop makes ``calls`` calls.
    min_rounds
        The fewest rounds (default ``min(rounds, ADAPTIVE_MIN_ROUNDS)``); ``min_rounds=rounds`` always
        runs ``rounds``.

    Returns
    -------
    Comparison
        Measurements in mode ``"wall-clock loop"`` (samples: ms per call; ``params["loop_calls"]``: calls per
        loop), speed-ups, verdicts.

    Example
    -------
    >>> c = compare_loops({"cuDNN": fused, "torch.compile": compiled}, candidate="cuDNN")
    >>> print(c.describe())
    """
    _check_setup("compare_loops", contenders, candidate, rounds)
    floor = _floor("compare_loops", rounds, min_rounds)
    label = f"wall-clock loop {tag}".strip()
    sized: dict[str, int] = {}

    def time_one(name: str, fn: Callable[[], Any]) -> Measurement:
        n = sized[name.removesuffix(_REPEAT)]
        samples = [_time_loop(fn, n) for _ in range(loops)]
        return Measurement(f"{name} {label}", samples, "wall-clock loop", params={"impl": name, "loop_calls": n})

    loop_calls(1.0, calls, loop_ms)  # a bad calls or loop_ms fails here, before anything runs
    with collector.paused():
        for name, fn in contenders.items():
            if loop_ms and calls > MIN_LOOP_CALLS:  # otherwise every loop makes `calls` calls: nothing to size
                _time_loop(fn, 1)  # untimed: a contender run here for the first time compiles or loads first
                sized[name] = loop_calls(_time_loop(fn, _CALIBRATION_CALLS), calls, loop_ms)
            else:
                sized[name] = calls
        runs = _rounds(
            contenders,
            candidate,
            rounds,
            seed,
            time_one,
            floor=floor,
            enough=_settled_stop(contenders, candidate, seed),
        )
    result = _judged(runs, contenders, candidate, len(runs[candidate]), label, seed)
    result.rounds_cap = rounds
    return result


RAW_EVENTS_NOTE = (
    "launch cost not subtracted for any contender of this comparison: it was too large a share of "
    "at least one contender's call, and one rule applies to all (raw event times; cuda_graph=True "
    "times calls this short better)"
)


def one_launch_rule(runs: Mapping[str, list[Measurement]]) -> dict[str, list[Measurement]]:
    """Put every measurement of a comparison under the same launch-cost rule.

    When the harness subtracted the launch cost from some measurements and not from others (a
    call too short for it), the subtracted ones get their raw event times back
    (``samples_ms + launch_cost_ms``) and every measurement carries :data:`RAW_EVENTS_NOTE`.

    Parameters
    ----------
    runs
        Contender → its measurements, one per round.

    Returns
    -------
    dict[str, list[Measurement]]
        The same measurements when one rule already held, else raw-event copies.

    Example
    -------
    >>> a = Measurement("a", [0.004], "events − launch cost", launch_cost_ms=0.004)
    >>> b = Measurement("b", [0.008], "events")
    >>> [m[0].samples_ms for m in one_launch_rule({"a": [a], "b": [b]}).values()]
    [[0.008], [0.008]]
    """
    costs = {m.launch_cost_ms for ms in runs.values() for m in ms}
    if len(costs) <= 1:
        return dict(runs)

    def raw(m: Measurement) -> Measurement:
        return dataclasses.replace(
            m,
            samples_ms=[x + m.launch_cost_ms for x in m.samples_ms],
            mode=m.mode.replace(" − launch cost", ""),
            launch_cost_ms=0.0,
            warnings=[*m.warnings, RAW_EVENTS_NOTE],
        )

    return {name: [raw(m) for m in ms] for name, ms in runs.items()}


def _rounds(
    contenders: Mapping[str, Callable[[], Any]],
    candidate: str,
    rounds: int,
    seed: int,
    time_one: Callable[[str, Callable[[], Any]], Measurement],
    *,
    floor: int | None = None,
    enough: Callable[[dict[str, list[Measurement]]], bool] | None = None,
) -> dict[str, list[Measurement]]:
    """Interleaved rounds: each times every contender, and the candidate a second time, in a shuffled order.

    With ``enough``, stop after any round from ``floor`` on where ``enough(runs)`` holds."""
    names = [*contenders, candidate + _REPEAT]
    runs: dict[str, list[Measurement]] = {n: [] for n in names}
    rng = random.Random(seed)
    for done in range(1, rounds + 1):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            runs[name].append(time_one(name, contenders[name.removesuffix(_REPEAT)]))
        if enough is not None and done >= (floor or rounds) and done < rounds and enough(runs):
            break
    return runs


def _floor(who: str, rounds: int, min_rounds: int | None) -> int:
    """The fewest rounds of an adaptive race: ``min_rounds``, or ``min(rounds, ADAPTIVE_MIN_ROUNDS)``."""
    floor = min(rounds, ADAPTIVE_MIN_ROUNDS) if min_rounds is None else min_rounds
    if not MIN_ROUNDS <= floor <= rounds:
        raise BenchmarkError(f"{who}: min_rounds={floor} must lie between {MIN_ROUNDS} and rounds={rounds}")
    return floor


def _settled_stop(
    contenders: Mapping[str, Any], candidate: str, seed: int
) -> Callable[[dict[str, list[Measurement]]], bool]:
    """The ``enough`` of :func:`_rounds` for :func:`compare` and :func:`compare_loops`: every verdict so far
    :func:`settled` (under one launch-cost rule, which leaves wall-clock loops as they are)."""

    def enough(runs: dict[str, list[Measurement]]) -> bool:
        medians = {n: [m.median_ms for m in ms] for n, ms in one_launch_rule(runs).items()}
        if any(min(ms) <= 0 for ms in medians.values()):
            return False  # _judged says why
        band, _, versus = _ratios(medians, contenders, candidate, seed)
        return all(settled(v, band) for v in versus.values())

    return enough


def settled(speed_up: Mapping[str, float], band: float) -> bool:
    """Whether one speed-up interval already gives its verdict: wholly outside ``1 ± band`` (faster or
    slower) or wholly inside it (a tie), and no wider than ±:data:`ADAPTIVE_HALF_WIDTH` of its value.

    Parameters
    ----------
    speed_up
        ``{"value", "low", "high"}``: a speed-up and its interval, as in :attr:`Comparison.versus`.
    band
        The tie band, as a fraction.

    Returns
    -------
    bool
        ``False`` while more rounds could still change the verdict or narrow a too-wide interval.

    Example
    -------
    >>> settled({"value": 1.30, "low": 1.27, "high": 1.33}, 0.02)  # faster, ±2.3%
    True
    >>> settled({"value": 1.02, "low": 0.99, "high": 1.05}, 0.02)  # astride the band's upper edge
    False
    """
    lo, hi, value = speed_up["low"], speed_up["high"], speed_up["value"]
    decided = lo > 1 + band or hi < 1 - band or (1 - band <= lo and hi <= 1 + band)
    return decided and (hi - lo) / 2 <= ADAPTIVE_HALF_WIDTH * value


def _check_setup(who: str, contenders: Mapping[str, Any], candidate: str, rounds: int) -> None:
    if candidate not in contenders:
        raise BenchmarkError(f"{who}: candidate {candidate!r} is not one of the contenders {sorted(contenders)}")
    if len(contenders) < 2:
        raise BenchmarkError(f"{who}: needs at least one baseline besides the candidate")
    if rounds < MIN_ROUNDS:
        raise BenchmarkError(f"{who}: {rounds} rounds give no usable interval; use at least {MIN_ROUNDS}")


def _judged(
    runs: dict[str, list[Measurement]], contenders: Mapping[str, Any], candidate: str, rounds: int, tag: str, seed: int
) -> Comparison:
    """Per-round ratios, their bootstrap intervals, the tie band from the candidate's repeat, and the verdicts."""
    medians = {n: [m.median_ms for m in ms] for n, ms in runs.items()}
    for n, ms in medians.items():
        if min(ms) <= 0:
            raise BenchmarkError(
                f"compare: {n!r} has a non-positive round median ({min(ms):.3g} ms): too short to "
                "time per call; use cuda_graph=True"
            )
    band, same, versus = _ratios(medians, contenders, candidate, seed)
    pooled = {n: _pooled(f"{n} {tag}".strip(), runs[n]) for n in contenders}
    collector.add_measurements(pooled.values())  # the rounds were timed paused: the record keeps these
    return Comparison(
        candidate,
        rounds,
        pooled,
        {n: medians[n] for n in contenders},
        versus,
        band,
        same,
    )


def _ratios(
    medians: Mapping[str, list[float]], contenders: Mapping[str, Any], candidate: str, seed: int
) -> tuple[float, dict[str, float], dict[str, dict[str, Any]]]:
    """The tie band (from the candidate's repeat), the same-code ratio, and each baseline's speed-up and verdict."""
    cand = medians[candidate]
    same = [r / c for c, r in zip(cand, medians[candidate + _REPEAT])]
    same_lo, same_hi = bootstrap_median_ci(same, seed=seed)
    band = max(MIN_TIE_BAND, abs(same_lo - 1), abs(same_hi - 1))
    versus = {}
    for name in contenders:
        if name == candidate:
            continue
        ratios = [b / c for b, c in zip(medians[name], cand)]
        lo, hi = bootstrap_median_ci(ratios, seed=seed)
        versus[name] = {"value": statistics.median(ratios), "low": lo, "high": hi, "verdict": judge(lo, hi, band)}
    return band, {"value": statistics.median(same), "low": same_lo, "high": same_hi}, versus


@collector.spending("timing")
def compare_host(
    contenders: Mapping[str, Callable[[], Any]],
    *,
    candidate: str,
    rounds: int = 11,
    calls: int = 400,
    batches: int = 5,
    tag: str = "",
    seed: int = 0,
) -> Comparison:
    """Like :func:`compare`, for the **host** (CPU) time per call: how long a launch path keeps the CPU busy.

    Each round times every contender (and the candidate twice) in a shuffled order: after a
    synchronize, ``calls`` back-to-back calls in ``batches`` equal batches, each batch timed
    with ``time.perf_counter``. The calls only enqueue work, so while the GPU keeps up (choose a
    workload whose GPU time per call is below its host time, and fewer calls than the launch
    queue holds) a batch's time per call is the host cost of the path. Verdicts as in
    :func:`compare`.

    Parameters
    ----------
    contenders
        Name → zero-argument launcher.
    candidate
        The path being judged.
    rounds
        Rounds (at least :data:`MIN_ROUNDS`).
    calls
        Calls per contender per round.
    batches
        Timed batches per contender per round (the samples of its measurement).
    tag
        Appended to each measurement's label.
    seed
        Seed of the round orders and of the bootstrap.

    Returns
    -------
    Comparison
        Measurements in mode ``"host"`` (samples: ms per call), speed-ups with intervals, verdicts.

    Raises
    ------
    BenchmarkError
        As :func:`compare`.

    Example
    -------
    >>> c = compare_host({"dict pack": by_tensor, "uid list": by_uid}, candidate="uid list")
    >>> print(c.describe())
    """
    import time

    import torch

    _check_setup("compare_host", contenders, candidate, rounds)
    per_batch = max(1, calls // batches)
    for fn in contenders.values():  # warm-up: first-call costs are not per-call costs
        for _ in range(20):
            fn()
    torch.cuda.synchronize()

    def time_one(name: str, fn: Callable[[], Any]) -> Measurement:
        samples = []
        for _ in range(batches):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(per_batch):
                fn()
            samples.append((time.perf_counter() - t0) * 1e3 / per_batch)
        torch.cuda.synchronize()
        return Measurement(f"{name} {tag}".strip(), samples, "host", params={"impl": name})

    with collector.paused():
        runs = _rounds(contenders, candidate, rounds, seed, time_one)
    return _judged(runs, contenders, candidate, rounds, tag, seed)
