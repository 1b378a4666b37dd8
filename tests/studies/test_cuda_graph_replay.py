"""cuda_graph_replay: the CUDA-graphs page's host levels, tables, sweep and prose.

The levels, rows and prose run on the CPU; the sweep runs here through stand-ins for the graph, the
check and the timers (the order of its calls is what is tested), and on a GPU for real.
"""

from __future__ import annotations

import pytest

from cudnn_guide import check
from cudnn_guide.measure import bench, cudagraphs
from cudnn_guide.measure.measurement import Measurement
from cudnn_guide.studies import cuda_graph_replay as cgr
from cudnn_guide.studies import host_levels

# --- host levels and their table ----------------------------------------------------------------------


def _process(host, eager, replay, one=20.0):
    return {"host_us": host, "eager_us": eager, "replay_us": replay, "replay_one_us": one, "speedup": eager / replay}


def test_the_most_common_level_and_of_equally_common_ones_the_lowest():
    levels = host_levels.levels([13.0, 13.2, 20.0, 20.5, 13.1])
    assert cgr.most_common_level(levels) is levels[0]
    tied = host_levels.levels([13.0, 13.2, 20.0, 20.5])
    assert cgr.most_common_level(tied)["value"] == pytest.approx(13.1)
    upper = host_levels.levels([13.0, 20.0, 20.5])
    assert cgr.most_common_level(upper) is upper[1]


def test_at_level_keeps_the_processes_within_its_range_ends_included():
    runs = [_process(h, 30.0, 10.0) for h in (13.0, 20.0, 13.4, 12.9, 14.0)]
    level = {"low": 12.9, "high": 13.4}
    assert [r["host_us"] for r in cgr.at_level(runs, level)] == [13.0, 13.4, 12.9]


def test_level_text_and_process_rows():
    levels = host_levels.levels([13.0, 13.2, 20.6])
    assert cgr.level_text(levels) == "2 at 13.1 µs (13.0–13.2); 1 at 20.6 µs (20.6–20.6)"
    rows = cgr.process_rows([_process(13.0, 31.0, 10.0, 25.0), _process(20.0, 40.0, 12.5)])
    assert rows[0] == {
        "process": 1,
        "graph.execute host µs": 13.0,
        "eager loop µs": 31.0,
        "replay of 100 calls µs": 10.0,
        "replay of 1 call µs": 25.0,
        "loop / replay of 100": "3.10×",
    }
    assert rows[1]["process"] == 2 and rows[1]["loop / replay of 100"] == "3.20×"


# --- what the launchers add ---------------------------------------------------------------------------


def test_added_rows_and_the_overhead_in_words():
    adds = {"bind": {"value": 0.25, "low": -0.125, "high": 0.5}, "checks pack": {"value": 2.0, "low": 1.5, "high": 3}}
    assert cgr.added_rows(adds) == [
        {"launch": "bind", "host µs added per call": 0.25, "95% interval": "-0.12 to +0.50"},
        {"launch": "checks pack", "host µs added per call": 2.0, "95% interval": "+1.50 to +3.00"},
    ]
    resolved = "+2.00 µs/call, 95% CI +1.50 to +3.00 µs"
    assert cgr.overhead_text(adds["checks pack"]) == resolved
    assert cgr.overhead_text(adds["bind"]) == (
        "no overhead this measurement can resolve: +0.25 µs/call, 95% CI -0.12 to +0.50 µs"
    )
    assert cgr.overhead_text({"value": -0.5, "low": -1.0, "high": 0.0}).startswith("no overhead")  # 0 at an end


def test_less_or_more():
    assert cgr.less_or_more(3.04) == "3.0× less"
    assert cgr.less_or_more(1.0) == "1.0× less"
    assert cgr.less_or_more(0.25) == "4.0× more"


# --- the sweep ----------------------------------------------------------------------------------------


class _Tensor:
    def __init__(self, name):
        self.name = name


