"""A real browser opens the built site: headless Chromium, served from 127.0.0.1.

The project site is built with `mkdocs build --strict`, served by `http.server` in a thread,
and opened in Chromium (Debian: `chromium` and `chromium-driver`). With selenium installed
the test reads the rendered table through chromedriver; without it, through Chromium's
`--dump-dom`. Either way a screenshot is kept in test-artifacts/retention.png.

At a 1280 px window (a laptop) the page must fit: nothing in the content needs sideways
scrolling, and no table or code block is wider than the text column. That needs a real layout,
so it runs through selenium only (required, like Chromium, under IDEMTOOLS_REQUIRE_SERVICES=1).

Every page of the site is opened at 390 px (a phone) and 1280 px: none may scroll sideways or
stick out of its column, the site's navigation must be reachable (the sidebar on a laptop,
the menu button's drawer on a phone), and every diagram (a mermaid block) must have become an
SVG, from the site's own copy of mermaid: nothing outside 127.0.0.1 is reachable here.

No Chromium: the test is skipped with the reason; `IDEMTOOLS_REQUIRE_SERVICES=1` (CI) turns
that skip into a failure.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_docs.site import (
    PROJECT_SERVER,
    ROOT,
    describe_json,
    project_site,
    require,
)

pytestmark = pytest.mark.once

ARTIFACTS = ROOT / "test-artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
    "--window-size=1400,1400",
]


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _serve(site: Path) -> Iterator[str]:
    """The built site over HTTP on 127.0.0.1, from a thread, for as long as the block runs."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def site_url() -> Iterator[str]:
    with _serve(project_site()) as url:
        yield url


@pytest.fixture(scope="module")
def chromium() -> str:
    found = _find("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    require(
        found is not None,
        "no Chromium found: apt-get install -y chromium chromium-driver",
    )
    assert found is not None
    return found


def _expected_rows() -> list[list[str]]:
    """[tool cell, retention cell] per tool, from the CLI's JSON for the same server."""
    described = describe_json(PROJECT_SERVER, ROOT)
    rows = []
    for tool in described["tools"]:  # type: ignore[attr-defined]
        seconds = float(tool["retention_seconds"])
        shown = str(int(seconds)) if seconds.is_integer() else str(seconds)
        name = tool["name"] if tool["policy"] == "own" else f"{tool['name']} ({tool['policy']})"
        rows.append([name, f"{tool['retention']} ({shown} s)"])
    assert rows, "the example server lists no tools"
    return rows


def _assert_table(rows: list[list[str]]) -> None:
    by_name = {row[0]: row for row in rows if row}
    for expected in _expected_rows():
        assert expected[0] in by_name, f"no row for {expected[0]!r}; table rows: {rows}"
        assert by_name[expected[0]][:2] == expected, by_name[expected[0]]


