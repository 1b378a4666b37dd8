"""Progress while a recording runs: each page's start and end, the time left, a closing summary.

The estimate and the lines are checked with a clock of the test's own; the recorder's lines,
its summary and its Ctrl-C handling with a fake page runner in place of the fresh interpreters
(``recording.interpreter_pool``), so no GPU is needed.
"""

from __future__ import annotations

import doctest
import hashlib
import json
import re
import shutil
import signal
import threading
import types

import pytest
from gallery_build import progress, recording

PAGE_A, PAGE_B = "plot_02_conv_bias_relu.py", "plot_04_matmul_epilogue.py"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_first_estimate_is_the_last_recordings_times_along_each_gpus_pages():
    previous = {"a.py": 10.0, "b.py": 30.0, "c.py": 25.0, "alone.py": 5.0}
    one = progress.Progress(previous, clock=Clock())
    assert "about 65 s from the last recording's per-page times" in one.plan([], [["a.py", "b.py", "c.py"]])
    two = progress.Progress(previous, clock=Clock())
    two.plan(["alone.py"], [["alone.py", "b.py"], ["a.py", "c.py"]])
    # GPU 1 waits for the page that runs alone on GPU 0: max(5 + 30, 5 + 10 + 25)
    assert two.remaining() == pytest.approx(40.0)


def test_a_page_without_a_previous_time_counts_as_the_longest_and_the_plan_says_so():
    p = progress.Progress({"a.py": 10.0, "b.py": 30.0, "skipped_before.py": 0.0}, clock=Clock())
    line = p.plan([], [["a.py", "new.py", "skipped_before.py"]])
    assert "about 70 s" in line and "2 without one counted as the longest" in line


def test_the_estimate_scales_by_the_first_finished_pages_ratio_and_says_so():
    clock = Clock()
    p = progress.Progress({"plot_01_x.py": 10.0, "plot_02_y.py": 20.0, "plot_03_z.py": 40.0}, clock=clock)
    p.plan([], [["plot_01_x.py", "plot_02_y.py", "plot_03_z.py"]])
    p.start("plot_01_x.py", 0)
    clock.now = 13.1
    line = p.finish("plot_01_x.py", 0, 13.1)
    assert "1 of 3 finished, about 79 s left (estimate ×1.31 from plot_01_x on this GPU)" in line
    p.start("plot_02_y.py", 0)
    clock.now = 23.1  # 10 s into a page expected to take 26.2 s
    assert p.remaining() == pytest.approx(16.2 + 52.4)
    line = p.finish("plot_02_y.py", 0, 40.0)  # a later page does not change the scale: the first one set it
    assert "×1.31 from plot_01_x" in line and "about 52 s left" in line
    p.start("plot_03_z.py", 0)
    assert p.finish("plot_03_z.py", 0, 50.0).endswith("3 of 3 finished")  # no estimate once all are done


def test_a_first_page_without_a_previous_time_does_not_set_the_scale():
    p = progress.Progress({"b.py": 20.0}, clock=Clock())
    p.plan([], [["new.py", "b.py"]])
    p.start("new.py", 0)
    assert "estimate from the last recording's times" in p.finish("new.py", 0, 99.0)
    assert p.remaining() == pytest.approx(20.0)


def test_event_lines_name_the_page_gpu_and_seconds_one_line_each():
    clock = Clock()
    p = progress.Progress({"a.py": 10.0, "b.py": 30.0}, clock=clock)
    p.plan([], [["a.py"], ["b.py"]])
    lines = [p.start("a.py", 0), p.start("b.py", 1)]
    clock.now = 4.0
    lines += [p.fail("b.py", 1), p.finish("a.py", 0, 12.0)]
    assert lines[0] == "cudnn-guide: recording a.py in a fresh interpreter on GPU 0 (1 of 2; last recording 10.0 s)"
    assert lines[2].startswith("cudnn-guide: failed b.py after 4.0 s on GPU 1, its committed files unchanged; ")
    assert lines[3].startswith("cudnn-guide: recorded a.py in 12.0 s on GPU 0 (last recording 10.0 s); 2 of 2")
    assert all("\n" not in line and line.startswith("cudnn-guide: ") for line in lines)


