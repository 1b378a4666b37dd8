"""The seconds of each code cell of a recorded page, kept beside it (``<page>.cells.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cudnn_guide import datafiles

__all__ = ["CELLS_SUFFIX", "time_cells", "read_cell_times"]

CELLS_SUFFIX = ".cells.json"


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

    def timed(compiler: Any, block: Any, example_globals: Any, script_vars: dict[str, Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(compiler, block, example_globals, script_vars, *args)
        finally:
            if block.type == "code" and script_vars.get("execute_script", True):
                stem = Path(script_vars.get("src_file", "example.py")).stem
                cells.setdefault(stem, []).append(
                    {
                        "line": block.lineno,
                        "code": _first_code_line(block.content),
                        "seconds": round(time.perf_counter() - t0, 3),
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
