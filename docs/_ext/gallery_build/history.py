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

The noise band of a measurement is the larger of the two recordings' inter-quartile ranges,
times 1.5, and never less than 2% of the earlier median: a change inside it is what repeating
the same run can produce; a change outside it needs an explanation (a new driver, a changed
example, a regression).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles
from cudnn_guide.report.records import RECORD_SUFFIX

__all__ = [
    "SOFTWARE_KEYS",
    "DRIFT",
    "drift",
    "drift_backtest",
    "comparable",
    "reproducibility",
    "format_reproducibility",
    "BAND_IQR_FACTOR",
    "BAND_MIN_FRACTION",
    "entry_from_record",
    "entries_from_gallery",
    "append",
    "load",
    "compare",
    "by_example",
    "changes",
]

SOFTWARE_KEYS = ("driver", "cuda", "cudnn_backend", "cudnn_frontend", "torch")
"""What must match, besides the GPU, for two recordings to be compared."""
BAND_IQR_FACTOR = 1.5
BAND_MIN_FRACTION = 0.02


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
            out.append(entry_from_record(record))
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

    Example
    -------
    >>> hist = load(Path('docs/data/history.jsonl'))
    """
    path = Path(history_path)
    return datafiles.read_jsonl(path)


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
        the harness versions match where both are known) and
        ``moved`` (the change exceeds the band, with the same method).

    Example
    -------
    >>> rows = compare(entries[0], entries[1])
    """
    rows = []
    for label, c in cur["measurements"].items():
        p = prev["measurements"].get(label)
        if p is None or p["median_ms"] <= 0:
            continue
        delta = c["median_ms"] - p["median_ms"]
        iqr = max(p["q3_ms"] - p["q1_ms"], c["q3_ms"] - c["q1_ms"])
        band = max(BAND_IQR_FACTOR * iqr, BAND_MIN_FRACTION * p["median_ms"])
        same_method = bool(p.get("launch_cost_ms")) == bool(c.get("launch_cost_ms")) and (
            p.get("timing_method") is None or c.get("timing_method") is None or p["timing_method"] == c["timing_method"]
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
        One row per measurement in both of an example's last two entries.

    Example
    -------
    >>> moved = [r for r in changes(load(path)) if r['moved']]
    """
    return [
        row
        for entries in by_example(history).values()
        if len(entries) >= 2
        for row in compare(entries[-2], entries[-1])
    ]


def comparable(prev: dict[str, Any], cur: dict[str, Any]) -> str | None:
    """Why two entries of one example cannot be compared (another GPU or software), or ``None`` if they can.

    Parameters
    ----------
    prev
        The earlier history entry.
    cur
        The later one.

    Returns
    -------
    str | None
        The reason, naming both sides; ``None`` when GPU and software match (where both are known).

    Example
    -------
    >>> comparable({"gpu": "NVIDIA H200"}, {"gpu": "NVIDIA B200"})
    'recorded on different GPUs (NVIDIA H200 vs NVIDIA B200)'
    """
    if prev.get("gpu") != cur.get("gpu"):
        return f"recorded on different GPUs ({prev.get('gpu')} vs {cur.get('gpu')})"
    ps, cs = prev.get("software") or {}, cur.get("software") or {}
    differ = [f"{k} {ps[k]} vs {cs[k]}" for k in SOFTWARE_KEYS if ps.get(k) and cs.get(k) and ps[k] != cs[k]]
    return f"recorded with different software ({'; '.join(differ)})" if differ else None


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
        ``outside`` (rows), ``verdicts``, ``flipped`` (rows), ``not_compared`` (rows).

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


DRIFT_PAIRS = 4
"""How many of an example's latest consecutive recording pairs :func:`drift` looks at."""
DRIFT_UNITS = frozenset({"µs", "us", "ms", "s", "GB/s", "TB/s", "TFLOP/s", "x"})
"""Headline units whose re-recording changes :func:`drift` keeps (times, rates, ratios)."""
DRIFT = "drift.json"
"""In ``docs/data``: :func:`drift` of the history, which the next recording widens its intervals by."""


def _p95(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(0.95 * len(values)))] if values else 0.0


