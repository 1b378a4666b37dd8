"""Check an output against a reference before anything is timed.

The rule: compute the reference in higher precision, compare by relative norm
``‖out − ref‖₂ / ‖ref‖₂`` against a tolerance chosen by the output's dtype, and fail on any NaN.
Outputs are *poisoned* with NaN before the run (:func:`poison`), so an element the kernel never
wrote is a NaN and fails the check instead of passing as a stale or zero value. A whole module
(a transformer block) is checked on its output and every parameter's gradient against a float32
copy of itself (:class:`ModuleCheck`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from cudnn_guide import collector
from cudnn_guide.errors import CheckFailedError, InputError

__all__ = [
    "LINE_WIDTH",
    "split_line",
    "CheckResult",
    "tolerance",
    "poison",
    "compare",
    "check",
    "worst_sequence",
    "SEQUENCE_SCALE_SHARE",
    "from_child",
    "reference",
    "reference_grads",
    "module_reference",
    "check_module",
    "ModuleCheck",
    "full_precision",
]


LINE_WIDTH = 88
"""The most characters on a line of a printed :class:`CheckResult`: a longer check line is split in two."""


def split_line(head: str, tail: str) -> str:
    """``head tail`` on one line where it fits in :data:`LINE_WIDTH`; else ``head`` wrapped, then ``tail`` indented.

    The layout of a printed check (:class:`CheckResult`), for any line made of a name and what
    was found of it.

    Parameters
    ----------
    head
        The name part, e.g. ``"check O, seq. 3:"``.
    tail
        What follows it, e.g. ``"PASS rel. error 1.2e-03 ..."``.

    Returns
    -------
    str
        One line, or the wrapped ``head`` and the ``tail`` on lines indented by 4.

    Example
    -------
    >>> split_line("check O:", "PASS")
    'check O: PASS'
    """
    if len(head) + 1 + len(tail) <= LINE_WIDTH and "\n" not in head:
        return f"{head} {tail}"
    indent = " " * 4
    return "\n".join(
        [
            *textwrap.wrap(head, LINE_WIDTH, break_on_hyphens=False),
            *textwrap.wrap(tail, LINE_WIDTH, initial_indent=indent, subsequent_indent=indent),
        ]
    )


def _tolerances() -> dict[Any, float]:
    import torch

    table = {
        torch.float64: 1e-10,
        torch.float32: 1e-4,
        torch.float16: 3e-3,
        torch.bfloat16: 1.6e-2,
    }
    for name, tol in (("float8_e4m3fn", 8e-2), ("float8_e5m2", 1.6e-1)):
        if hasattr(torch, name):
            table[getattr(torch, name)] = tol
    return table


def tolerance(dtype: Any) -> float:
    """The relative-norm tolerance for an output of ``dtype``.

    About four units of the dtype's rounding error (2⁻⁸ for bf16, 2⁻¹¹ for fp16, 2⁻²⁴ for fp32):
    rounding the output alone costs about one unit, accumulation order a little more; a real bug
    (a wrong index, a missing bias, an unwritten tile) costs orders of magnitude more.

    Parameters
    ----------
    dtype
        The output's ``torch.dtype``.

    Returns
    -------
    float
        The relative-norm tolerance.

    Example
    -------
    >>> tolerance(torch.bfloat16)  # 1.6e-2
    """
    try:
        return _tolerances()[dtype]
    except KeyError:
        raise InputError(f"no relative-error tolerance is defined for dtype {dtype}; pass tol= explicitly") from None


def poison(*tensors: Any) -> None:
    """Fill floating-point outputs with NaN before a run, so unwritten elements fail the check.

    Parameters
    ----------
    tensors
        Floating-point tensors to fill with NaN.

    Raises
    ------
    InputError
        A tensor that is not floating point (it has no NaN).

    Example
    -------
    >>> poison(y)  # NaN everywhere
    >>> built.execute(pack)
    >>> check(y, y_ref)  # fails if any element was not written
    """
    for t in tensors:
        if t.is_floating_point():
            t.fill_(float("nan"))
        else:
            raise InputError(f"poison(): {t.dtype} has no NaN; check integer outputs exactly instead")


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The outcome of one comparison.

    Printed, it is one line, ``check <name>: <verdict>``, where that fits in :data:`LINE_WIDTH`
    characters; a longer one puts the name on the first line (wrapped, if the name alone is longer)
    and the verdict on the next, indented by four spaces::

        check conv_bias_relu: PASS rel. error 2.10e-03 (tolerance 1.6e-02, bfloat16)
        check dQ of the packed THD backward against PyTorch SDPA's flash backend, padded:
            PASS rel. error 3.90e-03 (tolerance 1.6e-02, bfloat16)

    Example
    -------
    >>> r = compare(y, y_ref)
    >>> print(r.passed, r.rel_error, r.tolerance)
    """

    name: str
    dtype: str
    rel_error: float
    tolerance: float
    nan_count: int
    numel: int

    @property
    def passed(self) -> bool:
        return self.nan_count == 0 and self.rel_error <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "passed": self.passed}

    def __str__(self) -> str:
        """``check <name>: <verdict>`` on one line; longer than :data:`LINE_WIDTH`, the verdict on a line of its own."""
        verdict = "PASS" if self.passed else "FAIL"
        nan = f", {self.nan_count} NaN of {self.numel}" if self.nan_count else ""
        tail = f"{verdict} rel. error {self.rel_error:.2e} (tolerance {self.tolerance:.1e}, {self.dtype}{nan})"
        return split_line(f"check {self.name}:", tail)


