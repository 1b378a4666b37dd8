"""The three kinds of comparison the site counts apart (gallery_build.verdict_kinds)."""

import json
import re
from pathlib import Path

import pytest
from gallery_build import verdict_kinds
from gallery_build.verdict_kinds import (
    KINDS,
    UnclassifiedComparison,
    classify,
    distinct_comparisons,
    kind_of,
    site_answer,
    tally,
)
from hypothesis import given
from hypothesis import strategies as st

GALLERY = Path(__file__).resolve().parents[2] / "docs" / "auto_examples"


@pytest.fixture(scope="module")
def committed():
    gallery = GALLERY
    return {p: json.loads(p.read_text()) for p in sorted(gallery.glob("*.record.json"))}


def test_every_committed_comparison_headline_lands_in_exactly_one_kind(committed):
    problems, counts = [], {k: {"faster": 0, "tie": 0, "slower": 0} for k in KINDS}
    for path, rec in committed.items():
        for h in distinct_comparisons(rec["headlines"]):  # one verdict once, whatever it is called
            try:
                counts[kind_of(h["name"], h.get("baseline", ""), rec["example"])][h["verdict"]] += 1
            except UnclassifiedComparison as exc:
                problems.append(f"{path}: {exc}")
    assert not problems, "\n".join(problems)
    print("comparison headlines per kind:", counts)  # the report quotes these (pytest -s)
    assert sum(sum(c.values()) for c in counts.values()) == len(classify(committed.values()))
    # the main kind always has headlines; the others may be empty in a recording (plot_25 now
    # headlines like-for-like pairs only, so no committed headline is compiled against eager)
    assert sum(counts["implementation"].values()), f"no comparison against another implementation: {counts}"


@pytest.mark.parametrize(
    ("page", "name_part", "kind"),
    [
        ("plot_20_dropout_deterministic", "dropout forward", "feature"),
        ("plot_20_dropout_deterministic", "deterministic backward", "feature"),
        ("plot_14_fp8_hopper", "FP8 attention", "feature"),
        ("plot_21_call_overhead", "set_stream", "feature"),
        ("plot_30_cudnn_torch_provider", "provider", "feature"),
        ("plot_25_transformer_block", "eager cuDNN op's speed-up over eager PyTorch", "implementation"),
        ("plot_25_transformer_block", "over torch.compile", "implementation"),
        ("plot_19_flex_attention_oss", "window 512", "implementation"),  # best of several; cuDNN's own graph won
        ("plot_13_paged_decode", "paged decode", "implementation"),
    ],
)
def test_ablations_and_compiled_blocks_are_kept_apart_from_implementation_wins(committed, page, name_part, kind):
    rows = [r for r in classify(committed.values()) if r["page"] == page and name_part in r["name"]]
    assert rows, (
        f"docs/auto_examples/{page}.record.json has no comparison headline containing {name_part!r}: "
        "update this test's table to the headline's new name"
    )
    assert [r["kind"] for r in rows] == [kind] * len(rows), f"{page}: {[(r['name'], r['kind']) for r in rows]}"


def test_a_best_of_comparison_counts_as_another_implementation_whichever_baseline_won():
    assert kind_of("window 512: flex_attention speed-up over best other", "cuDNN graph SDPA") == "implementation"
    assert kind_of("speed-up over best PyTorch", "PyTorch eager training") == "implementation"


def test_a_comparison_no_rule_places_is_refused_with_the_file_to_fix():
    with pytest.raises(UnclassifiedComparison, match=r"plot_99_new: .*'speed-up over a new thing'.*verdict_kinds\.py"):
        kind_of("speed-up over a new thing", "some other program", "plot_99_new")


def test_a_comparison_two_rules_place_is_refused_rather_than_counted_twice():
    # cuDNN's own path (a feature) and a torch.compile baseline (another implementation) at once
    with pytest.raises(UnclassifiedComparison, match="implementation and feature"):
        kind_of("speed-up over the op inside torch.compile", "cuDNN op inside torch.compile", "plot_99_new")


