"""The report in a real browser: Debian's Chromium, headless, driven by Playwright, the network
blocked. The page must render its five charts, show the session id, head hash and document,
reveal each sentence's provenance on hover and on keyboard focus, print without its tooltips,
and log no console error (a blocked script or fetch would log one: the page forbids both).

Chromium comes from the system (``apt-get install chromium``; ``.ci/run`` installs it); these
tests fail, not skip, without it. Playwright never downloads a browser here.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import expect, sync_playwright

from forge_ledger.ledger import Ledger
from report_sessions import HOSTILE_DOC, SCRIPT, audited, hostile

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page, Request, Route

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
]
CONSOLE_SCRIPT = str(Path(sys.executable).parent / "forge-ledger")
SID = uuid.UUID(int=21)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@dataclass
class Visit:
    page: Page
    url: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)


def _open(browser: Browser, path: Path) -> Visit:
    """Load the file with every non-file request aborted and everything recorded."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    visit = Visit(page=page, url=path.resolve().as_uri())

    def route(r: Route) -> None:
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            visit.blocked.append(r.request.url)
            r.abort()

    def console(m: ConsoleMessage) -> None:
        if m.type == "error":
            visit.errors.append(m.text)

    def request(r: Request) -> None:
        visit.requests.append(r.url)

    context.route("**/*", route)
    page.on("console", console)
    page.on("pageerror", lambda e: visit.errors.append(f"page error: {e}"))
    page.on("request", request)
    page.goto(visit.url, wait_until="load")
    return visit


def _report(store: Path, out: Path) -> None:
    proc = subprocess.run(
        [CONSOLE_SCRIPT, "report", str(SID), "--store", str(store), "-o", str(out)],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_report_in_a_real_browser(browser: Browser, tmp_path: Path) -> None:
    store, out = tmp_path / "ledger.sqlite", tmp_path / "report.html"
    with Ledger(str(store)) as ledger:
        audited(ledger, SID)
        state = ledger.state(SID)
    _report(store, out)
    found = state.document_source
    assert found is not None
    rnd, source = found
    visit = _open(browser, out)
    page = visit.page

    assert visit.errors == []
    assert visit.requests == [visit.url] and visit.blocked == []

    charts = page.locator("figure.chart svg")
    assert charts.count() == 5
    for i in range(5):
        svg = charts.nth(i)
        box = svg.bounding_box()
        assert box is not None and box["width"] > 150 and box["height"] > 50
        assert svg.locator("path, line, text").count() > 10
        assert svg.locator("text").first.text_content()

    assert page.locator("#session-id").inner_text() == state.id
    assert page.locator("#head-hash").inner_text() == state.head_hash
    assert page.locator("#session-id").is_visible() and page.locator("#head-hash").is_visible()
    doc = page.locator("#doc-text")
    assert doc.is_visible() and doc.inner_text().strip() == source.response.content.strip()

    sentence = page.locator("#doc-text .s").first
    tip = sentence.locator(".prov")
    where = (f"{rnd.kind.value} by {source.participant}, round {rnd.number}, "
             f"iteration {rnd.iteration}, event {source.position}")
    expect(tip).to_be_hidden()
    sentence.hover()
    expect(tip).to_be_visible()
    assert where in tip.inner_text()
    page.mouse.move(1190, 5)
    expect(tip).to_be_hidden()
    page.locator("nav.toc a").last.focus()
    page.keyboard.press("Tab")
    expect(sentence).to_be_focused()
    expect(tip).to_be_visible()

    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

    page.emulate_media(media="print")
    expect(tip).to_be_hidden()
    expect(page.locator("nav.toc")).to_be_hidden()
    expect(charts.nth(4)).to_be_visible()
    pdf = tmp_path / "report.pdf"
    page.pdf(path=str(pdf), print_background=True)
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 20_000
    assert visit.errors == []


def test_model_text_stays_text_in_the_browser(browser: Browser, tmp_path: Path) -> None:
    store, out = tmp_path / "ledger.sqlite", tmp_path / "report.html"
    with Ledger(str(store)) as ledger:
        hostile(ledger, SID)
    _report(store, out)
    visit = _open(browser, out)
    page = visit.page
    assert visit.errors == []  # a script or handler blocked by the page's policy would log one
    assert page.title().startswith(f"Rate limits {SCRIPT}")
    assert page.locator("script").count() == 0 and page.locator("img").count() == 0
    assert page.locator("#doc-text").inner_text().strip() == HOSTILE_DOC.strip()
    assert page.get_by_text("onerror=", exact=False).count() >= 1
