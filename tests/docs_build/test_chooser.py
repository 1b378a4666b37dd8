"""The backend chooser (gallery_build.chooser, docs/chooser.md): rows computed from the records, never invented."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from gallery_build import chooser
from gallery_build.chooser import MISSING, chooser_rows, first_call_costs, render_html

ROOT = Path(__file__).resolve().parents[2]
GALLERY = ROOT / "docs" / "auto_examples"
FA4 = "FlashAttention-4 (flash-attn-4 4.0.0b36)"


def _record(gallery: Path, stem: str) -> dict:
    return json.loads((gallery / f"{stem}.record.json").read_text(encoding="utf-8"))


def _headline(gallery: Path, stem: str, name_part: str | tuple[str, ...]) -> dict:
    """The one comparison headline naming ``name_part`` (or any of a tuple of names, old and new)."""
    parts = (name_part,) if isinstance(name_part, str) else name_part
    hs = [
        h
        for h in _record(gallery, stem)["headlines"]
        if any(p in h["name"] for p in parts) and h.get("kind") == "comparison"
    ]
    assert len(hs) == 1, f"{stem}.record.json: expected one comparison headline naming {name_part!r}, found {hs}"
    return hs[0]


def _expected_winner(h: dict, candidate: str) -> str:
    return {"faster": candidate, "slower": h["baseline"], "tie": "tie"}[h["verdict"]]


def _rows_of(rows, page: str, **fields):
    return [r for r in rows if r.page == page and all(getattr(r, k) == v for k, v in fields.items())]


# ---- the committed records ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def committed():
    return chooser_rows(GALLERY)


@pytest.mark.parametrize(
    ("page", "name_part", "candidate", "shape"),
    [
        (
            "plot_13_paged_decode",
            ("8k context, speed-up", "8k context, pages of 64:"),  # the name before and after pages of 64
            "cuDNN paged",
            dict(feature="paged decode", seq_len=8192, phase="decode"),
        ),
        ("plot_32_varlen_backward", "packed THD backward", "cuDNN packed (THD) backward", dict(feature="varlen")),
        ("plot_18_attention_masks", "window W=", "cuDNN window", dict(feature="window", seq_len=4096)),
        ("plot_24_softcap", "soft-cap", "cuDNN soft-cap (score_mod)", dict(feature="soft-cap")),
        ("plot_35_attention_sinks", "sinks", "cuDNN sink_token", dict(feature="sinks")),
        ("plot_27_mla", "MLA", "cuDNN MLA step", dict(feature="MLA", head_dim="192/128")),
        ("plot_16_gqa_mqa", "decode, Hkv=1:", "cuDNN graph", dict(feature="GQA/MQA", seq_len=8192, phase="decode")),
    ],
)
def test_committed_records_give_each_comparison_its_recorded_winner_and_interval(
    committed, page, name_part, candidate, shape
):
    rows, _ = committed
    if not (GALLERY / f"{page}.record.json").exists():
        pytest.skip(f"{page} is not recorded yet: its record is committed with its first recording")
    h = _headline(GALLERY, page, name_part)
    found = _rows_of(rows, page, comparison=h["name"])
    assert len(found) == 1, f"{page}: the chooser gave {len(found)} rows for {h['name']!r} (expected one)"
    row = found[0]
    assert row.winner == _expected_winner(h, candidate), (
        f"{page} {h['name']!r}: verdict {h['verdict']!r} over {h['baseline']!r} should name "
        f"{_expected_winner(h, candidate)!r} the winner, the chooser says {row.winner!r} "
        "(docs/_ext/gallery_build/chooser.py _row)"
    )
    assert (row.speedup, row.low, row.high, row.baseline) == (h["value"], h["low"], h["high"], h["baseline"])
    for key, value in shape.items():
        assert getattr(row, key) == value, f"{page} {h['name']!r}: {key} {getattr(row, key)!r}, expected {value!r}"
    assert row.contenders[0].name == candidate, "the candidate is listed first among the contenders"
    assert h["baseline"] in {c.name for c in row.contenders}, f"{page}: the baseline is missing from the contenders"


def test_the_mla_comparison_maps_to_its_row(committed):
    """The MLA comparison (plot_27, split off plot_24 by issue 33) gives one MLA row with its recorded winner and
    interval."""
    rows, _ = committed
    found = [
        (page, h)
        for page in ("plot_27_mla",)
        if (GALLERY / f"{page}.record.json").exists()
        for h in _record(GALLERY, page)["headlines"]
        if h.get("kind") == "comparison" and h["name"].startswith("MLA")
    ]
    assert found, "plot_27_mla's committed record holds no MLA comparison"
    for page, h in found:
        (row,) = _rows_of(rows, page, comparison=h["name"])
        assert row.winner == _expected_winner(h, "cuDNN MLA step"), f"{page} {h['name']!r}"
        assert (row.speedup, row.low, row.high, row.baseline) == (h["value"], h["low"], h["high"], h["baseline"])
        assert (row.feature, row.head_dim, row.phase, row.seq_len) == ("MLA", "192/128", "fwd+bwd", 4096)
        assert row.contenders[0].name == "cuDNN MLA step", "the candidate is listed first among the contenders"


def test_committed_records_give_every_contender_its_median_host_time(committed):
    rows, _ = committed
    rec = _record(GALLERY, "plot_18_attention_masks")
    m = next(m for m in rec["measurements"] if m["label"] == "FlexAttention ALiBi (compiled) alibi")
    row = _rows_of(rows, "plot_18_attention_masks", feature="ALiBi")[0]
    c = next(c for c in row.contenders if c.name == "FlexAttention ALiBi (compiled)")
    samples = sorted(m["host_samples_ms"])
    mid = len(samples) // 2
    median = samples[mid] if len(samples) % 2 else (samples[mid - 1] + samples[mid]) / 2
    assert c.host_us == pytest.approx(median * 1000), "host µs per call must be the median of host_samples_ms × 1000"
    assert c.median_ms == m["median_ms"]


def test_controls_are_not_contenders(committed):
    rows, _ = committed
    names = {c.name for r in rows for c in r.contenders}
    assert not [n for n in names if "(control" in n], "a control measurement isolates a cost; it is not a backend"


def test_each_plot_05_length_and_head_dim_gets_its_own_recorded_winner(committed):
    rows, _ = committed
    points = [r for r in rows if r.page == "plot_05_sdpa_causal" and r.comparison]
    assert {(r.head_dim, r.seq_len) for r in points} == {
        (d, s) for d in ("64", "128") for s in (1024, 2048, 4096, 8192, 16384)
    }
    for r in points:
        h = _headline(GALLERY, "plot_05_sdpa_causal", f"d={r.head_dim}, S={r.seq_len}:")
        assert r.speedup == h["value"]
        assert r.winner == _expected_winner(h, f"cuDNN graph, d={r.head_dim}")


def test_a_swept_length_without_a_comparison_keeps_its_contenders_and_no_winner(tmp_path):
    rec = _record(GALLERY, "plot_05_sdpa_causal")
    rec["headlines"] = [h for h in rec["headlines"] if h.get("kind") != "comparison"]
    (tmp_path / "plot_05_sdpa_causal.record.json").write_text(json.dumps(rec))
    rows, _ = chooser_rows(tmp_path)
    points = _rows_of(rows, "plot_05_sdpa_causal", comparison="")
    assert points, "plot_05 records a length sweep: each length must get a row"
    assert {r.head_dim for r in points} >= {"64", "128"}, "plot_05's head dims come from its impl names (', d=64')"
    assert all(r.winner == MISSING and r.speedup is None for r in points), "no comparison headline: no winner"
    assert all(isinstance(r.seq_len, int) for r in points)


def test_comparisons_that_are_not_a_backend_choice_are_listed_with_their_reason(committed):
    _, left_out = committed
    pages = {page for page, _, _ in left_out}
    assert "plot_20_dropout_deterministic" in pages
    assert all(why for _, _, why in left_out)


def test_plot_13_rows_are_the_same_under_the_old_and_the_pages_of_64_names(tmp_path):
    """plot_13 renamed "at 8k context, speed-up ..." to "at 8k context, pages of 64: speed-up ...": the
    chooser gives the same rows either way, one per comparison, the 64 and the 128 apart."""
    rec = _record(GALLERY, "plot_13_paged_decode")
    for h in rec["headlines"]:
        h["name"] = re.sub(r"at 8k context, (?!pages of)", "at 8k context, pages of 64: ", h["name"])
    (tmp_path / "plot_13_paged_decode.record.json").write_text(json.dumps(rec))
    renamed, _ = chooser_rows(tmp_path)
    committed_rows = [r for r in chooser_rows(GALLERY)[0] if r.page == "plot_13_paged_decode"]

    def same(r):
        return {k: v for k, v in r.to_dict().items() if k != "comparison"}

    assert [same(r) for r in renamed] == [same(r) for r in committed_rows]
    comparisons = [h for h in rec["headlines"] if h.get("kind") == "comparison"]
    assert len(renamed) == len(comparisons), "one row per plot_13 comparison, none counted twice"
    by_detail = {r.detail: r for r in renamed}
    assert set(by_detail) == {"32 sequences, pages of 64 tokens", "32 sequences, pages of 128 tokens"}
    assert len(by_detail["32 sequences, pages of 64 tokens"].contenders) > 2, "the sweep's contenders at 8k"


def test_every_attention_comparison_in_the_committed_records_maps_to_a_rule():
    unmatched = []
    for page in chooser.PAGE_RULES:
        path = GALLERY / f"{page}.record.json"
        if not path.exists():
            continue
        for h in _record(GALLERY, page)["headlines"]:
            if h.get("kind") == "comparison" and chooser._rule_for(page, h["name"]) is None:
                unmatched.append(f"{page}: {h['name']!r}")
    assert not unmatched, "comparisons no rule in docs/_ext/gallery_build/chooser.py PAGE_RULES maps: " + ", ".join(
        unmatched
    )


# ---- the fallbacks: the headline's name, per page ------------------------------------------------------------------

FALLBACK_CASES = [
    ("plot_05_sdpa_causal", "anything at all", dict(feature="causal", phase="fwd")),
    (
        "plot_09_sdpa_backward",
        "speed-up over the fastest contender at that length",
        dict(feature="backward", head_dim="128", phase="fwd+bwd", seq_len=16384),
    ),
    (
        "plot_13_paged_decode",
        "paged decode at 8k context, speed-up over the fastest PyTorch decode",
        dict(seq_len=8192),
    ),
    (
        "plot_13_paged_decode",
        "paged decode at 8k context, pages of 64: speed-up over the fastest contender",
        dict(seq_len=8192, detail="32 sequences, pages of 64 tokens"),
    ),
    (
        "plot_13_paged_decode",
        "paged decode at 8k context, pages of 128: speed-up over the fastest contender",
        dict(seq_len=8192, detail="32 sequences, pages of 128 tokens"),
    ),
    ("plot_16_gqa_mqa", "prefill, Hkv=8: speed-up over best baseline", dict(seq_len=4096, phase="prefill")),
    ("plot_17_varlen_attention", "packed THD: speed-up over best baseline", dict(phase="fwd", seq_len=None)),
    (
        "plot_18_attention_masks",
        "window W=128: speed-up over the fastest contender",
        dict(feature="window", seq_len=4096),
    ),
    (
        "plot_33_chunked_prefill",
        "paged chunked prefill: speed-up over the fastest contender",
        dict(feature="paged prefill"),
    ),
    ("plot_18_attention_masks", "ALiBi: speed-up over FlexAttention", dict(feature="ALiBi")),
    ("plot_19_flex_attention_oss", "window 512: flex_attention speed-up over best other", dict(feature="window")),
    (
        "plot_35_attention_sinks",
        "sinks: speed-up over the fastest contender",
        dict(feature="sinks", head_dim="128"),
    ),
    ("plot_27_mla", "MLA step: speed-up over the fastest contender", dict(head_dim="192/128", phase="fwd+bwd")),
    ("plot_25_transformer_block", "training step: speed-up over torch.compile", dict(seq_len=2048)),
    (
        "plot_26_vendor_llama_fa4",
        "S=8192 no mask bwd: cuDNN over FlashAttention-4",
        dict(feature="no mask", seq_len=8192, phase="bwd"),
    ),
]


@pytest.mark.parametrize(
    ("page", "name", "expected"), FALLBACK_CASES, ids=[f"{c[0]}:{c[1][:20]}" for c in FALLBACK_CASES]
)
def test_a_record_without_params_falls_back_to_the_headline_name(tmp_path, page, name, expected):
    """Measurements with only ``impl`` in their params (the records before ``seq_len``/``phase`` params): the
    shape comes from the headline's name and the page's declared shape."""
    rec = {
        "example": page,
        "title": page,
        "headlines": [
            {"name": "peak", "value": 1.0, "unit": "TFLOP/s", "seq_len": 16384},
            {
                "name": name,
                "value": 1.2,
                "unit": "x",
                "baseline": "B",
                "low": 1.1,
                "high": 1.3,
                "verdict": "faster",
                "kind": "comparison",
            },
        ],
        "measurements": [],
    }
    (tmp_path / f"{page}.record.json").write_text(json.dumps(rec))
    rows, _ = chooser_rows(tmp_path)
    assert len(rows) == 1, f"{page}: {name!r} gave {len(rows)} rows"
    for key, value in expected.items():
        assert getattr(rows[0], key) == value, f"{page} {name!r}: {key} {getattr(rows[0], key)!r}, expected {value!r}"


SOURCE_SHAPES = {
    "plot_09_sdpa_backward": [r"seq=s, head_dim=128, causal=True"],
    "plot_13_paged_decode": [
        r"PagedDecodeProblem\(batch=32, heads=32, head_dim=128, max_context=8192",
        r"dataclasses\.replace\(p64, page_size=128\)",
    ],
    "plot_16_gqa_mqa": [r"B, HQ, S, D = 4, 32, 4096, 128", r'"decode": \(32, 1, 8192\)'],
    "plot_17_varlen_attention": [r"B, H, D, S_MAX(, T)? = len\(lengths\), 16, 128", r"\(16,\)\)\.clamp\(32, 4096\)"],
    "plot_32_varlen_backward": [r"B, H, D, S_MAX(, T)? = len\(lengths\), 16, 128", r"\(16,\)\)\.clamp\(32, 4096\)"],
    "plot_18_attention_masks": [r"B, H, S, D, W = 4, 16, 4096, 128"],
    "plot_33_chunked_prefill": [r"B, H, S, D = 4, 16, 4096, 128", r"CHUNK = 512"],
    "plot_19_flex_attention_oss": [r"B, H, S, D, W = 4, 16, 4096, 128, 512"],
    "plot_24_softcap": [r"B, H, S, D = 4, 16, 4096, 128"],
    "plot_35_attention_sinks": [r"B, H, S, D = 4, 16, 4096, 128"],
    "plot_25_transformer_block": [r"B, S, H, D = 8, 2048, 16, 128"],
    "plot_30_cudnn_torch_provider": [r"B, S, H, D = 8, 2048, 16, 128"],
    "plot_26_vendor_llama_fa4": [r"B, S, H, HKV, D = 2, 4096, 64, 8, 128"],
    "plot_27_mla": [r"B, H, S = 4, 16, 4096", r"DQK, DV = 192, 128"],
}


def test_every_page_the_chooser_reads_is_an_example():
    """A rule keyed by a page that no longer exists (split or renamed) maps nothing: it must move with the page."""
    from gallery_build.chooser import FIRST_CALLS_OF, PAGE_RULES, SWEEP_PAGES

    stems = {p.stem for p in (ROOT / "examples").glob("plot_*.py")}
    for page in [*PAGE_RULES, *SWEEP_PAGES, *FIRST_CALLS_OF, *FIRST_CALLS_OF.values()]:
        assert page in stems, f"chooser.py names {page!r}, which is no example under examples/"


@pytest.mark.parametrize("page", sorted(SOURCE_SHAPES))
def test_the_fallback_shapes_are_still_the_ones_the_examples_declare(page):
    path = ROOT / "examples" / f"{page}.py"
    text = path.read_text(encoding="utf-8")
    for pattern in SOURCE_SHAPES[page]:
        m = re.search(pattern, text)
        assert m, (
            f"{path.relative_to(ROOT)} no longer declares {pattern!r}: the chooser's fallback shape for {page} "
            "(docs/_ext/gallery_build/chooser.py PAGE_RULES) must follow the example; update both"
        )


# ---- a fake gallery: FlashAttention-4 --------------------------------------------------------------------------------


def _m(impl: str, tag: str, ms: float, host=(0.010, 0.012, 0.014), **params) -> dict:
    m = {"label": f"{impl} {tag}".strip(), "params": {"impl": impl, **params}, "median_ms": ms, "unit": "ms"}
    if host is not None:
        m["host_samples_ms"] = list(host)
    return m


def _fa4_gallery(tmp_path: Path, evil: str = "") -> Path:
    cudnn, fa4 = "cuDNN graph (heuristics A)" + evil, FA4 + evil
    ms = []
    headlines = []
    for s, causal, phase, verdict in ((4096, True, "fwd", "slower"), (8192, False, "bwd", "tie")):
        tag = f"@ S={s} {'causal' if causal else 'full'} {phase}"
        params = dict(seq_len=s, causal=causal, phase=phase)
        ms += [_m(cudnn, tag, 1.0, **params), _m(fa4, tag, 0.9, host=(0.020, 0.030, 0.040), **params)]
        headlines.append(
            {
                "name": f"S={s} {'causal' if causal else 'no mask'} {phase}: cuDNN over FlashAttention-4{evil}",
                "value": 0.9,
                "unit": "x",
                "baseline": fa4,
                "low": 0.85,
                "high": 0.95 if verdict == "slower" else 1.01,
                "run_low": 0.88,
                "run_high": 0.93,
                "interval": "widened",
                "run_verdict": verdict,
                "verdict": verdict,
                "tie_band": 0.01,
                "kind": "comparison",
                "candidate_measurement": f"{cudnn} {tag}",
                "baseline_measurement": f"{fa4} {tag}",
                "a_field_from_the_future": {"ignored": True},
            }
        )
    rec = {
        "example": "plot_26_vendor_llama_fa4",
        "title": "cuDNN vs FlashAttention-4" + evil,
        "headlines": headlines,
        "measurements": ms,
        "extra": {
            "first_calls": {
                "cudnn": [
                    {"torch_and_context_s": 1, "import_s": 0.5, "first_call_s": 0.30, "second_call_s": 0.001},
                    {"torch_and_context_s": 1, "import_s": 0.5, "first_call_s": 0.50, "second_call_s": 0.001},
                    {"torch_and_context_s": 1, "import_s": 0.5, "first_call_s": 0.40, "second_call_s": 0.001},
                ],
                "fa4": [{"error": "RuntimeError: no JIT"}, {"first_call_s": 9.0}, {"first_call_s": 7.0}],
            }
        },
    }
    (tmp_path / "plot_26_vendor_llama_fa4.record.json").write_text(json.dumps(rec))
    return tmp_path


def test_a_flashattention4_comparison_names_its_winner_shape_and_first_calls(tmp_path):
    rows, left_out = chooser_rows(_fa4_gallery(tmp_path))
    assert not left_out
    by_len = {r.seq_len: r for r in rows}
    assert sorted(by_len) == [4096, 8192]
    fwd, bwd = by_len[4096], by_len[8192]
    assert (fwd.feature, fwd.phase, fwd.winner, fwd.interval) == ("causal", "fwd", FA4, "widened")
    assert (bwd.feature, bwd.phase, bwd.winner) == ("no mask", "bwd", "tie")
    assert "backward" in bwd.features and "GQA/MQA" in bwd.features
    assert (fwd.low, fwd.high) == (0.85, 0.95), "the published (widened) interval, not the in-run one"
    cud, fa = fwd.contenders
    assert cud.name == "cuDNN graph (heuristics A)" and fa.name == FA4
    assert fa.host_us == pytest.approx(30.0) and cud.host_us == pytest.approx(12.0)
    assert cud.first_call_ms == pytest.approx(400.0) and "3 fresh processes" in cud.first_call_note
    assert fa.first_call_ms == pytest.approx(8000.0) and "2 fresh processes" in fa.first_call_note


def test_measurement_params_win_over_the_headline_name(tmp_path):
    gallery = _fa4_gallery(tmp_path)
    path = gallery / "plot_26_vendor_llama_fa4.record.json"
    rec = json.loads(path.read_text())
    for m in rec["measurements"]:
        if m["params"]["seq_len"] == 4096:
            m["params"]["seq_len"] = 32768
    path.write_text(json.dumps(rec))
    rows, _ = chooser_rows(gallery)
    assert sorted(r.seq_len for r in rows) == [8192, 32768], "params say 32768 where the name says S=4096"


def test_a_sweep_with_a_flashattention4_contender_lists_it_at_its_head_dim(tmp_path):
    ms = [
        _m("cuDNN graph, d=128", "@ seq_len=4096", 0.5, seq_len=4096),
        _m(f"{FA4}, d=128", "@ seq_len=4096", 0.45, seq_len=4096),
        _m("cuDNN graph, d=64", "@ seq_len=4096", 0.6, seq_len=4096),
        _m(f"{FA4}, d=64", "@ seq_len=4096", 0.7, seq_len=4096),
    ]
    rec = {"example": "plot_05_sdpa_causal", "title": "t", "headlines": [], "measurements": ms}
    (tmp_path / "plot_05_sdpa_causal.record.json").write_text(json.dumps(rec))
    rows, _ = chooser_rows(tmp_path)
    assert {r.head_dim: [c.name for c in r.contenders] for r in rows} == {
        "128": ["cuDNN graph, d=128", f"{FA4}, d=128"],
        "64": ["cuDNN graph, d=64", f"{FA4}, d=64"],
    }


# ---- missing data is said as missing ---------------------------------------------------------------------------------


def test_missing_numbers_are_said_as_missing_never_filled_in(tmp_path):
    rec = {
        "example": "plot_17_varlen_attention",
        "title": "varlen",
        "headlines": [
            {
                "name": "packed THD: speed-up over best baseline",
                "value": 1.5,
                "unit": "x",
                "baseline": "PyTorch varlen_attn",
                "kind": "comparison",
            }
        ],
        "measurements": [
            _m("cuDNN packed (THD)", "", 0.3, host=None),
            {"label": "PyTorch varlen_attn", "params": {"impl": "PyTorch varlen_attn"}},
        ],
    }
    (tmp_path / "plot_17_varlen_attention.record.json").write_text(json.dumps(rec))
    rows, _ = chooser_rows(tmp_path)
    (row,) = rows
    assert row.winner == MISSING and row.verdict == MISSING, "no verdict recorded: no winner may be named"
    assert (row.low, row.high, row.interval, row.seq_len) == (None, None, "", None)
    cud, torch_ = row.contenders
    assert (cud.host_us, cud.first_call_ms, torch_.median_ms, torch_.host_us) == (None, None, None, None)
    page = render_html(rows)
    assert page.count(MISSING) >= 5, page
    assert 'data-seq-len=""' in page
    assert "nan" not in page.lower().replace("nano", ""), "a missing number must never print as nan"
    assert first_call_costs(rec) == {}


def test_first_calls_that_all_failed_say_why(tmp_path):
    out = first_call_costs({"extra": {"first_calls": {"fa4": [{"error": "ImportError: no cute"}]}}})
    assert out == {"fa4": (None, "failed: ImportError: no cute")}


# ---- hostile strings -------------------------------------------------------------------------------------------------


def test_every_recorded_string_is_escaped(tmp_path):
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    rows, _ = chooser_rows(_fa4_gallery(tmp_path, evil))
    assert rows and all(len(r.contenders) == 2 for r in rows), "the hostile names must reach the page to be tested"
    assert all(r.winner.endswith(evil) or r.winner == "tie" for r in rows)
    page = render_html(rows)
    assert "<img" not in page and "alert(1)</script>" not in page
    assert page.count("<script>") == 1, "only the filter's own script"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


# ---- the page and the build ------------------------------------------------------------------------------------------


def test_the_chooser_page_shows_no_code_and_is_in_the_toctree():
    text = (ROOT / "docs" / "chooser.md").read_text(encoding="utf-8")
    cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)\n", text)
    assert cells and all(re.match(r":tags: \[remove-(input|cell)\]", c) for c in cells), (
        "docs/chooser.md: every code cell needs :tags: [remove-input] (or remove-cell): no visible code"
    )
    toctree = (ROOT / "docs" / "index.md").read_text(encoding="utf-8").split("```{toctree}")[1]
    assert re.search(r"^chooser$", toctree, re.M), "docs/index.md: add `chooser` to the toctree"
    assert "cdn" not in render_html([]).lower() and "src=" not in render_html([]), "no external script"


def test_the_chooser_page_re_executes_when_the_records_change(tmp_path):
    from gallery_build import hooks

    callbacks = {}
    app = SimpleNamespace(extensions={}, connect=lambda event, fn, priority=500: callbacks.setdefault(event, fn))
    gallery = tmp_path / "docs" / "auto_examples"
    gallery.mkdir(parents=True)
    (tmp_path / "docs" / "data").mkdir()
    (gallery / "plot_a.record.json").write_text("{}")
    hooks.connect(app, gallery=gallery, examples=tmp_path / "examples", mode="render", started=0.0)
    env = SimpleNamespace(found_docs={"chooser", "results", "index"})
    outdated = callbacks["env-get-outdated"]
    assert "chooser" in outdated(app, env, set(), set(), set()), "docs/_ext/gallery_build/hooks.py on_get_outdated"
    assert outdated(app, env, set(), set(), set()) == [], "unchanged data: nothing re-executes"
    (gallery / "plot_a.record.json").write_text('{"changed": 1}')
    assert "chooser" in outdated(app, env, set(), set(), set())


def test_the_page_notebook_runs_over_the_committed_records(tmp_path, monkeypatch):
    """docs/chooser.md's cells, run as myst-nb runs them (cwd: docs/), over a copy of the records."""
    docs = tmp_path / "docs"
    (docs / "auto_examples").mkdir(parents=True)
    for p in GALLERY.glob("*.record.json"):
        shutil.copy(p, docs / "auto_examples")
    shutil.copytree(ROOT / "docs" / "_ext", docs / "_ext")
    monkeypatch.chdir(docs)
    text = (ROOT / "docs" / "chooser.md").read_text(encoding="utf-8")
    ns: dict = {}
    shown = []
    for cell in re.findall(r"```\{code-cell\} ipython3\n(.*?)```", text, re.S):
        code = "\n".join(line for line in cell.splitlines() if not line.startswith(":tags:"))
        tree = ast.parse(code)
        exec(compile(code, "docs/chooser.md", "exec"), ns)
        if tree.body and isinstance(tree.body[-1], ast.Expr):  # the value the notebook shows
            value = eval(compile(ast.Expression(tree.body[-1].value), "docs/chooser.md", "eval"), ns)
            if hasattr(value, "data"):
                shown.append(value.data)
    assert len(shown) == 3
    assert shown[0].count("<tr data-features=") == len(ns["rows"]) > 10


