import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import HAS_GPU, remove_recording
from gallery_build import cell_times, page_checks, recording, skip_pages, staging, staleness
from gallery_build import hooks as docs_build
from gallery_build.manifest import describe_recording, package_md5, read_manifest, write_manifest


def _gallery(tmp_path, text="print(1)\n"):
    ex, gal = tmp_path / "examples", tmp_path / "gallery"
    ex.mkdir()
    gal.mkdir()
    (ex / "plot_a.py").write_text(text)
    (gal / "plot_a.py.md5").write_text(hashlib.md5(text.encode()).hexdigest())
    (gal / "plot_a.rst").write_text("page")
    return ex, gal


def test_fresh_stale_and_missing(tmp_path):
    ex, gal = _gallery(tmp_path)
    assert [s.state for s in staleness.example_states(ex, gal)] == ["fresh"]
    staleness.require_fresh_recording(ex, gal)  # no error
    (ex / "plot_a.py").write_text("print(2)\n")
    (ex / "plot_b.py").write_text("print(3)\n")
    states = {s.source.name: s.state for s in staleness.example_states(ex, gal)}
    assert states == {"plot_a.py": "stale", "plot_b.py": "missing"}
    with pytest.raises(staleness.StaleRecordingError) as info:
        staleness.require_fresh_recording(ex, gal)
    msg = str(info.value)
    assert "plot_a.py: changed since it was recorded" in msg
    assert "plot_b.py: has never been recorded" in msg
    assert "re-recorded on a GPU" in msg


def test_docs_mode(monkeypatch):
    monkeypatch.setenv(staleness.MODE_ENV, "record")
    assert staleness.docs_mode() == "record"
    monkeypatch.setenv(staleness.MODE_ENV, "render")
    assert staleness.docs_mode() == "render"
    monkeypatch.setenv(staleness.MODE_ENV, "sometimes")
    with pytest.raises(ValueError, match="expected 'record', 'render' or 'auto'"):
        staleness.docs_mode()


def test_manifest_round_trip(tmp_path):
    ex, gal = _gallery(tmp_path)
    write_manifest(gal, ex, {"gpu": "NVIDIA H200", "commit": "abc"}, build_seconds=12.5)
    man = read_manifest(gal)
    assert man["examples"] == {"plot_a.py": hashlib.md5(b"print(1)\n").hexdigest()}
    assert "NVIDIA H200" in describe_recording(gal)
    assert describe_recording(tmp_path) == "no GPU recording has been committed yet"


def test_the_stamp_counts_each_commits_pages(tmp_path):
    ex, gal = _gallery(tmp_path)
    write_manifest(gal, ex, {"gpu": "NVIDIA H200", "commit": "abc"}, build_seconds=1.0)
    man = read_manifest(gal)
    man["pages"] = {"a.py": {"commit": "abc"}, "b.py": {"commit": "abc"}, "c.py": {"commit": "def"}}
    (gal / "recording.json").write_text(json.dumps(man))
    assert "commits abc (2 pages), def (1 page)" in describe_recording(gal)


def test_manifest_keeps_the_full_recording_time_across_partial_recordings(tmp_path):
    """Recording one page later updates its time but never passes it off as the gallery's."""
    ex, gal = _gallery(tmp_path)
    env = {"gpu": "NVIDIA H200", "commit": "full1"}
    write_manifest(
        gal, ex, env, build_seconds=300.0, example_seconds={"plot_a.py": 200.0, "plot_b.py": 100.0}, full_run=True
    )
    write_manifest(
        gal, ex, dict(env, commit="part2"), build_seconds=20.0, example_seconds={"plot_b.py": 20.0}, full_run=False
    )
    man = read_manifest(gal)
    assert man["build_seconds"] == 20.0
    assert man["example_seconds"] == {"plot_a.py": 200.0, "plot_b.py": 20.0}
    assert man["full_recording"]["seconds"] == 300.0 and man["full_recording"]["commit"] == "full1"


# -- the committed recording itself ------------------------------------------------------------


def test_every_example_has_a_fresh_recording(root):
    bad = staleness.stale_examples(root / "examples", root / "docs" / "auto_examples")
    assert not bad, f"re-record on a GPU: {bad}"


def test_committed_pages_are_healthy(root):
    assert page_checks.recorded_page_problems(root / "docs" / "auto_examples", root / "examples") == []


