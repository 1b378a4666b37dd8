"""What the first call of an attention backend costs a fresh process: the first-call page's study.

The page times the build steps of its Llama 3.1 attention graph in its own process (the lesson's
``seconds``: step → host seconds). This module asks the same question of a fresh Python process,
where torch, CUDA and the backend start from nothing: :func:`fresh_process` runs :data:`CHILD` in a
new interpreter with empty CUDA, CuTe and temporary caches, for cuDNN (its plan build) or
FlashAttention-4 (its CuTe DSL compile), and :func:`fresh_processes` repeats that in interleaved
rounds. :func:`first_call_table` and :func:`plot_first_call` show the result, :func:`median_s`
reads medians from it, and :func:`conclusions` and :func:`route_sentence` word the page's
conclusions.

The fresh processes need a GPU; the table, the medians and the sentences do not.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from cudnn_guide import collector
from cudnn_guide.studies import interpreter

__all__ = [
    "AT_ONCE_ENV",
    "CHILD",
    "PARTS",
    "conclusions",
    "first_call_table",
    "fresh_process",
    "fresh_processes",
    "median_s",
    "plot_first_call",
    "route_sentence",
]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter()
q = torch.randn(2, 4096, 64, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(2, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn(2, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
if sys.argv[1] == "fa4":
    from flash_attn.cute import flash_attn_func
    t2 = time.perf_counter()
    run = lambda: flash_attn_func(q, k, v, causal=True)
else:
    import cudnn
    t2 = time.perf_counter()
    def run(state={}):
        if not state:
            h = cudnn.create_handle()
            cudnn.set_stream(h, torch.cuda.current_stream().cuda_stream)
            g = cudnn.pygraph(handle=h, io_data_type=cudnn.data_type.BFLOAT16,
                              intermediate_data_type=cudnn.data_type.FLOAT,
                              compute_data_type=cudnn.data_type.FLOAT)
            Q, K = g.tensor_like(q.transpose(1, 2)), g.tensor_like(k.transpose(1, 2))
            V = g.tensor_like(v.transpose(1, 2))
            o = torch.empty_like(q)
            O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=128**-0.5, generate_stats=False,
                          diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                          diagonal_band_right_bound=0)
            O.set_output(True).set_dim(list(o.transpose(1, 2).shape))
            O.set_stride(list(o.transpose(1, 2).stride()))
            g.build([cudnn.heur_mode.A])
            size = g.get_workspace_size() + 1
            ws = torch.empty(size, device="cuda", dtype=torch.uint8)
            pack = {Q: q.transpose(1, 2), K: k.transpose(1, 2), V: v.transpose(1, 2),
                    O: o.transpose(1, 2)}
            state["run"] = lambda: g.execute(pack, ws, handle=h)
        state["run"]()
run(); torch.cuda.synchronize(); t3 = time.perf_counter()
run(); torch.cuda.synchronize(); t4 = time.perf_counter()
print(json.dumps({"torch_and_context_s": t1 - t0, "import_s": t2 - t1,
                  "first_call_s": t3 - t2, "second_call_s": t4 - t3}), flush=True)
import os; os._exit(0)
"""
"""What :func:`fresh_process` runs: the lesson's causal Llama 3.1 attention forward (2×4096 tokens, 64
query and 8 K/V heads of 128, bf16, B×S×H×D) with the backend named by its argument (``"cudnn"``: the
lesson's graph, built in one ``build`` with heuristics A; ``"fa4"``: ``flash_attn_func``), timing the
start of torch and CUDA, the import, the first call (build or compile included) and the second; it
prints them as one JSON line and ends at once (``os._exit``: its exit is not timed, and CUDA's teardown
would only keep the page waiting, about 0.7 s a process in ``docs/data/exit_cost.json``)."""

PARTS = ("torch_and_context_s", "import_s", "first_call_s")
"""The parts of a fresh process up to its first output, in the order they run."""

_KEYS = (*PARTS, "second_call_s")

_PART_NAMES = {
    "torch_and_context_s": "torch and CUDA start",
    "import_s": "backend import",
    "first_call_s": "first call",
    "second_call_s": "second call",
}
"""Each timed part in words: the table's headings (with ``" (s)"``) and the figure's legend."""


