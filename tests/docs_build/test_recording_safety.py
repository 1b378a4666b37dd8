"""Nothing may damage the committed recording: atomic page recording, safe writes, refused bad data.

Record mode is exercised on this CPU machine by simulating the GPU where the build asks for it
(the environment collector, in the parent and in a copy of ``conf.py``), with example pages that
need no GPU: one that records, and one that fails half-way after printing and drawing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import time

import pytest
from conftest import HAS_GPU
from gallery_build import history, page_checks, recording, scheduling, staging, staleness
from gallery_build.manifest import read_manifest

from cudnn_guide import datafiles
from cudnn_guide.errors import CorruptDataError

OK_PAGE = '''"""
Page {n}
=======

A page that needs no GPU.
"""
import matplotlib.pyplot as plt

from cudnn_guide import environment
from cudnn_guide.report import records

records.Record("{stem}", title="Page {n}", environment=environment.collect()).write()
print("page {n} version {v}")
plt.plot([1, 2, 3], [{v}, 2, 1])
plt.show()
'''

FAILING_PAGE = (
    OK_PAGE
    + """
# %%
print("half-way")
plt.figure()
plt.plot([3, 2, 1])
plt.show()
raise RuntimeError("this page fails mid-way")
"""
)


def _fake_env(root):
    return json.loads((root / "docs" / "auto_examples" / "recording.json").read_text())["environment"]


def _project(tmp_path, root, monkeypatch):
    """A docs tree whose conf.py believes it is on the recording GPU, and two CPU-only examples."""
    from cudnn_guide import environment

    fake = _fake_env(root)
    docs, examples = tmp_path / "docs", tmp_path / "examples"
    (docs / "data").mkdir(parents=True)
    shutil.copytree(root / "docs" / "_static", docs / "_static")
    patch = (
        "import json as _json\nfrom cudnn_guide import environment as _environment\n"
        f"_environment.collect = lambda: _environment.EnvironmentRecord.from_dict(_json.loads({json.dumps(fake)!r}))\n"
    )
    conf = (root / "docs" / "conf.py").read_text()
    future = "from __future__ import annotations\n"
    (docs / "conf.py").write_text(conf.replace(future, future + patch, 1))
    examples.mkdir()
    shutil.copy(root / "examples" / "GALLERY_HEADER.rst", examples)
    monkeypatch.setattr(environment, "collect", lambda: environment.EnvironmentRecord.from_dict(fake))
    return docs, examples, docs / "auto_examples"


def _snapshot(gallery, stem):
    return {
        p.relative_to(gallery).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in gallery.rglob("*")
        if p.is_file() and stem in p.name
    }


@pytest.mark.skipif(HAS_GPU, reason="simulates the GPU on a CPU machine")
def test_a_failed_page_leaves_its_recording_byte_identical_and_earlier_pages_are_kept(tmp_path, root, monkeypatch):
    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    (examples / "plot_01_a.py").write_text(OK_PAGE.format(n=1, v=1, stem="plot_01_a"))
    (examples / "plot_02_b.py").write_text(OK_PAGE.format(n=2, v=1, stem="plot_02_b"))
    seconds = recording.record_examples(docs, examples, gallery)
    assert set(seconds) == {"plot_01_a.py", "plot_02_b.py"}
    assert staleness.stale_examples(examples, gallery) == []
    before_b = _snapshot(gallery, "plot_02_b")
    assert any(k.endswith(".png") for k in before_b) and "plot_02_b.py.md5" in before_b

    # a full run: page 1 changed and records; page 2 now prints, draws, then fails
    (examples / "plot_01_a.py").write_text(OK_PAGE.format(n=1, v=2, stem="plot_01_a"))
    (examples / "plot_02_b.py").write_text(FAILING_PAGE.format(n=2, v=3, stem="plot_02_b"))
    with pytest.raises(RuntimeError) as info:
        recording.record_examples(docs, examples, gallery)
    msg = str(info.value)
    assert "recording plot_02_b.py failed" in msg and "Its committed files are unchanged" in msg
    assert "kept: plot_01_a.py" in msg

    assert _snapshot(gallery, "plot_02_b") == before_b  # every file of the failed page, byte for byte
    assert "page 1 version 2" in (gallery / "plot_01_a.rst").read_text()  # the page before it was kept
    states = {s.source.name: s.state for s in staleness.example_states(examples, gallery)}
    assert states == {"plot_01_a.py": "fresh", "plot_02_b.py": "stale"}
    lines = history.load(docs / "data" / "history.jsonl")
    assert [e["example"] for e in lines] == ["plot_01_a", "plot_02_b", "plot_01_a"]  # run 2 wrote page 1's line
    manifest = read_manifest(gallery)
    assert manifest["full_recording"]["seconds"] > 0 and set(manifest["example_seconds"]) == set(seconds)
    assert not list(gallery.rglob("*.tmp"))


def test_promotion_replaces_changed_files_and_writes_the_md5_last(tmp_path):
    staged, gallery = tmp_path / "staged", tmp_path / "gallery"
    for d in (staged, gallery):
        (d / "images").mkdir(parents=True)
    (gallery / "plot_a.rst").write_text("old")
    (gallery / "images" / "sphx_glr_plot_a_002.png").write_bytes(b"old figure")
    (gallery / "plot_a.py.md5").write_text("old")
    (staged / "plot_a.rst").write_text("new")
    (staged / "plot_a.py.md5").write_text("new")
    with pytest.raises(RuntimeError, match="without writing plot_b.py.md5"):
        staging.promote_page(staged, gallery, "plot_b.py")
    assert (gallery / "plot_a.rst").read_text() == "old"  # refused before touching anything
    changed = staging.promote_page(staged, gallery, "plot_a.py")
    assert changed == ["plot_a.rst", "plot_a.py.md5"]
    assert (gallery / "plot_a.rst").read_text() == "new" and (gallery / "plot_a.py.md5").read_text() == "new"
    assert not (gallery / "images" / "sphx_glr_plot_a_002.png").exists()  # the page no longer draws it


# -- writes ------------------------------------------------------------------------------------


def test_history_append_ends_an_unterminated_line_first(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text('{"example": "a", "measurements": {}}')  # a writer died before its newline
    history.append(path, [{"example": "b", "measurements": {}}])
    assert [e["example"] for e in history.load(path)] == ["a", "b"]


def test_concurrent_history_appends_never_merge_lines(tmp_path):
    path = tmp_path / "history.jsonl"
    entry = {"example": "x" * 2000, "measurements": {}}  # long lines: unlocked writes interleave

    def writer():
        for _ in range(25):
            history.append(path, [entry, entry])

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(history.load(path)) == 200


def test_atomic_write_leaves_the_old_file_when_serialization_fails(tmp_path):
    path = tmp_path / "record.json"
    datafiles.write_json(path, {"ok": 1})
    with pytest.raises(TypeError):
        datafiles.write_json(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_a_corrupt_json_file_is_named_with_its_line(tmp_path):
    bad = tmp_path / "plot_x.record.json"
    bad.write_text('{"schema": "cudnn-guide/record",\n "title": "unterminated')
    with pytest.raises(CorruptDataError) as info:
        datafiles.read_json(bad)
    assert f"{bad}:2:" in str(info.value) and "not valid JSON" in str(info.value)
    hist = tmp_path / "history.jsonl"
    hist.write_text('{"example": "a"}\n{"example": \n{"example": "c"}\n')
    with pytest.raises(CorruptDataError, match=rf"{hist}:2: line is not valid JSON"):
        history.load(hist)


# -- the plan cache --------------------------------------------------------------------------


def _key():
    from cudnn_guide.graphs.plan_cache import PlanKey

    return PlanKey("graph", "NVIDIA H200", "9.0", 91900, "1.32.0")


def test_plan_cache_stores_from_many_threads_in_a_private_folder(tmp_path):
    from cudnn_guide.graphs.plan_cache import PlanCache

    cache = PlanCache(tmp_path / "plans")
    errors = []

    def store():
        try:
            for _ in range(20):
                cache.store(_key(), b"plan-bytes", {"x": 1})
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (tmp_path / "plans").stat().st_mode & 0o777 == 0o700
    assert cache.read(_key()) == (b"plan-bytes", {"x": 1}) and cache.last_event == "hit"
    assert [p.suffix for p in (tmp_path / "plans").iterdir()] == [".cudnnplan"]


@pytest.mark.parametrize("uids", [["x"], {"x": "one"}, {"x": -1}, {}, {"x": True}, None])
def test_plan_cache_rejects_malformed_uids(tmp_path, uids):
    from cudnn_guide.graphs.plan_cache import PlanCache

    cache = PlanCache(tmp_path / "plans")
    cache.store(_key(), b"plan-bytes", uids)
    assert cache.read(_key()) is None
    assert cache.last_event.startswith("rejected: malformed uids")


def test_plan_cache_refuses_a_folder_others_can_write(tmp_path):
    from cudnn_guide.graphs.plan_cache import PlanCache

    cache = PlanCache(tmp_path / "plans")
    cache.store(_key(), b"plan-bytes", {"x": 1})
    (tmp_path / "plans").chmod(0o777)
    assert cache.read(_key()) is None and "writable by group or others" in cache.last_event


# -- what the render refuses -----------------------------------------------------------------


@pytest.fixture
def gallery_copy(tmp_path, root):
    gal = tmp_path / "docs" / "auto_examples"
    shutil.copytree(root / "docs" / "auto_examples", gal)
    shutil.copytree(root / "docs" / "data", tmp_path / "docs" / "data")
    return gal


def test_swapped_records_are_refused(gallery_copy, root):
    a, b = gallery_copy / "plot_02_conv_bias_relu.record.json", gallery_copy / "plot_04_matmul_epilogue.record.json"
    ta, tb = a.read_bytes(), b.read_bytes()
    a.write_bytes(tb)
    b.write_bytes(ta)
    problems = page_checks.recorded_page_problems(gallery_copy, root / "examples")
    assert (
        "plot_02_conv_bias_relu: plot_02_conv_bias_relu.record.json is the record of "
        "'plot_04_matmul_epilogue', not of this page"
    ) in problems


def test_a_truncated_figure_is_refused(gallery_copy, root):
    png = gallery_copy / "images" / "sphx_glr_plot_02_conv_bias_relu_001.png"
    png.write_bytes(png.read_bytes()[:100])
    problems = page_checks.recorded_page_problems(gallery_copy, root / "examples")
    assert any(
        p.startswith("plot_02_conv_bias_relu: figure images/sphx_glr_plot_02_conv_bias_relu_001.png does not decode")
        for p in problems
    ), problems


def test_a_missing_run_time_file_is_refused(gallery_copy, root):
    (gallery_copy / "plot_03_autotuning.cost.json").unlink()
    assert page_checks.recorded_page_problems(gallery_copy, root / "examples") == [
        "plot_03_autotuning: its run-time file plot_03_autotuning.cost.json is missing"
    ]


@pytest.mark.parametrize(
    "name",
    [
        "plot_02_conv_bias_relu.record.json",
        "recording.json",
        "plot_02_conv_bias_relu.cost.json",
        "../data/crosscheck.json",
    ],
)
def test_every_data_file_must_parse(gallery_copy, name):
    path = (gallery_copy / name).resolve()
    path.write_text(path.read_text()[: len(path.read_text()) // 2])
    with pytest.raises(CorruptDataError, match="not valid JSON") as info:
        page_checks.validate_data(gallery_copy, gallery_copy.parent / "data")
    assert info.value.path == str(path.resolve())


def test_a_broken_history_line_is_refused_with_its_number(gallery_copy):
    hist = gallery_copy.parent / "data" / "history.jsonl"
    lines = hist.read_text().splitlines()
    lines[3] = lines[3][:40]
    hist.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorruptDataError, match=r"history.jsonl:4: line is not valid JSON"):
        page_checks.validate_data(gallery_copy, gallery_copy.parent / "data")


def test_titles_and_labels_from_data_are_escaped():
    import pandas as pd

    from cudnn_guide.report.tables import html_table, page_link

    frame = pd.DataFrame(
        {
            "page": [page_link("plot_x", "<script>alert(1)</script>")],
            "number": ["<img src=x onerror=alert(1)>"],
            "value": [1.25],
        }
    )
    out = html_table(frame, {"value": "{:.2f}"}).to_html()
    assert "<script>" not in out and "<img" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;</a>" in out and 'href="auto_examples/plot_x.html"' in out
    assert "1.25" in out


def test_data_pages_build_their_tables_through_the_escaping_helper(root):
    for page in ("results.md", "methodology.md", "maintainers/measurement_studies.md"):
        text = (root / "docs" / page).read_text()
        assert ".style." not in text.replace("piv.style.format", ""), page  # tables go through html_table
        assert "<a href" not in text, page  # links go through page_link


def test_the_data_digest_changes_with_any_data_file(gallery_copy):
    before = page_checks.data_digest(gallery_copy, gallery_copy.parent / "data")
    rec = gallery_copy / "plot_02_conv_bias_relu.record.json"
    rec.write_text(rec.read_text().replace('"value":', '"value": ', 1))
    assert page_checks.data_digest(gallery_copy, gallery_copy.parent / "data") != before


def test_datafiles_docstring_examples_run():
    import doctest

    assert doctest.testmod(datafiles, optionflags=doctest.ELLIPSIS).failed == 0


@pytest.mark.skipif(HAS_GPU, reason="simulates the GPU on a CPU machine")
def test_recording_into_a_shard_leaves_the_gallery_alone_and_merges_back(tmp_path, root, monkeypatch):
    from gallery_build import shards

    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    (examples / "plot_01_a.py").write_text(OK_PAGE.format(n=1, v=1, stem="plot_01_a"))
    recording.record_examples(docs, examples, gallery)
    before = _snapshot(gallery, "plot_01_a")
    (examples / "plot_01_a.py").write_text(OK_PAGE.format(n=1, v=7, stem="plot_01_a"))
    shard_dir = tmp_path / "shard-1"
    recording.record_examples(docs, examples, gallery, shard=shard_dir)
    assert _snapshot(gallery, "plot_01_a") == before  # the gallery is untouched
    shard = shards.read_shard(shard_dir)
    assert list(shard.pages) == ["plot_01_a.py"] and shard.gpu == "NVIDIA H200"
    assert "page 1 version 7" in (shard_dir / "auto_examples" / "plot_01_a.rst").read_text()
    assert shards.merge([shard_dir], docs, examples) == {"plot_01_a.py": "NVIDIA H200"}
    assert "page 1 version 7" in (gallery / "plot_01_a.rst").read_text()
    assert staleness.stale_examples(examples, gallery) == []
    assert [e["example"] for e in history.load(docs / "data" / "history.jsonl")] == ["plot_01_a", "plot_01_a"]


def test_pages_are_spread_over_gpus_longest_first():
    lanes = scheduling.schedule(
        ["a.py", "b.py", "c.py", "d.py", "new.py"], {"a.py": 60, "b.py": 45, "c.py": 30, "d.py": 10}, 2
    )
    # a new page counts as the longest known (60 s); each next page goes to the least-loaded GPU
    assert lanes == [["a.py", "b.py"], ["new.py", "c.py", "d.py"]]
    assert scheduling.schedule(["a.py", "b.py"], {}, 4) == [["a.py"], ["b.py"]]
    assert scheduling.schedule(["b.py", "a.py"], {"a.py": 5}, 1) == [["b.py", "a.py"]]  # one GPU: given order


@pytest.mark.skipif(HAS_GPU, reason="simulates the GPUs on a CPU machine")
def test_each_page_runs_pinned_to_one_gpu_and_all_are_kept(tmp_path, root, monkeypatch):
    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    pinned = OK_PAGE + '\nimport os\nprint("on GPU", os.environ.get("CUDA_VISIBLE_DEVICES"))\n'
    for n in (1, 2, 3):
        (examples / f"plot_0{n}_p.py").write_text(pinned.format(n=n, v=1, stem=f"plot_0{n}_p"))
    seconds = recording.record_examples(docs, examples, gallery, gpus=2)
    assert sorted(seconds) == ["plot_01_p.py", "plot_02_p.py", "plot_03_p.py"]
    seen = {n: re.search(r"on GPU (\d)", (gallery / f"plot_0{n}_p.rst").read_text()).group(1) for n in (1, 2, 3)}
    assert set(seen.values()) == {"0", "1"}  # both GPUs were used, one page at a time each
    assert staleness.stale_examples(examples, gallery) == []
    assert sorted(e["example"] for e in history.load(docs / "data" / "history.jsonl")) == [
        "plot_01_p",
        "plot_02_p",
        "plot_03_p",
    ]
    full = read_manifest(gallery)["full_recording"]
    assert full["seconds"] > 0 and full["gpus"] == 2  # the site says how many GPUs its time was made on


def test_host_bound_pages_go_first_on_gpu_0_and_only_with_more_than_one_gpu():
    pages = ["a.py", "plot_21_call_overhead.py", "b.py", "plot_08_cuda_graphs.py"]
    alone, lanes = scheduling.plan_lanes(pages, {"a.py": 60, "b.py": 45}, 2)
    assert alone == ["plot_21_call_overhead.py", "plot_08_cuda_graphs.py"]
    assert lanes == [alone + ["a.py"], ["b.py"]]
    assert scheduling.plan_lanes(pages, {}, 1) == ([], [pages])  # one GPU: nothing runs beside them anyway


@pytest.mark.skipif(HAS_GPU, reason="simulates the GPUs on a CPU machine")
def test_a_page_that_runs_alone_overlaps_no_other_page(tmp_path, root, monkeypatch):
    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    spans = tmp_path / "spans"
    spans.mkdir()
    timed = OK_PAGE + (
        "\nimport time\nt0 = time.time()\ntime.sleep(1.0)\n"
        f"open({str(spans)!r} + '/{{stem}}', 'w').write(f'{{{{t0}}}} {{{{time.time()}}}}')\n"
    )
    for n in (1, 2, 3):
        (examples / f"plot_0{n}_p.py").write_text(timed.format(n=n, v=1, stem=f"plot_0{n}_p"))
    monkeypatch.setattr(scheduling, "RECORD_ALONE", {"plot_03_p.py"})
    recording.record_examples(docs, examples, gallery, gpus=2)
    span = {p.name: tuple(map(float, p.read_text().split())) for p in spans.iterdir()}
    assert sorted(span) == ["plot_01_p", "plot_02_p", "plot_03_p"]
    start, end = span.pop("plot_03_p")
    assert all(s >= end or e <= start for s, e in span.values())  # nothing else ran meanwhile


@pytest.mark.skipif(HAS_GPU, reason="simulates the GPUs on a CPU machine")
def test_no_page_starts_while_another_gpus_interpreters_still_import(tmp_path, root, monkeypatch):
    docs, examples, gallery = _project(tmp_path, root, monkeypatch)
    (tmp_path / "slow_on_gpu_1.py").write_text(  # a preload that keeps GPU 1's interpreters importing
        "import os, time\nif os.environ.get('CUDA_VISIBLE_DEVICES') == '1':\n    time.sleep(4)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setattr(recording, "recording_preload", lambda: ["slow_on_gpu_1"])
    stamp = tmp_path / "starts"
    stamp.mkdir()
    page = OK_PAGE + f"\nimport time\nopen({str(stamp)!r} + '/{{stem}}', 'w').write(str(time.time()))\n"
    for n in (1, 2):
        (examples / f"plot_0{n}_p.py").write_text(page.format(n=n, v=1, stem=f"plot_0{n}_p"))
    t0 = time.time()
    recording.record_examples(docs, examples, gallery, gpus=2)
    starts = sorted(float(p.read_text()) - t0 for p in stamp.iterdir())
    assert len(starts) == 2 and starts[0] > 4  # GPU 0's page waited for GPU 1's slow imports


def test_the_data_pages_rerun_when_a_source_they_read_changes(tmp_path, root):
    src = tmp_path / "src"
    shutil.copytree(root / "examples", src)
    gal, data = root / "docs" / "auto_examples", root / "docs" / "data"
    before = page_checks.data_digest(gal, data, (src,))
    (src / "plot_01_environment.py").write_text((src / "plot_01_environment.py").read_text() + "\n")
    assert page_checks.data_digest(gal, data, (src,)) != before
