"""Packed (varlen) attention raced against padding and against PyTorch's and FlashAttention-4's varlen paths.

The varlen page (plot_17) builds the causal forward over packed sequences in its lesson; the
packed-backward page (plot_32) the training pair. Both then race the packed cuDNN graphs against
the same graphs on padded tensors told the lengths by a padding mask, and against PyTorch's and
FlashAttention-4's packed paths. This module holds that machinery; the graphs themselves and the
rows of one sequence come from :mod:`cudnn_guide.graphs.varlen`:

* :func:`check_sequences`: every sequence of every output against its fp32 reference, the worst
  one printed;
* the forward page: :func:`padded_forward` (the padded control, built, run on poisoned output,
  checked, and what it leaves in the padded rows), :func:`edge_cases` (a zero-length and a
  one-token sequence), :func:`admit_forward_baselines` (PyTorch's padded SDPA, nested tensors,
  FlexAttention, ``varlen_attn`` and FlashAttention-4, each checked before it is timed) and
  :func:`forward_conclusions`;
* the backward page: :func:`backward_baselines` (PyTorch's, FlexAttention's and
  FlashAttention-4's forwards whose backward is raced), :func:`reference_grads` (fp32 autograd,
  sequence by sequence), :func:`cudnn_backward` (a cuDNN training pair in one layout, its backward
  checked), :func:`admit_autograd` (each PyTorch backward from one retained autograd graph,
  checked first) and :func:`backward_conclusions`;
* :func:`timing_rows`: either page's table of times and useful rates.

The graphs and the races need a GPU; the references, the rows and the sentences do not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

__all__ = [
    "FLASH",
    "FLEX",
    "LAYOUTS",
    "VARLEN_ATTN",
    "admit_autograd",
    "admit_forward_baselines",
    "backward_baselines",
    "backward_conclusions",
    "check_sequences",
    "cudnn_backward",
    "edge_cases",
    "forward_conclusions",
    "padded_forward",
    "reference_grads",
    "timing_rows",
]

FLASH = "PyTorch padded SDPA, flash backend (FlashAttention-2)"
"""PyTorch's flash backend, forced, on the padded tensors with ``is_causal=True``."""
FLEX = "FlexAttention, document mask"
"""Compiled FlexAttention with a document mask over the packed tokens."""
VARLEN_ATTN = "PyTorch varlen_attn"
"""``torch.nn.attention.varlen``'s ``varlen_attn`` (FlashAttention-2 inside) on the packed tokens."""
LAYOUTS = ("padded", "bhsd", "packed")
"""The layouts a contender reads: padded B×H×S_max×D, the packed tokens as one 1×H×T×D batch
(FlexAttention's), and packed T×H×D."""

Spans = Sequence[tuple[int, tuple[int, int]]]


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------


def check_sequences(
    label: str,
    outputs: Mapping[str, Any],
    rows: Callable[[Any, int, int, int], Any],
    expected: Mapping[str, Sequence[Any]],
    spans: Spans,
) -> None:
    """Check each sequence of each output against its reference and print the worst one.

    The checks are :func:`cudnn_guide.check.worst_sequence`'s, named ``"<label> <output>, seq. <b>"``;
    a sequence that fails raises there and stops the page.

    Parameters
    ----------
    label
        The contender, first in each check's name.
    outputs
        Output name → the output under test, in the layout ``rows`` reads.
    rows
        ``rows(y, b, start, end)``: sequence ``b`` of ``y`` as 1×H×n×D
        (:func:`cudnn_guide.graphs.varlen.packed_rows`, ``padded_rows`` or ``bhsd_rows``).
    expected
        Output name → the references, one per sequence, in order.
    spans
        ``(b, (start, end))`` per sequence (:func:`cudnn_guide.graphs.varlen.spans`).

    Returns
    -------
    None
        It prints ``"<name of the worst check>: rel. error <e>, the worst"``, wrapped as a long
        check line is (:data:`cudnn_guide.check.LINE_WIDTH`: the name first, the rest on the next
        line, indented); it returns None so that :func:`~cudnn_guide.measure.baselines.admit`
        prints nothing more.

    Example
    -------
    >>> check_sequences("packed THD", {"O": o}, varlen.packed_rows, {"O": refs}, spans)
    packed THD O, seq. 7: rel. error 3.1e-03, the worst
    """
    from cudnn_guide import check

    worst = check.worst_sequence(label, outputs, rows, expected, spans)
    print(check.split_line(f"{worst.name}:", f"rel. error {worst.rel_error:.1e}, the worst"))


