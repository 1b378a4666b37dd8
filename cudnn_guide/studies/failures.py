"""Failures reproduced on purpose: where each one surfaces, in cuDNN's words, kept as one row per case.

The troubleshooting page and the libcudnn-and-logs page try things that go wrong: a graph run
through its five build steps until one raises (:meth:`Cases.attempt`), a call that may raise
(:meth:`Cases.raises`), or a fresh process that loads libcudnn another way (:meth:`Cases.probe`).
Each case becomes one row of :data:`COLUMNS`: what happened, the step it surfaced at, the error's
type, cuDNN's message whole and on one line, and the fix. What happened is one of

* ``"builds"`` or ``"runs"``: nothing went wrong;
* ``"fails with a message"``: a step raised, and the row names it;
* ``"fails to compile a kernel"``: ``build_plans`` raised because the kernels of the plans it
  tried did not compile at run time (NVRTC), not because no engine took the graph;
* ``"raises nothing, ..."``: something was wrong and nothing said so.

The libcudnn-and-logs page also reads the frontend's own account of a build: its log, captured in
a fresh process (:func:`frontend_log`, :func:`log_excerpt`), the plans each heuristic mode lists
and the time its build takes (:func:`timed_build`), and what a plan filter leaves
(:func:`filtered_build`).

The graphs (:func:`sdpa_graph`, :func:`matmul_graph`) and the builds need a GPU; the rows, the
reading of a probe's output or a log, and the formatting helpers do not.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cudnn_guide import collector
from cudnn_guide.check import LINE_WIDTH

__all__ = [
    "COLUMNS",
    "PLANNING",
    "PROBE",
    "STEPS",
    "Cases",
    "compile_failures",
    "dotted",
    "empties",
    "filter_label",
    "filtered_build",
    "five_steps",
    "frontend_log",
    "listed",
    "log_excerpt",
    "matmul_graph",
    "plot_build_ms",
    "plot_kinds",
    "read_probe",
    "sdpa_graph",
    "timed_build",
]

STEPS = ("validate", "build_operation_graph", "create_execution_plans", "check_support", "build_plans")
"""The five build steps of a graph, in the order they run."""

COLUMNS = ("case", "outcome", "surfaces at", "error", "message", "fix")
"""The fields of each case's row, in the order the pages' tables show them."""


def _where(surfaces_at: str) -> str:
    """``" at validate"``; a place that reads as its own phrase (``"before declaring ..."``) joins as it is."""
    own_phrase = surfaces_at.startswith(("before", "after", "at ", "on ", "in "))
    return f" {surfaces_at}" if own_phrase else f" at {surfaces_at}"


PROBE = """
import cudnn
print("imported; backend version:", cudnn.backend_version())
maps = [ln.split()[-1] for ln in open("/proc/self/maps") if "/libcudnn" in ln]
main = [p for p in maps if "/libcudnn.so" in p] + maps + ["not mapped"]
print("libcudnn file:", main[0])
cudnn.create_handle()
print("a handle was created")
"""
"""What :meth:`Cases.probe` runs in a fresh process: import the frontend, print the backend version
and the libcudnn file it loaded, then create a handle."""


def _io_data_type(dtype: Any) -> Any:
    import cudnn
    import torch

    io = {
        torch.bfloat16: cudnn.data_type.BFLOAT16,
        torch.float16: cudnn.data_type.HALF,
        torch.float32: cudnn.data_type.FLOAT,
    }
    return io[dtype]


def sdpa_graph(handle: Any, head_dim: int = 128, dtype: Any = None, q_layout: str = "BHSD") -> tuple[Any, tuple]:
    """Declare causal SDPA on 2×8×1024×``head_dim`` tensors; not built.

    Parameters
    ----------
    handle
        The cuDNN handle the graph is declared on.
    head_dim
        The head dim D of Q, K, V and O.
    dtype
        The torch dtype of Q, K, V and O: bf16 (the default, ``None``), fp16 or fp32.
    q_layout
        ``"BHSD"``: Q laid out like K and V, the head dim innermost; ``"D-major"``: Q with the
        same shape but the head dim outermost in memory (``stride(-1) != 1``).

    Returns
    -------
    tuple
        The graph and its tensors ``(Q, K, V, O)``.

    Example
    -------
    >>> g, (Q, K, V, O) = sdpa_graph(handle, head_dim=256)
    >>> g.validate()
    """
    import cudnn
    import torch

    dtype = torch.bfloat16 if dtype is None else dtype
    g = cudnn.pygraph(
        handle=handle,
        io_data_type=_io_data_type(dtype),
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    x = torch.empty(2, 8, 1024, head_dim, device="cuda", dtype=dtype)
    q = x.transpose(-1, -2).contiguous().transpose(-1, -2) if q_layout == "D-major" else x
    Q, K, V = (g.tensor_like(q, name="q"), g.tensor_like(x, name="k"), g.tensor_like(x, name="v"))
    O, _ = g.sdpa(
        name="sdpa",
        q=Q,
        k=K,
        v=V,
        attn_scale=head_dim**-0.5,
        generate_stats=False,
        diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
        diagonal_band_right_bound=0,
    )
    O.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
    return g, (Q, K, V, O)


def matmul_graph(handle: Any, a: Any, b: Any, out_type: Any, compute_type: Any = None) -> Any:
    """Declare C = A @ B for torch tensors ``a`` and ``b`` as they are laid out; not built.

    Parameters
    ----------
    handle
        The cuDNN handle the graph is declared on.
    a
        A, whose shape, dtype and strides the graph declares.
    b
        B, likewise.
    out_type
        C's ``cudnn.data_type``.
    compute_type
        The ``cudnn.data_type`` to compute in (default ``FLOAT``).

    Returns
    -------
    Any
        The ``cudnn.pygraph``.

    Example
    -------
    >>> a, b = empties(2, torch.float64, 4, 256, 256)
    >>> g = matmul_graph(handle, a, b, cudnn.data_type.DOUBLE, cudnn.data_type.DOUBLE)
    """
    import cudnn

    g = cudnn.pygraph(
        handle=handle,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT if compute_type is None else compute_type,
    )
    A, B = g.tensor_like(a, name="a"), g.tensor_like(b, name="b")
    C = g.matmul(name="mm", A=A, B=B)
    C.set_output(True).set_data_type(out_type)
    return g


def empties(n: int, dtype: Any, *shape: int) -> list[Any]:
    """``n`` uninitialized CUDA tensors of one shape and dtype: operands for a graph's declaration.

    Parameters
    ----------
    n
        How many.
    dtype
        Their torch dtype.
    shape
        Their shape.

    Returns
    -------
    list[Any]
        The tensors.

    Example
    -------
    >>> a, b = empties(2, torch.int8, 4, 256, 256)
    """
    import torch

    return [torch.empty(*shape, device="cuda", dtype=dtype) for _ in range(n)]


def five_steps(g: Any, modes: Sequence[str] = ("A", "FALLBACK")) -> tuple[Callable[[], Any], ...]:
    """The five build steps of ``g`` (:data:`STEPS`) as callables, in order.

    Parameters
    ----------
    g
        A declared ``cudnn.pygraph``.
    modes
        The ``cudnn.heur_mode`` names that ``create_execution_plans`` asks, in order.

    Returns
    -------
    tuple[Callable[[], Any], ...]
        ``validate``, ``build_operation_graph``, ``create_execution_plans`` with ``modes``,
        ``check_support`` and ``build_plans``.

    Example
    -------
    >>> for call in five_steps(g, ("A",))[:3]:
    ...     call()  # planned, not built
    """
    import cudnn

    heuristics = [getattr(cudnn.heur_mode, m) for m in modes]
    return (
        g.validate,
        g.build_operation_graph,
        lambda: g.create_execution_plans(heuristics),
        g.check_support,
        g.build_plans,
    )


def compile_failures(message: Any) -> tuple[int, int]:
    """How many plans failed to compile their kernel at run time (NVRTC), of how many the message lists.

    ``build_plans`` lists each plan it tried as ``"[i] name: reason"``; a message without such a
    list counts as one plan.

    Parameters
    ----------
    message
        The exception (or its text) that a build step raised.

    Returns
    -------
    tuple[int, int]
        The plans whose reason names ``COMPILATION_FAILED``, and the plans listed.

    Example
    -------
    >>> compile_failures("no plan: [0] eng1: COMPILATION_FAILED [1] eng2: not supported")
    (1, 2)
    """
    plans = re.split(r"\[\d+\] ", str(message))[1:] or [str(message)]
    return sum("COMPILATION_FAILED" in p for p in plans), len(plans)


def listed(rows: Iterable[Mapping[str, Any]]) -> str:
    """The cases of ``rows``, comma-separated.

    Parameters
    ----------
    rows
        Rows of :data:`COLUMNS`.

    Returns
    -------
    str
        Their ``"case"`` fields joined by ``", "``.

    Example
    -------
    >>> listed([{"case": "head dim 100"}, {"case": "float32 inputs"}])
    'head dim 100, float32 inputs'
    """
    return ", ".join(r["case"] for r in rows)


def dotted(v: Any) -> str:
    """A backend version as major.minor.patch (``cudnn.backend_version()`` is major·10000 + minor·100 + patch).

    Parameters
    ----------
    v
        The version, as a number or its digits; ``None`` or ``""`` when none was read.

    Returns
    -------
    str
        ``"9.14.0"`` for 91400; ``"?"`` for no version.

    Example
    -------
    >>> dotted(91400), dotted("91900"), dotted(None)
    ('9.14.0', '9.19.0', '?')
    """
    return f"{int(v) // 10000}.{int(v) // 100 % 100}.{int(v) % 100}" if v else "?"


def read_probe(text: str, hide: str = "") -> tuple[list[str], str | None, str]:
    """Read what a :data:`PROBE` process printed: its non-blank lines, the backend version and the libcudnn file.

    Parameters
    ----------
    text
        The process's standard output and error, together.
    hide
        A path to show as ``<dir>`` in the lines (a temporary directory's name); ``""`` hides nothing.

    Returns
    -------
    tuple[list[str], str | None, str]
        The non-blank lines; the version printed after ``backend version:`` (``None`` if the
        import failed first); the file printed after ``libcudnn file:`` (``"?"`` if none was).

    Example
    -------
    >>> read_probe("imported; backend version: 91900\\nlibcudnn file: /x/libcudnn.so.9\\n")
    (['imported; backend version: 91900', 'libcudnn file: /x/libcudnn.so.9'], '91900', '/x/libcudnn.so.9')
    """
    said = [ln for ln in (text.replace(hide, "<dir>") if hide else text).splitlines() if ln.strip()]
    version = next((ln.split(":")[-1].strip() for ln in said if "backend version" in ln), None)
    lib = next((ln.split(":", 1)[1].strip() for ln in said if "libcudnn file:" in ln), "?")
    return said, version, lib


class Cases:
    """The cases a page tries, one row of :data:`COLUMNS` each, and the kernels that failed to compile.

    Parameters
    ----------
    rows
        The list the rows are appended to (a new one by default).

    Example
    -------
    >>> cases = Cases()
    >>> cases.add("float32 inputs", "fails with a message", "validate", "cudnnGraphNotSupportedError",
    ...           "fp32 is\\nnot supported", "cast to bf16")
    >>> cases.rows[0]["message"], cases.where()
    ('fp32 is not supported', 'validate: 1')
    """

    def __init__(self, rows: list[dict[str, str]] | None = None) -> None:
        self.rows: list[dict[str, str]] = [] if rows is None else rows
        """One dict per case, keyed by :data:`COLUMNS`, in the order they were tried."""
        self.compiled: dict[str, tuple[int, int]] = {}
        """Case → (plans whose kernel failed to compile, plans ``build_plans`` tried)."""

    def add(self, case: str, what: str, where: str, error: str, message: Any, fix: str) -> None:
        """Keep one case's row; the message whole, on one line.

        Parameters
        ----------
        case
            What was tried.
        what
            What happened: ``"builds"``, ``"runs"``, ``"fails with a message"``, ``"raises nothing, ..."``.
        where
            The step it surfaced at (``"—"`` when nothing failed).
        error
            The exception's type name, or ``"none"``.
        message
            cuDNN's words (an exception, or text): its whitespace runs become single spaces.
        fix
            What to change (``"—"`` when nothing needs to).

        Example
        -------
        >>> cases.add("head dim 104", "builds", "—", "none", "4 plan(s)", "—")
        """
        row = dict(zip(COLUMNS, (case, what, where, error, " ".join(str(message).split()), fix)))
        self.rows.append(row)

    def attempt(self, case: str, fix: str, g: Any, modes: Sequence[str] = ("A", "FALLBACK")) -> Any:
        """Run the five steps of ``g``; keep the step that raised and cuDNN's words, or the plans it built.

        A failure whose message says that plans failed to compile is kept as ``"fails to compile a
        kernel"`` (and counted in :attr:`compiled`), any other as ``"fails with a message"``. One
        line says what happened.

        Parameters
        ----------
        case
            What is tried.
        fix
            The fix, kept if a step raises.
        g
            A declared graph, not built.
        modes
            The heuristic modes ``create_execution_plans`` asks.

        Returns
        -------
        Any
            ``g``, built, or ``None`` if a step raised.

        Example
        -------
        >>> g = cases.attempt("head dim 256", "pad the head dim", sdpa_graph(handle, head_dim=256)[0])
        >>> cases.rows[-1]["outcome"], cases.rows[-1]["surfaces at"]  # ("builds", "—") if g is not None
        """
        for step, call in zip(STEPS, five_steps(g, modes)):
            try:
                call()
            except Exception as exc:
                bad, tried = compile_failures(exc)
                what = "fails to compile a kernel" if bad else "fails with a message"
                if bad:  # an engine took the graph; its kernel did not compile
                    self.compiled[case] = (bad, tried)
                self.add(case, what, step, type(exc).__name__, exc, fix)
                said = f"{case}: {type(exc).__name__} at {step} ({what})"
                print(said if len(said) <= LINE_WIDTH else f"{case}:\n    {type(exc).__name__} at {step} ({what})")
                return None
        plans = g.get_execution_plan_count()
        first = g.get_plan_name_at_index(0)
        self.add(case, "builds", "—", "none", f"{plans} plan(s), first {first}", "—")
        print(f"{case}: builds ({plans} plan(s))")
        return g

    def probe(
        self,
        case: str,
        python: str,
        fix: str,
        ours: str,
        our_file: str | None,
        hide: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Run :data:`PROBE` in a fresh process; keep whether it failed, loaded this libcudnn, or another.

        A non-zero exit fails at ``"import cudnn"`` (no version was printed) or at ``"creating a
        handle"``; the last line printed is the message. An exit of 0 is kept as ``"runs"`` with this
        process's version, and as ``"raises nothing, loads another libcudnn (...)"`` with another.
        Then the exit code and the last four lines printed are shown.

        Parameters
        ----------
        case
            What is tried.
        python
            The Python interpreter that runs the probe.
        fix
            The fix, kept unless the same libcudnn loaded.
        ours
            This process's ``str(cudnn.backend_version())``.
        our_file
            The libcudnn this process mapped (``libcudnn.loaded_libcudnn()``).
        hide
            A path to show as ``<dir>`` (a temporary directory's name).
        env
            Environment variables set in the probe on top of this process's.

        Example
        -------
        >>> cases.probe("no wheel", venv_python, "pip install nvidia-cudnn-cu13", ours, our_file,
        ...             env={"LD_LIBRARY_PATH": ""})
        """
        run = subprocess.run(
            [python, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **(env or {})},
        )
        said, version, lib = read_probe(run.stdout + run.stderr, hide)
        last = said[-1] if said else "(nothing)"
        if run.returncode:
            where = "creating a handle" if version else "import cudnn"
            self.add(case, "fails with a message", where, last.split(":")[0], last, fix)
        elif version == ours:
            self.add(case, "runs", "—", "none", f"loaded libcudnn {dotted(version)} from {lib}, as here", "—")
        else:
            what = f"loaded libcudnn {dotted(version)} from {lib}; this process runs {dotted(ours)} from {our_file}"
            kind = f"raises nothing, loads another libcudnn ({dotted(version)})"
            self.add(case, kind, "nowhere", "none", what, fix)
        print(f"{case}: exit code {run.returncode}; the last lines it printed:")
        print("\n".join(textwrap.fill(ln, LINE_WIDTH, initial_indent=" " * 4) for ln in said[-4:]))

    def raises(
        self,
        case: str,
        where: str,
        fix: str,
        call: Callable[[], Any],
        catch: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        sync: bool = False,
        prefix: str = "",
    ) -> BaseException | None:
        """Call ``call()``; if it raises, show the error and keep the case as failing at ``where``.

        Only the exceptions in ``catch`` are caught; any other propagates. When nothing is raised,
        nothing is kept: the caller knows what its success means, and adds that row itself.

        Parameters
        ----------
        case
            What is tried.
        where
            The step a failure surfaces at (``"execute"``).
        fix
            The fix, kept if it raises.
        call
            What to run, with no arguments.
        catch
            The exception type(s) that count as the case failing.
        sync
            Wait for the GPU after ``call`` (``torch.cuda.synchronize()``), inside the ``try``, so
            that an error of a launched kernel surfaces here.
        prefix
            Printed before ``"<error type>: <message>"`` (``"execute raised "``).

        Returns
        -------
        BaseException | None
            The exception, or ``None`` if nothing was raised.

        Example
        -------
        >>> if not cases.raises("workspace too small", "execute", "allocate it", run_with_no_workspace, sync=True):
        ...     cases.add("workspace too small", "runs", "nowhere", "none", "the plan needs 0 bytes", "—")
        """
        try:
            call()
            if sync:
                import torch

                torch.cuda.synchronize()
        except catch as exc:
            print(textwrap.fill(f"{prefix}{type(exc).__name__}: {exc}", LINE_WIDTH))
            self.add(case, "fails with a message", where, type(exc).__name__, exc, fix)
            return exc
        return None

    def table(self) -> Any:
        """The rows as an HTML table of :data:`COLUMNS` (:func:`~cudnn_guide.report.tables.html_table`).

        Returns
        -------
        Any
            A pandas ``Styler``, which a page renders as a table.

        Example
        -------
        >>> cases.table()  # the last expression of a page's cell
        """
        import pandas as pd

        from cudnn_guide.report import html_table

        return html_table(pd.DataFrame(self.rows, columns=list(COLUMNS)))

    def compiled_sentence(self) -> str:
        """Which cases failed to compile kernels, and how many of the plans tried: one sentence.

        Returns
        -------
        str
            ``"A failed compilation, not a missing engine: <case>: 4 of the 4 plan(s) build_plans
            tried failed to compile their kernel at run time (NVRTC; ...)."``, or ``"No plan failed
            to compile its kernel here."``

        Example
        -------
        >>> Cases().compiled_sentence()
        'No plan failed to compile its kernel here.'
        """
        if not self.compiled:
            return "No plan failed to compile its kernel here."
        return (
            "A failed compilation, not a missing engine: "
            + "; ".join(
                f"{case}: {bad} of the {tried} plan(s) build_plans tried failed to compile "
                "their kernel at run time (NVRTC; CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)"
                for case, (bad, tried) in self.compiled.items()
            )
            + "."
        )

    def failed(self) -> list[dict[str, str]]:
        """The rows whose outcome starts with ``"fails"``.

        Returns
        -------
        list[dict[str, str]]
            Failed with a message, or to compile a kernel.

        Example
        -------
        >>> len(cases.failed())
        """
        return [o for o in self.rows if o["outcome"].startswith("fails")]

    def fine(self) -> list[dict[str, str]]:
        """The rows that built or ran.

        Returns
        -------
        list[dict[str, str]]
            Outcome ``"builds"`` or ``"runs"``.

        Example
        -------
        >>> listed(cases.fine())
        """
        return [o for o in self.rows if o["outcome"] in ("builds", "runs")]

    def silent(self) -> list[dict[str, str]]:
        """The rows where something was wrong and nothing raised.

        Returns
        -------
        list[dict[str, str]]
            Outcome starting with ``"raises nothing"``.

        Example
        -------
        >>> listed(cases.silent())
        """
        return [o for o in self.rows if o["outcome"].startswith("raises nothing")]

    def where(self) -> str:
        """Where the failures surfaced: each step and how many, the most first; ``"nowhere"`` if none failed.

        Returns
        -------
        str
            ``"validate: 3; build_plans: 1"``.

        Example
        -------
        >>> "Where the failures surfaced: " + cases.where()
        """
        steps = Counter(o["surfaces at"] for o in self.failed())
        return "; ".join(f"{step}: {n}" for step, n in steps.most_common()) or "nowhere"

    def kinds(self) -> Counter[str]:
        """How many cases had each outcome, a failure's with the step it surfaced at.

        Returns
        -------
        Counter[str]
            ``"fails with a message at validate"``, ``"builds"``, ... → cases, in first-seen order.

        Example
        -------
        >>> plt.barh(list(cases.kinds()), list(cases.kinds().values()))
        """
        return Counter(
            o["outcome"] + (_where(o["surfaces at"]) if o["outcome"].startswith("fails") else "") for o in self.rows
        )


def plot_kinds(kinds: Mapping[str, int], title: str) -> Any:
    """A bar per kind of outcome (:meth:`Cases.kinds`), the first on top: how many cases had it.

    Parameters
    ----------
    kinds
        Outcome → number of cases.
    title
        The figure's title.

    Returns
    -------
    Any
        The matplotlib figure.

    Example
    -------
    >>> plot_kinds(cases.kinds(), "what happened to each case tried on this page")
    >>> plt.show()
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
    ax.barh(list(kinds), list(kinds.values()))
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("cases")
    # over the whole figure, not the axes: long bar labels leave the axes too narrow for it
    fig.suptitle(textwrap.fill(title, 70))
    return fig


def plot_build_ms(rows: Sequence[Mapping[str, Any]], title: str) -> Any:
    """A bar per heuristic mode (:func:`timed_build`'s rows): the milliseconds its build took.

    Parameters
    ----------
    rows
        :func:`timed_build`'s rows, one per mode.
    title
        The figure's title.

    Returns
    -------
    Any
        The matplotlib figure.

    Example
    -------
    >>> plot_build_ms([timed_build(sdpa_graph(handle)[0], m) for m in (("A",), ("B",))], "build time")
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 2.8), layout="constrained")
    ax.barh(
        [f"{r['heur_mode']} ({r['plans']} plans)" for r in rows],
        [1e3 * r["build s (5 steps)"] for r in rows],
    )
    ax.set_xlabel("ms to build the causal SDPA graph, five steps (one build each)")
    ax.set_title(title)
    return fig


