"""How far each page's headlines drift between recordings: the bands the next recording widens its intervals by.

After every full recording, :func:`drift` reads every recording we have (:func:`recordings`:
``docs/data/history.jsonl`` and the recordings kept off the site), pairs of the same GPU, software
and example code (:func:`~gallery_build.history.comparable`), and writes
``docs/data/drift.json`` (:data:`DRIFT`). When the docs build writes a page's record
(:func:`gallery_build.hooks.reset_between_examples`), :func:`widen_headlines` widens each of its
in-run intervals by that drift and keeps the in-run one beside it, labelled; the library itself
measures and reports in-run intervals only. :func:`drift_backtest` checks, on the history
itself, how often such a band would have held.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .history import by_example, comparable, compare, load
from .page_moves import with_lineage
from .schema import DRIFT_BASES, rst_text

__all__ = [
    "DRIFT",
    "DRIFT_PAIRS",
    "DRIFT_UNITS",
    "RATIO_QUANTILE",
    "RATIO_FLOOR_QUANTILE",
    "RATIO_MIN_PAIRS",
    "OFF_SITE",
    "WIDENED",
    "recordings",
    "drift",
    "drift_backtest",
    "headline_backtest",
    "load_drift",
    "for_label",
    "for_headline",
    "for_ratio",
    "widen_headlines",
    "drift_basis",
    "DRIFT_BASES",
    "rewiden_headlines",
    "widened_rst",
    "is_widened",
    "is_signed",
    "SIGNED",
    "HOST_MODES",
    "timing_class",
    "headline_class",
]

DRIFT_PAIRS = 4
"""How many of an example's latest consecutive recording pairs :func:`drift` looks at."""
DRIFT_UNITS = frozenset({"µs", "us", "ms", "s", "GB/s", "TB/s", "TFLOP/s", "tokens/s", "x", "%"})
"""Headline units whose re-recording changes :func:`drift` keeps (times, rates, ratios) and whose
intervals :func:`widen_headlines` widens. ``%`` is a share of a measured rate ("% of copy
bandwidth"): a ratio of two timings, re-measured like any other. Until 4564dfa's recording it was
left out, and its in-run interval (±0.1%) missed 5 of 5 re-recordings by 0.2–0.8%."""
SIGNED = "(signed)"
"""A headline unit ending so (``"µs/call (signed)"``) is a difference that may be near zero or below it: it is
widened by its own largest past change in its unit, added either side (``drift_unit``), never by a log change."""


def is_signed(headline: dict[str, Any]) -> bool:
    """Whether ``headline``'s unit is a signed difference (:data:`SIGNED`), widened by an absolute drift.

    Example
    -------
    >>> is_signed({"unit": "µs/call (signed)"}), is_signed({"unit": "µs"})
    (True, False)
    """
    return str(headline.get("unit") or "").endswith(SIGNED)


def _widens(headline: dict[str, Any]) -> bool:
    """Whether :func:`widen_headlines` widens a headline of this unit: by a log drift, or in its unit if signed."""
    return headline.get("unit") in DRIFT_UNITS or is_signed(headline)


HOST_MODES = ("wall-clock", "host")
"""Measurement modes (prefixes) that time the host as well as the GPU: back-to-back loops, host costs,
replay loops. Their re-recording drift follows the lease's CPU (often ±20–80%), a GPU event time's
a few percent; :func:`drift` keeps a page's quantiles for each class apart (:func:`timing_class`)."""
_HOST_WORDS = ("wall-clock", " loop", "replay", "host")
UNIT_FAMILIES = {
    "µs": "time",
    "us": "time",
    "ms": "time",
    "s": "time",
    "GB/s": "rate",
    "TB/s": "rate",
    "TFLOP/s": "rate",
    "tokens/s": "rate",
}
"""A headline's unit family (:func:`headline_class`): a page's headline quantile is kept per family."""


def timing_class(label: str, mode: str | None = None) -> str:
    """``"host"`` for a measurement that times the host (a mode in :data:`HOST_MODES`), else ``"gpu"``.

    Without its mode (history written before modes were kept), its label decides: one naming a
    wall-clock loop, a replay loop or a host cost is ``"host"``.

    Example
    -------
    >>> timing_class("x", "wall-clock loop"), timing_class("x", "cold-L2 events − launch cost")
    ('host', 'gpu')
    >>> timing_class("cuDNN wall-clock loop K=64"), timing_class("cuDNN graph decode Hkv=8")
    ('host', 'gpu')
    """
    if mode:
        return "host" if str(mode).startswith(HOST_MODES) else "gpu"
    return "host" if any(w in label for w in _HOST_WORDS) else "gpu"


def headline_class(headline: dict[str, Any]) -> str:
    """The family of a headline's unit (:data:`UNIT_FAMILIES`; ``"x"``, ``"%"`` and others are their own).

    Example
    -------
    >>> headline_class({"unit": "µs"}), headline_class({"unit": "x"})
    ('time', 'x')
    """
    unit = str(headline.get("unit") or "")
    return UNIT_FAMILIES.get(unit, unit)


def _by_class(values: list[tuple[str, float]], quantile: Any) -> dict[str, float]:
    """``quantile`` of the values of each class, from ``(class, value)`` pairs."""
    groups: dict[str, list[float]] = {}
    for cls, v in values:
        groups.setdefault(cls, []).append(v)
    return {cls: quantile(vs) for cls, vs in groups.items()}


