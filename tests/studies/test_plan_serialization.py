"""plan_serialization: the serialization page's fresh-process runs, their table and prose, and the two ways
it spoils a plan cache entry.

Everything here runs without a GPU: the fresh processes are a stand-in for coldstart.run_fresh and its
interpreter pool, and the cache entries hold bytes that are never deserialized.
"""

from __future__ import annotations

import os
import statistics
from types import SimpleNamespace

import pytest

from cudnn_guide.graphs import plan_cache
from cudnn_guide.studies import coldstart, fresh_process, plan_serialization
from cudnn_guide.studies.plan_serialization import CASES, COLD_LOAD

# --- the warm process ---------------------------------------------------------------------------------


def test_warm_process_times_alternate_a_rebuild_and_a_reload():
    calls = []
    rebuild_s, reload_s = plan_serialization.warm_process_times(
        lambda: calls.append("rebuild") or "a graph", lambda: calls.append("reload"), reps=3
    )
    assert calls == ["rebuild", "reload"] * 3
    assert len(rebuild_s) == len(reload_s) == 3 and all(t >= 0 for t in rebuild_s + reload_s)
    assert plan_serialization.warm_process_times(lambda: None, lambda: None)[0].__len__() == 5  # the default


# --- the fresh processes ------------------------------------------------------------------------------


class FakePool:
    """Stands in for fresh_process.InterpreterPool: its size, preload, and when it was closed."""

    made: list[FakePool] = []

    def __init__(self, size, preload, at_once=None):
        self.size, self.preload, self.start_seconds, self.closed = size, preload, 2.25, False
        self.at_once = FakePool.at_once if at_once is None else at_once
        FakePool.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True


def _fake_runs(monkeypatch):
    runs = []

    def run_fresh_all(specs, cache_dir, pool):
        out = []
        for graph, mode, jit_cache in specs:
            assert os.path.isdir(cache_dir) and os.path.isdir(jit_cache) and not pool.closed
            assert os.path.dirname(cache_dir) == os.path.dirname(jit_cache)  # one temporary folder holds both
            runs.append((graph, mode, cache_dir, jit_cache))
            out.append({"graph": graph, "mode": mode, "jit_cache": jit_cache, "n": len(runs)})
        return out

    FakePool.made, FakePool.at_once = [], 1
    monkeypatch.setattr(coldstart, "run_fresh_all", run_fresh_all)
    monkeypatch.setattr(fresh_process, "InterpreterPool", FakePool)
    return runs


def test_fresh_first_results_run_each_case_with_its_jit_cache_in_one_pool(monkeypatch, capsys):
    runs = _fake_runs(monkeypatch)
    fresh = plan_serialization.fresh_first_results(("matmul", "conv"), reps=3)
    (pool,) = FakePool.made
    assert pool.size == 2 * 4 * 3 == len(runs) and pool.preload == coldstart.PRELOAD and pool.closed
    assert list(fresh) == [(g, c) for g in ("matmul", "conv") for c in CASES]
    assert capsys.readouterr().out == "24 interpreters, started together, were ready in 2.2 s\n"
    assert len({cache for _, _, cache, _ in runs}) == 1  # one plan cache for every run
    for graph in ("matmul", "conv"):
        cold, warm, loaded, cold_loaded = (fresh[(graph, c)] for c in CASES)
        assert [r["mode"] for r in cold + warm] == ["build"] * 6
        assert [r["mode"] for r in loaded + cold_loaded] == ["cache"] * 6
        warm_jit = cold[0]["jit_cache"]  # the first cold build's JIT cache is the warm one
        assert len({r["jit_cache"] for r in cold}) == 3
        assert {r["jit_cache"] for r in warm + loaded} == {warm_jit}
        fresh_jits = {r["jit_cache"] for r in cold_loaded}
        assert len(fresh_jits) == 3 and not fresh_jits & {r["jit_cache"] for r in cold}
        assert [r["n"] for r in cold + warm + loaded + cold_loaded] == sorted(
            r["n"] for r in cold + warm + loaded + cold_loaded
        )  # the cases run in the order of CASES
    assert not any(os.path.exists(p) for _, _, cache, jit in runs for p in (cache, jit))  # removed at the end


