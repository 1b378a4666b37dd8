"""Would timing many calls back to back, on rotating inputs, close the events-vs-CUPTI gap? Run on a GPU.

For the short kernels whose per-call events time exceeds CUPTI's kernel time by a constant
~6 µs (docs/data/crosscheck.json), time the same work four ways and compare with the CUPTI kernel
durations of the very same calls:

* ``per-call``: the harness (flush, spin, start event, call, end event);
* ``batched rotating``: after a spin, ``N`` calls back to back between one pair of events, each
  call on the next of ``k`` input copies whose total footprint is at least 3× the L2 (so each
  call finds its inputs evicted by the others' traffic), per call = span / N;
* ``batched same``: the same, always on one input set (L2-hot);
* ``graph rotating``: the rotating batch captured in one CUDA graph, per call = replay / N.

``python tools/batched_probe.py docs/data/batched_probe.json`` saves the table.
"""

import itertools
import json
import math
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from cudnn_guide import environment
from cudnn_guide.graphs import conv, matmul, tensors
from cudnn_guide.measure import bench, cudagraphs, events
from cudnn_guide.studies import profiling

N, REPEATS = 200, 8


def launchers(name):
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    if name == "conv":
        p = conv.ConvProblem()
        ins = [p.make_inputs(seed=i) for i in range(8)]
        f = conv.conv_bias_relu_graph(p, ins[0])
        footprint = p.bytes
        k = max(2, math.ceil(3 * l2 / footprint))
        return [f.bind(f.pack(**ins[i % len(ins)])) for i in range(k)], footprint
    p = matmul.MatmulProblem()
    ins = [p.make_inputs(seed=i) for i in range(8)]
    f = matmul.matmul_epilogue_graph(p, ins[0])
    k = max(2, math.ceil(3 * l2 / p.bytes))
    return [f.bind(f.pack(**ins[i % len(ins)], alpha=tensors.scalar_value(p.alpha))) for i in range(k)], p.bytes


def kernel_times(prof, skip):
    kern = sorted(
        (
            e
            for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA
            and e.name not in skip
            and "memset" not in e.name.lower()
            and "memcpy" not in e.name.lower()
            and "sleep" not in e.name.lower()
        ),
        key=lambda e: e.time_range.start,
    )
    return [e.time_range.end - e.time_range.start for e in kern]


def batched(fns, n=N, repeats=REPEATS):
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for s, e in pairs:
        events.spin(2.0)
        s.record()
        for j in range(n):
            fns[j % len(fns)]()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 / n for s, e in pairs)


def main():
    flush = events.l2_flush_buffer()
    skip = set(profiling.flush_kernel_names(flush))
    rows = []
    for name in ("conv", "matmul epilogue"):
        fns, footprint = launchers(name)
        for f in fns:
            f()
        torch.cuda.synchronize()
        row = {"kernel": name, "copies": len(fns), "footprint_mib": footprint / 2**20}
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            m = bench.benchmark(fns[0], label=name, l2="cold", budget_ms=200)
            torch.cuda.synchronize()
        k = kernel_times(prof, skip)[-m.n :]
        row["per_call_events_us"], row["per_call_cupti_us"] = m.median_ms * 1e3, statistics.median(k)
        for mode, group in (("rotating", fns), ("same", fns[:1])):
            batched(group, n=20, repeats=2)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                ev = batched(group)
                torch.cuda.synchronize()
            k = kernel_times(prof, skip)
            row[f"batched_{mode}_events_us"], row[f"batched_{mode}_cupti_us"] = ev, statistics.median(k)
        cycle = itertools.cycle(fns)
        g = cudagraphs.CapturedGraph(lambda c=cycle: next(c)(), calls=N, label=name)
        g.replay()
        torch.cuda.synchronize()
        reps = []
        for _ in range(REPEATS):
            events.spin(2.0)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            torch.cuda.synchronize()
            reps.append(a.elapsed_time(b) * 1e3 / N)
        row["graph_rotating_us"] = statistics.median(reps)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as f:
            json.dump({"environment": environment.collect().to_dict(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
