"""The environment page's study: copy bandwidth and bf16 matmul throughput by size, against this GPU's ceilings.

The page sweeps device-to-device copies over buffer sizes, with a hot and with a cold L2, and
square bf16 matmuls over ``n``, beside the ceilings that
:func:`~cudnn_guide.measure.ceilings.measure_ceilings` measures for every other page. This module
holds what that takes besides the sweeps themselves:

* :class:`DeviceCopies` and :class:`SquareMatmuls`: the sweeps' factories, which make each size's
  tensors and hold them until cleared, each with its check (a timed copy must copy, a timed matmul
  must compute the product);
* :func:`ceiling_lines`: the two measured ceilings, one line each;
* :func:`ceiling_figure`: the two sweeps, each against its ceiling;
* :func:`conclusions`: the page's conclusions.

The factories and the checks need a GPU; the lines, the figure and the sentences do not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "COPY_CHECK",
    "MATMUL",
    "DeviceCopies",
    "SquareMatmuls",
    "ceiling_figure",
    "ceiling_lines",
    "conclusions",
]

COPY_CHECK = "device copy"
"""The name of the copy's check."""
MATMUL = "bf16 matmul (cuBLAS)"
"""The name of the matmul's check (and of the page's matmul sweep)."""


class DeviceCopies:
    """Device-to-device copies of float32 buffers, by size in MiB: a factory for the copy sweep.

    Each :meth:`of` makes a random source buffer and an empty destination of ``size_mib`` MiB on
    the GPU and holds both in :attr:`held` until :meth:`clear`.

    Example
    -------
    >>> copies = DeviceCopies()
    >>> print(copies.check(64))
    >>> result = sweep.sweep([1, 4, 16], {"copy, hot L2": copies.of}, x="size_mib", l2="hot")
    >>> copies.clear()
    """

    def __init__(self) -> None:
        self.held: dict[int, tuple[Any, Any]] = {}
        """Size in MiB → ``(source, destination)``."""

    def of(self, size_mib: int) -> Callable[[], Any]:
        """A launcher of one copy of ``size_mib`` MiB (``size_mib · 2**20 // 4`` float32 elements).

        Parameters
        ----------
        size_mib
            The buffer's size, MiB.

        Returns
        -------
        Callable[[], Any]
            ``dst.copy_(src)``: returns the destination.

        Example
        -------
        >>> copies.of(64)()
        """
        import torch

        n = size_mib * 2**20 // 4
        src = torch.randn(n, device="cuda")
        dst = torch.empty_like(src)
        self.held[size_mib] = (src, dst)
        return lambda: dst.copy_(src)

    def check(self, size_mib: int = 64) -> Any:
        """Copy once at ``size_mib`` and check the destination against the source (:data:`COPY_CHECK`),
        then :meth:`clear`.

        Parameters
        ----------
        size_mib
            The buffer's size, MiB.

        Returns
        -------
        Any
            The passing :class:`~cudnn_guide.check.CheckResult`.

        Raises
        ------
        CheckFailedError
            The copy did not copy.

        Example
        -------
        >>> print(copies.check(64))
        """
        from cudnn_guide import check

        result = check.check(self.of(size_mib)(), self.held[size_mib][0], name=COPY_CHECK)
        self.clear()
        return result

    def clear(self) -> None:
        """Let go of every buffer held.

        Example
        -------
        >>> copies.clear()
        """
        self.held.clear()


