"""Sliding windows and ALiBi raced against FlexAttention and FlashAttention-4: the attention-masks page's study.

The attention-masks page declares its graphs with its own ``masked_attention(q, k, v, o, **mask)``
(the lesson's: the mask keywords go to ``g.sdpa``, a tensor among them becomes an input of the
graph) and this module races them. :class:`WindowRace` builds the graph of one sliding-window
width, runs it, and checks it, FlexAttention with a block mask of the same window and
FlashAttention-4's ``window_size=(W - 1, 0)`` against the fp32 reference of that window, before
the page's ``compare`` times them; :func:`visible_pairs` counts the (query, key) pairs a window
leaves visible, the useful work. :func:`alibi_slopes`, :func:`alibi_bias` and
:func:`flex_alibi` write ALiBi for the reference and for FlexAttention;
:func:`causal_reference` and :func:`checked_run` check a graph's output against the fp32 causal
reference with a bias. :func:`fa4_masks_text` reads from ``flash_attn_func``'s signature whether
FlashAttention-4 takes ALiBi or a bias tensor, and :func:`window_sentences` writes the page's
conclusions about the widths from its comparisons.

The races and the builds need a GPU; the counting, ALiBi's slopes and bias, the references and
the sentences do not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "FLEX",
    "WindowRace",
    "alibi_bias",
    "alibi_slopes",
    "causal_reference",
    "checked_run",
    "fa4_masks_text",
    "flex_alibi",
    "visible_pairs",
    "window_sentences",
]

FLEX = "FlexAttention (compiled)"
"""The contender name of FlexAttention with a block mask of the window (:meth:`WindowRace.contenders`)."""


def visible_pairs(seq: int, window: int | None = None) -> int:
    """How many (query, key) pairs a causal band of ``window`` keys leaves visible in ``seq`` × ``seq`` scores.

    Query ``i`` sees key ``j`` when ``i - window < j ≤ i`` (cuDNN's ``diagonal_band_left_bound=window``
    with ``diagonal_band_right_bound=0``, top-left aligned): ``min(i + 1, window)`` keys. The count is
    that of :func:`~cudnn_guide.graphs.attention_inputs.band`'s ``True`` entries with ``left=window``.

    Parameters
    ----------
    seq
        Queries and keys S.
    window
        Keys each query sees (itself and the ``window - 1`` before it), at least 1; None: causal.

    Returns
    -------
    int
        The number of visible pairs (``S·(S + 1)/2`` for causal attention).

    Example
    -------
    >>> visible_pairs(4), visible_pairs(4, window=2)
    (10, 7)
    """
    window = seq if window is None else min(window, seq)
    return window * (window + 1) // 2 + (seq - window) * window


class WindowRace:
    """The contenders of one sliding-window width, the windowed ones checked against that window's fp32 reference.

    :meth:`contenders` builds the width's graph with ``build`` (the page's ``masked_attention``,
    with ``mask`` and ``diagonal_band_left_bound=window``), runs it once and checks it, checks
    FlexAttention with a block mask of the same window, and admits FlashAttention-4 with
    ``window_size=(window - 1, 0)`` (:func:`~cudnn_guide.measure.baselines.admit`: it prints the
    check, or why FlashAttention-4 cannot run this window). Its contenders are, in order,
    ``candidate`` (the window graph), :data:`FLEX`, the control (``control``'s graph, launched
    anew for each width) and FlashAttention-4 where it was admitted. FlexAttention's mask reads
    the width from a tensor at run time, so one compiled kernel serves every width; the tensor
    holds the width of the last :meth:`contenders` call, so race each width's contenders before
    asking for the next.

    Parameters
    ----------
    build
        ``build(q, k, v, o, **mask)`` → ``(graph, pack)``: a built graph writing ``o``, and its
        variant pack.
    launcher
        ``launcher(graph, pack)`` → a zero-argument launcher of the graph.
    inputs
        ``(q, k, v)``, B×H×S×D, S queries and S keys.
    mask
        The causal band's keywords for ``build`` (``diagonal_alignment=TOP_LEFT``,
        ``diagonal_band_right_bound=0``).
    flex
        FlexAttention, compiled (``torch.compile(flex_attention, fullgraph=True)``).
    candidate
        The window graph's contender name.
    control
        ``(name, graph, pack)``: the dense causal graph, timed as a control.
    fa4_label
        FlashAttention-4's contender name, or None to leave it out (not installed).

    Example
    -------
    >>> race = WindowRace(masked_attention, launcher, (q, k, v), mask=CAUSAL, flex=flex,
    ...                   candidate="cuDNN window", control=(CONTROL, causal, causal_pack))
    >>> result = compare.compare(race.contenders(512), candidate="cuDNN window", flops=race.flops(512))
    """

    def __init__(
        self,
        build: Callable[..., tuple[Any, Any]],
        launcher: Callable[[Any, Any], Callable[[], Any]],
        inputs: tuple[Any, Any, Any],
        *,
        mask: Mapping[str, Any],
        flex: Callable[..., Any],
        candidate: str,
        control: tuple[str, Any, Any],
        fa4_label: str | None = None,
    ) -> None:
        import torch

        self.build, self.launcher, self.flex = build, launcher, flex
        self.q, self.k, self.v = inputs
        self.mask, self.candidate, self.control, self.fa4_label = dict(mask), candidate, control, fa4_label
        self.checks: list[Any] = []
        """Every check :meth:`contenders` made, in order (FlashAttention-4's is printed, not kept)."""
        # read by the mask at run time: one compiled kernel serves every width
        self.window = width = torch.tensor(0, device=self.q.device)

        def window_mod(b: Any, h: Any, qi: Any, ki: Any) -> Any:
            return (ki <= qi) & (qi - ki < width)

        self.window_mod = window_mod

    def contenders(self, window: int) -> dict[str, Callable[[], Any]]:
        """Build, run and check the contenders of one width; name → zero-argument launcher.

        Parameters
        ----------
        window
            The width W: keys each query sees (itself and the W - 1 before it).

        Returns
        -------
        dict[str, Callable[[], Any]]
            ``candidate``, :data:`FLEX`, the control and, where admitted, FlashAttention-4.

        Raises
        ------
        InputError
            A width below 1 or above the sequence
            (:func:`~cudnn_guide.graphs.attention_inputs.check_window`).
        CheckFailedError
            A contender computes the wrong result.

        Example
        -------
        >>> contenders = race.contenders(256)
        """
        import torch
        from torch.nn.attention.flex_attention import create_block_mask

        from cudnn_guide import check
        from cudnn_guide.graphs import attention_inputs
        from cudnn_guide.measure import baselines, fa4

        q, k, v, flex = self.q, self.k, self.v, self.flex
        seq = q.shape[2]
        attention_inputs.check_window(window, seq)
        o_w = torch.empty_like(q)
        graph, pack = self.build(q, k, v, o_w, **self.mask, diagonal_band_left_bound=window)
        self.window.fill_(window)
        block_mask = create_block_mask(self.window_mod, None, None, seq, seq, device=q.device)
        ref = attention_inputs.reference(q, k, v, visible=attention_inputs.band(seq, seq, left=window, device=q.device))
        launch = self.launcher(graph, pack)
        launch()
        self.checks.append(check.check(o_w, ref, name=f"cuDNN window W={window}"))
        self.checks.append(
            check.check(flex(q, k, v, block_mask=block_mask), ref, name=f"FlexAttention window W={window}")
        )
        name, control, control_pack = self.control
        contenders = {
            self.candidate: launch,
            FLEX: lambda: flex(q, k, v, block_mask=block_mask),
            name: self.launcher(control, control_pack),
        }
        if self.fa4_label is not None:  # prints why FA4 cannot run this window, if it cannot
            run_fa4 = fa4.forward(q, k, v, causal=True, scale=q.shape[-1] ** -0.5, window_size=(window - 1, 0))
            baselines.admit(
                contenders,
                self.fa4_label,
                run_fa4,
                check=lambda out: check.check(out, ref, name=f"{self.fa4_label} window W={window}"),
            )
        return contenders

    def flops(self, window: int) -> int:
        """The useful work of one call at this width: ``4 · B · H · D`` per visible (query, key) pair.

        Parameters
        ----------
        window
            The width W.

        Returns
        -------
        int
            FLOPs (:func:`visible_pairs` of the sequence and W, times ``4 · B · H · D``).

        Example
        -------
        >>> race.flops(4096)  # B, H, D = 4, 16, 128: causal over 4096 tokens
        274945015808
        """
        b, h, s, d = self.q.shape
        return 4 * b * h * d * visible_pairs(s, window)


def alibi_slopes(heads: int, device: Any = "cuda") -> Any:
    """ALiBi's standard per-head slopes, ``2^(−8(h+1)/H)`` for head ``h`` of ``H``.

    Parameters
    ----------
    heads
        Heads H.
    device
        Where to make them.

    Returns
    -------
    Any
        A float32 tensor of H slopes.

    Example
    -------
    >>> alibi_slopes(2, device="cpu").tolist()
    [0.0625, 0.00390625]
    """
    import torch

    return torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)], device=device)