@collector.spending("fresh processes")
def fresh_process(backend: str, timeout: float = 300) -> dict[str, Any]:
    """Run :data:`CHILD` for ``backend`` in a new Python process with empty CUDA, CuTe and temp caches.

    The process gets a new temporary directory as ``CUDA_CACHE_PATH`` and ``TMPDIR`` and
    ``FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=0``; the OS file cache is not emptied.

    Parameters
    ----------
    backend
        ``"cudnn"`` or ``"fa4"``.
    timeout
        Seconds before the process is killed (``subprocess.TimeoutExpired``).

    Returns
    -------
    dict[str, Any]
        The child's seconds (``torch_and_context_s``, ``import_s``, ``first_call_s``,
        ``second_call_s``), or ``{"error": <the last line of its standard error>}`` when it failed.

    Example
    -------
    >>> fresh_process("cudnn")["first_call_s"]
    """
    with tempfile.TemporaryDirectory() as cache:
        env_vars = {
            **os.environ,
            "CUDA_CACHE_PATH": cache,
            "TMPDIR": cache,
            "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "0",
        }
        done = subprocess.run(
            [sys.executable, "-c", CHILD, backend],
            env=env_vars,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if done.returncode != 0:
        said = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return {"error": said[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


AT_ONCE_ENV = "CUDNN_GUIDE_FIRST_CALLS_AT_ONCE"
"""Set to ``2``: :func:`fresh_processes` starts each round's backends at once, each on its own half of the
caller's cores (issue 34: the recorder's speed); unset or ``1``: one process at a time, as in every recording
before 5a51bec's. Since 5a51bec the recorder sets it to ``2`` for pages recorded in lanes unless the caller set it
(``gallery_build.recording.paired_in_lanes``), with the pools'
:data:`~cudnn_guide.studies.fresh_process.AT_ONCE_ENV`; its recording with both met the bars and became the
site's (``docs/data/pairs_site.json``). The first evidence was ``tools/parallel_fresh_probe.py``, under other
conditions: two processes at once on five cores each (a three-lane page on 16 cores has five or six, so two or
three each), compiling their imports from source; there a cuDNN and a FlashAttention-4 process started together
measured what each did alone, within their spread (``docs/data/parallel_fresh_probe.json``)."""


def _round_at_once(backends: Sequence[str], shares: Sequence[set[int]]) -> list[dict[str, Any]]:
    """One round: each backend's process started at once, each from a thread pinned to its share of the cores."""
    import threading

    answers: list[dict[str, Any] | None] = [None] * len(backends)
    failures: list[BaseException] = []

    def one(i: int) -> None:
        try:
            os.sched_setaffinity(0, shares[i])  # this thread's cores: the process it starts inherits them
            answers[i] = fresh_process(backends[i])
        except BaseException as exc:  # raised again in the caller's thread below
            failures.append(exc)

    threads = [  # daemons: Ctrl-C during the round does not wait for them (their processes end by themselves)
        threading.Thread(target=one, args=(i,), name=f"first call {b}", daemon=True) for i, b in enumerate(backends)
    ]
    # fresh_process's own measured block opens inside the caller's (collector.spending nests): one turn for both
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return [a for a in answers if a is not None]


def fresh_processes(
    backends: Sequence[str], rounds: int = 3, at_once: int | None = None
) -> dict[str, list[dict[str, Any]]]:
    """:func:`fresh_process` for each backend, ``rounds`` times, interleaved (one of each per round).

    Parameters
    ----------
    backends
        The backends, in the order each round runs them.
    rounds
        Processes per backend.
    at_once
        ``1``: one process at a time; ``2``: a round's two backends started together, each on half of the
        caller's cores (a round of one backend, or fewer cores than backends, runs one at a time).
        ``None``: :data:`AT_ONCE_ENV`, else 1.

    Returns
    -------
    dict[str, list[dict[str, Any]]]
        Backend → what each of its processes returned, in order.

    Raises
    ------
    ValueError
        ``at_once`` (or :data:`AT_ONCE_ENV`) is not 1 or 2, or it is 2 for more than two backends.

    Example
    -------
    >>> first_calls = fresh_processes(["cudnn", "fa4"], rounds=3)
    """
    at_once = interpreter.at_once_setting(AT_ONCE_ENV) if at_once is None else at_once
    if at_once not in (1, 2):
        raise ValueError(f"at_once takes 1 or 2, got {at_once!r}")
    if at_once == 2 and len(backends) > 2:
        raise ValueError(f"two at once runs a round of two backends, got {len(backends)}: {list(backends)}")
    cores = sorted(os.sched_getaffinity(0))
    split = at_once == 2 and len(backends) == 2 and len(cores) >= 2  # else one at a time
    shares = [set(interpreter.core_share(i, 2, cores)) for i in range(2)] if split else None
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    for _ in range(rounds):
        if shares:
            with collector.spending("fresh processes"):  # one measured block: the round's processes inside it
                answers = _round_at_once(backends, shares)
        else:  # each process its own measured block, as before
            answers = [fresh_process(b) for b in backends]
        for b, answer in zip(backends, answers):
            runs[b].append(answer)
    return runs


def median_s(first_calls: Mapping[str, Sequence[Mapping[str, Any]]], backend: str, *keys: str) -> float | None:
    """The median over ``backend``'s processes that finished of ``keys`` summed in each process.

    The median of an even count is the upper of the middle two.

    Parameters
    ----------
    first_calls
        :func:`fresh_processes`' result.
    backend
        ``"cudnn"`` or ``"fa4"``; one that did not run gives ``None``.
    keys
        The seconds to add up in each process (default ``first_call_s``: the first call, build or
        compile included).

    Returns
    -------
    float | None
        Seconds, or ``None`` when no process of ``backend`` finished.

    Example
    -------
    >>> median_s({"fa4": [{"import_s": 2.0, "first_call_s": 2.5}]}, "fa4", "import_s", "first_call_s")
    4.5
    """
    keys = keys or ("first_call_s",)
    ok = sorted(sum(r[k] for k in keys) for r in first_calls.get(backend, []) if "error" not in r)
    return ok[len(ok) // 2] if ok else None


def first_call_table(first_calls: Mapping[str, Sequence[Mapping[str, Any]]], names: Mapping[str, str]) -> Any:
    """One row per backend: its processes that finished, and each timed part's median [fastest, slowest].

    Parameters
    ----------
    first_calls
        :func:`fresh_processes`' result.
    names
        Backend → its name in the table (``"cudnn"`` and ``"fa4"``).

    Returns
    -------
    pandas.DataFrame
        Columns ``backend``, ``processes``, then ``torch and CUDA start (s)``, ``backend import (s)``,
        ``first call (s)`` and ``second call (s)`` as ``"median [min, max]"`` with three decimals; a
        backend none of whose processes finished gets its key and its first process's ``error``.

    Example
    -------
    >>> html_table(first_call_table(first_calls, {"cudnn": CUDNN, "fa4": FA4}))
    """
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for b, runs in first_calls.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            rows.append({"backend": b, "error": runs[0]["error"]})
            continue
        row: dict[str, Any] = {"backend": names[b], "processes": len(ok)}
        for key in _KEYS:
            vals = sorted(r[key] for r in ok)
            row[f"{_PART_NAMES[key]} (s)"] = f"{vals[len(vals) // 2]:.3f} [{vals[0]:.3f}, {vals[-1]:.3f}]"
        rows.append(row)
    return pd.DataFrame(rows)


def plot_first_call(
    seconds: Mapping[str, float],
    first_calls: Mapping[str, Sequence[Mapping[str, Any]]],
    names: Mapping[str, str],
) -> Any:
    """Two panels: the lesson's steps in the page's process, and a fresh process up to its first output.

    Left, a bar per timed step (ms, log scale); right, a stacked bar per backend with a finished
    process: the median of each of :data:`PARTS`.

    Parameters
    ----------
    seconds
        The lesson's host seconds per step, in order.
    first_calls
        :func:`fresh_processes`' result.
    names
        Backend → its name on the figure.

    Returns
    -------
    Any
        The matplotlib figure.

    Example
    -------
    >>> plot_first_call(seconds, first_calls, {"cudnn": CUDNN, "fa4": FA4}); plt.show()
    """
    import matplotlib.pyplot as plt

    finished = [b for b in first_calls if median_s(first_calls, b) is not None]
    fig, (steps_ax, fresh_ax) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    steps_ax.barh(list(seconds), [1e3 * s for s in seconds.values()], color="C0")
    steps_ax.invert_yaxis()
    steps_ax.set_xscale("log")
    steps_ax.set_xlabel("ms, host clock (log scale)")
    steps_ax.set_title("the lesson, in this page's process", fontsize=10)
    labels = [names[b] for b in finished]
    starts = [0.0] * len(finished)
    for i, part in enumerate(PARTS):
        widths = [median_s(first_calls, b, part) for b in finished]
        fresh_ax.barh(labels, widths, left=starts, color=f"C{i}", label=_PART_NAMES[part])
        starts = [a + w for a, w in zip(starts, widths)]
    fresh_ax.invert_yaxis()
    fresh_ax.set_xlabel("s, median over fresh processes")
    fresh_ax.set_title("a fresh process, up to its first output", fontsize=10)
    fresh_ax.legend(fontsize=7)
    return fig


def _ratio(cudnn_s: float, fa4_s: float) -> str:
    """``"2.2× longer"`` when FlashAttention-4's time is the longer, ``"… shorter"`` otherwise."""
    word = "longer" if fa4_s > cudnn_s else "shorter"
    return f"{max(fa4_s, cudnn_s) / min(fa4_s, cudnn_s):.1f}× {word}"


def _processes(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"


def _finished(first_calls: Mapping[str, Sequence[Mapping[str, Any]]], backend: str) -> int:
    return sum("error" not in r for r in first_calls.get(backend, []))


def conclusions(
    seconds: Mapping[str, float],
    first_calls: Mapping[str, Sequence[Mapping[str, Any]]],
    names: Mapping[str, str],
    seq: int,
) -> list[str]:
    """The page's conclusions on the build and the fresh processes: two paragraphs.

    The first gives the lesson's five build steps in the page's process (their total and the
    longest step's share) and its two executes. The second gives, for a fresh process, the medians
    of each backend's import and first call, how much longer (or shorter) FlashAttention-4 took on
    the first call alone and on import and first call together (summed in each process), and the
    whole time up to the first output, starting torch and CUDA included; then cuDNN's first call
    against the build steps and first execute in the page's process (a ratio of two significant
    digits). Where the fresh process was the faster, it names the page's build steps that alone
    took longer than the fresh process's whole first call, and so were slower in the page (the
    fresh call is not timed step by step); where none did, it says so.

    Parameters
    ----------
    seconds
        The lesson's host seconds per step: the five build steps, ``"first execute"`` and
        ``"second execute"``.
    first_calls
        :func:`fresh_processes`' result.
    names
        Backend → its name (``"fa4"``: FlashAttention-4's label, with its version).
    seq
        The sequence length of the causal forward.

    Returns
    -------
    list[str]
        The two paragraphs, for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(seconds, first_calls, {"cudnn": CUDNN, "fa4": FA4}, seq=S))
    """
    build = {step: s for step, s in seconds.items() if "execute" not in step}
    build_total = sum(build.values())
    longest = max(build, key=build.__getitem__)
    lesson_sentence = (
        f"In this page's process, with torch, CUDA, cuDNN and the handle already started, "
        f"the lesson's five build steps took {build_total:.3f} s, "
        f"{100 * build[longest] / build_total:.0f}% of it in {longest}; the first execute "
        f"then took {1e3 * seconds['first execute']:.2f} ms and the second "
        f"{1e3 * seconds['second execute']:.2f} ms (host clock, up to the GPU's finish)."
    )

    fa4 = names.get("fa4", "FlashAttention-4")
    first_cudnn, first_fa4 = median_s(first_calls, "cudnn"), median_s(first_calls, "fa4")
    import_cudnn, import_fa4 = (median_s(first_calls, b, "import_s") for b in ("cudnn", "fa4"))
    n_cudnn, n_fa4 = _finished(first_calls, "cudnn"), _finished(first_calls, "fa4")
    if first_cudnn is not None and first_fa4 is not None:
        counted = f"{_processes(n_cudnn)} each" if n_cudnn == n_fa4 else f"{n_cudnn} and {n_fa4} processes"
        both_cudnn, both_fa4 = (median_s(first_calls, b, "import_s", "first_call_s") for b in ("cudnn", "fa4"))
        whole_cudnn, whole_fa4 = (median_s(first_calls, b, *PARTS) for b in ("cudnn", "fa4"))
        first_sentence = (
            f"In a fresh process (OS file cache not emptied; medians of {counted}), importing the "
            f"backend took {import_cudnn:.2f} s for cuDNN and {import_fa4:.2f} s for {fa4}, and the "
            f"first causal forward at S={seq} then took {first_cudnn:.2f} s with cuDNN (plan build "
            f"included) and {first_fa4:.2f} s with FlashAttention-4 (CuTe compile included). "
            f"FlashAttention-4 took {_ratio(first_cudnn, first_fa4)} on the first call alone and "
            f"{_ratio(both_cudnn, both_fa4)} on import and first call together ({both_cudnn:.2f} s "
            f"with cuDNN against {both_fa4:.2f} s, summed in each process); up to its first output, "
            f"starting torch and CUDA included, a fresh process took {whole_cudnn:.2f} s with cuDNN "
            f"and {whole_fa4:.2f} s with FlashAttention-4."
        )
    elif first_cudnn is not None:
        first_sentence = (
            f"In a fresh process (OS file cache not emptied; medians of {_processes(n_cudnn)}), "
            f"importing cuDNN took {import_cudnn:.2f} s and its first causal forward at S={seq} "
            f"{first_cudnn:.2f} s (plan build included); {fa4} has no fresh-process row."
        )
    else:
        first_sentence = "No fresh cuDNN process finished its first call: see the table above."
    if first_cudnn is not None:
        in_page = build_total + seconds["first execute"]
        first_sentence += (
            f" That first cuDNN call, which also creates its handle and declares the "
            f"graph, took {_two_digits(first_cudnn / in_page)}× the time of the five build steps "
            f"and the first execute in this page's process ({in_page:.2f} s)."
        )
        if first_cudnn < in_page:
            first_sentence += " " + _slower_in_page(build, first_cudnn)
    return [lesson_sentence, first_sentence]


def _two_digits(x: float) -> str:
    """``x`` with two significant digits (``0.54``, ``1.3``, ``12``); 100 and more, whole."""
    return f"{x:.{max(0, 1 - math.floor(math.log10(x)))}f}" if x > 0 else f"{x:g}"


def _slower_in_page(build: Mapping[str, float], fresh_s: float) -> str:
    """Which of the page's build steps were slower than in the fresh process, whose first call took ``fresh_s``.

    The fresh call is not timed step by step, so a step is named only where its time in the page
    alone is longer than that whole call; otherwise the page's longest step is given, unjudged.
    """
    from cudnn_guide.report.prose import listed

    over = [step for step in build if build[step] > fresh_s]
    head = "The fresh process was the faster: its first call is not timed step by step, but"
    if len(over) == 1:
        step = over[0]
        return (
            f"{head} here {step} alone took {build[step]:.2f} s, more than that whole call "
            f"({fresh_s:.2f} s), so {step} was slower in this page's process."
        )
    if over:
        took = listed(f"{step} ({build[step]:.2f} s)" for step in over)
        return (
            f"{head} here {took} each took more than that whole call ({fresh_s:.2f} s), so "
            f"those steps were slower in this page's process."
        )
    longest = max(build, key=build.__getitem__)
    return (
        f"The fresh process was the faster; its first call is not timed step by step and no step "
        f"here alone took as long as that whole call ({fresh_s:.2f} s), so which step was slower "
        f"in this page's process is not measured (the longest here: {longest}, "
        f"{build[longest]:.2f} s)."
    )


def route_sentence(route: str, fa4_ok: bool, fa4_detail: str) -> str:
    """Whether PyTorch's SDPA routed to FlashAttention-4, as a sentence; a failure with both installed
    is said to be most likely their versions'.

    Parameters
    ----------
    route
        ``"works"``, or ``"fails: <error type>: <first line>"``.
    fa4_ok
        Whether FlashAttention-4 is installed (:func:`~cudnn_guide.measure.fa4.status`).
    fa4_detail
        Its version, or why it is not installed.

    Returns
    -------
    str
        The sentence, naming torch's version where the route failed with FlashAttention-4 installed.

    Example
    -------
    >>> route_sentence("works", True, "4.0.0b36")
    "PyTorch's own route to FlashAttention-4 works."
    """
    if route != "works" and fa4_ok:  # both installed: most likely their versions
        import torch

        return (
            f"PyTorch's own route to FlashAttention-4 {route}. Most likely this is a "
            f"version mismatch between torch {torch.__version__}'s FA4 hook and "
            f"flash-attn-4 {fa4_detail}, not a property of the route; this page tries no "
            "other pair of versions."
        )
    return f"PyTorch's own route to FlashAttention-4 {route}."
