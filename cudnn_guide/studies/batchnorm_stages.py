"""BatchNorm → ReLU in training and inference, at the ResNet-50 stages: the BatchNorm page's machinery.

The BatchNorm → ReLU page checks cuDNN's training ``batchnorm`` graph (running statistics updated
in place) and an inference graph (cuDNN's ``batchnorm_inference`` node where an engine takes it,
else the folded ``relu(x · a + b)``), then times both against PyTorch eager and ``torch.compile``
(default) at the four ResNet-50 stage shapes. This module holds what those cells share:

* the graphs (:func:`training_graph`, :func:`inference_graph`) and their checks against fp32
  PyTorch (:func:`check_training`, :func:`check_inference`);
* PyTorch's BatchNorm → ReLU as a launcher on copies of the running statistics
  (:func:`torch_fn`), and a baseline's checks in both modes (:func:`check_baseline`);
* every stage's contenders for :func:`~cudnn_guide.measure.sweep.sweep`, each stage built and
  checked when first asked for (:func:`stage_contenders`);
* the two-panel figure (:func:`plot_stages`) and the conclusion's sentences and verdicts
  (:func:`stage_items`, :func:`stage_verdicts`).

The graphs, the checks and the timing need a GPU; the sentences, the verdict count and the
figure do not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cudnn_guide import check
from cudnn_guide.graphs import batchnorm, tensors

__all__ = [
    "MODES",
    "TRAINING_IO",
    "check_baseline",
    "check_inference",
    "check_training",
    "inference_graph",
    "plot_stages",
    "stage_contenders",
    "stage_items",
    "stage_verdicts",
    "torch_fn",
    "training_graph",
]

MODES = ("training", "inference")
"""The two modes timed, in the order the page times and shows them."""

TRAINING_IO = ("x", "scale", "bias", "running_mean", "running_var", "mean", "inv_var", "y")
"""The buffers of :meth:`~cudnn_guide.graphs.batchnorm.BatchNormProblem.make_inputs` the training
graph binds by their own names (the scalars and the next running statistics are bound apart)."""


def training_graph(problem: batchnorm.BatchNormProblem, data: dict[str, Any]) -> tuple[Any, Callable[[], None]]:
    """The training graph of ``problem`` on ``data`` and its launcher; the running statistics update in place.

    ``epsilon`` and ``momentum`` are bound as pass-by-value scalars, and the next running
    statistics to the buffers of the running statistics themselves.

    Parameters
    ----------
    problem
        Shapes, epsilon and momentum.
    data
        From :meth:`~cudnn_guide.graphs.batchnorm.BatchNormProblem.make_inputs`.

    Returns
    -------
    tuple[Any, Callable[[], None]]
        The :class:`~cudnn_guide.graphs.BuiltGraph` and a launcher bound to ``data``.

    Example
    -------
    >>> train, launch = training_graph(p, data)
    >>> launch()  # y, the saved statistics, and the running statistics updated
    """
    built = batchnorm.batchnorm_relu_graph(problem, data, training=True)
    pack = built.pack(
        **{k: data[k] for k in TRAINING_IO},
        epsilon=tensors.scalar_value(problem.eps, rank=4),
        momentum=tensors.scalar_value(problem.momentum, rank=4),
        next_running_mean=data["running_mean"],
        next_running_var=data["running_var"],
    )
    return built, built.bind(pack)


def check_training(problem: batchnorm.BatchNormProblem, data: dict[str, Any], launch: Callable[[], None]) -> list[Any]:
    """Run the training graph once and check y, the saved statistics and the updated running ones.

    y, the saved mean and 1/√(var+eps) are poisoned first. The reference is PyTorch's training
    BatchNorm → ReLU in fp32 from copies of the running statistics taken before the launch; the
    saved statistics are the batch's own (biased variance), the running variance PyTorch's
    (unbiased). Each check joins the page's record.

    Parameters
    ----------
    problem
        Shapes, epsilon and momentum.
    data
        The buffers ``launch`` is bound to.
    launch
        From :func:`training_graph`.

    Returns
    -------
    list[Any]
        The five checks: ``"y = relu(bn(x))"``, ``"saved mean"``, ``"saved 1/sqrt(var+eps)"``,
        ``"updated running mean"``, ``"updated running var (unbiased, as PyTorch)"``.

    Example
    -------
    >>> checks = check_training(p, data, launch)
    """
    import torch

    rm_before, rv_before = data["running_mean"].clone(), data["running_var"].clone()
    check.poison(data["y"], data["mean"], data["inv_var"])
    launch()

    ref_rm, ref_rv = rm_before.clone(), rv_before.clone()
    ref_y = check.reference(
        lambda x, s, b: problem.torch_forward(x, s, b, ref_rm, ref_rv, training=True),
        data["x"],
        data["scale"],
        data["bias"],
    )
    xf = data["x"].float()
    var_b = xf.var((0, 2, 3), unbiased=False, keepdim=True)
    return [
        check.check(data["y"], ref_y, name="y = relu(bn(x))"),
        check.check(data["mean"], xf.mean((0, 2, 3), keepdim=True), name="saved mean", tol=1e-4),
        check.check(data["inv_var"], torch.rsqrt(var_b + problem.eps), name="saved 1/sqrt(var+eps)", tol=1e-4),
        check.check(data["running_mean"], ref_rm, name="updated running mean", tol=1e-4),
        check.check(data["running_var"], ref_rv, name="updated running var (unbiased, as PyTorch)", tol=1e-4),
    ]


def inference_graph(problem: batchnorm.BatchNormProblem, data: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """cuDNN's ``batchnorm_inference`` node if an engine takes it, else the folded form.

    First it fills ``data["mean"]`` (a copy of the running mean), ``data["inv_var"]``
    (1/√(running var + eps)) and the folded ``data["a"]``, ``data["b"]``
    (:func:`~cudnn_guide.graphs.batchnorm.fold_batchnorm`), from the running statistics as they
    are now. Then it builds the node followed by a ReLU; if that raises, the folded
    ``relu(x · a + b)`` graph, and the form says why.

    Parameters
    ----------
    problem
        Shapes and epsilon.
    data
        The buffers; ``mean``, ``inv_var``, ``a`` and ``b`` are (re)written.

    Returns
    -------
    tuple[str, Any, dict[str, Any]]
        The form used (``"batchnorm_inference node"``, or ``"folded (the node was refused: …)"``
        with the first line of cuDNN's refusal), the built graph, and its buffers by name for
        ``built.pack(**...)``.

    Example
    -------
    >>> form, infer, infer_data = inference_graph(p, data)
    >>> infer.execute(infer.pack(**infer_data))
    """
    import torch

    p, d = problem, data
    d["mean"] = d["running_mean"].clone()
    d["inv_var"] = torch.rsqrt(d["running_var"] + p.eps)
    d["a"], d["b"] = batchnorm.fold_batchnorm(d["scale"], d["bias"], d["running_mean"], d["running_var"], p.eps)
    try:
        built = batchnorm.batchnorm_relu_graph(p, d, training=False)
        names = ("x", "scale", "bias", "mean", "inv_var", "y")
        return "batchnorm_inference node", built, {k: d[k] for k in names}
    except Exception as exc:  # cuDNN's refusal, shown
        built = batchnorm.folded_batchnorm_relu_graph(p, d)
        refusal = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        form = f"folded (the node was refused: {refusal})"
        return form, built, {k: d[k] for k in ("x", "a", "b", "y")}


def check_inference(
    problem: batchnorm.BatchNormProblem, data: dict[str, Any], infer: Any, infer_data: dict[str, Any], form: str
) -> tuple[Any, Any]:
    """Run the inference graph once (y poisoned first) and check y against PyTorch's in fp32.

    Parameters
    ----------
    problem
        Shapes and epsilon.
    data
        The buffers; the reference reads ``x``, ``scale``, ``bias`` and the running statistics.
    infer
        From :func:`inference_graph`.
    infer_data
        Its buffers, from :func:`inference_graph`.
    form
        The form :func:`inference_graph` used; the check is named after its first words.

    Returns
    -------
    tuple[Any, Any]
        The check (``"inference y (<form>)"``, the form without its parenthesis) and the fp32
        reference, for the baselines' checks.

    Example
    -------
    >>> result, ref_inf = check_inference(p, data, infer, infer_data, form)
    """
    check.poison(data["y"])
    infer.execute(infer.pack(**infer_data))
    ref_inf = check.reference(
        lambda x, s, b, m, v: problem.torch_forward(x, s, b, m, v, training=False),
        data["x"],
        data["scale"],
        data["bias"],
        data["running_mean"],
        data["running_var"],
    )
    return check.check(data["y"], ref_inf, name=f"inference y ({form.split(' (')[0]})"), ref_inf


def torch_fn(
    problem: batchnorm.BatchNormProblem, data: Mapping[str, Any], training: bool, fn: Callable[..., Any]
) -> Callable[[], Any]:
    """PyTorch's BatchNorm → ReLU as a zero-argument launcher, on copies of the running statistics.

    The copies are taken now, so that a training launcher's in-place updates leave ``data``
    alone.

    Parameters
    ----------
    problem
        The problem (unused by the launcher; kept beside ``data`` for the callers' symmetry).
    data
        ``x``, ``scale``, ``bias``, ``running_mean``, ``running_var``.
    training
        Batch statistics (and running-statistics updates) or the running statistics.
    fn
        Called as ``fn(x, scale, bias, running_mean, running_var, training)``:
        ``problem.torch_forward`` or a compiled version of it.

    Returns
    -------
    Callable[[], Any]
        The launcher; it returns ``fn``'s output.

    Example
    -------
    >>> launch = torch_fn(p, data, False, p.torch_forward)
    >>> y = launch()
    """
    rm, rv = data["running_mean"].clone(), data["running_var"].clone()
    x, s, b = data["x"], data["scale"], data["bias"]
    return lambda: fn(x, s, b, rm, rv, training)


def check_baseline(
    problem: batchnorm.BatchNormProblem, data: Mapping[str, Any], fn: Callable[..., Any], ref_inf: Any, *, name: str
) -> list[Any]:
    """Check a PyTorch BatchNorm → ReLU in training and in inference against fp32 references.

    Training: ``fn`` on copies of the running statistics against PyTorch's training forward in
    fp32 from other copies of the same statistics. Inference: :func:`torch_fn` against
    ``ref_inf``.

    Parameters
    ----------
    problem
        Shapes, epsilon and momentum.
    data
        The buffers (the running statistics are copied, never updated).
    fn
        ``problem.torch_forward`` or a compiled version of it.
    ref_inf
        The inference reference, from :func:`check_inference`.
    name
        The baseline's name, for the checks' names.

    Returns
    -------
    list[Any]
        ``"<name> training"`` and ``"<name> inference"``, in that order.

    Example
    -------
    >>> checks = check_baseline(p, data, p.torch_forward, ref_inf, name="PyTorch eager")
    """
    rm, rv = data["running_mean"].clone(), data["running_var"].clone()
    train_ref = check.reference(
        lambda x, s, b: problem.torch_forward(x, s, b, rm.clone(), rv.clone(), training=True),
        data["x"],
        data["scale"],
        data["bias"],
    )
    checks = [
        check.check(
            fn(data["x"], data["scale"], data["bias"], rm.clone(), rv.clone(), True), train_ref, name=f"{name} training"
        )
    ]
    checks.append(check.check(torch_fn(problem, data, False, fn)(), ref_inf, name=f"{name} inference"))
    return checks


def stage_contenders(
    stages: Mapping[str, tuple[int, int]],
) -> tuple[dict[str, Callable[[str], Callable[[], Any]]], Callable[[str], int]]:
    """Every stage's contenders, in both modes, and its bytes: factories of the stage for a sweep.

    A stage's problem is built once, on the first factory (or byte count) that asks for it: batch
    64, the stage's channels and resolution, inputs seeded with the channel count. Its training
    graph runs once (y poisoned) and y is checked against PyTorch from the running statistics it
    just updated (named ``"training <stage>"``; it joins the page's record, nothing is printed);
    then its inference graph (:func:`inference_graph`) and its own ``torch.compile`` (default,
    ``dynamic=False``: compiled for that stage's shape) are made. PyTorch's launchers
    (:func:`torch_fn`) copy the running statistics at each factory call.

    Parameters
    ----------
    stages
        Stage name → (channels, height = width).

    Returns
    -------
    tuple
        Contender → factory of the stage: ``"cuDNN training"``, ``"PyTorch eager training"``,
        ``"torch.compile (default) training"``, then the same three for ``inference``; and
        stage → bytes per call (:attr:`~cudnn_guide.graphs.batchnorm.BatchNormProblem.bytes`).

    Example
    -------
    >>> impls, stage_bytes = stage_contenders({"64×56×56": (64, 56)})
    >>> train = {k: v for k, v in impls.items() if k.endswith("training")}
    >>> sweep.sweep(["64×56×56"], train, x="stage", l2="cold", bytes=stage_bytes, candidate="cuDNN training")
    """
    from cudnn_guide.measure import baselines

    made: dict[str, tuple[Any, ...]] = {}

    def setup(stage: str) -> tuple[Any, ...]:
        if stage not in made:
            ch, hw = stages[stage]
            p = batchnorm.BatchNormProblem(n=64, c=ch, h=hw, w=hw)
            d = p.make_inputs(seed=ch)
            _, t_launch = training_graph(p, d)
            check.poison(d["y"])
            t_launch()
            # already updated once; the reference starts from here
            rm, rv = d["running_mean"].clone(), d["running_var"].clone()
            check.check(
                d["y"],
                check.reference(lambda x, s, b: p.torch_forward(x, s, b, rm, rv, True), d["x"], d["scale"], d["bias"]),
                name=f"training {stage}",
            )
            _, inf, inf_data = inference_graph(p, d)
            compiled = baselines.compile_quietly(p.torch_forward, mode="default", dynamic=False)
            made[stage] = (p, d, t_launch, inf.bind(inf.pack(**inf_data)), compiled)
        return made[stage]

    impls: dict[str, Callable[[str], Callable[[], Any]]] = {
        "cuDNN training": lambda st: setup(st)[2],
        "PyTorch eager training": lambda st: torch_fn(setup(st)[0], setup(st)[1], True, setup(st)[0].torch_forward),
        "torch.compile (default) training": lambda st: torch_fn(setup(st)[0], setup(st)[1], True, setup(st)[4]),
        "cuDNN inference": lambda st: setup(st)[3],
        "PyTorch eager inference": lambda st: torch_fn(setup(st)[0], setup(st)[1], False, setup(st)[0].torch_forward),
        "torch.compile (default) inference": lambda st: torch_fn(setup(st)[0], setup(st)[1], False, setup(st)[4]),
    }
    return impls, lambda st: setup(st)[0].bytes


def plot_stages(result: Any, copy_gbps: float) -> Any:
    """GB/s at each stage, one panel per mode (training left, inference right), with the copy bandwidth.

    Parameters
    ----------
    result
        A :class:`~cudnn_guide.measure.sweep.SweepResult` over ``stage`` holding both modes'
        measurements (each contender's name ends with its mode).
    copy_gbps
        The measured copy bandwidth, drawn as the ceiling.

    Returns
    -------
    Any
        The matplotlib figure.

    Example
    -------
    >>> fig = plot_stages(result, ceil.copy_gbps)
    >>> plt.show()
    """
    import matplotlib.pyplot as plt

    from cudnn_guide.report import plot_lines

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained", sharey=True)
    for ax, mode in zip(axes, MODES):
        plot_lines(
            [m for m in result.measurements if m.params["impl"].endswith(mode)],
            x="stage",
            metric="gbps",
            ax=ax,
            title=f"BatchNorm → ReLU, {mode}, batch 64, fp16",
            ceiling=copy_gbps,
            ceiling_label="measured copy bandwidth",
        )
        ax.legend(fontsize=8)
    return fig


def stage_items(
    results: Mapping[str, Any], stages: Iterable[str], copy_gbps: float, *, launch_share: float = 0.25
) -> list[str]:
    """One conclusion bullet per mode and stage: cuDNN's time, its share of copy bandwidth, verdicts.

    The verdicts are this run's (in-run intervals; the page's record may widen them for
    re-recording drift), and each bullet says so. Where the contenders of one stage were not
    timed the same way (their measurements' ``mode`` differ), the bullet says so: that verdict is
    not like for like. Where the launch cost subtracted from each timed call
    (:attr:`~cudnn_guide.measure.measurement.Measurement.launch_cost_ms`) is more than
    ``launch_share`` of a contender's event time (what the events measured, before the
    subtraction), the bullet names those contenders with their shares: the verdict rests on the
    few microseconds left after the subtraction.

    Parameters
    ----------
    results
        Mode → the mode's :class:`~cudnn_guide.measure.sweep.SweepResult` (with comparisons).
    stages
        The stages, in order.
    copy_gbps
        The measured copy bandwidth, GB/s.
    launch_share
        The share of a call's event time above which the subtracted launch cost is stated.

    Returns
    -------
    list[str]
        Markdown bullets, mode by mode, stage by stage.

    Example
    -------
    >>> items = stage_items(results, STAGES, ceil.copy_gbps)
    """
    stages = list(stages)
    items = []
    for mode, res in results.items():
        for stage in stages:
            cmp = res.comparisons[stage]
            ours = cmp.measurements[f"cuDNN {mode}"]
            methods = {m.mode for m in cmp.measurements.values()}
            caveat = (
                f" The contenders were timed differently here "
                f"({'; '.join(sorted(methods))}): this verdict is not like for like."
                if len(methods) > 1
                else ""
            )
            items.append(
                f"* {mode}, {stage}: cuDNN {ours.median_ms * 1e3:.1f} µs "
                f"({100 * ours.gbps / copy_gbps:.0f}% of copy bandwidth); in this run, "
                + "; ".join(cmp.describe(b) for b in cmp.versus)
                + "."
                + caveat
                + _launch_caveat(cmp.measurements, launch_share)
            )
    return items


def _launch_caveat(measurements: Mapping[str, Any], share: float) -> str:
    """The sentence naming the contenders whose subtracted launch cost exceeds ``share`` of their
    event time, with each one's share; empty when none does."""
    high = {
        name: m.launch_cost_ms / m.event_median_ms
        for name, m in measurements.items()
        if m.launch_cost_ms > 0 and m.launch_cost_ms > share * m.event_median_ms
    }
    if not high:
        return ""
    costs = {measurements[name].launch_cost_ms for name in high}
    cost = f" ({1e3 * costs.pop():.1f} µs)" if len(costs) == 1 else ""
    shares = ", ".join(f"{name} {100 * f:.0f}%" for name, f in high.items())
    return (
        f" Here the launch cost subtracted from each timed call{cost} is over {100 * share:.0f}% "
        f"of the event time ({shares}): these verdicts rest on what is left after the subtraction."
    )


def stage_verdicts(results: Mapping[str, Any]) -> list[str]:
    """Every verdict of every stage comparison, mode by mode, stage by stage, baseline by baseline.

    These are this run's verdicts (the comparisons' in-run intervals), not the record's, which
    may be widened for re-recording drift: text that counts them should say "in this run".

    Parameters
    ----------
    results
        Mode → the mode's :class:`~cudnn_guide.measure.sweep.SweepResult` (with comparisons).

    Returns
    -------
    list[str]
        ``"faster"``, ``"tie"`` or ``"slower"`` each.

    Example
    -------
    >>> verdicts = stage_verdicts(results)
    >>> verdicts.count("faster"), len(verdicts)
    """
    return [v["verdict"] for r in results.values() for c_ in r.comparisons.values() for v in c_.versus.values()]
