"""`shards merge` trusts nothing it is given (issue 31): links, names, incomplete or damaged pages,
another environment, and a merge cut short all leave the gallery as it was."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from gallery_build import shards, staleness
from gallery_build.manifest import describe_recording, read_manifest
from gallery_build.shards import ShardError

PAGES = ["plot_01_environment.py", "plot_02_conv_bias_relu.py"]
STEM = "plot_02_conv_bias_relu"


def _examples(tmp_path, root):
    """The examples as the committed gallery recorded them (its copy of each): a shard of its pages
    stays consistent while an example is edited in the checkout and not yet re-recorded."""
    examples = tmp_path / "recorded_examples"
    if not examples.exists():
        examples.mkdir()
        for page in sorted((root / "docs" / "auto_examples").glob("plot_*.py")):
            shutil.copy(page, examples / page.name)
    return examples


def _shard(tmp_path, root, name="shard", pages=PAGES, **environment):
    """A shard of committed pages, as `shards record` writes it, recorded by the gallery's package."""
    gallery = root / "docs" / "auto_examples"
    manifest = read_manifest(gallery)
    out = tmp_path / name
    shards.write_shard(
        out,
        gallery,
        _examples(tmp_path, root),
        root / "docs" / "data" / "history.jsonl",
        pages,
        {p: 10.0 for p in pages},
        dict(manifest["environment"], **environment),
    )
    written = json.loads((out / "shard.json").read_text())
    written["package_md5"] = manifest["package_md5"]
    (out / "shard.json").write_text(json.dumps(written))
    return out


def _docs(tmp_path, root, name="docs"):
    docs = tmp_path / name
    shutil.copytree(root / "docs", docs, ignore=shutil.ignore_patterns("_build", "generated"))
    return docs


def _digest(folder):
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode() + b"\0")
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


def _refused(tmp_path, root, shard, match, docs=None, **kwargs):
    """Merging ``shard`` raises ShardError matching ``match``, and the target docs stay byte-identical."""
    docs = docs or _docs(tmp_path, root, f"target-{len(list(tmp_path.glob('target*')))}")
    before = _digest(docs)
    with pytest.raises(ShardError, match=match) as info:
        shards.merge([shard], docs, _examples(tmp_path, root), **kwargs)
    assert _digest(docs) == before, "a refused merge changed the target docs"
    assert "Fix:" in str(info.value), f"the refusal names no fix: {info.value}"
    return docs


# -- links and special files ---------------------------------------------------------------------


def test_a_shard_file_that_links_to_any_file_on_the_machine_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    secret = tmp_path / "secret.txt"
    secret.write_text("a private key\n")
    page = shard / "auto_examples" / f"{STEM}.rst"
    page.unlink()
    page.symlink_to(secret)
    docs = _refused(tmp_path, root, shard, rf"{page} is a symbolic link \(to {secret}\)")
    assert "a private key" not in (docs / "auto_examples" / f"{STEM}.rst").read_text()


def test_a_shard_whose_files_link_into_the_gallery_deletes_nothing(tmp_path, root):
    """The probe: links to the target's own files made the old merge delete 22 committed files of 2 pages."""
    shard = _shard(tmp_path, root)
    docs = _docs(tmp_path, root, "target")
    for path in sorted((shard / "auto_examples").rglob("*")):
        if path.is_file():
            target = docs / "auto_examples" / path.relative_to(shard / "auto_examples")
            path.unlink()
            path.symlink_to(target)
    committed = sorted(p.name for p in (docs / "auto_examples").rglob("*") if STEM in p.name)
    _refused(tmp_path, root, shard, "is a symbolic link", docs=docs)
    assert sorted(p.name for p in (docs / "auto_examples").rglob("*") if STEM in p.name) == committed


def test_a_linked_folder_in_a_shard_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    images = shard / "auto_examples" / "images"
    shutil.move(images, tmp_path / "images-elsewhere")
    images.symlink_to(tmp_path / "images-elsewhere")
    _refused(tmp_path, root, shard, rf"{images} is a symbolic link")


def test_a_hard_link_in_a_shard_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    cost = shard / "auto_examples" / f"{STEM}.cost.json"
    cost.unlink()
    os.link(outside, cost)
    _refused(tmp_path, root, shard, rf"{cost} is a hard link")


