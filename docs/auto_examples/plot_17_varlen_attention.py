"""
Variable-length batches: padding masks and packed (ragged) sequences
====================================================================

A batch of real requests has sequences of different lengths. Padding them all to the longest
wastes work on tokens that do not exist; cuDNN offers two ways not to:

* **padding mask**: keep the padded B×H×S×D layout, pass each sequence's true length in
  ``seq_len_q`` / ``seq_len_kv`` and set ``use_padding_mask=True``; keys past a sequence's
  length are masked (how much of the padding's work the kernel skips is measured below);
* **packed (THD)**: store only the real tokens, T×H×D, and give each tensor a *ragged
  offset* (``set_ragged_offset``): where each sequence starts, in elements. This is the layout
  of FlashAttention's ``varlen`` API and of PyTorch's nested tensors.

What you will learn:

* both declarations, each checked sequence by sequence against an fp32 reference;
* the backward graphs on packed sequences (``sdpa_backward`` with ragged offsets) and on padded
  ones (a padding mask), checked and timed;
* the edge cases users report: a zero-length sequence and a one-token sequence;
* the clear errors for lengths and offsets that cuDNN would misread;
* the work saved against padding, and the cuDNN graph against PyTorch's varlen paths and
  FlashAttention-4's ``flash_attn_varlen_func``.
"""

# %%
# Environment
# -----------
from cudnn_guide import environment

environment.require_sm((8, 0), "cuDNN fused attention")
env = environment.collect()
print(env.stamp())

# %%
# A batch of realistic lengths
# ----------------------------
# 16 sequences whose lengths are drawn (seed 0) from a log-normal distribution with median 1024
# tokens, clipped to [32, 4096]: a stand-in with the long right tail of chat and instruction
# data, not lengths measured from a dataset.
import torch

torch.manual_seed(0)
lengths = torch.distributions.LogNormal(torch.log(torch.tensor(1024.0)), 0.8).sample((16,)).clamp(32, 4096).int()
B, H, D, S_MAX = len(lengths), 16, 128, int(lengths.max())
cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.int32), lengths.cumsum(0).int()]).cuda()
T = int(cu_seqlens[-1])
print(f"lengths: {lengths.tolist()}")
print(f"{T} real tokens; padded to the longest, {B * S_MAX} token slots "
      f"({100 * (1 - T / (B * S_MAX)):.0f}% padding)")

# %%
# The packed (THD) graph
# ----------------------
# Q, K, V and O hold T×H×D real tokens. Declared to cuDNN as B×H×S_max×D with token-major
# strides, plus one ragged-offset tensor: sequence ``b`` starts at element ``cu_seqlens[b]·H·D``.
# The padding mask (the true lengths) must be set too: it tells cuDNN where each sequence ends.
import cudnn

from cudnn_guide.graphs import attention_inputs
from cudnn_guide import check, graphs

handle = graphs.handle_for_current_device()
gen = torch.Generator(device="cuda").manual_seed(1)
q, k, v = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
o = torch.empty_like(q)
offsets = attention_inputs.ragged_offsets(cu_seqlens, H * D)  # int64, (B+1)×1×1×1
seq_lens = lengths.cuda().reshape(B, 1, 1, 1)
attention_inputs.check_seq_lens(seq_lens, B, S_MAX)

g = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                  intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
RAGGED = g.tensor(name="ragged_offsets", dim=[B + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT64)
dims, strides = [B, H, S_MAX, D], [S_MAX * H * D, D, H * D, 1]  # token-major, like T×H×D
Q, K, V = (g.tensor(name=n, dim=dims, stride=strides, data_type=cudnn.data_type.BFLOAT16, ragged_offset=RAGGED)
           for n in "qkv")
LEN_Q, LEN_KV = g.tensor_like(seq_lens, name="seq_len_q"), g.tensor_like(seq_lens, name="seq_len_kv")
O, _ = g.sdpa(name="sdpa_varlen", q=Q, k=K, v=V, attn_scale=D ** -0.5, generate_stats=False,
              use_padding_mask=True, seq_len_q=LEN_Q, seq_len_kv=LEN_KV,
              diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
O.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(RAGGED)
g.validate()
g.build_operation_graph()
g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
g.check_support()
g.build_plans()
ragged_pack = {Q: q, K: k, V: v, O: o, LEN_Q: seq_lens, LEN_KV: seq_lens, RAGGED: offsets}
workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
check.poison(o)
g.execute(ragged_pack, workspace, handle=handle)


def per_sequence_check(out_of, label):
    """Check every sequence's output against the fp32 reference on that sequence alone (causal)."""
    worst = None
    for b in range(B):
        a, e = int(cu_seqlens[b]), int(cu_seqlens[b + 1])
        seq = [t[a:e].transpose(0, 1)[None] for t in (q, k, v)]
        r = check.check(out_of(b, a, e), attention_inputs.reference(*seq, visible=attention_inputs.band(e - a, e - a,
                        device="cuda")), name=f"{label}, sequence {b} ({e - a} tokens)")
        worst = r if worst is None or r.rel_error > worst.rel_error else worst
    return worst


checks = [per_sequence_check(lambda b, a, e: o[a:e].transpose(0, 1)[None], "packed THD")]
print(checks[-1], "(the worst of", B, "sequences)")

# %%
# The padded graph with a padding mask
# ------------------------------------
# Same lengths, padded B×H×S_max×D tensors: no ragged offsets, only ``seq_len_q/kv``.
def padded(t):
    out = torch.zeros(B, S_MAX, H, D, device="cuda", dtype=t.dtype)
    for b in range(B):
        out[b, : lengths[b]] = t[cu_seqlens[b]: cu_seqlens[b + 1]]
    return out.transpose(1, 2).contiguous()


qp, kp, vp = padded(q), padded(k), padded(v)
op = torch.empty_like(qp)
gp = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                   intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
QP, KP, VP = gp.tensor_like(qp, name="q"), gp.tensor_like(kp, name="k"), gp.tensor_like(vp, name="v")
LQ, LK = gp.tensor_like(seq_lens, name="seq_len_q"), gp.tensor_like(seq_lens, name="seq_len_kv")
OP, _ = gp.sdpa(name="sdpa_padded", q=QP, k=KP, v=VP, attn_scale=D ** -0.5, generate_stats=False,
                use_padding_mask=True, seq_len_q=LQ, seq_len_kv=LK,
                diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
OP.set_output(True).set_dim(list(op.shape)).set_stride(list(op.stride()))
gp.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])  # the same five steps, in one call
padded_pack = {QP: qp, KP: kp, VP: vp, OP: op, LQ: seq_lens, LK: seq_lens}
check.poison(op)
gp.execute(padded_pack, torch.empty(gp.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)
checks.append(per_sequence_check(lambda b, a, e: op[b:b + 1, :, : e - a], "padding mask"))
print(checks[-1], "(the worst of", B, "sequences)")
pad_rows = torch.cat([op[b, :, lengths[b]:].flatten() for b in range(B)])
print(f"rows past each length: {pad_rows.isnan().sum().item()} NaN, max |value| {pad_rows.nan_to_num().abs().max().item():g}")

# %%
# Edge cases: a zero-length sequence and a one-token sequence
# -----------------------------------------------------------
# Both are legal padding-mask inputs. A one-token sequence is ordinary attention over one key.
# A zero-length sequence has no query rows at all, so cuDNN has nothing to write: below, its
# output slots are poisoned (NaN) before the call, and we look at what is left in them.
edge_lens = torch.tensor([S_MAX, 1, 0, 37], dtype=torch.int32, device="cuda").reshape(4, 1, 1, 1)
attention_inputs.check_seq_lens(edge_lens, 4, S_MAX)
eq, ek, ev = (t[:4].contiguous() for t in (qp, kp, vp))
eo = torch.empty_like(eq)
ge = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                   intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
EQ, EK, EV = ge.tensor_like(eq, name="q"), ge.tensor_like(ek, name="k"), ge.tensor_like(ev, name="v")
EL, ELK = ge.tensor_like(edge_lens, name="seq_len_q"), ge.tensor_like(edge_lens, name="seq_len_kv")
EO, _ = ge.sdpa(name="sdpa_edges", q=EQ, k=EK, v=EV, attn_scale=D ** -0.5, generate_stats=False,
                use_padding_mask=True, seq_len_q=EL, seq_len_kv=ELK,
                diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
EO.set_output(True).set_dim(list(eo.shape)).set_stride(list(eo.stride()))
ge.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
check.poison(eo)
ge.execute({EQ: eq, EK: ek, EV: ev, EO: eo, EL: edge_lens, ELK: edge_lens},
           torch.empty(ge.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)
for b, n in enumerate(edge_lens.flatten().tolist()):
    if n == 0:
        left = eo[b].isnan().float().mean().item()
        what = ("cuDNN does not write them, so zero them yourself if anything reads them" if left == 1.0 else
                "cuDNN wrote them" if left == 0.0 else "cuDNN wrote some of them")
        print(f"sequence {b}, 0 tokens: {100 * left:.0f}% of its output slots still hold the poison: {what}")
        continue
    seq = [t[b:b + 1, :, :n] for t in (eq, ek, ev)]
    checks.append(check.check(eo[b:b + 1, :, :n], attention_inputs.reference(*seq, visible=attention_inputs.band(
        n, n, device="cuda")), name=f"edge case: {n}-token sequence"))
    print(checks[-1])
zero_len_poison_left = eo[2].isnan().float().mean().item()

# %%
# Bad lengths and offsets are refused before cuDNN sees them
# ----------------------------------------------------------
# cuDNN reads lengths and offsets as raw integers: an int64 length tensor or a decreasing
# prefix sum would be misread, not rejected. The helpers used above check them first:
from cudnn_guide import InputError

for bad in (lambda: attention_inputs.check_seq_lens(seq_lens.long(), B, S_MAX),
            lambda: attention_inputs.check_seq_lens(seq_lens.flatten(), B, S_MAX),
            lambda: attention_inputs.ragged_offsets(cu_seqlens.flip(0), H * D)):
    try:
        bad()
    except InputError as exc:
        print("InputError:", exc)

# %%
# Against PyTorch's varlen paths
# ------------------------------
# Every contender computes causal attention within each sequence, checked sequence by sequence:
#
# * **PyTorch padded SDPA** (flash, forced; PyTorch's flash backend is
#   FlashAttention-2): the padded tensors with ``is_causal=True``.
#   With right padding, causal attention never lets a real query see a padded key, so the real
#   rows are right; the kernel still computes every padded tile.
# * **PyTorch nested tensors**: ``scaled_dot_product_attention`` on jagged nested tensors.
# * **PyTorch varlen_attn** (``torch.nn.attention.varlen``), if this torch has a causal form.
# * **FlexAttention** (compiled) with a document mask over the packed tokens.
# * **FlashAttention-4** ``flash_attn_varlen_func`` on the packed T×H×D tensors with the
#   same ``cu_seqlens`` (int32), if it is installed.
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from cudnn_guide.measure import baselines, compare

contenders = {"cuDNN packed (THD)": graphs.adopt(g, handle, name="varlen").bind(ragged_pack),
              "cuDNN padding mask": graphs.adopt(gp, handle, name="padded").bind(padded_pack)}
unavailable = {}


def flash_padded():
    return baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)(qp, kp, vp)


nested = [torch.nested.nested_tensor_from_jagged(t, cu_seqlens.long()).transpose(1, 2) for t in (q, k, v)]
doc = torch.repeat_interleave(torch.arange(B, device="cuda"), lengths.cuda())
block_mask = create_block_mask(lambda b, h, qi, ki: (doc[qi] == doc[ki]) & (ki <= qi), None, None, T, T)
flex = torch.compile(flex_attention, fullgraph=True)
packed_bhsd = [t.transpose(0, 1)[None] for t in (q, k, v)]
candidates = {
    "PyTorch padded SDPA (flash)": (flash_padded, lambda y, b, a, e: y[b:b + 1, :, : e - a]),
    "PyTorch nested tensors": (lambda: F.scaled_dot_product_attention(*nested, is_causal=True),
                               lambda y, b, a, e: y.transpose(1, 2).values()[a:e].transpose(0, 1)[None]),
    "FlexAttention, document mask": (lambda: flex(*packed_bhsd, block_mask=block_mask),
                                     lambda y, b, a, e: y[:, :, a:e]),
}
try:
    from torch.nn.attention.varlen import varlen_attn

    candidates["PyTorch varlen_attn"] = (
        lambda: varlen_attn(q, k, v, cu_seqlens, cu_seqlens, S_MAX, S_MAX, window_size=(-1, 0)),
        lambda y, b, a, e: y[a:e].transpose(0, 1)[None])
except ImportError as exc:
    unavailable["PyTorch varlen_attn"] = str(exc)
from cudnn_guide.measure import fa4

FA4_OK, FA4_DETAIL = fa4.status()
FA4 = fa4.label()
if FA4_OK:
    from flash_attn.cute import flash_attn_varlen_func

    def fa4_varlen(q, k, v):
        r = flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_seqlens,
                                   cu_seqlens_k=cu_seqlens, max_seqlen_q=S_MAX,
                                   max_seqlen_k=S_MAX, causal=True,
                                   softmax_scale=D ** -0.5)
        return r[0] if isinstance(r, tuple) else r  # out, or (out, lse)

    candidates[f"{FA4}, varlen"] = (lambda: fa4_varlen(q, k, v),
                                    lambda y, b, a, e: y[a:e].transpose(0, 1)[None])
else:
    print(f"{FA4}: {FA4_DETAIL}")
    unavailable[FA4] = FA4_DETAIL
for name, (fn, rows_of) in candidates.items():  # each one checked sequence by sequence; one that cannot run is said
    if why := baselines.admit(contenders, name, fn, check=lambda y, rows_of=rows_of, name=name: per_sequence_check(
            lambda b, a, e: rows_of(y, b, a, e), name)):
        unavailable[name] = why

real_flops = sum(4 * H * D * n * n / 2 for n in lengths.tolist())
result = compare.compare(contenders, candidate="cuDNN packed (THD)", l2="cold", rounds=9, flops=real_flops)
print(result)

# %%
import pandas as pd

from cudnn_guide.report import html_table

rows = [{"implementation": n, "µs": result.estimate(n)["value"],
         "useful TFLOP/s": result.estimate(n, "TFLOP/s")["value"]} for n in result.measurements]
html_table(pd.DataFrame(rows).sort_values("µs"), {"µs": "{:.1f}", "useful TFLOP/s": "{:.0f}"})

# %%
# Plot
# ----
import matplotlib.pyplot as plt

from cudnn_guide.report import plot_comparison
plot_comparison(result, "µs", logx=True, xlabel="µs per forward call", title=f"causal attention over {B} sequences, {T} real tokens")
plt.show()

# %%
# The backward pass on packed sequences
# -------------------------------------
# Training on packed sequences needs the forward to save its softmax statistics and a
# ``sdpa_backward`` graph with the same ragged offsets on Q, K, V, O, dO and the three
# gradients. The statistics keep the padded B×H×S_max×1 layout (fp32). Each sequence's dQ, dK
# and dV are checked against fp32 autograd on that sequence alone.
gen_b = torch.Generator(device="cuda").manual_seed(2)
d_o = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16, generator=gen_b)
o_train = torch.empty_like(q)
stats = torch.empty(B, H, S_MAX, 1, device="cuda", dtype=torch.float32)
grads = {n: torch.empty_like(q) for n in ("dq", "dk", "dv")}
causal = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)

