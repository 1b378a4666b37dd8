"""Causal attention raced from 1k to 16k tokens against PyTorch's SDPA backends and FlashAttention-4: the causal-SDPA
page's study.

The causal-SDPA page's lesson builds causal attention as one cuDNN graph with its own builder,
``build(q, k, v, o) -> (graph, variant pack)``, which the functions here are given. This module holds how the page
checks that graph and races it:

* :func:`one_hot_probe`: the causal mask itself, read off the output with one-hot values;
* :func:`backends`, :func:`torch_sdpa` and :func:`checked`: PyTorch's SDPA forced onto one backend at a time, under
  the page's names (:data:`BACKEND_NAMES`), and the one line each contender's check prints;
* :func:`problem_at` and :func:`sweep_lengths`: the sweep over sequence lengths, one per head dim, every point
  16,384 tokens with a model width of 2048;
* :func:`plot_by_head_dim`: the figure, one panel per head dim;
* :func:`peaks`, :func:`others`, :func:`fastest_other` and :func:`conclusions`: the peak throughputs, the
  verdicts that count (PyTorch's cuDNN backend runs cuDNN's own kernel and does not), and the page's sentences.

The probe and the sweep need a GPU; the names, the shapes, the figure and the sentences do not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cudnn_guide.measure import baselines

__all__ = [
    "BACKEND_NAMES",
    "TOKENS",
    "WIDTH",
    "backends",
    "checked",
    "conclusions",
    "fastest_other",
    "one_hot_probe",
    "others",
    "peaks",
    "plot_by_head_dim",
    "problem_at",
    "sweep_lengths",
    "torch_sdpa",
]

BACKEND_NAMES = baselines.SDPA_BACKEND_NAMES
""":func:`~cudnn_guide.measure.baselines.sdpa_backends`' names → the names the page gives them (on torch 2.11 the
flash backend is FlashAttention-2)."""

TOKENS = 16384
"""Tokens per batch at every sweep point: ``batch = TOKENS // seq``."""

WIDTH = 2048
"""Model width at every sweep point: ``heads = WIDTH // head_dim``."""


def backends() -> dict[str, Any]:
    """PyTorch's fused attention backends under the page's names, in the order of
    :func:`~cudnn_guide.measure.baselines.sdpa_backends`.

    Returns
    -------
    dict[str, Any]
        Display name (:data:`BACKEND_NAMES`) → ``torch.nn.attention.SDPBackend``.

    Example
    -------
    >>> list(backends())[0]
    'PyTorch SDPA, flash backend (FlashAttention-2)'
    """
    return {BACKEND_NAMES.get(n, n): be for n, be in baselines.sdpa_backends().items()}


def torch_sdpa(backend: Any, problem: Any, q: Any, k: Any, v: Any) -> Callable[[], Any]:
    """A launcher of PyTorch's ``scaled_dot_product_attention`` under ``sdpa_kernel([backend])``, on ``q, k, v``.

    Parameters
    ----------
    backend
        A ``torch.nn.attention.SDPBackend``; one that cannot run the inputs raises.
    problem
        The :class:`~cudnn_guide.graphs.attention.SdpaProblem`: its ``causal`` and ``scale``.
    q
        B×H×S×D queries.
    k
        B×H×S×D keys.
    v
        B×H×S×D values.

    Returns
    -------
    Callable[[], Any]
        Zero-argument launcher returning the B×H×S×D output.

    Example
    -------
    >>> fn = torch_sdpa(SDPBackend.FLASH_ATTENTION, problem, q, k, v)
    >>> out = fn()
    """
    attend = baselines.forced_sdpa(backend, is_causal=problem.causal, scale=problem.scale)
    return lambda: attend(q, k, v)


