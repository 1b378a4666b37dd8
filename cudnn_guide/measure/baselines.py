"""PyTorch baselines, set up fairly and quietly.

``torch.compile`` with ``mode="max-autotune-no-cudagraphs"`` is the strongest compiled baseline
for a single call (it benchmarks Triton templates against cuBLAS/cuDNN and fuses epilogues), and
leaves CUDA graphs out so that every contender is timed launching its own kernels.
:func:`band_attention` gathers PyTorch's causal and sliding-window attention (and the frontend's
own ``torch.ops.cudnn.sdpa_fwd``); :func:`check_each` checks such launchers before they race.
"""

from __future__ import annotations

import logging
import re
import textwrap
import warnings
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from cudnn_guide.check import LINE_WIDTH
from cudnn_guide.errors import CheckFailedError

__all__ = [
    "RECOMPILE_LIMIT",
    "SDPA_BACKEND_NAMES",
    "admit",
    "admit_backward",
    "band_attention",
    "check_each",
    "compile_quietly",
    "forced_sdpa",
    "refusal",
    "sdpa_backends",
    "sdpa_matches",
    "synchronized",
    "training_step",
    "with_cudnn_benchmark",
]

RECOMPILE_LIMIT = 32
"""Compiled versions of one function :func:`compile_quietly` lets Dynamo keep (its default is 8)."""


def compile_quietly(
    fn: Callable[..., Any], mode: str = "max-autotune-no-cudagraphs", dynamic: bool | None = None
) -> Callable[..., Any]:
    """``torch.compile(fn, mode=mode)`` without Inductor's autotuning report on the page.

    Inductor prints a table of the candidates it benchmarked, and logs each Triton candidate that
    does not fit in shared memory (those are skipped, not errors of the result). Both would
    bury the page's own output, so this turns them off; nothing about the compiled code changes.

    Dynamo keeps at most ``recompile_limit`` (8) compiled versions of one function and runs any
    further shape or mode **in eager**, with only a log line: a sweep that compiles one function
    for each of eight sizes after a base compile timed eager PyTorch under the compiled label
    (plot_04's largest K, until this was found). So this raises the limit to
    :data:`RECOMPILE_LIMIT` and makes hitting it an error (``fail_on_recompile_limit_hit``).

    Parameters
    ----------
    fn
        The function to compile.
    mode
        ``torch.compile`` mode.
    dynamic
        ``torch.compile``'s ``dynamic``; ``False`` compiles each shape of a sweep for that shape.

    Returns
    -------
    Callable[..., Any]
        The compiled function.

    Example
    -------
    >>> compiled = compile_quietly(problem.torch_forward)
    >>> y = compiled(x, w, b)
    """
    import torch
    import torch._dynamo
    import torch._inductor.config as inductor_config

    for name, value in (("autotune_num_choices_displayed", 0), ("max_autotune_report_choices_stats", False)):
        if hasattr(inductor_config, name):
            setattr(inductor_config, name, value)
    logging.getLogger("torch._inductor").setLevel(logging.CRITICAL)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    torch._dynamo.config.fail_on_recompile_limit_hit = True  # never a silent eager fallback
    warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
    return torch.compile(fn, mode=mode, dynamic=dynamic)


def sdpa_backends() -> dict[str, Any]:
    """PyTorch's fused attention backends, by display name, for ``torch.nn.attention.sdpa_kernel``.

    Each is forced one at a time, so a backend that cannot run a problem raises instead of being
    silently replaced by another (PyTorch's default dispatch falls back quietly).

    Returns
    -------
    dict[str, Any]
        ``{"PyTorch flash": SDPBackend.FLASH_ATTENTION, "PyTorch mem-efficient": ...,
        "PyTorch cuDNN": ...}``.

    Example
    -------
    >>> for name, backend in sdpa_backends().items():
    ...     with sdpa_kernel([backend]):
    ...         out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    """
    from torch.nn.attention import SDPBackend

    return {
        "PyTorch flash": SDPBackend.FLASH_ATTENTION,
        "PyTorch mem-efficient": SDPBackend.EFFICIENT_ATTENTION,
        "PyTorch cuDNN": SDPBackend.CUDNN_ATTENTION,
    }


SDPA_BACKEND_NAMES = {
    "PyTorch flash": "PyTorch SDPA, flash backend (FlashAttention-2)",
    "PyTorch mem-efficient": "PyTorch SDPA, memory-efficient backend",
    "PyTorch cuDNN": "PyTorch SDPA, cuDNN backend",
}
""":func:`sdpa_backends`' short names → the names pages show: on torch 2.11 the flash backend is FlashAttention-2."""


