"""
Packed sequences in training: the ragged backward
=================================================

You build the training pair for packed (ragged) sequences: the causal forward over
only the real tokens, T×H×D, that also saves its softmax statistics, and an
``sdpa_backward`` graph that reads the same ragged offsets and writes dQ, dK and dV in
the packed layout. You check both against PyTorch's fp32 autograd one sequence at a
time, then time the packed backward against the same graphs on padded tensors and
against PyTorch's varlen paths, FlexAttention and FlashAttention-4.

The packed layout, its ragged offsets and the padding mask are introduced, and the
forward timed, on the
:ref:`varlen page <sphx_glr_auto_examples_plot_17_varlen_attention.py>`; the
statistics and the backward graph on the
:ref:`attention backward page <sphx_glr_auto_examples_plot_09_sdpa_backward.py>`.

What you will learn:

* that the backward declares Q, K, V, O, dO, dQ, dK and dV with the forward's ragged
  offsets, while the statistics stay padded, B×H×S_max×1 fp32;
* that ``sdpa_backward`` takes the forward's padding mask (``seq_len_q`` /
  ``seq_len_kv``), scale and causal band;
* how to check packed gradients against fp32 autograd, one sequence at a time;
* the packed backward against the padded one (the same kernel told the lengths) and
  against PyTorch's padded SDPA, FlexAttention, ``varlen_attn`` and
  FlashAttention-4's varlen backward.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
env

# %%
# The lesson: a training step over packed sequences
# -------------------------------------------------
# 4 sequences of 300, 37, 512 and 100 tokens, 16 heads of dimension 128, bf16, causal.
# Q, K, V, O, dO and the gradients hold only the T real tokens, T×H×D; the statistics,
# one fp32 log-sum-exp per query row, stay padded, B×H×S_max×1. The lengths (int32,
# B×1×1×1) and the offsets (int64, B+1 prefix sums in elements) are built as on the
# varlen page: cuDNN reads them as raw integers.
import cudnn
import torch

lengths = torch.tensor([300, 37, 512, 100], dtype=torch.int32)
B, H, D, S_MAX, T = len(lengths), 16, 128, int(lengths.max()), int(lengths.sum())
cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).int().cuda()
torch.manual_seed(0)
q, k, v, d_o = torch.randn(4, T, H, D, device="cuda", dtype=torch.bfloat16)
o, dq, dk, dv = (torch.full_like(q, float("nan")) for _ in range(4))  # until written
stats = torch.empty(B, H, S_MAX, 1, device="cuda", dtype=torch.float32)
offsets = (cu_seqlens.long() * H * D).reshape(B + 1, 1, 1, 1)  # sequence b starts here
seq_lens = lengths.cuda().reshape(B, 1, 1, 1)
handle = cudnn.create_handle()
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
dims, strides = [B, H, S_MAX, D], [S_MAX * H * D, D, H * D, 1]  # token-major
top_left = cudnn.diagonal_alignment.TOP_LEFT
causal = dict(diagonal_alignment=top_left, diagonal_band_right_bound=0)
BF16 = cudnn.data_type.BFLOAT16
types = dict(
    io_data_type=cudnn.data_type.BFLOAT16,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)

# %%
# The forward: the packed graph of the varlen page with ``generate_stats=True``. O is
# packed like Q; the statistics are declared with the padded tensor's dims and strides.
gf = cudnn.pygraph(handle=handle, **types)
RAGGED = gf.tensor_like(offsets, name="ragged_offsets")
LEN_Q = gf.tensor_like(seq_lens, name="seq_len_q")
LEN_KV = gf.tensor_like(seq_lens, name="seq_len_kv")
thd = dict(dim=dims, stride=strides, ragged_offset=RAGGED)
Q, K, V = (gf.tensor(name=n, data_type=BF16, **thd) for n in ("q", "k", "v"))
mask = dict(use_padding_mask=True, seq_len_q=LEN_Q, seq_len_kv=LEN_KV, **causal)
O, STATS = gf.sdpa(q=Q, k=K, v=V, attn_scale=D**-0.5, generate_stats=True, **mask)
O.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(RAGGED)
STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT)  # padded: B×H×S_max×1
STATS.set_dim(list(stats.shape)).set_stride(list(stats.stride()))
fwd_pack = {Q: q, K: k, V: v, O: o, STATS: stats}
fwd_pack |= {RAGGED: offsets, LEN_Q: seq_lens, LEN_KV: seq_lens}

# %%
# The backward declares its own ragged offsets and lengths the same way. Q, K, V, O,
# dO and the three gradients are packed with them; the statistics are read padded, as
# the forward wrote them; the padding mask, scale and causal band are the forward's.
gb = cudnn.pygraph(handle=handle, **types)
RAGGED = gb.tensor_like(offsets, name="ragged_offsets")
LEN_Q = gb.tensor_like(seq_lens, name="seq_len_q")
LEN_KV = gb.tensor_like(seq_lens, name="seq_len_kv")
thd = dict(dim=dims, stride=strides, ragged_offset=RAGGED)
inputs = dict(q=q, k=k, v=v, o=o, dO=d_o)
ins = {n: gb.tensor(name=n, data_type=BF16, **thd) for n in inputs}
ins["stats"] = gb.tensor_like(stats, name="stats")  # B×H×S_max×1, fp32
mask = dict(use_padding_mask=True, seq_len_q=LEN_Q, seq_len_kv=LEN_KV, **causal)
dQ, dK, dV = gb.sdpa_backward(**ins, attn_scale=D**-0.5, **mask)  # q=, …, stats=
for grad in (dQ, dK, dV):
    grad.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(RAGGED)
bwd_pack = {ins[n]: t for n, t in inputs.items()} | {ins["stats"]: stats}
bwd_pack |= {dQ: dq, dK: dk, dV: dv, RAGGED: offsets, LEN_Q: seq_lens, LEN_KV: seq_lens}
for g in (gf, gb):
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
# One workspace serves both graphs: they run one after the other on one stream.
size = max(gf.get_workspace_size(), gb.get_workspace_size())
workspace = torch.empty(size, device="cuda", dtype=torch.uint8)
gf.execute(fwd_pack, workspace, handle=handle)
gb.execute(bwd_pack, workspace, handle=handle)

# %%
# The check: each sequence alone, causal attention in fp32 with PyTorch's autograd,
# backpropagating the same dO; O, dQ, dK and dV compared as 1×H×n×D.
torch.cuda.set_device(q.device)  # autograd's backward thread needs this device
worst = 0.0
for a, e in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
    leaf = [t[a:e].transpose(0, 1)[None].float().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaf, is_causal=True)
    out.backward(d_o[a:e].transpose(0, 1)[None].float())
    for mine, want in zip((o, dq, dk, dv), (out.detach(), *(t.grad for t in leaf))):
        got = mine[a:e].transpose(0, 1)[None].float()
        torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)
        worst = max(worst, (got - want).abs().max().item())
print(f"O, dQ, dK, dV of {B} sequences: max |error| {worst:.1e} against fp32")

# %%
# Measuring the backward pass
# ---------------------------
# The problem of the varlen page: 16 sequences whose lengths are drawn (seed 0) from a
# log-normal distribution with median 1024 tokens, clipped to [32, 4096]: a stand-in
# with the long right tail of chat data, not lengths measured from a dataset. The
# same causal attention on padded B×H×S_max×D tensors, told the lengths by the same
# padding mask but with no ragged offsets, is the cuDNN control. ``sdpa_graph`` below
# declares either layout, forward or backward, as the lesson does, and binds it for
# timing. Every output is checked sequence by sequence; the worst sequence is printed.
from cudnn_guide import check, graphs

torch.manual_seed(0)
log_normal = torch.distributions.LogNormal(torch.log(torch.tensor(1024.0)), 0.8)
lengths = log_normal.sample((16,)).clamp(32, 4096).int()
B, H, D, S_MAX, T = len(lengths), 16, 128, int(lengths.max()), int(lengths.sum())
cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).int().cuda()
q, k, v = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
offsets = (cu_seqlens.long() * H * D).reshape(B + 1, 1, 1, 1)  # sequence b starts here
seq_lens = lengths.cuda().reshape(B, 1, 1, 1)
dims, strides = [B, H, S_MAX, D], [S_MAX * H * D, D, H * D, 1]  # token-major
F32, BF16 = cudnn.data_type.FLOAT, cudnn.data_type.BFLOAT16
spans = list(enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())))
print(f"{T} real tokens in {B} sequences; {B * S_MAX} slots padded to the longest")


def sdpa_graph(x, lens, offsets=None, backward=False):
    """Causal SDPA with a padding mask over ``x``, built, as a zero-argument launcher.

    Packed T×H×D tensors (declared as in the lesson) when ``offsets`` is given, padded
    B×H×S×D ones otherwise. The forward reads q, k, v and writes o (and stats, if ``x``
    has them); the backward reads q, k, v, o, d_o, stats and writes dq, dk, dv.
    """
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=BF16,
        intermediate_data_type=F32,
        compute_data_type=F32,
    )
    t = {n: g.tensor_like(lens, name=n) for n in ("seq_len_q", "seq_len_kv")}
    pack = {t["seq_len_q"]: lens, t["seq_len_kv"]: lens}
    ragged = None if offsets is None else g.tensor_like(offsets, name="ragged_offsets")
    if ragged is not None:
        pack[ragged] = offsets
    as_is = {"stats"} if ragged is not None else set(x)  # stats stay B×H×S_max×1
    ins = ("q", "k", "v", "o", "d_o", "stats") if backward else ("q", "k", "v")
    for n in ins:
        t[n] = (
            g.tensor_like(x[n], name=n)
            if n in as_is
            else g.tensor(
                name=n, data_type=BF16, dim=dims, stride=strides, ragged_offset=ragged
            )
        )
        pack[t[n]] = x[n]
    mask = dict(
        use_padding_mask=True, seq_len_q=t["seq_len_q"], seq_len_kv=t["seq_len_kv"]
    )
    mask |= dict(attn_scale=D**-0.5, **causal)
    if backward:
        qkvo = dict(
            q=t["q"], k=t["k"], v=t["v"], o=t["o"], dO=t["d_o"], stats=t["stats"]
        )
        outs = dict(zip(("dq", "dk", "dv"), g.sdpa_backward(**qkvo, **mask)))
    else:
        train = "stats" in x
        O, STATS = g.sdpa(q=t["q"], k=t["k"], v=t["v"], generate_stats=train, **mask)
        outs = {"o": O, "stats": STATS} if train else {"o": O}
    for n, node_out in outs.items():
        node_out.set_output(True).set_data_type(F32 if n == "stats" else BF16)
        if n in as_is:
            node_out.set_dim(list(x[n].shape)).set_stride(list(x[n].stride()))
        else:
            node_out.set_dim(dims).set_stride(strides).set_ragged_offset(ragged)
        pack[node_out] = x[n]
    return graphs.build(g, handle=handle).bind(pack)


def padded(t):
    """Packed T×H×D to padded B×H×S_max×D, zeros past each length."""
    out = torch.zeros(B, S_MAX, H, D, device="cuda", dtype=t.dtype)
    for b, (a, e) in spans:
        out[b, : e - a] = t[a:e]
    return out.transpose(1, 2).contiguous()


def packed_rows(y, b, a, e):  # sequence b of a packed T×H×D output, as 1×H×n×D
    return y[a:e].transpose(0, 1)[None]


def padded_rows(y, b, a, e):  # sequence b of a padded B×H×S×D output
    return y[b : b + 1, :, : e - a]


def per_sequence_check(label, outputs, rows, expected):
    """Each sequence's ``rows`` of each output against ``expected[name][b]``."""
    worst = max(
        (
            check.check(rows(y, b, a, e), expected[n][b], name=f"{label} {n}, seq. {b}")
            for n, y in outputs.items()
            for b, (a, e) in spans
        ),
        key=lambda r: r.rel_error,
    )
    checks.append(worst)
    print(f"{worst.name}: rel. error {worst.rel_error:.1e}, the worst")


