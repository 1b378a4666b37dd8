"""LayerNorm and RMSNorm training steps against PyTorch: the measuring machinery of the norms page.

The LayerNorm and RMSNorm page times a norm's training forward and its forward + backward as
cuDNN graphs (:mod:`cudnn_guide.graphs.norms`) against PyTorch eager and ``torch.compile``
(default), then a fused residual add → norm, then a sweep over model widths. This module holds
what those cells share:

* the graphs as launchers and their checks against PyTorch autograd in fp32
  (:func:`norm_launchers`, :func:`checked_graphs`);
* the PyTorch baselines as autograd training steps, each checked (:func:`torch_training`,
  :func:`checked_baselines`);
* one pass of one norm timed in interleaved rounds (:func:`compare_pass`, :func:`pass_bytes`) and
  its table (:func:`pass_table`);
* the fused residual add → norm, checked and timed (:func:`residual_comparison`), and its table
  (:func:`residual_table`);
* the width sweep's contenders, each graph checked when first built (:func:`width_contenders`);
* the conclusions' sentences, from the comparisons (:func:`step_item`, :func:`residual_item`).

The graphs, the baselines and the timing need a GPU; the byte counts, the input selection, the
training step's plumbing and the sentences do not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cudnn_guide import check
from cudnn_guide.graphs import norms

__all__ = [
    "COMPILED",
    "EAGER",
    "LABELS",
    "PASSES",
    "checked_baselines",
    "checked_graphs",
    "compare_pass",
    "grad_inputs",
    "norm_launchers",
    "pass_bytes",
    "pass_table",
    "residual_comparison",
    "residual_item",
    "residual_table",
    "step_item",
    "torch_training",
    "width_contenders",
]

EAGER = "PyTorch eager"
"""The eager PyTorch contender's name."""

COMPILED = "torch.compile (default)"
"""The compiled PyTorch contender's name (``torch.compile``, default mode)."""

LABELS = {"layer": "LayerNorm", "rms": "RMSNorm"}
""":attr:`~cudnn_guide.graphs.norms.NormProblem.kind` → the norm's name on the page."""

PASSES = {"forward (training)": 1, "forward + backward": 2}
"""The timed passes → the launcher of a :func:`checked_baselines` entry that runs it
(1: the forward, 2: the training step)."""


def norm_launchers(problem: norms.NormProblem, data: dict[str, Any]) -> tuple[Callable[[], None], Callable[[], None]]:
    """The forward and backward graphs of ``problem`` on the buffers ``data``, as launchers.

    Parameters
    ----------
    problem
        The norm and its shape.
    data
        From :meth:`~cudnn_guide.graphs.norms.NormProblem.make_inputs`.

    Returns
    -------
    tuple[Callable[[], None], Callable[[], None]]
        The forward (TRAINING phase: it writes the statistics) and the backward, each bound to
        ``data``.

    Example
    -------
    >>> fwd, bwd = norm_launchers(p, p.make_inputs(seed=1))
    >>> fwd(); bwd()
    """
    f, b = norms.norm_forward_graph(problem, data), norms.norm_backward_graph(problem, data)
    return f.bind(norms.pack_norm(f, data, eps=problem.eps)), b.bind(norms.pack_norm(b, data))


