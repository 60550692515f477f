"""``run`` on a topic with a session in progress: asked at a terminal, told elsewhere."""

from __future__ import annotations

from datetime import UTC, datetime

import click
import pytest

from forge_ledger.cli import deliberate
from forge_ledger.errors import UsageError
from forge_ledger.ledger import SessionSummary

_WHEN = datetime(2026, 11, 1, tzinfo=UTC)
_PAUSED = SessionSummary(
    id="3f2a0000-0000-4000-8000-000000000000",
    slug="rate-limiting",
    title="Rate limiting",
    status="paused",
    iteration=2,
    events=40,
    created=_WHEN,
    updated=_WHEN,
)


def test_at_a_terminal_the_question_names_the_session_and_its_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr(click, "confirm", lambda *_a, **_k: False)
    assert deliberate.resume_instead(_PAUSED, "rate-limiting", as_json=False) is False
    err = capsys.readouterr().err
    assert "A session on 'rate-limiting' is in progress: 3f2a0000 (iteration 2, paused)." in err


def test_elsewhere_the_choice_must_be_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    with pytest.raises(UsageError, match="session 3f2a0000 on 'rate-limiting' is in progress"):
        deliberate.resume_instead(_PAUSED, "rate-limiting", as_json=True)
