"""``cudnn.flex_attention`` checked and raced on a causal and a sliding-window mask: the flex-attention page's study.

The flex-attention page (plot_19) runs frontend 1.32's open-source attention kernels through
``cudnn.flex_attention`` on B×S×H×D tensors, causal and with a window of W keys, and races them
against cuDNN's graph SDPA, FlashAttention-4 and PyTorch. This module holds the machinery:

* :func:`band_references`: the fp32 reference of each mask, laid out as ``flex_attn_func``
  returns its output (B×S×H×D);
* :func:`check_forward` and :func:`check_gradients`: the checks of the lesson's graph and of
  ``cudnn.flex_attention``'s forward and backward against them;
* :func:`add_contenders`: the other contenders of one mask's race, each checked before it is
  timed;
* :func:`plot_masks` and :func:`conclusions`: the page's figure and sentences, from the
  comparisons.

The contenders and the races need a GPU; the references, the checks, the figure and the sentences
do not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

__all__ = [
    "CANDIDATE",
    "GRAPH",
    "add_contenders",
    "band_references",
    "check_forward",
    "check_gradients",
    "conclusions",
    "plot_masks",
]

CANDIDATE = "cudnn.flex_attention"
"""The candidate's contender name, and the start of its checks' names."""

GRAPH = "cuDNN graph (heuristics A)"
"""The contender name of cuDNN's graph SDPA with the mask as a diagonal band."""


def band_references(q: Any, k: Any, v: Any, *, window: int) -> dict[str, Any]:
    """The fp32 attention of each mask, causal and a window of ``window`` keys, as B×S×H×D views.

    Each is :func:`~cudnn_guide.graphs.attention_inputs.reference` on the B×H×S×D inputs under
    :func:`~cudnn_guide.graphs.attention_inputs.band` (causal; then ``left=window``), built on
    ``q``'s device, with its dims 1 and 2 swapped (a view): the layout ``flex_attn_func`` returns.

    Parameters
    ----------
    q
        B×H×S×D queries.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    window
        W: each query sees itself and the W - 1 keys before it.

    Returns
    -------
    dict[str, Any]
        ``"causal"`` and ``"window <W>"`` → the B×S×H×D fp32 reference, in that order.

    Example
    -------
    >>> refs = band_references(qb, kb, vb, window=512)
    >>> list(refs)
    ['causal', 'window 512']
    """
    from cudnn_guide.graphs import attention_inputs

    seq = q.shape[2]
    refs = {}
    for mask, left in (("causal", None), (f"window {window}", window)):
        visible = attention_inputs.band(seq, seq, left=left, device=q.device)
        refs[mask] = attention_inputs.reference(q, k, v, visible=visible).transpose(1, 2)
    return refs


def check_forward(graph_out: Any, flex_out: Mapping[str, Any], refs: Mapping[str, Any], *, window: int) -> list[Any]:
    """Check the lesson's window graph and ``cudnn.flex_attention``'s outputs against their masks' references.

    First the graph's B×H×S×D output against the window's reference (``"cuDNN graph, window
    <W>"``), then each of ``flex_out`` against its own (``"cudnn.flex_attention, <mask>"``); a
    wrong one stops the page (:func:`cudnn_guide.check.check`). The results are printed after the
    last check.

    Parameters
    ----------
    graph_out
        The lesson's graph's output, B×H×S×D.
    flex_out
        Mask → ``flex_attn_func``'s B×S×H×D output, in the order they are checked.
    refs
        Mask → B×S×H×D reference (:func:`band_references`).
    window
        W, which names the window's mask.

    Returns
    -------
    list[Any]
        The passing :class:`~cudnn_guide.check.CheckResult` of each, in order.

    Example
    -------
    >>> checks = check_forward(ob, {"causal": out_causal, "window 512": out_window}, refs, window=512)
    """
    from cudnn_guide import check

    win = f"window {window}"
    checks = [check.check(graph_out, refs[win].transpose(1, 2), name=f"cuDNN graph, {win}")]
    checks += [check.check(out, refs[mask], name=f"{CANDIDATE}, {mask}") for mask, out in flex_out.items()]
    for c in checks:
        print(c)
    return checks


