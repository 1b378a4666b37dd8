"""Machine-readable records of what each example measured.

Each example has one schema-versioned JSON file next to its recorded page: the environment,
every measurement with its raw samples and units, every correctness check, and the headline
numbers its prose quotes. Pages, the results table and the history are all built from these
files, never from numbers typed by hand.

The record is collected while the example runs, the way pytest-benchmark's session collects its
``benchmark`` fixtures: every passing :func:`cudnn_guide.check.check`, every
:func:`~cudnn_guide.measure.bench.benchmark` and every comparison registers with :func:`page`
(through :mod:`cudnn_guide.collector`), and the docs build writes the file after the example
(:func:`begin`, :func:`finish`), named and titled from the example file, with the environment
that :func:`cudnn_guide.environment.collect` registered. Every interval a record holds here is the
run's own (in-run); the docs build widens the intervals it publishes by the re-recording drift
of the site's history as it writes the file (:func:`take`, then :meth:`Record.write`), and keeps
the in-run ones beside them. A page declares only its headlines, in a
hidden block of a few lines::

    from cudnn_guide.report.records import comparison, headline
    headline("fused median", unit="µs", **result.estimate("cuDNN graph (fused)", "µs"))
    comparison("speed-up over best baseline", result)
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cudnn_guide import collector, datafiles
from cudnn_guide.check import CheckResult
from cudnn_guide.errors import BenchmarkError
from cudnn_guide.measure.measurement import Measurement

__all__ = ["Record", "load", "RECORD_SUFFIX", "headline", "comparison", "keep", "begin", "take", "finish"]

SCHEMA = "cudnn-guide/record"
SCHEMA_VERSION = 1
RECORD_SUFFIX = ".record.json"
POSITIVE_UNITS = frozenset({"µs", "us", "ms", "s", "GB/s", "TB/s", "TFLOP/s", "x"})
"""Units of headlines that must be positive: times, rates and ratios."""
VERDICTS = ("faster", "slower", "tie")


def record_dir() -> Path:
    """Where records go: ``$CUDNN_GUIDE_RECORD_DIR`` (set by the docs build), else ``./cudnn_guide_records``.

    Returns
    -------
    Path
        The directory.

    Example
    -------
    >>> os.environ['CUDNN_GUIDE_RECORD_DIR'] = 'docs/auto_examples'
    >>> print(record_dir())
    """
    return Path(os.environ.get("CUDNN_GUIDE_RECORD_DIR", "cudnn_guide_records"))


class Record:
    """Collects one example's results and writes them as JSON.

    Example
    -------
    >>> rec = Record("plot_conv_bias_relu", title="Fused conv → bias → ReLU")
    >>> rec.add_check(result); rec.add(measurement)
    >>> rec.headline("speed-up over eager", 1.7, "x", baseline="PyTorch eager")
    >>> rec.write()
    """

    def __init__(self, example: str, *, title: str = "", environment: Any = None) -> None:
        self.example, self.title = example, title
        self.environment = environment
        self.measurements: list[Measurement] = []
        self.checks: list[CheckResult] = []
        self.headlines: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}
        self.seconds: dict[str, float] = {}
        """Where the example's time went (:func:`finish` fills it): kind of work → wall seconds."""

    def add(self, *measurements: Measurement | Iterable[Measurement]) -> None:
        """Add measurements (each once). A label names a measurement in the history across
        recordings, so two different measurements under one label raise :class:`BenchmarkError`."""
        for m in measurements:
            for one in [m] if isinstance(m, Measurement) else m:
                if any(x is one for x in self.measurements):
                    continue
                if any(x.label == one.label for x in self.measurements):
                    raise BenchmarkError(
                        f"record {self.example}: two measurements are labelled {one.label!r}; the history "
                        "compares recordings by label, so give each measurement a label of its own"
                    )
                self.measurements.append(one)

    def add_check(self, result: CheckResult) -> CheckResult:
        if not any(c is result for c in self.checks):
            self.checks.append(result)
        return result

    def headline(
        self,
        name: str,
        value: float,
        unit: str,
        *,
        baseline: str = "",
        low: float | None = None,
        high: float | None = None,
        verdict: str | None = None,
        **details: Any,
    ) -> None:
        """Register a number the page's prose quotes, with its interval.

        It returns nothing: a page's hidden block ends with it, and sphinx-gallery prints the value
        of a cell's last expression.

        A time, rate or ratio that is not positive cannot be true: it raises instead of being recorded.
        """
        value = float(value)
        if any(h["name"] == name for h in self.headlines):
            raise BenchmarkError(
                f"record {self.example}: two headlines are named {name!r}; the history compares "
                "recordings by headline name, so give each its own"
            )
        if unit in POSITIVE_UNITS and not value > 0:
            raise BenchmarkError(
                f"headline {name!r} of {self.example}: {value:g} {unit} cannot be a measured "
                "time, rate or ratio (too short to time?); say so on the page instead of recording it"
            )
        entry = {"name": name, "value": value, "unit": unit, "baseline": baseline, **details}
        if low is not None and high is not None:
            if not float(low) <= value <= float(high):
                raise BenchmarkError(
                    f"headline {name!r}: value {value:g} lies outside its interval [{low:g}, {high:g}]"
                )
            entry.update(low=float(low), high=float(high))  # the run's own (in-run) interval
        if verdict is not None:
            if verdict not in VERDICTS:
                raise BenchmarkError(f"headline {name!r}: verdict {verdict!r} is not one of {VERDICTS}")
            entry["verdict"] = verdict
        self.headlines.append(entry)

    def comparison(self, name: str, result: Any, baseline: str | None = None) -> None:
        """Register the candidate's speed-up over ``baseline`` (default: the best) of a
        :class:`~cudnn_guide.measure.compare.Comparison` as a headline with ``low``, ``high`` and ``verdict``,
        and add the comparison's measurements. The headline names the two measurements whose ratio
        it is (``candidate_measurement``, ``baseline_measurement``), and, when the comparison also raced
        back-to-back loops (:attr:`~cudnn_guide.measure.compare.Comparison.wall`), that verdict
        (``wall_value``, ``wall_low``, ``wall_high``, ``wall_verdict``)."""
        baseline = baseline or result.best_baseline
        s = result.versus[baseline]
        self.add(result.measurements.values())
        wall = getattr(result, "wall", None)  # the same race in back-to-back loops, host time included
        loop = {}
        if wall is not None and baseline in wall.versus:
            w = wall.versus[baseline]
            self.add(wall.measurements.values())
            loop = {
                "wall_value": w["value"],
                "wall_low": w["low"],
                "wall_high": w["high"],
                "wall_verdict": w["verdict"],
            }
        self.headline(
            name,
            s["value"],
            "x",
            baseline=baseline,
            low=s["low"],
            high=s["high"],
            verdict=s["verdict"],
            tie_band=result.tie_band,
            rounds=result.rounds,
            kind="comparison",
            candidate_measurement=result.measurements[result.candidate].label,
            baseline_measurement=result.measurements[baseline].label,
            **loop,
        )

    def to_dict(self) -> dict[str, Any]:
        env = self.environment
        if env is not None and hasattr(env, "to_dict"):
            env = env.to_dict()
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "example": self.example,
            "title": self.title,
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "environment": env,
            "checks": [c.to_dict() for c in self.checks],
            "all_checks_passed": all(c.passed for c in self.checks) and bool(self.checks),
            "headlines": self.headlines,
            "measurements": [m.to_dict() for m in self.measurements],
            "extra": self.extra,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }

    def write(self, directory: str | os.PathLike[str] | None = None) -> Path:
        """Write ``<example>.record.json`` and return its path."""
        out = Path(directory) if directory is not None else record_dir()
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.example}{RECORD_SUFFIX}"
        datafiles.write_json(path, self.to_dict(), separators=(",", ":"), default=_json_default)
        return path


