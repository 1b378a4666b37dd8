"""Sphinx hooks for the recorded gallery: stamps, record downloads, build health, manifest.

* Under each gallery page title: "Measured on <GPU> · <date> · <commit>", read from the
  example's JSON record, with a link to download that record.
* Before the build: :mod:`gallery_build.page_checks` (build health, data validation).
* In record mode, ``recording.json`` is written when the build finishes.
* Each API entry gets a mini-gallery of the examples that use it.
"""

from __future__ import annotations

import html
import re
import time
from pathlib import Path
from typing import Any

from cudnn_guide.report.records import RECORD_SUFFIX

from . import drift_bands, sections, skip_pages, wheel
from .manifest import write_manifest
from .page_checks import DATA_PAGES, data_digest, read_record, recorded_page_problems, validate_data
from .schema import rst_text

__all__ = [
    "site_commit",
    "fold_environment_table",
    "ENVIRONMENT_PAGE",
    "stamp_rst",
    "notes_rst",
    "verdicts_on_flagged",
    "warnings_rst",
    "reset_between_examples",
    "connect",
    "restamp_footers",
    "FOOTER_COMMITS",
    "record_only_overrides",
]


def stamp_rst(record: dict[str, Any] | None, stem: str) -> str:
    """The reST block inserted under a gallery page's title.

    Parameters
    ----------
    record
        The example's JSON record (``None``: no stamp).
    stem
        The example's file stem.

    Returns
    -------
    str
        reST to insert under the title (empty without an environment).

    Example
    -------
    >>> print(stamp_rst(records.load(path), 'plot_02_conv_bias_relu'))
    """
    if not record or not record.get("environment"):
        return ""
    env = record["environment"]
    verb = "Skipped on" if record.get("extra", {}).get("skipped") else "Measured on"
    stamp = (
        "\n.. rst-class:: cg-stamp\n\n"
        f"   {verb} **{env.get('gpu', '?')}** · {env.get('date_utc', '?')} · commit ``{env.get('commit', '?')}`` · "
        f"cuDNN {env.get('cudnn_backend', '?')} · frontend {env.get('cudnn_frontend', '?')} · "
        f"torch {env.get('torch', '?')} · "
        f":download:`JSON record <{stem}{RECORD_SUFFIX}>`\n"
    )
    if notes_rst(record):
        stamp += (
            "\n.. rst-class:: cg-notes-pointer\n\n"
            "   Harness warnings and the recorded intervals are in the *Measurement notes* at the end of "
            "this page.\n"
        )
    return stamp


def verdicts_on_flagged(record: dict[str, Any] | None) -> tuple[list[str], int]:
    """The comparison headlines whose candidate or baseline measurement carries a harness warning.

    Parameters
    ----------
    record
        The example's JSON record.

    Returns
    -------
    tuple[list[str], int]
        The names of the affected comparisons, and how many comparisons name their measurements.

    Example
    -------
    >>> verdicts_on_flagged({"headlines": [], "measurements": []})
    ([], 0)
    """
    ms = {m.get("label"): m for m in (record or {}).get("measurements", []) if isinstance(m, dict)}
    named, flagged = 0, []
    for h in (record or {}).get("headlines", []):
        if h.get("kind") != "comparison":
            continue
        labels = [h.get("candidate_measurement"), h.get("baseline_measurement")]
        if not all(label in ms for label in labels):
            continue
        named += 1
        if any(ms[label].get("warnings") for label in labels):
            flagged.append(str(h.get("name")))
    return flagged, named