def compare(
    actual: Any, expected: Any, *, name: str = "output", tol: float | None = None, scale: float = 0.0
) -> CheckResult:
    """Compare ``actual`` with ``expected`` by relative L2 norm, in float64. Never raises on a mismatch.

    Parameters
    ----------
    actual
        The output under test.
    expected
        The reference (any dtype; compared in float64).
    name
        Name in the result.
    tol
        Tolerance; default :func:`tolerance` of ``actual``'s dtype.
    scale
        The smallest norm the error is taken relative to (default 0: the reference's own). A
        reference that is zero in exact arithmetic (a one-token causal sequence's dQ) holds only
        rounding noise, and an error relative to that noise means nothing;
        :func:`worst_sequence` passes a share of its output's typical norm.

    Returns
    -------
    CheckResult
        Relative error, NaN count and verdict.

    Raises
    ------
    InputError
        If the shapes differ (a shape mismatch is a bug, not a numerical error).

    Example
    -------
    >>> r = compare(y, y_ref, name='conv')
    >>> if not r.passed: print(r)
    """
    import torch

    if tuple(actual.shape) != tuple(expected.shape):
        raise InputError(f"check {name}: output shape {tuple(actual.shape)} != reference shape {tuple(expected.shape)}")
    tol = tolerance(actual.dtype) if tol is None else tol
    a = actual.detach().to(torch.float64)
    r = expected.detach().to(torch.float64)
    nan_count = int(torch.isnan(a).sum().item())
    if nan_count:
        rel = float("nan")
    else:
        denom = torch.linalg.vector_norm(r).item()
        num = torch.linalg.vector_norm(a - r).item()
        denom = max(denom, scale)
        rel = num / denom if denom > 0 else num
    return CheckResult(name, str(actual.dtype).replace("torch.", ""), rel, tol, nan_count, actual.numel())


def check(
    actual: Any, expected: Any, *, name: str = "output", tol: float | None = None, scale: float = 0.0
) -> CheckResult:
    """Like :func:`compare`, but raise :class:`~cudnn_guide.errors.CheckFailedError` on failure.

    While the docs build collects an example's record, a passing check joins it
    (:mod:`cudnn_guide.collector`).

    Parameters
    ----------
    actual
        The output under test.
    expected
        The reference.
    name
        Name in the result and the error.
    tol
        Tolerance; default by dtype.
    scale
        The smallest norm the error is taken relative to, as in :func:`compare` (default 0: the
        reference's own).

    Returns
    -------
    CheckResult
        The passing result.

    Raises
    ------
    CheckFailedError
        NaN in the output, or a relative error above the tolerance.
    InputError
        The shapes differ.

    Example
    -------
    >>> result = check(y, y_ref, name="conv_bias_relu")
    >>> print(result)
    check conv_bias_relu: PASS rel. error 2.10e-03 (tolerance 1.6e-02, bfloat16)
    """
    collector.between_steps()  # a neighbour waiting to measure goes first (docs build lanes)
    return _passing(compare(actual, expected, name=name, tol=tol, scale=scale))


