"""A rebuild reads and writes again only what changed: recorded values are no configuration.

A changed Sphinx configuration value reads (``env``) or writes (``html``) every page again. The
values that change with every recording or commit (the home page's substitutions, the footer's
commits) reach the pages through :mod:`gallery_build.hooks` instead, which re-reads the pages
that use a changed substitution and brings the footers already built up to date.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from gallery_build import hooks
from myst_parser.config.main import MdParserConfig

PAYLOAD = "<script>alert(1)</script>"


def _connected(tmp_path: Path, **kw) -> tuple[dict, Path]:
    callbacks: dict = {}

    def connect(event, fn, priority=500):
        callbacks.setdefault(event, []).append(fn)

    app = SimpleNamespace(extensions={}, connect=connect)
    gallery = tmp_path / "docs" / "auto_examples"
    gallery.mkdir(parents=True)
    (tmp_path / "docs" / "data").mkdir()
    hooks.connect(app, gallery=gallery, examples=tmp_path / "examples", mode="render", started=0.0, **kw)
    return callbacks, tmp_path / "docs"


def _env(docs: Path, pages: dict[str, str]) -> SimpleNamespace:
    for name, text in pages.items():
        (docs / f"{name}.md").write_text(text, encoding="utf-8")
    return SimpleNamespace(found_docs=set(pages), doc2path=lambda doc: docs / f"{doc}.md")


def test_a_changed_recorded_substitution_re_reads_the_pages_that_show_it_and_no_other(tmp_path):
    subs = {"recorded_on": "H200 on day 1", "site_answer": "faster in 3"}
    callbacks, docs = _connected(tmp_path, substitutions=subs)
    env = _env(docs, {"index": "{{ recorded_on }}\n\n{{site_answer}}", "about": "{{ docs_mode }}", "other": "text"})
    outdated = callbacks["env-get-outdated"][0]
    assert outdated(None, env, set(), set(), set()) == ["index"]  # the first build: nothing known yet
    assert outdated(None, env, set(), set(), set()) == []  # the same recording: nothing is read again
    subs["recorded_on"] = "H200 on day 2"  # a new recording (conf.py computes them anew each build)
    assert outdated(None, env, set(), set(), set()) == ["index"]
    assert outdated(None, env, set(), set(), set()) == []


def test_the_recorded_substitutions_reach_myst_when_the_builder_starts(tmp_path):
    callbacks, _ = _connected(tmp_path, substitutions={"recorded_on": "H200"})
    app = SimpleNamespace(env=SimpleNamespace(myst_config=MdParserConfig(substitutions={"docs_mode": "render"})))
    for fn in callbacks["builder-inited"]:
        if fn.__name__ == "on_builder_inited_substitutions":
            fn(app)
    assert app.env.myst_config.substitutions == {"docs_mode": "render", "recorded_on": "H200"}


def test_conf_keeps_recorded_values_out_of_the_configuration(root):
    text = (root / "docs" / "conf.py").read_text(encoding="utf-8")
    assert 'myst_substitutions = {"docs_mode": MODE}' in text, "recorded substitutions go through hooks.connect"
    assert not re.search(r"^html_context\s*=", text, re.M), (
        "the footer's commits go through hooks.connect(commits=...), not html_context"
    )


def _footer(root: Path, tmp_path: Path, site: str, recorded: str) -> str:
    from sphinx.jinja2glue import BuiltinTemplateLoader

    base = tmp_path / "theme"
    base.mkdir(exist_ok=True)
    (base / "page.html").write_text("<footer>{% block footer %}theme{% endblock footer %}</footer>")
    builder = SimpleNamespace(
        config=SimpleNamespace(templates_path=["_templates"]), confdir=root / "docs", _translator=None
    )
    loader = BuiltinTemplateLoader()
    loader.init(builder, dirs=[str(base)])
    return loader.render("page.html", {"site_commit": site, "recording_commit": recorded})


@pytest.mark.parametrize("site, recorded", [("0123456789ab", "de965905cd15"), (PAYLOAD, "a&b")])
def test_restamping_a_built_page_equals_writing_it_with_the_new_commits(root, tmp_path, site, recorded):
    out = tmp_path / "html"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "page.html").write_text(_footer(root, tmp_path, "f7e196f48023", "9a7181e3db56"))
    (out / "plain.html").write_text("<p>no footer</p>")
    changed = hooks.restamp_footers(out, {"site_commit": site, "recording_commit": recorded})
    assert changed == [out / "sub" / "page.html"]
    assert (out / "sub" / "page.html").read_text() == _footer(root, tmp_path, site, recorded)
    assert "<script" not in (out / "sub" / "page.html").read_text()
    assert hooks.restamp_footers(out, {"site_commit": site, "recording_commit": recorded}) == []


def test_an_api_page_stops_depending_on_thumbnails_and_keeps_its_other_dependencies(tmp_path):
    gallery = tmp_path / "docs" / "auto_examples"
    thumb = gallery / "images" / "thumb" / "sphx_glr_plot_12_conv_backward_thumb.png"
    figure = gallery / "images" / "sphx_glr_plot_12_conv_backward_001.png"
    other = tmp_path / "docs" / "_static" / "logo.png"
    deps = {"api/measure": {thumb, figure, other}, "auto_examples/index": {thumb}}
    env = SimpleNamespace(dependencies={k: set(v) for k, v in deps.items()})
    assert hooks.drop_thumbnail_dependencies(env, "api/measure", gallery) == 1
    assert env.dependencies["api/measure"] == {figure, other}  # only the gallery's thumbnails go
    # the gallery's index shows every thumbnail: it is read again, and copies the new image, when one changes
    assert hooks.drop_thumbnail_dependencies(env, "auto_examples/index", gallery) == 0
    assert env.dependencies["auto_examples/index"] == {thumb}


def test_the_api_pages_are_read_again_when_the_pages_using_an_object_change(tmp_path):
    callbacks, docs = _connected(tmp_path)
    env = _env(docs, {"index": "text"})
    (docs / "api").mkdir()
    env.found_docs |= {"api/core", "api/measure"}
    outdated = callbacks["env-get-outdated"][0]
    backrefs = docs / hooks.BACKREFERENCES_ALL
    backrefs.parent.mkdir(parents=True)
    backrefs.write_text('{"cudnn_guide.check.check": [["plot_12_conv_backward.py"]]}', encoding="utf-8")
    assert outdated(None, env, set(), set(), set()) == ["api/core", "api/measure"]
    assert outdated(None, env, set(), set(), set()) == []  # the same pages and titles: a thumbnail alone
    backrefs.write_text('{"cudnn_guide.check.check": [["plot_13_paged_decode.py"]]}', encoding="utf-8")
    assert outdated(None, env, set(), set(), set()) == ["api/core", "api/measure"]


def test_the_backreferences_the_build_watches_are_those_conf_py_writes(root):
    text = (root / "docs" / "conf.py").read_text(encoding="utf-8")
    folder = re.search(r'"backreferences_dir": "([^"]+)"', text).group(1)
    assert Path(folder) == hooks.BACKREFERENCES_ALL.parent
