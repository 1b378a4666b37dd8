"""Per-call host overhead of each way to launch one built graph, and the frontend's native CUDA-graph API.

The per-call-overhead page launches one decode attention graph every way the frontend offers
(packs keyed by graph tensors or by UIDs, a buffer list with ``tensor_uids``,
``execute_plan_at_index``, ``cudnn.set_stream`` on every call, a CUDA-graph replay, PyTorch's own
SDPA) and times each path's host time per call with
:func:`cudnn_guide.measure.compare.compare_host`, against the tensor-keyed ``execute``. This module
holds that page's machinery:

* :func:`check_paths`: each path's output checked against the fp32 reference, before timing;
* :func:`added_rows`, :func:`added_table` and :func:`plot_added`: what each path adds per call
  (``Comparison.added``), as a table and a bar chart;
* :func:`native_cuda_graph`: ``populate_cuda_graph`` and ``update_cuda_graph`` through CUDA's
  runtime API (``cuda-python``), each launch checked, with the host time of an update and of a
  new graph (:func:`spread`, :func:`spread_text`);
* :func:`signed`, :func:`added_verdict` and :func:`native_text`: the conclusions' words.

The checks and the native API need a GPU; the rows, the words and the spreads do not.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cudnn_guide import collector

__all__ = [
    "PATH_VERDICT",
    "added_rows",
    "added_table",
    "added_verdict",
    "check_paths",
    "native_cuda_graph",
    "native_text",
    "plot_added",
    "signed",
    "spread",
    "spread_text",
]

PATH_VERDICT = {"faster": "more time", "slower": "less time", "tie": "tie"}
"""A host comparison's verdict (the tensor-keyed ``execute`` is the candidate) as the path's cost:
``faster`` means the candidate is faster, so the path takes more time."""

ADDED = "host µs added per call"
""":func:`added_rows`' column of a path's added host time (its sort key in :func:`added_table`)."""


def check_paths(paths: Mapping[str, Callable[[], Any]], out: Any, reference: Any) -> list[Any]:
    """Run each launch path once on a NaN-poisoned ``out`` and check its output against ``reference``.

    A path that returns nothing is checked on ``out`` (the graph's output buffer); one that
    returns a tensor (PyTorch's SDPA) on what it returns. A wrong output stops the page; each
    passing check, named after its path, joins the page's record.

    Parameters
    ----------
    paths
        Launch path name → zero-argument launcher.
    out
        The output buffer the graph writes.
    reference
        The expected output (fp32).

    Returns
    -------
    list[Any]
        The passing :class:`~cudnn_guide.check.CheckResult` of each path, in order.

    Example
    -------
    >>> checks = check_paths(paths, o, ref)
    >>> checks[0].name
    'execute, pack keyed by tensors'
    """
    from cudnn_guide import check

    results = []
    for name, fn in paths.items():
        check.poison(out)
        result = fn()
        results.append(check.check(out if result is None else result, reference, name=name))
    return results


def added_rows(host: Any, adds: Mapping[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One table row per launch path: the host µs it adds per call, its interval, the time ratio, the verdict.

    Parameters
    ----------
    host
        The :func:`~cudnn_guide.measure.compare.compare_host` comparison, the tensor-keyed
        ``execute`` its candidate.
    adds
        Path → ``host.added(path)`` (``value``, ``low``, ``high``: µs per call), in the table's
        order before sorting.

    Returns
    -------
    list[dict[str, Any]]
        Rows with the columns ``"launch path"``, ``"host µs added per call"``, ``"95% interval"``,
        ``"time / tensor-keyed execute's"`` and ``"verdict"`` (:data:`PATH_VERDICT`).

    Example
    -------
    >>> from types import SimpleNamespace
    >>> host = SimpleNamespace(versus={"X": {"value": 1.25, "low": 1.2, "high": 1.3, "verdict": "faster"}})
    >>> row = added_rows(host, {"X": {"value": 0.5, "low": 0.25, "high": 0.75}})[0]
    >>> row["95% interval"], row["time / tensor-keyed execute's"], row["verdict"]
    ('+0.25 to +0.75', '1.25× (1.20–1.30)', 'more time')
    """
    rows = []
    for name, e in adds.items():
        s = host.versus[name]
        rows.append(
            {
                "launch path": name,
                ADDED: e["value"],
                "95% interval": f"{e['low']:+.2f} to {e['high']:+.2f}",
                "time / tensor-keyed execute's": f"{s['value']:.2f}× ({s['low']:.2f}–{s['high']:.2f})",
                "verdict": PATH_VERDICT[s["verdict"]],
            }
        )
    return rows


def added_table(host: Any, adds: Mapping[str, dict[str, float]]) -> Any:
    """:func:`added_rows` as an HTML table, sorted by the host time added (least first), signed to 0.01 µs.

    Parameters
    ----------
    host
        The :func:`~cudnn_guide.measure.compare.compare_host` comparison.
    adds
        Path → ``host.added(path)``.

    Returns
    -------
    Any
        The pandas ``Styler`` (:func:`cudnn_guide.report.html_table`).

    Example
    -------
    >>> added_table(host, {name: host.added(name) for name in paths if name != BASE})
    """
    import pandas as pd

    from cudnn_guide.report import html_table

    return html_table(pd.DataFrame(added_rows(host, adds)).sort_values(ADDED), {ADDED: "{:+.2f}"})


def plot_added(adds: Mapping[str, dict[str, float]], rounds: int, *, title: str) -> Any:
    """What each launch path adds per call as horizontal bars with their intervals, least first.

    The tensor-keyed ``execute`` is the zero line.

    Parameters
    ----------
    adds
        Path → ``host.added(path)``.
    rounds
        The paired rounds the medians come from (``host.rounds``), for the axis label.
    title
        The chart's title.

    Returns
    -------
    Any
        The matplotlib figure.

    Example
    -------
    >>> fig = plot_added(adds, host.rounds, title="launching one decode attention call")
    >>> plt.show()
    """
    import matplotlib.pyplot as plt

    names = sorted(adds, key=lambda n: adds[n]["value"])
    values = [adds[n]["value"] for n in names]
    errors = [
        [adds[n]["value"] - adds[n]["low"] for n in names],
        [adds[n]["high"] - adds[n]["value"] for n in names],
    ]
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.45 * len(names)), layout="constrained")
    ax.barh(names, values, xerr=errors, capsize=3, color="#8c8c8c")
    ax.axvline(0, color="#76b900", label="tensor-keyed execute")
    ax.invert_yaxis()
    ax.set_xlabel(f"host µs per call added (median of {rounds} paired rounds, 95% interval)")
    ax.set_title(title)
    ax.legend(loc="best")  # where it covers least: lower right covered the longest bar's whisker
    return fig


