"""Training extras, measured: a bit-identical attention backward, and dropout inside the fused kernel.

The dropout-and-determinism page teaches ``sdpa_backward(..., use_deterministic_algorithm=True)``
in its lesson; this module checks and times both switches:

* the deterministic backward: :func:`backward_graph` builds the backward with or without it,
  :func:`fp32_grads` is the reference, :func:`check_grads` checks dQ, dK, dV against it,
  :func:`bit_patterns` counts the distinct dQ bit patterns of repeated runs, and
  :func:`check_and_count` does both for each build; :func:`admit_fa4` admits
  FlashAttention-4's deterministic training step the same way;
* dropout: :func:`dropout_inputs` and :func:`dropout_graph` build the forward with
  ``dropout=(p, seed, offset)`` (or without), :func:`dropout_mean_errors` averages runs with
  different seeds against the reference without dropout, :func:`replay_and_advance` replays a
  seed and offset bit for bit and then advances the offset;
* :func:`plot_costs` and :func:`fa4_sentence`: the page's figure and a sentence of its conclusions.

The graphs and the runs need a GPU; the counting, the averaging, the figure and the sentence do not
(they take launchers and tensors).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, NamedTuple

from cudnn_guide.check import LINE_WIDTH

__all__ = [
    "GRAD_NAMES",
    "Backward",
    "admit_fa4",
    "backward_graph",
    "bit_patterns",
    "check_and_count",
    "check_grads",
    "dropout_graph",
    "dropout_inputs",
    "dropout_mean_errors",
    "fa4_sentence",
    "fp32_grads",
    "plot_costs",
    "replay_and_advance",
]

GRAD_NAMES = ("dQ", "dK", "dV")
"""The gradients' names in the checks, in the order the graphs and references list them."""

"""The longest line printed; a longer one breaks onto an indented second line."""

_SHAPES: dict[str, tuple[int, int]] = {}
"""Sequences and tokens (B, S) of the latest :func:`dropout_inputs` (``"forward"``) and
:func:`backward_graph` (``"backward"``): :func:`plot_costs` labels its bars with them."""


def _patterns(n: int | None, what: str = "distinct dQ bit pattern") -> str:
    """``"1 distinct dQ bit pattern"``, ``"9 distinct dQ bit patterns"``: the count and its noun agreeing."""
    return f"{n} {what}" + ("" if n == 1 else "s")


def _print_wrapped(head: str, tail: str) -> None:
    """Print ``head: tail`` on one line, or ``tail`` on an indented second line when that is too long."""
    said = f"{head}: {tail}"
    print(said if len(said) <= LINE_WIDTH else f"{head}:\n    {tail}")


class Backward(NamedTuple):
    """One built backward graph: the graph, its launcher and the gradients it writes.

    Example
    -------
    >>> det = backward_graph(handle, inputs, deterministic=True, mask=CAUSAL)
    >>> det.launch(); dq = det.grads[0]
    """

    built: Any
    """The :class:`~cudnn_guide.graphs.BuiltGraph` (its ``report.workspace_bytes``)."""
    launch: Callable[[], None]
    """Its zero-argument launcher, bound to the pack (:meth:`~cudnn_guide.graphs.BuiltGraph.bind`)."""
    grads: list[Any]
    """``[dq, dk, dv]``, written by each launch."""


