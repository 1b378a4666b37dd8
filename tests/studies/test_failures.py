"""failures: where each reproduced failure surfaces, kept as one row per case; the probe's and the log's
reading of a child's output; the formatting the troubleshooting and libcudnn-and-logs pages print.

Everything here runs without a GPU: the graphs are stand-ins with the frontend's method names, and
the fresh processes are small scripts that print what a real child would.
"""

from __future__ import annotations

import os
import stat
import sys
import textwrap

import pytest

from cudnn_guide.check import LINE_WIDTH
from cudnn_guide.studies import failures
from cudnn_guide.studies.failures import COLUMNS, STEPS, Cases

COMPILE_FAILED = (
    "no plan in the list could be built: [0] eng1_k24=8: cudnnFinalize Descriptor Failed "
    "cudnn_status: CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED [1] eng1_k24=2: cudnnFinalize "
    "Descriptor Failed cudnn_status: CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED [2] eng9: not supported"
)


class cudnnGraphNotSupportedError(Exception):  # the frontend's name, which the rows keep
    pass


class FakeGraph:
    """A stand-in for ``cudnn.pygraph``: the build steps, plan queries and one filter; ``raise_at`` names
    the step that raises ``message``. ``check_support`` raises when no plan is left, as cuDNN's does."""

    def __init__(self, raise_at=None, message="", plans=("eng0", "eng1"), notes=None, workspace=0):
        self.raise_at, self.message = raise_at, message
        self.plans, self.workspace = list(plans), workspace
        self.notes = notes if notes is not None else [[] for _ in plans]
        self.calls, self.heuristics = [], None

    def _step(self, name):
        self.calls.append(name)
        if name == self.raise_at:
            raise cudnnGraphNotSupportedError(self.message)

    def validate(self):
        self._step("validate")

    def build_operation_graph(self):
        self._step("build_operation_graph")

    def create_execution_plans(self, heuristics):
        self.heuristics = heuristics
        self._step("create_execution_plans")

    def check_support(self):
        self._step("check_support")
        if not self.plans:
            raise cudnnGraphNotSupportedError("No execution plans support the graph.")

    def build_plans(self):
        self._step("build_plans")

    def get_execution_plan_count(self):
        return len(self.plans)

    def get_plan_name_at_index(self, i):
        return self.plans[i]

    def get_behavior_notes_for_plan_at_index(self, i):
        return self.notes[i]

    def get_workspace_size(self):
        return self.workspace

    def deselect_engines(self, names):
        self.calls.append(("deselect_engines", names))
        self.plans = [p for p in self.plans if p not in names]


def _row(case="c", outcome="builds", where="—"):
    return dict(zip(COLUMNS, (case, outcome, where, "none", "", "—")))


# --- rows -------------------------------------------------------------------------------------------


def test_a_row_has_the_pages_columns_in_order_and_the_message_whole_on_one_line():
    cases = Cases()
    assert (
        cases.add("head dim 100", "fails with a message", "validate", "E", "hidden_dim\n  should be  8", "pad") is None
    )
    assert list(cases.rows[0]) == ["case", "outcome", "surfaces at", "error", "message", "fix"] == list(COLUMNS)
    assert cases.rows[0]["message"] == "hidden_dim should be 8"
    assert cases.add("x", "builds", "—", "none", ValueError("an\texception"), "—") is None
    assert cases.rows[1]["message"] == "an exception"  # an exception is kept as its text


def test_rows_go_to_the_list_given():
    outcomes = [_row("earlier")]
    cases = Cases(outcomes)
    cases.add("later", "runs", "—", "none", "", "—")
    assert cases.rows is outcomes and [o["case"] for o in outcomes] == ["earlier", "later"]


def test_failed_fine_silent_and_where_the_failures_surfaced():
    cases = Cases(
        [
            _row("a", "fails with a message", "validate"),
            _row("b", "builds"),
            _row("c", "fails to compile a kernel", "build_plans"),
            _row("d", "fails with a message", "validate"),
            _row("e", "runs"),
            _row("f", "raises nothing, wrong output", "nowhere: execute raised nothing"),
        ]
    )
    assert [o["case"] for o in cases.failed()] == ["a", "c", "d"]
    assert [o["case"] for o in cases.fine()] == ["b", "e"]
    assert [o["case"] for o in cases.silent()] == ["f"]
    assert cases.where() == "validate: 2; build_plans: 1"  # the most first
    assert Cases([_row("b"), _row("f", "raises nothing", "nowhere")]).where() == "nowhere"