def notes_rst(record: dict[str, Any] | None) -> str:
    """The collapsed *Measurement notes* box appended at the end of a recorded page.

    It holds the harness warnings (:func:`warnings_rst`), says whether any verdict rests on a
    flagged measurement (:func:`verdicts_on_flagged`), and lists each comparison's recorded
    interval widened for re-recording drift (:func:`gallery_build.drift_bands.widened_rst`). A
    page then opens with its lesson, not with its caveats.

    Parameters
    ----------
    record
        The example's JSON record.

    Returns
    -------
    str
        reST for the box; empty when there is nothing to note.

    Example
    -------
    >>> notes_rst({"measurements": [], "headlines": []})
    ''
    """
    warnings, widened = warnings_rst(record), drift_bands.widened_rst(record)
    if not warnings and not widened:
        return ""
    flagged, named = verdicts_on_flagged(record)
    if not warnings:
        rests = ""
    elif not named:
        rests = "   No comparison on this page names its measurements, so none is traced to a warning.\n"
    elif flagged:
        rests = (
            f"   {len(flagged)} of {named} verdicts on this page rest on a measurement that carries a "
            "harness warning:\n\n" + "".join(f"   * {rst_text(name)}\n" for name in flagged)
        )
    else:
        rests = f"   None of the {named} verdicts on this page rests on a measurement with a harness warning.\n"
    summary = html.escape(
        "Measurement notes"
        + (f": {len(flagged)} of {named} verdicts rest on a flagged measurement" if warnings and named else "")
    )
    return (
        "\n\n.. raw:: html\n\n"
        f'   <details class="cg-notes"><summary>{summary}</summary>\n\n'
        + (".. rst-class:: cg-notes-verdicts\n\n" + rests if rests else "")
        + warnings
        + widened
        + "\n.. raw:: html\n\n   </details>\n\n"
    )


_WARNING_KINDS = (  # (text in the harness's warning, how the summary names it); the first match counts, so the
    # drift warning, which names thermal throttling as a possible cause, is matched before a thermal finding
    ("held the clock down", "the GPU's power cap held the SM clock below 97% of its maximum"),
    ("timings drifted", "timings drifting between the first and last third of the run"),
    ("large spread", "a large spread (IQR over 10% of the median)"),
    ("host time per call", "host-bound back-to-back calls (the GPU time is still the GPU's)"),
    ("thermal throttling during", "thermal throttling"),
)


def warnings_rst(record: dict[str, Any] | None) -> str:
    """A note summarizing the harness warnings carried by a page's measurements.

    Sweeps show their points only as tables and plots, so a warning on one point would
    otherwise stay in the JSON record; this puts the count of each kind (and, for clock
    warnings, the lowest SM clock seen) in the page's *Measurement notes* (:func:`notes_rst`).

    Parameters
    ----------
    record
        The example's JSON record.

    Returns
    -------
    str
        reST for the note; empty when no measurement carries a warning.

    Example
    -------
    >>> print(warnings_rst(records.load('docs/auto_examples/plot_14_fp8_hopper.record.json')))
    """
    ms = (record or {}).get("measurements", [])
    counts: dict[str, int] = {}
    lowest = None
    for m in ms:
        for w in m.get("warnings", []):
            kind = next((name for key, name in _WARNING_KINDS if key in w), "other warnings")
            counts[kind] = counts.get(kind, 0) + 1
            if "held the clock down" in w:
                clk = m.get("clocks", {})
                if clk.get("sm_mhz_end") and (lowest is None or clk["sm_mhz_end"] < lowest[0]):
                    lowest = (clk["sm_mhz_end"], clk.get("max_sm_mhz"))
    if not counts:
        return ""
    flagged = sum(1 for m in ms if m.get("warnings"))
    lines = [
        f"\n.. admonition:: {flagged} of {len(ms)} measurements on this page carry a harness warning",
        "   :class: cg-warnings note",
        "",
    ]
    for name, n in counts.items():
        extra = (
            f" (lowest: {lowest[0]} of {lowest[1]} MHz)" if lowest and name.startswith("the GPU's power cap") else ""
        )
        lines.append(f"   * {n} × {name}{extra}")
    lines += ["", "   Each warning is in the JSON record next to its samples; :doc:`/methodology` explains them.", ""]
    return "\n".join(lines) + "\n"


_TITLE = re.compile(r"^(?P<title>[^\n.][^\n]*)\n(?P<rule>=+)\n", re.MULTILINE)


_ENV_TABLE = re.compile(r'<table class="cg-env-table">.*?</table>')
ENVIRONMENT_PAGE = "plot_01_environment"
"""The page whose topic is the machine: its environment table stays open."""