def frontend_log(script: str, timeout: float = 300) -> list[str]:
    """Run ``script`` in a fresh Python with the frontend's log on; the lines it logged.

    The process gets ``CUDNN_FRONTEND_LOG_INFO=1`` and ``CUDNN_FRONTEND_LOG_FILE=stdout``; the
    lines of its standard output that start with ``[cudnn_frontend]`` are the log, less the
    lines about inferring tensor properties (``Inferrencing``), one per tensor.

    Parameters
    ----------
    script
        Python source that builds a graph.
    timeout
        Seconds before the process is killed (``subprocess.TimeoutExpired``).

    Returns
    -------
    list[str]
        The log's lines, in order.

    Example
    -------
    >>> log = frontend_log("import cudnn; ...; g.build([cudnn.heur_mode.A])")
    """
    logged = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, CUDNN_FRONTEND_LOG_INFO="1", CUDNN_FRONTEND_LOG_FILE="stdout"),
    )
    return [ln for ln in logged.stdout.splitlines() if ln.startswith("[cudnn_frontend]") and "Inferrencing" not in ln]


PLANNING = re.compile(r"heur|engine|plan|execut|knob|workspace", re.IGNORECASE)
"""A log line that names the heuristics, an engine, a plan, a knob, the workspace or an execution."""