def checked(reference: Any, name: str) -> Callable[[Any], str]:
    """A check for :func:`~cudnn_guide.measure.baselines.admit`: an output against ``reference``, as one short line.

    The check joins the running example's record (:func:`cudnn_guide.check.check`); a failed one raises.

    Parameters
    ----------
    reference
        The fp32 reference output.
    name
        The contender's name, as the check's name.

    Returns
    -------
    Callable[[Any], str]
        ``run(out)`` returning ``"<name>: rel. error <e> (tolerance <t>)"``.

    Example
    -------
    >>> baselines.admit(available, name, fn, check=checked(ref, name))
    """
    from cudnn_guide import check

    def run(out: Any) -> str:
        c = check.check(out, reference, name=name)
        return f"{c.name}: rel. error {c.rel_error:.1e} (tolerance {c.tolerance:.1e})"

    return run


def one_hot_probe(build: Callable[..., tuple[Any, Any]], handle: Any) -> tuple[float, float]:
    """The causal mask read off the output: ``build``'s graph on one sequence of 128 tokens with one-hot values.

    With ``v`` the 128×128 identity (head dim 128), row *i* of the output is query *i*'s attention weights over the
    keys; a causal mask lets no weight fall on a key ``j > i``. The output is filled with NaN first
    (:func:`cudnn_guide.check.poison`), so an element the graph never wrote shows.

    Parameters
    ----------
    build
        The page's builder: ``build(q=, k=, v=, o=)`` returns the built graph and its variant pack.
    handle
        The ``cudnn.Handle`` the graph is built with.

    Returns
    -------
    tuple[float, float]
        The largest weight on a future key (0 for a correct mask), and how far the rows' sums are from 1 at most.

    Example
    -------
    >>> future_mass, row_sum = one_hot_probe(causal_sdpa, handle)
    """
    import torch

    from cudnn_guide import check, graphs
    from cudnn_guide.graphs import attention

    small = attention.SdpaProblem(batch=1, heads=1, seq=128, head_dim=128, causal=True)
    s_in = small.make_inputs(seed=1)
    eye = torch.eye(128, device="cuda", dtype=torch.bfloat16)
    s_in["v"] = eye.reshape(1, 1, 128, 128).contiguous()
    small_graph, small_pack = build(**s_in)
    check.poison(s_in["o"])
    graphs.adopt(small_graph, handle, name="one-hot probe").execute(small_pack)
    probs = s_in["o"][0, 0].float()  # row i = attention weights of query i over keys
    future_mass = torch.triu(probs, diagonal=1).abs().max().item()
    row_sum = (probs.sum(-1) - 1).abs().max().item()
    return future_mass, row_sum