def spread(us: Sequence[float]) -> dict[str, Any]:
    """Median and quartiles of host times (µs), and how many took over twice the median.

    Parameters
    ----------
    us
        Host times in µs (at least two).

    Returns
    -------
    dict[str, Any]
        ``median``, ``q1``, ``q3`` (``statistics.quantiles(us, n=4)``), ``n``, ``slow`` (the count
        above twice the median) and ``slowest``.

    Example
    -------
    >>> spread([10.0, 11.0, 12.0, 30.0])
    {'median': 11.5, 'q1': 10.25, 'q3': 25.5, 'n': 4, 'slow': 1, 'slowest': 30.0}
    """
    q1, median, q3 = statistics.quantiles(us, n=4)
    slow = [x for x in us if x > 2 * median]
    return {
        "median": median,
        "q1": q1,
        "q3": q3,
        "n": len(us),
        "slow": len(slow),
        "slowest": max(us),
    }


def spread_text(x: Mapping[str, Any]) -> str:
    """A :func:`spread` in words.

    Parameters
    ----------
    x
        From :func:`spread`.

    Returns
    -------
    str
        ``"median … µs (quartiles …–…) over n; k above twice the median (slowest … µs)"``.

    Example
    -------
    >>> spread_text(spread([10.0, 11.0, 12.0, 30.0]))
    'median 11.5 µs (quartiles 10.2–25.5) over 4; 1 above twice the median (slowest 30 µs)'
    """
    return (
        f"median {x['median']:.1f} µs (quartiles {x['q1']:.1f}–{x['q3']:.1f}) over "
        f"{x['n']}; {x['slow']} above twice the median (slowest {x['slowest']:.0f} µs)"
    )


