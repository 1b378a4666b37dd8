"""A text-only edit of an example is carried into its recorded page; any other edit still needs a GPU."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest
from gallery_build import restamp, staleness

ROOT = Path(__file__).resolve().parents[2]
PAGE = "plot_21_call_overhead"


def _copy_page(tmp_path, page):
    """The page's example and its recorded files, copied: (example, gallery)."""
    examples, gallery = tmp_path / "examples", tmp_path / "auto_examples"
    examples.mkdir()
    gallery.mkdir()
    shutil.copy(ROOT / "examples" / f"{page}.py", examples)
    for suffix in (".py", ".py.md5", ".rst", ".ipynb", ".zip"):
        shutil.copy(ROOT / "docs" / "auto_examples" / f"{page}{suffix}", gallery)
    return examples / f"{page}.py", gallery


@pytest.fixture
def copy(tmp_path):
    return _copy_page(tmp_path, PAGE)


def _comment_line(text):
    """A prose comment of the page (not a cell marker, heading or underline)."""
    lines = text.splitlines()
    return next(
        line
        for line, after in zip(lines, lines[1:])
        if line.startswith("# ")
        and len(line) > 40
        and not line.startswith(("# %%", "# --", "# sphinx"))
        and not after.startswith("# --")  # not a section heading
    )


def _code_line(text):
    """A top-level assignment of the page."""
    return next(line for line in text.splitlines() if line[:1].isalpha() and " = " in line and "(" not in line)


def _markdown(gallery):
    import json

    cells = json.loads((gallery / f"{PAGE}.ipynb").read_text())["cells"]
    return "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def _state(example, gallery):
    return {s.source.name: s.state for s in staleness.example_states(example.parent, gallery)}[example.name]


def test_a_comment_edit_is_carried_into_the_page_and_the_stamp(copy):
    example, gallery = copy
    old = _comment_line(example.read_text())
    new = old[:-1] + ("?" if old[-1] != "?" else "!")  # old is no longer a part of the line
    example.write_text(example.read_text().replace(old, new))
    assert _state(example, gallery) == "stale"
    changes = restamp.restamp_text_edit(example, gallery)
    assert changes == [(old, new)]
    assert _state(example, gallery) == "fresh"
    rst = (gallery / f"{PAGE}.rst").read_text()
    assert new[2:] in rst and old[2:] not in rst
    assert new[2:] in _markdown(gallery)
    with zipfile.ZipFile(gallery / f"{PAGE}.zip") as z:
        assert new in z.read(f"{PAGE}.py").decode()


@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda s: s.replace(_code_line(s), _code_line(s) + "\nEDITED = 1", 1), "code changed"),
        (lambda s: s.replace(_code_line(s), _code_line(s).replace(" = ", " = 1 + ", 1), 1), "code changed"),
        (lambda s: s.replace(_comment_line(s), _comment_line(s) + "\n# one more", 1), "added or removed"),
    ],
)
def test_any_other_edit_still_needs_a_gpu_and_changes_nothing(copy, edit, why):
    example, gallery = copy
    before = {p.name: p.read_bytes() for p in gallery.iterdir()}
    example.write_text(edit(example.read_text()))
    with pytest.raises(staleness.StaleRecordingError, match=why):
        restamp.restamp_text_edit(example, gallery)
    assert {p.name: p.read_bytes() for p in gallery.iterdir()} == before
    assert _state(example, gallery) == "stale"


def test_a_retitled_cell_is_carried_into_the_notebook_heading_and_other_cells_keep_their_bytes(copy):
    """A cell title is ``## Title`` in the notebook; the notebook keeps sphinx-gallery's format, so a restamp's
    diff is the edited lines alone."""
    example, gallery = copy
    text = example.read_text()
    lines = text.splitlines()
    i = next(i for i, (a, b) in enumerate(zip(lines, lines[1:])) if a.startswith("# ") and b.startswith("# --"))
    old = lines[i]
    new = old + "!"
    lines[i], lines[i + 1] = new, "# " + "-" * (len(new) - 2)
    example.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""))
    before = (gallery / f"{PAGE}.ipynb").read_text()
    restamp.restamp_text_edit(example, gallery)
    after = (gallery / f"{PAGE}.ipynb").read_text()
    assert "## " + new[2:] in _markdown(gallery)
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert len(before.splitlines()) == len(after.splitlines()) and len(changed) == 1, changed
    assert _state(example, gallery) == "fresh"


def test_an_edited_bullet_continuation_line_is_found_in_the_page(tmp_path):
    """``#   more text`` continues a bullet: the page indents it, so its text alone is matched."""
    page = "plot_02_conv_bias_relu"
    example, gallery = _copy_page(tmp_path, page)
    old = next(line for line in example.read_text().splitlines() if line.startswith("#   ") and len(line) > 30)
    new = old + " (edited)"
    example.write_text(example.read_text().replace(old, new, 1))
    assert restamp.restamp_text_edit(example, gallery) == [(old, new)]
    rst = (gallery / f"{page}.rst").read_text()
    assert new[4:] in rst and f"{old[4:]}\n" not in rst