def fold_environment_table(text: str) -> str:
    """Fold a recorded page's full environment table under a one-line summary.

    The stamp under the title already names the GPU, the versions and the commit; the table
    repeats them with the rest (driver, libcudnn path, ...). So a page opens with its cuDNN code,
    not a table. Only the presentation changes: the table's rows are the recorded ones.

    Parameters
    ----------
    text
        A recorded page's reStructuredText.

    Returns
    -------
    str
        The same text, each environment table inside ``<details>``.

    Example
    -------
    >>> fold_environment_table('<table class="cg-env-table"><tr></tr></table>').startswith("<details")
    True
    """
    return _ENV_TABLE.sub(
        lambda m: (
            '<details class="cg-env"><summary>The full environment of this run</summary>' + m.group(0) + "</details>"
        ),
        text,
    )


def _insert_stamp(text: str, stamp: str) -> str:
    m = _TITLE.search(text)
    if not m or not stamp:
        return text
    return text[: m.end()] + stamp + text[m.end() :]


def reset_between_examples(gallery_conf: Any, fname: str, when: str) -> None:
    """Start each example from a clean state and write its record after it (sphinx-gallery ``reset_modules``).

    Before: the library's one public hook, :func:`cudnn_guide.reset_caches`, and a new record
    (:func:`cudnn_guide.report.records.begin`); nothing here reaches into the library's private state.
    After: the record the example collected, named and titled from its file
    (:func:`cudnn_guide.report.records.take`), its in-run intervals widened by the re-recording
    drift of the site's history (:func:`gallery_build.drift_bands.widen_headlines`, from
    ``docs/data/drift.json``), the in-run ones kept beside them; then written.

    Parameters
    ----------
    gallery_conf
        sphinx-gallery's configuration.
    fname
        The example that runs.
    when
        ``"before"`` or ``"after"`` (``reset_modules_order = "both"``).

    Example
    -------
    >>> sphinx_gallery_conf['reset_modules'] = ('matplotlib', reset_between_examples)
    """
    import cudnn_guide
    from cudnn_guide.report import records

    from . import gpu_turns

    turn = gpu_turns.current()
    if when == "after":
        stem = Path(fname).stem
        rec = records.take(stem, skip_pages.example_title(_example_path(gallery_conf, fname)))
        if rec is not None and turn is not None:  # lanes: waits for the GPU's turn are not the page's work
            _leave_out_turn_waits(rec.seconds, turn, *_TURN_AT_START)
        if rec is not None:
            bands = drift_bands.load_drift(_docs_dir(gallery_conf) / "data" / drift_bands.DRIFT)
            modes = {m.label: m.mode for m in rec.measurements}  # a label new to the drift file is classed by it
            drift_bands.widen_headlines(rec.headlines, bands, stem, modes)
            rec.write()
    cudnn_guide.reset_caches()
    if when == "before":
        records.begin()
        if turn is not None:
            _TURN_AT_START[:] = [turn.waited, turn.compile_waits]


_TURN_AT_START = [0.0, 0.0]
"""The page's turn counters when its example started: waited, and waited at the end of a compile."""


def _leave_out_turn_waits(seconds: dict[str, float], turn: Any, waited_before: float, compile_before: float) -> None:
    """Take the waits for the turn out of a record's seconds: Dynamo's clock counts the wait that ends
    a compile set aside, so it comes out of ``compile``; every wait is kept as its own kind."""
    in_compile = turn.compile_waits - compile_before
    if "compile" in seconds:
        seconds["compile"] = max(0.0, seconds["compile"] - in_compile)
    if turn.waited - waited_before > 0:
        seconds["waiting for the GPU's turn"] = turn.waited - waited_before


def _docs_dir(gallery_conf: Any) -> Path:
    """The Sphinx source directory (``docs/``): sphinx-gallery's ``src_dir``, else this package's."""
    src = gallery_conf.get("src_dir") if hasattr(gallery_conf, "get") else None
    return Path(src) if src else Path(__file__).resolve().parents[2]