def log_excerpt(lines: Sequence[str], head: int = 12, most: int = 20) -> list[str]:
    """The first ``head`` lines of a log, then at most ``most`` later lines that match :data:`PLANNING`.

    Banners (``||| ====   VALIDATING GRAPH   ==== |||``) become ``== VALIDATING GRAPH ==``, and
    other runs of three or more ``=`` ``==``, so that they fit a page's width.

    Parameters
    ----------
    lines
        The log's lines (:func:`frontend_log`).
    head
        How many lines to keep from the start, whatever they say.
    most
        How many of the later planning lines to keep, at most.

    Returns
    -------
    list[str]
        The lines kept, in the log's order.

    Example
    -------
    >>> log_excerpt(["[cudnn_frontend] ======== validate", "a", "engine 3 chosen", "b"], head=1)
    ['[cudnn_frontend] == validate', 'engine 3 chosen']
    """
    kept = list(lines[:head]) + [ln for ln in lines[head:] if PLANNING.search(ln)][:most]
    return [_BANNER.sub(lambda m: f"== {m.group(1)} ==", re.sub(r"={3,}", "==", ln)) for ln in kept]


_BANNER = re.compile(r"\|\|\|[\s=]*(.*?)[\s=]*\|\|\|")
"""A log banner, ``||| ====   VALIDATING GRAPH   ====   = |||``: its words are kept."""


