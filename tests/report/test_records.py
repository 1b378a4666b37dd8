import json

import pytest

from cudnn_guide import check
from cudnn_guide.measure import measurement
from cudnn_guide.report import records


def test_write_and_load(tmp_path):
    import torch

    rec = records.Record("plot_demo", title="Demo")
    rec.add(measurement.Measurement("a", [1.0, 2.0], "hot-L2 events", flops=1e9, params={"impl": "a"}))
    rec.add_check(check.compare(torch.ones(3), torch.ones(3), name="ones"))
    # None: a hidden block ending with it must not print a stray number under the page's takeaways
    assert rec.headline("speed-up", 1.5, "x", baseline="torch") is None
    assert rec.headlines[-1]["value"] == 1.5
    path = rec.write(tmp_path)
    assert path.name == "plot_demo.record.json"
    data = records.load(path)
    assert data["schema_version"] == records.SCHEMA_VERSION
    assert data["all_checks_passed"] is True
    assert data["measurements"][0]["samples_ms"] == [1.0, 2.0]
    assert data["headlines"][0]["baseline"] == "torch"


def test_a_record_without_checks_is_not_passed(tmp_path):
    data = records.load(records.Record("plot_x").write(tmp_path))
    assert data["all_checks_passed"] is False


def test_env_var_chooses_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDNN_GUIDE_RECORD_DIR", str(tmp_path / "r"))
    assert records.Record("plot_y").write().parent == tmp_path / "r"


def test_load_rejects_foreign_and_newer_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ValueError, match="not a cudnn-guide/record"):
        records.load(p)
    p.write_text(json.dumps({"schema": records.SCHEMA, "schema_version": 99}))
    with pytest.raises(ValueError, match="newer"):
        records.load(p)


def test_passing_checks_join_the_running_examples_record_which_finish_writes(tmp_path):
    import torch

    from cudnn_guide.errors import CheckFailedError

    records.begin()
    check.check(torch.ones(4), torch.ones(4), name="ones")
    check.compare(torch.ones(4), torch.zeros(4), name="a compare is the caller's to record")
    with pytest.raises(CheckFailedError):
        check.check(torch.ones(4), torch.zeros(4), name="a failed check raises instead")
    records.page().headline("speed-up", 2.0, "x")
    path = records.finish("plot_demo", "Demo page", tmp_path)
    data = records.load(path)
    assert (data["example"], data["title"]) == ("plot_demo", "Demo page")
    assert [c["name"] for c in data["checks"]] == ["ones"] and data["all_checks_passed"] is True
    assert data["headlines"][0]["value"] == 2.0
    assert records.finish("plot_demo", "Demo page", tmp_path) is None  # nothing collected since: nothing written


def test_checks_outside_a_collection_are_not_kept(tmp_path):
    import torch

    records.begin()
    assert records.finish("plot_demo", "Demo", tmp_path) is None  # nothing collected: no file
    for _ in range(3):  # a script or a training loop checking again and again keeps nothing
        check.check(torch.ones(2), torch.ones(2), name="outside")
    assert records.page().checks == []


def test_two_measurements_or_headlines_under_one_name_are_refused_naming_the_page():
    from cudnn_guide.errors import BenchmarkError

    rec = records.Record("plot_demo", title="Demo")
    first = measurement.Measurement("batch 1", [1.0, 2.0], "cold-L2 events", params={"impl": "cache"})
    rec.add(first, first)  # the same measurement twice is kept once
    with pytest.raises(BenchmarkError, match="plot_demo: two measurements are labelled 'batch 1'"):
        rec.add(measurement.Measurement("batch 1", [3.0, 4.0], "cold-L2 events", params={"impl": "no cache"}))
    assert rec.measurements == [first]
    rec.headline("speed-up", 1.5, "x")
    with pytest.raises(BenchmarkError, match="plot_demo: two headlines are named 'speed-up'"):
        rec.headline("speed-up", 1.6, "x")


def test_a_pages_hidden_block_declares_headlines_with_module_functions(tmp_path):
    """``headline``, ``comparison`` and ``keep`` write to the running example's record, and the
    environment that ``environment.collect`` registers is stored without the page passing it."""
    from types import SimpleNamespace

    from cudnn_guide import collector

    records.begin()
    env = SimpleNamespace(to_dict=lambda: {"gpu": "NVIDIA H200"})
    collector.add_environment(env)  # what environment.collect() does at its end
    m = measurement.Measurement("kept", [1.0, 2.0], "hot-L2 events")
    result = SimpleNamespace(
        candidate="cudnn",
        best_baseline="eager",
        versus={"eager": {"value": 1.4, "low": 1.3, "high": 1.5, "verdict": "faster"}},
        measurements={
            "cudnn": measurement.Measurement("cudnn", [1.0], "hot-L2 events"),
            "eager": measurement.Measurement("eager", [1.4], "hot-L2 events"),
        },
        tie_band=0.02,
        rounds=7,
    )
    records.headline("median", unit="µs", value=12.0, low=11.0, high=13.0)
    records.headline("count", 3, "count")
    records.comparison("speed-up over best baseline", result)
    records.keep([m], fresh_runs=[1, 2])
    data = records.load(records.finish("plot_demo", "Demo", tmp_path))
    assert data["environment"] == {"gpu": "NVIDIA H200"}
    assert [(h["name"], h["value"], h["unit"]) for h in data["headlines"]] == [
        ("median", 12.0, "µs"),
        ("count", 3.0, "count"),
        ("speed-up over best baseline", 1.4, "x"),
    ]
    assert data["headlines"][2]["baseline"] == "eager" and data["headlines"][2]["verdict"] == "faster"
    assert {x["label"] for x in data["measurements"]} == {"kept", "cudnn", "eager"}
    assert (data["headlines"][2]["low"], data["headlines"][2]["high"]) == (1.3, 1.5)  # in-run, as measured
    assert data["extra"] == {"fresh_runs": [1, 2]}


def test_a_headline_without_a_value_is_refused():
    records.begin()
    with pytest.raises(TypeError):
        records.headline("median", unit="µs")