def test_kinds_name_a_failures_step_and_keep_the_order_first_seen():
    cases = Cases(
        [
            _row("a", "fails with a message", "validate"),
            _row("b", "builds"),
            _row("c", "fails with a message", "execute"),
            _row("d", "fails with a message", "validate"),
            _row("e", "raises nothing", "nowhere"),
        ]
    )
    assert list(cases.kinds().items()) == [
        ("fails with a message at validate", 2),
        ("builds", 1),
        ("fails with a message at execute", 1),
        ("raises nothing", 1),  # not "at nowhere": only a failure names its step
    ]


# --- where a graph's failure surfaces ----------------------------------------------------------------


def test_compile_failures_counts_the_plans_whose_kernel_did_not_compile():
    assert failures.compile_failures(COMPILE_FAILED) == (2, 3)
    assert failures.compile_failures(cudnnGraphNotSupportedError(COMPILE_FAILED)) == (2, 3)
    assert failures.compile_failures("hidden_dim should be multiple of 8") == (0, 1)  # no list: one plan
    assert failures.compile_failures("CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED") == (1, 1)


def test_five_steps_are_the_graphs_steps_in_order_with_the_heuristic_modes_given():
    cudnn = pytest.importorskip("cudnn")
    g = FakeGraph()
    calls = failures.five_steps(g, ("B", "FALLBACK"))
    assert len(calls) == len(STEPS) == 5
    for call in calls:
        call()
    assert g.calls == list(STEPS)
    assert g.heuristics == [cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK]


@pytest.mark.parametrize("step", STEPS)
def test_attempt_keeps_the_step_that_raised_and_stops_there(step, capsys):
    pytest.importorskip("cudnn")
    cases, g = Cases(), FakeGraph(raise_at=step, message="No valid engine configs\nfor this graph")
    assert cases.attempt("case", "the fix", g) is None
    assert g.calls == list(STEPS[: STEPS.index(step) + 1])  # no step after the one that raised
    assert cases.rows == [
        {
            "case": "case",
            "outcome": "fails with a message",
            "surfaces at": step,
            "error": "cudnnGraphNotSupportedError",
            "message": "No valid engine configs for this graph",
            "fix": "the fix",
        }
    ]
    assert cases.compiled == {}
    assert capsys.readouterr().out == f"case: cudnnGraphNotSupportedError at {step} (fails with a message)\n"


def test_attempt_tells_a_kernel_that_failed_to_compile_from_a_refusal(capsys):
    pytest.importorskip("cudnn")
    cases = Cases()
    cases.attempt("matmul in float64", "compute in fp32", FakeGraph(raise_at="build_plans", message=COMPILE_FAILED))
    row = cases.rows[0]
    assert (row["outcome"], row["surfaces at"]) == ("fails to compile a kernel", "build_plans")
    assert cases.compiled == {"matmul in float64": (2, 3)}
    assert "(fails to compile a kernel)" in capsys.readouterr().out
    assert cases.compiled_sentence() == (
        "A failed compilation, not a missing engine: matmul in float64: 2 of the 3 plan(s) build_plans "
        "tried failed to compile their kernel at run time (NVRTC; CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)."
    )
    assert Cases().compiled_sentence() == "No plan failed to compile its kernel here."


def test_attempt_keeps_the_plans_of_a_graph_that_builds(capsys):
    cudnn = pytest.importorskip("cudnn")
    cases, g = Cases(), FakeGraph(plans=("eng2_k24=7", "eng1", "eng0"))
    assert cases.attempt("heuristics: FALLBACK only", "ask A first", g, modes=("FALLBACK",)) is g
    assert g.heuristics == [cudnn.heur_mode.FALLBACK]
    assert cases.rows == [
        {
            "case": "heuristics: FALLBACK only",
            "outcome": "builds",
            "surfaces at": "—",
            "error": "none",
            "message": "3 plan(s), first eng2_k24=7",
            "fix": "—",
        }
    ]
    assert capsys.readouterr().out == "heuristics: FALLBACK only: builds (3 plan(s))\n"


