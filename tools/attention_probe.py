"""Probe, on the GPU builder, which attention variants and production paths cuDNN Frontend 1.32 serves here.

Each section runs on its own and prints what worked, what failed (with cuDNN's message) and a rough
time, so that the cookbook pages are built only on calls verified on this GPU. Not a page: the
pages measure properly. Usage: ``python tools/attention_probe.py [section ...]``; writes
``$OUT/probe.json`` when ``OUT`` is set.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F

import cudnn

RESULTS: dict = {}
BF = torch.bfloat16
CDT = cudnn.data_type


def timeit(fn, n=30):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def section(fn):
    def run():
        name = fn.__name__
        print(f"\n==== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            RESULTS[name] = fn()
        except Exception as exc:  # a probe: keep going
            RESULTS[name] = {"error": f"{type(exc).__name__}: {exc}"[:800]}
            traceback.print_exc(limit=4)
        print(f"---- {name}: {time.perf_counter() - t0:.1f} s -> {json.dumps(RESULTS[name], default=str)[:1500]}", flush=True)

    run.__name__ = fn.__name__
    return run


HANDLE = None


def handle():
    global HANDLE
    if HANDLE is None:
        HANDLE = cudnn.create_handle()
    cudnn.set_stream(HANDLE, torch.cuda.current_stream().cuda_stream)
    return HANDLE


def build(g, modes=("A", "FALLBACK")):
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([getattr(cudnn.heur_mode, m) for m in modes])
    g.check_support()
    g.build_plans()
    return g


def new_graph():
    return cudnn.pygraph(handle=handle(), io_data_type=CDT.BFLOAT16, intermediate_data_type=CDT.FLOAT,
                         compute_data_type=CDT.FLOAT)


def ws(g):
    return torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)


def err(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item()


def ref_attn(q, k, v, mask=None, bias=None, scale=None):
    """fp32 reference on B,H,S,D with GQA expansion; mask True = visible."""
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk:
        k = k.repeat_interleave(hq // hk, 1)
        v = v.repeat_interleave(hq // hk, 1)
    s = (q.float() @ k.float().transpose(-1, -2)) * (scale or q.shape[-1] ** -0.5)
    if bias is not None:
        s = s + bias.float()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ v.float()


def sdpa_fwd_graph(q, k, v, *, stats=False, **kw):
    g = new_graph()
    Q, K, V = g.tensor_like(q, name="q"), g.tensor_like(k, name="k"), g.tensor_like(v, name="v")
    extra = {}
    for name in ("seq_len_q", "seq_len_kv", "bias"):
        if name in kw and isinstance(kw[name], torch.Tensor):
            extra[name] = kw[name]
            kw[name] = g.tensor_like(kw[name], name=name)
    O, S = g.sdpa(name="sdpa", q=Q, k=K, v=V, generate_stats=stats, attn_scale=q.shape[-1] ** -0.5, **kw)
    o = torch.empty(q.shape[:-1] + (v.shape[-1],), device="cuda", dtype=q.dtype)
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    pack = {Q: q, K: k, V: v, O: o}
    if stats:
        st = torch.empty(q.shape[:-1] + (1,), device="cuda", dtype=torch.float32)
        S.set_output(True).set_data_type(CDT.FLOAT).set_dim(list(st.shape)).set_stride(list(st.stride()))
        pack[S] = st
    for name, t in extra.items():
        pack[kw[name]] = t
    build(g)
    w = ws(g)
    return g, pack, w, o


def causal_mask(sq, skv, device="cuda"):
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(skv, device=device)[None, :]
    return j <= i


@section
def gqa():
    out = {}
    for hkv in (8, 1):
        B, Hq, S, D = 2, 32, 2048, 128
        q = torch.randn(B, Hq, S, D, device="cuda", dtype=BF)
        k = torch.randn(B, hkv, S, D, device="cuda", dtype=BF)
        v = torch.randn(B, hkv, S, D, device="cuda", dtype=BF)
        g, pack, w, o = sdpa_fwd_graph(q, k, v, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                       diagonal_band_right_bound=0)
        g.execute(pack, w, handle=handle())
        r = ref_attn(q, k, v, causal_mask(S, S))
        res = {"fwd_err": err(o, r), "cudnn_ms": timeit(lambda: g.execute(pack, w, handle=handle()))}
        from torch.nn.attention import SDPBackend, sdpa_kernel
        for be in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
            try:
                with sdpa_kernel([getattr(SDPBackend, be)]):
                    f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
                    y = f()
                    res[be] = {"err": err(y, r), "ms": timeit(f, 10)}
            except Exception as exc:
                res[be] = {"error": str(exc).splitlines()[0][:200]}
        out[f"hkv={hkv}"] = res
    # backward with GQA
    B, Hq, Hkv, S, D = 2, 32, 8, 1024, 128
    q = torch.randn(B, Hq, S, D, device="cuda", dtype=BF)
    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=BF)
    v = torch.randn(B, Hkv, S, D, device="cuda", dtype=BF)
    g, pack, w, o = sdpa_fwd_graph(q, k, v, stats=True, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                   diagonal_band_right_bound=0)
    g.execute(pack, w, handle=handle())
    stats = [t for gt, t in pack.items() if t.dtype == torch.float32][0]
    do = torch.randn_like(o)
    gb = new_graph()
    T = {n: gb.tensor_like(t, name=n) for n, t in dict(q=q, k=k, v=v, o=o, dO=do, stats=stats).items()}
    dQ, dK, dV = gb.sdpa_backward(name="bwd", q=T["q"], k=T["k"], v=T["v"], o=T["o"], dO=T["dO"], stats=T["stats"],
                                  attn_scale=D ** -0.5, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                  diagonal_band_right_bound=0)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    for X, x in ((dQ, dq), (dK, dk), (dV, dv)):
        X.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
    build(gb)
    wb = ws(gb)
    pk = {T[n]: t for n, t in dict(q=q, k=k, v=v, o=o, dO=do, stats=stats).items()}
    pk.update({dQ: dq, dK: dk, dV: dv})
    gb.execute(pk, wb, handle=handle())
    qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
    rr = ref_attn(qr, kr, vr, causal_mask(S, S))
    rr.backward(do.float())
    out["bwd"] = {"dq": err(dq, qr.grad), "dk": err(dk, kr.grad), "dv": err(dv, vr.grad),
                  "ms": timeit(lambda: gb.execute(pk, wb, handle=handle()))}
    # deterministic backward
    try:
        gd = new_graph()
        T2 = {n: gd.tensor_like(t, name=n) for n, t in dict(q=q, k=k, v=v, o=o, dO=do, stats=stats).items()}
        dQ2, dK2, dV2 = gd.sdpa_backward(name="bwd", q=T2["q"], k=T2["k"], v=T2["v"], o=T2["o"], dO=T2["dO"],
                                         stats=T2["stats"], attn_scale=D ** -0.5,
                                         diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                         diagonal_band_right_bound=0, use_deterministic_algorithm=True)
        for X, x in ((dQ2, dq), (dK2, dk), (dV2, dv)):
            X.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
        build(gd)
        wd = ws(gd)
        pk2 = {T2[n]: t for n, t in dict(q=q, k=k, v=v, o=o, dO=do, stats=stats).items()}
        pk2.update({dQ2: dq, dK2: dk, dV2: dv})
        runs = []
        for _ in range(3):
            gd.execute(pk2, wd, handle=handle())
            runs.append(dq.clone())
        nd = []
        for _ in range(3):
            gb.execute(pk, wb, handle=handle())
            nd.append(dq.clone())
        out["deterministic"] = {"bitwise_equal": all(torch.equal(runs[0], r) for r in runs),
                                "nondet_bitwise_equal": all(torch.equal(nd[0], r) for r in nd),
                                "ws_det": gd.get_workspace_size(), "ws": gb.get_workspace_size(),
                                "ms": timeit(lambda: gd.execute(pk2, wd, handle=handle())),
                                "plan": gd.get_plan_name_at_index(0)}
    except Exception as exc:
        out["deterministic"] = {"error": str(exc)[:400]}
    return out


@section
def padding_and_ragged():
    out = {}
    B, H, S, D = 4, 16, 1024, 128
    lens = torch.tensor([1024, 700, 1, 0], dtype=torch.int32, device="cuda")
    q = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    k = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    v = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    slq = lens.reshape(B, 1, 1, 1).clone()
    slk = lens.reshape(B, 1, 1, 1).clone()
    for label, kw in (("padding", {}), ("padding+causal", dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                                                     diagonal_band_right_bound=0))):
        try:
            g, pack, w, o = sdpa_fwd_graph(q, k, v, use_padding_mask=True, seq_len_q=slq, seq_len_kv=slk, **kw)
            o.fill_(float("nan"))
            g.execute(pack, w, handle=handle())
            torch.cuda.synchronize()
            per = []
            for b in range(B):
                n = int(lens[b])
                if n == 0:
                    per.append({"len": 0, "rows_nan": bool(o[b].isnan().any()), "finite_rows": 0})
                    continue
                m = causal_mask(n, n) if kw else None
                r = ref_attn(q[b:b + 1, :, :n], k[b:b + 1, :, :n], v[b:b + 1, :, :n], m)
                per.append({"len": n, "err": err(o[b:b + 1, :, :n], r),
                            "pad_rows_untouched_nan": bool(o[b, :, n:].isnan().all()) if n < S else None})
            out[label] = per
        except Exception as exc:
            out[label] = {"error": str(exc)[:400]}
    # ragged THD
    try:
        lens_l = [1024, 700, 300, 5]
        T = sum(lens_l)
        qp = torch.randn(T, H, D, device="cuda", dtype=BF)
        kp = torch.randn(T, H, D, device="cuda", dtype=BF)
        vp = torch.randn(T, H, D, device="cuda", dtype=BF)
        op = torch.empty_like(qp)
        cu = torch.tensor([0] + list(torch.tensor(lens_l).cumsum(0)), dtype=torch.int64, device="cuda")
        ro = (cu * H * D).reshape(B + 1, 1, 1, 1).contiguous()
        smax = max(lens_l)
        g = new_graph()
        RO = g.tensor(name="ragged", dim=[B + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=CDT.INT64)
        dims = [B, H, smax, D]
        strides = [smax * H * D, D, H * D, 1]  # token-major (T,H,D) seen as B,H,S,D
        Q = g.tensor(name="q", dim=dims, stride=strides, data_type=CDT.BFLOAT16, ragged_offset=RO)
        K = g.tensor(name="k", dim=dims, stride=strides, data_type=CDT.BFLOAT16, ragged_offset=RO)
        V = g.tensor(name="v", dim=dims, stride=strides, data_type=CDT.BFLOAT16, ragged_offset=RO)
        sl = torch.tensor(lens_l, dtype=torch.int32, device="cuda").reshape(B, 1, 1, 1)
        SQ, SK = g.tensor_like(sl, name="slq"), g.tensor_like(sl, name="slk")
        O, _ = g.sdpa(name="sdpa", q=Q, k=K, v=V, generate_stats=False, attn_scale=D ** -0.5, use_padding_mask=True,
                      seq_len_q=SQ, seq_len_kv=SK, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                      diagonal_band_right_bound=0)
        O.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(RO)
        build(g)
        w = ws(g)
        pack = {Q: qp, K: kp, V: vp, O: op, SQ: sl, SK: sl, RO: ro}
        g.execute(pack, w, handle=handle())
        errs = []
        for b in range(B):
            a, e = int(cu[b]), int(cu[b + 1])
            tq = qp[a:e].transpose(0, 1)[None]
            r = ref_attn(tq, kp[a:e].transpose(0, 1)[None], vp[a:e].transpose(0, 1)[None], causal_mask(e - a, e - a))
            errs.append(err(op[a:e].transpose(0, 1)[None], r))
        out["ragged"] = {"errs": errs, "ms": timeit(lambda: g.execute(pack, w, handle=handle()))}
    except Exception as exc:
        out["ragged"] = {"error": str(exc)[:600]}
        traceback.print_exc(limit=3)
    # torch varlen / nested / flex
    try:
        import torch.nn.attention.varlen as vl
        out["torch_varlen"] = {"has": True, "names": [n for n in dir(vl) if not n.startswith("_")]}
        cu32 = cu.to(torch.int32)
        y = vl.varlen_attn(qp, kp, vp, cu32, cu32, smax, smax, is_causal=True)
        out["torch_varlen"]["err_vs_cudnn"] = err(y, op)
        out["torch_varlen"]["ms"] = timeit(lambda: vl.varlen_attn(qp, kp, vp, cu32, cu32, smax, smax, is_causal=True))
    except Exception as exc:
        out["torch_varlen"] = {"error": str(exc)[:300]}
    try:
        nt = [torch.nested.nested_tensor_from_jagged(t, cu) .transpose(1, 2) for t in (qp, kp, vp)]
        y = F.scaled_dot_product_attention(*nt, is_causal=True)
        yv = y.transpose(1, 2).values()
        out["nested"] = {"err_vs_cudnn": err(yv, op),
                         "ms": timeit(lambda: F.scaled_dot_product_attention(*nt, is_causal=True))}
    except Exception as exc:
        out["nested"] = {"error": str(exc)[:300]}
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        doc = torch.repeat_interleave(torch.arange(B, device="cuda"), torch.tensor(lens_l, device="cuda"))

        def mask_mod(b, h, qi, ki):
            return (doc[qi] == doc[ki]) & (ki <= qi)

        bm = create_block_mask(mask_mod, None, None, T, T, device="cuda")
        fa = torch.compile(flex_attention, fullgraph=True)
        qq, kk, vv = (t.transpose(0, 1)[None] for t in (qp, kp, vp))
        y = fa(qq, kk, vv, block_mask=bm)
        out["flex_doc"] = {"err_vs_cudnn": err(y[0].transpose(0, 1), op), "ms": timeit(lambda: fa(qq, kk, vv, block_mask=bm))}
    except Exception as exc:
        out["flex_doc"] = {"error": str(exc)[:300]}
    return out


@section
def masks():
    out = {}
    B, H, S, D = 2, 16, 2048, 128
    q = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    k = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    v = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    i = torch.arange(S, device="cuda")[:, None]
    j = torch.arange(S, device="cuda")[None, :]
    W = 256
    try:
        g, pack, w, o = sdpa_fwd_graph(q, k, v, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                       diagonal_band_right_bound=0, diagonal_band_left_bound=W)
        g.execute(pack, w, handle=handle())
        out["window"] = {"err_lt": err(o, ref_attn(q, k, v, (j <= i) & (i - j < W))),
                         "err_le": err(o, ref_attn(q, k, v, (j <= i) & (i - j <= W))),
                         "ms": timeit(lambda: g.execute(pack, w, handle=handle()))}
        gc, pc, wc, oc = sdpa_fwd_graph(q, k, v, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                        diagonal_band_right_bound=0)
        out["window"]["causal_ms"] = timeit(lambda: gc.execute(pc, wc, handle=handle()))
    except Exception as exc:
        out["window"] = {"error": str(exc)[:400]}
    try:  # bottom right: Sq < Skv (chunked prefill: 512 new tokens after 1536 cached)
        sq = 512
        qs = q[:, :, :sq].contiguous()
        g, pack, w, o = sdpa_fwd_graph(qs, k, v, diagonal_alignment=cudnn.diagonal_alignment.BOTTOM_RIGHT,
                                       diagonal_band_right_bound=0)
        g.execute(pack, w, handle=handle())
        ii = torch.arange(sq, device="cuda")[:, None] + (S - sq)
        out["bottom_right"] = {"err": err(o, ref_attn(qs, k, v, j <= ii)),
                               "torch_lower_right": None}
        from torch.nn.attention.bias import causal_lower_right
        y = F.scaled_dot_product_attention(qs, k, v, attn_mask=causal_lower_right(sq, S))
        out["bottom_right"]["torch_lower_right"] = err(y, o)
    except Exception as exc:
        out["bottom_right"] = {"error": str(exc)[:400]}
    try:
        bias = torch.randn(1, H, S, S, device="cuda", dtype=BF)
        g, pack, w, o = sdpa_fwd_graph(q, k, v, bias=bias, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                       diagonal_band_right_bound=0)
        g.execute(pack, w, handle=handle())
        out["bias"] = {"err": err(o, ref_attn(q, k, v, j <= i, bias=bias)),
                       "ms": timeit(lambda: g.execute(pack, w, handle=handle()))}
    except Exception as exc:
        out["bias"] = {"error": str(exc)[:400]}
    try:
        g, pack, w, o = sdpa_fwd_graph(q, k, v, use_alibi_mask=True, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                       diagonal_band_right_bound=0)
        g.execute(pack, w, handle=handle())
        slopes = torch.tensor([2 ** (-8 * (h + 1) / H) for h in range(H)], device="cuda")
        al = (slopes[:, None, None] * (j - i)[None].float())[None]
        out["alibi"] = {"err": err(o, ref_attn(q, k, v, j <= i, bias=al)),
                        "ms": timeit(lambda: g.execute(pack, w, handle=handle()))}
    except Exception as exc:
        out["alibi"] = {"error": str(exc)[:400]}
    try:  # score_mod: soft cap?
        import inspect
        out["score_mod_doc"] = (inspect.getdoc(new_graph().sdpa) or "")[:600]
    except Exception as exc:
        out["score_mod_doc"] = str(exc)
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        fa = torch.compile(flex_attention, fullgraph=True)
        res = {}
        for win in (2048, 1024, 512, 256, 128):
            bm = create_block_mask(lambda b, h, qi, ki, win=win: (ki <= qi) & (qi - ki < win), None, None, S, S)
            y = fa(q, k, v, block_mask=bm)
            res[win] = timeit(lambda: fa(q, k, v, block_mask=bm), 10)
        out["flex_window_ms"] = res
    except Exception as exc:
        out["flex_window_ms"] = {"error": str(exc)[:300]}
    return out


@section
def dropout():
    B, H, S, D = 2, 8, 512, 64
    q = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    k = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    v = torch.ones(B, H, S, D, device="cuda", dtype=BF)
    g = new_graph()
    Q, K, V = g.tensor_like(q, name="q"), g.tensor_like(k, name="k"), g.tensor_like(v, name="v")
    seed = torch.full((1, 1, 1, 1), 123, dtype=torch.int64, device="cuda")
    off = torch.full((1, 1, 1, 1), 0, dtype=torch.int64, device="cuda")
    SEED, OFF = g.tensor_like(seed, name="seed"), g.tensor_like(off, name="offset")
    O, S_ = g.sdpa(name="sdpa", q=Q, k=K, v=V, generate_stats=True, attn_scale=D ** -0.5, dropout=(0.1, SEED, OFF))
    o = torch.empty_like(q)
    st = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    S_.set_output(True).set_data_type(CDT.FLOAT).set_dim(list(st.shape)).set_stride(list(st.stride()))
    build(g)
    w = ws(g)
    pack = {Q: q, K: k, V: v, O: o, S_: st, SEED: seed, OFF: off}
    g.execute(pack, w, handle=handle())
    a = o.clone()
    g.execute(pack, w, handle=handle())
    b = o.clone()
    off.fill_(1)
    g.execute(pack, w, handle=handle())
    c = o.clone()
    # with v = 1, each output = sum of kept probs / (1-p): mean should be ~1
    return {"same_seed_equal": torch.equal(a, b), "new_offset_differs": not torch.equal(a, c),
            "mean": a.float().mean().item(), "std": a.float().std().item(), "plan": g.get_plan_name_at_index(0)}


@section
def paged_prefill():
    B, H, D, page, npages_seq = 4, 8, 128, 64, 16
    lens_kv = torch.tensor([1024, 900, 512, 700], dtype=torch.int32, device="cuda")
    sq = 128
    lens_q = torch.tensor([128, 128, 64, 100], dtype=torch.int32, device="cuda")
    pool_pages = B * npages_seq + 7
    kpool = torch.randn(pool_pages, H, page, D, device="cuda", dtype=BF)
    vpool = torch.randn(pool_pages, H, page, D, device="cuda", dtype=BF)
    perm = torch.randperm(pool_pages, device="cuda")[: B * npages_seq].to(torch.int32)
    table = perm.reshape(B, 1, npages_seq, 1).contiguous()
    q = torch.randn(B, H, sq, D, device="cuda", dtype=BF)
    g = new_graph()
    Q, KP, VP = g.tensor_like(q, name="q"), g.tensor_like(kpool, name="kp"), g.tensor_like(vpool, name="vp")
    TB = g.tensor_like(table, name="table")
    slq, slk = lens_q.reshape(B, 1, 1, 1).contiguous(), lens_kv.reshape(B, 1, 1, 1).contiguous()
    SQ, SK = g.tensor_like(slq, name="slq"), g.tensor_like(slk, name="slk")
    O, _ = g.sdpa(name="sdpa", q=Q, k=KP, v=VP, generate_stats=False, attn_scale=D ** -0.5, use_padding_mask=True,
                  seq_len_q=SQ, seq_len_kv=SK, paged_attention_k_table=TB, paged_attention_v_table=TB,
                  paged_attention_max_seq_len_kv=npages_seq * page,
                  diagonal_alignment=cudnn.diagonal_alignment.BOTTOM_RIGHT, diagonal_band_right_bound=0)
    o = torch.empty_like(q)
    O.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
    build(g)
    w = ws(g)
    pack = {Q: q, KP: kpool, VP: vpool, TB: table, SQ: slq, SK: slk, O: o}
    g.execute(pack, w, handle=handle())
    errs = []
    for b in range(B):
        nq, nk = int(lens_q[b]), int(lens_kv[b])
        kk = kpool[table[b, 0, :, 0].long()].permute(1, 0, 2, 3).reshape(H, -1, D)[None, :, :nk]
        vv = vpool[table[b, 0, :, 0].long()].permute(1, 0, 2, 3).reshape(H, -1, D)[None, :, :nk]
        ii = torch.arange(nq, device="cuda")[:, None] + (nk - nq)
        jj = torch.arange(nk, device="cuda")[None, :]
        errs.append(err(o[b:b + 1, :, :nq], ref_attn(q[b:b + 1, :, :nq], kk, vv, jj <= ii)))
    return {"errs": errs, "ms": timeit(lambda: g.execute(pack, w, handle=handle())), "plan": g.get_plan_name_at_index(0)}


@section
def flex_oss():
    out = {}
    import cudnn.flex_attention as cfa
    B, H, S, D = 2, 16, 2048, 128
    q = torch.randn(B, S, H, D, device="cuda", dtype=BF)
    k = torch.randn(B, S, H, D, device="cuda", dtype=BF)
    v = torch.randn(B, S, H, D, device="cuda", dtype=BF)
    causal_f = (torch.arange(S, device="cuda", dtype=torch.int32) + 1).reshape(1, 1, S).contiguous()
    t0 = time.perf_counter()
    plan = cfa.create_mask_plan(causal_f, q, k, v)
    torch.cuda.synchronize()
    out["plan_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    y = cfa.flex_attn_func(q, k, v, mask_plan=plan)
    torch.cuda.synchronize()
    out["first_call_s"] = time.perf_counter() - t0
    r = ref_attn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal_mask(S, S)).transpose(1, 2)
    out["err"] = err(y, r)
    out["ms"] = timeit(lambda: cfa.flex_attn_func(q, k, v, mask_plan=plan))
    # window via 3 endpoints
    W = 256
    idx = torch.arange(S, device="cuda", dtype=torch.int32)
    wf = torch.stack([torch.zeros_like(idx), (idx - W + 1).clamp_min(0), idx + 1]).reshape(1, 3, S).contiguous()
    try:
        t0 = time.perf_counter()
        pw = cfa.create_mask_plan(wf, q, k, v)
        yw = cfa.flex_attn_func(q, k, v, mask_plan=pw)
        torch.cuda.synchronize()
        out["window_first_s"] = time.perf_counter() - t0
        ii, jj = idx[:, None], idx[None, :]
        rw = ref_attn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), (jj <= ii) & (ii - jj < W)).transpose(1, 2)
        out["window_err"] = err(yw, rw)
        out["window_ms"] = timeit(lambda: cfa.flex_attn_func(q, k, v, mask_plan=pw))
    except Exception as exc:
        out["window"] = {"error": str(exc)[:400]}
    try:
        qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
        t0 = time.perf_counter()
        pb = cfa.create_mask_plan(causal_f, qg, kg, vg)
        yb = cfa.flex_attn_func(qg, kg, vg, mask_plan=pb)
        do = torch.randn_like(yb)
        yb.backward(do)
        torch.cuda.synchronize()
        out["bwd_first_s"] = time.perf_counter() - t0
        qr, kr, vr = (t.detach().float().transpose(1, 2).requires_grad_() for t in (q, k, v))
        rr = ref_attn(qr, kr, vr, causal_mask(S, S))
        rr.backward(do.float().transpose(1, 2))
        out["bwd_err"] = {"dq": err(qg.grad, qr.grad.transpose(1, 2)), "dk": err(kg.grad, kr.grad.transpose(1, 2))}
    except Exception as exc:
        out["bwd"] = {"error": str(exc)[:400]}
    return out


@section
def opensource_heur():
    out = {}
    B, H, S, D = 2, 16, 2048, 128
    q = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    for label, env in (("default", None), ("frost", "1")):
        if env:
            os.environ["CUDNN_FRONTEND_ENABLE_FROST_ENGINES"] = env
        for modes in (("OPENSOURCE",), ("A",), ("A", "OPENSOURCE")):
            try:
                g = new_graph()
                Q, K, V = (g.tensor_like(q, name=n) for n in "qkv")
                O, _ = g.sdpa(name="s", q=Q, k=K, v=V, generate_stats=False, attn_scale=D ** -0.5,
                              diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
                O.set_output(True).set_dim([B, H, S, D]).set_stride([H * S * D, S * D, D, 1])
                g.validate()
                g.build_operation_graph()
                g.create_execution_plans([getattr(cudnn.heur_mode, m) for m in modes])
                n = g.get_execution_plan_count()
                names = [g.get_plan_name_at_index(i) for i in range(min(n, 5))]
                g.check_support()
                g.build_plans()
                o = torch.empty_like(q)
                w = ws(g)
                g.execute({Q: q, K: q, V: q, O: o}, w, handle=handle())
                out[f"{label}:{'+'.join(modes)}"] = {"plans": n, "names": names,
                                                     "ms": timeit(lambda: g.execute({Q: q, K: q, V: q, O: o}, w, handle=handle()))}
            except Exception as exc:
                out[f"{label}:{'+'.join(modes)}"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    os.environ.pop("CUDNN_FRONTEND_ENABLE_FROST_ENGINES", None)
    try:
        import cudnn.sdpa.fwd.torch_op  # noqa: F401
        qq = torch.randn(B, H, S, D, device="cuda", dtype=BF)
        o, lse = torch.ops.cudnn.sdpa_fwd(qq, qq, qq, D ** -0.5, is_causal=True)
        r = ref_attn(qq, qq, qq, causal_mask(S, S))
        out["torch_op"] = {"err": err(o, r), "ms": timeit(lambda: torch.ops.cudnn.sdpa_fwd(qq, qq, qq, D ** -0.5, is_causal=True))}
    except Exception as exc:
        out["torch_op"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return out


@section
def overhead():
    out = {}
    B, H, S, D = 8, 8, 1, 128  # decode-sized
    q = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    k = torch.randn(B, H, 512, D, device="cuda", dtype=BF)
    g, pack, w, o = sdpa_fwd_graph(q, k, k)
    h = handle()
    uid_pack = {t.get_uid() if hasattr(t, "get_uid") else t.uid: d for t, d in pack.items()}
    ordered_uids = list(uid_pack)
    ordered = [uid_pack[u] for u in ordered_uids]

    def host_us(fn, n=2000):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) / n * 1e6

    s = torch.cuda.current_stream().cuda_stream
    out["dict_tensor"] = host_us(lambda: g.execute(pack, w, handle=h))
    out["dict_uid"] = host_us(lambda: g.execute(uid_pack, w, handle=h))
    try:
        out["ordered_uids"] = host_us(lambda: g.execute(ordered, w, handle=h, tensor_uids=ordered_uids))
    except Exception as exc:
        out["ordered_uids"] = str(exc)[:200]
    out["plan_at_index"] = host_us(lambda: g.execute_plan_at_index(pack, w, 0, handle=h))

    def with_stream():
        cudnn.set_stream(h, s)
        g.execute(pack, w, handle=h)

    out["set_stream_each"] = host_us(with_stream)
    out["set_stream_only"] = host_us(lambda: cudnn.set_stream(h, s))
    out["torch_sdpa"] = host_us(lambda: F.scaled_dot_product_attention(q, k, k))
    out["empty_kernel_add"] = host_us(lambda: q.add_(0))
    # native cuda graph API
    try:
        cg = torch.cuda.CUDAGraph()
        out["cudagraph_type"] = str(type(cg))
        import inspect
        out["populate_doc"] = inspect.getdoc(g._lowered_graph.populate_cuda_graph)[:500] if g._lowered_graph else None
    except Exception as exc:
        out["cg"] = str(exc)[:300]
    try:
        from cuda.bindings import runtime as cudart
        err_, graph = cudart.cudaGraphCreate(0)
        out["cudart_graph_create"] = str(err_)
        t0 = time.perf_counter()
        g.populate_cuda_graph(h, pack, w, int(graph))
        out["populate_s"] = time.perf_counter() - t0
        err_, gexec = cudart.cudaGraphInstantiate(graph, 0)
        out["instantiate"] = str(err_)
        o.zero_()
        cudart.cudaGraphLaunch(gexec, s)
        torch.cuda.synchronize()
        out["populate_launch_err"] = err(o, ref_attn(q, k, k))
        o2 = torch.empty_like(o)
        pack2 = dict(pack)
        for t, d in pack.items():
            if d is o:
                pack2[t] = o2
        t0 = time.perf_counter()
        g.update_cuda_graph(h, pack2, w, int(graph))
        out["update_us"] = (time.perf_counter() - t0) * 1e6
        err_ = cudart.cudaGraphExecUpdate(gexec, graph)
        out["exec_update"] = str(err_)[:200]
        cudart.cudaGraphLaunch(gexec, s)
        torch.cuda.synchronize()
        out["after_update_err"] = err(o2, ref_attn(q, k, k))
    except Exception as exc:
        out["native_cg"] = f"{type(exc).__name__}: {exc}"[:400]
        traceback.print_exc(limit=3)
    return out


@section
def custom_op():
    out = {}
    lib_ns = "probe"
    cache = {}

    def build_fwd(q, k, v):
        key = ("f", q.shape, q.stride(), k.shape, k.stride(), q.dtype)
        if key not in cache:
            g, pack, w, o = sdpa_fwd_graph(q, k, v, stats=True, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                           diagonal_band_right_bound=0)
            cache[key] = g
        return cache[key]

    @torch.library.custom_op(f"{lib_ns}::attn", mutates_args=())
    def attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g, pack, w, o = sdpa_fwd_graph(q, k, v, stats=True, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                       diagonal_band_right_bound=0)
        g.execute(pack, w, handle=handle())
        st = [t for t in pack.values() if t.dtype == torch.float32][0]
        return o, st

    @attn.register_fake
    def _(q, k, v):
        return torch.empty_like(q), q.new_empty(q.shape[:-1] + (1,), dtype=torch.float32)

    B, H, S, D = 2, 4, 256, 64
    q = torch.randn(B, H, S, D, device="cuda", dtype=BF)
    o, st = attn(q, q, q)
    out["eager_err"] = err(o, ref_attn(q, q, q, causal_mask(S, S)))
    fn = torch.compile(lambda a, b, c: attn(a, b, c)[0] * 2, fullgraph=True)
    y = fn(q, q, q)
    out["compiled_err"] = err(y, 2 * ref_attn(q, q, q, causal_mask(S, S)))
    # cuda graph capture of a prebuilt graph
    g, pack, w, o = sdpa_fwd_graph(q, q, q, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
    h = handle()
    cg = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        cudnn.set_stream(h, s.cuda_stream)
        g.execute(pack, w, handle=h)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(cg):
        cudnn.set_stream(h, torch.cuda.current_stream().cuda_stream)
        g.execute(pack, w, handle=h)
    o.zero_()
    cg.replay()
    torch.cuda.synchronize()
    out["capture_err"] = err(o, ref_attn(q, q, q, causal_mask(S, S)))
    try:
        import cudnn.torch as ct
        out["cudnn_torch"] = [n for n in dir(ct) if not n.startswith("_")]
    except Exception as exc:
        out["cudnn_torch"] = str(exc)[:300]
    return out


@section
def failures():
    out = {}
    B, H, S = 1, 2, 128

    def try_build(label, D=128, dtype=BF, **kw):
        try:
            q = torch.randn(B, H, S, D, device="cuda", dtype=dtype)
            g = cudnn.pygraph(handle=handle(), io_data_type=CDT.FLOAT if dtype == torch.float32 else CDT.BFLOAT16,
                              intermediate_data_type=CDT.FLOAT, compute_data_type=CDT.FLOAT)
            Q, K, V = (g.tensor_like(q, name=n) for n in "qkv")
            O, _ = g.sdpa(name="s", q=Q, k=K, v=V, generate_stats=False, attn_scale=0.1, **kw)
            O.set_output(True).set_dim([B, H, S, D]).set_stride([H * S * D, S * D, D, 1])
            for step, f in (("validate", g.validate), ("build_operation_graph", g.build_operation_graph),
                            ("create_execution_plans", lambda: g.create_execution_plans([cudnn.heur_mode.A])),
                            ("check_support", g.check_support), ("build_plans", g.build_plans)):
                try:
                    f()
                except Exception as exc:
                    out[label] = {"step": step, "type": type(exc).__name__, "msg": str(exc)[:500]}
                    return
            out[label] = {"ok": True, "plans": g.get_execution_plan_count()}
        except Exception as exc:
            out[label] = {"type": type(exc).__name__, "msg": str(exc)[:500]}

    try_build("head_dim_512", D=512)
    try_build("head_dim_320", D=320)
    try_build("head_dim_100", D=100)
    try_build("fp32", dtype=torch.float32)
    # wrong strides / too-small workspace
    q = torch.randn(B, H, S, 128, device="cuda", dtype=BF)
    g, pack, w, o = sdpa_fwd_graph(q, q, q)
    bad = dict(pack)
    for t, d in pack.items():
        if d is q:
            bad[t] = q.transpose(1, 2).contiguous().transpose(1, 2)
    try:
        g.execute(bad, w, handle=handle())
        torch.cuda.synchronize()
        out["wrong_strides"] = "no error"
    except Exception as exc:
        out["wrong_strides"] = {"type": type(exc).__name__, "msg": str(exc)[:500]}
    try:
        g.execute(pack, torch.empty(0, device="cuda", dtype=torch.uint8), handle=handle())
        torch.cuda.synchronize()
        out["small_ws"] = f"no error (ws needed {g.get_workspace_size()})"
    except Exception as exc:
        out["small_ws"] = {"type": type(exc).__name__, "msg": str(exc)[:500], "needed": g.get_workspace_size()}
    # heuristics
    for modes in (("A",), ("B",), ("FALLBACK",)):
        try:
            gg = new_graph()
            Q, K, V = (gg.tensor_like(q, name=n) for n in "qkv")
            O, _ = gg.sdpa(name="s", q=Q, k=K, v=V, generate_stats=False, attn_scale=0.1)
            O.set_output(True).set_dim([B, H, S, 128]).set_stride([H * S * 128, S * 128, 128, 1])
            t0 = time.perf_counter()
            gg.validate(); gg.build_operation_graph()
            gg.create_execution_plans([getattr(cudnn.heur_mode, m) for m in modes])
            t1 = time.perf_counter()
            n = gg.get_execution_plan_count()
            gg.check_support(); gg.build_plans()
            out[f"heur_{modes[0]}"] = {"plans": n, "heur_s": t1 - t0, "total_s": time.perf_counter() - t0,
                                       "first": gg.get_plan_name_at_index(0)}
        except Exception as exc:
            out[f"heur_{modes[0]}"] = {"type": type(exc).__name__, "msg": str(exc)[:300]}
    import subprocess
    r = subprocess.run([sys.executable, "-m", "cudnn.collect_env"], capture_output=True, text=True, timeout=60)
    out["collect_env"] = (r.stdout + r.stderr)[-1500:]
    code = ("import torch,cudnn;h=cudnn.create_handle();q=torch.randn(1,2,128,64,device='cuda',dtype=torch.bfloat16);"
            "g=cudnn.pygraph(handle=h,io_data_type=cudnn.data_type.BFLOAT16,compute_data_type=cudnn.data_type.FLOAT);"
            "Q,K,V=(g.tensor_like(q) for _ in range(3));O,_=g.sdpa(q=Q,k=K,v=V,generate_stats=False,attn_scale=0.1);"
            "O.set_output(True);g.build([cudnn.heur_mode.A])")
    env = dict(os.environ, CUDNN_FRONTEND_LOG_INFO="1", CUDNN_FRONTEND_LOG_FILE="stdout")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    out["fe_log"] = (r.stdout + r.stderr)[:2500]
    env = dict(os.environ, LD_LIBRARY_PATH="/nonexistent", CUDNN_FRONTEND_LOG_INFO="0")
    r = subprocess.run([sys.executable, "-c", "import cudnn; print(cudnn.backend_version())"], capture_output=True, text=True,
                       timeout=60, env=env)
    out["backend_version"] = (r.stdout + r.stderr)[-500:]
    return out


SECTIONS = [gqa, padding_and_ragged, masks, dropout, paged_prefill, opensource_heur, overhead, custom_op, failures,
            flex_oss]

if __name__ == "__main__":
    want = sys.argv[1:]
    print(torch.__version__, cudnn.backend_version(), torch.cuda.get_device_name())
    for s in SECTIONS:
        if not want or s.__name__ in want:
            s()
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "probe.json"), "w") as f:
            json.dump(RESULTS, f, indent=1, default=str)