def page(environment: Any = None) -> Record:
    """The running example's record: created on first use, written by the docs build after the example.

    Passing checks and measurements register here on their own (:mod:`cudnn_guide.collector`);
    a page adds its headlines and comparisons.

    Parameters
    ----------
    environment
        The example's :class:`~cudnn_guide.environment.EnvironmentRecord`, stored with the record.

    Returns
    -------
    Record
        The one record of the running example.

    Example
    -------
    >>> page().comparison("speed-up over best baseline", result)
    """
    if collector.current() is None:
        collector.start(Record("example"))
    rec = collector.current()
    if environment is not None:
        rec.environment = environment
    return rec


def headline(name: str, value: float | None = None, unit: str = "", **details: Any) -> None:
    """:meth:`Record.headline` on the running example's record.

    Parameters
    ----------
    name
        The headline's name; the history compares recordings by it.
    value
        The number (or pass ``value`` inside ``details``, as an estimate's dict does).
    unit
        Its unit.
    details
        ``low``, ``high``, ``baseline``, ``verdict`` and any other detail to keep.

    Example
    -------
    >>> headline("fused median", unit="µs", **result.estimate("cuDNN graph (fused)", "µs"))
    """
    if value is not None:
        details["value"] = value
    page().headline(name, unit=unit, **details)


