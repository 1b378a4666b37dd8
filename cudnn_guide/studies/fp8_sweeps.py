"""FP8 against bf16 across sizes: the matmul and attention sweeps of the FP8-on-Hopper page, and its words.

The page times cuDNN's FP8 graphs against PyTorch's FP8 and bf16 kernels at several sizes with
:func:`cudnn_guide.measure.sweep.sweep`, whose implementations are factories: given a size, a
zero-argument launcher. :class:`MatmulSizes` and :class:`AttentionLengths` are those factories.
Each builds one size's inputs and graphs the first time a factory asks for it, checks every
contender's output at that size against an fp32 reference before anything at that size is timed,
and keeps that one size (the previous one is dropped: the factories keep one size's buffers at a
time).
:class:`MatmulSizes` also compares the cuDNN FP8 matmul's output with ``torch._scaled_mm``'s bit
for bit (:attr:`MatmulSizes.same_bits`): equal bits point to the same kernel.

:func:`check_attention` checks one attention problem's FP8 and bf16 graphs and the FP8 graph's
``amax`` of O; :func:`plot_fp8_sweeps` draws both sweeps side by side. The conclusions' words
come from the data: :func:`same_kernel_text` (what the bit-for-bit comparisons say),
:func:`clocks_text` (GPU time against a back-to-back loop, and where the GPU's clock was held
down), :func:`error_ratio` and :func:`peak_text`.

The sweeps and checks need a GPU; the words do not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "AttentionLengths",
    "MatmulSizes",
    "check_attention",
    "clocks_text",
    "error_ratio",
    "peak_text",
    "plot_fp8_sweeps",
    "same_kernel_text",
    "scaled_mm_launcher",
]


def scaled_mm_launcher(inputs: dict[str, Any]) -> Callable[[], Any]:
    """``torch._scaled_mm`` (cuBLASLt FP8) on FP8 matmul inputs, as a zero-argument launcher.

    Parameters
    ----------
    inputs
        ``a8`` (1×M×K), ``b8`` (1×K×N, column-major), and the 1×1×1 fp32 ``descale_a`` and
        ``descale_b``, as :meth:`~cudnn_guide.graphs.fp8.Fp8MatmulProblem.make_inputs` returns them.

    Returns
    -------
    Callable[[], Any]
        Each call returns a new M×N bf16 product, both descales applied.

    Example
    -------
    >>> d = fp8.Fp8MatmulProblem(m=4096, n=4096, k=4096).make_inputs(seed=0)
    >>> c = scaled_mm_launcher(d)()  # 4096×4096 bf16
    """
    import torch

    a, b = inputs["a8"][0], inputs["b8"][0]
    kw = dict(
        scale_a=inputs["descale_a"].reshape(()),
        scale_b=inputs["descale_b"].reshape(()),
        out_dtype=torch.bfloat16,
    )
    return lambda: torch._scaled_mm(a, b, **kw)


class MatmulSizes:
    """The FP8 matmul sweep's factories: one n×n×n size at a time, built and checked on first use.

    At a new size it drops the previous one (and empties torch's cache), makes
    :class:`~cudnn_guide.graphs.fp8.Fp8MatmulProblem` inputs with ``seed=n``, builds
    :func:`~cudnn_guide.graphs.fp8.fp8_matmul_graph` (named ``"fp8 matmul <n>"``), and checks each
    contender's launcher against the fp32 product of the bf16 operands, in this order: the cuDNN
    graph, run once on a NaN-poisoned output (check ``"FP8 <n>³"``, tolerance ``tol``),
    ``torch._scaled_mm`` (``"torch._scaled_mm FP8 <n>³"``, ``tol``), and the bf16 matmul, run once
    into its NaN-poisoned buffer (``"bf16 matmul <n>³"``, bf16's tolerance). It also compares the
    cuDNN output bit for bit with ``torch._scaled_mm``'s (:attr:`same_bits`).

    Parameters
    ----------
    tol
        The relative-error tolerance of the FP8 checks.

    Example
    -------
    >>> mm = MatmulSizes(tol=0.1)
    >>> impls = {"cuDNN FP8 graph": mm.cudnn_fp8, "torch._scaled_mm FP8 (cuBLASLt)": mm.scaled_mm}
    >>> result = sweep.sweep([2048, 4096], impls, x="n", l2="cold", candidate="cuDNN FP8 graph")
    >>> mm.release()
    >>> mm.same_bits  # {2048: True, 4096: True}
    """

    def __init__(self, *, tol: float) -> None:
        self.tol = tol
        self.made: dict[int, tuple[Any, dict[str, Any], Callable[[], None], Callable[[], Any], Callable[[], Any]]] = {}
        """The current size → (problem, inputs, cuDNN, ``torch._scaled_mm`` and bf16 matmul launchers)."""
        self.same_bits: dict[int, bool] = {}
        """Size → whether the cuDNN FP8 output equals ``torch._scaled_mm``'s bit for bit."""

    def setup(self, n: int) -> tuple[Any, dict[str, Any], Callable[[], None], Callable[[], Any], Callable[[], Any]]:
        """Size ``n``'s problem, inputs and three launchers, each checked (made once).

        Parameters
        ----------
        n
            M = N = K.

        Returns
        -------
        tuple
            ``(problem, inputs, cudnn_launch, scaled_mm_launch, bf16_launch)``; the bf16 launcher
            writes into a buffer of its own and returns it.
        """
        import torch

        from cudnn_guide import check
        from cudnn_guide.graphs import fp8

        if n not in self.made:
            self.made.clear()
            torch.cuda.empty_cache()
            p = fp8.Fp8MatmulProblem(m=n, n=n, k=n)
            d = p.make_inputs(seed=n)
            built = fp8.fp8_matmul_graph(p, d, name=f"fp8 matmul {n}")
            launch = built.bind(built.pack(**{key: d[key] for key in built.io}))
            scaled = scaled_mm_launcher(d)
            out = torch.empty_like(d["c"])

            def bf16() -> Any:
                return torch.matmul(d["a"], d["b"], out=out)

            check.poison(d["c"])
            launch()
            ref = check.reference(torch.matmul, d["a"], d["b"])
            check.check(d["c"], ref, name=f"FP8 {n}³", tol=self.tol)
            scaled_out = scaled()
            check.check(scaled_out.unsqueeze(0), ref, name=f"torch._scaled_mm FP8 {n}³", tol=self.tol)
            self.same_bits[n] = torch.equal(d["c"][0], scaled_out)
            check.poison(out)
            check.check(bf16(), ref, name=f"bf16 matmul {n}³")
            self.made[n] = (p, d, launch, scaled, bf16)
        return self.made[n]

    def cudnn_fp8(self, n: int) -> Callable[[], None]:
        """The cuDNN FP8 graph at size ``n``.

        Parameters
        ----------
        n
            M = N = K.

        Returns
        -------
        Callable[[], None]
            Its launcher (checked at this size before it is returned).
        """
        return self.setup(n)[2]

    def scaled_mm(self, n: int) -> Callable[[], Any]:
        """``torch._scaled_mm`` (cuBLASLt FP8) on size ``n``'s FP8 operands (:func:`scaled_mm_launcher`).

        Parameters
        ----------
        n
            M = N = K.

        Returns
        -------
        Callable[[], Any]
            Its launcher (checked at this size before it is returned).
        """
        return self.setup(n)[3]

    def bf16_matmul(self, n: int) -> Callable[[], Any]:
        """``torch.matmul`` (cuBLAS) on size ``n``'s bf16 operands, into a buffer of its own.

        Parameters
        ----------
        n
            M = N = K.

        Returns
        -------
        Callable[[], Any]
            Its launcher (checked at this size before it is returned); it returns the buffer.
        """
        return self.setup(n)[4]

    def release(self) -> None:
        """Drop the last size's buffers and empty torch's cache (:attr:`same_bits` stays)."""
        import torch

        self.made.clear()
        torch.cuda.empty_cache()


class AttentionLengths:
    """The FP8 attention sweep's factories: causal attention at one sequence length at a time.

    Length ``s`` is ``tokens // s`` sequences of ``s`` tokens, ``heads`` heads of ``head_dim``
    (:meth:`problem`). At a new length it drops the previous one, makes the bf16 inputs with
    ``seed=s``, quantizes them (:func:`~cudnn_guide.graphs.fp8.make_sdpa_fp8_inputs`), builds the
    FP8 graph (named ``"fp8 attention <s>"``), the bf16 graph
    (:func:`~cudnn_guide.graphs.attention.sdpa_graph`) and PyTorch's flash-backend launcher, runs
    each once and checks it against PyTorch's attention in fp32, in this order: the FP8 graph's
    dequantized output (check ``"FP8 attention S=<s>"``, tolerance ``tol``), the bf16 graph's
    NaN-poisoned output (``"cuDNN bf16 attention S=<s>"``, bf16's tolerance) and the flash
    backend's (``"SDPA flash (FlashAttention-2) bf16 S=<s>"``, bf16's tolerance). FlashAttention-4
    is checked in :meth:`fa4`.

    Parameters
    ----------
    tokens
        Tokens per length: the batch is ``tokens // s``.
    heads
        Heads.
    head_dim
        Head dimension.
    tol
        The relative-error tolerance of the FP8 check.

    Example
    -------
    >>> at = AttentionLengths(tokens=16384, heads=16, head_dim=128, tol=0.1)
    >>> impls = {"cuDNN FP8 graph": at.cudnn_fp8, "cuDNN bf16 graph": at.cudnn_bf16}
    >>> result = sweep.sweep([2048, 4096], impls, x="seq_len", l2="cold", flops=at.flops,
    ...                      candidate="cuDNN FP8 graph")
    """

    def __init__(self, *, tokens: int, heads: int, head_dim: int, tol: float) -> None:
        self.tokens, self.heads, self.head_dim, self.tol = tokens, heads, head_dim, tol
        self.made: dict[int, tuple[Any, dict[str, Any], Callable[[], None], Callable[[], None], Callable[[], Any]]] = {}
        """The current length → (problem, bf16 inputs, FP8, bf16 and flash-backend launchers)."""

    def problem(self, s: int) -> Any:
        """The causal attention problem at length ``s``.

        Parameters
        ----------
        s
            Tokens per sequence.

        Returns
        -------
        Any
            ``SdpaProblem(batch=tokens // s, heads, seq=s, head_dim, causal=True)``.
        """
        from cudnn_guide.graphs import attention

        return attention.SdpaProblem(
            batch=self.tokens // s, heads=self.heads, seq=s, head_dim=self.head_dim, causal=True
        )

    def flops(self, s: int) -> float:
        """The FLOPs of one call at length ``s`` (causal: half the full score matrix's).

        Parameters
        ----------
        s
            Tokens per sequence.

        Returns
        -------
        float
            FLOPs per call.
        """
        from cudnn_guide.graphs import attention

        return attention.SdpaProblem(batch=self.tokens // s, heads=self.heads, seq=s, head_dim=self.head_dim).flops

    def setup(self, s: int) -> tuple[Any, dict[str, Any], Callable[[], None], Callable[[], None], Callable[[], Any]]:
        """Length ``s``'s problem, bf16 inputs and three launchers, each checked (made once).

        Parameters
        ----------
        s
            Tokens per sequence.

        Returns
        -------
        tuple
            ``(problem, inputs, fp8_launch, bf16_launch, flash_launch)``.
        """
        from torch.nn.attention import SDPBackend

        from cudnn_guide import check
        from cudnn_guide.graphs import attention, fp8
        from cudnn_guide.measure import baselines

        if s not in self.made:
            self.made.clear()
            p = self.problem(s)
            d = p.make_inputs(seed=s)
            q8 = fp8.make_sdpa_fp8_inputs(d["q"], d["k"], d["v"])
            g8 = fp8.sdpa_fp8_graph(p, q8, name=f"fp8 attention {s}")
            g16 = attention.sdpa_graph(p, d)
            l8 = g8.bind(g8.pack(**{key: q8[key] for key in g8.io}))
            l16 = g16.bind(g16.pack(**d))
            attend = baselines.forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True, scale=p.scale)

            def flash() -> Any:
                return attend(d["q"], d["k"], d["v"])

            l8()
            ref = check.reference(p.torch_forward, d["q"], d["k"], d["v"])
            check.check(
                fp8.dequantize(q8["o8"], q8["descale_o"]),
                ref,
                name=f"FP8 attention S={s}",
                tol=self.tol,
            )
            check.poison(d["o"])
            l16()
            check.check(d["o"], ref, name=f"cuDNN bf16 attention S={s}")
            check.check(flash(), ref, name=f"SDPA flash (FlashAttention-2) bf16 S={s}")
            self.made[s] = (p, d, l8, l16, flash)
        return self.made[s]

    def cudnn_fp8(self, s: int) -> Callable[[], None]:
        """The cuDNN FP8 graph at length ``s``.

        Parameters
        ----------
        s
            Tokens per sequence.

        Returns
        -------
        Callable[[], None]
            Its launcher (checked at this length before it is returned).
        """
        return self.setup(s)[2]

    def cudnn_bf16(self, s: int) -> Callable[[], None]:
        """The cuDNN bf16 graph at length ``s``, on the same real values.

        Parameters
        ----------
        s
            Tokens per sequence.

        Returns
        -------
        Callable[[], None]
            Its launcher (checked at this length before it is returned).
        """
        return self.setup(s)[3]

    def flash(self, s: int) -> Callable[[], Any]:
        """PyTorch's SDPA forced to its flash backend (FlashAttention-2), bf16, at length ``s``.

        Parameters
        ----------
        s
            Tokens per sequence.

        Returns
        -------
        Callable[[], Any]
            Its launcher (checked at this length before it is returned).
        """
        return self.setup(s)[4]

    def fa4(self, s: int) -> Callable[[], Any]:
        """FlashAttention-4 in bf16 at length ``s``, checked against PyTorch's attention in fp32 first.

        The check is ``"FA4 bf16 S=<s>"``, at bf16's tolerance.

        Parameters
        ----------
        s
            Tokens per sequence.

        Returns
        -------
        Callable[[], Any]
            Its launcher (:func:`cudnn_guide.measure.fa4.forward`).
        """
        from cudnn_guide import check
        from cudnn_guide.measure import fa4

        p, d = self.setup(s)[:2]
        run = fa4.forward(d["q"], d["k"], d["v"], causal=True, scale=p.scale)
        ref = check.reference(p.torch_forward, d["q"], d["k"], d["v"])
        check.check(run(), ref, name=f"FA4 bf16 S={s}")
        return run


def check_attention(
    problem: Any, inputs: dict[str, Any], fp8_inputs: dict[str, Any], fp8_graph: Any, bf16_graph: Any, *, tol: float
) -> list[Any]:
    """Run one attention problem's FP8 and bf16 graphs once each and check them against fp32.

    Both graphs run (FP8 first), then three checks, in this order, each stopping the page when it
    fails: the dequantized FP8 output (``"cuDNN FP8 attention (dequantized O)"``, tolerance ``tol``),
    the bf16 output (``"cuDNN bf16 attention"``, bf16's tolerance), and the FP8 graph's ``amax_o``
    against the reference's largest magnitude (``"amax_O vs max|O| of the reference"``, ``tol``).

    Parameters
    ----------
    problem
        The :class:`~cudnn_guide.graphs.attention.SdpaProblem`.
    inputs
        Its bf16 ``q``, ``k``, ``v`` and output ``o``.
    fp8_inputs
        From :func:`~cudnn_guide.graphs.fp8.make_sdpa_fp8_inputs` on the same ``q``, ``k``, ``v``.
    fp8_graph
        The built :func:`~cudnn_guide.graphs.fp8.sdpa_fp8_graph`.
    bf16_graph
        The built :func:`~cudnn_guide.graphs.attention.sdpa_graph`.
    tol
        The relative-error tolerance of the FP8 checks.

    Returns
    -------
    list[Any]
        The three passing :class:`~cudnn_guide.check.CheckResult`, in order.

    Example
    -------
    >>> att_checks = check_attention(att, att_in, f8, att8, att16, tol=0.1)
    >>> att_checks[0].rel_error  # the FP8 output's relative error
    """
    import torch

    from cudnn_guide import check
    from cudnn_guide.graphs import fp8

    fp8_pack = fp8_graph.pack(**{key: fp8_inputs[key] for key in fp8_graph.io})
    bf16_pack = bf16_graph.pack(**inputs)
    fp8_graph.execute(fp8_pack)
    bf16_graph.execute(bf16_pack)
    ref = check.reference(problem.torch_forward, inputs["q"], inputs["k"], inputs["v"])
    o_fp8 = fp8.dequantize(fp8_inputs["o8"], fp8_inputs["descale_o"])
    true_amax_o = torch.tensor([float(ref.abs().max())], device=ref.device)
    return [
        check.check(o_fp8, ref, name="cuDNN FP8 attention (dequantized O)", tol=tol),
        check.check(inputs["o"], ref, name="cuDNN bf16 attention"),
        check.check(
            fp8_inputs["amax_o"].reshape(1),
            true_amax_o,
            name="amax_O vs max|O| of the reference",
            tol=tol,
        ),
    ]


def plot_fp8_sweeps(mm_result: Any, att_result: Any, ceiling: float) -> Any:
    """Both sweeps' TFLOP/s side by side: the matmul with a separate probe's bf16 matmul rate, then attention.

    The matmul panel's dashed line is ``ceiling``, the best bf16 matmul of a separate probe
    (:func:`~cudnn_guide.measure.ceilings.measure_ceilings`), and its label says so, with its
    value. Where the sweep's own bf16 matmuls (contenders whose name holds ``bf16``) ran faster
    than it, the label says at which sizes, and that the line is no ceiling there.

    Each panel's legend sits below its axes, under the x label, outside the data: inside the
    axes, wherever it went, it could cover a point (it hid the FP8 attention at S = 4096).

    Parameters
    ----------
    mm_result
        The matmul sweep (size ``n``).
    att_result
        The attention sweep (size ``seq_len``).
    ceiling
        The separate probe's best bf16 matmul, TFLOP/s (``measure_ceilings().bf16_tflops``).

    Returns
    -------
    Any
        The matplotlib figure.

    Example
    -------
    >>> fig = plot_fp8_sweeps(mm_result, att_result, measure_ceilings().bf16_tflops)
    >>> plt.show()
    """
    import matplotlib.pyplot as plt

    from cudnn_guide.report import plot_sweep

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 6.4), layout="constrained")
    plot_sweep(
        mm_result,
        "tflops",
        ax=ax1,
        logx=True,
        title="matmul, n × n × n",
        ceiling=ceiling,
        ceiling_label=_probe_label(mm_result, ceiling),
    )
    plot_sweep(
        att_result,
        "tflops",
        ax=ax2,
        logx=True,
        title="causal attention forward, head dim 128",
    )
    for ax in (ax1, ax2):
        _legend_below(ax)
    return fig


