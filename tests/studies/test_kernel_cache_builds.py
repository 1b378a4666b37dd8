"""kernel_cache_builds: the kernel-cache page's four runs (with stand-ins for the interpreters), their printed lines,
the speed-up table, the later builds, the findings and the sentences, on the CPU, from fixed build times."""

from __future__ import annotations

import statistics

import pytest

from cudnn_guide.measure.verdicts import MIN_TIE_BAND
from cudnn_guide.studies import dynamic_shapes, fresh_process
from cudnn_guide.studies import kernel_cache_builds as study

BATCHES = [1, 2, 4, 8]

# build seconds of each batch, in the order each run built them: the first build of a process is slow;
# with the cache, 2 and 8 hit (a tenth of the time or less), 4 misses
BUILD_S = {
    "cache, ascending": {1: 1.0, 2: 0.004, 4: 0.05, 8: 0.003},
    "no cache, ascending": {1: 1.1, 2: 0.05, 4: 0.04, 8: 0.06},
    "cache, descending": {8: 1.2, 4: 0.045, 2: 0.005, 1: 0.004},
    "no cache, descending": {8: 1.3, 4: 0.05, 2: 0.1, 1: 0.05},
}
EXEC_MS = {
    "cache, ascending": {1: 0.0102, 2: 0.0204, 4: 0.0408, 8: 0.0816},
    "no cache, ascending": {1: 0.0100, 2: 0.0200, 4: 0.0400, 8: 0.0800},
    "cache, descending": {8: 0.08, 4: 0.04, 2: 0.02, 1: 0.01},
    "no cache, descending": {8: 0.0801, 4: 0.0401, 2: 0.0201, 1: 0.0101},
}


def _runs():
    return {
        name: [
            {"batch": b, "build_s": s, "rel_error": 1e-3 * b, "exec_median_ms": EXEC_MS[name][b]}
            for b, s in builds.items()
        ]
        for name, builds in BUILD_S.items()
    }


def test_the_four_runs_are_with_and_without_the_cache_in_both_orders():
    assert study.run_plan(BATCHES) == [
        ("cache, ascending", [1, 2, 4, 8], True),
        ("no cache, ascending", [1, 2, 4, 8], False),
        ("cache, descending", [8, 4, 2, 1], True),
        ("no cache, descending", [8, 4, 2, 1], False),
    ]


@pytest.mark.parametrize("at_once", [1, 2])
def test_each_run_gets_its_own_interpreter_of_one_pool_without_the_jit_disk_cache(monkeypatch, capsys, at_once):
    made, ran = [], []

    class Pool:
        def __init__(self, size, *, preload, env):
            made.append((size, preload, env))
            self.at_once = at_once

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            made.append("closed")

    def run_fresh_sequences(specs, pool):
        assert isinstance(pool, Pool) and made[-1] != "closed"
        ran.extend((label, order, kernel_cache) for order, kernel_cache, label in specs)
        return [[{"batch": b} for b in order] for order, _, _ in specs]

    monkeypatch.setattr(fresh_process, "InterpreterPool", Pool)
    monkeypatch.setattr(dynamic_shapes, "run_fresh_sequences", run_fresh_sequences)
    runs = study.fresh_runs(BATCHES)
    assert made == [(4, dynamic_shapes.PRELOAD, {"CUDA_CACHE_DISABLE": "1"}), "closed"]
    assert ran == [(name, order, cache) for name, order, cache in study.run_plan(BATCHES)]
    assert list(runs) == [name for name, _, _ in ran]
    assert [r["batch"] for r in runs["cache, descending"]] == [8, 4, 2, 1]
    said = capsys.readouterr().out
    assert ("each order's two runs (with the cache, without) ran at once" in said) == (at_once == 2)


def test_the_printed_lines_give_each_runs_builds_and_the_checks():
    lines = study.build_lines(_runs())
    assert lines[0] == "cache, ascending       builds (ms): 1:1000 2:4 4:50 8:3"
    assert lines[3] == "no cache, descending   builds (ms): 8:1300 4:50 2:100 1:50"
    assert lines[4] == "all 16 graphs passed their check (largest rel. error 8.0e-03)"


def test_the_speedup_table_marks_first_builds_hits_and_misses():
    rows = study.speedup_rows(_runs(), BATCHES, hit=10)
    assert [r["batch"] for r in rows] == BATCHES
    assert list(rows[0]) == [
        "batch",
        "ascending: no cache (ms)",
        "ascending: cache (ms)",
        "ascending: speed-up",
        "descending: no cache (ms)",
        "descending: cache (ms)",
        "descending: speed-up",
    ]
    ascending = ["1.10× (first)", "12.50× (hit)", "0.80× (miss)", "20.00× (hit)"]
    descending = ["12.50× (hit)", "20.00× (hit)", "1.11× (miss)", "1.08× (first)"]
    assert [r["ascending: speed-up"] for r in rows] == ascending
    assert [r["descending: speed-up"] for r in rows] == descending
    assert rows[1]["ascending: no cache (ms)"] == pytest.approx(50) and rows[1]["ascending: cache (ms)"] == 4