def test_health_check_catches_missing_figure_output_and_failed_check(tmp_path, root):
    gal = tmp_path / "auto_examples"
    shutil.copytree(root / "docs" / "auto_examples", gal)
    stem = sorted((root / "examples").glob("plot_*.py"))[0].stem
    for png in (gal / "images").glob(f"sphx_glr_{stem}_*.png"):
        png.unlink()
    rst = gal / f"{stem}.rst"
    rst.write_text(rst.read_text().replace("sphx-glr-script-out", "nothing-here"))
    rec = gal / f"{stem}.record.json"
    data = json.loads(rec.read_text())
    data["all_checks_passed"] = False
    rec.write_text(json.dumps(data))
    problems = page_checks.recorded_page_problems(gal, root / "examples")
    joined = "\n".join(problems)
    assert f"{stem}: the recorded page has no figure" in joined
    assert f"{stem}: the recorded page has no captured output" in joined
    assert f"{stem}: its record reports a failed or missing correctness check" in joined
    others = [p for p in problems if not p.startswith(f"{stem}:")]
    assert others == []  # the other pages are untouched and healthy
    assert page_checks.recorded_page_problems(gal, root / "examples", exceptions={stem: "demo"}) == []


def test_stamp_goes_under_the_title():
    text = ".. _label:\n\n\nFused conv\n==========\n\nBody\n"
    stamp = docs_build.stamp_rst({"environment": {"gpu": "NVIDIA H200", "date_utc": "d", "commit": "c"}}, "plot_x")
    out = docs_build._insert_stamp(text, stamp)
    assert out.index("Measured on **NVIDIA H200**") > out.index("==========")
    assert out.index("Measured on") < out.index("Body")
    assert ":download:`JSON record <plot_x.record.json>`" in out
    assert docs_build._insert_stamp(text, "") == text


# -- GPUs below a page's requirement -------------------------------------------------------------


def test_requirements_are_read_from_the_page_without_running_it(root):
    sdpa = root / "examples" / "plot_05_sdpa_causal.py"
    assert skip_pages.declared_requirements(sdpa) == [((8, 0), "cuDNN fused attention")]
    assert skip_pages.unmet_requirements(sdpa, (7, 5)) == ["SM 8.0 or newer (cuDNN fused attention)"]
    assert skip_pages.unmet_requirements(sdpa, (9, 0)) == []
    assert skip_pages.declared_requirements(root / "examples" / "plot_02_conv_bias_relu.py") == []


def test_skip_page_is_healthy_and_says_why(tmp_path, root):
    gal = tmp_path / "auto_examples"
    shutil.copytree(root / "docs" / "auto_examples", gal)
    src = root / "examples" / "plot_05_sdpa_causal.py"
    remove_recording(gal, "plot_05_sdpa_causal")
    env = {"gpu": "Tesla T4", "sm": "7.5", "date_utc": "d", "commit": "c"}
    skip_pages.write_skip_page(src, gal, ["SM 8.0 or newer (cuDNN fused attention)"], env)
    text = (gal / "plot_05_sdpa_causal.rst").read_text()
    assert "skipped: needs SM 8.0 or newer (cuDNN fused attention)" in text
    assert "Tesla T4 (SM 7.5)" in text
    assert "What you will learn:" in text and "diagonal_band_right_bound=0" in text  # the topic is still explained
    assert (gal / "images" / "thumb" / "sphx_glr_plot_05_sdpa_causal_thumb.png").stat().st_size > 1000
    with zipfile.ZipFile(gal / "plot_05_sdpa_causal.zip") as z:  # the zipped download holds today's script
        assert z.read("plot_05_sdpa_causal.py") == src.read_bytes() and "plot_05_sdpa_causal.ipynb" in z.namelist()
    assert staleness.example_states(root / "examples", gal)[4].state == "fresh"
    assert page_checks.recorded_page_problems(gal, root / "examples") == []
    stamp = docs_build.stamp_rst(
        json.loads((gal / "plot_05_sdpa_causal.record.json").read_text()), "plot_05_sdpa_causal"
    )
    assert "Skipped on **Tesla T4**" in stamp


