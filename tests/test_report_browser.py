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
from forge_ledger.projections.document import fold_lineage
from support.report_sessions import HOSTILE_DOC, SCRIPT, demo, hostile

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


def _report(store: Path, out: Path, sid: uuid.UUID = SID) -> None:
    proc = subprocess.run(
        [CONSOLE_SCRIPT, "report", str(sid), "--store", str(store), "-o", str(out)],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_report_in_a_real_browser(browser: Browser, tmp_path: Path) -> None:
    """The four-voices demo's page: its document holds the drafter's sentences and the
    synthesizer's, so a sentence's origin is not the text's author."""
    store, out = tmp_path / "demo.sqlite", tmp_path / "report.html"
    sid = demo(store)
    with Ledger(str(store), create=False) as ledger:
        state = ledger.state(sid)
    _report(store, out, sid)
    lineage = fold_lineage(state)
    assert lineage.source is not None
    visit = _open(browser, out)
    page = visit.page

    assert visit.errors == []
    assert visit.requests == [visit.url]
    assert visit.blocked == []

    charts = page.locator("figure.chart svg")
    assert charts.count() == 5
    for i in range(5):
        svg = charts.nth(i)
        box = svg.bounding_box()
        assert box is not None
        assert box["width"] > 150
        assert box["height"] > 50
        assert svg.locator("path, line, text").count() > 10
        assert svg.locator("text").first.text_content()

    assert page.locator("#session-id").inner_text() == state.id
    assert page.locator("#head-hash").inner_text() == state.head_hash
    assert page.locator("#session-id").is_visible()
    assert page.locator("#head-hash").is_visible()
    doc = page.locator("#doc-text")
    assert doc.is_visible()
    assert doc.inner_text().strip() == lineage.text.strip()

    # a sentence the drafter wrote, kept in the synthesizer's text: its origin is the draft
    n, kept = next((i, s) for i, s in enumerate(lineage.sentences)
                   if s.origin.participant != lineage.source.participant)
    assert (kept.origin.participant, kept.origin.round) == ("alice", 1)
    sentence = page.locator("#doc-text .s").nth(n)
    tip = sentence.locator(".prov")
    origin = (f"Origin: {kept.origin.kind.value} by {kept.origin.participant}, round "
              f"{kept.origin.round}, iteration {kept.origin.iteration}, event "
              f"{kept.origin.position}")
    expect(tip).to_be_hidden()
    sentence.hover()
    expect(tip).to_be_visible()
    assert origin in tip.inner_text()
    assert f"by {lineage.source.participant}" not in tip.inner_text().split("\n")[0]
    page.mouse.move(1190, 5)
    expect(tip).to_be_hidden()
    # the synthesizer's own sentence shows its own origin, and what it answered
    m, answering = next((i, s) for i, s in enumerate(lineage.sentences) if s.answers)
    other = page.locator("#doc-text .s").nth(m).locator(".prov")
    page.locator("#doc-text .s").nth(m).hover()
    expect(other).to_be_visible()
    assert f"Origin: {answering.origin.kind.value} by {answering.origin.participant}" in (
        other.inner_text()
    )
    assert f"Answers: {answering.answers[0].participant}" in other.inner_text()
    page.mouse.move(1190, 5)
    first = page.locator("#doc-text .s").first
    page.locator("nav.toc a").last.focus()
    page.keyboard.press("Tab")
    expect(first).to_be_focused()
    expect(first.locator(".prov")).to_be_visible()
    assert "Origin: " in first.locator(".prov").inner_text()

    graph = page.locator("#chart-influence svg")
    assert graph.get_by_text("retention policy for the", exact=False).count() >= 1

    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000

    page.emulate_media(media="print")
    expect(first.locator(".prov")).to_be_hidden()
    expect(page.locator("nav.toc")).to_be_hidden()
    expect(charts.nth(4)).to_be_visible()
    pdf = tmp_path / "report.pdf"
    page.pdf(path=str(pdf), print_background=True)
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert pdf.stat().st_size > 20_000
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
    assert page.locator("script").count() == 0
    assert page.locator("img").count() == 0
    assert page.locator("#doc-text").inner_text().strip() == HOSTILE_DOC.strip()
    assert page.get_by_text("onerror=", exact=False).count() >= 1
