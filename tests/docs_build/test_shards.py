"""Shards: record anywhere, merge anywhere, deterministically, refusing what does not fit."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from gallery_build import drift_bands, history, recording, shards, staleness
from gallery_build.manifest import describe_recording, package_md5, read_manifest
from gallery_build.shards import ShardError

PAGES = ["plot_01_environment.py", "plot_02_conv_bias_relu.py", "plot_03_autotuning.py"]


def _examples(tmp_path, root):
    """The examples as the committed gallery recorded them (its copy of each), so that a shard of its
    pages is consistent while an example is being edited in the checkout and not yet re-recorded."""
    examples = tmp_path / "recorded_examples"
    if not examples.exists():
        examples.mkdir()
        for page in sorted((root / "docs" / "auto_examples").glob("plot_*.py")):
            shutil.copy(page, examples / page.name)
    return examples


def _commit(gpu):
    """A git commit (hex, as `schema.check_environment` requires of a shard) that tells the GPUs' shards apart."""
    return hashlib.sha1(gpu.encode()).hexdigest()[:10]


def _env(root, gpu):
    env = json.loads((root / "docs" / "auto_examples" / "recording.json").read_text())["environment"]
    return dict(env, gpu=gpu, commit=_commit(gpu))


def _shard(tmp_path, root, name, gpu, pages):
    out = tmp_path / name
    shards.write_shard(
        out,
        root / "docs" / "auto_examples",
        _examples(tmp_path, root),
        root / "docs" / "data" / "history.jsonl",
        pages,
        {p: 10.0 for p in pages},
        _env(root, gpu),
    )
    for rec in (out / "auto_examples").glob("*.record.json"):  # as if that GPU had recorded them
        data = json.loads(rec.read_text())
        data["environment"]["gpu"] = gpu
        rec.write_text(json.dumps(data))
    manifest = json.loads((out / "shard.json").read_text())
    assert manifest["package_md5"] == package_md5()  # write_shard names the package that recorded it
    # these pages were recorded by the gallery's package, which the checkout may have moved on from
    manifest["package_md5"] = read_manifest(root / "docs" / "auto_examples")["package_md5"]
    (out / "shard.json").write_text(json.dumps(manifest))
    return out


def _docs(tmp_path, root, name):
    docs = tmp_path / name
    shutil.copytree(root / "docs", docs, ignore=shutil.ignore_patterns("_build", "generated"))
    return docs


def _digest(folder):
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def test_a_shard_holds_its_pages_history_and_manifest(tmp_path, root):
    shard = shards.read_shard(_shard(tmp_path, root, "a", "NVIDIA H200", PAGES[:2]))
    assert shard.gpu == "NVIDIA H200" and sorted(shard.pages) == PAGES[:2]
    files = {str(p) for p in shard.page_files(PAGES[1])}
    assert {
        "plot_02_conv_bias_relu.rst",
        "plot_02_conv_bias_relu.record.json",
        "plot_02_conv_bias_relu.py.md5",
        "images/sphx_glr_plot_02_conv_bias_relu_001.png",
    } <= files
    lines = [json.loads(x) for x in (shard.path / "history.jsonl").read_text().splitlines()]
    assert [e["example"] for e in lines] == ["plot_01_environment", "plot_02_conv_bias_relu"]


def test_merge_is_the_same_whatever_the_order_and_keeps_every_gpu(tmp_path, root):
    a = _shard(tmp_path, root, "h200", "NVIDIA H200", PAGES[:2])
    b = _shard(tmp_path, root, "b200", "NVIDIA B200", PAGES[1:])
    one, two = _docs(tmp_path, root, "one"), _docs(tmp_path, root, "two")
    shown = shards.merge([a, b], one, _examples(tmp_path, root))
    assert shards.merge([b, a], two, _examples(tmp_path, root)) == shown
    assert _digest(one / "auto_examples") == _digest(two / "auto_examples")
    assert _digest(one / "data") == _digest(two / "data")
    assert shown == {PAGES[0]: "NVIDIA H200", PAGES[1]: "NVIDIA B200", PAGES[2]: "NVIDIA B200"}
    by_gpu = one / "data" / shards.BY_GPU
    assert sorted(p.name for p in by_gpu.iterdir()) == ["nvidia-b200", "nvidia-h200"]  # the page both recorded
    manifest = read_manifest(one / "auto_examples")
    assert manifest["pages"][PAGES[1]]["gpu"] == "NVIDIA B200" and manifest["pages"][PAGES[0]]["commit"] == _commit(
        "NVIDIA H200"
    )
    assert staleness.stale_examples(_examples(tmp_path, root), one / "auto_examples") == []


