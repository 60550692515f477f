"""Regenerate docs/report.png: the offline demo's report, as Chromium shows it.

Runs ``forge-ledger demo`` into a scratch store, writes its report with ``forge-ledger report``,
opens the page in Debian's headless Chromium (network blocked), hovers the first sentence of the
document that answered a critique or a dissent so its provenance (origin, revisions, answers)
shows, and captures the page from the top to the end of the influence graph. Needs the dev
extra (Playwright) and /usr/bin/chromium:

    .venv/bin/python docs/make_screenshot.py [OUT.png]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Route, sync_playwright

HERE = Path(__file__).resolve().parent
CLI = str(Path(sys.executable).parent / "forge-ledger")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


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


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store, page_file = Path(tmp) / "demo.sqlite", Path(tmp) / "report.html"
        sid = json.loads(_run("demo", "--latency", "0", "--store", str(store), "--json"))[
            "session_id"
        ]
        _run("report", sid, "--store", str(store), "-o", str(page_file))
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1100, "height": 900})
            context.route("**/*", _block)
            page = context.new_page()
            page.goto(page_file.as_uri(), wait_until="load")
            answered = page.locator(".prov", has_text="Answers:").first
            page.locator("#doc-text .s", has=answered).first.hover()
            height = page.evaluate(
                "(() => { const r = document.querySelector('#chart-influence')"
                ".getBoundingClientRect(); return r.bottom + window.scrollY + 16; })()"
            )
            page.screenshot(
                path=str(out), full_page=True,
                clip={"x": 0, "y": 0, "width": 1100, "height": height},
            )
            browser.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "report.png")
