"""Recorded strings reach the HTML escaped: the footer of every page, the home page, the data notebooks."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from gallery_build import page_checks
from gallery_build.manifest import describe_recording, markdown_literal, read_manifest, recording_commit

from cudnn_guide.errors import CorruptDataError

PAYLOAD = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
STEM = "plot_02_conv_bias_relu"


@pytest.fixture
def hostile_gallery(tmp_path, root):
    """One real page's record and the real recording.json, with a <script> in their GPU names and commits."""
    gal = tmp_path / "auto_examples"
    gal.mkdir()
    for name in (f"{STEM}.record.json", "recording.json"):
        shutil.copy(root / "docs" / "auto_examples" / name, gal / name)
    manifest = json.loads((gal / "recording.json").read_text())
    manifest["environment"].update(gpu=PAYLOAD, commit=PAYLOAD)
    for page in manifest["pages"].values():
        page["commit"] = PAYLOAD
    (gal / "recording.json").write_text(json.dumps(manifest, indent=1))
    record = json.loads((gal / f"{STEM}.record.json").read_text())
    record["environment"].update(gpu=PAYLOAD, commit=PAYLOAD)
    (gal / f"{STEM}.record.json").write_text(json.dumps(record))
    return gal


def _sphinx_templates(docs: Path, base: Path):
    """Sphinx's own template bridge (no autoescape, as in a real build), loading docs/_templates over ``base``."""
    from sphinx.jinja2glue import BuiltinTemplateLoader

    builder = SimpleNamespace(config=SimpleNamespace(templates_path=["_templates"]), confdir=docs, _translator=None)
    loader = BuiltinTemplateLoader()
    loader.init(builder, dirs=[str(base)])
    return loader


def test_the_page_footer_escapes_every_recorded_string(root, tmp_path, hostile_gallery):
    base = tmp_path / "theme"
    base.mkdir()
    (base / "page.html").write_text("<footer>{% block footer %}theme footer{% endblock footer %}</footer>")
    templates = _sphinx_templates(root / "docs", base)
    assert not templates.environment.autoescape  # Sphinx does not escape for us: the template must
    env = page_checks.read_record(hostile_gallery, STEM)["environment"]  # what hooks.on_page_context passes
    context = {
        "site_commit": PAYLOAD,
        "recording_commit": recording_commit(hostile_gallery),
        "page_recording_commit": env.get("commit"),
        "page_recording_gpu": env.get("gpu"),
    }
    assert set(context.values()) == {PAYLOAD}  # the payload really reaches all four
    html = templates.render("page.html", context)
    assert "theme footer" in html and "cg-commits" in html  # the project's template, over the theme's
    assert "<script" not in html, f"docs/_templates/page.html lets a recorded string through unescaped: {html}"
    assert html.count(ESCAPED) == 4, html


def test_the_home_page_substitution_is_literal_text(hostile_gallery):
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    described = describe_recording(hostile_gallery)  # conf.py: RECORDED_ON
    assert PAYLOAD in described  # plain text for the console
    parser = create_md_parser(
        MdParserConfig(enable_extensions={"colon_fence", "deflist", "substitution"}), RendererHTML
    )
    raw = parser.render(described)
    assert "<script>" in raw  # without escaping, MyST passes it on as raw HTML
    html = parser.render(markdown_literal(described))  # conf.py: myst_substitutions["recorded_on"]
    assert "<script" not in html and ESCAPED in html, html
    assert re.sub(r"<[^>]+>", "", html).strip() == described.replace("<", "&lt;").replace(">", "&gt;")


def test_markdown_literal_keeps_ordinary_text_and_neutralises_markup():
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    plain = "NVIDIA H200 (driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130) on 2026-12-01 09:20 UTC, commit f62a656"
    assert md.render(markdown_literal(plain)) == f"<p>{plain}</p>\n"
    hostile = "[x](javascript:alert(1)) *b* `c` &lt; <img src=x onerror=alert(1)>\n# heading"
    html = md.render(markdown_literal(hostile))
    assert "<a " not in html and "<em>" not in html and "<code>" not in html and "<img" not in html
    assert "<h1>" not in html and "&amp;lt;" in html


def test_the_build_refuses_a_hostile_manifest_before_any_page(hostile_gallery):
    """conf.py reads the manifest checked, so its strings never reach a page; the refusal names file and field."""
    with pytest.raises(CorruptDataError) as info:
        read_manifest(hostile_gallery, checked=True)
    assert f"{hostile_gallery / 'recording.json'}:" in str(info.value) and "'environment.gpu'" in str(info.value)
    assert read_manifest(hostile_gallery)["environment"]["gpu"] == PAYLOAD  # unchecked reads stay as they were
    conf = (Path(__file__).resolve().parents[2] / "docs" / "conf.py").read_text()
    assert "read_manifest(GALLERY, checked=True)" in conf and "markdown_literal(RECORDED_ON)" in conf


