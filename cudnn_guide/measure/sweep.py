"""Sweep a problem size across implementations and collect one measurement per point.

An implementation is a *factory*: given a problem size it returns a zero-argument callable to
time, or ``None`` when it does not support that size (shown as "—", never as a failure).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cudnn_guide.measure.bench import benchmark
from cudnn_guide.measure.measurement import Measurement

__all__ = ["SweepResult", "sweep"]


def _moved(method: str, function: str) -> str:
    return (
        f"SweepResult.{method}() moved to cudnn_guide.report.{function}(result, ...) so that measuring "
        f"does not import plotting; write `from cudnn_guide.report import {function}` and call "
        f"`{function}(result, ...)` with the same arguments"
    )


@dataclasses.dataclass
class SweepResult:
    """The measurements of a sweep (their table and plot: :func:`cudnn_guide.report.sweep_table`,
    :func:`cudnn_guide.report.plot_sweep`).

    Example
    -------
    >>> res = sweep([1024, 2048], impls, x='seq_len', l2='cold')
    >>> report.sweep_table(res, 'tflops')
    >>> report.plot_sweep(res, 'tflops')
    """

    x: str
    measurements: list[Measurement]
    comparisons: dict[Any, Any] = dataclasses.field(default_factory=dict)
    """Size → :class:`~cudnn_guide.measure.compare.Comparison`, when the sweep named a ``candidate``."""

    # The table and plot methods moved to cudnn_guide.report (measure imports nothing of report).
    # Scripts written before the move (two recorded pages still are) get the replacement by name.
    def table(self, *args: Any, **kwargs: Any) -> Any:
        """Moved: raises, naming :func:`cudnn_guide.report.sweep_table`."""
        raise AttributeError(_moved("table", "sweep_table"))

    def plot(self, *args: Any, **kwargs: Any) -> Any:
        """Moved: raises, naming :func:`cudnn_guide.report.plot_sweep`."""
        raise AttributeError(_moved("plot", "plot_sweep"))

    def plot_relative(self, *args: Any, **kwargs: Any) -> Any:
        """Moved: raises, naming :func:`cudnn_guide.report.plot_relative`."""
        raise AttributeError(_moved("plot_relative", "plot_relative"))

    @classmethod
    def from_comparisons(cls, x: str, comparisons: Mapping[Any, Any]) -> SweepResult:
        """A sweep made of comparisons run by hand, one per size (``{size: compare(...)}``).

        Each pooled measurement is copied with ``params[x]`` set to its size, so the table, the plot
        and :meth:`verdicts` work as for :func:`sweep` with a ``candidate``.

        Parameters
        ----------
        x
            Name of the size parameter.
        comparisons
            Size → :class:`~cudnn_guide.measure.compare.Comparison`.

        Returns
        -------
        SweepResult
            The sweep.

        Example
        -------
        >>> by_window = {w: compare({...}, candidate="cuDNN", l2="cold") for w in (128, 1024)}
        >>> report.plot_sweep(SweepResult.from_comparisons("window", by_window), "median_us")
        """
        out = [
            dataclasses.replace(m, params={**m.params, x: value})
            for value, c in comparisons.items()
            for m in c.measurements.values()
        ]
        return cls(x, out, dict(comparisons))

    def verdicts(self) -> list[dict[str, Any]]:
        """One row per size and baseline: the candidate's speed-up with its interval and verdict."""
        return [
            {
                self.x: value,
                "baseline": b,
                "speed-up": v["value"],
                "in-run 95% interval": f"{v['low']:.2f}–{v['high']:.2f}",
                "verdict": v["verdict"],
                "tie band": f"±{100 * c.tie_band:.1f}%",
            }
            for value, c in self.comparisons.items()
            for b, v in c.versus.items()
        ]

    def describe_verdicts(self) -> str:
        """One line per baseline, over the sizes it ran: the candidate's speed-up range and its verdicts.

        e.g. ``against PyTorch flash: speed-up 0.97× to 1.31× (faster at 4, tie at 1 of 5 sizes)``; a
        baseline that ran at no size says so.
        """
        lines = []
        names = dict.fromkeys(m.params["impl"] for m in self.measurements)
        cand = next(iter(self.comparisons.values())).candidate if self.comparisons else None
        for name in names:
            if name == cand:
                continue
            pts = [c.versus[name] for c in self.comparisons.values() if name in c.versus]
            if not pts:
                lines.append(f"against {name}: unavailable at every size")
                continue
            counts = Counter(p["verdict"] for p in pts)
            verdicts = ", ".join(f"{k} at {n}" for k, n in sorted(counts.items()))
            lines.append(
                f"against {name}: speed-up {min(p['value'] for p in pts):.2f}× to {max(p['value'] for p in pts):.2f}× "
                f"({verdicts} of {len(self.comparisons)} sizes)"
            )
        return "\n".join(lines)

    def relative(self, to: str) -> dict[str, dict[Any, float]]:
        """Each other implementation's median time over ``to``'s: ``{impl: {x: ratio}}``, at the sizes both have.

        Example
        -------
        >>> res.relative("bare matmul")["cuDNN graph"][4096]  # 1.0: as fast as the bare matmul
        """
        xs = list(dict.fromkeys(m.params[self.x] for m in self.measurements))
        impls = list(dict.fromkeys(m.params["impl"] for m in self.measurements))
        out: dict[str, dict[Any, float]] = {}
        for impl in impls:
            if impl != to:
                pairs = {v: (self.get(impl, v), self.get(to, v)) for v in xs}
                out[impl] = {v: a.median_ms / b.median_ms for v, (a, b) in pairs.items() if a and b}
        return out

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
    >>> report.plot_sweep(res, "tflops")
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
