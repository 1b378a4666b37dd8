"""The recorder: each page in its own fresh process, its caches cold, its failure named (gallery_build.recording)."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import HAS_GPU
from gallery_build import hooks as docs_build
from gallery_build import recording, staging
from gallery_build.manifest import read_manifest


def test_record_examples_skips_a_page_this_gpu_cannot_run(tmp_path, root, monkeypatch):
    from gallery_build import history

    from cudnn_guide import environment

    docs = tmp_path / "docs"
    shutil.copytree(root / "docs" / "auto_examples", docs / "auto_examples")
    with open(docs / "auto_examples" / "plot_05_sdpa_causal.py", "a") as old_copy:
        old_copy.write("\nrecorded_before = True\n")  # the gallery's copy is of older code
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
    manifest = read_manifest(docs / "auto_examples")
    assert manifest["pages"]["plot_05_sdpa_causal.py"]["gpu"] == "Tesla T4"  # where this page was recorded
    assert manifest["environment"]["gpu"] == "NVIDIA H200"  # one page never describes the gallery
    assert manifest["pages"]["plot_04_matmul_epilogue.py"]["gpu"] == "NVIDIA H200"
    entries = history.load(docs / "data" / "history.jsonl")
    assert [e["example"] for e in entries] == ["plot_05_sdpa_causal"] and entries[0]["measurements"] == {}
    # the line names the code it stands for: the example as it is now, not the copy recorded before
    assert entries[0]["code_md5"] == history.code_digest((root / "examples" / "plot_05_sdpa_causal.py").read_text())


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


def test_a_profiled_page_build_leaves_its_pstats_and_its_exit_code(tmp_path, monkeypatch):
    import pstats

    import sphinx.cmd.build

    for var in (*staging.COLD_CACHES, recording.MODE_ENV, recording.ONLY_ENV):
        monkeypatch.setenv(var, "")  # remembers the variable's state, so what the build sets is undone
        monkeypatch.delenv(var)
    monkeypatch.setenv(recording.PROFILE_ENV, str(tmp_path / "prof"))
    seen = []

    def fake_build(args):
        seen.append(args)
        sum(range(10_000))
        return 3

    monkeypatch.setattr(sphinx.cmd.build, "build_main", fake_build)
    assert recording._build_one_example("docs", str(tmp_path / "out"), "plot_42_probe.py") == 3
    assert seen == [["-b", "dummy", "-q", "docs", str(tmp_path / "out")]]
    stats = pstats.Stats(str(tmp_path / "prof" / "plot_42_probe.pstats"))
    assert any(name == "fake_build" for _, _, name in stats.stats)


def test_interpreters_told_not_to_write_bytecode_share_it_in_the_recordings_folder(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    assert staging.shared_bytecode(tmp_path / "b", dont_write=False) == {}  # Python writes its own: leave it
    env = staging.shared_bytecode(tmp_path / "bytecode", dont_write=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "probe_module.py").write_text("VALUE = 42\n")
    base = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path / "src")}
    base.pop("PYTHONPYCACHEPREFIX", None)
    code = "import sys, probe_module; print(probe_module.VALUE, sys.flags.dont_write_bytecode)"
    told_not_to = subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True, check=True)
    assert told_not_to.stdout.split() == ["42", "1"]
    assert not list(tmp_path.rglob("*.pyc"))  # the builder's setting: every process compiles from source
    stamps = []
    for _ in range(2):  # the first page writes it, the next reads it
        shared = {**base, **env}
        run = subprocess.run([sys.executable, "-c", code], env=shared, capture_output=True, text=True, check=True)
        assert run.stdout.split() == ["42", "0"]
        written = list((tmp_path / "bytecode").rglob("probe_module*.pyc"))
        assert len(written) == 1 and not (tmp_path / "src" / "__pycache__").exists()  # nothing beside the sources
        stamps.append(written[0].stat().st_mtime_ns)
    assert stamps[0] == stamps[1]  # read, not rewritten


@pytest.mark.parametrize("argv", [["record", "--help"], ["-h"], ["record", "5", "--help"], ["restamp", "--help"]])
def test_recording_help_prints_the_usage_and_records_nothing(argv, capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the recorder started")

    monkeypatch.setattr(recording, "record_examples", never)
    monkeypatch.setattr(recording, "restamp_text_edit", never)
    monkeypatch.setattr(recording, "stop_on_sigterm", lambda: None)
    recording._main(argv)
    assert capsys.readouterr().out.startswith("usage: python -m gallery_build.recording record")


def test_a_traced_page_in_lanes_writes_every_turn_it_held(tmp_path, monkeypatch):
    import sys

    import sphinx.cmd.build
    from gallery_build import gpu_turns

    from cudnn_guide import collector

    for var in (*staging.COLD_CACHES, recording.MODE_ENV, recording.ONLY_ENV, recording.PROFILE_ENV):
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.setenv(gpu_turns.TURN_ENV, str(tmp_path / "gpu-0.turn"))
    monkeypatch.setenv(gpu_turns.SCOPE_ENV, "measured")
    monkeypatch.setenv(gpu_turns.TRACE_ENV, str(tmp_path / "trace"))
    monkeypatch.setattr(gpu_turns, "_CURRENT", None)
    monkeypatch.setattr(gpu_turns, "pin_to_lane_cpus", lambda: None)
    monkeypatch.setattr(gpu_turns, "_drain", lambda: True)

    def fake_build(args):
        turn = gpu_turns.current()
        with turn.held():  # a cell: shared, then a measured block alone inside it
            with turn.exclusive():
                pass
        return 0

    monkeypatch.setattr(sphinx.cmd.build, "build_main", fake_build)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "plot_42_probe.py").write_text("x = 1\n")  # reads no clock: cells share the turn
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # install's import hooks end with the test
    try:
        done = recording._build_one_example(str(tmp_path / "docs"), str(tmp_path / "out"), "plot_42_probe.py")
    finally:
        collector.hold_while_measuring(None)  # install's holder and aside, too
        collector.give_way_with(None)
    assert done[0] == 0
    trace = json.loads((tmp_path / "trace" / "plot_42_probe.turns.json").read_text())
    assert trace["page"] == "plot_42_probe.py"
    assert [t["mode"] for t in trace["turns"]] == ["shared", "exclusive", "shared"]
    for t in trace["turns"]:
        assert t["asked"] <= t["taken"] <= t["given"]
    assert all(a["given"] <= b["taken"] for a, b in zip(trace["turns"], trace["turns"][1:]))