def test_record_examples_skips_a_page_this_gpu_cannot_run(tmp_path, root, monkeypatch):
    from gallery_build import history

    from cudnn_guide import environment

    docs = tmp_path / "docs"
    shutil.copytree(root / "docs" / "auto_examples", docs / "auto_examples")
    (docs / "data").mkdir()
    fake = dict(
        json.loads((root / "docs" / "auto_examples" / "recording.json").read_text())["environment"],
        gpu="Tesla T4",
        sm="7.5",
    )
    monkeypatch.setattr(environment, "collect", lambda: environment.EnvironmentRecord.from_dict(fake))
    seconds = recording.record_examples(
        docs, root / "examples", docs / "auto_examples", names=["plot_05_sdpa_causal.py"]
    )
    assert seconds == {"plot_05_sdpa_causal.py": 0.0}  # skipped: nothing was executed
    assert "skipped: needs SM 8.0" in (docs / "auto_examples" / "plot_05_sdpa_causal.rst").read_text()
    assert read_manifest(docs / "auto_examples")["environment"]["gpu"] == "Tesla T4"
    entries = history.load(docs / "data" / "history.jsonl")
    assert [e["example"] for e in entries] == ["plot_05_sdpa_causal"] and entries[0]["measurements"] == {}


def test_page_warnings_are_summarized_under_the_title():
    clock_warning = (
        "software power cap held the clock down (SM clock 1485 of 1980 MHz at the end); timings may be slower"
    )
    record = {
        "environment": {"gpu": "NVIDIA H200"},
        "measurements": [
            {"warnings": [clock_warning], "clocks": {"sm_mhz_end": 1485, "max_sm_mhz": 1980}},
            {
                "warnings": [
                    "software power cap held the clock down (SM clock 1335 ...)",
                    "large spread: IQR is 17% of the median",
                ],
                "clocks": {"sm_mhz_end": 1335, "max_sm_mhz": 1980},
            },
            {"warnings": [], "clocks": {}},
        ],
    }
    note = docs_build.warnings_rst(record)
    assert "2 of 3 measurements on this page carry a harness warning" in note
    assert "2 × the GPU's power cap held the SM clock below 97% of its maximum (lowest: 1335 of 1980 MHz)" in note
    assert "1 × a large spread" in note
    assert note in docs_build.stamp_rst(record, "plot_x")
    assert docs_build.warnings_rst({"measurements": [{"warnings": []}]}) == ""
    drift = "timings drifted -15% from the first to the last third of the run " + (
        "(clock or thermal throttling, or interference)"
    )
    note = docs_build.warnings_rst({"measurements": [{"warnings": [drift]}]})
    assert "1 × timings drifting" in note and "× thermal throttling" not in note  # a possible cause is not a finding
    thermal = "thermal throttling during 20% of the run (SM clock 1700 of 1980 MHz at the end)"
    assert "1 × thermal throttling" in docs_build.warnings_rst({"measurements": [{"warnings": [thermal]}]})


def test_cell_timer_writes_seconds_per_code_cell(tmp_path, monkeypatch):
    """Record mode times each executed code cell and writes them beside the page, in page order."""
    import time
    import types

    from sphinx_gallery import gen_rst

    def fake_execute(compiler, block, example_globals, script_vars, gallery_conf, file_conf):
        time.sleep(0.02 if block.lineno == 10 else 0.0)
        return "out"

    monkeypatch.setattr(gen_rst, "execute_code_block", fake_execute)
    cell_times.time_cells(tmp_path)
    timed = gen_rst.execute_code_block
    assert timed is not fake_execute
    cell_times.time_cells(tmp_path)  # a second install does not wrap twice
    assert gen_rst.execute_code_block is timed
    script_vars = {"src_file": "/x/examples/plot_99_demo.py", "execute_script": True}
    for lineno, kind, content in (
        (3, "text", "A title"),
        (10, "code", "# a comment\nx = slow()\n"),
        (20, "code", "y = 1"),
    ):
        block = types.SimpleNamespace(type=kind, lineno=lineno, content=content)
        assert gen_rst.execute_code_block(None, block, {}, script_vars, {}, {}) == "out"
    cells = cell_times.read_cell_times(tmp_path)["plot_99_demo.py"]
    assert [c["line"] for c in cells] == [10, 20]  # text blocks are not cells
    assert cells[0]["code"] == "x = slow()" and cells[1]["code"] == "y = 1"
    assert cells[0]["seconds"] >= 0.02 > cells[1]["seconds"]


def test_one_example_recording_build_reads_the_gallery_only(root, tmp_path):
    """The per-example recording build loads sphinx-gallery alone and reads no other page."""
    import subprocess
    import sys

    over = docs_build.record_only_overrides("auto_examples")
    assert over["extensions"] == ["sphinx_gallery.gen_gallery"]
    assert over["root_doc"] == "auto_examples/index" and over["include_patterns"] == ["auto_examples/**"]
    conf = (root / "docs" / "conf.py").read_text()
    assert "if RECORD_ONLY:" in conf and "record_only_overrides" in conf
    # a Sphinx project with these settings builds from the gallery alone, other pages unread
    src = tmp_path / "src"
    (src / "auto_examples").mkdir(parents=True)
    (src / "auto_examples" / "index.rst").write_text("Gallery\n=======\n\nSee :doc:`/methodology`.\n")
    (src / "broken.rst").write_text(".. this-directive-does-not-exist::\n")
    settings = {k: v for k, v in over.items() if k not in ("extensions", "extra_suppress_warnings")}
    settings["suppress_warnings"] = over["extra_suppress_warnings"]
    (src / "conf.py").write_text("".join(f"{k} = {v!r}\n" for k, v in settings.items()))
    out = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "dummy", str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr


def test_a_page_that_fails_in_its_fresh_process_stops_the_recording_by_name(tmp_path, root, monkeypatch):
    # The page's build runs in its own interpreter; on this CPU-only machine its conf.py cannot
    # collect a GPU environment, so the build fails there, and the caller must say which page failed.
    from cudnn_guide import environment

    for part in ("docs", "examples"):
        shutil.copytree(root / part, tmp_path / part, ignore=shutil.ignore_patterns("_build"))
    fake = json.loads((root / "docs" / "auto_examples" / "recording.json").read_text())["environment"]
    monkeypatch.setattr(environment, "collect", lambda: environment.EnvironmentRecord.from_dict(fake))
    if HAS_GPU:
        pytest.skip("on a GPU the page would record")
    with pytest.raises(RuntimeError, match=r"recording plot_08_cuda_graphs.py failed \(sphinx exit 2\)"):
        recording.record_examples(
            tmp_path / "docs",
            tmp_path / "examples",
            tmp_path / "docs" / "auto_examples",
            names=["plot_08_cuda_graphs.py"],
        )


def test_the_build_machinery_finds_the_repository_and_hashes_the_library(root, tmp_path, monkeypatch):
    import shutil

    import cudnn_guide

    assert recording.REPO_ROOT == root and (recording.REPO_ROOT / "examples").is_dir()
    before = package_md5()
    copy = tmp_path / "cudnn_guide"
    shutil.copytree(Path(cudnn_guide.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cudnn_guide, "__file__", str(copy / "__init__.py"))
    assert package_md5() == before  # the same sources hash the same, wherever they are
    # an edit in a subpackage's module changes it (the pages ran other code) ...
    conv = copy / "graphs" / "conv.py"
    conv.write_text(conv.read_text() + "\n# edited\n")
    edited = package_md5()
    assert edited != before
    # ... and so does moving a module, even with the same bytes
    (copy / "graphs" / "conv.py").rename(copy / "measure" / "conv.py")
    assert package_md5() not in (before, edited)


def test_each_page_starts_with_empty_compile_caches_unless_one_is_chosen(tmp_path, monkeypatch):
    for var in staging.COLD_CACHES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "warm"))  # chosen on purpose: kept
    chosen = staging.cold_caches(tmp_path / "page")
    assert chosen["TRITON_CACHE_DIR"] == str(tmp_path / "warm")
    for var in ("TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH"):
        path = Path(chosen[var])
        assert path.is_dir() and not any(path.iterdir()) and path.is_relative_to(tmp_path / "page")
    other = staging.cold_caches(tmp_path / "next page")  # the same process keeps what it was given
    assert other == chosen


def test_output_a_reader_should_not_see_is_noted_per_page(tmp_path):
    timing = "\n\n.. rst-class:: sphx-glr-timing\n\n   **Total running time of the script:** (0 minutes 1.0 seconds)\n"
    clean = ".. rst-class:: sphx-glr-script-out\n\n .. code-block:: none\n\n    * It is 1.30x faster.\n" + timing
    (tmp_path / "plot_01_clean.rst").write_text(clean)
    (tmp_path / "plot_02_noisy.rst").write_text(
        ".. rst-class:: sphx-glr-script-out\n\n .. code-block:: none\n\n"
        "    /opt/venv/torch/library.py:363: UserWarning: Overriding a previously registered kernel\n"
        '    <td id="T_1_row0_col6" class="data row0 col6" >nan</td>\n\n'
        "    * It is 1.30x faster.\n\n    1.0011987761040242\n" + timing
    )
    notes = page_checks.recorded_output_notes(tmp_path)
    assert notes == [
        "plot_02_noisy: 1 captured Python warning(s), first UserWarning: Overriding a previously registered kernel",
        "plot_02_noisy: a table shows 'nan' where a value is missing",
        "plot_02_noisy: a bare number (1.0011987761040242) is printed at the end of the page",
    ]