@given(st.text(max_size=40), st.text(max_size=40))
def test_kind_of_returns_one_kind_or_refuses_for_any_text(name, baseline):
    try:
        assert kind_of(name, baseline) in KINDS
    except UnclassifiedComparison:
        pass


def _row(kind, verdict, value=1.0, name="x"):
    return {"kind": kind, "verdict": verdict, "value": value, "name": name, "title": "T"}


def test_the_site_answer_counts_only_comparisons_against_another_implementation():
    rows = [
        _row("implementation", "faster", 2.5, "paged decode, speed-up over X"),
        _row("implementation", "tie"),
        _row("feature", "faster", 9.0, "FP8 attention, speed-up over cuDNN bf16"),
        _row("feature", "slower", 0.5),
        _row("compiled", "faster", 3.0),
    ]
    answer = site_answer(rows)
    assert answer.startswith(
        "Against another implementation (2 comparisons), cuDNN was faster in 1, tied in 1 and slower in 0"
    )
    assert "largest win is 2.50× over its baseline (paged decode)" in answer  # not the FP8 ablation's 9×
    assert "the cost of a feature (2 comparisons)" in answer and "compiled against eager (1 comparison)" in answer
    assert tally(rows)["feature"] == {"faster": 1, "tie": 0, "slower": 1}


def test_the_site_answer_from_the_committed_records_matches_their_tally(committed):
    rows = classify(committed.values())
    counts = tally(rows)["implementation"]
    answer = site_answer(rows)
    n = sum(counts.values())
    expected = (
        f"({n} comparisons), cuDNN was faster in {counts['faster']}, tied in {counts['tie']} "
        f"and slower in {counts['slower']}"
    )
    assert expected in answer, answer
    assert not re.search(r"[<>`*_\[\]]", answer), f"the answer must be plain text for a MyST substitution: {answer}"


def test_the_home_page_states_the_answer_computed_by_conf_py(root):
    index = (root / "docs" / "index.md").read_text()
    conf = (root / "docs" / "conf.py").read_text()
    assert "{{ site_answer }}" in index, "docs/index.md: the home page must state the site's answer ({{ site_answer }})"
    assert re.search(r'"site_answer":\s*markdown_literal\(', conf) or re.search(
        r'(?:myst_substitutions|RECORDED_SUBSTITUTIONS)\["site_answer"\]\s*=\s*\(?\s*markdown_literal\(', conf
    ), (
        "docs/conf.py: compute site_answer from the records (verdict_kinds.site_answer) "
        "and pass it through markdown_literal"
    )
    rows = classify(verdict_kinds.read_records(root / "docs" / "auto_examples"))
    assert rows and {r["kind"] for r in rows} <= set(KINDS)


# -- the reader-facing pages that show these kinds (docs/results.md, docs/methodology.md, docs/index.md)

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAYLOAD = "<script>alert(1)</script>"


