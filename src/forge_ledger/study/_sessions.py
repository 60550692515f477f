"""How a study starts and resumes its sessions: the one place that names the session functions.

Every cell runs through the same functions ``run`` and ``resume`` use, so a cell gets the same
lease, budget checks, autosave and sealing as a session run by hand. :class:`SessionFunctions`
is what the study needs of them; the application layer, which sits above the study, passes its
own (``forge_ledger.app.studies``), so the study never imports the layer that runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

if TYPE_CHECKING:
    from ..clock import Clock
    from ..domain.state import SessionState
    from ..domain.values import Participant, SessionConfig, Topic
    from ..ledger import Ledger
    from ..providers import Provider

__all__ = ["SessionFunctions", "SessionHooks"]


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