def test_a_fifo_in_a_shard_is_refused_without_blocking(tmp_path, root):
    shard = _shard(tmp_path, root)
    cells = shard / "auto_examples" / f"{STEM}.cells.json"
    cells.unlink()
    os.mkfifo(cells)  # reading it would wait for a writer forever
    _refused(tmp_path, root, shard, rf"{cells} is not a plain file")


# -- page names ------------------------------------------------------------------------------------


def test_a_page_named_after_a_file_outside_the_examples_is_refused(tmp_path, root):
    """The probe: ``../README.md`` exists beside examples/, and the old merge wrote README.* into the gallery."""
    shard = _shard(tmp_path, root, pages=PAGES[:1])
    manifest = json.loads((shard / "shard.json").read_text())
    manifest["pages"]["../README.md"] = manifest["pages"].pop(PAGES[0])
    (shard / "shard.json").write_text(json.dumps(manifest))
    gallery = shard / "auto_examples"
    for path in sorted(gallery.rglob("*plot_01_environment*")):
        path.rename(path.with_name(path.name.replace("plot_01_environment", "README")))
    assert (root / "examples" / "../README.md").exists()  # the name the old check accepted
    docs = _refused(tmp_path, root, shard, r"names a page '../README.md', which is no example's file name")
    assert not list((docs / "auto_examples").rglob("README*"))


def test_a_page_that_is_not_an_example_here_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root, pages=PAGES[:1])
    (_examples(tmp_path, root) / PAGES[0]).unlink()  # an example since removed
    _refused(tmp_path, root, shard, rf"{PAGES[0]} is not an example here")


def test_a_file_of_no_page_in_a_shard_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    stray = shard / "auto_examples" / "index.rst"
    stray.write_text("a gallery index the shard has no business replacing\n")
    _refused(tmp_path, root, shard, rf"{stray} belongs to no page shard.json lists")


# -- complete and intact pages ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "missing",
    [
        "images/sphx_glr_plot_02_conv_bias_relu_001.png",
        "images/thumb/sphx_glr_plot_02_conv_bias_relu_thumb.png",
        f"{STEM}.cost.json",
        f"{STEM}.cells.json",
        f"{STEM}.py",
        f"{STEM}.py.md5",
        f"{STEM}.rst",
        f"{STEM}.ipynb",
        f"{STEM}.zip",
        f"{STEM}.record.json",
    ],
)
def test_a_page_missing_any_file_of_its_recording_is_refused(tmp_path, root, missing):
    shard = _shard(tmp_path, root)
    (shard / "auto_examples" / missing).unlink()
    name = missing.rsplit("/", 1)[-1]
    _refused(tmp_path, root, shard, rf"page {PAGES[1]} (has no .*{name}|shows .*{name}, which the shard lacks)")


def test_a_page_that_ran_without_a_figure_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    (shard / "auto_examples" / "images" / f"sphx_glr_{STEM}_001.png").unlink()
    rst = shard / "auto_examples" / f"{STEM}.rst"
    rst.write_text("".join(line for line in rst.read_text().splitlines(True) if "sphx_glr_" not in line))
    _refused(tmp_path, root, shard, rf"page {PAGES[1]} shows no figure")


def test_a_figure_that_does_not_decode_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    figure = shard / "auto_examples" / "images" / f"sphx_glr_{STEM}_001.png"
    figure.write_bytes(figure.read_bytes()[:200])  # truncated
    _refused(tmp_path, root, shard, rf"figure {figure} does not decode")


def test_a_figure_the_page_does_not_show_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    images = shard / "auto_examples" / "images"
    shutil.copy(images / f"sphx_glr_{STEM}_001.png", images / f"sphx_glr_{STEM}_002.png")
    _refused(tmp_path, root, shard, rf"does not show images/sphx_glr_{STEM}_002.png")


def test_an_md5_file_that_is_not_the_shards_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    md5 = shard / "auto_examples" / f"{PAGES[1]}.md5"
    md5.write_text("0" * 32)
    _refused(tmp_path, root, shard, rf"{md5} holds '0{{32}}', shard.json says [0-9a-f]{{32}}")


def test_a_script_copy_that_is_not_the_recorded_example_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    copy = shard / "auto_examples" / f"{STEM}.py"
    copy.write_text(copy.read_text() + "import os; os.system('true')\n")
    _refused(tmp_path, root, shard, rf"{copy} is not the example shard.json names")