def forced_sdpa(backend: Any, **sdpa_kwargs: Any) -> Callable[..., Any]:
    """PyTorch's ``scaled_dot_product_attention`` on one backend only: ``attend(q, k, v)``.

    Under ``sdpa_kernel([backend])`` a backend that cannot run the inputs raises, where PyTorch's
    default dispatch would quietly run another (see :func:`sdpa_backends`).

    Parameters
    ----------
    backend
        A ``torch.nn.attention.SDPBackend``.
    sdpa_kwargs
        Passed to ``scaled_dot_product_attention`` (``is_causal``, ``scale``, ``enable_gqa``, ...).

    Returns
    -------
    Callable[..., Any]
        ``attend(q, k, v)``.

    Example
    -------
    >>> attend = forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)
    >>> out = attend(q, k, v)
    """
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    def attend(q: Any, k: Any, v: Any) -> Any:
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, **sdpa_kwargs)

    return attend


def sdpa_matches(
    attends: Mapping[str, Callable[..., Any]], inputs: Sequence[Any], backends: Sequence[Any], **sdpa_kwargs: Any
) -> dict[str, list[str]]:
    """Which of PyTorch's SDPA backends each attention's output matches, bit for bit.

    Each attention in ``attends`` (PyTorch's default SDPA, eager or compiled) runs on ``inputs``
    once; then each backend, forced in turn with ``sdpa_kernel([backend])``, runs
    ``scaled_dot_product_attention(*inputs, **sdpa_kwargs)``, and its output is compared with
    each attention's by ``torch.equal``. Forward kernels are deterministic, so an attention that
    matches a forced backend ran that backend's kernel (or one that computes the same bits).
    Inputs that require gradients select the kernels a training step would.

    Parameters
    ----------
    attends
        Name → ``attend(*inputs)``.
    inputs
        The inputs, e.g. ``(q, k, v)``.
    backends
        ``torch.nn.attention.SDPBackend`` members, in the order their names are listed.
    sdpa_kwargs
        Passed to the forced ``scaled_dot_product_attention`` (``is_causal``, ``scale``, ...).

    Returns
    -------
    dict[str, list[str]]
        Name → the names (``SDPBackend.name``) of the backends it matched; empty when none.

    Example
    -------
    >>> backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]
    >>> sdpa_matches({"eager": attend}, (q, k, v), backends, is_causal=True)
    {'eager': ['CUDNN_ATTENTION']}
    """
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    outputs = {name: attend(*inputs) for name, attend in attends.items()}
    found: dict[str, list[str]] = {name: [] for name in attends}
    for backend in backends:
        with sdpa_kernel([backend]):
            forced = F.scaled_dot_product_attention(*inputs, **sdpa_kwargs)
        for name, out in outputs.items():
            if torch.equal(out, forced):
                found[name].append(backend.name)
    return found


def synchronized(step: Callable[[], Any]) -> Callable[[], None]:
    """``step``, then ``torch.cuda.synchronize()``: one iteration of a loop that reads its result.

    Timed on the wall clock (:func:`~cudnn_guide.measure.compare.compare_host`), such a call
    costs the host time to enqueue the step or the GPU time to run it, whichever is longer,
    plus the synchronize: the time per step of a training loop that reads its loss every step.

    Parameters
    ----------
    step
        A zero-argument launcher.

    Returns
    -------
    Callable[[], None]
        The launcher that waits for the GPU after each call.

    Example
    -------
    >>> wall = compare_host({n: synchronized(s) for n, s in steps.items()}, candidate=CAND, calls=2, batches=2)
    """
    import torch

    def call() -> None:
        step()
        torch.cuda.synchronize()

    return call


def training_step(forward: Callable[..., Any], leaves: Any, grad_out: Any) -> Callable[[], Any]:
    """One autograd training step as a zero-argument launcher: clear the leaves' ``.grad``, run
    ``forward`` on them, then ``backward(grad_out)``; returns the forward's output.

    Clearing first means no step pays for accumulating into the previous one's gradients, and
    after a call each leaf's ``.grad`` holds that step's gradient, ready to be checked.

    Parameters
    ----------
    forward
        Called as ``forward(*leaves)``, or ``forward(**leaves)`` when ``leaves`` is a mapping.
    leaves
        Tensors with ``requires_grad=True``: a sequence, or a mapping of keyword arguments.
    grad_out
        The gradient of the output.

    Returns
    -------
    Callable[[], Any]
        The step.

    Example
    -------
    >>> q, k, v = (t.detach().requires_grad_() for t in (q0, k0, v0))
    >>> step = training_step(forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True), [q, k, v], d_o)
    >>> step(); q.grad  # dQ of this step
    """
    tensors = list(leaves.values()) if isinstance(leaves, Mapping) else list(leaves)

    def step() -> Any:
        for t in tensors:
            t.grad = None
        out = forward(**leaves) if isinstance(leaves, Mapping) else forward(*leaves)
        out.backward(grad_out)
        return out

    return step


