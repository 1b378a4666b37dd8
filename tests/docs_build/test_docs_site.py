"""Build the site from the committed recording, as a CPU machine does, and look at the result."""

import re

import pytest
from conftest import copy_project, remove_recording, sphinx_render

pytestmark = pytest.mark.docs


def test_render_mode_says_where_numbers_come_from(site):
    index = (site / "index.html").read_text()
    assert "NVIDIA H200" in index
    assert "render" in index


def test_conv_page_has_output_figure_and_stamp(site):
    page = (site / "auto_examples" / "plot_02_conv_bias_relu.html").read_text()
    assert "sphx-glr-script-out" in page
    assert re.search(r"<img[^>]+sphx_glr_plot_02_conv_bias_relu_001\.png", page)
    assert (site / "_images" / "sphx_glr_plot_02_conv_bias_relu_001.png").stat().st_size > 10_000
    stamp = re.search(r'class="cg-stamp">(.*?)</p>', page, re.S)
    assert stamp and "NVIDIA H200" in stamp.group(1) and "commit" in stamp.group(1)
    assert "check cuDNN fused conv+bias+relu: PASS" in page
    assert "record.json" in page  # the JSON record download


def test_pages_open_with_the_stamp_and_fold_the_full_environment_table(site):
    conv = (site / "auto_examples" / "plot_02_conv_bias_relu.html").read_text()
    folded = re.search(r'<details class="cg-env"><summary>[^<]+</summary><table class="cg-env-table">', conv)
    assert folded and conv.index('class="cg-stamp"') < folded.start()
    assert "<th>libcudnn loaded</th>" in conv  # folded, not dropped
    environment = (site / "auto_examples" / "plot_01_environment.html").read_text()
    assert 'class="cg-env-table"' in environment and 'class="cg-env"' not in environment  # its topic: open


def test_downloads_exist(site):
    page = (site / "auto_examples" / "plot_02_conv_bias_relu.html").read_text()
    for suffix in (".py", ".ipynb", ".record.json"):
        assert re.search(rf'href="[^"]*plot_02_conv_bias_relu{re.escape(suffix)}"', page), suffix


def test_api_reference_lists_examples_using_each_entry(site):
    api = (site / "api" / "graphs.html").read_text()
    assert 'id="cudnn_guide.graphs.builder.build"' in api
    assert "Examples using this" in api
    assert "sphx-glr-thumbcontainer" in api


def test_the_api_reference_is_a_page_per_subpackage_none_of_them_huge(site):
    pages = {p.name: p.stat().st_size for p in (site / "api").glob("*.html")}
    expected = {"index.html", "graphs.html", "measure.html", "report.html", "studies.html", "core.html"}
    expected |= {f"studies_{part}.html" for part in ("attention", "attention_kernels", "other", "setup")}  # continued
    assert set(pages) == expected, f"site/api/ has {sorted(pages)}: one page per docs/api/*.md expected"
    huge = {name: size for name, size in pages.items() if size > 600_000}
    assert not huge, f"API pages over 600 kB (the single page was 1.17 MB): {huge}: split docs/api/<page>.md further"
    assert not (site / "api.html").exists()


def test_generated_notebooks_are_not_pages(site):
    assert not (site / "auto_examples" / "plot_02_conv_bias_relu.ipynb.html").exists()
    assert not list(site.rglob("*.ipynb.html"))


def test_stale_example_stops_the_cpu_build_naming_the_file(tmp_path):
    copy_project(tmp_path)
    ex = tmp_path / "examples" / "plot_02_conv_bias_relu.py"
    ex.write_text(ex.read_text() + "\n# an edit after recording\n")
    proc = sphinx_render(tmp_path / "docs", tmp_path / "out")
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "plot_02_conv_bias_relu.py: changed since it was recorded" in text
    assert "re-recorded on a GPU" in text


