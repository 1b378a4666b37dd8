"""The recorded data's shape, checked before any page is built (gallery_build.schema via validate_data)."""

import json
import math
import shutil

import pytest
from gallery_build import page_checks, schema

from cudnn_guide.errors import CorruptDataError

STEM = "plot_02_conv_bias_relu"


@pytest.fixture
def docs(tmp_path, root):
    """A copy of one real page's record, cells and cost files and the recording's manifest, and docs/data."""
    gal = tmp_path / "auto_examples"
    gal.mkdir()
    for name in (f"{STEM}.record.json", f"{STEM}.cells.json", f"{STEM}.cost.json", f"{STEM}.rst", "recording.json"):
        shutil.copy(root / "docs" / "auto_examples" / name, gal / name)
    (tmp_path / "data").mkdir()
    shutil.copy(root / "docs" / "data" / "history.jsonl", tmp_path / "data" / "history.jsonl")
    return tmp_path


def _refused(docs, *fragments):
    """validate_data refuses the copy; the message names every fragment (file, field, cause)."""
    with pytest.raises(CorruptDataError) as info:
        page_checks.validate_data(docs / "auto_examples", docs / "data")
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from the refusal: {message}"
    return info.value


def _edit_record(docs, edit=None, replace=None):
    """Change the copied record in place (``edit``) or replace it whole (``replace``)."""
    path = docs / "auto_examples" / f"{STEM}.record.json"
    data = json.loads(path.read_text()) if replace is None else replace
    if edit is not None:
        edit(data)
    path.write_text(json.dumps(data))  # json writes NaN for float("nan"), as a careless writer would
    return path


def test_the_committed_recording_and_data_pass(root):
    """Every committed record, manifest, cells, cost, history and page passes: the rules follow the writers."""
    page_checks.validate_data(root / "docs" / "auto_examples", root / "docs" / "data")
    records = sorted((root / "docs" / "auto_examples").glob("*.record.json"))
    assert len(records) >= 25  # the check above really read the gallery
    for path in records:
        schema.validate_file(path, schema.check_record)
    for path in sorted((root / "docs" / "data").glob("*history.jsonl")):
        assert schema.validate_jsonl(path, schema.check_history_line)


def test_a_record_that_is_a_list_is_refused_naming_file_and_field(docs):
    path = _edit_record(docs, replace=[])
    err = _refused(docs, f"{path}:1:", "'<document>'", "must be a JSON object, found list")
    assert err.path == str(path)


def test_an_environment_that_is_a_string_is_refused(docs):
    path = _edit_record(docs, lambda d: d.update(environment="NVIDIA H200"))
    _refused(docs, f"{path}:1:", "field 'environment'", "must be a JSON object, found str")


def test_a_nan_headline_is_refused(docs):
    path = _edit_record(docs, lambda d: d["headlines"][0].update(value=math.nan))
    _refused(docs, str(path), "field 'headlines[0].value'", "must be a finite number, found nan")


def test_a_negative_median_is_refused(docs):
    path = _edit_record(docs, lambda d: d["measurements"][0].update(median_ms=-0.08))
    _refused(docs, str(path), "field 'measurements[0].median_ms'", "must be positive")


def test_a_negative_headline_time_is_refused(docs):
    def edit(d):
        d["headlines"][0].update(value=-80.8, low=-90.0, high=-70.0)
        assert d["headlines"][0]["unit"] == "µs"

    path = _edit_record(docs, edit)
    _refused(docs, str(path), "field 'headlines[0].value'", "must be positive")


def test_a_string_median_is_refused(docs):
    path = _edit_record(docs, lambda d: d["measurements"][0].update(median_ms="0.08"))
    _refused(docs, str(path), "field 'measurements[0].median_ms'", "must be a number, found str")


def test_a_string_headline_value_is_refused(docs):
    path = _edit_record(docs, lambda d: d["headlines"][1].update(value="732"))
    _refused(docs, str(path), "field 'headlines[1].value'", "must be a number, found str")


def test_a_nan_ratio_is_refused_before_it_gets_a_verdict(docs):
    def edit(d):
        ratio = next(i for i, h in enumerate(d["headlines"]) if h.get("kind") == "comparison")
        assert ratio == 2
        d["headlines"][ratio].update(value=math.nan)

    path = _edit_record(docs, edit)
    _refused(docs, str(path), "field 'headlines[2].value'", "must be a finite number, found nan")


def test_a_value_outside_its_interval_is_refused(docs):
    path = _edit_record(docs, lambda d: d["headlines"][2].update(value=5.0))
    _refused(docs, str(path), "field 'headlines[2].value'", "lies outside its interval")