_BELOW_AXES_PT = 40.0
"""How far below its axes' bottom edge a panel's legend starts, in points: past the x axis's tick
labels (``2¹¹``) and its label."""


def _legend_below(ax: Any) -> None:
    """Move ``ax``'s legend (when it has one) below the axes, under the x label, in two columns; a
    constrained layout makes room for it."""
    from matplotlib.transforms import ScaledTranslation

    if ax.get_legend() is None:
        return
    ax.get_legend().remove()
    below = ax.transAxes + ScaledTranslation(0, -_BELOW_AXES_PT / 72, ax.get_figure().dpi_scale_trans)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        bbox_transform=below,
        ncols=2,
        fontsize=9,
        borderaxespad=0.0,
    )


def _probe_label(mm_result: Any, probe: float) -> str:
    """The label of the separate probe's bf16 matmul line, naming the sizes where the sweep's own
    bf16 matmuls ran faster than it."""
    above = sorted(
        {
            m.params[mm_result.x]
            for m in mm_result.measurements
            if "bf16" in m.params.get("impl", "") and m.tflops is not None and m.tflops > probe
        }
    )
    import textwrap

    lines = ["bf16 matmul, separate probe:", f"{probe:.0f} TFLOP/s"]
    if above:
        sizes = "n\N{NO-BREAK SPACE}=\N{NO-BREAK SPACE}" + ", ".join(map(str, above))
        lines += textwrap.wrap(f"(not a ceiling: this sweep's bf16 exceeds it at {sizes})", 30)
    return "\n".join(lines)


