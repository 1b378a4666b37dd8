"""Build health and output notes on the recorded pages (gallery_build.page_checks)."""

import json
import shutil

from gallery_build import page_checks


def test_committed_pages_are_healthy(root):
    assert page_checks.recorded_page_problems(root / "docs" / "auto_examples", root / "examples") == []


def test_health_check_catches_missing_figure_output_and_failed_check(tmp_path, root):
    gal = tmp_path / "auto_examples"
    shutil.copytree(root / "docs" / "auto_examples", gal)
    stem = sorted((root / "examples").glob("plot_*.py"))[0].stem
    for png in (gal / "images").glob(f"sphx_glr_{stem}_*.png"):
        png.unlink()
    rst = gal / f"{stem}.rst"
    rst.write_text(rst.read_text().replace("sphx-glr-script-out", "nothing-here"))
    rec = gal / f"{stem}.record.json"
    data = json.loads(rec.read_text())
    data["all_checks_passed"] = False
    rec.write_text(json.dumps(data))
    problems = page_checks.recorded_page_problems(gal, root / "examples")
    joined = "\n".join(problems)
    assert f"{stem}: the recorded page has no figure" in joined
    assert f"{stem}: the recorded page has no captured output" in joined
    assert f"{stem}: its record reports a failed or missing correctness check" in joined
    others = [p for p in problems if not p.startswith(f"{stem}:")]
    assert others == []  # the other pages are untouched and healthy
    exempt = {**page_checks.HEALTH_EXCEPTIONS, stem: "demo"}
    assert page_checks.recorded_page_problems(gal, root / "examples", exceptions=exempt) == []


def test_output_a_reader_should_not_see_is_noted_per_page(tmp_path):
    timing = "\n\n.. rst-class:: sphx-glr-timing\n\n   **Total running time of the script:** (0 minutes 1.0 seconds)\n"
    clean = ".. rst-class:: sphx-glr-script-out\n\n .. code-block:: none\n\n    * It is 1.30x faster.\n" + timing
    (tmp_path / "plot_01_clean.rst").write_text(clean)
    (tmp_path / "plot_02_noisy.rst").write_text(
        ".. rst-class:: sphx-glr-script-out\n\n .. code-block:: none\n\n"
        "    /opt/venv/torch/library.py:363: UserWarning: Overriding a previously registered kernel\n"
        '    <td id="T_1_row0_col6" class="data row0 col6" >nan</td>\n\n'
        "    * It is 1.30x faster.\n\n    1.0011987761040242\n" + timing
    )
    notes = page_checks.recorded_output_notes(tmp_path)
    assert notes == [
        "plot_02_noisy: 1 captured Python warning(s), first UserWarning: Overriding a previously registered kernel",
        "plot_02_noisy: a table shows 'nan' where a value is missing",
        "plot_02_noisy: a bare number (1.0011987761040242) is printed at the end of the page",
    ]


def test_a_page_whose_conclusions_did_not_render_is_refused_unless_it_awaits_a_recording(tmp_path, root):
    gal = tmp_path / "auto_examples"
    shutil.copytree(root / "docs" / "auto_examples", gal)
    stem = "plot_05_sdpa_causal"
    rst = gal / f"{stem}.rst"
    rst.write_text(rst.read_text().replace('class="guide-prose"', 'class="something-else"'))
    problems = page_checks.recorded_page_problems(gal, root / "examples")
    assert problems == [
        f"{stem}: the recorded page renders no conclusions (make the Prose object its cell's last expression, "
        "after any sphinx_gallery_start_ignore block, and re-record)"
    ]
    for pending in page_checks.CONCLUSIONS_PENDING:  # each still renders none, and says why it may not
        assert 'class="guide-prose"' not in (gal / f"{pending}.rst").read_text(), f"{pending} left the list"
