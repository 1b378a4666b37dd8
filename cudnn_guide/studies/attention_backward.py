"""Attention for training, measured: cuDNN's forward (with statistics) and backward graphs against autograd.

The attention-backward page builds the two graphs in its lesson; this module checks and times them:

* :func:`check_forward_backward` runs both graphs on NaN-filled outputs and checks O, dQ, dK, dV
  against the fp32 autograd reference and the statistics against :func:`log_sum_exp`;
* :func:`sdpa_backends`, :func:`torch_training_step` and :func:`grads_checked`: PyTorch's SDPA
  backends, each forced, as one autograd training step whose gradients are checked before it is
  admitted (:func:`~cudnn_guide.measure.baselines.admit`), one short line per gradient
  (:func:`check_line`);
* :func:`time_split`: the forward and the backward timed separately;
* :class:`TrainingSweep`: the factories of a sweep over sequence lengths: the page's two graphs
  rebuilt at each length (:func:`training_pair`) and checked against autograd, then each PyTorch
  backend and FlashAttention-4 on the same tensors;
* :func:`plot_tflops`: the sweep's TFLOP/s by length under the datasheet bf16 peak;
* :func:`peak_length` and :func:`conclusions`: the sentences the page concludes with, from the data.

The graphs and the timings need a GPU; the shapes, the reference and the sentences do not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cudnn_guide.measure import baselines

__all__ = [
    "BACKEND_NAMES",
    "TrainingSweep",
    "check_forward_backward",
    "check_line",
    "conclusions",
    "grads_checked",
    "log_sum_exp",
    "peak_length",
    "plot_tflops",
    "sdpa_backends",
    "time_split",
    "torch_training_step",
    "training_pair",
]

BACKEND_NAMES = baselines.SDPA_BACKEND_NAMES
"""The display name of each of :func:`~cudnn_guide.measure.baselines.sdpa_backends`' backends on the page."""

_LEGEND_IN = 2.6
"""Inches :func:`plot_tflops` adds to the figure's width for the legend beside the axes."""

_VERDICT_WORDS = {"faster": "faster", "tie": "tied", "slower": "slower"}
"""Each verdict (:mod:`cudnn_guide.measure.verdicts`), as :func:`conclusions` counts it."""


def log_sum_exp(q: Any, k: Any, scale: float) -> Any:
    """The softmax statistics of causal attention: the log-sum-exp of each row of scaled, masked scores.

    Computed in fp32 with TF32 off (:func:`~cudnn_guide.check.full_precision`): ``q kᵀ · scale``,
    each key after the query masked to ``-inf`` (top-left causal), then ``logsumexp`` over the keys.
    The B×H×S×S scores are freed before it returns.

    Parameters
    ----------
    q
        B×H×S×D queries.
    k
        B×H×S×D keys (as many as queries).
    scale
        The softmax scale.

    Returns
    -------
    Any
        B×H×S×1 fp32 statistics, as ``sdpa(..., generate_stats=True)`` writes them.

    Example
    -------
    >>> import torch
    >>> q = torch.zeros(1, 1, 3, 4)
    >>> log_sum_exp(q, q, 0.5).flatten().tolist()  # log(1), log(2), log(3)
    [0.0, 0.6931471824645996, 1.0986123085021973]
    """
    import torch

    from cudnn_guide import check

    s = q.shape[-2]
    with check.full_precision():
        scores = (q.float() @ k.float().transpose(-1, -2)) * scale
        future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        lse = torch.logsumexp(scores.masked_fill(future, float("-inf")), -1, keepdim=True)
        del scores
    return lse


