"""Where does the constant gap between CUDA-event timings and CUPTI kernel durations come from? Run on a GPU.

Times the same call four ways (with/without the L2 flush, with/without the spin kernel before the
start event) and prints, for each, the events median minus the median CUPTI duration of the
call's kernel, both from the same calls. ``python tools/event_gap_probe.py docs/data/event_gap.json``
saves the table the methodology page shows.
"""

import json
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from cudnn_guide import environment
from cudnn_guide.graphs import matmul, tensors
from cudnn_guide.measure import events

mm = matmul.MatmulProblem()
mi = mm.make_inputs()
mf = matmul.matmul_epilogue_graph(mm, mi)
epilogue = mf.bind(mf.pack(**mi, alpha=tensors.scalar_value(mm.alpha)))
small = torch.randn(1 << 20, device="cuda")
tiny = lambda: small.mul_(1.0)
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
gemm = lambda: torch.matmul(a, a, out=c)
flush = events.l2_flush_buffer()


def probe(fn, use_flush, use_spin, n=300):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p0:
        flush.zero_()
        events.spin(0.05)
        torch.cuda.synchronize()
    skip = {e.name for e in p0.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for s, e in ev:
            if use_flush:
                flush.zero_()
            if use_spin:
                events.spin(0.2)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
    times = [s.elapsed_time(e) * 1e3 for s, e in ev]
    kern = [
        e
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
        and e.name not in skip
        and "memset" not in e.name.lower()
        and "memcpy" not in e.name.lower()
    ]
    dur = [e.time_range.end - e.time_range.start for e in kern]
    return statistics.median(times), statistics.median(dur), len(dur)


rows = []
for name, fn in (("tiny elementwise", tiny), ("matmul epilogue (cuDNN)", epilogue), ("bf16 matmul 4096³", gemm)):
    for use_flush in (True, False):
        for use_spin in (True, False):
            ev, k, n = probe(fn, use_flush, use_spin)
            rows.append(
                {
                    "kernel": name,
                    "flush": use_flush,
                    "spin": use_spin,
                    "events_median_us": ev,
                    "cupti_median_us": k,
                    "gap_us": ev - k,
                    "calls": n,
                }
            )
            print(
                f"{name:26s} flush={use_flush!s:5} spin={use_spin!s:5}: events {ev:8.2f} µs, kernel {k:8.2f} µs, "
                f"gap {ev - k:6.2f} µs ({n} kernels)",
                flush=True,
            )

if len(sys.argv) > 1:
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump({"environment": environment.collect().to_dict(), "rows": rows}, f, indent=1)
