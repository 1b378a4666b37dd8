"""Build a cuDNN graph in its five steps, time each step, and execute it on torch's stream.

The frontend builds a graph in five steps::

    validate → build_operation_graph → create_execution_plans → check_support → build_plans

:func:`build` runs them, records how long each took (where timing them holds up nothing:
``timed``), and turns a failure into a
:class:`~cudnn_guide.errors.GraphBuildError` that names the step, the graph and cuDNN's own
message (a :class:`~cudnn_guide.errors.GraphNotSupportedError` when cuDNN simply has no engine
for the graph). The result, a :class:`BuiltGraph`, is the one graph object of the package: the
``cudnn.pygraph``, its handle, its workspace and its named inputs and outputs (the recipes return
one); it executes on PyTorch's *current* stream, so events, CUDA graphs and other torch work see
it in order.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cudnn_guide import collector
from cudnn_guide.errors import GraphBuildError, GraphExecutionError, GraphNotSupportedError, InputError

__all__ = ["BuildReport", "BuiltGraph", "adopt", "build", "handle_for_current_device", "bind_to_current_stream"]

STEPS = ("validate", "build_operation_graph", "create_execution_plans", "check_support", "build_plans")
"""The five build steps, in order."""

_HANDLES: dict[int, Any] = {}


def reset_caches() -> None:
    """Destroy the cuDNN handles this module created (one per device); the next call creates new ones.

    Example
    -------
    >>> reset_caches()
    """
    import sys

    if "cudnn" in sys.modules:
        import cudnn

        for handle in _HANDLES.values():
            try:
                cudnn.destroy_handle(handle)
            except Exception:  # a handle of a context already gone: nothing left to free
                pass
    _HANDLES.clear()


def handle_for_current_device() -> Any:
    """One ``cudnn.Handle`` per device, created on first use and reused.

    A handle is expensive to create (it loads kernels and allocates); every graph on a device can
    share one.

    Returns
    -------
    Any
        The device's ``cudnn.Handle``.

    Example
    -------
    >>> handle = handle_for_current_device()
    >>> g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.HALF)
    """
    import cudnn
    import torch

    from cudnn_guide.environment import require_gpu
    from cudnn_guide.libcudnn import require_cudnn

    require_gpu("creating a cuDNN handle")
    device = torch.cuda.current_device()
    handle = _HANDLES.get(device)
    if handle is None:
        require_cudnn()
        handle = _HANDLES[device] = cudnn.create_handle()
    return handle


def _stream_reader(device: int) -> Callable[[], int]:
    """A zero-argument function returning torch's current raw stream on ``device``, as cheaply as
    this torch allows (``_cuda_getCurrentRawStream`` skips building a ``torch.cuda.Stream``)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return lambda: raw(device)
    return lambda: torch.cuda.current_stream(device).cuda_stream


def bind_to_current_stream(handle: Any) -> int:
    """Point ``handle`` at torch's current CUDA stream and return that stream.

    Call before every execute: under ``torch.cuda.stream(s)`` or CUDA-graph capture the current
    stream changes, and a handle left on another stream would run the work outside the timed
    region or outside the capture. ``cudnn.set_stream`` skips the backend call when the stream is
    unchanged, so a steady loop pays almost nothing.

    Parameters
    ----------
    handle
        A ``cudnn.Handle``.

    Returns
    -------
    int
        The raw stream the handle now runs on.

    Example
    -------
    >>> with torch.cuda.stream(s):
    ...     bind_to_current_stream(handle)
    ...     graph.execute(pack, ws, handle=handle)
    """
    import cudnn
    import torch

    stream = _stream_reader(torch.cuda.current_device())()
    cudnn.set_stream(handle, stream)
    return stream