def test_shards_of_one_gpu_model_with_different_pages_merge(tmp_path, root):
    # the common case: one model, the pages split over two machines (or two calls)
    a = _shard(tmp_path, root, "first", "NVIDIA H200", PAGES[:2])
    b = _shard(tmp_path, root, "second", "NVIDIA H200", PAGES[2:])
    manifest = json.loads((b / "shard.json").read_text())
    manifest["pages"][PAGES[2]]["seconds"] = 33.0
    manifest["package_md5"] = "md5-of-the-recording-package"  # as if recorded by another version
    (b / "shard.json").write_text(json.dumps(manifest))
    docs = _docs(tmp_path, root, "d")
    before = read_manifest(docs / "auto_examples")
    with pytest.raises(ShardError, match=r"cudnn_guide package md5 md5-of-the-recording-package vs"):
        shards.merge([a, b], docs, _examples(tmp_path, root))  # another package: only when asked for
    shown = shards.merge([a, b], docs, _examples(tmp_path, root), allow_other_environment=True)
    assert shown == dict.fromkeys(PAGES, "NVIDIA H200")
    merged = read_manifest(docs / "auto_examples")
    assert [merged["example_seconds"][p] for p in PAGES] == [10.0, 10.0, 33.0]  # each page's own shard
    assert merged["pages"][PAGES[2]]["package_md5"] == "md5-of-the-recording-package"  # the page's own package
    assert merged["pages"][PAGES[0]]["package_md5"] == before["package_md5"]
    # three pages of many do not describe the gallery: its environment and package stay the recording's
    assert (merged["environment"], merged["package_md5"]) == (before["environment"], before["package_md5"])
    assert f"{_commit('NVIDIA H200')} (3 pages)" in describe_recording(docs / "auto_examples")  # beside the others


def test_shards_holding_every_page_write_the_reproducibility_report(tmp_path, root):
    examples = tmp_path / "examples"  # a gallery of three pages, all of them in the shards
    examples.mkdir()
    for name in PAGES:
        shutil.copy(_examples(tmp_path, root) / name, examples / name)
    docs = _docs(tmp_path, root, "d")
    report = docs / "data" / recording.REPRODUCIBILITY
    report.unlink(missing_ok=True)
    shards.merge([_shard(tmp_path, root, "one", "NVIDIA H200", PAGES[:1])], docs, examples)
    assert not report.exists()  # a partial merge: no full recording to judge
    shards.merge([_shard(tmp_path, root, "all", "NVIDIA H200", PAGES)], docs, examples)
    lines = history.load(docs / "data" / "history.jsonl")  # the merge appended the shard's lines
    assert json.loads(report.read_text()) == json.loads(json.dumps(history.reproducibility(lines)))
    drift = drift_bands.drift(drift_bands.recordings(docs / "data"))  # the site's and the off-site recordings
    assert json.loads((docs / "data" / "drift.json").read_text()) == json.loads(json.dumps(drift))
    assert drift != drift_bands.drift(lines)  # docs/data's off-site recordings moved some headlines further


def test_merging_a_shard_twice_adds_its_history_lines_once(tmp_path, root):
    a = _shard(tmp_path, root, "h200", "NVIDIA H200", PAGES[:2])
    lines = (a / "history.jsonl").read_text().splitlines()
    fresh = [json.dumps(dict(json.loads(x), recorded_utc="2099-01-01 00:00 UTC")) for x in lines]
    (a / "history.jsonl").write_text("\n".join(fresh) + "\n")  # as if recorded just now
    docs = _docs(tmp_path, root, "d")
    before = len(history.load(docs / "data" / "history.jsonl"))
    shards.merge([a], docs, _examples(tmp_path, root))
    once = (docs / "data" / "history.jsonl").read_text()
    assert len(history.load(docs / "data" / "history.jsonl")) == before + 2
    shards.merge([a], docs, _examples(tmp_path, root))
    assert (docs / "data" / "history.jsonl").read_text() == once
    # widened again since (shards rewiden): merged again, its lines take the old ones' place, once
    widened = [{"name": "t", "value": 2.0, "unit": "x", "low": 1.5, "high": 2.5}]
    again = [dict(json.loads(x), headlines=widened) for x in fresh]
    (a / "history.jsonl").write_text("\n".join(json.dumps(e) for e in again) + "\n")
    shards.merge([a], docs, _examples(tmp_path, root))
    now = history.load(docs / "data" / "history.jsonl")
    assert len(now) == before + 2 and now[-2:] == again
    assert (docs / "data" / "history.jsonl").read_text().splitlines()[:before] == once.splitlines()[:before]


