"""The study's live display draws at most twice a second, and always its last word."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from forge_ledger.cli.study_cmd import _Display
from forge_ledger.ledger import Ledger
from forge_ledger.study import StudyStream, load_plan, plan_study
from forge_ledger.study.runner import Progress
from support.study_plans import write_plan


def _progress(tmp_path: Path) -> Progress:
    with Ledger(tmp_path / "s.sqlite") as ledger:
        sid = plan_study(ledger, load_plan(write_plan(tmp_path)))
        return Progress(StudyStream(ledger).state(sid))


def test_the_last_progress_is_drawn_however_soon_after_the_one_before(tmp_path: Path) -> None:
    progress = _progress(tmp_path)
    cell = sorted(progress.state.cells)[0]
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with _Display(enabled=True, console=console, refresh_secs=3600) as d:
        d.update(progress)  # drawn: the first
        progress.active[cell] = 0.0
        d.update(progress)  # too soon to draw now
        assert cell not in out.getvalue()
    assert cell in out.getvalue()


def test_a_display_that_is_off_draws_nothing(tmp_path: Path) -> None:
    progress = _progress(tmp_path)
    out = io.StringIO()
    with _Display(enabled=False, console=Console(file=out, force_terminal=True)) as d:
        d.update(progress)
    assert out.getvalue() == ""
