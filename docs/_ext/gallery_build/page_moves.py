"""Pages split off another page, or renamed: each inherits the recordings of the page its content came from.

A page's drift (:mod:`gallery_build.drift_bands`) and a headline's range across recordings
(:mod:`gallery_build.machine_dependence`) are read from the page's history. A page split off
another (issue 33: one idea per page) or renamed starts with none, and its headlines would be
widened by the whole site's drift instead of their own. :data:`MOVED_FROM` names, for each such
page, the page its measurements were recorded under before; :func:`with_lineage` gives it that
page's recordings first, so the measurements it kept, under the same names, keep their history.

A recording of the old page and one of the new never form a comparable pair: their code differs
(:func:`gallery_build.history.comparable`), so no change is ever measured across the move.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MOVED_FROM", "lineage", "with_lineage"]

MOVED_FROM: dict[str, str] = {
    "plot_24_softcap": "plot_24_softcap_sinks_mla",
    "plot_27_mla": "plot_24_softcap_sinks_mla",
    "plot_28_first_call": "plot_26_vendor_llama_fa4",
    "plot_29_libcudnn_and_logs": "plot_22_troubleshooting",
    "plot_30_cudnn_torch_provider": "plot_25_transformer_block",
    "plot_31_opensource_engines": "plot_19_flex_attention_oss",
    "plot_32_varlen_backward": "plot_17_varlen_attention",
    "plot_33_chunked_prefill": "plot_18_attention_masks",
    "plot_34_custom_op_vs_shipped": "plot_23_pytorch_custom_op",
    "plot_35_attention_sinks": "plot_24_softcap_sinks_mla",
}
"""New page's stem → the stem its measurements were recorded under before the split or rename."""


def lineage(page: str, moves: dict[str, str] | None = None) -> tuple[str, ...]:
    """``page`` and the pages it came from, newest first (a cycle in ``moves`` stops at its first repeat).

    Example
    -------
    >>> lineage("plot_35_attention_sinks")
    ('plot_35_attention_sinks', 'plot_24_softcap_sinks_mla')
    >>> lineage("plot_02_conv_bias_relu")
    ('plot_02_conv_bias_relu',)
    """
    moves = MOVED_FROM if moves is None else moves
    out = [page]
    while out[-1] in moves and moves[out[-1]] not in out:
        out.append(moves[out[-1]])
    return tuple(out)


def with_lineage(
    groups: dict[str, list[dict[str, Any]]], moves: dict[str, str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Each page's entries (:func:`gallery_build.history.by_example`), preceded by those of the pages it came from.

    A moved page with no recording of its own yet appears too, with its sources' entries alone,
    so that its first recording is widened by their drift. Entries are sorted by recording time.

    Example
    -------
    >>> old = [{"example": "a", "recorded_utc": "1"}, {"example": "a", "recorded_utc": "2"}]
    >>> [e["recorded_utc"] for e in with_lineage({"a": old}, {"b": "a"})["b"]]
    ['1', '2']
    """
    moves = MOVED_FROM if moves is None else moves
    out = dict(groups)
    for page in moves:
        entries = [e for stem in lineage(page, moves) for e in groups.get(stem, [])]
        if entries and len(lineage(page, moves)) > 1:
            out[page] = sorted(entries, key=lambda e: e.get("recorded_utc") or "")
    return dict(sorted(out.items()))