# ---------------------------------------------------------------------------------------------
# The forward page
# ---------------------------------------------------------------------------------------------


def padded_forward(
    qp: Any,
    kp: Any,
    vp: Any,
    seq_lens: Any,
    expected: Mapping[str, Sequence[Any]],
    spans: Spans,
    *,
    handle: Any,
    label: str = "padding mask",
) -> Callable[[], None]:
    """The causal forward on padded tensors with a padding mask: built, run once, checked; its launcher.

    The graph is :func:`cudnn_guide.graphs.varlen.sdpa_graph` without ragged offsets. Its output
    (a new tensor like ``qp``) is poisoned (NaN) before the run; each sequence's real rows are
    then checked against ``expected["O"]`` (:func:`check_sequences`), and what the graph left in
    the rows past each length is printed: how many are still NaN, and the largest magnitude of
    the rest.

    Parameters
    ----------
    qp
        Padded B×H×S_max×D queries (:func:`cudnn_guide.graphs.varlen.padded`).
    kp
        Padded keys, like ``qp``.
    vp
        Padded values, like ``qp``.
    seq_lens
        The true lengths, int32 B×1×1×1 on the GPU.
    expected
        ``{"O": [reference of sequence b, 1×H×n×D, …]}``.
    spans
        ``(b, (start, end))`` per sequence.
    handle
        The cuDNN handle.
    label
        The contender in the checks' names.

    Returns
    -------
    Callable[[], None]
        The built graph's zero-argument launcher, writing the same output.

    Example
    -------
    >>> padded_run = padded_forward(qp, kp, vp, seq_lens, expected_o, spans, handle=handle)
    padding mask O, seq. 3: rel. error 3.0e-03, the worst
    padded rows past each length: 0 NaN, max |value| 0
    """
    import torch

    from cudnn_guide import check
    from cudnn_guide.graphs import varlen

    op = torch.empty_like(qp)
    run = varlen.sdpa_graph(dict(q=qp, k=kp, v=vp, o=op), seq_lens, handle=handle)
    check.poison(op)
    run()
    check_sequences(label, {"O": op}, varlen.padded_rows, expected, spans)
    pad_rows = torch.cat([op[b, :, e - a :].flatten() for b, (a, e) in spans])
    print(f"padded rows past each length: {pad_rows.isnan().sum().item()} NaN, ", end="")
    print(f"max |value| {pad_rows.nan_to_num().abs().max().item():g}")
    return run


