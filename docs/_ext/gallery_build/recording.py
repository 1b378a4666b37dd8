"""Record on a GPU, render anywhere: the docs build's two modes.

*Record* (a CUDA GPU is present, or ``CUDNN_GUIDE_DOCS_MODE=record``): sphinx-gallery executes
every example afresh and writes its page, figures, downloads, ``.md5`` and timing files, and each
example's JSON record, into ``docs/auto_examples`` to be committed, then a manifest
(``recording.json``) saying where and when.

*Render* (no GPU, or ``CUDNN_GUIDE_DOCS_MODE=render``): nothing executes. sphinx-gallery skips
every example whose ``.md5`` matches its source and keeps the recorded page. An example changed
since its recording would otherwise be executed (and crash without a GPU) or rendered stale, so
:func:`stale_examples` finds them first and the build stops, naming each file.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles
from cudnn_guide.errors import GuideError

__all__ = [
    "MODE_ENV",
    "MANIFEST",
    "StaleRecordingError",
    "ExampleState",
    "docs_mode",
    "example_states",
    "stale_examples",
    "require_fresh_recording",
    "read_manifest",
    "write_manifest",
    "describe_recording",
    "package_md5",
    "restamp_text_edit",
    "example_title",
    "recording_commit",
    "schedule",
    "plan_lanes",
    "RECORD_ALONE",
    "page_files",
    "package_changed_since_recording",
    "ONLY_ENV",
    "record_examples",
    "declared_requirements",
    "unmet_requirements",
    "write_skip_page",
    "CELLS_SUFFIX",
    "time_cells",
    "read_cell_times",
    "RECORDING_PRELOAD",
    "recording_preload",
    "stage_docs",
    "promote_page",
]

MODE_ENV = "CUDNN_GUIDE_DOCS_MODE"
ONLY_ENV = "CUDNN_GUIDE_RECORD_ONLY"
REPO_ROOT = Path(__file__).resolve().parents[3]
"""The repository: ``docs/_ext/gallery_build/recording.py`` is three folders below it."""
GALLERY_NAME = "auto_examples"
"""The gallery's folder under ``docs``."""
MANIFEST = "recording.json"
REPRODUCIBILITY = "reproducibility.json"
"""In ``docs/data``: the last full recording's :func:`~gallery_build.history.reproducibility` report."""
CELLS_SUFFIX = ".cells.json"


class StaleRecordingError(GuideError):
    """An example changed since its GPU recording (or was never recorded).

    Example
    -------
    >>> require_fresh_recording(Path('examples'), Path('docs/auto_examples'))  # raises if stale
    """


def docs_mode() -> str:
    """``"record"`` or ``"render"``: ``$CUDNN_GUIDE_DOCS_MODE`` if set, else record iff a CUDA GPU is visible.

    Returns
    -------
    str
        ``"record"`` or ``"render"``.

    Raises
    ------
    ValueError
        ``CUDNN_GUIDE_DOCS_MODE`` is set to something else than record, render or auto.

    Example
    -------
    >>> os.environ['CUDNN_GUIDE_DOCS_MODE'] = 'render'
    >>> assert docs_mode() == 'render'
    """
    mode = os.environ.get(MODE_ENV, "auto").strip().lower()
    if mode in ("record", "render"):
        return mode
    if mode != "auto":
        raise ValueError(f"{MODE_ENV}={mode!r}: expected 'record', 'render' or 'auto'")
    try:
        import torch

        return "record" if torch.cuda.is_available() else "render"
    except ImportError:
        return "render"


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


class ExampleState:
    """One example and the state of its recording: ``fresh``, ``stale`` or ``missing``.

    Example
    -------
    >>> [s.state for s in example_states(Path('examples'), Path('docs/auto_examples'))]
    """

    def __init__(self, source: Path, state: str) -> None:
        self.source, self.state = source, state

    def __repr__(self) -> str:
        return f"ExampleState({self.source.name!r}, {self.state!r})"


