"""Build, run and check every issue-5 graph at small sizes; print one line per case. Run on a GPU.

    python tools/smoke_issue5.py
"""

import time
import traceback

import torch
import torch.nn.functional as F

from cudnn_guide import attention, check, conv_training, fp8, norms, recipes, tensors

RESULTS = []


def case(name):
    def deco(fn):
        t0 = time.perf_counter()
        try:
            out = fn()
            RESULTS.append((name, "OK", f"{time.perf_counter() - t0:.1f}s {out or ''}"))
        except Exception as exc:  # noqa: BLE001
            RESULTS.append((name, "FAIL", f"{type(exc).__name__}: {str(exc)[:600]}"))
            traceback.print_exc()
        print(*RESULTS[-1], flush=True)
        return fn
    return deco


def sub(ins, fused):
    return {k: ins[k] for k in fused.io}


@case("sdpa fwd+bwd causal d128")
def _():
    p = recipes.SdpaProblem(batch=2, heads=4, seq=512, head_dim=128, causal=True)
    ins = attention.make_training_inputs(p)
    fwd = attention.sdpa_forward_training_graph(p, ins)
    bwd = attention.sdpa_backward_graph(p, ins)
    check.poison(ins["o"], ins["dq"], ins["dk"], ins["dv"])
    fwd.built.execute(fwd.pack(**sub(ins, fwd)))
    bwd.built.execute(bwd.pack(**sub(ins, bwd)))
    out, grads = check.reference_grads(lambda q, k, v: p.torch_forward(q, k, v),
                                       {n: ins[n] for n in "qkv"}, ins["d_o"])
    r = [check.compare(ins["o"], out, name="o")]
    r += [check.compare(ins["d" + n], grads[n], name="d" + n) for n in "qkv"]
    # stats: log-sum-exp of scaled scores
    s = (ins["q"].float() @ ins["k"].float().transpose(-1, -2)) * p.scale
    s = s.masked_fill(torch.triu(torch.ones(512, 512, dtype=torch.bool, device="cuda"), 1), float("-inf"))
    lse = torch.logsumexp(s, -1, keepdim=True)
    r.append(check.compare(ins["stats"], lse, name="stats", tol=1e-3))
    return "; ".join(str(x) for x in r)


@case("paged decode")
def _():
    p = attention.PagedDecodeProblem(batch=4, heads=8, head_dim=128, max_context=1024, page_size=64)
    ins = p.make_inputs()
    f = attention.paged_decode_graph(p, ins)
    check.poison(ins["o"])
    f.built.execute(f.pack(**sub(ins, f)))
    k = attention.gather_pages(ins["k_pool"], ins["page_table"])
    v = attention.gather_pages(ins["v_pool"], ins["page_table"])
    ref = check.reference(p.torch_forward, ins["q"], k, v, p.key_mask(ins["seq_len_kv"]))
    base = p.torch_forward(ins["q"], k, v, p.key_mask(ins["seq_len_kv"]))
    return f"{check.compare(ins['o'], ref, name='paged')} | torch {check.compare(base, ref, name='torch')} lengths {ins['lengths'].tolist()}"


for kind in ("layer", "rms"):
    for residual in (False, True):
        @case(f"{kind}norm residual={residual}")
        def _(kind=kind, residual=residual):
            p = norms.NormProblem(tokens=1024, hidden=1024, kind=kind, residual=residual)
            ins = p.make_inputs()
            fwd = norms.norm_forward_graph(p, ins)
            check.poison(ins["y"], ins["inv_var"])
            fwd.built.execute(norms.pack_norm(fwd, ins, eps=p.eps))
            r = [check.compare(ins["y"], check.reference(p.torch_forward, ins["x"], ins["scale"], ins.get("bias"), ins.get("r")), name="y")]
            src = ins["x"] + ins["r"] if residual else ins["x"]
            if residual:
                r.append(check.compare(ins["s"], src.float(), name="s"))
            st = p.torch_stats(src)
            r += [check.compare(ins[n], st[n], name=n) for n in st]
            if not residual:
                bwd = norms.norm_backward_graph(p, ins)
                bwd.built.execute(norms.pack_norm(bwd, ins))
                names = {"x": ins["x"], "scale": ins["scale"]}
                if kind == "layer":
                    names["bias"] = ins["bias"]
                out, grads = check.reference_grads(lambda **kw: p.torch_forward(**kw), names, ins["dy"])
                r += [check.compare(ins["d" + n], grads[n], name="d" + n) for n in names]
            return "; ".join(str(x) for x in r)


