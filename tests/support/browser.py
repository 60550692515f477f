"""A headless Chromium for the page tests: every request off the file is blocked and recorded,
and every console error kept, so a test can say the page needed nothing but itself."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import sync_playwright

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page, Request, Route

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
]
CONSOLE_SCRIPT = str(Path(sys.executable).parent / "forge-ledger")


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


def open_page(browser: Browser, path: Path) -> Visit:
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