def same_kernel_text(same_bits: dict[int, bool], sizes: Sequence[int]) -> str:
    """What the bit-for-bit comparisons with ``torch._scaled_mm`` say, for "The cuDNN graph's output …".

    Parameters
    ----------
    same_bits
        Size → whether the cuDNN FP8 output equalled ``torch._scaled_mm``'s bit for bit
        (:attr:`MatmulSizes.same_bits`).
    sizes
        The sizes, in the sweep's order.

    Returns
    -------
    str
        A clause: equal at every size (the same kernel), at some (named), or at none.

    Example
    -------
    >>> same_kernel_text({2048: False, 4096: False}, [2048, 4096])
    "differs from torch._scaled_mm's at every size: the two run different kernels"
    """
    equal_at = [n for n in sizes if same_bits[n]]
    if len(equal_at) == len(sizes):
        return (
            "equals torch._scaled_mm's bit for bit at every size, so the two "
            "almost certainly run the same kernel, and the GPU-time comparison times that "
            "kernel against itself"
        )
    if equal_at:
        return (
            f"equals torch._scaled_mm's bit for bit at "
            f"{', '.join(f'{n}³' for n in equal_at)} (the same kernel there, almost "
            f"certainly) and differs at the other sizes (different kernels)"
        )
    return "differs from torch._scaled_mm's at every size: the two run different kernels"


