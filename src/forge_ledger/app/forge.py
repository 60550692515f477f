"""``forge_ledger.open(store)``: one store and the application's operations as methods.

A script or a notebook opens the store once and calls ``forge.start(...)``, ``forge.audit(...)``,
``forge.report(...)``… Each method is the application function of the same name with the
opened ledger as its first argument (and the front object's clock, id source and provider), so
it behaves exactly as the command of the same name. The methods that run a session run their
own event loop; code that has one awaits :func:`~forge_ledger.app.start_session` and
:func:`~forge_ledger.app.resume_session` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..clock import Clock, IdSource
from ..domain.state import SessionState
from ..domain.values import Participant, SessionConfig, Topic
from ..ledger import ChainReport, Ledger, SessionSummary
from . import interventions, records
from .running import Runtime, resume_session, start_session
from .stores import Store

if TYPE_CHECKING:
    from types import TracebackType

    from ..audit import AuditReport
    from ..ledger.copying import CopiedSession
    from ..providers import Provider
    from ..records.replay import ReplayResult
    from ..study.state import StudyState
    from .interventions import JumpSummary
    from .records import ReportPage
    from .study_reports import StudyPage

__all__ = ["Forge", "open"]


class Forge:
    """A store opened for a program: every operation of the ``forge-ledger`` command as a
    method taking the session first. Close it (or use it as a context manager) to close the
    ledger it opened; a ledger given to it stays open."""

    def __init__(
        self,
        store: Store = None,
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        provider: Provider | None = None,
        hmac_key: bytes | None = None,
    ) -> None:
        self._owned = not isinstance(store, Ledger)
        self.ledger = store if isinstance(store, Ledger) else Ledger(store, create=True)
        self.clock = clock
        self.ids = ids
        self.provider = provider
        self.hmac_key = hmac_key

    # ----------------------------------------------------------------- lifetime

    def close(self) -> None:
        if self._owned:
            self.ledger.close()

    def __enter__(self) -> Forge:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ----------------------------------------------------------------- running

    def _runtime(self) -> Runtime:
        return Runtime(clock=self.clock, ids=self.ids, hmac_key=self.hmac_key)

    def start(
        self,
        topic: Topic | str,
        participants: Sequence[Participant],
        config: SessionConfig | None = None,
        **options: Any,
    ) -> SessionState:
        """Start a session on ``topic`` (a :class:`Topic` or its title) and run it until it
        converges, ends or pauses (:func:`~forge_ledger.app.start_session`)."""
        topic_value = Topic(title=topic) if isinstance(topic, str) else topic
        return asyncio.run(
            start_session(
                self.ledger,
                topic_value,
                config or SessionConfig(),
                participants,
                provider=self.provider,
                runtime=self._runtime(),
                **options,
            )
        )

    def resume(self, session: str | UUID, **options: Any) -> SessionState:
        """Continue a paused or interrupted session (:func:`~forge_ledger.app.resume_session`:
        ``swaps``, ``add`` and ``api_base`` change its participants first)."""
        return asyncio.run(
            resume_session(
                self.ledger,
                session,
                provider=self.provider,
                runtime=self._runtime(),
                **options,
            )
        )

    # ----------------------------------------------------------------- a person's decisions

    def answer(
        self, session: str | UUID, text: str, *, author: str, overrule: Sequence[str] = ()
    ) -> SessionState:
        return interventions.answer(
            self.ledger, session, text, author=author, overrule=overrule, clock=self.clock
        )

    def abort(self, session: str | UUID, *, reason: str, author: str) -> SessionState:
        return interventions.abort(
            self.ledger,
            session,
            reason=reason,
            author=author,
            hmac_key=self.hmac_key,
            clock=self.clock,
        )

    def back(self, session: str | UUID, steps: int = 1) -> JumpSummary:
        return interventions.back(self.ledger, session, steps, clock=self.clock)

    # ----------------------------------------------------------------- the record

    def fork(self, session: str | UUID, **options: Any) -> UUID:
        return records.fork(self.ledger, session, clock=self.clock, ids=self.ids, **options)

    def seal(self, session: str | UUID) -> ChainReport:
        return records.seal(self.ledger, session, key=self.hmac_key, clock=self.clock)

    def verify(self, session: str | UUID) -> ChainReport:
        return records.verify(self.ledger, session, key=self.hmac_key)

    def audit(self, session: str | UUID) -> AuditReport:
        return records.audit(self.ledger, session)

    def replay(self, session: str | UUID) -> ReplayResult:
        return records.replay(self.ledger, session)

    def export(self, session: str | UUID, path: Path | None = None) -> Path:
        return records.export(self.ledger, session, path=path)

    def spec(self, session: str | UUID, path: Path | None = None) -> Path:
        return records.spec(self.ledger, session, path=path)

    def report(self, session: str | UUID, path: Path | None = None, **options: Any) -> ReportPage:
        return records.report(self.ledger, session, path=path, key=self.hmac_key, **options)

    def copy(self, sessions: Sequence[str | UUID], to: Store) -> list[CopiedSession]:
        return records.copy(self.ledger, sessions, to)

    def study_export(self, study: str | UUID, **options: Any) -> bytes:
        """One of the study's tables as a file's bytes
        (:func:`~forge_ledger.app.study_reports.study_export`)."""
        from .study_reports import study_export

        return study_export(self.ledger, study, **options)

    def study_report(self, study: str | UUID, path: Path, **options: Any) -> StudyPage:
        """The study as one HTML page (:func:`~forge_ledger.app.study_reports.study_report`)."""
        from .study_reports import study_report

        return study_report(self.ledger, study, path=path, **options)

    def study(self, plan: Any, **options: Any) -> StudyState:
        """Run a study from ``plan`` (a plan file, a dict or a ``StudyPlan``) to its end, or
        continue it (:func:`~forge_ledger.app.studies.study`; ``concurrency``, ``on_progress``)."""
        from .studies import study

        return study(
            self.ledger,
            plan,
            provider=self.provider,
            clock=self.clock,
            hmac_key=self.hmac_key,
            **options,
        )

    # ----------------------------------------------------------------- reading

    def sessions(self) -> list[SessionSummary]:
        """Every session in the store, oldest first."""
        return self.ledger.summaries()

    def state(self, session: str | UUID) -> SessionState:
        """The session as it is now."""
        return self.ledger.state(session)


def open(  # forge_ledger.open(store), as sqlite3.connect or shelve.open
    store: Store = None,
    *,
    clock: Clock | None = None,
    ids: IdSource | None = None,
    provider: Provider | None = None,
    hmac_key: bytes | None = None,
) -> Forge:
    """Open ``store`` (a SQLite path, a ``postgresql://`` URL, ``None`` for the default
    ``.project-memory/forge-ledger.sqlite``; created if missing) for a program.

    ``clock`` and ``ids`` make a session's timestamps and ids reproducible; ``provider`` answers
    the model calls (``forge_ledger.testing.ScriptedProvider`` offline; by default litellm);
    ``hmac_key`` keys the seals.
    """
    return Forge(store, clock=clock, ids=ids, provider=provider, hmac_key=hmac_key)
