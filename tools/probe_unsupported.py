"""Probe which small graphs cuDNN refuses, and how (developer tool for choosing test cases)."""
import traceback

import torch

from cudnn_guide import check, recipes, tensors, graphs
import cudnn


def attempt(name, fn):
    try:
        out = fn()
        print(f"{name}: built OK {out if out else ''}")
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")


def sdpa(d, dtype="bfloat16"):
    p = recipes.SdpaProblem(batch=1, heads=1, seq=128, head_dim=d, dtype=dtype)
    ins = p.make_inputs()
    f = recipes.sdpa_graph(p, ins)
    f.built.execute(f.pack(**ins))
    r = check.compare(ins["o"], check.reference(p.torch_forward, ins["q"], ins["k"], ins["v"]))
    return f"plan={f.built.report.plan_name} {r}"


def conv_int():
    h = graphs.handle_for_current_device()
    g = cudnn.pygraph(io_data_type=cudnn.data_type.INT32, compute_data_type=cudnn.data_type.INT32, handle=h)
    X = g.tensor(name="x", dim=[1, 8, 8, 8], stride=[512, 1, 64, 8], data_type=cudnn.data_type.INT32)
    W = g.tensor(name="w", dim=[8, 8, 3, 3], stride=[72, 1, 24, 8], data_type=cudnn.data_type.INT32)
    Y = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1], compute_data_type=cudnn.data_type.INT32)
    Y.set_output(True).set_data_type(cudnn.data_type.INT32)
    return graphs.build(g, name="int32 conv").report


def conv_double_nchw():
    h = graphs.handle_for_current_device()
    g = cudnn.pygraph(io_data_type=cudnn.data_type.DOUBLE, compute_data_type=cudnn.data_type.DOUBLE, handle=h)
    X = g.tensor(name="x", dim=[1, 8, 8, 8], stride=[512, 64, 8, 1], data_type=cudnn.data_type.DOUBLE)
    W = g.tensor(name="w", dim=[8, 8, 3, 3], stride=[72, 9, 3, 1], data_type=cudnn.data_type.DOUBLE)
    Y = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    B = g.tensor(name="b", dim=[1, 8, 1, 1], stride=[8, 1, 1, 1], data_type=cudnn.data_type.DOUBLE)
    Z = g.bias(input=Y, bias=B)
    Z = g.sin(input=Z)
    Z.set_output(True)
    return graphs.build(g, name="fp64 conv+bias+sin").report


def matmul_int8_out_float_reduction():
    h = graphs.handle_for_current_device()
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, compute_data_type=cudnn.data_type.FLOAT, handle=h)
    A = g.tensor(name="a", dim=[1, 64, 64], stride=[4096, 64, 1])
    B = g.tensor(name="b", dim=[1, 64, 64], stride=[4096, 64, 1])
    C = g.matmul(A, B)
    D = g.matmul(C, B)
    E = g.matmul(D, B)
    E.set_output(True)
    return graphs.build(g, name="three chained matmuls").report


for d in (72, 256, 320, 1000):
    attempt(f"sdpa d={d}", lambda d=d: sdpa(d))
attempt("sdpa fp32", lambda: sdpa(64, "float32"))
attempt("int32 conv", conv_int)
attempt("fp64 conv+bias+sin NCHW", conv_double_nchw)
attempt("three chained matmuls", matmul_int8_out_float_reduction)
