"""The wheel and the frontend names are made beside the build, not after it, and come out the same."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from gallery_build import frontend_index, hooks, wheel

ROOT = Path(__file__).resolve().parents[2]


def _tiny_project(tmp_path: Path, *, pyproject: str | None = None) -> Path:
    root = tmp_path / "project"
    (root / "cudnn_guide").mkdir(parents=True)
    (root / "cudnn_guide" / "__init__.py").write_text('__version__ = "0.1.0"\n')
    (root / "pyproject.toml").write_text(
        pyproject
        or '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "cudnn-guide"\nversion = "0.1.0"\n\n[tool.setuptools]\npackages = ["cudnn_guide"]\n'
    )
    return root


def _members(whl: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(whl) as z:
        return sorted((i.filename, z.read(i)) for i in z.infolist() if not i.filename.endswith("RECORD"))


def test_a_wheel_built_in_the_background_is_the_wheel_built_in_line(tmp_path):
    root = _tiny_project(tmp_path)
    pending = wheel.start_wheel_build(root, tmp_path / "bg")  # returns before pip is done
    inline = wheel.build_wheel(root, tmp_path / "inline")
    built = pending.result()
    assert built.name == wheel.wheel_name(root) == inline.name
    assert _members(built) == _members(inline)
    assert not Path(pending._tmp.name).exists()  # the copy it built from is gone


def test_a_failed_background_wheel_names_pip_and_the_fix(tmp_path):
    root = _tiny_project(tmp_path, pyproject='[project]\nname = "cudnn-guide"\nversion = "0.1.0"\n[broken\n')
    with pytest.raises(RuntimeError, match="could not build cudnn_guide-0.1.0-py3-none-any.whl.*setuptools"):
        wheel.start_wheel_build(root, tmp_path / "out").result()


def test_a_cancelled_wheel_build_stops_pip_and_leaves_no_copy(tmp_path):
    pending = wheel.start_wheel_build(_tiny_project(tmp_path), tmp_path / "out")
    pending.cancel()
    assert pending._proc.poll() is not None
    assert not Path(pending._tmp.name).exists()


def test_the_frontend_names_from_a_fresh_interpreter_match_the_in_process_ones():
    pytest.importorskip("cudnn")
    pending = frontend_index.start_code_links(ROOT)
    in_process = frontend_index.code_links_json(ROOT)
    assert pending.result() == in_process
    assert json.loads(in_process)["pygraph"] == "fe-pygraph"
    assert not pending._out.exists()


def test_frontend_names_that_fail_say_why(tmp_path):
    pytest.importorskip("cudnn")
    (tmp_path / "cudnn_guide").mkdir()
    (tmp_path / "cudnn_guide" / "broken.py").write_text("def (:\n")
    pending = frontend_index.start_code_links(tmp_path)
    with pytest.raises(RuntimeError, match="frontend index could not be computed.*SyntaxError"):
        pending.result()
    assert not pending._out.exists()


class _App:
    """Enough of a Sphinx application for :func:`hooks.connect`: its hooks, by event."""

    def __init__(self, outdir: Path) -> None:
        self.outdir, self.extensions, self.hooks = outdir, {}, {}
        self.builder = SimpleNamespace(format="html")

    def connect(self, event, callback, priority=500):
        self.hooks.setdefault(event, []).append(callback)


class _Job:
    def __init__(self, value):
        self.value, self.cancelled, self.collected = value, False, False

    def result(self):
        self.collected = True
        return self.value

    def cancel(self):
        self.cancelled = True


def _wired(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "docs" / "auto_examples").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "cudnn-guide"\nversion = "0.1.0"\n')
    out = tmp_path / "html"
    (out / "_static").mkdir(parents=True)
    whl = out / "cudnn_guide-0.1.0-py3-none-any.whl"
    jobs = {"wheel": _Job(whl), "links": _Job('{"pygraph": "fe-pygraph"}')}
    started = []
    monkeypatch.setattr(wheel, "start_wheel_build", lambda r, d: started.append("wheel") or jobs["wheel"])
    monkeypatch.setattr(frontend_index, "start_code_links", lambda r: started.append("links") or jobs["links"])
    app = _App(out)
    hooks.connect(app, gallery=root / "docs" / "auto_examples", examples=root / "examples", mode="render", started=0)
    builder_inited = [h for h in app.hooks["builder-inited"] if h.__name__ == "on_builder_inited"][0]
    return app, builder_inited, app.hooks["build-finished"][0], jobs, started


def test_both_start_when_the_builder_is_ready_and_are_written_when_the_build_ends(tmp_path, monkeypatch):
    app, inited, finished, jobs, started = _wired(tmp_path, monkeypatch)
    inited(app)
    assert started == ["wheel", "links"]  # before any page is read
    finished(app, None)
    assert jobs["wheel"].collected and jobs["links"].collected
    assert (app.outdir / "_static" / "frontend-names.json").read_text() == '{"pygraph": "fe-pygraph"}'


def test_a_failed_build_cancels_both_and_writes_nothing(tmp_path, monkeypatch):
    app, inited, finished, jobs, _ = _wired(tmp_path, monkeypatch)
    inited(app)
    finished(app, RuntimeError("a page failed"))
    assert jobs["wheel"].cancelled and jobs["links"].cancelled
    assert not (app.outdir / "_static" / "frontend-names.json").exists()


def test_other_builders_start_neither(tmp_path, monkeypatch):
    app, inited, finished, _, started = _wired(tmp_path, monkeypatch)
    app.builder.format = "dummy"
    inited(app)
    finished(app, None)
    assert started == []
