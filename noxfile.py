"""Sessions: ``docs`` builds the site, ``tests`` runs the test suite.

``nox -s docs`` executes every example when a CUDA GPU is present (record mode) and renders the
committed recording otherwise (render mode); see ``docs/conf.py``.

Offline machines (GPU clusters without network): ``nox --no-venv -s docs`` runs in the current
interpreter with the packages already installed there, installing nothing.

``CUDNN_GUIDE_TORCH`` chooses the torch requirement installed into fresh environments
(default ``torch==2.13.0``); ``CUDNN_GUIDE_TORCH_INDEX`` the index it comes from (the hosting
builds use PyTorch's CPU index, a few hundred MB instead of a multi-GB CUDA build).
"""

from __future__ import annotations

import importlib.util
import os
import sys

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
TEST_MODULES = ("pytest", "hypothesis", "selenium", "ruff", *DOCS_MODULES)


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


@nox.session
def docs(session: nox.Session) -> None:
    """Build the HTML site into docs/_build/html (record on a GPU, render from the recording without one).

    With a GPU, each example is first recorded in its own fresh process (no CUDA or cuDNN state
    shared between examples); the site is then assembled from the recording."""
    python = _prepare(session, "docs", DOCS_MODULES)
    mode = (
        session.run(
            python,
            "-c",
            "from gallery_build.staleness import docs_mode; print(docs_mode())",
            silent=True,
            external=True,
        )
        .strip()
        .splitlines()[-1]
    )
    if mode == "record":
        session.log("CUDA GPU found: recording every example afresh, each in its own process")
        session.run(python, "-m", "gallery_build.recording", "record", external=True)
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
        *session.posargs,
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