checks = []
qp, kp, vp = padded(q), padded(k), padded(v)

# %%
# The other contenders, as the varlen page builds them: PyTorch's flash backend
# (FlashAttention-2), forced, on the padded tensors with ``is_causal=True``;
# FlexAttention (compiled) with a document mask over the packed tokens;
# ``torch.nn.attention.varlen``'s ``varlen_attn`` and FlashAttention-4's
# ``flash_attn_varlen_func`` on the packed T×H×D tensors with the same ``cu_seqlens``
# (int32), each if this PyTorch has it or FlashAttention-4 is installed. The varlen
# page's nested tensors have no backward contender here.
import torch.nn.functional as F
from torch.nn.attention import SDPBackend
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from cudnn_guide.measure import baselines, compare, fa4

unavailable = {}
flash = baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)
FLASH = "PyTorch padded SDPA, flash backend (FlashAttention-2)"
doc = torch.repeat_interleave(torch.arange(B, device="cuda"), lengths.cuda())


def doc_mask(b, h, qi, ki):  # the same sequence, and causal
    return (doc[qi] == doc[ki]) & (ki <= qi)


block_mask = create_block_mask(doc_mask, None, None, T, T)
flex = torch.compile(flex_attention, fullgraph=True)
packed_bhsd = [t.transpose(0, 1)[None] for t in (q, k, v)]
window = dict(window_size=(-1, 0))  # causal
varlen = None  # PyTorch's varlen_attn, where this PyTorch has it
try:
    from torch.nn.attention.varlen import varlen_attn

    def varlen(q, k, v):
        return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, S_MAX, S_MAX, **window)

