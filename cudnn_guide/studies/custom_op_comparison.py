"""A hand-written cuDNN attention op against the frontend's, PyTorch SDPA and FlashAttention-4: the custom-op study.

The page that writes causal attention again as a differentiable ``torch.library.custom_op``
races one training step of it (forward, then backward) against ``torch.ops.cudnn.sdpa_fwd``
(:func:`frontend_sdpa`, registered by ``cudnn.sdpa.fwd.torch_op``), PyTorch's SDPA with a
forced backend and FlashAttention-4 (``flash-attn-4``), by GPU time and by the wall clock of a
back-to-back loop. This module holds the plumbing of that race and how the page reads it:

* :func:`training_step` and :func:`admit_steps`: each forward as a training step over the same
  leaves, run once and checked (its dQ against the fp32 reference's) before it is timed, or
  said unavailable;
* :func:`admit_fa4`: FlashAttention-4's training step, checked the same way, or why it is not
  timed (not installed, with the install command; or the error it raised here);
* :func:`same_forward_bits`: which contenders compute the op's forward output bit for bit;
* :func:`step_times` and :func:`verdict_rows`: the tables of time per step on each clock and of
  the op's verdicts by each clock;
* :func:`conclusions`: the page's sentences.

The steps need a GPU; the tables and the sentences do not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

__all__ = [
    "admit_fa4",
    "admit_steps",
    "conclusions",
    "frontend_sdpa",
    "same_forward_bits",
    "step_times",
    "training_step",
    "verdict_rows",
]

_LOOP = "wall-clock µs in a loop"
_HOST = "host µs, one call"


def _interval(v: Mapping[str, Any]) -> str:
    """``value×, low–high``, with as many decimals (two or more) as it takes for an interval that excludes 1 to show it.

    >>> _interval({"value": 0.9996, "low": 0.9991, "high": 0.99953})
    '0.9996×, 0.9991–0.9995'
    >>> _interval({"value": 1.24, "low": 0.94, "high": 1.34})
    '1.24×, 0.94–1.34'
    """
    d = 2
    while d < 16 and (
        (v["high"] < 1 and float(f"{v['high']:.{d}f}") >= 1) or (v["low"] > 1 and float(f"{v['low']:.{d}f}") <= 1)
    ):
        d += 1
    return f"{v['value']:.{d}f}×, {v['low']:.{d}f}–{v['high']:.{d}f}"


def _side(v: Mapping[str, Any]) -> str | None:
    """Where a tie's interval lies wholly, if it does: ``"below"`` or ``"above"`` 1; else None."""
    if v["verdict"] != "tie":
        return None
    return "below" if v["high"] < 1 else "above" if v["low"] > 1 else None


_SIDES = {"below": "below 1 (the op slower)", "above": "above 1 (the op faster)"}


def _said(v: Mapping[str, Any]) -> str:
    """``verdict (value×, low–high)``."""
    return f"{v['verdict']} ({_interval(v)})"


def frontend_sdpa(scale: float) -> Callable[..., Any]:
    """The frontend's differentiable causal attention, ``torch.ops.cudnn.sdpa_fwd``, as ``forward(q, k, v)``.

    The op is registered by importing ``cudnn.sdpa.fwd.torch_op`` (do that first); it is called
    with ``is_causal=True`` and ``return_lse=True`` (the softmax statistics its backward reads),
    and the forward returns its output O alone.

    Parameters
    ----------
    scale
        The softmax scale (``D ** -0.5``).

    Returns
    -------
    Callable[..., Any]
        ``forward(q, k, v)`` → O, B×H×S×D.

    Example
    -------
    >>> import cudnn.sdpa.fwd.torch_op  # registers torch.ops.cudnn.sdpa_fwd
    >>> o = frontend_sdpa(128**-0.5)(q, k, v)
    """
    import torch

    def frontend_op(q_: Any, k_: Any, v_: Any) -> Any:
        return torch.ops.cudnn.sdpa_fwd(q_, k_, v_, scale, is_causal=True, return_lse=True)[0]

    return frontend_op


