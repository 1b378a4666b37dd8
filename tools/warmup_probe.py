"""Does warming a contender up once per comparison give the same verdicts in less time? Run on a GPU.

:func:`~cudnn_guide.measure.compare.compare` used to give every contender a full warm-up (the
first-call check, then ``warmup_ms`` of calls in doubling batches) in every round. Since issue 34
only a contender's first round does; the later ones re-prime it with
:data:`~cudnn_guide.measure.compare.REWARM_CALLS` calls and reuse the first warm-up's sizing
(``rewarm=True``, the default). This probe races the same two pairs under three rules:

- ``full``: ``rewarm=False``, the full warm-up every round (the rule before);
- ``rewarm 2``: the default, 2 calls from the second round on;
- ``rewarm 1``: 1 call (``REWARM_CALLS = 1``), to see whether one is enough.

Since 4f40a0d a call of at least :data:`~cudnn_guide.measure.bench.LONG_CALL_MS` is re-primed with one
call under either ``rewarm`` rule, so the two differ only for shorter calls (both pairs here are).

The pairs: a plot_26 shape (the Llama 3.1 layer, ``B=2, H=64, Hkv=8, D=128``, 8192 tokens, causal
forward: a few ms per call), cuDNN's SDPA graph against FlashAttention-4 where it imports and
against PyTorch SDPA's flash backend otherwise, with plot_26's settings (cold L2,
``vendor_llama_table.timing``); and a short pair (1024 tokens, 16 heads, no mask: tens of µs per
call), the same two contenders under :func:`compare`'s defaults. Each rule runs ``REPS`` times per
pair, the rules' order rotating each repetition and the round orders' seed changing with it.

For each pair and rule the file keeps every comparison (wall seconds, rounds, the sum of
``n × median`` over its timed calls, the speed-up with its in-run interval, tie band and verdict)
and a summary: the median wall seconds and, against ``full``, the wall-time saving (the median
of the per-repetition ratios full / rule, with its bootstrap 95% interval); the median speed-up
under each rule, the median of its intervals' bounds, and whether each comparison's interval
overlaps the ``full`` rule's median interval. The new rule passes when its speed-ups agree with
``full``'s (within those intervals, same verdicts) in less wall time.

``PYTHONPATH=docs/_ext:. python tools/warmup_probe.py docs/data/warmup_probe.json [REPS]``
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

RULES = ("full", "rewarm 2", "rewarm 1")
REPS = 6
LONG = {"batch": 2, "heads": 64, "kv_heads": 8, "head_dim": 128, "seq": 8192, "causal": True}
SHORT = {"batch": 2, "heads": 16, "kv_heads": 16, "head_dim": 128, "seq": 1024, "causal": False}
CUDNN = "cuDNN SDPA graph"


def rule_settings(rule: str) -> tuple[bool, int]:
    """``compare``'s ``rewarm`` and :data:`~cudnn_guide.measure.compare.REWARM_CALLS` for a rule.

    Example
    -------
    >>> rule_settings("rewarm 1")
    (True, 1)
    """
    if rule == "full":
        return False, 2
    return True, int(rule.split()[1])


def rotated(rules: Sequence[str], rep: int) -> list[str]:
    """The rules in the order of repetition ``rep``: rotated by one each time, so none always runs first.

    Example
    -------
    >>> rotated(["a", "b", "c"], 1)
    ['b', 'c', 'a']
    """
    k = rep % len(rules)
    return [*rules[k:], *rules[:k]]


def timed_seconds(measurements: Mapping[str, Any]) -> float:
    """The sum of ``n × median`` over a comparison's pooled measurements, in seconds: its timed calls."""
    return sum(len(m.samples_ms) * m.median_ms for m in measurements.values()) / 1e3


def summarize(rows: Sequence[Mapping[str, Any]], baseline_rule: str = "full") -> dict[str, Any]:
    """Per rule: wall seconds, the saving against ``baseline_rule`` and whether the speed-ups agree.

    Parameters
    ----------
    rows
        One per comparison: ``rule``, ``rep``, ``wall_s``, ``timed_s``, ``value``, ``low``, ``high``,
        ``verdict``.
    baseline_rule
        The rule the others are judged against.

    Returns
    -------
    dict[str, Any]
        Rule → ``wall_s_median``, ``timed_share_median``, ``speed_up_median``, ``low_median``,
        ``high_median``, ``verdicts`` (counts) and, for the other rules, ``wall_saving`` (median of
        the paired ratios baseline wall / rule wall, ``low``, ``high``), ``overlaps_baseline`` (how
        many of its intervals overlap the baseline's median interval, of how many) and
        ``same_verdict`` (whether its verdicts are the baseline's).

    Example
    -------
    >>> summarize(rows)["rewarm 2"]["wall_saving"]["value"]
    1.4
    """
    from cudnn_guide.measure.verdicts import bootstrap_median_ci

    by_rule: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_rule.setdefault(r["rule"], []).append(r)
    out: dict[str, Any] = {}
    for rule, rs in by_rule.items():
        out[rule] = {
            "comparisons": len(rs),
            "wall_s_median": statistics.median(r["wall_s"] for r in rs),
            "timed_share_median": statistics.median(r["timed_s"] / r["wall_s"] for r in rs),
            "speed_up_median": statistics.median(r["value"] for r in rs),
            "low_median": statistics.median(r["low"] for r in rs),
            "high_median": statistics.median(r["high"] for r in rs),
            "verdicts": {v: sum(r["verdict"] == v for r in rs) for v in sorted({r["verdict"] for r in rs})},
        }
    base = out.get(baseline_rule)
    if base is None:
        return out
    base_wall = {r["rep"]: r["wall_s"] for r in by_rule[baseline_rule]}
    for rule, rs in by_rule.items():
        if rule == baseline_rule:
            continue
        ratios = [base_wall[r["rep"]] / r["wall_s"] for r in rs if r["rep"] in base_wall]
        saving: dict[str, float | None] = {"value": statistics.median(ratios) if ratios else None}
        saving["low"], saving["high"] = bootstrap_median_ci(ratios) if len(ratios) >= 5 else (None, None)
        overlap = sum(r["low"] <= base["high_median"] and r["high"] >= base["low_median"] for r in rs)
        out[rule] |= {
            "wall_saving": saving,
            "overlaps_baseline": [overlap, len(rs)],
            "same_verdict": out[rule]["verdicts"] == base["verdicts"],
        }
    return out