def test_a_page_that_ran_beats_a_skip_page_of_another_gpu(tmp_path, root):
    a = _shard(tmp_path, root, "h200", "NVIDIA H200", PAGES[:1])
    b = _shard(tmp_path, root, "b200", "NVIDIA B200", PAGES[:1])
    manifest = json.loads((b / "shard.json").read_text())
    manifest["pages"][PAGES[0]]["skipped"] = True  # B200 only wrote a "skipped: needs" page
    (b / "shard.json").write_text(json.dumps(manifest))
    rec = b / "auto_examples" / "plot_01_environment.record.json"
    data = json.loads(rec.read_text())
    data.setdefault("extra", {})["skipped"] = "needs SM 10.0 or newer"  # and its record says so
    rec.write_text(json.dumps(data))
    assert shards.merge([a, b], _docs(tmp_path, root, "d"), _examples(tmp_path, root)) == {PAGES[0]: "NVIDIA H200"}


def _refused(tmp_path, root, paths, match):
    docs = _docs(tmp_path, root, "target")
    before = _digest(docs)
    with pytest.raises(ShardError, match=match):
        shards.merge(paths, docs, _examples(tmp_path, root))
    assert _digest(docs) == before  # the target stays untouched


def test_no_shards_is_refused(tmp_path, root):
    _refused(tmp_path, root, [], "no shards given")


def test_a_shard_of_another_example_version_is_refused_by_name(tmp_path, root):
    a = _shard(tmp_path, root, "h200", "NVIDIA H200", PAGES[:2])
    with open(_examples(tmp_path, root) / PAGES[1], "a") as example:  # the example changed since
        example.write("print('one more line')\n")
    _refused(tmp_path, root, [a], rf"shard {a}: {PAGES[1]} was recorded from another version of the example")


def test_a_corrupt_record_in_a_shard_is_refused_naming_the_file(tmp_path, root):
    a = _shard(tmp_path, root, "h200", "NVIDIA H200", PAGES[:1])
    rec = a / "auto_examples" / "plot_01_environment.record.json"
    rec.write_text(rec.read_text()[:100])
    _refused(tmp_path, root, [a], rf"shard {a}: {rec}:1: not valid JSON")


def test_two_shards_claiming_one_page_on_one_gpu_are_refused(tmp_path, root):
    a = _shard(tmp_path, root, "h200-a", "NVIDIA H200", PAGES[:2])
    b = _shard(tmp_path, root, "h200-b", "NVIDIA H200", PAGES[1:])
    _refused(tmp_path, root, [a, b], f"both recorded {PAGES[1]} on NVIDIA H200")


def test_a_folder_without_a_shard_is_refused(tmp_path, root):
    (tmp_path / "empty").mkdir()
    _refused(tmp_path, root, [tmp_path / "empty"], "no shard.json")


def test_pages_recorded_on_several_gpus_give_a_table_across_gpus(tmp_path, root):
    a = _shard(tmp_path, root, "h200", "NVIDIA H200", PAGES[:2])
    b = _shard(tmp_path, root, "b200", "NVIDIA B200", PAGES[1:2])
    docs = _docs(tmp_path, root, "d")
    assert shards.across_gpus(docs / "data") == []  # the committed site: one GPU model
    shards.merge([a, b], docs, _examples(tmp_path, root))
    rows = shards.across_gpus(docs / "data")
    assert {r["gpu"] for r in rows} == {"NVIDIA H200", "NVIDIA B200"}
    assert {r["page"] for r in rows} == {"plot_02_conv_bias_relu"}  # only the page both recorded
    assert "shards.across_gpus" in (root / "docs" / "results.md").read_text()  # the results page shows them


