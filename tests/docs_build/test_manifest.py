"""recording.json: where, when and with which code the pages were recorded (gallery_build.manifest)."""

import hashlib
import json
import shutil
from pathlib import Path

from conftest import tiny_gallery
from gallery_build import recording
from gallery_build.manifest import describe_recording, package_md5, read_manifest, write_manifest


def test_manifest_round_trip(tmp_path):
    ex, gal = tiny_gallery(tmp_path)
    write_manifest(gal, ex, {"gpu": "NVIDIA H200", "commit": "abc"}, build_seconds=12.5)
    man = read_manifest(gal)
    assert man["examples"] == {"plot_a.py": hashlib.md5(b"print(1)\n").hexdigest()}
    assert "NVIDIA H200" in describe_recording(gal)
    assert describe_recording(tmp_path) == "no GPU recording has been committed yet"


def test_the_stamp_counts_each_commits_pages(tmp_path):
    ex, gal = tiny_gallery(tmp_path)
    write_manifest(gal, ex, {"gpu": "NVIDIA H200", "commit": "abc"}, build_seconds=1.0)
    man = read_manifest(gal)
    man["pages"] = {"a.py": {"commit": "abc"}, "b.py": {"commit": "abc"}, "c.py": {"commit": "def"}}
    (gal / "recording.json").write_text(json.dumps(man))
    assert "commits abc (2 pages), def (1 page)" in describe_recording(gal)


def test_manifest_keeps_the_full_recording_time_across_partial_recordings(tmp_path):
    """Recording one page later updates its time but never passes it off as the gallery's."""
    ex, gal = tiny_gallery(tmp_path)
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


def test_the_build_machinery_finds_the_repository_and_hashes_the_library(root, tmp_path, monkeypatch):

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


def test_recording_some_pages_keeps_where_the_others_were_recorded(tmp_path):
    """A merged recording names each page's GPU and commit; recording one page afresh must not pass
    the others off as recorded by this run (the home page's stamp counts the commits)."""
    ex, gal = tiny_gallery(tmp_path)
    (ex / "plot_b.py").write_text("print(2)\n")
    h200 = {"gpu": "NVIDIA H200", "commit": "merged1", "date_utc": "2026-12-01 10:00 UTC", "torch": "2.11.0"}
    write_manifest(gal, ex, h200, example_seconds={"plot_a.py": 5.0, "plot_b.py": 6.0}, full_run=True)
    man = read_manifest(gal)
    assert {p["commit"] for p in man["pages"].values()} == {"merged1"}
    man["merged_from"] = ["NVIDIA H200 @ merged1"]  # as shards.merge leaves it
    man["pages"]["plot_a.py"]["turn_scope"] = "measured"
    (gal / "recording.json").write_text(json.dumps(man))

    a100 = {"gpu": "NVIDIA A100-SXM4-80GB", "commit": "reader2", "date_utc": "2026-12-03 09:00 UTC"}
    write_manifest(gal, ex, a100, example_seconds={"plot_b.py": 9.0}, full_run=False, turn_scope="cell")
    man = read_manifest(gal)
    assert man["pages"]["plot_a.py"]["commit"] == "merged1"
    assert man["pages"]["plot_a.py"]["turn_scope"] == "measured"
    assert man["pages"]["plot_b.py"]["gpu"] == "NVIDIA A100-SXM4-80GB"
    assert man["pages"]["plot_b.py"]["commit"] == "reader2"
    assert man["pages"]["plot_b.py"]["turn_scope"] == "cell"
    assert man["pages"]["plot_b.py"]["date_utc"] == "2026-12-03 09:00 UTC"
    assert man["environment"]["gpu"] == "NVIDIA H200"  # one page never describes the gallery
    assert man["merged_from"] == ["NVIDIA A100-SXM4-80GB @ reader2", "NVIDIA H200 @ merged1"]
    stamp = describe_recording(gal)
    assert "merged1 (1 page)" in stamp and "reader2 (1 page)" in stamp

    write_manifest(
        gal, ex, dict(a100, commit="full3"), example_seconds={"plot_a.py": 4.0, "plot_b.py": 8.0}, full_run=True
    )
    man = read_manifest(gal)
    assert {p["commit"] for p in man["pages"].values()} == {"full3"}
    assert "merged_from" not in man and man["environment"]["commit"] == "full3"
    assert "turn_scope" not in man["pages"]["plot_a.py"]  # recorded one page at a time


def test_a_partial_run_over_a_manifest_without_pages_names_both_machines(tmp_path):
    """A manifest from before pages were kept (or a record-mode Sphinx build's) has the gallery's environment
    only: the pages not recorded now keep it, so the stamp never gives them the new run's commit."""
    ex, gal = tiny_gallery(tmp_path)
    (ex / "plot_b.py").write_text("print(2)\n")
    old = {"gpu": "NVIDIA H200", "commit": "aaaaaaa", "date_utc": "2026-11-30 08:00 UTC", "torch": "2.11.0"}
    (gal / "recording.json").write_text(json.dumps({"environment": old, "package_md5": "0" * 32}))
    new = {"gpu": "NVIDIA H100 80GB HBM3", "commit": "bbbbbbb", "torch": "2.11.0"}  # no date_utc: the run's own
    write_manifest(gal, ex, new, build_seconds=3.0, example_seconds={"plot_b.py": 3.0}, turn_scope="measured")
    man = read_manifest(gal, checked=True)  # the site build's check: every string as the pages need it
    assert man["pages"]["plot_a.py"]["commit"] == "aaaaaaa" and man["pages"]["plot_a.py"]["package_md5"] == "0" * 32
    assert man["pages"]["plot_b.py"]["commit"] == "bbbbbbb" and man["pages"]["plot_b.py"]["date_utc"].endswith(" UTC")
    assert man["merged_from"] == ["NVIDIA H100 80GB HBM3 @ bbbbbbb", "NVIDIA H200 @ aaaaaaa"]
    stamp = describe_recording(gal)
    assert "aaaaaaa (1 page)" in stamp and "bbbbbbb (1 page)" in stamp


def test_a_bare_old_manifest_still_validates_after_a_partial_run(tmp_path):
    """What an old manifest does not say (a date, a package) is left out of the pages it stands for, not null."""
    ex, gal = tiny_gallery(tmp_path)
    (ex / "plot_b.py").write_text("print(2)\n")
    (gal / "recording.json").write_text(json.dumps({"environment": {"gpu": "NVIDIA H200", "commit": "aaaaaaa"}}))
    env = {"gpu": "NVIDIA H200", "commit": "bbbbbbb", "date_utc": "2026-12-03 10:00 UTC"}
    write_manifest(gal, ex, env, example_seconds={"plot_b.py": 1.0})
    man = read_manifest(gal, checked=True)
    assert man["pages"]["plot_a.py"] == {"gpu": "NVIDIA H200", "commit": "aaaaaaa", "software": {}}
    assert man["package_md5"] == package_md5()