def backward_graph(
    handle: Any, tensors: Mapping[str, Any], *, deterministic: bool, mask: Mapping[str, Any]
) -> Backward:
    """Build ``sdpa_backward`` for the given tensors, deterministic or with the default atomics.

    Declared with the frontend's own calls: a graph with the tensors' I/O type and fp32
    intermediates and compute, the tensors ``q, k, v, o, dO, stats`` declared like the torch
    tensors (named so), ``sdpa_backward`` named ``"sdpa_backward"`` with scale ``D ** -0.5``, the
    given ``mask`` and ``use_deterministic_algorithm=deterministic``, and dQ, dK, dV as outputs laid
    out like new ``torch.empty_like`` of q, k, v; planned from heuristics A, then FALLBACK.

    Parameters
    ----------
    handle
        The cuDNN handle.
    tensors
        ``q``, ``k``, ``v`` (B×H×S×D), the forward's ``o`` and ``stats`` (B×H×S×1, fp32), and the
        incoming gradient ``dO``, by those names.
    deterministic
        ``use_deterministic_algorithm``.
    mask
        The mask's ``sdpa_backward`` keywords, e.g. ``diagonal_alignment=TOP_LEFT,
        diagonal_band_right_bound=0`` (the forward's).

    Returns
    -------
    Backward
        The graph adopted as ``"backward, deterministic=<deterministic>"``, its launcher, and the
        dq, dk, dv it writes.

    Example
    -------
    >>> backward = {det: backward_graph(handle, inputs, deterministic=det, mask=CAUSAL) for det in (True, False)}
    """
    import cudnn
    import torch

    from cudnn_guide import graphs
    from cudnn_guide.graphs.tensors import cudnn_dtype

    io = {n: tensors[n] for n in ("q", "k", "v", "o", "dO", "stats")}
    q, k, v = io["q"], io["k"], io["v"]
    _SHAPES["backward"] = (q.shape[0], q.shape[2])
    gb = cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn_dtype(q.dtype),
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    T = {n: gb.tensor_like(t, name=n) for n, t in io.items()}
    dQ, dK, dV = gb.sdpa_backward(
        name="sdpa_backward",
        q=T["q"],
        k=T["k"],
        v=T["v"],
        o=T["o"],
        dO=T["dO"],
        stats=T["stats"],
        attn_scale=q.shape[-1] ** -0.5,
        use_deterministic_algorithm=deterministic,
        **mask,
    )
    grads = [torch.empty_like(t) for t in (q, k, v)]
    for node_out, t in zip((dQ, dK, dV), grads):
        node_out.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
    gb.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    p = {T[n]: t for n, t in io.items()} | dict(zip((dQ, dK, dV), grads))
    built = graphs.adopt(gb, handle, name=f"backward, deterministic={deterministic}")
    return Backward(built, built.bind(p), grads)


def fp32_grads(q: Any, k: Any, v: Any, d_o: Any) -> list[Any]:
    """The reference gradients: causal PyTorch attention on fp32 copies, backpropagating ``d_o``.

    TF32 is off (:func:`~cudnn_guide.check.full_precision`).

    Parameters
    ----------
    q
        B×H×S×D queries.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    d_o
        The gradient of the output.

    Returns
    -------
    list[Any]
        ``[dq, dk, dv]`` in fp32.

    Example
    -------
    >>> import torch
    >>> q, k, v, d_o = torch.randn(4, 1, 2, 8, 16)
    >>> [g.dtype for g in fp32_grads(q, k, v, d_o)]
    [torch.float32, torch.float32, torch.float32]
    """
    import torch

    from cudnn_guide import check

    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    with check.full_precision():
        torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True).backward(d_o.float())
    return [t.grad for t in leaves]


def check_grads(grads: Any, reference: Any, label: str) -> list[Any]:
    """Check dQ, dK, dV against the reference, each named ``"<dQ|dK|dV>, <label>"``; a wrong one raises.

    Parameters
    ----------
    grads
        ``[dq, dk, dv]`` under test.
    reference
        ``[dq, dk, dv]`` of the reference (:func:`fp32_grads`).
    label
        What produced them, after the gradient's name.

    Returns
    -------
    list[Any]
        The three passing :class:`~cudnn_guide.check.CheckResult`, which join the page's record.

    Example
    -------
    >>> import torch
    >>> g = [torch.ones(2, 3)] * 3
    >>> [c.name for c in check_grads(g, g, "deterministic=True")]
    ['dQ, deterministic=True', 'dK, deterministic=True', 'dV, deterministic=True']
    """
    from cudnn_guide import check

    return [check.check(got, want, name=f"{name}, {label}") for name, got, want in zip(GRAD_NAMES, grads, reference)]


