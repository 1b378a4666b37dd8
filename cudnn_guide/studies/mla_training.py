"""MLA head sizes (Q and K of 192, V of 128) trained against PyTorch, FlexAttention, FlashAttention-4: the MLA page.

The MLA page's lesson builds cuDNN's causal forward (with its softmax statistics) and backward
graphs from tensors of two head sizes. This module checks them and races one training step
(forward + backward) of them against the other attentions that accept ``d_qk ≠ d_v``:

* :func:`check_outputs`: O, dQ, dK and dV of the lesson's graphs, run again on NaN-filled
  outputs, against the fp32 autograd reference;
* :func:`step_flops`: the FLOPs of one causal training step when ``d_qk ≠ d_v``;
* :func:`flex_causal`: FlexAttention with a causal block mask, compiled;
* :func:`torch_step`, :func:`~cudnn_guide.measure.baselines.refusal`,
  :func:`grads_check` and :func:`admit_steps`: each of
  PyTorch's attentions as one autograd step over the same leaves, run once, printed whole when
  it refuses the shapes, and checked on dQ, dK and dV before it is admitted to the race;
  :func:`admit_fa4` does the same for FlashAttention-4's own step;
* :func:`contender_rows` (:mod:`cudnn_guide.report.tables`'s, re-exported for the page) and
  :func:`conclusions`: the page's table and sentences (every
  contender's verdict in this run), from the comparison.

The graphs and the steps need a GPU; the FLOPs, the refusals, the rows and the sentences do not.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from cudnn_guide.measure.baselines import refusal
from cudnn_guide.report.tables import contender_rows

__all__ = [
    "GRADS",
    "admit_fa4",
    "admit_steps",
    "check_outputs",
    "conclusions",
    "contender_rows",
    "flex_causal",
    "grads_check",
    "step_flops",
    "torch_step",
]

GRADS = ("dq", "dk", "dv")
"""The gradients a training step is checked on, in the order a step returns them."""

_WRAP = dict(subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
"""How :func:`admit_steps` wraps a refusal at 88 characters: continuation lines indented, words whole."""


def check_outputs(out: Any, grads: Mapping[str, Any], ref_out: Any, ref_grads: Sequence[Any]) -> list[Any]:
    """Check the lesson's O, dQ, dK and dV against the fp32 autograd reference, printing each check.

    The forward's output is checked as ``"MLA forward (192/128)"``, then each gradient as
    ``"MLA backward <dq|dk|dv>"`` (:func:`cudnn_guide.check.check`: relative norm, tolerance by
    dtype); each check raises on a failure and joins the record on a pass.

    Parameters
    ----------
    out
        The forward graph's output O.
    grads
        ``{"dq", "dk", "dv"}`` → the backward graph's outputs.
    ref_out
        The fp32 reference output (detached).
    ref_grads
        The fp32 reference dQ, dK and dV, in that order.

    Returns
    -------
    list[Any]
        The four :class:`~cudnn_guide.check.CheckResult`, in the order printed.

    Example
    -------
    >>> check.poison(om, *mla_grads.values()); mla_fwd.execute(mla_fwd_pack); mla_bwd.execute(mla_bwd_pack)
    >>> checks = check_outputs(om, mla_grads, ref_om.detach(), [leaf.grad for leaf in leaves])
    """
    from cudnn_guide import check

    checks = [check.check(out, ref_out, name="MLA forward (192/128)")]
    print(checks[-1])
    for name, ref in zip(GRADS, ref_grads):
        checks.append(check.check(grads[name], ref, name=f"MLA backward {name}"))
        print(checks[-1])
    return checks


def step_flops(batch: int, heads: int, seq: int, d_qk: int, d_v: int) -> int:
    """The FLOPs of one causal attention training step (forward + backward) with head sizes ``d_qk`` and ``d_v``.

    Per visible (query, key) pair, the forward's QKᵀ costs ``2·d_qk`` and PV ``2·d_v``; the
    backward recomputes QKᵀ (``2·d_qk``), then dV = PᵀdO (``2·d_v``), dP = dO·Vᵀ (``2·d_v``),
    dQ = dS·K and dK = dSᵀQ (``2·d_qk`` each): ``2·(4·d_qk + 3·d_v)`` per pair. Causal attention
    over ``seq`` queries and keys (top-left, key ≤ query) sees ``seq·(seq + 1)/2`` pairs per
    head. With ``d_qk = d_v`` this is 3.5× the forward's FLOPs.

    Parameters
    ----------
    batch
        Sequences B.
    heads
        Heads H.
    seq
        Tokens S (queries and keys).
    d_qk
        Values per head of Q and K.
    d_v
        Values per head of V (and O, dO).

    Returns
    -------
    int
        FLOPs per step.

    Example
    -------
    >>> step_flops(1, 1, 4, 192, 128)  # 10 visible pairs · 2(4·192 + 3·128)
    23040
    """
    visible = seq * (seq + 1) // 2  # key ≤ query
    return 2 * batch * heads * (4 * d_qk + 3 * d_v) * visible


def flex_causal(seq: int) -> Callable[..., Any]:
    """FlexAttention with a causal block mask (key ≤ query) over ``seq`` queries and keys, compiled.

    The block mask is made once, on ``create_block_mask``'s default device (no ``device=`` is
    passed), for any batch and head (``None, None``); the attention is compiled with
    ``fullgraph=True``.

    Parameters
    ----------
    seq
        Tokens S of the queries and of the keys.

    Returns
    -------
    Callable[..., Any]
        ``attend(q, k, v)`` on B×H×S×D tensors (Q and K may have another head size than V).

    Example
    -------
    >>> step = torch_step(flex_causal(4096), leaves, d_o)
    """
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    block = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, seq, seq)
    return torch.compile(lambda q, k, v: flex_attention(q, k, v, block_mask=block), fullgraph=True)


def torch_step(attend: Callable[..., Any], leaves: Sequence[Any], grad_out: Any) -> Callable[[], Any]:
    """One training step of ``attend`` over ``leaves``: forward, then ``torch.autograd.grad`` of ``grad_out``.

    Parameters
    ----------
    attend
        ``attend(q, k, v)``.
    leaves
        Q, K and V, each requiring gradients.
    grad_out
        The gradient of the output dO.

    Returns
    -------
    Callable[[], Any]
        The zero-argument step; it returns the gradients (dQ, dK, dV), leaving ``.grad`` untouched.

    Example
    -------
    >>> leaves = [t.detach().requires_grad_() for t in (qm, km, vm)]
    >>> dq, dk, dv = torch_step(forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True), leaves, d_om)()
    """
    import torch

    def step() -> Any:
        return torch.autograd.grad(attend(*leaves), leaves, grad_out)

    return step


def grads_check(name: str, ref_grads: Sequence[Any]) -> Callable[[Sequence[Any]], list[Any]]:
    """The check of a step's dQ, dK and dV against the fp32 autograd reference, named after ``name``.

    Parameters
    ----------
    name
        The contender's label; each check is named ``"<name>: MLA <dq|dk|dv>"``.
    ref_grads
        The fp32 reference dQ, dK and dV, in that order.

    Returns
    -------
    Callable[[Sequence[Any]], list[Any]]
        Given the step's (dQ, dK, dV), the three :class:`~cudnn_guide.check.CheckResult` (each
        raises on a failure), for :func:`~cudnn_guide.measure.baselines.admit`'s ``check=``.

    Example
    -------
    >>> admit(contenders, name, step, check=grads_check(name, ref_grads))
    """
    from cudnn_guide import check

    return lambda grads: [
        check.check(got, ref, name=f"{name}: MLA {n}") for n, got, ref in zip(GRADS, grads, ref_grads)
    ]


def admit_steps(
    contenders: MutableMapping[str, Callable[[], Any]],
    attends: Mapping[str, Callable[..., Any]],
    qkv: Sequence[Any],
    grad_out: Any,
    ref_grads: Sequence[Any],
) -> dict[str, str]:
    """Each attention as one training step, run once and checked before it joins ``contenders``; or why not.

    The steps share one set of leaves, ``qkv`` detached and requiring gradients (:func:`torch_step`).
    In the order of ``attends``, each step first runs under
    :func:`~cudnn_guide.measure.baselines.refusal`: one that raises is
    printed whole, ``"<name>: unavailable here (<why>)"`` wrapped at 88 characters, and left out;
    one that runs is admitted by :func:`~cudnn_guide.measure.baselines.admit` with
    :func:`grads_check` (its dQ, dK and dV against ``ref_grads``; a wrong result stops the page).

    Parameters
    ----------
    contenders
        Name → launcher, as passed to :func:`~cudnn_guide.measure.compare.compare`; updated in place.
    attends
        Contender name → ``attend(q, k, v)``.
    qkv
        Q, K and V (B×H×S×D; Q and K may have another head size than V).
    grad_out
        The gradient of the output dO.
    ref_grads
        The fp32 reference dQ, dK and dV, in that order.

    Returns
    -------
    dict[str, str]
        Contender name → why it did not run here, for those that did not.

    Example
    -------
    >>> unavailable = admit_steps(contenders, {"FlexAttention (compiled)": flex_causal(S)}, (q, k, v), d_o, ref)
    """
    from cudnn_guide.measure import baselines

    leaves = [t.detach().requires_grad_() for t in qkv]
    unavailable = {}
    for name, attend in attends.items():
        step = torch_step(attend, leaves, grad_out)
        if why := refusal(step):  # printed whole, wrapped at 88 characters
            print(textwrap.fill(f"{name}: unavailable here ({why})", 88, **_WRAP))
            unavailable[name] = why
        elif why := baselines.admit(contenders, name, step, check=grads_check(name, ref_grads)):
            unavailable[name] = why
    return unavailable


def admit_fa4(
    contenders: MutableMapping[str, Callable[[], Any]],
    unavailable: MutableMapping[str, str],
    label: str,
    qkv: Sequence[Any],
    grad_out: Any,
    ref_grads: Sequence[Any],
    *,
    scale: float,
) -> None:
    """FlashAttention-4's causal training step, checked on dQ, dK and dV, as the contender ``"<label> step"``.

    The step is :func:`cudnn_guide.measure.fa4.training_step` (its own B×S×H×D copies of Q, K, V
    and dO, autograd); :func:`~cudnn_guide.measure.baselines.admit` runs it once and checks its
    gradients, seen as B×H×S×D, with :func:`grads_check` (checks named after ``label``). A step
    that raises is said and recorded in ``unavailable``; a wrong result stops the page.

    Parameters
    ----------
    contenders
        Name → launcher; updated in place.
    unavailable
        Name → why it did not run; updated in place.
    label
        FlashAttention-4's display name (:func:`cudnn_guide.measure.fa4.label`).
    qkv
        Q, K and V, B×H×S×D.
    grad_out
        dO, B×H×S×D.
    ref_grads
        The fp32 reference dQ, dK and dV, in that order.
    scale
        The softmax scale.

    Example
    -------
    >>> if FA4_OK:
    ...     admit_fa4(contenders, unavailable, FA4, (qm, km, vm), d_om, ref_grads, scale=DQK**-0.5)
    """
    from cudnn_guide.measure import baselines, fa4

    q, k, v = qkv
    fa4_step, fa4_grads = fa4.training_step(q, k, v, grad_out, causal=True, scale=scale)
    name = f"{label} step"
    if why := baselines.admit(contenders, name, fa4_step, check=lambda _: grads_check(label, ref_grads)(fa4_grads())):
        unavailable[name] = why


def conclusions(cmp: Any, *, fa4_label: str, fa4_detail: str, unavailable: Mapping[str, str]) -> list[str]:
    """The MLA page's conclusions, from its comparison: every contender's verdict in this run, what did not run.

    First the candidate's time and its verdict against the fastest contender; then a bullet per
    other contender that ran, fastest first, with the candidate's verdict against it (each
    :meth:`~cudnn_guide.measure.compare.Comparison.describe`, from this run's interval); then,
    under ``"Not timed here:"``, a bullet with the reason for FlashAttention-4's step
    (``"<fa4_label> step"``) where it did not run, and one per other contender that did not run.

    Parameters
    ----------
    cmp
        The :class:`~cudnn_guide.measure.compare.Comparison` of the cuDNN step against its baselines.
    fa4_label
        FlashAttention-4's display name (:func:`cudnn_guide.measure.fa4.label`).
    fa4_detail
        Why FlashAttention-4 was not timed where it is not installed
        (:func:`cudnn_guide.measure.fa4.status`).
    unavailable
        Contender name → why it could not run (:func:`admit_steps`, :func:`admit_fa4`).

    Returns
    -------
    list[str]
        A paragraph and list items (``"* ..."``) for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(mla_cmp, fa4_label=FA4, fa4_detail=FA4_DETAIL, unavailable=mla_unavailable))
    """
    import statistics

    fa4_step = f"{fa4_label} step"
    best = cmp.best_baseline
    others = sorted(
        (b for b in cmp.versus if b != best), key=lambda b: statistics.median(cmp.round_medians_ms[b])
    )  # fastest first, as the fastest contender is judged first
    sentences = [
        f"MLA training step: {cmp.estimate(cmp.candidate)['value']:.0f} µs; in this run, against the "
        f"fastest contender it is {cmp.describe(best)}"
        + (", and against each other contender, fastest first:" if others else ".")
    ]
    sentences += [f"* {cmp.describe(b)}." for b in others]
    missing = {fa4_step: unavailable.get(fa4_step, fa4_detail)} if fa4_step not in cmp.versus else {}
    missing |= {name: why for name, why in unavailable.items() if not name.startswith(fa4_label)}
    if missing:  # a paragraph of its own, so that its items do not join the verdicts' list
        sentences += ["Not timed here:", *(f"* {name}: {why}" for name, why in missing.items())]
    return sentences