def clocks_text(mm_result: Any, sizes: Sequence[int], baseline: str) -> str:
    """A list item: where GPU time and a back-to-back loop disagree on ``baseline``, and where the clock was held down.

    Only sizes whose comparison also ran the loop (``comparison.wall``) with ``baseline`` count
    for the first part. The second part reads the warnings of every measurement at each size:
    where one says the GPU's clock was held down (a power cap or thermal throttling,
    :func:`~cudnn_guide.measure.clocks.throttle_warnings`), it names the sizes, the reasons and
    the lowest SM clock read; otherwise it says that no timed run reports it, or that the clocks
    were not read.

    Parameters
    ----------
    mm_result
        The matmul sweep, with a comparison per size.
    sizes
        The sizes, in the sweep's order.
    baseline
        The baseline whose verdicts are read (``torch._scaled_mm``'s).

    Returns
    -------
    str
        ``"* GPU time and a back-to-back loop disagree: …"``, ``"* At … a back-to-back loop …
        gives the same verdict as GPU time."``, or ``"* No back-to-back loop was timed: …"``,
        then the clocks' sentence.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> c = SimpleNamespace(wall=None, versus={"X": {"verdict": "tie"}}, measurements={})
    >>> text = clocks_text(SimpleNamespace(comparisons={2048: c}), [2048], "X")
    >>> text.startswith("* No back-to-back loop was timed"), text.endswith("The GPU's clocks were not read.")
    (True, True)
    """
    disagree, looped = [], []  # sizes where GPU time and a back-to-back loop disagree; that ran the loop
    for n in sizes:
        c_ = mm_result.comparisons[n]
        if c_.wall is None or baseline not in c_.wall.versus:
            continue
        looped.append(f"{n}³")
        gpu, loop = c_.versus[baseline]["verdict"], c_.wall.versus[baseline]
        if gpu != loop["verdict"]:
            word = {"tie": "a tie", "faster": "faster", "slower": "slower"}
            disagree.append(
                f"at {n}³ cuDNN FP8 is {word[gpu]} by GPU time and {word[loop['verdict']]} "
                f"in a back-to-back loop ({loop['value']:.2f}×, {loop['low']:.2f}–"
                f"{loop['high']:.2f}; the loop's tie band ±{100 * c_.wall.tie_band:.1f}%)"
            )
    if disagree:
        text = (
            "* GPU time and a back-to-back loop disagree: "
            + "; ".join(disagree)
            + ". The GPU-time verdict is the one that applies to launches under CUDA "
            "graphs, where a call's host time is gone; the loop's applies to plain eager "
            "launching, host time included."
        )
    elif looped:
        text = (
            f"* At {', '.join(looped)} a back-to-back loop, host time included, was also "
            "timed: it gives the same verdict as GPU time."
        )
    else:
        text = "* No back-to-back loop was timed: no contender's host time per call came near its GPU time."
    return f"{text} {_held_down_text(mm_result, sizes)}"