def bit_patterns(launch: Callable[[], Any], read: Callable[[], Any], runs: int = 10) -> int:
    """How many distinct bit patterns a 16-bit output has over ``runs`` launches.

    After each launch, ``read()`` is seen as int16, copied to the host and hashed; 1 means every
    run wrote the same bits.

    Parameters
    ----------
    launch
        Runs the computation once.
    read
        Returns the 16-bit (bf16 or fp16) tensor to compare, contiguous, after a launch.
    runs
        Launches.

    Returns
    -------
    int
        The number of distinct patterns, from 1 to ``runs``.

    Example
    -------
    >>> import torch
    >>> out = torch.zeros(4, dtype=torch.bfloat16)
    >>> bit_patterns(lambda: out.add_(1), lambda: out, runs=3)
    3
    """
    import torch

    patterns = set()
    for _ in range(runs):
        launch()
        patterns.add(hash(read().view(torch.int16).cpu().numpy().tobytes()))
    return len(patterns)


def check_and_count(
    backward: Mapping[bool, Backward], reference: Any, runs: int = 10
) -> tuple[list[Any], dict[bool, int]]:
    """Each backward build, in turn: run once and checked, then its dQ bit patterns counted.

    One line per build is printed: its distinct dQ bit patterns in ``runs`` runs and its workspace.

    Parameters
    ----------
    backward
        ``deterministic`` → its :class:`Backward` (:func:`backward_graph`), in the order to run.
    reference
        The reference ``[dq, dk, dv]`` (:func:`fp32_grads`).
    runs
        Launches whose dQ bit patterns are counted (:func:`bit_patterns`).

    Returns
    -------
    tuple[list[Any], dict[bool, int]]
        The passing checks (named ``"dQ, deterministic=True"`` ...), and ``deterministic`` → the
        number of distinct dQ bit patterns.

    Example
    -------
    >>> checks, distinct = check_and_count(backward, fp32_grads(q, k, v, d_o))
    >>> assert distinct[True] == 1
    """
    checks: list[Any] = []
    distinct: dict[bool, int] = {}
    for det, (built, launch, grads) in backward.items():
        launch()
        checks += check_grads(grads, reference, f"deterministic={det}")
        distinct[det] = bit_patterns(launch, lambda dq=grads[0]: dq, runs)
        print(
            f"deterministic={det}: {_patterns(distinct[det])} in {runs} runs; "
            f"workspace {built.report.workspace_bytes / 2**20:.0f} MiB"
        )
    return checks, distinct


def admit_fa4(
    steps: MutableMapping[str, Callable[[], Any]],
    label: str,
    q: Any,
    k: Any,
    v: Any,
    d_o: Any,
    reference: Any,
    *,
    scale: float | None = None,
    runs: int = 10,
) -> int | None:
    """FlashAttention-4's deterministic training step: checked, added to ``steps``, its dQ bit patterns counted.

    The step is :func:`~cudnn_guide.measure.fa4.training_step` (causal, ``deterministic=True``);
    :func:`~cudnn_guide.measure.baselines.admit` runs it once and checks its gradients
    (:func:`check_grads`, named ``"<dQ|dK|dV>, <label>"``), or prints why it cannot run here. Once
    admitted, its dQ bit patterns over ``runs`` steps are counted and printed.

    Parameters
    ----------
    steps
        Name → launcher of the comparison; the step joins it as ``label``.
    label
        The step's name.
    q
        B×H×S×D queries.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    d_o
        The gradient of the output.
    reference
        The reference ``[dq, dk, dv]`` (:func:`fp32_grads`).
    scale
        The softmax scale; default ``D ** -0.5`` (computed here and passed on).
    runs
        Steps whose dQ bit patterns are counted.

    Returns
    -------
    int | None
        The number of distinct dQ bit patterns, or ``None`` when the step could not run here.

    Example
    -------
    >>> if fa4.status()[0]:
    ...     fa4_distinct = admit_fa4(steps, FA4_STEP, q, k, v, d_o, ref_grads)
    """
    from cudnn_guide.measure import baselines, fa4

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    fa4_step, fa4_grads = fa4.training_step(q, k, v, d_o, causal=True, scale=scale, deterministic=True)
    why = baselines.admit(steps, label, fa4_step, check=lambda _: check_grads(fa4_grads(), reference, label))
    if why is not None:
        return None
    distinct = bit_patterns(fa4_step, lambda: fa4_grads()[0].contiguous(), runs)
    _print_wrapped(label, f"{_patterns(distinct)} in {runs} runs")
    return distinct