def problem_at(s: int, d: int) -> Any:
    """The sweep's causal problem at length ``s`` and head dim ``d``: :data:`TOKENS` tokens, width :data:`WIDTH`.

    Parameters
    ----------
    s
        Sequence length; the batch is ``16384 // s``.
    d
        Head dim; the heads are ``2048 // d``.

    Returns
    -------
    Any
        The :class:`~cudnn_guide.graphs.attention.SdpaProblem`.

    Example
    -------
    >>> problem_at(4096, 128)  # 4 sequences, 16 heads
    """
    from cudnn_guide.graphs import attention

    return attention.SdpaProblem(batch=TOKENS // s, heads=WIDTH // d, seq=s, head_dim=d, causal=True)


def sweep_lengths(
    build: Callable[..., tuple[Any, Any]],
    handle: Any,
    seqs: Sequence[int],
    dims: Sequence[int],
    backends: Mapping[str, Any],
    *,
    fa4_name: str | None = None,
    rounds: int = 7,
) -> dict[int, Any]:
    """For each head dim, the cuDNN graph raced against every backend at every length: one sweep each.

    Each head dim ``d`` is one :func:`~cudnn_guide.measure.sweep.sweep` over ``seqs`` (``x="seq_len"``, cold L2,
    FLOPs of :func:`problem_at`, at most ``rounds`` interleaved rounds per length) with the candidate
    ``"cuDNN graph, d=<d>"``, then ``"<backend>, d=<d>"`` for each of ``backends`` in order and, with ``fa4_name``,
    ``"<fa4_name>, d=<d>"``. At each length the cuDNN graph is built first (``build`` on the problem's inputs, seed
    ``s + d``) and the other contenders run on its inputs; a PyTorch backend that raises ``RuntimeError`` on its
    first call is left out of that length ("—"). After each head dim its inputs are released and
    ``torch.cuda.empty_cache()`` runs.

    Parameters
    ----------
    build
        The page's builder: ``build(q=, k=, v=, o=)`` returns the built graph and its variant pack.
    handle
        The ``cudnn.Handle`` the graphs are built with.
    seqs
        Sequence lengths.
    dims
        Head dims, in sweep order.
    backends
        Display name → ``SDPBackend`` (:func:`backends`).
    fa4_name
        FlashAttention-4's name when it is admitted (its launcher: :func:`cudnn_guide.measure.fa4.forward`);
        ``None`` leaves it out.
    rounds
        The most interleaved rounds per length.

    Returns
    -------
    dict[int, Any]
        Head dim → its :class:`~cudnn_guide.measure.sweep.SweepResult`, with a comparison per length.

    Example
    -------
    >>> sweeps = sweep_lengths(causal_sdpa, handle, [1024, 2048], [64, 128], backends(), fa4_name=FA4)
    """
    import torch

    from cudnn_guide import graphs
    from cudnn_guide.measure import fa4, sweep

    built: dict[tuple[int, int], tuple[Any, dict[str, Any]]] = {}

    def cudnn_at(d: int) -> Callable[[int], Any]:
        def factory(s: int) -> Any:
            p = problem_at(s, d)
            ins = p.make_inputs(seed=s + d)
            gs, pk = build(**ins)
            built[(s, d)] = (p, ins)
            return graphs.adopt(gs, handle, name=f"sdpa S={s} D={d}").bind(pk)

        return factory

    def torch_at(backend: Any, d: int) -> Callable[[int], Any]:
        def factory(s: int) -> Any:
            p, ins = built[(s, d)]
            fn = torch_sdpa(backend, p, ins["q"], ins["k"], ins["v"])
            try:
                fn()
            except RuntimeError:
                return None  # this backend cannot run this shape: shown as "—"
            return fn

        return factory

    def fa4_at(d: int) -> Callable[[int], Any]:
        def factory(s: int) -> Any:
            p, ins = built[(s, d)]
            return fa4.forward(ins["q"], ins["k"], ins["v"], causal=True, scale=p.scale)

        return factory

    sweeps = {}
    for d in dims:
        impls = {f"cuDNN graph, d={d}": cudnn_at(d)}
        impls.update({f"{n}, d={d}": torch_at(be, d) for n, be in backends.items()})
        if fa4_name is not None:
            impls[f"{fa4_name}, d={d}"] = fa4_at(d)
        sweeps[d] = sweep.sweep(
            seqs,
            impls,
            x="seq_len",
            l2="cold",
            flops=lambda s, d=d: problem_at(s, d).flops,
            candidate=f"cuDNN graph, d={d}",
            rounds=rounds,
        )
        built.clear()
        torch.cuda.empty_cache()
    return sweeps


def plot_by_head_dim(measurements: Sequence[Any], dims: Sequence[int], ceiling: float) -> Any:
    """TFLOP/s against sequence length, one panel per head dim, stacked so that each stays readable on a narrow screen.

    PyTorch's cuDNN backend runs the same kernel as the cuDNN graph, so their lines lie on each other: the cuDNN
    graph's is drawn above every other line, thicker and with diamond markers, and the backend's dashed with hollow
    markers.

    Parameters
    ----------
    measurements
        The sweeps' measurements; a panel shows those whose ``impl`` ends in ``"d=<d>"``.
    dims
        Head dims, one panel each, top to bottom.
    ceiling
        The datasheet dense bf16 peak, TFLOP/s, drawn dashed.

    Returns
    -------
    Any
        The matplotlib figure.

    Example
    -------
    >>> plot_by_head_dim(measurements, [64, 128], ceil.peak_bf16_tflops)
    >>> plt.show()
    """
    import matplotlib.pyplot as plt

    from cudnn_guide.report import plot_lines

    size = (8, 4 * len(dims))
    fig, axes = plt.subplots(len(dims), 1, figsize=size, layout="constrained", sharex=True, squeeze=False)
    for ax, d in zip(axes[:, 0], dims):
        plot_lines(
            [m for m in measurements if m.params["impl"].endswith(f"d={d}")],
            x="seq_len",
            metric="tflops",
            ax=ax,
            logx=True,
            title=f"causal attention, head dim {d}",
            ceiling=ceiling,
            ceiling_label="datasheet dense bf16 peak",
        )
        _cudnn_graph_on_top(ax, f"cuDNN graph, d={d}")
        ax.legend(fontsize=7)
    return fig


def _cudnn_graph_on_top(ax: Any, candidate: str) -> None:
    """Draw ``candidate``'s line above every other line, thicker and with diamond markers, and PyTorch's cuDNN
    backend (which runs the same kernel and so lies on it) dashed with hollow markers, so that both show."""
    lines = ax.get_lines()
    top = max((line.get_zorder() for line in lines), default=2)
    for line in lines:
        name = line.get_label().replace("\n", " ")
        if name == candidate:
            line.set(zorder=top + 1, marker="D", markersize=6, linewidth=2.4)
        elif "cuDNN backend" in name:
            line.set(linestyle="--", marker="o", markersize=9, markerfacecolor="none", markeredgewidth=1.5)


def others(cmp: Any) -> dict[str, str]:
    """Verdicts against the other implementations: PyTorch's cuDNN backend calls cuDNN's own fused attention, so a
    tie with it is expected and it is not counted.

    Parameters
    ----------
    cmp
        One length's :class:`~cudnn_guide.measure.compare.Comparison`.

    Returns
    -------
    dict[str, str]
        Contender → verdict, every contender but those named ``"... cuDNN backend ..."``.

    Example
    -------
    >>> others(sweeps[128].comparisons[4096])  # {"PyTorch SDPA, flash backend ..., d=128": "faster", ...}
    """
    return {n: v["verdict"] for n, v in cmp.versus.items() if "cuDNN backend" not in n}


def fastest_other(cmp: Any) -> str:
    """The fastest contender of :func:`others` by its pooled median time: the one a record's comparison names.

    Parameters
    ----------
    cmp
        One length's :class:`~cudnn_guide.measure.compare.Comparison`.

    Returns
    -------
    str
        The contender's name.

    Example
    -------
    >>> comparison("d=128, S=4096: speed-up over ...", cmp, fastest_other(cmp))
    """
    return min(others(cmp), key=lambda n: cmp.measurements[n].median_ms)


def peaks(sweeps: Mapping[int, Any], seqs: Sequence[int]) -> dict[int, tuple[int, dict[str, float]]]:
    """Each head dim's peak: the length where the cuDNN graph's pooled TFLOP/s is highest, and its estimate there.

    Parameters
    ----------
    sweeps
        Head dim → :class:`~cudnn_guide.measure.sweep.SweepResult` (:func:`sweep_lengths`).
    seqs
        The lengths swept.

    Returns
    -------
    dict[int, tuple[int, dict[str, float]]]
        Head dim → (length, the comparison's TFLOP/s estimate of ``"cuDNN graph, d=<d>"`` there).

    Example
    -------
    >>> peak_s, est = peaks(sweeps, seqs)[128]
    >>> est["value"], est["low"], est["high"]
    """
    out = {}
    for d, sw in sweeps.items():
        cand = f"cuDNN graph, d={d}"
        cmps = sw.comparisons
        peak_s = max(seqs, key=lambda s: cmps[s].measurements[cand].tflops)
        out[d] = (peak_s, cmps[peak_s].estimate(cand, "TFLOP/s"))
    return out


def _counted(counts: Sequence[tuple[str, int]], n: int, what: str) -> str:
    """``"is faster at 2 and is slower at 3 of 5 <what>"``: the non-zero counts only; ``"... at all 5 <what>"`` when
    one count is all of them."""
    said = [(word, k) for word, k in counts if k]
    if len(said) == 1:
        return f"{said[0][0]} at all {n} {what}" if n > 1 else f"{said[0][0]} at the one {what.rstrip('s')}"
    parts = [f"{word} at {k}" for word, k in said]
    return f"{', '.join(parts[:-1])} and {parts[-1]} of {n} {what}"


def _lengths_won(fastest: int, tied: int, n: int) -> str:
    """This run's lengths where the cuDNN graph beats every other implementation, and those where it beats or ties
    them all without beating them all, said without a zero count."""
    if fastest == n:
        return f"In this run it is faster than every other implementation at all {n} lengths"
    if fastest and tied:
        return (
            f"In this run it is faster than every other implementation at {fastest} of {n} lengths, "
            f"and at {tied} more it is slower than none of them"
        )
    if fastest:
        return f"In this run it is faster than every other implementation at {fastest} of {n} lengths"
    if tied:
        return (
            f"In this run it is slower than none of the other implementations at {tied} of {n} lengths, "
            "but faster than all of them at none"
        )
    return f"In this run some other implementation is faster than it at every one of the {n} lengths"


def conclusions(
    sweeps: Mapping[int, Any],
    seqs: Sequence[int],
    peaks: Mapping[int, tuple[int, Mapping[str, float]]],
    *,
    peak_tflops: float,
    fa4_name: str,
    fa4_detail: str,
) -> list[str]:
    """The page's conclusions, from the verdicts: per head dim, the peak, the lengths won, FlashAttention-4 alone, and
    each contender's line of :meth:`~cudnn_guide.measure.sweep.SweepResult.describe_verdicts`.

    A length counts as "faster than every other implementation" when every verdict of :func:`others` is
    ``"faster"``, and as "slower than none of them" (beyond those) when none is ``"slower"``. The verdicts are the
    comparisons' in-run ones, which the record widens for drift, so every count says "in this run"; a count of zero
    is left unsaid.

    Parameters
    ----------
    sweeps
        Head dim → :class:`~cudnn_guide.measure.sweep.SweepResult` (:func:`sweep_lengths`).
    seqs
        The lengths swept.
    peaks
        :func:`peaks`' result.
    peak_tflops
        The datasheet dense bf16 peak, TFLOP/s.
    fa4_name
        FlashAttention-4's label (:func:`cudnn_guide.measure.fa4.label`).
    fa4_detail
        Why FlashAttention-4 is unavailable (:func:`cudnn_guide.measure.fa4.status`), said when it was not timed.

    Returns
    -------
    list[str]
        Sentences for :class:`~cudnn_guide.report.prose.Prose`, head dim by head dim.

    Example
    -------
    >>> Prose(*conclusions(sweeps, seqs, peaks(sweeps, seqs), peak_tflops=989, fa4_name=FA4, fa4_detail=why))
    """
    sentences = []
    for d, sw in sweeps.items():
        cmps = sw.comparisons
        peak_s, est = peaks[d]
        fastest = sum(all(v == "faster" for v in others(cmps[s]).values()) for s in seqs)
        tied = sum(all(v != "slower" for v in others(cmps[s]).values()) for s in seqs)
        tied -= fastest
        share = 100 * est["value"] / peak_tflops
        sentences.append(
            f"At head dim {d} the cuDNN graph (heuristics A) peaks at "
            f"{est['value']:.0f} TFLOP/s (S={peak_s}, {share:.0f}% of the "
            f"datasheet bf16 peak). {_lengths_won(fastest, tied, len(seqs))} "
            "(PyTorch's cuDNN backend runs cuDNN's own kernel and is not counted)."
        )
        key = f"{fa4_name}, d={d}"
        fa = [cmps[s].versus[key]["verdict"] for s in seqs if key in cmps[s].versus]
        if fa:
            counts = [("is faster", fa.count("faster")), ("ties", fa.count("tie")), ("is slower", fa.count("slower"))]
            sentences.append(
                f"Against {fa4_name} alone, at head dim {d}, in this run cuDNN {_counted(counts, len(fa), 'lengths')}."
            )
        else:
            sentences.append(f"{fa4_name} was not timed at head dim {d}: {fa4_detail}.")
        described = sw.describe_verdicts().splitlines()
        sentences += ["* In this run, " + line.strip() for line in described if line.strip()]
    return sentences