def test_raises_keeps_a_caught_error_and_nothing_when_the_call_returns(capsys):
    cases = Cases()

    def refuse():
        raise cudnnGraphNotSupportedError("the workspace is\ntoo small " + "x" * 90)

    exc = cases.raises("workspace too small", "execute", "allocate it", refuse, prefix="execute raised ")
    assert isinstance(exc, cudnnGraphNotSupportedError)
    assert cases.rows[0]["outcome"] == "fails with a message" and cases.rows[0]["surfaces at"] == "execute"
    assert cases.rows[0]["error"] == "cudnnGraphNotSupportedError" and cases.rows[0]["fix"] == "allocate it"
    assert cases.rows[0]["message"].startswith("the workspace is too small xxx")  # on one line
    out = capsys.readouterr().out
    assert out.startswith("execute raised cudnnGraphNotSupportedError: the workspace is too small")
    assert all(len(line) <= 88 for line in out.splitlines())  # wrapped to the page's width

    assert cases.raises("fine", "execute", "—", lambda: 42) is None
    assert len(cases.rows) == 1 and capsys.readouterr().out == ""  # the caller keeps what success means


def test_raises_lets_an_exception_it_was_not_told_to_catch_through():
    cases = Cases()

    def broken():
        raise KeyError("a bug, not the case failing")

    with pytest.raises(KeyError):
        cases.raises("feature needs a newer GPU", "before declaring", "—", broken, catch=ValueError)
    assert cases.rows == []


# --- fresh processes: the libcudnn probe and the frontend's log --------------------------------------


def test_read_probe_finds_the_version_and_the_file_and_hides_the_directory():
    text = "\nimported; backend version: 91900\n  \nlibcudnn file: /tmp/abc/libcudnn.so.9\na handle was created\n"
    said, version, lib = failures.read_probe(text, hide="/tmp/abc")
    assert said == ["imported; backend version: 91900", "libcudnn file: <dir>/libcudnn.so.9", "a handle was created"]
    assert (version, lib) == ("91900", "<dir>/libcudnn.so.9")
    said, version, lib = failures.read_probe("ImportError: libcudnn.so.9: file too short\n")
    assert (said, version, lib) == (["ImportError: libcudnn.so.9: file too short"], None, "?")
    assert failures.read_probe("") == ([], None, "?")


def test_dotted_and_listed():
    assert failures.dotted(91400) == "9.14.0"
    assert failures.dotted("91900") == "9.19.0"
    assert failures.dotted(90102) == "9.1.2"
    assert failures.dotted(None) == failures.dotted("") == "?"
    assert failures.listed([_row("head dim 100"), _row("float32 inputs")]) == "head dim 100, float32 inputs"
    assert failures.listed([]) == ""


