"""Headlines whose value depends on the machine and lease more than on the run: shown as a range across recordings.

A headline's recorded interval is its in-run 95% interval widened by how far it moved between
past recordings of the same GPU model and software (:mod:`gallery_build.drift_bands`). For most
headlines the widening is a few percent. For some it is far larger than anything the run could
narrow: start-up times that follow the host's file system and CPU, a ``torch.compile``
max-autotune chain that picks another kernel on another lease, a GPU's power-capped ceiling.
More rounds in one run do not change that, and an interval of ±100% says nothing to a reader.

:func:`is_machine_dependent` names those headlines (a drift above :data:`MACHINE_DEPENDENT_DRIFT`,
±15%), and :func:`recorded_range` gives what the site shows for them instead: the lowest and
highest value the headline took across the recordings of the same GPU model and software in the
history. The results page counts those with at least two recordings (:func:`ranged`) apart from
the headlines whose interval it judges for precision, and says so; one new to the site (a drift
taken from the rest of the site, one recording of its own) stays judged by its interval.
"""

from __future__ import annotations

import math
from typing import Any

from .page_moves import lineage

__all__ = [
    "MACHINE_DEPENDENT_DRIFT",
    "SOFTWARE_KEYS",
    "is_machine_dependent",
    "recorded_range",
    "ranged",
    "shown_as_range",
    "range_text",
]

SOFTWARE_KEYS = ("driver", "cuda", "torch")
"""The environment keys whose versions must match for two recordings to range a headline together."""

MACHINE_DEPENDENT_DRIFT = math.log(1.15)
"""A headline whose re-recording drift (natural-log change) is above this, ±15%, varies more between
recordings than a precise interval can say: the site's aim is intervals within ±15%."""


def is_machine_dependent(headline: dict[str, Any]) -> bool:
    """Whether a recorded headline's re-recording drift is above ±15% (:data:`MACHINE_DEPENDENT_DRIFT`).

    Parameters
    ----------
    headline
        A recorded headline (``drift`` set by :func:`gallery_build.drift_bands.widen_headlines`).

    Returns
    -------
    bool
        ``True`` when its value (or its page's, ``drift_basis`` ``"page"``) moved between past
        recordings by more than ±15%; never for a drift that is the site's fallback
        (``drift_basis`` ``"site"``: its page had no comparable past recording).

    Example
    -------
    >>> is_machine_dependent({"drift": 0.49}), is_machine_dependent({"drift": 0.05}), is_machine_dependent({})
    (True, False, False)
    >>> is_machine_dependent({"drift": 0.49, "drift_basis": "site"})
    False
    >>> is_machine_dependent({"drift": 0.7, "drift_unit": "µs/call (signed)"})
    False
    """
    if headline.get("drift_basis") == "site":  # its page had no past: the site's drift says nothing of it
        return False
    if "drift_unit" in headline:  # a signed difference's drift is in its unit, not a log change
        return False
    try:
        return float(headline.get("drift") or 0.0) > MACHINE_DEPENDENT_DRIFT
    except (TypeError, ValueError):
        return False


def recorded_range(
    history: list[dict[str, Any]], example: str, name: str, gpu: str, software: dict[str, Any] | None = None
) -> tuple[float, float, int] | None:
    """The lowest and highest value headline ``name`` of ``example`` took across recordings on ``gpu``.

    Only recordings with the same software (where both name it) count: another cuDNN or PyTorch
    is another measurement, not the same one on another machine.

    Parameters
    ----------
    history
        History entries (:func:`gallery_build.history.load`), the latest recording included.
    example
        The example's stem.
    name
        The headline's name.
    gpu
        The GPU model.
    software
        The latest recording's software versions (``driver``, ``cuda``, ``torch``, ...).

    Returns
    -------
    tuple[float, float, int] | None
        ``(lowest, highest, recordings)``; ``None`` without a numeric value. Recordings made under the
        page's old name (:func:`gallery_build.page_moves.lineage`) count.

    Example
    -------
    >>> e = lambda v: {"example": "p", "gpu": "G", "headlines": [{"name": "t", "value": v}]}
    >>> recorded_range([e(2.0), e(3.0), e(2.5)], "p", "t", "G")
    (2.0, 3.0, 3)
    """
    software = software or {}
    pages = lineage(example)  # a page split off another keeps the recordings made under its old name
    values = []
    for entry in history:
        if entry.get("example") not in pages or entry.get("gpu") != gpu:
            continue
        theirs = entry.get("software") or {}
        if any(theirs.get(k) and v and theirs[k] != v for k, v in software.items()):
            continue
        for h in entry.get("headlines") or []:
            value = h.get("value") if isinstance(h, dict) and h.get("name") == name else None
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                values.append(float(value))
    return (min(values), max(values), len(values)) if values else None


def ranged(found: tuple[float, float, int] | None) -> bool:
    """Whether :func:`recorded_range` found at least two recordings to range over.

    Example
    -------
    >>> ranged((1.0, 1.2, 2)), ranged((1.0, 1.0, 1)), ranged(None)
    (True, False, False)
    """
    return bool(found) and found[2] >= 2


def shown_as_range(
    recs: list[dict[str, Any]], record: dict[str, Any], headline: dict[str, Any]
) -> tuple[float, float, int] | None:
    """The range the site shows instead of ``headline``'s interval, or ``None`` to keep the interval.

    A headline is shown as its range across recordings when it is machine-dependent
    (:func:`is_machine_dependent`) and has at least two recordings of the same GPU model and
    software (:func:`ranged`): a headline new to the site keeps its interval, however wide.

    Parameters
    ----------
    recs
        Every recording's history entries (:func:`gallery_build.drift_bands.recordings`).
    record
        The page's record (its ``example`` and ``environment``).
    headline
        One of its headlines.

    Returns
    -------
    tuple[float, float, int] | None
        :func:`recorded_range`'s result, or ``None``.

    Example
    -------
    >>> e = lambda v: {"example": "p", "gpu": "G", "headlines": [{"name": "t", "value": v}]}
    >>> rec = {"example": "p", "environment": {"gpu": "G"}}
    >>> shown_as_range([e(2.0), e(3.0)], rec, {"name": "t", "drift": 0.5})
    (2.0, 3.0, 2)
    >>> shown_as_range([e(2.0)], rec, {"name": "t", "drift": 0.5}) is None
    True
    """
    if not is_machine_dependent(headline):
        return None
    env = record.get("environment") or {}
    software = {k: env[k] for k in SOFTWARE_KEYS if env.get(k)}
    example, name = str(record.get("example")), str(headline.get("name"))
    found = recorded_range(recs, example, name, str(env.get("gpu", "")), software)
    return found if ranged(found) else None


def range_text(found: tuple[float, float, int] | None, unit: str = "") -> str:
    """How the site words a machine-dependent headline's range across recordings.

    Parameters
    ----------
    found
        :func:`recorded_range`'s result.
    unit
        The headline's unit.

    Returns
    -------
    str
        For example ``"2.1–3.4 x across 5 recordings"``.

    Example
    -------
    >>> range_text((2.1, 3.4, 5), "x")
    '2.1–3.4 x across 5 recordings'
    >>> range_text((2.1, 2.1, 1), "x")
    'one recording so far (2.1 x)'
    """
    unit = f" {unit}" if unit else ""
    if not found:
        return "no recording to range over"
    low, high, n = found
    if n < 2:
        return f"one recording so far ({low:.4g}{unit})"
    return f"{low:.4g}–{high:.4g}{unit} across {n} recordings"
