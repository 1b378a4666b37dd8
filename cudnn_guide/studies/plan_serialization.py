"""What a saved cuDNN plan buys a new process: the serialization page's fresh-process study and its prose.

The serialization page times a plan reloaded from bytes against a rebuild twice: inside one warm
process (:func:`warm_process_times`), and in fresh processes, where it matters
(:func:`fresh_first_results`). Each fresh process runs
:func:`~cudnn_guide.studies.coldstart.run_fresh` on one of :data:`CASES`, so that each way of
getting a plan, built or loaded from a :class:`~cudnn_guide.graphs.plan_cache.PlanCache`, is
timed with a cold and with a warm CUDA JIT cache:

* ``"cold"``: a build, with a new, empty JIT cache (a first deployment on a fresh machine);
* ``"warm JIT"``: a build, with the JIT cache the first cold build filled (a restart);
* ``"plan from disk"``: a deserialized plan, with that warm JIT cache (a restart with a plan cache);
* :data:`COLD_LOAD`: a deserialized plan, with a new, empty JIT cache (a fresh machine that ships
  the saved plan).

:func:`first_result_rows` lays the runs out as a table, :func:`conclusions` words them (each ratio
with its min–max over the runs, :func:`shown`), and :func:`corrupt_one_byte` and
:func:`as_if_from_backend` spoil a cache entry on disk the two ways the page shows the cache
catching before cuDNN sees the bytes.

The fresh processes need a GPU; the rows, the prose and the spoiling of an entry do not.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cudnn_guide import collector
from cudnn_guide.studies import coldstart, fresh_process

__all__ = [
    "CASES",
    "COLD_LOAD",
    "LIKE_FOR_LIKE",
    "as_if_from_backend",
    "conclusions",
    "corrupt_one_byte",
    "first_result_rows",
    "fresh_first_results",
    "range_verdict",
    "shown",
    "warm_process_times",
    "with_context",
]

COLD_LOAD = "plan from disk, cold JIT"
"""The case that loads the saved plan with a new, empty CUDA JIT cache."""

CASES = ("cold", "warm JIT", "plan from disk", COLD_LOAD)
"""The fresh-process cases, in the order they run for each graph."""

LIKE_FOR_LIKE = {
    "a fresh machine": ("cold", COLD_LOAD),
    "a restart": ("warm JIT", "plan from disk"),
}
"""Where → (build case, load case): the saved plan against a build, each with the same JIT cache."""

_Runs = Mapping[tuple[str, str], Sequence[Mapping[str, Any]]]
_Ratio = tuple[float, float, float]


@collector.measuring()
def warm_process_times(
    rebuild: Callable[[], Any], reload: Callable[[], Any], reps: int = 5
) -> tuple[list[float], list[float]]:
    """Time a rebuild and a reload of one graph, alternately, ``reps`` times each, in this process.

    Each repetition times ``rebuild()`` then ``reload()`` with ``time.perf_counter``; their
    results are dropped.

    Parameters
    ----------
    rebuild
        Declares and builds the graph.
    reload
        Deserializes the saved plan into an empty graph.
    reps
        Repetitions.

    Returns
    -------
    tuple[list[float], list[float]]
        The rebuild times and the reload times, in seconds, in the order they ran.

    Example
    -------
    >>> rebuild_s, reload_s = warm_process_times(
    ...     build_conv, lambda: cudnn.pygraph(handle=handle).deserialize(handle, blob)
    ... )
    """
    rebuild_s, reload_s = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        rebuild()
        rebuild_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        reload()
        reload_s.append(time.perf_counter() - t0)
    return rebuild_s, reload_s


def fresh_first_results(
    graphs: Sequence[str] = coldstart.GRAPHS, reps: int = 3
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Each graph's time to first result in fresh processes, ``reps`` runs of each of :data:`CASES`.

    Every run is a new interpreter of one :class:`~cudnn_guide.studies.fresh_process.InterpreterPool`
    (all started together, before the first run, preloaded with
    :data:`~cudnn_guide.studies.coldstart.PRELOAD`) that runs
    :func:`~cudnn_guide.studies.coldstart.run_fresh` with its own ``CUDA_CACHE_PATH``. For each
    graph, in order: ``reps`` cold builds, each with a new, empty JIT cache (the first one's
    cache is the warm one; each build stores its plan in the plan cache); ``reps`` builds with
    the warm JIT cache; ``reps`` loads of the saved plan with the warm JIT cache; ``reps`` loads,
    each with a new, empty JIT cache. Where the pool runs two at once
    (:data:`~cudnn_guide.studies.fresh_process.AT_ONCE_ENV`, set by the recorder's lanes), the runs go in
    consecutive pairs of that order, each on half of the caller's cores (with ``reps=1``, one at a time). Once the
    runs are done, one line says how long the interpreters took to be ready, and whether they ran two at a time.
    The plan cache and the JIT caches are temporary folders, removed at the end.

    Parameters
    ----------
    graphs
        Graphs of :data:`~cudnn_guide.studies.coldstart.GRAPHS`.
    reps
        Runs of each case.

    Returns
    -------
    dict[tuple[str, str], list[dict[str, Any]]]
        ``(graph, case)`` → the :func:`~cudnn_guide.studies.coldstart.run_fresh` results, graph
        by graph in the order of :data:`CASES`.

    Example
    -------
    >>> fresh = fresh_first_results()
    >>> fresh[("conv", COLD_LOAD)][0]["first_result_s"]
    """
    runs = len(graphs) * len(CASES) * reps
    fresh: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="cudnn-guide-") as work:
        cache_dir = tempfile.mkdtemp(prefix="plans-", dir=work)
        plan: list[tuple[str, str, str, str]] = []  # (graph, case, mode, JIT cache), in the order they run
        for graph in graphs:
            # the first cold build fills warm_jit; each build stores its plan in the cache
            jits = [tempfile.mkdtemp(prefix="jit-", dir=work) for _ in range(reps)]
            warm_jit = jits[0]
            plan += [(graph, "cold", "build", jit) for jit in jits]
            plan += [(graph, "warm JIT", "build", warm_jit)] * reps
            plan += [(graph, "plan from disk", "cache", warm_jit)] * reps
            plan += [(graph, COLD_LOAD, "cache", tempfile.mkdtemp(prefix="jit-", dir=work)) for _ in range(reps)]
        # two at once (the pool's at_once=2) pairs neighbours: a warm build then runs after the cold build that
        # filled its JIT cache, and a load after a build that stored its plan (each two places or more before it)
        # (with one run of each case, the warm build would run beside the cold one: one at a time)
        with fresh_process.InterpreterPool(runs, preload=coldstart.PRELOAD, at_once=None if reps > 1 else 1) as pool:
            results = coldstart.run_fresh_all([(g, mode, jit) for g, _, mode, jit in plan], cache_dir, pool)
            at_once = pool.at_once
        for (graph, case, _, _), result in zip(plan, results, strict=True):
            fresh.setdefault((graph, case), []).append(result)
        print(
            f"{runs} interpreters, started together, were ready in {pool.start_seconds:.1f} s"
            + ("; they ran two at a time, each on half of this process's cores" if at_once == 2 else "")
        )
    return fresh


