"""Sweep a problem size across implementations and collect one measurement per point.

An implementation is a *factory*: given a problem size it returns a zero-argument callable to
time, or ``None`` when it does not support that size (shown as "—", never as a failure).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cudnn_guide.measure.bench import benchmark
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.report.plots import plot_lines
from cudnn_guide.report.tables import ComparisonTable

__all__ = ["SweepResult", "sweep"]


@dataclasses.dataclass
class SweepResult:
    """The measurements of a sweep, with a table and a plot of them.

    Example
    -------
    >>> res = sweep([1024, 2048], impls, x='seq_len', l2='cold')
    >>> res.table('tflops')
    >>> res.plot(metric='tflops')
    """

    x: str
    measurements: list[Measurement]
    comparisons: dict[Any, Any] = dataclasses.field(default_factory=dict)
    """Size → :class:`~cudnn_guide.measure.compare.Comparison`, when the sweep named a ``candidate``."""

    def verdicts(self) -> list[dict[str, Any]]:
        """One row per size and baseline: the candidate's speed-up with its interval and verdict."""
        return [
            {
                self.x: value,
                "baseline": b,
                "speed-up": v["value"],
                "95% CI": f"{v['low']:.2f}–{v['high']:.2f}",
                "verdict": v["verdict"],
                "tie band": f"±{100 * c.tie_band:.1f}%",
            }
            for value, c in self.comparisons.items()
            for b, v in c.versus.items()
        ]

    def table(self, metric: str = "median_ms", title: str = "") -> ComparisonTable:
        return ComparisonTable(self.measurements, row="impl", column=self.x, metric=metric, title=title)

    def plot(self, metric: str = "median_ms", **kwargs: Any) -> Any:
        return plot_lines(self.measurements, x=self.x, line="impl", metric=metric, **kwargs)

    def get(self, impl: str, x: Any) -> Measurement | None:
        for m in self.measurements:
            if m.params.get("impl") == impl and m.params.get(self.x) == x:
                return m
        return None


def sweep(
    xs: Sequence[Any],
    impls: Mapping[str, Callable[[Any], Callable[[], Any] | None]],
    *,
    x: str = "size",
    l2: str,
    flops: Callable[[Any], float] | None = None,
    bytes: Callable[[Any], float] | None = None,
    candidate: str | None = None,
    rounds: int = 11,
    **bench_kwargs: Any,
) -> SweepResult:
    """Time every implementation at every size.

    Parameters
    ----------
    xs
        Problem sizes.
    impls
        Name → factory(size) returning a launcher or ``None``.
    x
        Name of the size parameter.
    l2
        ``"cold"`` or ``"hot"``.
    flops
        size → FLOPs per call.
    bytes
        size → bytes per call.
    candidate
        With a name, each size is a :func:`~cudnn_guide.measure.compare.compare` of ``candidate``
        against the other implementations, in ``rounds`` interleaved rounds, with verdicts.
    rounds
        Rounds per size, with ``candidate``.
    bench_kwargs
        More :func:`~cudnn_guide.measure.bench.benchmark` arguments.

    Returns
    -------
    SweepResult
        The measurements, with a table and a plot.

    Raises
    ------
    ValueError
        An empty sweep (no sizes or no implementations), or ``budget_ms`` with ``candidate``.

    Example
    -------
    >>> res = sweep([1024, 2048], {"cudnn": make_cudnn, "torch": make_torch}, x="seq_len",
    ...             l2="cold", flops=lambda s: 4 * s * s * 128)
    >>> res.plot(metric="tflops")
    """
    if len(xs) == 0:
        raise ValueError("sweep(): no problem sizes given (xs is empty)")
    if len(impls) == 0:
        raise ValueError("sweep(): no implementations given")
    out: list[Measurement] = []
    if candidate is not None:
        from cudnn_guide.measure.compare import compare

        if "budget_ms" in bench_kwargs:  # a budget per point means nothing here: never ignore it silently
            raise ValueError(
                "sweep(candidate=...): pass round_budget_ms (each contender's time per round), not budget_ms"
            )
        comparisons = {}
        for value in xs:
            contenders = {name: fn for name, factory in impls.items() if (fn := factory(value)) is not None}
            c = compare(
                contenders,
                candidate=candidate,
                l2=l2,
                rounds=rounds,
                flops=flops(value) if flops else None,
                bytes=bytes(value) if bytes else None,
                params={x: value},
                tag=f"@ {x}={value}",
                **bench_kwargs,
            )
            comparisons[value] = c
            out += c.measurements.values()
        return SweepResult(x, out, comparisons)
    for value in xs:
        for name, factory in impls.items():
            fn = factory(value)
            if fn is None:
                continue
            out.append(
                benchmark(
                    fn,
                    label=f"{name} @ {x}={value}",
                    l2=l2,
                    flops=flops(value) if flops else None,
                    bytes=bytes(value) if bytes else None,
                    params={"impl": name, x: value},
                    **bench_kwargs,
                )
            )
    return SweepResult(x, out)
