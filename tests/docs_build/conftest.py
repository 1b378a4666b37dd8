"""Fixtures of the docs build's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _sphinx_gallery_put_back():
    """``gpu_turns.take_turns_per_cell`` wraps sphinx-gallery's cell functions in place: each test gets the
    originals back, so that no wrapper outlives its test or piles up on another."""
    try:
        from sphinx_gallery import gen_rst
    except ImportError:  # the tests that need it skip
        yield
        return
    names = ("execute_code_block", "execute_script", "save_figures", "_get_code_output")
    saved = {n: getattr(gen_rst, n) for n in names}
    yield
    for n, fn in saved.items():
        setattr(gen_rst, n, fn)
