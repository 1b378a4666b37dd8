"""The Sphinx hooks: the stamp and the warnings summary under each page title (gallery_build.hooks)."""

import re

import pytest
from docutils.core import publish_parts
from gallery_build import drift_bands, schema
from gallery_build import hooks as docs_build


def test_stamp_goes_under_the_title():
    text = ".. _label:\n\n\nFused conv\n==========\n\nBody\n"
    stamp = docs_build.stamp_rst({"environment": {"gpu": "NVIDIA H200", "date_utc": "d", "commit": "c"}}, "plot_x")
    out = docs_build._insert_stamp(text, stamp)
    assert out.index("Measured on **NVIDIA H200**") > out.index("==========")
    assert out.index("Measured on") < out.index("Body")
    assert ":download:`JSON record <plot_x.record.json>`" in out
    assert docs_build._insert_stamp(text, "") == text


def test_page_warnings_are_summarized_under_the_title():
    clock_warning = (
        "software power cap held the clock down (SM clock 1485 of 1980 MHz at the end); timings may be slower"
    )
    record = {
        "environment": {"gpu": "NVIDIA H200"},
        "measurements": [
            {"warnings": [clock_warning], "clocks": {"sm_mhz_end": 1485, "max_sm_mhz": 1980}},
            {
                "warnings": [
                    "software power cap held the clock down (SM clock 1335 ...)",
                    "large spread: IQR is 17% of the median",
                ],
                "clocks": {"sm_mhz_end": 1335, "max_sm_mhz": 1980},
            },
            {"warnings": [], "clocks": {}},
        ],
    }
    note = docs_build.warnings_rst(record)
    assert "2 of 3 measurements on this page carry a harness warning" in note
    assert "2 × the GPU's power cap held the SM clock below 97% of its maximum (lowest: 1335 of 1980 MHz)" in note
    assert "1 × a large spread" in note
    assert note not in docs_build.stamp_rst(record, "plot_x")  # the page opens with its lesson, not its caveats
    assert "Measurement notes" in docs_build.stamp_rst(record, "plot_x")  # only a pointer to the notes
    assert note in docs_build.notes_rst(record)
    assert docs_build.warnings_rst({"measurements": [{"warnings": []}]}) == ""
    drift = "timings drifted -15% from the first to the last third of the run " + (
        "(clock or thermal throttling, or interference)"
    )
    note = docs_build.warnings_rst({"measurements": [{"warnings": [drift]}]})
    assert "1 × timings drifting" in note and "× thermal throttling" not in note  # a possible cause is not a finding
    thermal = "thermal throttling during 20% of the run (SM clock 1700 of 1980 MHz at the end)"
    assert "1 × thermal throttling" in docs_build.warnings_rst({"measurements": [{"warnings": [thermal]}]})


def _flagged_record():
    warn = "large spread: IQR is 17% of the median"
    return {
        "environment": {"gpu": "NVIDIA H200", "date_utc": "d", "commit": "c"},
        "measurements": [
            {"label": "cuDNN @ S=1", "warnings": [warn]},
            {"label": "FA4 @ S=1", "warnings": []},
            {"label": "cuDNN @ S=2", "warnings": []},
            {"label": "FA4 @ S=2", "warnings": []},
        ],
        "headlines": [
            {
                "kind": "comparison",
                "name": "S=1 <b>",
                "candidate_measurement": "cuDNN @ S=1",
                "baseline_measurement": "FA4 @ S=1",
                "value": 1.0,
                "low": 0.9,
                "high": 1.1,
                "verdict": "tie",
            },
            {
                "kind": "comparison",
                "name": "S=2",
                "candidate_measurement": "cuDNN @ S=2",
                "baseline_measurement": "FA4 @ S=2",
                "value": 1.0,
                "low": 0.9,
                "high": 1.1,
                "verdict": "tie",
            },
        ],
    }


def test_measurement_notes_say_which_verdicts_rest_on_a_flagged_measurement():
    record = _flagged_record()
    assert docs_build.verdicts_on_flagged(record) == (["S=1 <b>"], 2)
    notes = docs_build.notes_rst(record)
    assert "1 of 2 verdicts on this page rest on a measurement that carries a harness warning" in notes
    assert "* S\\=1 \\<b\\>" in notes and "* S\\=2" not in notes  # escaped: renders as "S=1 <b>"
    assert "<summary>Measurement notes: 1 of 2 verdicts rest on a flagged measurement</summary>" in notes
    record["measurements"][0]["warnings"] = []
    assert docs_build.notes_rst(record) == ""  # nothing to note: no box


