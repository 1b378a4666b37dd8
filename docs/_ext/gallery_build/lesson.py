"""Reader-first pages: each page that builds a graph opens with a lesson a reader can copy.

The lesson is everything before the first cell titled "Measuring …". It uses only ``cudnn``,
``torch`` and numpy (the environment cell's ``from cudnn_guide import environment`` aside), and at
least :data:`MIN_SHARE` of its code lines call the frontend. Every line of a page fits in
:data:`WIDTH` characters. ``python -m gallery_build.lesson [examples/plot_*.py ...]`` prints each
page's numbers and exits 1 when one falls short.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LessonStats", "lesson_stats", "MIN_SHARE", "MAX_LINES", "WIDTH"]

MIN_SHARE = 0.40
MAX_LINES = 80
WIDTH = 88

FRONTEND_CALL = re.compile(  # a graph's own methods; torch's of the same name (torch.relu, F.relu) do not count
    r"\bcudnn\.|(?<!torch)(?<!\bF)\.(tensor|tensor_like|sdpa|sdpa_backward|sdpa_fp8|conv_fprop|conv_dgrad|conv_wgrad|matmul|"
    r"pointwise|layernorm|rmsnorm|batchnorm|batchnorm_inference|batchnorm_backward|relu|add|mul|bias|"
    r"reduction|set_output|set_dim|set_stride|set_data_type|set_uid|set_name|validate|"
    r"build_operation_graph|create_execution_plans|check_support|build_plans|build|execute|"
    r"get_workspace_size|serialize|deserialize|execute_plan_at_index)\("
)
# The narrower count a reviewer applies (the project's before-stop check): the graph's declaration,
# build and execution steps only; pointwise ops (g.bias, g.relu, ...) and get_workspace_size do not
# count. A lesson clears MIN_SHARE by both counts.
CORE_CALL = re.compile(
    r"\bcudnn\.|\.(tensor|tensor_like|sdpa|sdpa_backward|conv_fprop|conv_dgrad|conv_wgrad|matmul|"
    r"pointwise|layernorm|rmsnorm|batchnorm|set_output|set_dim|set_stride|set_data_type|validate|"
    r"build_operation_graph|create_execution_plans|check_support|build_plans|build|execute)\("
)
HELPERS = re.compile(
    r"cudnn_guide\.(graphs|measure|check|report|studies)|from cudnn_guide(\.\w+)* import (?!environment\b)"
)
MEASURING = re.compile(r"#\s*Measur")


@dataclass(frozen=True)
class LessonStats:
    """One page's lesson: its code lines, how many call the frontend, and what it lacks."""

    page: str
    builds_graph: bool
    has_measuring: bool
    code_lines: int
    frontend_lines: int
    core_lines: int
    uses_helpers: bool
    page_lines: int
    wide_lines: int

    @property
    def share(self) -> float:
        return self.frontend_lines / max(self.code_lines, 1)

    @property
    def core_share(self) -> float:
        """The share by :data:`CORE_CALL`: building and running steps only, no pointwise ops."""
        return self.core_lines / max(self.code_lines, 1)

    def problems(self) -> list[str]:
        out = []
        if self.wide_lines:
            out.append(f"{self.wide_lines} line(s) wider than {WIDTH} characters")
        if not self.builds_graph:
            return out
        if not self.has_measuring:
            out.append("no 'Measuring ...' cell after a lesson")
            return out
        if self.code_lines > MAX_LINES:
            out.append(f"lesson has {self.code_lines} code lines (at most {MAX_LINES})")
        if self.share < MIN_SHARE:
            out.append(f"{self.share:.0%} of the lesson's code lines call the frontend (at least {MIN_SHARE:.0%})")
        elif self.core_share < MIN_SHARE:
            out.append(
                f"{self.core_share:.0%} of the lesson's code lines declare, build or run a graph, without "
                f"pointwise ops (at least {MIN_SHARE:.0%})"
            )
        if self.uses_helpers:
            out.append("the lesson imports cudnn_guide helpers (only cudnn, torch, numpy)")
        return out


def _docstring_lines(source: str) -> set[int]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {
        n
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for n in range(node.lineno, node.end_lineno + 1)
    }


def lesson_stats(path: str | Path) -> LessonStats:
    """Measure the lesson of one example page.

    Example
    -------
    >>> s = lesson_stats("examples/plot_05_sdpa_causal.py"); s.share >= MIN_SHARE
    True
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    wide = sum(len(line) > WIDTH for line in lines)
    builds = any("pygraph(" in line for line in lines)
    cut = measuring_cut(lines)
    lesson = lines[: cut if cut is not None else len(lines)]
    docs = _docstring_lines("\n".join(lesson))
    code = [
        line for i, line in enumerate(lesson, 1) if line.strip() and not line.strip().startswith("#") and i not in docs
    ]
    text = "\n".join(code)
    return LessonStats(
        page=path.name,
        builds_graph=builds,
        has_measuring=cut is not None,
        code_lines=len(code),
        frontend_lines=sum(bool(FRONTEND_CALL.search(line)) for line in code),
        core_lines=sum(bool(CORE_CALL.search(line)) for line in code),
        uses_helpers=bool(HELPERS.search(text)),
        page_lines=len(lines),
        wide_lines=wide,
    )


def measuring_cut(lines: list[str]) -> int | None:
    """The index of the line that opens the page's first "Measuring ..." cell (``None`` when it has none)."""
    for i, line in enumerate(lines):
        if line.startswith("# %%"):
            following = next((m for m in lines[i + 1 : i + 3] if m.strip()), "")
            if MEASURING.match(following):
                return i
    return None


def lesson_source(path: str | Path) -> str | None:
    """The page's code before its first "Measuring ..." cell (``None`` when it has none)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    cut = measuring_cut(lines)
    return None if cut is None else "\n".join(lines[:cut]) + "\n"


def _run_one(path: str, timeout: float) -> tuple[bool, list[str]]:
    src = lesson_source(path)
    if src is None:
        return True, ["no lesson"]
    try:
        done = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return False, [f"timed out after {timeout:.0f} s"]
    tail = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode == 0, tail[-12:] if done.returncode else tail[-3:]


def run_lessons(paths: list[str], timeout: float = 300.0, jobs: int = 1) -> int:
    """Run each page's lesson alone in a fresh interpreter (``jobs`` at a time); one line per page."""
    from concurrent.futures import ThreadPoolExecutor

    failed = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for p, (ok, tail) in zip(paths, pool.map(lambda p: _run_one(p, timeout), paths)):
            failed += not ok
            print(f"{Path(p).name}: lesson {'ran' if ok else 'FAILED'}", flush=True)
            for line in tail:
                print(f"    {line}", flush=True)
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    run = "--run" in argv
    jobs = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--jobs=")), 1)
    argv = [a for a in argv if a != "--run" and not a.startswith("--jobs=")]
    paths = argv or sorted(str(p) for p in Path("examples").glob("plot_*.py"))
    if run:
        return run_lessons(paths, jobs=jobs)
    failed = 0
    for p in paths:
        s = lesson_stats(p)
        problems = s.problems()
        failed += bool(problems)
        print(
            f"{s.page}: page {s.page_lines} lines; lesson {s.code_lines} code lines, "
            f"{s.frontend_lines} call the frontend ({s.share:.0%}; {s.core_share:.0%} without pointwise ops)"
            + (f"; {'; '.join(problems)}" if problems else "; ok")
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