def first_result_rows(
    fresh: _Runs,
    graphs: Sequence[str] = coldstart.GRAPHS,
    cases: Sequence[str] = CASES,
    tol: float | None = None,
) -> list[dict[str, Any]]:
    """One table row per graph and case: the plan step, the time to first result, the context, the error.

    Every run's output must be within ``tol`` of PyTorch's (the worst of the runs is checked).

    Parameters
    ----------
    fresh
        ``(graph, case)`` → the :func:`~cudnn_guide.studies.coldstart.run_fresh` results.
    graphs
        The graphs, in row order.
    cases
        The cases of each graph, in row order.
    tol
        The largest relative error allowed; default :func:`cudnn_guide.check.tolerance` of bf16.

    Returns
    -------
    list[dict[str, Any]]
        ``graph``, ``case``, ``plan (ms)``, ``first result (ms)`` (medians), ``min–max (ms)`` of the
        first result, ``context + handle (ms)`` (median) and ``max rel. error``.

    Raises
    ------
    AssertionError
        A case's worst relative error is not below ``tol``.

    Example
    -------
    >>> html_table(pd.DataFrame(first_result_rows(fresh)), precision=1)
    """
    if tol is None:
        import torch

        from cudnn_guide import check

        tol = check.tolerance(torch.bfloat16)
    table = []
    for graph in graphs:
        for case in cases:
            runs = fresh[(graph, case)]
            worst = max(r["rel_error"] for r in runs)
            if not worst < tol:
                raise AssertionError(f"{graph} {case}: {worst}")
            first_ms = [r["first_result_s"] * 1e3 for r in runs]
            table.append(
                {
                    "graph": graph,
                    "case": case,
                    "plan (ms)": statistics.median(r["plan_s"] for r in runs) * 1e3,
                    "first result (ms)": statistics.median(first_ms),
                    "min–max (ms)": f"{min(first_ms):.1f}–{max(first_ms):.1f}",
                    "context + handle (ms)": statistics.median(r["context_s"] for r in runs) * 1e3,
                    "max rel. error": f"{worst:.1e}",
                }
            )
    return table


