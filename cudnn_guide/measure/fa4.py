"""FlashAttention-4 as a baseline (flash-attn-4, a beta with Hopper and Blackwell kernels), or why it cannot run.

FlashAttention-4 (PyPI ``flash-attn-4``, imported as ``flash_attn.cute``) is written in the CuTe
DSL and compiles each kernel configuration on its first call. It takes tensors laid out
``B×S×H×D``; the guide's attention inputs are ``B×H×S×D``, so each launcher here makes its own
``B×S×H×D`` copy once, outside the timed calls, and returns its output seen as ``B×H×S×D`` (a view,
no copy) so that it is checked against the same reference as every other contender.
:func:`attention` (``B×S×H×D`` tensors, for a model that lays them out so) and :func:`varlen_attention`
(packed ``T×H×D`` tensors) take FlashAttention's own layouts, as they are.

When the package (or the CuTe DSL under it) is missing, :func:`status` says so with the install
command, and the pages show "not installed" rows instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["INSTALL", "label", "status", "attention", "forward", "training_step", "varlen_attention"]

INSTALL = "pip install flash-attn-4==4.0.0b36  (needs nvidia-cutlass-dsl[cu13], a GPU of SM 9.0 or newer)"


def _load() -> tuple[Any, str]:
    """``(flash_attn_func, version)``, or ``(None, reason)`` when it cannot be imported."""
    try:
        import warnings
        from importlib.metadata import version

        # the CuTe DSL warns "Argument aux_data ... JitArgument" on every new kernel: noise, not a problem
        warnings.filterwarnings("ignore", message=".*aux_data.*", category=UserWarning)
        from flash_attn.cute import flash_attn_func

        return flash_attn_func, version("flash-attn-4")
    except Exception as missing:  # ImportError, or the CuTe DSL failing to load its libraries
        return None, f"{type(missing).__name__}: {str(missing).splitlines()[0] if str(missing) else ''}"


def _require() -> Any:
    """``flash_attn_func``, or :class:`ImportError` with the install command."""
    fn, detail = _load()
    if fn is None:
        raise ImportError(f"FlashAttention-4 is not installed ({INSTALL}): {detail}")
    return fn


def status() -> tuple[bool, str]:
    """Whether FlashAttention-4 imports here, and its version or the reason it does not.

    Returns
    -------
    tuple[bool, str]
        ``(True, "4.0.0b36")``, or ``(False, "not installed (pip install …): ImportError: …")``.

    Example
    -------
    >>> ok, detail = status()
    """
    fn, detail = _load()
    if fn is None:
        return False, f"not installed ({INSTALL}): {detail}"
    return True, detail


def label() -> str:
    """The contender's display name with its exact version, e.g. ``FlashAttention-4 (flash-attn-4 4.0.0b36)``.

    Returns
    -------
    str
        The name with the installed version, or plain ``"FlashAttention-4"`` when it is not installed.

    Example
    -------
    >>> label()
    'FlashAttention-4 (flash-attn-4 4.0.0b36)'
    """
    ok, detail = status()
    return f"FlashAttention-4 (flash-attn-4 {detail})" if ok else "FlashAttention-4"


def _output(result: Any) -> Any:
    return result[0] if isinstance(result, tuple) else result


def attention(*, causal: bool, scale: float | None = None) -> Callable[..., Any]:
    """FlashAttention-4's ``flash_attn_func`` as ``attend(q, k, v)``, on ``B×S×H×D`` tensors in and out.

    Nothing is copied: the inputs are FlashAttention's own layout (a model's projection can
    produce them so, e.g. :func:`cudnn_guide.graphs.block.variant` with ``bshd=True``). Autograd
    runs through it.

    Parameters
    ----------
    causal
        Causal masking.
    scale
        Softmax scale; default ``D ** -0.5``.

    Returns
    -------
    Callable[..., Any]
        ``attend(q, k, v)`` returning the ``B×S×H×D`` output; this function raises
        :class:`ImportError` up front when FlashAttention-4 is missing.

    Example
    -------
    >>> attend = attention(causal=True, scale=D**-0.5)
    >>> out = attend(q, k, v)  # B×S×H×D
    """
    fn = _require()

    def attend(q: Any, k: Any, v: Any) -> Any:
        return _output(fn(q, k, v, softmax_scale=scale, causal=causal))

    return attend


def forward(
    q: Any, k: Any, v: Any, *, causal: bool, scale: float | None = None, **fa4_kwargs: Any
) -> Callable[[], Any]:
    """A launcher of FlashAttention-4's forward for ``B×H×S×D`` inputs, returning ``B×H×S×D`` output.

    Parameters
    ----------
    q
        ``B×H×S×D`` queries.
    k
        ``B×H×S×D`` keys (may have fewer heads than ``q``: GQA/MQA).
    v
        ``B×H×S×D`` values, with ``k``'s heads.
    causal
        Causal masking. FlashAttention aligns it to the bottom-right corner when the query and key
        lengths differ (cuDNN's ``TOP_LEFT`` band matches it only when they are equal).
    scale
        Softmax scale; default ``D ** -0.5``.
    fa4_kwargs
        More ``flash_attn_func`` keywords (``window_size``, ``softcap``, ``learnable_sink``, …).

    Returns
    -------
    Callable[[], Any]
        Zero-argument launcher; raises :class:`ImportError` up front when FlashAttention-4 is missing.

    Example
    -------
    >>> launch = forward(q, k, v, causal=True)
    >>> out = launch()  # B×H×S×D view of FA4's B×S×H×D output
    """
    fn = _require()
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    return lambda: _output(fn(qs, ks, vs, softmax_scale=scale, causal=causal, **fa4_kwargs)).transpose(1, 2)


def training_step(
    q: Any, k: Any, v: Any, d_o: Any, *, causal: bool, scale: float | None = None, **fa4_kwargs: Any
) -> tuple[Callable[[], Any], Callable[[], list[Any]]]:
    """A launcher of one FlashAttention-4 forward + backward (autograd), and its ``B×H×S×D`` gradients' leaves.

    Parameters
    ----------
    q
        ``B×H×S×D`` queries.
    k
        ``B×H×S×D`` keys.
    v
        ``B×H×S×D`` values.
    d_o
        ``B×H×S×D`` gradient of the output.
    causal
        Causal masking. FlashAttention aligns it to the bottom-right corner when the query and key
        lengths differ (cuDNN's ``TOP_LEFT`` band matches it only when they are equal).
    scale
        Softmax scale; default ``D ** -0.5``.
    fa4_kwargs
        More ``flash_attn_func`` keywords (``deterministic=True``, ``window_size``, …).

    Returns
    -------
    tuple[Callable[[], Any], Callable[[], list[Any]]]
        The launcher (its gradients land in the leaves' ``.grad``, ``B×S×H×D``), and a function of
        no arguments returning ``[dq, dk, dv]`` seen as ``B×H×S×D``.

    Example
    -------
    >>> step, grads = training_step(q, k, v, d_o, causal=True)
    >>> step(); dq, dk, dv = grads()
    """
    fn = _require()
    leaves = [t.detach().transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v)]
    grad_out = d_o.transpose(1, 2).contiguous()

    def step() -> Any:
        for leaf in leaves:
            leaf.grad = None
        out = _output(fn(*leaves, softmax_scale=scale, causal=causal, **fa4_kwargs))
        out.backward(grad_out)
        return out

    def grads() -> list[Any]:
        return [leaf.grad.transpose(1, 2) for leaf in leaves]

    return step, grads


def varlen_attention(cu_seqlens: Any, max_len: int, *, causal: bool, scale: float | None = None) -> Callable[..., Any]:
    """FlashAttention-4's ``flash_attn_varlen_func`` over packed ``T×H×D`` tensors, as ``attend(q, k, v)``.

    The packed layout is FlashAttention's own (tokens first), so nothing is copied; queries and
    keys share ``cu_seqlens``. Autograd runs through it, so it serves a backward contender too.

    Parameters
    ----------
    cu_seqlens
        The B+1 prefix sums of the lengths, int32 on the GPU.
    max_len
        The longest sequence (``max_seqlen_q`` and ``max_seqlen_k``).
    causal
        Causal masking within each sequence.
    scale
        Softmax scale; default ``D ** -0.5``.

    Returns
    -------
    Callable[..., Any]
        ``attend(q, k, v)`` returning the packed ``T×H×D`` output; this function raises
        :class:`ImportError` up front when FlashAttention-4 is missing.

    Example
    -------
    >>> attend = varlen_attention(cu_seqlens, S_MAX, causal=True, scale=D**-0.5)
    >>> out = attend(q, k, v)  # T×H×D
    """
    _require()
    from flash_attn.cute import flash_attn_varlen_func

    kw = dict(cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens, softmax_scale=scale)

    def attend(q: Any, k: Any, v: Any) -> Any:
        return _output(flash_attn_varlen_func(q, k, v, **kw, max_seqlen_q=max_len, max_seqlen_k=max_len, causal=causal))

    return attend
