"""The least budget a session can do anything with: the worst case of its first call.

The orchestrator reserves a participant's worst case before calling it (``calls × prompt +
max_tokens`` at the model's price, :func:`~.budget.worst_case_cost`), in participant order.
A ``max_cost_usd`` below the first participant's reservation refuses every call: the session
would be recorded, make no call and end "complete" with no document. Asked before anything
is recorded, this answers with the same reservation the orchestrator would make.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from ..domain.aggregate import Deliberation
from ..domain.state import SessionState
from ..domain.values import Participant, Price, RoundKind
from .budget import reserved_calls, worst_case_cost
from .prompts import build_messages
from .steps import StartRound, begin_round, next_step

__all__ = ["FirstCall", "first_call"]

_NOWHERE = UUID(int=0)
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class FirstCall:
    """Who is called first, in which round, and what the orchestrator reserves for it."""

    participant: str
    kind: RoundKind
    worst_case_usd: float


def first_call(
    state: SessionState, price: Callable[[Participant], Price | None]
) -> FirstCall | None:
    """The first call a session just started (``state``: its start and participants, nothing
    recorded since) would make, or None when its first step is no call. ``price`` is the
    provider's price of a participant (None: unknown, reserved as 0)."""
    agg = Deliberation.start(
        session_id=_NOWHERE,
        topic=state.topic,
        config=state.config,
        participants=state.participants,
        at=_EPOCH,
    )
    step = next_step(agg.state, elapsed_secs=0.0)
    if not isinstance(step, StartRound) or not step.participants:
        return None
    begin_round(agg, step, _EPOCH)
    rnd = agg.state.open_round
    assert rnd is not None
    name = rnd.expected[0]
    participant = agg.state.participant(name)
    assert participant is not None
    max_tokens = participant.max_tokens or agg.state.config.max_tokens
    need = reserved_calls(rnd.kind) * worst_case_cost(
        build_messages(agg.state, rnd, name), max_tokens, price(participant)
    )
    return FirstCall(participant=name, kind=rnd.kind, worst_case_usd=need)
