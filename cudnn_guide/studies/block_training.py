"""A transformer block trained with the guide's cuDNN attention op, raced like for like: the block page's study.

The transformer block page trains the pre-norm block of :mod:`cudnn_guide.graphs.block` with the
guide's cuDNN op as its attention, against the same block with PyTorch's SDPA (eager and compiled)
and with FlashAttention-4 (eager), on GPU time and on the wall clock. This module holds the
plumbing of that race and how the page reads it:

* :func:`check_fa4_block`: the FlashAttention-4 block checked like the others, or why it cannot
  run here;
* :func:`default_sdpa_kernels`: which backend's kernel PyTorch's default SDPA runs, eager and
  compiled;
* :func:`output_copies`: which blocks copy the attention output when they reshape it back;
* :func:`verdict_table`, :func:`times_table` and :func:`throughput_table`: the page's tables of
  like-for-like verdicts, of GPU, host and wall-clock time per step, and of tokens per second,
  TFLOP/s and peak memory;
* :func:`conclusions`: the page's sentences.

The block, its checks and its steps need a GPU; the tables and the sentences do not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "check_fa4_block",
    "conclusions",
    "default_sdpa_kernels",
    "output_copies",
    "throughput_table",
    "times_table",
    "verdict_table",
]


def check_fa4_block(check_block: Callable[[Any, str], Any], model: Any, label: str) -> str | None:
    """Check the block with FlashAttention-4 as ``"block with <label>"``; or say why it cannot run here.

    A block that runs and computes a wrong result stops the page (the
    :class:`~cudnn_guide.errors.CheckFailedError` propagates). A block that raises anything else
    (FlashAttention-4 cannot run it here) is said, ``"<label>: unavailable here (<why>)"``, and
    left out.

    Parameters
    ----------
    check_block
        The block's check (:class:`cudnn_guide.check.ModuleCheck`), called as
        ``check_block(model, name)``; it prints its results.
    model
        The block with FlashAttention-4 as its attention.
    label
        FlashAttention-4's display name (:func:`cudnn_guide.measure.fa4.label`).

    Returns
    -------
    str | None
        ``None`` when the block passed; otherwise ``"ExceptionType: first line of its message"``
        (at most 160 characters of it).

    Example
    -------
    >>> eager_fa4 = block.variant(template, fa4.attention(causal=True, scale=D**-0.5), bshd=True)
    >>> fa4_why = check_fa4_block(check_block, eager_fa4, FA4)
    """
    from cudnn_guide.errors import CheckFailedError

    try:
        check_block(model, f"block with {label}")
    except CheckFailedError:  # a wrong result stops the page
        raise
    except Exception as exc:  # FA4 cannot run this block here: said, not hidden
        why = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
        print(f"{label}: unavailable here ({why})")
        return why
    return None


def default_sdpa_kernels(
    batch: int, heads: int, seq: int, head_dim: int, generator: Any, *, device: str = "cuda"
) -> tuple[list[str], list[str]]:
    """Which forced SDPA backends PyTorch's default causal SDPA matches bit for bit, eager and compiled.

    Q, K and V (B×H×S×D, bf16, requiring gradients as in training) are drawn from ``generator`` in
    that order; PyTorch's default SDPA (:func:`~cudnn_guide.graphs.block.torch_attention`) eager
    and under ``torch.compile(fullgraph=True)`` is compared with the cuDNN, flash and efficient
    backends, each forced in turn (:func:`~cudnn_guide.measure.baselines.sdpa_matches`). The
    matches are printed, eager then compiled (``"none of the forced backends"`` where none).

    Parameters
    ----------
    batch
        Sequences B.
    heads
        Heads H.
    seq
        Tokens S.
    head_dim
        Head dimension D.
    generator
        The ``torch.Generator`` the inputs are drawn from (on ``device``).
    device
        The inputs' device.

    Returns
    -------
    tuple[list[str], list[str]]
        The matched backends' names (``SDPBackend.name``, in the order cuDNN, flash, efficient),
        eager then compiled; empty where none matched.

    Example
    -------
    >>> picked, picked_compiled = default_sdpa_kernels(8, 16, 2048, 128, gen)
    >>> picked
    ['CUDNN_ATTENTION']
    """
    import torch
    from torch.nn.attention import SDPBackend

    from cudnn_guide.graphs import block
    from cudnn_guide.measure import baselines

    shape = (batch, heads, seq, head_dim)
    qkv = [
        torch.randn(*shape, device=device, dtype=torch.bfloat16, generator=generator).requires_grad_() for _ in range(3)
    ]
    default_sdpa = {
        "eager": block.torch_attention,
        "compiled": torch.compile(block.torch_attention, fullgraph=True),
    }
    forced = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    matches = baselines.sdpa_matches(default_sdpa, qkv, forced, is_causal=True)
    picked, picked_compiled = matches["eager"], matches["compiled"]
    print("PyTorch's default SDPA matches, bit for bit:")
    print("  eager:", ", ".join(picked) or "none of the forced backends")
    print("  compiled:", ", ".join(picked_compiled) or "none of the forced backends")
    return picked, picked_compiled


def output_copies(q: Any, k: Any, v: Any, bshd: Mapping[str, Callable[..., Any]]) -> dict[str, bool]:
    """Whether each block's attention output is copied when the block reshapes it back to B×S×(H·D).

    The guide's cuDNN op (``"the cuDNN op"``) and PyTorch's SDPA (``"PyTorch SDPA"``), both on
    B×H×S×D, then each attention of ``bshd`` on B×S×H×D copies of ``q``, ``k`` and ``v``, run once
    without autograd (:func:`~cudnn_guide.graphs.block.output_copied`). Each answer is printed,
    ``"<name>: the output's reshape is a copy"`` (or ``a view``).

    Parameters
    ----------
    q
        B×H×S×D queries.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    bshd
        Name → an attention taking and returning B×S×H×D tensors (FlashAttention-4's); may be empty.

    Returns
    -------
    dict[str, bool]
        Name → ``True`` for a copy, ``False`` for a view, in the order printed.

    Example
    -------
    >>> output_copied = output_copies(q, k, v, {FA4: fa4_attention})
    """
    from cudnn_guide.graphs import block

    attention_out = {"the cuDNN op": block.cudnn_attention, "PyTorch SDPA": block.torch_attention}
    copied = {n: block.output_copied(a, q, k, v) for n, a in attention_out.items()}
    for name, attend in bshd.items():  # the B×H×S×D tensors, copied to B×S×H×D
        copied[name] = block.output_copied(attend, q, k, v, bshd=True)
    for name, c in copied.items():
        print(f"{name}: the output's reshape is {'a copy' if c else 'a view'}")
    return copied


def verdict_table(eager: Any, compiled: Any, measure: str) -> Any:
    """The table of like-for-like verdicts: the eager op against each eager baseline, the compiled one against its.

    One row per pair (:func:`~cudnn_guide.report.tables.verdict_rows`, candidate column
    ``"cuDNN op"``): first ``eager`` against each of its baselines, in their order, then
    ``compiled`` against each of its.

    Parameters
    ----------
    eager
        The eager op's :class:`~cudnn_guide.measure.compare.Comparison` against the eager
        baselines (:func:`~cudnn_guide.measure.compare.rejudged`).
    compiled
        The compiled op's comparison against the compiled baseline.
    measure
        The speed-up's column, e.g. ``"GPU-time speed-up"``.

    Returns
    -------
    Any
        The table (:func:`~cudnn_guide.report.tables.html_table`), the speed-up as ``1.23×``.

    Example
    -------
    >>> verdict_table(eager_cmp, compiled_cmp, "GPU-time speed-up")
    """
    import pandas as pd

    from cudnn_guide.report.tables import html_table, verdict_rows

    pairs = [(c, b) for c in (eager, compiled) for b in c.versus]
    rows = pd.DataFrame(verdict_rows(pairs, measure, candidate="cuDNN op"))
    return html_table(rows, {measure: "{:.2f}×"})


def times_table(result: Any, wall: Any, label: str) -> Any:
    """The table of each step's GPU time, host time to enqueue it on an idle GPU, and wall-clock time.

    The rows are :func:`~cudnn_guide.report.tables.time_rows`', the times in whole µs.

    Parameters
    ----------
    result
        The :class:`~cudnn_guide.measure.compare.Comparison` on GPU time.
    wall
        The wall-clock comparison of the same contenders
        (:func:`~cudnn_guide.measure.compare.compare_host`).
    label
        The contenders' column, e.g. ``"training step"``.

    Returns
    -------
    Any
        The table (:func:`~cudnn_guide.report.tables.html_table`).

    Example
    -------
    >>> times_table(result, wall, "training step")
    """
    import pandas as pd

    from cudnn_guide.report.tables import html_table, time_rows

    times = pd.DataFrame(time_rows(result, wall, label))
    return html_table(times, {c: "{:,.0f}" for c in ("GPU µs", "host µs to enqueue", "wall-clock µs")})


def throughput_table(result: Any, tokens: int, peak_mib: Mapping[str, float]) -> Any:
    """The table of each training step's time, tokens per second, TFLOP/s and peak memory, fastest first.

    Time and rates are the comparison's estimates (median over rounds); tokens per second invert
    the time's in-run interval (:func:`~cudnn_guide.measure.measurement.per_second`).

    Parameters
    ----------
    result
        The :class:`~cudnn_guide.measure.compare.Comparison` of the training steps, with ``flops``.
    tokens
        Tokens per step (B·S).
    peak_mib
        Contender → the peak memory of one step, MiB
        (:func:`~cudnn_guide.measure.bench.peak_memory_mib`).

    Returns
    -------
    Any
        The table (:func:`~cudnn_guide.report.tables.html_table`) with the columns
        ``"training step"``, ``"ms"``, ``"tokens/s"``, ``"in-run interval"`` (of tokens/s),
        ``"TFLOP/s"`` and ``"peak MiB"``, sorted by ``"ms"``.

    Example
    -------
    >>> throughput_table(result, B * S, peak_mib)
    """
    import pandas as pd

    from cudnn_guide.measure.measurement import per_second
    from cudnn_guide.report.tables import html_table

    rows = []
    for name in result.measurements:
        t = per_second(result.estimate(name), tokens)
        rows.append(
            {
                "training step": name,
                "ms": result.estimate(name)["value"] / 1e3,
                "tokens/s": t["value"],
                "in-run interval": f"{t['low']:,.0f}–{t['high']:,.0f}",
                "TFLOP/s": result.estimate(name, "TFLOP/s")["value"],
                "peak MiB": peak_mib[name],
            }
        )
    return html_table(
        pd.DataFrame(rows).sort_values("ms"),
        {"ms": "{:.2f}", "tokens/s": "{:,.0f}", "TFLOP/s": "{:.0f}", "peak MiB": "{:.0f}"},
    )


def conclusions(
    result: Any,
    wall: Any,
    *,
    eager: tuple[Any, Any, str],
    compiled: tuple[Any, Any, str],
    kernels: tuple[Sequence[str], Sequence[str]],
    fa4: tuple[str, str | None],
    output_copied: Mapping[str, bool],
    output_bytes: int,
    rate: Mapping[str, float],
    peak_mib: Mapping[str, float],
) -> list[str]:
    """The block page's conclusions: like for like on both clocks, the layouts, the rate, host time, memory.

    In order: the eager op against eager PyTorch, and the compiled op against compiled PyTorch,
    each on GPU time and on the wall clock, with which kernel PyTorch's SDPA ran
    (:func:`~cudnn_guide.report.prose.sdpa_kernel_note`); the eager op against FlashAttention-4's
    block (``"<fa4 label>, eager"``), or why that was not timed; whether the blocks copy the
    attention output alike; the compiled op's tokens per second and torch.compile's own share
    (the compiled op against the eager one); each step's host time against its GPU time
    (:func:`~cudnn_guide.report.prose.loop_note`); each step's peak memory.

    Parameters
    ----------
    result
        The :class:`~cudnn_guide.measure.compare.Comparison` on GPU time; its candidate is the
        compiled op.
    wall
        The wall-clock comparison of the same contenders.
    eager
        ``(GPU-time comparison, wall-clock comparison, baseline)``: the eager op (their candidate)
        against eager PyTorch (the baseline), and against FlashAttention-4 where it ran
        (:func:`~cudnn_guide.measure.compare.rejudged`).
    compiled
        The same for the compiled op against compiled PyTorch.
    kernels
        The forced backends PyTorch's default SDPA matched, eager then compiled
        (:func:`default_sdpa_kernels`).
    fa4
        ``(label, why)``: FlashAttention-4's display name, and why its block was not timed
        (``None`` where it was).
    output_copied
        Block name → whether its attention output's reshape to B×S×(H·D) is a copy
        (:func:`~cudnn_guide.graphs.block.output_copied`).
    output_bytes
        The bytes of one attention output (B×S×(H·D)).
    rate
        The compiled op's tokens per second, ``{"value", "low", "high"}``.
    peak_mib
        Contender → the peak memory of one step, MiB.

    Returns
    -------
    list[str]
        Paragraphs and list items (``"* ..."``) for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(result, wall, eager=(eager_cmp, wall_eager, "PyTorch eager"), ...))
    """
    from cudnn_guide.report.prose import listed, loop_note, sdpa_kernel_note

    eager_cmp, wall_eager, eager_baseline = eager
    compiled_cmp, wall_compiled, compiled_baseline = compiled
    picked, picked_compiled = kernels
    fa4_label, fa4_why = fa4
    fa4_eager = f"{fa4_label}, eager"
    cand, eager_op = result.candidate, eager_cmp.candidate
    sentences = [
        "Eager against eager: the block with the cuDNN op is "
        f"{eager_cmp.describe(eager_baseline)} on GPU time, and "
        f"{wall_eager.describe(eager_baseline)} on the wall clock. " + sdpa_kernel_note(picked, "eager"),
        "Compiled against compiled: the block with the cuDNN op is "
        f"{compiled_cmp.describe(compiled_baseline)} on GPU time, and "
        f"{wall_compiled.describe(compiled_baseline)} on the wall clock. "
        + sdpa_kernel_note(picked_compiled, "compiled"),
    ]
    if fa4_eager in eager_cmp.versus:
        sentences.append(
            f"Against {fa4_label} as the block's attention (eager): the block with the cuDNN op "
            f"is {eager_cmp.describe(fa4_eager)} on GPU time, and "
            f"{wall_eager.describe(fa4_eager)} on the wall clock."
        )
    else:
        sentences.append(f"{fa4_label} was not timed in the block: {fa4_why}.")
    copied = [n for n, c in output_copied.items() if c]
    viewed = [n for n, c in output_copied.items() if not c]
    out_mib = output_bytes / 2**20  # one attention output
    if copied and viewed:
        sentences.append(
            "The blocks are not copy for copy: each copies Q, K and V once into its "
            "attention's layout, but the attention output's reshape back to B×S×(H·D) is "
            f"a copy ({out_mib:.0f} MiB per forward) with {listed(copied)} and a view with "
            f"{listed(viewed)}; the comparisons between them include that copy."
        )
    else:
        sentences.append(
            "Each block copies Q, K and V once into its attention's layout, and the "
            "attention output's reshape back to B×S×(H·D) is "
            f"{'a copy' if copied else 'a view'} in every block."
        )
    sentences += [
        f"The compiled block with the cuDNN op trains at {rate['value']:,.0f} tokens/s "
        f"(in-run interval {rate['low']:,.0f}–{rate['high']:,.0f}); torch.compile's own "
        "share, the same op eager against compiled: the compiled block is "
        f"{result.describe(eager_op)}.",
        "Host time per step against GPU time:",
        *(loop_note(result, name, wall) for name in result.measurements),
        f"Peak memory of a step: {peak_mib[cand]:.0f} MiB with the cuDNN op compiled, "
        f"{peak_mib[eager_op]:.0f} MiB eager; {peak_mib[eager_baseline]:.0f} MiB eager "
        f"PyTorch, {peak_mib[compiled_baseline]:.0f} MiB compiled PyTorch"
        + (f", {peak_mib[fa4_eager]:.0f} MiB with {fa4_label}." if fa4_eager in peak_mib else "."),
    ]
    return sentences