def contenders(shape: Mapping[str, Any], handle: Any) -> tuple[dict[str, Callable[[], Any]], str, float, Any]:
    """cuDNN's forward graph and the baseline for ``shape``, each run once; the baseline's name, FLOPs, tensors."""
    import cudnn
    import torch

    from cudnn_guide.measure import baselines, fa4
    from cudnn_guide.studies import vendor_llama_table as vlt

    layer = vlt.LlamaLayer(shape["batch"], shape["heads"], shape["kv_heads"], shape["head_dim"])
    s, causal = shape["seq"], shape["causal"]
    t = layer.tensors(s)
    top_left = {"diagonal_alignment": cudnn.diagonal_alignment.TOP_LEFT, "diagonal_band_right_bound": 0}
    mask = top_left if causal else {}  # plot_26's CAUSAL
    fwd, _ = vlt.attention_graphs(handle, mask, **t)
    ok, _ = fa4.status()
    if ok:
        from flash_attn.cute import flash_attn_func

        lse = vlt.lse_keywords(flash_attn_func)
        name = fa4.label()
        other = lambda: flash_attn_func(t["q"], t["k"], t["v"], causal=causal, **lse)
    else:
        from torch.nn.attention import SDPBackend

        name = baselines.SDPA_BACKEND_NAMES["PyTorch flash"]
        rep = shape["heads"] // shape["kv_heads"]
        q = vlt.bhsd(t["q"])
        k, v = (vlt.bhsd(t[n]).repeat_interleave(rep, dim=1).contiguous() for n in ("k", "v"))  # flash: no GQA
        attend = baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=causal)
        other = lambda: attend(q, k, v)
    for fn in (fwd, other):
        fn()
    torch.cuda.synchronize()
    return {CUDNN: fwd, name: other}, name, layer.flops(s, causal, False), t


def race(pair: str, fns: Mapping[str, Callable[[], Any]], rule: str, rep: int, settings: Mapping[str, Any]) -> dict:
    """One comparison under ``rule``: its wall seconds, timed seconds and the speed-up over the baseline."""
    import torch

    from cudnn_guide.measure import compare

    rewarm, calls = rule_settings(rule)
    saved = compare.REWARM_CALLS
    compare.REWARM_CALLS = calls
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        c = compare.compare(fns, candidate=CUDNN, seed=rep, wall_clock=False, rewarm=rewarm, **settings)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    finally:
        compare.REWARM_CALLS = saved
    baseline = next(n for n in fns if n != CUDNN)
    v = c.versus[baseline]
    clocks = c.measurements[CUDNN].clocks or {}
    return {
        "pair": pair,
        "rule": rule,
        "rep": rep,
        "wall_s": wall,
        "timed_s": timed_seconds(c.measurements),
        "rounds": c.rounds,
        "rounds_cap": c.rounds_cap,
        "tie_band": c.tie_band,
        **{k: v[k] for k in ("value", "low", "high", "verdict")},
        "cudnn_median_ms": statistics.median(c.round_medians_ms[CUDNN]),
        "baseline_median_ms": statistics.median(c.round_medians_ms[baseline]),
        "timed_calls": {n: len(m.samples_ms) for n, m in c.measurements.items()},
        "sm_mhz_end": clocks.get("sm_mhz_end"),
        "power_capped_fraction": clocks.get("power_capped_fraction"),
    }


def main(path: str, reps: int = REPS) -> None:
    import cudnn
    import torch

    from cudnn_guide import environment
    from cudnn_guide.studies import vendor_llama_table as vlt

    torch.manual_seed(0)
    handle = cudnn.create_handle()
    pairs = {
        "long (plot_26 shape)": (LONG, {"l2": "cold", **vlt.timing(LONG["seq"])}),
        "short": (SHORT, {"l2": "cold"}),
    }
    rows, info = [], {}
    for pair, (shape, settings) in pairs.items():
        fns, name, flops, t = contenders(shape, handle)
        info[pair] = {"shape": shape, "baseline": name, "settings": settings}
        for rep in range(reps):
            for rule in rotated(RULES, rep):
                r = race(pair, fns, rule, rep, {**settings, "flops": flops})
                rows.append(r)
                print(
                    f"{pair:22s} {rule:9s} rep {rep}: {r['wall_s']:6.2f} s wall, {r['timed_s']:6.2f} s timed, "
                    f"{r['rounds']} rounds, speed-up {r['value']:.3f} [{r['low']:.3f}–{r['high']:.3f}] {r['verdict']}",
                    flush=True,
                )
        del fns, t  # free this pair's tensors before the next
        torch.cuda.empty_cache()
    summary = {pair: summarize([r for r in rows if r["pair"] == pair]) for pair in pairs}
    print(json.dumps(summary, indent=1))
    data = {
        "environment": environment.collect().to_dict(),
        "rules": list(RULES),
        "reps": reps,
        "pairs": info,
        "summary": summary,
        "rows": rows,
    }
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
