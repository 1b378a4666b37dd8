"""Open the built site in a real headless Chromium and check what a reader sees.

Needs Debian's ``chromium`` and ``chromium-driver`` and the ``selenium`` package; ``.ci/run``
installs them. Without them the test is skipped, unless ``CUDNN_GUIDE_REQUIRE_BROWSER=1`` (set
in CI), which turns a missing browser into a failure.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlparse

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def _require_browser():
    missing = [n for n, ok in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not ok]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if missing:
        msg = (
            f"browser test needs {', '.join(missing)} (apt-get install chromium chromium-driver; pip install selenium)"
        )
        if os.environ.get("CUDNN_GUIDE_REQUIRE_BROWSER") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output readable
        pass


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _pages(site: Path) -> list[str]:
    skip = {"genindex.html", "py-modindex.html"}
    return sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("*.html")
        if not p.relative_to(site).as_posix().startswith(("_", "api/generated")) and p.name not in skip
    )


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "img", "link", "script"):
                self.links.append(a[key])


@functools.cache
def _parse(path: Path) -> _Links:
    """Each page is parsed once per session (it used to be re-parsed for every link into it)."""
    p = _Links()
    p.feed(path.read_text(encoding="utf-8", errors="replace"))
    return p


def test_every_page_loads_without_console_errors_and_all_images_load(browser, server, site):
    problems = []
    for page in _pages(site):
        browser.get(server + page)
        errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        if errors:
            problems.append(f"{page}: console errors: {errors[:3]}")
        broken = browser.execute_script(
            "return Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"
        )
        if broken:
            problems.append(f"{page}: images not loaded: {broken[:3]}")
    assert not problems, "\n".join(problems)


def test_every_internal_link_resolves(site):
    bad = []
    for page in _pages(site):
        path = site / page
        parsed = _parse(path.resolve())
        for link in parsed.links:
            url = urlparse(link)
            if url.scheme or link.startswith(("mailto:", "//", "javascript:")):
                continue
            target, frag = urldefrag(urljoin(page, unquote(link)))
            target = urlparse(target).path  # drop ?v=... cache busters
            tpath = (site / target) if target else path
            if target.endswith("/") or tpath.is_dir():
                tpath = tpath / "index.html"
            if not tpath.exists():
                bad.append(f"{page}: {link} (no such file)")
                continue
            if frag and tpath.suffix == ".html":
                tparsed = _parse(tpath.resolve())
                if frag not in tparsed.ids:
                    bad.append(f"{page}: {link} (no anchor #{frag})")
    assert not bad, f"{len(bad)} broken internal links:\n" + "\n".join(bad[:30])


def test_gallery_shows_one_thumbnail_per_example(browser, server, site):
    examples = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "examples").glob("plot_*.py"))
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    def thumbs():
        return browser.execute_script(
            "return Array.from(document.querySelectorAll('.sphx-glr-thumbcontainer'))"
            ".map(t => [t.querySelector('img').naturalWidth, t.querySelector('a').getAttribute('href')])"
        )

    # Wait for the gallery index to be in the DOM (one CI run read it before it was: an empty list
    # though the served file had every thumbnail); reload once before concluding it is missing.
    browser.get(server + "auto_examples/index.html")
    for attempt in range(2):
        try:
            WebDriverWait(browser, 20).until(
                lambda d: (
                    d.execute_script("return document.readyState") == "complete"
                    and thumbs()
                    and all(width > 0 for width, _ in thumbs())
                )
            )
            break
        except TimeoutException:
            if attempt == 0:
                browser.refresh()
    found = thumbs()
    on_disk = (site / "auto_examples" / "index.html").read_text(encoding="utf-8").count("sphx-glr-thumbcontainer")
    linked = sorted(re.sub(r"\.html(#.*)?$", "", href.split("/")[-1]) for _, href in found)
    assert linked == examples, (
        f"the browser saw {len(found)} thumbnails on {browser.current_url!r} "
        f"(title {browser.title!r}); the built file has {on_disk}"
    )
    assert all(width > 0 for width, _ in found), [href for width, href in found if not width]


def test_search_finds_a_term(browser, server):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server + "search.html?q=kernel+cache")
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return document.querySelectorAll('#search-results li, ul.search li').length") > 0
    )
    hits = browser.execute_script(
        "return Array.from(document.querySelectorAll('#search-results li a, ul.search li a')).map(a => a.textContent)"
    )
    assert any("kernel cache" in h.lower() for h in hits), hits


def test_the_environment_table_is_folded_on_topic_pages_and_open_on_the_environment_page(browser, server):
    state = (
        "return Array.from(document.querySelectorAll('table.cg-env-table'))"
        ".map(t => { const d = t.closest('details.cg-env'); return d ? (d.open ? 'open' : 'folded') : 'bare'; })"
    )
    browser.get(server + "auto_examples/plot_02_conv_bias_relu.html")
    assert browser.execute_script(state) == ["folded"]
    browser.get(server + "auto_examples/plot_01_environment.html")
    assert browser.execute_script(state) == ["open"]


def test_the_chooser_filter_shows_only_the_rows_of_the_chosen_feature(browser, server):
    from selenium.webdriver.support.ui import Select, WebDriverWait

    visible = (
        "return Array.from(document.querySelectorAll('.cg-chooser tbody tr'))"
        ".filter(tr => tr.offsetParent !== null).map(tr => tr.dataset.features.split(' '))"
    )
    browser.get(server + "chooser.html")
    WebDriverWait(browser, 20).until(lambda d: d.execute_script(visible))
    everything = browser.execute_script(visible)
    counter = browser.find_element("css selector", ".cg-chooser .cg-shown")
    assert counter.text == f"{len(everything)} of {len(everything)} shapes shown", counter.text
    Select(browser.find_element("css selector", ".cg-chooser select[name=feature]")).select_by_value("varlen")
    shown = browser.execute_script(visible)
    assert shown and len(shown) < len(everything), (
        f"chooser.html: choosing 'varlen' showed {len(shown)} of {len(everything)} rows "
        "(the filter script in docs/_ext/gallery_build/chooser.py CHOOSER_JS did not run or did not filter)"
    )
    assert all("varlen" in features for features in shown), shown
    assert counter.text == f"{len(shown)} of {len(everything)} shapes shown"
    Select(browser.find_element("css selector", ".cg-chooser select[name=feature]")).select_by_value("")
    assert len(browser.execute_script(visible)) == len(everything), "choosing 'any' again shows every row"


_CLIPPED_BLOCKS = """
return Array.from(document.querySelectorAll('article pre'))
  .filter(p => p.offsetParent !== null && p.scrollWidth > p.clientWidth + 1)
  .map(p => p.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '').slice(0, 100));
