"""epilogue_fusion: the matmul-epilogue page's contenders across K, its verdict lines and table, and its
conclusions.

Everything here runs without a GPU: the sweep's cases are made from CPU inputs with a stand-in for
the built graph and for ``torch.compile``, and the comparisons are built from known round medians.
"""

from __future__ import annotations

import pytest
import torch

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.measure.compare import Comparison
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.measure.sweep import SweepResult
from cudnn_guide.studies import epilogue_fusion
from cudnn_guide.studies.epilogue_fusion import BARE, CANDIDATE, COMPILED, DEFAULT, EAGER, KSweep


def test_the_contenders_keep_the_names_the_records_key_on():
    assert CANDIDATE == "cuDNN graph (fused)"
    assert EAGER == "PyTorch eager chain"
    assert COMPILED == "torch.compile (max-autotune-no-cudagraphs) chain"
    assert DEFAULT == "torch.compile (default) chain"
    assert BARE == "bare matmul (no epilogue)"


@pytest.fixture
def fakes(monkeypatch):
    """CPU inputs, a graph that computes the chain (``wrong``: its negation), and a ``torch.compile``
    that returns the function; every step is logged."""
    from cudnn_guide import graphs
    from cudnn_guide.graphs import matmul
    from cudnn_guide.measure import baselines

    log, state = [], {"wrong": False}

    def make_inputs(self, seed=0):
        log.append(("inputs", self.batch, self.m, self.k, self.n, seed))
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(self.batch, self.m, self.k, generator=g).bfloat16()
        b = (torch.randn(self.batch, self.k, self.n, generator=g) / self.k**0.5).bfloat16()
        bias = torch.randn(1, 1, self.n, generator=g).bfloat16()
        y = torch.zeros(self.batch, self.m, self.n).bfloat16()
        return {"a": a, "b": b, "bias": bias, "y": y, "amax": torch.zeros(1, 1, 1)}

    class Built:
        def __init__(self, graph, handle, name):
            log.append(("adopt", graph, handle, name))
            self.name = name

        def execute(self, pack):
            log.append(("execute", self.name, bool(torch.isnan(pack["y"].float()).all())))
            y = torch.nn.functional.gelu(pack["a"].float() @ pack["b"].float() * pack["alpha"] + pack["bias"].float())
            pack["y"].copy_(-y if state["wrong"] else y)

        def bind(self, pack):
            return lambda: log.append(("run", self.name))

    def compile_quietly(fn, mode="max-autotune-no-cudagraphs", dynamic=None):
        log.append(("compile", mode, dynamic))
        return fn

    monkeypatch.setattr(matmul.MatmulProblem, "make_inputs", make_inputs)
    monkeypatch.setattr(graphs, "adopt", lambda graph, handle, name: Built(graph, handle, name))
    monkeypatch.setattr(baselines, "compile_quietly", compile_quietly)

    def declare(a, b, bias, y, amax, alpha):
        log.append(("declare", tuple(a.shape), alpha))
        return "graph", {"a": a, "b": b, "bias": bias, "y": y, "amax": amax, "alpha": alpha}

    return log, state, declare


def test_a_case_is_made_once_per_k_checked_before_it_is_timed(fakes):
    from cudnn_guide import collector

    log, _, declare = fakes

    class Bag:
        checks = []

        def add(self, *ms):
            pass

        def add_check(self, c):
            self.checks.append(c.name)

    collector.start(Bag())
    cases = KSweep(declare, "handle", batch=2, m=8, n=4, alpha=0.5)
    impls = cases.factories()
    assert list(impls) == [CANDIDATE, EAGER, DEFAULT, BARE]
    launchers = {name: make(16) for name, make in impls.items()}
    assert log == [
        ("inputs", 2, 8, 16, 4, 16),  # inputs seeded by K
        ("declare", (2, 8, 16), 0.5),
        ("adopt", "graph", "handle", "matmul epilogue K=16"),
        ("execute", "matmul epilogue K=16", True),  # poisoned first
        ("compile", "default", False),
    ]
    assert Bag.checks == ["K=16", "compiled K=16"]
    assert {name: make(16) is not None for name, make in impls.items()} == dict.fromkeys(impls, True)
    assert len(log) == 5 and list(cases.cases) == [16]  # asked again: made once
    launchers[CANDIDATE]()
    assert log[-1] == ("run", "matmul epilogue K=16")
    problem, inputs, _, _, out, _ = cases.case(16)
    y, amax = launchers[EAGER]()
    torch.testing.assert_close(y, problem.torch_forward(inputs["a"], inputs["b"], inputs["bias"])[0])
    torch.testing.assert_close(launchers[DEFAULT]()[0], y)
    launchers[BARE]()
    torch.testing.assert_close(out, inputs["a"] @ inputs["b"])
    assert out.data_ptr() != inputs["y"].data_ptr()  # the bare matmul writes its own output
    cases.fused(32)
    assert log[-5][0] == "inputs" and log[-5][3] == 32 and list(cases.cases) == [16, 32]


