"""Checks on the recorded gallery and the data files, run before the site is built.

* Build health (:func:`recorded_page_problems`): a recorded page with no output, no figure, a
  zero run time, no record, or a failed check fails the build, unless listed in
  :data:`HEALTH_EXCEPTIONS` with its reason.
* Output notes (:func:`recorded_output_notes`): warnings captured in a page's output, ``nan`` in a
  table, a bare number at the end of a page.
* Data (:func:`validate_data`, :func:`data_digest`): every data file parses and has the shape its
  writer gives it (:mod:`gallery_build.schema`), and the data pages re-execute when it changes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cudnn_guide import datafiles
from cudnn_guide.report.records import RECORD_SUFFIX

from . import schema
from .cell_times import CELLS_SUFFIX
from .manifest import MANIFEST

__all__ = [
    "HEALTH_EXCEPTIONS",
    "CONCLUSIONS_PENDING",
    "DATA_PAGES",
    "read_record",
    "recorded_page_problems",
    "recorded_output_notes",
    "data_digest",
    "validate_data",
]

HEALTH_EXCEPTIONS: dict[str, str] = {
    # "plot_name": "why this page may lack a figure/output/record",
}
"""Example stems exempt from the build-health rules, each with its reason."""

CONCLUSIONS_PENDING: dict[str, str] = {}
"""Pages allowed, each with its reason, to lack rendered conclusions until they are re-recorded
(every other health rule still applies to them). A re-recorded page leaves this list."""

_RUNTIME = re.compile(r"\*\*Total running time of the script:\*\*\s*\(\s*(\d+)\s*minutes\s*([\d.]+)\s*seconds\)")


def read_record(gallery: Path, stem: str) -> dict[str, Any] | None:
    """An example's JSON record from the gallery, or ``None`` when it has none."""
    path = gallery / f"{stem}{RECORD_SUFFIX}"
    if not path.exists():
        return None
    return datafiles.read_json(path)


def _figure_problem(path: Path) -> str | None:
    """Why a recorded PNG does not decode, or ``None`` when it does."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            img.load()
    except Exception as exc:  # PIL raises many kinds for truncated or foreign files
        return f"{type(exc).__name__}: {exc}"
    return None


def recorded_page_problems(gallery: Path, examples: Path, exceptions: dict[str, str] | None = None) -> list[str]:
    """Every way a recorded example page falls short; empty when all are healthy.

    Checked per page: the page, its captured output, its rendered conclusions (a
    :class:`~cudnn_guide.report.prose.Prose`), at least one figure (and that every figure
    and thumbnail decodes), a non-zero run time, its run-time file (``.cost.json``), its JSON
    record, that the record names this page (not another), and that its checks passed.

    Parameters
    ----------
    gallery
        The recorded gallery (``docs/auto_examples``).
    examples
        The example sources.
    exceptions
        Stems exempt, with reasons; default :data:`HEALTH_EXCEPTIONS`.

    Returns
    -------
    list[str]
        One message per problem, each naming the file; empty when healthy.

    Example
    -------
    >>> problems = recorded_page_problems(Path('docs/auto_examples'), Path('examples'))
    >>> assert not problems, problems
    """
    exceptions = HEALTH_EXCEPTIONS if exceptions is None else exceptions
    gallery = Path(gallery)
    problems = []
    for src in sorted(Path(examples).glob("plot_*.py")):
        stem = src.stem
        if stem in exceptions:
            continue
        rst = gallery / f"{stem}.rst"
        if not rst.exists():
            problems.append(f"{stem}: no recorded page ({rst.name} missing)")
            continue
        text = schema.validate_rst(rst)  # not UTF-8: CorruptDataError naming the file
        rec = read_record(gallery, stem)
        if rec is not None and rec.get("example") != stem:
            problems.append(f"{stem}: {stem}{RECORD_SUFFIX} is the record of {rec.get('example')!r}, not of this page")
            continue
        figures = sorted((gallery / "images").glob(f"sphx_glr_{stem}_*.png"))
        figures += sorted((gallery / "images" / "thumb").glob(f"sphx_glr_{stem}_thumb.png"))
        for fig in figures:
            why = _figure_problem(fig)
            if why:
                problems.append(f"{stem}: figure {fig.relative_to(gallery)} does not decode ({why})")
        if rec is not None and rec.get("extra", {}).get("skipped"):
            if "skipped: needs" not in text:
                problems.append(f"{stem}: skipped on the recording GPU, but its page does not say why")
            continue  # a skipped page has no output, figure or checks by design
        if "sphx-glr-script-out" not in text:
            problems.append(f"{stem}: the recorded page has no captured output")
        if 'class="guide-prose"' not in text and stem not in CONCLUSIONS_PENDING:  # Prose: its cell's last expression
            problems.append(
                f"{stem}: the recorded page renders no conclusions (make the Prose object its cell's last "
                "expression, after any sphinx_gallery_start_ignore block, and re-record)"
            )
        if not [f for f in figures if "thumb" not in f.parts]:
            problems.append(f"{stem}: the recorded page has no figure")
        m = _RUNTIME.search(text)
        if not m or (int(m.group(1)) == 0 and float(m.group(2)) == 0.0):
            problems.append(f"{stem}: the recorded run time is zero or missing")
        if not (gallery / f"{stem}.cost.json").exists():
            problems.append(f"{stem}: its run-time file {stem}.cost.json is missing")
        if rec is None:
            problems.append(f"{stem}: no JSON record ({stem}{RECORD_SUFFIX})")
        elif not rec.get("all_checks_passed"):
            problems.append(f"{stem}: its record reports a failed or missing correctness check")
    return problems


_CAPTURED_WARNING = re.compile(r"^\s+\S+\.py:\d+: (\w*Warning): (.{0,80})", re.MULTILINE)
_NAN_CELL = re.compile(r"<td[^>]*>\s*nan\s*</td>", re.IGNORECASE)
_BARE_NUMBER_END = re.compile(r"\n\n    (-?\d+\.\d+(?:e-?\d+)?)\n\n+\.\. rst-class:: sphx-glr-timing")


def recorded_output_notes(gallery: Path) -> list[str]:
    """What a reader should not see in a recorded page's output, one note per page and kind.

    Not failures (the numbers stand): a Python warning captured into the output, a table cell
    that reads ``nan``, and a bare number printed after the takeaways (the value of a cell's last
    expression). The render prints them so that the next recording fixes them.

    Parameters
    ----------
    gallery
        The recorded gallery (``docs/auto_examples``).

    Returns
    -------
    list[str]
        One line per page and kind, naming the page; empty when the output is clean.

    Example
    -------
    >>> for note in recorded_output_notes(Path("docs/auto_examples")):
    ...     print(note)
    """
    notes = []
    for rst in sorted(Path(gallery).glob("plot_*.rst")):
        text = schema.validate_rst(rst)  # not UTF-8: CorruptDataError naming the file
        warned = _CAPTURED_WARNING.findall(text)
        if warned:
            kind, message = warned[0]
            notes.append(f"{rst.stem}: {len(warned)} captured Python warning(s), first {kind}: {message.strip()}")
        if _NAN_CELL.search(text):
            notes.append(f"{rst.stem}: a table shows 'nan' where a value is missing")
        bare = _BARE_NUMBER_END.search(text)
        if bare:
            notes.append(f"{rst.stem}: a bare number ({bare.group(1)}) is printed at the end of the page")
    return notes


DATA_PAGES: tuple[str, ...] = (
    "results",
    "methodology",
    "maintainers/measurement_studies",
    "frontend_api",
    "chooser",
)
"""The notebooks that read the recording's data files (and measure nothing)."""


