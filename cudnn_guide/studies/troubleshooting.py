"""The troubleshooting page's cases beyond a graph's build steps, and its conclusions.

The troubleshooting page (plot_22) tries graphs that cuDNN may refuse through
:class:`~cudnn_guide.studies.failures.Cases`. This module holds the rest of its machinery:

* :func:`accidental_matmuls`: three matmuls users write by accident, as operands for
  :func:`~cudnn_guide.studies.failures.matmul_graph`;
* :func:`try_empty_workspace`, :func:`try_wrong_strides` and :func:`try_guarded`: what ``execute``
  does with a workspace too small or a tensor bound with other strides than declared, and what the
  guide's ``BuiltGraph`` says of the latter, each kept as a case;
* :func:`conclusions`: the page's sentences, computed from the cases' rows.

The operands and the executions need a GPU (or a stand-in); the cases' rows and the sentences do
not.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Collection, Sequence
from typing import Any

__all__ = [
    "EMPTY_WORKSPACE",
    "WRONG_STRIDES",
    "accidental_matmuls",
    "conclusions",
    "try_empty_workspace",
    "try_guarded",
    "try_wrong_strides",
]

EMPTY_WORKSPACE = "workspace too small"
"""The case of a graph executed with an empty workspace."""

WRONG_STRIDES = "variant pack with wrong strides"
"""The case of a tensor bound with other strides than the graph declared."""


def accidental_matmuls(device: Any = "cuda") -> dict[str, tuple[str, tuple[Any, ...]]]:
    """Three matmuls users write by accident: each case's fix, and the operands that declare it.

    The operands are uninitialized tensors, allocated here in this order: A sliced so that neither
    of its two inner dims is contiguous (4×256×512 bf16, strides (262144, 1024, 2), times a
    4×512×256 B, C in bf16); the same kind of product in float64 (4×256×256 each, C and the
    compute in ``DOUBLE``); int8 operands (4×256×256 each) with an int32 result and compute type.

    Parameters
    ----------
    device
        Where the operands are allocated.

    Returns
    -------
    dict[str, tuple[str, tuple[Any, ...]]]
        Case → (fix, (A's, B's and C's ``cudnn.data_type``, then the compute type if any)), the arguments of
        :func:`~cudnn_guide.studies.failures.matmul_graph` after the handle.

    Example
    -------
    >>> for case, (fix, operands) in accidental_matmuls().items():
    ...     cases.attempt(case, fix, failures.matmul_graph(handle, *operands))
    """
    import cudnn
    import torch

    def empties(n: int, dtype: Any, *shape: int) -> list[Any]:
        return [torch.empty(*shape, device=device, dtype=dtype) for _ in range(n)]

    dt, bf16 = cudnn.data_type, torch.bfloat16
    strided = empties(1, bf16, 4, 256, 1024)[0][:, :, ::2]  # strides (262144, 1024, 2)
    return {
        "matmul, A with no contiguous inner dim": (
            "make A contiguous in its last or second-last dim",
            (strided, *empties(1, bf16, 4, 512, 256), dt.BFLOAT16),
        ),
        "matmul in float64": (
            "compute in fp32 or below (or use torch.matmul for float64)",
            (*empties(2, torch.float64, 4, 256, 256), dt.DOUBLE, dt.DOUBLE),
        ),
        "matmul int8 × int8 → int32": (
            "use the layouts and types cuDNN's int8 engines take, or fp8/bf16",
            (*empties(2, torch.int8, 4, 256, 256), dt.INT32, dt.INT32),
        ),
    }


def try_empty_workspace(cases: Any, no_room: Callable[[], Any], needed: int) -> None:
    """Execute with an empty workspace; keep :data:`EMPTY_WORKSPACE` as failing at ``execute``, or as not failing.

    When ``no_room`` raises (the GPU synchronized inside the ``try``), the error is printed and
    kept (:meth:`~cudnn_guide.studies.failures.Cases.raises`). When it does not, that is printed
    and the case kept as ``"runs"`` if the plan needs no workspace, else as ``"raises nothing"``.

    Parameters
    ----------
    cases
        The page's :class:`~cudnn_guide.studies.failures.Cases`.
    no_room
        Executes the graph with an empty workspace.
    needed
        The bytes of workspace the plan asked for (``g.get_workspace_size()``).

    Example
    -------
    >>> no_room = lambda: g.execute(pack, torch.empty(0, device="cuda", dtype=torch.uint8), handle=handle)
    >>> try_empty_workspace(cases, no_room, g.get_workspace_size())
    """
    fix = f"allocate g.get_workspace_size() bytes ({needed} here)"
    if not cases.raises(EMPTY_WORKSPACE, "execute", fix, no_room, sync=True):
        print(f"no error with an empty workspace (the plan needs {needed} bytes)")
        what = f"the plan needs {needed} bytes"
        kind = "runs" if needed == 0 else "raises nothing"
        cases.add(EMPTY_WORKSPACE, kind, "nowhere", "none", what, "—")


def try_wrong_strides(cases: Any, wrong: Callable[[], Any], output: Any, reference: Any) -> None:
    """Execute with a tensor bound in another layout; keep :data:`WRONG_STRIDES` as failing, or what came back.

    When ``wrong`` raises (the GPU synchronized inside the ``try``), the error is printed after
    ``"execute raised "`` and kept at ``execute``. Either way ``output`` is then compared with
    ``reference`` (:func:`cudnn_guide.check.compare`, which never raises); when nothing was raised
    the comparison is printed and the case kept as ``"raises nothing, right output"`` or
    ``"raises nothing, wrong output"``.

    Parameters
    ----------
    cases
        The page's :class:`~cudnn_guide.studies.failures.Cases`.
    wrong
        Executes the graph with the wrongly strided binding.
    output
        The output ``wrong`` writes (a view of it, read after ``wrong`` ran).
    reference
        What the output should be.

    Example
    -------
    >>> check.poison(o)
    >>> try_wrong_strides(cases, lambda: g.execute(wrong_pack, workspace, handle=handle), o, ref)
    """
    from cudnn_guide import check

    fix = "bind tensors with the declared strides"
    raised = cases.raises(WRONG_STRIDES, "execute", fix, wrong, sync=True, prefix="execute raised ")
    silent = check.compare(output, reference, name="K bound with the wrong strides")
    if raised is None:
        print(f"execute raised nothing; the output:\n{silent}")  # the check's own lines, as it wraps them
        cases.add(
            WRONG_STRIDES,
            "raises nothing, " + ("right output" if silent.passed else "wrong output"),
            "nowhere: execute raised nothing",
            "none",
            f"the output: {silent}",
            fix + "; check packs (BuiltGraph.check_pack)",
        )


def try_guarded(built: Any, pack: Any) -> str:
    """Execute a :class:`~cudnn_guide.graphs.builder.BuiltGraph` with ``pack``; what it said, printed.

    ``BuiltGraph.execute`` checks every binding against the declaration before it runs; only its
    :class:`~cudnn_guide.errors.InputError` is caught.

    Parameters
    ----------
    built
        The graph, adopted (:func:`cudnn_guide.graphs.adopt`).
    pack
        Tensor → buffer, as ``execute`` takes it.

    Returns
    -------
    str
        ``"InputError: <message>"``, or ``"BuiltGraph.execute raised nothing"``.

    Example
    -------
    >>> guarded = try_guarded(graphs.adopt(g, handle, name="sdpa"), wrong_pack)
    """
    from cudnn_guide import InputError

    try:
        built.execute(pack)
        guarded = "BuiltGraph.execute raised nothing"
    except InputError as exc:
        guarded = f"InputError: {exc}"
    print(textwrap.fill(guarded, 88))
    return guarded


def conclusions(cases: Any, *, matmuls: Collection[str], no_configs: Sequence[str], guarded: str) -> list[str]:
    """The troubleshooting page's conclusions: every count and sentence computed from the cases' rows.

    How many cases failed, built or ran, or raised nothing; where the failures surfaced and what
    each step means; which plans failed to compile; which cases raised nothing although something
    was wrong; what became of each accidental matmul; which cases met "No valid engine configs";
    and what the guide's ``BuiltGraph`` said of the wrongly strided binding.

    Parameters
    ----------
    cases
        The page's :class:`~cudnn_guide.studies.failures.Cases`, every case tried.
    matmuls
        The cases of the accidental matmuls (:func:`accidental_matmuls`' keys).
    no_configs
        The cases whose message says "No valid engine configs".
    guarded
        :func:`try_guarded`'s outcome.

    Returns
    -------
    list[str]
        Paragraphs for :class:`~cudnn_guide.report.prose.Prose`.

    Example
    -------
    >>> Prose(*conclusions(cases, matmuls=matmuls, no_configs=no_configs, guarded=guarded))
    """
    from cudnn_guide.studies import failures

    outcomes = cases.rows
    failed, built_ok, silent_rows = cases.failed(), cases.fine(), cases.silent()
    matmul_rows = [o for o in outcomes if o["case"] in matmuls]
    said = [o for o in failed if o["outcome"] == "fails with a message"]
    compiled = f", {len(failed) - len(said)} failed to compile a kernel" if len(failed) > len(said) else ""
    return [
        f"Of the {len(outcomes)} cases tried, {len(said)} failed with a message{compiled}, "
        f"{len(built_ok)} built or ran, and {len(silent_rows)} raised nothing at all.",
        "Where the failures surfaced: "
        + cases.where()
        + ". The step says what to change: validate (the graph itself), "
        "create_execution_plans (the heuristics), check_support or build_plans (no engine "
        "for it here, unless the message says a kernel failed to compile), execute (the "
        "buffers).",
        cases.compiled_sentence(),  # which plans' kernels failed to compile (NVRTC)
        (
            f"Raised nothing although something was wrong: {failures.listed(silent_rows)}. "
            "Only a check of the output or of the variant pack catches these."
            if silent_rows
            else "Every case that went wrong here raised an error."
        ),
        f"Of the {len(matmul_rows)} matmuls written by accident, "
        + "; ".join(
            f"{o['case']}: {o['outcome']}" + (f" at {o['surfaces at']}" if o["outcome"] != "builds" else "")
            for o in matmul_rows
        )
        + ".",
        '"No valid engine configs" (the heuristics proposed nothing) came from: '
        + (", ".join(no_configs) if no_configs else "none of the graphs tried here")
        + ".",
        f"The guide's BuiltGraph, handed the same wrongly strided K: {guarded}.",
    ]