def test_an_unknown_verdict_is_refused(docs):
    path = _edit_record(docs, lambda d: d["headlines"][2].update(verdict="much faster"))
    _refused(docs, str(path), "field 'headlines[2].verdict'", "is not one of faster, slower, tie")


def test_a_comparison_without_its_interval_is_refused(docs):
    path = _edit_record(docs, lambda d: [d["headlines"][2].pop(k) for k in ("low", "high")])
    _refused(docs, str(path), "field 'headlines[2].low'", "is missing")


def test_a_record_without_headlines_is_refused(docs):
    path = _edit_record(docs, lambda d: d.pop("headlines"))
    _refused(docs, str(path), "field 'headlines'", "is missing")


@pytest.mark.parametrize(
    ("field", "payload", "rule"),
    [
        ("gpu", "<script>alert(1)</script>", "is not a GPU name"),
        ("commit", "f62a656<img src=x>", "is not a git commit"),
        ("commit", "abc", "is not a git commit"),  # 3 hex digits: too short to name a commit
        ("torch", "2.11<b>", "is not a version"),
        ("cudnn_frontend", "", "is not a version"),
    ],
)
def test_environment_strings_must_match_strict_patterns(docs, field, payload, rule):
    path = _edit_record(docs, lambda d: d["environment"].update({field: payload}))
    _refused(docs, str(path), f"field 'environment.{field}'", rule)


def test_placeholders_and_dirty_commits_pass(docs):
    _edit_record(docs, lambda d: d["environment"].update(commit="unknown", driver="unknown"))
    page_checks.validate_data(docs / "auto_examples", docs / "data")
    _edit_record(docs, lambda d: d["environment"].update(commit="b7d79cf50f67+dirty", gpu="NVIDIA A100-SXM4-80GB"))
    page_checks.validate_data(docs / "auto_examples", docs / "data")


def test_a_hostile_manifest_is_refused_at_the_line_of_its_field(docs):
    path = docs / "auto_examples" / "recording.json"
    data = json.loads(path.read_text())
    data["environment"]["gpu"] = "<script>alert(1)</script>"
    path.write_text(json.dumps(data, indent=1))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "<script>" in text)
    _refused(docs, f"{path}:{line}:", "field 'environment.gpu'", "is not a GPU name")


def test_a_hostile_page_entry_in_the_manifest_is_refused(docs):
    path = docs / "auto_examples" / "recording.json"
    data = json.loads(path.read_text())
    page = next(iter(data["pages"]))
    data["pages"][page]["commit"] = "<script>"
    path.write_text(json.dumps(data, indent=1))
    _refused(docs, str(path), f"field 'pages.{page}.commit'", "is not a git commit")


def test_a_manifest_of_the_wrong_shape_is_refused(docs):
    path = docs / "auto_examples" / "recording.json"
    data = json.loads(path.read_text())
    data["example_seconds"] = ["plot_02_conv_bias_relu.py", 13.2]
    path.write_text(json.dumps(data, indent=1))
    _refused(docs, str(path), "field 'example_seconds'", "must be a JSON object, found list")


def test_cells_and_cost_files_of_the_wrong_shape_are_refused(docs):
    cost = docs / "auto_examples" / f"{STEM}.cost.json"
    cost.write_text(json.dumps({"memory": 0.0, "time": -1.0}))
    _refused(docs, str(cost), "field 'time'", "must be positive")
    cost.write_text(json.dumps({"memory": 0.0, "time": 13.2}))
    cells = docs / "auto_examples" / f"{STEM}.cells.json"
    data = json.loads(cells.read_text())
    data["cells"][1]["seconds"] = "slow"
    cells.write_text(json.dumps(data, indent=1))
    line = next(n for n, text in enumerate(cells.read_text().splitlines(), 1) if '"slow"' in text)
    _refused(docs, f"{cells}:{line}:", "field 'cells[1].seconds'", "must be a number, found str")


def test_a_hostile_history_line_is_refused_with_its_number(docs):
    hist = docs / "data" / "history.jsonl"
    lines = hist.read_text().splitlines()
    entry = json.loads(lines[2])
    entry["gpu"] = "<img src=x onerror=alert(1)>"
    lines[2] = json.dumps(entry)
    hist.write_text("\n".join(lines) + "\n")
    _refused(docs, f"{hist}:3:", "field 'gpu'", "is not a GPU name")


def test_a_history_line_that_is_not_an_object_is_refused(docs):
    hist = docs / "data" / "history.jsonl"
    hist.write_text(hist.read_text() + "[]\n")
    number = len(hist.read_text().splitlines())
    _refused(docs, f"{hist}:{number}:", "'<document>'", "must be a JSON object")