def test_an_interruption_names_the_page_cut_short_and_those_never_started():
    p = progress.Progress({}, clock=Clock())
    p.plan([], [["a.py", "b.py", "c.py"], ["d.py"]])
    p.start("a.py", 0)
    p.finish("a.py", 0, 1.0)
    p.start("b.py", 0)
    p.start("d.py", 1)
    p.fail("d.py", 1)
    assert p.unfinished() == (["b.py"], ["c.py"])
    assert p.interrupted_note() == "not finished: b.py (cut short); c.py (not started)"
    p.start("c.py", 0)
    p.finish("b.py", 0, 1.0)
    p.finish("c.py", 0, 1.0)
    assert p.interrupted_note() == "not finished: none"


FLIPS = {"tie": "faster", "faster": "tie", "slower": "tie"}


def _recorded_verdicts(gallery, page):
    """The committed record's headline → verdict, read directly (what page_verdicts must return)."""
    record = json.loads((gallery / page.replace(".py", ".record.json")).read_text())
    return {h["name"]: h["verdict"] for h in record["headlines"] if "verdict" in h}


def test_changed_verdicts_compare_only_the_comparisons_both_recordings_hold(root):
    gallery = root / "docs" / "auto_examples"
    before = progress.page_verdicts(gallery, [PAGE_A, PAGE_B, "plot_01_environment.py"])
    assert before[PAGE_A] == _recorded_verdicts(gallery, PAGE_A) and before[PAGE_A]
    assert len(before[PAGE_B]) >= 2
    assert before["plot_01_environment.py"] == {}  # no comparison on that page
    assert progress.page_verdicts(root, ["plot_99_missing.py"]) == {"plot_99_missing.py": {}}
    name, verdict = next(iter(before[PAGE_A].items()))
    after = {PAGE_A: {**before[PAGE_A], name: FLIPS[verdict], "a new comparison": "tie"}, PAGE_B: before[PAGE_B]}
    compared, changes = progress.changed_verdicts(before, after)
    assert compared == len(before[PAGE_A]) + len(before[PAGE_B])  # "a new comparison" is held by one recording only
    assert [str(c) for c in changes] == [f"plot_02_conv_bias_relu / {name}: {verdict} -> {FLIPS[verdict]}"]


def test_the_summary_counts_pages_seconds_and_lists_changed_verdicts():
    change = progress.VerdictChange("plot_10_n.py", "LayerNorm", "faster", "tie")
    line = progress.summary_line(["a.py", "plot_10_n.py"], {"a.py": 0.0, "plot_10_n.py": 30.4}, 41.2, {}, 4, [change])
    assert line == (
        "cudnn-guide: summary: 2 of 2 page(s) recorded in 41 s (pages 30 s); "
        "verdicts changed against the committed recording: 1 of 4 (plot_10_n / LayerNorm: faster -> tie)"
    )


