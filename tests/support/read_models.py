"""What the read-model reader tests share: bringing the read model up to date, spying on the
one function that reads it, and a session recorded the way a user's run records it (no tests
here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forge_ledger.domain.state import SessionState
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.outputs import store_outputs
from forge_ledger.projections import catch_up, open_views


def update_read_model(path: Path | str) -> None:
    """The projections of the read model beside the SQLite store at ``path``, caught up."""
    with Ledger(str(path), create=False) as ledger:
        db = open_views(store_outputs(ledger.location).views)
        try:
            catch_up(ledger, db)
        finally:
            db.close()


def spied(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[bool]:
    """Replace ``owner.name`` (a reader returning None when the read model cannot answer)
    with one that notes, for each call, whether the read model answered."""
    answered: list[bool] = []
    real = getattr(owner, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        answered.append(found is not None)
        return found

    monkeypatch.setattr(owner, name, spy)
    return answered


def four_voices(path: Path) -> SessionState:
    """The scripted four-participant session, run to its end through ``forge_ledger.open``
    (the application layer, as ``run`` records one)."""
    import forge_ledger
    from forge_ledger import FixedStepClock, Participant, SequentialIds, SessionConfig, Topic
    from forge_ledger.testing import ScriptedProvider

    panel = [
        Participant(name=name, model=f"openai/{name}", role=role)
        for name, role in (
            ("alice", "drafter"), ("bob", "critic"), ("carol", "synthesizer"),
            ("dave", "devils_advocate"),
        )
    ]
    provider = ScriptedProvider.from_script("four-voices")
    with forge_ledger.open(
        path, clock=FixedStepClock(), ids=SequentialIds(), provider=provider
    ) as forge:
        return forge.start(Topic(title="Retries"), panel, SessionConfig(max_rounds=12))
