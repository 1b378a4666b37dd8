"""How lanes hold the GPU's turn: a whole-site recording with cells sharing it, and an A/B of the two scopes.

Reads shards recorded on the builder (``gallery_build.shards record``) and the recorder's logs, and
writes ``docs/data/turn_scope_study.json``, which the measurement studies' "Cells that share the
turn" renders:

* ``site``: a whole-site recording made with ``CUDNN_GUIDE_TURN_SCOPE=measured`` (its shards and the
  log of each call): per page, the turns, the seconds it waited, set aside, held the turn and held
  it alone, and its record's timing, fresh-process and compile seconds; its reproducibility against
  the committed recording (``history.reproducibility``, as ``shards merge`` reports it);
* ``ab``: the same pages recorded in one lease under each scope, one after the other: each
  headline beside the committed interval, and how many measurements moved beyond their noise band
  against the committed recording and between the two. A headline is left out where the A/B lease
  lacked a contender the committed recording had (FlashAttention-4 without the CuTe parks).

With ``--site`` alone it describes any whole-site recording the same way (``docs/data/lean_timing_site.json``:
4f40a0d's, with the cell-wide turn, for the measurement studies' "Less spent around each timing";
``docs/data/shared_turn_site.json``: d51459d's, with cells sharing the turn, for "The shared turn, again").

Run from the repository root::

    PYTHONPATH=docs/_ext:. python tools/turn_scope_study.py docs/data/turn_scope_study.json --baseline d69147b \\
        --site A=/tmp/shards/shard_A:log_A.txt --site B=/tmp/shards/shard_B:log_B.txt \\
        --merge-seconds 2.2 --site-seconds 38.8 \\
        --ab cell=/tmp/ab/shard_cell:log_cell.txt --ab measured=/tmp/ab/shard_measured:log_measured.txt
    PYTHONPATH=docs/_ext:. python tools/turn_scope_study.py docs/data/lean_timing_site.json --baseline 4a87b12 \\
        --site A=/tmp/shards/shard_A:log_A.txt --site B=/tmp/shards/shard_B:log_B.txt \\
        --merge-seconds 1.4 --site-seconds 31.6 --about "..."
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gallery_build import history

from cudnn_guide import datafiles

TURNS = re.compile(
    r"cudnn-guide: (?P<page>\S+\.py): (?P<turns>\d+) turns on the GPU, (?P<waited>[\d.]+) s waiting for one, "
    r"(?P<aside>[\d.]+) s of CPU-only work beside other lanes, (?P<held>[\d.]+) s holding the GPU "
    r"\((?P<alone>[\d.]+) s of it alone\)(?:, gave way (?P<gave_way>\d+) times? to a lane waiting to measure)?"
)
RECORDED = re.compile(r"cudnn-guide: recorded (?P<page>\S+\.py) in (?P<seconds>[\d.]+) s on lane (?P<lane>\d+)")
SKIPPED = re.compile(r"cudnn-guide: skipped (?P<page>\S+\.py): (?P<why>.*)")
SUMMARY = re.compile(r"cudnn-guide: summary: (?P<done>\d+) of (?P<of>\d+) page\(s\) recorded in (?P<seconds>\d+) s")
READY = re.compile(r"the interpreters were ready (?P<seconds>[\d.]+) s after they were started")


def read_log(lines: Iterable[str]) -> dict[str, Any]:
    """One recorder call's log: each page's turns and seconds, its recorder seconds and interpreters' start.

    Parameters
    ----------
    lines
        The recorder's standard output.

    Returns
    -------
    dict[str, Any]
        ``pages`` (name → ``turns``, ``waited``, ``aside``, ``held``, ``alone``, ``seconds``,
        ``lane``, ``gave_way`` where the log says it, or ``skipped``), ``recorder_seconds`` and
        ``interpreters_ready_seconds`` (``None`` when the log does not say).

    Example
    -------
    >>> read_log(["cudnn-guide: summary: 1 of 1 page(s) recorded in 7 s (pages 7 s)"])["recorder_seconds"]
    7
    """
    pages: dict[str, dict[str, Any]] = {}
    recorder = ready = None
    for line in lines:
        if m := TURNS.search(line):
            pages.setdefault(m["page"], {}).update(
                turns=int(m["turns"]), **{k: float(m[k]) for k in ("waited", "aside", "held", "alone")}
            )
            if m["gave_way"] is not None:  # since ade7bb1's successor (issue 34)
                pages[m["page"]]["gave_way"] = int(m["gave_way"])
        elif m := RECORDED.search(line):
            pages.setdefault(m["page"], {}).update(seconds=float(m["seconds"]), lane=int(m["lane"]))
        elif m := SKIPPED.search(line):
            pages.setdefault(m["page"], {})["skipped"] = m["why"].strip()
        elif m := SUMMARY.search(line):
            recorder = int(m["seconds"])
        elif m := READY.search(line):
            ready = float(m["seconds"])
    return {"pages": pages, "recorder_seconds": recorder, "interpreters_ready_seconds": ready}


def finished_pages(pages: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The pages of :func:`read_log` that the call finished (recorded or skipped).

    A page cut short by the call's time limit logs its turns but no seconds; a later call recorded it.

    Parameters
    ----------
    pages
        :func:`read_log`'s ``pages``.

    Returns
    -------
    dict[str, Any]
        The same, without the pages cut short.

    Example
    -------
    >>> finished_pages({"a.py": {"turns": 3, "seconds": 9.0}, "b.py": {"turns": 2}})
    {'a.py': {'turns': 3, 'seconds': 9.0}}
    """
    return {n: dict(p) for n, p in pages.items() if "seconds" in p or "skipped" in p}


