"""dropout_determinism: the dropout-and-determinism page's graphs, checks, counts, averages, figure and sentence.

On the CPU the frontend's graph is a stand-in that records what is declared (``cudnn.pygraph`` is
replaced; the enums are the frontend's own), adoption is a recorder, and the runs are small
functions with the behaviour under test. The dropout inputs need a GPU (marked ``gpu``).
"""

from __future__ import annotations

import types

import cudnn
import matplotlib
import pytest
import torch
import torch.nn.functional as F

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.studies import dropout_determinism as study

matplotlib.use("Agg")


class FakeTensor:
    """A graph tensor: its name, and what ``set_*`` declared on it."""

    def __init__(self, like=None, name=None):
        self.like, self.name, self.declared = like, name, {}

    def set_output(self, flag):
        self.declared["output"] = flag
        return self

    def set_dim(self, dims):
        self.declared["dim"] = dims
        return self

    def set_stride(self, strides):
        self.declared["stride"] = strides
        return self

    def set_data_type(self, dtype):
        self.declared["data_type"] = dtype
        return self


class FakeGraph:
    """A stand-in for ``cudnn.pygraph`` that records its arguments, tensors, operation and build."""

    made: list = []

    def __init__(self, **kwargs):
        self.kwargs, self.tensors, self.op, self.heuristics = kwargs, [], None, None
        FakeGraph.made.append(self)

    def tensor_like(self, t, name=None):
        self.tensors.append(FakeTensor(t, name))
        return self.tensors[-1]

    def sdpa_backward(self, **kwargs):
        self.op = ("sdpa_backward", kwargs)
        return FakeTensor(name="dQ"), FakeTensor(name="dK"), FakeTensor(name="dV")

    def sdpa(self, **kwargs):
        self.op = ("sdpa", kwargs)
        return FakeTensor(name="O"), FakeTensor(name="STATS")

    def build(self, heuristics):
        self.heuristics = heuristics


class FakeBuilt:
    def __init__(self, graph, handle, name):
        self.graph, self.handle, self.name = graph, handle, name
        self.report = types.SimpleNamespace(workspace_bytes=3 * 2**20)

    def bind(self, pack):
        self.bound = pack
        return "launcher"


@pytest.fixture
def fake_frontend(monkeypatch):
    from cudnn_guide import graphs

    FakeGraph.made = []
    monkeypatch.setattr(cudnn, "pygraph", FakeGraph)
    monkeypatch.setattr(graphs, "adopt", lambda g, handle, *, name: FakeBuilt(g, handle, name))
    return FakeGraph.made


CAUSAL = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)


def lesson_inputs(b=1, h=2, s=6, d=16):
    q, k, v, d_o = torch.randn(4, b, h, s, d, dtype=torch.bfloat16)
    return dict(q=q, k=k, v=v, o=torch.empty_like(q), dO=d_o, stats=torch.empty(b, h, s, 1))


# -- the deterministic backward -------------------------------------------------------------------