_HELD = re.compile(
    r"^(?:(?P<why>.+?) held the clock down|thermal throttling).*?SM clock (?P<mhz>\d+) of (?P<max>\d+) MHz"
)
"""A clock warning of :func:`~cudnn_guide.measure.clocks.throttle_warnings`: its reason and the SM clock read."""


def _held_down_text(mm_result: Any, sizes: Sequence[int]) -> str:
    """Where the measurements' warnings say the GPU's clock was held down: the sizes, the reasons
    and the lowest SM clock read at each; else that none says so, or that the clocks were not read."""
    held: dict[int, tuple[int, int]] = {}
    reasons: list[str] = []
    read = False
    for n in sizes:
        for m in mm_result.comparisons[n].measurements.values():
            read = read or bool(m.clocks.get("read_with"))
            for w in m.warnings:
                hit = _HELD.match(w)
                if hit is None:
                    continue
                why = hit["why"] or "thermal throttling"
                if why not in reasons:
                    reasons.append(why)
                mhz = (int(hit["mhz"]), int(hit["max"]))
                held[n] = min(held.get(n, mhz), mhz)
    if not held:
        return "No timed run reports the GPU's clock held down." if read else "The GPU's clocks were not read."

    def listed(parts: list[str]) -> str:
        return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"

    at = listed([f"{n}³" for n in held])
    lowest = listed([f"{mhz} of {top} MHz at {n}³" for n, (mhz, top) in held.items()])
    return (
        f"The GPU's clock was held down ({', '.join(reasons)}) at {at}: the lowest SM clock read "
        f"after a timed run was {lowest}, so timings there may be slower than this GPU's best."
    )