@dataclasses.dataclass
class BuildReport:
    """How a graph was built: seconds per step, the plans cuDNN offered, and the one chosen.

    Example
    -------
    >>> print(built.report)  # step times, plans, workspace; or why the steps were not timed
    """

    graph: str
    step_seconds: dict[str, float]
    plan_count: int
    plan_name: str
    workspace_bytes: int
    untimed: str = "built by the caller"
    """Why ``step_seconds`` is empty, where it is: said in the report instead of a time."""

    @property
    def total_seconds(self) -> float:
        return sum(self.step_seconds.values())

    def __str__(self) -> str:
        tail = f"{self.plan_count} plan(s), chose {self.plan_name!r}; workspace {self.workspace_bytes} B"
        if not self.step_seconds:  # not timed: say so, never "built in 0.0 ms"
            return f"{self.graph}: {self.untimed} (build steps not timed); {tail}"
        steps = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.step_seconds.items())
        return f"{self.graph}: built in {self.total_seconds * 1e3:.1f} ms ({steps}); {tail}"


class BuiltGraph:
    """A built cuDNN graph: the ``cudnn.pygraph``, its handle, its workspace and its named inputs and outputs.

    ``graph``, ``handle`` and ``workspace`` are what a raw ``graph.execute(pack, workspace,
    handle=handle)`` needs; ``io`` names the graph's tensors (``{"x": X, "w": W, "y": Y}``) as the
    recipe that declared them did, and :meth:`pack` maps torch tensors onto them by those names.
    Do not construct directly: use :func:`build` (or :func:`adopt` for a graph built by hand).

    Example
    -------
    >>> fused = build(g, name='conv', io={"x": X, "w": W, "y": Y})
    >>> fused.execute(fused.pack(x=x, w=w, y=y))
    >>> launch = fused.bind({X: x, W: w, Y: y})
    """

    def __init__(
        self, graph: Any, name: str, handle: Any, report: BuildReport, io: Mapping[str, Any] | None = None
    ) -> None:
        import torch

        self.graph = graph
        self.name = name
        self.handle = handle
        self.report = report
        self.io: dict[str, Any] = dict(io or {})
        self.workspace = torch.empty(max(report.workspace_bytes, 1), device="cuda", dtype=torch.uint8)
        self._specs = {t: _declared_layout(t) for t in _graph_io(graph)}

    # -- named inputs and outputs ------------------------------------------------------------

    def pack(self, **data: Any) -> dict[Any, Any]:
        """A variant pack from torch tensors named as in :attr:`io`: ``pack(x=x, w=w, y=y)``.

        Raises ``KeyError`` naming the tensors that are missing."""
        missing = set(self.io) - set(data)
        if missing:
            raise KeyError(f"graph {self.name!r}: pack() needs tensors for {sorted(missing)}")
        return {self.io[k]: v for k, v in data.items()}

    @property
    def uids(self) -> dict[str, int]:
        """Name → UID of each named tensor: how a deserialized plan is fed (it has no tensor objects)."""
        return {k: int(t.get_uid()) for k, t in self.io.items()}

    # -- execution ---------------------------------------------------------------------------

    def check_pack(self, pack: Mapping[Any, Any]) -> None:
        """Check a variant pack against the graph's declared tensors.

        Raises
        ------
        InputError
            A missing operand, a CPU tensor where a device one is needed, or dims/strides that
            differ from the graph's declaration.
        """
        import torch

        for gt, (dims, strides) in self._specs.items():
            if gt not in pack:
                raise InputError(f"graph {self.name!r}: the variant pack has no tensor for {gt.get_name()!r}")
            data = pack[gt]
            if not isinstance(data, torch.Tensor):
                raise InputError(
                    f"graph {self.name!r}: {gt.get_name()!r} must be a torch.Tensor, got {type(data).__name__}"
                )
            if gt.get_is_pass_by_value():
                continue
            if data.device.type != "cuda":
                raise InputError(f"graph {self.name!r}: {gt.get_name()!r} is on {data.device}; it must be on the GPU")
            if dims is None:
                continue
            if tuple(data.shape) != dims or (strides is not None and tuple(data.stride()) != strides):
                raise InputError(
                    f"graph {self.name!r}: {gt.get_name()!r} was declared with dims {dims} strides {strides}, "
                    f"but got shape {tuple(data.shape)} strides {tuple(data.stride())}"
                )

    def execute(self, pack: Mapping[Any, Any], *, check: bool = True) -> None:
        """Check ``pack`` and execute the selected plan on torch's current stream.

        ``pack`` maps each graph tensor (inputs and outputs) to a torch tensor; outputs are
        written in place. ``check=False`` skips :meth:`check_pack`, for a caller that has already
        proved the layouts match (a graph cache keyed by them).
        """
        if check:
            self.check_pack(pack)
        self._launch(pack)

    def bind(self, pack: Mapping[Any, Any]) -> Callable[[], None]:
        """Check ``pack`` once and return a zero-argument launcher for timing loops.

        The launcher reads torch's current stream, rebinds the handle only if it changed, and
        calls ``graph.execute``: nothing else on the path.
        """
        import cudnn
        import torch

        self.check_pack(pack)
        graph, ws, handle = self.graph, self.workspace, self.handle
        pack = dict(pack)
        current = _stream_reader(torch.cuda.current_device())
        set_stream = cudnn.set_stream

        def launch() -> None:
            s = current()
            if handle.stream != s:
                set_stream(handle, s)
            graph.execute(pack, ws, handle=handle)

        return launch

    def _launch(self, pack: Mapping[Any, Any]) -> None:
        bind_to_current_stream(self.handle)
        try:
            self.graph.execute(dict(pack), self.workspace, handle=self.handle)
        except Exception as exc:
            raise GraphExecutionError(f"graph {self.name!r} failed to execute: {exc}") from exc

    def __repr__(self) -> str:
        return f"BuiltGraph({self.name!r}, plan={self.report.plan_name!r})"


