"""The shape of the recording's data files, checked when the build reads them.

A file that parses can still be of the wrong shape: a record that is ``[]``, an environment that
is a string, a headline of NaN or a negative median, or a GPU name that carries HTML. Each of the
``check_*`` functions here takes a parsed document and raises :class:`SchemaError` with the
field's path; :func:`validate_file` reads a file, checks it, and turns the first problem into
:class:`~cudnn_guide.errors.CorruptDataError` naming ``file:line`` and the field.

The rules follow the writers: :class:`cudnn_guide.report.records.Record` (records),
:func:`gallery_build.manifest.write_manifest` and :mod:`gallery_build.shards` (``recording.json``),
:mod:`gallery_build.cell_times` (``*.cells.json``), sphinx-gallery (``*.cost.json``) and
:mod:`gallery_build.history` (``history.jsonl``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from json.decoder import scanstring
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles
from cudnn_guide.errors import CorruptDataError
from cudnn_guide.report.records import POSITIVE_UNITS, SCHEMA, VERDICTS

__all__ = [
    "SchemaError",
    "PLACEHOLDERS",
    "DRIFT_BASES",
    "check_environment",
    "check_record",
    "check_manifest",
    "check_cells",
    "check_cost",
    "check_history_line",
    "validate_file",
    "validate_jsonl",
    "validate_rst",
    "rst_text",
]

DRIFT_BASES = ("own", "page", "site", "none")
"""Where a widened headline's ``drift`` came from (:func:`gallery_build.drift_bands.drift_basis`)."""

PLACEHOLDERS = frozenset({"unknown", "none", "None"})
"""What a writer puts where a commit or version could not be found (``git_commit``, ``str(None)``)."""

COMMIT = re.compile(r"[0-9a-f]{7,40}(\+dirty)?")
"""A git commit: 7–40 hex digits, ``+dirty`` when the code had uncommitted changes."""
GPU_NAME = re.compile(r"[A-Za-z0-9 \-_.()/,@+]{1,120}")
"""A GPU name as the driver reports it: letters, digits, spaces and ``-_.()/,@+``."""
VERSION = re.compile(r"[0-9]+(\.[0-9A-Za-z]+)*([+\-][0-9A-Za-z.+\-_]+)?")
"""A version: ``13.0``, ``580.159.04``, ``2.11.0+cu130``, ``1.32.0``."""
DATE_UTC = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC")
"""``EnvironmentRecord.date_utc``."""
MERGED_FROM = re.compile(rf"{GPU_NAME.pattern} @ ({COMMIT.pattern}|{'|'.join(sorted(PLACEHOLDERS))})")
"""An entry of a merged manifest's ``merged_from``: the shard's GPU and commit."""
EXAMPLE = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
"""An example's file name or stem."""
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""What no recorded free-text string may hold: C0 and C1 control characters (newline, tab, carriage
return among them), DEL, and the Unicode line and paragraph separators, which reST reads as line breaks."""

_VERSION_FIELDS = ("driver", "cuda", "torch", "cudnn_backend", "cudnn_frontend", "python")
_MEASUREMENT_POSITIVE = ("median_ms", "q1_ms", "q3_ms", "p10_ms", "p90_ms", "min_ms")
_FIX = "restore it from git (`git checkout -- <file>`) or re-record the page on a GPU"


class SchemaError(ValueError):
    """A field of a parsed document breaks its rule.

    Attributes
    ----------
    field:
        The field's path, as a tuple of keys and list indices.
    problem:
        What is wrong with it.

    Example
    -------
    >>> try:
    ...     check_record([])
    ... except SchemaError as exc:
    ...     print(exc.dotted, exc.problem)
    <document> must be a JSON object, found list []
    """

    def __init__(self, field: tuple[str | int, ...], problem: str) -> None:
        self.field, self.problem = field, problem
        super().__init__(f"field {self.dotted!r}: {problem}")

    @property
    def dotted(self) -> str:
        """The field's path as text: ``headlines[2].value`` (``<document>`` for the whole file)."""
        out = ""
        for step in self.field:
            out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
        return out or "<document>"