def _records(gallery: Path) -> dict[str, dict[str, Any]]:
    return {p.name.split(".")[0]: datafiles.read_json(p) for p in sorted(gallery.glob("*.record.json"))}


def spent(record: Mapping[str, Any]) -> dict[str, float]:
    """A record's timing, fresh-process and compile seconds (0 where it counted none).

    Parameters
    ----------
    record
        A loaded example record.

    Returns
    -------
    dict[str, float]
        ``timing``, ``fresh_processes``, ``compile``.

    Example
    -------
    >>> spent({"seconds": {"timing": 1.25}})
    {'timing': 1.2, 'fresh_processes': 0.0, 'compile': 0.0}
    """
    s = record.get("seconds") or {}
    return {
        "timing": round(s.get("timing", 0.0), 1),
        "fresh_processes": round(s.get("fresh processes", 0.0), 1),
        "compile": round(s.get("compile", 0.0), 1),
    }


def comparable_headlines(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[dict[str, Any], float]]:
    """The headlines of ``old`` with an interval that ``new`` measured with the same contenders.

    A headline is left out where ``new`` lacks a measurement the headline names in ``old``
    (``measurement``, ``candidate_measurement``, ``baseline_measurement``): a contender missing
    from that lease.

    Parameters
    ----------
    old, new
        Two records of one page.

    Returns
    -------
    list[tuple[dict[str, Any], float]]
        Each kept headline of ``old`` with the value ``new`` gave it.

    Example
    -------
    >>> comparable_headlines(committed, recorded)
    """
    have = {m.get("label") for m in new.get("measurements", [])} | {m.get("name") for m in new.get("measurements", [])}
    values = {h["name"]: h["value"] for h in new.get("headlines", [])}
    kept = []
    for h in old.get("headlines", []):
        if "low" not in h or h["name"] not in values:
            continue
        named = [h.get(k) for k in ("measurement", "candidate_measurement", "baseline_measurement") if h.get(k)]
        if any(n not in have for n in named):
            continue
        kept.append((h, values[h["name"]]))
    return kept