@pytest.mark.parametrize("reps", [2, 3, 4, 5])
def test_two_at_once_pair_each_run_with_its_neighbour_never_with_what_it_needs(monkeypatch, capsys, reps):
    runs = _fake_runs(monkeypatch)
    FakePool.at_once = 2
    fresh = plan_serialization.fresh_first_results(("matmul", "sdpa"), reps=reps)
    assert "; they ran two at a time, each on half of this process's cores" in capsys.readouterr().out
    pair = lambda n: (n - 1) // 2  # run_all pairs consecutive runs (n counts from 1 over all graphs)
    for graph in ("matmul", "sdpa"):
        order = [r["n"] for c in CASES for r in fresh[(graph, c)]]
        cold, warm, loads = order[:reps], order[reps : 2 * reps], order[2 * reps :]
        # a warm build reads the first cold build's JIT cache: never beside it, or before it
        assert all(pair(n) > pair(cold[0]) for n in warm)
        # a load reads a stored plan: never beside a build of its graph (so the plan it reads was stored)
        assert all(pair(n) not in {pair(b) for b in cold + warm} for n in loads)
    assert len(runs) == 2 * 4 * reps
    # with one run of each case, the warm build would sit beside the cold one: one at a time
    FakePool.made = []
    plan_serialization.fresh_first_results(("matmul",), reps=1)
    assert [p.at_once for p in FakePool.made] == [1]


def test_one_run_of_each_case_runs_one_at_a_time(monkeypatch):
    _fake_runs(monkeypatch)
    FakePool.at_once = 2
    plan_serialization.fresh_first_results(("matmul",), reps=1)
    assert [p.at_once for p in FakePool.made] == [1]  # else the warm build would sit beside the cold one


def test_fresh_first_results_default_to_every_graph_three_times(monkeypatch, capsys):
    runs = _fake_runs(monkeypatch)
    fresh = plan_serialization.fresh_first_results()
    assert {g for g, _ in fresh} == set(coldstart.GRAPHS) and len(runs) == len(coldstart.GRAPHS) * 4 * 3
    assert "36 interpreters" in capsys.readouterr().out


# --- the table ----------------------------------------------------------------------------------------


def _run(first_ms, context_ms=300.0, plan_ms=None, rel_error=1e-3):
    return {
        "first_result_s": first_ms / 1e3,
        "context_s": context_ms / 1e3,
        "plan_s": (first_ms / 2 if plan_ms is None else plan_ms) / 1e3,
        "rel_error": rel_error,
    }


def _fresh(graphs=("matmul", "conv", "sdpa"), ms=None):
    ms = ms or {
        "cold": [100, 120, 110],
        "warm JIT": [40, 44, 42],
        "plan from disk": [10, 11, 12],
        COLD_LOAD: [60, 62, 66],
    }
    return {(g, c): [_run(t) for t in ms[c]] for g in graphs for c in CASES}


def test_first_result_rows_give_each_graph_and_case_its_medians_and_range():
    fresh = _fresh(("conv",))
    fresh[("conv", "cold")][1]["rel_error"] = 4e-3
    rows = plan_serialization.first_result_rows(fresh, ("conv",))
    assert [(r["graph"], r["case"]) for r in rows] == [("conv", c) for c in CASES]
    cold = rows[0]
    assert list(cold) == [
        "graph",
        "case",
        "plan (ms)",
        "first result (ms)",
        "min–max (ms)",
        "context + handle (ms)",
        "max rel. error",
    ]
    assert cold["first result (ms)"] == pytest.approx(110) and cold["plan (ms)"] == pytest.approx(55)
    assert cold["min–max (ms)"] == "100.0–120.0" and cold["context + handle (ms)"] == pytest.approx(300)
    assert cold["max rel. error"] == "4.0e-03"


