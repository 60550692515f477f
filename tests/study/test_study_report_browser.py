"""The study report in a real browser: Debian's Chromium, headless, driven by Playwright, the
network blocked (the session report's harness, ``test_report_browser``).

The page must load with no console error and no request but its own file, show each arm's
figures with their intervals and ``n``, draw its charts as SVG, name dave as the participant
whose absence changes the outcome, and link every cell to its session's report: written
beside it with ``--sessions``, each link opens that session's own page.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import expect

from forge_ledger.ledger import Ledger
from support.browser import CONSOLE_SCRIPT, open_page
from support.study_sessions import known_plan, record_known_study

if TYPE_CHECKING:
    from playwright.sync_api import Browser

@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("study-browser")
    plan = known_plan(folder, topics=2, repeats=2)
    store = folder / "s.sqlite"
    with Ledger(str(store)) as ledger:
        record_known_study(ledger, plan, strict_converges=1)
    out = folder / "pages" / "study.html"
    proc = subprocess.run(
        [
            CONSOLE_SCRIPT,
            "study",
            "report",
            "known",
            "--store",
            str(store),
            "-o",
            str(out),
            "--sessions",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_the_study_report_in_a_real_browser(browser: Browser, page_file: Path) -> None:
    visit = open_page(browser, page_file)
    page = visit.page
    assert visit.errors == []
    assert visit.requests == [visit.url]
    assert visit.blocked == []
    expect(page.locator("#title")).to_have_text("Study known")
    summary = page.locator("#summary-table")
    base = summary.locator("tr[data-arm='base'] td[data-metric='converged']")
    expect(base).to_contain_text("n=4")
    strict = summary.locator("tr[data-arm='strict'] td[data-metric='converged']")
    expect(strict).to_contain_text("0.5 [")
    assert page.locator("figure.chart").count() == 6
    assert page.locator("figure.chart svg").count() == 5  # no critique: no self-preference
    expect(page.locator("#chart-self_preference p.thin")).to_have_text(
        "Nothing to draw yet: no estimate recorded."
    )
    dave = page.locator("#influence-table tr[data-participant='dave']")
    expect(dave).to_contain_text("1 [1, 1]")
    links = page.locator("#cells-table a")
    assert links.count() == 2 * 2 * 5
    href = links.first.get_attribute("href")
    assert href is not None
    assert "/" not in href
    assert (page_file.parent / href).is_file()
    links.first.click()
    page.wait_for_load_state("load")
    assert page.url.endswith(href)
    expect(page.locator("#title")).to_have_text("Topic 1")
    assert visit.errors == []
    assert visit.blocked == []