DRIFT = "drift.json"
"""In ``docs/data``: :func:`drift` of the history, which the next recording widens its intervals by."""


OFF_SITE = "*.history.jsonl"
"""In ``docs/data``: history files of recordings kept off the site (a second lease's, one GPU's of
a pair), beside the site's own ``history.jsonl``."""


def recordings(data_dir: Path) -> list[dict[str, Any]]:
    """Every recording's history entries: the site's and those kept off it, oldest first.

    A recording kept off the site is a re-recording all the same (same GPU model, same software,
    another run or lease), so its changes are re-recording noise the drift must include: a band
    taken from the site's recordings alone missed, for one, a second lease on which
    ``torch.compile``'s max-autotune chose a slower kernel than in the site's recording.

    Parameters
    ----------
    data_dir
        ``docs/data``.

    Returns
    -------
    list[dict[str, Any]]
        The entries, sorted by recording time.

    Example
    -------
    >>> drift(recordings(Path("docs/data")))["global_p95"]
    """
    site = Path(data_dir) / "history.jsonl"
    lines = load(site)
    for path in sorted(Path(data_dir).glob(OFF_SITE)):
        if path != site:
            lines += load(path)
    return sorted(lines, key=lambda e: (str(e.get("recorded_utc")), str(e.get("gpu")), e.get("example", "")))


def _p95(values: list[float]) -> float:
    return _p95_sorted(sorted(values))


def _p95_sorted(values: list[float]) -> float:
    """:func:`_p95` of values already in ascending order."""
    return values[min(len(values) - 1, int(0.95 * len(values)))] if values else 0.0


def _quantile_of(values: list[float], q: float) -> float:
    return _quantile_sorted(sorted(values), q)


def _quantile_sorted(values: list[float], q: float) -> float:
    """:func:`_quantile_of` of values already in ascending order."""
    return values[int(q * (len(values) - 1))] if values else 0.0


SELECT_FROM = 4096
"""From this many values on, :func:`_quantile_of_runs` picks its quantile with NumPy's selection (the same
value) instead of sorting them all in Python: the site's ratio changes are tens of thousands, at every
recording time :func:`headline_backtest` takes the drift of."""


def _quantile_of_runs(parts: list[dict[str, Any]], key: str, q: float) -> float:
    """:func:`_quantile_of` of every part's ``key`` values taken together (each part's list sorted).

    The value at the same place of the same values in ascending order: a selection returns it
    without ordering the rest. Each part keeps its values as an array too, for the next call that
    reuses it (:func:`_drift`'s memo); values with a NaN, whose order Python leaves undefined, are
    sorted as before."""
    n = sum(len(p[key]) for p in parts)
    if n < SELECT_FROM:
        return _quantile_of([v for p in parts for v in p[key]], q)
    import numpy as np

    arrays = []
    for p in parts:
        if f"{key}_array" not in p:
            p[f"{key}_array"] = np.asarray(p[key], dtype=float)
        arrays.append(p[f"{key}_array"])
    values = np.concatenate(arrays)
    if np.isnan(values).any():
        return _quantile_of([v for p in parts for v in p[key]], q)
    at = int(q * (n - 1))
    return float(np.partition(values, at)[at])


def _sorted_by_class(values: list[tuple[str, float]]) -> dict[str, list[float]]:
    """The values of each class, each class's in ascending order, from ``(class, value)`` pairs."""
    groups: dict[str, list[float]] = {}
    for cls, v in values:
        groups.setdefault(cls, []).append(v)
    return {cls: sorted(vs) for cls, vs in groups.items()}


