"""call_overhead: the per-call-overhead page's checks of each launch path, its table and chart of what
each path adds, the native CUDA-graph API's flow, and the words of its conclusions.

Everything runs on the CPU: the launch paths are plain functions, and the native API runs against
a stand-in for ``cuda-python``'s runtime and a graph with the frontend's two method names, whose
"launch" writes the reference into whichever output buffer the graph points at.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from cudnn_guide.errors import CheckFailedError
from cudnn_guide.studies import call_overhead


def test_each_path_is_checked_on_the_buffer_or_on_what_it_returns():
    ref = torch.randn(2, 4)
    out = torch.empty(2, 4)

    def writes():  # as graph.execute does: into the buffer, returning nothing
        out.copy_(ref)

    paths = {"writes": writes, "returns": lambda: ref.clone()}
    results = call_overhead.check_paths(paths, out, ref)
    assert [r.name for r in results] == ["writes", "returns"] and all(r.passed for r in results)
    assert torch.isnan(out).all()  # poisoned before the path that returned its own tensor


def test_a_path_that_writes_nothing_fails_its_check():
    ref, out = torch.randn(2, 4), torch.zeros(2, 4)
    with pytest.raises(CheckFailedError, match="idle"):
        call_overhead.check_paths({"idle": lambda: None}, out, ref)


def host_comparison():
    versus = {
        "a": {"value": 1.25, "low": 1.2, "high": 1.3, "verdict": "faster"},
        "b": {"value": 0.9, "low": 0.85, "high": 0.95, "verdict": "slower"},
        "c": {"value": 1.01, "low": 0.98, "high": 1.04, "verdict": "tie"},
    }
    return SimpleNamespace(versus=versus, tie_band=0.015)


ADDS = {
    "a": {"value": 0.5, "low": 0.25, "high": 0.75},
    "b": {"value": -0.4, "low": -0.5, "high": -0.3},
    "c": {"value": 0.02, "low": -0.01, "high": 0.05},
}


def test_the_rows_say_what_each_path_adds_and_the_verdict_as_its_cost():
    rows = call_overhead.added_rows(host_comparison(), ADDS)
    assert [r["launch path"] for r in rows] == ["a", "b", "c"]
    assert rows[0] == {
        "launch path": "a",
        "host µs added per call": 0.5,
        "95% interval": "+0.25 to +0.75",
        "time / tensor-keyed execute's": "1.25× (1.20–1.30)",
        "verdict": "more time",
    }
    assert [r["verdict"] for r in rows] == ["more time", "less time", "tie"]


def test_the_table_is_sorted_by_the_time_added_and_signed():
    html = call_overhead.added_table(host_comparison(), ADDS).to_html()
    assert html.index(">b<") < html.index(">c<") < html.index(">a<")
    assert "-0.40" in html and "+0.50" in html


def test_the_chart_puts_the_cheapest_path_on_top_with_its_interval():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = call_overhead.plot_added(ADDS, 11, title="launching one call")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["b", "c", "a"]
    assert ax.yaxis_inverted() and ax.get_title() == "launching one call"
    assert ax.get_xlabel() == "host µs per call added (median of 11 paired rounds, 95% interval)"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["tensor-keyed execute"]
    assert [round(p.get_width(), 2) for p in ax.patches] == [-0.4, 0.02, 0.5]
    plt.close(fig)


def test_a_spread_is_its_median_quartiles_and_slow_calls():
    x = call_overhead.spread([10.0, 11.0, 12.0, 30.0])
    assert x == {"median": 11.5, "q1": 10.25, "q3": 25.5, "n": 4, "slow": 1, "slowest": 30.0}
    assert call_overhead.spread_text(x) == (
        "median 11.5 µs (quartiles 10.2–25.5) over 4; 1 above twice the median (slowest 30 µs)"
    )


def test_the_added_time_in_words_follows_its_interval_and_the_ratio():
    host = host_comparison()
    assert call_overhead.signed(ADDS["b"]) == "-0.40 µs (-0.50 to -0.30)"
    assert call_overhead.added_verdict(ADDS["a"], host, "a") == "+0.50 µs (+0.25 to +0.75), more host time"
    assert call_overhead.added_verdict(ADDS["b"], host, "b") == "-0.40 µs (-0.50 to -0.30), less host time"
    assert call_overhead.added_verdict(ADDS["c"], host, "c") == (
        "+0.02 µs (-0.01 to +0.05), no difference this measurement resolves"
    )
    resolved_tie = {"value": 0.03, "low": 0.01, "high": 0.05}
    assert call_overhead.added_verdict(resolved_tie, host, "c") == (
        "+0.03 µs (+0.01 to +0.05), more host time, though a tie by the ratio (tie band ±1.5%)"
    )


def test_the_native_sentence_says_what_an_update_costs_or_why_it_did_not_run():
    upd = {"median": 12.0, "q1": 11.0, "q3": 13.0, "n": 50, "slow": 2, "slowest": 40.0}
    new = {"median": 60.0, "q1": 55.0, "q3": 70.0, "n": 20, "slow": 0, "slowest": 80.0}
    assert call_overhead.native_text({"update_us": upd, "new_graph_us": new}) == (
        "The native CUDA-graph API works for this backend plan; re-pointing the graph at another buffer set "
        "(update_cuda_graph + cudaGraphExecUpdate) costs 12 µs (median of 50, alternating two sets; quartiles "
        "11–13, 2 of them above twice the median (slowest 40 µs)); a new graph (create, populate, instantiate) "
        "takes 60 µs (median of 20, quartiles 55–70, none of them above twice the median): updating is 5.0× cheaper."
    )
    slower = call_overhead.native_text({"update_us": new, "new_graph_us": upd})
    assert slower.endswith("updating costs 5.0× as much.")
    alone = call_overhead.native_text({"update_us": upd, "error": "RuntimeError: x"})
    assert alone.endswith("2 of them above twice the median (slowest 40 µs)).")
    assert call_overhead.native_text({"error": "RuntimeError: CUDA runtime: 1"}) == (
        "The native CUDA-graph API did not run here: RuntimeError: CUDA runtime: 1"
    )
    assert call_overhead.native_text({"skipped": "needs cuda-python"}).endswith("needs cuda-python")
    assert call_overhead.native_text({}) is None


def test_the_native_sentence_counts_the_new_graphs_slow_calls_as_the_output_prints_them():
    upd = call_overhead.spread([14.0, 14.5, 15.0, 16.0, 281.0, 40.0, 14.2, 14.8])
    new = call_overhead.spread([22.0, 23.0, 24.0, 26.0, 99.0, 60.0, 23.5, 22.5])
    said = call_overhead.native_text({"update_us": upd, "new_graph_us": new})
    update_part, new_part = said.split("; a new graph")
    for part, x in ((update_part, upd), (new_part, new)):
        assert x["slow"] == 2
        assert f"{x['slow']} of them above twice the median (slowest {x['slowest']:.0f} µs)" in part


class GraphTensor:
    """A graph tensor: a UID, and hashed by identity as the frontend's are."""

    def __init__(self, uid):
        self.uid = uid

    def get_uid(self):
        return self.uid


