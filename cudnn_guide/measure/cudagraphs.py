"""Capture GPU work into a CUDA graph and replay it; time launch-bound loops.

A cuDNN ``execute()`` costs host time: Python, the frontend's dispatch, the driver launch. For
a large kernel that hides behind the GPU's work; for a small one the GPU waits on the host.
Capturing the calls into a CUDA graph records the launches once; a replay submits them all
with one call.

The cuDNN handle must run on the capture stream during capture, or its kernels land on another
stream and are not captured. :meth:`~cudnn_guide.graphs.BuiltGraph.execute` and its ``bind``
launchers rebind the handle to torch's current stream on every call, so capturing them here
just works; a raw ``graph.execute`` needs ``cudnn.set_stream(handle, capture_stream)`` first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cudnn_guide import collector
from cudnn_guide.errors import BenchmarkError
from cudnn_guide.measure.events import call_checked
from cudnn_guide.measure.measurement import Measurement, spread_warnings

__all__ = ["CapturedGraph", "capture", "time_loop", "time_replay"]


class CapturedGraph:
    """``calls`` consecutive calls of ``fn`` captured in one ``torch.cuda.CUDAGraph``.

    Inputs and outputs are the tensors ``fn`` used during capture: to feed new data, copy it
    into those same tensors (``static.copy_(new)``) and replay.

    Example
    -------
    >>> g = CapturedGraph(built.bind(pack), calls=100)
    >>> g.replay()
    """

    def __init__(self, fn: Callable[[], Any], *, calls: int = 1, warmup: int = 3, label: str = "fn") -> None:
        import torch

        from cudnn_guide.environment import require_gpu

        require_gpu(f"capturing {label!r}")
        if calls < 1:
            raise ValueError("calls must be >= 1")
        self.calls, self.label = calls, label
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up on a side stream, as torch requires before capture
            for _ in range(warmup):
                call_checked(fn, label)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                for _ in range(calls):
                    fn()
        except Exception as exc:
            raise BenchmarkError(f"capturing {label!r} into a CUDA graph failed: {type(exc).__name__}: {exc}") from exc
        torch.cuda.synchronize()

    def replay(self) -> None:
        self.graph.replay()


def capture(fn: Callable[[], Any], *, calls: int = 1, label: str = "fn") -> CapturedGraph:
    """Capture ``calls`` calls of ``fn`` (see :class:`CapturedGraph`).

    Parameters
    ----------
    fn
        Zero-argument launcher.
    calls
        Calls to capture in the graph.
    label
        Name in errors.

    Returns
    -------
    CapturedGraph
        The captured graph.

    Example
    -------
    >>> g = capture(built.bind(pack))
    >>> x_static.copy_(x_new); g.replay()
    """
    return CapturedGraph(fn, calls=calls, label=label)


@collector.measuring()
def _wall_clock_per_call(run: Callable[[], Any], calls: int, reps: int) -> list[float]:
    """Milliseconds per call of ``run`` (which makes ``calls`` calls), wall clock from its start to
    the end of a synchronize, ``reps`` times; the GPU is drained before the first."""
    import time

    import torch

    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3 / calls)
    return samples


@collector.spending("timing")
def time_loop(
    fn: Callable[[], Any],
    *,
    label: str,
    calls: int = 100,
    reps: int = 30,
    flops: float | None = None,
    bytes: float | None = None,
    params: dict | None = None,
) -> Measurement:
    """Per-call time of a loop of ``calls`` back-to-back calls: wall clock from the first launch to
    the end of a final synchronize, divided by ``calls``; hot L2.

    Unlike :func:`~cudnn_guide.measure.bench.benchmark` (which hides the host behind a GPU spin), this is
    what a loop of launches really costs: when the host is slower than the GPU, the GPU idles
    between calls and the loop runs at the host's pace. The one synchronize per sample is
    amortized over ``calls``.

    Parameters
    ----------
    fn
        Zero-argument launcher.
    label
        Name in tables.
    calls
        Calls per sample.
    reps
        Samples.
    flops
        FLOPs per call.
    bytes
        Bytes per call.
    params
        Metadata for tables.

    Returns
    -------
    Measurement
        Per-call wall-clock samples.

    Example
    -------
    >>> m = time_loop(built.bind(pack), label='eager', calls=100)
    >>> print(m.median_ms)
    """
    for _ in range(max(3, calls // 10)):
        call_checked(fn, label)

    def loop() -> None:
        for _ in range(calls):
            fn()

    samples = _wall_clock_per_call(loop, calls, reps)
    m = Measurement(
        label, samples, f"wall-clock loop x{calls}", flops, bytes, dict(params or {}), spread_warnings(samples)
    )
    collector.add_measurements(m)
    return m


@collector.spending("timing")
def time_replay(
    graph: CapturedGraph,
    *,
    label: str,
    reps: int = 30,
    flops: float | None = None,
    bytes: float | None = None,
    params: dict | None = None,
) -> Measurement:
    """Per-call time of replaying ``graph`` (wall clock, one synchronize per replay, divided by the
    calls the graph holds): the counterpart of :func:`time_loop`.

    Parameters
    ----------
    graph
        A :class:`CapturedGraph`.
    label
        Name in tables.
    reps
        Replays timed.
    flops
        FLOPs per call.
    bytes
        Bytes per call.
    params
        Metadata for tables.

    Returns
    -------
    Measurement
        Per-call wall-clock samples.

    Example
    -------
    >>> m = time_replay(capture(built.bind(pack), calls=100), label='replay')
    >>> print(m.median_ms)
    """
    graph.replay()
    samples = _wall_clock_per_call(graph.replay, graph.calls, reps)
    m = Measurement(
        label, samples, f"wall-clock replay x{graph.calls}", flops, bytes, dict(params or {}), spread_warnings(samples)
    )
    collector.add_measurements(m)
    return m
