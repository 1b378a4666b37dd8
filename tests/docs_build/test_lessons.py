"""Every page opens with a lesson a reader can copy, and nothing on it is wider than the column."""

from __future__ import annotations

from pathlib import Path

import pytest
from gallery_build import lesson

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "examples").glob("plot_*.py"))


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_each_page_is_lesson_first_and_fits_the_column(page):
    stats = lesson.lesson_stats(page)
    assert not stats.problems(), f"{page}: {'; '.join(stats.problems())}"


def test_the_checker_catches_a_helper_heavy_lesson_and_a_missing_measuring_cell(tmp_path):
    page = tmp_path / "plot_99_x.py"
    page.write_text(
        '"""\nX\n=\n"""\n\n# %%\n# The lesson\n# ----------\nimport cudnn\nfrom cudnn_guide import graphs\n\n'
        "g = cudnn.pygraph()\nx = 1\ny = 2\nz = 3\n\n# %%\n# Measuring it\n# ------------\nprint(x)\n"
    )
    problems = lesson.lesson_stats(page).problems()
    assert any("helpers" in p for p in problems) and any("call the frontend" in p for p in problems), problems
    page.write_text('"""\nX\n=\n"""\nimport cudnn\n\ng = cudnn.pygraph()\n' + "#" * 89 + "\n")
    problems = lesson.lesson_stats(page).problems()
    assert any("Measuring" in p for p in problems) and any("wider than 88" in p for p in problems), problems


def test_a_lesson_is_the_code_before_the_measuring_cell():
    src = lesson.lesson_source(ROOT / "examples" / "plot_05_sdpa_causal.py")
    assert src is not None and "pygraph(" in src and "# Measuring" not in src
    compile(src, "lesson", "exec")


@pytest.mark.parametrize(
    "line, counts",
    [
        ("Y = g.relu(input=biased)", True),
        ("ws = torch.empty(g.get_workspace_size(), device='cuda')", True),
        ("g = cudnn.pygraph(handle=handle)", True),
        ("ref = torch.relu(ref)", False),
        ("ref = F.relu(x)", False),
        ("y = x.float()", False),
    ],
)
def test_a_frontend_call_is_a_graphs_method_not_torchs_of_the_same_name(line, counts):
    assert bool(lesson.FRONTEND_CALL.search(line)) is counts
