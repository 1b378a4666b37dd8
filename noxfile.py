"""Sessions: ``docs`` builds the site, ``tests`` runs the test suite.

``nox -s docs`` executes every example when a CUDA GPU is present (record mode) and renders the
committed recording otherwise (render mode); see ``docs/conf.py``.

``nox -s docs -- 5 plot_07`` records only the pages named (a file name, its stem, ``plot_NN`` or
the number), then builds the site; an unknown one lists the valid pages and stops before anything
is installed or run. Without a GPU, naming pages records nothing: the session says so and renders
the committed recording (exit 0, so the CPU build is unchanged). Sphinx's own arguments: one
starting with ``-`` (``-E``), or anything after a second ``--`` (``nox -s docs -- 5 -- -D key=value``).

Offline machines (GPU clusters without network): ``nox --no-venv -s docs`` runs in the current
interpreter with the packages already installed there, installing nothing.

``CUDNN_GUIDE_TORCH`` chooses the torch requirement installed into fresh environments
(default ``torch==2.13.0``); ``CUDNN_GUIDE_TORCH_INDEX`` the index it comes from (the hosting
builds use PyTorch's CPU index, a few hundred MB instead of a multi-GB CUDA build).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

import nox

nox.options.sessions = ["docs", "tests"]
nox.options.reuse_existing_virtualenvs = True

TORCH = os.environ.get("CUDNN_GUIDE_TORCH", "torch==2.13.0")
# a package index for torch alone, e.g. https://download.pytorch.org/whl/cpu for a CPU build (hosting)
TORCH_INDEX = os.environ.get("CUDNN_GUIDE_TORCH_INDEX", "")
# every module the docs build imports: conf.py, the gallery, and the results/methodology notebooks
# (pandas; PIL, which checks the recorded figures; ipykernel, which runs the notebooks)
DOCS_MODULES = (
    "sphinx",
    "sphinx_gallery",
    "myst_nb",
    "furo",
    "sphinx_copybutton",
    "matplotlib",
    "numpy",
    "pandas",
    "PIL",
    "ipykernel",
    "torch",
    "cudnn",
)
TEST_MODULES = ("pytest", "pytest_timeout", "hypothesis", "selenium", "ruff", *DOCS_MODULES)


def _no_venv(session: nox.Session) -> bool:
    return session.venv_backend == "none" or not getattr(session.virtualenv, "is_sandboxed", True)


def _prepare(session: nox.Session, extras: str, modules: tuple[str, ...]) -> str:
    """Install into a fresh venv, or with --no-venv check the interpreter has everything.

    Returns the python executable to run commands with."""
    # the docs build's own machinery lives beside the docs, outside the installed library
    ext = os.path.join(os.getcwd(), "docs", "_ext")
    if _no_venv(session):
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if missing:
            session.error(
                f"--no-venv: {sys.executable} lacks {', '.join(missing)}. Install them into this interpreter "
                "(offline: pip install --no-index --find-links <wheelhouse> ...), or drop --no-venv to let "
                "nox create an environment from the package index."
            )
        session.env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), ext, os.environ.get("PYTHONPATH", "")]))
        return sys.executable
    session.install(TORCH, *(["--index-url", TORCH_INDEX] if TORCH_INDEX else []))
    session.install("-e", f".[{extras}]")
    session.env["PYTHONPATH"] = os.pathsep.join(filter(None, [ext, os.environ.get("PYTHONPATH", "")]))
    return "python"


def _pages_and_sphinx_args(session: nox.Session) -> tuple[list[str], list[str]]:
    """``nox -s docs -- [PAGES] [-- SPHINX ARGS]``: the example files named, and Sphinx's arguments.

    Checked before anything is installed: an unknown page stops the session, listing the valid ones."""
    sys.path.insert(0, os.path.join(os.getcwd(), "docs", "_ext"))
    from gallery_build import progress  # plain Python: importable before the session's packages are installed

    pages, sphinx_args = progress.split_docs_args(session.posargs)
    examples = [p.name for p in Path("examples").glob("plot_*.py")]
    try:
        return progress.resolve_pages(pages, examples), sphinx_args
    except progress.UnknownPageError as exc:
        session.error(str(exc))


def _one_build_at_a_time(session_func):
    """Hold the checkout's build lock (docs/_build/.lock) for the whole docs session: recording and Sphinx.

    The recorder and Sphinx, started by this session, inherit it; another build of this checkout stops
    at once, naming this one (gallery_build.build_lock)."""

    @functools.wraps(session_func)
    def locked(session: nox.Session) -> None:
        sys.path.insert(0, os.path.join(os.getcwd(), "docs", "_ext"))
        from gallery_build import build_lock  # standard library only: importable before anything is installed

        try:
            lock = build_lock.acquire(Path("docs"), "nox -s docs")
        except build_lock.BuildLockError as exc:
            session.error(str(exc))
        with lock:
            session.env[build_lock.HELD_ENV] = os.environ[build_lock.HELD_ENV]
            session_func(session)

    return locked


@nox.session
@_one_build_at_a_time
def docs(session: nox.Session) -> None:
    """Build the HTML site into docs/_build/html (record on a GPU, render from the recording without one).

    With a GPU, each example is first recorded in its own fresh process (no CUDA or cuDNN state
    shared between examples); the site is then assembled from the recording. ``nox -s docs -- 5``
    records page 5 only (any page names or numbers; see the module's docstring)."""
    pages, sphinx_args = _pages_and_sphinx_args(session)
    python = _prepare(session, "docs", DOCS_MODULES)
    said = session.run(
        python,
        "-c",
        "from gallery_build.staleness import docs_mode; print(docs_mode())",
        silent=True,
        external=True,
    )
    if said is None:  # --install-only: nox ran nothing, so there is no mode and nothing to record or build
        return
    mode = said.strip().splitlines()[-1]
    if mode == "record":
        what = ", ".join(pages) + " (the other pages keep their recording)" if pages else "every example"
        session.log(f"CUDA GPU found: recording {what} afresh, each in its own process")
        session.run(python, "-m", "gallery_build.recording", "record", *pages, external=True)
    elif pages:
        session.warn(
            f"no CUDA GPU: nothing can be recorded without one, so {', '.join(pages)} keep the committed "
            "recording; rendering the site from it (nothing is executed). Run this on a machine with a CUDA GPU "
            "for fresh numbers."
        )
    else:
        session.log("no CUDA GPU: rendering the committed recording (nothing is executed)")
    session.run(
        python,
        "-m",
        "sphinx",
        "-W",
        "--keep-going",
        "-j",
        "auto",  # documents read and written in parallel: the assembly after recording, cut
        "-b",
        "html",
        "docs",
        "docs/_build/html",
        *sphinx_args,
        env={"CUDNN_GUIDE_DOCS_MODE": "render"},
        external=True,
    )
    session.log("site built: docs/_build/html/index.html (serve: python -m http.server -d docs/_build/html)")


@nox.session
def tests(session: nox.Session) -> None:
    """Lint (ruff), then run the test suite (GPU tests are skipped without a GPU)."""
    python = _prepare(session, "docs,test", TEST_MODULES)
    session.run(python, "-m", "ruff", "check", ".", external=True)
    session.run(python, "-m", "ruff", "format", "--check", ".", external=True)
    session.run(python, "-m", "pytest", *session.posargs, external=True)