def _cells(page: Path) -> list[str]:
    return re.findall(r"```\{code-cell\} ipython3\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize("page", ["results.md", "methodology.md", "maintainers/measurement_studies.md"])
def test_the_data_pages_show_no_code_cells_to_readers(page):
    visible = [
        f"docs/{page}: cell {i} starts {c.splitlines()[0]!r}"
        for i, c in enumerate(_cells(DOCS / page))
        if not re.match(r":tags: \[[^\]]*remove-(input|cell)", c)
    ]
    assert not visible, "tag these cells remove-input (or remove-cell):\n" + "\n".join(visible)


def test_every_notebook_page_is_re_executed_when_its_data_change():
    from gallery_build.page_checks import DATA_PAGES

    notebooks = sorted(
        str(p.relative_to(DOCS).with_suffix(""))
        for p in DOCS.rglob("*.md")
        if "_build" not in p.parts and "kernelspec:" in p.read_text(encoding="utf-8")[:400]
    )
    missing = [n for n in notebooks if n not in DATA_PAGES]
    assert not missing, f"docs/_ext/gallery_build/page_checks.py: add {missing} to DATA_PAGES (they read docs/data)"


def test_maintainer_pages_sit_in_their_own_toctree_not_the_readers():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    trees = re.findall(r"```\{toctree\}\n(.*?)```", index, flags=re.S)
    reader = next(t for t in trees if "results" in t)
    assert "recording" not in reader and "maintainers" not in reader, (
        "docs/index.md: maintainer pages in the reader's toctree"
    )
    maint = next((t for t in trees if ":caption: For maintainers" in t), "")
    assert "maintainers/index" in maint, (
        "docs/index.md: a toctree captioned 'For maintainers' must hold maintainers/index"
    )
    sub = (DOCS / "maintainers" / "index.md").read_text(encoding="utf-8")
    assert "recording" in sub and "measurement_studies" in sub
    assert not (DOCS / "recording.md").exists(), "docs/recording.md moved to docs/maintainers/recording.md"


def test_the_results_chart_escapes_recorded_labels_and_keeps_values_in_their_own_column(tmp_path, monkeypatch):
    rec = json.loads((GALLERY / "plot_02_conv_bias_relu.record.json").read_text())
    rec["title"] = PAYLOAD
    comparison = next(h for h in rec["headlines"] if h.get("kind") == "comparison")
    comparison.update(name=f"{PAYLOAD}: speed-up over best baseline", baseline=PAYLOAD)
    (tmp_path / "auto_examples").mkdir()
    (tmp_path / "auto_examples" / "plot_02_conv_bias_relu.record.json").write_text(json.dumps(rec))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # the setup cell inserts paths: undo after
    setup = re.sub(r"\A(:\w[^\n]*\n)+", "", _cells(DOCS / "results.md")[0])
    namespace: dict = {}
    exec(setup, namespace)
    html = namespace["bar_chart"](namespace["comparisons"], f"caption {PAYLOAD}").data
    assert "<script" not in html, "docs/results.md (bar_chart): a recorded label reached the chart unescaped"
    assert "&lt;script&gt;" in html
    value = f"<strong>{comparison['value']:.2f}×</strong>"
    assert value in html, "docs/results.md (bar_chart): the value label is missing"
    cell = html[html.rindex("<div", 0, html.index(value)) : html.index(value)]
    assert "position:absolute" not in cell, "the value label must sit in its own grid column, not over the whisker"


def test_a_verdict_headlined_under_two_names_counts_once():
    h = {
        "kind": "comparison",
        "name": "S=8192: speed-up over the fastest contender",
        "baseline": "FA4",
        "candidate_measurement": "cuDNN @ 8192",
        "baseline_measurement": "FA4 @ 8192",
        "value": 0.87,
        "low": 0.86,
        "high": 0.88,
        "verdict": "slower",
    }
    again = dict(h, name="speed-up over the fastest contender at that length")
    rows = classify([{"example": "plot_09_sdpa_backward", "title": "T", "headlines": [h, again]}])
    assert [r["name"] for r in rows] == [h["name"]]


def test_records_read_for_the_home_page_are_checked_first(tmp_path):
    from gallery_build.verdict_kinds import read_records

    from cudnn_guide.errors import CorruptDataError

    (tmp_path / "plot_01_x.record.json").write_text('{"headlines": [')
    with pytest.raises(CorruptDataError, match="plot_01_x.record.json"):
        read_records(tmp_path)


def test_the_site_answer_says_how_many_ties_are_with_cudnn_itself_through_pytorch():
    rows = [
        dict(_row("implementation", "tie"), baseline="PyTorch SDPA, cuDNN backend, d=64"),
        dict(_row("implementation", "tie"), baseline="torch.cudnn_convolution_relu"),
        dict(_row("implementation", "tie"), baseline="FlashAttention-4 (flash-attn-4 4.0.0b36)"),
        dict(_row("implementation", "slower", 0.9), baseline="PyTorch SDPA, cuDNN backend"),  # not a tie
    ]
    answer = site_answer(rows)
    assert "2 of the ties are with cuDNN itself, called through PyTorch" in answer, answer
    assert "ties are with cuDNN itself" not in site_answer(rows[2:])
    assert "1 of the ties is with cuDNN itself, called through PyTorch" in site_answer(rows[1:]), site_answer(rows[1:])