class SquareMatmuls:
    """``torch.matmul`` (cuBLAS) of random bf16 n×n matrices, by ``n``: a factory for the matmul sweep.

    Each :meth:`of` makes ``a`` and ``b`` (random: zeros run faster and would inflate the ceiling)
    and an empty output ``c`` on the GPU, and holds them in :attr:`held` until :meth:`clear`.

    Example
    -------
    >>> matrices = SquareMatmuls()
    >>> print(matrices.check(2048))
    >>> result = sweep.sweep([1024, 2048], {MATMUL: matrices.of}, x="n", l2="cold")
    >>> matrices.clear()
    """

    def __init__(self) -> None:
        self.held: dict[int, tuple[Any, Any, Any]] = {}
        """``n`` → ``(a, b, c)``."""

    def of(self, n: int) -> Callable[[], Any]:
        """A launcher of one n×n×n bf16 matmul into its own output.

        Parameters
        ----------
        n
            The matrices' size.

        Returns
        -------
        Callable[[], Any]
            ``torch.matmul(a, b, out=c)``.

        Example
        -------
        >>> matrices.of(4096)()
        """
        import torch

        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        self.held[n] = (a, b, c)
        return lambda: torch.matmul(a, b, out=c)

    def check(self, n: int = 2048) -> Any:
        """Multiply once at ``n`` and check the product against an fp32 reference, TF32 off
        (:data:`MATMUL`); that size's matrices are then let go.

        Parameters
        ----------
        n
            The matrices' size.

        Returns
        -------
        Any
            The passing :class:`~cudnn_guide.check.CheckResult`.

        Raises
        ------
        CheckFailedError
            The product is wrong.

        Example
        -------
        >>> print(matrices.check(2048))
        """
        import torch

        from cudnn_guide import check

        self.of(n)()
        a, b, c = self.held.pop(n)
        return check.check(c, check.reference(torch.matmul, a, b), name=MATMUL)

    def clear(self) -> None:
        """Let go of every matrix held.

        Example
        -------
        >>> matrices.clear()
        """
        self.held.clear()


def ceiling_lines(ceilings: Any) -> str:
    """The two measured ceilings, one line each: time per call, rate, and the SM clock at the end.

    Parameters
    ----------
    ceilings
        The :class:`~cudnn_guide.measure.ceilings.Ceilings`.

    Returns
    -------
    str
        ``"<label>: <t> µs, <GB/s> GB/s (SM clock <mhz> MHz at end)"`` for the copy, then the same
        line in TFLOP/s for the best matmul (``?`` where the clock was not read).

    Example
    -------
    >>> print(ceiling_lines(measure_ceilings()))
    """
    lines = []
    for m, value in (
        (ceilings.copy, f"{ceilings.copy_gbps:.0f} GB/s"),
        (ceilings.matmul, f"{ceilings.bf16_tflops:.0f} TFLOP/s"),
    ):
        mhz = m.clocks.get("sm_mhz_end", "?")
        lines.append(f"{m.label}: {m.median_ms * 1e3:.1f} µs, {value} (SM clock {mhz} MHz at end)")
    return "\n".join(lines)


def ceiling_figure(
    copy_measurements: Sequence[Any], matmul_measurements: Sequence[Any], ceilings: Any, l2_mib: float
) -> Any:
    """Two panels: copy bandwidth against buffer size (the L2's size marked), and matmul TFLOP/s against ``n``.

    Each panel draws its measured ceiling as a dashed line; both x axes are base-2 logarithmic.

    Parameters
    ----------
    copy_measurements
        The copy sweeps' measurements (``params["size_mib"]``), hot and cold.
    matmul_measurements
        The matmul sweep's measurements (``params["n"]``).
    ceilings
        The :class:`~cudnn_guide.measure.ceilings.Ceilings`.
    l2_mib
        The L2 cache's size, MiB (the environment's ``l2_mib``).

    Returns
    -------
    Any
        The matplotlib figure.

    Example
    -------
    >>> fig = ceiling_figure(copy_measurements, matmul_result.measurements, ceilings, env.l2_mib)
    >>> plt.show()
    """
    import matplotlib.pyplot as plt

    from cudnn_guide.report import plot_lines

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    plot_lines(
        copy_measurements,
        x="size_mib",
        metric="gbps",
        ax=ax1,
        logx=True,
        title="device copy (read + write)",
        ceiling=ceilings.copy_gbps,
        ceiling_label=f"ceiling: {ceilings.copy_gbps:.0f} GB/s",
    )
    ax1.axvline(l2_mib, color="0.6", linestyle=":", label=f"L2 = {l2_mib:.0f} MiB")
    ax1.legend(fontsize=8)
    ax1.set_xlabel("buffer size (MiB)")
    plot_lines(
        matmul_measurements,
        x="n",
        metric="tflops",
        ax=ax2,
        logx=True,
        title="bf16 matmul n×n×n, cold L2",
        ceiling=ceilings.bf16_tflops,
        ceiling_label=f"ceiling: {ceilings.bf16_tflops:.0f} TFLOP/s",
    )
    ax2.set_xlabel("n")
    ax2.legend(fontsize=8)
    return fig