def test_progress_docstring_examples_run(root, monkeypatch):
    monkeypatch.chdir(root)  # page_verdicts' example reads the committed gallery
    result = doctest.testmod(progress, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 5 and result.failed == 0


# -- the recorder, with a fake page runner ----------------------------------------------------------


def _project(tmp_path, root, monkeypatch):
    """The committed gallery and two of its examples, and an environment that claims the recording GPU."""
    from cudnn_guide import environment

    fake = json.loads((root / "docs" / "auto_examples" / "recording.json").read_text())["environment"]
    monkeypatch.setattr(environment, "collect", lambda: environment.EnvironmentRecord.from_dict(fake))
    docs, examples = tmp_path / "docs", tmp_path / "examples"
    (docs / "data").mkdir(parents=True)
    (docs / "conf.py").write_text("")
    shutil.copytree(root / "docs" / "auto_examples", docs / "auto_examples")
    examples.mkdir()
    for page in (PAGE_A, PAGE_B):
        shutil.copy(root / "examples" / page, examples / page)
    return docs, examples, docs / "auto_examples"


class FakePool:
    """Stands in for one GPU's fresh interpreters: 'records' a page by flipping its first verdict.

    Each page takes 1.5 times its last recorded seconds; ``on_run`` is called before a page finishes."""

    def __init__(self, previous, on_run=None):
        self.previous, self.on_run, self.start_seconds = previous, on_run, 0.1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def wait_ready(self):
        pass

    def run(self, fn, docs_dir, out_dir, example, timeout=None):
        from pathlib import Path

        staged = Path(docs_dir) / "auto_examples"
        record_path = staged / f"{Path(example).stem}.record.json"
        record = json.loads(record_path.read_text())
        first = next(h for h in record["headlines"] if "verdict" in h)
        first["verdict"] = FLIPS[first["verdict"]]
        record_path.write_text(json.dumps(record))
        source = Path(docs_dir).parent / "examples" / example
        (staged / f"{example}.md5").write_text(hashlib.md5(source.read_bytes()).hexdigest())
        if self.on_run:
            self.on_run(example)
        return types.SimpleNamespace(value=0, seconds=round(1.5 * self.previous[example], 1))


def test_the_recorder_prints_each_pages_start_and_end_the_scaled_estimate_and_a_summary(
    tmp_path, root, monkeypatch, capsys
):
    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    previous = json.loads((gallery / "recording.json").read_text())["example_seconds"]
    monkeypatch.setattr(recording, "interpreter_pool", lambda size, env: FakePool(previous))
    seconds = recording.record_examples(docs, examples, gallery, names=["2", "plot_04"], gpus=1)
    assert seconds == {PAGE_A: round(1.5 * previous[PAGE_A], 1), PAGE_B: round(1.5 * previous[PAGE_B], 1)}
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cudnn-guide: ")]
    total = previous[PAGE_A] + previous[PAGE_B]
    assert f"cudnn-guide: progress: 2 page(s) to record, about {total:.0f} s from the last" in "\n".join(out)
    events = [line for line in out if re.match(r"cudnn-guide: (recording|recorded|failed) plot_", line)]
    assert [e.split()[1:3] for e in events] == [
        ["recording", PAGE_A],
        ["recorded", PAGE_A],
        ["recording", PAGE_B],
        ["recorded", PAGE_B],
    ]
    left_b = 1.5 * previous[PAGE_B]  # page B, scaled by page A's ratio, not yet started
    said = re.search(
        r"1 of 2 finished, about (\d+) s left \(estimate ×1\.50 from plot_02_conv_bias_relu on this GPU\)", events[1]
    )
    assert said and abs(int(said.group(1)) - left_b) <= 1, events[1]  # page A ran round(1.5 × its time, 1)
    assert events[3].endswith("2 of 2 finished")
    summary = [line for line in out if line.startswith("cudnn-guide: summary: ")]
    assert len(summary) == 1 and summary[0].startswith("cudnn-guide: summary: 2 of 2 page(s) recorded in ")
    held = sum(len(progress.page_verdicts(root / "docs" / "auto_examples", [p])[p]) for p in (PAGE_A, PAGE_B))
    assert f"verdicts changed against the committed recording: 2 of {held} (" in summary[0]  # one flip per page
    name, verdict = next(iter(_recorded_verdicts(root / "docs" / "auto_examples", PAGE_A).items()))
    assert f"plot_02_conv_bias_relu / {name}: {verdict} -> {FLIPS[verdict]}" in summary[0]


def test_ctrl_c_keeps_the_finished_pages_and_names_the_one_cut_short(tmp_path, root, monkeypatch, capsys):
    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    committed_b = (gallery / "plot_04_matmul_epilogue.record.json").read_bytes()
    previous = json.loads((gallery / "recording.json").read_text())["example_seconds"]
    page_b_may_end = threading.Event()

    def ctrl_c_during_page_b(example):
        if example == PAGE_B:  # the reader presses Ctrl-C while page B runs; page B then completes anyway
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            page_b_may_end.wait(5)

    note = progress.Progress.interrupted_note

    def note_once_page_b_has_ended(self):
        # the recorder has stopped: now let page B complete, and its GPU's worker try to keep it
        page_b_may_end.set()
        for t in threading.enumerate():
            if t is not threading.current_thread() and t.daemon:
                t.join(5)
        return note(self)

    monkeypatch.setattr(progress.Progress, "interrupted_note", note_once_page_b_has_ended)
    monkeypatch.setattr(
        recording, "interpreter_pool", lambda size, env: FakePool(previous, on_run=ctrl_c_during_page_b)
    )
    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(RuntimeError) as info:
            recording.record_examples(docs, examples, gallery, names=[PAGE_A, PAGE_B], gpus=1)
    finally:
        signal.signal(signal.SIGINT, previous_handler)
    assert page_b_may_end.is_set()
    msg = str(info.value)
    assert f"recording interrupted; not finished: {PAGE_B} (cut short)" in msg
    assert f"Pages recorded before it were kept: {PAGE_A}." in msg
    kept_a = json.loads((gallery / "plot_02_conv_bias_relu.record.json").read_text())
    committed_a = next(iter(_recorded_verdicts(root / "docs" / "auto_examples", PAGE_A).values()))
    kept = next(h["verdict"] for h in kept_a["headlines"] if "verdict" in h)
    assert kept == FLIPS[committed_a]  # page A kept as the fake recorded it
    assert (gallery / "plot_04_matmul_epilogue.record.json").read_bytes() == committed_b  # page B not promoted
    assert json.loads((gallery / "recording.json").read_text())["last_run_seconds"] == {
        PAGE_A: round(1.5 * previous[PAGE_A], 1)
    }
    out = capsys.readouterr().out
    assert f"cudnn-guide: interrupted: kept {PAGE_A}; not finished: {PAGE_B} (cut short)" in out
    assert "1 of 2 page(s) recorded" in out and f"not recorded: {PAGE_B}" in out


def test_a_time_limits_sigterm_keeps_the_pages_a_shard_finished(tmp_path, root, monkeypatch, capsys):
    """`timeout 300 python -m gallery_build.shards record ...`: the pages done before SIGTERM reach the shard."""
    from gallery_build import shards

    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    previous = json.loads((gallery / "recording.json").read_text())["example_seconds"]

    def sigterm_during_page_b(example):
        if example == PAGE_B:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

    monkeypatch.setattr(recording, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(
        recording, "interpreter_pool", lambda size, env: FakePool(previous, on_run=sigterm_during_page_b)
    )
    shard = tmp_path / "shard"
    previous_handler = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(RuntimeError, match="recording interrupted"):  # not killed by the signal
            shards._main(["record", str(shard), PAGE_A, PAGE_B])
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    kept = shards.read_shard(shard)
    assert PAGE_A in kept.pages, kept.pages  # the shard was written, with the page finished before SIGTERM
    assert (shard / "auto_examples" / "plot_02_conv_bias_relu.record.json").exists()


def test_a_page_taken_over_by_another_lane_is_charged_to_the_lane_that_runs_it():
    from gallery_build.progress import Progress

    now = [0.0]
    p = Progress({"a.py": 10.0, "b.py": 30.0, "c.py": 20.0}, clock=lambda: now[0])
    p.plan([], [["a.py"], ["b.py", "c.py"]])
    p.start("a.py", 0), p.start("b.py", 1)
    now[0] = 10.0
    p.finish("a.py", 0, 10.0)
    p.start("c.py", 0)  # lane 0 took c.py over from lane 1
    assert p.lanes == [["a.py", "c.py"], ["b.py"]] and len(p.pages) == 3
    assert p.remaining() == pytest.approx(20.0)  # b.py's 30 s from 0 and c.py's 20 s from 10: both end at 30


def test_a_page_recorded_alone_first_or_never_planned_is_not_moved():
    from gallery_build.progress import Progress

    p = Progress({"alone.py": 10.0, "a.py": 30.0, "b.py": 20.0})
    p.plan(["alone.py"], [["alone.py", "a.py"], ["b.py"]])
    p.start("alone.py", 1), p.start("stray.py", 0), p.start("b.py", 7)
    assert p.lanes == [["alone.py", "a.py"], ["b.py"]]