"""
_TOO_WIDE = """
const w = document.documentElement.clientWidth;
const scrolls = e => { for (let a = e; a; a = a.parentElement) {
  const o = getComputedStyle(a).overflowX; if (o === 'auto' || o === 'scroll') return true; } return false; };
const wide = Array.from(document.querySelectorAll('article *'))
  .filter(e => e.getBoundingClientRect().right > w + 1 && !scrolls(e.parentElement))
  .map(e => e.tagName + '.' + e.className);
return [document.documentElement.scrollWidth - w, wide.slice(0, 3)];
"""


def test_no_code_or_output_block_scrolls_sideways_on_any_page(browser, server, site):
    """At 1400 px no code or output block of an example scrolls; at 390 px nothing on any page overflows
    the screen but a box that scrolls itself (a table, a figure)."""
    pages = [p for p in _pages(site) if p.startswith("auto_examples/plot_")]
    assert pages, "no example pages in the built site"
    problems = []
    try:
        browser.set_window_size(1400, 1000)
        for page in pages:
            browser.get(server + page)
            for line in browser.execute_script(_CLIPPED_BLOCKS):
                problems.append(f"{page} at 1400 px: a block scrolls sideways, widest line {line!r}")
        browser.set_window_size(390, 844)
        for page in _pages(site):  # every page of the site, API reference included
            browser.get(server + page)
            overflow, wide = browser.execute_script(_TOO_WIDE)
            if overflow > 1 or wide:
                problems.append(f"{page} at 390 px: page {overflow} px wider than the screen; {wide}")
    finally:
        browser.set_window_size(1280, 1000)
    assert not problems, "\n".join(problems[:30]) + (f"\n... {len(problems)} in all" if len(problems) > 30 else "")


def test_frontend_names_in_a_pages_code_link_to_their_row_in_the_api_index(browser, server):
    from selenium.webdriver.support.ui import WebDriverWait

    links = "return Array.from(document.querySelectorAll('a.cg-fe')).map(a => [a.textContent, a.href])"
    browser.get(server + "auto_examples/plot_05_sdpa_causal.html")
    WebDriverWait(browser, 20).until(lambda d: d.execute_script(links))
    found = dict(browser.execute_script(links))
    for name in ("pygraph", "sdpa", "set_output", "build_plans", "execute"):
        assert name in found, f"plot_05's code does not link {name!r} (docs/_static/cudnn-guide.js)"
    target = found["pygraph"]
    assert target.endswith("frontend_api.html#fe-pygraph"), target
    browser.get(target)
    assert browser.execute_script("return document.getElementById('fe-pygraph') !== null")


def test_on_a_phone_each_figure_keeps_a_readable_width_in_a_box_that_scrolls(browser, server):
    figures = (
        "return Array.from(document.querySelectorAll('img.sphx-glr-single-img, img.sphx-glr-multi-img'))"
        ".map(i => [i.parentElement.className, Math.round(i.getBoundingClientRect().width)])"
    )
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        browser.set_window_size(390, 844)
        browser.get(server + "auto_examples/plot_16_gqa_mqa.html")
        shown = WebDriverWait(browser, 20).until(lambda d: d.execute_script(figures))
    finally:
        browser.set_window_size(1280, 1000)
    assert shown, "plot_16 shows no figure"
    for box, width in shown:
        assert box == "cg-figure" and width >= 600, (box, width)  # not shrunk to 358 px (cudnn-guide.js/.css)


def test_in_dark_mode_figures_are_inverted_and_in_light_mode_left_as_drawn(browser, server):
    from selenium.webdriver.support.ui import WebDriverWait

    filters = (
        "document.body.dataset.theme = arguments[0];"
        "return Array.from(document.querySelectorAll('img.sphx-glr-single-img, img.sphx-glr-multi-img'))"
        ".map(i => getComputedStyle(i).filter)"
    )
    browser.get(server + "auto_examples/plot_05_sdpa_causal.html")
    dark = WebDriverWait(browser, 20).until(lambda d: d.execute_script(filters, "dark"))
    light = browser.execute_script(filters, "light")
    browser.execute_script("document.body.dataset.theme = 'auto'")
    assert dark and all("invert" in f and "hue-rotate" in f for f in dark), dark  # light lines on a dark ground
    assert all(f == "none" for f in light), light