def corrupt_one_byte(path: str | Path, offset: int = -100) -> None:
    """Flip every bit of one byte of a file (a plan cache entry), in place.

    Parameters
    ----------
    path
        The file.
    offset
        The byte's index (negative: from the end; ``-100`` lies in an entry's plan bytes).

    Example
    -------
    >>> corrupt_one_byte(cache.path(key))  # the next lookup finds a checksum mismatch
    """
    path = Path(path)
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def as_if_from_backend(path: str | Path, backend: int) -> None:
    """Rewrite a plan cache entry's header as if another cuDNN backend version had written it.

    The header is the entry's first line, JSON; its key's ``cudnn_backend`` becomes ``backend``.
    The plan bytes after it are kept as they are.

    Parameters
    ----------
    path
        The entry (:meth:`~cudnn_guide.graphs.plan_cache.PlanCache.path`).
    backend
        The backend version to write (``cudnn.backend_version()``'s form: 90100 for 9.1.0).

    Example
    -------
    >>> as_if_from_backend(cache.path(key), 90100)  # the next lookup finds another key
    """
    path = Path(path)
    head, _, body = path.read_bytes().partition(b"\n")
    header = json.loads(head)
    header["key"]["cudnn_backend"] = backend
    path.write_bytes(json.dumps(header).encode() + b"\n" + body)


def with_context(fresh: _Runs, graph: str, case: str, load: str) -> _Ratio:
    """The plan cache's speed-up of the first result counting context and handle creation too.

    Each run's time is its ``context_s`` plus its ``first_result_s``; the ratio is the builds'
    median over the loads' median, with its min–max over the runs (slowest build over fastest
    load, and the reverse).

    Parameters
    ----------
    fresh
        ``(graph, case)`` → the :func:`~cudnn_guide.studies.coldstart.run_fresh` results.
    graph
        The graph.
    case
        The build case.
    load
        The load case.

    Returns
    -------
    tuple[float, float, float]
        ``(speed-up, min, max)``.

    Example
    -------
    >>> with_context(fresh, "conv", "warm JIT", "plan from disk")
    (1.05, 0.98, 1.11)
    """
    build = [r["context_s"] + r["first_result_s"] for r in fresh[(graph, case)]]
    loaded = [r["context_s"] + r["first_result_s"] for r in fresh[(graph, load)]]
    return (
        statistics.median(build) / statistics.median(loaded),
        min(build) / max(loaded),
        max(build) / min(loaded),
    )


def range_verdict(low: float, high: float, above: str = "a gain", below: str = "a loss") -> str:
    """What a ratio's min–max over the runs says: both ends above 1, both below 1, or a tie.

    A gain or a loss is said of this recording's processes ("in this run"): the record widens each
    ratio's interval by how far numbers move between recordings, and that wider interval may span 1.

    Parameters
    ----------
    low
        The ratio's smallest value over the pairings of runs.
    high
        Its largest.
    above
        The word for both ends above 1.
    below
        The word for both ends below 1.

    Returns
    -------
    str
        ``"<above> in every pairing of processes in this run"``, ``"<below> in every pairing of
        processes in this run"`` or ``"a tie: the range spans 1"``.

    Example
    -------
    >>> range_verdict(1.2, 1.5), range_verdict(0.9, 1.1)
    ('a gain in every pairing of processes in this run', 'a tie: the range spans 1')
    """
    if low > 1:
        return f"{above} in every pairing of processes in this run"
    if high < 1:
        return f"{below} in every pairing of processes in this run"
    return "a tie: the range spans 1"


def shown(ratio: float, low: float, high: float) -> str:
    """A speed-up with its min–max over the runs and their verdict (:func:`range_verdict`).

    Parameters
    ----------
    ratio
        The speed-up (a median over a median).
    low
        Its smallest value over the pairings of runs.
    high
        Its largest.

    Returns
    -------
    str
        ``"<ratio>× (<low>–<high>×, <verdict>)"``.

    Example
    -------
    >>> shown(2.0, 1.5, 2.5)
    '2.00× (1.50–2.50×, a gain in every pairing of processes in this run)'
    """
    return f"{ratio:.2f}× ({low:.2f}–{high:.2f}×, {range_verdict(low, high)})"


