"""Where a recorded page's time went: each code cell's seconds, kept beside the page
(``<page>.cells.json``), and the kinds of work its record counted (:func:`time_spent`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cudnn_guide import datafiles

__all__ = ["CELLS_SUFFIX", "SPENT_KINDS", "time_cells", "read_cell_times", "time_spent"]

CELLS_SUFFIX = ".cells.json"
SPENT_KINDS = ("timing", "fresh processes", "compile")
"""The kinds of work a record counts (:func:`cudnn_guide.collector.spending`, ``compile_seconds``)."""


def _first_code_line(code: str) -> str:
    for line in code.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped[:100]
    return ""


def time_cells(gallery_dir: Path) -> None:
    """Time every code cell sphinx-gallery executes; write ``<example>.cells.json`` beside its page.

    Wraps ``sphinx_gallery.gen_rst.execute_code_block`` (called from ``conf.py`` in record mode).
    Each file lists, per code cell in page order, its first line number, its first line of code
    and its wall-clock seconds: where a page's build time goes, so the gallery can be kept
    within its time budget. The methodology page renders them.

    Parameters
    ----------
    gallery_dir
        Where the recorded pages are written.

    Example
    -------
    >>> time_cells(Path('docs/auto_examples'))  # in conf.py, record mode only
    """
    import time

    from sphinx_gallery import gen_rst

    inner = gen_rst.execute_code_block
    if getattr(inner, "_cudnn_guide_timed", False):
        return
    cells: dict[str, list[dict[str, Any]]] = {}

    from . import gpu_turns

    def waited() -> float:  # lanes: a cell's wait to take the GPU's turn back is not its own time
        turn = gpu_turns.current()
        return turn.waited if turn is not None else 0.0

    def timed(compiler: Any, block: Any, example_globals: Any, script_vars: dict[str, Any], *args: Any) -> Any:
        t0, w0 = time.perf_counter(), waited()
        try:
            return inner(compiler, block, example_globals, script_vars, *args)
        finally:
            if block.type == "code" and script_vars.get("execute_script", True):
                stem = Path(script_vars.get("src_file", "example.py")).stem
                cells.setdefault(stem, []).append(
                    {
                        "line": block.lineno,
                        "code": _first_code_line(block.content),
                        "seconds": round(time.perf_counter() - t0 - (waited() - w0), 3),
                    }
                )
                datafiles.write_json(
                    Path(gallery_dir) / f"{stem}{CELLS_SUFFIX}",
                    {"example": f"{stem}.py", "cells": cells[stem]},
                    indent=1,
                )

    timed._cudnn_guide_timed = True  # type: ignore[attr-defined]
    gen_rst.execute_code_block = timed


def read_cell_times(gallery_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """The per-cell seconds written by :func:`time_cells`: example file name → cells.

    Parameters
    ----------
    gallery_dir
        The recorded gallery.

    Returns
    -------
    dict[str, list[dict[str, Any]]]
        Cells (``line``, ``code``, ``seconds``) per example, for the examples that have them.

    Example
    -------
    >>> for name, cells in read_cell_times(Path('docs/auto_examples')).items():
    ...     print(name, max(cells, key=lambda c: c['seconds']))
    """
    out = {}
    for path in sorted(Path(gallery_dir).glob(f"*{CELLS_SUFFIX}")):
        data = datafiles.read_json(path)
        out[data["example"]] = data["cells"]
    return out


def time_spent(gallery_dir: Path) -> list[dict[str, Any]]:
    """Each recorded page's run split by kind of work, from its record and sphinx-gallery's cost file.

    ``timing`` is the measuring helpers' own time (benchmarks, comparisons, CUDA-graph loops,
    the autotuner), ``fresh processes`` the child interpreters of the start-up studies,
    ``compile`` what ``torch.compile`` spent compiling; ``rest`` is everything else the example did
    (building graphs, checks, references, plots). The kinds do not overlap.

    Parameters
    ----------
    gallery_dir
        The recorded gallery.

    Returns
    -------
    list[dict[str, Any]]
        One row per page whose record counts its time (recorded since records did): ``example``,
        ``total`` and the seconds of each kind, in page order.

    Example
    -------
    >>> rows = time_spent(Path('docs/auto_examples'))
    >>> sum(r['compile'] for r in rows)
    """
    rows = []
    for path in sorted(Path(gallery_dir).glob("*.record.json")):
        spent = datafiles.read_json(path).get("seconds")
        cost = path.with_name(path.name.replace(".record.json", ".cost.json"))
        if spent is None or not cost.exists():
            continue
        total = float(datafiles.read_json(cost)["time"])
        row = {"example": path.name.replace(".record.json", ""), "total": total}
        row.update({kind: float(spent.get(kind, 0.0)) for kind in SPENT_KINDS})
        row["rest"] = total - sum(row[kind] for kind in SPENT_KINDS)
        rows.append(row)
    return rows