def worst_sequence(
    label: str,
    outputs: Mapping[str, Any],
    rows: Callable[[Any, int, int, int], Any],
    expected: Mapping[str, Sequence[Any]],
    spans: Iterable[tuple[int, tuple[int, int]]],
) -> CheckResult:
    """:func:`check` every sequence of every output of a variable-length batch; return the worst.

    Each sequence is checked alone, named ``"<label> <output>, seq. <b>"``, so a sequence the
    kernel got wrong fails by its name, and every pass joins the record as :func:`check`'s do. Its
    error is relative to its reference's norm, or to :data:`SEQUENCE_SCALE_SHARE` of the norm a
    sequence of its size has on average in the same output, whichever is larger.

    Parameters
    ----------
    label
        The contender, first in each check's name.
    outputs
        Output name → the output under test, in whatever layout ``rows`` reads.
    rows
        ``rows(y, b, start, end)``: sequence ``b`` of output ``y``, shaped like its reference
        (e.g. :func:`cudnn_guide.graphs.varlen.packed_rows` or ``padded_rows``).
    expected
        Output name → the references, one per sequence, in order.
    spans
        ``(b, (start, end))`` per sequence (:func:`cudnn_guide.graphs.varlen.spans`).

    Returns
    -------
    CheckResult
        The passing check with the largest relative error.

    Raises
    ------
    CheckFailedError
        The first sequence that fails.

    Example
    -------
    >>> worst = worst_sequence("packed THD", {"O": o}, varlen.packed_rows, {"O": refs}, spans)
    >>> print(f"{worst.name}: rel. error {worst.rel_error:.1e}, the worst")
    """
    spans = list(spans)
    results = []
    for n, y in outputs.items():
        floor = _sequence_floor(expected[n], spans)
        for b, (start, end) in spans:
            want = expected[n][b]
            results.append(check(rows(y, b, start, end), want, name=f"{label} {n}, seq. {b}", scale=floor(want)))
    return max(results, key=lambda r: r.rel_error)


SEQUENCE_SCALE_SHARE = 0.01
""":func:`worst_sequence` takes each sequence's error relative to its reference's norm, or to this share of
the norm a sequence of its size has on average in the same output, whichever is larger: a one-token causal
sequence's dQ is zero in exact arithmetic, and its reference holds only rounding noise (a CPU test saw
2e-7 against 0, a relative error of 1)."""


def _sequence_floor(refs: Sequence[Any], spans: list[tuple[int, tuple[int, int]]]) -> Callable[[Any], float]:
    """For one output's references: a reference → :data:`SEQUENCE_SCALE_SHARE` of the norm its size has on average."""
    import torch

    used = [refs[b] for b, _ in spans]
    total = math.sqrt(sum(torch.linalg.vector_norm(r.detach().to(torch.float64)).item() ** 2 for r in used))
    count = sum(r.numel() for r in used)
    if not count or not math.isfinite(total):  # a reference with inf or NaN: each sequence on its own norm
        return lambda r: 0.0
    return lambda r: SEQUENCE_SCALE_SHARE * total * math.sqrt(r.numel() / count)


def from_child(result: dict[str, Any], *, name: str | None = None) -> CheckResult:
    """A check made in another process, which returned it as :meth:`CheckResult.to_dict`.

    Treated as :func:`check` treats its own: a failure raises, and a pass joins the running
    example's record. The fresh-process studies (:mod:`cudnn_guide.studies.coldstart`,
    :mod:`cudnn_guide.studies.dynamic_shapes`) report their children's checks this way.

    Parameters
    ----------
    result
        The child's ``CheckResult.to_dict()``.
    name
        A name that says which child it was; default the child's own.

    Returns
    -------
    CheckResult
        The passing result.

    Raises
    ------
    CheckFailedError
        The child's output failed its check.

    Example
    -------
    >>> r = from_child({"name": "y", "dtype": "bfloat16", "rel_error": 2e-3, "tolerance": 1.6e-2,
    ...                 "nan_count": 0, "numel": 8, "passed": True}, name="y in a fresh process")
    >>> r.passed
    True
    """
    fields = {f.name: result[f.name] for f in dataclasses.fields(CheckResult)}
    if name is not None:
        fields["name"] = name
    return _passing(CheckResult(**fields))


