"""Sphinx configuration for cudnn-guide.

Two modes (see :mod:`gallery_build.recording`):

* **record** — a CUDA GPU is visible (or ``CUDNN_GUIDE_DOCS_MODE=record``): sphinx-gallery runs
  every example afresh and writes pages, figures, downloads and JSON records into
  ``docs/auto_examples``, to be committed.
* **render** — no GPU (or ``CUDNN_GUIDE_DOCS_MODE=render``): nothing executes; the committed
  recording is rendered. A recording older than its example stops the build with a message
  naming the file.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))  # the docs build's own machinery (gallery_build), outside the library

from gallery_build import cell_times, gpu_turns, hooks, page_checks, recording, staleness, verdict_kinds
from gallery_build.manifest import (
    describe_recording,
    markdown_literal,
    package_changed_since_recording,
    read_manifest,
    recording_commit,
)

from cudnn_guide import __version__

EXAMPLES = ROOT / "examples"
GALLERY = DOCS / "auto_examples"
MODE = staleness.docs_mode()
RECORD_ONLY = os.environ.get(recording.ONLY_ENV, "")  # one example, in this fresh process
_BUILD_START = time.perf_counter()
if MODE == "record" and not RECORD_ONLY and DOCS.resolve() == (recording.REPO_ROOT / "docs").resolve():
    recording.refuse_round_budget_ab("a record-mode build of the site")  # an A/B's budget never records the site
if not RECORD_ONLY:
    # its GPU name, commits and versions reach every page (footer) and the home page: a manifest of
    # the wrong shape, or with HTML in them, stops the build here (CorruptDataError: file:line, field)
    read_manifest(GALLERY, checked=True)

if MODE == "render":
    staleness.require_fresh_recording(EXAMPLES, GALLERY)
    RECORDED_ON = describe_recording(GALLERY)
    print(
        f"cudnn-guide: render mode: nothing is executed; pages show the committed recording measured on {RECORDED_ON}.",
        flush=True,
    )
    for note in page_checks.recorded_output_notes(GALLERY):
        print(f"cudnn-guide: note: {note} (fix the example; the next recording shows it clean)", flush=True)
    if package_changed_since_recording(GALLERY):
        print(
            "cudnn-guide: note: cudnn_guide has changed since this recording was made; the pages show the "
            "numbers of the recorded run. Re-record on a GPU to refresh them.",
            flush=True,
        )
else:
    from cudnn_guide import environment

    os.environ["CUDNN_GUIDE_RECORD_DIR"] = str(GALLERY)
    cell_times.time_cells(GALLERY)  # seconds per cell, beside each page: where the build time goes
    _TURN = gpu_turns.current()  # lanes sharing a GPU: each code cell holds the GPU's turn
    if _TURN is not None:
        gpu_turns.take_turns_per_cell(_TURN)
    with _TURN.held() if _TURN is not None else contextlib.nullcontext():
        _ENV = environment.collect()
    RECORDED_ON = (
        f"{_ENV.gpu} (driver {_ENV.driver}, CUDA {_ENV.cuda}, cuDNN {_ENV.cudnn_backend}, "
        f"frontend {_ENV.cudnn_frontend}, torch {_ENV.torch}) on {_ENV.date_utc}, commit {_ENV.commit}"
    )
    what = RECORD_ONLY or "every example"
    print(
        f"cudnn-guide: record mode: executing {what} on {RECORDED_ON}; "
        f"outputs go to {GALLERY.relative_to(ROOT)} (commit them).",
        flush=True,
    )

# -- Project -----------------------------------------------------------------------------------
project = "cudnn-guide"
author = "the cudnn-guide authors"
copyright = "2026, the cudnn-guide authors"
release = version = __version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.intersphinx",
    "sphinx_gallery.gen_gallery",
    "myst_nb",
    "sphinx_copybutton",
]

# Names from Python, PyTorch and NumPy in the pages' code and text link to those projects' docs.
# Builds without network (CI, most readers) read the small inventories in docs/_intersphinx
# (tools/make_inventories.py: the names the recorded pages use); the hosted site's build sets
# CUDNN_GUIDE_INTERSPHINX=online to fetch the projects' full inventories, falling back to those.
_INTERSPHINX_ONLINE = os.environ.get("CUDNN_GUIDE_INTERSPHINX") == "online"


def _inventory(name: str) -> tuple[str | None, ...]:
    local = str(Path(__file__).parent / "_intersphinx" / f"{name}.inv")
    return (None, local) if _INTERSPHINX_ONLINE else (local,)


intersphinx_mapping = {
    "python": ("https://docs.python.org/3/", _inventory("python")),
    "torch": ("https://docs.pytorch.org/docs/stable/", _inventory("torch")),
    "numpy": ("https://numpy.org/doc/stable/", _inventory("numpy")),
}
intersphinx_timeout = 10

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
# sphinx-gallery writes a notebook and a script beside each page; they are downloads, not pages.
exclude_patterns = [
    "_build",
    "_ext",
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "auto_examples/*.zip",
    "auto_examples/*.json",
    "auto_examples/*.md5",
    "sg_execution_times.rst",
    "auto_examples/sg_execution_times.rst",
    "Thumbs.db",
    ".DS_Store",
]
# Only the results and methodology pages are notebooks (MyST with a kernelspec); they read the
# committed records and measure nothing, so they run on every build, CPU or GPU.
# A build that records one example (RECORD_ONLY, builder "dummy") writes nothing but the gallery:
# it skips executing these notebooks.
nb_execution_mode = "off" if RECORD_ONLY else "force"
nb_execution_excludepatterns = ["auto_examples/*"]
nb_execution_raise_on_error = False  # reported as a warning with its traceback (show_tb); -W turns it into a failure
nb_execution_show_tb = True  # a notebook error reaches the console with its traceback, not only a log file
nb_execution_timeout = 120
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "deflist", "substitution"]
myst_substitutions = {"docs_mode": MODE}
# MyST reads a substitution as Markdown: recorded text goes in as literal text, never as HTML.
# These two change with every recording, so they are no configuration value (a changed one makes
# Sphinx read all 42 pages again): gallery_build.hooks adds them to MyST's settings when the builder
# starts and reads again only the pages that show one whose value changed (the home page).
RECORDED_SUBSTITUTIONS = {"recorded_on": markdown_literal(RECORDED_ON)}
# the home page's answer, computed from the records: cuDNN against other implementations, with the
# costs of features and compiled-against-eager comparisons counted apart (gallery_build.verdict_kinds)
# (a recording's one-page builds skip it: the home page is assembled after every page is recorded)
RECORDED_SUBSTITUTIONS["site_answer"] = (
    markdown_literal(verdict_kinds.site_answer(verdict_kinds.classify(verdict_kinds.read_records(GALLERY))))
    if MODE == "render"
    else "(computed when the site is assembled from the recording)"
)
myst_heading_anchors = 3
# ref.python: the builtin type `bytes` in type hints is ambiguous with the `bytes` attributes of
# the problem classes; Sphinx would warn on every such hint.
suppress_warnings = ["config.cache", "ref.python"]

# -- Gallery -----------------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    # record one (RECORD_ONLY: its md5 was deleted; the others match and are kept) or all;
    # render: every md5 matches (checked above) and nothing runs.
    "filename_pattern": re.escape(os.sep + RECORD_ONLY) + "$" if RECORD_ONLY else r"/plot_",
    "run_stale_examples": MODE == "record" and not RECORD_ONLY,
    "abort_on_example_error": True,
    "doc_module": ("cudnn_guide",),
    "backreferences_dir": "api/generated/backreferences",
    "exclude_implicit_doc": {r"cudnn_guide\.errors\..*"},
    "remove_config_comments": True,
    "download_all_examples": True,
    "capture_repr": ("_repr_html_", "__repr__"),
    "min_reported_time": 0,
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    # run times stay in each example's .cost.json (shown on the results page); the
    # sg_execution_times pages would pull jQuery/DataTables from a CDN, which offline readers lack
    "write_computation_times": False,
    # each example starts from a clean process state (no handles, caches or compiled graphs of the last)
    "reset_modules": ("matplotlib", hooks.reset_between_examples),
    "reset_modules_order": "both",  # before: a clean state; after: write the example's collected record
}
abort_on_example_error = True

# -- Autodoc -----------------------------------------------------------------------------------
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_custom_sections = [("Example", "Examples")]

# -- HTML --------------------------------------------------------------------------------------
html_theme = "furo"
html_title = "cudnn-guide"
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"
html_css_files = ["cudnn-guide.css"]
html_js_files = ["cudnn-guide.js"]
html_theme_options = {"navigation_with_keys": True}
# "Edit this page" links need to know where the repository is hosted; set it when publishing:
#   CUDNN_GUIDE_SOURCE_REPOSITORY=https://github.com/<owner>/cudnn-guide/ nox -s docs
if os.environ.get("CUDNN_GUIDE_SOURCE_REPOSITORY"):
    html_theme_options.update(
        source_repository=os.environ["CUDNN_GUIDE_SOURCE_REPOSITORY"],
        source_branch=os.environ.get("CUDNN_GUIDE_SOURCE_BRANCH", "main"),
        source_directory="docs/",
    )
html_show_sourcelink = True
templates_path = ["_templates"]
# The footer of every page: the commit the site was built from and the one its recording ran at
# (each gallery page adds its own, from its record: see gallery_build.hooks). Not html_context: a
# changed configuration value writes all 42 pages again; the hooks stamp the pages instead.
FOOTER = {"site_commit": hooks.site_commit(ROOT), "recording_commit": recording_commit(GALLERY)}

if RECORD_ONLY:  # one example's recording build reads the gallery alone (seconds saved per example)
    _over = hooks.record_only_overrides(GALLERY.name)
    suppress_warnings += _over.pop("extra_suppress_warnings")
    globals().update(_over)


def setup(app):
    from gallery_build import build_lock, navigation_cache, resolve_in_workers, write_phase

    navigation_cache.install(app)  # the API's source pages share one navigation tree per folder
    # the main process's share of a parallel build: viewcode's highlighting in worker processes, each stem once
    write_phase.install(app)
    resolve_in_workers.install(app)  # each page resolved by the worker that writes it, not all by the main process

    if not RECORD_ONLY:  # a page's recording build runs in a private staging copy, under the recorder's lock
        try:  # one build per checkout; a build cut short before is wiped first (see gallery_build.build_lock)
            build_lock.guard_sphinx_build(app, DOCS)
        except build_lock.BuildLockError as exc:
            from sphinx.errors import ConfigError

            raise ConfigError(str(exc)) from None
    # the gallery-wide download zips: same files, same bytes, so a render leaves the committed ones untouched
    build_lock.keep_zips_reproducible(GALLERY)
    hooks.connect(
        app,
        gallery=GALLERY,
        examples=EXAMPLES,
        mode=MODE,
        started=_BUILD_START,
        partial=bool(RECORD_ONLY),
        substitutions=RECORDED_SUBSTITUTIONS,
        commits=FOOTER,
    )
