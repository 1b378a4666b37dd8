"""Which mode the docs build runs in, and which recorded pages are stale (gallery_build.staleness)."""

import pytest
from conftest import tiny_gallery
from gallery_build import staleness


def test_fresh_stale_and_missing(tmp_path):
    ex, gal = tiny_gallery(tmp_path)
    assert [s.state for s in staleness.example_states(ex, gal)] == ["fresh"]
    staleness.require_fresh_recording(ex, gal)  # no error
    (ex / "plot_a.py").write_text("print(2)\n")
    (ex / "plot_b.py").write_text("print(3)\n")
    states = {s.source.name: s.state for s in staleness.example_states(ex, gal)}
    assert states == {"plot_a.py": "stale", "plot_b.py": "missing"}
    with pytest.raises(staleness.StaleRecordingError) as info:
        staleness.require_fresh_recording(ex, gal)
    msg = str(info.value)
    assert "plot_a.py: changed since it was recorded" in msg
    assert "plot_b.py: has never been recorded" in msg
    assert "re-recorded on a GPU" in msg


def test_docs_mode(monkeypatch):
    monkeypatch.setenv(staleness.MODE_ENV, "record")
    assert staleness.docs_mode() == "record"
    monkeypatch.setenv(staleness.MODE_ENV, "render")
    assert staleness.docs_mode() == "render"
    monkeypatch.setenv(staleness.MODE_ENV, "sometimes")
    with pytest.raises(ValueError, match="expected 'record', 'render' or 'auto'"):
        staleness.docs_mode()


def test_every_example_has_a_fresh_recording(root):
    bad = staleness.stale_examples(root / "examples", root / "docs" / "auto_examples")
    assert not bad, f"re-record on a GPU: {bad}"