def _passing(result: CheckResult) -> CheckResult:
    """Raise :class:`CheckFailedError` unless ``result`` passed; register it with the collector."""
    if not result.passed:
        why = (
            f"{result.nan_count} of {result.numel} elements are NaN (never written, or NaN produced)"
            if result.nan_count
            else f"relative error {result.rel_error:.3e} exceeds the {result.tolerance:.1e} "
            f"tolerance for {result.dtype}"
        )
        raise CheckFailedError(f"check {result.name} failed: {why}")
    collector.add_check(result)
    return result


@contextlib.contextmanager
def full_precision() -> Iterator[None]:
    """Turn off TF32 in matmuls and convolutions for the duration (for references).

    Returns
    -------
    Iterator[None]
        A context manager.

    Example
    -------
    >>> with full_precision():
    ...     ref = a.float() @ b.float()
    """
    import torch

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def reference(fn: Callable[..., Any], *inputs: Any, dtype: Any = None) -> Any:
    """Run ``fn`` on copies of ``inputs`` upcast to ``dtype`` (float32 by default), TF32 off.

    Non-floating inputs and non-tensors pass through unchanged.

    Parameters
    ----------
    fn
        The computation, e.g. ``problem.torch_forward``.
    inputs
        Its inputs; floating tensors are upcast.
    dtype
        Reference precision (default float32).

    Returns
    -------
    Any
        ``fn``'s output in the higher precision.

    Example
    -------
    >>> y_ref = reference(problem.torch_forward, x, w, b)  # fp32, TF32 off
    """
    import torch

    dtype = torch.float32 if dtype is None else dtype
    up = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    with full_precision(), torch.no_grad():
        return fn(*up)


