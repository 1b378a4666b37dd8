"""Carry a text-only edit of an example (comments, prose) into its recorded page, without a GPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cudnn_guide import datafiles

from .staleness import StaleRecordingError, source_md5

__all__ = ["restamp_text_edit"]


def _code_only(source: str) -> str:
    """The example's code as an AST dump, without its module docstring (comments are not in an AST)."""
    import ast

    tree = ast.parse(source)
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


def _markdown_text(line: str) -> str:
    """A notebook markdown line's text: a cell title (``## Title``) without its hashes."""
    stripped = line.strip()
    heading = stripped.lstrip("#")
    return heading.strip() if stripped.startswith("#") and heading.startswith(" ") else stripped


def restamp_text_edit(example: Path, gallery_dir: Path) -> list[tuple[str, str]]:
    """Carry an edit of an example's **text only** (its docstring and ``#`` comment lines) into its recorded page.

    A typo in a page's prose should not cost a GPU run, but nothing else may change without one.
    This refuses unless the example and the source it was recorded from (sphinx-gallery's copy
    in ``gallery_dir``) have the same code once the module docstring is set aside (their ASTs
    are equal; comments are not part of an AST) and the same number of lines. Each changed line
    is then replaced, as a whole line, in the recorded ``.rst`` and ``.ipynb``; the recorded
    ``.py`` copy and the page's ``.zip`` are replaced, and the ``.md5`` is written last.

    Parameters
    ----------
    example
        The edited example source.
    gallery_dir
        The recorded gallery.

    Returns
    -------
    list[tuple[str, str]]
        The (recorded, edited) text of each changed line.

    Raises
    ------
    StaleRecordingError
        The code changed, lines were added or removed, or a changed line is not found in the page.

    Example
    -------
    >>> restamp_text_edit(Path("examples/plot_18_attention_masks.py"), Path("docs/auto_examples"))
    """
    import zipfile

    example, gallery_dir = Path(example), Path(gallery_dir)
    recorded_py = gallery_dir / example.name
    if not recorded_py.exists():
        raise StaleRecordingError(f"{example.name}: no recorded copy in {gallery_dir}; record it on a GPU")
    old, new = recorded_py.read_text(encoding="utf-8"), example.read_text(encoding="utf-8")
    if _code_only(old) != _code_only(new):
        raise StaleRecordingError(f"{example.name}: its code changed, not only its text; re-record it on a GPU")
    old_lines, new_lines = old.splitlines(), new.splitlines()
    if len(old_lines) != len(new_lines):
        raise StaleRecordingError(f"{example.name}: lines were added or removed; re-record it on a GPU")
    changes = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]

    def text(line: str) -> str:
        # a bullet's continuation ("#   more text") is indented in the page: compare its text alone
        stripped = line.strip()
        return stripped[2:].strip() if stripped.startswith("# ") else stripped

    stem = example.stem
    rst_path, nb_path = gallery_dir / f"{stem}.rst", gallery_dir / f"{stem}.ipynb"
    rst = rst_path.read_text(encoding="utf-8").split("\n")
    notebook = json.loads(nb_path.read_text(encoding="utf-8"))
    for a, b in changes:
        before, after = text(a), text(b)
        if not before or not after:
            raise StaleRecordingError(
                f"{example.name}: an edited line became or was blank ({a!r} → {b!r}); re-record it"
            )
        hits = 0
        for i, line in enumerate(rst):
            if line.strip() == before and not line.startswith("    "):  # prose, not a code block's copy
                rst[i] = line[: len(line) - len(line.lstrip())] + after
                hits += 1
        for cell in notebook.get("cells", []):
            if cell.get("cell_type") != "markdown":
                continue
            was_list = isinstance(cell["source"], list)
            lines = ("".join(cell["source"]) if was_list else cell["source"]).splitlines(True)
            lines = [line.replace(before, after) if _markdown_text(line) == before else line for line in lines]
            cell["source"] = ["".join(lines)] if was_list else "".join(lines)
        if not hits:
            raise StaleRecordingError(
                f"{example.name}: the recorded page has no line {before!r}; re-record it on a GPU"
            )
    datafiles.write_text(rst_path, "\n".join(rst))
    # as sphinx-gallery writes it (indent 2, ASCII escapes, no final newline): only the edited cells change
    datafiles.write_text(nb_path, json.dumps(notebook, indent=2))
    datafiles.write_text(recorded_py, new)
    zip_path = gallery_dir / f"{stem}.zip"
    if zip_path.exists():
        tmp = zip_path.with_suffix(".zip.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            z.write(recorded_py, recorded_py.name)
            z.write(nb_path, nb_path.name)
        os.replace(tmp, zip_path)
    datafiles.write_text(gallery_dir / f"{example.name}.md5", source_md5(example))
    return changes
