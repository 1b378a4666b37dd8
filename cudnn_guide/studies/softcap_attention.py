"""Soft-capped attention scores raced against FlexAttention and FlashAttention-4: the soft-cap page's study.

The soft-cap page's lesson builds causal attention whose scores become ``c·tanh(s/c)`` through
cuDNN's ``score_mod`` callback, with the causal mask written in the callback too. This module
holds what the page races it against and how it reads the race:

* :func:`flex_softcap`: FlexAttention with the same soft-cap as its ``score_mod`` and a causal
  block mask, once with ``torch.tanh`` (the exact tanh) and once with the approximate tanh Flex
  users ship, attention-gym's ``approx::tanh`` (:func:`register_approx_tanh`: a custom op that
  Inductor lowers to the PTX instruction ``tanh.approx.f32``);
* :func:`causal_graph`: cuDNN's causal graph without a cap (its own causal band), the control;
* :func:`refusal`: the graph that asks for a ``score_mod`` and cuDNN's causal band together, and
  what cuDNN says of it;
* :func:`contender_rows` (:mod:`cudnn_guide.report.tables`'s, re-exported for the page) and
  :func:`conclusions`: the page's table and sentences, from the
  comparison.

The graphs and the races need a GPU; the custom op, the rows and the sentences do not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from cudnn_guide.report.tables import contender_rows

__all__ = [
    "BAND_REFUSAL",
    "causal_graph",
    "conclusions",
    "contender_rows",
    "flex_softcap",
    "refusal",
    "register_approx_tanh",
]

BAND_REFUSAL = "score_mod + causal band"
"""The name of :func:`refusal`'s case. :func:`conclusions` states the refusal once, in its own
paragraph, not among the contenders that did not run."""


def _new_graph(handle: Any) -> Any:
    """A bf16 graph computing in fp32, as the lesson's."""
    import cudnn

    return cudnn.pygraph(
        handle=handle,
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )


def _causal() -> dict[str, Any]:
    """cuDNN's own causal band: top-left aligned, no key after the query's diagonal position."""
    import cudnn

    return dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)


@functools.cache
def register_approx_tanh() -> Any:
    """Register ``torch.ops.approx.tanh`` (once): tanh as a custom op that Inductor lowers to ``tanh.approx.f32``.

    Outside a compiled graph it is the exact ``torch.tanh``; under ``torch.compile`` its
    registered lowering emits the PTX instruction ``tanh.approx.f32`` through
    ``inline_asm_elementwise`` (attention-gym's ``approx::tanh``, as FlexAttention users write
    soft-caps). Torch has no approximate-tanh op of its own.

    Returns
    -------
    Any
        The op, ``torch.ops.approx.tanh``.

    Example
    -------
    >>> import torch
    >>> tanh_approx = register_approx_tanh()
    >>> tanh_approx(torch.zeros(2)).tolist()
    [0.0, 0.0]
    """
    import torch
    from torch._inductor.lowering import make_pointwise, register_lowering
    from torch._inductor.virtualized import ops

    # the schema is spelled out: this module's annotations are strings (postponed evaluation)
    @torch.library.custom_op("approx::tanh", mutates_args=(), schema="(Tensor x) -> Tensor")
    def tanh_approx(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)  # outside a compiled graph: the exact tanh

    @tanh_approx.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    def _tanh_approx_lowering(x: Any) -> Any:
        asm = functools.partial(ops.inline_asm_elementwise, asm="tanh.approx.f32 $0, $1;")
        return make_pointwise(asm)(x)

    register_lowering(torch.ops.approx.tanh)(_tanh_approx_lowering)
    return torch.ops.approx.tanh


