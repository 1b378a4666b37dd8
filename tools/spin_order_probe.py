"""Does what runs just before a call change how long its kernel takes? Run on a GPU.

The harness enqueues, before each timed call, a spin kernel that holds the GPU while the host
enqueues the call, and (cold L2) an L2 flush. The profiler's back-to-back run
(``profiling.profile_kernels``) runs flush then call with no spin. On the conv page the two
disagreed by more than the events' launch cost, so this probe reads CUPTI's per-call span and
kernel time for the same kernels under six orders, 100 calls each, alternating, two rounds:

- ``flush→call``: the profiler's back-to-back run (no spin, no events);
- ``flush→call, events``: the same with events around the call (no spin: the flush alone must
  outlast the host's enqueueing of the call);
- ``flush→spin→call``: the harness's cold order before this probe;
- ``spin→flush→call``: the spin first, so the call follows the flush directly (the harness's
  cold order since);
- ``spin→call``: the harness's hot order;
- ``call→call``: back to back, hot, no spin, no events.

``python tools/spin_order_probe.py docs/data/spin_order.json``; the methodology page renders it.
"""

from __future__ import annotations

import json
import statistics
import sys
import warnings

import crosscheck  # beside this file, in tools/
import torch
from torch.profiler import ProfilerActivity, profile

from cudnn_guide import environment
from cudnn_guide.graphs import conv, matmul, tensors
from cudnn_guide.measure import bench, events
from cudnn_guide.studies import profiling

ORDERS = ("flush→call", "flush→call, events", "flush→spin→call", "spin→flush→call", "spin→call", "call→call")
CALLS = 100


def launchers() -> dict:
    cp = conv.ConvProblem()
    ci = cp.make_inputs()
    cf = conv.conv_bias_relu_graph(cp, ci)
    mm = matmul.MatmulProblem()
    mi = mm.make_inputs()
    mf = matmul.matmul_epilogue_graph(mm, mi)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    return {
        "conv→bias→ReLU (cuDNN graph)": cf.bind(cf.pack(**ci)),
        "conv→bias→ReLU (PyTorch eager)": lambda: cp.torch_forward(ci["x"], ci["w"], ci["b"]),
        "matmul epilogue + AMAX (cuDNN graph)": mf.bind(mf.pack(**mi, alpha=tensors.scalar_value(mm.alpha))),
        "bf16 matmul 4096³ (cuBLAS)": lambda: torch.matmul(a, a, out=c),
    }


def run_order(fn, order: str, flush, spin_ms: float, skip: set[str]) -> dict:
    steps = order.split(",")[0].split("→")
    timed = "spin" in order or "events" in order
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(CALLS)]
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for s, e in ev:
                for step in steps[:-1]:
                    if step == "flush":
                        flush.zero_()
                    elif step == "spin":
                        events.spin(spin_ms)
                    elif step == "call":
                        fn()
                if timed:
                    s.record()
                fn()
                if timed:
                    e.record()
            torch.cuda.synchronize()
    # a call is the run of operations between two separators (a flush or a spin kernel)
    calls, current = [], None
    for x in crosscheck.gpu_ops(prof):
        if x.name in skip or crosscheck.is_spin_kernel(x.name):
            current = None
        elif current is None:
            current = [x]
            calls.append(current)
        else:
            current.append(x)
    if steps[0] == "call":  # no separators: cut the stream into calls of the known length
        flat = [x for c in calls for x in c]
        per = len(flat) // (2 * CALLS)  # each loop iteration runs two calls: the untimed one and the timed one
        calls = [flat[i : i + per] for i in range(0, per * 2 * CALLS, per)]
    span, busy = crosscheck.span_and_busy(calls[-CALLS:])
    out = {
        "order": order,
        "kernel_median_us": statistics.median(busy),
        "span_median_us": statistics.median(span),
        "calls": len(busy),
    }
    if timed:
        out["events_median_us"] = statistics.median(s.elapsed_time(e) * 1e3 for s, e in ev)
    return out


def main(path: str) -> None:
    flush = events.l2_flush_buffer()
    skip = profiling.flush_kernel_names(flush)
    cost = events.launch_cost()
    rows = []
    for name, fn in launchers().items():
        host = bench._host_times(fn, flush, name, 20)
        spin_ms = events.spin_for(statistics.median(host))
        for rnd in range(2):  # two rounds, orders alternating, so drift shows as a spread
            for order in ORDERS:
                r = run_order(fn, order, flush, spin_ms, skip)
                rows.append(
                    {
                        "kernel": name,
                        "round": rnd,
                        "spin_us": spin_ms * 1e3,
                        "host_us": statistics.median(host) * 1e3,
                        **r,
                    }
                )
                print(
                    f"{name:40s} {order:18s} kernels {r['kernel_median_us']:8.2f} µs  "
                    f"span {r['span_median_us']:8.2f} µs"
                    + (f"  events {r['events_median_us']:8.2f} µs" if "events_median_us" in r else ""),
                    flush=True,
                )
    data = {"environment": environment.collect().to_dict(), "launch_cost_us": cost["overhead_us"], "rows": rows}
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
