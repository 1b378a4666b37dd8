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
    resolved = "+2.00 µs/call, in-run 95% interval +1.50 to +3.00 µs"
    assert cgr.overhead_text(adds["checks pack"]) == resolved
    assert cgr.overhead_text(adds["bind"]) == (
        "no overhead this measurement can resolve:\n    +0.25 µs/call, in-run 95% interval -0.12 to +0.50 µs"
    )
    assert cgr.overhead_text({"value": -0.5, "low": -1.0, "high": 0.0}).startswith("no overhead")  # 0 at an end


def test_the_unresolved_overhead_prints_in_short_lines_and_reads_as_one_sentence():
    text = cgr.overhead_text({"value": 0.13, "low": -2.39, "high": 1.2})
    printed = f"launcher over raw graph.execute: {text}"  # as the page prints it
    assert len(printed.splitlines()) == 2 and all(len(line) <= 88 for line in printed.splitlines())
    per_process = [_process(13.0, 30.0, 10.0), _process(13.2, 33.0, 10.0)]
    levels = host_levels.levels([r["host_us"] for r in per_process])
    rows = _rows([2.0, 5.0, 9.0], [30.0, 31.0, 30.0], [10.0, 10.0, 10.0])
    said = cgr.conclusions(per_process, levels, rows, SIZES, 64, text)[1]
    assert said.endswith(
        "in this process: no overhead this measurement can resolve: "
        "+0.13 µs/call, in-run 95% interval -2.39 to +1.20 µs."
    )


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


def _sweep_stand_ins(monkeypatch, log, gpu_warnings=lambda s: []):
    def build(s, seed=0):
        log.append(("build", s, seed))
        ins = {k: _Tensor(f"{k}{s}") for k in ("a", "b", "bias", "y", "amax")}
        return _Problem(s), ins, _Graph(s, log), f"pack {s}"

    def timer(name, ms):
        def time(fn, **kw):
            log.append((name, fn, kw))
            notes = gpu_warnings(kw["params"]["s"]) if name == "benchmark" else []
            return Measurement(kw["label"], [ms], "x", kw.get("flops"), params=kw.get("params", {}), warnings=notes)

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


RAW = (
    "too short to time per call: the launch cost (3.37 µs) is 68% of the event time (4.99 µs), so subtracting "
    "it could give an impossible (non-positive) time; the raw event times are reported, an upper bound on "
    "the kernel time; time it with cuda_graph=True"
)


def test_raw_events_reads_the_warning_and_the_launch_cost():
    assert cgr.raw_events(Measurement("t", [0.005], "hot-L2 events", warnings=[RAW]))
    assert not cgr.raw_events(Measurement("t", [0.005], "hot-L2 events", warnings=["large spread"]))
    subtracted = Measurement("t", [0.005], "hot-L2 events − launch cost", launch_cost_ms=0.003)
    assert not cgr.raw_events(subtracted)


def test_the_sweep_names_the_gpu_time_an_upper_bound_where_it_holds_raw_events(monkeypatch, capsys):
    log = []
    _sweep_stand_ins(monkeypatch, log, lambda s: [RAW] if s <= 128 else [])
    rows = cgr.sweep([64, 128, 256])
    name = "GPU time of one call (s ≤ 128: raw events, an upper bound)"
    assert [m.params["impl"] for m in rows[::3]] == [name, name, name]  # one row, one line
    assert rows[1].params["impl"] == "eager loop, per call" and [m.label for m in rows[::3]] == [
        "GPU time s=64",
        "GPU time s=128",
        "GPU time s=256",
    ]
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "s=   64: GPU   ≤2.00 µs, eager loop   12.00 µs, replay    3.00 µs",
        "s=  128: GPU   ≤2.00 µs, eager loop   12.00 µs, replay    3.00 µs",
        "s=  256: GPU    2.00 µs, eager loop   12.00 µs, replay    3.00 µs",
        "≤: the raw event time, launch cost not subtracted: an upper bound on the GPU time",
    ]
    assert all(len(line) <= 88 for line in out)
    note = [RAW]
    gpu = [Measurement("t", [0.005], "x", params={"s": s}, warnings=note if s == 256 else []) for s in (64, 256)]
    assert cgr.gpu_time_name(gpu) == "GPU time of one call (s = 256: raw events, an upper bound)"
    assert cgr.gpu_time_name(gpu[:1]) == "GPU time of one call"