def test_the_slurm_script_submits_one_task_per_group_and_a_merge_that_waits_for_them(tmp_path, root):
    import os
    import subprocess

    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "sbatch.log"
    (fake / "sbatch").write_text(f'#!/usr/bin/env bash\necho "$@" >> {log}\necho 4242\n')
    (fake / "sbatch").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", PAGES_GROUPS="a.py,b.py c.py d.py")
    env.pop("SLURM_ARRAY_TASK_ID", None)
    proc = subprocess.run(
        ["bash", str(root / "tools" / "scale" / "record_shards.sbatch")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    array, merge_job = log.read_text().splitlines()
    assert "--array=0-2" in array  # three groups, three tasks
    assert "--dependency=afterok:4242" in merge_job and "gallery_build.shards merge shards/shard-4242-*" in merge_job


def test_the_slurm_merge_job_keeps_a_checkout_path_with_a_space_and_a_semicolon_one_word(tmp_path, root):
    """``--wrap`` is a shell command line: an unquoted ``$PWD`` there split the path, and ran what follows a ';'."""
    import os
    import subprocess

    checkout = tmp_path / "my docs; touch PWNED; echo $HOME"
    checkout.mkdir()
    fake = tmp_path / "bin"
    fake.mkdir()
    calls, ran = tmp_path / "sbatch.calls", tmp_path / "python.calls"
    sbatch = f'#!/usr/bin/env bash\nprintf "%s\\0" "$@" >> "{calls}"\necho >> "{calls}"\necho 4242\n'
    (fake / "sbatch").write_text(sbatch)  # each call: its arguments, NUL-separated, on one line
    (fake / "python").write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$PWD" "$PYTHONPATH" "$*" >> "{ran}"\n')
    for tool in ("sbatch", "python"):
        (fake / tool).chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", PAGES_GROUPS="a.py b.py")
    for var in ("SLURM_ARRAY_TASK_ID", "SLURM_SUBMIT_DIR", "PYTHONPATH"):
        env.pop(var, None)
    script = root / "tools" / "scale" / "record_shards.sbatch"
    submitted = subprocess.run(
        ["bash", str(script)], cwd=checkout, env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert submitted.returncode == 0, submitted.stderr
    merge_call = calls.read_text().split("\n")[1].split("\0")
    (wrap,) = [a[len("--wrap=") :] for a in merge_call if a.startswith("--wrap=")]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = subprocess.run(
        ["bash", "-c", wrap], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert job.returncode == 0, job.stderr
    assert not list(tmp_path.rglob("PWNED")), f"the path's '; touch PWNED' ran as a command: {wrap}"
    merge, site = [ran.read_text().splitlines()[i : i + 3] for i in (0, 3)]
    assert merge[0] == str(checkout)  # the merge job runs in the checkout, the whole path one word
    assert merge[1] == f"{checkout}:{checkout}/docs/_ext"
    assert merge[2] == "-m gallery_build.shards merge shards/shard-4242-*"
    assert site[0] == str(checkout) and site[2] == "-m nox --no-venv -s docs"


def test_a_page_split_or_renamed_away_leaves_the_manifest(tmp_path, root):
    """The manifest keeps no entry for an example that no longer exists (issue 33 renamed plot_24's file)."""
    a = _shard(tmp_path, root, "first", "NVIDIA H200", PAGES[:1])
    docs = _docs(tmp_path, root, "d")
    path = docs / "auto_examples" / "recording.json"
    data = json.loads(path.read_text())
    gone = "plot_99_split_away.py"
    data["pages"][gone] = dict(data["pages"][PAGES[0]])
    data["example_seconds"][gone] = 12.0
    path.write_text(json.dumps(data))
    shards.merge([a], docs, _examples(tmp_path, root), allow_other_environment=True)
    merged = read_manifest(docs / "auto_examples")
    assert gone not in merged["pages"] and gone not in merged["example_seconds"]
    assert PAGES[1] in merged["pages"], "pages not merged keep their entries"


@pytest.mark.parametrize("argv", [["record", "--help"], ["merge", "-h"], ["--help"]])
def test_help_prints_the_usage_and_starts_nothing(argv, capsys, monkeypatch):
    monkeypatch.setattr(shards.recording, "record_examples", _never_called)
    shards._main(argv)
    assert capsys.readouterr().out.startswith("usage: python -m gallery_build.shards record SHARD_DIR")


def test_an_option_where_the_shard_dir_goes_is_refused_before_anything_starts(monkeypatch):
    monkeypatch.setattr(shards.recording, "record_examples", _never_called)
    with pytest.raises(SystemExit, match=r"needs SHARD_DIR first, got '--lanes'[\s\S]*usage:"):
        shards._main(["record", "--lanes", "3", "plot_05"])


def _never_called(*args, **kwargs):
    raise AssertionError("the recorder started")


def _scoped(path, scope):
    manifest = json.loads((path / "shard.json").read_text())
    manifest["turn_scope"] = scope
    (path / "shard.json").write_text(json.dumps(manifest))
    return path


@pytest.mark.parametrize("scopes", [("measured", "measured"), ("measured", "cell"), ("cell", None)])
def test_shards_of_either_turn_scope_merge(tmp_path, root, scopes):
    # until d51459d's recording met the bars, a shard whose cells shared the turn was refused
    a = _scoped(_shard(tmp_path, root, "h200", "NVIDIA H200", PAGES[:1]), scopes[0])
    b = _shard(tmp_path, root, "b", "NVIDIA H200", PAGES[1:2])
    if scopes[1]:
        b = _scoped(b, scopes[1])
    shown = shards.merge([a, b], _docs(tmp_path, root, "d"), _examples(tmp_path, root))
    assert shown == dict.fromkeys(PAGES[:2], "NVIDIA H200")


def test_a_shard_names_how_its_lanes_held_the_turn(tmp_path, root):
    a = _scoped(_shard(tmp_path, root, "h200", "NVIDIA H200", PAGES[:1]), "cell")
    assert shards.read_shard(a).turn_scope == "cell"
    b = _scoped(_shard(tmp_path, root, "b", "NVIDIA H200", PAGES[1:2]), "pages")
    with pytest.raises(ShardError, match="turn_scope is not one of cell, measured"):
        shards.read_shard(b)


def test_a_shard_recorded_with_another_round_budget_is_refused_and_one_malformed_is_corrupt(tmp_path, root):
    a = _shard(tmp_path, root, "h200", "NVIDIA H200", PAGES[:1])
    manifest = json.loads((a / "shard.json").read_text())
    (a / "shard.json").write_text(json.dumps({**manifest, "round_budget_ms": 12.5}))
    assert shards.read_shard(a).round_budget_ms == 12.5
    _refused(tmp_path, root, [a], rf"shard {a}: recorded with CUDNN_GUIDE_ROUND_BUDGET_MS=12.5 .* Nothing was merged")
    for bad in (0, -1, "fast", True):
        (a / "shard.json").write_text(json.dumps({**manifest, "round_budget_ms": bad}))
        with pytest.raises(ShardError, match="round_budget_ms is not a positive number"):
            shards.read_shard(a)


def test_each_merged_page_keeps_the_turn_scope_its_shard_was_recorded_with(tmp_path, root):
    a = _scoped(_shard(tmp_path, root, "h200", "NVIDIA H200", PAGES[:1]), "measured")
    b = _shard(tmp_path, root, "b", "NVIDIA H200", PAGES[1:2])  # one lane: no scope
    docs = _docs(tmp_path, root, "d")
    shards.merge([a, b], docs, _examples(tmp_path, root))
    pages = read_manifest(docs / "auto_examples")["pages"]
    assert pages[PAGES[0]]["turn_scope"] == "measured" and "turn_scope" not in pages[PAGES[1]]


def test_a_partial_merge_names_the_sources_of_the_pages_it_left_as_they_were(tmp_path, root):
    # one page re-recorded at a later commit (its example changed): the other pages still come from the
    # recording before, and the manifest must say so (seen merging plot_15 alone over 2cd522f's recording)
    docs = _docs(tmp_path, root, "d")
    before = read_manifest(docs / "auto_examples")
    kept = {f"{e['gpu']} @ {e['commit']}" for e in before["pages"].values()}
    a = _shard(tmp_path, root, "one", "NVIDIA H200", PAGES[:1])
    shards.merge([a], docs, _examples(tmp_path, root))
    merged = read_manifest(docs / "auto_examples", checked=True)
    assert merged["pages"][PAGES[0]]["commit"] == _commit("NVIDIA H200")
    assert merged["merged_from"] == sorted(kept | {f"NVIDIA H200 @ {_commit('NVIDIA H200')}"})
    assert len(merged["merged_from"]) >= 2


def test_a_partial_merge_over_a_manifest_without_pages_names_its_environment_and_drops_a_source_recorded_over(
    tmp_path, root
):
    docs = _docs(tmp_path, root, "d")
    path = docs / "auto_examples" / "recording.json"
    bare = json.loads(path.read_text())
    old_env = dict(bare["environment"], gpu="NVIDIA A100-SXM4-80GB", commit="a0a0a0a")
    bare.update(environment=old_env, merged_from=["NVIDIA B200 @ b0b0b0b"])  # a stale name: none of its pages left
    bare.pop("pages")
    path.write_text(json.dumps(bare))
    a = _shard(tmp_path, root, "one", "NVIDIA H200", PAGES[:1])
    shards.merge([a], docs, _examples(tmp_path, root), allow_other_environment=True)
    merged = read_manifest(docs / "auto_examples", checked=True)
    assert merged["merged_from"] == ["NVIDIA A100-SXM4-80GB @ a0a0a0a", f"NVIDIA H200 @ {_commit('NVIDIA H200')}"]
