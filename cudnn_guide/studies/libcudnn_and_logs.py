"""Which libcudnn loads, what the frontend logs, and what the plan filters leave: the libcudnn-and-logs page's study.

The libcudnn-and-logs page (plot_29) keeps its cases in a :class:`~cudnn_guide.studies.failures.Cases`
and builds its graphs with :mod:`~cudnn_guide.studies.failures`. This module holds the rest of its
machinery:

* :func:`collect_env` and :func:`fill`: what ``python -m cudnn.collect_env`` says of cuDNN, torch,
  CUDA, the GPU and the driver, wrapped to the page's width;
* :func:`probe_broken_copy` and :func:`probe_no_wheel`: two ways to load the wrong libcudnn, each
  tried in a fresh process (:meth:`~cudnn_guide.studies.failures.Cases.probe`);
* :data:`LOG_SCRIPT`: the graph a fresh process builds with the frontend's log on
  (:func:`~cudnn_guide.studies.failures.frontend_log`);
* :func:`filter_rows`: one build per plan filter
  (:func:`~cudnn_guide.studies.failures.filtered_build`), as table rows;
* :func:`conclusions`: the page's sentences, computed from its cases, tables and log.

The probes, the log and the builds need a GPU (the probes at least a Python that imports the
frontend); the wrapping, the rows' reading and the sentences do not.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from cudnn_guide.check import LINE_WIDTH

__all__ = [
    "BROKEN_COPY",
    "ENV_WORDS",
    "FILTER_COLUMN",
    "LOG_SCRIPT",
    "NO_WHEEL",
    "collect_env",
    "conclusions",
    "fill",
    "filter_rows",
    "probe_broken_copy",
    "probe_no_wheel",
]

ENV_WORDS = ("cudnn", "torch", "cuda", "gpu", "driver")
"""An entry of ``python -m cudnn.collect_env`` with a line that names one of these (any case) is shown
(:func:`collect_env`)."""

BROKEN_COPY = "a broken libcudnn.so.9 first on LD_LIBRARY_PATH"
"""The case of :func:`probe_broken_copy`."""

NO_WHEEL = "no nvidia-cudnn wheel where the frontend looks"
"""The case of :func:`probe_no_wheel`."""

FILTER_COLUMN = "filter (after create_execution_plans)"
"""The column of :func:`filter_rows` that names the filter."""

LOG_SCRIPT = """
import torch, cudnn
h = cudnn.create_handle()
x = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)
g = cudnn.pygraph(handle=h, io_data_type=cudnn.data_type.BFLOAT16,
                  compute_data_type=cudnn.data_type.FLOAT)
Q, K, V = (g.tensor_like(x) for _ in range(3))
O, _ = g.sdpa(q=Q, k=K, v=V, attn_scale=0.125, generate_stats=False,
              diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
              diagonal_band_right_bound=0)