def test_a_run_beyond_the_bf16_tolerance_stops_the_table():
    fresh = _fresh(("conv",))
    fresh[("conv", "warm JIT")][2]["rel_error"] = 0.5
    with pytest.raises(AssertionError, match="conv warm JIT: 0.5"):
        plan_serialization.first_result_rows(fresh, ("conv",))
    fresh[("conv", "warm JIT")][0]["rel_error"] = float("nan")  # the worst, when it comes first
    with pytest.raises(AssertionError, match="conv warm JIT: nan"):
        plan_serialization.first_result_rows(fresh, ("conv",))
    fresh[("conv", "warm JIT")][0]["rel_error"] = 1e-3
    assert plan_serialization.first_result_rows(fresh, ("conv",), tol=1.0)[1]["max rel. error"] == "5.0e-01"


# --- spoiling a cache entry ---------------------------------------------------------------------------


def test_a_flipped_byte_and_another_backend_are_both_rejected_before_cudnn_sees_the_bytes(tmp_path):
    cache = plan_cache.PlanCache(tmp_path / "plans")
    key = plan_cache.PlanKey("conv|N32", "NVIDIA H200", "9.0", 91900, "1.32.0")
    blob = bytes(range(256)) * 2
    cache.store(key, blob, {"x": 1, "y": 4})
    assert cache.read(key) == (blob, {"x": 1, "y": 4}) and cache.last_event == "hit"

    before = cache.path(key).read_bytes()
    plan_serialization.corrupt_one_byte(cache.path(key))  # the page's byte: the 100th from the end
    raw = cache.path(key).read_bytes()
    assert (
        raw[-100] == before[-100] ^ 0xFF == blob[-100] ^ 0xFF and raw[:-100] + raw[-99:] == before[:-100] + before[-99:]
    )
    assert cache.read(key) is None and cache.last_event == "rejected: checksum mismatch (corrupt or truncated)"

    cache.store(key, blob, {"x": 1, "y": 4})
    plan_serialization.as_if_from_backend(cache.path(key), 90100)
    head, _, body = cache.path(key).read_bytes().partition(b"\n")
    assert b'"cudnn_backend": 90100' in head and body == blob
    assert cache.read(key) is None and cache.last_event == "rejected: saved for another GPU, cuDNN or graph"


def test_the_pages_lookups_hit_then_rebuild_after_each_spoiling(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_cache, "load_plan", lambda blob, uids, handle=None: ("loaded", blob))
    built = SimpleNamespace(graph=SimpleNamespace(serialize=lambda as_bytes: b"plan bytes " * 20), uids={"y": 3})
    cache = plan_cache.PlanCache(tmp_path / "plans")
    key = plan_cache.PlanKey("conv|N32", "NVIDIA H200", "9.0", 91900, "1.32.0")
    seen = []

    def lookup():
        _, source = cache.get_or_build(key, lambda: built)
        seen.append((cache.last_event, source))

    lookup()
    lookup()
    plan_serialization.corrupt_one_byte(cache.path(key), -100)
    lookup()
    plan_serialization.as_if_from_backend(cache.path(key), 90100)
    lookup()
    lookup()
    assert seen == [
        ("miss", "built"),
        ("hit", "cache"),
        ("rejected: checksum mismatch (corrupt or truncated)", "built"),
        ("rejected: saved for another GPU, cuDNN or graph", "built"),
        ("hit", "cache"),
    ]


# --- the prose ----------------------------------------------------------------------------------------


def test_range_verdict_and_shown():
    # a gain or a loss holds for this recording's processes: the record's widened interval may span 1
    assert plan_serialization.range_verdict(1.01, 2) == "a gain in every pairing of processes in this run"
    assert plan_serialization.range_verdict(0.5, 0.99) == "a loss in every pairing of processes in this run"
    assert plan_serialization.range_verdict(1.0, 1.2) == "a tie: the range spans 1"  # 1 itself is a tie
    assert plan_serialization.range_verdict(0.8, 1.0) == "a tie: the range spans 1"
    assert (
        plan_serialization.range_verdict(2, 3, above="slower cold")
        == "slower cold in every pairing of processes in this run"
    )
    assert (
        plan_serialization.shown(0.5, 0.25, 0.75)
        == "0.50× (0.25–0.75×, a loss in every pairing of processes in this run)"
    )


