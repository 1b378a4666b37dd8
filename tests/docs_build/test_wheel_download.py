"""The site serves the package's wheel, and every page and notebook says how to install it."""

from __future__ import annotations

import html
import json
import re
import zipfile

from gallery_build import wheel


def test_the_install_note_sits_above_the_download_box_and_links_the_wheel():
    rst = "text\n\n.. _sphx_glr_download_auto_examples_plot_x.py:\n\nfooter\n"
    out = wheel.install_rst(rst, "cudnn_guide-0.1.0-py3-none-any.whl", depth=1)
    assert out.index("pip install") < out.index(".. _sphx_glr_download_")
    assert "<../cudnn_guide-0.1.0-py3-none-any.whl>`__" in out
    assert wheel.install_rst("no download box\n", "w.whl") == "no download box\n"


def test_a_notebook_gets_one_install_cell(tmp_path):
    nb = tmp_path / "plot_x.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["print(1)"]}], "nbformat": 4}))
    assert wheel.add_install_cell(nb, "w.whl") is True
    assert wheel.add_install_cell(nb, "w.whl") is False  # once
    cells = json.loads(nb.read_text())["cells"]
    assert len(cells) == 2 and '%pip install "./w.whl[examples]"' in "".join(cells[0]["source"])


def test_the_built_site_offers_a_complete_wheel_and_every_page_names_it(site, root):
    name = wheel.wheel_name(root)
    whl = site / name
    assert whl.exists(), f"{name} is not in the built site"
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
    for sub in ("graphs", "measure", "report", "studies"):
        assert f"cudnn_guide/{sub}/__init__.py" in names, f"{name} lacks cudnn_guide.{sub}"
    pages = sorted((site / "auto_examples").glob("plot_*.html"))
    assert pages
    for page in pages:
        text = page.read_text(encoding="utf-8")
        shown = html.unescape(re.sub(r"<[^>]+>", "", text))  # as a reader sees it (highlighting stripped)
        assert f'href="../{name}"' in text and wheel.install_line(name) in shown, page.name
    notebooks = sorted((site / "_downloads").rglob("plot_*.ipynb"))
    assert len(notebooks) >= len(pages) - 1  # a skipped page offers its script only
    for nb in notebooks:
        first = "".join(json.loads(nb.read_text(encoding="utf-8"))["cells"][0]["source"])
        assert f"%{wheel.install_line(name)}" in first, nb.name