def alibi_bias(slopes: Any, seq: int) -> Any:
    """ALiBi as an additive bias tensor: ``slope_h · (j − i)`` for query ``i`` and key ``j``, 1×H×S×S.

    Parameters
    ----------
    slopes
        The H slopes (:func:`alibi_slopes`); the bias is made on their device.
    seq
        Queries and keys S.

    Returns
    -------
    Any
        A float32 1×H×S×S tensor (0 on the diagonal, negative for earlier keys).

    Example
    -------
    >>> import torch
    >>> alibi_bias(torch.tensor([0.5]), 2).tolist()
    [[[[0.0, 0.5], [-0.5, 0.0]]]]
    """
    import torch

    positions = torch.arange(seq, device=slopes.device)
    return (slopes[:, None, None] * (positions[None, :] - positions[:, None])[None]).unsqueeze(0)


def causal_reference(q: Any, k: Any, v: Any, bias: Any = None) -> Any:
    """The fp32 reference of causal attention (top-left aligned) with an additive ``bias``.

    Parameters
    ----------
    q
        B×H×S×D queries.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    bias
        Added to the scores before the mask (broadcast to B×H×S×S), or None.

    Returns
    -------
    Any
        B×H×S×D, float32 (:func:`~cudnn_guide.graphs.attention_inputs.reference`).

    Example
    -------
    >>> import torch
    >>> q = torch.randn(1, 2, 4, 8)
    >>> causal_reference(q, q, q, alibi_bias(alibi_slopes(2, device="cpu"), 4)).shape
    torch.Size([1, 2, 4, 8])
    """
    from cudnn_guide.graphs import attention_inputs

    seq = q.shape[2]
    visible = attention_inputs.band(seq, seq, device=q.device)
    return attention_inputs.reference(q, k, v, visible=visible, bias=bias)


