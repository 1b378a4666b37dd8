"""Which mode the docs build runs in, and which recorded pages no longer match their example.

*Record* (a CUDA GPU is present, or ``CUDNN_GUIDE_DOCS_MODE=record``): sphinx-gallery executes
the examples afresh and writes their pages into ``docs/auto_examples``, to be committed
(:mod:`gallery_build.recording`). *Render* (no GPU, or ``CUDNN_GUIDE_DOCS_MODE=render``): nothing
executes; sphinx-gallery keeps every page whose stored md5 matches its example. An example
changed since its recording would otherwise be executed (and crash without a GPU) or rendered
stale, so :func:`require_fresh_recording` finds them first and the build stops, naming each file.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cudnn_guide.errors import GuideError

__all__ = [
    "MODE_ENV",
    "StaleRecordingError",
    "ExampleState",
    "docs_mode",
    "source_md5",
    "example_states",
    "stale_examples",
    "require_fresh_recording",
]

MODE_ENV = "CUDNN_GUIDE_DOCS_MODE"


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


def source_md5(path: Path) -> str:
    """The md5 of a file's bytes, as sphinx-gallery stores it beside a recorded page."""
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
        elif stored.read_text().strip() != source_md5(src):
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