def training_step(forward: Callable[..., Any], leaves: Sequence[Any], grad_out: Any) -> Callable[[], None]:
    """One training step of attention alone as a launcher: clear the leaves' gradients, forward, backward.

    Clearing first means no step pays for accumulating into the previous one's gradients, and
    after a call each leaf's ``.grad`` holds that step's gradient. The step returns nothing.

    Parameters
    ----------
    forward
        ``forward(q, k, v)`` → O.
    leaves
        ``[q, k, v]``, tensors that require gradients (the same list for every contender).
    grad_out
        The gradient of O.

    Returns
    -------
    Callable[[], None]
        The step.

    Example
    -------
    >>> import torch
    >>> leaves = [torch.randn(2, 3, requires_grad=True) for _ in range(3)]
    >>> step = training_step(lambda q, k, v: q * k + v, leaves, torch.ones(2, 3))
    >>> step()
    >>> leaves[2].grad.tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """

    def run_step() -> None:
        for t in leaves:
            t.grad = None
        forward(*leaves).backward(grad_out)

    return run_step


def admit_steps(
    forwards: Mapping[str, Callable[..., Any]], leaves: Sequence[Any], grad_out: Any, reference_grad: Any
) -> tuple[dict[str, Callable[[], None]], dict[str, str]]:
    """Each forward's :func:`training_step`, run once and checked, then kept as a contender; or why it cannot run.

    Each step is admitted in turn (:func:`~cudnn_guide.measure.baselines.admit`): it runs once,
    and its dQ (``leaves[0].grad``) is checked against ``reference_grad`` under the name
    ``"<name>: dQ"`` and printed. A step that raises is unavailable (the reason is printed); one
    that computes a wrong gradient raises :class:`~cudnn_guide.errors.CheckFailedError`.

    Parameters
    ----------
    forwards
        Contender name → ``forward(q, k, v)`` → O, the candidate first.
    leaves
        ``[q, k, v]``, tensors that require gradients.
    grad_out
        The gradient of O.
    reference_grad
        dQ of the fp32 reference.

    Returns
    -------
    tuple[dict[str, Callable[[], None]], dict[str, str]]
        The contenders (name → step, in the order of ``forwards``), and name → why it is
        unavailable.

    Example
    -------
    >>> contenders, unavailable = admit_steps(forwards, leaves, d_o, ref_leaves[0].grad)
    """
    from cudnn_guide import check
    from cudnn_guide.measure import baselines

    contenders: dict[str, Callable[[], None]] = {}
    unavailable: dict[str, str] = {}
    for name, forward in forwards.items():
        why = baselines.admit(
            contenders,
            name,
            training_step(forward, leaves, grad_out),
            check=lambda _, name=name: check.check(leaves[0].grad, reference_grad, name=f"{name}: dQ"),
        )
        if why:
            unavailable[name] = why
    return contenders, unavailable


def admit_fa4(
    contenders: MutableMapping[str, Callable[[], Any]],
    unavailable: MutableMapping[str, str],
    forwards: MutableMapping[str, Callable[..., Any]],
    label: str,
    leaves: Sequence[Any],
    grad_out: Any,
    reference_grad: Any,
) -> str | None:
    """FlashAttention-4's causal training step as the contender ``label``, checked like the others; or why not.

    Where FlashAttention-4 is not installed (:func:`cudnn_guide.measure.fa4.status`), that is
    printed and recorded in ``unavailable`` with the install command, and nothing raises. Else
    its step (:func:`cudnn_guide.measure.fa4.training_step`: causal, scale ``D ** -0.5``, on its
    own B×S×H×D copies of ``leaves`` and ``grad_out``, made here, outside the timed calls) is
    admitted with :func:`~cudnn_guide.measure.baselines.admit`: it runs once, and its dQ, seen
    as B×H×S×D, is checked against ``reference_grad`` as ``"<label>: dQ"``, as
    :func:`admit_steps` checks every other step. A step that raises (FlashAttention-4 refusing
    this case) is unavailable, its error printed and recorded; a wrong gradient raises
    :class:`~cudnn_guide.errors.CheckFailedError`. Once admitted, its forward on B×H×S×D
    inputs (:func:`cudnn_guide.measure.fa4.forward` on copies) joins ``forwards`` for
    :func:`same_forward_bits`.

    Parameters
    ----------
    contenders
        Name → step, as :func:`admit_steps` returned them; the step joins last, as ``label``.
    unavailable
        Name → why it cannot run; updated in place.
    forwards
        Name → ``forward(q, k, v)`` → O; FlashAttention-4's joins once its step is admitted.
    label
        FlashAttention-4's display name (:func:`cudnn_guide.measure.fa4.label`).
    leaves
        ``[q, k, v]``, B×H×S×D (not modified: the step has its own copies).
    grad_out
        The gradient of O, B×H×S×D.
    reference_grad
        dQ of the fp32 reference.

    Returns
    -------
    str | None
        ``None`` when admitted; otherwise why it is not timed (also in ``unavailable``).

    Example
    -------
    >>> admit_fa4(contenders, unavailable, forwards, fa4.label(), leaves, d_o, ref_dq)
    """
    import textwrap

    from cudnn_guide import check
    from cudnn_guide.measure import baselines, fa4

    ok, detail = fa4.status()
    if not ok:  # not installed: said with the install command, never an error
        print(textwrap.fill(f"{label}: {detail}", check.LINE_WIDTH, break_on_hyphens=False))
        unavailable[label] = detail
        return detail
    q, k, v = leaves
    scale = q.shape[-1] ** -0.5
    step, grads = fa4.training_step(q, k, v, grad_out, causal=True, scale=scale)
    why = baselines.admit(
        contenders,
        label,
        step,
        check=lambda _: check.check(grads()[0], reference_grad, name=f"{label}: dQ"),
    )
    if why is not None:
        unavailable[label] = why
        return why
    forwards[label] = lambda q_, k_, v_: fa4.forward(q_, k_, v_, causal=True, scale=scale)()
    return None