def dropout_inputs(
    batch: int, heads: int, seq: int, head_dim: int, *, generator_seed: int = 0, dropout_seed: int = 1234
) -> dict[str, Any]:
    """The dropout measurement's tensors on the GPU: random bf16 Q, K, V, the outputs, the seed and offset.

    Parameters
    ----------
    batch
        Sequences B.
    heads
        Heads H.
    seq
        Tokens per sequence S.
    head_dim
        Head dimension D.
    generator_seed
        Seed of the CUDA generator that draws q, k, v, in that order.
    dropout_seed
        The dropout seed's first value.

    Returns
    -------
    dict[str, Any]
        ``q``, ``k``, ``v`` (B×H×S×D bf16), ``o`` (empty, like q), ``stats`` (empty B×H×S×1 fp32),
        ``seed`` (``dropout_seed``) and ``offset`` (0), each an int64 1×1×1×1 tensor.

    Example
    -------
    >>> dd = dropout_inputs(4, 16, 2048, 128)
    >>> dd["seed"].item(), dd["offset"].item()
    (1234, 0)
    """
    import torch

    _SHAPES["forward"] = (batch, seq)
    gen = torch.Generator(device="cuda").manual_seed(generator_seed)
    qd, kd, vd = (
        torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3)
    )
    return {
        "q": qd,
        "k": kd,
        "v": vd,
        "o": torch.empty_like(qd),
        "stats": torch.empty(batch, heads, seq, 1, device="cuda", dtype=torch.float32),
        "seed": torch.full((1, 1, 1, 1), dropout_seed, dtype=torch.int64, device="cuda"),
        "offset": torch.zeros((1, 1, 1, 1), dtype=torch.int64, device="cuda"),
    }


def dropout_graph(handle: Any, tensors: Mapping[str, Any], p: float) -> tuple[Any, dict[Any, Any], Any]:
    """The attention forward with statistics, no mask, with dropout ``p`` (or none, for ``p = 0``).

    Declared with the frontend's own calls: Q, K, V like the torch tensors (named so); with ``p``,
    the seed (named ``"seed"``) and offset tensors, passed as ``sdpa(..., dropout=(p, SEED,
    OFFSET))``; scale ``D ** -0.5``, ``generate_stats=True``; O and the fp32 statistics as
    outputs; planned from heuristics A, then FALLBACK.

    Parameters
    ----------
    handle
        The cuDNN handle.
    tensors
        From :func:`dropout_inputs`: ``q``, ``k``, ``v``, ``o``, ``stats``, ``seed``, ``offset``.
    p
        The dropout probability; 0 for none.

    Returns
    -------
    tuple[Any, dict[Any, Any], Any]
        The graph adopted as ``"sdpa_dropout"`` (or ``"sdpa"``), its variant pack, and the output
        it writes: ``tensors["o"]`` with dropout, a new tensor like it without. Both write
        ``tensors["stats"]``.

    Example
    -------
    >>> dropout, pack, _ = dropout_graph(handle, dd, 0.1)
    >>> plain, plain_pack, o0 = dropout_graph(handle, dd, 0)
    """
    import cudnn
    import torch

    from cudnn_guide import graphs
    from cudnn_guide.graphs.tensors import cudnn_dtype

    qd, kd, vd, od, statsd = (tensors[n] for n in ("q", "k", "v", "o", "stats"))
    seed, offset = tensors["seed"], tensors["offset"]
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn_dtype(qd.dtype),
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    Q, K, V = (g.tensor_like(t, name=n) for t, n in ((qd, "q"), (kd, "k"), (vd, "v")))
    pack = {Q: qd, K: kd, V: vd}
    extra = {}
    if p:
        SEED, OFFSET = g.tensor_like(seed, name="seed"), g.tensor_like(offset)
        extra["dropout"] = (p, SEED, OFFSET)
        pack |= {SEED: seed, OFFSET: offset}
    O, STATS = g.sdpa(
        q=Q,
        k=K,
        v=V,
        attn_scale=qd.shape[-1] ** -0.5,
        generate_stats=True,
        **extra,
    )
    out = od if p else torch.empty_like(od)
    O.set_output(True).set_dim(list(out.shape)).set_stride(list(out.stride()))
    STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    STATS.set_dim(list(statsd.shape)).set_stride(list(statsd.stride()))
    pack |= {O: out, STATS: statsd}
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    name = "sdpa_dropout" if p else "sdpa"
    return graphs.adopt(g, handle, name=name), pack, out


