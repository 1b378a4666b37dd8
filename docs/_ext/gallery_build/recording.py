"""Record on a GPU, render anywhere: the recorder.

``python -m gallery_build.recording record [--keep-going] [plot_xx.py | NN ...]`` records each example
in a fresh interpreter (pinned to one GPU; :mod:`gallery_build.scheduling` spreads the pages), inside a
private copy of the docs (:mod:`gallery_build.staging`), keeps the pages that succeed, and updates
the manifest (:mod:`gallery_build.manifest`) and ``docs/data/history.jsonl``. A page whose GPU
requirement this GPU lacks gets a note page instead (:mod:`gallery_build.skip_pages`). It prints a
line as each page starts and ends, the time left, and a closing summary (:mod:`gallery_build.progress`).
``... restamp plot_xx.py`` carries a text-only edit into a recorded page (:mod:`gallery_build.restamp`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles
from cudnn_guide.studies import first_call, fresh_process
from cudnn_guide.studies.fresh_process import IMPORT_CPUS_ENV

from . import auto_lanes, gpu_turns
from .manifest import read_manifest, write_manifest
from .progress import Progress, UnknownPageError, changed_verdicts, page_verdicts, resolve_pages, summary_line
from .restamp import restamp_text_edit
from .scheduling import SPARE_INTERPRETERS, page_costs, plan_lanes, steal
from .skip_pages import unmet_requirements, write_skip_page
from .staging import cold_caches, promote_page, shared_bytecode, stage_docs
from .staleness import MODE_ENV

__all__ = [
    "ONLY_ENV",
    "GALLERY_NAME",
    "REPRODUCIBILITY",
    "RECORDING_PRELOAD",
    "MAX_LANES",
    "LANES_ENV",
    "LanesError",
    "lanes_option",
    "recording_preload",
    "record_examples",
    "PAIRED_IN_LANES",
    "paired_in_lanes",
]

ONLY_ENV = "CUDNN_GUIDE_RECORD_ONLY"
PROFILE_ENV = "CUDNN_GUIDE_PROFILE_DIR"
"""When set, each page's build runs under cProfile and leaves ``<dir>/<page>.pstats``
(``tools/host_profile.py`` reads them). A developer's study: the profiler slows Python-bound
code, so record such pages into a shard and keep it off the site."""
REPO_ROOT = Path(__file__).resolve().parents[3]
"""The repository: ``docs/_ext/gallery_build/recording.py`` is three folders below it."""
GALLERY_NAME = "auto_examples"
"""The gallery's folder under ``docs``."""
REPRODUCIBILITY = "reproducibility.json"
"""In ``docs/data``: the last full recording's :func:`~gallery_build.history.reproducibility` report."""


RECORDING_PRELOAD: tuple[str, ...] = (
    "torch",
    "numpy",
    "pandas",
    "matplotlib.pyplot",
    "sphinx.cmd.build",
    "sphinx_gallery.gen_gallery",
    "sphinx_gallery.gen_rst",
    "sphinx_gallery.backreferences",
    "sphinx_gallery.notebook",
    "sphinx_gallery.docs_resolv",
    "sphinx_gallery.scrapers",
)
"""What each page's interpreter imports before its turn, so that no page waits for it: the
modules every page's build imports, none of which touches CUDA at import
(:func:`recording_preload` adds Sphinx's built-in extensions)."""


def recording_preload() -> list[str]:
    """:data:`RECORDING_PRELOAD` plus every extension Sphinx loads into each application.

    Sphinx imports its built-in builders, domains and transforms (about 50 modules) whenever an
    application starts: in a page's process that was about 1 s of the 1.5 s its build took
    around the example on the GPU builder. Importing them before the page's turn removes it.

    Returns
    -------
    list[str]
        Module names, for :func:`cudnn_guide.studies.fresh_process.run`'s ``preload``.

    Example
    -------
    >>> with fresh_process.InterpreterPool(14, preload=recording_preload()) as pool: ...
    """
    from sphinx import application

    sphinx_own = [*application.builtin_extensions, *getattr(application, "_first_party_extensions", ())]
    return [*RECORDING_PRELOAD, *sphinx_own]


