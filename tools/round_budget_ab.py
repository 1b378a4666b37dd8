"""An A/B of compare's round budget: the same pages recorded in one lease with two budgets.

``compare`` times each contender for :data:`~cudnn_guide.measure.compare.ROUND_BUDGET_MS` of GPU time a
round (each call's spin and flush included); ``CUDNN_GUIDE_ROUND_BUDGET_MS`` replaces it for a whole
recorder call, but for a ``compare`` that passes its own ``round_budget_ms`` (plot_04's). Such a shard
is never merged into the site. Recorded on the builder as two shard recordings in one lease (the same pages, three
lanes), this tool reads the two shards and their logs and writes, per run: its recorder seconds,
its pages' timing seconds (the records' ``seconds["timing"]``) and the time held alone; each
headline beside the committed interval; and the measurements that moved beyond their noise band,
against the committed recording and between the two runs (``turn_scope_study.ab_study``).

Run from the repository root::

    PYTHONPATH=docs/_ext:.:tools python tools/round_budget_ab.py docs/data/round_budget_ab.json \\
        --baseline <commit of the committed recording> \\
        --run "12.5 ms=/tmp/ab/shard_T:/tmp/ab/log_T.txt" --run "25 ms=/tmp/ab/shard_C:/tmp/ab/log_C.txt" \\
        --default-ms 25 --about "..."

A shard keeps its budget only where the variable replaced the default; ``--default-ms`` is the default
at the commit the runs recorded (25 ms until issue 34 made it 12.5 ms); two runs with the same
budget are refused.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gallery_build.shards import read_shard
from turn_scope_study import _pairs, _records, ab_study, spent


def budget_ab(runs: Mapping[str, tuple[Path, Path]], committed: Path, default_ms: float) -> dict[str, Any]:
    """:func:`turn_scope_study.ab_study` of the runs, with each run's timing seconds over the pages both recorded.

    Parameters
    ----------
    runs
        Run name (its budget) → (its shard's folder, its log), in the order they ran.
    committed
        The committed gallery (``docs/auto_examples``).
    default_ms
        ``compare``'s default budget at the commit the runs recorded: a shard that kept none used it.

    Returns
    -------
    dict[str, Any]
        ``ab_study``'s result; each of its ``runs`` also has ``round_budget_ms`` (from its ``shard.json``;
        ``default_ms`` where none is kept), ``timing`` (seconds, summed over the pages) and ``timing_by_page``.

    Example
    -------
    >>> budget_ab({"12.5 ms": (t, log_t), "25 ms": (c, log_c)}, Path("docs/auto_examples"), 25.0)["runs"]["12.5 ms"]
    """
    out = ab_study(runs, committed)
    for name, (shard, _) in runs.items():
        recs = _records(shard / "auto_examples")
        by_page = {page: spent(recs[page])["timing"] for page in out["pages"]}
        budget = read_shard(shard).round_budget_ms or default_ms  # none kept: the default of its commit
        out["runs"][name] |= {
            "round_budget_ms": budget,
            "timing": round(sum(by_page.values()), 1),
            "timing_by_page": by_page,
        }
    budgets = [run["round_budget_ms"] for run in out["runs"].values()]
    if len(set(budgets)) != len(budgets):
        raise ValueError(
            f"round_budget_ab: the runs were recorded with the same budget ({budgets[0]:g} ms); check --default-ms "
            "(the default of the runs' commit) and that one run set CUDNN_GUIDE_ROUND_BUDGET_MS"
        )
    return out


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--run", action="append", required=True, help="NAME=SHARD_DIR:LOG, in the order they ran")
    parser.add_argument("--baseline", required=True, help="the git revision whose gallery the runs are compared with")
    parser.add_argument("--about", default="")
    parser.add_argument(
        "--default-ms",
        type=float,
        required=True,
        help="compare's default round budget at the commit the runs recorded (25 before issue 34 made it 12.5)",
    )
    args = parser.parse_args(argv)
    if not (math.isfinite(args.default_ms) and args.default_ms > 0):
        raise SystemExit("round_budget_ab: --default-ms must be a positive number of milliseconds")
    runs = _pairs(args.run)
    if len(args.run) != 2 or len(runs) != 2:
        raise SystemExit("round_budget_ab: give exactly two --run, with two different names (the budgets)")
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", args.baseline, "docs/auto_examples"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        data = {"about": args.about, "baseline": args.baseline}
        data |= budget_ab(runs, Path(tmp) / "docs" / "auto_examples", args.default_ms)
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":  # pragma: no cover
    main()
