"""Which question a comparison headline answers: the three kinds the site counts apart.

A comparison headline (``kind: "comparison"`` in a record) is a speed-up with an interval and a
verdict, but the gallery asks three different questions with it, and adding their verdicts up
counts an ablation as a win:

* ``implementation``: **cuDNN against another implementation** (the best of PyTorch eager,
  ``torch.compile``, PyTorch's SDPA backends, FlexAttention, cuBLASLt ...): the site's answer to
  "is cuDNN faster?";
* ``feature``: **the cost of a feature**, the same cuDNN computation with one thing switched
  (dropout on or off, deterministic against the default backward, FP8 against bf16,
  ``set_stream`` per call, the ``cudnn.torch`` provider against this guide's op);
* ``compiled``: **compiled against eager**, a compiled block against a lone eager PyTorch
  baseline (what compiling buys, not what cuDNN buys).

:func:`kind_of` decides from the headline's name, its baseline and its page, by rules that are
written so that exactly one matches; a headline that matches none (or two) raises
:class:`UnclassifiedComparison`, naming it, so a new comparison is never counted silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .schema import check_record, validate_file

__all__ = [
    "cudnn_through_pytorch",
    "KINDS",
    "KIND_TITLES",
    "UnclassifiedComparison",
    "kind_of",
    "classify",
    "distinct_comparisons",
    "read_records",
    "tally",
    "short_label",
    "site_answer",
]

KINDS: tuple[str, ...] = ("implementation", "feature", "compiled")
"""The kinds, in the order the site shows them."""

KIND_TITLES: dict[str, str] = {
    "implementation": "cuDNN against another implementation",
    "feature": "the cost of a feature",
    "compiled": "compiled against eager",
}
"""How the site names each kind."""

_BEST_OF = re.compile(r"\b(best|fastest)\b", re.I)
"""A speed-up over the best (or fastest) of several baselines: whichever won, another implementation."""
_FEATURE = re.compile(r"\bdropout\b|\bdeterministic\b|\bset_stream\b|\bprovider\b|\bbf16\b", re.I)
"""A feature switched on or off, named in the headline or its baseline."""
_EAGER = re.compile(r"\beager\b", re.I)
_EAGER_BOTH = re.compile(r"\beager\b.*\bover\b.*\beager\b", re.I)
"""Eager against eager ("eager cuDNN op's speed-up over eager PyTorch"): like for like, another
implementation, not compiled against eager."""
_OTHER_IMPLEMENTATION = re.compile(r"torch|pytorch|flexattention|cublas|triton|xformers|flash", re.I)
"""A baseline that is not cuDNN's own path (``PyTorch cuDNN`` is PyTorch's call into cuDNN: another
implementation around the same library, and the fair baseline a PyTorch user has)."""


class UnclassifiedComparison(ValueError):
    """A comparison headline that no rule (or more than one) of :func:`kind_of` places.

    Example
    -------
    >>> try:
    ...     kind_of("speed-up over a new thing", "something else", "plot_99_x")
    ... except UnclassifiedComparison as exc:
    ...     print("verdict_kinds.py" in str(exc))
    True
    """


def kind_of(name: str, baseline: str, page: str = "") -> str:
    """The kind of question a comparison headline answers (one of :data:`KINDS`).

    Rules (each written to exclude the others):

    * ``implementation``: the name says "best" or "fastest" (the best of several baselines,
      whichever won), or the baseline is another library's (PyTorch, ``torch.compile``,
      FlexAttention, cuBLAS ...) and not eager alone, with no feature named, or with the same
      feature named on both sides (a deterministic step against another library's deterministic step);
    * ``feature``: not a best-of, and a feature is named (dropout, deterministic, ``set_stream``,
      provider, bf16) or the baseline is cuDNN's own path (its label starts with ``cuDNN``);
    * ``compiled``: not a best-of, no feature named, and the baseline is eager PyTorch alone.

    Parameters
    ----------
    name
        The headline's name, as recorded.
    baseline
        The headline's ``baseline`` label.
    page
        The page's stem, named in the error.

    Returns
    -------
    str
        ``"implementation"``, ``"feature"`` or ``"compiled"``.

    Raises
    ------
    UnclassifiedComparison
        When no rule or several rules match.

    Example
    -------
    >>> kind_of("dropout forward: speed-up over no dropout", "without dropout", "plot_20_dropout_deterministic")
    'feature'
    >>> kind_of("speed-up over best baseline", "torch.cudnn_convolution_relu")
    'implementation'
    >>> kind_of("deterministic training step: speed-up over FlashAttention-4", "FlashAttention-4, deterministic")
    'implementation'
    """
    best_of = bool(_BEST_OF.search(name))
    feature_named = bool(_FEATURE.search(name) or _FEATURE.search(baseline))
    # the same feature on both sides of another library's baseline ("deterministic step over FA4,
    # deterministic"): two implementations of that feature, like for like
    same_feature = {m.lower() for m in _FEATURE.findall(name)} & {m.lower() for m in _FEATURE.findall(baseline)}
    if same_feature and _OTHER_IMPLEMENTATION.search(baseline) and not _EAGER.search(baseline):
        feature_named = False
    cudnn_itself = baseline.strip().lower().startswith(("cudnn", "heuristic"))  # cuDNN's own plans
    eager = bool(_EAGER.search(baseline)) and not _EAGER_BOTH.search(name)
    matched = [
        kind
        for kind, rule in (
            (
                "implementation",
                best_of or (bool(_OTHER_IMPLEMENTATION.search(baseline)) and not eager and not feature_named),
            ),
            ("feature", not best_of and (feature_named or cudnn_itself)),
            ("compiled", not best_of and not feature_named and not cudnn_itself and eager),
        )
        if rule
    ]
    if len(matched) != 1:
        raise UnclassifiedComparison(
            f"{page or '?'}: comparison headline {name!r} (baseline {baseline!r}) matches "
            f"{' and '.join(matched) or 'no kind'}; add or narrow a rule in docs/_ext/gallery_build/verdict_kinds.py "
            "(kind_of) so that it lands in exactly one of " + ", ".join(KINDS)
        )
    return matched[0]


def distinct_comparisons(headlines: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A page's comparison headlines, each pair of measurements once.

    A page may headline the same comparison under two names (plot_09's peak length is also one of
    its per-length verdicts); counting it twice would count one verdict twice.

    Parameters
    ----------
    headlines
        A record's headlines.

    Returns
    -------
    list
        The comparison headlines, the first of each ``(candidate_measurement, baseline_measurement)``.

    Example
    -------
    >>> h = {"kind": "comparison", "candidate_measurement": "a", "baseline_measurement": "b"}
    >>> len(distinct_comparisons([h, dict(h, name="again")]))
    1
    """
    seen, out = set(), []
    for h in headlines:
        if h.get("kind") != "comparison":
            continue
        pair = (h.get("candidate_measurement"), h.get("baseline_measurement"))
        if all(isinstance(x, str) for x in pair):
            if pair in seen:
                continue
            seen.add(pair)
        out.append(h)
    return out


def classify(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every comparison headline of ``records``, with its page, title and kind.

    Parameters
    ----------
    records
        Records as :func:`cudnn_guide.report.records.load` returns them (``example``, ``title``,
        ``headlines``); extra fields are ignored.

    Returns
    -------
    list[dict[str, Any]]
        One dict per comparison headline: ``page``, ``title``, ``name``, ``baseline``, ``value``,
        ``low``, ``high``, ``verdict`` and ``kind``, in record order.

    Example
    -------
    >>> classify([{"example": "plot_x", "title": "X", "headlines": [{"name": "speed-up over best baseline",
    ...     "baseline": "PyTorch eager", "kind": "comparison", "value": 1.5, "low": 1.4, "high": 1.6,
    ...     "verdict": "faster"}]}])[0]["kind"]
    'implementation'
    """
    rows = []
    for rec in records:
        for h in distinct_comparisons(rec.get("headlines", [])):
            rows.append(
                {
                    "page": rec["example"],
                    "title": rec.get("title", rec["example"]),
                    "name": h["name"],
                    "baseline": h.get("baseline", ""),
                    "value": h["value"],
                    "low": h.get("low", h["value"]),
                    "high": h.get("high", h["value"]),
                    "verdict": h.get("verdict", "tie"),
                    "kind": kind_of(h["name"], h.get("baseline", ""), rec["example"]),
                }
            )
    return rows


def read_records(gallery: Path) -> list[dict[str, Any]]:
    """The gallery's JSON records (``*.record.json``), in file-name order, for :func:`classify`.

    Each record's shape is checked as it is read (:func:`gallery_build.schema.check_record`):
    ``conf.py`` calls this before the build validates its data.

    Parameters
    ----------
    gallery
        The recorded gallery (``docs/auto_examples``).

    Returns
    -------
    list[dict[str, Any]]
        The records.

    Example
    -------
    >>> rows = classify(read_records(Path("docs/auto_examples")))  # doctest: +SKIP
    """
    return [validate_file(p, check_record) for p in sorted(Path(gallery).glob("*.record.json"))]


def tally(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Verdicts counted per kind: ``{kind: {"faster": n, "tie": n, "slower": n}}``, every kind present.

    Parameters
    ----------
    rows
        :func:`classify`'s rows.

    Returns
    -------
    dict[str, dict[str, int]]
        Counts per kind and verdict.

    Example
    -------
    >>> tally([{"kind": "feature", "verdict": "slower"}])["feature"]
    {'faster': 0, 'tie': 0, 'slower': 1}
    """
    counts = {k: {"faster": 0, "tie": 0, "slower": 0} for k in KINDS}
    for r in rows:
        counts[r["kind"]][r["verdict"]] += 1
    return counts


_SPEED_UP_TAIL = re.compile(r"[,:]?\s*(flex_attention\s+)?speed-up over .*$", re.I)


def short_label(name: str, title: str = "") -> str:
    """A headline's name without its "speed-up over ..." tail, for a chart bar or a sentence.

    Parameters
    ----------
    name
        The headline's name.
    title
        The page's title, returned when nothing is left of the name (``""`` by default).

    Returns
    -------
    str
        ``"paged decode at 8k context"`` for ``"paged decode at 8k context, speed-up over the
        fastest PyTorch decode"``; ``title`` for ``"speed-up over best baseline"``.

    Example
    -------
    >>> short_label("packed THD: speed-up over best baseline")
    'packed THD'
    >>> short_label("speed-up over best baseline", "Fused convolution")
    'Fused convolution'
    """
    return _SPEED_UP_TAIL.sub("", name).strip() or title


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


_THROUGH_PYTORCH = re.compile(
    r"cuDNN backend|PyTorch cuDNN\b|cudnn_convolution|torch\.ops\.cudnn|cudnn\.benchmark", re.IGNORECASE
)


def cudnn_through_pytorch(baseline: str) -> bool:
    """Whether a baseline is cuDNN itself, called through PyTorch (SDPA's cuDNN backend, ``torch.cudnn_*``
    convolutions, ``torch.ops.cudnn``): a tie with it is expected, not a second implementation matched.

    Example
    -------
    >>> cudnn_through_pytorch("PyTorch SDPA, cuDNN backend, d=64"), cudnn_through_pytorch("FlashAttention-4")
    (True, False)
    """
    return bool(_THROUGH_PYTORCH.search(baseline))


def site_answer(rows: list[Mapping[str, Any]]) -> str:
    """The site's finding in one or two plain-text sentences, computed from :func:`classify`'s rows.

    Parameters
    ----------
    rows
        :func:`classify`'s rows (every comparison headline of the recording).

    Returns
    -------
    str
        Plain text (no markup): how often cuDNN beat, tied or lost to another implementation,
        its largest win, and how many comparisons of the other kinds were counted apart.

    Example
    -------
    >>> site_answer([{"kind": "implementation", "verdict": "tie", "value": 1.0, "name": "x", "title": "T"}])
    'Against another implementation (1 comparison), cuDNN was faster in 0, tied in 1 and slower in 0.'
    """
    counts = tally(rows)
    impl = [r for r in rows if r["kind"] == "implementation"]
    c = counts["implementation"]
    if not impl:
        first = "No comparison of cuDNN against another implementation is recorded yet."
    else:
        first = (
            f"Against another implementation ({_count(len(impl), 'comparison')}), cuDNN was faster in "
            f"{c['faster']}, tied in {c['tie']} and slower in {c['slower']}"
        )
        wins = [r for r in impl if r["verdict"] == "faster"]
        if wins:
            top = max(wins, key=lambda r: r["value"])
            first += (
                f"; its largest win is {top['value']:.2f}× over {top.get('baseline') or 'its baseline'} "
                f"({short_label(top['name'], top['title'])})"
            )
        first += "."
        itself = [r for r in impl if r["verdict"] == "tie" and cudnn_through_pytorch(r.get("baseline") or "")]
        if itself:
            first += (
                f" {len(itself)} of the ties {'is' if len(itself) == 1 else 'are'} with cuDNN itself, "
                "called through PyTorch "
                "(its SDPA cuDNN backend or its cuDNN convolutions)."
            )
    apart = [
        f"{KIND_TITLES[kind]} ({_count(len(kind_rows), 'comparison')})"
        for kind in KINDS[1:]
        if (kind_rows := [r for r in rows if r["kind"] == kind])
    ]
    return first + (f" Counted apart: {' and '.join(apart)}." if apart else "")