def check_forward_backward(
    run: Callable[[], Any], tensors: Mapping[str, Any], ref_out: Any, ref_grads: Mapping[str, Any], scale: float
) -> list[Any]:
    """Run the forward and backward graphs on NaN-filled outputs and check every output.

    ``o``, ``stats``, ``dq``, ``dk`` and ``dv`` are filled with NaN first (an element never written
    fails), then ``run()`` executes both graphs. O and dQ, dK, dV are checked against the fp32
    reference by relative norm, the statistics against :func:`log_sum_exp` of ``q`` and ``k``. Each
    passing check joins the page's record; a failing one raises.

    Parameters
    ----------
    run
        Executes the forward, then the backward graph, writing into ``tensors``.
    tensors
        ``q, k, o, stats, dq, dk, dv`` (and any others), by name.
    ref_out
        The reference O (fp32; detached here).
    ref_grads
        The reference gradients by input name, ``{"q": ..., "k": ..., "v": ...}``.
    scale
        The softmax scale of both graphs.

    Returns
    -------
    list[Any]
        The passing :class:`~cudnn_guide.check.CheckResult` of ``O``, ``dQ``, ``dK``, ``dV`` and
        ``stats (log-sum-exp)``, in that order.

    Example
    -------
    >>> checks = check_forward_backward(run_both, ins, ref, ref_grads, problem.scale)
    >>> for c in checks:
    ...     print(c)
    """
    from cudnn_guide import check

    check.poison(*(tensors[n] for n in ("o", "stats", "dq", "dk", "dv")))
    run()
    checks = [check.check(tensors["o"], ref_out.detach(), name="O")]
    checks += [check.check(tensors["d" + n], ref_grads[n], name="d" + n.upper()) for n in "qkv"]
    lse = log_sum_exp(tensors["q"], tensors["k"], scale)
    checks.append(check.check(tensors["stats"], lse, name="stats (log-sum-exp)"))
    return checks


def sdpa_backends() -> dict[str, Any]:
    """PyTorch's SDPA backends by the names the page shows (:data:`BACKEND_NAMES`), in PyTorch's order.

    Returns
    -------
    dict[str, Any]
        Display name → ``torch.nn.attention.SDPBackend``, from
        :func:`~cudnn_guide.measure.baselines.sdpa_backends`.

    Example
    -------
    >>> list(sdpa_backends())[0]
    'PyTorch SDPA, flash backend (FlashAttention-2)'
    """
    return {BACKEND_NAMES.get(n, n): be for n, be in baselines.sdpa_backends().items()}


def torch_training_step(
    backend: Any, problem: Any, data: Mapping[str, Any]
) -> tuple[Callable[[], Any], Callable[[], list[Any]]]:
    """One autograd training step of PyTorch's SDPA on one forced backend, and its gradients.

    New leaves (``q``, ``k``, ``v`` detached, requiring gradients) go through
    ``scaled_dot_product_attention`` under ``sdpa_kernel([backend])`` with the problem's mask and
    scale, then ``backward(d_o)``; the leaves' gradients are cleared before each step
    (:func:`~cudnn_guide.measure.baselines.training_step`).

    Parameters
    ----------
    backend
        A ``torch.nn.attention.SDPBackend``.
    problem
        The :class:`~cudnn_guide.graphs.attention.SdpaProblem` (its ``causal`` and ``scale``).
    data
        ``q``, ``k``, ``v`` and ``d_o``, by name.

    Returns
    -------
    tuple[Callable[[], Any], Callable[[], list[Any]]]
        The step, and a function of no arguments returning ``[dq, dk, dv]`` of the last step.

    Example
    -------
    >>> step, grads = torch_training_step(SDPBackend.FLASH_ATTENTION, problem, ins)
    >>> step(); dq, dk, dv = grads()
    """
    leaves = [data[n].detach().requires_grad_(True) for n in "qkv"]
    attend = baselines.forced_sdpa(backend, is_causal=problem.causal, scale=problem.scale)
    step = baselines.training_step(attend, leaves, data["d_o"])
    return step, lambda: [x.grad for x in leaves]


def check_line(result: Any) -> str:
    """One short line for a check that passed (:func:`~cudnn_guide.check.check` raises on a failure).

    Parameters
    ----------
    result
        A :class:`~cudnn_guide.check.CheckResult`.

    Returns
    -------
    str
        ``"<name>: rel. error <e> (tolerance <t>)"``.

    Example
    -------
    >>> from cudnn_guide.check import CheckResult
    >>> check_line(CheckResult("dQ", "bfloat16", 2.46e-3, 1.6e-2, 0, 8))
    'dQ: rel. error 2.5e-03 (tolerance 1.6e-02)'
    """
    return f"{result.name}: rel. error {result.rel_error:.1e} (tolerance {result.tolerance:.1e})"


def grads_checked(name: str, grads: Callable[[], Any], reference: Mapping[str, Any]) -> Callable[[Any], list[str]]:
    """A ``check=`` for :func:`~cudnn_guide.measure.baselines.admit`: dQ, dK, dV against the reference.

    Parameters
    ----------
    name
        The contender's name; the checks are named ``"<name> dQ"``, ``"<name> dK"``, ``"<name> dV"``.
    grads
        Returns the contender's ``[dq, dk, dv]`` after its step has run.
    reference
        The reference gradients by input name, ``{"q": ..., "k": ..., "v": ...}``, read when the
        check runs.

    Returns
    -------
    Callable[[Any], list[str]]
        Given the step's output (unused), checks the three gradients (raising on a wrong one) and
        returns one :func:`check_line` each.

    Example
    -------
    >>> step, grads = torch_training_step(backend, problem, ins)
    >>> baselines.admit({}, name, step, check=grads_checked(name, grads, ref_grads))
    """
    from cudnn_guide import check

    return lambda _: [
        check_line(check.check(g, reference[n], name=f"{name} d{n.upper()}")) for n, g in zip("qkv", grads())
    ]