def test_with_context_adds_the_context_to_each_run():
    fresh = {
        ("conv", "cold"): [_run(100, 100), _run(200, 100), _run(300, 100)],
        ("conv", "plan from disk"): [_run(10, 90), _run(50, 50), _run(20, 180)],
    }
    ratio, low, high = plan_serialization.with_context(fresh, "conv", "cold", "plan from disk")
    assert ratio == pytest.approx(300 / 100) and low == pytest.approx(200 / 200) and high == pytest.approx(400 / 100)


def _conclusions(fresh, rebuild_ms=(50.0,) * 5, reload_ms=(5.0,) * 5):
    speedups = coldstart.first_result_speedups(fresh)
    cold = coldstart.first_result_speedups(fresh, cached=COLD_LOAD)
    return plan_serialization.conclusions(
        fresh, speedups, cold, [t / 1e3 for t in rebuild_ms], [t / 1e3 for t in reload_ms]
    )


def test_conclusions_describe_each_graph_then_the_warm_process():
    fresh = _fresh()
    sentences = _conclusions(fresh)
    assert len(sentences) == 2 * 3 + 2  # no 10× gain, no graph losing to a warm-JIT build
    conv = sentences[2]
    assert conv.startswith("* conv: first result 110.0 ms from a build with a cold JIT cache, 42.0 ms")
    assert "62.0 ms from the plan on disk with a cold JIT cache, 11.0 ms with a warm one" in conv
    assert "each after 300 ms of context and handle creation" in conv
    like = sentences[3]
    assert like.startswith("* conv, the saved plan's speed-up like for like, without context and handle: ")
    assert (
        f"{110 / 62:.2f}× ({100 / 66:.2f}–{120 / 60:.2f}×, a gain in every pairing of processes in this run) "
        "on a fresh machine" in like
    )
    assert (
        f"{42 / 11:.2f}× ({40 / 12:.2f}–{44 / 10:.2f}×, a gain in every pairing of processes in this run) on a restart"
        in like
    )
    assert f"cold build: {110 / 11:.2f}×" in like
    assert sentences[-2].startswith(
        "* Inside one warm process the conv graph rebuilds in 50.0 ms and reloads in 5.0 ms (10.00×)"
    )
    # the fresh ratio is the restart's like-for-like speed-up: printed as it is above (3.82×, not 3.8×)
    assert sentences[-2].endswith(f"is {42 / 11:.2f}×: in-process timing overstates the gain for this graph.")
    assert f"{42 / 11:.2f}× (" in like
    assert sentences[-1] == (
        "* A new interpreter also pays Python's and torch's imports (seconds; see the controls on the measurement "
        "studies page), which no plan cache removes."
    )
    assert _conclusions(fresh, reload_ms=(40.0,) * 5)[-2].endswith("understates the gain for this graph.")


def test_conclusions_name_ten_fold_gains_and_graphs_a_saved_plan_does_not_beat():
    ms = {
        "cold": [900, 1000, 1100],
        "warm JIT": [400, 420, 440],
        "plan from disk": [20, 21, 22],
        COLD_LOAD: [60, 62, 66],
    }
    fresh = _fresh(ms=ms)
    slow = {"cold": [100, 120, 110], "warm JIT": [40, 44, 42], "plan from disk": [30, 50, 60], COLD_LOAD: [60, 62, 66]}
    for c in CASES:
        fresh[("conv", c)] = [_run(t, plan_ms=t - 5) for t in slow[c]]
    sentences = _conclusions(fresh, rebuild_ms=(2.0,) * 5, reload_ms=(1.0,) * 5)
    (gains,) = [s for s in sentences if "dominated" in s]
    assert gains == (
        "* For the matmul and sdpa graphs, even with a warm JIT cache the build is dominated by work the saved "
        "plan skips, most likely the heuristics and building runtime-fused kernels (this page does not time them "
        "apart)."
    )
    (conv,) = [s for s in sentences if s.startswith("* For conv, the saved plan on a restart is")]
    assert (
        "it does not beat a build. Its plan step takes 25–55 ms to load in a fresh process and 35–39 ms to build"
        in conv
    )
    once = (1 - 1 / statistics.median([25, 45, 55]), 1 - 2 / statistics.median([35, 39, 37]))
    assert f"{once[0]:.0%} of a fresh load's median plan step and {once[1]:.0%} of a fresh build's" in conv
    assert f"The cold JIT cache's own effect on its build is {110 / 42:.2f}×" in conv
    assert "slower cold in every pairing of processes in this run" in conv
    # the shares a new process pays once are said only when both are above a half
    no_share = _conclusions(fresh, rebuild_ms=(30.0,) * 5, reload_ms=(1.0,) * 5)
    assert not any("pays once" in s for s in no_share)