@pytest.mark.parametrize("deterministic", [True, False])
def test_backward_graph_declares_the_lessons_backward_with_the_switch(fake_frontend, deterministic):
    inputs = lesson_inputs()
    result = study.backward_graph("handle", inputs, deterministic=deterministic, mask=CAUSAL)
    (g,) = fake_frontend
    assert g.kwargs == {
        "handle": "handle",
        "io_data_type": cudnn.data_type.BFLOAT16,
        "intermediate_data_type": cudnn.data_type.FLOAT,
        "compute_data_type": cudnn.data_type.FLOAT,
    }
    assert [(t.name, t.like) for t in g.tensors] == [(n, inputs[n]) for n in ("q", "k", "v", "o", "dO", "stats")]
    op, kwargs = g.op
    T = {t.name: t for t in g.tensors}
    assert op == "sdpa_backward"
    assert kwargs == {
        "name": "sdpa_backward",
        **{n: T[n] for n in ("q", "k", "v", "o", "dO", "stats")},
        "attn_scale": 16**-0.5,
        "use_deterministic_algorithm": deterministic,
        **CAUSAL,
    }
    assert g.heuristics == [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
    assert result.built.name == f"backward, deterministic={deterministic}"
    assert result.launch == "launcher"
    assert [tuple(t.shape) for t in result.grads] == [tuple(inputs[n].shape) for n in "qkv"]
    pack = result.built.bound
    assert [pack[t] for t in g.tensors] == [inputs[n] for n in ("q", "k", "v", "o", "dO", "stats")]
    outputs = [t for t in pack if t not in g.tensors]
    assert [t.name for t in outputs] == ["dQ", "dK", "dV"]
    assert [pack[t] for t in outputs] == result.grads
    for t, grad in zip(outputs, result.grads):
        assert t.declared == {"output": True, "dim": list(grad.shape), "stride": list(grad.stride())}


def test_fp32_grads_are_causal_attentions_gradients_in_fp32():
    q, k, v, d_o = torch.randn(4, 1, 2, 5, 8, dtype=torch.bfloat16)
    got = study.fp32_grads(q, k, v, d_o)
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*leaves, is_causal=True).backward(d_o.float())
    assert all(g.dtype == torch.float32 for g in got)
    for g, leaf in zip(got, leaves):
        torch.testing.assert_close(g, leaf.grad)


def test_check_grads_names_each_gradient_and_raises_on_a_wrong_one():
    g = [torch.randn(2, 3) for _ in range(3)]
    assert [c.name for c in study.check_grads(g, g, "cuDNN training step")] == [
        "dQ, cuDNN training step",
        "dK, cuDNN training step",
        "dV, cuDNN training step",
    ]
    with pytest.raises(CheckFailedError, match="dV, x"):
        study.check_grads(g, [g[0], g[1], -g[2]], "x")


def test_bit_patterns_counts_distinct_outputs_after_each_launch():
    out = torch.zeros(4, dtype=torch.bfloat16)
    assert study.bit_patterns(lambda: None, lambda: out) == 1  # the same bits ten times
    assert study.bit_patterns(lambda: out.add_(1), lambda: out, runs=3) == 3
    flips = iter([0.0, -0.0] * 5)  # equal as numbers, not as bits
    assert study.bit_patterns(lambda: out.fill_(next(flips)), lambda: out) == 2


def test_check_and_count_checks_then_counts_each_build_in_order(capsys):
    ref = [torch.randn(2, 8) for _ in range(3)]
    runs = {True: 0, False: 0}

    def build(det):
        grads = [torch.empty(2, 8, dtype=torch.bfloat16) for _ in range(3)]

        def launch():  # the default build's dQ changes in its last bit on every run
            runs[det] += 1
            for g, r in zip(grads, ref):
                g.copy_(r)
            if not det:
                grads[0].view(torch.int16)[0, 0] ^= runs[det] % 2

        built = types.SimpleNamespace(report=types.SimpleNamespace(workspace_bytes=(64 if det else 0) * 2**20))
        return study.Backward(built, launch, grads)

    checks, distinct = study.check_and_count({True: build(True), False: build(False)}, ref)
    assert [c.name for c in checks] == [
        f"{n}, deterministic={det}" for det in (True, False) for n in ("dQ", "dK", "dV")
    ]
    assert distinct == {True: 1, False: 2}
    assert runs == {True: 11, False: 11}  # once checked, ten times counted
    assert capsys.readouterr().out.splitlines() == [
        "deterministic=True: 1 distinct dQ bit pattern in 10 runs; workspace 64 MiB",  # one: singular
        "deterministic=False: 2 distinct dQ bit patterns in 10 runs; workspace 0 MiB",
    ]


def fa4_stand_in(monkeypatch, seen, *, fails=False, grads=None):
    from cudnn_guide.measure import fa4

    def training_step(q, k, v, d_o, *, causal, scale=None, **kw):
        seen.update(causal=causal, scale=scale, **kw)

        def step():
            if fails:
                raise RuntimeError("no kernel for this GPU")
            return torch.zeros(1)

        return step, lambda: grads

    monkeypatch.setattr(fa4, "training_step", training_step)