def time_split(parts: Mapping[str, tuple[Callable[[], Any], float]], problem: Any) -> list[Any]:
    """Time each graph alone, cold L2, with its share of the problem's FLOPs.

    Parameters
    ----------
    parts
        Label → (launcher, work), where ``work`` is the graph's FLOPs in units of the causal
        forward's (1.0 for the forward, 2.5 for the backward's five GEMMs to two); timed in order.
    problem
        The :class:`~cudnn_guide.graphs.attention.SdpaProblem` (its ``flops``; ``str(problem)``
        is each measurement's ``size``).

    Returns
    -------
    list[Any]
        One :class:`~cudnn_guide.measure.measurement.Measurement` per part, labelled as given.

    Example
    -------
    >>> split = time_split({"cuDNN forward (with stats)": (fwd, 1.0), "cuDNN backward": (bwd, 2.5)}, problem)
    >>> split[1].median_ms / split[0].median_ms
    """
    from cudnn_guide.measure import bench

    return [
        bench.benchmark(
            launch,
            label=label,
            l2="cold",
            flops=work * problem.flops,
            params={"impl": label, "size": str(problem)},
        )
        for label, (launch, work) in parts.items()
    ]


def training_pair(
    build_forward: Callable[..., tuple[Any, Any]],
    build_backward: Callable[..., tuple[Any, Any]],
    handle: Any,
    ins: Mapping[str, Any],
) -> tuple[Any, Any, Any, Any]:
    """Both graphs for :func:`~cudnn_guide.graphs.attention.make_training_inputs`' tensors, adopted.

    Parameters
    ----------
    build_forward
        ``build_forward(q, k, v, o, stats)`` → (built ``cudnn.pygraph``, variant pack): the page's
        training forward.
    build_backward
        ``build_backward(q, k, v, o, d_o, stats, dq, dk, dv)`` → (built graph, variant pack).
    handle
        The handle both were built with.
    ins
        The tensors by name.

    Returns
    -------
    tuple[Any, Any, Any, Any]
        The forward as a :class:`~cudnn_guide.graphs.BuiltGraph` named ``"forward"``, its pack, the
        backward (``"backward"``) and its pack.

    Example
    -------
    >>> fwd, fwd_pack, bwd, bwd_pack = training_pair(sdpa_training_forward, sdpa_backward, handle, ins)
    >>> fwd.bind(fwd_pack)(); bwd.bind(bwd_pack)()
    """
    from cudnn_guide import graphs

    gf, fwd_pack = build_forward(*(ins[n] for n in ("q", "k", "v", "o", "stats")))
    gb, bwd_pack = build_backward(*(ins[n] for n in ("q", "k", "v", "o", "d_o", "stats", "dq", "dk", "dv")))
    fwd = graphs.adopt(gf, handle, name="forward")
    bwd = graphs.adopt(gb, handle, name="backward")
    return fwd, fwd_pack, bwd, bwd_pack