def check_gradients(q: Any, k: Any, v: Any, grad_out: Any) -> list[Any]:
    """Check the gradients ``cudnn.flex_attention``'s backward left on B×S×H×D leaves against PyTorch's causal SDPA.

    The reference is PyTorch's ``scaled_dot_product_attention`` (``is_causal=True``) on fp32
    B×H×S×D copies of the leaves, TF32 off, given ``grad_out`` in fp32. Each of dQ, dK and dV is
    checked (``"cudnn.flex_attention backward, dQ"``, ...) and printed in turn; a wrong one stops
    the page.

    Parameters
    ----------
    q
        B×S×H×D queries whose ``.grad`` the backward filled.
    k
        B×S×H×D keys, likewise.
    v
        B×S×H×D values, likewise.
    grad_out
        The B×S×H×D gradient of the output that the backward was given.

    Returns
    -------
    list[Any]
        The passing :class:`~cudnn_guide.check.CheckResult` of dQ, dK and dV.

    Example
    -------
    >>> cfa.flex_attn_func(qg, kg, vg, mask_plan=bwd_plan).backward(d_out)
    >>> checks += check_gradients(qg, kg, vg, d_out)
    """
    import torch

    from cudnn_guide import check

    ref_leaves = [t.detach().float().transpose(1, 2).requires_grad_() for t in (q, k, v)]
    with check.full_precision():
        torch.nn.functional.scaled_dot_product_attention(*ref_leaves, is_causal=True).backward(
            grad_out.float().transpose(1, 2)
        )
    checks = []
    for name, got, ref in zip(("dQ", "dK", "dV"), (q.grad, k.grad, v.grad), ref_leaves):
        checks.append(check.check(got, ref.grad.transpose(1, 2), name=f"{CANDIDATE} backward, {name}"))
        print(checks[-1])
    return checks


def add_contenders(
    contenders: MutableMapping[str, Callable[[], Any]],
    mask: str,
    q: Any,
    k: Any,
    v: Any,
    refs: Mapping[str, Any],
    *,
    left: int | None,
    handle: Any,
    fa4_label: str | None,
) -> list[Any]:
    """Add one mask's other contenders to ``contenders``, each checked against the mask's reference first.

    In this order: cuDNN's graph SDPA with the mask as a diagonal band (:data:`GRAPH`:
    :func:`~cudnn_guide.graphs.attention.sdpa_band_launcher`), run once and checked; PyTorch's
    FlexAttention, the frontend's ``torch.ops.cudnn.sdpa_fwd`` and, for the causal mask, PyTorch's
    SDPA with the flash backend (:func:`~cudnn_guide.measure.baselines.band_attention`, scale
    ``D ** -0.5``), checked but not printed (:func:`~cudnn_guide.measure.baselines.check_each`,
    tagged with ``mask``); then FlashAttention-4 (``causal=True``, and ``window_size=(left - 1, 0)``
    for a window), admitted if it runs here (:func:`~cudnn_guide.measure.baselines.admit`, which
    prints why it cannot, if it cannot). A wrong result stops the page.

    Parameters
    ----------
    contenders
        Name → launcher, the candidate already in it; updated in place.
    mask
        The mask's name (``"causal"``, ``"window 512"``): the checks' tag.
    q
        B×H×S×D queries.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    refs
        Mask → B×S×H×D fp32 reference (:func:`band_references`); ``refs[mask]`` is used.
    left
        The window's width W, or None for causal attention.
    handle
        The cuDNN handle the graph is built on.
    fa4_label
        FlashAttention-4's contender name (:func:`cudnn_guide.measure.fa4.label`), or None when it
        is not installed: then it is not raced.

    Returns
    -------
    list[Any]
        The passing :class:`~cudnn_guide.check.CheckResult` of the graph and of each PyTorch
        baseline (FlashAttention-4's joins the record through ``admit``).

    Example
    -------
    >>> contenders = {CANDIDATE: lambda: cfa.flex_attn_func(q, k, v, mask_plan=plan)}
    >>> checks += add_contenders(contenders, "window 512", qb, kb, vb, refs, left=512, handle=handle,
    ...                          fa4_label=fa4.label())
    """
    from cudnn_guide import check
    from cudnn_guide.graphs import attention
    from cudnn_guide.measure import baselines, fa4

    reference = refs[mask]
    scale = q.shape[-1] ** -0.5
    run_graph, o_graph = attention.sdpa_band_launcher(q, k, v, left_bound=left, handle=handle)
    run_graph()
    checks = [check.check(o_graph.transpose(1, 2), reference, name=f"{GRAPH}, {mask}")]
    others = baselines.band_attention(q, k, v, left=left, scale=scale)
    contenders[GRAPH] = run_graph
    contenders.update(others)
    checks += baselines.check_each(others, reference.transpose(1, 2), tag=mask)
    if fa4_label is not None:
        size = {} if left is None else {"window_size": (left - 1, 0)}
        run_fa4 = fa4.forward(q, k, v, causal=True, scale=scale, **size)
        baselines.admit(contenders, fa4_label, run_fa4, reference.transpose(1, 2))
    return checks