class FakeRuntime:
    """``cuda.bindings.runtime``: graphs hold the pointers populate/update gave them; a launch writes
    ``reference`` into the tensor at the output UID's pointer. ``fail`` names a call that errs."""

    def __init__(self, tensors, out_uid, reference, fail=None):
        self.cudaError_t = SimpleNamespace(cudaSuccess=0)
        self.by_ptr = tensors  # data_ptr → tensor
        self.out_uid, self.reference, self.fail = out_uid, reference, fail
        self.graphs, self.execs, self.calls = {}, {}, []

    def _err(self, name):
        self.calls.append(name)
        return 700 if name == self.fail else 0

    def cudaGraphCreate(self, flags):
        self.graphs[len(self.graphs) + 1] = {}
        return self._err("cudaGraphCreate"), len(self.graphs)

    def cudaGraphInstantiate(self, graph, flags):
        self.execs[len(self.execs) + 1] = dict(self.graphs[int(graph)])
        return self._err("cudaGraphInstantiate"), len(self.execs)

    def cudaGraphExecUpdate(self, graph_exec, graph):
        self.execs[graph_exec] = dict(self.graphs[int(graph)])
        return (self._err("cudaGraphExecUpdate"),)

    def cudaGraphLaunch(self, graph_exec, stream):
        assert stream == 7
        self.by_ptr[self.execs[graph_exec][self.out_uid]].copy_(self.reference)
        return (self._err("cudaGraphLaunch"),)

    def cudaGraphExecDestroy(self, graph_exec):
        return (self._err("cudaGraphExecDestroy"),)

    def cudaGraphDestroy(self, graph):
        return (self._err("cudaGraphDestroy"),)