def with_cudnn_benchmark(fn: Callable[[], Any], enabled: bool) -> Callable[[], Any]:
    """``fn`` run with ``torch.backends.cudnn.benchmark = enabled``, restored after each call.

    Lets the two PyTorch settings be interleaved with other contenders in one comparison: the
    flag is a Python setting (no GPU work). With ``enabled``, PyTorch times cuDNN's algorithms on
    the first call of a shape and reuses the fastest after; call it once before timing.

    Parameters
    ----------
    fn
        A zero-argument launcher that runs PyTorch convolutions.
    enabled
        The value of ``torch.backends.cudnn.benchmark`` during the call.

    Returns
    -------
    Callable[[], Any]
        The wrapped launcher.

    Example
    -------
    >>> tuned = with_cudnn_benchmark(lambda: F.conv2d(x, w, padding=1), True)
    >>> y = tuned()  # first call picks the algorithm
    """
    import torch

    def call() -> Any:
        before = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = enabled
        try:
            return fn()
        finally:
            torch.backends.cudnn.benchmark = before

    return call


def admit(
    contenders: MutableMapping[str, Callable[[], Any]],
    name: str,
    fn: Callable[[], Any],
    reference: Any = None,
    *,
    check: Callable[[Any], Any] | None = None,
    tol: float | None = None,
) -> str | None:
    """Run a baseline once, check its output, and add it to ``contenders``; or say why it cannot run here.

    A baseline that raises (a backend this torch lacks, a shape it refuses) is **unavailable**: the
    reason is printed (wrapped at :data:`~cudnn_guide.check.LINE_WIDTH`) and returned, and the
    comparison goes on without it. A baseline that runs but computes the wrong result is **not**
    unavailable: its :class:`~cudnn_guide.errors.CheckFailedError` propagates and stops the page.

    Parameters
    ----------
    contenders
        Name → launcher, as passed to :func:`~cudnn_guide.measure.compare.compare`; updated in place.
    name
        The baseline's display name.
    fn
        Its zero-argument launcher.
    reference
        The expected output, checked with :func:`cudnn_guide.check.check`.
    check
        Instead of ``reference``: a callable given the output, which raises ``CheckFailedError`` on a
        wrong result (for outputs that are not one tensor); what it returns (a result, or a list of
        them) is printed.
    tol
        The check's tolerance with ``reference``; default by dtype.

    Returns
    -------
    str | None
        ``None`` when admitted; otherwise the reason, ``"ExceptionType: first line of its message"``.

    Example
    -------
    >>> admit(contenders, "torch.compile", lambda: compiled(x, w, b), reference)
    """
    from cudnn_guide import check as checks

    if (reference is None) == (check is None):
        raise ValueError(f"admit({name!r}): pass exactly one of reference= and check=")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn()
        except CheckFailedError:
            raise
        except Exception as exc:  # the baseline cannot run here: said, never silently dropped
            why = f"{type(exc).__name__}: {_first_line(str(exc))}"
            # PyTorch's SDPA says *why* a forced backend refused only in warnings: they join the reason
            said = _reasons([_first_line(str(w.message)) for w in caught])
            if said:
                why += f" ({_clip('; '.join(said).replace(':; ', ': '), 240)})"
            print(_fill(f"{name}: unavailable here ({why})"))
            return why
    for w in caught:  # a baseline that ran keeps its warnings
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    result = check(out) if check is not None else checks.check(out, reference, name=name, tol=tol)
    for line in result if isinstance(result, (list, tuple)) else [result]:
        if line is not None:
            print(line)
    contenders[name] = fn
    return None