def test_the_sweep_checks_each_size_before_timing_it(monkeypatch, capsys):
    log = []
    _sweep_stand_ins(monkeypatch, log)

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


def _rows(gpu_us, eager_us, replay_us, raw=(64,)):
    rows = []
    name = "GPU time of one call (s = 64: raw events, an upper bound)" if raw else "GPU time of one call"
    for s, g, e, r in zip(SIZES, gpu_us, eager_us, replay_us):
        for impl, us in ((name, g), ("eager loop, per call", e), ("graph replay, per call", r)):
            notes = [RAW] if impl == name and s in raw else []
            rows.append(Measurement(f"{impl} s={s}", [us / 1e3], "x", params={"impl": impl, "s": s}, warnings=notes))
    return rows


def test_conclusions_on_two_levels_with_a_crossover():
    per_process = [_process(13.0, 30.0, 10.0), _process(13.2, 33.0, 10.0), _process(20.0, 40.0, 8.0)]
    levels = host_levels.levels([r["host_us"] for r in per_process])
    rows = _rows([2.0, 15.0, 900.0], [30.0, 31.0, 905.0], [10.0, 16.0, 900.0])
    sentences = cgr.conclusions(
        per_process, levels, rows, SIZES, 64, "+0.30 µs/call, in-run 95% interval +0.10 to +0.50 µs"
    )
    assert sentences[0] == (
        "One call of graph.execute keeps the host busy 13.1 µs (per call among back-to-back calls; "
        "compare_host, s=64; the median of the most common level of 3 fresh processes: 13.0–13.2 µs "
        "over 2 of them). The processes fell on 2 levels: 2 at 13.1 µs (13.0–13.2); 1 at 20.0 µs "
        "(20.0–20.0): a host cost is a property of the process as much as of the call."
    )
    assert sentences[1] == (
        "This package's bind() launcher over the raw graph.execute, paired per round in this process: "
        "+0.30 µs/call, in-run 95% interval +0.10 to +0.50 µs."
    )
    assert sentences[2].startswith(
        "At s=64, in the 2 fresh processes of that level, a loop of 100 eager calls takes 31.5 µs per call "
        "for at most 2.0 µs of GPU work (the replay below bounds it; one call's raw events read 2.0 µs); "
        "replaying a graph of 100 calls takes 10.0 µs per call, 3.1× less (median of the per-process "
        "ratios; 3.0–3.3× over those 2 of 3 processes, 3.0–5.0× over all 3)."
    )
    assert "A graph holding one call takes 20.0 µs per replay, 1.6× less than an eager call" in sentences[2]
    assert sentences[3] == (  # 905 / 900: 1.006, inside the ±1% tie band
        "At s=4096, the replay takes about the same time as the eager loop (eager over replay 1.01×, 95% interval "
        "1.01–1.01×, which reaches into 1 ± 1%; 905.0 µs per call eager, 900.0 replayed): the GPU work hides the host."
    )
    assert sentences[4] == "The GPU time of one call first exceeds the host cost of graph.execute at s=256."


def test_conclusions_on_one_level_without_a_crossover():
    per_process = [_process(13.0, 30.0, 10.0, 10.0), _process(13.2, 33.0, 10.0, 10.0)]
    levels = host_levels.levels([r["host_us"] for r in per_process])
    rows = _rows([2.0, 5.0, 9.0], [30.0, 31.0, 30.0], [10.0, 10.0, 10.0])
    sentences = cgr.conclusions(per_process, levels, rows, SIZES, 64, "no overhead")
    assert sentences[0].endswith("over 2 of them). All processes fell on one level.")
    assert "one call's raw events read 2.0 µs" in sentences[2] and "3.1× less than an eager call" in sentences[2]
    assert sentences[4] == "The GPU time never exceeds the host cost of graph.execute in this sweep."