# -- building blocks -----------------------------------------------------------------------------
Path_ = tuple[str | int, ...]


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an integer too long for repr (Python's limit on int-to-str digits)
        return f"an integer of {value.bit_length()} bits"
    return text if len(text) <= 60 else text[:57] + "..."


def _obj(value: Any, at: Path_, required: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SchemaError(at, f"must be a JSON object, found {type(value).__name__} {_show(value)}")
    for key in required:
        if key not in value:
            raise SchemaError((*at, key), "is missing")
    return value


def _list(value: Any, at: Path_) -> list[Any]:
    if not isinstance(value, list):
        raise SchemaError(at, f"must be a JSON list, found {type(value).__name__} {_show(value)}")
    return value


def _str(
    value: Any, at: Path_, pattern: re.Pattern[str] | None = None, what: str = "", *, multiline: bool = False
) -> str:
    if not isinstance(value, str):
        raise SchemaError(at, f"must be a string, found {type(value).__name__} {_show(value)}")
    bad = None if multiline else CONTROL.search(value)
    if bad is not None:
        raise SchemaError(
            at,
            f"holds the control character {bad.group()!r} at offset {bad.start()} ({_show(value)}): "
            "a recorded name, label, unit or title is one line of plain text",
        )
    if pattern is not None and not pattern.fullmatch(value):
        raise SchemaError(at, f"{_show(value)} is not {what}")
    return value


def _num(value: Any, at: Path_, *, positive: bool = False, nonneg: bool = False, integer: bool = False) -> float:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise SchemaError(at, f"must be {kind}, found {type(value).__name__} {_show(value)}")
    try:
        value = float(value)
    except OverflowError:  # a JSON integer beyond a float's range (10**400)
        raise SchemaError(
            at, f"is too large: an integer of {value.bit_length()} bits, beyond a float's range"
        ) from None
    if not math.isfinite(value):
        raise SchemaError(at, f"must be a finite number, found {value}")
    if positive and not value > 0:
        raise SchemaError(at, f"must be positive (a time, rate or ratio), found {value:g}")
    if nonneg and value < 0:
        raise SchemaError(at, f"must not be negative, found {value:g}")
    return value


def _placeholder(value: Any) -> bool:
    """Whether ``value`` is a writer's placeholder (a string: a list or object is never one, nor hashable)."""
    return isinstance(value, str) and value in PLACEHOLDERS


def _commit(value: Any, at: Path_) -> None:
    if not _placeholder(value):
        _str(value, at, COMMIT, "a git commit (7-40 hex digits, optionally +dirty, or 'unknown')")


def _software(value: Any, at: Path_) -> None:
    for key, version in _obj(value, at).items():
        _str(key, (*at, key))
        if not _placeholder(version):
            _str(version, (*at, key), VERSION, "a version (like 13.0, 580.159.04 or 2.11.0+cu130)")


def _texts(value: Any, at: Path_) -> None:
    """Every string in ``value`` (nested lists and objects, keys included) is one line of plain text."""
    if isinstance(value, str):
        _str(value, at)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _texts(item, (*at, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            _str(key, (*at, key))
            _texts(item, (*at, key))


def _seconds_map(value: Any, at: Path_) -> None:
    for name, seconds in _obj(value, at).items():
        _num(seconds, (*at, name), nonneg=True)


# -- documents ------------------------------------------------------------------------------------
def check_environment(env: Any, at: Path_ = ("environment",)) -> None:
    """Check a recording environment (``EnvironmentRecord.to_dict()``): its GPU name, commit and versions.

    ``gpu`` and ``commit`` are required; every other known field is checked when present. These
    strings reach every page's stamp and footer, so they must match strict patterns.

    Parameters
    ----------
    env
        The parsed environment.
    at
        Its path in the document, for the message.

    Raises
    ------
    SchemaError
        The first field that breaks its rule.

    Example
    -------
    >>> check_environment({"gpu": "NVIDIA H200", "commit": "f62a656"})
    """
    env = _obj(env, at, ("gpu", "commit"))
    _str(env["gpu"], (*at, "gpu"), GPU_NAME, "a GPU name (letters, digits, spaces and -_.()/,@+)")
    _commit(env["commit"], (*at, "commit"))
    for key in _VERSION_FIELDS + ("sm",):
        if key in env and not _placeholder(env[key]):
            _str(env[key], (*at, key), VERSION, "a version (like 13.0, 580.159.04 or 2.11.0+cu130)")
    if "date_utc" in env:
        _str(env["date_utc"], (*at, "date_utc"), DATE_UTC, "a date like '2026-12-01 09:20 UTC'")
    for key in ("sm_count", "memory_gib", "l2_mib"):
        if key in env:
            _num(env[key], (*at, key), nonneg=True)
    for key in ("libcudnn", "platform"):
        if key in env:
            _str(env[key], (*at, key))


def _check_headline(h: Any, at: Path_, signs: bool = True) -> None:
    h = _obj(h, at, ("name", "value", "unit"))
    _str(h["name"], (*at, "name"))
    unit = _str(h["unit"], (*at, "unit"))
    positive = signs and (unit in POSITIVE_UNITS or (unit.endswith("/s") and "signed" not in unit))
    value = _num(h["value"], (*at, "value"), positive=positive)
    for key in ("baseline", "kind", "interval", "candidate_measurement", "baseline_measurement", "measurement"):
        if h.get(key) is not None:
            _str(h[key], (*at, key))
    if ("low" in h) != ("high" in h):
        raise SchemaError((*at, "high" if "low" in h else "low"), "an interval needs both low and high")
    if "low" in h:
        low = _num(h["low"], (*at, "low"), positive=positive)
        high = _num(h["high"], (*at, "high"), positive=positive)
        if not low <= value <= high:
            raise SchemaError((*at, "value"), f"{value:g} lies outside its interval [{low:g}, {high:g}]")
    if "run_low" in h or "run_high" in h:  # the run's own interval, before the drift widened it
        run_low = _num(h.get("run_low"), (*at, "run_low"), positive=positive)
        run_high = _num(h.get("run_high"), (*at, "run_high"), positive=positive)
        if not run_low <= value <= run_high:
            raise SchemaError((*at, "value"), f"{value:g} lies outside its run's interval [{run_low:g}, {run_high:g}]")
    if h.get("kind") == "comparison":
        for key in ("low", "high", "verdict"):
            if key not in h:
                raise SchemaError((*at, key), "is missing (a comparison carries low, high and verdict)")
    for key in ("verdict", "run_verdict"):
        if key in h and not (isinstance(h[key], str) and h[key] in VERDICTS):
            raise SchemaError((*at, key), f"{_show(h[key])} is not one of {', '.join(VERDICTS)}")
    for key in ("drift", "tie_band"):
        if key in h:
            _num(h[key], (*at, key), nonneg=True)
    if "drift_basis" in h and h["drift_basis"] not in DRIFT_BASES:
        raise SchemaError((*at, "drift_basis"), f"{_show(h['drift_basis'])} is not one of {', '.join(DRIFT_BASES)}")
    if "rounds" in h:
        _num(h["rounds"], (*at, "rounds"), positive=True, integer=True)


def _check_measurement(m: Any, at: Path_) -> None:
    m = _obj(m, at, ("label", "unit", "n", "median_ms"))
    _str(m["label"], (*at, "label"))
    _str(m["unit"], (*at, "unit"))
    _num(m["n"], (*at, "n"), positive=True, integer=True)
    if m.get("mode") is not None:
        _str(m["mode"], (*at, "mode"))
    if "params" in m:  # the chooser and the tables read it as an object
        _texts(_obj(m["params"], (*at, "params")), (*at, "params"))
    if "warnings" in m:  # the measurement notes read each warning as text
        for i, warning in enumerate(_list(m["warnings"], (*at, "warnings"))):
            _str(warning, (*at, "warnings", i))
    if m.get("clocks") is not None:
        clocks = _obj(m["clocks"], (*at, "clocks"))
        for key in ("sm_mhz_end", "max_sm_mhz"):
            if clocks.get(key) is not None:
                _num(clocks[key], (*at, "clocks", key), nonneg=True)
    for key in _MEASUREMENT_POSITIVE:
        if key in m:
            _num(m[key], (*at, key), positive=True)
    for key in ("host_median_ms", "tflops", "gbps", "flops", "bytes"):
        if m.get(key) is not None:
            _num(m[key], (*at, key), nonneg=True)
    if m.get("launch_cost_ms") is not None:
        _num(m["launch_cost_ms"], (*at, "launch_cost_ms"), nonneg=True)
    for key in ("samples_ms", "host_samples_ms", "median_ci_ms"):
        if m.get(key) is not None:
            for i, x in enumerate(_list(m[key], (*at, key))):
                _num(x, (*at, key, i), positive=True)


def check_record(data: Any) -> None:
    """Check an example's record (``*.record.json``, as :meth:`Record.to_dict` writes it).

    Parameters
    ----------
    data
        The parsed record.

    Raises
    ------
    SchemaError
        The first field that breaks its rule.

    Example
    -------
    >>> check_record(json.loads(Path("docs/auto_examples/plot_02_conv_bias_relu.record.json").read_text()))
    """
    required = ("schema", "example", "environment", "checks", "all_checks_passed", "headlines", "measurements")
    data = _obj(data, (), required)
    if data["schema"] != SCHEMA:
        raise SchemaError(("schema",), f"{_show(data['schema'])} is not {SCHEMA!r}")
    if "schema_version" in data:
        _num(data["schema_version"], ("schema_version",), positive=True, integer=True)
    _str(data["example"], ("example",), EXAMPLE, "an example's name")
    if "title" in data:
        _str(data["title"], ("title",))
    if data["environment"] is not None:
        check_environment(data["environment"])
    for i, c in enumerate(_list(data["checks"], ("checks",))):
        c = _obj(c, ("checks", i), ("name", "passed"))
        _str(c["name"], ("checks", i, "name"))
        if not isinstance(c["passed"], bool):
            raise SchemaError(("checks", i, "passed"), f"must be true or false, found {_show(c['passed'])}")
    if not isinstance(data["all_checks_passed"], bool):
        raise SchemaError(("all_checks_passed",), f"must be true or false, found {_show(data['all_checks_passed'])}")
    for i, h in enumerate(_list(data["headlines"], ("headlines",))):
        _check_headline(h, ("headlines", i))
    for i, m in enumerate(_list(data["measurements"], ("measurements",))):
        _check_measurement(m, ("measurements", i))
    if "extra" in data:
        _obj(data["extra"], ("extra",))
    if "seconds" in data:
        _seconds_map(data["seconds"], ("seconds",))


def check_manifest(data: Any) -> None:
    """Check ``recording.json`` (:func:`~gallery_build.manifest.write_manifest`, shards' merge).

    Parameters
    ----------
    data
        The parsed manifest.

    Raises
    ------
    SchemaError
        The first field that breaks its rule.

    Example
    -------
    >>> check_manifest(json.loads(Path("docs/auto_examples/recording.json").read_text()))
    """
    data = _obj(data, (), ("environment", "examples"))
    if data["environment"] is not None:
        check_environment(data["environment"])
    for name, md5 in _obj(data["examples"], ("examples",)).items():
        _str(name, ("examples", name), EXAMPLE, "an example's file name")
        _str(md5, ("examples", name), re.compile(r"[0-9a-f]{32}"), "an md5 digest")
    if "recorded_utc" in data:
        _str(data["recorded_utc"], ("recorded_utc",))
    if data.get("build_seconds") is not None:
        _num(data["build_seconds"], ("build_seconds",), positive=True)
    for key in ("example_seconds", "last_run_seconds"):
        if key in data:
            _seconds_map(data[key], (key,))
    if data.get("full_recording") is not None:
        full = _obj(data["full_recording"], ("full_recording",), ("seconds",))
        _num(full["seconds"], ("full_recording", "seconds"), positive=True)
        if full.get("commit") is not None:
            _commit(full["commit"], ("full_recording", "commit"))
        if full.get("interpreters_start_seconds") is not None:
            _num(full["interpreters_start_seconds"], ("full_recording", "interpreters_start_seconds"), nonneg=True)
        if full.get("gpus") is not None:
            _num(full["gpus"], ("full_recording", "gpus"), positive=True, integer=True)
    if "package_md5" in data:
        _str(data["package_md5"], ("package_md5",), re.compile(r"[0-9a-f]{32}"), "an md5 digest")
    for name, page in _obj(data.get("pages", {}), ("pages",)).items():  # pages merged from shards
        check_environment(page, ("pages", name))
        if page.get("software") is not None:
            _software(page["software"], ("pages", name, "software"))
    for i, source in enumerate(_list(data.get("merged_from", []), ("merged_from",))):
        _str(source, ("merged_from", i), MERGED_FROM, "'<GPU name> @ <commit>'")


def check_cells(data: Any) -> None:
    """Check a page's seconds per cell (``*.cells.json``, :mod:`gallery_build.cell_times`).

    Parameters
    ----------
    data
        The parsed file.

    Raises
    ------
    SchemaError
        The first field that breaks its rule.

    Example
    -------
    >>> check_cells({"example": "plot_02.py", "cells": [{"line": 28, "code": "import torch", "seconds": 0.05}]})
    """
    data = _obj(data, (), ("example", "cells"))
    _str(data["example"], ("example",), EXAMPLE, "an example's file name")
    for i, cell in enumerate(_list(data["cells"], ("cells",))):
        cell = _obj(cell, ("cells", i), ("line", "code", "seconds"))
        _num(cell["line"], ("cells", i, "line"), positive=True, integer=True)
        _str(cell["code"], ("cells", i, "code"), multiline=True)  # source code: may hold tabs
        _num(cell["seconds"], ("cells", i, "seconds"), nonneg=True)  # rounded to ms: 0.0 is a fast cell


def check_cost(data: Any) -> None:
    """Check a page's run time (sphinx-gallery's ``*.cost.json``).

    Parameters
    ----------
    data
        The parsed file.

    Raises
    ------
    SchemaError
        The first field that breaks its rule.

    Example
    -------
    >>> check_cost({"memory": 0.0, "time": 13.2})
    """
    data = _obj(data, (), ("time",))
    _num(data["time"], ("time",), positive=True)
    if "memory" in data:
        _num(data["memory"], ("memory",), nonneg=True)


def check_history_line(data: Any) -> None:
    """Check one line of a history file (``docs/data/*history.jsonl``, :mod:`gallery_build.history`).

    Parameters
    ----------
    data
        The parsed line.

    Raises
    ------
    SchemaError
        The first field that breaks its rule.

    Example
    -------
    >>> check_history_line({"example": "plot_02", "commit": "f62a656", "gpu": "NVIDIA H200", "measurements": {}})
    """
    data = _obj(data, (), ("example", "commit", "gpu", "measurements"))
    _str(data["example"], ("example",), EXAMPLE, "an example's name")
    check_environment({"gpu": data["gpu"], "commit": data["commit"]}, ())
    if data.get("software") is not None:
        _software(data["software"], ("software",))
    for label, m in _obj(data["measurements"], ("measurements",)).items():
        _str(label, ("measurements", label))
        m = _obj(m, ("measurements", label), ("median_ms",))
        for key in ("median_ms", "q1_ms", "q3_ms"):
            if key in m:
                _num(m[key], ("measurements", label, key), positive=True)
    for i, h in enumerate(_list(data.get("headlines") or [], ("headlines",))):
        # finite, but not sign-checked: early recordings kept a signed difference in µs
        _check_headline(h, ("headlines", i), signs=False)


# -- files ----------------------------------------------------------------------------------------
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _offset(text: str, field: Path_) -> int:
    """Where ``field`` starts in the JSON ``text`` (its closest enclosing value when it is missing)."""
    pos = _WS.match(text, 0).end()
    for step in field:
        opening = text[pos : pos + 1]
        if opening not in "{[" or (opening == "{") != isinstance(step, str):
            return pos
        start, pos, index = pos, _WS.match(text, pos + 1).end(), 0
        while text[pos] not in "}]":
            if opening == "{":
                key, pos = scanstring(text, pos + 1)
                pos = _WS.match(text, _WS.match(text, pos).end() + 1).end()  # past the colon
                if key == step:
                    break
            elif index == step:
                break
            pos = _WS.match(text, _DECODER.raw_decode(text, pos)[1]).end()
            pos = _WS.match(text, pos + 1).end() if text[pos] == "," else pos
            index += 1
        else:
            return start
    return pos


def _line_of(path: Path, field: Path_) -> int | None:
    try:
        text = path.read_text(encoding="utf-8")
        return text.count("\n", 0, _offset(text, field)) + 1
    except (OSError, ValueError, IndexError):
        return None


def validate_file(path: str | Path, check: Callable[[Any], None]) -> Any:
    """Read one JSON file and check its shape; return it.

    Parameters
    ----------
    path
        The file.
    check
        One of the ``check_*`` functions.

    Returns
    -------
    Any
        The parsed, checked document.

    Raises
    ------
    CorruptDataError
        It does not parse, or a field breaks its rule: the message names ``file:line`` and the field.

    Example
    -------
    >>> validate_file(Path("docs/auto_examples/recording.json"), check_manifest)["environment"]["gpu"]
    'NVIDIA H200'
    """
    path = Path(path)
    data = datafiles.read_json(path)
    try:
        check(data)
    except SchemaError as exc:
        raise CorruptDataError(path, str(exc), line=_line_of(path, exc.field), fix=_FIX) from None
    return data


def validate_jsonl(path: str | Path, check: Callable[[Any], None]) -> list[Any]:
    """:func:`validate_file` for a JSON-lines file: each line parsed and checked, its number named."""
    path = Path(path)
    entries = datafiles.read_jsonl(path)
    numbers = [
        n for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1) if line.strip()
    ]
    for number, entry in zip(numbers, entries):
        try:
            check(entry)
        except SchemaError as exc:
            fix = "repair or delete that line (each line is one recording's entry), or restore the file from git"
            raise CorruptDataError(path, str(exc), line=number, fix=fix) from None
    return entries


def validate_rst(path: str | Path) -> str:
    """Read a recorded page (``.rst``) as UTF-8 text.

    Parameters
    ----------
    path
        The page.

    Returns
    -------
    str
        Its text.

    Raises
    ------
    CorruptDataError
        It is not valid UTF-8: the message names the file and the line of the first bad byte.

    Example
    -------
    >>> text = validate_rst(Path("docs/auto_examples/plot_02_conv_bias_relu.rst"))
    """
    path = Path(path)
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptDataError(
            path,
            f"not valid UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start}: {exc.reason})",
            line=raw.count(b"\n", 0, exc.start) + 1,
            fix="re-record or restore it with git checkout (`git checkout -- <file>`)",
        ) from None


_RST_MARKUP = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character, backslash included


def rst_text(text: Any) -> str:
    """A recorded string as reST that renders as that text, with no markup of its own.

    The schema keeps control characters out of recorded names; this is the second guard, where
    the text meets reST: any line break or control character becomes a space (a name stays on its
    bullet's line, so it cannot open a directive such as ``.. raw:: html``), and every ASCII
    punctuation character is backslash-escaped, so ``*``, a backquote, ``|``, ``_``, ``:`` or a leading
    ``-`` or ``1.`` is shown, not read as emphasis, a role, a substitution, a reference or a list.

    Parameters
    ----------
    text
        The recorded string (anything else is shown as ``str(text)``).

    Returns
    -------
    str
        One line of reST.

    Example
    -------
    >>> rst_text("cuDNN *fused* | S=1_")
    'cuDNN \\\\*fused\\\\* \\\\| S\\\\=1\\\\_'
    """
    return _RST_MARKUP.sub(r"\\\1", " ".join(CONTROL.sub(" ", str(text)).split()))