def _declared_layout(t: Any) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """Dims and strides a graph tensor was declared with. An output whose strides the frontend
    inferred (not set by the caller) is checked by dims only: cuDNN picks its layout per op."""
    strides = tuple(t.get_stride())
    if getattr(t, "stride_assigned", True) is False:
        strides = None
    if getattr(t, "ragged_offset", None) is not None:
        return None, None  # packed (THD) data: its extent is the ragged offsets', not the declared dims'
    return tuple(t.get_dim()), strides


def _graph_io(graph: Any) -> list[Any]:
    """The graph's non-virtual inputs and outputs: what a variant pack must supply."""
    return [t for t in graph.get_inputs() + graph.get_outputs() if not t.get_is_virtual()]


def _heuristics(modes: Iterable[Any]) -> list[Any]:
    import cudnn

    out = []
    for m in modes:
        out.append(getattr(cudnn.heur_mode, m) if isinstance(m, str) else m)
    return out


def build(
    graph: Any,
    *,
    name: str | None = None,
    heuristics: Iterable[Any] = ("A", "FALLBACK"),
    policy: Any = None,
    handle: Any = None,
    io: Mapping[str, Any] | None = None,
    timed: bool | None = None,
) -> BuiltGraph:
    """Run the five build steps on ``graph``, timing each where asked, and return a :class:`BuiltGraph`.

    Parameters
    ----------
    graph:
        A ``cudnn.pygraph`` with its outputs marked (``set_output(True)``).
    name:
        A name for messages and reports (defaults to the graph's own).
    heuristics:
        ``cudnn.heur_mode`` values or their names (``"A"``, ``"B"``, ``"FALLBACK"``).
    policy:
        A ``cudnn.build_plan_policy``; ``ALL`` builds every plan for autotuning. Default: the
        frontend's (the first plan that builds).
    handle:
        A ``cudnn.Handle``; default: :func:`handle_for_current_device`.
    io:
        Name → graph tensor of the inputs and outputs, for :meth:`BuiltGraph.pack`.
    timed:
        Time each step (``report.step_seconds``). ``None`` (the default): where that holds up
        nothing, which is everywhere but a docs-build lane whose cells share the GPU's turn
        (:func:`~cudnn_guide.collector.measuring_holds`). There a timed build is a measured block
        (:func:`~cudnn_guide.collector.measuring`) and holds the GPU alone while cuDNN compiles on
        the CPU, so the steps are timed only with ``True``, or inside a block already measured; an
        untimed report says so rather than showing a time.

    Returns
    -------
    BuiltGraph
        The graph with its handle, workspace, named tensors and build report.

    Raises
    ------
    GraphNotSupportedError
        cuDNN has no engine for this graph here.
    GraphBuildError
        Any other failure, with the step and cuDNN's message.

    Example
    -------
    >>> built = build(graph, name="conv_bias_relu")
    >>> print(built.report)
    """
    import torch

    handle = handle if handle is not None else handle_for_current_device()
    name = name or getattr(graph, "name", None) or "graph"
    modes = _heuristics(heuristics)
    collector.between_steps()  # a neighbour waiting to measure goes first (docs build lanes)
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("validate", graph.validate),
        ("build_operation_graph", graph.build_operation_graph),
        ("create_execution_plans", lambda: graph.create_execution_plans(modes)),
        ("check_support", graph.check_support),
        ("build_plans", (lambda: graph.build_plans(policy)) if policy is not None else graph.build_plans),
    ]
    untimed = None
    if timed is None and collector.measuring_holds():
        untimed = "built in a lane that shares the GPU (build(timed=True) times the steps)"
    elif timed is False:
        untimed = "built with timed=False"
    seconds: dict[str, float] = {}
    if untimed:
        for step, call in calls:
            _run_step(step, call, name)
    else:
        with collector.measuring():  # each step's seconds are reported
            for step, call in calls:
                t0 = time.perf_counter()
                _run_step(step, call, name)
                seconds[step] = time.perf_counter() - t0
    torch.cuda.synchronize()
    built = _wrap(graph, name, handle, seconds, io)
    built.report.untimed = untimed or built.report.untimed
    return built