def test_a_recorded_page_that_is_not_utf8_is_refused_naming_the_file(docs):
    rst = docs / "auto_examples" / f"{STEM}.rst"
    raw = rst.read_bytes()
    cut = raw.index(b"\n", len(raw) // 2) + 1
    rst.write_bytes(raw[:cut] + b"caf\xe9\n" + raw[cut:])
    line = raw[:cut].count(b"\n") + 1
    _refused(docs, f"{rst}:{line}:", "not valid UTF-8", "re-record or restore it with git checkout")
    # conf.py reads the pages' output notes before the builder starts: the same refusal there
    with pytest.raises(CorruptDataError, match="not valid UTF-8") as info:
        page_checks.recorded_output_notes(docs / "auto_examples")
    assert info.value.path == str(rst) and info.value.line == line


def test_the_field_path_locates_the_right_line():
    text = '{\n "a": [\n  {"x": 1},\n  {\n   "x": 2,\n   "y": [3, "z"]\n  }\n ],\n "b": {}\n}\n'
    where = schema._offset
    assert text.count("\n", 0, where(text, ("a", 1, "y", 1))) + 1 == 6
    assert text.count("\n", 0, where(text, ("a", 0, "x"))) + 1 == 3
    assert text.count("\n", 0, where(text, ("b",))) + 1 == 9
    assert text.count("\n", 0, where(text, ("b", "missing"))) + 1 == 9  # a missing key: its object


@pytest.mark.parametrize(
    ("edit", "field", "rule"),
    [
        (lambda m: m.update(merged_from=["NVIDIA H200 @ <script>"]), "merged_from[0]", "'<GPU name> @ <commit>'"),
        (lambda m: next(iter(m["pages"].values())).update(software={"torch": "<b>2</b>"}), "software.torch", "version"),
        (lambda m: m["full_recording"].update(seconds=float("nan")), "full_recording.seconds", "finite"),
    ],
)
def test_merged_manifest_fields_are_checked(docs, edit, field, rule):
    path = docs / "auto_examples" / "recording.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=1))
    _refused(docs, str(path), field, rule)


def _edit_history(docs, edit):
    """Change the third line of the copied history in place; return the file and that line's number."""
    hist = docs / "data" / "history.jsonl"
    lines = hist.read_text().splitlines()
    entry = json.loads(lines[2])
    edit(entry)
    lines[2] = json.dumps(entry)
    hist.write_text("\n".join(lines) + "\n")
    return hist, 3


@pytest.mark.parametrize(
    ("edit", "field", "rule"),
    [
        (lambda d: d["environment"].update(commit=[]), "environment.commit", "must be a string, found list"),
        (lambda d: d["environment"].update(cuda={}), "environment.cuda", "must be a string, found dict"),
        (lambda d: d["environment"].update(driver=["unknown"]), "environment.driver", "must be a string, found list"),
    ],
    ids=["commit-list", "cuda-object", "driver-list"],
)
def test_an_unhashable_environment_value_is_refused_not_a_type_error(docs, edit, field, rule):
    path = _edit_record(docs, edit)
    _refused(docs, str(path), f"field '{field}'", rule)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d["measurements"][0].update(n=10**400), "measurements[0].n"),
        (lambda d: d["headlines"][0].update(value=10**400), "headlines[0].value"),
        (lambda d: d["measurements"][0].update(median_ms=-(10**400)), "measurements[0].median_ms"),
    ],
    ids=["n", "headline-value", "negative-median"],
)
def test_an_integer_beyond_a_float_is_refused_as_too_large_not_an_overflow(docs, edit, field):
    path = _edit_record(docs, edit)
    _refused(docs, str(path), f"field '{field}'", "is too large", "beyond a float's range")


def test_an_integer_too_long_to_print_is_named_by_its_size():
    # json refuses to read or write such an integer, but check_* take any parsed document; repr() of it raises
    with pytest.raises(
        schema.SchemaError, match=r"environment.gpu.*must be a string, found int an integer of \d+ bits"
    ):
        schema.check_environment({"gpu": 10**5000, "commit": "f62a656"})


@pytest.mark.parametrize(
    ("edit", "field", "rule"),
    [
        (lambda e: e.update(commit=[]), "commit", "must be a string, found list"),
        (lambda e: e.update(software={"x": ["a"]}), "software.x", "must be a string, found list"),
        (lambda e: e.update(software={"torch": {}}), "software.torch", "must be a string, found dict"),
    ],
    ids=["commit-list", "software-list", "software-object"],
)
def test_an_unhashable_history_value_is_refused_with_its_line(docs, edit, field, rule):
    hist, line = _edit_history(docs, edit)
    _refused(docs, f"{hist}:{line}:", f"field '{field}'", rule)