def edge_cases(qp: Any, kp: Any, vp: Any, lengths: Sequence[int], *, handle: Any) -> float:
    """A padded batch with a zero-length and a one-token sequence: what the padding mask does with them.

    The first ``len(lengths)`` sequences of the padded tensors get the given lengths
    (checked with :func:`cudnn_guide.graphs.attention_inputs.check_seq_lens`); the padded causal
    graph (:func:`cudnn_guide.graphs.varlen.sdpa_graph`) runs once on a poisoned (NaN) output.
    Each sequence with tokens is checked against fp32 causal attention on its own rows, as
    ``"<n>-token edge"``; of the zero-length one, the share of its output slots still NaN is
    printed and returned. One line is printed per sequence.

    Parameters
    ----------
    qp
        Padded B×H×S_max×D queries; S_max is the longest length allowed.
    kp
        Padded keys, like ``qp``.
    vp
        Padded values, like ``qp``.
    lengths
        The lengths, at most B of them, exactly one of them 0.
    handle
        The cuDNN handle.

    Returns
    -------
    float
        The share (0 to 1) of the zero-length sequence's output slots still NaN after the call.

    Raises
    ------
    ValueError
        ``lengths`` has no zero-length sequence, or more than one.

    Example
    -------
    >>> zero_len_poison_left = edge_cases(qp, kp, vp, [S_MAX, 1, 0, 37], handle=handle)
    sequence 0, 2814 tokens: rel. error 3.2e-03
    sequence 1, 1 tokens: rel. error 1.9e-03
    sequence 2, 0 tokens: 100% of its output slots still NaN
    sequence 3, 37 tokens: rel. error 2.9e-03
    """
    zero = [b for b, n in enumerate(lengths) if n == 0]
    if len(zero) != 1:
        raise ValueError(f"edge_cases: exactly one length must be 0, got {list(lengths)}")
    import torch

    from cudnn_guide import check
    from cudnn_guide.graphs import attention_inputs, varlen

    count = len(lengths)
    edge_lens = torch.tensor(list(lengths), dtype=torch.int32, device=qp.device)
    edge_lens = edge_lens.reshape(count, 1, 1, 1)
    attention_inputs.check_seq_lens(edge_lens, count, qp.shape[2])
    eq, ek, ev = (t[:count].contiguous() for t in (qp, kp, vp))
    eo = torch.empty_like(eq)
    edges = varlen.sdpa_graph(dict(q=eq, k=ek, v=ev, o=eo), edge_lens, handle=handle)
    check.poison(eo)
    edges()
    for b, n in enumerate(edge_lens.flatten().tolist()):
        if n == 0:
            left = eo[b].isnan().float().mean().item()
            print(f"sequence {b}, 0 tokens: {left:.0%} of its output slots still NaN")
            continue
        seq = [t[b : b + 1, :, :n] for t in (eq, ek, ev)]
        visible = attention_inputs.band(n, n, device=eq.device)
        reference = attention_inputs.reference(*seq, visible=visible)
        edge = check.check(eo[b : b + 1, :, :n], reference, name=f"{n}-token edge")
        print(f"sequence {b}, {n} tokens: rel. error {edge.rel_error:.1e}")
    return eo[zero[0]].isnan().float().mean().item()


