"""The same code recorded on two leases of one H200: which numbers and which costs move with the lease?

    PYTHONPATH=docs/_ext:. python tools/scale/lease_check.py SHARD [OUT.json [FIRST_GALLERY]]

(default ``docs/data/lease_check.json``). ``SHARD`` is the second lease's recording of pages 01-15
(``tools/scale/benchmark.sh``'s shard), kept off the site; its history lines are kept in
``docs/data/b2_second_lease.history.jsonl``. The first is the site's recording of the same pages.

Two comparisons: the reproducibility report the site uses between recordings
(:func:`gallery_build.history.reproducibility`), and each page's run split by kind of work
(:func:`gallery_build.cell_times.time_spent`): GPU timing, fresh processes, ``torch.compile`` and
the rest.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gallery_build import history
from gallery_build.cell_times import time_spent

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"
FIRST = {"commit": "da317ad", "label": "R18, the site's recording (pages 01-15)"}
SECOND = {
    "commit": "2ebb3f0",
    "label": "b2, a second lease right after (pages 01-15, kept off the site)",
    "history": "b2_second_lease.history.jsonl",
}


def records_of(gallery: Path, commit: str) -> list[dict]:
    """:func:`time_spent` of ``gallery``'s pages, refusing a page recorded at another commit than ``commit``."""
    for path in sorted(gallery.glob("*.record.json")):
        recorded = str(json.loads(path.read_text()).get("environment", {}).get("commit", ""))
        if not recorded.startswith(commit):
            raise SystemExit(
                f"lease_check: {path} was recorded at {recorded[:7] or 'no commit'}, not {commit}: the site has "
                "moved on since that recording. Pass the first recording's pages (its shard) instead."
            )
    return time_spent(gallery)


def main(shard: Path, out: Path, first_gallery: Path = ROOT / "docs" / "auto_examples") -> dict:
    first = [
        e
        for e in history.load(DATA / "history.jsonl")
        if str(e.get("commit", "")).startswith(FIRST["commit"]) and e["example"] < "plot_16"
    ]
    second = history.load(DATA / SECOND["history"])
    if not first or not second:
        raise SystemExit(f"lease_check: no history lines for {FIRST['commit'] if not first else SECOND['history']}")
    pages = {e["example"] for e in second}
    report = history.reproducibility(sorted(first + second, key=lambda e: str(e.get("recorded_utc"))))
    split = {
        "first": [r for r in records_of(first_gallery, FIRST["commit"]) if r["example"] in pages],
        "second": time_spent(shard / "auto_examples"),
    }
    result = {
        "about": __doc__.split("\n\n")[0],
        "first": FIRST,
        "second": {k: v for k, v in SECOND.items() if k != "history"},
        "report": report,
        "split": split,
    }
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(history.format_reproducibility(report).splitlines()[0])
    return result


if __name__ == "__main__":
    main(
        Path(sys.argv[1]),
        Path(sys.argv[2]) if len(sys.argv) > 2 else DATA / "lease_check.json",
        *(Path(a) for a in sys.argv[3:4]),
    )