class FakeNativeGraph:
    def __init__(self, runtime):
        self.runtime = runtime

    def populate_cuda_graph(self, handle, pointers, workspace_ptr, cuda_graph):
        self.runtime.graphs[cuda_graph] = dict(pointers)

    def update_cuda_graph(self, handle, pointers, workspace_ptr, cuda_graph):
        self.runtime.graphs[cuda_graph] = dict(pointers)


@pytest.fixture
def native_setup(monkeypatch):
    """A four-tensor pack, its reference, and a runtime stand-in installed as ``cuda.bindings.runtime``."""
    q, k, v, o = (torch.randn(2, 4) for _ in range(4))
    Q, K, V, O = (GraphTensor(uid) for uid in (1, 2, 3, 4))
    pack = {Q: q, K: k, V: v, O: o}
    ref = torch.randn(2, 4)
    seen = {}
    real_clone, real_empty_like = torch.Tensor.clone, torch.empty_like

    def remember(t):  # every tensor the flow makes is findable by its pointer
        seen[t.data_ptr()] = t
        return t

    for t in pack.values():
        remember(t)
    monkeypatch.setattr(torch.Tensor, "clone", lambda self, *a, **kw: remember(real_clone(self, *a, **kw)))
    monkeypatch.setattr(torch, "empty_like", lambda t, *a, **kw: remember(real_empty_like(t, *a, **kw)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    def install(fail=None):
        runtime = FakeRuntime(seen, O.get_uid(), ref, fail)
        bindings = SimpleNamespace(runtime=runtime)
        monkeypatch.setitem(sys.modules, "cuda", SimpleNamespace(bindings=bindings))
        monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
        monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", runtime)
        return runtime

    return SimpleNamespace(pack=pack, out=O, ref=ref, install=install)


def run_native(s, runtime, checks):
    return call_overhead.native_cuda_graph(
        FakeNativeGraph(runtime),
        "handle",
        s.pack,
        torch.empty(8),
        output=s.out,
        reference=s.ref,
        stream=7,
        checks=checks,
    )


def test_the_native_api_populates_updates_and_checks_each_launch(native_setup, capsys):
    runtime = native_setup.install()
    checks = ["the page's own"]
    native = run_native(native_setup, runtime, checks)
    assert [c.name for c in checks[1:]] == [
        "populate_cuda_graph, launched",
        "update_cuda_graph, back to the original buffers",
        "update_cuda_graph, new output buffer",
    ]
    assert all(c.passed for c in checks[1:])
    assert native["populate_ms"] >= 0 and native["update_us"]["n"] == 50 and native["new_graph_us"]["n"] == 20
    assert runtime.calls.count("cudaGraphExecUpdate") == 51 and runtime.calls.count("cudaGraphDestroy") == 20
    printed = capsys.readouterr().out
    assert "populate_cuda_graph:" in printed and "a new graph (create, populate, instantiate):\n    median" in printed


def test_a_runtime_error_is_kept_with_what_was_measured_before_it(native_setup, capsys):
    runtime = native_setup.install(fail="cudaGraphDestroy")
    native = run_native(native_setup, runtime, [])
    assert native["error"] == "RuntimeError: CUDA runtime: 700"
    assert "update_us" in native and "new_graph_us" not in native
    assert "native CUDA-graph API: RuntimeError: CUDA runtime: 700" in capsys.readouterr().out


def test_a_wrong_launch_is_an_error_of_the_native_api(native_setup):
    runtime = native_setup.install()
    runtime.reference = torch.zeros(2, 4)  # launches write the wrong values
    native = run_native(native_setup, runtime, [])
    assert native["error"].startswith("CheckFailedError") and "populate_ms" in native


def test_without_cuda_python_the_native_api_is_skipped(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # import fails
    native = call_overhead.native_cuda_graph(None, None, {}, None, output=None, reference=None, stream=0, checks=[])
    assert list(native) == ["skipped"] and native["skipped"].startswith("needs cuda-python (pip install cuda-python): ")
    assert native["skipped"] in capsys.readouterr().out