def _build_one_example(docs_dir: str, out_dir: str, example: str) -> int | tuple[int, float]:
    """In the page's fresh process: the one-example Sphinx build that executes ``example``.

    Returns Sphinx's exit code; with lanes, ``(exit code, seconds waited for the GPU's turn)``."""
    from sphinx.cmd.build import build_main

    os.environ.update({MODE_ENV: "record", ONLY_ENV: example})
    cold_caches(Path(out_dir) / f"caches-{Path(example).stem}")
    args = ["-b", "dummy", "-q", docs_dir, out_dir]
    source = Path(docs_dir).parent / "examples" / example  # the stage's link to the examples
    text = source.read_text(encoding="utf-8") if source.exists() else None
    # lanes sharing a GPU (``--lanes``): conf.py makes each cell hold the turn, alone where the page's own
    # code reads a clock (a page whose source is not found: every cell)
    turn = gpu_turns.install(page_reads_a_clock=text is None, clock_span=gpu_turns.clock_lines(text or ""))
    if turn is not None:
        gpu_turns.pin_to_lane_cpus()
    if not os.environ.get(PROFILE_ENV):
        code = build_main(args)
    else:
        import cProfile

        profile = cProfile.Profile()
        code = profile.runcall(build_main, args)
        Path(os.environ[PROFILE_ENV]).mkdir(parents=True, exist_ok=True)
        profile.dump_stats(Path(os.environ[PROFILE_ENV]) / f"{Path(example).stem}.pstats")
    if turn is None:
        return code
    if os.environ.get(gpu_turns.TRACE_ENV):
        trace_dir = Path(os.environ[gpu_turns.TRACE_ENV])
        trace_dir.mkdir(parents=True, exist_ok=True)
        rows = [dict(zip(("mode", "asked", "taken", "given", "owner", "line"), t, strict=True)) for t in turn.trace]
        datafiles.write_json(trace_dir / f"{Path(example).stem}.turns.json", {"page": example, "turns": rows})
    print(turn_summary(example, turn), flush=True)
    return code, turn.waited  # the recorder keeps the page's seconds without its waits


def turn_summary(example: str, turn: gpu_turns.Turn) -> str:
    """The recorder log's line on a page's turns (``tools/turn_scope_study.py`` reads it back).

    Parameters
    ----------
    example
        The page's file name.
    turn
        Its process's :class:`~gallery_build.gpu_turns.Turn` after the page ran.

    Returns
    -------
    str
        ``cudnn-guide: <page>: N turns on the GPU, ... (... s of it alone), gave way K times to a lane
        waiting to measure, let go of it to save figures in F cells``.

    Example
    -------
    >>> turn_summary("plot_05_sdpa_causal.py", turn)
    'cudnn-guide: plot_05_sdpa_causal.py: 50 turns on the GPU, 13.2 s waiting for one, ...'
    """
    return (
        f"cudnn-guide: {example}: {turn.turns} turns on the GPU, {turn.waited:.1f} s waiting for one, "
        f"{turn.aside_seconds:.1f} s of CPU-only work beside other lanes, "
        f"{turn.held_seconds:.1f} s holding the GPU ({turn.exclusive_seconds:.1f} s of it alone), "
        f"gave way {turn.gave_way} time{'' if turn.gave_way == 1 else 's'} to a lane waiting to measure, "
        f"let go of it to save figures in {turn.let_go_times} cell{'' if turn.let_go_times == 1 else 's'}"
    )


PAIRED_IN_LANES = (fresh_process.AT_ONCE_ENV, first_call.AT_ONCE_ENV)
"""Switches a page recorded in lanes gets set to ``2`` unless the caller set them: a fresh-process pool's calls
(``InterpreterPool.run_all``) and plot_28's first-call processes run two at once, each on half of the page's cores,
so that they hold the GPU's turn alone for less time (issue 34). One page at a time (no lanes) keeps them at one."""


