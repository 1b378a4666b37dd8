"""An A/B of ``gallery_build.resolve_in_workers`` on the whole site: Sphinx's own writing against the pages resolved in
its workers, and whether the two sites differ anywhere two builds of the site always differ.

Builds the site in render mode twice from this checkout (``-j N``), once with ``CUDNN_GUIDE_RESOLVE_IN_MAIN=1``
(Sphinx's own method) and once without, each into a new folder under a temporary directory with the myst-nb
execution folder removed first, and compares every output file. Before comparing, it sets aside what differs between
any two builds of this site: pandas' random table ids (``T_`` and five hex digits), the build folder's path
(printed by the API pages), the package wheel the site links (its zip records file times) and blank lines inside a
notebook cell's printed output (its lines come with a blank line between them where the kernel happened to send
them in two messages: seen between two builds in ``maintainers/measurement_studies.html``). Run from the
repository root::

    PYTHONPATH=docs/_ext:. python tools/resolve_ab.py docs/data/resolve_in_workers_ab.json --jobs 4
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gallery_build.resolve_in_workers import OFF_ENV

RANDOM_IDS = re.compile(rb"T_[0-9a-f]{5}")
BLANK_LINES = re.compile(rb"\n\s*\n")
STREAM_OUTPUT = re.compile(rb'<div class="output stream[^"]*">.*?</pre>', re.S)  # a notebook cell's printed lines


def build(out: Path, jobs: int, own: bool) -> float:
    """One render-mode build of the site into ``out``; its wall seconds."""
    shutil.rmtree(Path("docs") / "jupyter_execute", ignore_errors=True)
    env = {**os.environ, "CUDNN_GUIDE_DOCS_MODE": "render"}
    env.pop(OFF_ENV, None)
    if own:
        env[OFF_ENV] = "1"
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-j", str(jobs), "-b", "html", "docs", str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"the site build failed ({'own' if own else 'workers'}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0


def normalized(path: Path, root: Path) -> bytes:
    text = RANDOM_IDS.sub(b"T_xxxxx", path.read_bytes().replace(str(root).encode(), b"<build>"))
    return STREAM_OUTPUT.sub(lambda m: BLANK_LINES.sub(b"\n", m.group(0)), text)


def compare(a: Path, b: Path) -> dict[str, object]:
    """Files only in one site, files that differ, and files that differ once the known differences are set aside."""
    files = lambda root: {
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".doctrees" not in p.parts
    }
    fa, fb = files(a), files(b)
    both = sorted(fa & fb)
    raw = [f for f in both if (a / f).read_bytes() != (b / f).read_bytes()]
    still = [
        f for f in raw if not f.endswith(".whl") and f != ".buildinfo" and normalized(a / f, a) != normalized(b / f, b)
    ]
    return {
        "files": len(both),
        "only_sphinx": sorted(fa - fb),
        "only_workers": sorted(fb - fa),
        "differing": raw,
        "differing_after_known": still,
    }


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI, builds the site twice
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--keep", type=Path, help="copy both sites here (to see how they differ)")
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="resolve-ab-") as work:
        own, workers = Path(work) / "sphinx", Path(work) / "workers"
        seconds = {"sphinx": build(own, args.jobs, True), "workers": build(workers, args.jobs, False)}
        result = {
            "about": "tools/resolve_ab.py: the whole site built in render mode with Sphinx's own parallel writing and "
            "with gallery_build.resolve_in_workers, every output file compared, then again with what differs between "
            "any two builds set aside (pandas' random table ids, the build folder's path, the wheel's file times, "
            "blank lines where a notebook kernel split a cell's printed output). "
            "Seconds are one build each on this machine, not a timing study.",
            "commit": commit,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "jobs": args.jobs,
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
            **compare(own, workers),
        }
        if args.keep:
            shutil.copytree(work, args.keep, dirs_exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "about"}, indent=1))


if __name__ == "__main__":  # pragma: no cover
    main()
