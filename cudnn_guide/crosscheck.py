"""Cross-check the harness against independent clocks on the gallery's main kernels.

For each kernel: the harness median (:func:`~cudnn_guide.bench.benchmark`, CUDA events around
one call, cold L2); the per-call kernel time the PyTorch profiler reports (CUPTI timestamps,
:func:`~cudnn_guide.bench.profile_kernels`, cold L2); and the per-call time of a CUDA-graph
replay of 100 calls (hot L2, no launch gaps). Run as ``python -m cudnn_guide.crosscheck OUT.json``
on a GPU; the methodology page renders the committed result.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

__all__ = ["kernels", "crosscheck", "main"]


def kernels() -> dict[str, tuple[Callable[[], Any], float | None]]:
    """The gallery's main kernels as launchers: name → (launch, flops).

    Returns
    -------
    dict[str, tuple[Callable[[], Any], float | None]]
        Name → (launcher, FLOPs per call).

    Example
    -------
    >>> for name, (launch, flops) in kernels().items(): print(name)
    """
    import torch

    from . import recipes, tensors

    out: dict[str, tuple[Callable[[], Any], float | None]] = {}
    conv = recipes.ConvProblem()
    ci = conv.make_inputs()
    cf = recipes.conv_bias_relu_graph(conv, ci)
    out["conv→bias→ReLU (cuDNN graph)"] = (cf.built.bind(cf.pack(**ci)), conv.flops)
    mm = recipes.MatmulProblem()
    mi = mm.make_inputs()
    mf = recipes.matmul_epilogue_graph(mm, mi)
    out["matmul epilogue + AMAX (cuDNN graph)"] = (mf.built.bind(mf.pack(**mi, alpha=tensors.scalar_value(mm.alpha))), mm.flops)
    sd = recipes.SdpaProblem(batch=4, heads=16, seq=4096, head_dim=128)
    si = sd.make_inputs()
    sf = recipes.sdpa_graph(sd, si)
    out["causal SDPA S=4096 d=128 (cuDNN graph)"] = (sf.built.bind(sf.pack(**si)), sd.flops)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    out["bf16 matmul 8192³ (cuBLAS)"] = (lambda: torch.matmul(a, b, out=c), 2 * 8192**3)
    return out


def crosscheck() -> list[dict[str, Any]]:
    """Time each of :func:`kernels` three ways (harness, profiler, graph replay); one row per kernel.

    Returns
    -------
    list[dict[str, Any]]
        One dict per kernel: the three times and their ratio.

    Example
    -------
    >>> rows = crosscheck()
    >>> print(rows[0]['harness_vs_profiler_pct'])
    """
    from . import bench, cudagraphs

    rows = []
    for name, (launch, flops) in kernels().items():
        m = bench.benchmark(launch, label=name, l2="cold", flops=flops, budget_ms=300)
        prof = bench.profile_kernels(launch, calls=50, l2="cold", label=name)
        replay = cudagraphs.time_replay(cudagraphs.capture(launch, calls=100, label=name), label=name, reps=20)
        rows.append({
            "kernel": name,
            "harness_median_us": m.median_ms * 1e3,
            "harness_iqr_us": m.iqr_ms * 1e3,
            "profiler_us": prof.per_call_ms * 1e3,
            "replay_hot_us": replay.median_ms * 1e3,
            "harness_vs_profiler_pct": 100 * (m.median_ms / prof.per_call_ms - 1),
            "kernels": prof.top(3),
        })
    return rows


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - GPU only
    """``python -m cudnn_guide.crosscheck [OUT.json]``: run :func:`crosscheck`, print and save the table.

    Parameters
    ----------
    argv
        Optional output path; default ``sys.argv[1:]``.

    Example
    -------
    .. code-block:: bash

       python -m cudnn_guide.crosscheck docs/data/crosscheck.json
    """
    from . import environment

    argv = sys.argv[1:] if argv is None else argv
    rows = crosscheck()
    data = {"environment": environment.collect().to_dict(), "rows": rows}
    text = json.dumps(data, indent=1)
    if argv:
        with open(argv[0], "w", encoding="utf-8") as f:
            f.write(text + "\n")
    for r in rows:
        print(f"{r['kernel']:42s} harness {r['harness_median_us']:9.1f} µs  profiler {r['profiler_us']:9.1f} µs "
              f"({r['harness_vs_profiler_pct']:+5.1f}%)  replay(hot) {r['replay_hot_us']:9.1f} µs")


if __name__ == "__main__":  # pragma: no cover
    main()