class _Problem:
    def __init__(self, s):
        self.s, self.flops = s, 2 * s**3

    def torch_forward(self, a, b, bias):
        return ("reference of", a.name), None


class _Graph:
    def __init__(self, s, log):
        self.s, self.log = s, log

    def execute(self, pack):
        self.log.append(("execute", self.s, pack))

    def bind(self, pack):
        self.log.append(("bind", self.s, pack))
        return f"launcher {self.s}"


def test_the_sweep_checks_each_size_before_timing_it(monkeypatch, capsys):
    log = []

    def build(s, seed=0):
        log.append(("build", s, seed))
        ins = {k: _Tensor(f"{k}{s}") for k in ("a", "b", "bias", "y", "amax")}
        return _Problem(s), ins, _Graph(s, log), f"pack {s}"

    def timer(name, ms):
        def time(fn, **kw):
            log.append((name, fn, kw))
            return Measurement(kw["label"], [ms], "x", kw.get("flops"), params=kw.get("params", {}))

        return time

    monkeypatch.setattr(cgr, "matmul_epilogue", build)
    monkeypatch.setattr(check, "poison", lambda *t: log.append(("poison", [x.name for x in t])))
    monkeypatch.setattr(check, "reference", lambda fn, *ins: fn(*ins))  # (y, amax), as torch_forward
    monkeypatch.setattr(check, "check", lambda y, ref, name: log.append(("check", y.name, ref, name)))
    monkeypatch.setattr(bench, "benchmark", timer("benchmark", 0.002))
    monkeypatch.setattr(cudagraphs, "time_loop", timer("time_loop", 0.012))
    monkeypatch.setattr(
        cudagraphs, "capture", lambda fn, calls, label: log.append(("capture", fn, calls, label)) or "g"
    )
    monkeypatch.setattr(cudagraphs, "time_replay", lambda g, **kw: timer("time_replay", 0.003)(g, **kw))

    rows = cgr.sweep([64, 128])
    assert [(m.label, m.params) for m in rows] == [
        ("GPU time s=64", {"impl": "GPU time of one call", "s": 64}),
        ("eager loop s=64", {"impl": "eager loop, per call", "s": 64}),
        ("replay s=64", {"impl": "graph replay, per call", "s": 64}),
        ("GPU time s=128", {"impl": "GPU time of one call", "s": 128}),
        ("eager loop s=128", {"impl": "eager loop, per call", "s": 128}),
        ("replay s=128", {"impl": "graph replay, per call", "s": 128}),
    ]
    flops = 2 * 64**3
    assert log[:9] == [
        ("build", 64, 64),  # each size's inputs seeded with the size
        ("poison", ["y64"]),
        ("execute", 64, "pack 64"),
        ("check", "y64", ("reference of", "a64"), "s=64"),  # checked before anything is timed
        ("bind", 64, "pack 64"),
        (
            "benchmark",
            "launcher 64",
            {
                "label": "GPU time s=64",
                "l2": "hot",
                "flops": flops,
                "budget_ms": 100,
                "params": {"impl": "GPU time of one call", "s": 64},
            },
        ),
        (
            "time_loop",
            "launcher 64",
            {
                "label": "eager loop s=64",
                "calls": 100,
                "reps": 20,
                "flops": flops,
                "params": {"impl": "eager loop, per call", "s": 64},
            },
        ),
        ("capture", "launcher 64", 100, "s=64"),
        (
            "time_replay",
            "g",
            {"label": "replay s=64", "reps": 20, "flops": flops, "params": {"impl": "graph replay, per call", "s": 64}},
        ),
    ]
    assert log[9] == ("build", 128, 128) and len(log) == 18
    assert capsys.readouterr().out.splitlines() == [
        "s=   64: GPU    2.00 µs, eager loop   12.00 µs, replay    3.00 µs",
        "s=  128: GPU    2.00 µs, eager loop   12.00 µs, replay    3.00 µs",
    ]


