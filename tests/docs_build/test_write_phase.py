"""The main process's share of a parallel build: viewcode's highlighting in workers, each stem once.

Both must leave the site as it was: the highlighted source a worker returns is the one the main
process would have made, a highlighting that warns is done again where its warning is logged, and a
stem kept for the build is the stem of its word.
"""

from __future__ import annotations

import os
import types

import pytest
from gallery_build import write_phase
from sphinx.highlighting import PygmentsBridge

SOURCES = [
    'import math\n\n\ndef f(x: float) -> float:\n    """Doc."""\n    return math.sqrt(x) + 1\n',
    "class A:\n    pass\n" * 50,
    "x = 1\n",
]


@pytest.mark.parametrize("linenos", ["", "inline"])
def test_workers_highlight_each_source_as_the_main_process_does(linenos):
    bridge = PygmentsBridge("html")
    got = write_phase.highlight_in_workers(bridge, [*SOURCES, SOURCES[0]], "python", 2, linenos=linenos)
    assert got == {s: bridge.highlight_block(s, "python", linenos=linenos) for s in SOURCES}


def test_a_source_whose_highlighting_warns_is_left_to_the_main_process():
    bridge = PygmentsBridge("html")
    broken = "x = $y\n"  # an error token: Sphinx warns "Lexing literal_block ... resulted in an error"
    got = write_phase.highlight_in_workers(bridge, [broken, SOURCES[2]], "python", 2, linenos="")
    assert broken not in got and got[SOURCES[2]] == bridge.highlight_block(SOURCES[2], "python", linenos="")


class SignalReporter:
    """A highlighter whose 'highlighted source' is the worker's SIGTERM and SIGINT dispositions."""

    def highlight_block(self, source, lang, **kwargs):
        import signal

        return f"{signal.getsignal(signal.SIGTERM)!r} {signal.getsignal(signal.SIGINT)!r}"


def test_a_worker_dies_on_sigterm_and_leaves_ctrl_c_to_the_main_process_whatever_the_main_process_set():
    """The recorder's SIGTERM handler raises KeyboardInterrupt; a worker running it when the pool
    ended could hang in its exit code, and the main process with it in ``Pool.terminate``."""
    import signal

    from gallery_build import recording

    recording.stop_on_sigterm()  # conftest puts the handlers back after each test
    got = write_phase.highlight_in_workers(SignalReporter(), ["a", "b"], "python", 2)
    assert got == dict.fromkeys(["a", "b"], f"{signal.SIG_DFL!r} {signal.SIG_IGN!r}")
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # the main process's own are untouched


class Stuck:
    """A highlighter that notes its worker's pid, then never finishes."""

    def __init__(self, pids):
        self.pids = pids

    def highlight_block(self, source, lang, **kwargs):
        import time

        (self.pids / str(os.getpid())).touch()
        time.sleep(120)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stuck_workers_are_ended_and_the_main_process_highlights_everything(monkeypatch, tmp_path):
    import time

    monkeypatch.setattr(write_phase, "WORKER_TIMEOUT_S", 1.0)
    start = time.monotonic()
    assert write_phase.highlight_in_workers(Stuck(tmp_path), SOURCES, "python", 2) == {}
    assert time.monotonic() - start < 30
    pids = [int(p.name) for p in tmp_path.iterdir()]
    assert len(pids) == 2 and not any(map(_alive, pids))  # both workers were stuck, and are gone (reaped)


def test_ending_the_pool_kills_each_worker_whatever_its_exit_code_would_do():
    """A worker never runs its exit code: one that would hang in it (a finalizer) does not hold the build."""
    import time

    start = time.monotonic()
    got = write_phase.highlight_in_workers(HangsOnExit(), ["a", "b"], "python", 2)
    assert got == {"a": "a", "b": "b"} and time.monotonic() - start < 30


class HangsOnExit:
    def highlight_block(self, source, lang, **kwargs):
        import time
        from multiprocessing import util

        util.Finalize(None, time.sleep, (3600,), exitpriority=0)  # would run as the worker exits normally
        return source


def test_viewcodes_call_is_answered_once_from_the_ready_ones_and_any_other_goes_to_the_highlighter():
    calls = []

    def original(source, lang, opts=None, force=False, location=None, **kwargs):
        calls.append((source, lang, opts, force, location, kwargs))
        return f"fresh {source}"

    block = write_phase.served(original, {"a": "ready a", "b": "ready b"}, "python", {"linenos": ""})
    assert block("a", "python", linenos="") == "ready a"
    assert block("a", "python", linenos="") == "fresh a"  # once only
    assert block("b", "python", linenos="inline") == "fresh b"  # other options
    assert block("b", "default", linenos="") == "fresh b"  # another language
    assert block("b", "python", {"stripnl": False}, linenos="") == "fresh b"  # lexer options
    assert block("b", "python", linenos="") == "ready b"
    assert [c[0] for c in calls] == ["a", "b", "b", "b"]
    assert block.original is original