def admit_forward_baselines(
    contenders: MutableMapping[str, Callable[[], Any]],
    packed: Sequence[Any],
    padded: Sequence[Any],
    cu_seqlens: Any,
    lengths: Any,
    expected: Mapping[str, Sequence[Any]],
    spans: Spans,
) -> dict[str, str]:
    """The forward page's other contenders, each checked sequence by sequence before it joins ``contenders``.

    In this order (the order they are timed in):

    * :data:`FLASH`: PyTorch's flash backend, forced
      (:func:`~cudnn_guide.measure.baselines.forced_sdpa`), ``is_causal=True``, on the padded
      tensors;
    * ``"PyTorch nested tensors, <kernel>"``: ``scaled_dot_product_attention`` on jagged nested
      tensors, ``is_causal=True``, no backend forced; ``<kernel>`` is the backend SDPA's dispatch
      picks for them (:func:`cudnn_guide.graphs.varlen.nested_sdpa_backend`, printed first);
    * :data:`FLEX`: :func:`cudnn_guide.graphs.varlen.flex_document_attention` over the packed tokens;
    * :data:`VARLEN_ATTN` (:func:`cudnn_guide.graphs.varlen.torch_varlen_attn`), where this PyTorch
      has it;
    * ``"<FlashAttention-4>, varlen"``: :func:`cudnn_guide.measure.fa4.varlen_attention`, causal,
      scale ``D ** -0.5``, where FlashAttention-4 is installed.

    Each is admitted with :func:`~cudnn_guide.measure.baselines.admit`, its output checked with
    :func:`check_sequences` (a wrong one stops the page); one that cannot run is said, not dropped.

    Parameters
    ----------
    contenders
        Name → launcher, for :func:`~cudnn_guide.measure.compare.compare`; updated in place.
    packed
        ``(q, k, v)``, packed T×H×D.
    padded
        ``(q, k, v)`` padded to B×H×S_max×D (:func:`cudnn_guide.graphs.varlen.padded`).
    cu_seqlens
        The B+1 prefix sums of the lengths, int32 on the GPU.
    lengths
        The lengths, a 1-D integer tensor (on the CPU).
    expected
        ``{"O": [reference of sequence b, 1×H×n×D, …]}``.
    spans
        ``(b, (start, end))`` per sequence.

    Returns
    -------
    dict[str, str]
        Contender name → why it could not run here (FlashAttention-4's display name when it is
        not installed), in the order found.

    Example
    -------
    >>> unavailable = admit_forward_baselines(contenders, (q, k, v), (qp, kp, vp), cu_seqlens,
    ...                                       lengths, expected_o, spans)
    """
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    from cudnn_guide.graphs import varlen
    from cudnn_guide.measure import baselines, fa4

    q, k, v = packed
    qp, kp, vp = padded
    max_len = int(lengths.max())
    unavailable: dict[str, str] = {}
    flash = baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)
    nested = [torch.nested.nested_tensor_from_jagged(t, cu_seqlens.long()).transpose(1, 2) for t in (q, k, v)]
    picked, kernel = varlen.nested_sdpa_backend(*nested)  # or "not determined (…)"
    print(f"nested tensors: SDPA's dispatch picks {picked}")
    flex = varlen.flex_document_attention(lengths)  # compiled, the document mask built once
    packed_bhsd = [t.transpose(0, 1)[None] for t in (q, k, v)]
    candidates: dict[str, tuple[Callable[[], Any], Callable[..., Any]]] = {
        FLASH: (lambda: flash(qp, kp, vp), varlen.padded_rows),
        f"PyTorch nested tensors, {kernel}": (
            lambda: F.scaled_dot_product_attention(*nested, is_causal=True),
            lambda y, b, a, e: varlen.packed_rows(y.transpose(1, 2).values(), b, a, e),
        ),
        FLEX: (lambda: flex(*packed_bhsd), varlen.bhsd_rows),
    }
    try:  # causal, window_size=(-1, 0)
        varlen_attn = varlen.torch_varlen_attn(cu_seqlens, max_len)
        candidates[VARLEN_ATTN] = (lambda: varlen_attn(q, k, v), varlen.packed_rows)
    except ImportError as exc:
        unavailable[VARLEN_ATTN] = str(exc)
    fa4_ok, fa4_detail = fa4.status()
    fa4_name = fa4.label()
    if fa4_ok:  # flash_attn_varlen_func, the same cu_seqlens for queries and keys
        fa4_varlen = fa4.varlen_attention(cu_seqlens, max_len, causal=True, scale=q.shape[-1] ** -0.5)
        candidates[f"{fa4_name}, varlen"] = (lambda: fa4_varlen(q, k, v), varlen.packed_rows)
    else:
        unavailable[fa4_name] = fa4_detail
    for name, (fn, rows) in candidates.items():  # one that cannot run is said, not dropped

        def check_fn(y: Any, name: str = name, rows: Callable[..., Any] = rows) -> None:
            check_sequences(name, {"O": y}, rows, expected, spans)

        if why := baselines.admit(contenders, name, fn, check=check_fn):
            unavailable[name] = why
    return unavailable