def error_ratio(fp8_check: Any, bf16_check: Any) -> str:
    """The FP8 relative error against the bf16 one, in words.

    Parameters
    ----------
    fp8_check
        The FP8 output's :class:`~cudnn_guide.check.CheckResult`.
    bf16_check
        The bf16 output's, on the same problem.

    Returns
    -------
    str
        ``"<r>× larger"`` (no decimals) or ``"<1/r>× smaller"`` (one decimal).

    Example
    -------
    >>> from types import SimpleNamespace
    >>> error_ratio(SimpleNamespace(rel_error=3e-2), SimpleNamespace(rel_error=2e-3))
    '15× larger'
    """
    r = fp8_check.rel_error / bf16_check.rel_error
    return f"{r:.0f}× larger" if r >= 1 else f"{1 / r:.1f}× smaller"


def peak_text(result: Any, impl: str) -> str:
    """``impl``'s highest throughput over an attention sweep, with the length it ran at.

    Parameters
    ----------
    result
        The attention sweep (size ``seq_len``).
    impl
        One of its implementations.

    Returns
    -------
    str
        ``"<TFLOP/s> TFLOP/s (S=<seq_len>)"``.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> runs = ((2048, 410.0), (4096, 512.3))
    >>> m = [SimpleNamespace(params={"impl": "X", "seq_len": s}, tflops=t) for s, t in runs]
    >>> peak_text(SimpleNamespace(measurements=m), "X")
    '512 TFLOP/s (S=4096)'
    """
    ms = [m for m in result.measurements if m.params["impl"] == impl]
    best = max(ms, key=lambda m: m.tflops)
    return f"{best.tflops:.0f} TFLOP/s (S={best.params['seq_len']})"