class TrainingSweep:
    """The factories of a sweep of one training step (forward + backward) over sequence lengths.

    For :func:`~cudnn_guide.measure.sweep.sweep`, whose factories run in the order of its ``impls``
    at each length: :meth:`cudnn_step` first, since it makes that length's tensors
    (:func:`~cudnn_guide.graphs.attention.make_training_inputs`, seeded with the length), builds the
    page's two graphs on them (:func:`training_pair`), checks their dQ against autograd and keeps
    the tensors in :attr:`cases`; then :meth:`torch_step` (one per backend) and :meth:`fa4_step`
    run on the same tensors.

    Parameters
    ----------
    build_forward
        The page's training forward builder, as :func:`training_pair` takes it.
    build_backward
        The page's backward builder.
    handle
        The handle both build with.
    problem_at
        Length → :class:`~cudnn_guide.graphs.attention.SdpaProblem` at that length.

    Example
    -------
    >>> at = TrainingSweep(sdpa_training_forward, sdpa_backward, handle, problem_at)
    >>> impls = {"cuDNN": at.cudnn_step, "flash": at.torch_step(SDPBackend.FLASH_ATTENTION)}
    >>> result = sweep.sweep([1024, 2048], impls, x="seq_len", l2="cold", candidate="cuDNN")
    """

    def __init__(
        self,
        build_forward: Callable[..., tuple[Any, Any]],
        build_backward: Callable[..., tuple[Any, Any]],
        handle: Any,
        problem_at: Callable[[int], Any],
    ) -> None:
        self.build_forward, self.build_backward, self.handle = build_forward, build_backward, handle
        self.problem_at = problem_at
        self.cases: dict[int, tuple[Any, dict[str, Any]]] = {}
        """Length → (problem, tensors), kept by :meth:`cudnn_step` for the other factories."""

    def cudnn_step(self, s: int) -> Callable[[], None]:
        """Both graphs at length ``s``, checked (dQ against autograd in fp32) before they are timed.

        Parameters
        ----------
        s
            Tokens per sequence.

        Returns
        -------
        Callable[[], None]
            One step: the forward's launcher, then the backward's.
        """
        from cudnn_guide import check
        from cudnn_guide.graphs import attention

        p = self.problem_at(s)
        data = attention.make_training_inputs(p, seed=s)
        f, f_pack, b, b_pack = training_pair(self.build_forward, self.build_backward, self.handle, data)
        fl, bl = f.bind(f_pack), b.bind(b_pack)
        check.poison(data["dq"])
        fl()
        bl()
        qkv = {n: data[n] for n in "qkv"}
        _, grads = check.reference_grads(p.torch_forward, qkv, data["d_o"])
        check.check(data["dq"], grads["q"], name=f"dQ at S={s}")
        del grads
        self.cases[s] = (p, data)

        def step() -> None:
            fl()
            bl()

        return step

    def torch_step(self, backend: Any) -> Callable[[int], Callable[[], Any] | None]:
        """The factory of PyTorch's step on one forced backend (:func:`torch_training_step`).

        Parameters
        ----------
        backend
            A ``torch.nn.attention.SDPBackend``.

        Returns
        -------
        Callable[[int], Callable[[], Any] | None]
            Length → the step, run once; ``None`` (shown as "—") where the backend raises a
            ``RuntimeError`` on that shape.
        """

        def factory(s: int) -> Callable[[], Any] | None:
            p, data = self.cases[s]
            step, _ = torch_training_step(backend, p, data)
            try:
                step()
            except RuntimeError:
                return None  # this backend cannot run this shape: shown as "—"
            return step

        return factory

    def fa4_step(self, s: int) -> Callable[[], Any]:
        """FlashAttention-4's forward + backward at length ``s`` (:func:`~cudnn_guide.measure.fa4.training_step`).

        Parameters
        ----------
        s
            Tokens per sequence.

        Returns
        -------
        Callable[[], Any]
            The step, causal, with the problem's scale.
        """
        from cudnn_guide.measure import fa4

        p, data = self.cases[s]
        qkv_do = (data[n] for n in ("q", "k", "v", "d_o"))
        return fa4.training_step(*qkv_do, causal=True, scale=p.scale)[0]


def peak_length(result: Any, candidate: str) -> Any:
    """The length at which ``candidate`` reached its highest TFLOP/s in a sweep with verdicts.

    Parameters
    ----------
    result
        A :class:`~cudnn_guide.measure.sweep.SweepResult` made with ``candidate=``.
    candidate
        The contender's name.

    Returns
    -------
    Any
        The length (a key of ``result.comparisons``); the first of equal ones.

    Example
    -------
    >>> peak_s = peak_length(result, "cuDNN graphs (fwd + bwd)")
    >>> result.comparisons[peak_s].estimate("cuDNN graphs (fwd + bwd)", "TFLOP/s")
    """
    return max(result.comparisons, key=lambda s: result.comparisons[s].measurements[candidate].tflops)


