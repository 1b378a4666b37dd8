"""The docs build's own machinery, kept out of the library its readers import (as sphinx-gallery
keeps its doc-build helpers in ``doc/sphinxext``).

* :mod:`gallery_build.recording` — record on a GPU, render anywhere: staging, manifest, skip pages.
* :mod:`gallery_build.hooks` — the Sphinx hooks: stamps, build health, data validation.
* :mod:`gallery_build.history` — the history of recordings and the reproducibility report.

Run it with ``docs/_ext`` on ``PYTHONPATH`` (``nox`` sessions set it)::

    PYTHONPATH=docs/_ext python -m gallery_build.recording record [plot_xx.py ...]
    PYTHONPATH=docs/_ext python -m gallery_build.history        # reproducibility of the last two recordings
"""