except ImportError as exc:
    unavailable["PyTorch varlen_attn backward"] = str(exc)

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if FA4_OK:
    from flash_attn.cute import flash_attn_varlen_func

    fa4_kw = dict(
        cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens, softmax_scale=D**-0.5
    )

    def fa4_varlen(q, k, v):
        r = flash_attn_varlen_func(
            q, k, v, **fa4_kw, max_seqlen_q=S_MAX, max_seqlen_k=S_MAX, causal=True
        )
        return r[0] if isinstance(r, tuple) else r  # out, or (out, lse)

else:
    unavailable[FA4] = FA4_DETAIL
real_flops = sum(4 * H * D * n * n / 2 for n in lengths.tolist())

# %%
# Training on packed sequences needs the forward to save its softmax statistics (fp32,
# in the padded B×H×S_max×1 layout) and an ``sdpa_backward`` graph with the same ragged
# offsets on Q, K, V, O, dO and the three gradients, as in the lesson. The same pair
# on the padded tensors is the control. Each contender's dQ, dK and dV are checked
# sequence by sequence against fp32 autograd on that sequence alone. The PyTorch,
# FlexAttention and FlashAttention-4 gradients come from one retained autograd graph
# (``retain_graph=True``), so only the backward is timed.
d_o = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16)


