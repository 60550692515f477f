"""How a study starts and resumes its sessions: the one place that names the session functions.

Every cell runs through the same functions ``run`` and ``resume`` use, so a cell gets the same
lease, budget checks, autosave and sealing as a session run by hand. :class:`SessionFunctions`
is what the study needs of them; :data:`SESSIONS` binds it to :mod:`forge_ledger.sessions`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

if TYPE_CHECKING:
    from ..clock import Clock
    from ..domain.state import SessionState
    from ..domain.values import Participant, SessionConfig, Topic
    from ..ledger import Ledger
    from ..providers import Provider

__all__ = ["SESSIONS", "SessionFunctions", "SessionHooks"]


@dataclass(frozen=True)
class SessionHooks:
    """What a study asks of each session it runs: the clock, the progress callback, the
    seal key."""

    clock: Clock | None = None
    on_checkpoint: Callable[[SessionState], None] | None = None
    hmac_key: bytes | None = None


class SessionFunctions(Protocol):
    """Start a session under a given id, or resume one; each returns when it converges,
    ends or pauses."""

    async def start(
        self,
        ledger: Ledger,
        session_id: UUID,
        topic: Topic,
        config: SessionConfig,
        participants: Sequence[Participant],
        *,
        provider: Provider,
        hooks: SessionHooks,
    ) -> SessionState: ...

    async def resume(
        self, ledger: Ledger, session_id: UUID, *, provider: Provider, hooks: SessionHooks
    ) -> SessionState: ...


class _AssignedId:
    """The id source of a cell's session: the id its assignment recorded."""

    def __init__(self, session_id: UUID) -> None:
        self.session_id = session_id

    def new_id(self) -> UUID:
        return self.session_id


class _Sessions:
    """:class:`SessionFunctions` over :mod:`forge_ledger.sessions`."""

    def _runtime(self, hooks: SessionHooks, session_id: UUID | None = None) -> Any:
        from ..sessions import Runtime

        return Runtime(
            clock=hooks.clock,
            ids=_AssignedId(session_id) if session_id else None,
            on_checkpoint=hooks.on_checkpoint,
            hmac_key=hooks.hmac_key,
        )

    async def start(
        self,
        ledger: Ledger,
        session_id: UUID,
        topic: Topic,
        config: SessionConfig,
        participants: Sequence[Participant],
        *,
        provider: Provider,
        hooks: SessionHooks,
    ) -> SessionState:
        from ..sessions import start

        return await start(
            ledger,
            provider,
            topic,
            config,
            participants,
            runtime=self._runtime(hooks, session_id),
        )

    async def resume(
        self, ledger: Ledger, session_id: UUID, *, provider: Provider, hooks: SessionHooks
    ) -> SessionState:
        from ..sessions import run

        return await run(ledger, provider, session_id, resume=True, runtime=self._runtime(hooks))


SESSIONS: SessionFunctions = _Sessions()