def _signed_changes(entries: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per consecutive comparable pair of an example's entries: label → signed log change of its median."""
    return [_pair_changes(prev, cur) for prev, cur in _comparable_pairs(entries)]


def _pair_changes(prev: dict[str, Any], cur: dict[str, Any]) -> dict[str, float]:
    """Label → signed log change of its median from ``prev`` to ``cur`` (measured the same way)."""
    import math

    return {
        r["measurement"]: math.log(r["latest_ms"] / r["previous_ms"])
        for r in compare(prev, cur)
        if r["same_method"] and r["latest_ms"] > 0
    }


def _comparable_pairs(entries: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Consecutive entries of one example that :func:`~gallery_build.history.comparable` allows to compare."""
    return [(prev, cur) for prev, cur in zip(entries, entries[1:]) if not comparable(prev, cur)]


def _ratio_changes(steps: list[dict[str, float]]) -> list[float]:
    """How far the ratio of every two measurements of one recording moved: ``|Δlog a − Δlog b|``."""
    out = []
    for step in steps:
        values = sorted(step.values())
        out += [abs(x - y) for i, x in enumerate(values) for y in values[i + 1 :]]
    return out


def _pair_class(a: str, b: str, classes: Mapping[str, str], modes: Mapping[str, str] | None = None) -> str:
    """A ratio's timing class: ``"gpu"`` when both its measurements time the GPU alone, else ``"host"``
    (each label's class from the drift file, else from its mode in ``modes``, else from its name)."""
    both = {_class_of(a, classes, modes), _class_of(b, classes, modes)}
    return "gpu" if both == {"gpu"} else "host"


def _class_of(label: str, classes: Mapping[str, str], modes: Mapping[str, str] | None = None) -> str:
    """``label``'s timing class: the drift file's, else its mode's (the running record's), else its name's."""
    return classes.get(label) or timing_class(label, (modes or {}).get(label))


def _ratio_changes_by_class(steps: list[dict[str, float]], classes: dict[str, str]) -> list[tuple[str, float]]:
    """:func:`_ratio_changes`, each with its pair's class (:func:`_pair_class`)."""
    out = []
    for step in steps:
        items = sorted(step.items())
        # each label's class once (not once per pair): a pair is "gpu" when both are, as _pair_class says
        gpu = [_class_of(a, classes) == "gpu" for a, _ in items]
        values = [x for _, x in items]
        for i, x in enumerate(values):
            g = gpu[i]
            out += [("gpu" if g and gpu[j] else "host", abs(x - values[j])) for j in range(i + 1, len(values))]
    return out


RATIO_QUANTILE = 0.9
"""A ratio without its own history takes this quantile of its page's (or the site's) ratio changes (:func:`drift`)."""
RATIO_FLOOR_QUANTILE = 0.75
"""A ratio with its own history is widened by its largest past change, at least this quantile of its page's
ratio changes (``ratio_floor``). Before this constant the floor was the 90th percentile, which
on a page where one contender's kernel choice changes between leases (plot_04's max-autotune) widened
every stable ratio by that contender's jumps; the headline backtest's coverage was the same with either."""


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
        All entries (from :func:`~gallery_build.history.load`).

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


def _in_run(headline: dict[str, Any]) -> dict[str, Any]:
    """A copy of a recorded headline with its in-run interval and verdict (its widening undone)."""
    h = dict(headline)
    if "run_low" in h:
        h["low"], h["high"] = h.pop("run_low"), h.pop("run_high")
        h.pop("drift", None)
        h.pop("drift_basis", None)
        h.pop("drift_unit", None)
        if "run_verdict" in h:
            h["verdict"] = h.pop("run_verdict")
        h["interval"] = h.pop("run_interval", None)
        if h["interval"] is None:
            h.pop("interval")
    return h


def _made_until(
    recs: list[dict[str, Any]], stamps: list[str], stamp: str, upto: bool, in_order: bool | None = None
) -> list[dict[str, Any]]:
    """The recordings made up to ``stamp`` (``upto``) or before it, in their order; ``stamps`` are their times.

    Recordings in time order (``in_order``; as :func:`recordings` returns them) are a prefix, found by
    bisection; otherwise each is tested."""
    if in_order is None:
        in_order = all(a <= b for a, b in zip(stamps, stamps[1:]))
    if in_order:
        return recs[: (bisect.bisect_right if upto else bisect.bisect_left)(stamps, stamp)]
    return [e for e, s in zip(recs, stamps) if (s <= stamp if upto else s < stamp)]


def headline_backtest(
    history: list[dict[str, Any]], recs: list[dict[str, Any]], latest_only: bool = False, *, memo: bool = True
) -> dict[str, Any]:
    """How often a headline's drift-widened interval held the next recording's value, out of sample.

    For every comparable pair of consecutive recordings of a page in the site's history
    (:func:`~gallery_build.history.comparable`), the earlier recording's in-run headline intervals
    are widened as :func:`widen_headlines` does, by :func:`drift` of the recordings made up to it
    (never the later one), and the later recording's values are checked against them. The
    verdicts are judged on both sides as widened (the later one by the drift of the recordings made
    before it); a *flip* is ``faster`` against ``slower``.
    This is the test the issue's "headlines inside the previous interval" asks for, made the same
    way whether or not a recording kept its widening (recordings whose staged build lacked the
    drift file recorded their in-run intervals widened by 0).

    Parameters
    ----------
    history
        The site's history entries (``docs/data/history.jsonl``): the pairs tested.
    recs
        :func:`recordings`' result: the site's history and the recordings kept off it, which
        all feed the drift.
    latest_only
        Test only each page's latest recording against the one before it (where the two compare).
    memo
        Reuse an example's part of :func:`drift` between recording times whose recordings of it
        are the same (the result is the same; ``False`` recomputes each, as a check).

    Returns
    -------
    dict[str, Any]
        ``pairs``, ``headlines``, ``inside``, ``coverage``, ``verdicts``, ``changed``, ``flips``
        and ``outside`` (page, headline, value, widened interval).

    Example
    -------
    >>> headline_backtest([], [])["headlines"]
    0
    """
    from cudnn_guide.measure.verdicts import judge

    out: dict[str, Any] = {"pairs": 0, "headlines": 0, "inside": 0, "verdicts": 0, "changed": 0, "flips": 0}
    outside: list[dict[str, Any]] = []
    cache: dict[tuple[str, bool], dict[str, Any]] = {}
    # recordings in time order: the ones made up to a time are the first n, whatever the time and
    # side (up to it, or before it) that asked: each n's drift is taken once
    by_count: dict[int, dict[str, Any]] = {}
    # each stamp's drift differs from the last by a few recordings: an example whose recordings
    # are the same ones (the same entries, in the same order) reuses its changes (_example_drift)
    per_example: dict[tuple[int, ...], dict[str, Any]] = {}

    stamps = [str(e.get("recorded_utc", "")) for e in recs]
    in_order = all(a <= b for a, b in zip(stamps, stamps[1:]))

    def bands(stamp: str, upto: bool) -> dict[str, Any]:
        """:func:`drift` of the recordings made up to ``stamp`` (``upto``), or before it."""
        if (stamp, upto) not in cache:
            made = _made_until(recs, stamps, stamp, upto, in_order)
            if not in_order or not memo:  # without the memo, every drift computed anew (the reference tests use)
                cache[stamp, upto] = _drift(made, per_example if memo else None)
            else:
                if len(made) not in by_count:
                    by_count[len(made)] = _drift(made, per_example)
                cache[stamp, upto] = by_count[len(made)]
        return cache[stamp, upto]

    for page, entries in by_example(history).items():
        pairs = [(a, b) for a, b in zip(entries, entries[1:]) if comparable(a, b) is None]
        if latest_only:  # the page's latest recording against the one before it, if the two compare
            pairs = [p for p in pairs[-1:] if p[1] is entries[-1]]
        for prev, cur in pairs:
            then = bands(str(prev.get("recorded_utc", "")), True)
            old = {h["name"]: h for h in widen_headlines([_in_run(h) for h in prev.get("headlines", [])], then, page)}
            out["pairs"] += 1
            for c in cur.get("headlines", []):
                o = old.get(c.get("name"))
                if o is None or o.get("low") is None or c.get("value") is None or not _widens(o):
                    continue
                out["headlines"] += 1
                if float(o["low"]) <= float(c["value"]) <= float(o["high"]):
                    out["inside"] += 1
                else:
                    outside.append(
                        {
                            "example": page,
                            "headline": c["name"],
                            "value": c["value"],
                            "low": o["low"],
                            "high": o["high"],
                        }
                    )
                if o.get("verdict") and "tie_band" in c and c.get("low") is not None:
                    cw = widen_headlines([_in_run(c)], bands(str(cur.get("recorded_utc", "")), False), page)[0]
                    now = judge(cw["low"], cw["high"], float(c["tie_band"]))
                    out["verdicts"] += 1
                    out["changed"] += now != o["verdict"]
                    out["flips"] += {now, o["verdict"]} == {"faster", "slower"}
    out["coverage"] = out["inside"] / out["headlines"] if out["headlines"] else None
    out["outside"] = outside
    return out


def drift(history: list[dict[str, Any]]) -> dict[str, Any]:
    """How far each measurement moved between consecutive comparable recordings: the re-recording noise.

    Within one run, a bootstrap interval over rounds says how precisely that run measured; it
    does not say where the next recording, on another machine or day, will land. This does:
    for every pair of consecutive recordings of an example that :func:`~gallery_build.history.comparable` allows, the
    absolute log change of each measurement's median timed the same way. Per example it keeps
    each label's largest change and the 95th percentile over all its changes, over its last few
    pairs (:data:`DRIFT_PAIRS`; older ones measured older code); ``global_p95`` is the 95th
    percentile over every example (the fallback for a page with no history), and
    ``global_ratio_p90`` the :data:`RATIO_QUANTILE` quantile of every example's ratio changes (the
    fallback for a ratio without a history of its own: :func:`for_ratio`). The same is kept
    for the headlines (``headline_p95``, ``headlines``): the numbers a page quotes, which
    :func:`widen_headlines` widens by it.

    Parameters
    ----------
    history
        All entries (from :func:`~gallery_build.history.load`).

    Returns
    -------
    dict[str, Any]
        ``{"global_p95", "global_headline_p95", "global_ratio_p90", "pairs", "examples": {example: {"p95", "labels":
        {label: max}, "headline_p95", "headlines": {name: max}}}}``, all as absolute natural-log
        changes (0.03 ≈ 3%).

    Example
    -------
    >>> drift(load(Path("docs/data/history.jsonl")))["global_p95"]
    """
    return _drift(history)


def _drift(history: list[dict[str, Any]], memo: dict[tuple[int, ...], dict[str, Any]] | None = None) -> dict[str, Any]:
    """:func:`drift`; ``memo`` (kept by the caller while the entries live) reuses each example's part.

    An example's part depends on its entries alone, in order: the key is their identities, so a
    memo must not outlive the entries it was filled from (an identity can be reused afterwards).
    """
    out: dict[str, Any] = {"global_p95": 0.0, "global_headline_p95": 0.0, "pairs": 0, "examples": {}}
    every: list[float] = []
    every_headline: list[float] = []
    ratio_parts: list[dict[str, Any]] = []  # their ratio changes, each part's sorted

    def part_of(entries: list[dict[str, Any]]) -> dict[str, Any]:
        key = tuple(map(id, entries))
        part = memo.get(key) if memo is not None else None
        if part is None:
            part = _example_drift(entries)
            if memo is not None:
                memo[key] = part
        return part

    own = by_example(history)
    for example, entries in own.items():
        part = part_of(entries)
        out["pairs"] += part["pairs"]
        if part["summary"] is not None:
            out["examples"][example] = dict(part["summary"])
            every += part["changes"]
            every_headline += part["head_changes"]
            ratio_parts.append(part)
    # a page split off another (or renamed) is banded by its recordings and its old page's together;
    # the site's quantiles above count each recording pair once, under the page that recorded it
    for example, entries in with_lineage(own).items():
        if entries is not own.get(example):
            part = part_of(entries)
            if part["summary"] is not None:
                out["examples"][example] = dict(part["summary"])
    out["global_p95"] = _p95(every)
    out["global_headline_p95"] = _p95(every_headline)
    out["global_ratio_p90"] = _quantile_of_runs(ratio_parts, "ratio_changes", RATIO_QUANTILE)
    return out


def _example_drift(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """One example's part of :func:`drift`: its pairs, changes, and its entry in ``examples`` (``None``: none)."""
    import math

    changes_: list[float] = []
    labels: dict[str, float] = {}
    heads: dict[str, float] = {}
    heads_abs: dict[str, float] = {}
    head_changes: list[float] = []
    by_class: list[tuple[str, float]] = []
    head_by_class: list[tuple[str, float]] = []
    modes = {
        label: m.get("mode") for e in entries for label, m in (e.get("measurements") or {}).items() if m.get("mode")
    }
    pairs = _comparable_pairs(entries)[-DRIFT_PAIRS:]
    signed = [_pair_changes(prev, cur) for prev, cur in pairs]
    # every label whose mode a recording kept is classed by it, changed lately or not
    classes: dict[str, str] = {label: timing_class(label, mode) for label, mode in modes.items()}
    for step in signed:
        for label, change in step.items():
            changes_.append(abs(change))
            labels[label] = max(labels.get(label, 0.0), abs(change))
            classes.setdefault(label, timing_class(label))
            by_class.append((classes[label], abs(change)))
    for prev, cur in pairs:
        old = {h["name"]: h.get("value") for h in prev.get("headlines", [])}
        for h in cur.get("headlines", []):
            before, now = old.get(h["name"]), h.get("value")
            if is_signed(h) and isinstance(before, (int, float)) and isinstance(now, (int, float)):
                heads_abs[h["name"]] = max(heads_abs.get(h["name"], 0.0), abs(now - before))
                continue
            if h.get("unit") not in DRIFT_UNITS:
                continue  # counts, ranks and signed values are not positive re-measured quantities
            if isinstance(before, (int, float)) and isinstance(now, (int, float)) and before > 0 and now > 0:
                change = abs(math.log(now / before))
                head_changes.append(change)
                head_by_class.append((headline_class(h), change))
                heads[h["name"]] = max(heads.get(h["name"], 0.0), change)
    part: dict[str, Any] = {"pairs": len(signed), "summary": None}
    if changes_ or head_changes or heads_abs:
        ratio_classes = _ratio_changes_by_class(signed, classes)
        # each list sorted once here (the quantiles below read them in order; the site-wide ones
        # then sort runs already in order, which timsort merges)
        changes_, head_changes = sorted(changes_), sorted(head_changes)
        ratios = sorted(change for _, change in ratio_classes)  # the same pairs as _ratio_changes(signed)
        ratio_groups = _sorted_by_class(ratio_classes)
        part.update(changes=changes_, head_changes=head_changes, ratio_changes=ratios)
        part["summary"] = {
            "p95": _p95_sorted(changes_),
            "labels": labels,
            "headline_p95": _p95_sorted(head_changes),
            "headlines": heads,
            "headlines_abs": heads_abs,
            "changes": signed,
            "ratio_p90": _quantile_sorted(ratios, RATIO_QUANTILE),
            "ratio_floor": _quantile_sorted(ratios, RATIO_FLOOR_QUANTILE),
            # the floors again, per timing class (a GPU time is not floored by a host loop's drift)
            "classes": classes,
            "p95_by_class": _by_class(by_class, _p95),
            "headline_p95_by_class": _by_class(head_by_class, _p95),
            "ratio_p90_by_class": {c: _quantile_sorted(v, RATIO_QUANTILE) for c, v in ratio_groups.items()},
            "ratio_floor_by_class": {c: _quantile_sorted(v, RATIO_FLOOR_QUANTILE) for c, v in ratio_groups.items()},
        }
    return part


RATIO_MIN_PAIRS = 2
"""Past recording pairs in which both measurements of a ratio appear before :func:`for_ratio` trusts their
ratio's own history; with fewer, it takes its page's or the site's ratio drift (``global_ratio_p90``)."""
WIDENED = "widened"
"""``interval`` of a recorded headline whose ``low``/``high`` :func:`widen_headlines` widened for
re-recording drift (its in-run interval: ``run_low``/``run_high``); a headline without it holds the
in-run interval (records written before the library stopped widening, or not widened at all)."""


def load_drift(path: Path) -> dict[str, Any]:
    """The drift file (``docs/data/drift.json``), or ``{}`` when there is none yet (nothing is widened).

    Parameters
    ----------
    path
        The file.

    Returns
    -------
    dict[str, Any]
        What :func:`drift` wrote.

    Example
    -------
    >>> load_drift(Path("docs/data") / DRIFT)["global_p95"]
    """
    from cudnn_guide.datafiles import read_json

    return read_json(path) if Path(path).exists() else {}


def _page(bands: dict[str, Any], page: str) -> dict[str, Any] | None:
    return (bands.get("examples") or {}).get(page)


def _lookup_basis(
    bands: dict[str, Any], page: str, key: str, table: str, page_p95: str, site_p95: str, cls: str | None = None
) -> tuple[float, str]:
    """``key``'s largest past change in the page's ``table``, at least the page's ``page_p95`` (the site's
    ``site_p95`` for a page without history; 0 without a drift file), with where it came from
    (:func:`drift_basis`).

    With ``cls`` and a drift file that keeps the page's quantile per class (``<page_p95>_by_class``),
    the floor is the quantile over that class alone (the page's over all, where the class has none)."""
    if not bands:
        return 0.0, "none"
    entry = _page(bands, page)
    if entry is None:
        return float(bands.get(site_p95) or 0.0), "site"
    own = entry.get(table) or {}
    floor = entry.get(page_p95)
    per_class = entry.get(f"{page_p95}_by_class")
    if per_class is not None and cls is not None:  # the page's quantile over its own class, where kept
        floor = per_class.get(cls, floor)
    return max(float(floor or 0.0), float(own.get(key, 0.0))), ("own" if key in own else "page")


def for_label(bands: dict[str, Any], page: str, label: str) -> float:
    """The re-recording noise of the measurement ``label`` of ``page``: its own largest past change, at least
    its page's 95th percentile (the whole site's for a page without history); 0 without bands.

    Parameters
    ----------
    bands
        :func:`load_drift`'s result.
    page
        The example's stem.
    label
        The measurement's label, as recorded.

    Returns
    -------
    float
        An absolute natural-log change: widen ``[lo, hi]`` to ``[lo·e^-r, hi·e^r]``.

    Example
    -------
    >>> for_label({}, "plot_05_sdpa_causal", "cuDNN graph")
    0.0
    """
    return _label_drift(bands, page, label)[0]


def _label_drift(
    bands: dict[str, Any], page: str, label: str, modes: Mapping[str, str] | None = None
) -> tuple[float, str]:
    """:func:`for_label`, with its basis: floored by the page's p95 over measurements of its timing class."""
    classes = (_page(bands, page) or {}).get("classes") or {}
    return _lookup_basis(bands, page, label, "labels", "p95", "global_p95", _class_of(label, classes, modes))


def for_headline(bands: dict[str, Any], page: str, name: str, unit: str | None = None) -> float:
    """The re-recording noise of the headline ``name`` of ``page`` (as :func:`for_label`, over headlines).

    Its own largest past change, at least its page's 95th percentile over headlines of its unit's
    family (:func:`headline_class`; over every headline without ``unit``, or with a drift file that
    does not keep the families).

    Parameters
    ----------
    bands
        :func:`load_drift`'s result.
    page
        The example's stem.
    name
        The headline's name, as recorded.
    unit
        Its unit, which picks the page's floor (:func:`widen_headlines` passes it).

    Returns
    -------
    float
        An absolute natural-log change.

    Example
    -------
    >>> for_headline({}, "plot_00_ceilings", "copy bandwidth ceiling")
    0.0
    """
    cls = headline_class({"unit": unit}) if unit else None
    return _lookup_basis(bands, page, name, "headlines", "headline_p95", "global_headline_p95", cls)[0]


def for_ratio(bands: dict[str, Any], page: str, a: str, b: str) -> float:
    """The re-recording noise of the ratio of measurements ``a`` and ``b`` of ``page``.

    Two measurements of one recording share its machine, clock and CPU, so much of their drift
    cancels in their ratio. With :data:`RATIO_MIN_PAIRS` or more past pairs holding both, this is
    the ratio's own largest past change, at least its page's :data:`RATIO_FLOOR_QUANTILE` quantile
    of ratio changes (``ratio_floor``; a drift file without it: the 90th percentile).
    Otherwise, on a page with :data:`RATIO_MIN_PAIRS` or more past pairs, it is its page's 90th
    percentile of ratio changes (``ratio_p90``): a contender new to a page is timed like its page's
    others. On a page with fewer, it is the larger of its page's and the whole site's
    (``global_ratio_p90``). (The site's used to bound every ratio new to its page, which widened a
    page of steady kernel ratios, plot_05's, by other pages' host-time ratios; the headline
    backtest holds the same coverage either way.) Still a ratio's drift, not two measurements'
    drifts combined as if they were independent; a drift file without ``global_ratio_p90`` (written
    before it) keeps that independent combination, ``√(r_a² + r_b²)``.

    Parameters
    ----------
    bands
        :func:`load_drift`'s result.
    page
        The example's stem.
    a
        One measurement's label.
    b
        The other's.

    Returns
    -------
    float
        An absolute natural-log change (0 without bands).

    Example
    -------
    >>> for_ratio({}, "plot_05_sdpa_causal", "cuDNN graph", "PyTorch")
    0.0
    """
    return _ratio_drift(bands, page, a, b)[0]


def _ratio_drift(
    bands: dict[str, Any], page: str, a: str, b: str, modes: Mapping[str, str] | None = None
) -> tuple[float, str]:
    """:func:`for_ratio`, with where it came from (:func:`drift_basis`)."""
    import math

    if not bands:
        return 0.0, "none"
    entry = _page(bands, page)
    if entry is not None:
        seen = [abs(s[a] - s[b]) for s in entry.get("changes") or [] if a in s and b in s]
        cls = _pair_class(a, b, entry.get("classes") or {}, modes)
        if len(seen) >= RATIO_MIN_PAIRS:
            floor = entry.get("ratio_floor", entry.get("ratio_p90"))
            if "ratio_floor_by_class" in entry:  # floored by the page's ratios of the same timing class
                floor = entry["ratio_floor_by_class"].get(cls, floor)
            return max(max(seen), float(floor or 0.0)), "own"
        pairs = len(entry.get("changes") or [])
        if "global_ratio_p90" in bands and pairs >= RATIO_MIN_PAIRS and entry.get("ratio_p90") is not None:
            page_p90 = (entry.get("ratio_p90_by_class") or {}).get(cls, entry["ratio_p90"])
            return float(page_p90), "page"  # a ratio new to a page with a history: the page's ratios of its class
    if "global_ratio_p90" in bands:
        site, own_page = float(bands["global_ratio_p90"]), float((entry or {}).get("ratio_p90") or 0.0)
        return max(site, own_page), ("page" if own_page > site else "site")
    both = math.hypot(for_label(bands, page, a), for_label(bands, page, b))
    return both, ("page" if entry is not None else "site")


def drift_basis(bands: dict[str, Any], page: str, headline: dict[str, Any]) -> str:
    """Where :func:`widen_headlines` takes ``headline``'s drift from: evidence about it, or a fallback.

    ``"own"``: its own past changes (a comparison: its ratio's, in :data:`RATIO_MIN_PAIRS` or more
    past pairs); ``"page"``: its page's quantile (its page has a history, the headline not yet);
    ``"site"``: the whole site's, because its page has no comparable past recording (or, for a
    ratio, fewer than :data:`RATIO_MIN_PAIRS`); ``"none"``: no drift file. Only ``"own"`` and
    ``"page"`` say how far this page's numbers moved between recordings
    (:func:`gallery_build.machine_dependence.is_machine_dependent`).

    Example
    -------
    >>> drift_basis({"global_p95": 0.1, "examples": {}}, "plot_new", {"name": "t"})
    'site'
    >>> drift_basis({"examples": {"p": {"p95": 0.1, "headlines": {"t": 0.2}}}}, "p", {"name": "t"})
    'own'
    """
    return _drift_of(bands, page, headline)[1]


def _drift_of(
    bands: dict[str, Any], page: str, h: dict[str, Any], modes: Mapping[str, str] | None = None
) -> tuple[float, str]:
    """The drift :func:`widen_headlines` widens ``h`` by, and :func:`drift_basis`'s answer for it."""
    if h.get("kind") == "comparison" and "candidate_measurement" in h:
        return _ratio_drift(bands, page, h["baseline_measurement"], h["candidate_measurement"], modes)
    if "measurement" in h and h.get("unit") != "%":
        return _label_drift(bands, page, h["measurement"], modes)
    # a share ("% of copy bandwidth") is a ratio of two timings that move together between leases
    # (clocks, power): it is widened by how far the share itself moved, not its measurement's time
    return _lookup_basis(bands, page, h["name"], "headlines", "headline_p95", "global_headline_p95", headline_class(h))


def widen_headlines(
    headlines: list[dict[str, Any]], bands: dict[str, Any], page: str, modes: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Widen each headline's in-run interval by its re-recording drift, keeping the in-run one beside it.

    A headline with a positive interval in a unit of :data:`DRIFT_UNITS` gets ``low``/``high``
    widened to the interval a re-recording is expected to land in, ``run_low``/``run_high`` the
    run's own (in-run 95%) interval, ``drift`` the log change it was widened by, and ``interval``
    = :data:`WIDENED`. A comparison (``kind: "comparison"``) is widened by the drift of the ratio
    of its two measurements (:func:`for_ratio`) and judged again against its tie band; its
    in-run verdict stays as ``run_verdict``. A headline made from one measurement
    (``measurement``: its label) is widened by that measurement's drift (:func:`for_label`), any
    other by its own history (:func:`for_headline`). Headlines already widened are left alone.

    Parameters
    ----------
    headlines
        The record's headlines (changed in place).
    bands
        :func:`load_drift`'s result (``{}``: widened by 0, still labelled).
    page
        The example's stem.
    modes
        The running record's measurement label → mode: a label the drift file has not classed
        (new to the page, or renamed) takes its timing class from it (:func:`timing_class`).

    Returns
    -------
    list[dict[str, Any]]
        ``headlines``.

    Example
    -------
    >>> h = {"name": "t", "value": 2.0, "unit": "µs", "low": 1.9, "high": 2.1}
    >>> widen_headlines([h], {}, "plot_x")[0]["run_low"]
    1.9
    """
    import math

    from cudnn_guide.measure.verdicts import judge

    for h in headlines:
        low, high = h.get("low"), h.get("high")
        if "run_low" not in h and low is not None and high is not None and is_signed(h):
            _widen_signed(h, bands, page)
            continue
        if "run_low" in h or low is None or high is None or h.get("unit") not in DRIFT_UNITS or not float(low) > 0:
            continue
        r, basis = _drift_of(bands, page, h, modes)
        if h.get("interval") and h["interval"] != WIDENED:  # what the page's own interval was (min–max, ...)
            h["run_interval"] = h["interval"]
        h.update(run_low=float(low), run_high=float(high), drift=r, drift_basis=basis, interval=WIDENED)
        h.update(low=float(low) * math.exp(-r), high=float(high) * math.exp(r))
        if h.get("kind") == "comparison" and "verdict" in h and "tie_band" in h:
            h["run_verdict"] = h["verdict"]
            h["verdict"] = judge(h["low"], h["high"], float(h["tie_band"]))
    return headlines


def _widen_signed(h: dict[str, Any], bands: dict[str, Any], page: str) -> None:
    """Widen a signed difference (:data:`SIGNED`) by its own largest past change, in its unit, either side.

    Without a past of its own it keeps its in-run interval: no other headline's change says how far a
    difference near zero moves.
    """
    own = ((_page(bands, page) or {}).get("headlines_abs") or {}).get(h["name"])
    if own is None:
        return
    if h.get("interval") and h["interval"] != WIDENED:
        h["run_interval"] = h["interval"]
    low, high = float(h["low"]), float(h["high"])
    h.update(run_low=low, run_high=high, drift=float(own), drift_unit=h["unit"], drift_basis="own", interval=WIDENED)
    h.update(low=low - float(own), high=high + float(own))


def rewiden_headlines(headlines: list[dict[str, Any]], bands: dict[str, Any], page: str, every: bool = False) -> int:
    """Widen again the headlines that a recording labelled widened by 0 because it had no drift file.

    Recordings made in a staged copy of the docs that lacked ``data/drift.json`` (before
    :func:`gallery_build.staging.stage_docs` copied it) wrote each headline with ``drift: 0``:
    its in-run interval, labelled widened. This puts the in-run interval, verdict and interval
    label back (``run_low``/``run_high``/``run_verdict``/``run_interval``) and widens them by
    ``bands`` as :func:`widen_headlines` would have. Headlines widened by more than 0 are left alone.
    A headline never widened, in a unit :data:`DRIFT_UNITS` took in after it was recorded (``%``),
    is widened too.

    Parameters
    ----------
    headlines
        A record's (or history entry's) headlines, changed in place.
    bands
        :func:`load_drift`'s result: the drift file the recording should have used.
    page
        The example's stem.
    every
        Widen again every widened headline, not only those widened by 0: for a recording not yet
        landed whose drift rule changed (the in-run intervals are kept, so nothing is lost).

    Returns
    -------
    int
        How many headlines were widened again.

    Example
    -------
    >>> h = {"name": "t", "value": 2.0, "unit": "µs", "low": 1.9, "high": 2.1}
    >>> widen_headlines([h], {}, "plot_x") and rewiden_headlines([h], {"global_p95": 0.1}, "plot_x")
    1
    """
    again = []
    for h in headlines:
        if "run_low" not in h:  # never widened: widen_headlines takes it if its unit is widened now
            again.append(h)
            continue
        if h.get("interval") != WIDENED or (float(h.get("drift") or 0.0) != 0.0 and not every):
            continue
        in_run = _in_run(h)
        h.clear()
        h.update(in_run)
        again.append(h)
    widen_headlines(again, bands, page)
    return sum("run_low" in h for h in again)


def is_widened(headline: dict[str, Any]) -> bool:
    """Whether a recorded headline's interval is wider than its in-run one: widened by a ``drift`` above 0
    (or, in a record without ``drift``, labelled widened with an interval other than its ``run_`` one).

    A page whose code has no comparable past recording has no drift to widen by (``drift: 0``):
    its interval is the run's own, and is called in-run, not widened.

    Example
    -------
    >>> is_widened({"interval": "widened", "drift": 0.0}), is_widened({"interval": "widened", "drift": 0.03})
    (False, True)
    """
    if "drift" in headline:
        return float(headline["drift"] or 0.0) > 0.0
    wider = (headline.get("low"), headline.get("high")) != (headline.get("run_low"), headline.get("run_high"))
    return headline.get("interval") == WIDENED and "run_low" in headline and wider


def widened_rst(record: dict[str, Any] | None) -> str:
    """A note for a recorded page's *Measurement notes*: each comparison's recorded interval, widened for drift.

    The page's own output prints the run's in-run 95% interval; the record (and the results
    page) keep the interval widened by the re-recording drift, and this note says so on the page.

    Parameters
    ----------
    record
        The example's JSON record.

    Returns
    -------
    str
        reST for the note; empty when no comparison headline was widened (a drift above 0).

    Example
    -------
    >>> widened_rst({"headlines": []})
    ''
    """
    widened = [h for h in (record or {}).get("headlines", []) if h.get("kind") == "comparison" and is_widened(h)]
    rows = []
    for h in widened:
        in_run = f"; in-run {h['run_low']:.2f}–{h['run_high']:.2f}" if "run_low" in h else ""
        rows.append(
            f"   * {rst_text(h['name'])}: {h['value']:.2f}× ({h['low']:.2f}–{h['high']:.2f}, widened "
            f"±{100 * float(h['drift']):.0f}% for re-recording drift{in_run}; recorded verdict: {h.get('verdict')})"
        )
    if not rows:
        return ""
    moved = [h for h in widened if h.get("run_verdict") and h.get("run_verdict") != h.get("verdict")]
    moved_text = (
        f" {len(moved)} of the {len(widened)} verdicts printed above (in-run) are a **{moved[0]['verdict']}** once "
        "widened: the results page and the backend chooser use the widened verdict."
        if moved and len({h.get("verdict") for h in moved}) == 1
        else f" {len(moved)} of the {len(widened)} verdicts printed above (in-run) change once widened: the "
        "results page and the backend chooser use the widened verdict."
        if moved
        else " The verdict printed above holds once widened."
        if len(widened) == 1
        else f" All {len(widened)} verdicts printed above hold once widened."
    )
    site = [h for h in widened if h.get("drift_basis") == "site"]
    how = (
        f"by the whole site's drift: this page has fewer than {RATIO_MIN_PAIRS} pairs of comparable past "
        "recordings (its measuring code is new or changed, or was recorded unchanged only once before), so how "
        "far its own numbers move between recordings is not known yet"
        if len(site) == len(widened)
        else "by how far this page's measurements moved between past recordings"
        + (f" ({len(site)} of them by the whole site's drift, having no past of their own)" if site else "")
    )
    head = [
        "\n.. admonition:: Recorded intervals, widened for re-recording drift",
        "   :class: cg-drift note",
        "",
        "   The page's output prints each comparison's in-run 95% interval. The record and the results "
        f"page keep it widened {how} (:doc:`/methodology`).{moved_text}",
        "",
    ]
    return "\n".join(head + rows) + "\n\n"
