"""Which BatchNorm-inference → ReLU graphs does cuDNN run here? One line per variant. Run on a GPU."""

import cudnn
import torch
import torch.nn.functional as F

from cudnn_guide import check, graphs
from cudnn_guide.graphs import tensors

N, C, H, W = 8, 64, 28, 28
x = tensors.nhwc(torch.randn(N, C, H, W, device="cuda", dtype=torch.float16))
mean = torch.randn(1, C, 1, 1, device="cuda") * 0.1
var = 1 + torch.rand(1, C, 1, 1, device="cuda") * 0.1
scale = 1 + 0.1 * torch.randn(1, C, 1, 1, device="cuda")
bias = 0.1 * torch.randn(1, C, 1, 1, device="cuda")
inv = torch.rsqrt(var + 1e-5)
ref = F.relu(F.batch_norm(x.float(), mean.flatten(), var.flatten(), scale.flatten(), bias.flatten(), False, 0.1, 1e-5))


def run(label, make, param_dtype=torch.float32, relu=True):
    try:
        g = cudnn.pygraph(
            io_data_type=cudnn.data_type.HALF,
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
            handle=graphs.handle_for_current_device(),
        )
        X = tensors.graph_tensor(g, x, "x")
        ps = {
            n: t.to(param_dtype)
            for n, t in dict(
                mean=mean, inv=inv, scale=scale, bias=bias, a=scale * inv, b=bias - mean * scale * inv
            ).items()
        }
        P = {n: tensors.graph_tensor(g, t, n) for n, t in ps.items()}
        Y = make(g, X, P)
        if relu:
            Y = g.relu(input=Y)
        y = torch.empty_like(x)
        tensors.output_like(Y, y)
        built = graphs.build(g, name=label, heuristics=("A", "B", "FALLBACK"))
        pack = {X: x, Y: y}
        pack.update({P[n]: ps[n] for n in P})
        built.execute(pack)
        r = (
            ref
            if relu
            else F.batch_norm(
                x.float(), mean.flatten(), var.flatten(), scale.flatten(), bias.flatten(), False, 0.1, 1e-5
            )
        )
        print(label, "OK", check.compare(y, r, name=label), built.report.plan_name, flush=True)
    except Exception as exc:
        print(label, "FAIL", type(exc).__name__, str(exc)[:300].replace("\n", " "), flush=True)


bn = lambda g, X, P: g.batchnorm_inference(
    input=X, mean=P["mean"], inv_variance=P["inv"], scale=P["scale"], bias=P["bias"]
)
folded = lambda g, X, P: g.add(a=g.mul(a=X, b=P["a"]), b=P["b"])
scaled = lambda g, X, P: g.add(a=g.scale(input=X, scale=P["a"]), b=P["b"])
run("bn_inference+relu fp32 params", bn)
run("bn_inference alone fp32 params", bn, relu=False)
run("bn_inference+relu fp16 params", bn, torch.float16)
run("folded mul+add+relu fp32 params", folded)
run("folded mul+add+relu fp16 params", folded, torch.float16)
run("folded scale+add+relu fp32", scaled)
