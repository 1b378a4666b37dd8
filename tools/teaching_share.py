"""Each gallery page's share of visible code lines that call cuDNN Frontend, at any git revision.

    PYTHONPATH=docs/_ext python tools/teaching_share.py [REV]      (default: the working tree)

A statement's lines count once it names the frontend: a ``cudnn.X`` attribute, or a method the installed
frontend's graph or tensor defines, called as ``.name(``. One-word methods that also name common
Python or torch calls (``add``, ``max``, ``relu``, ...) count only on a receiver named like a graph
(``g``, ``graph``, ...). Lines in ``sphinx_gallery_start_ignore`` blocks, comments, blank lines and
the page's docstring are not code the reader sees, and are left out. A rough measure, the same at
every revision: issue 14's before and after.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

from gallery_build.frontend_index import frontend_vocabulary

_GRAPH_RECEIVER = re.compile(r"\b(g\w{0,3}|graph|raw_graph)\.(\w+)\b")
_METHOD = re.compile(r"\.(\w+)\(")


def visible_statements(source: str) -> list[str]:
    """The page's code a reader sees, one string per logical line (a statement over several physical
    lines is one), without the docstring, comments, blank lines or hidden blocks."""
    tree = ast.parse(source)
    doc = tree.body[0] if tree.body and isinstance(tree.body[0], ast.Expr) else None
    skip = set(range(doc.lineno, doc.end_lineno + 1)) if doc is not None else set()
    hidden, row_hidden = False, {}
    for number, line in enumerate(source.splitlines(), 1):
        if "sphinx_gallery_start_ignore" in line:
            hidden = True
        elif "sphinx_gallery_end_ignore" in line:
            hidden = False
        row_hidden[number] = hidden
    lines = source.splitlines()
    statements, start = [], None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            continue
        if tok.type == tokenize.NEWLINE or tok.type == tokenize.ENDMARKER:
            if start is not None and start not in skip and not row_hidden.get(start, False):
                statements.append("\n".join(lines[start - 1 : tok.start[0]]))
            start = None
        elif start is None:
            start = tok.start[0]
    return statements


def teaches(line: str, vocabulary: dict[str, set[str]]) -> bool:
    """Whether a statement calls cuDNN Frontend (see the module's docstring)."""
    if "cudnn." in line:
        return True
    methods = (vocabulary["graph"] | vocabulary["tensor"]) - {"__init__"}
    for name in _METHOD.findall(line):
        if name in methods and ("_" in name or name in {"validate", "execute", "serialize", "deserialize"}):
            return True
    return any(m in vocabulary["graph"] for _, m in _GRAPH_RECEIVER.findall(line))


def shares(rev: str | None = None) -> dict[str, tuple[int, int]]:
    """Page stem → (code lines, lines of statements that call the frontend), at ``rev`` or in the working tree."""
    vocabulary = frontend_vocabulary()
    if rev is None:
        sources = {p.stem: p.read_text(encoding="utf-8") for p in sorted(Path("examples").glob("plot_*.py"))}
    else:
        names = subprocess.run(
            ["git", "ls-tree", "--name-only", rev, "examples/"], capture_output=True, text=True, check=True
        ).stdout.split()
        sources = {
            Path(n).stem: subprocess.run(
                ["git", "show", f"{rev}:{n}"], capture_output=True, text=True, check=True
            ).stdout
            for n in names
            if Path(n).name.startswith("plot_")
        }
    out = {}
    for stem, source in sources.items():
        statements = visible_statements(source)
        rows = [len(st.splitlines()) for st in statements]
        out[stem] = (sum(rows), sum(n for st, n in zip(statements, rows) if teaches(st, vocabulary)))
    return out


if __name__ == "__main__":
    rev = sys.argv[1] if len(sys.argv) > 1 else None
    total = [0, 0]
    for stem, (n, k) in shares(rev).items():
        total[0], total[1] = total[0] + n, total[1] + k
        print(f"{stem:40s} {k:4d} of {n:4d} code lines call the frontend ({100 * k / max(n, 1):4.0f}%)")
    print(f"{'all pages':40s} {total[1]:4d} of {total[0]:4d} ({100 * total[1] / max(total[0], 1):.0f}%)")
