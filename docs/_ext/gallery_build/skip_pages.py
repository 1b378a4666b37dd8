"""Pages for examples this GPU cannot run: their declared requirements, and the note page written instead."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from .staleness import source_md5

__all__ = ["declared_requirements", "unmet_requirements", "example_title", "write_skip_page"]


def declared_requirements(example: Path) -> list[tuple[tuple[int, int], str]]:
    """The ``(minimum SM, feature)`` of every top-level ``require_sm((M, m), "feature")`` call in an example.

    Read from the source without running it, so a recording run knows before executing a page
    whether this GPU can run it. The call in the page stays the single statement of the
    requirement, and a reader running the script on a smaller GPU gets its clear error.

    Parameters
    ----------
    example
        An example source file.

    Returns
    -------
    list[tuple[tuple[int, int], str]]
        ``((major, minor), feature)`` per requirement.

    Example
    -------
    >>> declared_requirements(Path('examples/plot_05_sdpa_causal.py'))  # [((8, 0), 'cuDNN fused attention')]
    """
    import ast

    tree = ast.parse(Path(example).read_text(encoding="utf-8"))
    found = []
    # Only statements at the top of the page state what it needs; a call inside a ``try`` (a page
    # demonstrating the error, say) is not a requirement of the page.
    for stmt in tree.body:
        node = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name != "require_sm" or len(node.args) < 2:
            continue
        try:
            sm, feature = ast.literal_eval(node.args[0]), ast.literal_eval(node.args[1])
        except ValueError:
            continue
        found.append(((int(sm[0]), int(sm[1])), str(feature)))
    return found


def unmet_requirements(example: Path, capability: tuple[int, int]) -> list[str]:
    """What ``example`` needs that a GPU of compute ``capability`` lacks, as readable phrases.

    Parameters
    ----------
    example
        An example source file.
    capability
        The GPU's ``(major, minor)``.

    Returns
    -------
    list[str]
        One phrase per unmet requirement.

    Example
    -------
    >>> unmet_requirements(Path('examples/plot_05_sdpa_causal.py'), (7, 5))
    """
    return [
        f"SM {sm[0]}.{sm[1]} or newer ({feature})"
        for sm, feature in declared_requirements(example)
        if tuple(capability) < sm
    ]


def example_title(path: Path) -> str:
    """An example's title: the first line of its module docstring (sphinx-gallery's page title).

    Parameters
    ----------
    path
        The example file.

    Returns
    -------
    str
        The title, or the file's stem if it has no docstring.

    Example
    -------
    >>> example_title(Path('examples/plot_02_conv_bias_relu.py'))
    'Fused convolution → bias → ReLU'
    """
    import ast

    if not path.exists():
        return path.stem
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return next((ln.strip() for ln in doc.splitlines() if ln.strip() and not set(ln.strip()) <= set("=-")), path.stem)


def write_skip_page(example: Path, gallery_dir: Path, needs: list[str], environment: dict[str, Any]) -> None:
    """Record, instead of a run, a page saying the example was skipped on this GPU and why.

    Writes what sphinx-gallery would (the page, the md5 that marks it current, a thumbnail, the
    script, notebook and zip downloads) and a JSON record carrying ``skipped``, so the build stays green and the page
    stays honest: it shows no numbers, only what it needs.

    Parameters
    ----------
    example
        The example source.
    gallery_dir
        The recorded gallery.
    needs
        The unmet requirements, as phrases.
    environment
        The recording environment.

    Example
    -------
    >>> write_skip_page(src, gallery, ['SM 9.0 or newer (FP8)'], environment.collect().to_dict())
    """
    import ast
    import zipfile

    example, gallery_dir = Path(example), Path(gallery_dir)
    stem = example.stem
    doc = ast.get_docstring(ast.parse(example.read_text(encoding="utf-8"))) or stem
    title = example_title(example)
    explanation = _docstring_body(doc, title)
    gpu = f"{environment.get('gpu', '?')} (SM {environment.get('sm', '?')})"
    reason = "; ".join(needs)
    (gallery_dir / "images" / "thumb").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(example, gallery_dir / example.name)
    page = (
        f".. _sphx_glr_{gallery_dir.name}_{stem}.py:\n\n{title}\n{'=' * len(title)}\n\n"
        f".. admonition:: skipped: needs {reason}\n   :class: warning\n\n"
        f"   This page was not run on {gpu}, which lacks what it needs; it shows no numbers. "
        f"Rebuild on a GPU that has it to record the page.\n\n"
        f"{explanation}"
        f"{_code_section(example)}"
        f":download:`Download the script <{example.name}>`\n"
    )
    (gallery_dir / f"{stem}.rst").write_text(page, encoding="utf-8")
    notebook = {  # the notebook download sphinx-gallery expects beside each page
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": [f"# {title}\n\nSkipped on {gpu}: needs {reason}."]},
            {
                "cell_type": "code",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": example.read_text(encoding="utf-8").splitlines(keepends=True),
            },
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (gallery_dir / f"{stem}.ipynb").write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    with zipfile.ZipFile(gallery_dir / f"{stem}.zip", "w", zipfile.ZIP_DEFLATED) as z:  # the zipped downloads
        for name in (example.name, f"{stem}.ipynb"):
            z.write(gallery_dir / name, name)
    (gallery_dir / f"{example.name}.md5").write_text(source_md5(example), encoding="utf-8")
    _skip_thumbnail(gallery_dir / "images" / "thumb" / f"sphx_glr_{stem}_thumb.png", reason)
    from cudnn_guide.report.records import Record

    rec = Record(stem, title=title, environment=environment)
    rec.extra["skipped"] = f"needs {reason}"
    rec.write(gallery_dir)


def _code_section(example: Path) -> str:
    """The page's code after its docstring, shown (not run) so that a skipped page still teaches it."""
    import ast

    source = example.read_text(encoding="utf-8")
    body = ast.parse(source).body
    first = body[0].end_lineno + 1 if body and isinstance(body[0], ast.Expr) else 1
    if first > len(source.splitlines()):
        return ""
    return (
        "The code\n--------\n\nWhat the page runs on a GPU that has what it needs (not run here):\n\n"
        f".. literalinclude:: {example.name}\n   :language: python\n   :lines: {first}-\n\n"
    )


def _docstring_body(doc: str, title: str) -> str:
    """The example docstring after its title and underline (reStructuredText), so a skipped page
    still explains its topic; empty when there is none."""
    lines = doc.splitlines()
    try:
        i = lines.index(title) + 1
    except ValueError:
        return ""
    while i < len(lines) and (not lines[i].strip() or set(lines[i].strip()) <= set("=-")):
        i += 1
    body = "\n".join(lines[i:]).strip()
    return f"{body}\n\n" if body else ""


def _skip_thumbnail(path: Path, reason: str) -> None:
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(4, 2.8), dpi=100)
    fig.text(0.5, 0.5, "skipped: needs\n" + textwrap.fill(reason, 28), ha="center", va="center", fontsize=12)
    fig.savefig(path)
    plt.close(fig)
