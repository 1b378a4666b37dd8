"""libcudnn_and_logs: the libcudnn-and-logs page's collect_env lines, probes, log script, filter rows and
conclusions.

Everything here runs without a GPU: ``collect_env`` and one probe run small shell scripts that stand in
for a Python, the other probes are handed to a stand-in for ``Cases`` that records what it was asked, and
the filtered builds run on a stand-in graph with the frontend's method names.
"""

from __future__ import annotations

import os
import stat
import textwrap

import pytest

from cudnn_guide.studies import failures
from cudnn_guide.studies import libcudnn_and_logs as logs
from cudnn_guide.studies.failures import Cases
from cudnn_guide.studies.libcudnn_and_logs import BROKEN_COPY, FILTER_COLUMN, NO_WHEEL


def _fake_python(tmp_path, body):
    """An executable that stands in for a Python: it ignores its arguments and runs ``body`` (sh)."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_fill_wraps_at_88_with_an_indented_continuation_and_keeps_words_and_hyphens_whole():
    assert logs.fill("short line") == "short line"
    line = "cuDNN version: " + " ".join(["/usr/lib/x86_64-linux-gnu/libcudnn.so.9.19.0"] * 3)
    lines = logs.fill(line).splitlines()
    assert len(lines) > 1 and all(ln.startswith("    ") for ln in lines[1:])
    assert all(len(ln) <= 88 for ln in lines)
    assert all(ln.strip().startswith(("cuDNN", "/usr")) for ln in lines)  # no path broken at a hyphen


def test_fill_breaks_a_word_longer_than_a_line_after_its_commas_and_nothing_is_longer_than_88():
    # the recorded log line whose behavior_notes:[...] token alone is 108 characters (a 112-character line)
    line = (
        "[cudnn_frontend] CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : ______________eng2_k24=7, "
        "numeric_notes:[CUDNN_NUMERICAL_NOTE_TENSOR_CORE,] "
        "behavior_notes:[CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION,CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API,] "
        "workSpaceSize: 256"
    )
    lines = logs.fill(line).splitlines()
    assert all(len(ln) <= 88 for ln in lines)
    assert "    behavior_notes:[CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION," in lines  # broken after a comma
    assert "    CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API,] workSpaceSize: 256" in lines
    assert "".join(logs.fill(line).split()) == "".join(line.split())  # nothing lost, nothing added
    path = "/opt/" + "/".join(["site-packages"] * 8) + "/libcudnn.so.9"  # 124 characters, broken after slashes
    lines = logs.fill(f"libcudnn file: {path}").splitlines()
    assert all(len(ln) <= 88 for ln in lines) and all(ln.rstrip().endswith("/") for ln in lines[:-1])
    lines = logs.fill("x" * 200).splitlines()  # no comma or slash: broken inside, as a last resort
    assert [len(ln) for ln in lines] == [88, 88, 32]


def test_collect_env_keeps_the_lines_that_name_cudnn_torch_cuda_the_gpu_or_the_driver(tmp_path):
    python = _fake_python(
        tmp_path,
        """
        echo "Python version: 3.11"
        echo "cuDNN frontend version: 1.32.0"
        echo "PyTorch: torch 2.11"
        echo "Nvidia driver version: 580.1"
        echo "NVIDIA_REQUIRE_CUDA=cuda>=13.0 brand=tesla,driver>=535"
        echo "GPU 0: NVIDIA H200"
        echo "CUDA runtime: 13.0" >&2
        """,
    )
    assert logs.collect_env(python) == [
        "cuDNN frontend version: 1.32.0",
        "PyTorch: torch 2.11",
        "Nvidia driver version: 580.1",
        "GPU 0: NVIDIA H200",
        "CUDA runtime: 13.0",  # standard error after standard output
    ]
    assert logs.collect_env(python, most=2) == ["cuDNN frontend version: 1.32.0", "PyTorch: torch 2.11"]


# what python -m cudnn.collect_env printed on the H200 (abridged): sections, and the GPU libraries' entries
# whose headings (libcublas, libnvrtc) name none of ENV_WORDS while the directories under them do
COLLECT_ENV = """
echo "### cuDNN frontend environment report"
echo ""
echo "==== cuDNN Frontend ===="
echo "cudnn backend (loaded)      : 9.19.0 (91900)"
echo ""
echo "==== Python / Platform ===="
echo "Python            : 3.12.3"
echo "Python executable : /opt/torch/.venv/bin/python3"
echo ""
echo "==== GPU Libraries: loaded vs on disk ===="
echo "libcudnn  ⚠ other installs on disk (check which one you expect):"
echo "    LOADED   /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib/  [pip nvidia-cudnn-cu13==9.19.0.56]"
echo "    on disk  /usr/lib/x86_64-linux-gnu/  [v9.14.0]"
echo "libcublas  ⚠ other installs on disk (check which one you expect):"
echo "    LOADED   /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/  [pip nvidia-cublas==13.1.0.3]"
echo "    on disk  /usr/local/cuda-13.0/targets/x86_64-linux/lib/  [v13.1.0.3]"
echo "libnvrtc  ⚠ other installs on disk (check which one you expect):"
echo "    LOADED   /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/  [pip nvidia-cuda-nvrtc==13.0.88]"
echo "libcuda (driver):"
echo "    LOADED   /usr/lib/x86_64-linux-gnu/  [v580.159.04]"
echo "libfoo:"
echo "    on disk  /usr/lib/brand=tesla/"
echo ""
echo "==== Relevant Packages ===="
echo "numpy         : 2.4.6"
echo "cuda-bindings : 13.3.1"
echo ""
echo "==== Environment Variables ===="
echo "NVIDIA_REQUIRE_CUDA : cuda>=13.0 brand=tesla,driver>=535"
"""


def test_collect_env_keeps_each_entry_whole_under_its_own_section_and_no_heading_empty(tmp_path):
    python = _fake_python(tmp_path, COLLECT_ENV)
    lib = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia"
    assert logs.collect_env(python) == [
        "### cuDNN frontend environment report",
        "==== cuDNN Frontend ====",
        "cudnn backend (loaded)      : 9.19.0 (91900)",
        "==== Python / Platform ====",  # a section shown with its kept entry; Python's version is not one
        "Python executable : /opt/torch/.venv/bin/python3",
        "==== GPU Libraries: loaded vs on disk ====",
        "libcudnn  ⚠ other installs on disk (check which one you expect):",
        f"    LOADED   {lib}/cudnn/lib/  [pip nvidia-cudnn-cu13==9.19.0.56]",
        "    on disk  /usr/lib/x86_64-linux-gnu/  [v9.14.0]",  # the other libcudnn, under libcudnn
        "libcublas  ⚠ other installs on disk (check which one you expect):",  # cuBLAS under its own heading
        f"    LOADED   {lib}/cu13/lib/  [pip nvidia-cublas==13.1.0.3]",
        "    on disk  /usr/local/cuda-13.0/targets/x86_64-linux/lib/  [v13.1.0.3]",
        "libnvrtc  ⚠ other installs on disk (check which one you expect):",
        f"    LOADED   {lib}/cu13/lib/  [pip nvidia-cuda-nvrtc==13.0.88]",
        "libcuda (driver):",  # with the driver library it loaded
        "    LOADED   /usr/lib/x86_64-linux-gnu/  [v580.159.04]",
        "==== Relevant Packages ====",  # libfoo: its only line lists brand=, so its heading goes too
        "cuda-bindings : 13.3.1",
    ]  # and no Environment Variables: its only entry lists brand=


@pytest.mark.parametrize("most", range(1, 20))
def test_collect_env_cut_at_most_lines_keeps_whole_entries_and_never_ends_on_a_heading(tmp_path, most):
    whole = logs.collect_env(_fake_python(tmp_path, COLLECT_ENV))
    cut = logs.collect_env(_fake_python(tmp_path, COLLECT_ENV), most=most)
    assert len(cut) <= most and cut == whole[: len(cut)]
    assert not cut or not (cut[-1].startswith("====") or cut[-1].endswith(":"))  # nothing under it
    assert len(cut) == len(whole) or whole[len(cut)].startswith(("====", "lib", "cud", "Python", "###"))


class RecordingCases:
    """Records what :meth:`Cases.probe` was asked, and what the probe's files looked like at the time."""

    def __init__(self):
        self.calls = []

    def probe(self, case, python, fix, ours, our_file, hide="", env=None):
        stale = os.path.join(hide, "libcudnn.so.9") if hide else None
        self.calls.append(
            dict(
                case=case,
                python=python,
                fix=fix,
                ours=ours,
                our_file=our_file,
                hide=hide,
                env=env,
                python_exists=os.path.exists(python),
                stale_size=os.path.getsize(stale) if stale and os.path.exists(stale) else None,
            )
        )