def admit_backward(
    contenders: MutableMapping[str, Callable[[], Any]],
    name: str,
    forward: Callable[..., Any],
    inputs: Sequence[Any],
    grad_out: Any,
    *,
    check: Callable[[tuple[Any, ...]], Any],
) -> str | None:
    """Admit a PyTorch backward alone, from one retained autograd graph: checked first, or said unavailable.

    The forward runs once on fresh leaves (detached copies of ``inputs`` that require gradients)
    and its gradients are taken with ``retain_graph=True``; the launcher added to ``contenders``
    repeats only that ``torch.autograd.grad``, so the forward is not timed. A forward or backward
    that raises is **unavailable**: ``"<name>: unavailable here (<ExceptionType>)"`` is printed and
    the reason returned. A wrong gradient is not: ``check`` raises and stops the page.

    Parameters
    ----------
    contenders
        Name → launcher, as passed to :func:`~cudnn_guide.measure.compare.compare`; updated in place.
    name
        The contender's display name.
    forward
        Called as ``forward(*leaves)``; returns the output.
    inputs
        The forward's inputs (tensors), one leaf each.
    grad_out
        The output's gradient.
    check
        Given the gradients (one per input, in order); raises ``CheckFailedError`` on a wrong one.
        What it returns is printed unless None, as :func:`admit` does.

    Returns
    -------
    str | None
        ``None`` when admitted; otherwise ``"ExceptionType: first line of its message"`` (140
        characters at most).

    Example
    -------
    >>> check = lambda grads: checks.check(grads[0], dq_ref, name="dQ")
    >>> why = admit_backward(contenders, "flash backward", flash, (q, k, v), d_o, check=check)
    """
    import torch

    leaves = [t.detach().requires_grad_() for t in inputs]
    try:
        y = forward(*leaves)
        grads = torch.autograd.grad(y, leaves, grad_out, retain_graph=True)
    except Exception as exc:  # cannot run here: shown, not hidden
        first = (str(exc).splitlines() or [""])[0][:140]
        print(f"{name}: unavailable here ({type(exc).__name__})")
        return f"{type(exc).__name__}: {first}"
    result = check(grads)
    for line in result if isinstance(result, (list, tuple)) else [result]:
        if line is not None:
            print(line)
    contenders[name] = lambda: torch.autograd.grad(y, leaves, grad_out, retain_graph=True)
    return None


def band_attention(
    q: Any, k: Any, v: Any, *, left: int | None = None, scale: float | None = None
) -> dict[str, Callable[[], Any]]:
    """PyTorch's causal (or sliding-window) attention over B×H×S×D tensors, and the frontend's torch op.

    Each launcher computes what cuDNN's diagonal band with ``diagonal_band_right_bound=0`` and
    ``diagonal_band_left_bound=left`` computes: query ``i`` sees keys ``j ≤ i`` (and ``i - j < left``):

    * ``"PyTorch FlexAttention (compiled)"``: ``flex_attention`` under ``torch.compile(fullgraph=True)``
      with a block mask of that band, made here, once;
    * ``"torch.ops.cudnn.sdpa_fwd"``: the frontend's PyTorch op over its SDPA graphs (``is_causal``,
      ``window_left``), registered by importing ``cudnn.sdpa.fwd.torch_op``; it returns a tuple;
    * ``"PyTorch SDPA, flash backend (FlashAttention-2)"``, causal only (``left=None``): the flash
      backend forced (:func:`forced_sdpa`), ``is_causal=True``.

    Nothing runs here but the block mask's construction; check the launchers (:func:`check_each`)
    before timing them.

    Parameters
    ----------
    q
        B×H×S×D queries (S queries and S keys).
    k
        B×H×S×D keys.
    v
        B×H×S×D values.
    left
        The window's width W, or None for causal attention.
    scale
        ``sdpa_fwd``'s softmax scale; default ``D ** -0.5`` (FlexAttention's and SDPA's own default).

    Returns
    -------
    dict[str, Callable[[], Any]]
        Name → zero-argument launcher, in the order above.

    Example
    -------
    >>> launchers = band_attention(q, k, v, left=512)
    >>> checks = check_each(launchers, reference, tag="window 512")
    """
    import cudnn.sdpa.fwd.torch_op  # noqa: F401  (registers torch.ops.cudnn.sdpa_fwd)
    import torch
    from torch.nn.attention import SDPBackend
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    seq = q.shape[2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    flex = torch.compile(flex_attention, fullgraph=True)
    visible = (lambda b, h, qi, ki: ki <= qi) if left is None else (lambda b, h, qi, ki: (ki <= qi) & (qi - ki < left))
    block_mask = create_block_mask(visible, None, None, seq, seq)
    launchers: dict[str, Callable[[], Any]] = {
        "PyTorch FlexAttention (compiled)": lambda: flex(q, k, v, block_mask=block_mask),
        "torch.ops.cudnn.sdpa_fwd": lambda: torch.ops.cudnn.sdpa_fwd(
            q, k, v, scale, is_causal=True, window_left=-1 if left is None else left, return_lse=False
        ),
    }
    if left is None:
        attend = forced_sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)
        launchers["PyTorch SDPA, flash backend (FlashAttention-2)"] = lambda: attend(q, k, v)
    return launchers


