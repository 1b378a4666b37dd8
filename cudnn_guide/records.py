"""Machine-readable records of what each example measured.

Each example writes one schema-versioned JSON file next to its recorded page: the environment,
every measurement with its raw samples and units, every correctness check, and the headline
numbers its prose quotes. Pages, the results table and the history are all built from these
files, never from numbers typed by hand.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from .bench import Measurement
from .check import CheckResult

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Record", "record_dir", "load", "RECORD_SUFFIX"]

SCHEMA = "cudnn-guide/record"
SCHEMA_VERSION = 1
RECORD_SUFFIX = ".record.json"


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

    def add(self, *measurements: Measurement | Iterable[Measurement]) -> None:
        for m in measurements:
            if isinstance(m, Measurement):
                self.measurements.append(m)
            else:
                self.measurements.extend(m)

    def add_check(self, result: CheckResult) -> CheckResult:
        self.checks.append(result)
        return result

    def headline(self, name: str, value: float, unit: str, *, baseline: str = "", **details: Any) -> float:
        """Register a number the page's prose quotes; returns ``value`` for use in the text."""
        self.headlines.append({"name": name, "value": float(value), "unit": unit, "baseline": baseline, **details})
        return value

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
        }

    def write(self, directory: str | os.PathLike[str] | None = None) -> Path:
        """Write ``<example>.record.json`` and return its path."""
        out = Path(directory) if directory is not None else record_dir()
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.example}{RECORD_SUFFIX}"
        path.write_text(json.dumps(self.to_dict(), separators=(",", ":"), default=_json_default) + "\n", encoding="utf-8")
        return path


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
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} file")
    if int(data.get("schema_version", 0)) > SCHEMA_VERSION:
        raise ValueError(f"{path}: schema version {data['schema_version']} is newer than {SCHEMA_VERSION}; upgrade cudnn-guide")
    return dict(data)