def test_the_broken_copy_is_an_empty_libcudnn_first_on_ld_library_path(monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/cuda/lib")
    cases = RecordingCases()
    logs.probe_broken_copy(cases, ours="91900", our_file="/w/libcudnn.so.9", python="/usr/bin/python3")
    (call,) = cases.calls
    assert call["case"] == BROKEN_COPY == "a broken libcudnn.so.9 first on LD_LIBRARY_PATH"
    assert call["python"] == "/usr/bin/python3" and call["stale_size"] == 0
    assert call["env"] == {"LD_LIBRARY_PATH": call["hide"] + os.pathsep + "/opt/cuda/lib"}
    assert (call["ours"], call["our_file"]) == ("91900", "/w/libcudnn.so.9")
    assert call["fix"] == (
        "remove that directory from LD_LIBRARY_PATH (libcudnn.find_libcudnn().explain() names the file that would load)"
    )
    assert not os.path.exists(call["hide"])  # the temporary directory is gone


def test_the_broken_copys_probe_shows_its_directory_as_dir(tmp_path, capsys):
    python = _fake_python(
        tmp_path,
        """
        echo "Traceback (most recent call last):" >&2
        echo "OSError: ${LD_LIBRARY_PATH%%:*}/libcudnn.so.9: file too short" >&2
        exit 1
        """,
    )
    cases = Cases()
    logs.probe_broken_copy(cases, ours="91900", our_file=None, python=python)
    row = cases.rows[0]
    assert (row["case"], row["outcome"], row["surfaces at"]) == (BROKEN_COPY, "fails with a message", "import cudnn")
    assert row["message"] == "OSError: <dir>/libcudnn.so.9: file too short"
    assert capsys.readouterr().out.startswith(f"{BROKEN_COPY}: exit code 1")


def test_the_no_wheel_probe_runs_a_virtual_environments_python_with_ld_library_path_empty():
    cases = RecordingCases()
    logs.probe_no_wheel(cases, ours="91900", our_file=None)
    (call,) = cases.calls
    assert call["case"] == NO_WHEEL == "no nvidia-cudnn wheel where the frontend looks"
    assert call["python_exists"] and call["python"].endswith(os.path.join("bin", "python"))
    assert call["env"] == {"LD_LIBRARY_PATH": ""} and call["hide"] == ""
    assert call["fix"].startswith("pip install nvidia-cudnn-cu13 (or torch, which brings it)")
    assert not os.path.exists(call["python"])  # the environment is gone


def test_the_log_script_builds_causal_attention_with_heuristics_a():
    compile(logs.LOG_SCRIPT, "LOG_SCRIPT", "exec")
    assert "diagonal_band_right_bound=0" in logs.LOG_SCRIPT
    assert "g.build([cudnn.heur_mode.A])" in logs.LOG_SCRIPT
    assert 'torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)' in logs.LOG_SCRIPT


class FilterGraph:
    """A stand-in for ``cudnn.pygraph`` with two plans, the five build steps and the plan filters."""

    def __init__(self):
        self.plans, self.filters = ["eng0", "eng7"], []

    def validate(self):
        pass

    build_operation_graph = build_plans = validate

    def create_execution_plans(self, heuristics):
        self.heuristics = heuristics

    def check_support(self):
        if not self.plans:
            raise RuntimeError("No execution plans support\nthe graph.")

    def get_workspace_size(self):
        return 64

    def deselect_engines(self, names):
        self.filters.append(("deselect_engines", names))
        self.plans = [p for p in self.plans if p not in names]

    def deselect_workspace_greater_than(self, n):
        self.filters.append(("deselect_workspace_greater_than", n))
        self.plans = []


def test_filter_rows_build_a_fresh_graph_per_filter_and_say_what_each_left(monkeypatch):
    pytest.importorskip("cudnn")
    graphs = []

    def sdpa_graph(handle):
        graphs.append(FilterGraph())
        return graphs[-1], ()

    monkeypatch.setattr(failures, "sdpa_graph", sdpa_graph)
    rows = logs.filter_rows("handle", [("deselect_engines", ["eng0"]), ("deselect_workspace_greater_than", 0)])
    assert rows == [
        {FILTER_COLUMN: "deselect_engines([eng0])", "result": "builds; the built plan needs 64 bytes of workspace"},
        {
            FILTER_COLUMN: "deselect_workspace_greater_than(0)",
            "result": "RuntimeError: No execution plans support the graph.",
        },
    ]
    assert [g.filters for g in graphs] == [[("deselect_engines", ["eng0"])], [("deselect_workspace_greater_than", 0)]]
    assert FILTER_COLUMN == "filter (after create_execution_plans)"


def _timed(mode, plans, seconds):
    return {"heur_mode": mode, "plans": plans, "build s (5 steps)": seconds}


def _probed(*rows):
    cases = Cases()
    for row in rows:
        cases.add(*row)
    return cases


def test_the_conclusions_say_which_libcudnn_what_each_probe_did_the_modes_and_the_filters():
    cases = _probed(
        (BROKEN_COPY, "fails with a message", "import cudnn", "OSError", "file too short", "remove it"),
        (NO_WHEEL, "runs", "—", "none", "loaded libcudnn 9.19.0 from /w/libcudnn.so.9, as here", "—"),
    )
    rows = [_timed("A", 2, 0.0123), _timed("B", 2, 0.0456), _timed("A+FALLBACK", 5, 0.05)]
    filtered = [
        {FILTER_COLUMN: "deselect_workspace_greater_than(0)", "result": "cudnnGraphNotSupportedError: No plans"},
        {FILTER_COLUMN: "deselect_engines([eng0])", "result": "builds; the built plan needs 0 bytes of workspace"},
    ]
    log = ["[cudnn_frontend] INFO: validating", "[cudnn_frontend] INFO: cudnn version: 9.19.0 (backend 91900)"]
    sentences = logs.conclusions(
        cases, ours="91900", our_file="/w/libcudnn.so.9", rows=rows, filtered=filtered, log_lines=log
    )
    assert sentences == [
        "This process runs libcudnn 9.19.0 (91900), from /w/libcudnn.so.9.",
        "Of the 2 ways to load the wrong libcudnn tried, 1 failed with a message, 1 loaded the same libcudnn as "
        "this process, and 0 raised nothing at all.",
        "Where the failures surfaced: import cudnn: 1. A failure on import or at handle creation is the "
        "library's: libcudnn.find_libcudnn().explain() and python -m cudnn.collect_env name the file.",
        f"Loaded the same libcudnn as this process: {NO_WHEEL}: loaded libcudnn 9.19.0 from /w/libcudnn.so.9, as here.",
        "Plans listed, and the five build steps' time, per heuristic mode: A: 2 plan(s), 12 ms; B: 2 plan(s), "
        "46 ms; A+FALLBACK: 5 plan(s), 50 ms.",
        "1 of the 2 plan filters left no plan that builds: deselect_workspace_greater_than(0).",
        "The frontend's log notes: cudnn version: 9.19.0 (backend 91900)",
    ]


def test_the_conclusions_name_a_silent_load_and_say_when_nothing_was_mapped_or_emptied():
    other = "loaded libcudnn 9.1.0 from /sys/libcudnn.so.9; this process runs 9.19.0 from None"
    cases = _probed((NO_WHEEL, "raises nothing, loads another libcudnn (9.1.0)", "nowhere", "none", other, "pip"))
    filtered = [{FILTER_COLUMN: "deselect_engines([eng0])", "result": "builds; the built plan needs 0 bytes"}]
    sentences = logs.conclusions(
        cases, ours="91900", our_file=None, rows=[], filtered=filtered, log_lines=["[cudnn_frontend] INFO: x"]
    )
    assert sentences[0] == "This process runs libcudnn 9.19.0 (91900), from no file /proc/self/maps names."
    assert sentences[2].startswith("Where the failures surfaced: nowhere.")
    assert sentences[3] == (
        f"Raised nothing although another libcudnn was loaded: {NO_WHEEL}: {other}. Only a check of the loaded "
        "library's version (cudnn.backend_version()) catches these."
    )
    assert sentences[1].endswith("0 loaded the same libcudnn as this process, and 1 raised nothing at all.")
    # the 0 is said once: no paragraph that none loaded the same libcudnn
    assert sentences[4] == "Plans listed, and the five build steps' time, per heuristic mode: ."
    assert not any("same libcudnn" in s for s in sentences[2:])
    assert sentences[-1] == "0 of the 1 plan filters left no plan that builds."  # no log line names a version


@pytest.mark.gpu
def test_the_filters_and_the_log_on_the_gpu():
    import cudnn

    handle = cudnn.create_handle()
    rows = logs.filter_rows(handle, [("deselect_workspace_greater_than", 0)])
    assert rows[0]["result"].startswith("builds") or ": " in rows[0]["result"]
    assert failures.frontend_log(logs.LOG_SCRIPT)  # the frontend logs the build