def _app(extensions=("sphinx.ext.viewcode",)):
    hooks = {}
    app = types.SimpleNamespace(extensions=dict.fromkeys(extensions), hooks=hooks)
    app.connect = lambda event, fn, priority=500: hooks.setdefault(event, []).append((priority, fn))
    return app


class CountingBridge(PygmentsBridge):
    """A highlighter that counts the blocks it highlights in this process (a forked worker counts its own)."""

    def __init__(self):
        super().__init__("html")
        self.highlighted = []

    def highlight_block(self, source, lang, opts=None, force=False, location=None, **kwargs):
        self.highlighted.append(source)
        return super().highlight_block(source, lang, opts, force, location, **kwargs)


def test_the_highlighting_runs_before_viewcodes_own_collect_pages_and_is_undone_after_the_build(monkeypatch):
    import sphinx.ext.viewcode

    app = _app()
    assert write_phase.install_source_highlighting(app)
    [(priority, ahead)] = app.hooks["html-collect-pages"]
    assert priority < 500  # sphinx.ext.viewcode connects collect_pages at the default, 500
    bridge = CountingBridge()
    app.builder = types.SimpleNamespace(format="html", name="html", highlighter=bridge)
    app.config = types.SimpleNamespace(highlight_language="default", viewcode_line_numbers=True)
    app.parallel = 2
    modules = {"m": (SOURCES[0], {}, {}, "m"), "old": (SOURCES[1], {}, {}, "old"), "gone": False}
    app.env = types.SimpleNamespace(_viewcode_modules=modules)
    monkeypatch.setattr(sphinx.ext.viewcode, "should_generate_module_page", lambda app, modname: modname != "old")
    assert ahead(app) == []
    assert bridge.highlighted == []  # in the workers
    # what viewcode then asks for ("default", as highlight_language says; line numbers on): no highlighting here
    expected = PygmentsBridge("html").highlight_block(SOURCES[0], "default", linenos="inline")
    assert bridge.highlight_block(SOURCES[0], "default", linenos="inline") == expected
    assert bridge.highlighted == []
    bridge.highlight_block(SOURCES[1], "default", linenos="inline")  # a page viewcode keeps: not done ahead
    assert bridge.highlighted == [SOURCES[1]]
    [(_, restore)] = app.hooks["build-finished"]
    restore(app, None)
    assert "highlight_block" not in vars(bridge)  # the class's own method again


@pytest.mark.parametrize(
    ("parallel", "builder"), [(1, ("html", "html")), (2, ("html", "singlehtml")), (2, ("latex", "latex"))]
)
def test_nothing_is_highlighted_ahead_serially_or_where_viewcode_writes_no_pages(parallel, builder):
    app = _app()
    write_phase.install_source_highlighting(app)
    [(_, ahead)] = app.hooks["html-collect-pages"]
    bridge = types.SimpleNamespace(highlight_block=lambda *a, **k: pytest.fail("highlighted"))
    app.builder = types.SimpleNamespace(format=builder[0], name=builder[1], highlighter=bridge)
    app.config = types.SimpleNamespace(
        highlight_language="python", viewcode_line_numbers=False, viewcode_enable_epub=False
    )
    app.parallel = parallel
    app.env = types.SimpleNamespace(_viewcode_modules={"m": (SOURCES[0], {}, {}, "m")})
    assert ahead(app) == [] and "highlight_block" in vars(bridge)  # untouched


def test_without_viewcode_nothing_is_connected():
    app = _app(extensions=())
    assert not write_phase.install_source_highlighting(app)
    assert "html-collect-pages" not in app.hooks


def test_the_search_index_stems_each_word_once_per_build_and_the_same_stem():
    from sphinx.search.en import SearchEnglish

    calls = []

    class Counting(SearchEnglish):
        def stem(self, word):
            calls.append(word)
            return super().stem(word)

    lang = Counting({})
    app = _app()
    assert write_phase.install_stem_memo(app)
    app.builder = types.SimpleNamespace(indexer=types.SimpleNamespace(lang=lang))
    [(_, on_resolved)] = app.hooks["doctree-resolved"]
    words = ["running", "graphs", "Running", "running", "graphs", "cudnn"]
    on_resolved(app, None, "index")
    on_resolved(app, None, "api/graphs")  # installed once, not wrapped again
    assert [lang.stem(w) for w in words] == [SearchEnglish({}).stem(w) for w in words]
    assert calls == ["running", "graphs", "Running", "cudnn"]


def test_a_builder_without_a_search_index_is_left_alone():
    app = _app()
    write_phase.install_stem_memo(app)
    app.builder = types.SimpleNamespace(name="dummy")
    [(_, on_resolved)] = app.hooks["doctree-resolved"]
    on_resolved(app, None, "index")  # no indexer: nothing to do, no error