def grad_inputs(problem: norms.NormProblem, data: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs of the norm that get a gradient: ``x``, ``scale`` and, for LayerNorm, ``bias``.

    Parameters
    ----------
    problem
        The norm (its ``kind`` decides).
    data
        The buffers by name.

    Returns
    -------
    dict[str, Any]
        Name → tensor, in the order ``x``, ``scale`` (, ``bias``).

    Example
    -------
    >>> list(grad_inputs(NormProblem(kind="rms"), {"x": 1, "scale": 2, "bias": 3}))
    ['x', 'scale']
    """
    names = ("x", "scale", "bias") if problem.kind == "layer" else ("x", "scale")
    return {n: data[n] for n in names}


def torch_training(
    problem: norms.NormProblem, data: Mapping[str, Any], fn: Callable[..., Any]
) -> tuple[Callable[[], Any], Callable[[], Any], dict[str, Any]]:
    """A PyTorch norm as the forward of a training step and as the whole step, on fresh leaves.

    The leaves are copies of :func:`grad_inputs` that require gradients, so that the forward saves
    its statistics as in training; the step is
    :func:`~cudnn_guide.measure.baselines.training_step`: clear the gradients, ``fn(**leaves)``,
    then ``backward(data["dy"])``.

    Parameters
    ----------
    problem
        The norm.
    data
        The buffers by name (``x``, ``scale``, ``bias`` for LayerNorm, ``dy``).
    fn
        The forward, called as ``fn(x=..., scale=...[, bias=...])`` (``problem.torch_forward`` or a
        compiled version of it).

    Returns
    -------
    tuple[Callable[[], Any], Callable[[], Any], dict[str, Any]]
        The forward launcher, the training-step launcher, and the leaves (each ``.grad`` holds the
        last step's gradient).

    Example
    -------
    >>> forward, step, leaves = torch_training(p, data, p.torch_forward)
    >>> step(); leaves["x"].grad  # dx of this step
    """
    from cudnn_guide.measure import baselines

    leaves = {n: t.detach().clone().requires_grad_(True) for n, t in grad_inputs(problem, data).items()}
    return (lambda: fn(**leaves)), baselines.training_step(fn, leaves, data["dy"]), leaves


def checked_graphs(
    problem: norms.NormProblem, *, seed: int
) -> tuple[tuple[norms.NormProblem, dict[str, Any], Callable[[], None], Callable[[], None]], list[Any]]:
    """Build the forward and backward graphs of ``problem``, run them once and check every output.

    ``y``, ``inv_var``, ``dx`` and ``dscale`` are poisoned first; the output and the gradients of
    :func:`grad_inputs` are checked against PyTorch autograd in fp32
    (:func:`~cudnn_guide.check.reference_grads`), the saved statistics against
    :meth:`~cudnn_guide.graphs.norms.NormProblem.torch_stats`. Each check joins the page's record.

    Parameters
    ----------
    problem
        The norm and its shape.
    seed
        The inputs' seed (:meth:`~cudnn_guide.graphs.norms.NormProblem.make_inputs`).

    Returns
    -------
    tuple
        ``(problem, data, forward launcher, backward launcher)`` and the checks, named
        ``"<problem> y"``, ``"<problem> <statistic>"``, ``"<problem> d<input>"`` in that order.

    Example
    -------
    >>> (p, data, fwd, bwd), checks = checked_graphs(NormProblem(kind="rms"), seed=1)
    """
    p = problem
    data = p.make_inputs(seed=seed)
    fwd_launch, bwd_launch = norm_launchers(p, data)
    check.poison(data["y"], data["inv_var"], data["dx"], data["dscale"])
    fwd_launch()
    bwd_launch()
    params = grad_inputs(p, data)
    ref_y, ref_grads = check.reference_grads(lambda **kw: p.torch_forward(**kw), params, data["dy"])
    stats = p.torch_stats(data["x"])
    checks = [check.check(data["y"], ref_y, name=f"{p} y")]
    checks += [check.check(data[n], stats[n], name=f"{p} {n}") for n in stats]
    checks += [check.check(data["d" + n], ref_grads[n], name=f"{p} d{n}") for n in params]
    return (p, data, fwd_launch, bwd_launch), checks


def checked_baselines(
    problem: norms.NormProblem,
    data: dict[str, Any],
    fwd_launch: Callable[[], None],
    bwd_launch: Callable[[], None],
    *,
    candidate: str,
) -> tuple[dict[tuple[str, str], tuple[Any, ...]], list[Any]]:
    """PyTorch eager and ``torch.compile`` (default) training steps beside the cuDNN graphs, checked.

    Each PyTorch step (:func:`torch_training`) runs once and its ``dx`` is checked against PyTorch
    autograd in fp32, eager first; the cuDNN graphs' step is the forward then the backward.

    Parameters
    ----------
    problem
        The norm.
    data
        Its buffers, as :func:`checked_graphs` made them.
    fwd_launch
        The cuDNN forward launcher.
    bwd_launch
        The cuDNN backward launcher.
    candidate
        The cuDNN contender's name.

    Returns
    -------
    tuple
        ``(norm name, contender) → (problem, forward launcher, training-step launcher)`` for
        :data:`EAGER`, :data:`COMPILED` and ``candidate`` in that order, and the two checks, named
        ``"<contender> <norm name> dx"``.

    Example
    -------
    >>> impls, checks = checked_baselines(p, data, fwd, bwd, candidate="cuDNN graphs (heuristics A)")
    >>> impls[("RMSNorm", "PyTorch eager")][2]()  # one training step
    """
    from cudnn_guide.measure import baselines

    p, label = problem, LABELS[problem.kind]
    eager = torch_training(p, data, p.torch_forward)
    compiled = torch_training(p, data, baselines.compile_quietly(p.torch_forward, mode="default"))
    impls: dict[tuple[str, str], tuple[Any, ...]] = {}
    checks = []
    for name, (forward, step, leaves) in ((EAGER, eager), (COMPILED, compiled)):
        step()
        want = check.reference_grads(lambda **kw: p.torch_forward(**kw), {n: data[n] for n in leaves}, data["dy"])
        checks.append(check.check(leaves["x"].grad, want[1]["x"], name=f"{name} {label} dx"))
        impls[(label, name)] = (p, forward, step)

    def cudnn_step(f: Callable[[], None] = fwd_launch, b: Callable[[], None] = bwd_launch) -> None:
        f()
        b()

    impls[(label, candidate)] = (p, fwd_launch, cudnn_step)
    return impls, checks


def pass_bytes(problem: norms.NormProblem, pass_name: str) -> int:
    """The fewest bytes one timed pass moves: the forward's, plus the backward's for the training step.

    Parameters
    ----------
    problem
        The norm and its shape.
    pass_name
        A key of :data:`PASSES`.

    Returns
    -------
    int
        Bytes per call.

    Raises
    ------
    KeyError
        A pass that is not in :data:`PASSES`.

    Example
    -------
    >>> pass_bytes(NormProblem(tokens=16384, hidden=4096), "forward + backward") // 2**20
    640
    """
    which = PASSES[pass_name]
    return problem.forward_bytes + (problem.backward_bytes if which == 2 else 0)


def compare_pass(
    impls: Mapping[tuple[str, str], tuple[Any, ...]], label: str, pass_name: str, *, candidate: str
) -> Any:
    """Time one pass of one norm: the cuDNN graphs against PyTorch eager and ``torch.compile``.

    A :func:`~cudnn_guide.measure.compare.compare` of ``candidate``, :data:`EAGER` and
    :data:`COMPILED` (in that order) in up to 11 interleaved rounds with a cold L2, over
    :func:`pass_bytes`, with ``params={"norm": label, "pass": pass_name}`` and the tag
    ``"<label> <pass_name>"``.

    Parameters
    ----------
    impls
        From :func:`checked_baselines`, every norm's entries together.
    label
        The norm's name (a value of :data:`LABELS`).
    pass_name
        A key of :data:`PASSES`.
    candidate
        The cuDNN contender's name.

    Returns
    -------
    Any
        The :class:`~cudnn_guide.measure.compare.Comparison`.

    Example
    -------
    >>> res = compare_pass(impls, "LayerNorm", "forward + backward", candidate=CUDNN)
    >>> res.describe("PyTorch eager")
    """
    from cudnn_guide.measure import compare

    p, which = impls[(label, candidate)][0], PASSES[pass_name]
    return compare.compare(
        {n: impls[(label, n)][which] for n in (candidate, EAGER, COMPILED)},
        candidate=candidate,
        l2="cold",
        rounds=11,
        bytes=pass_bytes(p, pass_name),
        params={"norm": label, "pass": pass_name},
        tag=f"{label} {pass_name}",
    )


def pass_table(measurements: Iterable[Any], label: str, tokens: int, hidden: int) -> Any:
    """One norm's measurements as a table of GB/s: a row per contender, a column per pass.

    The title names the norm and its shape; the table adds the unit (``GB/s (at the median)``),
    so the title does not repeat it.

    Parameters
    ----------
    measurements
        The measurements of :func:`compare_pass`, every norm's together.
    label
        The norm to show (``params["norm"]``).
    tokens
        Tokens, for the title.
    hidden
        Features, for the title.

    Returns
    -------
    Any
        A :class:`~cudnn_guide.report.tables.ComparisonTable`.

    Example
    -------
    >>> pass_table(base, "LayerNorm", 16384, 4096)
    """
    from cudnn_guide.report import ComparisonTable

    return ComparisonTable(
        [m for m in measurements if m.params["norm"] == label],
        row="impl",
        column="pass",
        metric="gbps",
        title=f"{label}, {tokens} × {hidden} bf16 (higher is better)",
    )


def residual_comparison(problem: norms.NormProblem, *, candidate: str, seed: int) -> tuple[Any, list[Any]]:
    """The fused residual add → norm as one cuDNN graph, against the add then the norm in PyTorch.

    The graph (named after ``problem``) reads x and r once and writes the sum s and y; its y and s
    are checked against fp32 (both poisoned first). PyTorch's ``add_then_norm`` returns
    ``(x + r, norm(x + r))`` on leaves that require gradients (a training forward), eager and
    under ``torch.compile`` (default); each y is checked, the compiled one first. Then the three,
    ``candidate``, :data:`EAGER`, :data:`COMPILED` in that order, are compared in up to 11
    interleaved rounds with a cold L2 over ``problem.forward_bytes``, with
    ``params={"norm": <norm name>}`` and the tag ``"residual+<norm name>"``.

    Parameters
    ----------
    problem
        A :class:`~cudnn_guide.graphs.norms.NormProblem` with ``residual=True``.
    candidate
        The fused graph's contender name.
    seed
        The inputs' seed.

    Returns
    -------
    tuple[Any, list[Any]]
        The :class:`~cudnn_guide.measure.compare.Comparison` and the four checks.

    Example
    -------
    >>> p = NormProblem(kind="rms", residual=True)
    >>> res, checks = residual_comparison(p, candidate="cuDNN graph (fused, heuristics A)", seed=2)
    """
    from cudnn_guide.measure import baselines, compare

    p, label = problem, LABELS[problem.kind]
    data = p.make_inputs(seed=seed)
    fused = norms.norm_forward_graph(p, data, name=f"{p}")
    res_pack = norms.pack_norm(fused, data, eps=p.eps)
    check.poison(data["y"], data["s"])
    fused.execute(res_pack)
    ref = check.reference(p.torch_forward, data["x"], data["scale"], data.get("bias"), data["r"])
    checks = [
        check.check(data["y"], ref, name=f"{p} y"),
        check.check(data["s"], data["x"].float() + data["r"].float(), name=f"{p} s"),
    ]
    x, r, w, b = (
        t.detach().clone().requires_grad_(True) if t is not None else None
        for t in (data["x"], data["r"], data["scale"], data.get("bias"))
    )

    def add_then_norm(x: Any, r: Any, w: Any, b: Any, p: norms.NormProblem = p) -> tuple[Any, Any]:
        s = x + r
        return s, p.torch_forward(s, w, b)

    compiled = baselines.compile_quietly(add_then_norm, mode="default")
    checks.append(check.check(compiled(x, r, w, b)[1].detach(), ref, name=f"{COMPILED} {label} (residual)"))
    checks.append(check.check(add_then_norm(x, r, w, b)[1].detach(), ref, name=f"{EAGER} {label} (residual)"))
    res = compare.compare(
        {
            candidate: fused.bind(res_pack),
            EAGER: lambda f=add_then_norm, a=(x, r, w, b): f(*a),
            COMPILED: lambda f=compiled, a=(x, r, w, b): f(*a),
        },
        candidate=candidate,
        l2="cold",
        rounds=11,
        bytes=p.forward_bytes,
        params={"norm": label},
        tag=f"residual+{label}",
    )
    return res, checks


def residual_table(measurements: Iterable[Any]) -> Any:
    """The fused residual add → norm's measurements as a table of GB/s: a row per contender, a column per norm.

    Every contender's GB/s counts the fewest bytes (the fused graph's), as the title says; the
    table adds the unit (``GB/s (at the median)``), so the title does not repeat it.

    Parameters
    ----------
    measurements
        The measurements of every norm's :func:`residual_comparison`.

    Returns
    -------
    Any
        A :class:`~cudnn_guide.report.tables.ComparisonTable`.

    Example
    -------
    >>> residual_table(residual)
    """
    from cudnn_guide.report import ComparisonTable

    return ComparisonTable(
        measurements,
        row="impl",
        column="norm",
        metric="gbps",
        title="residual add → norm (training forward), over the fewest bytes",
    )


def width_contenders(tokens: int) -> dict[str, Callable[[int], Callable[[], Any]]]:
    """The width sweep's contenders: the cuDNN training step and PyTorch eager's, per norm.

    Each width's graphs are built once, on the first factory that asks for that norm and width
    (inputs seeded with the width), run once with ``dx`` poisoned and ``dx`` checked against
    PyTorch autograd in fp32 (the check joins the page's record; nothing is printed). The cuDNN
    step is the forward then the backward; PyTorch eager's is :func:`torch_training`'s step, on
    fresh leaves at each factory call.

    Parameters
    ----------
    tokens
        Tokens of every width.

    Returns
    -------
    dict[str, Callable[[int], Callable[[], Any]]]
        ``"cuDNN <norm name>"`` and ``"PyTorch eager <norm name>"``, LayerNorm first → a factory
        of the width, for :func:`~cudnn_guide.measure.sweep.sweep`.

    Example
    -------
    >>> impls = width_contenders(16384)
    >>> sweep.sweep([1024, 2048], impls, x="hidden", l2="cold", bytes=lambda h: 5 * 16384 * h * 2)
    """
    made: dict[tuple[str, int], tuple[Any, ...]] = {}

    def setup(kind: str, h: int) -> tuple[Any, ...]:
        if (kind, h) not in made:
            p = norms.NormProblem(tokens=tokens, hidden=h, kind=kind)
            data = p.make_inputs(seed=h)
            fl, bl = norm_launchers(p, data)
            check.poison(data["dx"])
            fl()
            bl()
            grads = check.reference_grads(lambda **kw: p.torch_forward(**kw), grad_inputs(p, data), data["dy"])[1]
            check.check(data["dx"], grads["x"], name=f"{p} dx")
            made[(kind, h)] = (p, data, fl, bl)
        return made[(kind, h)]

    def cudnn_at(kind: str) -> Callable[[int], Callable[[], None]]:
        def factory(h: int) -> Callable[[], None]:
            _, _, fl, bl = setup(kind, h)

            def step() -> None:
                fl()
                bl()

            return step

        return factory

    def eager_at(kind: str) -> Callable[[int], Callable[[], Any]]:
        def factory(h: int) -> Callable[[], Any]:
            p, data, _, _ = setup(kind, h)
            return torch_training(p, data, p.torch_forward)[1]

        return factory

    impls: dict[str, Callable[[int], Callable[[], Any]]] = {}
    for kind, label in LABELS.items():
        impls[f"cuDNN {label}"] = cudnn_at(kind)
        impls[f"PyTorch eager {label}"] = eager_at(kind)
    return impls


def step_item(
    label: str, results: Mapping[Any, Any], copy_gbps: float, *, candidate: str, tokens: int, hidden: int
) -> str:
    """The conclusion's bullet for one norm's training step: time, share of copy bandwidth, verdicts.

    Parameters
    ----------
    label
        The norm's name.
    results
        ``(label, pass name) → Comparison`` for both :data:`PASSES`.
    copy_gbps
        The measured copy bandwidth, GB/s.
    candidate
        The cuDNN contender's name.
    tokens
        Tokens, for the text.
    hidden
        Features, for the text.

    Returns
    -------
    str
        A Markdown bullet: the cuDNN step's µs with its in-run interval, its share of the copy
        bandwidth and its verdicts against :data:`EAGER` and :data:`COMPILED`, then the forward's
        share alone.

    Example
    -------
    >>> step_item("RMSNorm", results, ceil.copy_gbps, candidate=CUDNN, tokens=16384, hidden=4096)
    """
    res = results[(label, "forward + backward")]
    fwd = results[(label, "forward (training)")]
    est = res.estimate(candidate, "µs")
    share = 100 * res.measurements[candidate].gbps / copy_gbps
    return (
        f"* {label} training step at {tokens}×{hidden}: cuDNN {est['value']:.0f} µs "
        f"(in-run 95% interval {est['low']:.0f}–{est['high']:.0f}), {share:.0f}% of "
        f"copy bandwidth: {res.describe(EAGER)}; "
        f"{res.describe(COMPILED)}. Its forward alone reaches "
        f"{100 * fwd.measurements[candidate].gbps / copy_gbps:.0f}%."
    )


def residual_item(label: str, res: Any, eager_over_fused: float) -> str:
    """The conclusion's bullet for one fused residual add → norm: its verdicts and the bytes saved.

    Parameters
    ----------
    label
        The norm's name.
    res
        Its :func:`residual_comparison`.
    eager_over_fused
        The bytes eager PyTorch moves over the fused graph's.

    Returns
    -------
    str
        A Markdown bullet: the bytes eager PyTorch moves over the fused graph's first, then the
        verdict against :data:`EAGER` and, in a sentence of its own, against :data:`COMPILED`
        (each verdict's description ends with its back-to-back loop's, so that nothing after
        it reads as part of it).

    Example
    -------
    >>> residual_item("LayerNorm", results[("residual", "LayerNorm")], 5 / 4)
    """
    return (
        f"* Residual add → {label}, where eager PyTorch moves {eager_over_fused:.2f}× the "
        f"fused graph's bytes: the fused graph is {res.describe(EAGER)}. It is "
        f"{res.describe(COMPILED)}."
    )