def paired_in_lanes(environ: Mapping[str, str]) -> dict[str, str]:
    """The :data:`PAIRED_IN_LANES` switches a lane's pages get: ``2`` for each the caller did not set.

    Example
    -------
    >>> paired_in_lanes({"CUDNN_GUIDE_POOL_AT_ONCE": "1"})
    {'CUDNN_GUIDE_FIRST_CALLS_AT_ONCE': '2'}
    """
    return {name: "2" for name in PAIRED_IN_LANES if not environ.get(name, "").strip()}


def record_examples(
    docs_dir: Path,
    examples_dir: Path,
    gallery_dir: Path,
    *,
    names: list[str] | None = None,
    shard: Path | None = None,
    gpus: int | None = None,
    keep_going: bool = False,
    lanes: int | None = 1,
) -> dict[str, float]:
    """Record each example in its own fresh process, into a staging copy; keep only pages that succeed.

    For each example: copy the docs source and gallery into a private staging folder
    (:func:`stage_docs`), delete the example's stored md5 there (so sphinx-gallery treats it as
    changed) and run a ``dummy`` Sphinx build with ``CUDNN_GUIDE_RECORD_ONLY`` naming it, which
    makes ``conf.py`` execute that example alone. Only when the build succeeds are its files
    moved into ``gallery_dir`` (:func:`promote_page`); a page that fails leaves every committed
    file byte-identical. Each build runs in a new interpreter of its own (an
    :class:`~cudnn_guide.studies.fresh_process.InterpreterPool`, all started up front so their imports
    overlap), so no CUDA context, cuDNN handle or warm library is left by another example.

    The manifest and ``docs/data/history.jsonl`` are then updated for the pages recorded, also
    when a later page failed: a full run stopped at page k keeps pages 1 … k−1.

    Parameters
    ----------
    docs_dir
        The Sphinx source directory.
    examples_dir
        The example sources.
    gallery_dir
        The recorded gallery.
    names
        Example file names, or page numbers and stems (:func:`~gallery_build.progress.resolve_pages`:
        ``plot_05``, ``05``, ``5``); default all.
    shard
        Write the recorded pages into this new shard folder
        (:mod:`gallery_build.shards`) instead of the gallery, which stays untouched.
    gpus
        How many GPUs record at once (default: every visible one). Each page runs in an
        interpreter pinned to one of them with ``CUDA_VISIBLE_DEVICES``; the pages are spread
        over them longest first (:func:`schedule`), from the previous recording's seconds; one that has
        recorded its own takes a page not yet started from another (:func:`~gallery_build.scheduling.steal`).
    keep_going
        Record every page even after one fails (the failures are raised together at the end),
        instead of stopping at the first.
    lanes
        Pages recorded at once on each GPU, taking turns on it (:mod:`gallery_build.gpu_turns`):
        what a page measures runs with the GPU to itself, while the other pages check, plot,
        compile, import or run Sphinx beside it (``CUDNN_GUIDE_TURN_SCOPE=cell``: one page's code
        cell at a time). Each lane has its own share of the CPU cores. 1: one page at a time. ``None``:
        chosen from the GPUs' memory, the host's cores and the pages (:func:`gallery_build.auto_lanes.choose`),
        the choice printed in one line; the command lines' default.

    Returns
    -------
    dict[str, float]
        Seconds per example (0 for a skipped one), its process's start and exit included (with
        lanes, without the time it waited for its turns).

    Raises
    ------
    UnknownPageError
        A name in ``names`` is not an example (a :class:`ValueError`; the message lists the valid
        ones), raised before anything starts.
    RuntimeError
        An example failed while being recorded (after the pages before it were kept).

    Example
    -------
    >>> record_examples(Path('docs'), Path('examples'), Path('docs/auto_examples'), names=['plot_08_cuda_graphs.py'])
    ... # or: python -m gallery_build.recording record plot_08_cuda_graphs.py
    """
    import tempfile
    import time

    from cudnn_guide import environment

    if shard is None and Path(docs_dir).resolve() == (REPO_ROOT / "docs").resolve():
        refuse_round_budget_ab("recording the site's pages")  # nox -s docs, or a direct call
    if names:  # page numbers and stems too; an unknown one stops the run before anything starts
        names = resolve_pages(names, [s.name for s in Path(examples_dir).glob("plot_*.py")])
    if lanes is None:  # nobody said: lanes only on a machine like the one they were measured on
        count = len(names) if names else len(list(Path(examples_dir).glob("plot_*.py")))
        memory = auto_lanes.gpu_memory_gib()
        lanes, why = auto_lanes.choose(memory[:gpus] if gpus else memory, auto_lanes.host_cores(), count)
        print(f"cudnn-guide: {why}", flush=True)
    if shard is not None:  # record into a private copy of the gallery and history, then keep the pages as a shard
        from . import shards

        if (Path(shard) / shards.SHARD_MANIFEST).exists():
            raise shards.ShardError(f"{shard}: already holds a shard; record into a new folder")
        with tempfile.TemporaryDirectory(prefix="cudnn-guide-shard-") as work:
            work_docs = Path(work) / "docs"
            shutil.copytree(docs_dir, work_docs, ignore=shutil.ignore_patterns("_build", GALLERY_NAME))
            shutil.copytree(gallery_dir, work_docs / GALLERY_NAME)
            failure = None
            try:
                seconds = record_examples(
                    work_docs,
                    examples_dir,
                    work_docs / GALLERY_NAME,
                    names=names,
                    gpus=gpus,
                    keep_going=keep_going,
                    lanes=lanes,
                )
            except RuntimeError as exc:
                failure, seconds = exc, _recorded_in(work_docs / GALLERY_NAME)
            if seconds:
                shards.write_shard(
                    shard,
                    work_docs / GALLERY_NAME,
                    examples_dir,
                    work_docs / "data" / "history.jsonl",
                    list(seconds),
                    seconds,
                    environment.collect().to_dict(),
                    turn_scope=gpu_turns.turn_scope() if lanes > 1 else None,
                    round_budget_ms=round_budget_override(),
                )
            if failure:
                raise failure
            return seconds

    sources = sorted(Path(examples_dir).glob("plot_*.py"))
    if names:
        sources = [s for s in sources if s.name in names]
    # the committed verdicts, read before any page is promoted: the summary says which ones changed
    verdicts_before = page_verdicts(gallery_dir, [s.name for s in sources])
    previous_seconds = (read_manifest(gallery_dir) or {}).get("example_seconds", {})
    progress = Progress(previous_seconds)
    seconds: dict[str, float] = {}
    t_all = time.perf_counter()
    env_record = environment.collect().to_dict()
    capability = tuple(int(x) for x in env_record["sm"].split("."))
    runnable, pool_seconds, failure = [], None, None
    # A page's orphaned helpers (Inductor's compile workers outlive its os._exit for a moment) may
    # still write bytecode or cache files here while it is removed: that must not fail a recording.
    with tempfile.TemporaryDirectory(prefix="cudnn-guide-stage-", ignore_cleanup_errors=True) as stage_dir:
        for src in sources:
            needs = unmet_requirements(src, capability)
            if needs:
                staged = stage_docs(docs_dir, examples_dir, gallery_dir, Path(stage_dir) / src.stem)
                write_skip_page(src, staged, needs, env_record)
                promote_page(staged, gallery_dir, src.name)
                seconds[src.name] = 0.0
                print(f"cudnn-guide: skipped {src.name}: this GPU lacks {'; '.join(needs)}", flush=True)
            else:
                runnable.append(src)
        if runnable:
            pool_seconds, failure = _record_on_gpus(
                runnable,
                docs_dir,
                examples_dir,
                gallery_dir,
                Path(stage_dir),
                seconds,
                gpus,
                keep_going,
                progress,
                lanes,
            )
    from . import drift_bands, history

    if seconds:
        write_manifest(
            gallery_dir,
            examples_dir,
            env_record,
            time.perf_counter() - t_all,
            example_seconds=seconds,
            interpreters_seconds=pool_seconds,
            full_run=not names and failure is None,
            gpus=min(gpus or _visible_gpus(), max(1, len(runnable))),
            turn_scope=gpu_turns.turn_scope() if lanes > 1 else None,
        )
        history.append(
            Path(docs_dir) / "data" / "history.jsonl", history.entries_from_gallery(gallery_dir, list(seconds))
        )
        if not names and failure is None:  # a full recording: does it reproduce the one before?
            lines = history.load(Path(docs_dir) / "data" / "history.jsonl")
            report = history.reproducibility(lines)
            datafiles.write_json(Path(docs_dir) / "data" / REPRODUCIBILITY, report, indent=1)
            drift = drift_bands.drift(drift_bands.recordings(Path(docs_dir) / "data"))
            datafiles.write_json(Path(docs_dir) / "data" / drift_bands.DRIFT, drift, indent=1)
            print(f"cudnn-guide: {history.format_reproducibility(report)}", flush=True)
    compared, changes = changed_verdicts(verdicts_before, page_verdicts(gallery_dir, list(seconds)))
    planned = [s.name for s in sources]
    print(summary_line(planned, seconds, time.perf_counter() - t_all, previous_seconds, compared, changes), flush=True)
    if failure:
        kept = ", ".join(seconds) or "none"
        raise RuntimeError(f"{failure}\nIts committed files are unchanged. Pages recorded before it were kept: {kept}.")
    return seconds