INJECTION = "x\n\n.. raw:: html\n\n   <script>alert(1)</script>\n"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d["headlines"][0].update(name=INJECTION), "headlines[0].name"),
        (lambda d: d["headlines"][0].update(unit="µs\r"), "headlines[0].unit"),
        (lambda d: d["headlines"][0].update(baseline="PyTorch\tSDPA"), "headlines[0].baseline"),
        (
            lambda d: d["headlines"][2].update(candidate_measurement="cuDNN\u2028x"),
            "headlines[2].candidate_measurement",
        ),
        (lambda d: d["measurements"][0].update(label="cuDNN\x00"), "measurements[0].label"),
        (lambda d: d["measurements"][0].update(unit="ms\x1b[31m"), "measurements[0].unit"),
        (lambda d: d["measurements"][0]["params"].update(dtype="fp16\n.. raw:: html"), "measurements[0].params.dtype"),
        (lambda d: d["measurements"][0].update(warnings=["spread\x85"]), "measurements[0].warnings[0]"),
        (lambda d: d["checks"][0].update(name="out\n"), "checks[0].name"),
        (lambda d: d.update(title="Fused\nconv"), "title"),
    ],
    ids=["name", "unit", "baseline", "candidate", "label", "m-unit", "params", "warning", "check", "title"],
)
def test_a_control_character_in_recorded_text_is_refused(docs, edit, field):
    path = _edit_record(docs, edit)
    _refused(docs, str(path), f"field '{field}'", "holds the control character", "one line of plain text")


def test_a_control_character_in_a_history_name_or_label_is_refused(docs):
    hist, line = _edit_history(docs, lambda e: e["measurements"].update({"cuDNN\n.. raw:: html": {"median_ms": 1.0}}))
    _refused(docs, f"{hist}:{line}:", "field 'measurements.cuDNN\\n.. raw:: html'", "holds the control character")


def test_a_control_character_in_the_manifest_is_refused(docs):
    path = docs / "auto_examples" / "recording.json"
    data = json.loads(path.read_text())
    data["environment"]["libcudnn"] = "libcudnn.so.9\n.. raw:: html"
    path.write_text(json.dumps(data, indent=1))
    _refused(docs, str(path), "field 'environment.libcudnn'", "holds the control character")


def test_cell_code_may_keep_its_tabs():
    schema.check_cells({"example": "plot_02.py", "cells": [{"line": 3, "code": "if x:\n\ty = 1", "seconds": 0.1}]})


@pytest.mark.parametrize(
    ("edit", "field", "rule"),
    [
        (lambda d: d["measurements"][0].update(warnings=[5]), "measurements[0].warnings[0]", "must be a string"),
        (lambda d: d["measurements"][0].update(warnings="spread"), "measurements[0].warnings", "must be a JSON list"),
        (lambda d: d["measurements"][0].update(params=["x"]), "measurements[0].params", "must be a JSON object"),
        (lambda d: d["measurements"][0].update(clocks=[1485]), "measurements[0].clocks", "must be a JSON object"),
        (
            lambda d: d["measurements"][0]["clocks"].update(sm_mhz_end="1485"),
            "measurements[0].clocks.sm_mhz_end",
            "must be a number",
        ),
        (lambda d: d["headlines"][2].update(kind=["comparison"]), "headlines[2].kind", "must be a string"),
        (lambda d: d["headlines"][2].update(interval={}), "headlines[2].interval", "must be a string"),
        (
            lambda d: d["headlines"][2].update(candidate_measurement=["x"]),
            "headlines[2].candidate_measurement",
            "must be a string",
        ),
        (lambda d: d["headlines"][2].update(baseline_measurement=7), "headlines[2].baseline_measurement", "string"),
        (lambda d: d["headlines"][2].update(verdict=["tie"]), "headlines[2].verdict", "is not one of"),
        (lambda d: d["headlines"][2].update(run_verdict="quicker"), "headlines[2].run_verdict", "is not one of"),
    ],
    ids=[
        "warning-int",
        "warnings-str",
        "params-list",
        "clocks-list",
        "clock-str",
        "kind",
        "interval",
        "candidate",
        "baseline",
        "verdict-list",
        "run-verdict",
    ],
)
def test_a_record_field_read_downstream_must_have_its_type(docs, edit, field, rule):
    path = _edit_record(docs, edit)
    _refused(docs, str(path), f"field '{field}'", rule)