def _example_path(gallery_conf: Any, fname: str) -> Path:
    """The example file sphinx-gallery names by ``fname`` (a bare file name, in one of its example dirs)."""
    dirs = gallery_conf.get("examples_dirs", []) if hasattr(gallery_conf, "get") else []
    for d in [dirs] if isinstance(dirs, str) else dirs:
        path = Path(gallery_conf.get("src_dir", ".")) / d / fname
        if path.exists():
            return path
    return Path(fname)


def record_only_overrides(gallery_doc: str = "auto_examples") -> dict[str, Any]:
    """Sphinx settings for a build that records one example (``CUDNN_GUIDE_RECORD_ONLY``).

    Such a build (builder ``dummy``, a fresh process per example) needs sphinx-gallery alone: it
    executes the example while the builder starts. Loading autodoc and myst-nb and reading the
    API pages and notebooks would add seconds to every example's recording, so it reads the
    gallery only, and does not warn about links into the pages it skips.

    Parameters
    ----------
    gallery_doc
        The gallery's directory under the Sphinx source directory.

    Returns
    -------
    dict[str, Any]
        ``extensions``, ``root_doc`` and ``include_patterns`` to set in ``conf.py``, and
        ``extra_suppress_warnings`` to add to its ``suppress_warnings``.

    Example
    -------
    >>> if RECORD_ONLY:
    ...     over = record_only_overrides()
    ...     suppress_warnings += over.pop('extra_suppress_warnings')
    ...     globals().update(over)
    """
    return {
        "extensions": ["sphinx_gallery.gen_gallery"],
        "root_doc": f"{gallery_doc}/index",
        "include_patterns": [f"{gallery_doc}/**"],
        "extra_suppress_warnings": ["ref.doc"],  # links into the pages this build does not read
    }


def site_commit(root: Path) -> str:
    """The commit the site is built from: ``$CUDNN_GUIDE_COMMIT``, else git's, else ``"unknown"``.

    Parameters
    ----------
    root
        The repository.

    Returns
    -------
    str
        A 12-character commit, or ``"unknown"`` outside a git checkout.

    Example
    -------
    >>> site_commit(Path('.'))
    """
    import os
    import subprocess

    if os.environ.get("CUDNN_GUIDE_COMMIT"):
        return os.environ["CUDNN_GUIDE_COMMIT"][:12]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


API_PREFIX = "api/"
"""The API reference's documents: each object's docstring ends with its "Examples using this" gallery."""
BACKREFERENCES_ALL = Path("api", "generated", "backreferences", "backreferences_all.json")
"""Under ``docs``: sphinx-gallery's record of the pages that use each object (``conf.py``'s ``backreferences_dir``)."""


def drop_thumbnail_dependencies(env: Any, docname: str, gallery: Path) -> int:
    """Stop an API page depending on the gallery's thumbnail images; returns how many it depended on.

    An API page shows, under each object, the thumbnails of the pages that use it. A thumbnail is
    redrawn from its page's first figure whenever that page records, and Sphinx reads every page
    showing an image again when the image file changes: a one-page recording read the nine API
    pages again (their autodoc, about 3 s each, and the first page written, alone) though nothing
    on them changed but the picture, which reaches them by its unchanged URL all the same (the
    gallery's index shows every thumbnail, depends on it, and is read and written again, which
    copies the new image into ``_images``). What the API pages do show of the pages using an
    object, which pages and their titles, is in sphinx-gallery's backreferences: the build reads
    the API pages again when those change (``env-get-outdated``).

    Parameters
    ----------
    env
        Sphinx's build environment.
    docname
        The document just read.
    gallery
        The recorded gallery (``docs/auto_examples``).

    Returns
    -------
    int
        Thumbnail dependencies dropped (0 for a document outside the API reference).

    Example
    -------
    >>> drop_thumbnail_dependencies(app.env, "api/measure", Path("docs/auto_examples"))
    9
    """
    if not docname.startswith(API_PREFIX):
        return 0
    deps = env.dependencies.get(docname) or set()
    thumbs = (Path(gallery) / "images" / "thumb").resolve()
    dropped = {d for d in deps if Path(d).name.startswith("sphx_glr_") and Path(d).parent.resolve() == thumbs}
    deps -= dropped
    return len(dropped)