@collector.measuring()
def _populate_and_update(
    cudart: Any,
    native: dict[str, Any],
    graph: Any,
    handle: Any,
    pack: Mapping[Any, Any],
    workspace: Any,
    output: Any,
    reference: Any,
    stream: int,
    checks: list[Any],
) -> None:
    """populate, launch, update, launch again; check each launch; keep the times in ``native``."""
    import time

    import torch

    from cudnn_guide import check

    def ok(result: Any) -> Any:
        err, *value = result if isinstance(result, tuple) else (result,)
        if err != cudart.cudaError_t.cudaSuccess:
            raise RuntimeError(f"CUDA runtime: {err}")
        return value[0] if value else None

    o = pack[output]
    pointers = {t.get_uid(): data.data_ptr() for t, data in pack.items()}
    cuda_graph = ok(cudart.cudaGraphCreate(0))
    t0 = time.perf_counter()
    graph.populate_cuda_graph(handle, pointers, workspace.data_ptr(), int(cuda_graph))
    native["populate_ms"] = 1e3 * (time.perf_counter() - t0)
    graph_exec = ok(cudart.cudaGraphInstantiate(cuda_graph, 0))
    check.poison(o)
    ok(cudart.cudaGraphLaunch(graph_exec, stream))
    torch.cuda.synchronize()
    checks.append(check.check(o, reference, name="populate_cuda_graph, launched"))
    print(checks[-1])

    o2 = torch.empty_like(o)  # a second buffer set: copies of the inputs and a new output
    copies = {t: o2 if t is output else data.clone() for t, data in pack.items()}
    assert all(copies[t].shape == d.shape and copies[t].stride() == d.stride() for t, d in pack.items())
    moved = {t.get_uid(): data.data_ptr() for t, data in copies.items()}
    updates = []
    for i in range(50):  # alternate: every update re-points every tensor
        t0 = time.perf_counter()
        target = (moved, pointers)[i % 2]
        graph.update_cuda_graph(handle, target, workspace.data_ptr(), int(cuda_graph))
        ok(cudart.cudaGraphExecUpdate(graph_exec, cuda_graph))
        updates.append(1e6 * (time.perf_counter() - t0))
    check.poison(o)  # 50 updates: the graph points at the original buffers again
    ok(cudart.cudaGraphLaunch(graph_exec, stream))
    torch.cuda.synchronize()
    checks.append(check.check(o, reference, name="update_cuda_graph, back to the original buffers"))
    print(checks[-1])
    graph.update_cuda_graph(handle, moved, workspace.data_ptr(), int(cuda_graph))
    ok(cudart.cudaGraphExecUpdate(graph_exec, cuda_graph))
    check.poison(o2)
    ok(cudart.cudaGraphLaunch(graph_exec, stream))
    torch.cuda.synchronize()
    checks.append(check.check(o2, reference, name="update_cuda_graph, new output buffer"))
    print(checks[-1])
    native["update_us"] = spread(updates)
    print(f"populate_cuda_graph: {native['populate_ms']:.2f} ms once")
    print(f"update_cuda_graph + cudaGraphExecUpdate:\n    {spread_text(native['update_us'])}")
    fresh = []
    for _ in range(20):  # a new graph each time: create, populate, instantiate
        t0 = time.perf_counter()
        new_graph = ok(cudart.cudaGraphCreate(0))
        graph.populate_cuda_graph(handle, pointers, workspace.data_ptr(), int(new_graph))
        new_exec = ok(cudart.cudaGraphInstantiate(new_graph, 0))
        fresh.append(1e6 * (time.perf_counter() - t0))
        ok(cudart.cudaGraphExecDestroy(new_exec))
        ok(cudart.cudaGraphDestroy(new_graph))
    native["new_graph_us"] = fresh_spread = spread(fresh)
    print(f"a new graph (create, populate, instantiate):\n    {spread_text(fresh_spread)}")