gf = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                   intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
RAGGED_F = gf.tensor(name="ragged_offsets", dim=[B + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT64)
QF, KF, VF = (gf.tensor(name=n, dim=dims, stride=strides, data_type=cudnn.data_type.BFLOAT16, ragged_offset=RAGGED_F)
              for n in "qkv")
LQF, LKF = gf.tensor_like(seq_lens, name="seq_len_q"), gf.tensor_like(seq_lens, name="seq_len_kv")
OF, STATS = gf.sdpa(name="sdpa_varlen_train", q=QF, k=KF, v=VF, attn_scale=D ** -0.5, generate_stats=True,
                    use_padding_mask=True, seq_len_q=LQF, seq_len_kv=LKF, **causal)
OF.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(RAGGED_F)
STATS.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
gf.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
train_pack = {QF: q, KF: k, VF: v, OF: o_train, STATS: stats, LQF: seq_lens, LKF: seq_lens, RAGGED_F: offsets}
gf.execute(train_pack, torch.empty(gf.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)

gb = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                   intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
RAGGED_B = gb.tensor(name="ragged_offsets", dim=[B + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT64)
QB, KB, VB, OB, DOB = (gb.tensor(name=n, dim=dims, stride=strides, data_type=cudnn.data_type.BFLOAT16,
                                 ragged_offset=RAGGED_B) for n in ("q", "k", "v", "o", "dO"))
STATS_B = gb.tensor_like(stats, name="stats")
LQB, LKB = gb.tensor_like(seq_lens, name="seq_len_q"), gb.tensor_like(seq_lens, name="seq_len_kv")
DQ, DK, DV = gb.sdpa_backward(name="sdpa_varlen_backward", q=QB, k=KB, v=VB, o=OB, dO=DOB, stats=STATS_B,
                              attn_scale=D ** -0.5, use_padding_mask=True, seq_len_q=LQB, seq_len_kv=LKB, **causal)
for grad in (DQ, DK, DV):
    grad.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(RAGGED_B)
gb.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
backward_pack = {QB: q, KB: k, VB: v, OB: o_train, DOB: d_o, STATS_B: stats, LQB: seq_lens, LKB: seq_lens,
                 RAGGED_B: offsets, DQ: grads["dq"], DK: grads["dk"], DV: grads["dv"]}
check.poison(*grads.values())
gb.execute(backward_pack, torch.empty(gb.get_workspace_size(), device="cuda", dtype=torch.uint8), handle=handle)

torch.cuda.set_device(q.device)  # autograd's backward thread needs this device's context
reference_grads = []
for b in range(B):
    a, e = int(cu_seqlens[b]), int(cu_seqlens[b + 1])
    leaf = [t[a:e].transpose(0, 1)[None].float().requires_grad_() for t in (q, k, v)]
    with check.full_precision():
        F.scaled_dot_product_attention(*leaf, is_causal=True).backward(d_o[a:e].transpose(0, 1)[None].float())
    reference_grads.append([t.grad for t in leaf])


def per_sequence_grad_check(grads_of, label):
    """The worst of every sequence's dQ, dK, dV against fp32 autograd on that sequence alone."""
    worst = None
    for b in range(B):
        a, e = int(cu_seqlens[b]), int(cu_seqlens[b + 1])
        for i, name in enumerate(("dq", "dk", "dv")):
            r = check.check(grads_of(name, b, a, e), reference_grads[b][i],
                            name=f"{label} {name}, sequence {b} ({e - a} tokens)")
            worst = r if worst is None or r.rel_error > worst.rel_error else worst
    return worst


checks.append(per_sequence_grad_check(lambda n, b, a, e: grads[n][a:e].transpose(0, 1)[None], "packed THD backward"))
print(checks[-1], f"(the worst of {3 * B} gradients)")

# %%
# The backward against PyTorch: each contender's gradients come from one retained autograd
# graph (``retain_graph=True``), so only the backward is timed. The padded flash backward,
# FlexAttention's document mask, ``varlen_attn`` and FlashAttention-4's varlen backward
# are checked the same way first.
d_op = padded(d_o)
backward_contenders = {"cuDNN packed (THD) backward": graphs.adopt(gb, handle, name="varlen_bwd").bind(backward_pack)}

# The same backward on the padded B×H×S_max×D tensors: a padding mask, no ragged offsets.
op_train, stats_p = torch.empty_like(qp), torch.empty(B, H, S_MAX, 1, device="cuda", dtype=torch.float32)
grads_p = {n: torch.empty_like(qp) for n in ("dq", "dk", "dv")}
gpf = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                    intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
TP = {n: gpf.tensor_like(t, name=n) for n, t in (("q", qp), ("k", kp), ("v", vp), ("seq_len_q", seq_lens),
                                                  ("seq_len_kv", seq_lens))}
OPT, STP = gpf.sdpa(name="sdpa_padded_train", q=TP["q"], k=TP["k"], v=TP["v"], attn_scale=D ** -0.5,
                    generate_stats=True, use_padding_mask=True, seq_len_q=TP["seq_len_q"],
                    seq_len_kv=TP["seq_len_kv"], **causal)
OPT.set_output(True).set_dim(list(op_train.shape)).set_stride(list(op_train.stride()))
STP.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(list(stats_p.shape)).set_stride(list(stats_p.stride()))
gpf.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
gpf.execute({TP["q"]: qp, TP["k"]: kp, TP["v"]: vp, TP["seq_len_q"]: seq_lens, TP["seq_len_kv"]: seq_lens,
             OPT: op_train, STP: stats_p}, torch.empty(gpf.get_workspace_size(), device="cuda", dtype=torch.uint8),
            handle=handle)
gpb = cudnn.pygraph(handle=handle, io_data_type=cudnn.data_type.BFLOAT16,
                    intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
TB = {n: gpb.tensor_like(t, name=n) for n, t in (("q", qp), ("k", kp), ("v", vp), ("o", op_train), ("dO", d_op),
                                                  ("stats", stats_p), ("seq_len_q", seq_lens),
                                                  ("seq_len_kv", seq_lens))}
DQP, DKP, DVP = gpb.sdpa_backward(name="sdpa_padded_backward", q=TB["q"], k=TB["k"], v=TB["v"], o=TB["o"],
                                  dO=TB["dO"], stats=TB["stats"], attn_scale=D ** -0.5, use_padding_mask=True,
                                  seq_len_q=TB["seq_len_q"], seq_len_kv=TB["seq_len_kv"], **causal)
for grad, t in zip((DQP, DKP, DVP), grads_p.values()):
    grad.set_output(True).set_dim(list(t.shape)).set_stride(list(t.stride()))
gpb.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
padded_bwd_pack = {TB["q"]: qp, TB["k"]: kp, TB["v"]: vp, TB["o"]: op_train, TB["dO"]: d_op, TB["stats"]: stats_p,
                   TB["seq_len_q"]: seq_lens, TB["seq_len_kv"]: seq_lens, DQP: grads_p["dq"], DKP: grads_p["dk"],
                   DVP: grads_p["dv"]}
padded_bwd = graphs.adopt(gpb, handle, name="padded_bwd")
check.poison(*grads_p.values())
padded_bwd.execute(padded_bwd_pack)
checks.append(per_sequence_grad_check(lambda n, b, a, e: grads_p[n][b:b + 1, :, : e - a], "padding mask backward"))
print(checks[-1], f"(the worst of {3 * B} gradients)")
backward_contenders["cuDNN padding mask backward (control)"] = padded_bwd.bind(padded_bwd_pack)
leaves_p = [t.detach().requires_grad_() for t in (qp, kp, vp)]
with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
    y_flash = F.scaled_dot_product_attention(*leaves_p, is_causal=True)
flash_grads = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(y_flash, leaves_p, d_op, retain_graph=True)))
checks.append(per_sequence_grad_check(lambda n, b, a, e: flash_grads[n][b:b + 1, :, : e - a],
                                      "PyTorch padded SDPA (flash) backward"))
print(checks[-1])
backward_contenders["PyTorch padded SDPA (flash) backward"] = (
    lambda: torch.autograd.grad(y_flash, leaves_p, d_op, retain_graph=True))
from cudnn_guide import CheckFailedError

leaves_f = [t.detach().requires_grad_() for t in packed_bhsd]
d_o_bhsd = d_o.transpose(0, 1)[None]
try:
    y_flex = flex(*leaves_f, block_mask=block_mask)
    flex_grads = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(y_flex, leaves_f, d_o_bhsd, retain_graph=True)))
    checks.append(per_sequence_grad_check(lambda n, b, a, e: flex_grads[n][:, :, a:e],
                                          "FlexAttention, document mask, backward"))
    print(checks[-1])
    backward_contenders["FlexAttention, document mask, backward"] = (
        lambda: torch.autograd.grad(y_flex, leaves_f, d_o_bhsd, retain_graph=True))