def same_forward_bits(
    forwards: Mapping[str, Callable[..., Any]], names: Sequence[str], leaves: Sequence[Any], candidate: str
) -> dict[str, bool]:
    """Whether each contender's forward output equals the candidate's bit for bit (``torch.equal``).

    The candidate's forward runs once, then each named forward (the candidate's again among
    them, which shows whether its forward repeats bit for bit), all on ``leaves``, gradients on,
    as in a training step, so that each keeps what its backward would need.

    Parameters
    ----------
    forwards
        Contender name → ``forward(q, k, v)`` → O.
    names
        The contenders to compare, in order (those admitted).
    leaves
        ``[q, k, v]``.
    candidate
        The name whose output the others are compared with.

    Returns
    -------
    dict[str, bool]
        Name → whether its O is bit-identical to the candidate's first one.

    Example
    -------
    >>> import torch
    >>> leaves = [torch.ones(2, requires_grad=True)] * 3
    >>> same_forward_bits({"a": lambda q, k, v: q + k, "b": lambda q, k, v: q * k}, ["a", "b"], leaves, "a")
    {'a': True, 'b': False}
    """
    import torch

    def forward_output(forward: Callable[..., Any]) -> Any:
        """O of a training forward (gradients on, so each keeps what its backward needs)."""
        return forward(*leaves).detach()

    mine = forward_output(forwards[candidate])
    return {n: torch.equal(mine, forward_output(forwards[n])) for n in names}


def step_times(cmp: Any, *, margin: float) -> dict[str, dict[str, Any]]:
    """Each contender's time per step by each clock, and which of the two a loop of steps waits on.

    The GPU and loop times are medians over rounds of a contender's per-round medians
    (:meth:`~cudnn_guide.measure.compare.Comparison.estimate` of ``cmp`` and ``cmp.wall``); the
    host time is the median of its host calls in the first round (None where not measured). A
    loop waits on the host where a step takes over ``margin`` times its GPU time in the loop.

    Parameters
    ----------
    cmp
        The :class:`~cudnn_guide.measure.compare.Comparison` by GPU time, raced also in
        back-to-back loops (``compare(..., wall_clock=True)``: ``cmp.wall``).
    margin
        The loop-over-GPU ratio above which a loop waits on the host.

    Returns
    -------
    dict[str, dict[str, Any]]
        Contender → ``{"GPU µs", "host µs, one call", "wall-clock µs in a loop", "loop ÷ GPU",
        "a loop waits on"}`` (the last ``"host"`` or ``"GPU"``), in the comparison's order.

    Example
    -------
    >>> per_step = step_times(training, margin=1.1)
    >>> html_table(pd.DataFrame([{"contender": n, **row} for n, row in per_step.items()]))
    """
    per_step = {}
    for n in cmp.measurements:
        gpu_us = cmp.estimate(n)["value"]
        host_ms = cmp.measurements[n].host_median_ms
        wall_us = cmp.wall.estimate(n)["value"]
        per_step[n] = {
            "GPU µs": gpu_us,
            _HOST: None if host_ms is None else 1e3 * host_ms,
            _LOOP: wall_us,
            "loop ÷ GPU": wall_us / gpu_us,
            "a loop waits on": "host" if wall_us > margin * gpu_us else "GPU",
        }
    return per_step