def test_a_warm_jit_cache_that_left_a_build_or_a_load_slower_is_said_to_have_done_so():
    # warm JIT faster than cold for both builds and loads: nothing added
    fresh = _fresh()
    (conv,) = [s for s in _conclusions(fresh) if s.startswith("* conv: ")]
    assert "slower" not in conv and "with a warm one; " in conv
    # the recording's conv: the warm-JIT build slower than the cold one, its range spanning 1
    ms = {"cold": [86.7, 85.9, 124.6], "warm JIT": [120.8, 129.2, 125.8], "plan from disk": [78, 81.1, 83.2]}
    ms[COLD_LOAD] = [112.8, 107.8, 96.4]
    fresh = _fresh(ms=ms)
    (conv,) = [s for s in _conclusions(fresh) if s.startswith("* conv: ")]
    assert conv.startswith(
        "* conv: first result 86.7 ms from a build with a cold JIT cache, 125.8 ms with a warm one, slower, not "
        f"faster, at the median ({125.8 / 86.7:.2f}× the cold time; over the runs {120.8 / 124.6:.2f}–"
        f"{129.2 / 85.9:.2f}×, a tie: the range spans 1); 107.8 ms from the plan on disk with a cold JIT cache, "
        "81.1 ms with a warm one; each after"
    )
    # a warm-JIT load slower than a cold-JIT one in every pairing
    ms.update({"plan from disk": [24, 25, 25], COLD_LOAD: [22.8, 21.8, 20.8]})
    (conv,) = [s for s in _conclusions(_fresh(ms=ms)) if s.startswith("* conv: ")]
    assert (
        f"25.0 ms with a warm one, slower, not faster, at the median ({25 / 21.8:.2f}× the cold time; over the runs "
        f"{24 / 22.8:.2f}–{25 / 20.8:.2f}×, slower warm in every pairing of processes in this run); each after" in conv
    )


def test_a_share_a_new_process_pays_once_never_rounds_up_to_100_percent():
    fresh = _fresh()
    slow = {"cold": [100, 120, 110], "warm JIT": [40, 44, 42], "plan from disk": [30, 50, 60], COLD_LOAD: [60, 62, 66]}
    for c in CASES:
        fresh[("conv", c)] = [_run(t, plan_ms=t - 5) for t in slow[c]]
    # 1 - 0.225 / 45 is 99.5%, which a whole percent would print as 100%
    (near,) = [s for s in _conclusions(fresh, rebuild_ms=(2.0,) * 5, reload_ms=(0.225,) * 5) if "pays once" in s]
    assert "99.5% of a fresh load's median plan step and 95% of a fresh build's" in near and "100%" not in near


def test_one_ten_fold_gain_names_one_graph():
    ms = {"cold": [900, 1000, 1100], "warm JIT": [400, 420, 440], "plan from disk": [20, 21, 22], COLD_LOAD: [60] * 3}
    fresh = _fresh()
    for c in CASES:
        fresh[("sdpa", c)] = [_run(t) for t in ms[c]]
    (gains,) = [s for s in _conclusions(fresh) if "dominated" in s]
    assert gains.startswith("* For the sdpa graph, even with a warm JIT cache the build is dominated")


@pytest.mark.gpu
def test_fresh_first_results_load_a_plan_each_process_checks():
    fresh = plan_serialization.fresh_first_results(("matmul",), reps=1)
    rows = plan_serialization.first_result_rows(fresh, ("matmul",))
    assert [r["case"] for r in rows] == list(CASES)
    assert all(r["first_result_s"] > 0 for runs in fresh.values() for r in runs)