def _quantile_of(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[int(q * (len(values) - 1))] if values else 0.0


def _signed_changes(entries: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per consecutive comparable pair of an example's entries: label → signed log change of its median."""
    import math

    return [
        {
            r["measurement"]: math.log(r["latest_ms"] / r["previous_ms"])
            for r in compare(prev, cur)
            if r["same_method"] and r["latest_ms"] > 0
        }
        for prev, cur in _comparable_pairs(entries)
    ]


def _comparable_pairs(entries: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Consecutive entries of one example that :func:`comparable` allows to compare."""
    return [(prev, cur) for prev, cur in zip(entries, entries[1:]) if not comparable(prev, cur)]


def _ratio_changes(steps: list[dict[str, float]]) -> list[float]:
    """How far the ratio of every two measurements of one recording moved: ``|Δlog a − Δlog b|``."""
    out = []
    for step in steps:
        values = sorted(step.values())
        out += [abs(x - y) for i, x in enumerate(values) for y in values[i + 1 :]]
    return out


RATIO_QUANTILE = 0.9
"""A ratio's re-recording noise is at least this quantile of its page's ratio changes (see :func:`drift`)."""


def drift_backtest(history: list[dict[str, Any]]) -> dict[str, Any]:
    """How well each drift model predicted each page's latest re-recording, from the recordings before it.

    For every page with at least two earlier comparable pairs, and every two measurements of its
    latest pair, the change of their ratio is checked against two predictions made from the
    earlier pairs only: **independent** drifts (``√(r_a² + r_b²)``, each ``r`` the label's
    largest change, at least the page's 95th percentile) and the **ratio**'s own largest
    change (at least the page's :data:`RATIO_QUANTILE` quantile of ratio changes).

    Parameters
    ----------
    history
        All entries (from :func:`load`).

    Returns
    -------
    dict[str, Any]
        ``{"ratios", "pages", "models": {name: {"coverage", "median_width", "p90_width"}}}``,
        widths as fractions (0.05 = ±5%).

    Example
    -------
    >>> drift_backtest(load(Path("docs/data/history.jsonl")))["models"]["ratio"]["coverage"]
    """
    import math

    widths: dict[str, list[float]] = {"independent": [], "ratio": []}
    inside = {"independent": 0, "ratio": 0}
    pages = 0
    for entries in by_example(history).values():
        steps = _signed_changes(entries)
        if len(steps) < 3:
            continue
        earlier, last = steps[:-1][-DRIFT_PAIRS:], steps[-1]
        pages += 1
        flat = [abs(v) for s in earlier for v in s.values()]
        page_p95, ratio_floor = _p95(flat), _quantile_of(_ratio_changes(earlier), RATIO_QUANTILE)
        own = {lab: max([abs(s[lab]) for s in earlier if lab in s] + [0.0]) for lab in last}
        labels = sorted(last)
        for i, a in enumerate(labels):
            for b in labels[i + 1 :]:
                seen = [abs(s[a] - s[b]) for s in earlier if a in s and b in s]
                if not seen:
                    continue
                actual = abs(last[a] - last[b])
                for model, w in (
                    ("independent", math.hypot(max(page_p95, own[a]), max(page_p95, own[b]))),
                    ("ratio", max(max(seen), ratio_floor)),
                ):
                    widths[model].append(w)
                    inside[model] += actual <= w
    out: dict[str, Any] = {"ratios": len(widths["ratio"]), "pages": pages, "models": {}}
    for model, ws in widths.items():
        ws = sorted(ws)
        if ws:
            out["models"][model] = {
                "coverage": inside[model] / len(ws),
                "median_width": math.exp(ws[len(ws) // 2]) - 1,
                "p90_width": math.exp(ws[int(0.9 * (len(ws) - 1))]) - 1,
            }
    return out


def drift(history: list[dict[str, Any]]) -> dict[str, Any]:
    """How far each measurement moved between consecutive comparable recordings: the re-recording noise.

    Within one run, a bootstrap interval over rounds says how precisely that run measured; it
    does not say where the next recording, on another machine or day, will land. This does:
    for every pair of consecutive recordings of an example that :func:`comparable` allows, the
    absolute log change of each measurement's median timed the same way. Per example it keeps
    each label's largest change and the 95th percentile over all its changes, over its last few
    pairs (:data:`DRIFT_PAIRS`; older ones measured older code); ``global_p95`` is the 95th
    percentile over every example (the fallback for a page with no history). The same is kept
    for the headlines (``headline_p95``, ``headlines``): the numbers a page quotes, which
    :meth:`cudnn_guide.report.records.Record.headline` widens by it.

    Parameters
    ----------
    history
        All entries (from :func:`load`).

    Returns
    -------
    dict[str, Any]
        ``{"global_p95", "global_headline_p95", "pairs", "examples": {example: {"p95", "labels":
        {label: max}, "headline_p95", "headlines": {name: max}}}}``, all as absolute natural-log
        changes (0.03 ≈ 3%).

    Example
    -------
    >>> drift(load(Path("docs/data/history.jsonl")))["global_p95"]
    """
    import math

    out: dict[str, Any] = {"global_p95": 0.0, "global_headline_p95": 0.0, "pairs": 0, "examples": {}}
    every: list[float] = []
    every_headline: list[float] = []
    for example, entries in by_example(history).items():
        changes_: list[float] = []
        labels: dict[str, float] = {}
        heads: dict[str, float] = {}
        head_changes: list[float] = []
        signed = _signed_changes(entries)[-DRIFT_PAIRS:]
        for step in signed:
            out["pairs"] += 1
            for label, change in step.items():
                changes_.append(abs(change))
                labels[label] = max(labels.get(label, 0.0), abs(change))
        for prev, cur in _comparable_pairs(entries)[-DRIFT_PAIRS:]:
            old = {h["name"]: h.get("value") for h in prev.get("headlines", [])}
            for h in cur.get("headlines", []):
                before, now = old.get(h["name"]), h.get("value")
                if h.get("unit") not in DRIFT_UNITS:
                    continue  # counts, ranks, percentages and signed values are not re-measured quantities
                if isinstance(before, (int, float)) and isinstance(now, (int, float)) and before > 0 and now > 0:
                    change = abs(math.log(now / before))
                    head_changes.append(change)
                    heads[h["name"]] = max(heads.get(h["name"], 0.0), change)
        if changes_ or head_changes:
            out["examples"][example] = {
                "p95": _p95(changes_),
                "labels": labels,
                "headline_p95": _p95(head_changes),
                "headlines": heads,
                "changes": signed,
                "ratio_p90": _quantile_of(_ratio_changes(signed), RATIO_QUANTILE),
            }
            every += changes_
            every_headline += head_changes
    out["global_p95"] = _p95(every)
    out["global_headline_p95"] = _p95(every_headline)
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
    lines += [f"  not compared: {n['example']}: {n['reason']}" for n in r["not_compared"]]
    return "\n".join(lines)


def _main(argv: list[str] | None = None) -> int:  # pragma: no cover - thin CLI
    """``python -m gallery_build.history [history.jsonl]``: the reproducibility report of the last two recordings."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "data" / "history.jsonl"
    print(format_reproducibility(reproducibility(load(path))))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