except CheckFailedError:  # a wrong result stops the page
    raise
except Exception as exc:  # cannot run here: shown, not hidden
    unavailable["FlexAttention backward"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:140]}"
    print("FlexAttention backward: unavailable", unavailable["FlexAttention backward"])
if "PyTorch varlen_attn" in contenders:  # the forward's strongest baseline, differentiable too
    leaves_v = [t.detach().requires_grad_() for t in (q, k, v)]
    try:
        y_var = varlen_attn(*leaves_v, cu_seqlens, cu_seqlens, S_MAX, S_MAX, window_size=(-1, 0))
        var_grads = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(y_var, leaves_v, d_o, retain_graph=True)))
        checks.append(per_sequence_grad_check(lambda n, b, a, e: var_grads[n][a:e].transpose(0, 1)[None],
                                              "PyTorch varlen_attn backward"))
        print(checks[-1])
        backward_contenders["PyTorch varlen_attn backward"] = (
            lambda: torch.autograd.grad(y_var, leaves_v, d_o, retain_graph=True))
    except CheckFailedError:  # a wrong result stops the page
        raise
    except Exception as exc:  # cannot run here: shown, not hidden
        unavailable["PyTorch varlen_attn backward"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:140]}"
        print("PyTorch varlen_attn backward: unavailable", unavailable["PyTorch varlen_attn backward"])
