"""tools/resolve_ab.py: what the whole-site A/B of resolve_in_workers sets aside, and what it still reports."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import resolve_ab  # noqa: E402


def _site(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_only_the_known_differences_between_two_builds_are_set_aside(tmp_path):
    a, b = tmp_path / "sphinx", tmp_path / "workers"
    _site(
        a,
        {
            "t.html": b'<table id="T_1a2b3">' + str(a).encode() + b"</table>",
            "s.html": b'<div class="output stream highlight-myst-ansi"><pre>* one\n\n* two\n</pre>',
            "code.html": b"<pre>a\n\nb</pre>",
            "x.whl": b"zip at 10:00",
            "same.html": b"same",
            "page.html": b"Page 2",
            "only_a.html": b"",
            ".doctrees/x.doctree": b"1",
        },
    )
    _site(
        b,
        {
            "t.html": b'<table id="T_9f8e7">' + str(b).encode() + b"</table>",
            "s.html": b'<div class="output stream highlight-myst-ansi"><pre>* one\n* two\n</pre>',
            "code.html": b"<pre>a\nb</pre>",  # a blank line gone from code, not from printed output: reported
            "x.whl": b"zip at 10:01",
            "same.html": b"same",
            "page.html": b"label2",  # a reference resolved otherwise: a real difference
            ".doctrees/x.doctree": b"2",
        },
    )
    got = resolve_ab.compare(a, b)
    assert got["only_sphinx"] == ["only_a.html"] and got["only_workers"] == []
    assert got["differing"] == ["code.html", "page.html", "s.html", "t.html", "x.whl"]
    assert got["differing_after_known"] == ["code.html", "page.html"]


def test_the_committed_ab_found_no_difference_beyond_the_known_ones():
    ab = json.loads((ROOT / "docs" / "data" / "resolve_in_workers_ab.json").read_text())
    assert ab["files"] > 400 and ab["only_sphinx"] == ab["only_workers"] == ab["differing_after_known"] == []
