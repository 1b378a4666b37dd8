"""Does recording on two GPUs at once change the numbers? Same commit, one GPU against two, page by page.

    PYTHONPATH=docs/_ext python tools/scale/concurrency_check.py [OUT.json]

(default ``docs/data/concurrency_check.json``).

Each pair is two recordings of one commit, one made on a single GPU and one on both GPUs of a host,
compared with the reproducibility report the site uses between recordings
(:func:`gallery_build.history.reproducibility`): measurements beyond their noise band, headlines
outside the other's interval, verdicts that changed. The histories come from
``docs/data/history.jsonl`` and, for recordings kept off the site, their own history files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gallery_build import history

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"


def _first_15_beside(commit: str, off_site: str):
    """The site's pages 01-15 recorded at ``commit``, and a recording of them kept off the site."""
    return lambda main: (
        [e for e in main if str(e.get("commit", "")).startswith(commit) and e["example"] < "plot_16"]
        + history.load(DATA / off_site)
    )


PAIRS = [
    {
        "commit": "f1fcb68",
        "first": "R12, GPU 0 alone (all 25 pages)",
        "second": "R13, both GPUs, the same lease right after",
        "lines": lambda main: [e for e in main if str(e.get("commit", "")).startswith("f1fcb68")],
    },
    {
        "commit": "10f39c5",
        "first": "R14, both GPUs (pages 01-15 of it)",
        "second": "b1, GPU 0 alone, the same lease right after (pages 01-15, kept off the site)",
        "lines": _first_15_beside("10f39c5", "b1_one_gpu.history.jsonl"),
    },
    {
        "commit": "f62a656",
        "first": "R19, both GPUs (pages 01-15 of it), first work of a fresh lease after the CuTe park calls",
        "second": "b5, GPU 0 alone, the same lease right after (pages 01-15, kept off the site)",
        "lines": _first_15_beside("f62a656", "b5_one_gpu.history.jsonl"),
    },
]


def main(out: Path) -> dict:
    lines = history.load(DATA / "history.jsonl")
    result = {"about": __doc__.split("\n\n")[0], "pairs": []}
    for pair in PAIRS:
        chosen = sorted(pair["lines"](lines), key=lambda e: str(e.get("recorded_utc")))
        report = history.reproducibility(chosen)
        result["pairs"].append({k: pair[k] for k in ("commit", "first", "second")} | {"report": report})
        print(f"{pair['commit']}: {history.format_reproducibility(report).splitlines()[0]}")
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return result


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA / "concurrency_check.json")