def plot_tflops(result: Any, ceilings: Any) -> Any:
    """The sweep's TFLOP/s by sequence length (log x), under the GPU's datasheet dense bf16 peak.

    The sweep's candidate (the page's own contender) is drawn last, on top of the others, dashed
    with open squares, so that a contender at the same TFLOP/s (PyTorch's cuDNN backend) cannot
    hide it; the legend sits beside the axes, outside the data.

    Parameters
    ----------
    result
        The sweep (:func:`~cudnn_guide.measure.sweep.sweep`).
    ceilings
        The measured ceilings (:func:`~cudnn_guide.measure.ceilings.measure_ceilings`); its
        ``peak_bf16_tflops`` is drawn as the ceiling.

    Returns
    -------
    Any
        What :func:`~cudnn_guide.report.plot_sweep` returns.

    Example
    -------
    >>> plot_tflops(result, measure_ceilings())
    >>> plt.show()
    """
    from cudnn_guide.report import plot_sweep

    ax = plot_sweep(
        result,
        "tflops",
        logx=True,
        title="causal attention, forward + backward, head dim 128",
        ceiling=ceilings.peak_bf16_tflops,
        ceiling_label="datasheet dense bf16 peak",
    )
    candidate = next(iter(result.comparisons.values())).candidate if result.comparisons else None
    lines = ax.get_lines()
    top = max((artist.get_zorder() for artist in (*lines, *ax.collections)), default=2)
    for line in lines:
        if candidate is not None and line.get_label().split() == candidate.split():  # its name, as wrapped
            line.set(zorder=top + 1, linestyle="--", linewidth=2, marker="s", markersize=9, markerfacecolor="none")
            line.set_markeredgewidth(1.8)
    fig = ax.get_figure()
    width, height = fig.get_size_inches()
    fig.set_size_inches(width + _LEGEND_IN, height)  # room for the legend beside the axes
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return ax


def conclusions(
    result: Any,
    candidate: str,
    peak_seq: Any,
    ceilings: Any,
    seq: int,
    bwd_over_fwd: float,
    fa4_label: str,
    fa4_detail: str,
) -> list[str]:
    """The page's concluding sentences, from its measurements.

    The peak (``candidate``'s TFLOP/s at ``peak_seq``, its in-run interval) and its share of the
    datasheet peak; the backward's time over the forward's against its 2.5× share of the matrix
    work; FlashAttention-4's in-run verdicts counted over the sweep's sizes, the sequence lengths,
    as ``result.describe_verdicts()`` counts them (or why it was not timed); then a line saying
    that the verdicts below are this run's, and one bullet per line of
    ``result.describe_verdicts()``.

    Parameters
    ----------
    result
        The sweep, with verdicts.
    candidate
        The cuDNN step's name in it.
    peak_seq
        The length of the peak (:func:`peak_length`).
    ceilings
        The measured ceilings; ``peak_bf16_tflops`` is the datasheet dense bf16 peak, TFLOP/s.
    seq
        The length at which the forward and backward were timed alone.
    bwd_over_fwd
        The backward's median time over the forward's there.
    fa4_label
        FlashAttention-4's contender name.
    fa4_detail
        Why FlashAttention-4 is not available, for when it was not timed.

    Returns
    -------
    list[str]
        The paragraphs, for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> sentences = conclusions(result, CAND, peak_s, ceil, 4096, 2.88, FA4, FA4_DETAIL)
    >>> Prose(*sentences)
    """
    peak_est = result.comparisons[peak_seq].estimate(candidate, "TFLOP/s")
    fa = [c.versus[fa4_label]["verdict"] for c in result.comparisons.values() if fa4_label in c.versus]
    longer = "longer than" if bwd_over_fwd > 2.5 else "no longer than"
    sizes = len(result.comparisons)
    counts = [f"{word} at {fa.count(v)}" for v, word in _VERDICT_WORDS.items() if fa.count(v)]
    counted = " and ".join([", ".join(counts[:-1]), counts[-1]] if len(counts) > 1 else counts)
    untimed = f"; not timed at {sizes - len(fa)}" if len(fa) < sizes else ""
    bullets = ["* " + line.strip() for line in result.describe_verdicts().splitlines() if line.strip()]
    return [
        f"One cuDNN training step (both graphs built with heuristics A) peaks at "
        f"{peak_est['value']:.0f} TFLOP/s (S={peak_seq}, in-run interval "
        f"{peak_est['low']:.0f}–{peak_est['high']:.0f}), "
        f"{100 * peak_est['value'] / ceilings.peak_bf16_tflops:.0f}% of the datasheet bf16 "
        f"peak.",
        f"At S={seq} the backward takes {bwd_over_fwd:.2f}× the forward's time for "
        f"2.5× its matrix work: {longer} its share of the work alone predicts.",
        (
            f"In this run, against {fa4_label} the cuDNN step is {counted} of {sizes} sizes "
            f"(sequence lengths){untimed}."
            if fa
            else f"{fa4_label} was not timed: {fa4_detail}."
        ),
        *(
            [
                f"Against each baseline in this run, the cuDNN step's speed-up and its verdicts over "
                f"the {sizes} sizes (sequence lengths):",
                *bullets,
            ]
            if bullets
            else []
        ),
    ]