def _fastest_matmul(peak_mm: Any, ceilings: Any) -> str:
    """The sweep's fastest matmul; where it beats the measured ceiling, by how much and why it can."""
    said = f"* The fastest matmul in the sweep is n={peak_mm.params['n']} at {peak_mm.tflops:.0f} TFLOP/s"
    if peak_mm.tflops <= ceilings.bf16_tflops:
        return said + "."
    over = 100 * (peak_mm.tflops / ceilings.bf16_tflops - 1)
    said += f", {over:.1f}% above the measured ceiling ({ceilings.bf16_tflops:.0f} TFLOP/s)"
    bound = " (the datasheet's peak is)" if ceilings.peak_bf16_tflops else ""
    mhz, ceiling_mhz = peak_mm.clocks.get("sm_mhz_end"), ceilings.matmul.clocks.get("sm_mhz_end")
    if not all(isinstance(x, (int, float)) for x in (mhz, ceiling_mhz)):
        return (
            f"{said}: a measured ceiling is the best of a few sizes in one run, at whatever clock the GPU "
            f"held then, not a bound{bound}."
        )
    clocks = f"the SM clock at {mhz:.0f} MHz, the ceiling's ({ceilings.matmul.label}) at {ceiling_mhz:.0f} MHz"
    if mhz > ceiling_mhz:
        return (
            f"{said}: its run ended with {clocks}. A measured ceiling holds at its own run's clock, which "
            f"the power cap lowers under dense work; it is not a bound{bound}."
        )
    return (
        f"{said}, though its run ended with {clocks}: a measured ceiling is the best of a few sizes in one "
        f"run, not a bound{bound}."
    )


