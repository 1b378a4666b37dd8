"""norm_training: the LayerNorm/RMSNorm page's checks, contenders, comparisons, tables and sentences.

On the CPU the cuDNN graphs are stand-ins that compute the norm with PyTorch (so every check
passes as on the GPU), ``torch.compile`` is the function itself and ``compare`` records what it
was asked; the GPU tests build the real graphs on a small problem.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cudnn_guide.graphs import norms
from cudnn_guide.measure import baselines, compare
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import norm_training
from cudnn_guide.studies.norm_training import COMPILED, EAGER, LABELS, PASSES

CUDNN, FUSED = "cuDNN graphs (heuristics A)", "cuDNN graph (fused, heuristics A)"


@dataclasses.dataclass(frozen=True)
class CpuNorm(norms.NormProblem):
    """A norm problem whose buffers live on the CPU, in float32."""

    tokens: int = 6
    hidden: int = 8
    dtype: str = "float32"

    def make_inputs(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        n, c = self.tokens, self.hidden
        data = {
            "x": 2 * torch.randn(n, c, generator=g) + 0.5,
            "scale": 1 + 0.1 * torch.randn(c, generator=g),
            "dy": torch.randn(n, c, generator=g),
            "y": torch.empty(n, c),
            "inv_var": torch.empty(n, 1),
            "dx": torch.empty(n, c),
            "dscale": torch.empty(c),
        }
        if self.kind == "layer":
            data["bias"] = 0.1 * torch.randn(c, generator=g)
            data["mean"] = torch.empty(n, 1)
            data["dbias"] = torch.empty(c)
        if self.residual:
            data["r"] = torch.randn(n, c, generator=g)
            data["s"] = torch.empty(n, c)
        return data


def torch_launchers(calls, poisoned):
    """A stand-in for :func:`norm_training.norm_launchers`: the graphs' outputs, computed by PyTorch.
    ``calls`` gets each launch; ``poisoned`` the outputs that were all NaN when it started."""

    def nan(data, names):
        return [n for n in names if torch.isnan(data[n]).all()]

    def launchers(p, data):
        def fwd():
            calls.append(("fwd", p.kind, p.hidden))
            poisoned.append(nan(data, ("y", "inv_var")))
            with torch.no_grad():
                data["y"].copy_(p.torch_forward(data["x"], data["scale"], data.get("bias")))
                for name, value in p.torch_stats(data["x"]).items():
                    data[name].copy_(value)

        def bwd():
            calls.append(("bwd", p.kind, p.hidden))
            poisoned.append(nan(data, ("dx", "dscale")))
            leaves = {n: t.detach().clone().requires_grad_(True) for n, t in norm_training.grad_inputs(p, data).items()}
            p.torch_forward(**leaves).backward(data["dy"])
            for n, leaf in leaves.items():
                data["d" + n].copy_(leaf.grad)

        return fwd, bwd

    return launchers


@pytest.fixture
def poisoned():
    return []


@pytest.fixture
def fake_graphs(monkeypatch, poisoned):
    calls = []
    monkeypatch.setattr(norm_training, "norm_launchers", torch_launchers(calls, poisoned))
    return calls


@pytest.fixture
def no_compile(monkeypatch):
    """``compile_quietly`` returns the function itself and remembers the keywords it was given."""
    asked = []

    def compile_quietly(fn, **kw):
        asked.append(kw)
        return fn

    monkeypatch.setattr(baselines, "compile_quietly", compile_quietly)
    return asked


@pytest.fixture
def recorded_compare(monkeypatch):
    """``compare.compare`` records its contenders (in order) and keywords, and runs each once."""
    asked = []

    def fake(contenders, **kw):
        asked.append((list(contenders), kw))
        for fn in contenders.values():
            fn()
        return ("comparison", kw["tag"])

    monkeypatch.setattr(compare, "compare", fake)
    return asked


def test_the_labels_and_passes_are_the_pages_names():
    assert LABELS == {"layer": "LayerNorm", "rms": "RMSNorm"}
    assert list(PASSES) == ["forward (training)", "forward + backward"]
    assert (EAGER, COMPILED) == ("PyTorch eager", "torch.compile (default)")


def test_grad_inputs_are_x_scale_and_the_layernorms_bias():
    data = {"x": 1, "scale": 2, "bias": 3, "dy": 4}
    assert norm_training.grad_inputs(norms.NormProblem(kind="layer"), data) == {"x": 1, "scale": 2, "bias": 3}
    assert norm_training.grad_inputs(norms.NormProblem(kind="rms"), data) == {"x": 1, "scale": 2}


def test_pass_bytes_are_the_forwards_then_the_forward_and_backwards():
    p = norms.NormProblem(tokens=16384, hidden=4096)
    act = 16384 * 4096 * 2
    assert norm_training.pass_bytes(p, "forward (training)") == 2 * act
    assert norm_training.pass_bytes(p, "forward + backward") == 5 * act
    with pytest.raises(KeyError):
        norm_training.pass_bytes(p, "backward")


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_torch_training_steps_on_copies_and_leaves_the_gradients(kind):
    p = CpuNorm(kind=kind)
    data = p.make_inputs(seed=3)
    forward, step, leaves = norm_training.torch_training(p, data, p.torch_forward)
    assert list(leaves) == list(norm_training.grad_inputs(p, data))
    assert all(t.requires_grad for t in leaves.values())
    assert not data["x"].requires_grad and leaves["x"] is not data["x"]
    torch.testing.assert_close(forward(), p.torch_forward(data["x"], data["scale"], data.get("bias")))
    step()
    first = leaves["x"].grad.clone()
    step()  # the gradients are cleared first, not accumulated
    torch.testing.assert_close(leaves["x"].grad, first)
    ref = {n: t.detach().clone().requires_grad_(True) for n, t in norm_training.grad_inputs(p, data).items()}
    p.torch_forward(**ref).backward(data["dy"])
    for n in leaves:
        torch.testing.assert_close(leaves[n].grad, ref[n].grad)


@pytest.mark.parametrize(
    ("kind", "names"),
    [
        ("layer", ["y", "mean", "inv_var", "dx", "dscale", "dbias"]),
        ("rms", ["y", "inv_var", "dx", "dscale"]),
    ],
)
def test_checked_graphs_runs_each_graph_once_and_checks_every_output(fake_graphs, poisoned, kind, names):
    p = CpuNorm(kind=kind)
    (q, data, fwd, bwd), checks = norm_training.checked_graphs(p, seed=1)
    assert q is p
    assert fake_graphs == [("fwd", kind, 8), ("bwd", kind, 8)]
    assert poisoned == [["y", "inv_var"], ["dx", "dscale"]]  # every output NaN before its run
    assert [c.name for c in checks] == [f"{p} {n}" for n in names]
    assert all(c.passed for c in checks)
    torch.testing.assert_close(data["x"], p.make_inputs(seed=1)["x"])  # the seed reaches the inputs


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_checked_baselines_checks_eager_then_compiled_and_adds_the_cudnn_step(fake_graphs, no_compile, kind):
    p = CpuNorm(kind=kind)
    (_, data, fwd, bwd), _ = norm_training.checked_graphs(p, seed=1)
    fake_graphs.clear()
    impls, checks = norm_training.checked_baselines(p, data, fwd, bwd, candidate=CUDNN)
    label = LABELS[kind]
    assert list(impls) == [(label, EAGER), (label, COMPILED), (label, CUDNN)]
    assert [c.name for c in checks] == [f"{EAGER} {label} dx", f"{COMPILED} {label} dx"]
    assert all(c.passed for c in checks)
    assert no_compile == [{"mode": "default"}]
    assert all(entry[0] is p and len(entry) == 3 for entry in impls.values())
    assert impls[(label, CUDNN)][1] is fwd
    impls[(label, CUDNN)][2]()  # the cuDNN step: the forward, then the backward
    assert fake_graphs == [("fwd", kind, 8), ("bwd", kind, 8)]
    out = impls[(label, EAGER)][1]()  # the forward launcher
    torch.testing.assert_close(out.detach(), p.torch_forward(data["x"], data["scale"], data.get("bias")))


def test_compare_pass_races_cudnn_eager_and_compiled_over_the_passs_bytes(recorded_compare):
    p = norms.NormProblem(tokens=16384, hidden=4096, kind="rms")
    ran = []
    impls = {
        ("RMSNorm", n): (p, lambda n=n: ran.append((n, 1)), lambda n=n: ran.append((n, 2)))
        for n in (EAGER, COMPILED, CUDNN)
    }
    result = norm_training.compare_pass(impls, "RMSNorm", "forward + backward", candidate=CUDNN)
    assert result == ("comparison", "RMSNorm forward + backward")
    ((names, kw),) = recorded_compare
    assert names == [CUDNN, EAGER, COMPILED]
    assert ran == [(CUDNN, 2), (EAGER, 2), (COMPILED, 2)]  # the training steps
    assert kw == {
        "candidate": CUDNN,
        "l2": "cold",
        "rounds": 11,
        "bytes": p.forward_bytes + p.backward_bytes,
        "params": {"norm": "RMSNorm", "pass": "forward + backward"},
        "tag": "RMSNorm forward + backward",
    }
    ran.clear()
    norm_training.compare_pass(impls, "RMSNorm", "forward (training)", candidate=CUDNN)
    assert ran == [(CUDNN, 1), (EAGER, 1), (COMPILED, 1)]  # the forwards
    assert recorded_compare[-1][1]["bytes"] == p.forward_bytes


def _measurement(impl, norm, column, ms=1.0, nbytes=2e9):
    return Measurement(
        f"{impl} {norm}", [ms] * 3, "cold", bytes=nbytes, params={"norm": norm, "pass": column, "impl": impl}
    )


def test_pass_table_shows_one_norm_a_row_per_contender_a_column_per_pass():
    base = [
        _measurement(n, norm, p, ms=ms)
        for norm in ("LayerNorm", "RMSNorm")
        for p, ms in zip(PASSES, (1.0, 2.0))
        for n in (CUDNN, EAGER, COMPILED)
    ]
    table = norm_training.pass_table(base, "RMSNorm", 16384, 4096)
    assert table.rows == [CUDNN, EAGER, COMPILED]
    assert table.columns == list(PASSES)
    assert table.title == "RMSNorm, 16384 × 4096 bf16 (higher is better)"
    assert table.metric == "gbps"
    assert table.value(EAGER, "forward + backward") == pytest.approx(1000.0)  # 2 GB in 2 ms
    assert all(m.params["norm"] == "RMSNorm" for m in table.cells.values())


def test_residual_table_has_a_column_per_norm():
    measurements = [
        Measurement(n, [1.0] * 3, "cold", bytes=4e9, params={"norm": norm, "impl": n})
        for norm in ("LayerNorm", "RMSNorm")
        for n in (FUSED, EAGER, COMPILED)
    ]
    table = norm_training.residual_table(measurements)
    assert table.rows == [FUSED, EAGER, COMPILED]
    assert table.columns == ["LayerNorm", "RMSNorm"]
    assert table.title == "residual add → norm (training forward), over the fewest bytes"


class FakeFused:
    """A stand-in for the fused residual graph: ``execute`` writes s = x + r and y = norm(s)."""

    def __init__(self, p, data, name):
        self.p, self.data, self.name, self.runs = p, data, name, 0

    def execute(self, pack):
        assert pack is self.data and torch.isnan(self.data["y"]).all() and torch.isnan(self.data["s"]).all()
        self.bind(pack)()

    def bind(self, pack):
        def launch():
            self.runs += 1
            d = self.data
            d["s"].copy_(d["x"] + d["r"])
            d["y"].copy_(self.p.torch_forward(d["s"], d["scale"], d.get("bias")))

        return launch


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_residual_comparison_checks_the_fused_graph_and_both_baselines_then_races_them(
    monkeypatch, no_compile, recorded_compare, kind
):
    built = []

    def forward_graph(p, data, name=""):
        built.append(FakeFused(p, data, name))
        return built[-1]

    monkeypatch.setattr(norms, "norm_forward_graph", forward_graph)
    monkeypatch.setattr(norms, "pack_norm", lambda f, data, eps=None: data)
    p = CpuNorm(kind=kind, residual=True)
    res, checks = norm_training.residual_comparison(p, candidate=FUSED, seed=2)
    label = LABELS[kind]
    assert res == ("comparison", f"residual+{label}")
    (fused,) = built
    assert fused.name == str(p) and fused.name.startswith("residual add → ")
    assert [c.name for c in checks] == [
        f"{p} y",
        f"{p} s",
        f"torch.compile (default) {label} (residual)",
        f"PyTorch eager {label} (residual)",
    ]
    assert all(c.passed for c in checks)
    assert no_compile == [{"mode": "default"}]
    ((names, kw),) = recorded_compare
    assert names == [FUSED, EAGER, COMPILED]
    assert fused.runs == 2  # the check's run, then compare's
    assert kw == {
        "candidate": FUSED,
        "l2": "cold",
        "rounds": 11,
        "bytes": p.forward_bytes,
        "params": {"norm": label},
        "tag": f"residual+{label}",
    }


def test_width_contenders_build_each_width_once_and_name_cudnn_and_eager_per_norm(monkeypatch, fake_graphs, poisoned):
    monkeypatch.setattr(norms, "NormProblem", CpuNorm)
    impls = norm_training.width_contenders(6)
    assert list(impls) == ["cuDNN LayerNorm", "PyTorch eager LayerNorm", "cuDNN RMSNorm", "PyTorch eager RMSNorm"]
    step = impls["cuDNN LayerNorm"](16)
    assert fake_graphs == [("fwd", "layer", 16), ("bwd", "layer", 16)]  # built, run and checked once
    assert "dx" in poisoned[1]  # dx poisoned before the check's run
    fake_graphs.clear()
    impls["PyTorch eager LayerNorm"](16)()  # the same width: nothing built again
    impls["cuDNN LayerNorm"](16)
    assert fake_graphs == []
    step()  # the step: the forward, then the backward
    assert fake_graphs == [("fwd", "layer", 16), ("bwd", "layer", 16)]
    impls["cuDNN RMSNorm"](32)
    assert fake_graphs[-2:] == [("fwd", "rms", 32), ("bwd", "rms", 32)]


def test_width_contenders_eager_step_leaves_the_gradient_of_its_width(monkeypatch, fake_graphs):
    monkeypatch.setattr(norms, "NormProblem", CpuNorm)
    eager = norm_training.width_contenders(6)["PyTorch eager RMSNorm"]
    out = eager(8)()
    assert out.shape == (6, 8)
    assert fake_graphs == [("fwd", "rms", 8), ("bwd", "rms", 8)]


def _comparison(candidate, ms, nbytes, versus):
    measured = {n: Measurement(n, [t] * 3, "cold", bytes=nbytes) for n, t in ms.items()}
    return Comparison(candidate, 7, measured, {n: [t] * 7 for n, t in ms.items()}, versus, 0.02)


def _v(value, verdict):
    return {"value": value, "low": value - 0.05, "high": value + 0.05, "verdict": verdict}


def test_step_item_says_the_time_the_share_of_copy_and_both_verdicts():
    versus = {EAGER: _v(1.5, "faster"), COMPILED: _v(1.0, "tie")}
    step = _comparison(CUDNN, {CUDNN: 1.0, EAGER: 1.5, COMPILED: 1.0}, 2e9, versus)
    fwd = _comparison(CUDNN, {CUDNN: 0.5, EAGER: 0.7, COMPILED: 0.5}, 1.5e9, versus)
    results = {("RMSNorm", "forward + backward"): step, ("RMSNorm", "forward (training)"): fwd}
    text = norm_training.step_item("RMSNorm", results, 4000.0, candidate=CUDNN, tokens=16384, hidden=4096)
    assert text == (
        "* RMSNorm training step at 16384×4096: cuDNN 1000 µs (in-run 95% interval 1000–1000), 50% of "
        f"copy bandwidth: {step.describe(EAGER)}; {step.describe(COMPILED)}. Its forward alone reaches 75%."
    )


def test_the_tables_captions_name_the_unit_once():
    ms = [
        _measurement(n, norm, p) for norm in ("LayerNorm", "RMSNorm") for p in PASSES for n in (CUDNN, EAGER, COMPILED)
    ]
    residual = [Measurement(n, [1.0] * 3, "cold", bytes=4e9, params={"norm": "RMSNorm", "impl": n}) for n in (FUSED,)]
    for table in (norm_training.pass_table(ms, "LayerNorm", 16384, 4096), norm_training.residual_table(residual)):
        caption = table._repr_html_().split("<caption>")[1].split("</caption>")[0]
        assert caption.count("GB/s") == 1, caption  # the table's unit, not the title's too
        assert str(table).count("GB/s") == 1


def test_residual_item_says_both_verdicts_and_the_bytes_eager_moves():
    res = _comparison(
        FUSED, {FUSED: 1.0, EAGER: 1.3, COMPILED: 0.9}, 4e9, {EAGER: _v(1.3, "faster"), COMPILED: _v(0.9, "slower")}
    )
    text = norm_training.residual_item("LayerNorm", res, 5 / 4)
    assert text == (
        "* Residual add → LayerNorm, where eager PyTorch moves 1.25× the fused graph's bytes: the fused graph is "
        f"{res.describe(EAGER)}. It is {res.describe(COMPILED)}."
    )


def test_residual_item_keeps_the_bytes_out_of_the_loops_parenthesis():
    res = _comparison(
        FUSED, {FUSED: 1.0, EAGER: 1.3, COMPILED: 0.9}, 4e9, {EAGER: _v(1.3, "faster"), COMPILED: _v(0.9, "slower")}
    )
    res.wall = _comparison(
        FUSED, {FUSED: 1.0, EAGER: 1.3, COMPILED: 0.9}, 4e9, {EAGER: _v(1.3, "faster"), COMPILED: _v(0.9, "slower")}
    )
    text = norm_training.residual_item("LayerNorm", res, 5 / 4)
    eager = res.describe(EAGER)
    assert "back-to-back loop" in eager
    assert text.index("1.25× the fused graph's bytes") < text.index(eager)  # the bytes come first
    assert f"{eager} (" not in text and f"{eager}." in text  # nothing in parentheses right after the loop


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_the_graphs_and_baselines_check_on_the_gpu(kind):
    p = norms.NormProblem(tokens=512, hidden=1024, kind=kind)
    (_, data, fwd, bwd), checks = norm_training.checked_graphs(p, seed=1)
    impls, more = norm_training.checked_baselines(p, data, fwd, bwd, candidate=CUDNN)
    assert all(c.passed for c in checks + more)
    assert list(impls)[-1] == (LABELS[kind], CUDNN)


@pytest.mark.gpu
def test_the_fused_residual_graph_checks_on_the_gpu(monkeypatch, recorded_compare):
    p = norms.NormProblem(tokens=512, hidden=1024, kind="rms", residual=True)
    _, checks = norm_training.residual_comparison(p, candidate=FUSED, seed=2)
    assert all(c.passed for c in checks)
    assert recorded_compare[0][0] == [FUSED, EAGER, COMPILED]
