"""Getting started: the first graph is plain cudnn + torch, short, and checked against PyTorch."""

from __future__ import annotations

import ast
import re


def first_graph(root) -> str:
    text = (root / "docs" / "getting_started.md").read_text(encoding="utf-8")
    section = text.split("## A first graph", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_first_graph_is_written_with_the_frontend_alone_in_under_40_lines(root):
    code = first_graph(root)
    tree = ast.parse(code)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"cudnn", "torch"}, f"the first graph should need only cudnn and torch, not {imported}"
    lines = [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) < 40, f"the first graph is {len(lines)} code lines"
    for step in (
        "cudnn.pygraph",
        "validate()",
        "build_operation_graph()",
        "create_execution_plans(",
        "check_support()",
        "build_plans()",
        ".execute(",
    ):
        assert step in code, f"the first graph should show {step}"


def test_the_first_graph_is_checked_against_pytorch(root):
    code = first_graph(root)
    assert "torch.testing.assert_close" in code and "conv2d" in code