def _run_step(step: str, call: Callable[[], Any], name: str) -> None:
    """One build step, its failure turned into the package's error naming the step and the graph."""
    import cudnn

    try:
        call()
    except cudnn.cudnnGraphNotSupportedError as exc:
        raise GraphNotSupportedError(step, name, str(exc)) from exc
    except Exception as exc:
        raise GraphBuildError(step, name, f"{type(exc).__name__}: {exc}") from exc


def _wrap(
    graph: Any, name: str, handle: Any, seconds: dict[str, float], io: Mapping[str, Any] | None = None
) -> BuiltGraph:
    """The :class:`BuiltGraph` of a graph whose plans are built, with its report."""
    try:
        plan_count = int(graph.get_execution_plan_count())
    except Exception:
        plan_count = -1
    try:
        plan_name = str(graph.get_plan_name_at_index(getattr(graph, "_plan_index", 0)))
    except Exception:
        plan_name = "unknown"
    report = BuildReport(name, seconds, plan_count, plan_name, int(graph.get_workspace_size()))
    return BuiltGraph(graph, name, handle, report, io)


def adopt(
    graph: Any,
    handle: Any,
    *,
    name: str | None = None,
    step_seconds: Mapping[str, float] | None = None,
    io: Mapping[str, Any] | None = None,
) -> BuiltGraph:
    """Wrap a graph the page built itself (its five steps written out) for checked execution and timing.

    The result checks variant packs against the declaration (:meth:`BuiltGraph.check_pack`:
    cuDNN itself does not notice a tensor with the wrong strides) and gives timing loops a
    launcher that follows torch's current stream (:meth:`BuiltGraph.bind`).

    Parameters
    ----------
    graph
        A ``cudnn.pygraph`` on which ``build_plans`` has run.
    handle
        The ``cudnn.Handle`` it was built with.
    name
        A name for messages.
    step_seconds
        Seconds each build step took, if the page timed them; shown in the build report.
    io
        Name → graph tensor of the inputs and outputs, for :meth:`BuiltGraph.pack`.

    Returns
    -------
    BuiltGraph
        With its own workspace of ``graph.get_workspace_size()`` bytes.

    Raises
    ------
    InputError
        The graph has no built plan yet.

    Example
    -------
    >>> g.build_plans()
    >>> run = adopt(g, handle).bind({Q: q, K: k, V: v, O: o})
    """
    name = name or "graph"
    try:
        graph.get_plan_name_at_index(0)
        graph.get_workspace_size()
    except Exception as exc:
        raise InputError(
            f"graph {name!r}: run its five build steps (through build_plans) before adopting it: {exc}"
        ) from exc
    return _wrap(graph, name, handle, dict(step_seconds or {}), io)
