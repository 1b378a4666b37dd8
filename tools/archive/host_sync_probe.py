"""Does a graph's execute() block the host until the GPU catches up? Run on a GPU.

Host time of one execute with the GPU idle, and with 20 ms of GPU work queued ahead of it: a call
that returns in microseconds in both cases is asynchronous; one whose host time grows by ~20 ms
waits for the queue (an implicit synchronization, e.g. cudaMalloc/cudaFree).
"""

import time

import torch

from cudnn_guide.graphs import attention, conv, conv_training
from cudnn_guide.measure import events


def host_us(fn, queued_ms):
    torch.cuda.synchronize()
    if queued_ms:
        events.spin(queued_ms)
    t0 = time.perf_counter()
    fn()
    dt = (time.perf_counter() - t0) * 1e6
    torch.cuda.synchronize()
    return dt


cases = {}
p = attention.SdpaProblem(batch=2, heads=16, seq=4096, head_dim=128, causal=True)
ins = attention.make_training_inputs(p)
f = attention.sdpa_forward_training_graph(p, ins)
b = attention.sdpa_backward_graph(p, ins)
cases["sdpa forward"] = f.bind(f.pack(**{k: ins[k] for k in f.io}))
cases["sdpa backward"] = b.bind(b.pack(**{k: ins[k] for k in b.io}))
cp = conv.ConvProblem()
ci = conv_training.make_training_inputs(cp)
for name, make in (("conv dgrad", conv_training.conv_dgrad_graph), ("conv wgrad", conv_training.conv_wgrad_graph)):
    g = make(cp, ci)
    cases[name] = g.bind(g.pack(**{k: ci[k] for k in g.io}))
for name, fn in cases.items():
    for _ in range(3):
        fn()
    idle = sorted(host_us(fn, 0) for _ in range(5))[2]
    busy = sorted(host_us(fn, 20.0) for _ in range(5))[2]
    print(
        f"{name}: host {idle:.0f} µs with the GPU idle, {busy:.0f} µs with 20 ms queued ->",
        "BLOCKS" if busy > idle + 5000 else "asynchronous",
    )
