import json

import pytest

from cudnn_guide import bench, check, records


def test_write_and_load(tmp_path):
    import torch

    rec = records.Record("plot_demo", title="Demo")
    rec.add(bench.Measurement("a", [1.0, 2.0], "hot-L2 events", flops=1e9, params={"impl": "a"}))
    rec.add_check(check.compare(torch.ones(3), torch.ones(3), name="ones"))
    value = rec.headline("speed-up", 1.5, "x", baseline="torch")
    assert value == 1.5
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