def verdict_rows(
    cmp: Any, candidate: str = "this page's op", *, unavailable: Mapping[str, str] | None = None
) -> list[dict[str, str]]:
    """One row per baseline: the candidate's verdict and speed-up by GPU time and by the loop's wall clock.

    Then one row per contender that was not timed, saying why (``"not timed: <why>"``: not
    installed, with the install command, or the error it raised here).

    Parameters
    ----------
    cmp
        The :class:`~cudnn_guide.measure.compare.Comparison` with its loop race ``cmp.wall``.
    candidate
        How the first column names the candidate (``"<candidate> against"``).
    unavailable
        Contender name → why it was not timed (:func:`admit_steps`, :func:`admit_fa4`).

    Returns
    -------
    list[dict[str, str]]
        Rows with the columns ``"<candidate> against"``, ``"GPU time (tie band ±x%)"`` and
        ``"wall clock, loop (tie band ±y%)"``, each verdict ``verdict (value×, low–high)``.

    Example
    -------
    >>> html_table(pd.DataFrame(verdict_rows(training, unavailable=unavailable)))
    """
    wall = cmp.wall
    gpu_col = f"GPU time (tie band ±{100 * cmp.tie_band:.1f}%)"
    wall_col = f"wall clock, loop (tie band ±{100 * wall.tie_band:.1f}%)"
    rows = [
        {f"{candidate} against": n, gpu_col: _said(cmp.versus[n]), wall_col: _said(wall.versus[n])} for n in cmp.versus
    ]
    rows += [
        {f"{candidate} against": n, gpu_col: f"not timed: {why}", wall_col: "not timed"}
        for n, why in (unavailable or {}).items()
        if n not in cmp.versus
    ]
    return rows


def _against_each(c: Any) -> str:
    """The op against every baseline of ``c``, the ties together; a tie whose interval lies wholly on one side of 1
    is said to be a tie only by the band, where it is stated."""
    from cudnn_guide.report.prose import listed

    def named(n: str) -> str:
        return f"{n} ({_interval(c.versus[n])})"

    ties = [n for n, v in c.versus.items() if v["verdict"] == "tie" and _side(v) is None]
    parts = [f"a tie with {listed(named(n) for n in ties)}"] if ties else []
    for side, words in _SIDES.items():
        banded = [n for n, v in c.versus.items() if _side(v) == side]
        if banded:
            whose = "whose interval lies" if len(banded) == 1 else "whose intervals lie"
            parts.append(f"a tie only by the tie band with {listed(named(n) for n in banded)}, {whose} wholly {words}")
    for n, v in c.versus.items():
        if v["verdict"] == "faster":
            parts.append(f"{v['value']:.2f}× faster than {n}")
        elif v["verdict"] == "slower":
            parts.append(f"{1 / v['value']:.2f}× slower than {n}")
    return "; ".join(parts) + f" (tie band ±{100 * c.tie_band:.1f}%, {c.rounds} rounds; intervals above)"


def _on_both_clocks(training: Any, n: str) -> str:
    """The op against ``n`` by each clock: verdict, speed-up, interval, tie band."""
    wall = training.wall
    parts = []
    for clock, c in (("GPU time", training), ("the loop's wall clock", wall)):
        v = c.versus[n]
        part = f"by {clock}: {_said(v)}, tie band ±{100 * c.tie_band:.1f}%"
        side = _side(v)
        if side:
            part += f", but its interval lies wholly {_SIDES[side]}: a tie only by the band"
        parts.append(part)
    if training.versus[n]["verdict"] != wall.versus[n]["verdict"]:
        parts.append("the two clocks disagree")
    return f"* against {n}: " + "; ".join(parts) + "."


def _best_alternative(training: Any) -> str:
    """Which contender is the best alternative on each clock (the one the headlines are taken over), and the op's
    verdict against it."""
    wall = training.wall
    best, best_wall = training.best_baseline, wall.best_baseline
    head = (
        "The best alternative, the fastest contender other than the op and the one the headline "
        "speed-ups are taken over, is "
    )
    if best == best_wall:
        return (
            f"{head}{best} on both clocks; the op against it: {_said(training.versus[best])} by GPU time, "
            f"{_said(wall.versus[best])} by the loop's wall clock."
        )
    return (
        f"{head}{best} by GPU time (the op against it: {_said(training.versus[best])}) and {best_wall} by the "
        f"loop's wall clock (the op against it: {_said(wall.versus[best_wall])})."
    )