def _moved(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[int, int]:
    rows = [
        r for r in history.compare(history.entry_from_record(old), history.entry_from_record(new)) if r["same_method"]
    ]
    return sum(r["moved"] for r in rows), len(rows)


def site_study(calls: Mapping[str, tuple[Path, Path]], committed: Path, history_path: Path) -> dict[str, Any]:
    """The whole-site recording's calls, pages and reproducibility against the committed recording.

    Parameters
    ----------
    calls
        Call name → (its shard's folder, its log).
    committed
        The committed gallery (``docs/auto_examples``).
    history_path
        ``docs/data/history.jsonl``.

    Returns
    -------
    dict[str, Any]
        ``calls``, ``pages``, ``reproducibility`` (counts) and ``outside`` (the headlines outside
        the committed interval).

    Example
    -------
    >>> site_study({"A": (Path("/tmp/shard_A"), Path("log_A.txt"))}, Path("docs/auto_examples"), hist)
    """
    pages: dict[str, dict[str, Any]] = {}
    out_calls: dict[str, Any] = {}
    new_entries = []
    for call, (shard, log) in calls.items():
        read = read_log(log.read_text().splitlines())
        read["pages"] = finished_pages(read["pages"])
        out_calls[call] = {
            "pages_recorded": sum(1 for p in read["pages"].values() if "skipped" not in p),
            "recorder_seconds": read["recorder_seconds"],
            "interpreters_ready_seconds": read["interpreters_ready_seconds"],
        }
        records = _records(shard / "auto_examples")
        for name, page in read["pages"].items():
            record = records.get(name[:-3])
            pages[name] = {"call": call, **page, **(spent(record) if record and "skipped" not in page else {})}
        new_entries += history.entries_from_gallery(shard / "auto_examples")
    commits = {e.get("commit") for e in new_entries} - {None}
    committed_history = history.load(history_path)
    report = history.reproducibility(committed_history + new_entries)
    across = sum(1 for f in report["flipped"] if {f.get("previous"), f.get("latest")} == {"faster", "slower"})
    was = {e.get("commit") for e in history.entries_from_gallery(committed)} - {None}
    return {
        "commit": ", ".join(sorted(c[:7] for c in commits)),
        "commit_compared": ", ".join(sorted(c[:7] for c in was)),
        "gpu": ", ".join(sorted({e.get("gpu") or "?" for e in new_entries})),
        "calls": out_calls,
        "pages": dict(sorted(pages.items())),
        "reproducibility": {
            "pages": report["pages"],
            "measurements": report["measurements"],
            "moved": len(report["moved"]),
            "moved_wall_clock": sum("wall-clock" in m["measurement"] for m in report["moved"]),
            "headlines_with_interval": report["headlines_with_interval"],
            "headlines_inside": report["headlines_inside"],
            "verdicts": report["verdicts"],
            "verdicts_changed": len(report["flipped"]),
            "faster_slower": across,
        },
        "outside": [
            {k: r.get(k) for k in ("example", "headline", "previous", "low", "high", "latest")}
            for r in report["outside"]
        ],
    }


def ab_study(runs: Mapping[str, tuple[Path, Path]], committed: Path) -> dict[str, Any]:
    """The same pages under each scope in one lease: headlines beside the committed interval, moves.

    Parameters
    ----------
    runs
        Scope → (its shard's folder, its log).
    committed
        The committed gallery.

    Returns
    -------
    dict[str, Any]
        ``runs`` (scope → when its first page was recorded, recorder seconds, held and alone seconds),
        ``headlines`` (rows),
        ``outside`` and ``moved`` (scope → count against the committed recording),
        ``moved_between`` (the second scope against the first).

    Example
    -------
    >>> ab_study({"cell": (cell, log), "measured": (meas, log2)}, Path("docs/auto_examples"))
    """
    old = _records(committed)
    recorded = {scope: _records(shard / "auto_examples") for scope, (shard, _) in runs.items()}
    logs = {scope: read_log(log.read_text().splitlines()) for scope, (_, log) in runs.items()}
    scopes = list(runs)
    pages = sorted(set.intersection(*(set(r) for r in recorded.values())))
    rows, moved, measured = [], dict.fromkeys(scopes, 0), dict.fromkeys(scopes, 0)
    for page in pages:
        kept = {
            scope: dict((h["name"], v) for h, v in comparable_headlines(old[page], recorded[scope][page]))
            for scope in scopes
        }
        for h in old[page]["headlines"]:
            if all(h["name"] in kept[s] for s in scopes):
                rows.append(
                    {"page": page, "headline": h["name"], "low": h["low"], "high": h["high"]}
                    | {s: kept[s][h["name"]] for s in scopes}
                )
        for scope in scopes:
            m, n = _moved(old[page], recorded[scope][page])
            moved[scope] += m
            measured[scope] += n
    between = [_moved(recorded[scopes[0]][p], recorded[scopes[1]][p]) for p in pages] if len(scopes) == 2 else []
    return {
        "pages": pages,
        "runs": {
            s: {
                "first_recorded_utc": min(r.get("created_utc", "") for r in recorded[s].values()),
                "recorder_seconds": logs[s]["recorder_seconds"],
                "held": round(sum(p.get("held", 0.0) for p in logs[s]["pages"].values()), 1),
                "alone": round(sum(p.get("alone", 0.0) for p in logs[s]["pages"].values()), 1),
            }
            for s in scopes
        },
        "headlines": rows,
        "outside": {s: sum(1 for r in rows if not r["low"] <= r[s] <= r["high"]) for s in scopes},
        "moved": {s: {"moved": moved[s], "of": measured[s]} for s in scopes},
        "moved_between": {"moved": sum(m for m, _ in between), "of": sum(n for _, n in between)},
    }


def _pairs(specs: list[str]) -> dict[str, tuple[Path, Path]]:
    out = {}
    for spec in specs:
        name, _, paths = spec.partition("=")
        shard, _, log = paths.partition(":")
        if not (name and shard and log):
            raise SystemExit(f"turn_scope_study: {spec!r}: expected NAME=SHARD_DIR:LOG")
        out[name] = (Path(shard), Path(log))
    return out


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--site", action="append", default=[], help="CALL=SHARD_DIR:LOG")
    parser.add_argument("--ab", action="append", default=[], help="SCOPE=SHARD_DIR:LOG")
    parser.add_argument("--merge-seconds", type=float, required=True)
    parser.add_argument("--site-seconds", type=float, required=True)
    parser.add_argument("--about", default="")
    parser.add_argument(
        "--baseline", required=True, help="the git revision whose gallery and history the recordings are compared with"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:  # the baseline's gallery and history, as committed then
        archive = subprocess.run(
            ["git", "archive", args.baseline, "docs/auto_examples", "docs/data/history.jsonl"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        committed, hist = Path(tmp) / "docs" / "auto_examples", Path(tmp) / "docs" / "data" / "history.jsonl"
        data: dict[str, Any] = {"about": args.about, "baseline": args.baseline}
        site = site_study(_pairs(args.site), committed, hist)
        data |= {"site": site | {"merge_seconds": args.merge_seconds, "site_seconds": args.site_seconds}}
        if args.ab:
            data["ab"] = ab_study(_pairs(args.ab), committed)
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":  # pragma: no cover
    main()
