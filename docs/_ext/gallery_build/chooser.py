"""Which attention backend for my shape? The rows of the chooser page, computed from the records.

:func:`chooser_rows` reads the attention pages' JSON records (a gallery folder) and gives one row
per recorded shape: its feature, head dim, sequence length and phase, the contenders timed there
with each one's median GPU time, host time per call and first-call cost, and the winner of the
page's comparison with its interval, or ``"tie"``. :func:`render_html` turns the rows into the
page's table and its filter (plain HTML and a small inline script, no CDN); every recorded string
is escaped.

Where each number comes from, in order: the measurement's ``params`` (``seq_len``, ``head_dim``,
``causal``, ``phase``, ``max_context``), a headline field (``seq_len``), and last the page's shape
as its example declares it (:data:`PAGE_RULES`, each citing the line it was read from; the tests
check those lines still say so). A number none of them holds is said as :data:`MISSING`, never
guessed. A comparison headline's ``value``/``low``/``high``/``verdict`` are read as published
(widened for re-recording drift where the record says ``interval: "widened"`` with a drift above 0:
:func:`~gallery_build.drift_bands.is_widened`); other fields are
tolerated.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import drift_bands
from .verdict_kinds import distinct_comparisons

__all__ = [
    "MISSING",
    "PAGE_RULES",
    "SWEEP_PAGES",
    "Contender",
    "ChooserRow",
    "Rule",
    "chooser_rows",
    "first_call_costs",
    "render_html",
]

MISSING = "not recorded"
"""What the page says where a record holds no number."""

RECORD_SUFFIX = ".record.json"


@dataclasses.dataclass(frozen=True)
class Contender:
    """One implementation timed at a row's shape."""

    name: str
    median_ms: float | None
    """The GPU time per call (the measurement's median), ``None`` when not recorded."""
    host_us: float | None
    """Median of the measurement's ``host_samples_ms`` × 1000; ``None`` when it has none."""
    first_call_ms: float | None = None
    """Median first call in a fresh process (``extra.first_calls``); ``None`` when not recorded."""
    first_call_note: str = ""
    """How many fresh processes, or why none succeeded."""


@dataclasses.dataclass(frozen=True)
class ChooserRow:
    """One recorded shape of one attention feature."""

    feature: str
    features: tuple[str, ...]
    """Every feature the shape exercises (``feature`` first): the filter matches any of them."""
    page: str
    title: str
    comparison: str
    """The comparison headline's name; empty where the page recorded none for this shape."""
    head_dim: str | None
    seq_len: int | None
    phase: str
    detail: str
    contenders: tuple[Contender, ...]
    candidate: str
    baseline: str
    winner: str
    """The candidate or the baseline by the verdict, ``"tie"``, or :data:`MISSING`."""
    speedup: float | None
    low: float | None
    high: float | None
    verdict: str
    interval: str
    """``"widened"`` (re-recording drift included) or ``"in-run"``; empty without an interval."""
    faster_elsewhere: str = ""
    """A contender timed at this shape whose GPU median is below the winner's, though the page's
    comparison did not judge it against the winner (e.g. FlashAttention-4 beside a verdict over
    FlexAttention): the reader is told, never left to believe the winner is the fastest."""

    def to_dict(self) -> dict[str, Any]:
        """The row as plain data (``contenders`` as dicts)."""
        return dataclasses.asdict(self)