def example_states(examples_dir: Path, gallery_dir: Path, pattern: str = "plot_*.py") -> list[ExampleState]:
    """Compare each example's md5 with the one sphinx-gallery stored when it was recorded.

    Parameters
    ----------
    examples_dir
        The example sources.
    gallery_dir
        The recorded gallery.
    pattern
        Which sources are examples.

    Returns
    -------
    list[ExampleState]
        One state per example.

    Example
    -------
    >>> for s in example_states(Path('examples'), Path('docs/auto_examples')): print(s)
    """
    states = []
    for src in sorted(Path(examples_dir).glob(pattern)):
        stored = Path(gallery_dir) / (src.name + ".md5")
        rst = Path(gallery_dir) / (src.stem + ".rst")
        if not stored.exists() or not rst.exists():
            states.append(ExampleState(src, "missing"))
        elif stored.read_text().strip() != _md5(src):
            states.append(ExampleState(src, "stale"))
        else:
            states.append(ExampleState(src, "fresh"))
    return states


def stale_examples(examples_dir: Path, gallery_dir: Path) -> list[ExampleState]:
    """Examples whose recording is stale or missing.

    Parameters
    ----------
    examples_dir
        The example sources.
    gallery_dir
        The recorded gallery.

    Returns
    -------
    list[ExampleState]
        The stale or missing ones.

    Example
    -------
    >>> [s.source.name for s in stale_examples(Path('examples'), Path('docs/auto_examples'))]
    """
    return [s for s in example_states(examples_dir, gallery_dir) if s.state != "fresh"]


def require_fresh_recording(examples_dir: Path, gallery_dir: Path) -> None:
    """Raise :class:`StaleRecordingError` naming every example that must be re-recorded on a GPU.

    Parameters
    ----------
    examples_dir
        The example sources.
    gallery_dir
        The recorded gallery.

    Raises
    ------
    StaleRecordingError
        Naming every example that changed since it was recorded or was never recorded.

    Example
    -------
    >>> require_fresh_recording(Path('examples'), Path('docs/auto_examples'))
    """
    bad = stale_examples(examples_dir, gallery_dir)
    if bad:
        lines = [
            f"  {s.source.as_posix()}: "
            + ("changed since it was recorded" if s.state == "stale" else "has never been recorded")
            for s in bad
        ]
        raise StaleRecordingError(
            "cannot render the gallery without a GPU: these examples must be re-recorded on a GPU "
            "(run `nox -s docs` on a CUDA machine and commit docs/auto_examples):\n" + "\n".join(lines)
        )