def dropout_mean_errors(
    run: Callable[[], Any],
    out: Any,
    seed: Any,
    reference: Any,
    *,
    runs: int = 64,
    report: tuple[int, ...] = (1, 4, 16, 64),
) -> dict[int, float]:
    """The mean of dropout runs with seeds 0, 1, 2, ... against the output without dropout.

    Run ``i`` fills ``seed`` with ``i`` (the offset stays as it is) and runs the graph; after the
    runs in ``report``, the mean so far is compared with ``reference`` by relative norm and a line
    is printed. Dropout's expected output is attention without dropout, so an unbiased mask gives
    an error that falls like 1/√N. The seed's value is restored afterwards.

    Parameters
    ----------
    run
        Runs the dropout graph once, writing ``out``.
    out
        The dropout graph's output.
    seed
        Its seed tensor (int64, on the GPU).
    reference
        Attention without dropout, fp32.
    runs
        Runs averaged.
    report
        After which runs (counted from 1) the error is measured.

    Returns
    -------
    dict[int, float]
        Runs averaged → relative error of their mean.

    Example
    -------
    >>> errors = dropout_mean_errors(lambda: dropout.execute(pack), dd["o"], dd["seed"], reference)
    >>> errors[1] / errors[64]  # about 8 for an unbiased mask
    """
    import torch

    saved = seed.clone()
    total, errors = torch.zeros_like(reference), {}
    for i in range(runs):
        seed.fill_(i)
        run()
        total += out.float()
        if i + 1 in report:
            mean = total / (i + 1)
            rel = torch.linalg.vector_norm(mean - reference) / torch.linalg.vector_norm(reference)
            errors[i + 1] = rel.item()
            print(f"mean of {i + 1:2d} runs: relative error {errors[i + 1]:.3f}")
    seed.copy_(saved)
    return errors


def replay_and_advance(run: Callable[[], Any], out: Any, offset: Any, at: int = 7) -> tuple[bool, bool]:
    """Whether a fixed seed and offset replay bit for bit, and whether the next offset differs.

    The offset is set to ``at`` and the graph runs twice (the two outputs compared with
    ``torch.equal``), then to ``at + 1`` and it runs once more (compared with the first). The
    offset is left at ``at + 1``.

    Parameters
    ----------
    run
        Runs the dropout graph once, writing ``out``.
    out
        The dropout graph's output.
    offset
        Its offset tensor (int64, on the GPU).
    at
        The offset replayed.

    Returns
    -------
    tuple[bool, bool]
        ``(same, differs)``: the two runs at ``at`` are bit-identical; the run at ``at + 1``
        differs from them.

    Example
    -------
    >>> same, differs = replay_and_advance(lambda: dropout.execute(pack), dd["o"], dd["offset"])
    >>> assert same and differs
    """
    import torch

    offset.fill_(at)
    run()
    first = out.clone()
    run()
    same = torch.equal(first, out)
    offset.fill_(at + 1)
    run()
    differs = not torch.equal(first, out)
    return same, differs