Fallback = Callable[[re.Match[str], dict[str, Any]], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Rule:
    """How one page's comparison headlines (matched by name) map to a feature and a shape.

    ``fallback(match, record)`` gives what the record's measurements may lack: ``feature``,
    ``features``, ``head_dim``, ``seq_len``, ``phase``, ``detail``, ``candidate`` (the page's
    candidate, for records older than ``candidate_measurement``), ``tag`` (the measurement labels'
    suffix) and ``group`` (a predicate on labels, where a tag does not separate two comparisons).
    ``excluded``: a reason this comparison is not a choice between backends (it is left out, and
    the page lists it with the reason).
    """

    pattern: str
    fallback: Fallback
    excluded: str = ""


def _const(**values: Any) -> Fallback:
    return lambda m, rec: dict(values)


def _peak_len(rec: dict[str, Any]) -> int | None:
    """plot_09's comparison is 'at that length': the length of its peak headline."""
    return next((h["seq_len"] for h in rec.get("headlines", []) if isinstance(h.get("seq_len"), int)), None)


PAGE_RULES: dict[str, tuple[Rule, ...]] = {
    # plot_05:105,203 SdpaProblem(seq=s, head_dim=d, causal=True); head dim in the impl (", d=64"), S in params
    # plot_05's per-length comparisons name their head dim and length ("d=128, S=4096: ..."); the
    # measurements of both head dims share the length's tag, so the head dim picks the group
    "plot_05_sdpa_causal": (
        Rule(
            r"^d=(?P<d>\d+), S=(?P<s>\d+):",
            lambda m, rec: {
                "feature": "causal",
                "phase": "fwd",
                "head_dim": m["d"],
                "seq_len": int(m["s"]),
                "candidate": f"cuDNN graph, d={m['d']}",
                "tag": f"@ seq_len={m['s']}",
                "group": lambda label, d=m["d"]: f", d={d} @" in label,
            },
        ),
        Rule(r".", _const(feature="causal", phase="fwd")),
    ),
    # plot_09:271 SdpaProblem(batch=16384 // s, heads=16, seq=s, head_dim=128, causal=True)
    "plot_09_sdpa_backward": (
        Rule(
            r"speed-up over",
            lambda m, rec: {
                "feature": "backward",
                "features": ("causal",),
                "head_dim": "128",
                "phase": "fwd+bwd",
                "seq_len": _peak_len(rec),
                "candidate": "cuDNN graphs (fwd + bwd)",
                "tag": f"@ seq_len={_peak_len(rec)}",
            },
        ),
    ),
    # plot_13:307 PagedDecodeProblem(batch=32, heads=32, head_dim=128, max_context=8192, page_size=64);
    # its pages-of-128 race (8k context, cuDNN against FlashAttention-4) is dataclasses.replace(p64, page_size=128).
    # Both comparisons name their page size ("at 8k context, pages of 64: ..."); pages of 64 is the sweep's point,
    # tagged "@ max_context=8192". The second rule reads the records from before the pages-of-64 name.
    "plot_13_paged_decode": (
        Rule(
            r"at (?P<k>\d+)k context, pages of (?P<p>\d+):",
            lambda m, rec: {
                "feature": "paged decode",
                "head_dim": "128",
                "phase": "decode",
                "seq_len": int(m["k"]) * 1024,
                "detail": f"32 sequences, pages of {m['p']} tokens",
                "candidate": "cuDNN paged",
                "tag": f"@ max_context={int(m['k']) * 1024}" if m["p"] == "64" else f"pages of {m['p']}",
            },
        ),
        Rule(
            r"at (?P<k>\d+)k context, speed-up",
            lambda m, rec: {
                "feature": "paged decode",
                "head_dim": "128",
                "phase": "decode",
                "seq_len": int(m["k"]) * 1024,
                "detail": "32 sequences, pages of 64 tokens",
                "candidate": "cuDNN paged",
                "tag": f"@ max_context={int(m['k']) * 1024}",
            },
        ),
    ),
    # plot_16:135 B, HQ, S, D = 4, 32, 4096, 128; plot_16:223 decode is (32, 1, 8192): 1 query over 8192 keys
    "plot_16_gqa_mqa": (
        Rule(
            r"^(?P<phase>prefill|decode), Hkv=(?P<hkv>\d+):",
            lambda m, rec: {
                "feature": "GQA/MQA",
                "features": ("causal",) if m["phase"] == "prefill" else (),
                "head_dim": "128",
                "phase": m["phase"],
                "seq_len": 4096 if m["phase"] == "prefill" else 8192,
                "detail": f"Hq=32, Hkv={m['hkv']}",
                "candidate": "cuDNN graph",
                "tag": f"{m['phase']} Hkv={m['hkv']}",
            },
        ),
    ),
    # plot_17:50 B, H, D, S_MAX = len(lengths), 16, 128, ...: 16 ragged lengths in [32, 4096]
    "plot_17_varlen_attention": (
        Rule(
            r"packed THD",
            _const(
                feature="varlen",
                features=("causal",),
                head_dim="128",
                phase="fwd",
                detail="16 ragged sequences, 32 to 4096 tokens",
                candidate="cuDNN packed (THD)",
                group=lambda label: not label.endswith("backward"),
            ),
        ),
    ),
    # plot_32:151 B, H, D, S_MAX, T = len(lengths), 16, 128, ...: plot_17's 16 ragged lengths, backward
    "plot_32_varlen_backward": (
        Rule(
            r"backward",
            _const(
                feature="varlen",
                features=("causal", "backward"),
                head_dim="128",
                phase="bwd",
                detail="16 ragged sequences, 32 to 4096 tokens",
                candidate="cuDNN packed (THD) backward",
                group=lambda label: label.endswith("backward"),
            ),
        ),
    ),
    # plot_33:50 B, H, S, D = 4, 16, 4096, 128; CHUNK = 512: the last chunk's queries over 4096 paged keys
    "plot_33_chunked_prefill": (
        Rule(
            r"^paged chunked prefill:",
            _const(
                feature="paged prefill",
                features=("causal",),
                head_dim="128",
                phase="prefill",
                seq_len=4096,
                detail="512 queries over 4096 paged keys",
                candidate="cuDNN paged",
                tag="chunked prefill",
            ),
        ),
    ),
    # plot_18:46 B, H, S, D, W = 4, 16, 4096, 128, 512
    "plot_18_attention_masks": (
        Rule(
            r"^window W=(?P<w>\d+):",
            lambda m, rec: {
                "feature": "window",
                "features": ("causal",),
                "head_dim": "128",
                "phase": "fwd",
                "seq_len": 4096,
                "detail": f"window W={m['w']}",
                "candidate": "cuDNN window",
                "tag": f"W={m['w']}",
            },
        ),
        Rule(
            r"^ALiBi:",
            _const(
                feature="ALiBi",
                features=("causal",),
                head_dim="128",
                phase="fwd",
                seq_len=4096,
                candidate="cuDNN ALiBi",
                tag="alibi",
            ),
        ),
    ),
    # plot_19:57 B, H, S, D, W = 4, 16, 4096, 128, 512
    "plot_19_flex_attention_oss": (
        Rule(
            r"^(?P<mask>causal|window \d+):",
            lambda m, rec: {
                "feature": "causal" if m["mask"] == "causal" else "window",
                "features": ("causal",) if m["mask"] != "causal" else (),
                "head_dim": "128",
                "phase": "fwd",
                "seq_len": 4096,
                "detail": "cudnn.flex_attention" + ("" if m["mask"] == "causal" else f", {m['mask']}"),
                "candidate": "cudnn.flex_attention",
                "tag": m["mask"],
            },
        ),
    ),
    "plot_20_dropout_deterministic": (
        # plot_20:41 B, H, S, D = 2, 16, 4096, 128: deterministic training step, cuDNN against FA4
        Rule(
            r"^deterministic training step:",
            _const(
                feature="backward",
                features=("causal", "backward"),
                head_dim="128",
                phase="bwd",
                seq_len=4096,
                detail="deterministic backward, B2 H16",
                candidate="cuDNN graph, forward + deterministic backward",
                tag="deterministic step",
            ),
        ),
        Rule(r".", _const(), excluded="cuDNN with and without an option, not two backends"),
    ),
    # plot_24:47 B, H, S, D = 4, 16, 4096, 128
    "plot_24_softcap": (
        Rule(
            r"^soft-cap:",
            _const(
                feature="soft-cap",
                features=("causal",),
                head_dim="128",
                phase="fwd",
                seq_len=4096,
                candidate="cuDNN soft-cap (score_mod)",
                tag="softcap",
            ),
        ),
    ),
    # plot_35:48 B, H, S, D = 4, 16, 4096, 128
    "plot_35_attention_sinks": (
        Rule(
            r"^sinks:",
            _const(
                feature="sinks",
                features=("causal",),
                head_dim="128",
                phase="fwd",
                seq_len=4096,
                candidate="cuDNN sink_token",
                tag="sinks",
            ),
        ),
    ),
    # plot_27:49 B, H, S = 4, 16, 4096; plot_27:50 DQK, DV = 192, 128 (MLA, forward and backward)
    "plot_27_mla": (
        Rule(
            r"^MLA",
            _const(
                feature="MLA",
                features=("causal", "backward"),
                head_dim="192/128",
                phase="fwd+bwd",
                seq_len=4096,
                detail="d_qk=192, d_v=128",
                candidate="cuDNN MLA step",
                tag="mla",
            ),
        ),
    ),
    # plot_30:54 B, S, H, D = 8, 2048, 16, 128: plot_25's block on PyTorch's SDPA, served by cudnn.torch
    "plot_30_cudnn_torch_provider": (
        Rule(r"^cudnn\.torch provider", _const(), excluded="two routes to the same cuDNN kernel, not two backends"),
    ),
    # plot_25:47 B, S, H, D = 8, 2048, 16, 128
    "plot_25_transformer_block": (
        Rule(
            r"^training step:",
            _const(
                feature="transformer block",
                features=("causal", "backward"),
                head_dim="128",
                phase="training step",
                seq_len=2048,
                candidate="cuDNN op, compiled",
                tag="training step",
            ),
        ),
    ),
    # plot_26:44 B, S, H, HKV, D = 2, 4096, 64, 8, 128; S, causal and phase in each measurement's params
    "plot_26_vendor_llama_fa4": (
        Rule(
            r"^S=(?P<s>\d+) (?P<mask>causal|no mask) (?P<phase>fwd|bwd):",
            lambda m, rec: {
                "feature": m["mask"],
                "features": ("GQA/MQA",) + (("backward",) if m["phase"] == "bwd" else ()),
                "head_dim": "128",
                "phase": m["phase"],
                "seq_len": int(m["s"]),
                "detail": "Llama 3.1: Hq=64, Hkv=8",
                "candidate": "cuDNN graph (heuristics A)",
                "tag": f"@ S={m['s']} {'causal' if m['mask'] == 'causal' else 'full'} {m['phase']}",
            },
        ),
    ),
}
"""Each attention page's comparisons, matched by headline name (first match wins), with the shape its
example declares as the fallback for what the measurements' params do not hold."""

SWEEP_PAGES: dict[str, dict[str, Any]] = {
    "plot_05_sdpa_causal": {"feature": "causal", "phase": "fwd", "candidate": "cuDNN graph"},
    "plot_09_sdpa_backward": {
        "feature": "backward",
        "features": ("causal",),
        "head_dim": "128",
        "phase": "fwd+bwd",
        "candidate": "cuDNN graphs (fwd + bwd)",
    },
}
"""Pages that sweep the sequence length (``params["seq_len"]`` on each measurement): a length with no
comparison headline still gets a row, its contenders' times and no winner (:data:`MISSING`). The
``candidate`` is the prefix of the cuDNN implementation's name."""


def _tag(m: dict[str, Any]) -> str:
    """A measurement's label without its implementation: the comparison's tag (``"W=128"``)."""
    label, impl = str(m.get("label", "")), str((m.get("params") or {}).get("impl", ""))
    return label[len(impl) :].strip() if impl and label.startswith(impl) else ""


def _impl(m: dict[str, Any]) -> str:
    return str((m.get("params") or {}).get("impl") or m.get("label", ""))


def _host_us(m: dict[str, Any]) -> float | None:
    samples = [float(x) for x in m.get("host_samples_ms") or [] if isinstance(x, (int, float))]
    return statistics.median(samples) * 1000 if samples else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def first_call_costs(record: dict[str, Any]) -> dict[str, tuple[float | None, str]]:
    """Each backend's first call in a fresh process, from ``extra.first_calls`` (plot_28, for plot_26's shape).

    Parameters
    ----------
    record
        A page's JSON record.

    Returns
    -------
    dict[str, tuple[float | None, str]]
        Backend key (``"cudnn"``, ``"fa4"``) → (median ``first_call_s`` × 1000 over the runs that
        succeeded, or ``None``; a note: how many runs, or the first run's error).

    Example
    -------
    >>> first_call_costs({"extra": {"first_calls": {"fa4": [{"first_call_s": 2.0}]}}})["fa4"]
    (2000.0, 'median of 1 fresh process')
    """
    out: dict[str, tuple[float | None, str]] = {}
    calls = (record.get("extra") or {}).get("first_calls")
    if not isinstance(calls, dict):
        return out
    for backend, runs in calls.items():
        runs = [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []
        ok = [v for r in runs if (v := _number(r.get("first_call_s"))) is not None]
        if ok:
            n = len(ok)
            out[str(backend)] = (statistics.median(ok) * 1000, f"median of {n} fresh process{'es' * (n > 1)}")
        else:
            err = next((str(r["error"]) for r in runs if r.get("error")), "")
            out[str(backend)] = (None, f"failed: {err}" if err else MISSING)
    return out


def _first_call_key(name: str, candidate: str) -> str | None:
    if name == candidate:
        return "cudnn"
    if name.startswith("FlashAttention-4"):
        return "fa4"
    return None


def _contenders(
    ms: list[dict[str, Any]], candidate: str, first: dict[str, tuple[float | None, str]]
) -> list[Contender]:
    out = []
    for m in ms:
        name = _impl(m)
        if "(control" in name:  # a control isolates a cost on the page; it is not a backend to choose
            continue
        key = _first_call_key(name, candidate)
        fc, note = first.get(key, (None, "")) if key else (None, "")
        out.append(Contender(name, _number(m.get("median_ms")), _host_us(m), fc, note))
    return sorted(out, key=lambda c: (c.name != candidate, c.name))


def _params_shape(ms: list[dict[str, Any]]) -> dict[str, Any]:
    """The shape the measurements' params record (their first value of each)."""
    shape: dict[str, Any] = {}
    for m in ms:
        p = m.get("params") or {}
        for key in ("seq_len", "max_context"):
            if isinstance(p.get(key), int) and "seq_len" not in shape:
                shape["seq_len"] = p[key]
        if isinstance(p.get("head_dim"), (int, str)) and "head_dim" not in shape:
            shape["head_dim"] = str(p["head_dim"])
        if isinstance(p.get("phase"), str) and "phase" not in shape:
            shape["phase"] = p["phase"]
        if isinstance(p.get("causal"), bool) and "causal" not in shape:
            shape["causal"] = p["causal"]
        d = re.search(r", d=(\d+)$", _impl(m))
        if d and "head_dim" not in shape:
            shape["head_dim"] = d.group(1)
    return shape


def _rule_for(page: str, name: str) -> tuple[Rule, re.Match[str]] | None:
    for rule in PAGE_RULES.get(page, ()):
        if m := re.search(rule.pattern, name):
            return rule, m
    return None


def _row(
    page: str,
    title: str,
    fb: dict[str, Any],
    ms: list[dict[str, Any]],
    first: dict[str, tuple[float | None, str]],
    h: dict[str, Any] | None,
    candidate: str,
) -> ChooserRow:
    shape = {**{k: v for k, v in fb.items() if k in ("seq_len", "head_dim", "phase")}, **_params_shape(ms)}
    if h is not None and isinstance(h.get("seq_len"), int) and "seq_len" not in _params_shape(ms):
        shape["seq_len"] = h["seq_len"]
    feature = fb.get("feature", "")
    features = tuple(dict.fromkeys((feature, *fb.get("features", ()))))
    if "causal" in shape and page == "plot_26_vendor_llama_fa4":  # params say which mask, over the name
        feature = "causal" if shape["causal"] else "no mask"
        features = tuple(dict.fromkeys((feature, *(f for f in features if f not in ("causal", "no mask")))))
    if shape.get("phase") == "bwd" and "backward" not in features:
        features += ("backward",)
    baseline = str(h.get("baseline", "")) if h else ""
    verdict = str(h.get("verdict", "")) if h else ""
    winner = {"faster": candidate, "slower": baseline, "tie": "tie"}.get(verdict, MISSING)
    low, high = (_number(h.get("low")), _number(h.get("high"))) if h else (None, None)
    interval = "" if low is None or high is None else ("widened" if h and drift_bands.is_widened(h) else "in-run")
    contenders = tuple(_contenders(ms, candidate, first))
    return ChooserRow(
        feature=feature,
        features=features,
        page=page,
        title=title,
        comparison=str(h.get("name", "")) if h else "",
        head_dim=shape.get("head_dim"),
        seq_len=shape.get("seq_len"),
        phase=str(shape.get("phase", "")),
        detail=str(fb.get("detail", "")),
        contenders=contenders,
        candidate=candidate,
        baseline=baseline,
        winner=winner,
        speedup=_number(h.get("value")) if h else None,
        low=low,
        high=high,
        verdict=verdict or MISSING,
        interval=interval,
        faster_elsewhere=_faster_elsewhere(contenders, winner, baseline),
    )


def _faster_elsewhere(contenders: tuple[Contender, ...], winner: str, baseline: str) -> str:
    """The contender timed faster than the winner that the verdict did not judge, said with both times."""
    if winner in ("tie", MISSING):
        return ""
    best = {c.name: c.median_ms for c in contenders if c.median_ms is not None}
    if winner not in best:
        return ""
    faster = [n for n, t in best.items() if t < best[winner] and n not in (winner, baseline)]
    if not faster:
        return ""
    n = min(faster, key=best.__getitem__)
    return f"{n} was timed faster at this shape ({best[n]:.3f} ms against {best[winner]:.3f} ms), outside this verdict"


FIRST_CALLS_OF: dict[str, str] = {"plot_26_vendor_llama_fa4": "plot_28_first_call"}
"""A page whose first-call costs another page measures, at the same shape: plot_28 times the first
call of plot_26's Llama 3.1 layer in fresh processes. Every other page's rows take its own record's."""


def _page_rows(
    rec: dict[str, Any], others: dict[str, dict[str, Any]] | None = None
) -> tuple[list[ChooserRow], list[tuple[str, str, str]]]:
    page, title = str(rec.get("example", "")), str(rec.get("title", ""))
    ms = [m for m in rec.get("measurements", []) if isinstance(m, dict)]
    first = first_call_costs(rec) or first_call_costs((others or {}).get(FIRST_CALLS_OF.get(page, ""), {}))
    rows, excluded, used = [], [], set()
    for h in distinct_comparisons(h for h in rec.get("headlines", []) if isinstance(h, dict)):
        name = str(h.get("name", ""))
        found = _rule_for(page, name)
        if found is None:
            excluded.append((page, name, "no rule in gallery_build.chooser.PAGE_RULES maps it to a feature"))
            continue
        rule, match = found
        if rule.excluded:
            excluded.append((page, name, rule.excluded))
            continue
        fb = rule.fallback(match, rec)
        labels = {m.get("label") for m in ms}
        cand_label = h.get("candidate_measurement")
        if cand_label in labels:  # the record names the two measurements: the tag comes from them
            cm = next(m for m in ms if m.get("label") == cand_label)
            candidate, tag = _impl(cm), _tag(cm)
            group = [m for m in ms if _tag(m) == tag and fb.get("group", lambda label: True)(m.get("label", ""))]
        else:
            candidate = fb.get("candidate", "")
            if "group" in fb:
                group = [m for m in ms if _tag(m) == "" and fb["group"](str(m.get("label", "")))]
            else:
                group = [m for m in ms if _tag(m) == fb.get("tag", "")]
        used.update(id(m) for m in group)
        rows.append(_row(page, title, fb, group, first, h, candidate))
    # the lengths a sweep timed without a comparison headline: their contenders, and no winner
    sweep_points: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for m in ms if page in SWEEP_PAGES else ():
        p = m.get("params") or {}
        if id(m) not in used and isinstance(p.get("seq_len"), int):
            d = re.search(r", d=(\d+)$", _impl(m))
            sweep_points.setdefault((_tag(m), d.group(1) if d else None), []).append(m)
    for group in sweep_points.values():
        fb = SWEEP_PAGES[page]
        cands = [_impl(m) for m in group if _impl(m).startswith(fb["candidate"])]
        rows.append(_row(page, title, fb, group, first, None, cands[0] if cands else MISSING))
    return rows, excluded


def _records(gallery: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(Path(gallery).glob(f"plot_*{RECORD_SUFFIX}")):
        rec = json.loads(path.read_text(encoding="utf-8"))  # checked by the build first (validate_data)
        rec.setdefault("example", path.name[: -len(RECORD_SUFFIX)])
        out.append(rec)
    return out


def chooser_rows(gallery: Path | str) -> tuple[list[ChooserRow], list[tuple[str, str, str]]]:
    """Every recorded attention shape of a gallery folder, with its winner or ``"tie"``.

    Parameters
    ----------
    gallery
        The folder of the ``plot_*.record.json`` records (``docs/auto_examples``).

    Returns
    -------
    tuple[list[ChooserRow], list[tuple[str, str, str]]]
        The rows, by feature, head dim and length; and the comparisons left out (page, headline,
        why: not a choice between backends, or no rule for it).

    Example
    -------
    >>> rows, left_out = chooser_rows("docs/auto_examples")
    >>> {r.feature for r in rows} >= {"causal", "GQA/MQA", "varlen"}
    True
    """
    rows: list[ChooserRow] = []
    excluded: list[tuple[str, str, str]] = []
    records = _records(Path(gallery))
    by_page = {str(rec.get("example")): rec for rec in records}
    for rec in records:
        if rec.get("example") not in PAGE_RULES:
            continue
        r, e = _page_rows(rec, by_page)
        rows += r
        excluded += e
    rows.sort(key=lambda r: (r.feature.lower(), r.head_dim or "", r.seq_len or 0, r.phase, r.page, r.detail))
    return rows, excluded


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return MISSING if value is None else f"{value:{spec}}{unit}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


_CSS = """
.cg-chooser form{display:flex;flex-wrap:wrap;gap:.5em 1.5em;align-items:center;margin:.5em 0 1em}
.cg-chooser-scroll{overflow-x:auto}
.cg-chooser-table{font-size:.85em;border-collapse:collapse}
.cg-chooser-table td,.cg-chooser-table th{vertical-align:top;padding:.25em .5em}
.cg-chooser td ul{margin:0;padding-left:1em}
.cg-chooser-table td:first-child{min-width:12em}
.cg-chooser-table td:last-child{min-width:18em}
.cg-chooser-table td:nth-child(2){white-space:nowrap}
.cg-chooser .cg-winner{font-weight:600}
.cg-chooser tr[hidden]{display:none}
"""

CHOOSER_JS = """
(function () {
  document.querySelectorAll('.cg-chooser').forEach(function (root) {
    var form = root.querySelector('form');
    var rows = Array.prototype.slice.call(root.querySelectorAll('tbody tr'));
    var shown = root.querySelector('.cg-shown');
    function num(name) {
      var v = form.elements[name].value.trim();
      return v === '' ? null : Number(v);
    }
    function apply() {
      var feature = form.elements.feature.value, dim = form.elements.head_dim.value;
      var lo = num('seq_min'), hi = num('seq_max'), n = 0;
      rows.forEach(function (tr) {
        var feats = (tr.dataset.features || '').split(' ');
        var s = tr.dataset.seqLen === '' ? null : Number(tr.dataset.seqLen);
        var ok = (feature === '' || feats.indexOf(feature) >= 0)
          && (dim === '' || tr.dataset.headDim === dim)
          && (lo === null || (s !== null && s >= lo))
          && (hi === null || (s !== null && s <= hi));
        tr.hidden = !ok;
        if (ok) { n += 1; }
      });
      shown.textContent = n + ' of ' + rows.length + ' shapes shown';
    }
    form.addEventListener('input', apply);
    form.addEventListener('change', apply);
    form.addEventListener('submit', function (e) { e.preventDefault(); apply(); });
    apply();
  });
})();
"""
"""The filter: hides the rows that do not match the feature, head dim and length range chosen."""


def _contenders_html(row: ChooserRow) -> str:
    items = []
    for c in row.contenders:
        first = (
            ""
            if c.first_call_ms is None and not c.first_call_note
            else (f"; first call {_fmt(c.first_call_ms, ',.0f', ' ms')} ({c.first_call_note})")
        )
        items.append(
            f"<li>{html.escape(c.name)}: {_fmt(c.median_ms, '.3f', ' ms')} GPU · "
            f"{_fmt(c.host_us, '.1f', ' µs')} host{html.escape(first)}</li>"
        )
    return "<ul>" + "".join(items) + "</ul>" if items else MISSING


def render_html(rows: list[ChooserRow], page_prefix: str = "auto_examples/") -> str:
    """The chooser's filter form and table; every recorded string is HTML-escaped.

    Each row carries ``data-features`` (space-separated slugs), ``data-head-dim`` and
    ``data-seq-len`` (empty where not recorded); :data:`CHOOSER_JS`, inline, filters on them.

    Parameters
    ----------
    rows
        :func:`chooser_rows`' rows.
    page_prefix
        The gallery folder, relative to the page that shows the table.

    Returns
    -------
    str
        HTML: a ``<div class="cg-chooser">`` with the form, the table and the script.

    Example
    -------
    >>> "<script>alert" in render_html(chooser_rows("docs/auto_examples")[0])
    False
    """
    from urllib.parse import quote

    features = sorted({f for r in rows for f in r.features}, key=str.lower)
    dims = sorted({r.head_dim for r in rows if r.head_dim}, key=lambda d: [int(x) for x in re.findall(r"\d+", d)])
    opts_f = "".join(f'<option value="{html.escape(_slug(f))}">{html.escape(f)}</option>' for f in features)
    opts_d = "".join(f'<option value="{html.escape(d)}">{html.escape(d)}</option>' for d in dims)
    form = (
        '<form class="cg-chooser-filter" autocomplete="off">'
        f'<label>Feature <select name="feature"><option value="">any</option>{opts_f}</select></label>'
        f'<label>Head dim <select name="head_dim"><option value="">any</option>{opts_d}</select></label>'
        '<label>Sequence length from <input type="number" name="seq_min" min="1" step="1" size="7"></label>'
        '<label>to <input type="number" name="seq_max" min="1" step="1" size="7"></label>'
        f'<output class="cg-shown">{len(rows)} of {len(rows)} shapes shown</output>'
        "</form>"
    )
    head = (
        "<thead><tr><th>feature</th><th>head dim, length, phase</th><th>winner</th>"
        "<th>speed-up [interval]</th><th>contenders: GPU time · host time per call; first call</th></tr></thead>"
    )
    body = []
    for r in rows:
        if not r.comparison:
            speed = f"{MISSING}: the record holds no comparison at this shape"
        elif r.speedup is None:
            speed = MISSING
        else:
            iv = "" if r.low is None or r.high is None else f" [{r.low:.2f}–{r.high:.2f}, {r.interval}]"
            speed = f"{r.speedup:.2f}×{iv}: {html.escape(r.verdict)}"
        if r.comparison:
            speed += f"<br>over {html.escape(r.baseline or MISSING)}"
        link = f'<a href="{html.escape(page_prefix + quote(r.page))}.html">{html.escape(r.title or r.page)}</a>'
        notes = [html.escape(r.detail)] if r.detail else []
        notes += [link] + ([f"“{html.escape(r.comparison)}”"] if r.comparison else [])
        feature = f"{html.escape(r.feature)}<br><small>{'<br>'.join(notes)}</small>"
        body.append(
            f'<tr data-features="{html.escape(" ".join(_slug(f) for f in r.features))}" '
            f'data-head-dim="{html.escape(r.head_dim or "")}" '
            f'data-seq-len="{"" if r.seq_len is None else int(r.seq_len)}">'
            f"<td>{feature}</td><td>d {html.escape(r.head_dim or MISSING)}<br>"
            f"S {MISSING if r.seq_len is None else int(r.seq_len)}<br>{html.escape(r.phase or MISSING)}</td>"
            f'<td class="cg-winner">{html.escape(r.winner)}'
            + (f'<br><span class="cg-faster">{html.escape(r.faster_elsewhere)}</span>' if r.faster_elsewhere else "")
            + f"</td><td>{speed}</td>"
            f"<td>{_contenders_html(r)}</td></tr>"
        )
    table = (
        f'<div class="cg-chooser-scroll"><table class="cg-chooser-table docutils">{head}'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )
    return f'<div class="cg-chooser"><style>{_CSS}</style>{form}{table}<script>{CHOOSER_JS}</script></div>'