def training_tensors(qq, kk, vv, dd):
    """Forward outputs, statistics and gradients for q, k, v, d_o of one layout."""
    x = dict(q=qq, k=kk, v=vv, d_o=dd, o=torch.empty_like(qq))
    x["stats"] = torch.empty(B, H, S_MAX, 1, device="cuda", dtype=torch.float32)
    return x | {n: torch.empty_like(qq) for n in ("dq", "dk", "dv")}


torch.cuda.set_device(
    q.device
)  # autograd's backward thread needs this device's context
expected_grads = {n: [] for n in ("dq", "dk", "dv")}
for b, (a, e) in spans:
    leaf = [packed_rows(t, b, a, e).float().requires_grad_() for t in (q, k, v)]
    with check.full_precision():
        out = F.scaled_dot_product_attention(*leaf, is_causal=True)
        out.backward(packed_rows(d_o, b, a, e).float())
    for n, t in zip(expected_grads, leaf):
        expected_grads[n].append(t.grad)

backward_contenders = {}
for name, x, offs, rows in (
    (
        "cuDNN packed (THD) backward",
        training_tensors(q, k, v, d_o),
        offsets,
        packed_rows,
    ),
    (
        "cuDNN padding mask backward (control)",
        training_tensors(qp, kp, vp, padded(d_o)),
        None,
        padded_rows,
    ),
):
    sdpa_graph(x, seq_lens, offs)()  # the forward, once: o and stats
    backward_contenders[name] = sdpa_graph(x, seq_lens, offs, backward=True)
    check.poison(x["dq"], x["dk"], x["dv"])
    backward_contenders[name]()
    grads = {n: x[n] for n in ("dq", "dk", "dv")}
    per_sequence_check(name, grads, rows, expected_grads)