def test_admit_fa4_checks_admits_and_counts_its_deterministic_step(monkeypatch, capsys):
    q, k, v, d_o = torch.randn(4, 1, 2, 5, 16)
    ref = [torch.randn(1, 2, 5, 16) for _ in range(3)]
    seen, steps = {}, {"cuDNN": "launcher"}
    fa4_stand_in(monkeypatch, seen, grads=[r.to(torch.bfloat16) for r in ref])
    assert study.admit_fa4(steps, "FA4, deterministic", q, k, v, d_o, ref) == 1
    assert seen == {"causal": True, "scale": 16**-0.5, "deterministic": True}
    assert list(steps) == ["cuDNN", "FA4, deterministic"]
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:3]] == [
        "check dQ, FA4, deterministic",
        "check dK, FA4, deterministic",
        "check dV, FA4, deterministic",
    ]
    assert out[3] == "FA4, deterministic: 1 distinct dQ bit pattern in 10 runs"


def test_admit_fa4_breaks_a_long_count_line_onto_an_indented_second_line(monkeypatch, capsys):
    ref = [torch.randn(1, 2, 5, 16) for _ in range(3)]
    label = "FlashAttention-4 (flash-attn-4 4.0.0b36), deterministic"
    fa4_stand_in(monkeypatch, {}, grads=[r.to(torch.bfloat16) for r in ref])
    q = torch.randn(1, 2, 5, 16)
    assert study.admit_fa4({}, label, q, q, q, q, ref) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [f"{label}:", "    1 distinct dQ bit pattern in 10 runs"]
    assert all(len(line) <= 88 for line in out[-2:])


def test_admit_fa4_passes_a_given_scale_and_says_why_it_cannot_run(monkeypatch, capsys):
    seen, steps = {}, {}
    fa4_stand_in(monkeypatch, seen, fails=True)
    q = torch.randn(1, 2, 5, 16)
    assert study.admit_fa4(steps, "FA4, deterministic", q, q, q, q, [], scale=0.5) is None
    assert seen["scale"] == 0.5 and steps == {}
    assert "unavailable here (RuntimeError: no kernel for this GPU)" in capsys.readouterr().out


def test_admit_fa4_stops_on_wrong_gradients(monkeypatch):
    ref = [torch.randn(1, 2, 5, 16) for _ in range(3)]
    fa4_stand_in(monkeypatch, {}, grads=[ref[0], ref[1], -ref[2]])
    with pytest.raises(CheckFailedError, match="dV, FA4"):
        study.admit_fa4({}, "FA4", *torch.randn(4, 1, 2, 5, 16), ref)


# -- dropout --------------------------------------------------------------------------------------


def dropout_tensors(b=1, h=2, s=6, d=16):
    q, k, v = torch.randn(3, b, h, s, d, dtype=torch.bfloat16)
    return dict(
        q=q,
        k=k,
        v=v,
        o=torch.empty_like(q),
        stats=torch.empty(b, h, s, 1),
        seed=torch.full((1, 1, 1, 1), 1234, dtype=torch.int64),
        offset=torch.zeros((1, 1, 1, 1), dtype=torch.int64),
    )