def reference_grads(
    fn: Callable[..., Any], inputs: dict[str, Any], grad_output: Any, *, dtype: Any = None
) -> tuple[Any, dict[str, Any]]:
    """Autograd reference: run ``fn(**inputs)`` upcast to ``dtype`` and backpropagate ``grad_output``.

    Every floating input gets a gradient; TF32 is off. The result is what a training framework
    would compute for the same step, in higher precision.

    Parameters
    ----------
    fn
        The forward computation, taking the inputs by name and returning one tensor.
    inputs
        Name → tensor; floating tensors are upcast and get gradients.
    grad_output
        The gradient flowing into ``fn``'s output (upcast too).
    dtype
        Reference precision (default float32).

    Returns
    -------
    tuple[Any, dict[str, Any]]
        The output and name → gradient of every floating input.

    Example
    -------
    >>> out, grads = reference_grads(lambda q, k, v: sdpa(q, k, v), {'q': q, 'k': k, 'v': v}, d_out)
    >>> check(dq, grads['q'], name='dQ')
    """
    import torch

    dtype = torch.float32 if dtype is None else dtype
    up = {
        k: (v.detach().to(dtype).requires_grad_(True) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
        for k, v in inputs.items()
    }
    with full_precision(), torch.enable_grad():
        out = fn(**up)
        out.backward(grad_output.detach().to(dtype))
    grads = {k: v.grad for k, v in up.items() if isinstance(v, torch.Tensor) and v.requires_grad}
    return out.detach(), grads


def module_reference(module: Any, x: Any, grad_output: Any, *, dtype: Any = None) -> tuple[Any, dict[str, Any]]:
    """Autograd reference for a module: a copy of ``module`` upcast to ``dtype``, forward and backward.

    The copy (``copy.deepcopy``, then ``.to(dtype)``) runs ``x`` and backpropagates
    ``grad_output``, both upcast, with TF32 off (:func:`full_precision`); ``module`` itself is
    untouched. Check a module of the same weights against it with :func:`check_module`.

    Parameters
    ----------
    module
        The ``nn.Module``, in its working precision.
    x
        Its input.
    grad_output
        The gradient flowing into its output.
    dtype
        Reference precision (default float32).

    Returns
    -------
    tuple[Any, dict[str, Any]]
        The output (detached) and parameter name → gradient.

    Example
    -------
    >>> ref_y, ref_grads = module_reference(template, x, dy)
    >>> check_module(block, x, dy, ref_y, ref_grads, name="block")
    """
    import copy

    import torch

    dtype = torch.float32 if dtype is None else dtype
    reference = copy.deepcopy(module).to(dtype)
    with full_precision(), torch.enable_grad():
        out = reference(x.to(dtype))
        out.backward(grad_output.to(dtype))
    return out.detach(), {n: p.grad for n, p in reference.named_parameters()}


def check_module(
    module: Any,
    x: Any,
    grad_output: Any,
    expected: Any,
    expected_grads: Mapping[str, Any],
    *,
    name: str,
    grad_tol: float | None = None,
) -> tuple[CheckResult, CheckResult]:
    """:func:`check` a module's output and every parameter's gradient against its reference.

    The module's gradients are cleared, then it runs ``x`` and backpropagates ``grad_output``.
    The output is checked as ``"<name>: output"`` (tolerance by dtype), then each parameter's
    gradient as ``"<name>: d<parameter>"`` with ``grad_tol``; a compiled module's
    ``_orig_mod.`` prefix is dropped, so it is checked against the eager module's reference.
    Each check raises on a failure and joins the record on a pass, as :func:`check`'s do.

    Parameters
    ----------
    module
        The ``nn.Module`` under test (eager or ``torch.compile``'d).
    x
        Its input.
    grad_output
        The gradient flowing into its output.
    expected
        The reference output (:func:`module_reference`).
    expected_grads
        Parameter name → reference gradient (:func:`module_reference`).
    name
        The module's label, first in each check's name.
    grad_tol
        The gradients' tolerance; default by dtype.

    Returns
    -------
    tuple[CheckResult, CheckResult]
        The output's check and the gradient check with the largest relative error.

    Raises
    ------
    CheckFailedError
        The output, or the first gradient, that fails.

    Example
    -------
    >>> out, worst = check_module(block, x, dy, ref_y, ref_grads, name="block", grad_tol=0.032)
    >>> print(out); print(worst, f"(the worst of {len(ref_grads)} weight gradients)")
    """
    for p in module.parameters():
        p.grad = None
    y = module(x)
    y.backward(grad_output)
    output = check(y, expected, name=f"{name}: output")
    grads = []
    for n, p in module.named_parameters():
        n = n.removeprefix("_orig_mod.")
        grads.append(check(p.grad, expected_grads[n], name=f"{name}: d{n}", tol=grad_tol))
    return output, max(grads, key=lambda r: r.rel_error)


class ModuleCheck:
    """A module's autograd reference, computed once, and the check of any module of its weights against it.

    On construction, :func:`module_reference` runs a float32 copy of ``module`` (TF32 off) on
    ``x`` and backpropagates ``grad_output``. Called with a module of the same weights (a copy
    with another attention, eager or compiled) and a label, it runs :func:`check_module` and
    prints the output's check and the worst gradient's, ``(the worst of N weight gradients)``.

    Parameters
    ----------
    module
        The module the reference is copied from, in its working precision (it is not changed).
    x
        The input every checked module runs.
    grad_output
        The gradient every checked module backpropagates.
    grad_tol
        The gradients' tolerance; default by dtype.

    Example
    -------
    >>> check_block = ModuleCheck(template, x, dy, grad_tol=2 * tolerance(torch.bfloat16))
    >>> out, worst = check_block(eager_cudnn, "block with the cuDNN op")
    check block with the cuDNN op: output: PASS rel. error 3.1e-03 (tolerance 1.6e-02, bfloat16)
    check block with the cuDNN op: dqkv.weight: PASS rel. error 8.2e-03 (...) (the worst of 6 weight gradients)
    """

    def __init__(self, module: Any, x: Any, grad_output: Any, *, grad_tol: float | None = None) -> None:
        self.x, self.grad_output, self.grad_tol = x, grad_output, grad_tol
        self.expected, self.expected_grads = module_reference(module, x, grad_output)

    def __call__(self, module: Any, name: str) -> tuple[CheckResult, CheckResult]:
        """Check ``module`` (see :func:`check_module`), print both results, and return them."""
        out, worst = check_module(
            module, self.x, self.grad_output, self.expected, self.expected_grads, name=name, grad_tol=self.grad_tol
        )
        print(out)
        print(worst, f"(the worst of {len(self.expected_grads)} weight gradients)")
        return out, worst