def _note_names(notes: Iterable[Any]) -> str:
    return ", ".join(str(n).split(".")[-1] for n in notes) or "none"


@collector.measuring()
def timed_build(g: Any, modes: Sequence[str]) -> dict[str, Any]:
    """Build ``g`` in its five steps with the heuristic ``modes``; the plans listed, their notes, the time taken.

    The time is of the five steps, together with reading the plans' names and notes after the
    third (``create_execution_plans``): one build, not a distribution.

    Parameters
    ----------
    g
        A declared graph, not built.
    modes
        The ``cudnn.heur_mode`` names to ask, in order.

    Returns
    -------
    dict[str, Any]
        ``heur_mode`` (the modes joined by ``+``), ``plans``, ``plan names``, ``behaviour notes``
        (each plan's, ``;``-separated), ``build s (5 steps)`` and the built plan's
        ``workspace bytes``.

    Example
    -------
    >>> timed_build(sdpa_graph(handle)[0], ("A", "FALLBACK"))["plans"]
    """
    calls = five_steps(g, modes)
    t0 = time.perf_counter()
    for call in calls[:3]:
        call()
    plans = g.get_execution_plan_count()
    names = [g.get_plan_name_at_index(i) for i in range(plans)]
    notes = [g.get_behavior_notes_for_plan_at_index(i) for i in range(plans)]
    for call in calls[3:]:
        call()
    return {
        "heur_mode": "+".join(modes),
        "plans": plans,
        "plan names": ", ".join(names),
        "behaviour notes": "; ".join(_note_names(ns) for ns in notes),
        "build s (5 steps)": time.perf_counter() - t0,
        "workspace bytes": g.get_workspace_size(),
    }