def data_digest(gallery: Path, data_dir: Path, sources: tuple[Path, ...] = ()) -> str:
    """One digest over the names and bytes of every data file the data pages read.

    Parameters
    ----------
    gallery
        The recorded gallery.
    data_dir
        ``docs/data``.
    sources
        Folders of Python sources the data pages also read (the examples and the package,
        for the frontend API index).

    Returns
    -------
    str
        A hex digest; the build re-executes :data:`DATA_PAGES` whenever it changes.

    Example
    -------
    >>> print(data_digest(Path('docs/auto_examples'), Path('docs/data'))[:12])
    """
    import hashlib

    h = hashlib.sha256()
    files = [*Path(gallery).glob("*.json"), *Path(data_dir).glob("*.json*")]
    files += [p for folder in sources for p in Path(folder).glob("*.py")]
    for path in sorted(files):
        h.update(str(path.name).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


_SHAPES = (
    (RECORD_SUFFIX, schema.check_record),
    (CELLS_SUFFIX, schema.check_cells),
    (".cost.json", schema.check_cost),
    (MANIFEST, schema.check_manifest),
)
"""The gallery's data files whose shape :func:`validate_data` checks, by how their names end."""


def validate_data(gallery: Path, data_dir: Path) -> None:
    """Parse and check the shape of every data file the site is built from, before any page reads them.

    The gallery's records, costs, cell times and manifest, its recorded pages (``.rst``, UTF-8),
    and ``docs/data`` (probes, the histories, and the records of pages recorded on other GPUs):
    each must parse, and each record, manifest, cell-times, cost and history file must have the
    shape its writer gives it
    (:mod:`gallery_build.schema`: required keys and types, finite positive times, rates and
    ratios, intervals around their values, known verdicts, and strict patterns for the GPU
    names, commits and versions that reach the HTML), so that a damaged or hostile file stops the
    build with its name, line and field instead of surfacing later inside an executed notebook
    or in a reader's browser.

    Parameters
    ----------
    gallery
        The recorded gallery.
    data_dir
        ``docs/data``.

    Raises
    ------
    CorruptDataError
        The first file that does not parse or breaks its shape, with its line and field.

    Example
    -------
    >>> validate_data(Path('docs/auto_examples'), Path('docs/data'))
    """
    for path in sorted(Path(gallery).glob("*.json")) + sorted(Path(data_dir).glob("*.json")):
        check = next((c for suffix, c in _SHAPES if path.name.endswith(suffix)), None)
        if check is None or path.parent != Path(gallery):
            datafiles.read_json(path)  # probes and sphinx-gallery's own files: they must parse
        else:
            schema.validate_file(path, check)
    for path in sorted(Path(data_dir).glob(f"*/*{RECORD_SUFFIX}")):  # pages recorded on other GPUs (shards' by_gpu)
        schema.validate_file(path, schema.check_record)
    for path in sorted(Path(data_dir).glob("*.jsonl")):
        if path.name.endswith("history.jsonl"):
            schema.validate_jsonl(path, schema.check_history_line)
        else:
            datafiles.read_jsonl(path)
    for path in sorted(Path(gallery).glob("*.rst")):
        schema.validate_rst(path)