def forward_conclusions(
    result: Any,
    lengths: Any,
    *,
    heads: int,
    head_dim: int,
    zero_len_poison_left: float,
    unavailable: Mapping[str, str],
    fa4_label: str,
) -> list[str]:
    """The forward page's conclusions: padding's work against its time, the verdicts, the edge cases.

    The padded work is B·S_max² against the real tokens' Σ n² (causal work grows with each length
    squared); the padded graph's time against the packed graph's says how much of the padding's
    extra time the padding mask avoids (time linear in FLOPs). The verdicts are this run's,
    :meth:`~cudnn_guide.measure.compare.Comparison.describe`'s, each naming its contender once.
    FlashAttention-4's varlen contender gets its own bullet where it ran and is not already named
    as the fastest contender; every contender that could not run gets one with its reason.

    Parameters
    ----------
    result
        The :class:`~cudnn_guide.measure.compare.Comparison` with candidate ``"cuDNN packed
        (THD)"`` and the baseline ``"cuDNN padding mask"``.
    lengths
        The sequences' lengths, a 1-D integer tensor.
    heads
        Heads H.
    head_dim
        Head dimension D.
    zero_len_poison_left
        :func:`edge_cases`'s share of the zero-length sequence's slots still NaN.
    unavailable
        Contender name → why it could not run here.
    fa4_label
        FlashAttention-4's display name (:func:`cudnn_guide.measure.fa4.label`).

    Returns
    -------
    list[str]
        Paragraphs and list items (``"* ..."``) for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*forward_conclusions(result, lengths, heads=H, head_dim=D,
    ...                            zero_len_poison_left=zero_len_poison_left,
    ...                            unavailable=unavailable, fa4_label=fa4.label()))
    """
    H, D = heads, head_dim
    B, S_MAX, T = len(lengths), int(lengths.max()), int(lengths.sum())
    real_flops = sum(4 * H * D * n * n / 2 for n in lengths.tolist())
    padded_flops = B * 4 * H * D * S_MAX * S_MAX / 2
    work_ratio = padded_flops / real_flops
    packed_us = result.estimate("cuDNN packed (THD)")["value"]
    time_ratio = result.estimate("cuDNN padding mask")["value"] / packed_us
    if time_ratio <= 1 or result.versus["cuDNN padding mask"]["verdict"] == "tie":
        skip = "so the padding costs no measurable time: its tiles are skipped."
    elif time_ratio < work_ratio:
        avoided = (work_ratio - time_ratio) / (work_ratio - 1)
        skip = (
            f"between a full skip (1×) and none ({work_ratio:.2f}×): the padding mask "
            f"avoids about {avoided:.0%} of the padding's extra time, not all of it."
        )
    else:
        skip = "no less than the extra work: this timing shows no padding skipped."
    best = result.best_baseline
    unwritten = (
        " (cuDNN does not write them: zero them yourself if anything reads them)" if zero_len_poison_left == 1.0 else ""
    )
    squares = sum(n * n for n in lengths.tolist())  # causal work grows with length²
    sentences = [
        f"Padding to the longest sequence (S_max = {S_MAX}) would do {work_ratio:.2f}× "
        f"the attention work of the real tokens: causal work grows with each length "
        f"squared, so the ratio is B·S_max² / Σ n² = {B}·{S_MAX}² / {squares:,} = "
        f"{B * S_MAX**2:,} / {squares:,}, over the lengths {lengths.tolist()} (in "
        f"tokens, {T} real of {B * S_MAX} slots).",
        f"The padded cuDNN graph with a padding mask takes {time_ratio:.2f}× the packed "
        f"graph's time for {work_ratio:.2f}× the work, {skip}",
        f"The packed cuDNN graph, in this run: against the fastest contender it is "
        f"{result.describe(best)}; against the padded tensors with a padding mask "
        f"it is {result.describe('cuDNN padding mask')}.",
        f"A zero-length sequence: {zero_len_poison_left:.0%} of its output slots still "
        f"held the poison after the call{unwritten}; a one-token sequence is checked "
        "like any other.",
    ]
    fa4_varlen_name = f"{fa4_label}, varlen"
    if fa4_varlen_name in result.versus and fa4_varlen_name != best:  # the fastest is named above
        sentences.append(f"* In this run, cuDNN is {result.describe(fa4_varlen_name)}.")
    sentences += [f"* Not available here: {name}: {why}" for name, why in unavailable.items()]
    return sentences


# ---------------------------------------------------------------------------------------------
# The backward page
# ---------------------------------------------------------------------------------------------


