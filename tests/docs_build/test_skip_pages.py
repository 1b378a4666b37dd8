"""Pages for examples this GPU cannot run (gallery_build.skip_pages)."""

import json
import shutil
import zipfile

from conftest import remove_recording
from gallery_build import hooks as docs_build
from gallery_build import page_checks, skip_pages, staleness


def test_requirements_are_read_from_the_page_without_running_it(root):
    sdpa = root / "examples" / "plot_05_sdpa_causal.py"
    assert skip_pages.declared_requirements(sdpa) == [((8, 0), "cuDNN fused attention")]
    assert skip_pages.unmet_requirements(sdpa, (7, 5)) == ["SM 8.0 or newer (cuDNN fused attention)"]
    assert skip_pages.unmet_requirements(sdpa, (9, 0)) == []
    assert skip_pages.declared_requirements(root / "examples" / "plot_02_conv_bias_relu.py") == []


def test_skip_page_is_healthy_and_says_why(tmp_path, root):
    gal = tmp_path / "auto_examples"
    shutil.copytree(root / "docs" / "auto_examples", gal)
    src = root / "examples" / "plot_05_sdpa_causal.py"
    remove_recording(gal, "plot_05_sdpa_causal")
    env = {"gpu": "Tesla T4", "sm": "7.5", "date_utc": "d", "commit": "c"}
    skip_pages.write_skip_page(src, gal, ["SM 8.0 or newer (cuDNN fused attention)"], env)
    text = (gal / "plot_05_sdpa_causal.rst").read_text()
    assert "skipped: needs SM 8.0 or newer (cuDNN fused attention)" in text
    assert "Tesla T4 (SM 7.5)" in text
    assert "What you will learn:" in text and "diagonal_band_right_bound=0" in text  # the topic is still explained
    first = text.index(".. literalinclude:: plot_05_sdpa_causal.py")  # and its code is shown, not run
    start = int(text[first:].split(":lines: ")[1].split("-")[0])
    assert src.read_text().splitlines()[start - 1 :][0].strip() in ("", "# %%")
    assert (gal / "images" / "thumb" / "sphx_glr_plot_05_sdpa_causal_thumb.png").stat().st_size > 1000
    with zipfile.ZipFile(gal / "plot_05_sdpa_causal.zip") as z:  # the zipped download holds today's script
        assert z.read("plot_05_sdpa_causal.py") == src.read_bytes() and "plot_05_sdpa_causal.ipynb" in z.namelist()
    assert staleness.example_states(root / "examples", gal)[4].state == "fresh"
    assert page_checks.recorded_page_problems(gal, root / "examples") == []
    stamp = docs_build.stamp_rst(
        json.loads((gal / "plot_05_sdpa_causal.record.json").read_text()), "plot_05_sdpa_causal"
    )
    assert "Skipped on **Tesla T4**" in stamp