def test_a_zip_that_is_not_the_pages_download_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    (shard / "auto_examples" / f"{STEM}.zip").write_bytes(b"PK not a zip")
    _refused(tmp_path, root, shard, rf"{STEM}.zip is not the page's download")


def test_a_history_line_holding_nan_in_a_shard_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    lines = (shard / "history.jsonl").read_text().splitlines()
    entry = json.loads(lines[1])
    label = next(iter(entry["measurements"]))
    entry["measurements"][label]["median_ms"] = float("nan")
    lines[1] = json.dumps(entry)
    (shard / "history.jsonl").write_text("\n".join(lines) + "\n")
    _refused(tmp_path, root, shard, r"history.jsonl:2: field measurements\[.*\]\.median_ms is nan")


# -- the shape of every file (gallery_build.schema, as the build checks it) ----------------------


def _edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_gpu_name_carrying_html_in_shard_json_is_refused(tmp_path, root):
    """The probe: gpu="<script>…" was merged into every page's stamp; the next build then failed."""
    shard = _shard(tmp_path, root, gpu="<script>alert(1)</script>")
    _refused(tmp_path, root, shard, r"shard\.json: field 'environment\.gpu': .* is not a GPU name")


def test_a_commit_that_is_a_list_in_shard_json_is_refused(tmp_path, root):
    """The probe: environment.commit=["x"] was merged."""
    shard = _shard(tmp_path, root, commit=["x"])
    _refused(tmp_path, root, shard, r"shard\.json: field 'environment\.commit': must be a string, found list")


def test_a_nan_headline_in_a_shard_record_is_refused(tmp_path, root):
    """The probe: a record whose headline is NaN was merged."""
    shard = _shard(tmp_path, root)
    _edit_json(shard / "auto_examples" / f"{STEM}.record.json", lambda r: r["headlines"][0].update(value=float("nan")))
    _refused(
        tmp_path,
        root,
        shard,
        rf"{STEM}\.record\.json: field 'headlines\[0\]\.value': must be a finite number, found nan",
    )


def test_a_record_of_another_shape_in_a_shard_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    _edit_json(shard / "auto_examples" / f"{STEM}.record.json", lambda r: r["environment"].update(gpu="<b>"))
    _refused(tmp_path, root, shard, rf"{STEM}\.record\.json: field 'environment\.gpu'")


def test_a_negative_run_time_in_a_shard_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    _edit_json(shard / "auto_examples" / f"{STEM}.cost.json", lambda c: c.update(time=-1.0))
    _refused(tmp_path, root, shard, rf"{STEM}\.cost\.json: field 'time': must be positive")


def test_cell_times_of_another_shape_in_a_shard_are_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    _edit_json(shard / "auto_examples" / f"{STEM}.cells.json", lambda c: c.update(cells="all of them"))
    _refused(tmp_path, root, shard, rf"{STEM}\.cells\.json: field 'cells': must be a JSON list")


def _history_line(shard, change):
    lines = (shard / "history.jsonl").read_text().splitlines()
    number = next(i for i, line in enumerate(lines) if json.loads(line)["example"] == STEM)
    entry = json.loads(lines[number])
    change(entry)
    lines[number] = json.dumps(entry)
    (shard / "history.jsonl").write_text("\n".join(lines) + "\n")
    return number + 1


def test_a_negative_median_in_a_shard_history_line_is_refused(tmp_path, root):
    """The probe: history.check_entry accepted a negative median; the build's schema does not."""
    shard = _shard(tmp_path, root)
    number = _history_line(
        shard, lambda e: e["measurements"][next(iter(e["measurements"]))].update(median_ms=-0.5, q1_ms=-0.6, q3_ms=-0.4)
    )
    _refused(tmp_path, root, shard, rf"history\.jsonl:{number}: field 'measurements\[?.*median_ms': must be positive")


