"""Re-recording drift: how far a measurement moved between past recordings, to widen today's intervals by.

A bootstrap interval over rounds describes one run. The next recording runs on another machine
(or day), and the site promises that its verdicts survive that. When the docs build records a
page, it points ``CUDNN_GUIDE_DRIFT`` at the drift measured from the site's history
(``docs/data/drift.json``) and names the page in ``CUDNN_GUIDE_PAGE``; :func:`for_label` then
gives each measurement's re-recording noise as an absolute log change: its own largest past
change, and at least its page's 95th percentile (the whole site's for a new page). Outside the
docs build (no file) it is 0, and intervals are the run's own.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any

__all__ = ["DRIFT_ENV", "PAGE_ENV", "for_ratio"]

DRIFT_ENV = "CUDNN_GUIDE_DRIFT"
"""Path of the drift file (written by the docs build after each full recording)."""
PAGE_ENV = "CUDNN_GUIDE_PAGE"
"""The example being recorded, e.g. ``plot_05_sdpa_causal``."""
RATIO_MIN_PAIRS = 2
"""Past recording pairs in which both measurements of a ratio appear before :func:`for_ratio` trusts their
ratio's own history; with fewer, the two measurements' drifts are combined as if independent."""


@functools.lru_cache(maxsize=1)
def _load(path: str) -> dict[str, Any]:
    from cudnn_guide.datafiles import read_json

    return read_json(path)


def reset_caches() -> None:
    """Forget the loaded drift file (the next call reads it again).

    Example
    -------
    >>> reset_caches()
    """
    _load.cache_clear()


def for_label(label: str) -> float:
    """The re-recording noise of the measurement ``label`` on the page being recorded (0 when unknown).

    Parameters
    ----------
    label
        The measurement's label, as recorded (``"cuDNN graph @ seq_len=4096"``).

    Returns
    -------
    float
        An absolute natural-log change: widen an interval ``[lo, hi]`` to
        ``[lo·e^-r, hi·e^r]``.

    Raises
    ------
    CorruptDataError
        The drift file exists but cannot be read.

    Example
    -------
    >>> for_label("cuDNN graph")  # outside the docs build
    0.0
    """
    return _lookup(label, "labels", "p95", "global_p95")


def for_headline(name: str) -> float:
    """The re-recording noise of the headline ``name`` on the page being recorded (0 when unknown).

    Its own largest past change, and at least its page's 95th percentile of headline changes
    (the whole site's for a page without history).

    Parameters
    ----------
    name
        The headline's name, as recorded.

    Returns
    -------
    float
        An absolute natural-log change.

    Example
    -------
    >>> for_headline("copy bandwidth ceiling")  # outside the docs build
    0.0
    """
    return _lookup(name, "headlines", "headline_p95", "global_headline_p95")


def for_ratio(a: str, b: str) -> float:
    """The re-recording noise of the ratio of measurements ``a`` and ``b`` on the page being recorded.

    Two measurements of one recording share its machine, clock and CPU, so much of their drift
    cancels in their ratio. With :data:`RATIO_MIN_PAIRS` or more past pairs holding both, this is
    the ratio's own largest past change, at least its page's 90th percentile of ratio changes;
    otherwise the two measurements' drifts combined as independent, ``√(r_a² + r_b²)``. The
    methodology page backtests both on the site's history.

    Parameters
    ----------
    a
        One measurement's label.
    b
        The other's.

    Returns
    -------
    float
        An absolute natural-log change (0 outside the docs build).

    Example
    -------
    >>> for_ratio("cuDNN graph", "PyTorch")  # outside the docs build
    0.0
    """
    page = _page()
    if page is not None:
        seen = [abs(s[a] - s[b]) for s in page.get("changes") or [] if a in s and b in s]
        if len(seen) >= RATIO_MIN_PAIRS:
            return max(max(seen), float(page.get("ratio_p90") or 0.0))
    return math.hypot(for_label(a), for_label(b))


def _page() -> dict[str, Any] | None:
    path = os.environ.get(DRIFT_ENV)
    if not path or not os.path.exists(path):
        return None
    return (_load(path).get("examples") or {}).get(os.environ.get(PAGE_ENV, ""))


def _lookup(key: str, table: str, page_p95: str, site_p95: str) -> float:
    """``key``'s largest past change in the page's ``table``, at least the page's ``page_p95``."""
    path = os.environ.get(DRIFT_ENV)
    if not path or not os.path.exists(path):
        return 0.0
    page = _page()
    if page is None:
        return float(_load(path).get(site_p95) or 0.0)
    return max(float(page.get(page_p95) or 0.0), float((page.get(table) or {}).get(key, 0.0)))
