"""The history of recordings, and which numbers moved between them.

Every recording run appends one entry per example to a committed JSON-lines file
(``docs/data/history.jsonl``): when, at which commit, on which GPU, and for each measurement its
median and inter-quartile range. :func:`changes` compares each example's latest entry with the
one before and flags a measurement that moved beyond its noise band.

Two recordings are compared only when they timed a measurement the same way: a measurement
whose launch cost was subtracted in one and not in the other (recordings made before the
harness subtracted it), or that two versions of the harness timed
(:data:`~cudnn_guide.measure.measurement.TIMING_METHOD`, when both entries carry it), is listed with
``same_method`` false and never flagged as moved.

Two recordings of an example whose code differs (:func:`code_digest`, when both entries carry
it) are not compared either: a changed example measures something else (another compile mode,
another size), and counting that as a recording's change would report a method change as
irreproducibility, and widen every later interval by it (:mod:`gallery_build.drift_bands`).
Two recordings on different GPUs, or with different software (:data:`SOFTWARE_KEYS`), measured
two machines: :func:`changes` and :func:`reproducibility` leave such a pair out
(:func:`comparable` says why).

Every line is checked as it is read (:func:`check_entry`): one of another shape, or holding a NaN
or an infinity, stops the reader with its file, line and field instead of counting as unmoved.

The noise band of a measurement is the larger of the two recordings' inter-quartile ranges,
times 1.5, and never less than 2% of the earlier median: a change inside it is what repeating
the same run can produce; a change outside it needs an explanation (a new driver, a changed
example, a regression).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles
from cudnn_guide.report.records import RECORD_SUFFIX
from gallery_build import lesson

__all__ = [
    "SOFTWARE_KEYS",
    "code_digest",
    "comparable",
    "reproducibility",
    "format_reproducibility",
    "BAND_IQR_FACTOR",
    "BAND_MIN_FRACTION",
    "entry_from_record",
    "entries_from_gallery",
    "append",
    "replace",
    "load",
    "check_entry",
    "compare",
    "by_example",
    "changes",
]

SOFTWARE_KEYS = ("driver", "cuda", "cudnn_backend", "cudnn_frontend", "torch")
"""What must match, besides the GPU, for two recordings to be compared."""
BAND_IQR_FACTOR = 1.5
BAND_MIN_FRACTION = 0.02


def code_digest(source: str) -> str:
    """The md5 of an example's code alone: its syntax tree without the module docstring.

    Comments (a sphinx-gallery page's text blocks), the docstring and layout do not change it; any
    change to what runs does. The tree is written out field by field, leaving out empty ones, so
    the digest is the same on every Python that parses the code alike (``ast.dump`` is not: 3.12
    added ``type_params=[]`` to every function).

    Parameters
    ----------
    source
        The example's Python source.

    Returns
    -------
    str
        Hex digest.

    Example
    -------
    >>> code_digest("x = 1  # a comment") == code_digest("x = 1")
    True
    """
    tree = ast.parse(source)
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        tree.body = tree.body[1:]
    return hashlib.md5(_canonical(tree).encode()).hexdigest()


def measuring_digest(source: str) -> str | None:
    """:func:`code_digest` of the page's code from its first "Measuring ..." cell on: what produces its
    numbers. ``None`` for a page without such a cell.

    Two recordings whose examples differ only in the lesson before that cell (the copyable code a
    reader learns from, checked but not timed) measured the same thing, and are compared.

    Example
    -------
    >>> page = "x = 1\n# %%\n# Measuring it\ny = 2\n"
    >>> measuring_digest(page) == measuring_digest(page.replace("x = 1", "x = 3"))
    True
    """
    lines = source.splitlines()
    cut = lesson.measuring_cut(lines)
    return None if cut is None else code_digest("\n".join(lines[cut:]) + "\n")


def _canonical(node: Any) -> str:
    """A syntax tree as text: each node's type and its non-empty fields, in order."""
    if isinstance(node, ast.AST):
        fields = ((name, _canonical(getattr(node, name, None))) for name in node._fields)
        return f"{type(node).__name__}(" + ",".join(f"{n}={v}" for n, v in fields if v not in ("None", "[]")) + ")"
    if isinstance(node, list):
        return "[" + ",".join(_canonical(item) for item in node) + "]"
    return repr(node)


def _same_code(prev: dict[str, Any], cur: dict[str, Any]) -> bool:
    """Whether two entries ran the same measuring code: the same example (:func:`code_digest`), or one
    whose only change is its lesson (:func:`measuring_digest`); true where either does not say."""
    if not prev.get("code_md5") or not cur.get("code_md5") or prev["code_md5"] == cur["code_md5"]:
        return True
    return bool(prev.get("measure_md5")) and prev.get("measure_md5") == cur.get("measure_md5")


def lesson_only(prev: dict[str, Any], cur: dict[str, Any]) -> bool:
    """Whether two entries' examples differ in their lesson alone (their measuring code is the same)."""
    return bool(prev.get("code_md5")) and prev.get("code_md5") != cur.get("code_md5") and _same_code(prev, cur)


def entry_from_record(record: dict[str, Any]) -> dict[str, Any]:
    """The history entry of one example record: its measurements reduced to median and IQR.

    Parameters
    ----------
    record
        A loaded example record.

    Returns
    -------
    dict[str, Any]
        The history entry.

    Example
    -------
    >>> entry = entry_from_record(records.load(path))
    """
    env = record.get("environment") or {}
    return {
        "example": record["example"],
        "recorded_utc": record.get("created_utc"),
        "commit": env.get("commit"),
        "gpu": env.get("gpu"),
        "software": {k: env.get(k) for k in SOFTWARE_KEYS},
        "measurements": {
            m["label"]: {
                "median_ms": m["median_ms"],
                "q1_ms": m["q1_ms"],
                "q3_ms": m["q3_ms"],
                "n": m["n"],
                "launch_cost_ms": m.get("launch_cost_ms", 0.0),
                "timing_method": m.get("timing_method"),
                "mode": m.get("mode"),
            }
            for m in record.get("measurements", [])
        },
        "headlines": record.get("headlines", []),
    }


def entries_from_gallery(gallery_dir: Path, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """History entries for the records in ``gallery_dir`` (all, or the examples in ``names``).

    Parameters
    ----------
    gallery_dir
        Directory of ``*.record.json``.
    names
        Example file names to include; default all.

    Returns
    -------
    list[dict[str, Any]]
        One entry per record.

    Example
    -------
    >>> append(Path('docs/data/history.jsonl'), entries_from_gallery(Path('docs/auto_examples')))
    """
    wanted = None if names is None else {Path(n).stem for n in names}
    out = []
    for path in sorted(Path(gallery_dir).glob(f"*{RECORD_SUFFIX}")):
        record = datafiles.read_json(path)
        if wanted is None or record["example"] in wanted:
            entry = entry_from_record(record)
            source = Path(gallery_dir) / f"{record['example']}.py"  # the copy of the example that ran
            if source.exists():
                text = source.read_text(encoding="utf-8")
                entry["code_md5"] = code_digest(text)
                measuring = measuring_digest(text)
                if measuring:
                    entry["measure_md5"] = measuring
            out.append(entry)
    return out


def append(history_path: Path, entries: Iterable[dict[str, Any]]) -> None:
    """Append entries to the JSON-lines history, creating it if needed (locked, newline-safe).

    Parameters
    ----------
    history_path
        The JSON-lines file.
    entries
        Entries to add.

    Example
    -------
    >>> append(Path('docs/data/history.jsonl'), entries)
    """
    datafiles.append_lines(history_path, [json.dumps(e, separators=(",", ":")) for e in entries])


def replace(history_path: Path, entries: dict[Any, dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> int:
    """Put ``entries`` in place of the history's lines with the same ``key``; every other line stays as it is.

    A shard merged again after :func:`gallery_build.shards.rewiden` carries the same recordings with
    their intervals widened again: its lines replace the old ones, in place, rather than being
    added twice (which would compare a recording with itself) or skipped (which would leave the
    next recording compared with the old intervals).

    Parameters
    ----------
    history_path
        The JSON-lines file.
    entries
        ``key(entry)`` → the entry to write there.
    key
        What names an entry (``shards._entry_key``: example, time, GPU and commit).

    Returns
    -------
    int
        How many lines changed.

    Example
    -------
    >>> replace(Path("docs/data/history.jsonl"), {k: e}, key=lambda e: (e["example"], e["recorded_utc"]))
    """
    if not entries:  # nothing merged before: the history is not read
        return 0
    lines = Path(history_path).read_text(encoding="utf-8").splitlines()
    changed = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        old = json.loads(line)
        new = entries.get(key(old))
        if new is not None and new != old:
            lines[i] = json.dumps(new, separators=(",", ":"))
            changed += 1
    if changed:
        datafiles.write_text(history_path, "\n".join(lines) + "\n")
    return changed


def load(history_path: Path) -> list[dict[str, Any]]:
    """Every entry of the JSON-lines history, oldest first (an empty list if there is none).

    Parameters
    ----------
    history_path
        The JSON-lines file.

    Returns
    -------
    list[dict[str, Any]]
        The entries, oldest first.

    Raises
    ------
    CorruptDataError
        A line that is not JSON, or not an entry (:func:`check_entry`: another shape, a NaN or
        infinite number); the message names the file, the line and the field.

    Example
    -------
    >>> hist = load(Path('docs/data/history.jsonl'))
    """
    path = Path(history_path)
    entries = datafiles.read_jsonl(path)
    if entries:  # read_jsonl skips blank lines: number the others again to name the bad one
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        numbers = [n for n, line in enumerate(lines, 1) if line.strip()]
        for number, entry in zip(numbers, entries):
            check_entry(entry, path, number)
    return entries


_NUMBERS = ("median_ms", "q1_ms", "q3_ms")
"""What every measurement of an entry carries, as numbers (:func:`compare` reads them)."""


def check_entry(entry: Any, path: str | Path, line: int | None = None) -> dict[str, Any]:
    """Refuse a history line that is not an entry: the shape :func:`compare` reads, every number finite.

    A line can be valid JSON and still no entry (``[1, 2, 3]``, a measurement without its
    median); a NaN median compares as unchanged with anything, so a line of NaNs would count as
    a recording that reproduced. Both are refused by name instead of read.

    Parameters
    ----------
    entry
        One parsed line.
    path
        The file it came from (for the message).
    line
        Its line number (for the message).

    Returns
    -------
    dict[str, Any]
        ``entry``, checked.

    Raises
    ------
    CorruptDataError
        ``path:line``, the field and what is wrong with it.

    Example
    -------
    >>> check_entry([1, 2, 3], "h.jsonl", 4)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    cudnn_guide.errors.CorruptDataError: h.jsonl:4: not a history entry (a JSON list, not an object ...
    """
    from cudnn_guide.errors import CorruptDataError

    fix = "delete or repair that line (each line is one recording's entry), or restore the file from git"

    def refuse(problem: str) -> CorruptDataError:
        return CorruptDataError(path, problem, line=line, fix=fix)

    if not isinstance(entry, dict):
        kind = {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(entry), "number")
        raise refuse(f"not a history entry (a JSON {kind}, not an object with example and measurements)")
    if not isinstance(entry.get("example"), str) or not entry["example"]:
        raise refuse("field 'example' is missing or not a page name")
    if not isinstance(entry.get("measurements"), dict):
        raise refuse("field 'measurements' is missing or not an object of label -> numbers")
    for label, m in entry["measurements"].items():
        if not isinstance(m, dict):
            raise refuse(f"field measurements[{label!r}] is not an object")
        for key in _NUMBERS:
            if isinstance(m.get(key), bool) or not isinstance(m.get(key), (int, float)):
                raise refuse(f"field measurements[{label!r}].{key} is missing or not a number")
    if not isinstance(entry.get("headlines", []), list) or not all(
        isinstance(h, dict) and isinstance(h.get("name"), str) for h in entry.get("headlines", [])
    ):
        raise refuse("field 'headlines' is not a list of objects with a name")
    if not _plainly_finite(entry):  # the walk that names the field only for an entry that may need it
        for field, value in _numbers(entry, ""):
            if not math.isfinite(value):
                raise refuse(f"field {field} is {value} (a recording writes finite numbers only)")
    return entry


_PLAIN = (str, int, bool, type(None))
"""The types of a parsed line's leaves that hold no float (``bool`` is an ``int``; listed to read plainly)."""


def _plainly_finite(node: Any) -> bool:
    """Whether every number in a parsed line is finite, read without naming where each one is.

    ``True`` only for a tree of exactly ``dict``, ``list``, ``float`` and :data:`_PLAIN` leaves
    (what JSON parses to) with every float finite; anything else, a float subclass or another
    container among them, gives ``False``, and :func:`check_entry` walks it with :func:`_numbers`,
    which names the field it refuses. A history of a thousand lines holds some hundred thousand
    numbers: building each one's place (``measurements['k'].median_ms``) took most of
    :func:`load`'s time, and the docs' notebooks load the history a dozen times per build.
    """
    kind = type(node)
    if kind is dict:
        values = node.values()
    elif kind is list:
        values = node
    elif kind is float:
        return math.isfinite(node)
    else:
        return kind in _PLAIN
    for value in values:
        kind = type(value)
        if kind is float:
            if not math.isfinite(value):
                return False
        elif kind is dict or kind is list:
            if not _plainly_finite(value):
                return False
        elif kind not in _PLAIN:
            return False
    return True


def _numbers(node: Any, where: str) -> Iterable[tuple[str, float]]:
    """Every float inside a parsed line, with where it is (``measurements['k'].median_ms``)."""
    if isinstance(node, float):
        yield where, node
    elif isinstance(node, dict):
        for key, value in node.items():
            step = f"{where}.{key}" if where and isinstance(key, str) and key.isidentifier() else f"{where}[{key!r}]"
            yield from _numbers(value, step if where else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _numbers(value, f"{where}[{i}]")


def compare(prev: dict[str, Any], cur: dict[str, Any]) -> list[dict[str, Any]]:
    """Compare two history entries of one example, measurement by measurement.

    Parameters
    ----------
    prev
        The earlier entry.
    cur
        The later entry.

    Returns
    -------
    list[dict[str, Any]]
        One row per measurement present in both: the two medians, the change in percent, the
        noise band in percent, ``same_method`` (both subtracted a launch cost, or neither did, and
        the harness versions and the example's code match where both are known) and
        ``moved`` (the change exceeds the band, with the same method).

    Example
    -------
    >>> rows = compare(entries[0], entries[1])
    """
    rows = []
    same_code = _same_code(prev, cur)
    for label, c in cur["measurements"].items():
        p = prev["measurements"].get(label)
        if p is None or p["median_ms"] <= 0:
            continue
        delta = c["median_ms"] - p["median_ms"]
        iqr = max(p["q3_ms"] - p["q1_ms"], c["q3_ms"] - c["q1_ms"])
        band = max(BAND_IQR_FACTOR * iqr, BAND_MIN_FRACTION * p["median_ms"])
        same_method = (
            bool(p.get("launch_cost_ms")) == bool(c.get("launch_cost_ms"))
            and (
                p.get("timing_method") is None
                or c.get("timing_method") is None
                or p["timing_method"] == c["timing_method"]
            )
            and same_code
        )
        rows.append(
            {
                "example": cur["example"],
                "measurement": label,
                "previous_ms": p["median_ms"],
                "latest_ms": c["median_ms"],
                "change_pct": 100 * delta / p["median_ms"],
                "band_pct": 100 * band / p["median_ms"],
                "same_method": same_method,
                "moved": same_method and abs(delta) > band,
                "previous_commit": prev.get("commit"),
                "latest_commit": cur.get("commit"),
            }
        )
    return rows


def by_example(history: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each example's entries, oldest first.

    Parameters
    ----------
    history
        All entries (from :func:`load`).

    Returns
    -------
    dict[str, list[dict[str, Any]]]
        Example name → its entries in recording order.

    Example
    -------
    >>> first, *later = by_example(load(path))['plot_02_conv_bias_relu']
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for e in history:
        out.setdefault(e["example"], []).append(e)
    return {k: sorted(v, key=lambda e: e.get("recorded_utc") or "") for k, v in sorted(out.items())}


def changes(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each example, compare its latest entry with the previous one (:func:`compare`).

    Parameters
    ----------
    history
        All entries (from :func:`load`).

    Returns
    -------
    list[dict[str, Any]]
        One row per measurement in both of an example's last two entries, when :func:`comparable`
        allows the pair: two recordings on another GPU or with other software measured another
        machine, not a change, and give no row. A pair whose example's code changed keeps its
        rows, never moved (``same_method`` false), so the results page can count them apart.

    Example
    -------
    >>> moved = [r for r in changes(load(path)) if r['moved']]
    """
    rows = []
    for entries in by_example(history).values():
        if len(entries) < 2:
            continue
        prev, cur = entries[-2], entries[-1]
        if comparable(prev, cur) and not _other_code(prev, cur):
            continue  # another GPU or other software: the reason is comparable()'s, and there is no row
        rows += compare(prev, cur)
    return rows


def comparable(prev: dict[str, Any], cur: dict[str, Any]) -> str | None:
    """Why two entries of one example cannot be compared (another GPU, software or code), or ``None`` if they can.

    Parameters
    ----------
    prev
        The earlier history entry.
    cur
        The later one.

    Returns
    -------
    str | None
        The reason, naming both sides; ``None`` when GPU, software and the example's code
        (:func:`code_digest`) match, where both are known.

    Example
    -------
    >>> comparable({"gpu": "NVIDIA H200"}, {"gpu": "NVIDIA B200"})
    'recorded on different GPUs (NVIDIA H200 vs NVIDIA B200)'
    """
    if prev.get("gpu") != cur.get("gpu"):
        return f"recorded on different GPUs ({prev.get('gpu')} vs {cur.get('gpu')})"
    ps, cs = prev.get("software") or {}, cur.get("software") or {}
    differ = [f"{k} {ps[k]} vs {cs[k]}" for k in SOFTWARE_KEYS if ps.get(k) and cs.get(k) and ps[k] != cs[k]]
    if differ:
        return f"recorded with different software ({'; '.join(differ)})"
    return _other_code(prev, cur)


def _other_code(prev: dict[str, Any], cur: dict[str, Any]) -> str | None:
    """:func:`comparable`'s reason when the example's code changed between two entries, else ``None``."""
    if not _same_code(prev, cur):
        return f"the example's code changed ({str(prev.get('commit'))[:7]} vs {str(cur.get('commit'))[:7]})"
    return None


def reproducibility(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Does the latest recording of each page reproduce the one before it?

    For each example with two entries that :func:`comparable` allows: the measurements that moved
    beyond their noise band (:func:`compare`), the headlines whose new value lies outside the
    previous interval (``low``/``high``), and the verdicts that changed. Examples recorded on
    another GPU or software are listed as not compared, with the reason.

    Parameters
    ----------
    history
        All entries (from :func:`load`).

    Returns
    -------
    dict[str, Any]
        ``pages``, ``measurements``, ``moved``, ``headlines_with_interval``, ``headlines_inside``,
        ``outside`` (rows), ``verdicts``, ``flipped`` (rows), ``not_compared`` (rows), and
        ``lesson_only``: the examples compared although their lesson changed (the measuring code did not).

    Example
    -------
    >>> print(format_reproducibility(reproducibility(load(Path('docs/data/history.jsonl')))))
    """
    out: dict[str, Any] = {
        "pages": 0,
        "measurements": 0,
        "moved": [],
        "headlines_with_interval": 0,
        "headlines_inside": 0,
        "outside": [],
        "verdicts": 0,
        "flipped": [],
        "not_compared": [],
        "lesson_only": [],
    }
    for example, entries in sorted(by_example(history).items()):
        if len(entries) < 2:
            continue
        prev, cur = entries[-2], entries[-1]
        why = comparable(prev, cur)
        if why:
            out["not_compared"].append({"example": example, "reason": why})
            continue
        out["pages"] += 1
        if lesson_only(prev, cur):
            out["lesson_only"].append(example)
        rows = [r for r in compare(prev, cur) if r["same_method"]]
        out["measurements"] += len(rows)
        out["moved"] += [r for r in rows if r["moved"]]
        old = {h["name"]: h for h in prev.get("headlines", [])}
        for h in cur.get("headlines", []):
            o = old.get(h["name"])
            if o is None:
                continue
            if "low" in o and "high" in o:
                out["headlines_with_interval"] += 1
                if o["low"] <= h["value"] <= o["high"]:
                    out["headlines_inside"] += 1
                else:
                    out["outside"].append(
                        {
                            "example": example,
                            "headline": h["name"],
                            "previous": o["value"],
                            "low": o["low"],
                            "high": o["high"],
                            "latest": h["value"],
                        }
                    )
            if "verdict" in o and "verdict" in h:
                out["verdicts"] += 1
                if o["verdict"] != h["verdict"]:
                    out["flipped"].append(
                        {
                            "example": example,
                            "headline": h["name"],
                            "previous": o["verdict"],
                            "latest": h["verdict"],
                            "previous_value": o["value"],
                            "latest_value": h["value"],
                        }
                    )
    return out


def format_reproducibility(report: dict[str, Any]) -> str:
    """The report of :func:`reproducibility` as text for a console.

    Parameters
    ----------
    report
        From :func:`reproducibility`.

    Returns
    -------
    str
        A few lines: counts first, then each moved measurement, headline outside its interval and flipped verdict.

    Example
    -------
    >>> print(format_reproducibility(reproducibility([])))
    reproducibility: 0 pages compared; 0 of 0 measurements moved beyond their noise band; 0 of 0 headlines inside the previous interval; 0 of 0 verdicts changed
    """  # noqa: E501
    r = report
    lines = [
        f"reproducibility: {r['pages']} pages compared; {len(r['moved'])} of {r['measurements']} measurements "
        f"moved beyond their noise band; {r['headlines_inside']} of {r['headlines_with_interval']} headlines inside "
        f"the previous interval; {len(r['flipped'])} of {r['verdicts']} verdicts changed"
    ]
    lines += [
        f"  moved: {m['example']} / {m['measurement']}: {m['change_pct']:+.1f}% (band ±{m['band_pct']:.1f}%)"
        for m in r["moved"]
    ]
    lines += [
        f"  outside: {o['example']} / {o['headline']}: {o['latest']:.4g} not in [{o['low']:.4g}, {o['high']:.4g}]"
        for o in r["outside"]
    ]
    lines += [
        f"  verdict changed: {f['example']} / {f['headline']}: {f['previous']} -> {f['latest']}" for f in r["flipped"]
    ]
    if r.get("lesson_only"):
        lines.append(f"  compared, lesson edited, measuring code unchanged: {', '.join(r['lesson_only'])}")
    lines += [f"  not compared: {n['example']}: {n['reason']}" for n in r["not_compared"]]
    return "\n".join(lines)


def _main(argv: list[str] | None = None) -> int:  # pragma: no cover - thin CLI
    """``python -m gallery_build.history [history.jsonl]``: the reproducibility report of the last two recordings."""
    import sys

    from cudnn_guide.errors import CorruptDataError

    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "data" / "history.jsonl"
    if not path.is_file():  # load() reads a missing history as empty: here that would report "0 pages compared"
        print(
            f"gallery_build.history: {path}: no such history file. Fix: pass the JSON-lines history "
            "(docs/data/history.jsonl, or a kept-off-site *.history.jsonl).",
            file=sys.stderr,
        )
        return 2
    try:
        print(format_reproducibility(reproducibility(load(path))))
    except CorruptDataError as exc:
        print(f"gallery_build.history: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
