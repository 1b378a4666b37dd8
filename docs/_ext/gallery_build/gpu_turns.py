"""Pages that share one GPU take turns on it: one page measures on the GPU at a time.

The recorder can run several pages at once on one GPU (``--lanes N``), each in its own process.
Two pages timing at once moved a fifth of the measurements (the measurement studies' "Two lanes
on one GPU"), so lanes take **turns** on a ``flock`` that every lane of that GPU opens:

- by default (:data:`SCOPE_ENV` unset or ``measured``) each code cell holds it **shared**, so
  that the cells of other lanes run beside it (their checks, references, tables and figures),
  and each **measured block** holds it **alone** (:func:`cudnn_guide.collector.measuring`: every
  timing loop, fresh-process study, interpreter pool, timed plan build and first call whose wall
  time a page reports; an untimed build sets the shared turn aside, below); a lane waiting to measure goes
  before lanes that ask for a shared turn after it. This became the default when its second
  whole-site recording (d51459d) met both bars and became the site's recording; its first (254ec0e)
  missed one. The cells of a page whose own code reads a clock hold it alone, from the first
  reading's cell to the last's (:func:`clock_lines`: the library cannot mark what a page's own code
  times); the page's other cells share it (through dcab682's recording every cell of such a page
  held it alone);
- with :data:`SCOPE_ENV` ``=cell`` each code cell holds the turn **alone**, and so every timed
  call, check and fresh-process study in it, as the site's recordings before d51459d's were made.

The measurement studies' "Cells that share the turn" and "The shared turn, again" have the numbers.

A lane sets the turn aside for work that needs the CPU and not the GPU, so that another lane
measures meanwhile:

- ``torch.compile``'s compiling (Dynamo's compile-start and compile-end callbacks), except the
  GPU benchmarks of Inductor's autotuning, which hold the turn alone while they run;
- FlashAttention-4's CuTe DSL kernel compiles (``cutlass.cute.compile`` called from ``flash_attn``);
- importing ``flash_attn`` (the CuTe DSL with it: seconds of Python);
- in a page whose cells share the turn, cuDNN's plan building (:data:`BUILD_STEPS` of ``cudnn.pygraph``:
  heuristics and run-time kernel compiles on the CPU) and the ``cudnn`` import (:data:`BUILD_IMPORTS`),
  unless :data:`BUILDS_ASIDE_ENV` is ``0``: a timed build is a measured block, and a cell that reads a
  clock itself keeps the turn through its builds;
- Sphinx's own work before, between and after the cells, and the saving of a cell's figures, after its code
  ran (:meth:`Turn.let_go`: the turn is given up for the rest of the cell, and taken back only to print a
  last expression, whose repr may read a tensor on the GPU).

Nothing is set aside inside a measured block (:func:`cudnn_guide.collector.measuring_now`): the
wait to take the turn back would be counted. (Setting the builds, the ``cudnn`` import and a
fresh-process study's imports aside was first tried at a7ca1c8, when every cell held the turn alone:
the recording was no faster, and its host-bound measurements moved more; the measurement studies'
"More work beside the turn, and five rounds" has the numbers. With cells that share the turn, an
untimed build held the shared turn from 5d281fa until issue 34's one-call recordings set builds aside
again: while a page builds, another may measure.) A compile's example inputs still run on the GPU
while its turn is aside. Each lane is pinned to its own CPU cores (:data:`CPUS_ENV`, every thread of
the page's process and what it starts), so another lane's compile workers do not share the cores of
the lane that measures.
Without :data:`TURN_ENV` (one lane, or a reader's own build) nothing here does anything.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "TURN_ENV",
    "SCOPE_ENV",
    "SCOPES",
    "TRACE_ENV",
    "GIVE_WAY_ENV",
    "block_owner",
    "turn_scope",
    "CLOCK_CALLS",
    "is_clock_call",
    "reads_a_clock",
    "clock_lines",
    "CPUS_ENV",
    "ASIDE_IMPORTS",
    "BUILDS_ASIDE_ENV",
    "BUILD_STEPS",
    "BUILD_IMPORTS",
    "builds_aside",
    "ASIDE_CALLERS",
    "SHARED_ASIDE_CALLERS",
    "COMPILE_TRIGGERS",
    "Turn",
    "lane_cpus",
    "pin_to_lane_cpus",
    "install",
    "current",
    "take_turns_per_cell",
]

TURN_ENV = "CUDNN_GUIDE_GPU_TURN"
"""The lock file the lanes of one GPU share (set by the recorder for each lane's pages)."""
SCOPE_ENV = "CUDNN_GUIDE_TURN_SCOPE"
"""``measured`` (the default): cells hold the turn shared and measured blocks alone, as the site's recording
since d51459d's was made; ``cell``: every cell holds it alone, as the recordings before it were made
(measurement studies, "Cells that share the turn" and "The shared turn, again")."""
SCOPES = ("cell", "measured")
"""The values :data:`SCOPE_ENV` takes."""
GIVE_WAY_ENV = "CUDNN_GUIDE_GIVE_WAY"
"""``0``: a shared cell never gives way mid-cell (:meth:`Turn.give_way`), as before dcab682, for an A/B of the two
inside one lease (a recorder call's whole run: every lane inherits it). Unset or anything else: it gives way."""
TRACE_ENV = "CUDNN_GUIDE_TURN_TRACE"
"""A folder: each page recorded in lanes writes there ``<page>.turns.json``, every turn it held (how, and
when it was asked for, taken and given up, in Unix seconds), so that a recording's timeline can be
studied (which lane held the GPU, shared or alone, while another waited)."""
CPUS_ENV = "CUDNN_GUIDE_LANE_CPUS"
"""The CPU cores of this lane, e.g. ``0-4``."""
ASIDE_IMPORTS = ("flash_attn",)
"""Packages whose import runs with the turn set aside: Python, seconds, no GPU work (not ``cutlass``:
cuDNN's own engines import it inside ``build_plans``, which pages time)."""
BUILDS_ASIDE_ENV = "CUDNN_GUIDE_BUILDS_ASIDE"
"""``0``: cuDNN's plan building and the ``cudnn`` import keep the page's shared turn (as from 5d281fa until issue
34's one-call recordings), for an A/B inside one lease (every lane of a recorder call inherits it). Unset or
anything else: a page whose cells share the turn sets it aside for them (:data:`BUILD_STEPS`, :data:`BUILD_IMPORTS`)."""
BUILD_STEPS = ("create_execution_plans", "check_support", "build_plans")
"""The ``cudnn.pygraph`` methods run with the turn set aside, in a page whose cells share it: CPU work
(heuristics, run-time kernel compiles), untimed there unless inside a measured block."""
BUILD_IMPORTS = ("cudnn",)
"""Packages imported with the turn set aside under the rule of :data:`BUILD_STEPS` (loading libcudnn: CPU work)."""
ASIDE_CALLERS = ("flash_attn",)
"""Packages whose ``cute.compile`` calls set the turn aside."""
SHARED_ASIDE_CALLERS = ("cudnn",)
"""Packages whose ``cute.compile`` calls set the turn aside only in a page whose cells share it (see
:func:`_cute_aside`)."""


class Turn:
    """This process's turn on a GPU shared with other lanes: a ``flock`` on ``path``.

    With ``shared_cells`` (:data:`SCOPE_ENV` ``measured``, the default), a code cell holds the turn
    *shared*: the cells of other lanes may run meanwhile. Every measured block
    (:func:`cudnn_guide.collector.measuring`: a timing loop, a fresh-process study, a timed plan
    build, a first call) holds it *exclusively*, so that nothing of another lane runs on the GPU, or
    on the CPU under the turn, while a page measures. A lane that asks for it exclusively is let in
    before any lane that asks for it shared after it (a second lock, ``path + ".gate"``, queues
    them), so measuring does not starve behind a stream of shared cells. Without
    ``shared_cells`` (:data:`SCOPE_ENV` ``=cell``) every cell holds it exclusively.

    :meth:`held` takes the turn for a block (a code cell) unless it is already held;
    :meth:`exclusive` holds it alone for a block; :meth:`aside` gives it up for a block of
    CPU-only work and takes it back after. All nest. Between a cell's GPU steps, :meth:`give_way`
    lets a lane that waits to measure go first, so that it does not wait for the whole cell.
    ``waited`` counts the seconds spent waiting for the turn, ``held_seconds`` those holding it
    (``exclusive_seconds`` of them alone), ``aside_seconds`` those given up inside a held block.

    Parameters
    ----------
    path
        The lock file, shared by every lane of one GPU.
    shared_cells
        Cells hold the turn shared, measured blocks exclusively.

    Example
    -------
    >>> turn = Turn(str(tmp_path / "gpu-0.turn"), shared_cells=True)
    >>> with turn.held():  # a code cell: other lanes' cells may run
    ...     with turn.exclusive():  # a measured block: alone on the GPU
    ...         pass
    ...     with turn.aside():  # a compile: another lane may measure meanwhile
    ...         pass
    """

    def __init__(self, path: str, shared_cells: bool = False, gated: bool | None = None) -> None:
        self.path = path
        self.shared_cells = shared_cells
        self.gated = shared_cells if gated is None else gated
        """Take the turn through the gate (every lane of a GPU whose other lanes may share it must)."""
        self._in_cell = False
        self._cell_alone = False  # this cell reads a clock in the page's own code: alone, nothing set aside
        self.clock_lines: tuple[int, int] | None = None
        """Under ``shared_cells``: the page's lines from its first to its last own clock reading
        (:func:`clock_lines`); a cell that overlaps them holds the turn alone (:meth:`cell_is_alone`)."""
        self._aside_depth = 0
        self._fd: int | None = None
        self._gate_fd: int | None = None
        self._alone_fd: int | None = None
        self._pid = os.getpid()
        self.mode: str | None = None
        self.waited = 0.0
        self.aside_seconds = 0.0
        self.held_seconds = 0.0
        self.exclusive_seconds = 0.0
        self.compile_waits = 0.0
        self.turns = 0
        self.gave_way = 0
        """Times a shared turn was given up mid-cell to a lane waiting to measure (:meth:`give_way`)."""
        self.let_go_times = 0
        """Cells whose shared turn was given up before their figures were saved (:meth:`let_go`)."""
        self._since = 0.0
        self._asked = self._taken = 0.0
        self._owner = "cell"
        self._block = "open measured block"  # the last measured block that took the turn alone
        self._cell_line: int | None = None
        self.trace: list[tuple[str, float, float, float, str, int | None]] = []
        """Every turn held: ``(mode, asked, taken, given up, owner, line)``, times in Unix seconds (:data:`TRACE_ENV`);
        ``owner`` is ``"cell"`` for a cell's turn, else the measured block's (:func:`block_owner`); ``line`` is the
        first line of the code cell it was taken in (``None`` outside a cell), so that a trace says which cells
        held the shared turn longest."""

    @property
    def holding(self) -> bool:
        """Whether this process holds the turn now, shared or alone."""
        return self.mode is not None

    def _open(self, gate: bool = False, alone: bool = False) -> int:
        if self._pid != os.getpid():
            self._fd = self._gate_fd = self._alone_fd = None
            self._pid = os.getpid()
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        if alone:  # held (shared) by every lane waiting to take the turn alone: give_way looks at it
            if self._alone_fd is None:
                self._alone_fd = os.open(self.path + ".alone", flags, 0o600)
            return self._alone_fd
        if gate:
            if self._gate_fd is None:
                self._gate_fd = os.open(self.path + ".gate", flags, 0o600)
            return self._gate_fd
        if self._fd is None:
            self._fd = os.open(self.path, flags, 0o600)
        return self._fd

    def _take(self, mode: str, owner: str = "cell") -> None:
        import fcntl

        t0 = time.perf_counter()
        if self.gated:  # the gate queues lanes in order, so a shared cell never jumps a measurement
            waiting = self._open(alone=True) if mode != "shared" else None
            if waiting is not None:  # says "a lane waits to measure" to the shared holders (give_way)
                fcntl.flock(waiting, fcntl.LOCK_SH)
            gate = self._open(gate=True)
            try:
                fcntl.flock(gate, fcntl.LOCK_EX)
                try:
                    fcntl.flock(self._open(), fcntl.LOCK_SH if mode == "shared" else fcntl.LOCK_EX)
                finally:
                    fcntl.flock(gate, fcntl.LOCK_UN)
            finally:
                if waiting is not None:
                    fcntl.flock(waiting, fcntl.LOCK_UN)
        else:
            fcntl.flock(self._open(), fcntl.LOCK_EX)
        self._since = time.perf_counter()
        self._taken = time.time()  # the trace's clock; asked and given up are placed from it
        self._asked = self._taken - (self._since - t0)
        self.waited += self._since - t0
        self.mode, self.turns, self._owner = mode, self.turns + 1, owner

    def _give(self) -> None:
        import fcntl

        if self._fd is not None and self._pid == os.getpid():
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        if self.mode is not None:
            seconds = time.perf_counter() - self._since
            given = self._taken + seconds
            self.trace.append((self.mode, self._asked, self._taken, given, self._owner, self._cell_line))
            self.held_seconds += seconds
            if self.mode == "exclusive":
                self.exclusive_seconds += seconds
        self.mode = None

    def cell_is_alone(self, first: int, last: int) -> bool:
        """Whether the cell on lines ``first`` to ``last`` of its page holds the turn alone for itself: with
        the cell-wide turn every cell does; with cells sharing it, one that overlaps :attr:`clock_lines`.

        Example
        -------
        >>> turn.clock_lines = (40, 95)
        >>> turn.cell_is_alone(20, 39), turn.cell_is_alone(90, 120)
        (False, True)
        """
        if not self.shared_cells:
            return True
        return self.clock_lines is not None and first <= self.clock_lines[1] and last >= self.clock_lines[0]

    def _cell_mode(self) -> str:
        """How a cell holds the turn now: alone with the cell-wide turn, in a cell that reads a clock, or
        while a measured block is open (one left open by an earlier cell), else shared."""
        return "exclusive" if not self.shared_cells or self._cell_alone or _measuring_now() else "shared"

    def _cell_owner(self) -> str:
        """Whose turn a cell takes, for the trace: its own, or that of the measured block still open (one an
        earlier cell left open, as an interpreter pool's across cells)."""
        return self._block if self.shared_cells and _measuring_now() else "cell"

    @contextlib.contextmanager
    def held(self, alone: bool = False, line: int | None = None) -> Iterator[None]:
        """Hold the turn for the block, a code cell (taking it if not held, waiting for it if another lane
        has it): shared with other lanes' cells under ``shared_cells``, else alone. Given up when it ends.

        ``alone``: this cell reads a clock in the page's own code (:meth:`cell_is_alone`): it holds the
        turn alone from start to end and sets nothing aside, since its own timer would count the wait. ``line``: the
        cell's first line in its page, kept with each turn it holds (:attr:`trace`)."""
        if self._in_cell or self._pid != os.getpid():
            yield
            return
        self._in_cell, self._cell_alone, self._cell_line = True, alone, line
        try:
            if self.mode is None:
                self._take(self._cell_mode(), self._cell_owner())
            yield
        finally:
            with contextlib.suppress(Exception):  # a failed cell's CUDA error is its own to report
                _drain()
            self._give()
            self._in_cell = self._cell_alone = False
            self._cell_line = None

    @contextlib.contextmanager
    def exclusive(self, owner: str | None = None) -> Iterator[None]:
        """Hold the turn alone for the block: a shared turn is given up (this process's GPU work
        drained first), the turn taken alone, and after the block the cell's turn taken back (none
        inside an aside, which takes its own back). ``owner`` names the block in the trace (default:
        :func:`block_owner`)."""
        if self.mode == "exclusive" or self._pid != os.getpid():
            yield
            return
        if self.mode is not None:
            with contextlib.suppress(Exception):
                _drain()
            self._give()
        if self.shared_cells:
            self._block = owner or block_owner()
        self._take("exclusive", self._block if self.shared_cells else "cell")
        try:
            yield
        finally:
            if self.mode == "exclusive" and not (self._in_cell and self._cell_alone):
                # not when the cell around it ended first (a block left open), nor in a cell that holds the
                # turn alone for its own clock (a block an earlier cell left open, closing here): it keeps it
                with contextlib.suppress(Exception):
                    _drain()
                self._give()
                if self._in_cell and self._aside_depth == 0:
                    self._take(self._cell_mode(), self._cell_owner())

    @contextlib.contextmanager
    def aside(self, compiling: bool = False) -> Iterator[None]:
        """Give the turn up for a block of CPU-only work, and take it back after (as the cell holds it,
        or alone if a measured block opened meanwhile is still open).

        A no-op when the turn is not held, while a CUDA graph is captured, and inside a measured
        block (:func:`cudnn_guide.collector.measuring_now`), whose wall time would count the wait
        to get the turn back. ``compiling``: the block is Dynamo's compile, whose own clock counts
        that wait (:attr:`compile_waits` keeps it apart).
        """
        if (
            self.mode is None
            or self._pid != os.getpid()
            or self._cell_alone
            or self._measuring(compiling)
            or not _drain()
        ):
            yield
            return
        mode = self.mode
        self._give()
        self._aside_depth += 1
        t0, waited0 = time.perf_counter(), self.waited
        try:
            yield
        finally:
            self._aside_depth -= 1
            t1 = time.perf_counter()
            self.aside_seconds += (t1 - t0) - (self.waited - waited0)  # a turn taken inside: its wait is a wait
            if self.mode is None:  # a measured block opened inside and still open holds it already
                self._take("exclusive" if self.shared_cells and _measuring_now() else mode, self._cell_owner())
                if compiling:
                    self.compile_waits += self._since - t1

    def let_go(self) -> bool:
        """The rest of the cell needs no GPU (sphinx-gallery saves its figures): drain this process's GPU work and
        give the shared turn up until the cell ends, instead of holding it through CPU-only work
        (:meth:`take_back` takes it again if the rest turns out to need it: a last expression to print).

        Kept (returns ``False``) outside a cell, in a cell holding the turn alone (one that reads a clock, or
        the cell-wide turn), inside a measured block (one an earlier cell left open) and while a CUDA graph
        is captured.

        Example
        -------
        >>> with turn.held():
        ...     turn.let_go()  # figures saved from here to the cell's end, beside other lanes' measurements
        True
        """
        if (
            self.mode != "shared"
            or not self._in_cell
            or self._cell_alone
            or self._pid != os.getpid()
            or _measuring_now()
        ):
            return False
        try:
            drained = _drain()
        except Exception:  # a CUDA error the cell's work left: the cell keeps its turn and the error is its own
            return False
        if not drained:
            return False
        self._give()
        self.let_go_times += 1
        return True

    def take_back(self) -> None:
        """Take the cell's turn again after :meth:`let_go` (through the gate, as the cell first took it); a
        no-op when the turn is held or no cell runs."""
        if self._in_cell and self.mode is None and self._aside_depth == 0 and self._pid == os.getpid():
            self._take(self._cell_mode(), self._cell_owner())

    def give_way(self) -> bool:
        """Between a cell's GPU steps (:func:`cudnn_guide.collector.between_steps`): if another lane waits
        to measure, let it. This process's queued GPU work is drained, the shared turn given up, and taken
        back (through the gate, so after that measurement) as the cell held it.

        Only a shared turn gives way, and only where lanes queue at the gate: a lane that waits to take
        the turn alone holds ``path + ".alone"`` shared while it waits (:meth:`_someone_waits`), and the
        gate while it waits for the shared holders, so this lane's shared request queues behind it. Never
        while a CUDA graph is captured.

        Returns
        -------
        bool
            Whether it gave way (:attr:`gave_way` counts it).
        """
        if self.mode != "shared" or not self.gated or self._pid != os.getpid() or _measuring_now():
            return False
        if not self._someone_waits() or not _drain():
            return False
        owner = self._owner
        self._give()
        self._take("shared", owner)
        self.gave_way += 1
        return True

    def _someone_waits(self) -> bool:
        """Whether another lane waits to take the turn alone: it holds ``path + ".alone"`` shared until it
        has the turn, so this process cannot take that lock alone now (it lets go of it at once)."""
        import fcntl

        waiting = self._open(alone=True)
        try:
            fcntl.flock(waiting, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(waiting, fcntl.LOCK_UN)
        return False

    def _measuring(self, compiling: bool) -> bool:
        """Inside a block whose wall time would count a wait for the turn (Dynamo's compile excepted: its
        clock is subtracted from the block's). With the cell-wide turn, a ``spending`` block (timing,
        fresh processes), as before measured blocks were marked; with cells sharing it, any measured block."""
        if compiling:
            return False
        collector = sys.modules.get("cudnn_guide.collector")
        if collector is None:
            return False
        if self.shared_cells:
            return _measuring_now()
        return collector.spending_now() is not None

    def forget_in_child(self) -> None:
        """In a forked child: the parent's turn is not this process's; close the inherited files, so
        that a child outliving its parent never keeps the GPU's lock."""
        for fd in (self._fd, self._gate_fd, self._alone_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._gate_fd = self._alone_fd = None
        self.mode = None
        self._in_cell, self._cell_alone, self._aside_depth = False, False, 0


def _measuring_now() -> bool:
    """Whether a measured block (:func:`cudnn_guide.collector.measuring`) is open in this process."""
    collector = sys.modules.get("cudnn_guide.collector")
    now = getattr(collector, "measuring_now", None)
    return bool(now()) if now is not None else False


CLOCK_CALLS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time_ns", "elapsed_time")
"""Calls that read a clock (and ``time.time()``): the cells of a page whose own code makes one hold the turn alone
(:func:`clock_lines`)."""


def is_clock_call(func: Any) -> bool:
    """Whether a call's function (an ``ast`` node) reads a clock: :data:`CLOCK_CALLS` or ``time.time``.

    Parameters
    ----------
    func
        ``ast.Call.func``.

    Returns
    -------
    bool
        ``True`` for ``time.perf_counter``, ``end.elapsed_time`` and the like.

    Example
    -------
    >>> import ast
    >>> is_clock_call(ast.parse("time.perf_counter()").body[0].value.func)
    True
    """
    import ast

    if isinstance(func, ast.Name):  # ``from time import perf_counter``
        return func.id in CLOCK_CALLS
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in CLOCK_CALLS:
        return True
    return func.attr == "time" and isinstance(func.value, ast.Name) and func.value.id == "time"


def reads_a_clock(source: str) -> bool:
    """Whether a page's code reads a clock itself (it times something on the wall clock or with events).

    Parameters
    ----------
    source
        The page's Python source.

    Returns
    -------
    bool
        ``True`` when :func:`clock_lines` finds a reading in it (a clock call, a CUDA event's ``record()``, a
        call of the page's own timer) or cannot place one (a page that does not parse counts as one).

    Example
    -------
    >>> reads_a_clock("t0 = time.perf_counter()"), reads_a_clock("print('hi')")
    (True, False)
    """
    return clock_lines(source) is not None  # one rule for what a reading is: clock_lines's


def clock_lines(source: str) -> tuple[int, int] | None:
    """The lines of a page from its first to its last own clock reading: the cells that overlap them hold the
    turn alone, the others share it.

    A clock reading is a clock call (:func:`is_clock_call`), a CUDA event's ``record()``, or a call of a
    function of the page whose body reads a clock (found to a fixed point: a function calling such a function
    reads one too; any function of that name counts), so that a timer defined in one cell and called in
    another counts where it is called. Every cell between the first and the last reading holds the turn alone
    too (each cell takes its own turn), so that a timer started in one cell and read in a later one has no
    other lane's work inside it but what runs between two cells.

    Parameters
    ----------
    source
        The page's Python source.

    Returns
    -------
    tuple[int, int] | None
        ``(first, last)`` line numbers (1-based), ``None`` when the page reads no clock, and ``(1, lines)``, the
        whole page, where a reading cannot be placed: the page does not parse, defines a class that reads a
        clock, uses a timer other than by calling it (an alias, ``functools.partial``, an argument), or
        names a clock without calling it (``clock = time.perf_counter``, ``from time import perf_counter as pc``).

    Example
    -------
    >>> clock_lines("x = 1\nt0 = time.perf_counter()\nwork()\ns = time.perf_counter() - t0\nplot()")
    (2, 4)
    """
    import ast

    whole = (1, max(1, source.count("\n") + 1))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return whole
    defs: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    defs.setdefault(t.id, []).append(node.value)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}

    def reading(n: ast.AST, timers: set[str]) -> bool:
        if isinstance(n, ast.Call):
            if is_clock_call(n.func):
                return True
            if isinstance(n.func, ast.Attribute) and n.func.attr == "record":  # a CUDA event starts or stops
                return True
        return isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in timers

    timers: set[str] = set()
    while True:  # to a fixed point: a function that calls a timer is a timer
        more = {
            name
            for name, nodes in defs.items()
            if name not in timers and any(reading(n, timers) for node in nodes for n in ast.walk(node))
        }
        if not more:
            break
        timers |= more
    if any(isinstance(node, ast.ClassDef) for name in timers for node in defs[name]):
        return whole
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and any(a.name in CLOCK_CALLS for a in n.names):
            return whole  # a clock imported by name may be called under any name
        clock_named = (isinstance(n, ast.Attribute) and n.attr in CLOCK_CALLS) or (
            isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in timers
        )
        if clock_named and id(n) not in called:
            return whole  # a clock or a timer passed on, not called here: where it is called cannot be placed
    inside = {id(n) for name in timers for node in defs[name] for n in ast.walk(node)}  # a timer's own body
    lines = [
        (n.lineno, getattr(n, "end_lineno", None) or n.lineno)
        for n in ast.walk(tree)
        if id(n) not in inside and reading(n, timers)
    ]
    if not lines:
        return None
    return min(a for a, _ in lines), max(b for _, b in lines)


def _drain() -> bool:
    """Wait for this process's queued GPU work, so that none runs into another lane's turn.

    Returns ``False`` (keep the turn) while a CUDA graph is being captured: synchronizing then
    would break the capture.
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return True
    if torch.cuda.is_current_stream_capturing():
        return False
    torch.cuda.synchronize()
    return True


_CURRENT: Turn | None = None


def current() -> Turn | None:
    """This process's :class:`Turn`, once :func:`install` made one (``None``: no lanes)."""
    return _CURRENT


def lane_cpus(lane: int, lanes: int, cpus: list[int]) -> list[int]:
    """The CPU cores of ``lane`` of ``lanes``: contiguous, near-equal slices of ``cpus``.

    Parameters
    ----------
    lane
        The lane's index, from 0.
    lanes
        How many lanes share the cores.
    cpus
        The cores to share (``sorted(os.sched_getaffinity(0))``).

    Returns
    -------
    list[int]
        The lane's cores (all of them when there are fewer cores than lanes).

    Example
    -------
    >>> lane_cpus(1, 3, list(range(16)))
    [5, 6, 7, 8, 9]
    """
    from cudnn_guide.studies.interpreter import core_share

    return core_share(lane, lanes, cpus)


def pin_to_lane_cpus() -> list[int] | None:
    """Pin this process (and so its compile workers and children) to :data:`CPUS_ENV`'s cores.

    Returns
    -------
    list[int] | None
        The cores, or ``None`` when the variable is unset.

    Example
    -------
    >>> pin_to_lane_cpus()  # in a page's process, before the example runs
    """
    spec = os.environ.get(CPUS_ENV, "")
    if not spec:
        return None
    cpus: list[int] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    from cudnn_guide.studies.interpreter import pin

    pin(cpus)  # every thread: setaffinity(0) pins the caller alone
    return cpus


def builds_aside(turn: Turn) -> bool:
    """Whether ``turn``'s page sets its cuDNN builds and the ``cudnn`` import aside: its cells share the turn and
    :data:`BUILDS_ASIDE_ENV` is not ``0``.

    Parameters
    ----------
    turn
        The page's turn.

    Returns
    -------
    bool
        ``False`` for a page whose every cell holds the turn alone, whose own timer could count the wait.

    Example
    -------
    >>> builds_aside(Turn("/tmp/gpu-0.turn", shared_cells=True))
    True
    """
    return turn.shared_cells and os.environ.get(BUILDS_ASIDE_ENV, "").strip() != "0"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a hook once a watched module is imported, and imports :data:`ASIDE_IMPORTS` (and
    :data:`BUILD_IMPORTS` where :func:`builds_aside`) aside."""

    def __init__(self, turn: Turn, hooks: dict[str, Callable[[Any], None]]) -> None:
        self.turn, self.hooks, self._busy = turn, hooks, set()
        self.aside_imports = ASIDE_IMPORTS + (BUILD_IMPORTS if builds_aside(turn) else ())

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name in self._busy or (name not in self.hooks and name not in self.aside_imports):
            return None
        self._busy.add(name)
        try:
            from importlib.util import find_spec

            spec = find_spec(name)
        finally:
            self._busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, hook, turn = spec.loader, self.hooks.get(name), self.turn
        run = loader.exec_module
        aside = name in self.aside_imports

        def exec_module(module: Any) -> None:
            with turn.aside() if aside else contextlib.nullcontext():
                run(module)
            if hook is not None:
                hook(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class _AsideCall:
    """``fn`` run with the turn set aside; ``[...]`` and attributes pass through (``cute.compile[...]``)."""

    def __init__(self, fn: Any, turn: Turn) -> None:
        self._fn, self._turn = fn, turn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "").split(".")[0]
        aside = caller in ASIDE_CALLERS or (caller in SHARED_ASIDE_CALLERS and self._turn.shared_cells)
        with self._turn.aside() if aside else contextlib.nullcontext():
            return self._fn(*args, **kwargs)

    def __getitem__(self, key: Any) -> Any:
        return _AsideCall(self._fn[key], self._turn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)


def _cute_aside(turn: Turn) -> Callable[[Any], None]:
    """FlashAttention-4's kernel compiles set the turn aside. So do those of cuDNN's own CuTe kernels
    (``cudnn.flex_attention``, the open-source engines inside ``build_plans``) in a page whose cells
    share the turn: where the library times such a build, it is a measured block, inside which
    nothing is set aside. A cell that reads a clock itself (:meth:`Turn.cell_is_alone`) keeps the turn
    through them, since its own timer could count the wait to get it back."""

    def hook(cute: Any) -> None:
        compile_ = getattr(cute, "compile", None)
        if compile_ is not None and not isinstance(compile_, _AsideCall):
            cute.compile = _AsideCall(compile_, turn)

    return hook


def _dynamo_aside(turn: Turn) -> Callable[[Any], None]:
    """Dynamo's compile-start/end callbacks set the turn aside while ``torch.compile`` compiles."""
    stack: list[Any] = []

    def hook(_module: Any) -> None:
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:  # an older torch: compiles keep the turn (slower, never wrong)
            return

        def start(args: Any = None) -> None:
            trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
            # tracing and compiling only: Triton's run-time autotuning and CUDA-graph recording use the GPU
            context = turn.aside(compiling=True) if trigger in COMPILE_TRIGGERS else contextlib.nullcontext()
            context.__enter__()
            stack.append(context)

        def end(args: Any = None) -> None:
            if stack:
                stack.pop().__exit__(None, None, None)

        def register() -> None:
            if start not in callback_handler.start_callbacks:
                callback_handler.register_start_callback(start)
                callback_handler.register_end_callback(end)

        clear = callback_handler.clear

        def clear_then_register() -> None:  # torch._dynamo.reset() clears every callback: ours come back
            clear()
            register()

        callback_handler.clear = clear_then_register
        register()

    return hook


def _builds_aside(turn: Turn) -> Callable[[Any], None]:
    """cuDNN's plan-building steps (:data:`BUILD_STEPS` of ``cudnn.pygraph``) set the turn aside (:meth:`Turn.aside`:
    not inside a measured block, nor in a cell that holds the turn alone for its own clock)."""

    def hook(module: Any) -> None:
        _patch_methods(getattr(module, "pygraph", None), BUILD_STEPS, turn.aside)

    return hook


def _patch_methods(cls: Any, methods: tuple[str, ...], around: Callable[[], Any]) -> None:
    """Run each of ``cls``'s own ``methods`` inside ``around()`` (a context manager), once."""
    import functools

    for method in methods:
        fn = cls.__dict__.get(method) if isinstance(cls, type) else None
        if fn is None or getattr(fn, "_cudnn_guide_turn", False):
            continue

        def wrapped(*args: Any, _fn: Callable[..., Any] = fn, **kwargs: Any) -> Any:
            with around():
                return _fn(*args, **kwargs)

        functools.update_wrapper(wrapped, fn)
        wrapped._cudnn_guide_turn = True  # type: ignore[attr-defined]
        setattr(cls, method, wrapped)


COMPILE_TRIGGERS = ("DYNAMO", "LAZY_BACKWARD")
"""Dynamo's callback triggers during which a compile sets the turn aside."""


def _benchmarks_hold(turn: Turn) -> Callable[[Any], None]:
    """Inductor's autotuning benchmarks run on the GPU: they take the turn back while they run."""

    def hook(benchmarking: Any) -> None:
        for cls_name in ("Benchmarker", "TritonBenchmarker", "InductorBenchmarker"):
            _patch_methods(
                getattr(benchmarking, cls_name, None),
                ("benchmark_gpu",),
                lambda: turn.exclusive(owner="torch._inductor autotuning"),
            )

    return hook


def turn_scope() -> str:
    """How lanes hold the GPU's turn: :data:`SCOPE_ENV`, ``measured`` when unset.

    Returns
    -------
    str
        One of :data:`SCOPES`.

    Raises
    ------
    ValueError
        Another value, naming the variable and the values it takes (the recorder checks it before
        any page starts).

    Example
    -------
    >>> turn_scope()
    'measured'
    """
    scope = os.environ.get(SCOPE_ENV, "") or "measured"
    if scope not in SCOPES:
        raise ValueError(f"{SCOPE_ENV}={scope!r}: expected one of {', '.join(SCOPES)} (unset: measured)")
    return scope


_OWNER_SKIP = ("contextlib", __name__, "cudnn_guide.collector")


def block_owner() -> str:
    """The measured block that asks for the turn alone now, for the trace: ``module.function``.

    A function marked with :func:`cudnn_guide.collector.measuring` or ``spending`` as a decorator is
    named itself; a ``with`` block by the function it is written in (``<page>:<line>`` for a page's
    own code). Seen from the stack, outside this module, :mod:`contextlib` and the collector.

    Returns
    -------
    str
        E.g. ``"cudnn_guide.measure.compare.compare"``,
        ``"cudnn_guide.studies.fresh_process.InterpreterPool.wait_ready"``.

    Example
    -------
    >>> block_owner()  # called from a measured block's holder
    'cudnn_guide.studies.vendor_llama_table.reference_at'
    """
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "contextlib" and frame.f_code.co_name == "inner" and callable(frame.f_locals.get("func")):
            fn = frame.f_locals["func"]  # a decorated function: the block is the function itself
            return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
        if module not in _OWNER_SKIP:
            if module.startswith(("cudnn_guide", "gallery_build", "flash_attn", "torch")):
                return f"{module}.{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}"
            return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"  # a page's own code
        frame = frame.f_back
    return "?"


def install(
    path: str | None = None, page_reads_a_clock: bool = False, clock_span: tuple[int, int] | None = None
) -> Turn | None:
    """In a page's process: make its :class:`Turn` and hook the CPU-only phases that set it aside.

    Takes :data:`TURN_ENV` when ``path`` is not given; without either, does nothing. Hooks run as
    their module is imported (at once when it already is): Dynamo's compile callbacks
    (``torch._dynamo``), Inductor's benchmarks (``torch._inductor.runtime.benchmarking``),
    ``cutlass.cute.compile`` and, where :func:`builds_aside`, ``cudnn.pygraph``'s :data:`BUILD_STEPS`;
    :data:`ASIDE_IMPORTS` (and there :data:`BUILD_IMPORTS`) are imported aside.

    Parameters
    ----------
    path
        The GPU's lock file.
    page_reads_a_clock
        Every cell of the page holds the turn alone whatever the scope (what every page that read a clock
        had before its clock cells were found one by one; :data:`SCOPE_ENV` ``=cell`` does the same for
        every page).
    clock_span
        Under the measured scope: the page's lines from its first to its last own clock reading
        (:func:`clock_lines`); the cells overlapping them hold the turn alone, since the library cannot
        mark what the page's own code times, and the page's other cells share it.

    Returns
    -------
    Turn | None
        The process's turn, or ``None`` when no lock file is named.

    Example
    -------
    >>> install()  # no CUDNN_GUIDE_GPU_TURN: a page recorded alone takes no turns
    """
    global _CURRENT
    path = path or os.environ.get(TURN_ENV)
    if not path:
        return None
    if _CURRENT is not None and _CURRENT.path == path:
        return _CURRENT
    measured = turn_scope() == "measured"  # every lane goes through the gate, clock-reading pages too
    turn = _CURRENT = Turn(path, shared_cells=measured and not page_reads_a_clock, gated=measured)
    turn.clock_lines = clock_span
    os.register_at_fork(after_in_child=turn.forget_in_child)
    if turn.shared_cells:
        from cudnn_guide import collector

        collector.hold_while_measuring(turn.exclusive)
        collector.give_way_with(turn.give_way if os.environ.get(GIVE_WAY_ENV, "").strip() != "0" else None)
    hooks = {
        "torch._dynamo": _dynamo_aside(turn),
        "torch._inductor.runtime.benchmarking": _benchmarks_hold(turn),
        "cutlass.cute": _cute_aside(turn),
    }
    if builds_aside(turn):
        hooks["cudnn._pygraph"] = _builds_aside(turn)
    for name, hook in hooks.items():
        if name in sys.modules:
            hook(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport(turn, hooks))
    return turn


def take_turns_per_cell(turn: Turn) -> None:
    """Each code cell sphinx-gallery executes holds ``turn`` (wraps ``execute_code_block``); the page's
    running time leaves out its waits for the turn (wraps ``execute_script``). A cell's shared turn is given
    up before its figures are saved (:meth:`Turn.let_go`, wraps ``save_figures``) and taken back only to
    print a last expression (wraps ``_get_code_output``).

    Parameters
    ----------
    turn
        The process's turn (:func:`install`).

    Example
    -------
    >>> take_turns_per_cell(install())  # in conf.py, record mode with lanes only
    """
    from sphinx_gallery import gen_rst

    inner = gen_rst.execute_code_block
    if getattr(inner, "_cudnn_guide_turns", False):
        return

    def in_turn(*args: Any, **kwargs: Any) -> Any:
        block = args[1] if len(args) > 1 else kwargs.get("block")
        first = getattr(block, "lineno", None)
        if not turn.shared_cells:  # the cell-wide turn: every cell alone already, asides as before
            alone = False
        elif first is None:  # a cell that cannot be placed in a page that reads a clock holds the turn alone
            alone = turn.clock_lines is not None
        else:
            alone = turn.cell_is_alone(first, first + str(getattr(block, "content", "")).count("\n"))
        with turn.held(alone=alone, line=first):
            return inner(*args, **kwargs)

    in_turn._cudnn_guide_turns = True  # type: ignore[attr-defined]
    gen_rst.execute_code_block = in_turn
    save_figures, code_output = gen_rst.save_figures, gen_rst._get_code_output

    def figures_without_the_turn(*args: Any, **kwargs: Any) -> Any:
        """A cell's figures are saved after its code ran: CPU-only (matplotlib draws numbers on the host)."""
        turn.let_go()
        return save_figures(*args, **kwargs)

    def output_in_turn(is_last_expr: Any, example_globals: Any = None, *args: Any, **kwargs: Any) -> Any:
        """A cell's last expression is printed (its repr may read a tensor on the GPU): in the cell's turn, unless
        its value is ``None`` (a cell ending in ``print(...)`` or ``plt.show()``), which prints nothing."""
        value = example_globals.get("___") if isinstance(example_globals, dict) else object()
        if is_last_expr and value is not None:
            turn.take_back()
        return code_output(is_last_expr, example_globals, *args, **kwargs)

    gen_rst.save_figures, gen_rst._get_code_output = figures_without_the_turn, output_in_turn
    run_script = gen_rst.execute_script

    def without_waits(*args: Any, **kwargs: Any) -> Any:
        """The page's running time, without its waits for the turn (sphinx-gallery times all its cells)."""
        before = turn.waited
        blocks, seconds = run_script(*args, **kwargs)
        return blocks, seconds - (turn.waited - before)

    gen_rst.execute_script = without_waits