def test_a_fused_graph_that_computes_the_wrong_thing_stops_the_sweep(fakes):
    log, state, declare = fakes
    state["wrong"] = True
    with pytest.raises(CheckFailedError, match="K=64"):
        KSweep(declare, None, batch=1, m=4, n=4).fused(64)
    assert ("compile", "default", False) not in log


def v(value, verdict, half=0.05):
    return {"value": value, "low": value - half, "high": value + half, "verdict": verdict}


def comparison(ms, versus, *, band=0.01, rounds=7, host=None, wall=None):
    """A comparison whose every round took ``ms[name]``, the candidate first."""
    med = {n: [t] * rounds for n, t in ms.items()}
    measured = {
        n: Measurement(n, [t] * 3, "cold", params={"impl": n}, host_samples_ms=[(host or {})[n]] if host else [])
        for n, t in ms.items()
    }
    return Comparison(next(iter(ms)), rounds, measured, med, versus, band, wall=wall)


def test_gpu_and_loop_lines_give_each_baselines_two_verdicts_then_the_tie_bands():
    wall = comparison({"fused": 0.2, "eager": 0.4}, {"eager": v(2.0, "faster")}, band=0.03, rounds=7)
    cmp = comparison({"fused": 0.1, "eager": 0.1}, {"eager": v(1.0, "tie", 0.02)}, rounds=15, wall=wall)
    assert epilogue_fusion.gpu_and_loop_lines(cmp).splitlines() == [
        "eager: GPU time 1.00× (0.98–1.02), tie; loop wall clock 2.00× (1.95–2.05), faster",  # ≤ 88: one line
        "tie band: GPU time ±1.0%, 15 rounds; loop ±3.0%, 7 rounds",
    ]


def test_gpu_and_loop_lines_wrap_every_baseline_onto_an_indented_line_when_one_is_over_88():
    names = [CANDIDATE, EAGER, COMPILED, DEFAULT]
    wall = comparison(dict(zip(names, [0.1, 0.36, 0.3, 0.35])), {}, band=0.037)
    wall.versus = {EAGER: v(3.62, "faster"), COMPILED: v(3.02, "faster"), DEFAULT: v(3.45, "faster")}
    versus = {EAGER: v(2.04, "faster", 0.01), COMPILED: v(1.28, "faster", 0.004), DEFAULT: v(0.98, "slower", 0.01)}
    cmp = comparison(dict(zip(names, [0.03, 0.06, 0.038, 0.029])), versus, wall=wall)
    lines = epilogue_fusion.gpu_and_loop_lines(cmp).splitlines()
    assert max(map(len, lines)) <= 88
    assert lines == [
        f"{EAGER}:",
        "    GPU time 2.04× (2.03–2.05), faster; loop wall clock 3.62× (3.57–3.67), faster",
        f"{COMPILED}:",
        "    GPU time 1.28× (1.28–1.28), faster; loop wall clock 3.02× (2.97–3.07), faster",
        f"{DEFAULT}:",
        "    GPU time 0.98× (0.97–0.99), slower; loop wall clock 3.45× (3.40–3.50), faster",
        "tie band: GPU time ±1.0%, 7 rounds; loop ±3.7%, 7 rounds",
    ]


@pytest.fixture
def sweep():
    """Two K values: at 64 the chains are host-bound and cuDNN wins, at 4096 it ties and loses."""

    def at(gpu, loop, host=None):
        names = [CANDIDATE, EAGER, DEFAULT, BARE]
        wall = comparison(dict(zip(names, [0.1, 0.2, 0.3, 0.05])), dict(zip(names[1:], loop)), band=0.02)
        return comparison(dict(zip(names, gpu[0])), dict(zip(names[1:], gpu[1])), host=host, wall=wall)

    host = {CANDIDATE: 0.02, EAGER: 0.05, DEFAULT: 0.04, BARE: 0.01}
    small = at(
        ([0.03, 0.04, 0.05, 0.02], [v(1.3, "faster"), v(1.6, "faster"), v(0.7, "slower")]),
        [v(2.0, "faster"), v(3.0, "faster"), v(0.5, "slower")],
        host,
    )
    large = at(
        ([1.0, 1.2, 0.95, 0.9], [v(1.2, "faster"), v(0.95, "slower"), v(0.9, "slower")]),
        [v(1.0, "tie"), v(0.98, "tie"), v(0.9, "slower")],
        {n: t / 2 for n, t in host.items()},
    )
    return SweepResult.from_comparisons("K", {64: small, 4096: large})