# --- the prose ----------------------------------------------------------------------------------------

SIZES = [64, 256, 4096]


def _rows(gpu_us, eager_us, replay_us):
    rows = []
    for s, g, e, r in zip(SIZES, gpu_us, eager_us, replay_us):
        for impl, us in (("GPU time of one call", g), ("eager loop, per call", e), ("graph replay, per call", r)):
            rows.append(Measurement(f"{impl} s={s}", [us / 1e3], "x", params={"impl": impl, "s": s}))
    return rows


def test_conclusions_on_two_levels_with_a_crossover():
    per_process = [_process(13.0, 30.0, 10.0), _process(13.2, 33.0, 10.0), _process(20.0, 40.0, 8.0)]
    levels = host_levels.levels([r["host_us"] for r in per_process])
    rows = _rows([2.0, 15.0, 900.0], [30.0, 31.0, 905.0], [10.0, 16.0, 900.0])
    sentences = cgr.conclusions(per_process, levels, rows, SIZES, 64, "+0.30 µs/call, 95% CI +0.10 to +0.50 µs")
    assert sentences[0] == (
        "One call of graph.execute keeps the host busy 13.1 µs (per call among back-to-back calls; "
        "compare_host, s=64; the median of the most common level of 3 fresh processes: 13.0–13.2 µs "
        "over 2 of them). The processes fell on 2 levels: 2 at 13.1 µs (13.0–13.2); 1 at 20.0 µs "
        "(20.0–20.0): a host cost is a property of the process as much as of the call."
    )
    assert sentences[1] == (
        "This package's bind() launcher over the raw graph.execute, paired per round in this process: "
        "+0.30 µs/call, 95% CI +0.10 to +0.50 µs."
    )
    assert sentences[2].startswith(
        "At s=64, in the 2 fresh processes of that level, a loop of 100 eager calls takes 31.5 µs per call "
        "for at most 2.0 µs of GPU work (the replay below bounds it; one call's raw events read 2.0 µs); "
        "replaying a graph of 100 calls takes 10.0 µs per call, 3.1× less (median of the per-process "
        "ratios; 3.0–3.3× over those 2 of 3 processes, 3.0–5.0× over all 3)."
    )
    assert "A graph holding one call takes 20.0 µs per replay, 1.6× less than an eager call" in sentences[2]
    assert sentences[3] == "At s=4096, eager and replay are 1.01× apart: the GPU work hides the host."
    assert sentences[4] == "The GPU time of one call first exceeds the host cost of graph.execute at s=256."


def test_conclusions_on_one_level_without_a_crossover():
    per_process = [_process(13.0, 30.0, 10.0, 10.0), _process(13.2, 33.0, 10.0, 10.0)]
    levels = host_levels.levels([r["host_us"] for r in per_process])
    rows = _rows([2.0, 5.0, 9.0], [30.0, 31.0, 30.0], [10.0, 10.0, 10.0])
    sentences = cgr.conclusions(per_process, levels, rows, SIZES, 64, "no overhead")
    assert sentences[0].endswith("over 2 of them). All processes fell on one level.")
    assert "one call's raw events read 2.0 µs" in sentences[2] and "3.1× less than an eager call" in sentences[2]
    assert sentences[4] == "The GPU time never exceeds the host cost of graph.execute in this sweep."


@pytest.mark.gpu
def test_the_sweep_and_the_epilogue_on_the_gpu():
    problem, inputs, fused, pack = cgr.matmul_epilogue(64, seed=1)
    assert "amax" in inputs and problem.alpha == 0.5 and (problem.m, problem.k, problem.n) == (64, 64, 64)
    fused.execute(pack)
    rows = cgr.sweep([64])
    assert [m.params["impl"] for m in rows] == [
        "GPU time of one call",
        "eager loop, per call",
        "graph replay, per call",
    ]
    assert all(m.median_ms > 0 for m in rows)