# ---- the filter, in headless Chromium, without building the site -------------------------------------------------


@pytest.fixture(scope="module")
def chromium():
    import os

    found = {n: shutil.which(n) for n in ("chromium", "chromedriver")}
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        found["selenium"] = None
    missing = [n for n, ok in found.items() if not ok]
    if missing:
        msg = f"filter test needs {', '.join(missing)} (apt-get install chromium chromium-driver; pip install selenium)"
        if os.environ.get("CUDNN_GUIDE_REQUIRE_BROWSER") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    opts = webdriver.ChromeOptions()
    opts.binary_location = found["chromium"]
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(found["chromedriver"]), options=opts)
    yield driver
    driver.quit()


@pytest.mark.browser
def test_the_filter_hides_rows_by_feature_head_dim_and_length(chromium, tmp_path):
    from selenium.webdriver.support.ui import Select

    rows, _ = chooser_rows(GALLERY)
    page = tmp_path / "chooser.html"
    page.write_text(f"<!doctype html><meta charset=utf-8><body>{render_html(rows)}</body>", encoding="utf-8")
    chromium.get(page.as_uri())
    visible = (
        "return Array.from(document.querySelectorAll('.cg-chooser tbody tr')).filter(tr => tr.offsetParent !== null)"
        ".map(tr => [tr.dataset.features, tr.dataset.headDim, tr.dataset.seqLen])"
    )

    def shown():
        return chromium.execute_script(visible)

    assert len(shown()) == len(rows)
    form = {n: chromium.find_element("name", n) for n in ("feature", "head_dim", "seq_min", "seq_max")}
    Select(form["feature"]).select_by_value("causal")
    causal = shown()
    assert causal and len(causal) < len(rows) and all("causal" in f.split() for f, _, _ in causal)
    Select(form["head_dim"]).select_by_value("64")
    assert {d for _, d, _ in shown()} == {"64"} and len(shown()) < len(causal)
    form["seq_min"].send_keys("4096")
    form["seq_max"].send_keys("8192")
    assert sorted(int(s) for _, _, s in shown()) == sorted(
        r.seq_len for r in rows if "causal" in r.features and r.head_dim == "64" and 4096 <= (r.seq_len or 0) <= 8192
    )
    counter = chromium.find_element("css selector", ".cg-shown").text
    assert counter == f"{len(shown())} of {len(rows)} shapes shown", counter
    form["seq_max"].clear()
    Select(form["head_dim"]).select_by_value("")
    Select(form["feature"]).select_by_value("varlen")
    assert shown() == [], "varlen rows record no length: a length bound (here the lower one alone) hides them"
    form["seq_min"].clear()
    assert len(shown()) == 2, "no bound: the varlen rows, forward and backward, come back"
    assert not [e for e in chromium.get_log("browser") if e["level"] == "SEVERE"]


def test_a_contender_timed_faster_than_the_winner_outside_its_verdict_is_said(committed):
    """A verdict over one baseline (FlexAttention) must not read as "the fastest" when another contender
    at the same shape (FlashAttention-4) was timed faster: the row says so, with both times."""
    rows, _ = committed
    for r in rows:
        if r.winner in ("tie", MISSING):
            assert r.faster_elsewhere == ""
            continue
        times = {c.name: c.median_ms for c in r.contenders if c.median_ms is not None}
        if r.winner not in times:
            continue
        faster = {n: t for n, t in times.items() if t < times[r.winner] and n not in (r.winner, r.baseline)}
        if not faster:
            assert r.faster_elsewhere == "", r
        else:
            fastest = min(faster, key=faster.get)
            assert r.faster_elsewhere.startswith(f"{fastest} was timed faster"), r.faster_elsewhere
            assert "cg-faster" in render_html([r])