def check_each(launchers: Mapping[str, Callable[[], Any]], reference: Any, *, tag: str = "") -> list[Any]:
    """Run each launcher once and check its output against ``reference``; a wrong one stops the page.

    Unlike :func:`admit`, a launcher that raises is not said to be unavailable: the exception
    propagates, as does the :class:`~cudnn_guide.errors.CheckFailedError` of a wrong result. Nothing
    is printed; each passing check joins the page's record (:func:`cudnn_guide.check.check`).

    Parameters
    ----------
    launchers
        Name → zero-argument launcher; one returning a tuple is checked on its first element.
    reference
        The expected output, laid out as the launchers return theirs.
    tag
        Appended to each check's name, after a comma: ``"<name>, <tag>"``.

    Returns
    -------
    list[Any]
        The passing :class:`~cudnn_guide.check.CheckResult` of each launcher, in order.

    Example
    -------
    >>> results = check_each({"torch": lambda: attend(q, k, v)}, reference, tag="causal")
    >>> results[0].name
    'torch, causal'
    """
    from cudnn_guide import check

    results = []
    for name, fn in launchers.items():
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        results.append(check.check(out, reference, name=f"{name}, {tag}" if tag else name))
    return results


_FORCED = re.compile(r"has been runtime disabled")
"""What ``sdpa_kernel`` itself causes by disabling the other backends: not a reason the forced one refused."""


def _reasons(messages: list[str]) -> list[str]:
    """PyTorch's warnings without repeats and without what forcing caused: a "... not used because:"
    header stays only with the reason that follows it."""
    kept = [m for m in dict.fromkeys(messages) if not _FORCED.search(m)]
    return [
        m for i, m in enumerate(kept) if not m.endswith(":") or (i + 1 < len(kept) and not kept[i + 1].endswith(":"))
    ]


def _fill(text: str) -> str:
    """``text`` wrapped at :data:`cudnn_guide.check.LINE_WIDTH`, continuations indented by 4, hyphens unbroken."""
    return textwrap.fill(text, LINE_WIDTH, subsequent_indent="    ", break_on_hyphens=False)


def _first_line(text: str) -> str:
    text = re.sub(r"\s*\(Triggered internally at [^)]*\)", "", text)  # PyTorch's C++ source location
    return _clip((text.strip().splitlines() or [""])[0], 160)


def _clip(text: str, limit: int) -> str:
    """``text``, cut at a word boundary with an ellipsis when longer than ``limit``."""
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0].rstrip(" ;,:") + "…"


def refusal(launch: Callable[[], Any]) -> str | None:
    """Why ``launch`` cannot run here, whole: its error and PyTorch's reasons; ``None`` when it runs.

    ``launch`` runs once with every warning recorded. When it raises, the reason is the error's type
    and message on one line, followed by PyTorch's warnings (why a forced SDPA backend refused)
    without repeats, without their C++ source locations, without what forcing one backend causes
    (the others "runtime disabled"), and with a ``"... not used because:"`` header only where the
    reason that follows it is kept.

    Parameters
    ----------
    launch
        A zero-argument launcher.

    Returns
    -------
    str | None
        ``"ExceptionType: message (warning; warning)"``, or ``None`` when it ran.

    Example
    -------
    >>> def refuses():
    ...     warnings.warn("Flash attention kernel not used because:")
    ...     warnings.warn("Head dim must be at most 256")
    ...     raise RuntimeError("No available kernel.")
    >>> refusal(refuses)
    'RuntimeError: No available kernel. (Flash attention kernel not used because: Head dim must be at most 256)'
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            launch()
        except Exception as error:
            said = [" ".join(str(w.message).split()) for w in caught]
            said = [re.sub(r"\s*\(Triggered internally at [^)]*\)", "", m) for m in said]
            # without what forcing one backend causes (the others "runtime disabled"),
            # and a "... not used because:" header only with the reason that follows it
            said = [m for m in dict.fromkeys(said) if "has been runtime disabled" not in m]
            said = [m for m, after in zip(said, said[1:] + [":"]) if not (m.endswith(":") and after.endswith(":"))]
            why = f"{type(error).__name__}: {' '.join(str(error).split())}"
            return why + (f" ({'; '.join(said).replace(':; ', ': ')})" if said else "")
    return None