def _code_cell(page: Path, marker: str) -> str:
    cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)```", page.read_text(), flags=re.S)
    cell = next(c for c in cells if marker in c)
    return re.sub(r"\A(:\w[^\n]*\n)+", "", cell)  # without its options (:tags: ...)


def test_the_results_page_escapes_gpu_names_heading_its_columns(root, monkeypatch):
    import pandas as pd
    from gallery_build import shards

    from cudnn_guide.report import html_table

    rows = [
        {"page": STEM, "headline": "median", "unit": "µs", "gpu": gpu, "value": v}
        for gpu, v in (("NVIDIA H200", 80.0), (PAYLOAD, 90.0))
    ]
    monkeypatch.setattr(shards, "across_gpus", lambda data_dir: rows)
    shown = []
    namespace = {"Path": Path, "pd": pd, "html_table": html_table, "display": shown.append, "recs": []}
    exec(_code_cell(root / "docs" / "results.md", "shards.across_gpus"), namespace)
    html = shown[0].to_html()
    assert "<script" not in html and ESCAPED in html, "docs/results.md: the GPU-column headers are not escaped"


def test_the_methodology_page_escapes_commits_heading_its_columns(root):
    import pandas as pd

    from cudnn_guide.report import html_table

    def entry(commit):
        m = {}
        for mode in ("training", "inference"):
            for stage in ("64×56×56", "128×28×28", "256×14×14", "512×7×7"):
                m[f"torch.compile (default) {mode} @ stage={stage}"] = {"median_ms": 0.1}
                m[f"cuDNN {mode} @ stage={stage}"] = {"median_ms": 0.05}
        return {"example": "plot_11_batchnorm_relu", "commit": commit, "measurements": m}

    fake_history = SimpleNamespace(load=lambda path: [entry(PAYLOAD), entry("f62a656")])
    shown = []
    namespace = {"Path": Path, "pd": pd, "html_table": html_table, "display": shown.append, "history": fake_history}
    exec(_code_cell(root / "docs" / "methodology.md", 'e["commit"].startswith("f62a656")'), namespace)
    html = shown[0].to_html()
    assert "<script" not in html, "docs/methodology.md: commit headers are not escaped"
    assert "symbolic, &lt;script (µs)" in html  # the header shows the commit's first 7 characters, escaped


def test_a_site_built_from_a_hostile_recording_stops_before_any_page(tmp_path, root, hostile_gallery):
    """A real Sphinx build (MyST, the project's footer template, the validate_data hook path) with the payload."""
    src = tmp_path / "site"
    src.mkdir()
    (src / "index.md").write_text("# Home\n\n```{admonition} Where\n:class: note\n\n{{ recorded_on }}\n```\n")
    conf = f"""
import os
import sys
sys.path[:0] = [{str(root)!r}, {str(root / "docs" / "_ext")!r}]
from pathlib import Path
from gallery_build.manifest import describe_recording, markdown_literal, recording_commit
from gallery_build.page_checks import validate_data
GALLERY = Path({str(hostile_gallery)!r})
extensions = ["myst_parser"]
myst_enable_extensions = ["colon_fence", "deflist", "substitution"]
myst_substitutions = {{"recorded_on": markdown_literal(describe_recording(GALLERY))}}
templates_path = [{str(root / "docs" / "_templates")!r}]
html_context = {{"site_commit": "x", "recording_commit": recording_commit(GALLERY)}}
def setup(app):
    if os.environ.get("CG_TEST_VALIDATE"):
        app.connect("builder-inited", lambda app: validate_data(GALLERY, GALLERY.parent / "data"), priority=900)
"""
    (src / "conf.py").write_text(conf)
    out = tmp_path / "out"

    def build(**env):
        cmd = [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(src), str(out)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, **env})

    proc = build()  # unchecked: the page renders, and the payload arrives escaped
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (out / "index.html").read_text()
    assert "<script>alert" not in page and page.count(ESCAPED) >= 3, "the home page or its footer is unescaped"
    shutil.rmtree(out)
    proc = build(CG_TEST_VALIDATE="1")  # checked, as the site's builder-inited hook does
    assert proc.returncode != 0 and not (out / "index.html").exists()
    assert f"{STEM}.record.json:1:" in proc.stderr and "'environment.gpu'" in proc.stderr, proc.stderr