def filter_label(method: str, arg: Any) -> str:
    """How a plan filter's call reads: ``deselect_numeric_notes([TENSOR_CORE])``.

    Parameters
    ----------
    method
        The graph's filter method (``deselect_engines``, ``select_behavior_notes``, ...).
    arg
        Its argument: a number, or a list of engine names or notes (shown by their names).

    Returns
    -------
    str
        The call, as text.

    Example
    -------
    >>> filter_label("deselect_workspace_greater_than", 0), filter_label("deselect_engines", ["eng0"])
    ('deselect_workspace_greater_than(0)', 'deselect_engines([eng0])')
    """

    def shown(a: Any) -> str:
        if isinstance(a, list | tuple):
            return "[" + ", ".join(shown(x) for x in a) + "]"
        return str(getattr(a, "name", a))

    return f"{method}({shown(arg)})"


def filtered_build(g: Any, method: str, arg: Any) -> str:
    """Plan ``g`` with ``A`` then ``FALLBACK``, apply one plan filter, and finish the build; what came of it.

    Parameters
    ----------
    g
        A declared graph, not built.
    method
        The graph's filter method, called after ``create_execution_plans``.
    arg
        Its argument.

    Returns
    -------
    str
        ``"builds; the built plan needs N bytes of workspace"``, or the error ``check_support`` or
        ``build_plans`` raised, as ``"<type>: <message on one line>"``.

    Example
    -------
    >>> filtered_build(sdpa_graph(handle)[0], "deselect_workspace_greater_than", 0)
    """
    calls = five_steps(g)
    for call in calls[:3]:
        call()
    getattr(g, method)(arg)
    try:
        for call in calls[3:]:
            call()
        return f"builds; the built plan needs {g.get_workspace_size()} bytes of workspace"
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