def _fake_python(tmp_path, body):
    """An executable that stands in for a Python: it ignores ``-c PROBE`` and runs ``body`` (sh)."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_probe_fails_at_import_when_no_version_was_printed(tmp_path, capsys):
    python = _fake_python(
        tmp_path,
        """
        echo "Traceback (most recent call last):" >&2
        echo "OSError: $STALE/libcudnn.so.9: file too short" >&2
        exit 1
        """,
    )
    stale = str(tmp_path / "stale")
    cases = Cases()
    cases.probe("broken", python, "remove it", ours="91900", our_file="/x", hide=stale, env={"STALE": stale})
    assert cases.rows == [
        {
            "case": "broken",
            "outcome": "fails with a message",
            "surfaces at": "import cudnn",
            "error": "OSError",
            "message": "OSError: <dir>/libcudnn.so.9: file too short",
            "fix": "remove it",
        }
    ]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "broken: exit code 1; the last lines it printed:"
    assert out[1:] == ["    Traceback (most recent call last):", "    OSError: <dir>/libcudnn.so.9: file too short"]


def test_probe_fails_at_the_handle_when_the_import_printed_a_version(tmp_path):
    python = _fake_python(
        tmp_path,
        """
        echo "imported; backend version: 91900"
        echo "libcudnn file: /lib/libcudnn.so.9"
        echo "cudnn._compiled_module.cudnnGraphNotSupportedError: CUDNN_STATUS_NOT_INITIALIZED" >&2
        exit 1
        """,
    )
    cases = Cases()
    cases.probe("no GPU", python, "fix", ours="91900", our_file="/lib/libcudnn.so.9")
    row = cases.rows[0]
    assert (row["outcome"], row["surfaces at"]) == ("fails with a message", "creating a handle")
    assert row["error"] == "cudnn._compiled_module.cudnnGraphNotSupportedError"


def test_probe_runs_with_this_libcudnn_or_silently_loads_another(tmp_path, capsys):
    python = _fake_python(
        tmp_path,
        """
        echo "imported; backend version: $VERSION"
        echo "libcudnn file: /sys/libcudnn.so.9.$VERSION"
        echo "a handle was created"
        """,
    )
    cases = Cases()
    cases.probe("same", python, "fix", ours="91900", our_file="/w/libcudnn.so.9", env={"VERSION": "91900"})
    cases.probe("other", python, "pip install it", ours="91900", our_file="/w/libcudnn.so.9", env={"VERSION": "90100"})
    assert cases.rows[0] == {
        "case": "same",
        "outcome": "runs",
        "surfaces at": "—",
        "error": "none",
        "message": "loaded libcudnn 9.19.0 from /sys/libcudnn.so.9.91900, as here",
        "fix": "—",
    }
    assert cases.rows[1] == {
        "case": "other",
        "outcome": "raises nothing, loads another libcudnn (9.1.0)",
        "surfaces at": "nowhere",
        "error": "none",
        "message": "loaded libcudnn 9.1.0 from /sys/libcudnn.so.9.90100; this process runs 9.19.0 from "
        "/w/libcudnn.so.9",
        "fix": "pip install it",
    }
    assert [o["case"] for o in cases.fine()] == ["same"] and [o["case"] for o in cases.silent()] == ["other"]
    assert "other: exit code 0; the last lines it printed:\n    imported; backend version: 90100" in (
        capsys.readouterr().out
    )


def test_probe_that_prints_nothing(tmp_path):
    cases = Cases()
    cases.probe("silent crash", _fake_python(tmp_path, "exit 139\n"), "fix", ours="91900", our_file=None)
    assert cases.rows[0]["message"] == "(nothing)" and cases.rows[0]["surfaces at"] == "import cudnn"


def test_the_probe_script_prints_what_read_probe_looks_for():
    assert 'print("imported; backend version:"' in failures.PROBE
    assert 'print("libcudnn file:"' in failures.PROBE
    compile(failures.PROBE, "PROBE", "exec")


def test_frontend_log_keeps_the_frontends_lines_with_logging_on():
    script = (
        "import os\n"
        "print('[cudnn_frontend] INFO: logging', os.environ['CUDNN_FRONTEND_LOG_INFO'],"
        " os.environ['CUDNN_FRONTEND_LOG_FILE'])\n"
        "print('[cudnn_frontend] INFO: Inferrencing properties of tensor q')\n"
        "print('not the log')\n"
        "print('[cudnn_frontend] INFO: heuristics mode A')\n"
    )
    assert failures.frontend_log(script) == [
        "[cudnn_frontend] INFO: logging 1 stdout",
        "[cudnn_frontend] INFO: heuristics mode A",
    ]


def test_log_excerpt_keeps_the_head_then_at_most_so_many_planning_lines_and_shortens_banners():
    lines = [f"[cudnn_frontend] INFO: check {i}" for i in range(3)] + [
        "[cudnn_frontend] INFO: ======== Engine 3 =========",
        "[cudnn_frontend] INFO: tensor q dims",
        "[cudnn_frontend] INFO: Heuristics mode A",
        "[cudnn_frontend] INFO: plan eng0 built",
        "[cudnn_frontend] INFO: Executing the plan",
    ]
    assert failures.log_excerpt(lines, head=2, most=3) == [
        "[cudnn_frontend] INFO: check 0",
        "[cudnn_frontend] INFO: check 1",
        "[cudnn_frontend] INFO: == Engine 3 ==",
        "[cudnn_frontend] INFO: Heuristics mode A",
        "[cudnn_frontend] INFO: plan eng0 built",
    ]
    assert failures.log_excerpt(["== a", "=== b"], head=12) == ["== a", "== b"]
    assert failures.log_excerpt([]) == []
    # the frontend's banners pad their words with spaces and '=' up to a closing '|||'
    banner = "[cudnn_frontend] ||| ========   VALIDATING GRAPH   ========          = |||"
    assert failures.log_excerpt([banner]) == ["[cudnn_frontend] == VALIDATING GRAPH =="]


# --- heuristic modes and plan filters ----------------------------------------------------------------


def test_timed_build_lists_the_plans_with_their_notes():
    pytest.importorskip("cudnn")
    notes = [["behavior_note.RUNTIME_COMPILATION", "behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API"], []]
    g = FakeGraph(plans=("eng2_k24=7", "eng1"), notes=notes, workspace=4096)
    row = failures.timed_build(g, ("A", "FALLBACK"))
    assert g.calls == list(STEPS)
    seconds = row.pop("build s (5 steps)")
    assert 0 <= seconds < 5
    assert row == {
        "heur_mode": "A+FALLBACK",
        "plans": 2,
        "plan names": "eng2_k24=7, eng1",
        "behaviour notes": "RUNTIME_COMPILATION, SUPPORTS_CUDA_GRAPH_NATIVE_API; none",
        "workspace bytes": 4096,
    }


def test_filter_label_reads_as_the_call():
    cudnn = pytest.importorskip("cudnn")
    assert failures.filter_label("deselect_workspace_greater_than", 0) == "deselect_workspace_greater_than(0)"
    assert failures.filter_label("deselect_engines", ["eng2_k24=7"]) == "deselect_engines([eng2_k24=7])"
    assert (
        failures.filter_label("deselect_numeric_notes", [cudnn.numerical_note.TENSOR_CORE])
        == "deselect_numeric_notes([TENSOR_CORE])"
    )
    assert (
        failures.filter_label("select_behavior_notes", [cudnn.behavior_note.SUPPORTS_CUDA_GRAPH_NATIVE_API])
        == "select_behavior_notes([SUPPORTS_CUDA_GRAPH_NATIVE_API])"
    )


def test_filtered_build_applies_the_filter_after_planning_and_says_what_came_of_it():
    pytest.importorskip("cudnn")
    g = FakeGraph(plans=("eng0", "eng1"), workspace=512)
    assert failures.filtered_build(g, "deselect_engines", ["eng0"]) == (
        "builds; the built plan needs 512 bytes of workspace"
    )
    assert g.calls == [*STEPS[:3], ("deselect_engines", ["eng0"]), *STEPS[3:]]
    emptied = FakeGraph(plans=("eng0",))
    assert failures.filtered_build(emptied, "deselect_engines", ["eng0"]) == (
        "cudnnGraphNotSupportedError: No execution plans support the graph."
    )


# --- what the pages show -----------------------------------------------------------------------------


def test_table_shows_the_columns_in_order():
    pytest.importorskip("pandas")
    cases = Cases([_row("<b>head dim 100</b>", "fails with a message", "validate")])
    html = cases.table().to_html()
    heads = [html.index(f">{c}<") for c in COLUMNS]
    assert heads == sorted(heads)
    assert "&lt;b&gt;head dim 100&lt;/b&gt;" in html  # escaped, as every page table is


def test_the_figures_have_a_bar_per_kind_and_per_mode():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = Cases([_row("a", "fails with a message", "validate"), _row("b"), _row("c")])
    fig = failures.plot_kinds(cases.kinds(), "what happened")
    ax = fig.axes[0]
    # the title spans the figure: long bar labels would push an axes title off its right edge
    assert fig.get_suptitle() == "what happened" and len(ax.patches) == 2
    assert ax.yaxis_inverted()  # the first kind on top
    assert [t.get_text() for t in ax.get_yticklabels()] == ["fails with a message at validate", "builds"]
    rows = [
        {"heur_mode": "A", "plans": 3, "build s (5 steps)": 0.02},
        {"heur_mode": "B", "plans": 3, "build s (5 steps)": 0.05},
    ]
    fig2 = failures.plot_build_ms(rows, "cost")
    widths = [p.get_width() for p in fig2.axes[0].patches]
    assert widths == pytest.approx([20.0, 50.0])  # milliseconds
    plt.close("all")


def test_the_module_needs_no_gpu_to_import():
    code = "import sys; import cudnn_guide.studies.failures; print('torch' in sys.modules, 'cudnn' in sys.modules)"
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ}
    ).stdout
    assert out.split()[1] == "False"  # the frontend is imported by the functions that use it


def test_a_place_that_is_its_own_phrase_is_not_prefixed_with_at():
    cases = Cases([_row("a", "fails with a message", "before declaring (the guide's check)"), _row("b")])
    assert list(cases.kinds()) == ["fails with a message before declaring (the guide's check)", "builds"]


def test_a_failed_attempt_longer_than_a_page_line_prints_on_two(capsys):
    pytest.importorskip("cudnn")
    cases = Cases()
    assert cases.attempt("x" * 80, "fix it", FakeGraph(raise_at="validate", message="no")) is None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "x" * 80 + ":"
    assert lines[1] == "    cudnnGraphNotSupportedError at validate (fails with a message)"
    assert all(len(line) <= LINE_WIDTH for line in lines)
