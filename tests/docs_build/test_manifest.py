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
