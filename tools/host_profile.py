"""Where does a page's host time go? Summarize the cProfile files of a profiled recording.

On the GPU builder, record the pages into a shard with the profiler on (the shard stays off the
site: the profiler slows Python-bound code), then summarize:

    CUDNN_GUIDE_PROFILE_DIR=/tmp/prof python3 -m gallery_build.shards record /tmp/s plot_10_layernorm_rmsnorm.py
    python3 tools/host_profile.py /tmp/prof docs/data/host_profile.json

Each function's own time (cProfile's ``tottime``: not counting the functions it calls) falls in
one kind (:data:`KINDS`, first match wins), so the kinds of a page add up to its profiled time.
The frontend's native calls (pybind11 methods) are not seen by cProfile: their time counts in the
frontend's Python function that makes them (``_build_plan_at`` for a plan build). Waiting for the
GPU is the host's time too: a timing loop shows up as ``GPU wait`` and launches. Own times only:
cProfile's cumulative times of spans (imports, Dynamo's compile, the example's code blocks) came
out far below the pages' wall times in Python 3.12 on the builder, so none is reported.
"""

from __future__ import annotations

import json
import pstats
import re
import sys
from collections import defaultdict
from pathlib import Path

KINDS: tuple[tuple[str, str], ...] = (
    ("GPU wait", r"synchroniz|elapsed_time|method 'item' of|method 'cpu' of|method 'tolist' of"),
    ("waiting on threads and processes", r"acquire|'poll'|select\.|'recv|_wait|time\.sleep|posix\.read|waitpid"),
    ("torch native calls", r"^~:0\(<(built-in method|method) .*(torch|Tensor|_C\.)"),
    ("cudnn_guide (Python)", r"cudnn_guide/"),
    ("the examples (Python)", r"examples/plot_"),
    ("cuDNN Frontend (Python)", r"/cudnn/"),
    ("torch, Dynamo and Inductor (Python)", r"/torch/|/triton/"),
    ("matplotlib and image writing", r"/matplotlib/|/PIL/|zlib|png"),
    ("Sphinx and sphinx-gallery", r"/sphinx|/docutils/|/jinja2/|/pygments/"),
    ("imports and code loading", r"<frozen importlib|marshal\.loads|_imp\.|builtins\.compile|open_code"),
)
"""(kind, regular expression on ``file:line(function)``), in the order they are tried."""


def label(func: tuple[str, int, str]) -> str:
    """cProfile's key as one string: ``file:line(function)``."""
    file, line, name = func
    return f"{file}:{line}({name})"


def kind_of(where: str) -> str:
    """The first of :data:`KINDS` whose pattern matches ``where``; ``other`` if none does."""
    return next((kind for kind, pattern in KINDS if re.search(pattern, where)), "other")


def summarize(stats: pstats.Stats, top: int = 12) -> dict:
    """One profile: its seconds, the seconds of each kind, and the functions with the most own time."""
    by_kind: dict[str, float] = defaultdict(float)
    own = []
    for func, (_, _, tottime, _, _) in stats.stats.items():
        where = label(func)
        by_kind[kind_of(where)] += tottime
        own.append((tottime, where))
    own.sort(reverse=True)
    return {
        "seconds": round(stats.total_tt, 3),
        "by_kind": {k: round(v, 3) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top_own_time": [{"function": w, "seconds": round(t, 3)} for t, w in own[:top]],
    }


def main(profile_dir: Path, out: Path | None = None) -> dict:
    files = sorted(profile_dir.glob("*.pstats"))
    if not files:
        raise SystemExit(f"host_profile: no .pstats files in {profile_dir}: record with CUDNN_GUIDE_PROFILE_DIR set")
    pages = {f.stem: summarize(pstats.Stats(str(f))) for f in files}
    total: dict[str, float] = defaultdict(float)
    for page in pages.values():
        for kind, seconds in page["by_kind"].items():
            total[kind] += seconds
    result = {
        "about": __doc__.split("\n\n")[0],
        "seconds": round(sum(p["seconds"] for p in pages.values()), 3),
        "by_kind": {k: round(v, 3) for k, v in sorted(total.items(), key=lambda kv: -kv[1])},
        "pages": pages,
    }
    if out:
        out.write_text(json.dumps(result, indent=1) + "\n")
    for kind, seconds in result["by_kind"].items():
        print(f"{seconds:8.1f} s  {kind}")
    return result


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