def test_a_history_line_with_a_gpu_name_carrying_html_in_a_shard_is_refused(tmp_path, root):
    shard = _shard(tmp_path, root)
    number = _history_line(shard, lambda e: e.update(gpu="<img src=x onerror=alert(1)>"))
    _refused(tmp_path, root, shard, rf"history\.jsonl:{number}: field 'gpu': .* is not a GPU name")


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"time": ' + "1" * 5000 + "}", r"not valid JSON \(Exceeds the limit"),
        ("[" * 100_000 + "]" * 100_000, r"not valid JSON \(nested too deeply to parse"),
    ],
    ids=["huge_int", "deep_nesting"],
)
def test_json_that_python_cannot_parse_in_a_shard_is_refused(tmp_path, root, text, problem):
    """A 5000-digit integer raised AttributeError (no .msg) and deep nesting RecursionError, not a refusal."""
    shard = _shard(tmp_path, root)
    (shard / "auto_examples" / f"{STEM}.cost.json").write_text(text)
    _refused(tmp_path, root, shard, rf"{STEM}\.cost\.json: {problem}")


@pytest.mark.parametrize("text", ["1" * 5000, "[" * 100_000 + "]" * 100_000], ids=["huge_int", "deep_nesting"])
def test_a_history_line_that_python_cannot_parse_in_a_shard_is_refused(tmp_path, root, text):
    shard = _shard(tmp_path, root)
    with (shard / "history.jsonl").open("a") as f:
        f.write(text + "\n")
    number = len((shard / "history.jsonl").read_text().splitlines())
    _refused(tmp_path, root, shard, rf"history\.jsonl:{number}: line is not valid JSON")


# -- the environment -------------------------------------------------------------------------------


def test_a_partial_shard_with_other_software_is_refused(tmp_path, root):
    """The probe: 2 pages recorded with another cuDNN and package replaced the whole gallery's environment."""
    shard = _shard(tmp_path, root, cudnn_backend="9.99.0")
    _refused(tmp_path, root, shard, r"recorded with other software than the gallery .*cudnn_backend 9\.99\.0 vs")
    manifest = json.loads((shard / "shard.json").read_text())
    manifest["environment"]["cudnn_backend"] = read_manifest(root / "docs" / "auto_examples")["environment"][
        "cudnn_backend"
    ]
    manifest["package_md5"] = "0" * 32
    (shard / "shard.json").write_text(json.dumps(manifest))
    _refused(tmp_path, root, shard, r"cudnn_guide package md5 0{32} vs")


def test_with_the_flag_each_page_keeps_its_own_environment_and_the_gallery_its_own(tmp_path, root):
    shard = _shard(tmp_path, root, cudnn_backend="9.99.0", torch="2.99.0")
    docs = _docs(tmp_path, root)
    before = read_manifest(docs / "auto_examples")
    described = describe_recording(docs / "auto_examples")
    shards.merge([shard], docs, _examples(tmp_path, root), allow_other_environment=True)
    after = read_manifest(docs / "auto_examples")
    assert after["environment"] == before["environment"] and after["package_md5"] == before["package_md5"]
    for name in PAGES:
        assert after["pages"][name]["software"]["cudnn_backend"] == "9.99.0"
        assert after["pages"][name]["software"]["torch"] == "2.99.0"
    untouched = "plot_03_autotuning.py"
    assert after["pages"][untouched] == before["pages"][untouched]
    # the home page's line still names the gallery's software, not the two pages'
    assert describe_recording(docs / "auto_examples").split(") on ")[0] == described.split(") on ")[0]


def test_shards_that_together_are_a_full_recording_bring_their_software(tmp_path, root):
    examples = tmp_path / "three"  # a gallery of two pages, both in the shard
    examples.mkdir()
    for name in PAGES:
        shutil.copy(_examples(tmp_path, root) / name, examples / name)
    docs = _docs(tmp_path, root)
    shard = _shard(tmp_path, root, cudnn_backend="9.99.0")
    shards.merge([shard], docs, examples)  # no flag: the full recording replaces the gallery's
    assert read_manifest(docs / "auto_examples")["environment"]["cudnn_backend"] == "9.99.0"
    a = _shard(tmp_path, root, "a", PAGES[:1], cudnn_backend="9.98.0")
    b = _shard(tmp_path, root, "b", PAGES[1:], cudnn_backend="9.97.0")
    before = _digest(docs)
    with pytest.raises(ShardError, match=r"cudnn_backend 9\.9[78]\.0 vs 9\.9[78]\.0"):
        shards.merge([a, b], docs, examples)  # but its shards must agree among themselves
    assert _digest(docs) == before


