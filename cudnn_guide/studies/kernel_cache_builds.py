"""Build times with and without a shared kernel cache, in four fresh processes: the kernel-cache page's study.

The kernel-cache page's lesson builds one matmul-epilogue graph at two batch sizes on one
``cudnn.create_kernel_cache()``. This module holds how the page measures what the cache saves, with the graphs of
:mod:`cudnn_guide.studies.dynamic_shapes`:

* :func:`run_plan` and :func:`fresh_runs`: the same batch sizes built four ways, with and without the cache, in
  ascending and descending order, each in a new interpreter with the CUDA JIT disk cache off
  (:data:`NO_JIT_CACHE`); :func:`build_lines` prints them;
* :func:`speedup_rows`: every batch's build times and the cache's speed-up for it, each later build marked a hit
  or a miss (:func:`later_builds`: every build after the first of its process);
* :func:`findings` and :func:`conclusions`: the hits and misses, the build-order effect without the cache, and
  whether dynamic-shape kernels execute slower, as numbers (:class:`Findings`, which the page's records quote)
  and as the page's sentences.

The runs need a GPU; the rows, the numbers and the sentences do not.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "NO_JIT_CACHE",
    "ORDERS",
    "SAME",
    "Findings",
    "build_lines",
    "conclusions",
    "findings",
    "fresh_runs",
    "later_builds",
    "run_plan",
    "speedup_rows",
    "weigh",
]

NO_JIT_CACHE = {"CUDA_CACHE_DISABLE": "1"}
"""The runs' environment: no process reuses kernels another (or the page's own process) compiled."""

ORDERS = ("ascending", "descending")
"""The two build orders; each is run with the cache (``"cache, <order>"``) and without (``"no cache, <order>"``)."""

SAME = 2
"""Two changes within this factor of each other are "about as much as" each other (:func:`weigh`)."""

Build = tuple[int, int, float, float]
"""A later build: (batch built before, batch, the cache's speed-up, ms with the cache)."""

Runs = Mapping[str, Sequence[Mapping[str, Any]]]
"""Run name → the rows of :func:`~cudnn_guide.studies.dynamic_shapes.run_fresh_sequence`, in build order."""


def run_plan(batches: Sequence[int]) -> list[tuple[str, list[int], bool]]:
    """The four runs, in the order they run: (name, batch sizes in build order, with the kernel cache).

    Parameters
    ----------
    batches
        Batch sizes, ascending.

    Returns
    -------
    list[tuple[str, list[int], bool]]
        ``"cache, ascending"``, ``"no cache, ascending"``, ``"cache, descending"``, ``"no cache, descending"``.

    Example
    -------
    >>> [name for name, _, _ in run_plan([1, 2, 4])]
    ['cache, ascending', 'no cache, ascending', 'cache, descending', 'no cache, descending']
    """
    up = list(batches)
    return [
        ("cache, ascending", up, True),
        ("no cache, ascending", up, False),
        ("cache, descending", up[::-1], True),
        ("no cache, descending", up[::-1], False),
    ]


def fresh_runs(batches: Sequence[int]) -> dict[str, list[dict[str, Any]]]:
    """The four runs of :func:`run_plan`, each in a new interpreter: one after another, or in pairs.

    Each run is :func:`~cudnn_guide.studies.dynamic_shapes.run_fresh_sequence` (labelled with its name): it builds
    the graph for each batch size in order, checks each output against PyTorch (a failed check raises), and times
    each build and execution. The interpreters come from one
    :class:`~cudnn_guide.studies.fresh_process.InterpreterPool` of four, preloaded with
    :data:`~cudnn_guide.studies.dynamic_shapes.PRELOAD`, with :data:`NO_JIT_CACHE` in their environment. Where the
    pool runs two at once (:data:`~cudnn_guide.studies.fresh_process.AT_ONCE_ENV`, set by the recorder's lanes),
    each order's run with the cache and its run without start together, each on half of the caller's cores; their
    builds overlap, their GPU work (checks and timed executions) takes turns
    (:func:`~cudnn_guide.studies.fresh_process.timing_alone`). 5a51bec's recording ran before that lock: its pairs'
    execution timings may have overlapped the neighbour's kernels.

    Parameters
    ----------
    batches
        Batch sizes, ascending.

    Returns
    -------
    dict[str, list[dict[str, Any]]]
        Run name → its rows, in :func:`run_plan`'s order.

    Example
    -------
    >>> runs = fresh_runs([1, 2, 4, 8, 16, 32, 64, 128, 256])
    """
    from cudnn_guide.studies import dynamic_shapes, fresh_process

    plan = run_plan(batches)
    runs = {}
    with fresh_process.InterpreterPool(len(plan), preload=dynamic_shapes.PRELOAD, env=NO_JIT_CACHE) as pool:
        rows = dynamic_shapes.run_fresh_sequences([(order, use_cache, name) for name, order, use_cache in plan], pool)
        if pool.at_once == 2:
            print("each order's two runs (with the cache, without) ran at once, on half of this process's cores each")
    for (name, _, _), run_rows in zip(plan, rows, strict=True):
        runs[name] = run_rows
    return runs


def build_lines(runs: Runs) -> list[str]:
    """One line per run with each build's time (``batch:ms``), then one saying that every graph passed its check.

    Parameters
    ----------
    runs
        Run name → rows (``batch``, ``build_s``, ``rel_error`` each).

    Returns
    -------
    list[str]
        The lines, to print.

    Example
    -------
    >>> print("\\n".join(build_lines(runs)))
    """
    lines = [
        f"{name:22s} builds (ms): " + " ".join(f"{r['batch']}:{r['build_s'] * 1e3:.0f}" for r in rows)
        for name, rows in runs.items()
    ]
    largest = max(r["rel_error"] for rows in runs.values() for r in rows)
    n_graphs = sum(len(r) for r in runs.values())
    lines.append(f"all {n_graphs} graphs passed their check (largest rel. error {largest:.1e})")
    return lines


def _row(runs: Runs, name: str, batch: int) -> Mapping[str, Any]:
    return next(r for r in runs[name] if r["batch"] == batch)


def speedup_rows(runs: Runs, batches: Sequence[int], *, hit: float) -> list[dict[str, Any]]:
    """One row per batch size: for each order, its build time without and with the cache, and the cache's speed-up.

    The speed-up is marked ``(first)`` for the first build of the cache run's process, ``(hit)`` when it is at
    least ``hit``, and ``(miss)`` otherwise.

    Parameters
    ----------
    runs
        The four runs (:func:`fresh_runs`).
    batches
        Batch sizes, one row each.
    hit
        The smallest speed-up of a later build that is a hit.

    Returns
    -------
    list[dict[str, Any]]
        Rows of ``batch``, then ``"<order>: no cache (ms)"``, ``"<order>: cache (ms)"`` and
        ``"<order>: speed-up"`` (e.g. ``"12.31× (hit)"``) for each of :data:`ORDERS`.

    Example
    -------
    >>> html_table(pd.DataFrame(speedup_rows(runs, batches, hit=10)), precision=1)
    """
    table = []
    for b in batches:
        row: dict[str, Any] = {"batch": b}
        for order in ORDERS:
            c = _row(runs, f"cache, {order}", b)
            n = _row(runs, f"no cache, {order}", b)
            speedup = n["build_s"] / c["build_s"]
            if runs[f"cache, {order}"][0]["batch"] == b:
                mark = "first"
            else:
                mark = "hit" if speedup >= hit else "miss"
            row[f"{order}: no cache (ms)"] = n["build_s"] * 1e3
            row[f"{order}: cache (ms)"] = c["build_s"] * 1e3
            row[f"{order}: speed-up"] = f"{speedup:.2f}× ({mark})"
        table.append(row)
    return table


def later_builds(runs: Runs, order: str) -> list[Build]:
    """Each build after the first of the cache run's process, beside the same batch's later build without the cache.

    Parameters
    ----------
    runs
        The four runs (:func:`fresh_runs`).
    order
        ``"ascending"`` or ``"descending"``.

    Returns
    -------
    list[tuple[int, int, float, float]]
        (batch built before, batch, the cache's speed-up, ms with the cache), in build order; a batch that came
        first in the run without the cache is left out.

    Example
    -------
    >>> later_builds(runs, "ascending")[0]  # (1, 2, 14.2, 3.1): batch 2, built after batch 1
    """
    cache = runs[f"cache, {order}"]
    none = {r["batch"]: r["build_s"] for r in runs[f"no cache, {order}"][1:]}
    return [
        (prev["batch"], r["batch"], none[r["batch"]] / r["build_s"], r["build_s"] * 1e3)
        for prev, r in zip(cache, cache[1:])
        if r["batch"] in none
    ]


def weigh(x: float, y: float) -> str:
    """How a change of ``x`` times compares with one of ``y`` times.

    Within a factor of :data:`SAME` either way, it is about as much.

    Parameters
    ----------
    x
        One change, as a factor at least 1.
    y
        The other.

    Returns
    -------
    str
        ``"more than"``, ``"less than"`` or ``"about as much as"``.

    Example
    -------
    >>> weigh(3.0, 12.0)
    'less than'
    """
    if x > SAME * y:
        return "more than"
    return "less than" if SAME * x < y else "about as much as"


@dataclasses.dataclass
class Findings:
    """What the four runs show (:func:`findings`): the numbers behind the page's sentences and records.

    Example
    -------
    >>> found = findings(runs, batches, hit=10)
    >>> len(found.hits["ascending"]), found.exec_ratio
    """

    hit: float
    """The smallest speed-up of a later build that is a hit."""
    later: dict[str, list[Build]]
    """Order → its later builds (:func:`later_builds`), in build order."""
    hits: dict[str, list[Build]]
    """Order → its later builds that hit: a speed-up of at least :attr:`hit`."""
    misses: dict[str, list[Build]]
    """Order → its later builds that missed: a speed-up below :attr:`hit`."""
    order_effect: dict[int, float]
    """Batch → its build time without the cache, descending over ascending, for batches that come first in
    neither order."""
    worst: int
    """The batch whose build time order changed most, either way."""
    order_ratio: float
    """That change, as a factor at least 1."""
    exec_ratios: list[float]
    """Each batch's execution time with the cache over without (dynamic over static), ascending runs."""
    exec_band: float
    """The tie band of the execution ratio: the most the same static graphs moved between the two no-cache runs,
    at least :data:`~cudnn_guide.measure.verdicts.MIN_TIE_BAND`."""
    exec_verdict: str
    """:func:`~cudnn_guide.measure.verdicts.judge` of the ratios' range against the band (``"faster"``: static is
    faster)."""

    @property
    def exec_ratio(self) -> float:
        """The median of :attr:`exec_ratios`."""
        return statistics.median(self.exec_ratios)


def findings(runs: Runs, batches: Sequence[int], *, hit: float) -> Findings:
    """The hits and misses, the build-order effect and the execution ratio of the four runs.

    Parameters
    ----------
    runs
        The four runs (:func:`fresh_runs`).
    batches
        The batch sizes built.
    hit
        The smallest speed-up of a later build that is a hit.

    Returns
    -------
    Findings
        The numbers.

    Example
    -------
    >>> found = findings(runs, batches, hit=10)
    >>> found.order_ratio, found.worst
    """
    from cudnn_guide.measure.verdicts import MIN_TIE_BAND, judge

    later, hits, misses = {}, {}, {}
    for order in ORDERS:
        later[order] = builds = later_builds(runs, order)
        hits[order] = [x for x in builds if x[2] >= hit]
        misses[order] = [x for x in builds if x[2] < hit]
    exec_ratios = [
        a["exec_median_ms"] / b["exec_median_ms"] for a, b in zip(runs["cache, ascending"], runs["no cache, ascending"])
    ]
    # the same static graphs, timed in the two no-cache runs (two processes): how far
    # identical code moved between processes is the tie band of the execution ratio
    same_code = [
        a["exec_median_ms"] / b["exec_median_ms"]
        for a in runs["no cache, ascending"]
        for b in runs["no cache, descending"]
        if a["batch"] == b["batch"]
    ]
    exec_band = max([MIN_TIE_BAND, *(abs(r - 1) for r in same_code)])
    exec_verdict = judge(min(exec_ratios), max(exec_ratios), exec_band)

    def no_cache_build(order: str, b: int) -> float:
        return _row(runs, f"no cache, {order}", b)["build_s"]

    firsts = {runs[f"no cache, {o}"][0]["batch"] for o in ORDERS}
    order_effect = {
        b: no_cache_build("descending", b) / no_cache_build("ascending", b) for b in batches if b not in firsts
    }
    worst = max(order_effect, key=lambda b: max(order_effect[b], 1 / order_effect[b]))
    return Findings(
        hit=hit,
        later=later,
        hits=hits,
        misses=misses,
        order_effect=order_effect,
        worst=worst,
        order_ratio=max(order_effect[worst], 1 / order_effect[worst]),
        exec_ratios=exec_ratios,
        exec_band=exec_band,
        exec_verdict=exec_verdict,
    )


_MEANING = {
    "about as much as": "within a factor of {} either way",
    "more than": "larger by over a factor of {}",
    "less than": "smaller by over a factor of {}",
}
"""What each of :func:`weigh`'s words means, with :data:`SAME` to fill in."""


def _group(builds: Sequence[Build], word: str, note: str = "") -> str:
    """The builds of one group: how many, after which batch, speed-ups and times."""
    r = [x[2] for x in builds]
    ms = [x[3] for x in builds]
    steps = ", ".join(f"{p}→{b}" for p, b, _, _ in builds)
    return (
        f"{len(builds)} {word} ({steps}; batch built before → batch), the cache's "
        f"speed-up {min(r):.2f}× to {max(r):.2f}× ({note}median "
        f"{statistics.median(r):.2f}×; {min(ms):.0f}–{max(ms):.0f} ms to build)"
    )


def conclusions(runs: Runs, found: Findings) -> list[str]:
    """The page's conclusions: each order's hits and misses and first builds, how far apart hits and misses lie,
    the build-order effect weighed against them, and the execution ratio's verdict.

    Each group (hits, misses) is summarised on its own: a median over both would fall between them, a speed-up no
    build showed.

    Parameters
    ----------
    runs
        The four runs (:func:`fresh_runs`): the first builds' times.
    found
        Their :func:`findings`.

    Returns
    -------
    list[str]
        Sentences (each a ``*`` bullet) for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(runs, findings(runs, batches, hit=10)))
    """
    hits, misses = found.hits, found.misses
    exec_lo, exec_hi = min(found.exec_ratios), max(found.exec_ratios)
    band_note = (
        f"1 ± {100 * found.exec_band:.1f}%, the most the same static graphs moved between the "
        "two no-cache runs (same code, two processes)."
    )
    exec_words = {
        "faster": "slower at every batch size: the whole range lies above " + band_note,
        "slower": "faster at every batch size: the whole range lies below " + band_note,
        "tie": "a tie: the range across batch sizes reaches into " + band_note,
    }
    sentences = []
    for order in ORDERS:
        groups = [_group(hits[order], "hit")] if hits[order] else []
        if misses[order]:
            slower = "below 1: slower with the cache; "
            groups.append(_group(misses[order], "missed", slower))
        sentences.append(
            f"* {order}: of {len(found.later[order])} later builds, " + "; ".join(groups) + ". "
            "First builds take "
            f"{runs[f'cache, {order}'][0]['build_s'] * 1e3:.0f} ms with the cache and "
            f"{runs[f'no cache, {order}'][0]['build_s'] * 1e3:.0f} ms without."
        )
    hit_r = [x[2] for o in hits for x in hits[o]]
    miss_r = [x[2] for o in misses for x in misses[o]]
    if hit_r and miss_r:
        sentences.append(
            f"* No later build's speed-up fell between {max(miss_r):.2f}× (the largest "
            f"miss) and {min(hit_r):.2f}× (the smallest hit): the groups are "
            f"{min(hit_r) / max(miss_r):.0f}× apart, so this page's {found.hit:g}× threshold, or "
            "any other between them, splits the builds the same way."
        )
    ratio_o, worst = found.order_ratio, found.worst
    direction = "slower" if found.order_effect[worst] > 1 else "faster"
    against = []
    if hit_r:
        hit_gain = statistics.median(hit_r)
        against.append(f"{weigh(ratio_o, hit_gain)} the speed-up of a hit (median {hit_gain:.1f}×)")
    if miss_r:
        miss_change = max(max(r, 1 / r) for r in miss_r)  # the largest change either way
        against.append(f"{weigh(ratio_o, miss_change)} the largest change a miss made, either way ({miss_change:.1f}×)")
    # define only the comparisons the sentence makes, in the order it makes them
    used = [w for w in _MEANING if any(a.startswith(w) for a in against)]
    meaning = "; ".join(f"{w}: {_MEANING[w].format(SAME)}" for w in used)
    sentences += [
        f"* Without the cache, build order changes batch {worst}'s build time "
        f"{ratio_o:.1f}× ({direction} in the descending run than in the ascending one; a "
        f"later build in both, the largest such change over the {len(found.order_effect)} "
        "batches that come first in neither order)"
        + (": " + ", and ".join(against) + f" ({meaning})." if against else "."),
        f"* Execution with dynamic-shape kernels takes {found.exec_ratio:.2f}× the time of the "
        f"static ones (median over the {len(found.exec_ratios)} batch sizes; in-run range "
        f"{exec_lo:.2f}× to {exec_hi:.2f}× across them): {exec_words[found.exec_verdict]}",
    ]
    return sentences