def test_conclusions_say_which_of_eager_and_replay_is_slower_and_how_the_gpu_time_was_read():
    per_process = [_process(13.0, 30.0, 10.0), _process(13.2, 33.0, 10.0)]
    levels = host_levels.levels([r["host_us"] for r in per_process])
    slower_replay = _rows([2.0, 5.0, 230.0], [30.0, 31.0, 246.0], [10.0, 10.0, 254.4])
    sentences = cgr.conclusions(per_process, levels, slower_replay, SIZES, 64, "no overhead")
    assert sentences[3] == (
        "At s=4096, the replay is 1.03× slower than the eager loop (95% interval 1.03–1.03×, beyond 1 ± 1%; "
        "246.0 µs per call eager, 254.4 replayed): the GPU work hides the host."
    )
    slower_eager = _rows([2.0, 5.0, 230.0], [30.0, 31.0, 260.0], [10.0, 10.0, 250.0])
    assert cgr.conclusions(per_process, levels, slower_eager, SIZES, 64, "no overhead")[3] == (
        "At s=4096, the eager loop is 1.04× slower than the replay (95% interval 1.04–1.04×, beyond 1 ± 1%; "
        "260.0 µs per call eager, 250.0 replayed): the GPU work does not hide all of the host."
    )
    tie = _rows([2.0, 5.0, 230.0], [30.0, 31.0, 250.0], [10.0, 10.0, 250.5])
    assert cgr.conclusions(per_process, levels, tie, SIZES, 64, "no overhead")[3].startswith(
        "At s=4096, the replay takes about the same time as the eager loop (eager over replay 1.00×"
    )
    subtracted = _rows([2.0, 5.0, 230.0], [30.0, 31.0, 246.0], [10.0, 10.0, 254.4], raw=())
    said = cgr.conclusions(per_process, levels, subtracted, SIZES, 64, "no overhead")[2]
    assert "one call's GPU time, launch cost subtracted, reads 2.0 µs" in said and "raw events" not in said


def test_a_difference_within_the_spread_of_the_medians_reads_about_the_same():
    # the recording's s=4096: eager 250.0 µs, tightly; replay 252.8 µs with a spread of about ±5%
    per_process = [_process(13.0, 30.0, 10.0), _process(13.2, 33.0, 10.0)]
    levels = host_levels.levels([r["host_us"] for r in per_process])
    rows = _rows([2.0, 5.0, 259.5], [30.0, 31.0, 250.0], [10.0, 10.0, 252.8])
    eager = [249.1, 249.5, 249.8, 250.0, 250.0, 250.2, 250.5, 251.0, 252.1]
    replay = [240.0, 249.5, 250.0, 251.0, 252.8, 260.0, 265.0, 274.7, 283.0]
    for m, us in ((rows[-2], eager), (rows[-1], replay)):
        m.samples_ms = [t / 1e3 for t in us]
    low, high = rows[-2].median_ci_ms[0] / rows[-1].median_ci_ms[1], rows[-2].median_ci_ms[1] / rows[-1].median_ci_ms[0]
    assert low < 0.99 < high  # a tie against ±1%, though the medians differ by 1.1%
    said = cgr.conclusions(per_process, levels, rows, SIZES, 64, "no overhead")[3]
    assert said == (
        f"At s=4096, the replay takes about the same time as the eager loop (eager over replay {250 / 252.8:.2f}×, "
        f"95% interval {low:.2f}–{high:.2f}×, which reaches into 1 ± 1%; 250.0 µs per call eager, 252.8 replayed): "
        "the GPU work hides the host."
    )
    assert "slower" not in said


@pytest.mark.gpu
def test_the_sweep_and_the_epilogue_on_the_gpu():
    problem, inputs, fused, pack = cgr.matmul_epilogue(64, seed=1)
    assert "amax" in inputs and problem.alpha == 0.5 and (problem.m, problem.k, problem.n) == (64, 64, 64)
    fused.execute(pack)
    rows = cgr.sweep([64])
    assert rows[0].params["impl"] == cgr.gpu_time_name(rows[:1])  # an upper bound at s=64 where it says so
    assert [m.params["impl"] for m in rows[1:]] == ["eager loop, per call", "graph replay, per call"]
    assert all(m.median_ms > 0 for m in rows)