def test_dropout_graph_passes_seed_and_offset_tensors_and_writes_the_given_output(fake_frontend):
    dd = dropout_tensors()
    built, pack, out = study.dropout_graph("handle", dd, 0.1)
    (g,) = fake_frontend
    assert g.kwargs["io_data_type"] == cudnn.data_type.BFLOAT16
    assert [(t.name, t.like) for t in g.tensors] == [
        ("q", dd["q"]),
        ("k", dd["k"]),
        ("v", dd["v"]),
        ("seed", dd["seed"]),
        (None, dd["offset"]),
    ]
    Q, K, V, SEED, OFFSET = g.tensors
    op, kwargs = g.op
    assert op == "sdpa"
    assert kwargs == {
        "q": Q,
        "k": K,
        "v": V,
        "attn_scale": 16**-0.5,
        "generate_stats": True,
        "dropout": (0.1, SEED, OFFSET),
    }
    assert g.heuristics == [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
    assert built.name == "sdpa_dropout" and out is dd["o"]
    O, STATS = (t for t in pack if t not in g.tensors)
    assert pack == {
        Q: dd["q"],
        K: dd["k"],
        V: dd["v"],
        SEED: dd["seed"],
        OFFSET: dd["offset"],
        O: out,
        STATS: dd["stats"],
    }
    assert O.declared == {"output": True, "dim": list(out.shape), "stride": list(out.stride())}
    stats = dd["stats"]
    assert STATS.declared == {
        "output": True,
        "data_type": cudnn.data_type.FLOAT,
        "dim": list(stats.shape),
        "stride": list(stats.stride()),
    }


def test_dropout_graph_without_dropout_writes_a_new_output_and_the_same_statistics(fake_frontend):
    dd = dropout_tensors()
    built, pack, out = study.dropout_graph("handle", dd, 0)
    (g,) = fake_frontend
    assert [t.name for t in g.tensors] == ["q", "k", "v"]
    assert "dropout" not in g.op[1]
    assert built.name == "sdpa"
    assert out is not dd["o"] and out.shape == dd["o"].shape and out.dtype == dd["o"].dtype
    assert any(t is dd["stats"] for t in pack.values()) and any(t is out for t in pack.values())


def test_dropout_mean_errors_average_runs_with_seeds_0_to_n_and_restore_the_seed(capsys):
    torch.manual_seed(0)
    reference = torch.randn(64, 64)
    seed, out = torch.full((1, 1, 1, 1), 1234, dtype=torch.int64), torch.empty(64, 64)
    noise = {i: torch.randn(64, 64) for i in range(64)}
    seen = []

    def run():  # an unbiased stand-in: the reference plus noise drawn by the seed
        seen.append(int(seed.item()))
        out.copy_(reference + noise[seen[-1]])

    errors = study.dropout_mean_errors(run, out, seed, reference)
    assert seen == list(range(64)) and seed.item() == 1234
    assert list(errors) == [1, 4, 16, 64]
    mean = sum(noise[i] for i in range(16)) / 16
    assert errors[16] == pytest.approx((torch.linalg.vector_norm(mean) / torch.linalg.vector_norm(reference)).item())
    assert 5 < errors[1] / errors[64] < 11  # falls like 1/√N
    assert capsys.readouterr().out.splitlines()[0] == f"mean of  1 runs: relative error {errors[1]:.3f}"


def test_dropout_mean_errors_of_a_biased_run_do_not_fall():
    reference, seed, out = torch.ones(8, 8), torch.zeros((1, 1, 1, 1), dtype=torch.int64), torch.empty(8, 8)
    errors = study.dropout_mean_errors(lambda: out.copy_(reference * 0.9), out, seed, reference, runs=4, report=(1, 4))
    assert errors == pytest.approx({1: 0.1, 4: 0.1})


def test_replay_and_advance_replays_an_offset_and_leaves_the_next_one():
    offset, out = torch.zeros((1, 1, 1, 1), dtype=torch.int64), torch.empty(4)
    run = lambda: out.copy_(torch.arange(4) * offset.item())
    assert study.replay_and_advance(run, out, offset, at=7) == (True, True)
    assert offset.item() == 8
    counter = iter(range(100))
    noisy = lambda: out.fill_(next(counter))
    assert study.replay_and_advance(noisy, out, offset)[0] is False
    ignores_offset = lambda: out.fill_(1.0)
    assert study.replay_and_advance(ignores_offset, out, offset) == (True, False)


# -- the figure and the sentence ------------------------------------------------------------------


def fake_cost(times):
    return types.SimpleNamespace(
        estimate=lambda name: {"value": times[name], "low": times[name] - 1, "high": times[name] + 2}
    )


def test_plot_costs_shows_the_convergence_and_four_bars_with_their_intervals():
    errors = {1: 0.32, 4: 0.16, 16: 0.08, 64: 0.04}
    dropout_cost = fake_cost({"without dropout": 100.0, "with dropout": 120.0})
    det_cost = fake_cost({"default (atomics)": 700.0, "deterministic": 760.0})
    fig = study.plot_costs(errors, 0.1, dropout_cost, det_cost)
    left, right = fig.axes
    assert left.get_title() == "dropout p=0.1: the average converges"
    measured, predicted = left.get_lines()
    assert list(measured.get_ydata()) == [0.32, 0.16, 0.08, 0.04]
    assert list(predicted.get_ydata()) == pytest.approx([0.32, 0.16, 0.08, 0.04])
    bars = right.patches
    assert [b.get_x() + b.get_width() / 2 for b in bars] == [0, 1, 3, 4]
    assert [b.get_height() for b in bars] == [100.0, 120.0, 700.0, 760.0]
    assert [t.get_text() for t in right.get_xticklabels()] == ["no dropout", "dropout", "default", "deterministic"]
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_plot_costs_labels_each_pair_of_bars_with_its_call_and_shape(monkeypatch, fake_frontend):
    import matplotlib.pyplot as plt

    monkeypatch.setattr(study, "_SHAPES", {"forward": (4, 2048)})  # as dropout_inputs(4, 16, 2048, 128) sets it
    study.backward_graph("handle", lesson_inputs(b=2, s=6), deterministic=True, mask=CAUSAL)
    assert study._SHAPES == {"forward": (4, 2048), "backward": (2, 6)}
    dropout_cost = fake_cost({"without dropout": 100.0, "with dropout": 120.0})
    det_cost = fake_cost({"default (atomics)": 700.0, "deterministic": 760.0})
    right = study.plot_costs({1: 0.3, 4: 0.15}, 0.1, dropout_cost, det_cost).axes[1]
    groups = right.get_xticklabels(minor=True)
    assert [t.get_text() for t in groups] == ["attention forward, 4×2048 tokens", "attention backward, 2×6 tokens"]
    assert [t.get_position()[0] for t in groups] == [0.5, 3.5]  # under each pair
    plt.close("all")
    monkeypatch.setattr(study, "_SHAPES", {})  # shapes not known: the calls alone
    right = study.plot_costs({1: 0.3, 4: 0.15}, 0.1, dropout_cost, det_cost).axes[1]
    assert [t.get_text() for t in right.get_xticklabels(minor=True)] == ["attention forward", "attention backward"]
    plt.close("all")


def test_fa4_sentence_in_each_case():
    cmp = types.SimpleNamespace(
        versus={"FA4, deterministic": {"verdict": "faster"}}, describe=lambda b: f"1.20× faster than {b} (...)"
    )
    assert study.fa4_sentence(cmp, "FA4, deterministic", 1, True, "FA4", "") == (
        "* Against FA4, deterministic (1 dQ bit pattern in 10 runs), one cuDNN training step "
        "(forward + deterministic backward) is 1.20× faster than FA4, deterministic (...): "
        "cuDNN is the faster of the two."
    )
    assert "(3 dQ bit patterns in 10 runs)" in study.fa4_sentence(cmp, "FA4, deterministic", 3, True, "FA4", "")
    cmp.versus["FA4, deterministic"]["verdict"] = "tie"
    assert study.fa4_sentence(cmp, "FA4, deterministic", 1, True, "FA4", "").endswith("(...).")
    assert study.fa4_sentence(None, "FA4, deterministic", None, True, "FA4", "") == (
        "* FA4, deterministic could not run here (its reason is printed above)."
    )
    assert study.fa4_sentence(None, "FA4, deterministic", None, False, "FA4", "not installed") == (
        "* FA4 was not timed: not installed."
    )


@pytest.mark.gpu
def test_dropout_inputs_are_the_seeded_bf16_tensors_with_seed_and_offset():
    dd = study.dropout_inputs(2, 4, 128, 64)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for n in "qkv":
        want = torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
        assert torch.equal(dd[n], want)
    assert dd["o"].shape == (2, 4, 128, 64) and dd["stats"].shape == (2, 4, 128, 1)
    assert dd["stats"].dtype == torch.float32
    assert (dd["seed"].item(), dd["offset"].item()) == (1234, 0)
    assert dd["seed"].shape == dd["offset"].shape == (1, 1, 1, 1)
    assert dd["seed"].dtype == dd["offset"].dtype == torch.int64
    assert study._SHAPES["forward"] == (2, 128)  # B×S, for the figure's label