def plot_costs(errors: Mapping[int, float], p: float, dropout_cost: Any, det_cost: Any) -> Any:
    """The page's figure: the dropout average converging, and what each switch costs.

    Left, the relative error of the mean of N dropout runs against N (log-log), beside 1/√N
    from N = 1. Right, bars of the median µs per call with their in-run intervals: without and
    with dropout, then the default and the deterministic backward. Two different calls share that
    µs axis, so each pair is labelled with its call and shape, B×S tokens, as the latest
    :func:`dropout_inputs` and :func:`backward_graph` made them (the call alone when not known),
    and a line divides them.

    Parameters
    ----------
    errors
        Runs averaged → relative error (:func:`dropout_mean_errors`).
    p
        The dropout probability, for the title.
    dropout_cost
        The :class:`~cudnn_guide.measure.compare.Comparison` of ``"with dropout"`` and
        ``"without dropout"``.
    det_cost
        The comparison of ``"deterministic"`` and ``"default (atomics)"``.

    Returns
    -------
    Any
        The figure.

    Example
    -------
    >>> plot_costs(errors, 0.1, dropout_cost, det_cost)
    >>> plt.show()
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    ns = list(errors)
    axes[0].loglog(ns, [errors[n] for n in ns], "o-", label="measured")
    axes[0].loglog(ns, [errors[1] / n**0.5 for n in ns], "--", label="1/√N from N=1")
    axes[0].set_xlabel("dropout runs averaged (N)")
    axes[0].set_ylabel("relative error vs no dropout")
    axes[0].set_title(f"dropout p={p}: the average converges")
    axes[0].legend()
    for i, (cmp_, names) in enumerate(
        (
            (dropout_cost, ("without dropout", "with dropout")),
            (det_cost, ("default (atomics)", "deterministic")),
        )
    ):
        for j, name in enumerate(names):
            e = cmp_.estimate(name)
            err = [[e["value"] - e["low"]], [e["high"] - e["value"]]]
            axes[1].bar(i * 3 + j, e["value"], yerr=err, capsize=3, color=f"C{j}", label=name)
    axes[1].set_xticks([0, 1, 3, 4], ["no dropout", "dropout", "default", "deterministic"])
    axes[1].set_xticks([0.5, 3.5], [_call_label("forward"), _call_label("backward")], minor=True)
    axes[1].tick_params(axis="x", which="minor", length=0, pad=22)
    axes[1].axvline(2, color="0.6", linewidth=1)
    axes[1].set_ylabel("µs per call (median, in-run interval)")
    axes[1].set_title("what each switch costs, each on its own call")
    return fig


def _call_label(call: str) -> str:
    """``"attention forward, 4×2048 tokens"`` from :data:`_SHAPES`; the call alone when not known."""
    if call not in _SHAPES:
        return f"attention {call}"
    b, s = _SHAPES[call]
    return f"attention {call}, {b}×{s} tokens"


def fa4_sentence(
    fa4_cmp: Any, step_label: str, distinct: int | None, fa4_ok: bool, fa4_label: str, fa4_detail: str
) -> str:
    """The conclusions' bullet on FlashAttention-4's deterministic training step.

    Parameters
    ----------
    fa4_cmp
        The comparison of the cuDNN step (candidate) with FlashAttention-4's, or ``None`` when it
        was not timed.
    step_label
        FlashAttention-4's step's name in it.
    distinct
        Its distinct dQ bit patterns in 10 runs.
    fa4_ok
        Whether FlashAttention-4 is installed and usable (:func:`~cudnn_guide.measure.fa4.status`).
    fa4_label
        FlashAttention-4's name.
    fa4_detail
        Why it is not usable, when it is not.

    Returns
    -------
    str
        ``"* Against ... one cuDNN training step ... is <verdict>"``, or why it was not timed.

    Example
    -------
    >>> fa4_sentence(None, "FlashAttention-4, deterministic", None, False, "FlashAttention-4", "not installed")
    '* FlashAttention-4 was not timed: not installed.'
    """
    if fa4_cmp is not None:
        v4 = fa4_cmp.versus[step_label]["verdict"]
        return (
            f"* Against {step_label} ({_patterns(distinct, 'dQ bit pattern')} in 10 runs), one "
            f"cuDNN training step (forward + deterministic backward) is "
            f"{fa4_cmp.describe(step_label)}" + ("." if v4 == "tie" else f": cuDNN is the {v4} of the two.")
        )
    if fa4_ok:
        return f"* {step_label} could not run here (its reason is printed above)."
    return f"* {fa4_label} was not timed: {fa4_detail}."