for dtype in ("float16", "bfloat16"):
    @case(f"batchnorm relu training {dtype}")
    def _(dtype=dtype):
        p = norms.BatchNormProblem(n=8, c=64, h=28, w=28, dtype=dtype)
        ins = p.make_inputs()
        rm0, rv0 = ins["running_mean"].clone(), ins["running_var"].clone()
        f = norms.batchnorm_relu_graph(p, ins, training=True)
        pack = f.pack(**{k: ins[k] for k in f.io if k in ins},
                      epsilon=tensors.scalar_value(p.eps, rank=4), momentum=tensors.scalar_value(p.momentum, rank=4),
                      next_running_mean=ins["running_mean"], next_running_var=ins["running_var"])
        check.poison(ins["y"])
        f.built.execute(pack)
        rm, rv = rm0.clone(), rv0.clone()
        ref = check.reference(lambda x, s, b, m, v: p.torch_forward(x, s, b, m, v, training=True), ins["x"], ins["scale"], ins["bias"], rm, rv)
        xf = ins["x"].float()
        mean = xf.mean((0, 2, 3), keepdim=True)
        inv = torch.rsqrt(xf.var((0, 2, 3), unbiased=False, keepdim=True) + p.eps)
        r = [check.compare(ins["y"], ref, name="y"), check.compare(ins["mean"], mean, name="mean", tol=1e-4),
             check.compare(ins["inv_var"], inv, name="inv_var", tol=1e-4),
             check.compare(ins["running_mean"], rm, name="running_mean", tol=1e-4),
             check.compare(ins["running_var"], rv, name="running_var", tol=1e-4)]
        print("training:", "; ".join(str(x) for x in r), flush=True)
        fi = norms.batchnorm_relu_graph(p, ins, training=False)
        ins["mean"] = ins["running_mean"].clone()
        ins["inv_var"] = torch.rsqrt(ins["running_var"] + p.eps)
        check.poison(ins["y"])
        fi.built.execute(fi.pack(**{k: ins[k] for k in fi.io}))
        ref_i = check.reference(lambda x, s, b, m, v: p.torch_forward(x, s, b, m, v, training=False), ins["x"], ins["scale"], ins["bias"], ins["running_mean"], ins["running_var"])
        r.append(check.compare(ins["y"], ref_i, name="y_inference"))
        return "; ".join(str(x) for x in r)


@case("conv dgrad/wgrad")
def _():
    p = recipes.ConvProblem(n=8, c=64, h=28, w=28, k=128)
    ins = conv_training.make_training_inputs(p)
    fp = conv_training.conv_fprop_graph(p, ins)
    dg = conv_training.conv_dgrad_graph(p, ins)
    wg = conv_training.conv_wgrad_graph(p, ins)
    check.poison(ins["y"], ins["dx"], ins["dw"])
    for f in (fp, dg, wg):
        f.built.execute(f.pack(**sub(ins, f)))
    out, grads = check.reference_grads(lambda x, w: F.conv2d(x, w, padding=p.padding), {"x": ins["x"], "w": ins["w"]}, ins["dy"])
    r = [check.compare(ins["y"], out, name="y"), check.compare(ins["dx"], grads["x"], name="dx"),
         check.compare(ins["dw"], grads["w"], name="dw")]
    conv_training.torch_training_step(p, ins)()
    return "; ".join(str(x) for x in r) + f" | plans {fp.built.report.plan_name} {dg.built.report.plan_name} {wg.built.report.plan_name}"


@case("fp8 matmul")
def _():
    p = fp8.Fp8MatmulProblem(m=1024, n=1024, k=1024)
    ins = p.make_inputs()
    f = fp8.fp8_matmul_graph(p, ins)
    check.poison(ins["c"])
    f.built.execute(f.pack(**sub(ins, f)))
    ref = check.reference(torch.matmul, ins["a"], ins["b"])
    a2, b2 = ins["a8"][0], ins["b8"][0]
    tm = torch._scaled_mm(a2, b2, scale_a=ins["descale_a"].reshape(()), scale_b=ins["descale_b"].reshape(()), out_dtype=torch.bfloat16)
    return (f"{check.compare(ins['c'], ref, name='cudnn fp8', tol=0.1)} | {check.compare(tm.unsqueeze(0), ref, name='_scaled_mm', tol=0.1)}"
            f" | bf16 {check.compare(torch.matmul(ins['a'], ins['b']), ref, name='bf16')}")


@case("fp8 sdpa causal d128")
def _():
    p = recipes.SdpaProblem(batch=2, heads=4, seq=1024, head_dim=128, causal=True)
    ins = p.make_inputs()
    ref = check.reference(p.torch_forward, ins["q"], ins["k"], ins["v"])
    f8 = {}
    for n in "qkv":
        f8[n + "8"], _, f8["descale_" + n] = fp8.quantize(ins[n])
    amax_v = float(ins["v"].abs().max())
    o8_scale = fp8.E4M3_MAX / amax_v
    one = lambda v: torch.full((1, 1, 1, 1), v, device="cuda", dtype=torch.float32)  # noqa: E731
    f8.update(descale_s=one(1 / fp8.E4M3_MAX), scale_s=one(fp8.E4M3_MAX), scale_o=one(o8_scale),
              o8=torch.empty(ins["q"].shape, device="cuda", dtype=torch.float8_e4m3fn),
              amax_s=one(0), amax_o=one(0))
    f = fp8.sdpa_fp8_graph(p, f8)
    f.built.execute(f.pack(**sub(f8, f)))
    o = fp8.dequantize(f8["o8"], one(1 / o8_scale))
    return (f"{check.compare(o, ref, name='fp8 o', tol=0.2)} amax_s {f8['amax_s'].item():.3f} amax_o {f8['amax_o'].item():.3f} "
            f"true amax_o {ref.abs().max().item():.3f} | plan {f.built.report.plan_name}")


print("\nSUMMARY")
for r in RESULTS:
    print(*r)