if f"{FA4}, varlen" in contenders:  # its varlen backward, timed the same way
    leaves_4 = [t.detach().requires_grad_() for t in (q, k, v)]

    def fa4_backward():
        return torch.autograd.grad(y_fa4, leaves_4, d_o, retain_graph=True)

    def fa4_grad_check(dqkv):
        fa4_grads = dict(zip(("dq", "dk", "dv"), dqkv))
        checks.append(per_sequence_grad_check(
            lambda n, b, a, e: fa4_grads[n][a:e].transpose(0, 1)[None],
            f"{FA4}, varlen backward"))
        return checks[-1]

    FA4_BWD = f"{FA4}, varlen backward"
    try:
        y_fa4 = fa4_varlen(*leaves_4)
        fa4_backward()  # a first backward: the checked one below repeats it, as timed
    except Exception as exc:  # cannot run here: shown, not hidden
        unavailable[FA4_BWD] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:140]}"
        print(f"{FA4_BWD}: unavailable", unavailable[FA4_BWD])
    else:
        if why := baselines.admit(backward_contenders, FA4_BWD, fa4_backward,
                                  check=fa4_grad_check):
            unavailable[FA4_BWD] = why
backward_result = compare.compare(backward_contenders, candidate="cuDNN packed (THD) backward", l2="cold", rounds=9,
                                  flops=2.5 * real_flops)