def test_later_builds_pair_each_cached_build_with_the_batch_before_it():
    runs = _runs()
    asc = study.later_builds(runs, "ascending")
    assert [(p, b) for p, b, _, _ in asc] == [(1, 2), (2, 4), (4, 8)]
    assert asc[0][2:] == pytest.approx((12.5, 4.0))
    # descending: batch 8 came first without the cache too, so every later build has its control
    assert [(p, b) for p, b, _, _ in study.later_builds(runs, "descending")] == [(8, 4), (4, 2), (2, 1)]
    runs["no cache, descending"] = runs["no cache, descending"][::-1]  # a control that built batch 1 first
    assert [(p, b) for p, b, _, _ in study.later_builds(runs, "descending")] == [(8, 4), (4, 2)]


def test_two_changes_weigh_the_same_within_a_factor_of_two():
    assert study.SAME == 2
    assert study.weigh(5.0, 2.0) == "more than"
    assert study.weigh(1.0, 2.5) == "less than"
    assert study.weigh(2.0, 4.0) == study.weigh(4.0, 2.0) == "about as much as"


def test_the_findings_split_hits_from_misses_and_find_the_largest_order_effect():
    found = study.findings(_runs(), BATCHES, hit=10)
    assert [b for _, b, _, _ in found.hits["ascending"]] == [2, 8]
    assert [b for _, b, _, _ in found.misses["ascending"]] == [4]
    assert [b for _, b, _, _ in found.hits["descending"]] == [2, 1]
    assert len(found.later["descending"]) == 3
    # batches 1 and 8 come first in one order: only 2 and 4 are compared
    assert found.order_effect == pytest.approx({2: 2.0, 4: 1.25})
    assert (found.worst, found.order_ratio) == (2, pytest.approx(2.0))
    assert found.exec_ratios == pytest.approx([1.02] * 4)
    assert found.exec_ratio == statistics.median(found.exec_ratios)
    assert found.exec_band == pytest.approx(max(MIN_TIE_BAND, 0.01))  # 0.0101 / 0.0100
    assert found.exec_verdict == "faster"  # 1.02 above 1 + the band: static is faster


def test_the_conclusions_word_each_order_the_separation_the_order_effect_and_execution():
    runs = _runs()
    found = study.findings(runs, BATCHES, hit=10)
    out = study.conclusions(runs, found)
    assert out[0] == (
        "* ascending: of 3 later builds, 2 hit (1→2, 4→8; batch built before → batch), the cache's speed-up "
        "12.50× to 20.00× (median 16.25×; 3–4 ms to build); 1 missed (2→4; batch built before → batch), the "
        "cache's speed-up 0.80× to 0.80× (below 1: slower with the cache; median 0.80×; 50–50 ms to build). "
        "First builds take 1000 ms with the cache and 1100 ms without."
    )
    assert out[1].startswith("* descending: of 3 later builds, 2 hit (4→2, 2→1;")
    assert out[2] == (
        "* No later build's speed-up fell between 1.11× (the largest miss) and 12.50× (the smallest hit): the "
        "groups are 11× apart, so this page's 10× threshold, or any other between them, splits the builds the "
        "same way."
    )
    assert out[3] == (
        "* Without the cache, build order changes batch 2's build time 2.0× (slower in the descending run than "
        "in the ascending one; a later build in both, the largest such change over the 2 batches that come first "
        "in neither order): less than the speed-up of a hit (median 16.2×), and about as much as the largest "
        "change a miss made, either way (1.2×) (about as much as: within a factor of 2 either way; less than: "
        "smaller by over a factor of 2)."
    )
    assert out[4].startswith("* Execution with dynamic-shape kernels takes 1.02× the time of the static ones ")
    assert out[4].endswith(
        "slower at every batch size: the whole range lies above 1 ± 1.0%, the most the same static graphs "
        "moved between the two no-cache runs (same code, two processes)."
    )
    assert len(out) == 5


def test_the_order_sentence_defines_only_the_comparisons_it_makes():
    runs = _runs()
    # batch 2 without the cache, descending: 0.5 s, 10× its ascending build, more than either change
    runs["no cache, descending"][2]["build_s"] = 0.5
    found = study.findings(runs, BATCHES, hit=10)
    assert found.worst == 2 and found.order_ratio == pytest.approx(10.0)
    said = study.conclusions(runs, found)[3]
    assert said.endswith(
        ": about as much as the speed-up of a hit (median 16.2×), and more than the largest change a miss made, "
        "either way (1.2×) (about as much as: within a factor of 2 either way; more than: larger by over a factor "
        "of 2)."
    )
    assert "less than" not in said and "more or less" not in said
    # with every later build a hit, one comparison and one definition
    (said,) = [s for s in study.conclusions(runs, study.findings(runs, BATCHES, hit=0.5)) if "build order" in s]
    assert said.endswith(
        "neither order): about as much as the speed-up of a hit (median 12.5×) (about as much as: within a factor "
        "of 2 either way)."
    )


def test_without_misses_the_separation_and_the_miss_comparison_are_left_out():
    runs = _runs()
    found = study.findings(runs, BATCHES, hit=0.5)  # every later build a hit
    out = study.conclusions(runs, found)
    assert not any(s.startswith("* No later build") for s in out) and len(out) == 4
    assert "missed" not in out[0] and "the largest change a miss made" not in out[2]
