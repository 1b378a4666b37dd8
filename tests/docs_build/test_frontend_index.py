"""The cuDNN Frontend API index: every name is found where it is really called, and leads to pages that run it."""

from __future__ import annotations

import pytest
from conftest import ROOT
from gallery_build.frontend_index import frontend_index, frontend_vocabulary


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
        ("sink_token=", "plot_24_softcap_sinks_mla"),  # options: keywords of an operation, a tensor, the graph
        ("score_mod=", "plot_24_softcap_sinks_mla"),
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