print(backward_result)

# %%
# What the measurements say
# -------------------------
# Computed from the comparisons above when the page is recorded.
from cudnn_guide.report.prose import Prose

padded_flops = B * 4 * H * D * S_MAX * S_MAX / 2
work_ratio = padded_flops / real_flops
time_ratio = (result.estimate("cuDNN padding mask")["value"]
              / result.estimate("cuDNN packed (THD)")["value"])
if time_ratio <= 1 or result.versus["cuDNN padding mask"]["verdict"] == "tie":
    skip = "so the kernel skips the padding's tiles: they cost no measurable time."
elif time_ratio < work_ratio:
    skip = "so the kernel skips part of the padding's tiles, not all of them."
else:
    skip = "so this timing shows no padding tiles skipped."
best, best_bwd = result.best_baseline, backward_result.best_baseline
sentences = [
    f"Padding to the longest sequence would do {work_ratio:.2f}× the attention work "
    f"of the real tokens ({T} real of {B * S_MAX} slots).",
    f"The padded cuDNN graph with a padding mask takes {time_ratio:.2f}× the packed "
    f"graph's time for {work_ratio:.2f}× the work, {skip}",
    f"The packed cuDNN graph: against the fastest contender ({best}) it is "
    f"{result.describe(best)}; against the padded tensors with a padding mask it is "
    f"{result.describe('cuDNN padding mask')}.",
    f"Backward (dQ, dK, dV) on the packed layout: "
    f"{backward_result.estimate('cuDNN packed (THD) backward')['value']:.0f} µs; "
    f"against the fastest contender ({best_bwd}) it is "
    f"{backward_result.describe(best_bwd)}; "
    f"against the padded layout with a padding mask it is "
    f"{backward_result.describe('cuDNN padding mask backward (control)')}.",
    f"A zero-length sequence: {100 * zero_len_poison_left:.0f}% of its output slots "
    "still held the poison after the call; a one-token sequence is checked like any "
    "other.",
]
for c, name in ((result, f"{FA4}, varlen"),
                (backward_result, f"{FA4}, varlen backward")):
    if name in c.versus:
        sentences.append(f"* Against {name}: cuDNN is {c.describe(name)}.")
sentences += [f"* Not available here: {name}: {why}"
              for name, why in unavailable.items()]

# sphinx_gallery_start_ignore
from cudnn_guide.report.records import comparison, headline
comparison("packed THD: speed-up over the fastest contender", result)
headline("packed THD forward", unit="µs", **result.estimate("cuDNN packed (THD)"))
comparison("packed THD backward: speed-up over the fastest contender", backward_result)
headline("packed THD backward", unit="µs", **backward_result.estimate("cuDNN packed (THD) backward"))
# sphinx_gallery_end_ignore
Prose(*sentences)