def backward_baselines(
    cu_seqlens: Any, lengths: Any, *, head_dim: int
) -> tuple[dict[str, tuple[Callable[..., Any], str]], dict[str, str]]:
    """The forwards whose PyTorch backward the backward page races, each with the layout it reads.

    Made here, in this order (the order they are timed in): PyTorch's flash backend, forced,
    ``is_causal=True`` (``"<FLASH> backward"``, padded); compiled FlexAttention with the document
    mask (``"FlexAttention, document mask, backward"``, the 1×H×T×D view of the packed tokens);
    ``varlen_attn`` (``"PyTorch varlen_attn backward"``, packed), where this PyTorch has it;
    FlashAttention-4's ``flash_attn_varlen_func`` (``"<FlashAttention-4>, varlen backward"``,
    packed, causal, scale ``D ** -0.5``), where it is installed.

    Parameters
    ----------
    cu_seqlens
        The B+1 prefix sums of the lengths, int32 on the GPU.
    lengths
        The lengths, a 1-D integer tensor (on the CPU).
    head_dim
        Head dimension D (FlashAttention-4's scale).

    Returns
    -------
    tuple[dict[str, tuple[Callable[..., Any], str]], dict[str, str]]
        Contender name → (its forward, called as ``forward(q, k, v)``, and its layout, one of
        :data:`LAYOUTS`); and contender name → why it cannot run here (``"PyTorch varlen_attn
        backward"``, then FlashAttention-4's display name), for :func:`admit_autograd`.

    Example
    -------
    >>> paths, unavailable = backward_baselines(cu_seqlens, lengths, head_dim=D)
    """
    from torch.nn.attention import SDPBackend

    from cudnn_guide.graphs import varlen
    from cudnn_guide.measure import baselines, fa4

    max_len = int(lengths.max())
    unavailable: dict[str, str] = {}
    flash = baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)
    flex = varlen.flex_document_attention(lengths)  # compiled, the document mask built once
    paths: dict[str, tuple[Callable[..., Any], str]] = {
        f"{FLASH} backward": (flash, "padded"),
        f"{FLEX}, backward": (flex, "bhsd"),
    }
    try:  # PyTorch's varlen_attn (causal), where this PyTorch has it
        paths[f"{VARLEN_ATTN} backward"] = (varlen.torch_varlen_attn(cu_seqlens, max_len), "packed")
    except ImportError as exc:
        unavailable[f"{VARLEN_ATTN} backward"] = str(exc)
    fa4_ok, fa4_detail = fa4.status()
    fa4_name = fa4.label()
    if fa4_ok:  # flash_attn_varlen_func, the same cu_seqlens for queries and keys
        fa4_varlen = fa4.varlen_attention(cu_seqlens, max_len, causal=True, scale=head_dim**-0.5)
        paths[f"{fa4_name}, varlen backward"] = (fa4_varlen, "packed")
    else:
        unavailable[fa4_name] = fa4_detail
    return paths, unavailable


def reference_grads(packed: Sequence[Any], d_o: Any, spans: Spans) -> dict[str, list[Any]]:
    """dQ, dK and dV of each sequence alone: causal attention in fp32 with PyTorch's autograd.

    Each sequence's rows of the packed Q, K, V become fp32 leaves (1×H×n×D); causal SDPA runs on
    them with TF32 off (:func:`cudnn_guide.check.full_precision`) and backpropagates that
    sequence's rows of ``d_o``. On a GPU, the inputs' device is made current first (autograd's
    backward thread needs it).

    Parameters
    ----------
    packed
        ``(q, k, v)``, packed T×H×D.
    d_o
        The output's gradient, packed T×H×D.
    spans
        ``(b, (start, end))`` per sequence.

    Returns
    -------
    dict[str, list[Any]]
        ``{"dq": [...], "dk": [...], "dv": [...]}``: one fp32 1×H×n×D gradient per sequence, in
        order.

    Example
    -------
    >>> expected_grads = reference_grads((q, k, v), d_o, spans)
    """
    import torch
    import torch.nn.functional as F

    from cudnn_guide import check
    from cudnn_guide.graphs.varlen import packed_rows

    q, k, v = packed
    if q.device.type == "cuda":  # autograd's backward thread needs this device's context
        torch.cuda.set_device(q.device)
    expected: dict[str, list[Any]] = {n: [] for n in ("dq", "dk", "dv")}
    for b, (a, e) in spans:
        leaf = [packed_rows(t, b, a, e).float().requires_grad_() for t in (q, k, v)]
        with check.full_precision():
            out = F.scaled_dot_product_attention(*leaf, is_causal=True)
            out.backward(packed_rows(d_o, b, a, e).float())
        for n, t in zip(expected, leaf):
            expected[n].append(t.grad)
    return expected