def package_md5() -> str:
    """One md5 over the source of every :mod:`cudnn_guide` module (what the examples ran with).

    Returns
    -------
    str
        A hex digest.

    Example
    -------
    >>> print(package_md5())
    """
    h = hashlib.md5()
    import cudnn_guide

    top = Path(cudnn_guide.__file__).resolve().parent
    for path in sorted(top.rglob("*.py")):
        h.update(path.relative_to(top).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def package_changed_since_recording(gallery_dir: Path) -> bool:
    """True when ``cudnn_guide`` differs from the code the committed recording ran with.

    Parameters
    ----------
    gallery_dir
        The recorded gallery.

    Returns
    -------
    bool
        Whether the package differs from the recorded one.

    Example
    -------
    >>> if package_changed_since_recording(gallery): print('re-record to refresh')
    """
    manifest = read_manifest(gallery_dir)
    return bool(manifest and manifest.get("package_md5") and manifest["package_md5"] != package_md5())


def read_manifest(gallery_dir: Path) -> dict[str, Any] | None:
    """The recording's ``recording.json`` (environment, md5s, build time), or ``None``.

    Parameters
    ----------
    gallery_dir
        The recorded gallery.

    Returns
    -------
    dict[str, Any] | None
        The manifest, or ``None``.

    Example
    -------
    >>> print(read_manifest(Path('docs/auto_examples'))['recorded_utc'])
    """
    path = Path(gallery_dir) / MANIFEST
    if not path.exists():
        return None
    return datafiles.read_json(path)


def write_manifest(
    gallery_dir: Path,
    examples_dir: Path,
    environment: dict[str, Any] | None,
    build_seconds: float | None = None,
    example_seconds: dict[str, float] | None = None,
    interpreters_seconds: float | None = None,
    full_run: bool = False,
    gpus: int | None = None,
) -> Path:
    """Write ``recording.json``: the environment, each example's md5, the date and the build time.

    Seconds per example accumulate across partial recordings (an example recorded now replaces
    its previous time); ``full_recording`` keeps the wall time of the last run that recorded
    every example, so recording one page later does not pass its time off as the gallery's.

    Parameters
    ----------
    gallery_dir
        The recorded gallery.
    examples_dir
        The example sources.
    environment
        The recording environment (``EnvironmentRecord.to_dict()``).
    build_seconds
        Wall time of this recording run.
    example_seconds
        Wall time of each example recorded in this run (its own process, start-up included).
    interpreters_seconds
        How long this run waited for the pages' interpreters to start (kept from the last run
        that recorded every example, with ``full_recording``).
    full_run
        This run recorded every example.
    gpus
        How many GPUs recorded at once (kept with ``full_recording``).

    Returns
    -------
    Path
        The manifest's path.

    Example
    -------
    >>> write_manifest(gallery, examples, environment.collect().to_dict(), build_seconds=230.0)
    """
    previous = read_manifest(gallery_dir) or {}
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    seconds = dict(previous.get("example_seconds", {}), **(example_seconds or {}))
    full = previous.get("full_recording")
    if full_run and build_seconds is not None:
        full = {
            "seconds": build_seconds,
            "utc": now,
            "commit": (environment or {}).get("commit"),
            "interpreters_start_seconds": interpreters_seconds,
            "gpus": gpus,
        }
    data = {
        "last_run_seconds": dict(example_seconds or {}),
        "recorded_utc": now,
        "environment": environment,
        "build_seconds": build_seconds,
        "example_seconds": seconds,
        "full_recording": full,
        "examples": {s.name: _md5(s) for s in sorted(Path(examples_dir).glob("plot_*.py"))},
        "package_md5": package_md5(),
    }
    return datafiles.write_json(Path(gallery_dir) / MANIFEST, data, indent=1)


def recording_commit(gallery_dir: Path) -> str:
    """The commit the committed recording ran at (``"none"`` before the first recording).

    Parameters
    ----------
    gallery_dir
        The recorded gallery.

    Returns
    -------
    str
        The commit from ``recording.json``.

    Example
    -------
    >>> recording_commit(Path('docs/auto_examples'))
    """
    manifest = read_manifest(gallery_dir) or {}
    return str((manifest.get("environment") or {}).get("commit") or "none")


def describe_recording(gallery_dir: Path) -> str:
    """One line for the console and the home page: where and when the recording was measured.

    Parameters
    ----------
    gallery_dir
        The recorded gallery.

    Returns
    -------
    str
        GPU, versions, date and commit in one line.

    Example
    -------
    >>> print(describe_recording(Path('docs/auto_examples')))
    """
    manifest = read_manifest(gallery_dir)
    if not manifest or not manifest.get("environment"):
        return "no GPU recording has been committed yet"
    env = manifest["environment"]
    # pages merged from shards name their own commit
    commits = Counter(p["commit"] for p in manifest.get("pages", {}).values() if p.get("commit"))
    if len(commits) > 1:
        commit = "commits " + ", ".join(f"{c} ({n} page{'s' if n > 1 else ''})" for c, n in commits.most_common())
    else:
        commit = f"commit {next(iter(commits), env.get('commit', '?'))}"
    return (
        f"{env.get('gpu', '?')} (driver {env.get('driver', '?')}, CUDA {env.get('cuda', '?')}, "
        f"cuDNN {env.get('cudnn_backend', '?')}, frontend {env.get('cudnn_frontend', '?')}, "
        f"torch {env.get('torch', '?')}) on {manifest.get('recorded_utc', '?')}, {commit}"
    )


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


def _code_only(source: str) -> str:
    """The example's code as an AST dump, without its module docstring (comments are not in an AST)."""
    import ast

    tree = ast.parse(source)
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


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
        stripped = line.strip()
        return stripped[2:] if stripped.startswith("# ") else stripped

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
            lines = [line.replace(before, after) if line.strip() == before else line for line in lines]
            cell["source"] = ["".join(lines)] if was_list else "".join(lines)
        if not hits:
            raise StaleRecordingError(
                f"{example.name}: the recorded page has no line {before!r}; re-record it on a GPU"
            )
    datafiles.write_text(rst_path, "\n".join(rst))
    datafiles.write_text(nb_path, json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    datafiles.write_text(recorded_py, new)
    zip_path = gallery_dir / f"{stem}.zip"
    if zip_path.exists():
        tmp = zip_path.with_suffix(".zip.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            z.write(recorded_py, recorded_py.name)
            z.write(nb_path, nb_path.name)
        os.replace(tmp, zip_path)
    datafiles.write_text(gallery_dir / f"{example.name}.md5", _md5(example))
    return changes


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
    import shutil
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
    (gallery_dir / f"{example.name}.md5").write_text(_md5(example), encoding="utf-8")
    _skip_thumbnail(gallery_dir / "images" / "thumb" / f"sphx_glr_{stem}_thumb.png", reason)
    from cudnn_guide.report.records import Record

    rec = Record(stem, title=title, environment=environment)
    rec.extra["skipped"] = f"needs {reason}"
    rec.write(gallery_dir)


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
        Module names, for :func:`cudnn_guide.measure.fresh_process.run`'s ``preload``.

    Example
    -------
    >>> with fresh_process.InterpreterPool(14, preload=recording_preload()) as pool: ...
    """
    from sphinx import application

    sphinx_own = [*application.builtin_extensions, *getattr(application, "_first_party_extensions", ())]
    return [*RECORDING_PRELOAD, *sphinx_own]


def _build_one_example(docs_dir: str, out_dir: str, example: str) -> int:
    """In the page's fresh process: the one-example Sphinx build that executes ``example``."""
    from sphinx.cmd.build import build_main

    from cudnn_guide.measure import drift

    from . import history

    os.environ.update({MODE_ENV: "record", ONLY_ENV: example, drift.PAGE_ENV: Path(example).stem})
    os.environ.setdefault(drift.DRIFT_ENV, str(REPO_ROOT / "docs" / "data" / history.DRIFT))
    cold_caches(Path(out_dir) / f"caches-{Path(example).stem}")
    return build_main(["-b", "dummy", "-q", docs_dir, out_dir])


COLD_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton", "CUDA_CACHE_PATH": "cuda-jit"}
"""The compile caches each page starts empty: Inductor's (autotuning too), Triton's, the CUDA JIT's."""


def cold_caches(folder: Path) -> dict[str, str]:
    """Point this process's compile caches at empty folders under ``folder``, before CUDA starts.

    Every page then starts as cold as on a fresh machine, whichever pages ran before it on the
    same GPU, so neither the schedule nor a second recording on a warm machine moves its numbers
    or its time. A cache variable already set in the environment is kept: export one to record
    warm on purpose.

    Parameters
    ----------
    folder
        Where the empty caches go (the page's private build folder).

    Returns
    -------
    dict[str, str]
        Variable → the folder it now points at.

    Example
    -------
    >>> cold_caches(Path(tempfile.mkdtemp()))["CUDA_CACHE_PATH"]
    """
    chosen = {}
    for var, sub in COLD_CACHES.items():
        if var not in os.environ:
            (folder / sub).mkdir(parents=True, exist_ok=True)
            os.environ[var] = str(folder / sub)
        chosen[var] = os.environ[var]
    return chosen


def stage_docs(docs_dir: Path, examples_dir: Path, gallery_dir: Path, stage_root: Path) -> Path:
    """A private copy of the docs source in which one page records; returns the copy's gallery.

    The copy holds ``conf.py``, a link to ``_static``, a link to the examples and a full copy of
    the gallery, so the page's build writes nothing outside ``stage_root`` until
    :func:`promote_page` moves its files in.

    Parameters
    ----------
    docs_dir
        The Sphinx source directory.
    examples_dir
        The example sources.
    gallery_dir
        The recorded gallery.
    stage_root
        An empty or missing private folder.

    Returns
    -------
    Path
        The staged gallery.

    Example
    -------
    >>> staged = stage_docs(Path('docs'), Path('examples'), Path('docs/auto_examples'), Path(tmp) / 'p')
    """
    stage_root = Path(stage_root)
    docs = stage_root / Path(docs_dir).name
    docs.mkdir(parents=True)
    if (Path(docs_dir) / "conf.py").exists():
        shutil.copy2(Path(docs_dir) / "conf.py", docs / "conf.py")
    if (Path(docs_dir) / "_static").is_dir():
        (docs / "_static").symlink_to((Path(docs_dir) / "_static").resolve())
    (stage_root / "examples").symlink_to(Path(examples_dir).resolve())
    staged = docs / Path(gallery_dir).name
    shutil.copytree(gallery_dir, staged) if Path(gallery_dir).exists() else staged.mkdir()
    return staged


def page_files(folder: Path, stem: str, shared: bool = False) -> dict[Path, Path]:
    """The files of page ``stem`` in a gallery folder (``stem.*``, ``sphx_glr_stem_*``): relative path → path.

    Parameters
    ----------
    folder
        A gallery folder.
    stem
        The example's stem.
    shared
        Also the files of no page (the gallery index, the download zips).

    Returns
    -------
    dict[Path, Path]
        Path relative to ``folder`` → path.

    Example
    -------
    >>> sorted(page_files(Path('docs/auto_examples'), 'plot_02_conv_bias_relu'))[:2]
    """

    def ours(name: str) -> bool:
        return name.startswith((f"{stem}.", f"sphx_glr_{stem}_")) or (shared and "plot_" not in name)

    folder = Path(folder)
    if not folder.exists():
        return {}
    return {p.relative_to(folder): p for p in sorted(folder.rglob("*")) if p.is_file() and ours(p.name)}


def promote_page(staged: Path, gallery_dir: Path, example: str) -> list[str]:
    """Move what a successful build of ``example`` changed in ``staged`` into ``gallery_dir``; returns the paths.

    Only the page's own files and the gallery's shared ones (its index) move: sphinx-gallery
    also rewrites other pages' downloads as it passes them, and those stay as committed. Every
    file is replaced atomically. The page's ``.md5`` is removed first and written last: a
    promotion cut short leaves the page stale (the build refuses it and names it), never a
    half-new page that claims to be current.

    Parameters
    ----------
    staged
        The staged gallery the page was recorded into.
    gallery_dir
        The committed gallery.
    example
        The example's file name.

    Returns
    -------
    list[str]
        The paths written, relative to the gallery, the ``.md5`` last.

    Raises
    ------
    RuntimeError
        The staged build wrote no ``.md5`` for ``example`` (sphinx-gallery did not finish it).

    Example
    -------
    >>> promote_page(staged, Path('docs/auto_examples'), 'plot_08_cuda_graphs.py')
    """
    staged, gallery_dir = Path(staged), Path(gallery_dir)
    md5 = Path(f"{example}.md5")
    if not (staged / md5).exists():
        raise RuntimeError(f"recording {example}: its build finished without writing {md5}; nothing was kept")
    stem = Path(example).stem
    new, old = page_files(staged, stem, shared=True), page_files(gallery_dir, stem, shared=True)
    changed = sorted(
        rel
        for rel, path in new.items()
        if rel != md5 and (rel not in old or old[rel].read_bytes() != path.read_bytes())
    )
    (gallery_dir / md5).unlink(missing_ok=True)
    for rel in changed:
        (gallery_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        datafiles.write_bytes(gallery_dir / rel, new[rel].read_bytes())
    for rel in sorted(set(old) - set(new) - {md5}):
        (gallery_dir / rel).unlink()
    datafiles.write_bytes(gallery_dir / md5, new[md5].read_bytes())
    return [str(r) for r in [*changed, md5]]


def record_examples(
    docs_dir: Path,
    examples_dir: Path,
    gallery_dir: Path,
    *,
    names: list[str] | None = None,
    shard: Path | None = None,
    gpus: int | None = None,
    keep_going: bool = False,
) -> dict[str, float]:
    """Record each example in its own fresh process, into a staging copy; keep only pages that succeed.

    For each example: copy the docs source and gallery into a private staging folder
    (:func:`stage_docs`), delete the example's stored md5 there (so sphinx-gallery treats it as
    changed) and run a ``dummy`` Sphinx build with ``CUDNN_GUIDE_RECORD_ONLY`` naming it, which
    makes ``conf.py`` execute that example alone. Only when the build succeeds are its files
    moved into ``gallery_dir`` (:func:`promote_page`); a page that fails leaves every committed
    file byte-identical. Each build runs in a new interpreter of its own (an
    :class:`~cudnn_guide.measure.fresh_process.InterpreterPool`, all started up front so their imports
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
        Example file names; default all.
    shard
        Write the recorded pages into this new shard folder
        (:mod:`gallery_build.shards`) instead of the gallery, which stays untouched.
    gpus
        How many GPUs record at once (default: every visible one). Each page runs in an
        interpreter pinned to one of them with ``CUDA_VISIBLE_DEVICES``; the pages are spread
        over them longest first (:func:`schedule`), from the previous recording's seconds.
    keep_going
        Record every page even after one fails (the failures are raised together at the end),
        instead of stopping at the first.

    Returns
    -------
    dict[str, float]
        Seconds per example (0 for a skipped one), its process's start and exit included.

    Raises
    ------
    ValueError
        A name in ``names`` is not an example.
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
                seconds = record_examples(work_docs, examples_dir, work_docs / GALLERY_NAME, names=names, gpus=gpus)
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
                )
            if failure:
                raise failure
            return seconds

    sources = sorted(Path(examples_dir).glob("plot_*.py"))
    if names:
        unknown = set(names) - {s.name for s in sources}
        if unknown:
            raise ValueError(f"no such examples: {sorted(unknown)}")
        sources = [s for s in sources if s.name in names]
    seconds: dict[str, float] = {}
    t_all = time.perf_counter()
    env_record = environment.collect().to_dict()
    capability = tuple(int(x) for x in env_record["sm"].split("."))
    runnable, pool_seconds, failure = [], None, None
    with tempfile.TemporaryDirectory(prefix="cudnn-guide-stage-") as stage_dir:
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
                runnable, docs_dir, examples_dir, gallery_dir, Path(stage_dir), seconds, gpus, keep_going
            )
    from . import history

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
        )
        history.append(
            Path(docs_dir) / "data" / "history.jsonl", history.entries_from_gallery(gallery_dir, list(seconds))
        )
        if not names and failure is None:  # a full recording: does it reproduce the one before?
            lines = history.load(Path(docs_dir) / "data" / "history.jsonl")
            report = history.reproducibility(lines)
            datafiles.write_json(Path(docs_dir) / "data" / REPRODUCIBILITY, report, indent=1)
            datafiles.write_json(Path(docs_dir) / "data" / history.DRIFT, history.drift(lines), indent=1)
            print(f"cudnn-guide: {history.format_reproducibility(report)}", flush=True)
    if failure:
        kept = ", ".join(seconds) or "none"
        raise RuntimeError(f"{failure}\nIts committed files are unchanged. Pages recorded before it were kept: {kept}.")
    return seconds


def schedule(pages: list[str], previous_seconds: dict[str, float], workers: int) -> list[list[str]]:
    """Spread pages over ``workers`` GPUs, longest first, each onto the least-loaded GPU (LPT).

    A page without a previous time counts as the longest known one, so it starts early.

    Parameters
    ----------
    pages
        Example file names.
    previous_seconds
        Each page's seconds in the last recording (``recording.json``).
    workers
        How many GPUs.

    Returns
    -------
    list[list[str]]
        One list of pages per GPU, in the order each runs them.

    Example
    -------
    >>> schedule(["a.py", "b.py", "c.py"], {"a.py": 60, "b.py": 40, "c.py": 30}, 2)
    [['a.py'], ['b.py', 'c.py']]
    """
    if workers <= 1:
        return [list(pages)] if pages else []  # one GPU: the pages' own order (a failure stops the rest)
    default = max(previous_seconds.values(), default=1.0)
    cost = {p: previous_seconds.get(p, default) or default for p in pages}
    lanes: list[list[str]] = [[] for _ in range(max(1, workers))]
    load = [0.0] * len(lanes)
    for page in sorted(pages, key=lambda p: (-cost[p], p)):
        i = min(range(len(lanes)), key=lambda k: (load[k], k))
        lanes[i].append(page)
        load[i] += cost[page]
    return [lane for lane in lanes if lane]


RECORD_ALONE = {
    # pages whose results are host times: no other page's CPU work runs beside them. Their host times
    # still jump between recordings, on one GPU as on two: the methodology page's "Host-bound pages
    # beside other GPUs" traces that to the process (two levels between fresh processes), not to neighbours
    "plot_08_cuda_graphs.py",
    "plot_21_call_overhead.py",
}


def plan_lanes(pages: list[str], previous_seconds: dict[str, float], workers: int) -> tuple[list[str], list[list[str]]]:
    """:func:`schedule`, with the :data:`RECORD_ALONE` pages first on GPU 0 while the other GPUs wait.

    Parameters
    ----------
    pages
        Example file names.
    previous_seconds
        Each page's seconds in the last recording (``recording.json``).
    workers
        How many GPUs.

    Returns
    -------
    tuple[list[str], list[list[str]]]
        The pages that run alone, and the lanes (GPU 0's starts with them).

    Example
    -------
    >>> plan_lanes(["plot_08_cuda_graphs.py", "a.py", "b.py"], {"a.py": 60, "b.py": 40}, 2)
    (['plot_08_cuda_graphs.py'], [['plot_08_cuda_graphs.py', 'a.py'], ['b.py']])
    """
    alone = [p for p in pages if p in RECORD_ALONE] if workers > 1 else []
    lanes = schedule([p for p in pages if p not in alone], previous_seconds, workers)
    if alone:
        lanes = [alone + (lanes[0] if lanes else [])] + lanes[1:]
    return alone, lanes


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
) -> tuple[float | None, str | None]:
    """Record ``runnable`` pages, one page per GPU at a time; fill ``seconds``; return (pool start, failure)."""
    import threading
    import time

    from cudnn_guide.measure import fresh_process

    workers = gpus or _visible_gpus()
    previous = (read_manifest(gallery_dir) or {}).get("example_seconds", {})
    alone, lanes = plan_lanes([s.name for s in runnable], previous, workers)
    by_name = {s.name: s for s in runnable}
    lock, failures, starts = threading.Lock(), [], []
    alone_done = threading.Event()  # the other GPUs start once GPU 0 has recorded the pages that run alone
    all_ready = threading.Barrier(max(1, len(lanes)))  # no page starts while another GPU's interpreters still import
    print(
        f"cudnn-guide: {len(runnable)} page(s) on {len(lanes)} GPU(s), longest first"
        + (f"; alone first on GPU 0: {', '.join(alone)}" if alone else "")
        + ": "
        + "; ".join(f"GPU {i}: {', '.join(lane)}" for i, lane in enumerate(lanes)),
        flush=True,
    )

    def lane_worker(gpu: int, lane: list[str]) -> None:
        env = {"CUDA_VISIBLE_DEVICES": str(gpu)} if len(lanes) > 1 else None
        t0 = time.perf_counter()
        with fresh_process.InterpreterPool(len(lane), preload=recording_preload(), env=env, exit_fast=True) as pool:
            try:
                pool.wait_ready()
                all_ready.wait()
            except threading.BrokenBarrierError:
                failures.append(f"GPU {gpu}: another GPU's interpreters did not start; nothing recorded here")
                return
            except fresh_process.FreshProcessError as exc:
                all_ready.abort()
                failures.append(f"GPU {gpu}: its interpreters did not start:\n{exc.detail}")
                return
            for index, name in enumerate(lane):
                if gpu == 0 and index == len(alone):
                    alone_done.set()
                elif gpu != 0 and index == 0:
                    alone_done.wait()
                if failures and not keep_going:
                    return
                src = by_name[name]
                with lock:  # a stage is copied while no other page is being promoted
                    staged = stage_docs(docs_dir, examples_dir, gallery_dir, stage_dir / src.stem)
                (staged / f"{src.name}.md5").unlink(missing_ok=True)
                print(f"cudnn-guide: recording {src.name} in a fresh interpreter on GPU {gpu} ...", flush=True)
                try:
                    done = pool.run(
                        _build_one_example, str(staged.parent), str(stage_dir / f"out-{gpu}"), src.name, timeout=None
                    )
                except fresh_process.FreshProcessError as exc:
                    failures.append(f"recording {src.name} failed:\n{exc.detail}")
                    if keep_going:
                        continue
                    return
                if done.value != 0:
                    failures.append(f"recording {src.name} failed (sphinx exit {done.value}); see the output above")
                    if keep_going:
                        continue
                    return
                with lock:
                    promote_page(staged, gallery_dir, src.name)
                    seconds[src.name] = done.seconds
                print(f"cudnn-guide: recorded {src.name} in {done.seconds:.1f} s on GPU {gpu}", flush=True)
            starts.append(pool.start_seconds if pool.start_seconds is not None else time.perf_counter() - t0)

    def lane(gpu: int, pages: list[str]) -> None:
        try:
            lane_worker(gpu, pages)
        finally:
            if gpu == 0:
                alone_done.set()  # never leave the other GPUs waiting on a lane that stopped

    threads = [threading.Thread(target=lane, args=(i, pages), daemon=True) for i, pages in enumerate(lanes)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM from a time limit (see _main): pages already promoted stay
        failures.append("recording interrupted")
        with lock:  # let a promotion under way finish
            pass
    pool_seconds = max(starts) if starts else None
    if pool_seconds is not None:
        print(f"cudnn-guide: the interpreters were ready {pool_seconds:.1f} s after they were started", flush=True)
    return pool_seconds, ("\n".join(failures) if failures else None)


def _recorded_in(gallery_dir: Path) -> dict[str, float]:
    """Pages a partial run kept, from the manifest it wrote: example → seconds of this run."""
    manifest = read_manifest(gallery_dir) or {}
    return dict(manifest.get("last_run_seconds", {}))


def _main(argv: list[str] | None = None) -> None:  # pragma: no cover - thin CLI
    import signal
    import sys

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # a time limit's SIGTERM ends the run like Ctrl-C: recorded pages are kept

    signal.signal(signal.SIGTERM, interrupted)
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "restamp":  # a text-only edit: carried into the recorded pages, no GPU
        for name in argv[1:]:
            for before, after in restamp_text_edit(REPO_ROOT / "examples" / name, REPO_ROOT / "docs" / "auto_examples"):
                print(f"{name}: {before.strip()!r} -> {after.strip()!r}")
        return
    if not argv or argv[0] != "record":
        raise SystemExit(
            "usage: python -m gallery_build.recording record [--keep-going] [plot_xx.py ...]\n"
            "       python -m gallery_build.recording restamp plot_xx.py ...  (text-only edits)"
        )
    keep_going = "--keep-going" in argv
    names = [a for a in argv[1:] if a != "--keep-going"]
    root = REPO_ROOT
    seconds = record_examples(
        root / "docs", root / "examples", root / "docs" / "auto_examples", names=names, keep_going=keep_going
    )
    print(
        f"cudnn-guide: recorded {len(seconds)} example(s) in {sum(seconds.values()):.0f} s: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items())
    )


if __name__ == "__main__":  # pragma: no cover
    # run the imported module's _main, so the functions it sends to fresh processes are named
    # gallery_build.recording.*, which a child can import, not __main__.*, which it cannot
    from gallery_build import recording

    recording._main()