O.set_output(True)
g.build([cudnn.heur_mode.A])
"""
"""What the page logs, in a fresh process: causal SDPA on 1×2×128×64 bf16 tensors, built with
heuristics A."""


def fill(line: str) -> str:
    """One printed line wrapped at :data:`~cudnn_guide.check.LINE_WIDTH` (88) columns, its continuation indented by 4.

    Words and hyphens stay whole where they fit; a word longer than a line (a log's
    ``behavior_notes:[A,B,]``, a long path) is broken after its commas or slashes, and only where
    a piece still does not fit, inside it, so that no line is longer than the width.

    Parameters
    ----------
    line
        The line.

    Returns
    -------
    str
        The line, or its pieces joined by newlines.

    Example
    -------
    >>> fill("short line")
    'short line'
    """
    return _Wrapper(LINE_WIDTH, subsequent_indent="    ", break_on_hyphens=False).fill(line)


class _Wrapper(textwrap.TextWrapper):
    """A ``TextWrapper`` that splits a word too long for a line after its commas and slashes first."""

    def _split(self, text: str) -> list[str]:
        room = self.width - max(len(self.initial_indent), len(self.subsequent_indent))
        chunks = []
        for chunk in super()._split(text):
            chunks += [p for p in re.split(r"(?<=[,/])", chunk) if p] if len(chunk) > room else [chunk]
        return chunks


def collect_env(python: str = sys.executable, most: int = 40, timeout: float = 120) -> list[str]:
    """Run ``python -m cudnn.collect_env``; its entries that name cuDNN, torch, CUDA, the GPU or the driver.

    Standard output, then standard error, read as entries: a line that does not start with
    whitespace, with the indented lines under it (``libcudnn  ⚠ other installs on disk ...:`` and
    the directories it lists). An entry is kept whole when one of its lines names one of
    :data:`ENV_WORDS`; a line that lists the driver's ``brand=`` requirements is dropped, and an
    entry whose heading (a line ending in ``:``) has nothing left under it. A kept entry comes
    under its section's ``==== title ====`` line, which is shown once, with the section's first
    kept entry; blank lines are dropped.

    Parameters
    ----------
    python
        The interpreter to run it with.
    most
        How many lines to return at most: whole entries, from the first, each under its section's
        title (counted), so no heading is left with nothing under it.
    timeout
        Seconds before the process is killed (``subprocess.TimeoutExpired``).

    Returns
    -------
    list[str]
        The lines kept, in order.

    Example
    -------
    >>> print("\\n".join(fill(ln) for ln in collect_env()))
    """
    collect = subprocess.run(
        [python, "-m", "cudnn.collect_env"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines, title, titled = [], None, False
    for title_now, entry in _env_entries(collect.stdout.splitlines() + collect.stderr.splitlines()):
        if title_now != title:
            title, titled = title_now, False
        shown = entry if titled or title is None else [title, *entry]
        if len(lines) + len(shown) > most:
            break
        lines += shown
        titled = True
    return lines


def _env_entries(lines: Sequence[str]) -> list[tuple[str | None, list[str]]]:
    """``collect_env``'s kept entries, each with its section's title line (None before the first)."""
    entries, title = [], None
    for ln in lines:
        if not ln.strip():
            continue
        if re.fullmatch(r"=+ .* =+", ln.strip()):
            title = ln
        elif ln[0].isspace() and entries and entries[-1][0] == title:
            entries[-1][1].append(ln)
        else:
            entries.append((title, [ln]))
    kept = []
    for title, (head, *under) in entries:
        under = [ln for ln in under if "brand=" not in ln]
        if "brand=" in head or (head.rstrip().endswith(":") and not under):
            continue
        if any(w in ln.lower() for ln in (head, *under) for w in ENV_WORDS):
            kept.append((title, [head, *under]))
    return kept


def probe_broken_copy(cases: Any, *, ours: str, our_file: str | None, python: str = sys.executable) -> None:
    """Probe a broken ``libcudnn.so.9`` first on ``LD_LIBRARY_PATH``: :data:`BROKEN_COPY`, kept in ``cases``.

    An empty file named ``libcudnn.so.9``, in a temporary directory put before this process's
    ``LD_LIBRARY_PATH``, stands in for a stale or half-copied library; the probe
    (:meth:`~cudnn_guide.studies.failures.Cases.probe`) shows the directory as ``<dir>``.

    Parameters
    ----------
    cases
        The page's :class:`~cudnn_guide.studies.failures.Cases`.
    ours
        This process's ``str(cudnn.backend_version())``.
    our_file
        The libcudnn file this process mapped, or None.
    python
        The interpreter the probe runs in.

    Example
    -------
    >>> probe_broken_copy(cases, ours=str(cudnn.backend_version()), our_file=libcudnn.loaded_libcudnn())
    """
    with tempfile.TemporaryDirectory() as stale:
        open(os.path.join(stale, "libcudnn.so.9"), "wb").close()
        path = stale + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")
        cases.probe(
            BROKEN_COPY,
            python,
            "remove that directory from LD_LIBRARY_PATH "
            "(libcudnn.find_libcudnn().explain() names the file that would load)",
            ours=ours,
            our_file=our_file,
            hide=stale,
            env={"LD_LIBRARY_PATH": path},
        )


def probe_no_wheel(cases: Any, *, ours: str, our_file: str | None) -> None:
    """Probe a Python with no ``nvidia-cudnn`` wheel of its own, nothing on ``LD_LIBRARY_PATH``: :data:`NO_WHEEL`.

    A virtual environment on top of this Python (``system_site_packages=True``, no pip) has no
    ``nvidia/cudnn`` in its own site-packages; the probe imports the frontend from this Python's,
    with ``LD_LIBRARY_PATH`` empty, so the frontend asks the dynamic linker.

    Parameters
    ----------
    cases
        The page's :class:`~cudnn_guide.studies.failures.Cases`.
    ours
        This process's ``str(cudnn.backend_version())``.
    our_file
        The libcudnn file this process mapped, or None.

    Example
    -------
    >>> probe_no_wheel(cases, ours=ours, our_file=our_file)
    """
    import venv

    with tempfile.TemporaryDirectory() as bare:
        venv.create(bare, system_site_packages=True, with_pip=False)
        cases.probe(
            NO_WHEEL,
            os.path.join(bare, "bin", "python"),
            "pip install nvidia-cudnn-cu13 (or torch, which brings it) into the same "
            "environment, or put libcudnn's directory on LD_LIBRARY_PATH",
            ours=ours,
            our_file=our_file,
            env={"LD_LIBRARY_PATH": ""},
        )


def filter_rows(handle: Any, filters: Sequence[tuple[str, Any]]) -> list[dict[str, str]]:
    """Build causal SDPA once per plan filter: what each filter left, as table rows.

    Each build (:func:`~cudnn_guide.studies.failures.filtered_build`) declares the graph afresh
    (:func:`~cudnn_guide.studies.failures.sdpa_graph`), plans it with heuristics ``A`` then
    ``FALLBACK``, applies the one filter and finishes.

    Parameters
    ----------
    handle
        The cuDNN handle the graphs are declared on.
    filters
        (the graph's filter method, its argument), in the order built.

    Returns
    -------
    list[dict[str, str]]
        One row per filter: :data:`FILTER_COLUMN` (the call, as text:
        :func:`~cudnn_guide.studies.failures.filter_label`) and ``"result"``.

    Example
    -------
    >>> filter_rows(handle, [("deselect_workspace_greater_than", 0)])[0]["result"]
    """
    from cudnn_guide.studies import failures

    filtered = []
    for method, arg in filters:
        result = failures.filtered_build(failures.sdpa_graph(handle)[0], method, arg)
        label = failures.filter_label(method, arg)  # e.g. deselect_engines([eng0])
        filtered.append({FILTER_COLUMN: label, "result": result})
    return filtered


def conclusions(
    cases: Any,
    *,
    ours: str,
    our_file: str | None,
    rows: Sequence[Mapping[str, Any]],
    filtered: Sequence[Mapping[str, str]],
    log_lines: Sequence[str],
) -> list[str]:
    """The libcudnn-and-logs page's conclusions: every count and sentence computed from its data.

    Which libcudnn this process runs and from where; how many ways to load the wrong one failed,
    loaded the same library, or raised nothing, and where the failures surfaced; those that
    raised nothing and those that loaded the same library, with what each did (a count of 0 is said
    once, in the counts' sentence); the plans and build time of each heuristic mode; how many
    filters left no plan that builds; and the first line of the frontend's log that mentions a
    version, if any.

    Parameters
    ----------
    cases
        The page's :class:`~cudnn_guide.studies.failures.Cases`: the probes.
    ours
        This process's ``str(cudnn.backend_version())``.
    our_file
        The libcudnn file this process mapped, or None.
    rows
        :func:`~cudnn_guide.studies.failures.timed_build`'s rows, one per heuristic mode.
    filtered
        :func:`filter_rows`' rows.
    log_lines
        The frontend's log (:func:`~cudnn_guide.studies.failures.frontend_log`).

    Returns
    -------
    list[str]
        Paragraphs for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(cases, ours=ours, our_file=our_file, rows=rows, filtered=filtered,
    ...                    log_lines=log_lines))
    """
    from cudnn_guide.studies import failures

    outcomes = cases.rows
    failed, same_lib, silent_rows = cases.failed(), cases.fine(), cases.silent()
    emptied = [f[FILTER_COLUMN] for f in filtered if not f["result"].startswith("builds")]
    dotted = failures.dotted
    sentences = [
        f"This process runs libcudnn {dotted(ours)} ({ours}), "
        + (f"from {our_file}." if our_file else "from no file /proc/self/maps names."),
        f"Of the {len(outcomes)} ways to load the wrong libcudnn tried, {len(failed)} "
        f"failed with a message, {len(same_lib)} loaded the same libcudnn as this "
        f"process, and {len(silent_rows)} raised nothing at all.",
        "Where the failures surfaced: "
        + cases.where()
        + ". A failure on import or at handle creation is the library's: "
        "libcudnn.find_libcudnn().explain() and python -m cudnn.collect_env name the file.",
    ]
    # a count of 0 is said in the sentence above; only the cases behind a count above 0 are listed
    if silent_rows:
        sentences.append(
            "Raised nothing although another libcudnn was loaded: "
            + "; ".join(f"{o['case']}: {o['message']}" for o in silent_rows)
            + ". Only a check of the loaded library's version (cudnn.backend_version()) catches these."
        )
    if same_lib:
        sentences.append(
            "Loaded the same libcudnn as this process: "
            + "; ".join(f"{o['case']}: {o['message']}" for o in same_lib)
            + "."
        )
    sentences += [
        "Plans listed, and the five build steps' time, per heuristic mode: "
        + "; ".join(f"{r['heur_mode']}: {r['plans']} plan(s), {1e3 * r['build s (5 steps)']:.0f} ms" for r in rows)
        + ".",
        f"{len(emptied)} of the {len(filtered)} plan filters left no plan that builds"
        + (f": {', '.join(emptied)}." if emptied else "."),
    ]
    version_notes = [ln for ln in log_lines if "version" in ln.lower()]
    if version_notes:
        note_text = version_notes[0].split("INFO:", 1)[-1].strip()
        sentences.append(f"The frontend's log notes: {note_text}")
    return sentences