def test_a_page_skipped_for_lack_of_hardware_renders_a_clear_note(tmp_path):
    from gallery_build import skip_pages

    copy_project(tmp_path)
    gal = tmp_path / "docs" / "auto_examples"
    remove_recording(gal, "plot_05_sdpa_causal")
    skip_pages.write_skip_page(
        tmp_path / "examples" / "plot_05_sdpa_causal.py",
        gal,
        ["SM 8.0 or newer (cuDNN fused attention)"],
        {"gpu": "Tesla T4", "sm": "7.5", "date_utc": "2026-11-29 12:00 UTC", "commit": "abc1234"},
    )
    proc = sphinx_render(tmp_path / "docs", tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (tmp_path / "out" / "auto_examples" / "plot_05_sdpa_causal.html").read_text()
    assert "skipped: needs SM 8.0 or newer (cuDNN fused attention)" in page
    assert "Skipped on <strong>Tesla T4</strong>" in page
    assert "sphx-glr-script-out" not in page


def test_corrupt_recorded_data_stops_the_build_naming_the_file_and_line(tmp_path):
    copy_project(tmp_path)
    hist = tmp_path / "docs" / "data" / "history.jsonl"
    lines = hist.read_text().splitlines()
    lines[1] = lines[1][:30]
    hist.write_text("\n".join(lines) + "\n")
    proc = sphinx_render(tmp_path / "docs", tmp_path / "out")
    assert proc.returncode != 0
    assert f"{hist}:2: line is not valid JSON" in proc.stdout + proc.stderr


def test_a_rebuild_into_the_same_folder_shows_changed_records(tmp_path):
    """The data pages read files Sphinx does not track: a rebuild must re-execute them, not reuse stale output."""
    import json

    copy_project(tmp_path)
    out = tmp_path / "out"
    assert sphinx_render(tmp_path / "docs", out).returncode == 0
    rec = tmp_path / "docs" / "auto_examples" / "plot_02_conv_bias_relu.record.json"
    data = json.loads(rec.read_text())
    data["headlines"][0].update(value=12345.0, low=12000.0, high=12600.0, run_low=12000.0, run_high=12600.0)
    rec.write_text(json.dumps(data))
    proc = sphinx_render(tmp_path / "docs", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1.234e+04" in (out / "results.html").read_text()


def test_an_error_inside_a_data_notebook_reaches_the_console_with_its_cause(tmp_path):
    copy_project(tmp_path)
    results = tmp_path / "docs" / "results.md"
    text = results.read_text()
    marker = "```{code-cell} ipython3\n:tags: [remove-input]\nimport pandas as pd\n"
    assert marker in text
    results.write_text(text.replace(marker, marker + "raise ValueError('the cause, named')\n", 1))
    proc = sphinx_render(tmp_path / "docs", tmp_path / "out")
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "ValueError" in out and "the cause, named" in out


def test_every_footer_names_the_site_commit_and_the_recording_commit(site, root):
    from gallery_build.manifest import recording_commit

    rec_commit = recording_commit(root / "docs" / "auto_examples")
    index = (site / "index.html").read_text()
    footer = re.search(r'class="cg-commits">(.*?)</div>', index, re.S).group(1)
    assert "Site built from commit" in footer and f"<code>{rec_commit}</code>" in footer
    page = (site / "auto_examples" / "plot_02_conv_bias_relu.html").read_text()
    footer = re.search(r'class="cg-commits">(.*?)</div>', page, re.S).group(1)
    assert "this page recorded at commit" in footer and "NVIDIA H200" in footer
    assert "edit this page" not in page.lower()  # opt-in: no repository URL is set


def test_a_search_for_a_frontend_call_finds_the_frontend_index_and_its_pages(site):
    page = (site / "frontend_api.html").read_text()
    for name in ("sdpa_backward", "conv_dgrad", "deserialize", "execute_plan_at_index", "create_kernel_cache"):
        assert re.search(rf'<code id="fe-{name}">(cudnn\.)?{name}</code>', page), name  # its row, with its id
    row = re.search(r'<code id="fe-sdpa_backward">sdpa_backward</code>.*?</tr>', page, re.S).group(0)
    assert 'href="auto_examples/plot_09_sdpa_backward.html">09 · Attention for training' in row  # number and title
    assert re.search(r'href="api/graphs\.html#cudnn_guide\.graphs\.attention\.sdpa_backward_graph"', row)
    index = (site / "searchindex.js").read_text()
    assert "sdpa_backward" in index and "frontend_api" in index


def test_the_results_page_calls_a_widened_headline_widened_with_its_in_run_interval(site):
    """Its label needed a run_interval most records lack, so widened intervals read "(in-run)"."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    widened = [
        h
        for p in sorted((root / "docs" / "auto_examples").glob("*.record.json"))
        for h in json.loads(p.read_text())["headlines"]
        if float(h.get("drift") or 0) > 0 and "run_low" in h and "low" in h
    ]
    assert widened, "the committed recording has widened headlines"
    text = (site / "results.html").read_text()
    h = widened[0]
    assert f"[{h['low']:.4g}–{h['high']:.4g}] (widened; in-run {h['run_low']:.4g}–{h['run_high']:.4g}" in text, h[
        "name"
    ]