def checked_run(run: Callable[[Any, Any], Any], graph: Any, pack: Any, out: Any, expected: Any, *, name: str) -> Any:
    """Fill ``out`` with NaN, run the graph into it, and check it against ``expected``.

    Parameters
    ----------
    run
        ``run(graph, pack)``: executes the graph (the page's ``run``).
    graph
        The built graph.
    pack
        Its variant pack; ``out`` is its output.
    out
        The output tensor the graph writes.
    expected
        The reference (:func:`causal_reference`).
    name
        The check's name.

    Returns
    -------
    Any
        The passing :class:`~cudnn_guide.check.CheckResult`; a wrong result raises
        :class:`~cudnn_guide.errors.CheckFailedError`, and so does an element the graph did not write.

    Example
    -------
    >>> print(checked_run(run, with_bias, bias_pack, o, causal_reference(q, k, v, bias), name="bias"))
    """
    from cudnn_guide import check

    check.poison(out)
    run(graph, pack)
    return check.check(out, expected, name=name)


def flex_alibi(flex: Callable[..., Any], q: Any, k: Any, v: Any, slopes: Any) -> Callable[[], Any]:
    """FlexAttention with ALiBi as its ``score_mod`` (``score + slope_h · (j − i)``) and a causal block mask.

    Parameters
    ----------
    flex
        FlexAttention (compiled, or ``flex_attention`` itself).
    q
        B×H×S×D queries, S queries and S keys.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    slopes
        The H slopes (:func:`alibi_slopes`).

    Returns
    -------
    Callable[[], Any]
        A zero-argument launcher returning B×H×S×D; the block mask is made here, once, on ``q``'s
        device.

    Example
    -------
    >>> launch = flex_alibi(flex, q, k, v, alibi_slopes(16))
    >>> check.check(launch(), causal_reference(q, k, v, alibi_bias(slopes, 4096)), name="FlexAttention ALiBi")
    """
    from torch.nn.attention.flex_attention import create_block_mask

    seq = q.shape[2]

    def alibi_mod(score: Any, b: Any, h: Any, qi: Any, ki: Any) -> Any:
        return score + slopes[h] * (ki - qi)

    causal_block = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, seq, seq, device=q.device)
    return lambda: flex(q, k, v, score_mod=alibi_mod, block_mask=causal_block)