def _share(x: float) -> str:
    """``x`` as a percentage, with decimals where a whole number would round a share below 1 up to 100%.

    >>> _share(0.96), _share(0.995), _share(0.9999)
    ('96%', '99.5%', '99.99%')
    """
    d = 0
    while d < 12 and x < 1 and float(f"{100 * x:.{d}f}") >= 100:
        d += 1
    return f"{x:.{d}%}"


def _warm_slower(fresh: _Runs, g: str, cold_case: str, warm_case: str) -> str:
    """``""`` when ``warm_case``'s median first result is not slower than ``cold_case``'s; else a note that says
    it is slower, by how much, and what the min–max over the runs says (:func:`range_verdict`).

    >>> runs = {("conv", "cold"): [{"first_result_s": t} for t in (2, 3, 4)]}
    >>> runs[("conv", "warm JIT")] = [{"first_result_s": t} for t in (5, 6, 7)]
    >>> _warm_slower(runs, "conv", "cold", "warm JIT")[:60]
    ', slower, not faster, at the median (2.00× the cold time; ov'
    """
    cold = [r["first_result_s"] for r in fresh[(g, cold_case)]]
    warm = [r["first_result_s"] for r in fresh[(g, warm_case)]]
    x = statistics.median(warm) / statistics.median(cold)
    if x <= 1:
        return ""
    low, high = min(warm) / max(cold), max(warm) / min(cold)
    verdict = range_verdict(low, high, above="slower warm", below="faster warm")
    return (
        f", slower, not faster, at the median ({x:.2f}× the cold time; over the runs {low:.2f}–{high:.2f}×, {verdict})"
    )


