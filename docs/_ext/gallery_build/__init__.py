"""The docs build's own machinery, kept out of the library its readers import (as sphinx-gallery
keeps its doc-build helpers in ``doc/sphinxext``).

* :mod:`gallery_build.staleness` — record or render, and which recorded pages are stale.
* :mod:`gallery_build.recording` — the recorder: each page in a fresh interpreter, on every GPU.
* :mod:`gallery_build.scheduling` — which GPU records which pages, in which order.
* :mod:`gallery_build.staging` — a page's private copy of the docs, its cold caches, the files kept.
* :mod:`gallery_build.manifest` — ``recording.json``: where, when and with which code.
* :mod:`gallery_build.skip_pages` — the note page for an example this GPU cannot run.
* :mod:`gallery_build.cell_times` — each cell's seconds, kept beside its page.
* :mod:`gallery_build.restamp` — carry a text-only edit into a recorded page.
* :mod:`gallery_build.shards` — recordings made anywhere, merged.
* :mod:`gallery_build.hooks` — the Sphinx hooks: stamps, the environment table folded, the manifest.
* :mod:`gallery_build.page_checks` — build health and data validation, before the site is built.
* :mod:`gallery_build.history` — the history of recordings and the reproducibility report.
* :mod:`gallery_build.drift_bands` — how far headlines drift between recordings (``drift.json``).
* :mod:`gallery_build.machine_dependence` — headlines that vary by machine, shown as a range across recordings.
* :mod:`gallery_build.frontend_index` — the "cuDNN Frontend API" index.

Run it with ``docs/_ext`` on ``PYTHONPATH`` (``nox`` sessions set it)::

    PYTHONPATH=docs/_ext python -m gallery_build.recording record [plot_xx.py ...]
    PYTHONPATH=docs/_ext python -m gallery_build.history        # reproducibility of the last two recordings
"""
