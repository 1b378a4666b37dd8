"""Where does one ``bench.benchmark`` call spend its wall time? Run on a GPU.

Wraps the harness's phases (warm-up and first call, timed loop, host-time loop) with wall clocks
and prints, per measured function: the phase times, the number of timed calls, the spin length,
and the per-call GPU time, so a page's build time can be traced to its measurements.
"""

import time

import torch

from cudnn_guide.graphs import conv
from cudnn_guide.measure import bench, events

log = {}


def wrap(name):
    inner = getattr(bench, name)

    def timed(*args, **kwargs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = inner(*args, **kwargs)
        torch.cuda.synchronize()
        log[name] = time.perf_counter() - t0
        if name == "time_each":
            log["reps"], log["spin_ms"] = args[2], args[4]
        return out

    setattr(bench, name, timed)


for name in ("time_each", "_host_times"):
    wrap(name)

p = conv.ConvProblem()
ins = p.make_inputs()
f = conv.conv_bias_relu_graph(p, ins)
launch = f.bind(f.pack(**ins))
x = torch.randn(1 << 20, device="cuda")
cases = {"conv (cuDNN)": launch, "tiny elementwise": lambda: x.mul_(1.0)}
flush = events.l2_flush_buffer()
for label, fn in cases.items():
    for budget in (100.0, 300.0):
        log.clear()
        t0 = time.perf_counter()
        m = bench.benchmark(fn, label=label, l2="cold", budget_ms=budget, max_reps=200)
        total = time.perf_counter() - t0
        print(
            f"{label:18s} budget {budget:5.0f} ms: total {total * 1e3:7.1f} ms, "
            f"timed loop {log['time_each'] * 1e3:7.1f} ms "
            f"({log['reps']} calls, spin {log['spin_ms'] * 1e3:.1f} µs, median {m.median_ms * 1e3:.1f} µs), "
            f"host-time loop {log['_host_times'] * 1e3:6.1f} ms",
            flush=True,
        )
torch.cuda.synchronize()
for what, fn in (("flush", flush.zero_), ("spin 0.1 ms", lambda: events.spin(0.1))):
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(100):
        fn()
    e.record()
    torch.cuda.synchronize()
    print(f"{what}: {s.elapsed_time(e) * 10:.1f} µs per call", flush=True)
