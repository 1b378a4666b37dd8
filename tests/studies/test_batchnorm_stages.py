"""batchnorm_stages: the BatchNorm → ReLU page's graphs as packed, its checks, its stages' contenders,
its figure and its sentences.

On the CPU the cuDNN graphs are stand-ins that compute BatchNorm → ReLU with PyTorch (so every
check passes as on the GPU) and ``torch.compile`` is the function itself; the GPU tests build the
real graphs on a small stage.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from cudnn_guide.graphs import batchnorm
from cudnn_guide.measure import baselines
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import batchnorm_stages
from cudnn_guide.studies.batchnorm_stages import MODES, TRAINING_IO


@dataclasses.dataclass(frozen=True)
class CpuBatchNorm(batchnorm.BatchNormProblem):
    """A BatchNorm problem whose buffers live on the CPU, the activation in float32, channels last."""

    n: int = 4
    c: int = 3
    h: int = 5
    w: int = 5
    dtype: str = "float32"

    def make_inputs(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        c = self.c
        x = torch.randn(self.n, c, self.h, self.w, generator=g)
        return {
            "x": (x * 1.5 + 0.3).to(memory_format=torch.channels_last),
            "scale": 1 + 0.1 * torch.randn(1, c, 1, 1, generator=g),
            "bias": 0.1 * torch.randn(1, c, 1, 1, generator=g),
            "running_mean": 0.1 * torch.randn(1, c, 1, 1, generator=g),
            "running_var": 1 + 0.1 * torch.rand(1, c, 1, 1, generator=g),
            "y": torch.empty_like(x).to(memory_format=torch.channels_last),
            "mean": torch.empty(1, c, 1, 1),
            "inv_var": torch.empty(1, c, 1, 1),
        }


def training_launch(p, d, poisoned=None):
    """What the training graph does, in PyTorch: y, the saved statistics, running statistics updated."""

    def launch():
        if poisoned is not None:
            poisoned.append([n for n in ("y", "mean", "inv_var") if torch.isnan(d[n]).all()])
        x = d["x"].float()
        d["mean"].copy_(x.mean((0, 2, 3), keepdim=True))
        d["inv_var"].copy_(torch.rsqrt(x.var((0, 2, 3), unbiased=False, keepdim=True) + p.eps))
        with torch.no_grad():
            d["y"].copy_(p.torch_forward(x, d["scale"], d["bias"], d["running_mean"], d["running_var"], True))

    return launch


class FakeBuilt:
    """A stand-in for a built graph: ``pack`` keeps the buffers by name, ``bind``/``execute`` run ``run``."""

    def __init__(self, run=None, name=""):
        self.run, self.name, self.packs = run, name, []

    def pack(self, **data):
        self.packs.append(data)
        return data

    def bind(self, pack):
        return lambda: self.run(pack)

    def execute(self, pack):
        self.run(pack)


def folded_run(pack):
    pack["y"].copy_(torch.relu(pack["x"] * pack["a"] + pack["b"]))


def test_training_graph_packs_every_buffer_the_scalars_and_the_running_statistics_in_place(monkeypatch):
    built = FakeBuilt(run=lambda pack: None)
    asked = []

    def graph(p, d, training):
        asked.append(training)
        return built

    monkeypatch.setattr(batchnorm, "batchnorm_relu_graph", graph)
    p = CpuBatchNorm()
    d = p.make_inputs()
    got, launch = batchnorm_stages.training_graph(p, d)
    assert got is built and asked == [True]
    (pack,) = built.packs
    assert list(pack) == [*TRAINING_IO, "epsilon", "momentum", "next_running_mean", "next_running_var"]
    assert all(pack[k] is d[k] for k in TRAINING_IO)
    assert pack["next_running_mean"] is d["running_mean"] and pack["next_running_var"] is d["running_var"]
    assert pack["epsilon"].shape == (1, 1, 1, 1) and pack["epsilon"].item() == pytest.approx(p.eps)
    assert pack["momentum"].item() == pytest.approx(p.momentum)
    assert pack["epsilon"].device.type == "cpu"  # pass by value: a host tensor
    launch()


def test_check_training_poisons_runs_once_and_checks_five_outputs():
    p = CpuBatchNorm()
    d = p.make_inputs()
    rm = d["running_mean"].clone()
    poisoned = []
    checks = batchnorm_stages.check_training(p, d, training_launch(p, d, poisoned))
    assert poisoned == [["y", "mean", "inv_var"]]
    assert [c.name for c in checks] == [
        "y = relu(bn(x))",
        "saved mean",
        "saved 1/sqrt(var+eps)",
        "updated running mean",
        "updated running var (unbiased, as PyTorch)",
    ]
    assert all(c.passed for c in checks)
    assert [c.tolerance for c in checks[1:]] == [1e-4] * 4
    assert not torch.equal(d["running_mean"], rm)  # updated in place, once


def test_check_training_fails_a_running_statistic_left_alone():
    from cudnn_guide.errors import CheckFailedError

    p = CpuBatchNorm()
    d = p.make_inputs()
    saved = {k: d[k].clone() for k in ("running_mean", "running_var")}
    launch = training_launch(p, d)

    def forgets_the_update():
        launch()
        for k, v in saved.items():
            d[k].copy_(v)

    with pytest.raises(CheckFailedError, match="updated running mean"):
        batchnorm_stages.check_training(p, d, forgets_the_update)


def test_inference_graph_takes_the_node_where_an_engine_does(monkeypatch):
    node = FakeBuilt()
    monkeypatch.setattr(batchnorm, "batchnorm_relu_graph", lambda p, d, training: node)
    p = CpuBatchNorm()
    d = p.make_inputs()
    form, built, data = batchnorm_stages.inference_graph(p, d)
    assert form == "batchnorm_inference node" and built is node
    assert list(data) == ["x", "scale", "bias", "mean", "inv_var", "y"]
    torch.testing.assert_close(d["mean"], d["running_mean"])
    assert d["mean"] is not d["running_mean"]
    torch.testing.assert_close(d["inv_var"], torch.rsqrt(d["running_var"] + p.eps))
    a, b = batchnorm.fold_batchnorm(d["scale"], d["bias"], d["running_mean"], d["running_var"], p.eps)
    torch.testing.assert_close(d["a"], a)
    torch.testing.assert_close(d["b"], b)


def test_inference_graph_folds_when_the_node_is_refused_and_says_why(monkeypatch):
    def refuse(p, d, training):
        assert training is False
        raise RuntimeError("No valid engine configs for BN_INFERENCE\nsecond line " + "x" * 300)

    folded = FakeBuilt(run=folded_run)
    monkeypatch.setattr(batchnorm, "batchnorm_relu_graph", refuse)
    monkeypatch.setattr(batchnorm, "folded_batchnorm_relu_graph", lambda p, d: folded)
    p = CpuBatchNorm()
    form, built, data = batchnorm_stages.inference_graph(p, p.make_inputs())
    assert form == "folded (the node was refused: RuntimeError: No valid engine configs for BN_INFERENCE)"
    assert built is folded and list(data) == ["x", "a", "b", "y"]


def test_check_inference_names_the_form_and_returns_the_reference():
    p = CpuBatchNorm()
    d = p.make_inputs()
    d["a"], d["b"] = batchnorm.fold_batchnorm(d["scale"], d["bias"], d["running_mean"], d["running_var"], p.eps)
    infer = FakeBuilt(run=folded_run)
    data = {k: d[k] for k in ("x", "a", "b", "y")}
    result, ref = batchnorm_stages.check_inference(p, d, infer, data, "folded (the node was refused: X: y)")
    assert result.name == "inference y (folded)" and result.passed
    want = torch.relu(F.batch_norm(d["x"], *(d[k].flatten() for k in ("running_mean", "running_var", "scale", "bias"))))
    torch.testing.assert_close(ref, want, atol=1e-5, rtol=1e-5)
    result, _ = batchnorm_stages.check_inference(p, d, infer, data, "batchnorm_inference node")
    assert result.name == "inference y (batchnorm_inference node)"


@pytest.mark.parametrize("training", [True, False])
def test_torch_fn_runs_on_copies_of_the_running_statistics(training):
    p = CpuBatchNorm()
    d = p.make_inputs()
    before = {k: d[k].clone() for k in ("running_mean", "running_var")}
    launch = batchnorm_stages.torch_fn(p, d, training, p.torch_forward)
    y = launch()
    launch()
    assert all(torch.equal(d[k], v) for k, v in before.items())
    flat = [v.flatten().clone() for v in (before["running_mean"], before["running_var"])]
    want = torch.relu(
        F.batch_norm(d["x"], *flat, d["scale"].flatten(), d["bias"].flatten(), training, p.momentum, p.eps)
    )
    torch.testing.assert_close(y, want)


def test_check_baseline_checks_training_then_inference():
    p = CpuBatchNorm()
    d = p.make_inputs()
    before = {k: d[k].clone() for k in ("running_mean", "running_var")}
    ref_inf = torch.relu(
        F.batch_norm(d["x"], *(d[k].flatten() for k in ("running_mean", "running_var", "scale", "bias")))
    )
    calls = []

    def fn(*args):
        calls.append(args[-1])
        return p.torch_forward(*args)

    checks = batchnorm_stages.check_baseline(p, d, fn, ref_inf, name="PyTorch eager")
    assert [c.name for c in checks] == ["PyTorch eager training", "PyTorch eager inference"]
    assert all(c.passed for c in checks)
    assert calls == [True, False]
    assert all(torch.equal(d[k], v) for k, v in before.items())  # never updated


@pytest.fixture
def fake_stage_graphs(monkeypatch):
    """Stand-ins for the training and inference graphs and ``torch.compile``; what was made, in order."""
    made = []

    def training_graph(p, d):
        made.append(("training", p.c))
        return None, training_launch(p, d)

    def inference_graph(p, d):
        made.append(("inference", p.c))
        d["a"], d["b"] = batchnorm.fold_batchnorm(d["scale"], d["bias"], d["running_mean"], d["running_var"], p.eps)
        return "folded", FakeBuilt(run=folded_run), {k: d[k] for k in ("x", "a", "b", "y")}

    def compile_quietly(fn, **kw):
        made.append(("compile", kw))
        return fn

    monkeypatch.setattr(batchnorm, "BatchNormProblem", lambda n, c, h, w: CpuBatchNorm(n=n, c=c, h=h, w=w))
    monkeypatch.setattr(batchnorm_stages, "training_graph", training_graph)
    monkeypatch.setattr(batchnorm_stages, "inference_graph", inference_graph)
    monkeypatch.setattr(baselines, "compile_quietly", compile_quietly)
    return made


STAGES = {"4×6×6": (4, 6), "8×3×3": (8, 3)}


def test_stage_contenders_name_three_per_mode_and_build_each_stage_once(fake_stage_graphs):
    impls, stage_bytes = batchnorm_stages.stage_contenders(STAGES)
    assert list(impls) == [
        "cuDNN training",
        "PyTorch eager training",
        "torch.compile (default) training",
        "cuDNN inference",
        "PyTorch eager inference",
        "torch.compile (default) inference",
    ]
    assert stage_bytes("8×3×3") == 2 * 4 * 64 * 8 * 3 * 3  # batch 64, fp32: read x, write y
    assert fake_stage_graphs == [
        ("training", 8),
        ("inference", 8),
        ("compile", {"mode": "default", "dynamic": False}),
    ]
    for name, factory in impls.items():
        launch = factory("4×6×6")
        assert callable(launch), name
        launch()
    assert [m for m in fake_stage_graphs if m[0] == "training"] == [("training", 8), ("training", 4)]
    assert impls["cuDNN training"]("4×6×6") is impls["cuDNN training"]("4×6×6")  # the same launcher


def test_stage_contenders_pytorch_launchers_compute_the_stage(fake_stage_graphs):
    impls, _ = batchnorm_stages.stage_contenders(STAGES)
    y = impls["PyTorch eager inference"]("8×3×3")()
    assert y.shape == (64, 8, 3, 3)
    assert impls["torch.compile (default) training"]("8×3×3")().shape == (64, 8, 3, 3)


def _m(impl, stage, ms=1.0, mode="cold"):
    return Measurement(f"{impl} @ stage={stage}", [ms] * 3, mode, bytes=2e9, params={"impl": impl, "stage": stage})


def test_plot_stages_draws_one_panel_per_mode_with_its_own_contenders():
    import matplotlib.pyplot as plt

    names = ["cuDNN", "PyTorch eager", "torch.compile (default)"]
    ms = [_m(f"{n} {mode}", s) for mode in MODES for s in STAGES for n in names]
    fig = batchnorm_stages.plot_stages(SimpleNamespace(measurements=ms), 3000.0)
    try:
        train, infer = fig.axes
        assert train.get_title() == "BatchNorm → ReLU, training, batch 64, fp16"
        assert infer.get_title() == "BatchNorm → ReLU, inference, batch 64, fp16"
        for ax, mode in zip(fig.axes, MODES):
            labels = ax.get_legend_handles_labels()[1]
            assert "measured copy bandwidth" in labels
            assert all(mode in label for label in labels if label != "measured copy bandwidth")
    finally:
        plt.close(fig)


def _v(value, verdict):
    return {"value": value, "low": value - 0.05, "high": value + 0.05, "verdict": verdict}


def _stage(mode, versus, modes=("cold", "cold", "cold")):
    names = [f"cuDNN {mode}", f"PyTorch eager {mode}", f"torch.compile (default) {mode}"]
    measured = {n: _m(n, "s", ms=0.5, mode=m) for n, m in zip(names, modes)}
    medians = {n: [0.5] * 9 for n in names}
    return Comparison(names[0], 9, measured, medians, dict(zip(names[1:], versus)), 0.02)


def test_stage_items_say_time_share_and_verdicts_and_flag_mixed_timing():
    plain = _stage("training", [_v(1.5, "faster"), _v(1.0, "tie")])
    mixed = _stage("inference", [_v(0.8, "slower"), _v(1.2, "faster")], modes=("cold", "cold+graph", "cold"))
    results = {
        "training": SimpleNamespace(comparisons={"a": plain}),
        "inference": SimpleNamespace(comparisons={"a": mixed}),
    }
    items = batchnorm_stages.stage_items(results, ["a"], 8000.0)
    assert items[0] == (
        "* training, a: cuDNN 500.0 µs (50% of copy bandwidth); in this run, "
        + "; ".join(plain.describe(b) for b in plain.versus)
        + "."
    )
    assert items[1].endswith(
        ". The contenders were timed differently here (cold; cold+graph): this verdict is not like for like."
    )
    assert batchnorm_stages.stage_verdicts(results) == ["faster", "tie", "slower", "faster"]


def test_stage_items_say_the_verdicts_are_this_runs():
    one = _stage("inference", [_v(3.2, "faster"), _v(0.91, "slower")])
    (item,) = batchnorm_stages.stage_items({"inference": SimpleNamespace(comparisons={"a": one})}, ["a"], 8000.0)
    assert "; in this run, " + one.describe("PyTorch eager inference") in item


def _timed(impl, ms, cost_ms):
    """A measurement of ``ms`` per call left after subtracting ``cost_ms`` of launch cost."""
    return Measurement(
        f"{impl} @ stage=s",
        [ms] * 3,
        "cold-L2 events − launch cost",
        bytes=2e9,
        params={"impl": impl},
        launch_cost_ms=cost_ms,
    )


def test_stage_items_state_a_large_subtracted_launch_cost_from_the_measurements():
    names = ["cuDNN inference", "PyTorch eager inference", "torch.compile (default) inference"]
    # 3.4 µs subtracted: 4.4 µs left is 44% of the event time, 14.5 µs left 19%, 4.0 µs left 46%
    measured = {n: _timed(n, ms, 0.0034) for n, ms in zip(names, (0.0044, 0.0145, 0.0040))}
    cmp = Comparison(
        names[0],
        9,
        measured,
        {n: [0.001] * 9 for n in names},
        dict(zip(names[1:], [_v(3.2, "faster"), _v(0.91, "slower")])),
        0.01,
    )
    results = {"inference": SimpleNamespace(comparisons={"s": cmp})}
    (item,) = batchnorm_stages.stage_items(results, ["s"], 8000.0)
    assert item.endswith(
        ". Here the launch cost subtracted from each timed call (3.4 µs) is over 25% of the event time "
        "(cuDNN inference 44%, torch.compile (default) inference 46%): these verdicts rest on what is left "
        "after the subtraction."
    )
    (none,) = batchnorm_stages.stage_items(results, ["s"], 8000.0, launch_share=0.5)
    assert "launch cost" not in none  # under the threshold: nothing said
    small = {n: _timed(n, 0.05, 0.0034) for n in names}  # 6% of the event time
    cmp.measurements = small
    (quiet,) = batchnorm_stages.stage_items(results, ["s"], 8000.0)
    assert "launch cost" not in quiet


def test_stage_items_follow_the_given_stage_order():
    one = _stage("training", [_v(1.5, "faster"), _v(1.0, "tie")])
    results = {"training": SimpleNamespace(comparisons={"a": one, "b": one})}
    items = batchnorm_stages.stage_items(results, iter(["b", "a"]), 8000.0)
    assert [i.split(":")[0] for i in items] == ["* training, b", "* training, a"]


@pytest.mark.gpu
def test_the_training_and_inference_graphs_check_on_the_gpu():
    p = batchnorm.BatchNormProblem(n=8, c=64, h=14, w=14)
    d = p.make_inputs(seed=0)
    _, launch = batchnorm_stages.training_graph(p, d)
    assert all(c.passed for c in batchnorm_stages.check_training(p, d, launch))
    form, infer, infer_data = batchnorm_stages.inference_graph(p, d)
    result, ref_inf = batchnorm_stages.check_inference(p, d, infer, infer_data, form)
    assert result.passed
    assert all(c.passed for c in batchnorm_stages.check_baseline(p, d, p.torch_forward, ref_inf, name="eager"))


@pytest.mark.gpu
def test_a_stage_builds_and_checks_on_the_gpu():
    impls, stage_bytes = batchnorm_stages.stage_contenders({"512×7×7": (512, 7)})
    for factory in impls.values():
        factory("512×7×7")()
    assert stage_bytes("512×7×7") == 2 * 2 * 64 * 512 * 7 * 7
