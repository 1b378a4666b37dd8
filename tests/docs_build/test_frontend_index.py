"""The cuDNN Frontend API index: every name is found where it is really called, and leads to pages that run it."""

from __future__ import annotations

import pytest
from conftest import ROOT
from gallery_build.frontend_index import api_pages, frontend_index, frontend_vocabulary, helper_links, page_links


@pytest.fixture(scope="module")
def index():
    return {r["name"]: r for r in frontend_index(ROOT)}


@pytest.mark.parametrize(
    "name, page",
    [
        ("sdpa_backward", "plot_09_sdpa_backward"),  # declared in a helper the page calls
        ("conv_dgrad", "plot_12_conv_backward"),  # called through getattr from a table of names
        ("conv_wgrad", "plot_12_conv_backward"),
        ("deserialize", "plot_06_serialization"),
        ("serialize", "plot_06_serialization"),  # on fused.built.graph, in the page itself
        ("execute_plan_at_index", "plot_03_autotuning"),
        ("cudnn.create_kernel_cache", "plot_07_kernel_cache"),  # in a function the page runs in a fresh process
        ("set_output", "plot_02_conv_bias_relu"),
        ("cudnn.heur_mode", "plot_02_conv_bias_relu"),
        ("sink_token=", "plot_35_attention_sinks"),  # options: keywords of an operation, a tensor, the graph
        ("score_mod=", "plot_24_softcap"),
        ("ragged_offset=", "plot_17_varlen_attention"),
        ("kernel_cache=", "plot_07_kernel_cache"),
        ("use_deterministic_algorithm=", "plot_20_dropout_deterministic"),
        ("diagonal_band_left_bound=", "plot_18_attention_masks"),  # passed on to g.sdpa through **mask
    ],
)
def test_a_frontend_name_leads_to_a_page_that_runs_it(index, name, page):
    assert page in index[name]["pages"]


def test_every_listed_page_and_helper_exists(index, root):
    import importlib

    pages = {p.stem for p in (root / "examples").glob("plot_*.py")}
    for row in index.values():
        assert set(row["pages"]) <= pages
        for helper in row["helpers"]:
            module, name = helper.rsplit(".", 1)
            assert hasattr(importlib.import_module(module), name), helper


def test_common_words_are_not_mistaken_for_graph_calls(index):
    vocab = frontend_vocabulary()
    assert "max" in vocab["graph"] and "abs" in vocab["graph"]  # the frontend has them too ...
    assert "max" not in index and "abs" not in index  # ... but the site only calls torch's


def test_keywords_of_other_apis_are_not_mistaken_for_options(index):
    # plot_18 passes score_mod= to PyTorch's FlexAttention, and the environment record has an sm_count field
    assert "plot_18_attention_masks" not in index["score_mod="]["pages"]
    assert "sm_count=" not in index


def test_pages_show_their_number_and_title_linked():
    titles = {"plot_04_matmul_epilogue": "Matmul with a fused epilogue", "plot_09_sdpa_backward": "Attention backward"}
    html = page_links(["plot_04_matmul_epilogue", "plot_09_sdpa_backward"], titles)
    assert html == (
        '<a href="auto_examples/plot_04_matmul_epilogue.html">04 · Matmul with a fused epilogue</a><br>'
        '<a href="auto_examples/plot_09_sdpa_backward.html">09 · Attention backward</a>'
    )
    assert page_links([], titles) == ""  # the table then says "(helpers only)"


def test_a_page_without_a_recorded_title_shows_its_stem():
    assert page_links(["plot_05_sdpa_causal"], {}) == (
        '<a href="auto_examples/plot_05_sdpa_causal.html">05 · plot_05_sdpa_causal</a>'
    )


def test_a_hostile_title_shows_as_text():
    html = page_links(["plot_04_matmul_epilogue"], {"plot_04_matmul_epilogue": '<script>alert(1)</script> & "x"'})
    assert "<script>" not in html
    assert "04 · &lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;x&quot;</a>" in html


def test_api_pages_are_read_from_the_split_reference(root):
    pages = api_pages(root / "docs")
    assert pages["cudnn_guide.graphs.builder"] == "api/graphs"
    assert pages["cudnn_guide.measure.compare"] == "api/measure"
    assert pages["cudnn_guide.report.tables"] == "api/report"
    assert pages["cudnn_guide.studies.coldstart"] == "api/studies"
    assert pages["cudnn_guide.environment"] == "api/core"
    # a subpackage's overview (:no-members:) gives its members no anchor: nothing links there
    assert "cudnn_guide.graphs" not in pages and "cudnn_guide.measure" not in pages


def test_api_pages_skip_only_entries_without_members(tmp_path):
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "x.md").write_text(
        "```{eval-rst}\n.. automodule:: pkg\n   :no-members:\n```\n\n"
        "```{eval-rst}\n.. automodule:: pkg.a\n   :show-inheritance:\n```\n\n"
        "```{eval-rst}\n.. automodule:: pkg.b\n```\n"
    )
    assert api_pages(tmp_path) == {"pkg.a": "api/x", "pkg.b": "api/x"}


def test_helpers_link_to_the_api_page_that_documents_them(root):
    pages = api_pages(root / "docs")
    html = helper_links(["cudnn_guide.graphs.builder.build", "cudnn_guide.measure.compare.compare"], pages)
    assert html == (
        '<a href="api/graphs.html#cudnn_guide.graphs.builder.build"><code>graphs.<wbr>builder.<wbr>build</code></a>, '
        '<a href="api/measure.html#cudnn_guide.measure.compare.compare">'
        "<code>measure.<wbr>compare.<wbr>compare</code></a>"
    )


def test_a_helper_outside_the_reference_is_shown_unlinked(root):
    pages = api_pages(root / "docs")
    private = helper_links(["cudnn_guide.graphs.builder._wrap"], pages, lambda module, name: not name.startswith("_"))
    assert private == "<code>graphs.<wbr>builder.<wbr>_wrap</code>"
    assert helper_links(["cudnn_guide.nowhere.f"], pages) == "<code>nowhere.<wbr>f</code>"


def test_every_linked_helper_is_documented_on_its_page(index, root):
    """Each link the index makes names a public name of a module whose page documents its members."""
    import importlib
    import re

    pages = api_pages(root / "docs")

    def public(module, name):
        return name in getattr(importlib.import_module(module), "__all__", ())

    links = set()
    for row in index.values():
        links |= set(re.findall(r'href="([^"]+)"', helper_links(row["helpers"], pages, public)))
    assert links, "no helper in the frontend index links to the API reference"
    for link in links:
        page, anchor = link.split("#")
        module, name = anchor.rsplit(".", 1)
        assert page == pages[module] + ".html" and public(module, name), link
        entry = f".. automodule:: {module}\n"
        assert entry in (root / "docs" / f"{pages[module]}.md").read_text(), f"{link}: no {entry!r} on that page"


def test_a_frontend_name_is_described_from_the_installed_frontends_own_docstring():
    from gallery_build.frontend_index import describe

    line, url = describe("set_output", "tensor method")
    assert line.startswith("Mark this tensor as an output") and url.endswith("/python/cudnn/graph_types.py")
    assert describe("cudnn.heur_mode", "module")[0].startswith("Enumeration: A, B, FALLBACK")
    assert describe("cudnn.cudnnGraphNotSupportedError", "module") == ("", "")  # only Exception's docstring
    assert describe("bias=", "option") == ("", "")
    assert describe("not_a_frontend_name", "graph method") == ("", "")