def plot_masks(results: Mapping[str, Any], shape: str) -> Any:
    """One panel per mask, side by side: each contender's rate (:func:`~cudnn_guide.report.plots.plot_comparison`).

    Parameters
    ----------
    results
        Mask → its :class:`~cudnn_guide.measure.compare.Comparison`, with ``flops``.
    shape
        The problem, after the mask in each panel's title (``"4×16 heads × 4096 tokens, d=128"``).

    Returns
    -------
    Any
        The matplotlib figure.

    Example
    -------
    >>> plot_masks(results, f"{B}×{H} heads × {S} tokens, d={D}")
    >>> plt.show()
    """
    import matplotlib.pyplot as plt

    from cudnn_guide.report import plot_comparison

    fig, axes = plt.subplots(1, len(results), figsize=(12, 4), layout="constrained", squeeze=False)
    for ax, (mask, c) in zip(axes[0], results.items()):
        title = f"{mask}: {shape}"
        xlabel = "TFLOP/s of visible pairs"
        plot_comparison(c, "TFLOP/s", ax=ax, xlabel=xlabel, title=title)
    return fig


def conclusions(
    results: Mapping[str, Any],
    cold: Sequence[Mapping[str, float]],
    *,
    fa4_label: str,
    fa4_ok: bool,
    fa4_detail: str,
) -> list[str]:
    """The flex-attention page's conclusions: per mask, the loop against GPU time, FlashAttention-4, the cold start.

    Per mask, :func:`~cudnn_guide.report.prose.loop_stretch_text` (the loop's verdict against the
    fastest contender and how far the loop stretches each contender) and, where FlashAttention-4
    raced and is not that fastest contender, both its verdicts
    (:func:`~cudnn_guide.report.prose.gpu_and_loop_text`); then which verdict applies when; why
    FlashAttention-4 was not timed, if it was not; and what a fresh process pays.

    Parameters
    ----------
    results
        Mask → its :class:`~cudnn_guide.measure.compare.Comparison`, raced with ``wall_clock=True``.
    cold
        :func:`cudnn_guide.studies.coldstart.flex_attention_fresh`'s results, one per process
        (``plan_s``, ``first_call_s``, ...).
    fa4_label
        FlashAttention-4's contender name (:func:`cudnn_guide.measure.fa4.label`).
    fa4_ok
        Whether FlashAttention-4 is installed (:func:`cudnn_guide.measure.fa4.status`).
    fa4_detail
        Its version, or why it is not installed.

    Returns
    -------
    list[str]
        List items (``"* ..."``) and paragraphs for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(results, cold, fa4_label=FA4, fa4_ok=FA4_OK, fa4_detail=FA4_DETAIL))
    """
    from cudnn_guide.report.prose import gpu_and_loop_text, loop_stretch_text, span

    sentences = []
    for mask, c in results.items():
        sentences.append(f"* {mask}: {loop_stretch_text(c)}")
        if fa4_label in c.versus and fa4_label != c.best_baseline:  # the fastest is described above
            sentences.append(f"* {mask}, against {fa4_label}: {gpu_and_loop_text(c, fa4_label)}.")
    sentences.append(
        "Which verdict applies depends on how the calls are launched: GPU time when the "
        "GPU is the bottleneck (calls replayed from a CUDA graph, where a path can be "
        "captured, which this page does not try, or a host that stays ahead of the GPU); "
        "the loop when plain eager Python launches one call after another."
    )
    if not fa4_ok:
        sentences.append(f"{fa4_label} was not timed: {fa4_detail}.")
    first = [c["first_call_s"] for c in cold]
    plan = [c["plan_s"] for c in cold]
    sentences.append(
        f"A fresh process pays {span(first, '.1f')} s on its first call (compilation) and "
        f"{span(plan, '.2f')} s for the plan; reuse the plan and keep the process alive."
    )
    return sentences