def conclusions(
    training: Any,
    per_step: Mapping[str, Mapping[str, Any]],
    bitwise: Mapping[str, bool],
    *,
    candidate: str,
    margin: float,
    unavailable: Mapping[str, str] | None = None,
) -> list[str]:
    """The custom-op page's conclusions: the op's verdicts by each clock, what bit equality shows, what loops wait on.

    They name the best alternative on each clock (:attr:`~cudnn_guide.measure.compare.Comparison.best_baseline`,
    the fastest contender other than the op, the one the page's headline speed-ups are taken over),
    whichever it is, FlashAttention-4 included, and end with what was not timed and why.

    Parameters
    ----------
    training
        The :class:`~cudnn_guide.measure.compare.Comparison` of the training steps by GPU time, with
        ``flops`` and its loop race ``training.wall``.
    per_step
        :func:`step_times` of it.
    bitwise
        :func:`same_forward_bits`: each contender's O against the op's (the op's own: run again).
    candidate
        The op's contender name.
    margin
        The ``margin`` :func:`step_times` was given.
    unavailable
        Contender name → why it was not timed (:func:`admit_steps`, :func:`admit_fa4`).

    Returns
    -------
    list[str]
        Paragraphs and list items (``"* ..."``) for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(training, per_step, bitwise, candidate=CAND, margin=MARGIN))
    """
    from cudnn_guide.report.prose import listed

    wall = training.wall
    rate = training.estimate(candidate, "TFLOP/s")["value"]
    host_bound = [n for n, row in per_step.items() if row["a loop waits on"] == "host"]
    same_kernels = [n for n, same_bits in bitwise.items() if same_bits and n != candidate]
    if not bitwise[candidate]:
        kernels = (
            "The op's forward output differs between two runs of it here, so bit equality "
            "does not show which contenders run its forward kernel."
        )
    elif same_kernels:
        kernels = (
            f"{listed(same_kernels)} computed a forward output bit-identical to the op's: the "
            "same cuDNN forward kernel. Their backward, the rest of each step, was not compared "
            "bit for bit, so a GPU-time tie with them says that their steps cost the GPU about "
            "the same, not that one kernel is timed against itself; the host path around the "
            "kernels differs, and the loop's wall clock includes it."
        )
    else:
        kernels = "No other contender computed an output bit-identical to the op's."
    missing = {n: why for n, why in (unavailable or {}).items() if n not in training.versus}
    # a paragraph of its own, so that its items do not join the list above
    not_timed = ["Not timed here:", *(f"* {n}: {why}" for n, why in missing.items())] if missing else []
    return [
        f"By GPU time the op's training step runs at {rate:.0f} TFLOP/s and, in this run, is "
        f"{_against_each(training)}.",
        f"By the wall clock of a back-to-back loop of steps, host time included, it is, in this run, "
        f"{_against_each(wall)}.",
        _best_alternative(training),
        "Per baseline, the op's speed-up by each clock (in-run 95% interval):",
        *(_on_both_clocks(training, n) for n in training.versus),
        kernels,
        (
            f"A loop of steps waits on the host (a step takes over "
            f"{100 * (margin - 1):.0f}% longer in the loop than on the GPU) for: "
            f"{listed(host_bound)}."
            if host_bound
            else "For every contender a step takes about as long in the loop as on the GPU: a loop waits on the GPU."
        ),
        *(
            f"* {n}: GPU {row['GPU µs']:,.0f} µs per step; in a loop "
            f"{row[_LOOP]:,.0f} µs of wall clock per step "
            f"({row['loop ÷ GPU']:.2f}× its GPU time); host "
            + ("not measured" if row[_HOST] is None else f"{row[_HOST]:,.0f} µs for one call on an idle GPU")
            + "."
            for n, row in per_step.items()
        ),
        "GPU time is what a step costs where the GPU is the bottleneck (steps replayed "
        "from a CUDA graph, or a host that keeps ahead of the GPU); the loop's wall clock "
        "is what plain eager training pays, one step launched after another.",
        *not_timed,
    ]
