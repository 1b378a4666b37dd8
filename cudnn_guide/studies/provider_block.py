"""FlashAttention-4 in the provider page's race: the block's training step with FA4 as its attention.

The ``cudnn.torch`` provider page times a training step of the pre-norm block of
:mod:`cudnn_guide.graphs.block` on the provider, with the guide's cuDNN op and with PyTorch's
flash backend (FlashAttention-2), in the same interleaved rounds on GPU time and on the wall
clock. FlashAttention-4 (:mod:`cudnn_guide.measure.fa4`) joins that race as one more block,
checked against the same fp32 reference first. This module holds that part of the page:

* :func:`fa4_contender`: FlashAttention-4's block, checked and made a training step, or why it
  cannot run here (not installed, with the install command; or its error where it refuses the
  block);
* :func:`fa4_sentences`: what the page concludes about it, on both clocks.

The block, its check and its step need a GPU (FlashAttention-4 one of SM 9.0 or newer); the
sentences do not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["fa4_contender", "fa4_sentences"]


def fa4_contender(
    template: Any,
    check_block: Callable[[Any, str], Any],
    step: Callable[[Any], Callable[[], Any]],
    *,
    scale: float,
) -> tuple[str, dict[str, Callable[[], Any]], str | None]:
    """FlashAttention-4's block as a contender of the race, named :func:`~cudnn_guide.measure.fa4.label`, or why not.

    Where FlashAttention-4 does not import (:func:`~cudnn_guide.measure.fa4.status`), that is
    printed, ``"<label>: not installed (pip install …): <error>"``, and nothing is raced. Otherwise a
    copy of ``template`` takes its ``flash_attn_func`` (causal, B×S×H×D in and out:
    :func:`~cudnn_guide.graphs.block.variant` with ``bshd=True``) and is checked as
    ``"block with <label>"`` (:func:`~cudnn_guide.studies.block_training.check_fa4_block`): a
    wrong result stops the page (:class:`~cudnn_guide.errors.CheckFailedError`); any other error
    (FlashAttention-4 refuses the block here) is printed and the block is left out.

    Parameters
    ----------
    template
        The block the other contenders are copies of (on its device, in its dtype).
    check_block
        The block's check against the fp32 reference (:class:`cudnn_guide.check.ModuleCheck`),
        called as ``check_block(model, name)``.
    step
        The page's training step of a block, ``step(model)`` → a zero-argument launcher
        (:func:`~cudnn_guide.graphs.block.training_step` with the page's input and learning rate).
    scale
        The softmax scale, ``D ** -0.5``.

    Returns
    -------
    tuple[str, dict[str, Callable[[], Any]], str | None]
        FlashAttention-4's display name (with its version where it is installed); ``{name: step}``
        to add to the race, or ``{}``; and why it is not raced (``"not installed (pip install …): …"``
        or ``"ExceptionType: first line of its message"``), ``None`` where it is.

    Example
    -------
    >>> FA4, fa4_steps, fa4_why = fa4_contender(template, check_block, training_step, scale=D**-0.5)
    >>> steps = {PROVIDER: training_step(provider_block), **fa4_steps}
    """
    from cudnn_guide.graphs import block
    from cudnn_guide.measure import fa4
    from cudnn_guide.studies.block_training import check_fa4_block

    label = fa4.label()
    ok, detail = fa4.status()
    if not ok:  # a row that says so, with the install command: not an error
        print(f"{label}: {detail}")
        return label, {}, detail
    model = block.variant(template, fa4.attention(causal=True, scale=scale), bshd=True)
    why = check_fa4_block(check_block, model, label)  # prints why, where it cannot run
    return label, ({} if why is not None else {label: step(model)}), why


def _standing(cmp: Any, label: str) -> str:
    """``label``'s verdict against every other contender of ``cmp``, in the same rounds, grouped."""
    from cudnn_guide.measure.compare import rejudged
    from cudnn_guide.report.prose import listed

    others = [n for n in cmp.measurements if n != label]
    versus = rejudged(cmp, label, others).versus
    groups = {"faster": "faster than", "tie": "a tie with", "slower": "slower than"}
    parts = []
    for verdict, words in groups.items():
        names = [f"{n} ({s['value']:.2f}×)" for n, s in versus.items() if s["verdict"] == verdict]
        if names:
            parts.append(f"{words} {listed(names)}")
    return ", ".join(parts)


def fa4_sentences(gpu: Any, wall: Any, label: str, why: str | None) -> list[str]:
    """The provider page's sentences on FlashAttention-4: the provider against it, and where FA4 is faster.

    Where FlashAttention-4's block was raced (``label`` is one of ``gpu``'s contenders): the
    provider's block (the comparisons' candidate) against it on GPU time and on the wall clock
    (:meth:`~cudnn_guide.measure.compare.Comparison.describe`); then, on each clock, which blocks
    FlashAttention-4's is faster than, ties with and is slower than, each with its speed-up,
    judged on the same rounds' paired ratios (:func:`~cudnn_guide.measure.compare.rejudged`).
    Otherwise one sentence says why it was not timed.

    Parameters
    ----------
    gpu
        The :class:`~cudnn_guide.measure.compare.Comparison` of the training steps on GPU time;
        its candidate is the provider's block.
    wall
        The wall-clock comparison of the same contenders
        (:func:`~cudnn_guide.measure.compare.compare_host`).
    label
        FlashAttention-4's contender name (:func:`~cudnn_guide.measure.fa4.label`).
    why
        Why it was not raced (:func:`fa4_contender`), ``None`` where it was.

    Returns
    -------
    list[str]
        Paragraphs for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> fa4_sentences(provider_cmp, provider_wall, FA4, None)
    ["Against FlashAttention-4 (flash-attn-4 4.0.0b36) as the block's attention ...", ...]
    >>> fa4_sentences(provider_cmp, provider_wall, "FlashAttention-4", "not installed (pip install …): …")
    ['FlashAttention-4 was not timed in the block: not installed (pip install …): ….']
    """
    if label not in gpu.measurements:
        return [f"{label} was not timed in the block: {why or 'not raced'}."]
    return [
        f"Against {label} as the block's attention (its flash_attn_func, eager, the rest "
        f"of the block the same): the provider's block is {gpu.describe(label)} on GPU "
        f"time, and {wall.describe(label)} on the wall clock.",
        f"Where {label} is faster, on the same rounds' paired ratios (its speed-up over "
        f"each other block): on GPU time its block is {_standing(gpu, label)}; on the "
        f"wall clock it is {_standing(wall, label)}.",
    ]