class _Tables(HTMLParser):
    """Rows of the first table inside <article>, as cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.in_article = False
        self.tables = 0
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "article":
            self.in_article = True
        elif tag == "table" and self.in_article:
            self.tables += 1
        elif self.in_article and self.tables == 1 and tag == "tr":
            self.rows.append([])
        elif self.in_article and self.tables == 1 and tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None and self.rows:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "table" and self.tables == 1:
            self.tables = 2  # only the first table (the tools)

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def _driver(chromium: str, profile: str, width: int) -> Any:
    from selenium import webdriver

    driver_path = _find("chromedriver")
    assert driver_path is not None
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=driver_path)
    )
    driver.set_window_size(width, 1000)
    driver.set_page_load_timeout(60)
    return driver


# Everything in the content that would need sideways scrolling or stick out of the text column.
# Material bleeds tables 0.8rem into the article's margin by design, so the edge is the
# content area's, not the article's.
_OVERFLOW_JS = """
const content = document.querySelector('.md-content');
const root = document.documentElement;
const problems = [];
if (root.scrollWidth > root.clientWidth) {
  problems.push(['the page scrolls sideways', root.scrollWidth, root.clientWidth]);
}
const edge = content.getBoundingClientRect().right + 1;
for (const e of content.querySelectorAll('*')) {
  const box = e.getBoundingClientRect();
  if (box.width === 0 && box.height === 0) continue;
  const what = e.tagName + ' ' + (e.textContent || '').trim().slice(0, 50);
  const x = getComputedStyle(e).overflowX;
  if (['auto', 'scroll', 'hidden', 'clip'].includes(x) && e.scrollWidth > e.clientWidth) {
    problems.push(['scrolls sideways: ' + what, e.scrollWidth, e.clientWidth]);
  }
  if (box.right > edge) problems.push(['sticks out: ' + what, box.right, edge]);
  if (e.tagName === 'TABLE' && box.width > e.parentElement.clientWidth + 1) {
    problems.push(['table wider than its container: ' + what, box.width,
                   e.parentElement.clientWidth]);
  }
}
return problems;
"""


def test_retention_page_fits_a_1280px_window(chromium: str, site_url: str) -> None:
    require(
        importlib.util.find_spec("selenium") is not None and _find("chromedriver") is not None,
        "the 1280 px layout check needs selenium and chromedriver: "
        "pip install selenium; apt-get install -y chromium-driver",
    )
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    ARTIFACTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="idemtools-chromium-") as profile:
        driver = _driver(chromium, profile, 1280)
        try:
            driver.get(f"{site_url}/retention/")
            WebDriverWait(driver, 30).until(
                lambda d: d.find_elements(By.CSS_SELECTOR, "article table tbody tr")
            )
            assert driver.execute_script("return window.innerWidth") == 1280
            # Both sidebars are shown at this width: the text column is at its narrowest.
            assert driver.find_element(By.CSS_SELECTOR, ".md-sidebar--secondary").is_displayed()
            headers = [
                [th.text.strip() for th in table.find_elements(By.TAG_NAME, "th")]
                for table in driver.find_elements(By.CSS_SELECTOR, "article table")
            ]
            assert headers[0] == ["Tool", "Retention", "Lease", "Scope", "Transactional"]
            problems = driver.execute_script(_OVERFLOW_JS)
            driver.save_screenshot(str(ARTIFACTS / "retention-1280.png"))
        finally:
            driver.quit()
    assert problems == [], problems


def _with_selenium(chromium: str, url: str, shot: Path) -> list[list[str]] | None:
    """Rendered rows through chromedriver, or None when selenium or the driver is absent."""
    try:
        from selenium import webdriver
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return None
    driver_path = _find("chromedriver")
    if driver_path is None:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    with tempfile.TemporaryDirectory(prefix="idemtools-chromium-") as profile:
        for flag in [*FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(
            options=options, service=webdriver.ChromeService(executable_path=driver_path)
        )
        try:
            driver.set_page_load_timeout(60)
            driver.get(url)
            WebDriverWait(driver, 30).until(
                lambda d: d.find_elements(By.CSS_SELECTOR, "article table tbody tr")
            )
            table = driver.find_elements(By.CSS_SELECTOR, "article table")[0]
            assert table.is_displayed()
            rows = [
                [cell.text.strip() for cell in row.find_elements(By.TAG_NAME, "td")]
                for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")
            ]
            assert "Retention" in driver.title
            driver.save_screenshot(str(shot))
        finally:
            driver.quit()
    return rows


def _with_dump_dom(chromium: str, url: str, shot: Path) -> list[list[str]]:
    """Rendered rows from `--dump-dom` (the DOM after scripts ran) and a `--screenshot`."""
    with tempfile.TemporaryDirectory(prefix="idemtools-chromium-") as profile:
        dom = subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert dom.returncode == 0, dom.stderr[-2000:]
    with tempfile.TemporaryDirectory(prefix="idemtools-chromium-") as profile:
        subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}", url],
            capture_output=True,
            timeout=120,
            check=True,
        )
    parser = _Tables()
    parser.feed(dom.stdout)
    return [row for row in parser.rows if row and row[0] != "Tool"]


@pytest.mark.parametrize("driver", ["selenium", "dump-dom"])
def test_retention_page_in_headless_chromium(chromium: str, site_url: str, driver: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    url = f"{site_url}/retention/"
    if driver == "selenium":
        shot = ARTIFACTS / "retention.png"
        rows = _with_selenium(chromium, url, shot)
        if rows is None:
            pytest.skip("selenium or chromedriver not installed; the dump-dom variant still runs")
    else:
        shot = ARTIFACTS / "retention-dump-dom.png"
        rows = _with_dump_dom(chromium, url, shot)
        if importlib.util.find_spec("selenium") is None:  # keep the promised artifact name
            shutil.copyfile(shot, ARTIFACTS / "retention.png")
    _assert_table(rows)
    assert shot.stat().st_size > 10_000, "the screenshot looks empty"


# -- every page, on a phone and on a laptop --------------------------------------------------

# A phone's width scrolls a wide table or code block inside its own box (Material wraps them):
# only the page itself scrolling sideways, or content sticking out of the column, is a fault.
_PAGE_OVERFLOW_JS = """
const content = document.querySelector('.md-content');
const root = document.documentElement;
const problems = [];
if (root.scrollWidth > root.clientWidth) {
  problems.push(['the page scrolls sideways', root.scrollWidth, root.clientWidth]);
}
const edge = content.getBoundingClientRect().right + 1;
for (const e of content.querySelectorAll('*')) {
  if (e.closest('.md-typeset__scrollwrap, pre, .highlight')) continue;
  const box = e.getBoundingClientRect();
  if (box.width === 0 && box.height === 0) continue;
  if (box.right > edge) {
    problems.push(['sticks out: ' + e.tagName + ' ' + (e.textContent || '').trim().slice(0, 50),
                   box.right, edge]);
  }
}
return problems;
"""


def _diagrams(html: str) -> int:
    """How many mermaid blocks a built page holds (superfences' `<pre class="mermaid">`)."""
    return html.count('<pre class="mermaid">')


def _svg_roles(
    node: dict[str, Any], inside: list[str | None] | None = None
) -> list[list[str | None]]:
    """Per rendered diagram (Material's `div.mermaid`, its SVG in a closed shadow root, which
    only the DevTools protocol's `pierce` reaches): the `aria-roledescription` of each SVG in it
    (mermaid's diagram type, "error" for its error picture)."""
    found: list[list[str | None]] = []
    names = node.get("attributes", [])
    attributes = dict(zip(names[::2], names[1::2], strict=True))
    if node.get("nodeName") == "DIV" and "mermaid" in attributes.get("class", "").split():
        inside = []
        found.append(inside)
    elif inside is not None and node.get("nodeName") == "svg":
        inside.append(attributes.get("aria-roledescription"))
    for child in [*node.get("children", []), *node.get("shadowRoots", [])]:
        found.extend(_svg_roles(child, inside))
    return found


def _unrendered(driver: Any, expected: int) -> str | None:
    """None when each of the page's `expected` mermaid blocks became an SVG diagram."""
    from selenium.webdriver.support.ui import WebDriverWait

    # Material replaces each block's <pre> with a <div class="mermaid"> once mermaid drew it.
    done = f"return document.querySelectorAll('div.mermaid').length === {expected}"
    try:
        WebDriverWait(driver, 30).until(lambda d: d.execute_script(done))
    except Exception:
        shown = driver.execute_script(
            "return [document.querySelectorAll('div.mermaid').length, typeof mermaid]"
        )
        return f"{shown[0]} of {expected} diagrams rendered (mermaid: {shown[1]})"
    if not expected:
        return None
    tree = driver.execute_cdp_cmd("DOM.getDocument", {"depth": -1, "pierce": True})
    roles = _svg_roles(tree["root"])
    if len(roles) != expected or any(not r or r[0] in (None, "error") for r in roles):
        return f"not a diagram for every block: {roles}"
    return None


def _pages(site: Path) -> list[str]:
    """Every page of the built site, as a path under its root ("" is the home page)."""
    pages = []
    for html in sorted(site.rglob("index.html")):
        relative = html.parent.relative_to(site).as_posix()
        if relative == "." or not relative.startswith(("assets", "search")):
            pages.append("" if relative == "." else f"{relative}/")
    return pages


def _nav_shown(driver: Any, width: int) -> str | None:
    """None when the site's navigation can be reached at this width, else what is wrong."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    links = driver.find_elements(By.CSS_SELECTOR, ".md-sidebar--primary .md-nav__link")
    if not links:
        return "no navigation links"
    if width >= 1220:  # Material's breakpoint: the sidebar is always shown
        if not driver.find_element(By.CSS_SELECTOR, ".md-sidebar--primary").is_displayed():
            return "the navigation sidebar is hidden"
        return None
    button = driver.find_element(By.CSS_SELECTOR, "label.md-header__button[for='__drawer']")
    if not button.is_displayed():
        return "no menu button"
    button.click()
    try:
        WebDriverWait(driver, 5).until(lambda d: any(link.is_displayed() for link in links))
    except Exception:
        return "the menu button opens no navigation"
    return None


@pytest.mark.parametrize("width", [390, 1280])
def test_every_page_fits_and_shows_its_navigation(chromium: str, width: int) -> None:
    require(
        importlib.util.find_spec("selenium") is not None and _find("chromedriver") is not None,
        "the layout check needs selenium and chromedriver: "
        "pip install selenium; apt-get install -y chromium-driver",
    )
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    site = project_site()
    pages = _pages(site)
    assert len(pages) > 20, pages
    diagrams = {page: _diagrams((site / page / "index.html").read_text()) for page in pages}
    fences = sum(p.read_text().count("```mermaid") for p in (ROOT / "docs").rglob("*.md"))
    assert sum(diagrams.values()) == fences > 0, (fences, diagrams)
    faults: dict[str, object] = {}
    with _serve(site) as url, tempfile.TemporaryDirectory(prefix="idemtools-chromium-") as profile:
        driver = _driver(chromium, profile, 1280)
        try:
            # A phone: the viewport itself is 390 px wide, whatever the window's minimum.
            driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600},
            )
            for page in pages:
                driver.get(f"{url}/{page}")
                WebDriverWait(driver, 30).until(
                    lambda d: d.find_elements(By.CSS_SELECTOR, "article")
                )
                assert driver.execute_script("return window.innerWidth") == width
                unrendered = _unrendered(driver, diagrams[page])  # measured once drawn
                script = _OVERFLOW_JS if width >= 1220 else _PAGE_OVERFLOW_JS
                problems = driver.execute_script(script)
                nav = _nav_shown(driver, width)
                if problems or nav or unrendered:
                    faults[page or "/"] = {
                        "overflow": problems[:5],
                        "navigation": nav,
                        "diagrams": unrendered,
                    }
        finally:
            driver.quit()
    assert faults == {}, faults