def cudnn_backward(
    name: str,
    qkvd: Sequence[Any],
    seq_lens: Any,
    offsets: Any,
    rows: Callable[[Any, int, int, int], Any],
    expected: Mapping[str, Sequence[Any]],
    spans: Spans,
    *,
    handle: Any,
    max_len: int,
) -> Callable[[], None]:
    """A cuDNN training pair in one layout: the forward run once, the backward built, run, checked; its launcher.

    The tensors are :func:`cudnn_guide.graphs.varlen.training_tensors` of ``qkvd`` (B sequences,
    the statistics B×H×``max_len``×1 fp32); the forward (:func:`cudnn_guide.graphs.varlen.sdpa_graph`,
    with the statistics) runs once to write O and the statistics; the backward graph is built on
    the same tensors, its dQ, dK and dV are poisoned (NaN), it runs, and they are checked
    sequence by sequence against ``expected`` (:func:`check_sequences`).

    Parameters
    ----------
    name
        The contender, first in the checks' names.
    qkvd
        ``(q, k, v, d_o)`` in one layout: packed T×H×D or padded B×H×S_max×D.
    seq_lens
        The true lengths, int32 B×1×1×1 on the GPU.
    offsets
        The ragged offsets (int64, (B+1)×1×1×1, in elements) for packed tensors; None for padded.
    rows
        ``rows(y, b, start, end)`` of this layout.
    expected
        ``{"dq": [...], "dk": [...], "dv": [...]}`` (:func:`reference_grads`).
    spans
        ``(b, (start, end))`` per sequence.
    handle
        The cuDNN handle.
    max_len
        S_max.

    Returns
    -------
    Callable[[], None]
        The backward graph's zero-argument launcher.

    Example
    -------
    >>> run = cudnn_backward("cuDNN packed (THD) backward", (q, k, v, d_o), seq_lens, offsets,
    ...                      packed_rows, expected_grads, spans, handle=handle, max_len=S_MAX)
    """
    from cudnn_guide import check
    from cudnn_guide.graphs import varlen

    x = varlen.training_tensors(*qkvd, batch=seq_lens.shape[0], max_len=max_len)
    step = dict(handle=handle, offsets=offsets)
    varlen.sdpa_graph(x, seq_lens, **step)()  # the forward, once: o and stats
    launch = varlen.sdpa_graph(x, seq_lens, **step, backward=True)
    check.poison(x["dq"], x["dk"], x["dv"])
    launch()
    grads = dict(zip(expected, (x["dq"], x["dk"], x["dv"])))
    check_sequences(name, grads, rows, expected, spans)
    return launch


def admit_autograd(
    contenders: MutableMapping[str, Callable[[], Any]],
    paths: Mapping[str, tuple[Callable[..., Any], str]],
    *,
    packed: Sequence[Any],
    padded: Sequence[Any],
    d_o: Any,
    d_o_padded: Any,
    expected: Mapping[str, Sequence[Any]],
    spans: Spans,
) -> dict[str, str]:
    """Each PyTorch backward of ``paths``, from one retained autograd graph, checked before it joins ``contenders``.

    :func:`~cudnn_guide.measure.baselines.admit_backward` runs each forward once on leaves of the
    inputs of its layout and times only ``torch.autograd.grad`` with ``retain_graph=True``; the
    gradients are checked sequence by sequence against ``expected`` first (a wrong one stops the
    page). The inputs and the output's gradient by layout: ``"padded"``, the padded tensors and
    ``d_o_padded``; ``"bhsd"``, the packed tokens seen as 1×H×T×D and ``d_o`` likewise;
    ``"packed"``, the packed tensors and ``d_o``.

    Parameters
    ----------
    contenders
        Name → launcher, for :func:`~cudnn_guide.measure.compare.compare`; updated in place.
    paths
        Contender name → (forward, layout) (:func:`backward_baselines`), admitted in this order.
    packed
        ``(q, k, v)``, packed T×H×D.
    padded
        ``(q, k, v)`` padded to B×H×S_max×D.
    d_o
        The output's gradient, packed T×H×D.
    d_o_padded
        The same, padded.
    expected
        ``{"dq": [...], "dk": [...], "dv": [...]}`` (:func:`reference_grads`).
    spans
        ``(b, (start, end))`` per sequence.

    Returns
    -------
    dict[str, str]
        Contender name → why it could not run here, in order.

    Raises
    ------
    ValueError
        A layout that is not one of :data:`LAYOUTS`.

    Example
    -------
    >>> unavailable |= admit_autograd(backward_contenders, paths, packed=(q, k, v), padded=(qp, kp, vp),
    ...                               d_o=d_o, d_o_padded=d_op, expected=expected_grads, spans=spans)
    """
    from cudnn_guide.graphs import varlen
    from cudnn_guide.measure import baselines

    for name, (_, layout) in paths.items():
        if layout not in LAYOUTS:
            raise ValueError(f"admit_autograd: {name!r} reads the layout {layout!r}, not one of {LAYOUTS}")
    layouts = {
        "padded": (tuple(padded), d_o_padded, varlen.padded_rows),
        "bhsd": ([t.transpose(0, 1)[None] for t in packed], d_o.transpose(0, 1)[None], varlen.bhsd_rows),
        "packed": (tuple(packed), d_o, varlen.packed_rows),
    }
    unavailable: dict[str, str] = {}
    for name, (fn, layout) in paths.items():
        inputs, grad_out, rows = layouts[layout]

        def check_fn(grads: Any, name: str = name, rows: Callable[..., Any] = rows) -> None:
            check_sequences(name, dict(zip(expected, grads)), rows, expected, spans)

        if why := baselines.admit_backward(contenders, name, fn, inputs, grad_out, check=check_fn):
            unavailable[name] = why
    return unavailable