def test_verdict_rows_give_both_clocks_verdicts_per_k_and_baseline(sweep):
    rows = epilogue_fusion.verdict_rows(sweep)
    assert [(r["K"], r["baseline"]) for r in rows] == [(k, b) for k in (64, 4096) for b in (EAGER, DEFAULT, BARE)]
    assert list(rows[0]) == [
        "K",
        "baseline",
        "GPU speed-up",
        "GPU in-run 95% interval",
        "GPU verdict",
        "GPU tie band",
        "loop speed-up",
        "loop in-run 95% interval",
        "loop verdict",
        "loop tie band",
    ]
    assert rows[1]["GPU speed-up"] == 1.6 and rows[1]["GPU in-run 95% interval"] == "1.55–1.65"
    assert rows[1]["GPU tie band"] == "±1.0%" and rows[1]["loop tie band"] == "±2.0%"
    assert rows[4]["loop speed-up"] == 0.98 and rows[4]["loop verdict"] == "tie"
    html = epilogue_fusion.verdict_table(sweep).to_html()
    assert "1.60×" in html and "0.98×" in html


def test_conclusions_say_where_cudnn_wins_ties_and_loses_on_each_clock(sweep):
    wall = comparison({CANDIDATE: 0.1, EAGER: 0.3, COMPILED: 0.2, DEFAULT: 0.2}, {}, band=0.02)
    wall.versus = {n: v(2.0, "faster") for n in (EAGER, COMPILED, DEFAULT)}
    base = comparison(
        {CANDIDATE: 0.1, EAGER: 0.2, COMPILED: 0.12, DEFAULT: 0.15},
        {EAGER: v(2.0, "faster"), COMPILED: v(1.2, "faster"), DEFAULT: v(1.5, "faster")},
        wall=wall,
    )
    bare = Measurement(BARE, [0.08] * 3, "cold")
    sentences = epilogue_fusion.conclusions(base, bare, sweep, [64, 4096], [EAGER, DEFAULT])
    assert sentences[0].startswith("At the base size the fused graph takes 100.0 µs of GPU time")
    assert "2.00× faster than PyTorch eager chain" in sentences[0] and sentences[0].endswith(".")
    assert "; in this run it is 2.00× faster than PyTorch eager chain" in sentences[0]
    assert sentences[1] == (
        "* Its epilogue costs +25% of GPU time over the bare matmul (timed just after the rounds); "
        "the eager chain's costs +150%."
    )
    assert sentences[2] == (
        f"* Against {EAGER}, across the sweep, in this run: in GPU time per call, cuDNN is faster at K = 64, 4096; "
        "in wall-clock time per call of a back-to-back loop, cuDNN is faster at K = 64, ties at K = 4096."
    )
    assert sentences[3] == (
        f"* Against {DEFAULT}, across the sweep, in this run: in GPU time per call, cuDNN is faster at K = 64, "
        "cuDNN is slower at K = 4096; in wall-clock time per call of a back-to-back loop, cuDNN is faster "
        "at K = 64, ties at K = 4096."
    )
    assert sentences[4] == (
        f"Where cuDNN loses in GPU time per call, in this run: to {DEFAULT} at 1 of 2 K values (K = 4096)."
    )
    assert sentences[5] == (
        "In wall-clock time per call of a back-to-back loop, in this run, cuDNN loses to no PyTorch chain at "
        "any K of the sweep."
    )
    assert sentences[6].startswith("* Host time per call across the sweep")
    assert f"{CANDIDATE} 10–20 µs (above its GPU time at no K)" in sentences[6]
    assert f"{EAGER} 25–50 µs (above its GPU time at K = 64)" in sentences[6]
    assert f"{DEFAULT} 20–40 µs (above its GPU time at no K)" in sentences[6] and BARE not in sentences[6]
    assert sentences[7] == (
        "* Across the sweep the eager chain's GPU time over the bare matmul's goes from 2.00× at K=64 to "
        "1.33× at K=4096; torch.compile's (default) from 2.50× to 1.06×; the fused graph's from 1.50× to 1.11×."
    )


def test_conclusions_say_that_each_verdict_they_state_is_this_runs(sweep):
    wall = comparison({CANDIDATE: 0.1, EAGER: 0.3, COMPILED: 0.2, DEFAULT: 0.2}, {}, band=0.02)
    wall.versus = {n: v(2.0, "faster") for n in (EAGER, COMPILED, DEFAULT)}
    base = comparison(
        {CANDIDATE: 0.1, EAGER: 0.2, COMPILED: 0.12, DEFAULT: 0.098},
        {EAGER: v(2.0, "faster"), COMPILED: v(1.2, "faster"), DEFAULT: v(0.98, "slower", 0.01)},
        wall=wall,
    )
    bare = Measurement(BARE, [0.08] * 3, "cold")
    sentences = epilogue_fusion.conclusions(base, bare, sweep, [64, 4096], [EAGER, DEFAULT])
    base_said = sentences[0].split("; in this run it is ", 1)
    assert len(base_said) == 2 and f"slower than {DEFAULT}" in base_said[1]  # the base size's in-run verdict
    verdicts = [s for s in sentences if any(w in s for w in ("faster", "slower", "ties", "loses"))]
    assert len(verdicts) == 5 and all("in this run" in s for s in verdicts)
