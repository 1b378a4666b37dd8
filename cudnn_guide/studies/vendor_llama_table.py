"""NVIDIA's H200 table of cuDNN against FlashAttention-4 at Llama 3.1 shapes, re-measured: the vendor-table page.

NVIDIA publishes its own comparison (cudnn-frontend's ``benchmark/attention_training``): the attention of
Llama 3.1 70B (batch 2, 64 query heads sharing 8 key/value heads, head dim 128) at 2k to 32k tokens, causal
and not, forward with statistics and backward, in bf16. The page's lesson builds that layer's forward with
the frontend on ``B×S×H×D`` tensors seen as ``B×H×S×D``; this module holds what the page measures with:

* :class:`LlamaLayer`: the layer's tensors at a length, and its FLOPs;
* :func:`attention_graphs`: cuDNN's forward with statistics and its backward, for any mask;
* :func:`dense_reference`, :func:`block_reference` and :func:`check_block_reference`: the fp32
  references, dense (PyTorch autograd) and in blocks of query rows (exact, within 2 GiB of scores);
* :func:`check_outputs` and :func:`fa4_outputs`: O, dQ, dK and dV of a contender checked, and
  FlashAttention-4's own forward and gradients;
* :func:`lse_keywords`, :func:`timing`, :func:`reference_at` (the check's reference, untimed),
  :func:`worst_error` and :func:`checked_contenders`: what is timed at each shape, every contender
  checked first;
* :data:`VENDOR_CSV` and :func:`vendor_times`: NVIDIA's numbers;
* :func:`checked_formats`, :func:`beside_vendor`, :func:`plot_throughput`, :func:`vendor_pattern` and
  :func:`conclusions`: the page's tables, figure and sentences, from the comparisons.

A *shape* is a length, a mask and a pass (the vendor's 20 rows); a length and a mask are checked once for
both passes. The graphs, the timing and the FlashAttention-4 kernels need a GPU; the references, the
tables, the figure and the sentences do not.
"""

from __future__ import annotations

import inspect
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

__all__ = [
    "CUDNN",
    "OUTPUTS",
    "REF_BLOCK",
    "VENDOR_CSV",
    "VENDOR_CUDNN",
    "LlamaLayer",
    "attention_graphs",
    "beside_vendor",
    "bhsd",
    "block_reference",
    "check_block_reference",
    "check_outputs",
    "checked_contenders",
    "checked_formats",
    "conclusions",
    "dense_reference",
    "fa4_outputs",
    "lse_keywords",
    "passed",
    "plot_throughput",
    "reference_at",
    "shape",
    "timing",
    "vendor_pattern",
    "vendor_times",
    "worst_error",
]

CUDNN = "cuDNN graph (heuristics A)"
"""The cuDNN contender's label (measurements, checks, the candidate of every comparison)."""

OUTPUTS = {"O": "o", "dQ": "q", "dK": "k", "dV": "v"}
"""Each checked output → its entry in a reference (:func:`block_reference`), in the order checked."""

REF_BLOCK = 2**28
"""fp32 values in one block of scores of :func:`block_reference`: 1 GiB."""

OURS = "ours, median of round medians"
"""How :func:`beside_vendor` names our times: the median over rounds of a backend's per-round medians."""

VENDOR_CUDNN = "9.27.0"
"""The vendor's cuDNN, from the CSV's metadata."""

VENDOR_CSV = """
32768,1,fwd,56.813,55.166
32768,1,bwd,166.714,144.246
32768,0,fwd,113.197,103.706
32768,0,bwd,323.816,284.486
16384,1,fwd,13.888,12.527
16384,1,bwd,40.803,36.265
16384,0,fwd,27.502,25.632
16384,0,bwd,80.092,70.876
8192,1,fwd,3.357,3.260
8192,1,bwd,10.448,8.743
8192,0,fwd,6.271,5.817
8192,0,bwd,19.572,16.764
4096,1,fwd,0.893,0.888
4096,1,bwd,2.779,2.466
4096,0,fwd,1.600,1.499
4096,0,bwd,4.768,4.321
2048,1,fwd,0.257,0.264
2048,1,bwd,0.856,0.771
2048,0,fwd,0.416,0.410
2048,0,bwd,1.323,1.222
"""
"""NVIDIA's numbers, quoted from the CSV committed in NVIDIA/cudnn-frontend,
``benchmark/attention_training/results/llama3.1/h200/llama3.1_20260928_130009.csv`` (commit 816ea45): an
H200 with cuDNN 9.27.0 and frontend 1.31.0, timed with CUPTI over 10 iterations; bf16, non-deterministic
backward. Columns: S, causal, phase, cuDNN ms, FlashAttention-4 ms."""

_MASKS = {True: "causal", False: "no-mask"}
_PASSES = {"fwd": "forward", "bwd": "backward"}


def bhsd(t: Any) -> Any:
    """The same memory seen as ``B×H×S×D`` (or back): ``t.transpose(1, 2)``, no copy.

    Parameters
    ----------
    t
        A ``B×S×H×D`` tensor (or a ``B×H×S×D`` one).

    Returns
    -------
    Any
        The view with dimensions 1 and 2 swapped.

    Example
    -------
    >>> bhsd(torch.empty(2, 4096, 64, 128)).shape
    torch.Size([2, 64, 4096, 128])
    """
    return t.transpose(1, 2)


def shape(key: tuple[int, bool, str]) -> str:
    """A shape in words: ``"S=2048, causal, fwd"``.

    Parameters
    ----------
    key
        ``(S, causal, phase)``.

    Returns
    -------
    str
        The length, the mask (``causal`` or ``no mask``) and the pass.

    Example
    -------
    >>> shape((2048, False, "bwd"))
    'S=2048, no mask, bwd'
    """
    return f"S={key[0]}, {'causal' if key[1] else 'no mask'}, {key[2]}"


@dataclass(frozen=True)
class LlamaLayer:
    """The attention layer's sizes: its tensors at a length and its FLOPs.

    Example
    -------
    >>> layer = LlamaLayer(batch=2, heads=64, kv_heads=8, head_dim=128)
    >>> t = layer.tensors(4096)  # q, k, v, d_o, o, dq, dk, dv, stats
    """

    batch: int
    heads: int
    """Query heads H (and of O, dO, dQ)."""
    kv_heads: int
    """Key/value heads (and of dK, dV)."""
    head_dim: int

    def tensors(self, s: int, device: str = "cuda") -> dict[str, Any]:
        """Q, K, V and dO (``B×S×H×D``, bf16, random), the outputs (empty), and the fp32 statistics.

        Parameters
        ----------
        s
            Tokens per sequence.
        device
            Where the tensors live.

        Returns
        -------
        dict[str, Any]
            ``"q"``, ``"k"``, ``"v"``, ``"d_o"`` (drawn in that order), ``"o"``, ``"dq"``, ``"dk"``,
            ``"dv"`` (each shaped like its input) and ``"stats"`` (``B×H×S×1``, fp32).
        """
        import torch

        b, d = self.batch, self.head_dim
        heads = (("q", self.heads), ("k", self.kv_heads), ("v", self.kv_heads), ("d_o", self.heads))
        t = {n: torch.randn(b, s, h, d, device=device, dtype=torch.bfloat16) for n, h in heads}
        pairs = (("o", "q"), ("dq", "q"), ("dk", "k"), ("dv", "v"))
        t |= {n: torch.empty_like(t[like]) for n, like in pairs}
        t["stats"] = torch.empty(b, self.heads, s, 1, device=device, dtype=torch.float32)
        return t

    def flops(self, s: int, causal: bool, backward: bool) -> float:
        """The layer's FLOPs at length ``s``: ``4·B·H·S²·D``, 2.5× for the backward, halved when causal.

        Parameters
        ----------
        s
            Tokens per sequence.
        causal
            Whether the mask hides half the scores.
        backward
            The backward pass (2.5× the forward's matmuls).

        Returns
        -------
        float
            FLOPs of one call.
        """
        dense = 4 * self.batch * self.heads * s * s * self.head_dim * (2.5 if backward else 1.0)
        return dense / 2 if causal else dense