def autograd_contender(name, forward, inputs, grad_out, rows):
    """Admit ``name``'s backward (from one retained autograd graph), checked first."""
    leaves = [t.detach().requires_grad_() for t in inputs]
    try:
        y = forward(*leaves)
        grads = torch.autograd.grad(y, leaves, grad_out, retain_graph=True)
    except Exception as exc:  # cannot run here: shown, not hidden
        first = (str(exc).splitlines() or [""])[0][:140]
        unavailable[name] = f"{type(exc).__name__}: {first}"
        print(f"{name}: unavailable here ({type(exc).__name__})")
        return
    per_sequence_check(name, dict(zip(expected_grads, grads)), rows, expected_grads)
    backward_contenders[name] = lambda: torch.autograd.grad(
        y, leaves, grad_out, retain_graph=True
    )


autograd_contender(
    f"{FLASH} backward",
    flash,
    (qp, kp, vp),
    padded(d_o),
    padded_rows,
)
autograd_contender(
    "FlexAttention, document mask, backward",
    lambda *t: flex(*t, block_mask=block_mask),
    packed_bhsd,
    d_o.transpose(0, 1)[None],
    lambda y, b, a, e: y[:, :, a:e],
)
if varlen is not None:
    backward = "PyTorch varlen_attn backward"
    autograd_contender(backward, varlen, (q, k, v), d_o, packed_rows)
if FA4_OK:  # its varlen backward, timed the same way
    autograd_contender(
        f"{FA4}, varlen backward", fa4_varlen, (q, k, v), d_o, packed_rows
    )
backward_result = compare.compare(
    backward_contenders,
    candidate="cuDNN packed (THD) backward",
    l2="cold",
    rounds=9,
    flops=2.5 * real_flops,
)

# %%
import pandas as pd

from cudnn_guide.report import html_table

rows = [
    {
        "implementation": n,
        "µs": backward_result.estimate(n)["value"],
        "useful TFLOP/s": backward_result.estimate(n, "TFLOP/s")["value"],
    }
    for n in backward_result.measurements
]
formats = {"µs": "{:.1f}", "useful TFLOP/s": "{:.0f}"}
html_table(pd.DataFrame(rows).sort_values("µs"), formats)

# %%
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison

plot_comparison(
    backward_result,
    "µs",
    logx=True,
    xlabel="µs per backward call",
    title=f"causal attention backward over {B} sequences, {T} real tokens",
)
plt.show()

# %%
# The verdicts (above 1: the packed cuDNN backward is faster):
from cudnn_guide.measure import sweep

passes = {"backward": backward_result}
verdicts = sweep.SweepResult.from_comparisons("pass", passes).verdicts()
html_table(pd.DataFrame(verdicts), {"speed-up": "{:.2f}×"})

# %%
# Conclusions
# -----------
# Computed from the comparison above. Each verdict is on GPU time; where a back-to-back
# loop (host time included) was raced too, its verdict follows with its own interval
# and tie band.
from cudnn_guide.report.prose import Prose


def verdict_text(cmp, baseline=None):
    """``cmp.describe(baseline)``, with the loop's tie band beside a loop verdict."""
    baseline = baseline or cmp.best_baseline
    text = cmp.describe(baseline)
    if cmp.wall is not None and baseline in cmp.wall.versus:  # "…: tie (v×, lo–hi)"
        band = f"loop tie band ±{100 * cmp.wall.tie_band:.1f}%"
        text = f"{text[:-1]}; {band})" if text.endswith(")") else f"{text} ({band})"
    return text


best_bwd = backward_result.best_baseline
bwd_us = backward_result.estimate("cuDNN packed (THD) backward")["value"]
control = "cuDNN padding mask backward (control)"
sentences = [
    f"Backward (dQ, dK, dV) on the packed layout: {bwd_us:.0f} µs; against the "
    f"fastest contender ({best_bwd}) it is {verdict_text(backward_result, best_bwd)}; "
    f"against the padded layout with a padding mask it is "
    f"{verdict_text(backward_result, control)}.",
]
fa4_backward_name = f"{FA4}, varlen backward"
if fa4_backward_name in backward_result.versus:
    fa4_verdict = verdict_text(backward_result, fa4_backward_name)
    sentences.append(f"* Against {fa4_backward_name}: cuDNN is {fa4_verdict}.")
sentences += [
    f"* Not available here: {name}: {why}" for name, why in unavailable.items()
]

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline

comparison("packed THD backward: speed-up over the fastest contender", backward_result)
headline(
    "packed THD backward",
    unit="µs",
    **backward_result.estimate("cuDNN packed (THD) backward"),
)
# sphinx_gallery_end_ignore
Prose(*sentences)
