"""An A/B of the site build with and without :mod:`gallery_build.navigation_cache`: wall time, and the same HTML.

Builds the site in render mode (``-W -j auto``) ``--rounds`` times each way, alternating, into two folders,
times each build and the part of it that writes viewcode's source pages (from its output's "generating
indices" to "writing additional pages", timed as the lines arrive), then compares every HTML page of the
last two builds. Tables the results notebooks draw
with pandas get random ids (``T_xxxxx``) in every build; they are set to one before comparing. Writes
``docs/data/navigation_cache_ab.json``. Run from the repository root (about a minute a build on two cores)::

    PYTHONPATH=docs/_ext:. python tools/navigation_cache_ab.py docs/data/navigation_cache_ab.json --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

WITHOUT = (
    "import gallery_build.navigation_cache as n; n.install = lambda app: False\n"
    "import sys, sphinx.cmd.build as b; sys.exit(b.main(sys.argv[1:]))"
)
STYLER_ID = re.compile(r"T_[0-9a-f]{5}")


def build(out: Path, cached: bool) -> tuple[float, float]:
    """One render build into ``out`` (emptied first), with the cache or without: its seconds, and the seconds from
    "generating indices" to "writing additional pages" in its output (viewcode's source pages are written there)."""
    shutil.rmtree(out, ignore_errors=True)
    args = ["-W", "--keep-going", "-j", "auto", "-b", "html", "docs", str(out)]
    cmd = [sys.executable, "-m", "sphinx", *args] if cached else [sys.executable, "-c", WITHOUT, *args]
    env = {**os.environ, "CUDNN_GUIDE_DOCS_MODE": "render"}
    start, marks = time.perf_counter(), {}
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            for mark in ("generating indices", "writing additional pages"):
                if line.startswith(mark):
                    marks.setdefault(mark, time.perf_counter() - start)
    if proc.returncode:
        raise SystemExit(f"the build {'with' if cached else 'without'} the cache failed: run it alone to see why")
    return time.perf_counter() - start, marks["writing additional pages"] - marks["generating indices"]


def same_html(a: Path, b: Path) -> dict[str, object]:
    """Every HTML page of ``a`` against ``b``'s, pandas' random table ids set to one."""
    pages = sorted(p.relative_to(a) for p in a.rglob("*.html"))
    differ = [
        str(p)
        for p in pages
        if STYLER_ID.sub("T_id", (a / p).read_text()) != STYLER_ID.sub("T_id", (b / p).read_text())
    ]
    return {
        "pages": len(pages),
        "pages_differing": differ,
        "missing": sorted(str(p.relative_to(b)) for p in b.rglob("*.html") if not (a / p.relative_to(b)).exists()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/navigation_cache_ab"))
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {"without": [], "with": []}
    source_pages: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(args.rounds):
        for name in ("without", "with"):
            total, pages = build(args.work / name, name == "with")
            seconds[name].append(round(total, 1))
            source_pages[name].append(round(pages, 2))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "about": __doc__.split("\n\n")[0].replace("\n", " "),
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "seconds": seconds,
        "median_seconds": {k: statistics.median(v) for k, v in seconds.items()},
        "source_pages_seconds": source_pages,
        "html": same_html(args.work / "without", args.work / "with"),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("seconds", "source_pages_seconds")}), result["html"]["pages_differing"])


if __name__ == "__main__":
    main()