def comparison(name: str, result: Any, baseline: str | None = None) -> None:
    """:meth:`Record.comparison` on the running example's record.

    Parameters
    ----------
    name
        The headline's name.
    result
        A :class:`~cudnn_guide.measure.compare.Comparison`.
    baseline
        The contender to compare with; default the best.

    Example
    -------
    >>> comparison("speed-up over best baseline", result)
    """
    page().comparison(name, result, baseline)


def keep(*measurements: Measurement | Iterable[Measurement], **extra: Any) -> None:
    """Keep measurements that were timed uncollected, and ``extra`` values, in the running example's record.

    Parameters
    ----------
    measurements
        :class:`~cudnn_guide.measure.measurement.Measurement` objects, or iterables of them.
    extra
        Values stored under the record's ``extra``.

    Example
    -------
    >>> keep(ceilings.copy, fresh_runs=runs)
    """
    rec = page()
    rec.add(*measurements)
    rec.extra.update(extra)


_COMPILED_BEFORE = 0.0


def begin() -> None:
    """Start collecting a new example's record (the docs build calls it before each example).

    Example
    -------
    >>> begin()
    """
    global _COMPILED_BEFORE
    _COMPILED_BEFORE = collector.compile_seconds()
    collector.start(Record("example"))


def take(example: str, title: str) -> Record | None:
    """Stop collecting and return the record, named ``example`` and titled; ``None`` if it recorded nothing.

    The docs build takes the record this way to add what only it knows (the re-recording drift of
    the site's history) before it writes it with :meth:`Record.write`; :func:`finish` does both.

    Parameters
    ----------
    example
        The example's file stem (``plot_02_conv_bias_relu``).
    title
        Its title (the first line of its docstring).

    Returns
    -------
    Record | None
        The collected record, with the seconds the example spent by kind of work.

    Example
    -------
    >>> begin(); page().headline("x", 1.0, "x"); take("plot_demo", "Demo").example
    'plot_demo'
    """
    rec = collector.stop()
    if rec is None or not (rec.checks or rec.measurements or rec.headlines or rec.extra):
        return None
    rec.example, rec.title = example, title
    compiling = collector.compile_seconds() - _COMPILED_BEFORE
    rec.seconds = {**collector.seconds_spent(), **({"compile": compiling} if compiling > 0 else {})}
    return rec


def finish(example: str, title: str, directory: str | os.PathLike[str] | None = None) -> Path | None:
    """Write the collected record as ``<example>.record.json``; ``None`` if the example recorded nothing.

    Parameters
    ----------
    example
        The example's file stem (``plot_02_conv_bias_relu``).
    title
        Its title (the first line of its docstring).
    directory
        Where to write; default :func:`record_dir`.

    Returns
    -------
    Path | None
        The file written.

    Example
    -------
    >>> begin(); page().headline("x", 1.0, "x"); finish("plot_demo", "Demo", tmp_path)
    """
    rec = take(example, title)
    return None if rec is None else rec.write(directory)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a record, checking its schema.

    Parameters
    ----------
    path
        A ``*.record.json`` file.

    Returns
    -------
    dict[str, Any]
        The record.

    Raises
    ------
    ValueError
        Not a cudnn-guide record, or a newer schema than this package understands.

    Example
    -------
    >>> rec = load('docs/auto_examples/plot_02_conv_bias_relu.record.json')
    >>> print(rec['headlines'])
    """
    data = datafiles.read_json(path)
    if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} file")
    if int(data.get("schema_version", 0)) > SCHEMA_VERSION:
        raise ValueError(
            f"{path}: schema version {data['schema_version']} is newer than {SCHEMA_VERSION}; upgrade cudnn-guide"
        )
    return dict(data)
