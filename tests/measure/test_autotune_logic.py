"""The tuning logic (screening, halving, ranking, selection) on a fake graph whose plans have known times.

The GPU parts (timing) are replaced by a model: plan i takes TIMES[i] ms per call, with a little
deterministic noise. What is tested is the search, not the clock.
"""

import itertools

import pytest
from conftest import SMALL_CONV

from cudnn_guide import check, report
from cudnn_guide.errors import BenchmarkError
from cudnn_guide.graphs import conv
from cudnn_guide.measure import autotune
from cudnn_guide.measure.measurement import Measurement

TIMES = [0.100, 0.098, 0.250, 5.0, 0.101, 120.0, 0.099, 0.400, 0.097, 2.0, 0.300, 0.120]


class FakeGraph:
    def __init__(self, names):
        self.names, self.selected, self.builds = names, 0, []

    def get_execution_plan_count(self):
        return len(self.names)

    def get_plan_name_at_index(self, i):
        return self.names[i]

    def get_workspace_size_plan_at_index(self, i):
        return 0

    def get_workspace_size(self):
        return 0

    def build_plan_at_index(self, i):
        self.selected = i
        self.builds.append(i)


class FakeReport:
    plan_name = "plan0"


class FakeBuilt:
    name = "fake"

    def __init__(self, names):
        self.graph, self.report = FakeGraph(names), FakeReport()

    class _WS:
        @staticmethod
        def numel():
            return 1

    workspace = _WS()

    def check_pack(self, pack):
        pass

    def bind(self, pack):
        return lambda: None


@pytest.fixture
def fake(monkeypatch):
    names = [f"plan{i}" for i in range(len(TIMES))]
    built = FakeBuilt(names)
    noise = itertools.cycle([0.999, 1.0, 1.001])
    calls = {"reps": 0}

    def fake_benchmark(fn, *, label, min_reps, max_reps, params, **kw):
        i = built.graph.selected
        n = max_reps
        calls["reps"] += n
        return Measurement(label, [TIMES[i] * next(noise) for _ in range(n)], "fake", params=params)

    def fake_screen(built_, pack, index, name, **kw):
        built_.graph.build_plan_at_index(index)
        calls["reps"] += 1
        return autotune.PlanTiming(index, name, Measurement(name, [TIMES[index]], "fake screen"), finalist=False)

    monkeypatch.setattr(autotune, "benchmark", fake_benchmark)
    monkeypatch.setattr(autotune, "_screen", fake_screen)
    return built, calls


def test_exhaustive_ranks_every_plan_and_restores_the_selection(fake):
    built, calls = fake
    res = autotune.tune(built, {}, reps=50)
    assert [t.index for t in res.ranked][:3] == [8, 1, 6]
    assert res.best.index == 8 and res.rank_of(0) == 4  # 0.097, 0.098, 0.099, then plan 0 at 0.100
    assert built.graph.selected == 0  # left on the plan it had


def test_two_passes_rank_correlation_and_the_ranking_plot(fake):
    import matplotlib

    matplotlib.use("Agg")
    built, _ = fake
    a = autotune.tune(built, {}, reps=20)
    assert a.rank_correlation(a) == pytest.approx(1.0)
    flipped = autotune.TuneResult(
        "exhaustive",
        [autotune.PlanTiming(t.index, t.name, Measurement(t.name, [1 / t.median_ms], "fake")) for t in a.timings],
        0.0,
    )
    assert a.rank_correlation(flipped) == pytest.approx(-1.0)  # the reverse order
    lone = autotune.TuneResult("exhaustive", a.timings[:1], 0.0)
    with pytest.raises(BenchmarkError, match="fewer than two"):
        a.rank_correlation(lone)
    ax = report.plot_plans(a, title="t")
    assert len(ax.lines) == len(a.ranked)  # one median marker per plan
    assert ax.texts[0].get_text() == f"heuristic's choice: rank {a.rank_of(0)}" and ax.get_title() == "t"


def test_halving_screens_out_slow_plans_and_finds_the_best_cheaply(fake):
    built, calls = fake
    ex = autotune.tune(built, {}, reps=200)
    exhaustive_reps = calls["reps"]
    calls["reps"] = 0
    hv = autotune.tune(built, {}, method="halving", reps=200, first_round_reps=10)
    assert hv.best.index == ex.best.index
    assert hv.best.finalist
    slow = {3, 5, 9, 7}  # more than 3x the fastest screen
    assert all(not hv.by_index(i).finalist for i in slow)
    assert calls["reps"] < 0.5 * exhaustive_reps
    # eliminated plans keep their short timing but rank after every finalist
    ranked = hv.ranked
    assert all(t.finalist for t in ranked[:2]) and not any(t.finalist for t in ranked[2:])


def test_unknown_method_is_rejected(fake):
    built, _ = fake
    with pytest.raises(ValueError, match="exhaustive' or 'halving"):
        autotune.tune(built, {}, method="random")


def test_no_plan_that_runs_is_an_error(monkeypatch, fake):
    built, _ = fake
    monkeypatch.setattr(
        autotune, "_screen", lambda b, p, i, n, **kw: autotune.PlanTiming(i, n, error="boom", finalist=False)
    )
    with pytest.raises(BenchmarkError, match="no plan could run"):
        autotune.tune(built, {}, method="halving")


# --- on the GPU (marker gpu; skipped without one) ---


@pytest.mark.gpu
def test_tuning_finds_a_plan_and_selects_it(small_conv):
    import cudnn

    inputs = SMALL_CONV.make_inputs(seed=5)
    fused = conv.conv_bias_relu_graph(
        SMALL_CONV, inputs, heuristics=("A", "B", "FALLBACK"), policy=cudnn.build_plan_policy.ALL
    )
    pack = fused.pack(**inputs)
    ex = autotune.tune(fused, pack, reps=20)
    hv = autotune.tune(fused, pack, method="halving", reps=20, first_round_reps=5)
    assert ex.best.measurement.median_ms > 0 and hv.best.finalist
    autotune.select(fused, ex.best.index)
    check.poison(inputs["y"])
    fused.execute(pack)
    ref = check.reference(SMALL_CONV.torch_forward, inputs["x"], inputs["w"], inputs["b"])
    assert check.check(inputs["y"], ref).passed
