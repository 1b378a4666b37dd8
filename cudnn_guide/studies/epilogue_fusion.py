"""The matmul-epilogue page's study: when fusing scale → bias → GELU → AMAX into the matmul pays, across K.

The page times one cuDNN graph, ``y = gelu(alpha · (a @ b) + bias)`` with ``amax = max|y|``,
against the same chain in PyTorch (eager and compiled) and against the bare matmul, first at its
base size, then across the reduction dimension K with M = N = 512. This module holds what that
takes besides the lesson's own graph:

* the contenders' names (:data:`CANDIDATE`, :data:`EAGER`, :data:`COMPILED`, :data:`DEFAULT`,
  :data:`BARE`), which the page's records key on;
* :class:`KSweep`: the sweep's contenders at each K, made once on first use, the fused graph and
  the compiled chain each checked against the fp32 reference before anything is timed;
* :func:`gpu_and_loop_lines`: the base size's verdicts, in GPU time and in a back-to-back loop;
* :func:`verdict_rows` and :func:`verdict_table`: the verdicts at every K;
* :func:`conclusions`: the page's conclusions.

The graphs, the checks and the launchers need a GPU; the tables and the sentences do not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cudnn_guide.check import LINE_WIDTH

__all__ = [
    "BARE",
    "CANDIDATE",
    "COMPILED",
    "DEFAULT",
    "EAGER",
    "KSweep",
    "conclusions",
    "gpu_and_loop_lines",
    "verdict_rows",
    "verdict_table",
]

CANDIDATE = "cuDNN graph (fused)"
"""The fused cuDNN graph: the candidate of every comparison on the page."""
EAGER = "PyTorch eager chain"
"""The same chain in eager PyTorch."""
COMPILED = "torch.compile (max-autotune-no-cudagraphs) chain"
"""The chain compiled with ``mode="max-autotune-no-cudagraphs"`` (the base size only)."""
DEFAULT = "torch.compile (default) chain"
"""The chain compiled in the default mode (the base size, and every K of the sweep)."""
BARE = "bare matmul (no epilogue)"
"""``torch.matmul`` alone: a floor, not a competitor (it skips the epilogue)."""

_VERDICT_WORDS = (("faster", "cuDNN is faster"), ("tie", "ties"), ("slower", "cuDNN is slower"))


class KSweep:
    """The contenders of the sweep over K, made once per K when first asked for, and checked.

    At each K the problem is ``MatmulProblem(batch, m, k=K, n, alpha)`` with inputs seeded by K.
    The first launcher asked for at a K makes the case: the graph from ``declare`` (the lesson's
    function) wrapped by :func:`~cudnn_guide.graphs.adopt` as ``"matmul epilogue K=<K>"``, its
    output poisoned, run and checked against the fp32 reference (check ``"K=<K>"``), then the
    chain compiled in the default mode for that shape (``dynamic=False``) and checked (``"compiled
    K=<K>"``). A check that fails stops the sweep.

    Parameters
    ----------
    declare
        ``declare(a, b, bias, y, amax, alpha)`` → ``(graph, variant pack)``: builds the fused graph
        on the given tensors.
    handle
        The cuDNN handle the graphs run on.
    batch
        The batch of every K.
    m
        M, the rows of ``a`` and ``y``.
    n
        N, the columns of ``b`` and ``y``.
    alpha
        The scale.

    Example
    -------
    >>> cases = KSweep(matmul_epilogue, handle)
    >>> impls = cases.factories()  # name → factory(K), in the page's order
    >>> result = sweep.sweep([64, 128], impls, x="K", l2="cold", candidate=CANDIDATE)
    """

    def __init__(
        self,
        declare: Callable[..., tuple[Any, Any]],
        handle: Any,
        *,
        batch: int = 16,
        m: int = 512,
        n: int = 512,
        alpha: float = 0.5,
    ) -> None:
        self.declare, self.handle = declare, handle
        self.batch, self.m, self.n, self.alpha = batch, m, n, alpha
        self.cases: dict[int, tuple[Any, ...]] = {}
        """K → (problem, inputs, built graph, variant pack, bare matmul's output, compiled chain)."""

    def case(self, k: int) -> tuple[Any, ...]:
        """The case at ``k``, made and checked on first use.

        Parameters
        ----------
        k
            The reduction dimension K.

        Returns
        -------
        tuple
            ``(problem, inputs, built graph, variant pack, bare matmul's output, compiled chain)``.

        Example
        -------
        >>> problem, inputs, fused, pack, out, compiled = cases.case(1024)
        """
        if k not in self.cases:
            import torch

            from cudnn_guide import check, graphs
            from cudnn_guide.graphs import matmul
            from cudnn_guide.measure import baselines

            p = matmul.MatmulProblem(batch=self.batch, m=self.m, k=k, n=self.n, alpha=self.alpha)
            ins = p.make_inputs(seed=k)
            gk, pk = self.declare(**ins, alpha=p.alpha)
            f = graphs.adopt(gk, self.handle, name=f"matmul epilogue K={k}")
            ref_k = check.reference(p.torch_forward, ins["a"], ins["b"], ins["bias"])[0]
            check.poison(ins["y"])
            f.execute(pk)
            check.check(ins["y"], ref_k, name=f"K={k}")
            comp = baselines.compile_quietly(p.torch_forward, mode="default", dynamic=False)
            check.check(comp(ins["a"], ins["b"], ins["bias"])[0], ref_k, name=f"compiled K={k}")
            self.cases[k] = (p, ins, f, pk, torch.empty_like(ins["y"]), comp)
        return self.cases[k]

    def fused(self, k: int) -> Callable[[], Any]:
        """The fused graph's launcher at ``k`` (:data:`CANDIDATE`).

        Example
        -------
        >>> cases.fused(1024)()
        """
        c = self.case(k)
        return c[2].bind(c[3])

    def eager(self, k: int) -> Callable[[], Any]:
        """The eager chain at ``k`` (:data:`EAGER`).

        Example
        -------
        >>> cases.eager(1024)()
        """
        p, i = self.case(k)[0], self.case(k)[1]
        return lambda: p.torch_forward(i["a"], i["b"], i["bias"])

    def compiled(self, k: int) -> Callable[[], Any]:
        """The chain compiled in the default mode for ``k`` (:data:`DEFAULT`).

        Example
        -------
        >>> cases.compiled(1024)()
        """
        c, i = self.case(k)[5], self.case(k)[1]
        return lambda: c(i["a"], i["b"], i["bias"])

    def bare(self, k: int) -> Callable[[], Any]:
        """The bare matmul at ``k`` into its own output (:data:`BARE`).

        Example
        -------
        >>> cases.bare(1024)()
        """
        import torch

        i, o = self.case(k)[1], self.case(k)[4]
        return lambda: torch.matmul(i["a"], i["b"], out=o)

    def factories(self) -> dict[str, Callable[[int], Callable[[], Any]]]:
        """Contender name → factory(K), for :func:`~cudnn_guide.measure.sweep.sweep`.

        In the page's order: :data:`CANDIDATE`, :data:`EAGER`, :data:`DEFAULT`, :data:`BARE`.

        Example
        -------
        >>> list(cases.factories()) == [CANDIDATE, EAGER, DEFAULT, BARE]
        True
        """
        return {CANDIDATE: self.fused, EAGER: self.eager, DEFAULT: self.compiled, BARE: self.bare}


"""The longest line :func:`gpu_and_loop_lines` prints; longer ones are wrapped."""


def gpu_and_loop_lines(cmp: Any) -> str:
    """A comparison's verdicts, one line per baseline, in GPU time and in a back-to-back loop; then the tie bands.

    No line is longer than 88 characters: when a baseline's line would be, every baseline's name
    goes on a line of its own and its verdicts on an indented line below it (on two, GPU time then
    loop, where one is still too long).

    Parameters
    ----------
    cmp
        A :class:`~cudnn_guide.measure.compare.Comparison` made with ``wall_clock=True`` (so
        ``cmp.wall`` holds the loop's verdicts).

    Returns
    -------
    str
        ``"<baseline>: GPU time <v>× (<lo>–<hi>), <verdict>; loop wall clock <v>× (<lo>–<hi>),
        <verdict>"`` per baseline (wrapped as above), then ``"tie band: GPU time ±x%, N rounds;
        loop ±y%, M rounds"``.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> v = {"value": 1.5, "low": 1.4, "high": 1.6, "verdict": "faster"}
    >>> w = {"value": 1.0, "low": 0.98, "high": 1.02, "verdict": "tie"}
    >>> wall = SimpleNamespace(versus={"X": w}, tie_band=0.03, rounds=7)
    >>> print(gpu_and_loop_lines(SimpleNamespace(versus={"X": v}, wall=wall, tie_band=0.01, rounds=15)))
    X: GPU time 1.50× (1.40–1.60), faster; loop wall clock 1.00× (0.98–1.02), tie
    tie band: GPU time ±1.0%, 15 rounds; loop ±3.0%, 7 rounds
    """
    said = []
    for name, v in cmp.versus.items():
        w = cmp.wall.versus[name]
        said.append(
            (
                f"{name}:",
                f"GPU time {v['value']:.2f}× ({v['low']:.2f}–{v['high']:.2f}), {v['verdict']};",
                f"loop wall clock {w['value']:.2f}× ({w['low']:.2f}–{w['high']:.2f}), {w['verdict']}",
            )
        )
    lines = []
    if all(len(" ".join(parts)) <= LINE_WIDTH for parts in said):
        lines += [" ".join(parts) for parts in said]
    else:
        for name, gpu, loop in said:
            both = f"    {gpu} {loop}"
            lines += [name, both] if len(both) <= LINE_WIDTH else [name, f"    {gpu}", f"    {loop}"]
    lines.append(
        f"tie band: GPU time ±{100 * cmp.tie_band:.1f}%, {cmp.rounds} rounds; "
        f"loop ±{100 * cmp.wall.tie_band:.1f}%, {cmp.wall.rounds} rounds"
    )
    return "\n".join(lines)


def verdict_rows(result: Any) -> list[dict[str, Any]]:
    """One row per K and baseline: the candidate's speed-up, interval, verdict and tie band, in GPU time and in a loop.

    Parameters
    ----------
    result
        A :class:`~cudnn_guide.measure.sweep.SweepResult` over ``"K"`` with a candidate, each of whose
        comparisons also raced its contenders in back-to-back loops (``wall_clock=True``).

    Returns
    -------
    list[dict[str, Any]]
        Rows with the columns ``"K"``, ``"baseline"``, ``"GPU speed-up"``, ``"GPU in-run 95%
        interval"``, ``"GPU verdict"``, ``"GPU tie band"``, ``"loop speed-up"``, ``"loop in-run
        95% interval"``, ``"loop verdict"`` and ``"loop tie band"``, in the sweep's order.

    Example
    -------
    >>> rows = verdict_rows(result)
    >>> rows[0]["K"], rows[0]["baseline"], rows[0]["loop verdict"]
    """
    rows = []
    for row in result.verdicts():
        loops = result.comparisons[row["K"]].wall
        w = loops.versus[row["baseline"]]
        rows.append(
            {
                "K": row["K"],
                "baseline": row["baseline"],
                "GPU speed-up": row["speed-up"],
                "GPU in-run 95% interval": row["in-run 95% interval"],
                "GPU verdict": row["verdict"],
                "GPU tie band": row["tie band"],
                "loop speed-up": w["value"],
                "loop in-run 95% interval": f"{w['low']:.2f}–{w['high']:.2f}",
                "loop verdict": w["verdict"],
                "loop tie band": f"±{100 * loops.tie_band:.1f}%",
            }
        )
    return rows


def verdict_table(result: Any) -> Any:
    """:func:`verdict_rows` as a table: the speed-ups as ``1.23×``.

    Parameters
    ----------
    result
        The sweep, as for :func:`verdict_rows`.

    Returns
    -------
    Any
        A pandas ``Styler`` (:func:`~cudnn_guide.report.html_table`).

    Example
    -------
    >>> verdict_table(result)
    """
    import pandas as pd

    from cudnn_guide.report import html_table

    frame = pd.DataFrame(verdict_rows(result))
    return html_table(frame, {"GPU speed-up": "{:.2f}×", "loop speed-up": "{:.2f}×"})


def _verdicts_by(clock: Callable[[Any], Any], ks: Sequence[Any], real: Sequence[str]) -> dict[str, dict[str, list]]:
    """For each PyTorch chain, the K values of each verdict of ``clock(K)``."""
    return {
        name: {
            verdict: [kk for kk in ks if clock(kk).versus[name]["verdict"] == verdict]
            for verdict in ("faster", "tie", "slower")
        }
        for name in real
    }


def conclusions(base_cmp: Any, bare: Any, result: Any, ks: Sequence[Any], real: Sequence[str]) -> list[str]:
    """The matmul-epilogue page's conclusions, computed from its measurements and verdicts.

    In order: the fused graph's time at the base size with its verdicts against each chain; what
    its epilogue and the eager chain's cost over the bare matmul; for each PyTorch chain, at which
    K cuDNN is faster, ties or is slower, in GPU time and in a back-to-back loop; where cuDNN loses
    on each clock; the host time per call of each contender across the sweep; and how each one's
    GPU time over the bare matmul's moves from the smallest K to the largest. Each verdict is this
    run's (in-run), and the sentences say so.

    Parameters
    ----------
    base_cmp
        The comparison at the base size (``wall_clock=True``), with :data:`CANDIDATE` and :data:`EAGER`.
    bare
        The bare matmul's measurement at the base size.
    result
        The sweep over ``"K"`` (each comparison with ``wall``), with :data:`CANDIDATE`, :data:`EAGER`,
        :data:`DEFAULT` and :data:`BARE`.
    ks
        The sweep's K values, in order.
    real
        The PyTorch chains the candidate competes with in the sweep (not the bare matmul).

    Returns
    -------
    list[str]
        The sentences, for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> sentences = conclusions(base_cmp, bare, result, ks, [EAGER, DEFAULT])
    """
    f_est = base_cmp.estimate(CANDIDATE, "µs")
    fused_ms, chain_ms = (base_cmp.measurements[name].median_ms for name in (CANDIDATE, EAGER))
    bare_ms = bare.median_ms
    over_mm = result.relative(BARE)  # implementation → {K: its time / the bare matmul's}
    chain, comp, fused = (over_mm[name] for name in (EAGER, DEFAULT, CANDIDATE))
    by_clock = {
        "in GPU time per call": _verdicts_by(lambda kk: result.comparisons[kk], ks, real),
        "in wall-clock time per call of a back-to-back loop": _verdicts_by(
            lambda kk: result.comparisons[kk].wall, ks, real
        ),
    }
    sentences = [
        f"At the base size the fused graph takes {f_est['value']:.1f} µs of GPU time "
        f"(in-run 95% interval {f_est['low']:.1f}–{f_est['high']:.1f}); in this run it is "
        + "; ".join(base_cmp.describe(name) for name in base_cmp.versus)
        + ".",
        f"* Its epilogue costs {100 * (fused_ms / bare_ms - 1):+.0f}% of GPU time over the "
        f"bare matmul (timed just after the rounds); the eager chain's costs "
        f"{100 * (chain_ms / bare_ms - 1):+.0f}%.",
    ]
    for name in real:
        said = []
        for clock, by_verdict in by_clock.items():
            v = by_verdict[name]
            said.append(
                f"{clock}, "
                + ", ".join(
                    f"{word} at K = {', '.join(map(str, v[verdict]))}" for verdict, word in _VERDICT_WORDS if v[verdict]
                )
            )
        sentences.append(f"* Against {name}, across the sweep, in this run: {'; '.join(said)}.")
    for clock, by_verdict in by_clock.items():
        losses = {name: by_verdict[name]["slower"] for name in real if by_verdict[name]["slower"]}
        if losses:
            where = "; ".join(
                f"to {name} at {len(lost)} of {len(ks)} K values (K = {', '.join(map(str, lost))})"
                for name, lost in losses.items()
            )
            sentences.append(f"Where cuDNN loses {clock}, in this run: {where}.")
        else:
            sentences.append(
                f"{clock[0].upper()}{clock[1:]}, in this run, cuDNN loses to no PyTorch chain at any K of the sweep."
            )
    hosts = []
    for name in (CANDIDATE, *real):
        at = {kk: result.comparisons[kk].measurements[name] for kk in ks}
        host = {kk: m.host_median_ms for kk, m in at.items() if m.host_median_ms}
        if host:
            over = [kk for kk in host if host[kk] > at[kk].median_ms]
            above = f"K = {', '.join(map(str, over))}" if over else "no K"
            hosts.append(
                f"{name} {1e3 * min(host.values()):.0f}–{1e3 * max(host.values()):.0f} µs "
                f"(above its GPU time at {above})"
            )
    if hosts:
        sentences.append(
            "* Host time per call across the sweep (one call after a synchronize, in the "
            "first round; GPU time leaves it out, the loop's wall clock does not): " + "; ".join(hosts) + "."
        )
    sentences.append(
        f"* Across the sweep the eager chain's GPU time over the bare matmul's goes from "
        f"{chain[ks[0]]:.2f}× at K={ks[0]} to {chain[ks[-1]]:.2f}× at K={ks[-1]}; "
        f"torch.compile's (default) from {comp[ks[0]]:.2f}× to {comp[ks[-1]]:.2f}×; "
        f"the fused graph's from {fused[ks[0]]:.2f}× to {fused[ks[-1]]:.2f}×."
    )
    return sentences