# -- staging: all or nothing -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["page", "manifest", "swap"])
def test_an_interrupted_merge_leaves_the_gallery_as_it_was(tmp_path, root, monkeypatch, where):
    shard = _shard(tmp_path, root)
    docs = _docs(tmp_path, root)
    before = _digest(docs)
    calls = {"n": 0}
    real_write = shards.datafiles.write_bytes

    def write_then_stop(path, data, *args, **kwargs):
        calls["n"] += 1
        real_write(path, data, *args, **kwargs)
        if calls["n"] == 5:
            raise KeyboardInterrupt  # Ctrl-C half-way through the pages

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "page":
        monkeypatch.setattr(shards.datafiles, "write_bytes", write_then_stop)
    elif where == "manifest":
        monkeypatch.setattr(shards, "_merged_manifest", stop)
    else:
        monkeypatch.setattr(shards, "_swap", stop)
    with pytest.raises(KeyboardInterrupt):
        shards.merge([shard], docs, _examples(tmp_path, root))
    assert _digest(docs) == before, "an interrupted merge changed the docs"
    assert not list(docs.rglob("shards-merge-*")), "the merge left its staging copy behind"


def test_the_gallery_is_swapped_in_where_the_system_has_no_atomic_exchange(tmp_path, root, monkeypatch):
    import ctypes

    def no_libc(*args, **kwargs):
        raise OSError("no C library here")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)  # no renameat2: three renames instead
    docs = _docs(tmp_path, root)
    shards.merge([_shard(tmp_path, root, pages=PAGES[1:])], docs, _examples(tmp_path, root))
    merged = read_manifest(docs / "auto_examples")
    assert merged["pages"][PAGES[1]]["package_md5"] == merged["package_md5"]  # written by this merge
    assert (docs / "auto_examples" / f"{STEM}.rst").exists() and not list(docs.rglob("shards-merge-*"))


# -- what must keep working ------------------------------------------------------------------------


def test_the_committed_gallerys_own_pages_merge_back_unchanged(tmp_path, root):
    committed = root / "docs" / "auto_examples"
    copy = tmp_path / "copied_gallery"  # two committed pages, copied, recorded into a shard from there
    for name in PAGES:
        for rel, path in shards.staging.page_files(committed, name[:-3]).items():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, copy / rel)
    manifest = read_manifest(committed)
    shard = tmp_path / "own"
    shards.write_shard(
        shard,
        copy,
        _examples(tmp_path, root),
        root / "docs" / "data" / "history.jsonl",
        PAGES,
        {p: manifest["example_seconds"][p] for p in PAGES},
        manifest["environment"],
    )
    data = json.loads((shard / "shard.json").read_text())
    data["package_md5"] = manifest["package_md5"]  # recorded by the gallery's package
    (shard / "shard.json").write_text(json.dumps(data))
    docs = _docs(tmp_path, root)
    assert shards.merge([shard], docs, _examples(tmp_path, root)) == dict.fromkeys(PAGES, "NVIDIA H200")
    for name in PAGES:
        for rel, path in shards.staging.page_files(committed, name[:-3]).items():
            assert (docs / "auto_examples" / rel).read_bytes() == path.read_bytes(), rel
    merged = read_manifest(docs / "auto_examples")
    assert merged["environment"] == manifest["environment"]
    assert staleness.stale_examples(_examples(tmp_path, root), docs / "auto_examples") == []


def test_every_committed_page_has_the_file_set_a_merge_requires(tmp_path, root):
    """The required set is derived from the code that writes a page; every recorded page must pass it
    (the skipped Blackwell page included), or the rules would refuse real shards."""
    pages = sorted(p.name for p in _examples(tmp_path, root).glob("plot_*.py"))
    shard = shards.read_shard(_shard(tmp_path, root, "all", pages))
    assert sorted(shard.pages) == pages
    skipped = [n for n, p in shard.pages.items() if p["skipped"]]
    assert skipped, "the committed gallery has a skipped page; this test should check one"


def test_the_merge_command_refuses_with_a_nonzero_exit(tmp_path, root):
    (tmp_path / "empty").mkdir()
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{root / 'docs' / '_ext'}")
    proc = subprocess.run(
        [sys.executable, "-m", "gallery_build.shards", "merge", "--allow-other-environment", str(tmp_path / "empty")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"shards merge refused: shard {tmp_path / 'empty'}: no shard.json" in proc.stderr