def backward_conclusions(result: Any, unavailable: Mapping[str, str], *, fa4_label: str) -> list[str]:
    """The backward page's conclusions: the packed backward's time and its verdicts, and what did not run.

    The verdicts are this run's, :meth:`~cudnn_guide.measure.compare.Comparison.describe`'s (each
    naming its contender once), against the fastest contender (the control left out) and against
    the padded control. FlashAttention-4's varlen
    backward gets its own bullet where it ran and is not already named as the fastest contender;
    every contender that could not run gets one with its reason.

    Parameters
    ----------
    result
        The :class:`~cudnn_guide.measure.compare.Comparison` with candidate ``"cuDNN packed (THD)
        backward"`` and the baseline ``"cuDNN padding mask backward (control)"``.
    unavailable
        Contender name → why it could not run here.
    fa4_label
        FlashAttention-4's display name (:func:`cudnn_guide.measure.fa4.label`).

    Returns
    -------
    list[str]
        Paragraphs and list items (``"* ..."``) for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*backward_conclusions(backward_result, unavailable, fa4_label=fa4.label()))
    """
    best_bwd = result.best_baseline
    bwd_us = result.estimate("cuDNN packed (THD) backward")["value"]
    control = "cuDNN padding mask backward (control)"
    sentences = [
        f"Backward (dQ, dK, dV) on the packed layout: {bwd_us:.0f} µs; in this run, against "
        f"the fastest contender it is {result.describe(best_bwd)}; against the padded "
        f"layout with a padding mask it is {result.describe(control)}.",
    ]
    fa4_backward_name = f"{fa4_label}, varlen backward"
    if fa4_backward_name in result.versus and fa4_backward_name != best_bwd:  # the fastest is named above
        sentences.append(f"* In this run, cuDNN is {result.describe(fa4_backward_name)}.")
    sentences += [f"* Not available here: {name}: {why}" for name, why in unavailable.items()]
    return sentences


# ---------------------------------------------------------------------------------------------
# Either page
# ---------------------------------------------------------------------------------------------


def timing_rows(result: Any) -> list[dict[str, Any]]:
    """One table row per contender: its time and its useful rate (the real tokens' FLOPs only).

    Both are medians of per-round medians (:meth:`~cudnn_guide.measure.compare.Comparison.estimate`).

    Parameters
    ----------
    result
        The :class:`~cudnn_guide.measure.compare.Comparison`, with ``flops`` of the real tokens.

    Returns
    -------
    list[dict[str, Any]]
        Rows ``{"implementation", "µs", "useful TFLOP/s"}``, in the comparison's order.

    Example
    -------
    >>> rows = timing_rows(result)
    >>> html_table(pd.DataFrame(rows).sort_values("µs"), {"µs": "{:.1f}", "useful TFLOP/s": "{:.0f}"})
    """
    return [
        {
            "implementation": n,
            "µs": result.estimate(n)["value"],
            "useful TFLOP/s": result.estimate(n, "TFLOP/s")["value"],
        }
        for n in result.measurements
    ]
