"""Regenerate docs/study-report.png: a study report as Chromium shows it.

Builds the study of ``tests/support/study_sessions.py`` (its answer known by construction:
dave's absence flips every outcome, ``strict`` converges less often than ``base``) in a
scratch store, writes its page with ``forge-ledger study report`` and captures it, from the top
to the end of the convergence-rate chart, in Debian's headless Chromium (network blocked).
Needs the dev extra (Playwright) and /usr/bin/chromium; run from the repository's root:

    .venv/bin/python docs/make_study_screenshot.py [OUT_DIR]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from make_screenshot import CHROMIUM_ARGS, WIDTH, _block, _capture  # noqa: E402

from forge_ledger.ledger import Ledger  # noqa: E402
from support.study_sessions import known_plan, record_known_study  # noqa: E402

CLI = str(Path(sys.executable).parent / "forge-ledger")


def main(out_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plan = known_plan(folder, topics=4, repeats=5)
        store = folder / "s.sqlite"
        with Ledger(str(store)) as ledger:
            record_known_study(ledger, plan, strict_converges=3)
        page_file = folder / "study.html"
        subprocess.run(
            [CLI, "study", "report", "known", "--store", str(store), "-o", str(page_file)],
            check=True,
            capture_output=True,
        )
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": WIDTH, "height": 900})
            context.route("**/*", _block)
            page = context.new_page()
            page.goto(page_file.as_uri(), wait_until="load")
            _capture(page, out_dir / "study-report.png", "#chart-converged", WIDTH)
            browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