def attention_graphs(
    handle: Any,
    mask: Mapping[str, Any],
    q: Any,
    k: Any,
    v: Any,
    o: Any,
    d_o: Any,
    dq: Any,
    dk: Any,
    dv: Any,
    stats: Any,
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """cuDNN's forward with statistics and its backward over these tensors; their two launchers.

    Both graphs (bf16 in and out, fp32 inside, scale ``1/√D``) see the ``B×S×H×D`` tensors as
    ``B×H×S×D`` (:func:`bhsd`), take ``mask`` as ``sdpa``'s keywords, and are built with heuristics A
    (fallback after). One workspace, the larger of the two, serves both.

    Parameters
    ----------
    handle
        The cuDNN handle.
    mask
        ``sdpa`` keywords of the mask (the lesson's ``CAUSAL``), or ``{}``.
    q
        Queries, ``B×S×H×D`` (:meth:`LlamaLayer.tensors`).
    k
        Keys, ``B×S×Hkv×D``.
    v
        Values, ``B×S×Hkv×D``.
    o
        The forward's output, shaped like ``q``.
    d_o
        The output's gradient dO, shaped like ``q``.
    dq
        The backward's dQ, shaped like ``q``.
    dk
        dK, shaped like ``k``.
    dv
        dV, shaped like ``v``.
    stats
        The forward's softmax statistics, ``B×H×S×1`` fp32, which the backward reads.

    Returns
    -------
    tuple[Callable[[], Any], Callable[[], Any]]
        The forward (writes O and the statistics) and the backward (writes dQ, dK and dV).

    Example
    -------
    >>> fwd, bwd = attention_graphs(handle, CAUSAL, **layer.tensors(4096))
    """
    import cudnn
    import torch

    bf16, fp32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
    scale = q.shape[-1] ** -0.5

    def output(node: Any, t: Any) -> None:
        node.set_output(True).set_data_type(bf16 if t.dtype == torch.bfloat16 else fp32)
        node.set_dim(list(t.shape)).set_stride(list(t.stride()))

    graph = dict(io_data_type=bf16, intermediate_data_type=fp32, compute_data_type=fp32)
    fwd = cudnn.pygraph(handle=handle, **graph)
    Q, K, V = (fwd.tensor_like(bhsd(t)) for t in (q, k, v))
    O, STATS = fwd.sdpa(q=Q, k=K, v=V, attn_scale=scale, generate_stats=True, **mask)
    output(O, bhsd(o))
    output(STATS, stats)
    fwd.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])

    bwd = cudnn.pygraph(handle=handle, **graph)
    bQ, bK, bV, bO, bdO = (bwd.tensor_like(bhsd(t)) for t in (q, k, v, o, d_o))
    bST = bwd.tensor_like(stats)
    dQ, dK, dV = bwd.sdpa_backward(q=bQ, k=bK, v=bV, o=bO, dO=bdO, stats=bST, attn_scale=scale, **mask)
    for node, t in ((dQ, dq), (dK, dk), (dV, dv)):
        output(node, bhsd(t))
    bwd.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])

    fwd_pack = {Q: bhsd(q), K: bhsd(k), V: bhsd(v), O: bhsd(o), STATS: stats}
    bwd_pack = {bQ: bhsd(q), bK: bhsd(k), bV: bhsd(v), bO: bhsd(o), bdO: bhsd(d_o)}
    bwd_pack |= {bST: stats, dQ: bhsd(dq), dK: bhsd(dk), dV: bhsd(dv)}
    size = max(fwd.get_workspace_size(), bwd.get_workspace_size())
    workspace = torch.empty(size, device="cuda", dtype=torch.uint8)
    return (
        lambda: fwd.execute(fwd_pack, workspace, handle=handle),
        lambda: bwd.execute(bwd_pack, workspace, handle=handle),
    )


def passed(c: Any) -> str:
    """One short line for a check that passed (:func:`cudnn_guide.check.check` raises on a failure).

    Parameters
    ----------
    c
        The :class:`~cudnn_guide.check.CheckResult`.

    Returns
    -------
    str
        ``"<name>: rel. error 2.1e-03 (tolerance 1.6e-02)"``.

    Example
    -------
    >>> print(passed(check.check(bhsd(t["o"]), ref_o, name="cuDNN graph (heuristics A) O")))
    cuDNN graph (heuristics A) O: rel. error 2.1e-03 (tolerance 1.6e-02)
    """
    return f"{c.name}: rel. error {c.rel_error:.1e} (tolerance {c.tolerance:.1e})"