def flex_softcap(
    flex: Callable[..., Any], q: Any, k: Any, v: Any, cap: float
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """FlexAttention with the soft-cap ``cap·tanh(s/cap)`` as its ``score_mod`` and a causal block mask.

    The first launcher writes the cap with ``torch.tanh``, which Inductor lowers to libdevice's
    exact ``tanh``; the second with ``torch.ops.approx.tanh`` (:func:`register_approx_tanh`,
    registered here), which it lowers to ``tanh.approx.f32``. Both share one block mask of the
    causal band (key ≤ query), made here on ``q``'s device, so both skip the tiles above the
    diagonal.

    Parameters
    ----------
    flex
        FlexAttention, compiled (``torch.compile(flex_attention, fullgraph=True)``).
    q
        B×H×S×D queries, S queries and S keys.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    cap
        The soft-cap c.

    Returns
    -------
    tuple[Callable[[], Any], Callable[[], Any]]
        Zero-argument launchers returning B×H×S×D: the exact tanh, then the approximate one.

    Example
    -------
    >>> exact, approx = flex_softcap(torch.compile(flex_attention, fullgraph=True), q, k, v, 2.0)
    >>> check.check(exact(), ref_cap, name="FlexAttention soft-cap, causal")
    """
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    register_approx_tanh()
    seq = q.shape[2]
    causal_block = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, seq, seq, device=q.device)

    def softcap_mod(score: Any, b: Any, h: Any, qi: Any, ki: Any) -> Any:
        return cap * torch.tanh(score / cap)

    def softcap_approx_mod(score: Any, b: Any, h: Any, qi: Any, ki: Any) -> Any:
        return cap * torch.ops.approx.tanh(score / cap)

    return (
        lambda: flex(q, k, v, score_mod=softcap_mod, block_mask=causal_block),
        lambda: flex(q, k, v, score_mod=softcap_approx_mod, block_mask=causal_block),
    )