def conclusions(
    env: Any,
    ceilings: Any,
    copy_results: Mapping[str, Any],
    matmul_result: Any,
    launch_cost: Mapping[str, float],
    sizes_mib: Sequence[int],
    *,
    small_mib: int = 16,
) -> list[str]:
    """The environment page's conclusions, computed from its measurements.

    In order: the two ceilings and the ridge point; the ceilings as shares of the datasheet's
    peaks (where the GPU is listed); a ``small_mib`` copy with a hot and with a cold L2; the
    largest copy, hot against cold; the fastest matmul of the sweep (and, where it beats the measured
    ceiling, by how much and why it can: the two runs' SM clocks at their ends where both were read,
    and that a measured ceiling is not a bound); the launch cost per timed call; and the copies too
    short to time per call, if any.

    Parameters
    ----------
    env
        The :class:`~cudnn_guide.environment.EnvironmentRecord` (its ``gpu`` and ``l2_mib``).
    ceilings
        The :class:`~cudnn_guide.measure.ceilings.Ceilings`.
    copy_results
        ``"hot"`` and ``"cold"`` → that copy sweep's :class:`~cudnn_guide.measure.sweep.SweepResult`,
        its contender named ``"copy, <hot|cold> L2"``.
    matmul_result
        The matmul sweep (``params["n"]``).
    launch_cost
        :func:`~cudnn_guide.measure.events.launch_cost`'s result (its ``overhead_us``).
    sizes_mib
        The copy sweep's sizes, ascending.
    small_mib
        The size of the small copy compared hot against cold (one of ``sizes_mib``).

    Returns
    -------
    list[str]
        The sentences, for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> lines = conclusions(env, ceilings, copy_results, matmul_result, launch_cost, sizes_mib)
    """
    copy_measurements = copy_results["hot"].measurements + copy_results["cold"].measurements
    hot_small = copy_results["hot"].get("copy, hot L2", small_mib)
    cold_small = copy_results["cold"].get("copy, cold L2", small_mib)
    hot_big = copy_results["hot"].get("copy, hot L2", sizes_mib[-1])
    cold_big = copy_results["cold"].get("copy, cold L2", sizes_mib[-1])
    small_ratio = hot_small.gbps / cold_small.gbps
    big_gap = 100 * (hot_big.gbps / cold_big.gbps - 1)
    peak_mm = max(matmul_result.measurements, key=lambda m: m.tflops)
    ridge = ceilings.bf16_tflops * 1e12 / (ceilings.copy_gbps * 1e9)
    sm_end = ceilings.matmul.clocks.get("sm_mhz_end", "?")
    cost_us = launch_cost["overhead_us"]
    too_short = [m.label for m in copy_measurements if any(w.startswith("too short to time") for w in m.warnings)]
    lines = [
        f"This {env.gpu} copies at {ceilings.copy_gbps:.0f} GB/s (2 GiB, cold L2) and "
        f"multiplies bf16 matrices at {ceilings.bf16_tflops:.0f} TFLOP/s "
        f"({ceilings.matmul.label}, the best of the ceiling's sizes, SM clock {sm_end} MHz "
        f"at its end): the ridge point is {ridge:.0f} FLOP per byte.",
    ]
    if ceilings.peak_bf16_tflops:
        lines.append(
            f"* The datasheet gives {ceilings.peak_bf16_tflops:.0f} TFLOP/s dense bf16 and "
            f"{ceilings.peak_hbm_gbps:.0f} GB/s: measured, "
            f"{100 * ceilings.bf16_tflops / ceilings.peak_bf16_tflops:.0f}% and "
            f"{100 * ceilings.copy_gbps / ceilings.peak_hbm_gbps:.0f}% of them. The "
            "measured ceilings move with the clock (the power cap lowers it under dense "
            "tensor-core work); the pages' floors use the datasheet peaks, which no "
            "measurement can beat."
        )
    lines.append(
        f"* A {small_mib} MiB copy reports {hot_small.gbps:.0f} GB/s with a hot L2 and "
        f"{cold_small.gbps:.0f} GB/s with a cold one, timed the same way: "
        + (
            f"timing small inputs without flushing L2 overstates bandwidth by {small_ratio:.2f}×."
            if small_ratio > 1
            else f"here the hot L2 did not help ({small_ratio:.2f}×)."
        )
    )
    lines.append(
        f"* At {sizes_mib[-1]} MiB, far beyond the {env.l2_mib:.0f} MiB L2, the hot copy "
        f"({hot_big.gbps:.0f} GB/s) is {abs(big_gap):.1f}% "
        f"{'above' if big_gap >= 0 else 'below'} the cold one ({cold_big.gbps:.0f} GB/s): "
        "there the flush has nothing left to change."
    )
    lines.append(_fastest_matmul(peak_mm, ceilings))
    lines.append(
        f"* The events around each timed call include {cost_us:.1f} µs of launch cost: "
        f"more than 3% of any call shorter than {cost_us / 0.03:.0f} µs. The harness "
        "subtracts it, so the pages report kernel time (the copy sweep above keeps raw "
        "event times, so that its hot and cold rows follow one rule)."
    )
    if too_short:
        lines.append(
            f"* Too short to time per call: {', '.join(too_short)}; their times are raw "
            "event times, an upper bound (their GB/s a lower bound)."
        )
    return lines