def dense_reference(t: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """PyTorch's causal grouped-query attention on fp32 copies, with autograd: the dense reference.

    :func:`cudnn_guide.check.reference_grads` (TF32 off) of ``scaled_dot_product_attention`` with
    ``is_causal=True`` and ``enable_gqa=True`` (each K/V head serves its group of query heads), on
    Q, K, V and dO seen as ``B×H×S×D``. It holds all ``B·H·S²`` scores, several times over.

    Parameters
    ----------
    t
        :meth:`LlamaLayer.tensors` (``"q"``, ``"k"``, ``"v"``, ``"d_o"``).

    Returns
    -------
    tuple[Any, dict[str, Any]]
        The output and ``{"q", "k", "v"}`` → gradient, ``B×H×S×D``, fp32.

    Example
    -------
    >>> ref_o, ref_grads = dense_reference(layer.tensors(4096))
    """
    import torch.nn.functional as F

    from cudnn_guide import check

    def gqa_causal(q: Any, k: Any, v: Any) -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    return check.reference_grads(gqa_causal, {n: bhsd(t[n]) for n in "qkv"}, bhsd(t["d_o"]))


def check_outputs(label: str, outputs: Sequence[Any], ref_o: Any, ref_grads: Mapping[str, Any]) -> list[Any]:
    """Check a contender's O, dQ, dK and dV (``B×S×H×D``) against the dense reference, printing each.

    Each is seen as ``B×H×S×D`` and checked by relative norm (:func:`cudnn_guide.check.check`, which
    raises on a failure and records a pass), named ``"<label> O"``, ``"<label> dQ"``, ...

    Parameters
    ----------
    label
        The contender's label.
    outputs
        O, dQ, dK and dV, in that order.
    ref_o
        The reference output (:func:`dense_reference`).
    ref_grads
        ``{"q", "k", "v"}`` → the reference gradient.

    Returns
    -------
    list[Any]
        The four :class:`~cudnn_guide.check.CheckResult`, in the order printed (:func:`passed`).

    Example
    -------
    >>> check_outputs(CUDNN, [t["o"], t["dq"], t["dk"], t["dv"]], ref_o, ref_grads)
    """
    from cudnn_guide import check

    o, *grads = outputs
    done = [check.check(bhsd(o), ref_o, name=f"{label} O")]
    print(passed(done[-1]))
    for n, got in zip("qkv", grads):
        done.append(check.check(bhsd(got), ref_grads[n], name=f"{label} d{n.upper()}"))
        print(passed(done[-1]))
    return done


def block_reference(q: Any, k: Any, v: Any, d_o: Any, causal: bool, *, block: int = REF_BLOCK) -> dict[str, Any]:
    """fp32 output and gradients of grouped-query attention, computed in blocks of query rows.

    For each sequence and each K/V head, the query rows ``i0:i1`` of the query heads that share it
    are one block: it holds complete rows of scores (every key a row can see), so its softmax,
    output and dQ rows are exact, and its share of dK and dV is added to the K/V head's sums. A
    block holds at most ``block`` fp32 scores; at most two such blocks are alive at a time. TF32 is
    off (:func:`cudnn_guide.check.full_precision`); the scale is ``1/√D``.

    Parameters
    ----------
    q
        Queries, ``B×S×H×D``.
    k
        Keys, ``B×S×Hkv×D`` (``Hkv`` divides ``H``).
    v
        Values, shaped like ``k``.
    d_o
        The output's gradient, shaped like ``q``.
    causal
        Top-left causal mask (key ≤ query).
    block
        The most fp32 scores in one block (:data:`REF_BLOCK`: 1 GiB).

    Returns
    -------
    dict[str, Any]
        ``"o"``, ``"q"``, ``"k"``, ``"v"`` → the output and the gradients, fp32, ``B×S×H×D`` like the
        inputs.

    Example
    -------
    >>> ref = block_reference(t["q"], t["k"], t["v"], t["d_o"], causal=True)
    """
    import torch

    from cudnn_guide import check, collector

    batch, s, h, d = q.shape
    group = h // k.shape[2]  # query heads per K/V head
    rows = max(1, min(s, block // (group * s)))
    like = zip("oqkv", (q, q, k, v))
    ref = {n: torch.empty(x.shape, device=x.device) for n, x in like}  # fp32
    with check.full_precision():  # fp32 matmuls, TF32 off
        for b in range(batch):
            for g in range(k.shape[2]):
                collector.between_steps()  # a page waiting to measure goes first (one K/V head's blocks at a time)
                heads = slice(g * group, (g + 1) * group)
                kg, vg = k[b, :, g].float(), v[b, :, g].float()  # S×D
                dk, dv = torch.zeros_like(kg), torch.zeros_like(vg)
                for i0 in range(0, s, rows):
                    i1 = min(i0 + rows, s)
                    n = i1 if causal else s  # causal: keys after row i1-1 are masked
                    qs = q[b, i0:i1, heads].transpose(0, 1).float() * d**-0.5
                    do = d_o[b, i0:i1, heads].transpose(0, 1).float()  # group×rows×D
                    p = qs @ kg[:n].T  # scaled scores, group×rows×n
                    if causal:
                        i = torch.arange(i0, i1, device=q.device)[:, None]
                        later = i < torch.arange(n, device=q.device)  # key j > row i
                        p.masked_fill_(later, -torch.inf)
                    p = p.softmax(-1)
                    o = p @ vg[:n]
                    # dS = P ⊙ (dO·Vᵀ − rowsum(dO ⊙ O)), in place
                    ds = (do @ vg[:n].T).sub_((do * o).sum(-1, keepdim=True)).mul_(p)
                    ref["o"][b, i0:i1, heads] = o.transpose(0, 1)
                    ref["q"][b, i0:i1, heads] = (ds @ kg[:n] * d**-0.5).transpose(0, 1)
                    dk[:n] += ds.reshape(-1, n).T @ qs.reshape(-1, d)
                    dv[:n] += p.reshape(-1, n).T @ do.reshape(-1, d)
                ref["k"][b, :, g], ref["v"][b, :, g] = dk, dv
    return ref


def check_block_reference(
    t: Mapping[str, Any], ref_o: Any, ref_grads: Mapping[str, Any], *, causal: bool, block: int = REF_BLOCK
) -> list[Any]:
    """:func:`block_reference` of these tensors checked against the dense reference, printing each check.

    The checks, named ``"block reference O"``, ``"... dQ"``, ``"... dK"``, ``"... dV"``, hold the block
    reference's fp32 outputs to fp32 accuracy (the tolerance for fp32 outputs); the block reference
    is freed on return.

    Parameters
    ----------
    t
        :meth:`LlamaLayer.tensors` (``"q"``, ``"k"``, ``"v"``, ``"d_o"``).
    ref_o
        The dense reference output (:func:`dense_reference`), ``B×H×S×D``.
    ref_grads
        ``{"q", "k", "v"}`` → the dense reference gradient, ``B×H×S×D``.
    causal
        The mask of both references.
    block
        The most fp32 scores in one block.

    Returns
    -------
    list[Any]
        The four :class:`~cudnn_guide.check.CheckResult`, in the order printed.

    Example
    -------
    >>> check_block_reference(t, ref_o, ref_grads, causal=True)
    """
    from cudnn_guide import check

    blocks = block_reference(t["q"], t["k"], t["v"], t["d_o"], causal, block=block)
    dense = {"o": ref_o, **ref_grads}  # B×H×S×D: bhsd() swaps them back to B×S×H×D
    done = []
    for n, name in zip("oqkv", ("O", "dQ", "dK", "dV")):
        done.append(check.check(blocks[n], bhsd(dense[n]), name=f"block reference {name}"))
        print(passed(done[-1]))
    return done


def fa4_outputs(
    flash_attn_func: Callable[..., Any], t: Mapping[str, Any], causal: bool, *, retain_graph: bool = False
) -> tuple[list[Any], Any, tuple[Any, ...]]:
    """FlashAttention-4's forward on copies of Q, K and V that require gradients, and its gradients of dO.

    Parameters
    ----------
    flash_attn_func
        ``flash_attn.cute.flash_attn_func`` (``B×S×H×D`` in and out; it may return a tuple).
    t
        :meth:`LlamaLayer.tensors` (``"q"``, ``"k"``, ``"v"``, ``"d_o"``).
    causal
        Its ``causal=`` keyword.
    retain_graph
        Keep the autograd graph, so that the backward can be timed again from the same output.

    Returns
    -------
    tuple[list[Any], Any, tuple[Any, ...]]
        The leaves (Q, K, V copies), the output O and the gradients (dQ, dK, dV), ``B×S×H×D``.

    Example
    -------
    >>> leaves, out4, grads4 = fa4_outputs(flash_attn_func, t, causal=True)
    """
    import torch

    leaves = [t[n].detach().clone().requires_grad_() for n in "qkv"]
    out4 = flash_attn_func(*leaves, causal=causal)
    out4 = out4[0] if isinstance(out4, tuple) else out4
    grads4 = torch.autograd.grad(out4, leaves, t["d_o"], retain_graph=retain_graph)
    return leaves, out4, grads4


def lse_keywords(flash_attn_func: Callable[..., Any] | None) -> dict[str, bool]:
    """FlashAttention-4's forward keywords for the timing: ``return_lse=True`` where its signature has it.

    Timed on tensors without ``requires_grad``, its forward would skip the log-sum-exp that cuDNN's
    forward writes as its statistics; asked for it, both write the same.

    Parameters
    ----------
    flash_attn_func
        ``flash_attn_func``, or ``None`` when FlashAttention-4 is not installed.

    Returns
    -------
    dict[str, bool]
        ``{"return_lse": True}``, or ``{}``.

    Example
    -------
    >>> lse_keywords(lambda q, k, v, causal=False, return_lse=False: None)
    {'return_lse': True}
    """
    if flash_attn_func is not None and "return_lse" in inspect.signature(flash_attn_func).parameters:
        return {"return_lse": True}
    return {}


def timing(s: int) -> dict[str, int]:
    """The rounds, timed calls per round and host-timed calls of :func:`~cudnn_guide.measure.compare.compare` at ``s``.

    7 rounds up to 4096 tokens, 5 beyond; from 16k tokens on (a call takes about 13-330 ms) the host
    cost is sampled from 2 calls and each round times 2 calls per contender, whose mean is the round's
    median (5 until issue 34, then 3), and from 32k tokens on (about 50-330 ms a call) one call: the
    round's value is that call. The interval is over rounds either way, and a call this long varies
    within a round by well under the ±1% tie band (3, then 2 calls, until issue 34's last speed work,
    which measured what the fewer calls changed: the measurement studies' "Fewer calls for the longest").

    Parameters
    ----------
    s
        Tokens per sequence.

    Returns
    -------
    dict[str, int]
        ``rounds`` and, where they differ from the defaults, ``min_reps`` and ``host_reps``.

    Example
    -------
    >>> timing(16384)
    {'rounds': 5, 'min_reps': 2, 'host_reps': 2}
    >>> timing(32768)
    {'rounds': 5, 'min_reps': 1, 'host_reps': 2}
    """
    if s <= 4096:
        return {"rounds": 7}
    if s < 16384:
        return {"rounds": 5}
    return {"rounds": 5, "min_reps": 2 if s < 32768 else 1, "host_reps": 2}


def reference_at(t: Mapping[str, Any], causal: bool) -> tuple[dict[str, Any], dict[str, float]]:
    """:func:`block_reference` for these tensors, with its peak memory.

    Its time is not taken: the reference is a check, not a timing, so it shares the GPU with the
    pages recorded beside this one (it held the GPU alone for 12 s of dcab682's recording when it
    was timed), and a time taken beside them would say more about them than about the reference.

    Parameters
    ----------
    t
        :meth:`LlamaLayer.tensors`, on the GPU.
    causal
        The mask.

    Returns
    -------
    tuple[dict[str, Any], dict[str, float]]
        The reference, and ``"fp32 reference peak (GiB)"`` (on top of what was allocated before).

    Example
    -------
    >>> ref, cost = reference_at(layer.tensors(32768), causal=False)
    """
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    held = torch.cuda.memory_allocated()
    ref = block_reference(t["q"], t["k"], t["v"], t["d_o"], causal)
    torch.cuda.synchronize()
    return ref, {"fp32 reference peak (GiB)": (torch.cuda.max_memory_allocated() - held) / 2**30}


def worst_error(ref: Mapping[str, Any], outputs: Sequence[Any], who: str, where: str) -> float:
    """Check O, dQ, dK and dV against the block reference; the largest relative error.

    Parameters
    ----------
    ref
        :func:`block_reference` (``B×S×H×D``).
    outputs
        O, dQ, dK and dV (``B×S×H×D``), in the order of :data:`OUTPUTS`.
    who
        The contender's label.
    where
        The shape, e.g. ``"@ S=2048 causal"``; each check is named ``"<who> <output> <where>"``.

    Returns
    -------
    float
        The largest of the four relative errors (each check raises on a failure).

    Example
    -------
    >>> worst_error(ref, [t["o"], t["dq"], t["dk"], t["dv"]], CUDNN, "@ S=2048 causal")
    0.0029
    """
    from cudnn_guide import check

    done = [check.check(out, ref[OUTPUTS[n]], name=f"{who} {n} {where}") for n, out in zip(OUTPUTS, outputs)]
    return max(c.rel_error for c in done)


def checked_contenders(
    handle: Any,
    t: Mapping[str, Any],
    causal: bool,
    causal_mask: Mapping[str, Any],
    *,
    flash_attn_func: Callable[..., Any] | None = None,
    fa4_label: str = "FlashAttention-4",
    fa4_lse: Mapping[str, Any] | None = None,
) -> tuple[dict[str, dict[str, Callable[[], Any]]], dict[str, Any]]:
    """The contenders of one length and mask, forward and backward, each checked before it is returned.

    In this order: cuDNN's two graphs are built (:func:`attention_graphs`); the block reference is
    computed (:func:`reference_at`); cuDNN's outputs are filled with NaN, both graphs run, and O, dQ,
    dK and dV are checked (:func:`worst_error`, checks named ``"<label> <output> @ S=<s> <mask>"``);
    then FlashAttention-4's forward and backward run once (:func:`fa4_outputs`, graph retained) and
    are checked the same way. A failure raises. The reference is freed on return, before any timing.

    Parameters
    ----------
    handle
        The cuDNN handle.
    t
        :meth:`LlamaLayer.tensors` at this length.
    causal
        The mask: causal, or none.
    causal_mask
        cuDNN's ``sdpa`` keywords of the causal mask (used when ``causal``).
    flash_attn_func
        FlashAttention-4's ``flash_attn_func``; ``None`` leaves it out.
    fa4_label
        FlashAttention-4's label (:func:`cudnn_guide.measure.fa4.label`).
    fa4_lse
        Its forward's timed keywords (:func:`lse_keywords`).

    Returns
    -------
    tuple[dict[str, dict[str, Callable[[], Any]]], dict[str, Any]]
        ``{"fwd": {label: launcher}, "bwd": {...}}``, cuDNN first; and the checks' row: ``"S"``,
        ``"mask"``, ``"checked"``, ``"tolerance"``, ``"<label>: worst rel. error"`` per contender, and
        the reference's cost (:func:`reference_at`).

    Example
    -------
    >>> contenders, row = checked_contenders(handle, t, True, CAUSAL, flash_attn_func=fn, fa4_label=FA4)
    """
    import torch

    from cudnn_guide import check

    s = t["q"].shape[1]
    fwd, bwd = attention_graphs(handle, causal_mask if causal else {}, **t)
    mask = "causal" if causal else "no mask"
    ref, cost = reference_at(t, causal)  # first: the check, before any timing
    check.poison(t["o"], t["stats"], t["dq"], t["dk"], t["dv"])
    fwd()
    bwd()
    tol = check.tolerance(t["o"].dtype)
    row = {"S": s, "mask": mask, "checked": ", ".join(OUTPUTS), "tolerance": tol}
    outs = [t[n] for n in ("o", "dq", "dk", "dv")]
    row[f"{CUDNN}: worst rel. error"] = worst_error(ref, outs, CUDNN, f"@ S={s} {mask}")
    contenders: dict[str, dict[str, Callable[[], Any]]] = {"fwd": {CUDNN: fwd}, "bwd": {CUDNN: bwd}}
    if flash_attn_func is not None:
        leaves, out4, grads4 = fa4_outputs(flash_attn_func, t, causal, retain_graph=True)
        row[f"{fa4_label}: worst rel. error"] = worst_error(ref, [out4, *grads4], fa4_label, f"@ S={s} {mask}")
        contenders["fwd"][fa4_label] = partial(
            flash_attn_func, t["q"], t["k"], t["v"], causal=causal, **(fa4_lse or {})
        )
        contenders["bwd"][fa4_label] = partial(torch.autograd.grad, out4, leaves, t["d_o"], retain_graph=True)
    return contenders, row | cost


def checked_formats(row: Mapping[str, Any]) -> dict[str, Any]:
    """How the checks' table prints its columns: errors and the tolerance as ``1.6e-02``, the reference's memory.

    Parameters
    ----------
    row
        One row of :func:`checked_contenders`.

    Returns
    -------
    dict[str, Any]
        Column → format string, for :func:`~cudnn_guide.report.html_table`.

    Example
    -------
    >>> formats = checked_formats({"S": 2048, "tolerance": 0.016, "x: worst rel. error": 0.003})
    >>> formats["tolerance"], formats["fp32 reference peak (GiB)"]
    ('{:.1e}', '{:.2f}')
    """
    formats: dict[str, Any] = {c: "{:.1e}" for c in row if "error" in c or c == "tolerance"}
    formats["fp32 reference peak (GiB)"] = "{:.2f}"
    return formats


def vendor_times(csv: str = VENDOR_CSV) -> dict[tuple[int, bool, str], tuple[float, float]]:
    """NVIDIA's times by shape, from :data:`VENDOR_CSV`.

    Parameters
    ----------
    csv
        Lines ``S,causal,phase,cuDNN ms,FlashAttention-4 ms`` (causal ``1`` or ``0``).

    Returns
    -------
    dict[tuple[int, bool, str], tuple[float, float]]
        ``(S, causal, phase)`` → (cuDNN ms, FlashAttention-4 ms).

    Example
    -------
    >>> vendor_times()[(2048, True, "bwd")]
    (0.856, 0.771)
    """
    vendor = {}
    for line in csv.split():
        s, causal, phase, cudnn_ms, fa4_ms = line.split(",")
        vendor[(int(s), causal == "1", phase)] = (float(cudnn_ms), float(fa4_ms))
    return vendor


def _against_vendor(ours_ms: float, vendor_ms: float) -> str:
    """How much slower or faster our time is than the vendor's, in words."""
    gap = ours_ms / vendor_ms - 1
    return f"{100 * abs(gap):.1f}% {'slower' if gap > 0 else 'faster'}"


def _same_direction(ratio: Mapping[str, Any], v_cudnn: float, v_fa4: float) -> bool:
    """Whether our verdict points the way NVIDIA's speed-up does; a tie agrees with both."""
    vendor_way = "faster" if v_fa4 / v_cudnn > 1 else "slower"
    return ratio["verdict"] in (vendor_way, "tie")


def beside_vendor(
    results: Mapping[tuple[int, bool, str], Any], vendor: Mapping[Any, Any], *, fa4_label: str, fa4_detail: str
) -> Any:
    """Ours beside NVIDIA's, one row per shape: both backends' times and cuDNN's speed-up, with our verdict.

    Our times are medians of per-round medians with their intervals
    (:meth:`~cudnn_guide.measure.compare.Comparison.estimate`); the speed-up is FA4's time over
    cuDNN's, ours with its in-run interval. Where our verdict and NVIDIA's point opposite ways (a
    tie agrees with both), the last column says how far each of our times lies from NVIDIA's.

    Parameters
    ----------
    results
        ``(S, causal, phase)`` → the :class:`~cudnn_guide.measure.compare.Comparison` of cuDNN
        against FlashAttention-4.
    vendor
        :func:`vendor_times`.
    fa4_label
        FlashAttention-4's label in the comparisons.
    fa4_detail
        Why it was not measured, shown as the table when ``results`` is empty.

    Returns
    -------
    Any
        A :class:`pandas.DataFrame`, sorted by shape.

    Example
    -------
    >>> html_table(beside_vendor(results, vendor, fa4_label=FA4, fa4_detail=FA4_DETAIL))
    """
    import pandas as pd

    rows = []  # empty without FlashAttention-4: then the vendor's table is all there is
    for (s, causal, phase), c in sorted(results.items()):
        ours_cudnn, ours_fa4 = c.estimate(CUDNN, "ms"), c.estimate(fa4_label, "ms")
        v_cudnn, v_fa4 = vendor[(s, causal, phase)]
        ratio = c.versus[fa4_label]
        same_direction = _same_direction(ratio, v_cudnn, v_fa4)
        rows.append(
            {
                "S": s,
                "mask": "causal" if causal else "no mask",
                "pass": phase,
                f"cuDNN ms ({OURS})": f"{ours_cudnn['value']:.3f} [{ours_cudnn['low']:.3f}, {ours_cudnn['high']:.3f}]",
                "cuDNN ms (NVIDIA)": f"{v_cudnn:.3f}",
                f"FA4 ms ({OURS})": f"{ours_fa4['value']:.3f} [{ours_fa4['low']:.3f}, {ours_fa4['high']:.3f}]",
                "FA4 ms (NVIDIA)": f"{v_fa4:.3f}",
                "cuDNN speed-up (ours)": f"{ratio['value']:.2f}× [{ratio['low']:.2f}, {ratio['high']:.2f}]",
                "verdict (ours)": ratio["verdict"],
                "cuDNN speed-up (NVIDIA)": f"{v_fa4 / v_cudnn:.2f}×",
                "same direction": same_direction,
                "where it differs: ours against NVIDIA's": None
                if same_direction
                else f"our cuDNN {_against_vendor(ours_cudnn['value'], v_cudnn)}, "
                f"our FA4 {_against_vendor(ours_fa4['value'], v_fa4)}",
            }
        )
    return pd.DataFrame(rows or [{"FlashAttention-4": fa4_detail}])


def _cudnn_ran() -> str | None:
    """The cuDNN this process runs, as ``9.19.0``: the frontend's libcudnn (what the page's environment
    records), else PyTorch's; ``None`` where neither can be read (no libcudnn, as on a CPU-only host).

    Example
    -------
    >>> _cudnn_ran()  # "9.19.0" on the page's H200
    """
    from cudnn_guide.environment import version_string

    try:
        from cudnn_guide.libcudnn import require_cudnn

        return version_string(require_cudnn())
    except Exception:  # no frontend, or it cannot reach libcudnn
        pass
    try:
        import torch

        v = torch.backends.cudnn.version()
    except Exception:
        return None
    return version_string(v) if v else None


def plot_throughput(
    axes: Any,
    results: Mapping[tuple[int, bool, str], Any],
    vendor: Mapping[Any, Any],
    seqs: Sequence[int],
    flops: Callable[[int, bool, bool], float],
    *,
    fa4_label: str,
    vendor_cudnn: str = VENDOR_CUDNN,
    cudnn_version: str | None = None,
) -> None:
    """Throughput per shape on a 2×2 grid of axes: ours with error bars, NVIDIA's dotted, each named.

    Panels: causal forward, causal backward, no-mask forward, no-mask backward; length on a log₂
    axis. cuDNN is blue (``C0``), FlashAttention-4 orange (``C1``): ours solid with the interval over
    rounds, NVIDIA's (its time turned into TFLOP/s by ``flops``) dotted with crosses. The legend, in
    the first panel, names each line by its contender and version, as NVIDIA's are named: our cuDNN
    by the version this run used (``cuDNN 9.19.0 graph (heuristics A), ours``) and FlashAttention-4
    by its label (which carries its version); NVIDIA's by the vendor's cuDNN version and
    FlashAttention-4 (whose build the vendor's CSV does not name), in the order cuDNN ours, cuDNN
    NVIDIA's, FlashAttention-4 ours, NVIDIA's. Without results the panels stay empty, without a legend.

    Parameters
    ----------
    axes
        A 2×2 array of matplotlib axes (``plt.subplots(2, 2, sharex=True)``).
    results
        ``(S, causal, phase)`` → :class:`~cudnn_guide.measure.compare.Comparison`.
    vendor
        :func:`vendor_times`.
    seqs
        The lengths, in order.
    flops
        ``flops(s, causal, backward)`` (:meth:`LlamaLayer.flops`).
    fa4_label
        FlashAttention-4's label in the comparisons.
    vendor_cudnn
        The vendor's cuDNN version.
    cudnn_version
        The cuDNN this page ran; by default read at run time (the frontend's libcudnn, else PyTorch's),
        and said to be unread where neither can be read.

    Example
    -------
    >>> fig, axes = plt.subplots(2, 2, figsize=(9, 7.5), layout="constrained", sharex=True)
    >>> plot_throughput(axes, results, vendor, SEQS, layer.flops, fa4_label=FA4)
    """
    ran = cudnn_version or (_cudnn_ran() if results else None)
    ours_cudnn = CUDNN.replace("cuDNN", f"cuDNN {ran}", 1) if ran else f"{CUDNN} (version not read)"
    lines = (
        (CUDNN, ours_cudnn, f"cuDNN {vendor_cudnn}", "C0", 0),
        (fa4_label, fa4_label, "FlashAttention-4 (build not named)", "C1", 1),
    )
    legend = []  # the first panel's lines, each contender's two together
    for ax, (causal, phase) in zip(axes.flat, [(True, "fwd"), (True, "bwd"), (False, "fwd"), (False, "bwd")]):
        for who, named, theirs, colour, col in lines if results else ():
            est = [results[(s, causal, phase)].estimate(who, "TFLOP/s") for s in seqs]
            ours = ax.errorbar(
                seqs,
                [e["value"] for e in est],
                yerr=[[e["value"] - e["low"] for e in est], [e["high"] - e["value"] for e in est]],
                color=colour,
                marker="o",
                capsize=3,
                label=f"{named}, ours",
            )
            (nvidia,) = ax.plot(
                seqs,
                [flops(s, causal, phase == "bwd") / vendor[(s, causal, phase)][col] / 1e9 for s in seqs],
                color=colour,
                marker="x",
                linestyle=":",
                label=f"{theirs}, NVIDIA's table",
            )
            if ax is axes.flat[0]:
                legend += [ours, nvidia]
        ax.set_xscale("log", base=2)
        ax.set_title(f"{'causal' if causal else 'no mask'}, {phase}", fontsize=10)
        ax.set_ylabel("TFLOP/s")
    if legend:
        axes[0, 0].legend(handles=legend, fontsize=7)
    axes[1, 0].set_xlabel("tokens per sequence")
    axes[1, 1].set_xlabel("tokens per sequence")


def _shapes(keys: Sequence[tuple[int, bool, str]]) -> str:
    """Shapes in words, ``"; "`` between them and ``" and "`` before the last (a shape has commas)."""
    said = [shape(key) for key in keys]
    return said[0] if len(said) == 1 else "; ".join(said[:-1]) + " and " + said[-1]


def _printed(ms: float) -> float:
    """A time as the tables print it, to 3 decimals (ms)."""
    return float(f"{ms:.3f}")


def _largest_gap(gaps: Mapping[tuple[int, bool, str], float]) -> str:
    """The largest gap's size, its direction (ours slower or faster) and its shape."""
    key = max(gaps, key=lambda key: abs(gaps[key]))
    way = "slower" if gaps[key] > 0 else "faster"
    return f"by at most {100 * abs(gaps[key]):.0f}% (ours {way}, at {shape(key)})"


def _span(time: float | Mapping[str, float]) -> tuple[float, float, float]:
    """A time, its low and its high, as the tables print them (3 decimals, ms); a bare time is its own interval."""
    if isinstance(time, Mapping):
        return _printed(time["value"]), _printed(time["low"]), _printed(time["high"])
    return _printed(time), _printed(time), _printed(time)


def vendor_pattern(
    name: str,
    ours: Mapping[tuple[int, bool, str], float | Mapping[str, float]],
    theirs: Mapping[tuple[int, bool, str], float],
) -> str:
    """Where our ``name`` was faster than NVIDIA's, what those shapes share, and where neither was faster.

    Times are compared as the tables print them, to 3 decimals in ms. Where our time comes with its
    interval over rounds (an estimate, :meth:`~cudnn_guide.measure.compare.Comparison.estimate`), a shape
    whose NVIDIA time lies within our interval (its ends included) is neither faster nor slower, and is
    named as within our interval; a bare time is its own interval, and one that prints the same as
    NVIDIA's is named as the same to 3 decimals. Ours is faster than NVIDIA's only where NVIDIA's time is
    above our interval. A pattern is looked for in the faster shapes' mask and pass together, then the
    pass alone, then the mask alone.

    Parameters
    ----------
    name
        What is compared, e.g. ``"cuDNN 9.19.0"`` or ``"FlashAttention-4"``.
    ours
        ``(S, causal, phase)`` → our time (ms): an estimate (``value``, ``low``, ``high``) or a bare time.
    theirs
        ``(S, causal, phase)`` → NVIDIA's time (ms), for the same keys.

    Returns
    -------
    str
        One to three sentences.

    Example
    -------
    >>> ours = {(4096, True, "bwd"): {"value": 2.461, "low": 2.458, "high": 2.480}, (4096, True, "fwd"): 0.900}
    >>> vendor_pattern("FlashAttention-4", ours, {(4096, True, "bwd"): 2.466, (4096, True, "fwd"): 0.888})
    "Our FlashAttention-4 was slower than NVIDIA's at 1 of 2 shapes. NVIDIA's time lay within our interval ..."
    """
    keys = sorted(ours)
    tie = [key for key in keys if _span(ours[key])[1] <= _printed(theirs[key]) <= _span(ours[key])[2]]
    faster = [key for key in keys if key not in tie and _span(ours[key])[0] < _printed(theirs[key])]
    within = [key for key in tie if isinstance(ours[key], Mapping)]
    same = [key for key in tie if key not in within]
    tied = (
        f" NVIDIA's time lay within our interval over rounds (both as printed, to 3 decimals in ms) at "
        f"{_shapes(within)}: ours was neither faster nor slower there."
        if within
        else ""
    ) + (
        f" It printed the same as NVIDIA's, to 3 decimals in ms, at {_shapes(same)}: neither was faster there."
        if same
        else ""
    )
    if not faster and not tie:
        return f"Our {name} was slower than NVIDIA's at all {len(keys)} shapes."
    if not faster:
        return f"Our {name} was slower than NVIDIA's at {len(keys) - len(tie)} of {len(keys)} shapes." + tied
    if len(faster) == len(keys):
        return f"Our {name} was faster than NVIDIA's at all {len(keys)} shapes."
    by_pair = (lambda key: key[1:], lambda v: f"{_MASKS[v[0]]} {_PASSES[v[1]]}")
    by_pass = (lambda key: key[2], lambda v: f"{_PASSES[v]} (either mask)")
    by_mask = (lambda key: key[1], lambda v: f"{_MASKS[v]} (either pass)")
    for part, words in (by_pair, by_pass, by_mask):
        if len({part(key) for key in faster}) > 1:
            continue  # the faster shapes differ in this part: no pattern in it
        group = [key for key in keys if part(key) == part(faster[0])]
        not_faster = [key for key in group if key not in faster]
        at = (  # the pair names mask and pass: S alone tells its shapes apart
            (lambda ks: "S=" + ", ".join(str(key[0]) for key in ks))
            if part is by_pair[0]
            else (lambda ks: "; ".join(shape(key) for key in ks))
        )
        return (
            f"Our {name} was faster than NVIDIA's only on {words(part(faster[0]))} shapes, at {at(faster)}"
            + (f" (not at {at(not_faster)})" if not_faster else "")
            + f": {len(faster)} of {len(keys)} shapes, and at none of the others."
            + tied
        )
    return (
        f"Our {name} was faster than NVIDIA's at {len(faster)} of {len(keys)} shapes "
        f"({'; '.join(shape(key) for key in faster)}), which share no mask or pass." + tied
    )


def _point_sentence(results: Mapping[tuple[int, bool, str], Any], fa4_label: str) -> str:
    """Where cuDNN's point estimate is below 1, its range, and why each tie with a one-sided interval is a tie.

    A tie whose interval lies wholly on one side of 1 is a tie for one of two reasons, said per tie from
    its own band: its tie band, measured in its own rounds, was wider than the minimum (how far identical
    code's ratio to itself reached from 1), or its band is the minimum and its interval reaches within it.
    """
    from cudnn_guide.measure.verdicts import MIN_TIE_BAND

    speedups = {key: c.versus[fa4_label] for key, c in sorted(results.items())}
    below = [key for key, r in speedups.items() if r["value"] < 1]
    sentence = (
        f"The point estimate of cuDNN's speed-up is below 1 (cuDNN slower) at "
        f"{len(below)} of {len(speedups)} shapes; over all of them it runs from "
        f"{min(r['value'] for r in speedups.values()):.2f}× to "
        f"{max(r['value'] for r in speedups.values()):.2f}×."
    )
    ties = [key for key, r in speedups.items() if r["verdict"] == "tie"]
    minimum = f"±{100 * MIN_TIE_BAND:.1f}%"
    for side, off in (("below", lambda r: r["high"] < 1), ("above", lambda r: r["low"] > 1)):
        lopsided = [key for key in ties if off(speedups[key])]
        if not lopsided:
            continue
        bands = [results[key].tie_band for key in speedups if key not in ties]
        sentence += (
            f" {len(lopsided)} of the {len(ties)} ties have an interval wholly {side} 1: "
            + "; ".join(
                f"{shape(key)} ({speedups[key]['value']:.2f}× "
                f"[{speedups[key]['low']:.2f}, {speedups[key]['high']:.2f}], tie band "
                f"±{100 * results[key].tie_band:.1f}%)"
                for key in lopsided
            )
            + "."
        )
        wide = [key for key in lopsided if results[key].tie_band > MIN_TIE_BAND]
        least = [key for key in lopsided if results[key].tie_band <= MIN_TIE_BAND]
        if wide:
            one = len(wide) == 1
            sentence += (
                f" {_shapes(wide)} {'is a tie' if one else 'are ties'} only because the tie band measured in "
                f"{'its' if one else 'their'} own rounds (cuDNN against its own repeat) was that wide"
                + (
                    f", against a median of ±{100 * statistics.median(bands):.1f}% at the "
                    f"{len(bands)} shapes with a verdict"
                    if bands
                    else ""
                )
                + ": there the interval of identical code's ratio to itself reached that far from 1 (the "
                "clock sentence below gives the clocks and the power cap)."
            )
        if least:
            one = len(least) == 1
            sentence += (
                f" {_shapes(least)} {'is a tie' if one else 'are ties'} at the minimum tie band of {minimum} "
                f"({'its' if one else 'their'} own rounds measured no wider one): "
                f"{'its interval reaches' if one else 'their intervals reach'} within "
                f"{100 * MIN_TIE_BAND:.1f}% of 1, too close to call."
            )
    return sentence


def _check_sentence(checked: Sequence[Mapping[str, Any]], timed: int) -> str:
    """What was checked before the timing, per length and mask (each covers a shape's two passes)."""
    judged = [c.removesuffix(": worst rel. error") for c in checked[0] if "error" in c]
    lengths = ", ".join(str(s) for s in sorted({r["S"] for r in checked}))
    largest_error = max(r[f"{who}: worst rel. error"] for r in checked for who in judged)
    what = (
        f"the forward output and dQ, dK and dV of {' and '.join(judged)} were checked against the block fp32 reference"
    )
    head = (
        f"Before the {timed} shapes were timed, {what} at each of their {len(checked)} lengths and masks "
        f"(S={lengths}, causal and not; one check serves a length and mask's forward and backward)"
        if timed
        else f"Nothing was timed; {what} at each of {len(checked)} lengths and masks (S={lengths}, causal and not)"
    )
    return (
        f"{head}: the largest relative error was "
        f"{largest_error:.1e} (tolerance {checked[0]['tolerance']:.1e}), and the reference "
        f"needed at most {max(r['fp32 reference peak (GiB)'] for r in checked):.1f} GiB for one length and mask "
        "(its time is not measured: it shares the GPU with the pages recorded beside this one)."
    )


def _clock_sentence(results: Mapping[tuple[int, bool, str], Any]) -> str:
    """The clocks each contender's first timed round ended at, beside NVIDIA's unrecorded ones."""
    read = [m.clocks for c in results.values() for m in c.measurements.values() if m.clocks.get("read_with")]
    if not read:
        return (
            "The H200 that built this page may run at a different power cap and clock "
            "than NVIDIA's; neither NVIDIA's CSV nor this run (its clocks could not be "
            "read) records them."
        )
    ends = sorted({x["sm_mhz_end"] for x in read})
    span = f"{ends[0]}–{ends[-1]}" if len(ends) > 1 else f"{ends[0]}"
    capped = [x["power_capped_fraction"] for x in read if "power_capped_fraction" in x]
    return (
        f"The H200 that built this page may run at a different power cap and clock "
        f"than NVIDIA's, whose CSV records neither: here the SM clock at the end of "
        f"each contender's first timed round was {span} MHz (maximum "
        f"{max(x['max_sm_mhz'] for x in read)} MHz)"
        + (f", and the power cap held it during up to {100 * max(capped):.0f}% of such a round." if capped else ".")
    )


def _timing_sentence(results: Mapping[tuple[int, bool, str], Any]) -> str:
    """What each table's time is: ours from the measurements' mode, NVIDIA's summed kernel time (CUPTI).

    Ours, per call with CUDA events (mode ``cold-L2 events − launch cost``), spans the call from its
    first kernel's start to its last one's end, so it counts the gaps between a call's kernels too;
    less the launch cost where the harness subtracted it (at all shapes, some, or none).
    """
    modes = [m.mode for c in results.values() for m in c.measurements.values()]
    theirs = "NVIDIA's is the sum of its kernels' times from the profiler (CUPTI)."
    if not all("events" in mode for mode in modes):
        return f"The two tables time differently: ours is timed as {', '.join(sorted(set(modes)))}; {theirs}"
    less = sum("− launch cost" in mode for mode in modes)
    cost = (
        " less the measured launch cost"
        if less == len(modes)
        else " (the launch cost not subtracted)"
        if not less
        else f" less the measured launch cost in {less} of {len(modes)} measurements"
    )
    return (
        f"The two tables time differently: ours is the CUDA-event time of each call{cost}, so it also "
        f"counts the gaps between a call's kernels; {theirs}"
    )


def conclusions(
    results: Mapping[tuple[int, bool, str], Any],
    vendor: Mapping[tuple[int, bool, str], tuple[float, float]],
    checked: Sequence[Mapping[str, Any]],
    *,
    fa4_label: str,
    fa4_detail: str,
    fa4_lse: bool,
    gpu: str,
    cudnn_version: str,
    vendor_cudnn: str = VENDOR_CUDNN,
) -> list[str]:
    """The page's conclusions, in-run, from the comparisons, NVIDIA's times and the checks.

    Without results (FlashAttention-4 not measured): that, then the clocks and the checks. With
    them: the verdicts counted; where the point estimate is below 1, and why each tie with a
    one-sided interval is a tie (from its own band); what FlashAttention-4's timed forward writes;
    where our verdict points as NVIDIA's; how far our times lie from NVIDIA's, and at which shapes
    ours were faster (times compared as printed, 3 decimals; where NVIDIA's lies within our interval
    over rounds, neither was, :func:`vendor_pattern`); what each table's time is; then the clocks and
    the checks.

    Parameters
    ----------
    results
        ``(S, causal, phase)`` → :class:`~cudnn_guide.measure.compare.Comparison`.
    vendor
        :func:`vendor_times`.
    checked
        The rows of :func:`checked_contenders`, one per length and mask.
    fa4_label
        FlashAttention-4's label in the comparisons.
    fa4_detail
        Why FlashAttention-4 was not measured (:func:`cudnn_guide.measure.fa4.status`).
    fa4_lse
        Whether its forward was timed with ``return_lse=True`` (:func:`lse_keywords`).
    gpu
        The GPU's name.
    cudnn_version
        The cuDNN this page ran.
    vendor_cudnn
        The vendor's cuDNN.

    Returns
    -------
    list[str]
        Paragraphs for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(results, vendor, checked, fa4_label=FA4, fa4_detail=FA4_DETAIL,
    ...                    fa4_lse=bool(FA4_LSE), gpu=env.gpu, cudnn_version=env.cudnn_backend))
    """
    tail = [_clock_sentence(results), _check_sentence(checked, len(results))]
    if not results:
        return [
            f"{fa4_label} was not measured here ({fa4_detail}); NVIDIA's table above is all this page shows of it.",
            *tail,
        ]
    keys = sorted(results)
    verdicts = [results[key].versus[fa4_label]["verdict"] for key in keys]
    same = [_same_direction(results[key].versus[fa4_label], *vendor[key]) for key in keys]
    disagree = [key for key, ok in zip(keys, same) if not ok]
    est_fa4 = {key: results[key].estimate(fa4_label, "ms") for key in keys}
    est_cudnn = {key: results[key].estimate(CUDNN, "ms") for key in keys}
    ours_fa4 = {key: e["value"] for key, e in est_fa4.items()}
    ours_cudnn = {key: e["value"] for key, e in est_cudnn.items()}
    gaps = {key: ours_fa4[key] / vendor[key][1] - 1 for key in keys}
    cudnn_gaps = {key: ours_cudnn[key] / vendor[key][0] - 1 for key in keys}
    lse_sentence = (
        f"The forward of {fa4_label} was timed with return_lse=True, so it writes its log-sum-exp "
        f"as cuDNN's forward writes its softmax statistics."
        if fa4_lse
        else f"The forward of {fa4_label} was timed on tensors without requires_grad and without "
        "return_lse (its flash_attn_func here has no such keyword), so it may skip the "
        "log-sum-exp that cuDNN's forward writes as its statistics."
    )
    return [
        f"Across the vendor's {len(keys)} bf16 shapes, the cuDNN graph (heuristics A) "
        f"was faster than {fa4_label} at {verdicts.count('faster')}, tied at "
        f"{verdicts.count('tie')} and slower at {verdicts.count('slower')} on this "
        f"{gpu} (cuDNN {cudnn_version}).",
        _point_sentence(results, fa4_label),
        lse_sentence,
        f"Our verdict points the same way as NVIDIA's table (cuDNN {vendor_cudnn}) at "
        f"{sum(same)} of {len(keys)} shapes; a tie counts as agreeing with either direction"
        + (
            f". It points the other way at {_shapes(disagree)}; the table's last "
            "column says how far our cuDNN and FlashAttention-4 times lie from "
            "NVIDIA's there."
            if disagree
            else "."
        ),
        f"Our cuDNN {cudnn_version} times differ from NVIDIA's cuDNN "
        f"{vendor_cudnn} times {_largest_gap(cudnn_gaps)}, and our FlashAttention-4 "
        f"times from theirs {_largest_gap(gaps)}. "
        + vendor_pattern(f"cuDNN {cudnn_version}", est_cudnn, {key: vendor[key][0] for key in keys})
        + " "
        + vendor_pattern("FlashAttention-4", est_fa4, {key: vendor[key][1] for key in keys})
        + " "
        + _timing_sentence(results)
        + " Ours flush L2 before every call; the "
        "vendor's CSV names neither its L2 policy nor its FlashAttention-4 build, so "
        "the timing, the cuDNN version, the FA4 build, L2 and the two H200s' clocks are all "
        "candidates for the gaps, and this page cannot separate them.",
        *tail,
    ]