def causal_graph(handle: Any, q: Any, k: Any, v: Any) -> Callable[[], None]:
    """cuDNN's causal attention without a cap (its own diagonal band), built, as a launcher.

    The graph ``sdpa_causal`` takes bf16 B×H×S×D tensors laid out as ``q``, ``k`` and ``v``,
    computes in fp32 with the scale ``D ** -0.5``, writes no softmax statistics, and is built
    with heuristics A then FALLBACK; its output is a new tensor like ``q``.

    Parameters
    ----------
    handle
        The cuDNN handle.
    q
        B×H×S×D queries, bf16.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.

    Returns
    -------
    Callable[[], None]
        The zero-argument launcher (:meth:`~cudnn_guide.graphs.builder.BuiltGraph.bind` of the
        graph adopted as ``"causal"``).

    Example
    -------
    >>> launch = causal_graph(handle, q, k, v)
    >>> launch()
    """
    import cudnn
    import torch

    from cudnn_guide import graphs

    g3 = _new_graph(handle)
    Q3, K3, V3 = (g3.tensor_like(t, name=n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    O3, _ = g3.sdpa(
        name="sdpa_causal",
        q=Q3,
        k=K3,
        v=V3,
        attn_scale=q.shape[-1] ** -0.5,
        generate_stats=False,
        **_causal(),
    )
    o_causal = torch.empty_like(q)
    O3.set_output(True).set_dim(list(o_causal.shape)).set_stride(list(o_causal.stride()))
    g3.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return graphs.adopt(g3, handle, name="causal").bind({Q3: q, K3: k, V3: v, O3: o_causal})


def refusal(handle: Any, q: Any, k: Any, v: Any) -> str:
    """Declare and build a soft-cap ``score_mod`` together with cuDNN's causal band: what cuDNN says.

    The graph is the lesson's soft-cap (``cap·tanh(s/cap)``, the cap a pass-by-value scalar)
    without its hand-written mask, asking for ``diagonal_band_right_bound=0`` instead.

    Parameters
    ----------
    handle
        The cuDNN handle.
    q
        B×H×S×D queries, bf16.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.

    Returns
    -------
    str
        ``"accepted"`` when the graph builds; otherwise ``"<ExceptionType>: <first line of its
        message>"``.

    Example
    -------
    >>> refusal(handle, q, k, v)
    'cudnnGraphNotSupportedError: ...'
    """
    import cudnn
    import torch

    scalar = dict(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], is_pass_by_value=True)
    g2 = _new_graph(handle)
    Q2, K2, V2 = (g2.tensor_like(t, name=n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    CAP2 = g2.tensor(name="cap", data_type=torch.float32, **scalar)
    try:
        O2, _ = g2.sdpa(
            name="sdpa",
            q=Q2,
            k=K2,
            v=V2,
            attn_scale=q.shape[-1] ** -0.5,
            generate_stats=False,
            **_causal(),
            score_mod=lambda gr, sc: gr.mul(a=gr.tanh(input=gr.div(a=sc, b=CAP2)), b=CAP2),
        )
        O2.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
        g2.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        return "accepted"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"


def conclusions(
    cmp: Any,
    *,
    control: str,
    flex_exact: str,
    flex_approx: str,
    fa4_label: str,
    fa4_detail: str,
    refused: str,
    unavailable: Mapping[str, str],
) -> list[str]:
    """The soft-cap page's conclusions, from its comparison: verdicts, what cuDNN refused, what did not run.

    "The fastest contender" leaves out the control. Against each other baseline that ran and is
    not the fastest, one bullet; FlexAttention's two tanhs ran in the same rounds, so the
    approximate one's gain over the exact one is their paired per-round ratio, judged against
    the comparison's tie band. FlashAttention-4 (``"<fa4_label>, softcap"``) that was not timed
    gets a bullet with the reason, and so does every other contender that did not run here. A
    refused :func:`refusal` is said once, as its own paragraph (cuDNN's words are printed above
    it on the page), not as a contender that did not run.

    Parameters
    ----------
    cmp
        The :class:`~cudnn_guide.measure.compare.Comparison` of the soft-cap graph against its
        baselines.
    control
        The contender name of cuDNN's causal graph without a cap.
    flex_exact
        The contender name of FlexAttention with ``torch.tanh``.
    flex_approx
        The contender name of FlexAttention with ``tanh.approx.f32``.
    fa4_label
        FlashAttention-4's display name (:func:`cudnn_guide.measure.fa4.label`).
    fa4_detail
        Why FlashAttention-4 was not timed where it is not installed
        (:func:`cudnn_guide.measure.fa4.status`).
    refused
        :func:`refusal`'s outcome.
    unavailable
        Contender name → why it could not run (:func:`cudnn_guide.measure.baselines.admit`).

    Returns
    -------
    list[str]
        Paragraphs and list items (``"* ..."``) for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(softcap_cmp, control=CAP_CTRL, flex_exact=FLEX_CAP, flex_approx=FLEX_APPROX,
    ...                    fa4_label=FA4, fa4_detail=FA4_DETAIL, refused=refused, unavailable=unavailable))
    """
    import statistics

    from cudnn_guide.measure.verdicts import bootstrap_median_ci, judge

    def others(c: Any, *names: str, said: Mapping[str, str] | None = None) -> list[str]:
        """One bullet per contender in ``names`` that ran and is not ``c``'s fastest
        (``said``: how a bullet names a contender, where not by its label)."""
        said = said or {}
        return [
            f"* vs {said.get(n, n)}: cuDNN is {c.describe(n)}." for n in names if n in c.versus and n != c.best_baseline
        ]

    fa4_cap = f"{fa4_label}, softcap"
    sentences = [
        f"Soft-cap as a score_mod: against the fastest contender, cuDNN is "
        f"{cmp.describe()}; against its own causal kernel without a cap it is "
        f"{cmp.describe(control)}.",
    ]
    if refused != "accepted":
        sentences.append(
            "cuDNN refuses a score_mod together with its own causal band (above), so "
            "the callback writes the causal mask itself; whether the kernel then skips "
            "the score tiles above the diagonal is not profiled here."
        )
    sentences.append(
        "Whether cuDNN's tanh in the score_mod is exact or approximate is not "
        "established here: this guide found no statement of it in cuDNN's "
        "documentation, and the page does not test it. FlexAttention is timed with "
        "both; FlashAttention-4's source computes the approximate tanh."
    )
    sentences += others(cmp, fa4_cap, flex_exact, said={flex_exact: "FlexAttention with the exact tanh (torch.tanh)"})
    if flex_approx in cmp.versus:
        # the two Flex variants ran in the same rounds: their paired ratio, judged likewise
        per_round = cmp.round_medians_ms
        gain = [e / a for e, a in zip(per_round[flex_exact], per_round[flex_approx])]
        lo, hi = bootstrap_median_ci(gain)
        mid = statistics.median(gain)
        effect = {
            "faster": f"makes Flex {mid:.2f}× faster than the exact one",
            "slower": f"makes Flex {1 / mid:.2f}× slower than the exact one",
            "tie": f"gives Flex a tie with the exact one ({mid:.2f}×)",
        }[judge(lo, hi, cmp.tie_band)]
        approx = "" if flex_approx == cmp.best_baseline else f"cuDNN is {cmp.describe(flex_approx)}. "
        sentences.append(
            f"* vs FlexAttention with the approximate tanh (tanh.approx.f32): {approx}"
            f"The approximate tanh {effect} "
            f"({cmp.estimate(flex_exact)['value']:.0f} → "
            f"{cmp.estimate(flex_approx)['value']:.0f} µs, in-run 95% interval "
            f"{lo:.2f}–{hi:.2f})."
        )
    sentences += [
        f"* {name} was not timed: {unavailable.get(name, fa4_detail)}." for name in (fa4_cap,) if name not in cmp.versus
    ]
    sentences += [  # the refusal is its own paragraph above: not a contender that is missing
        f"* Not available here: {name}: {why}" for name, why in unavailable.items() if not name.startswith(fa4_label)
    ]
    return sentences