def _file_digest(path: Path) -> str | None:
    """The md5 of a file's bytes, or ``None`` when there is none."""
    import hashlib

    try:
        return hashlib.md5(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _data_sources_digest(root: Path, data_dir: Path) -> str:
    """A digest over what the data pages read beyond :func:`~gallery_build.page_checks.data_digest`.

    The records kept per GPU (``docs/data/<folder>/*.json``, from shards) and the Python the
    notebooks import: the library's subpackages and this build's own modules (``drift_bands``,
    ``chooser``, ...). Names and bytes, never times: a file touched but unchanged changes nothing.
    """
    import hashlib

    h = hashlib.sha256()
    files = [*Path(data_dir).glob("*/*.json")]
    files += [*Path(root, "cudnn_guide").glob("*/**/*.py"), *Path(__file__).parent.glob("*.py")]
    for path in sorted(files):
        h.update(str(path.relative_to(path.parents[1])).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


FOOTER_COMMITS = re.compile(
    r"(Site built from commit <code>)[^<]*(</code> · gallery recorded at commit <code>)[^<]*(</code>)"
)
"""The two commits in every page's footer (``docs/_templates/page.html``), as written."""


def restamp_footers(outdir: Path, commits: dict[str, str]) -> list[Path]:
    """Bring the footer of every page already built to this build's commits; returns the files changed.

    The commits are not configuration (``html_context``): Sphinx writes every page again when
    one changes, about 15 s on two cores for 42 pages, at every commit. Pages written by this
    build get them from :func:`connect`'s ``html-page-context``; the others, unchanged since an
    earlier build, get them here, in place, escaped as the template escapes them (``|e``).

    Parameters
    ----------
    outdir
        The HTML output folder.
    commits
        ``site_commit`` and ``recording_commit``.

    Returns
    -------
    list[Path]
        The HTML files whose footer changed.

    Example
    -------
    >>> restamp_footers(Path("docs/_build/html"), {"site_commit": "f7e196f48023", "recording_commit": "de96590"})
    []
    """
    from markupsafe import escape

    site, recorded = str(escape(commits["site_commit"])), str(escape(commits["recording_commit"]))
    changed = []
    for path in sorted(Path(outdir).rglob("*.html")):
        text = path.read_text(encoding="utf-8")
        new = FOOTER_COMMITS.sub(lambda m: f"{m[1]}{site}{m[2]}{recorded}{m[3]}", text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


_SUBSTITUTION_USE = r"\{\{\s*%s\s*\}\}"
"""How a MyST page uses a substitution (``{{ name }}``); ``%s``: the escaped name."""


def _substitution_pages(env: Any, names: set[str]) -> list[str]:
    """The documents whose source uses any of the MyST substitutions ``names`` (``{{ name }}``).

    Parameters
    ----------
    env
        The Sphinx build environment (``found_docs``, ``doc2path``).
    names
        Substitution names.

    Returns
    -------
    list[str]
        Document names, sorted.

    Example
    -------
    >>> _substitution_pages(app.env, {"recorded_on"})
    ['index']
    """
    if not names:
        return []
    use = re.compile("|".join(_SUBSTITUTION_USE % re.escape(n) for n in sorted(names)))
    pages = []
    for doc in sorted(env.found_docs):
        path = Path(env.doc2path(doc))
        if path.suffix == ".md" and use.search(path.read_text(encoding="utf-8")):
            pages.append(doc)
    return pages


def connect(
    app: Any,
    *,
    gallery: Path,
    examples: Path,
    mode: str,
    started: float,
    partial: bool = False,
    substitutions: dict[str, str] | None = None,
    commits: dict[str, str] | None = None,
) -> None:
    """Wire the hooks into a Sphinx application (called from ``conf.py``'s ``setup``).

    ``partial``: this build records one example (see :func:`~gallery_build.recording.record_examples`);
    the health check and the manifest wait for the full build.

    ``substitutions``: MyST substitutions read from the recording (where and when it was measured,
    the site's answer). They change with every recording, so they are not configuration: a changed
    configuration value makes Sphinx read every page again (all 42, the notebooks among them).
    They are added to MyST's settings when the builder starts, and only the pages that use one
    whose value changed (:func:`_substitution_pages`) are read again.

    ``commits``: the footer's ``site_commit`` and ``recording_commit``, likewise kept out of the
    configuration (``html_context``): given to each page written, and brought up to date in the
    pages an earlier build wrote (:func:`restamp_footers`).

    Parameters
    ----------
    app
        The Sphinx application.
    gallery
        The gallery directory.
    examples
        The examples directory.
    mode
        ``"record"`` or ``"render"``.
    started
        ``time.perf_counter()`` at configuration.
    partial
        This build records a single example.
    substitutions
        MyST substitutions that change with the recording (name → Markdown).
    commits
        The footer's ``site_commit`` and ``recording_commit``.

    Example
    -------
    >>> def setup(app):
    ...     connect(app, gallery=GALLERY, examples=EXAMPLES, mode='render', started=time.perf_counter())
    """
    gallery_doc = gallery.name
    root = gallery.parent.parent  # the repository: pyproject.toml and the package

    def on_source_read(app: Any, docname: str, source: list[str]) -> None:
        if docname == f"{gallery_doc}/index":  # the flat grid, in sections (gallery_build.sections)
            source[0] = sections.group_index(source[0])
            return
        prefix = f"{gallery_doc}/plot_"
        if docname.startswith(prefix):
            stem = docname.split("/", 1)[1]
            record = read_record(gallery, stem)
            source[0] = _insert_stamp(source[0], stamp_rst(record, stem)) + notes_rst(record)
            if stem != ENVIRONMENT_PAGE:
                source[0] = fold_environment_table(source[0])
            if not partial and (root / "pyproject.toml").exists():  # the site's pages, not a page's recording
                source[0] = wheel.install_rst(source[0], wheel.wheel_name(root), depth=docname.count("/"))
            record_path = gallery / f"{stem}{RECORD_SUFFIX}"
            if record_path.exists():  # the stamp and the warnings note come from the record: rebuild when it changes
                app.env.note_dependency(str(record_path.resolve()))

    def on_builder_inited_late(app: Any) -> None:
        if partial:
            return
        from sphinx.errors import ExtensionError

        from cudnn_guide.errors import CorruptDataError

        try:
            validate_data(gallery, gallery.parent / "data")
        except CorruptDataError as exc:
            raise ExtensionError(f"corrupt recorded data: {exc}") from None
        problems = recorded_page_problems(gallery, examples)
        if problems:
            raise ExtensionError("recorded gallery is unhealthy:\n  " + "\n  ".join(problems))

    def on_get_outdated(app: Any, env: Any, added: set[str], changed: set[str], removed: set[str]) -> list[str]:
        # The data notebooks read the records, history and manifest, which Sphinx does not track:
        # re-execute them whenever any of those files changed since the last build into this folder
        # (by content: a record touched but unchanged re-reads its own page only, by its dependency).
        outdated = []
        data_dir = gallery.parent / "data"
        digest = data_digest(gallery, data_dir, (examples, root / "cudnn_guide")) + _data_sources_digest(root, data_dir)
        if getattr(env, "cudnn_guide_data_digest", None) != digest:
            env.cudnn_guide_data_digest = digest
            outdated += [d for d in DATA_PAGES if d in env.found_docs]
        # the API pages' "Examples using this" galleries: read again when the pages using each object, or
        # their titles, change (sphinx-gallery's backreferences), not when a page's thumbnail is redrawn
        examples_used = _file_digest(gallery.parent / BACKREFERENCES_ALL)
        if getattr(env, "cudnn_guide_backreferences_digest", None) != examples_used:
            env.cudnn_guide_backreferences_digest = examples_used
            outdated += sorted(d for d in env.found_docs if d.startswith(API_PREFIX) and d not in outdated)
        if substitutions:  # the pages showing a recorded substitution whose value changed (the home page)
            before = getattr(env, "cudnn_guide_substitutions", None) or {}
            differ = {k for k, v in substitutions.items() if before.get(k) != v}
            env.cudnn_guide_substitutions = dict(substitutions)
            outdated += [d for d in _substitution_pages(env, differ) if d not in outdated]
        return outdated

    def on_builder_inited_substitutions(app: Any) -> None:
        # after MyST made its settings from the configuration (builder-inited, priority 500)
        import dataclasses

        config = getattr(app.env, "myst_config", None)
        if substitutions and config is not None:
            app.env.myst_config = dataclasses.replace(config, substitutions={**config.substitutions, **substitutions})

    def on_docstring(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
        if what in ("function", "class") and name.startswith("cudnn_guide."):
            lines += ["", f".. minigallery:: {name}", "   :add-heading: Examples using this", ""]

    # The wheel and the frontend names do not depend on the pages: each is made in a process of its
    # own, started when the builder is ready, and collected when the build finishes (they used to run
    # one after the other after the last page was written: about 7 s at the end of every build).
    pending: dict[str, Any] = {}

    def on_builder_inited(app: Any) -> None:
        if app.builder.format != "html" or partial:
            return
        from .frontend_index import start_code_links

        if (root / "pyproject.toml").exists():  # a copy of the docs without the project has no wheel
            pending["wheel"] = wheel.start_wheel_build(root, Path(app.outdir))
        pending["code_links"] = start_code_links(root)

    def on_finished(app: Any, exc: Exception | None) -> None:
        building_wheel, code_links = pending.pop("wheel", None), pending.pop("code_links", None)
        if exc is not None:  # the build failed: neither is needed
            for job in (building_wheel, code_links):
                if job is not None:
                    job.cancel()
            return
        # the wheel the pages' install line names (a copy of the docs without the project has neither)
        if building_wheel is not None:
            try:
                built = building_wheel.result()
            except RuntimeError as err:
                if code_links is not None:
                    code_links.cancel()
                from sphinx.errors import ExtensionError

                raise ExtensionError(str(err)) from None
            for nb in Path(app.outdir, "_downloads").rglob("plot_*.ipynb"):
                wheel.add_install_cell(nb, built.name)
        if code_links is not None:  # code → frontend index rows
            try:
                text = code_links.result()
            except RuntimeError as err:
                from sphinx.errors import ExtensionError

                raise ExtensionError(str(err)) from None
            Path(app.outdir, "_static", "frontend-names.json").write_text(text, encoding="utf-8")
        if exc is None and mode == "record" and not partial:
            from cudnn_guide import environment

            path = write_manifest(  # every page, recorded by this build: it describes them all
                gallery,
                examples,
                environment.collect().to_dict(),
                build_seconds=time.perf_counter() - started,
                full_run=True,
            )
            print(f"cudnn-guide: recording manifest written to {path}; commit docs/auto_examples.")

    def on_doctree_read_thumbnails(app: Any, doctree: Any) -> None:
        # after Sphinx's image collector (priority 500) noted each image the page shows as a dependency
        drop_thumbnail_dependencies(app.env, app.env.docname, gallery)

    app.connect("source-read", on_source_read)
    app.connect("doctree-read", on_doctree_read_thumbnails, priority=900)
    # priority > 500: after sphinx-gallery generated (record) or kept (render) the pages
    app.connect("builder-inited", on_builder_inited_late, priority=900)
    app.connect("env-get-outdated", on_get_outdated)
    app.connect("builder-inited", on_builder_inited_substitutions, priority=600)
    if "sphinx.ext.autodoc" in app.extensions:  # a one-example recording build loads the gallery alone
        app.connect("autodoc-process-docstring", on_docstring)
    app.connect("builder-inited", on_builder_inited)
    app.connect("build-finished", on_finished)

    def on_page_context(app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
        context.update(commits or {})
        prefix = f"{gallery_doc}/plot_"
        if pagename.startswith(prefix):
            env = (read_record(gallery, pagename.split("/", 1)[1]) or {}).get("environment") or {}
            context["page_recording_commit"] = env.get("commit")
            context["page_recording_gpu"] = env.get("gpu")

    app.connect("html-page-context", on_page_context)

    def on_finished_footers(app: Any, exc: Exception | None) -> None:
        if exc is None and commits and app.builder.format == "html":
            restamp_footers(Path(app.outdir), commits)

    app.connect("build-finished", on_finished_footers)