def conclusions(
    fresh: _Runs,
    speedups: Mapping[tuple[str, str], _Ratio],
    cold_speedups: Mapping[tuple[str, str], _Ratio],
    rebuild_s: Sequence[float],
    reload_s: Sequence[float],
    graphs: Sequence[str] = coldstart.GRAPHS,
) -> list[str]:
    """The serialization page's conclusions, computed from its fresh-process and warm-process runs.

    Per graph: the medians of the first results of the four cases; the saved plan's speed-up
    like for like (:data:`LIKE_FOR_LIKE`), without and with context and handle creation
    (:func:`with_context`); and a restart's load against a fresh machine's cold build. A warm JIT
    cache that left a build or a load slower than a cold one is said to have done so. Then which
    graphs gain ten times or more even with a warm JIT cache; for each graph whose saved plan
    does not beat a warm-JIT build in some pairing of runs, its plan steps, the share of them a
    new process pays once (said for ``conv``, the graph the warm process timed, when both shares
    are above a half) and the cold JIT cache's own effect on its build; and whether in-process
    timing understates or overstates the conv graph's gain.

    Parameters
    ----------
    fresh
        ``(graph, case)`` → the :func:`~cudnn_guide.studies.coldstart.run_fresh` results of every
        graph and case of :data:`CASES`.
    speedups
        :func:`~cudnn_guide.studies.coldstart.first_result_speedups` of ``fresh`` (loads with a
        warm JIT cache).
    cold_speedups
        The same with ``cached=COLD_LOAD`` (loads with a cold JIT cache).
    rebuild_s
        The warm process's rebuild times of the conv graph, seconds (:func:`warm_process_times`).
    reload_s
        Its reload times, seconds.
    graphs
        The graphs, in the order they are described.

    Returns
    -------
    list[str]
        One paragraph each (``"* "``: a list item), for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(fresh, speedups, cold_speedups, rebuild_s, reload_s))
    """
    from cudnn_guide.report.prose import listed

    first = {(g, c): statistics.median(r["first_result_s"] for r in fresh[(g, c)]) for g in graphs for c in CASES}
    ctx = {(g, c): statistics.median(r["context_s"] for r in fresh[(g, c)]) for g in graphs for c in CASES}
    sentences = []
    for g in graphs:
        like = {
            where: (cold_speedups if load == COLD_LOAD else speedups)[(g, case)]
            for where, (case, load) in LIKE_FOR_LIKE.items()
        }
        counted = {where: with_context(fresh, g, case, load) for where, (case, load) in LIKE_FOR_LIKE.items()}
        sentences += [
            f"* {g}: first result {first[(g, 'cold')] * 1e3:.1f} ms from a build with a "
            f"cold JIT cache, {first[(g, 'warm JIT')] * 1e3:.1f} ms with a warm one"
            f"{_warm_slower(fresh, g, 'cold', 'warm JIT')}; "
            f"{first[(g, COLD_LOAD)] * 1e3:.1f} ms from the plan on disk with a cold JIT "
            f"cache, {first[(g, 'plan from disk')] * 1e3:.1f} ms with a warm one"
            f"{_warm_slower(fresh, g, COLD_LOAD, 'plan from disk')}; each "
            f"after {ctx[(g, 'plan from disk')] * 1e3:.0f} ms of context and handle "
            "creation (medians of the runs; context: the plan-from-disk runs).",
            f"* {g}, the saved plan's speed-up like for like, without context and handle: "
            + " and ".join(f"{shown(*like[w])} on {w}" for w in LIKE_FOR_LIKE)
            + "; with them: "
            + " and ".join(f"{shown(*counted[w])} on {w}" for w in LIKE_FOR_LIKE)
            + ". A restart with the plan and the warm JIT cache against a fresh machine's "
            f"cold build: {shown(*speedups[(g, 'cold')])}.",
        ]
    gains = [g for g in graphs if speedups[(g, "warm JIT")][0] >= 10]
    if gains:
        sentences.append(
            f"* For the {listed(gains)} graph{'s' if len(gains) > 1 else ''}, even with a warm "
            "JIT cache the build is dominated by work the saved plan skips, most likely the "
            "heuristics and building runtime-fused kernels (this page does not time them "
            "apart)."
        )
    rebuild_ms = statistics.median(rebuild_s) * 1e3
    reload_ms = statistics.median(reload_s) * 1e3
    for g in [g for g in graphs if speedups[(g, "warm JIT")][1] <= 1]:
        loads = [r["plan_s"] * 1e3 for r in fresh[(g, "plan from disk")]]
        builds = [r["plan_s"] * 1e3 for r in fresh[(g, "warm JIT")]]
        # the share of a fresh process's plan step that the warm process did not pay
        once = (
            1 - reload_ms / statistics.median(loads),
            1 - rebuild_ms / statistics.median(builds),
        )
        per_process = (
            f", against {reload_ms:.1f} ms to reload and {rebuild_ms:.1f} ms to rebuild in "
            f"the warm process above: {_share(once[0])} of a fresh load's median plan step and "
            f"{_share(once[1])} of a fresh build's is a cost each new process pays once, "
            "loading or building alike"
            if g == "conv" and min(once) > 0.5  # the graph the warm process timed
            else ""
        )
        cold = [r["first_result_s"] for r in fresh[(g, "cold")]]
        warm_builds = [r["first_result_s"] for r in fresh[(g, "warm JIT")]]
        jit = first[(g, "cold")] / first[(g, "warm JIT")]
        jit_range = (min(cold) / max(warm_builds), max(cold) / min(warm_builds))
        jit_verdict = range_verdict(*jit_range, above="slower cold", below="faster cold")
        sentences.append(
            f"* For {g}, the saved plan on a restart is "
            f"{shown(*speedups[(g, 'warm JIT')])}: it does not beat a build. Its plan step "
            "takes "
            f"{min(loads):.0f}–{max(loads):.0f} ms to load in a fresh process and "
            f"{min(builds):.0f}–{max(builds):.0f} ms to build{per_process}. The cold JIT "
            f"cache's own effect on its build is {jit:.2f}× (cold against warm JIT, both "
            f"building; {jit_range[0]:.2f}–{jit_range[1]:.2f}×, {jit_verdict})."
        )
    in_process = statistics.median(rebuild_s) / statistics.median(reload_s)
    fresh_conv = first[("conv", "warm JIT")] / first[("conv", "plan from disk")]
    word = "understates" if in_process < fresh_conv else "overstates"
    sentences += [
        f"* Inside one warm process the conv graph rebuilds in {rebuild_ms:.1f} ms and "
        f"reloads in {reload_ms:.1f} ms ({in_process:.2f}×); in fresh processes with a "
        f"warm JIT cache the ratio of first results is {fresh_conv:.2f}×: in-process "
        f"timing {word} the gain for this graph.",
        "* A new interpreter also pays Python's and torch's imports (seconds; see the "
        "controls on the measurement studies page), which no plan cache removes.",
    ]
    return sentences