def test_measurement_notes_go_at_the_end_of_the_page_collapsed(tmp_path):
    text = ".. _label:\n\n\nFused conv\n==========\n\nBody\n"
    record = _flagged_record()
    page = docs_build._insert_stamp(text, docs_build.stamp_rst(record, "plot_x")) + docs_build.notes_rst(record)
    assert page.index("Body") < page.index('<details class="cg-notes">') < page.rindex("</details>")
    assert page.index("Measured on") < page.index("Body")


HOSTILE_NAMES = [
    "x\n\n.. raw:: html\n\n   <script>alert(1)</script>\n",  # a directive smuggled in on its own lines
    "*bold* ``code`` |sub| ref_ `role`:sup: [1]_ \\ end",  # every inline markup start-string, a backslash
    "- 1. :: <img src=x onerror=alert(1)>",  # a nested list, a literal-block marker, raw HTML
]


def _html(rst):
    """The HTML docutils makes of ``rst`` (Sphinx's ``rst-class`` and ``:doc:`` made docutils'); a warning fails."""
    parts = publish_parts(
        rst.replace(".. rst-class::", ".. class::").replace(":doc:`/methodology`", "the methodology"),
        writer="html",
        settings_overrides={"report_level": 2, "halt_level": 2, "raw_enabled": True},
    )
    return parts["body"]


def _shown(html_text):
    """The text a reader sees: tags dropped, entities and whitespace folded."""
    import html

    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", html_text)).split())


def _hostile_record(name):
    record = _flagged_record()
    for h in record["headlines"]:
        h.update(name=name if h["name"] == "S=1 <b>" else h["name"], drift=0.05, run_low=0.95, run_high=1.05)
    return record


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_headline_name_renders_literally_in_the_measurement_notes(name):
    notes = docs_build.notes_rst(_hostile_record(name))
    body = _html(notes)
    assert "<script" not in body and "<img" not in body, f"recorded name reached the HTML as markup:\n{body}"
    assert not re.search(r"<(em|strong|code|cite|sup|a|ol|blockquote|pre|dl)\b", body), body
    shown = _shown(body)
    literal = " ".join(name.split())
    assert shown.count(literal) == 2, f"{literal!r} should read literally in the flagged list and the widened list"
    assert "1 of 2 verdicts on this page rest on a measurement that carries a harness warning" in shown
    assert "S=1" not in notes.split("<summary>")[0]  # the name stays out of the raw HTML block


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_widened_rst_shows_a_hostile_headline_name_as_text(name):
    widened = drift_bands.widened_rst(_hostile_record(name))
    assert widened.count("\n   * ") == 2 and ".. raw::" not in widened  # one bullet line per comparison
    shown = _shown(_html(widened))
    assert f"{' '.join(name.split())}: 1.00× (0.90–1.10, widened ±5% for re-recording drift" in shown


def test_rst_text_keeps_plain_names_readable():
    assert schema.rst_text("cuDNN fused µs") == "cuDNN fused µs"
    assert schema.rst_text("S=1 <b>") == "S\\=1 \\<b\\>"
    assert schema.rst_text("a\r\nb\tc\u2028d") == "a b c d"
    assert _shown(_html(f"* {schema.rst_text('flash-attn 4 (B=2, S=4096) vs *SDPA*')}")) == (
        "flash-attn 4 (B=2, S=4096) vs *SDPA*"
    )


def test_a_headline_widened_by_no_drift_is_called_in_run_not_widened():
    record = _hostile_record("plain")
    for h in record["headlines"]:
        h.update(drift=0.0, run_low=h["low"], run_high=h["high"], interval="widened")
    assert drift_bands.widened_rst(record) == ""  # no note claims a widening that did not happen
    assert not any(drift_bands.is_widened(h) for h in record["headlines"])
    record["headlines"][0]["drift"] = 0.05
    assert drift_bands.widened_rst(record).count("\n   * ") == 1