def native_cuda_graph(
    graph: Any,
    handle: Any,
    pack: Mapping[Any, Any],
    workspace: Any,
    *,
    output: Any,
    reference: Any,
    stream: int,
    checks: list[Any],
) -> dict[str, Any]:
    """The frontend's native CUDA-graph API on a built graph: populate once, update 50 times, 20 new graphs.

    ``populate_cuda_graph`` records the plan's kernels into an empty CUDA graph (created with
    ``cuda-python``'s runtime API), timed once; the graph is instantiated, launched on ``stream``
    and its output checked. Then 50 updates (``update_cuda_graph`` + ``cudaGraphExecUpdate``)
    alternate between a second buffer set (clones of the inputs and a new output, of identical
    shapes and strides) and the original one, each timed; after them the graph points at the
    original buffers again, and a launch is checked; one more update points it at the second set,
    and a launch into the new output is checked. Last, 20 new graphs (create, populate,
    instantiate) are timed, each destroyed after. Each check is printed, appended to ``checks``
    and joins the page's record; the times are printed as they come.

    Without ``cuda-python`` nothing runs (``"skipped"``). An exception from cuDNN or CUDA is
    kept as ``"error"`` (its type and first line, 200 characters at most) and printed; the times
    measured before it stay.

    Parameters
    ----------
    graph
        The built ``cudnn.pygraph``.
    handle
        Its cuDNN handle.
    pack
        Graph tensor → torch tensor, every input and the output.
    workspace
        The workspace tensor.
    output
        The graph tensor of the output (a key of ``pack``).
    reference
        The expected output.
    stream
        The raw CUDA stream the graph is launched on (the handle's).
    checks
        The page's list of checks, appended to.

    Returns
    -------
    dict[str, Any]
        ``populate_ms`` (ms), ``update_us`` and ``new_graph_us`` (:func:`spread`), as far as they
        were measured; or ``skipped``, or ``error`` beside what was measured.

    Example
    -------
    >>> stream = torch.cuda.current_stream().cuda_stream
    >>> native = native_cuda_graph(g, handle, by_tensor, ws, output=O, reference=ref, stream=stream, checks=[])
    >>> native["update_us"]["median"]  # µs per update
    """
    native: dict[str, Any] = {}
    try:
        from cuda.bindings import runtime as cudart
    except ImportError as exc:
        native["skipped"] = f"needs cuda-python (pip install cuda-python): {exc}"
        print(native["skipped"])
        return native
    try:
        _populate_and_update(cudart, native, graph, handle, pack, workspace, output, reference, stream, checks)
    except Exception as exc:  # cuDNN's or CUDA's refusal, shown as it is
        native["error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        print(f"native CUDA-graph API: {native['error']}")
    return native


def signed(e: Mapping[str, float]) -> str:
    """A difference with its interval, signed: ``'+0.41 µs (+0.30 to +0.52)'``.

    Parameters
    ----------
    e
        ``value``, ``low``, ``high`` in µs.

    Returns
    -------
    str
        The difference in words.

    Example
    -------
    >>> signed({"value": 0.41, "low": 0.3, "high": 0.52})
    '+0.41 µs (+0.30 to +0.52)'
    """
    return f"{e['value']:+.2f} µs ({e['low']:+.2f} to {e['high']:+.2f})"


def added_verdict(e: Mapping[str, float], host: Any, name: str) -> str:
    """A path's added time, its interval, and what the interval says.

    An interval that holds 0 resolves no difference; otherwise the path takes more (or less) host
    time, and where the ratio's verdict (the table's) is a tie, that is said with the tie band.

    Parameters
    ----------
    e
        The path's ``host.added(name)``.
    host
        The :func:`~cudnn_guide.measure.compare.compare_host` comparison.
    name
        The path.

    Returns
    -------
    str
        e.g. ``"+0.41 µs (+0.30 to +0.52), more host time"``.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> host = SimpleNamespace(versus={"X": {"verdict": "tie"}}, tie_band=0.02)
    >>> added_verdict({"value": 0.41, "low": 0.3, "high": 0.52}, host, "X")
    '+0.41 µs (+0.30 to +0.52), more host time, though a tie by the ratio (tie band ±2.0%)'
    """
    ratio = host.versus[name]["verdict"]
    if e["low"] <= 0 <= e["high"]:
        return f"{signed(e)}, no difference this measurement resolves"
    word = "more host time" if e["low"] > 0 else "less host time"
    if ratio == "tie":  # the table's verdict: the ratio against the tie band
        word += f", though a tie by the ratio (tie band ±{100 * host.tie_band:.1f}%)"
    return f"{signed(e)}, {word}"


def _slow_calls(x: Mapping[str, Any]) -> str:
    """A :func:`spread`'s slow calls in words: ``"2 of them above twice the median (slowest 99 µs)"``."""
    if not x["slow"]:
        return "none of them above twice the median"
    return f"{x['slow']} of them above twice the median (slowest {x['slowest']:.0f} µs)"


def native_text(native: Mapping[str, Any]) -> str | None:
    """The conclusions' sentence on the native CUDA-graph API, from :func:`native_cuda_graph`'s result.

    Parameters
    ----------
    native
        :func:`native_cuda_graph`'s result.

    Returns
    -------
    str | None
        What an update costs, against a new graph where one was timed, each with its slow calls
        (above twice its median) counted as :func:`spread_text` prints them; or why the API did not
        run; ``None`` for an empty result.

    Example
    -------
    >>> native_text({"skipped": "needs cuda-python"})
    'The native CUDA-graph API did not run here: needs cuda-python'
    """
    if "update_us" in native:
        upd, new = native["update_us"], native.get("new_graph_us")
        against = (
            ""
            if new is None
            else "; a new graph (create, populate, instantiate) takes "
            f"{new['median']:.0f} µs "
            f"(median of {new['n']}, quartiles {new['q1']:.0f}–{new['q3']:.0f}, {_slow_calls(new)}): "
            + (
                f"updating is {new['median'] / upd['median']:.1f}× cheaper"
                if new["median"] >= upd["median"]
                else f"updating costs {upd['median'] / new['median']:.1f}× as much"
            )
        )
        return (
            "The native CUDA-graph API works for this backend plan; re-pointing the "
            "graph at another buffer set (update_cuda_graph + cudaGraphExecUpdate) costs "
            f"{upd['median']:.0f} µs (median of {upd['n']}, alternating two sets; "
            f"quartiles {upd['q1']:.0f}–{upd['q3']:.0f}, {_slow_calls(upd)}){against}."
        )
    if native:
        return f"The native CUDA-graph API did not run here: {native.get('error') or native.get('skipped')}"
    return None
