"""Regenerate docs/report.png and docs/report-print.png: the offline demo's report, as Chromium
shows it on screen and as it prints.

Runs ``forge-ledger demo`` into a scratch store, writes its report with ``forge-ledger report``
and opens the page in Debian's headless Chromium (network blocked). On screen it hovers the
first sentence of the document that answered a critique or a dissent, so its provenance
(origin, revisions, answers) shows, and captures the page from the top to the end of the
influence graph. For print it emulates print media on an A4 page's width (no tooltips, no
navigation, no source toggle) and captures the stretch from the top to the end of the stance
heatmap. Needs the dev extra (Playwright) and /usr/bin/chromium:

    .venv/bin/python docs/make_screenshot.py [OUT_DIR]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Page, Route, sync_playwright

HERE = Path(__file__).resolve().parent
CLI = str(Path(sys.executable).parent / "forge-ledger")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
WIDTH = 1100
A4_WIDTH = 794
"""210 mm at 96 pixels per inch."""


def _run(*args: str) -> str:
    proc = subprocess.run([CLI, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"forge-ledger {args[0]} failed: {proc.stderr.strip()}")
    return proc.stdout


def _block(route: Route) -> None:
    if route.request.url.startswith("file://"):
        route.continue_()
    else:
        route.abort()


def _capture(page: Page, out: Path, until: str, width: int) -> None:
    """The page from the top to the end of the element ``until``."""
    height = page.evaluate(
        f"(() => {{ const r = document.querySelector('{until}')"
        ".getBoundingClientRect(); return r.bottom + window.scrollY + 16; })()"
    )
    page.screenshot(path=str(out), full_page=True,
                    clip={"x": 0, "y": 0, "width": width, "height": height})
    print(f"wrote {out} ({out.stat().st_size // 1024} KB)")


def main(out_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store, page_file = Path(tmp) / "demo.sqlite", Path(tmp) / "report.html"
        sid = json.loads(_run("demo", "--latency", "0", "--store", str(store), "--json"))[
            "session_id"
        ]
        _run("report", sid, "--store", str(store), "-o", str(page_file))
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": WIDTH, "height": 900})
            context.route("**/*", _block)
            page = context.new_page()
            page.goto(page_file.as_uri(), wait_until="load")
            answered = page.locator(".prov", has_text="Answers:").first
            page.locator("#doc-text .s", has=answered).first.hover()
            _capture(page, out_dir / "report.png", "#chart-influence", WIDTH)
            page.mouse.move(WIDTH - 10, 5)
            page.emulate_media(media="print")
            page.set_viewport_size({"width": A4_WIDTH, "height": 1123})
            _capture(page, out_dir / "report-print.png", "#chart-stances", A4_WIDTH)
            browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