def _visible_gpus() -> int:
    try:
        import torch

        return max(1, torch.cuda.device_count())
    except ImportError:
        return 1


def _record_on_gpus(
    runnable: list[Path],
    docs_dir: Path,
    examples_dir: Path,
    gallery_dir: Path,
    stage_dir: Path,
    seconds: dict[str, float],
    gpus: int | None,
    keep_going: bool = False,
    progress: Progress | None = None,
    lanes_per_gpu: int = 1,
) -> tuple[float | None, str | None]:
    """Record ``runnable``, ``lanes_per_gpu`` pages per GPU at a time; fill ``seconds``; return (pool start, failure).

    ``progress`` prints a line as each page starts and ends, with the time left (:class:`Progress`).
    Ctrl-C (or SIGTERM) keeps the pages promoted so far, promotes no other, and the failure names
    the pages that did not finish."""
    import threading
    import time

    from cudnn_guide.studies import fresh_process

    gpu_count = gpus or _visible_gpus()
    per_gpu = max(1, lanes_per_gpu)
    previous = (read_manifest(gallery_dir) or {}).get("example_seconds", {})
    alone, lanes = plan_lanes([s.name for s in runnable], previous, gpu_count * per_gpu)
    remaining = [list(lane) for lane in lanes]  # each lane's pages not yet started; a lane done early takes others'
    costs = page_costs([s.name for s in runnable], previous)
    spare = SPARE_INTERPRETERS if len(lanes) > 1 else 0
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    progress = progress or Progress(previous)
    by_name = {s.name: s for s in runnable}
    bytecode = shared_bytecode(stage_dir / "bytecode")
    if bytecode:
        print(f"cudnn-guide: Python may not write bytecode here; the pages share it in {stage_dir / 'bytecode'}")
    lock, failures, starts = threading.Lock(), [], []
    stopped = threading.Event()  # Ctrl-C: no page starts or is promoted after it
    alone_done = threading.Event()  # the other GPUs start once GPU 0 has recorded the pages that run alone
    all_ready = threading.Barrier(max(1, len(lanes)))  # no page starts while another GPU's interpreters still import
    shared = len(lanes) > gpu_count  # lanes take turns on a GPU
    unit = "lane" if shared else "GPU"
    if shared:
        progress.share(gpu_count, len(lanes))  # the estimate follows each GPU's rate
    print(
        f"cudnn-guide: {len(runnable)} page(s) on {len(lanes)} {unit}(s)"
        + (f" of {gpu_count} GPU(s), taking turns on each" if unit == "lane" else "")
        + ", longest first"
        + (f"; alone first on {unit} 0: {', '.join(alone)}" if alone else "")
        + ": "
        + "; ".join(f"{unit} {i}: {', '.join(lane)}" for i, lane in enumerate(lanes)),
        flush=True,
    )
    print(progress.plan(alone, lanes), flush=True)
    if shared and (paired := paired_in_lanes(os.environ)):
        print(
            f"cudnn-guide: fresh processes two at once in each lane ({', '.join(f'{k}=2' for k in paired)}; "
            "set 1 for one at a time)",
            flush=True,
        )

    def lane_env(index: int) -> dict[str, str]:
        """Lane ``index`` runs on GPU ``index % gpu_count``; lanes sharing a GPU take turns on it."""
        gpu = index % gpu_count
        env = dict(bytecode) | ({"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu_count > 1 and len(lanes) > 1 else {})
        if shared:
            share = gpu_turns.lane_cpus(index, len(lanes), cpus)
            env[gpu_turns.TURN_ENV] = str(stage_dir / f"gpu-{gpu}.turn")
            env[gpu_turns.CPUS_ENV] = ",".join(str(c) for c in share)
            # a fresh-process pool imports on the cores of every lane of this GPU (none measures meanwhile)
            siblings = [
                c for i in range(len(lanes)) if i % gpu_count == gpu for c in gpu_turns.lane_cpus(i, len(lanes), cpus)
            ]
            env[IMPORT_CPUS_ENV] = ",".join(str(c) for c in siblings)
            env.update(paired_in_lanes(os.environ))
        return env

    def lane_worker(slot: int, lane: list[str]) -> None:
        env = lane_env(slot)
        t0 = time.perf_counter()
        size = len(lane) + spare

        def next_page(taken: int) -> str | None:
            with lock:
                if remaining[slot]:
                    return remaining[slot].pop(0)
                if taken >= size or not alone_done.is_set():
                    return None
                return steal(remaining, slot, costs, alone)

        with interpreter_pool(size, env) as pool:
            try:
                pool.wait_ready()
                all_ready.wait()
            except threading.BrokenBarrierError:
                failures.append(f"{unit} {slot}: another {unit}'s interpreters did not start; nothing recorded here")
                return
            except fresh_process.FreshProcessError as exc:
                all_ready.abort()
                failures.append(f"{unit} {slot}: its interpreters did not start:\n{exc.detail}")
                return
            index = 0
            while True:
                if slot == 0 and index == len(alone):
                    alone_done.set()
                elif slot != 0 and index == 0:
                    alone_done.wait()
                if (failures and not keep_going) or stopped.is_set():
                    return
                name = next_page(index)
                if name is None:
                    break
                index += 1
                src = by_name[name]
                with lock:  # a stage is copied while no other page is being promoted
                    staged = stage_docs(docs_dir, examples_dir, gallery_dir, stage_dir / src.stem)
                (staged / f"{src.name}.md5").unlink(missing_ok=True)
                print(progress.start(src.name, slot), flush=True)
                try:
                    done = pool.run(
                        _build_one_example, str(staged.parent), str(stage_dir / f"out-{slot}"), src.name, timeout=None
                    )
                except fresh_process.FreshProcessError as exc:
                    failures.append(f"recording {src.name} failed:\n{exc.detail}")
                    print(progress.fail(src.name, slot), flush=True)
                    if keep_going:
                        continue
                    return
                code, waited = done.value if isinstance(done.value, tuple) else (done.value, 0.0)
                if code != 0:
                    failures.append(f"recording {src.name} failed (sphinx exit {code}); see the output above")
                    print(progress.fail(src.name, slot), flush=True)
                    if keep_going:
                        continue
                    return
                with lock:
                    if stopped.is_set():  # finished after Ctrl-C: the run has stopped, nothing more is kept
                        return
                    promote_page(staged, gallery_dir, src.name)
                    seconds[src.name] = own = done.seconds - waited  # lanes: its own time, as one page at a time
                print(progress.finish(src.name, slot, own), flush=True)
            starts.append(pool.start_seconds if pool.start_seconds is not None else time.perf_counter() - t0)

    def lane(slot: int, pages: list[str]) -> None:
        try:
            lane_worker(slot, pages)
        finally:
            if slot == 0:
                alone_done.set()  # never leave the other GPUs waiting on a lane that stopped

    threads = [threading.Thread(target=lane, args=(i, pages), daemon=True) for i, pages in enumerate(lanes)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM from a time limit (see _main): pages already promoted stay
        with lock:  # let a promotion under way finish; none starts after this
            stopped.set()
        note = progress.interrupted_note()
        failures.append(f"recording interrupted; {note}")
        print(f"cudnn-guide: interrupted: kept {', '.join(seconds) or 'no page'}; {note}", flush=True)
    pool_seconds = max(starts) if starts else None
    if pool_seconds is not None:
        print(f"cudnn-guide: the interpreters were ready {pool_seconds:.1f} s after they were started", flush=True)
    return pool_seconds, ("\n".join(failures) if failures else None)


def interpreter_pool(size: int, env: dict[str, str]) -> Any:
    """The fresh interpreters one GPU records its pages in (a test replaces it with a fake runner)."""
    from cudnn_guide.studies import fresh_process

    return fresh_process.InterpreterPool(size, preload=recording_preload(), env=env, exit_fast=True)


def _recorded_in(gallery_dir: Path) -> dict[str, float]:
    """Pages a partial run kept, from the manifest it wrote: example → seconds of this run."""
    manifest = read_manifest(gallery_dir) or {}
    return dict(manifest.get("last_run_seconds", {}))


MAX_LANES = 8
"""The most pages one GPU records at once (``--lanes``)."""
LANES_ENV = "CUDNN_GUIDE_LANES"
"""Pages each GPU records at once when ``--lanes`` is not given (``CUDNN_GUIDE_LANES=1 nox -s docs``: one at a
time); unset or ``auto``, the recorder chooses (:mod:`gallery_build.auto_lanes`)."""


class LanesError(ValueError):
    """``--lanes`` without a whole number from 1 to :data:`MAX_LANES`."""


def round_budget_override() -> float | None:
    """``compare``'s round budget where ``CUDNN_GUIDE_ROUND_BUDGET_MS`` replaces the default (an A/B), else ``None``.

    Returns
    -------
    float | None
        The budget in ms, or ``None`` when the variable is unset or empty.

    Raises
    ------
    ValueError
        The variable is set to something other than a positive number (checked before any page starts).

    Example
    -------
    >>> round_budget_override()  # unset: the site's recording uses compare's default
    """
    from cudnn_guide.errors import BenchmarkError
    from cudnn_guide.measure import compare

    if not os.environ.get(compare.BUDGET_ENV, "").strip():
        return None
    try:
        return compare.default_round_budget_ms()
    except BenchmarkError as exc:
        raise ValueError(str(exc)) from None


def refuse_round_budget_ab(what: str) -> None:
    """Stop ``what`` (a recording of the site's own pages) when ``CUDNN_GUIDE_ROUND_BUDGET_MS`` is set.

    An A/B of ``compare``'s round budget records into a shard only, which merge refuses: the site's
    recording uses the default.

    Parameters
    ----------
    what
        What would have recorded the site, for the message.

    Raises
    ------
    SystemExit
        The variable is set (a bad value: :func:`round_budget_override`'s ``ValueError``).

    Example
    -------
    >>> refuse_round_budget_ab("nox -s docs")  # unset: nothing happens
    """
    if round_budget_override() is not None:
        raise SystemExit(
            f"cudnn-guide: {what} with CUDNN_GUIDE_ROUND_BUDGET_MS set: it records into a shard only (an A/B of "
            "compare's round budget; the site's recording uses the default): `python -m gallery_build.shards "
            "record SHARD_DIR ...`, read by tools/round_budget_ab.py (merge refuses it); or unset it to record "
            "the site's pages."
        )


def lanes_option(args: list[str]) -> tuple[int | None, list[str]]:
    """Take ``--lanes N`` (or ``--lanes=N``, ``--lanes auto``) out of a command line: (lanes, the other arguments).

    Parameters
    ----------
    args
        The arguments after the command.

    Returns
    -------
    tuple[int | None, list[str]]
        Pages each GPU records at once (:data:`LANES_ENV` when ``--lanes`` is not given), ``None`` when
        neither names a number (or both say ``auto``): :func:`record_examples` then chooses
        (:func:`gallery_build.auto_lanes.choose`); and the rest of ``args``.

    Raises
    ------
    LanesError
        The value (given, or in :data:`LANES_ENV`) is missing, or neither ``auto`` nor a whole number from 1
        to :data:`MAX_LANES`.

    Example
    -------
    >>> lanes_option(["--lanes", "3", "plot_05"])
    (3, ['plot_05'])
    """
    lanes: int | None = None
    rest, i = [], 0
    if os.environ.get(LANES_ENV, "").strip():
        args = ["--lanes", os.environ[LANES_ENV].strip(), *args]  # a later --lanes on the command line wins
    while i < len(args):
        arg = args[i]
        if arg == "--lanes" or arg.startswith("--lanes="):
            value = arg.partition("=")[2] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            i += 1 if "=" in arg else 2
            if value == "auto":
                lanes = None
                continue
            if not value.isdigit() or not 1 <= int(value) <= MAX_LANES:
                raise LanesError(
                    f"--lanes (or {LANES_ENV}) takes how many pages each GPU records at once, a whole number "
                    f"from 1 to {MAX_LANES}, or auto; got {value or 'nothing'!r}"
                )
            lanes = int(value)
            continue
        rest.append(arg)
        i += 1
    return lanes, rest


def stop_on_sigterm() -> None:
    """Make a time limit's SIGTERM end a recording like Ctrl-C, so the pages it finished are kept.

    Both command lines (``recording`` and ``shards record``) call it first: without it, ``timeout``
    kills a shard's recording before it writes the shard, and every page it recorded is lost.
    """
    import signal

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)


def _main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    import sys

    stop_on_sigterm()
    argv = sys.argv[1:] if argv is None else argv
    usage = (
        "usage: python -m gallery_build.recording record [--keep-going] [--lanes N] [page ...]"
        "  (plot_05_x.py, 05 or 5)\n"
        "       python -m gallery_build.recording restamp plot_xx.py ...  (text-only edits)"
    )
    if any(a in ("-h", "--help") for a in argv):
        print(usage)
        return
    if argv and argv[0] == "restamp":  # a text-only edit: carried into the recorded pages, no GPU
        for name in argv[1:]:
            for before, after in restamp_text_edit(REPO_ROOT / "examples" / name, REPO_ROOT / "docs" / "auto_examples"):
                print(f"{name}: {before.strip()!r} -> {after.strip()!r}")
        return
    if not argv or argv[0] != "record":
        raise SystemExit(usage)
    keep_going = "--keep-going" in argv
    root = REPO_ROOT
    try:  # page numbers and stems too; an unknown one lists the valid pages before anything starts
        gpu_turns.turn_scope()  # a bad CUDNN_GUIDE_TURN_SCOPE stops here, not in every page
        lanes, rest = lanes_option(argv[1:])
        refuse_round_budget_ab("recording the site's pages")  # an A/B of compare's budget: a shard only
        names = resolve_pages(
            [a for a in rest if a != "--keep-going"], [p.name for p in (root / "examples").glob("plot_*.py")]
        )
    except (UnknownPageError, LanesError, ValueError) as exc:
        raise SystemExit(f"cudnn-guide: {exc}") from None
    from .build_lock import BuildLockError, acquire

    try:  # one build per checkout: another recorder or Sphinx build here would overwrite this one's files
        lock = acquire(root / "docs", "recording")
    except BuildLockError as exc:
        raise SystemExit(f"cudnn-guide: {exc}") from None
    with lock:
        record_examples(
            root / "docs",
            root / "examples",
            root / "docs" / "auto_examples",
            names=names,
            keep_going=keep_going,
            lanes=lanes,
        )  # it ends with the summary line


if __name__ == "__main__":  # pragma: no cover
    # run the imported module's _main, so the functions it sends to fresh processes are named
    # gallery_build.recording.*, which a child can import, not __main__.*, which it cannot
    from gallery_build import recording

    recording._main()