def fa4_masks_text(label: str, ok: bool, detail: str, *, parameters: Iterable[str] | None = None) -> str:
    """What FlashAttention-4 takes of ALiBi and bias tensors, read from ``flash_attn_func``'s signature.

    Parameters
    ----------
    label
        FlashAttention-4's display name (:func:`cudnn_guide.measure.fa4.label`).
    ok
        Whether it imports here (:func:`cudnn_guide.measure.fa4.status`).
    detail
        Why it does not, when ``ok`` is False.
    parameters
        ``flash_attn_func``'s parameter names; default read from its signature (when ``ok``).

    Returns
    -------
    str
        One or two sentences: whether it takes ``alibi_slopes`` (and ``attn_bias``), or why it
        was not timed.

    Example
    -------
    >>> fa4_masks_text("FA4", True, "", parameters=["q", "k", "v", "alibi_slopes"])
    "FA4's flash_attn_func takes alibi_slopes, but this page does not time it."
    """
    if not ok:
        return f"{label} was not timed: {detail}."
    if parameters is None:
        import inspect

        from flash_attn.cute import flash_attn_func

        parameters = inspect.signature(flash_attn_func).parameters
    fa4_args = set(parameters)
    if "alibi_slopes" in fa4_args:
        return f"{label}'s flash_attn_func takes alibi_slopes, but this page does not time it."
    no_bias = "" if "attn_bias" in fa4_args else ", nor a bias tensor"
    return (
        f"FA4: not supported (no ALiBi in flash_attn_func: {label} takes no "
        f"alibi_slopes{no_bias}), so it is not in the ALiBi race. A "
        "score_mod written in the CuTe DSL could add ALiBi; this page "
        "does not attempt it."
    )


def window_sentences(
    by_window: Mapping[int, Any], *, candidate: str, control: str, fa4_label: str, fa4_ok: bool
) -> list[str]:
    """The conclusions about the widths: the candidate's times, its verdict at each width, and the counts.

    The verdicts are :func:`~cudnn_guide.report.prose.gpu_and_loop_text`'s: GPU time, and the
    back-to-back loop's with its own tie band and rounds where the contenders also raced in one.
    At each width the candidate is judged against the fastest contender there, then against
    FlashAttention-4 and :data:`FLEX` where either is not the fastest; then the widths are
    counted by verdict against the fastest, and against FlashAttention-4 where it was not
    always the fastest (or a sentence says it ran at none of them).

    Parameters
    ----------
    by_window
        Width → :class:`~cudnn_guide.measure.compare.Comparison`, widest first, narrowest last.
    candidate
        The window graph's contender name.
    control
        The dense causal graph's contender name.
    fa4_label
        FlashAttention-4's contender name.
    fa4_ok
        Whether FlashAttention-4 imports here.

    Returns
    -------
    list[str]
        Paragraphs and list items (``"* ..."``) for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> sentences = window_sentences(by_window, candidate=CAND, control=CONTROL, fa4_label=FA4, fa4_ok=True)
    >>> sentences[1]
    '* W=4096: cuDNN is 1.05× faster than FlexAttention (compiled) (…).'
    """
    from cudnn_guide.report.prose import gpu_and_loop_text as said

    windows = list(by_window)
    full, narrow = by_window[windows[0]], by_window[windows[-1]]

    def also(c: Any, *names: str) -> str:
        """The comparisons of ``c`` against ``names`` other than its fastest contender."""
        return "".join(f"; vs {n}: {said(c, n)}" for n in names if n in c.versus and n != c.best_baseline)

    sentences = [
        f"Shrinking the window from {windows[0]} to {windows[-1]} keys takes the cuDNN "
        f"graph from {full.estimate(candidate)['value']:.0f} to "
        f"{narrow.estimate(candidate)['value']:.0f} µs; the dense causal graph takes "
        f"{narrow.estimate(control)['value']:.0f} µs. At each width, against the "
        "fastest contender there (then against the others):",
    ]
    sentences += [f"* W={w}: cuDNN is {said(c)}{also(c, fa4_label, FLEX)}." for w, c in by_window.items()]
    best = [c.versus[c.best_baseline]["verdict"] for c in by_window.values()]
    sentences.append(
        f"Against the fastest contender at each width, cuDNN is faster at "
        f"{best.count('faster')}, ties at {best.count('tie')} and is slower at "
        f"{best.count('slower')} of {len(best)} widths."
    )
    fa = {w: c for w, c in by_window.items() if fa4_label in c.versus}
    if any(c.best_baseline != fa4_label for c in fa.values()):  # else the count above says it
        verdicts = [c.versus[fa4_label]["verdict"] for c in fa.values()]
        sentences.append(
            f"Against {fa4_label} with window_size, cuDNN is faster at "
            f"{verdicts.count('faster')}, ties at {verdicts.count('tie')} and is slower at "
            f"{verdicts.count('slower')} of {len(verdicts)} widths."
        )
    elif fa4_ok and not fa:
        sentences.append(f"{fa4_label} ran at none of the widths (the reasons are above).")
    return sentences
