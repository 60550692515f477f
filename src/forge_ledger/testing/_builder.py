"""A fluent builder of real sessions, for tests that should read like the story they check.

Read-side tests (CLI, projections, YAML, audit, replay checks) need sessions shaped like the
ones the orchestrator records, without a model or the orchestrator. :class:`SessionBuilder`
drives the :class:`~forge_ledger.domain.Deliberation` aggregate through its public commands
only, so every invariant is checked, with an injected :class:`~forge_ledger.clock.Clock` (one
read per event, as the orchestrator does) and injected session ids, so the events are
reproducible::

    s = (SessionBuilder(clock=FixedStepClock(), ids=SequentialIds())
         .start("Rate limiter", participants=["alice", "bob"])
         .round(RoundKind.DRAFT, answers={"alice": "token bucket", "bob": "leaky bucket"})
         .vote("alice", agrees=True).vote("bob", agrees=False)
         .finish(SessionStatus.COMPLETE))

Every command acts on the *current* round (the last one started) unless told otherwise, and
returns the builder. Give a ``store`` (a ledger) and :meth:`SessionBuilder.save` writes what is
pending, round by round as the orchestrator does; :meth:`SessionBuilder.fork` and
:meth:`SessionBuilder.seal` need it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from ..clock import Clock, FixedStepClock, IdSource, SequentialIds
from ..domain import Deliberation
from ..domain import events as ev
from ..domain.hashing import keyed_digest
from ..domain.state import SessionState
from ..domain.values import (
    ChatMessage,
    ConvergenceVote,
    Critique,
    DivergenceStatus,
    DivergentPosition,
    ModelResponse,
    Opinion,
    Participant,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Stance,
    TokenCount,
    Topic,
)
from ..engine.steps import roles_after_leaving

__all__ = ["SessionBuilder", "SessionStoreLike"]

_Settled = (
    ev.DivergenceAddressed | ev.DivergenceResolved | ev.DivergenceWithdrawn
    | ev.DivergenceOverruled
)
_SETTLED: dict[type[ev.Payload], DivergenceStatus] = {
    ev.DivergenceAddressed: DivergenceStatus.ADDRESSED,
    ev.DivergenceResolved: DivergenceStatus.RESOLVED,
    ev.DivergenceWithdrawn: DivergenceStatus.WITHDRAWN,
    ev.DivergenceOverruled: DivergenceStatus.OVERRULED,
}

DEFAULT_PARAMS = ev.CallParams(temperature=0.0, max_tokens=256)
"""Call parameters recorded when a test does not care about them."""


class SessionStoreLike(Protocol):
    """What the builder needs of a store: the ledger's ``save`` and ``state``."""

    def save(self, *aggregates: Deliberation) -> None: ...

    def state(
        self,
        session_id: str | uuid.UUID,
        /,
        *,
        at_event: int | None = None,
        at_iteration: int | None = None,
        at_time: datetime | None = None,
    ) -> SessionState: ...


class SessionBuilder:
    """Builds one session by its aggregate's commands; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        store: SessionStoreLike | None = None,
        answer_defaults: Mapping[str, Any] | None = None,
        prompt: Callable[[int, str], Sequence[ChatMessage]] | None = None,
    ) -> None:
        self.clock: Clock = clock or FixedStepClock()
        self.ids: IdSource = ids or SequentialIds()
        self.store = store
        self.answer_defaults = dict(answer_defaults or {})
        """Keyword arguments of :meth:`answer` every answer gets unless it says otherwise
        (e.g. ``params`` or ``tokens``): a story states its accounting once."""
        self.prompt = prompt or _default_prompt
        """(round, participant) → the prompt recorded when an answer names none."""
        self._agg: Deliberation | None = None
        self.round_number = 0
        """The current round: the last one started."""
        self.saved_at: dict[int, datetime] = {}
        """position → timestamp of every event saved so far."""

    # ------------------------------------------------------------------ the session

    @property
    def aggregate(self) -> Deliberation:
        """The aggregate being built (an error before :meth:`start`)."""
        if self._agg is None:
            raise RuntimeError("start() or fork() the session first")
        return self._agg

    @property
    def state(self) -> SessionState:
        return self.aggregate.state

    @property
    def id(self) -> uuid.UUID:
        return self.aggregate.id

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.state.participants]

    @classmethod
    def of(cls, aggregate: Deliberation, **options: Any) -> SessionBuilder:
        """A builder continuing an existing session (one loaded from a store, a fork)."""
        builder = cls(**options)
        builder._agg = aggregate
        builder.round_number = len(aggregate.state.rounds)
        return builder

    def start(
        self,
        topic: str | Topic,
        *,
        participants: Sequence[str | Participant],
        config: SessionConfig | None = None,
        session_id: uuid.UUID | None = None,
    ) -> SessionBuilder:
        """``SessionStarted``, then ``ParticipantJoined`` each (a bare name is ``openai/NAME``)."""
        self._agg = Deliberation.start(
            session_id=session_id or self.ids.new_id(),
            topic=topic if isinstance(topic, Topic) else Topic(title=topic),
            config=config or SessionConfig(),
            participants=[_participant(p) for p in participants],
            at=self.clock.now(),
        )
        return self

    # ------------------------------------------------------------------ rounds

    def round(
        self,
        kind: RoundKind,
        *,
        iteration: int | None = None,
        participants: Sequence[str] | None = None,
        targets: Mapping[str, str] | None = None,
        answers: Mapping[str, str] | None = None,
        votes: Mapping[str, bool | ConvergenceVote] | None = None,
        close: bool = False,
        **options: Any,
    ) -> SessionBuilder:
        """Start a round (of the given participants, else of ``answers``' keys, else everyone).

        ``answers`` records one contribution each; whoever also has an entry in ``votes``
        votes right after answering, as the orchestrator records a convergence round (a bool
        says whether it agrees). ``close`` completes the round right after.
        ``iteration`` defaults to the session's current one (at least 1).
        """
        who = list(participants if participants is not None else answers or self.names)
        self.round_number = self.aggregate.start_round(
            kind=kind,
            iteration=iteration if iteration is not None else max(self.state.iteration, 1),
            participants=who,
            targets=None if targets is None else dict(targets),
            at=self.clock.now(),
            **options,
        )
        for name, text in (answers or {}).items():
            self.answer(name, text)
            if votes is not None and name in votes:
                vote = votes[name]
                if isinstance(vote, ConvergenceVote):
                    self.vote(name, vote)
                else:
                    self.vote(name, agrees=vote)
        if close:
            self.close_round()
        return self

    def answer(
        self,
        participant: str,
        text: str = "",
        *,
        round: int | None = None,
        **given: Any,
    ) -> SessionBuilder:
        """``ContributionRecorded``: ``participant`` answers ``text``.

        ``given`` (over :attr:`answer_defaults`) may hold ``response`` (a whole
        :class:`ModelResponse`, else one is made of ``text``, ``tokens``, ``cost_usd``,
        ``price`` and ``duration_ms``), ``messages`` (by default :attr:`prompt`'s),
        ``params``, ``model`` (the participant's) and the aggregate's ``attempt``/``purpose``.
        """
        number = round or self.round_number
        o: dict[str, Any] = {**self.answer_defaults, **given}
        model: str = o.pop("model", None) or self._model_of(participant)
        msgs = list(o.pop("messages", None) or self.prompt(number, participant))
        response = o.pop("response", None) or ModelResponse(
            content=text,
            model=model,
            tokens=o.pop("tokens", None) or TokenCount(),
            cost_usd=o.pop("cost_usd", 0.0),
            price=o.pop("price", None),
            duration_ms=o.pop("duration_ms", 0),
        )
        for unused in ("tokens", "cost_usd", "price", "duration_ms"):
            o.pop(unused, None)
        self.aggregate.record_contribution(
            round=number,
            participant=participant,
            model=model,
            messages=msgs,
            params=o.pop("params", DEFAULT_PARAMS),
            prompt_hash=ev.prompt_hash(msgs),
            response=response,
            at=self.clock.now(),
            **o,
        )
        return self

    def fail(self, participant: str, **failure: Any) -> SessionBuilder:
        """``ProviderCallFailed`` for ``participant`` in the current round (a retryable 429
        on attempt 1 unless ``failure`` says otherwise)."""
        fields: dict[str, Any] = {
            "round": self.round_number, "participant": participant, "attempt": 1,
            "model": self._model_of(participant), "error_type": "RateLimitError",
            "message": "429 too many requests", "retryable": True, "will_retry": True,
        }
        fields.update(failure)
        self.aggregate.record_failure(ev.ProviderCallFailed(**fields), at=self.clock.now())
        return self

    def critique(self, participant: str, critique: Critique | None = None,
                 **fields: Any) -> SessionBuilder:
        """``CritiqueRecorded`` (the ``critique`` given, else one built from ``fields``)."""
        return self._parsed(self.aggregate.record_critique, participant,
                            critique=critique or Critique(**fields))

    def opinion(self, participant: str, opinion: Opinion | None = None,
                **fields: Any) -> SessionBuilder:
        """``OpinionRecorded`` (the ``opinion`` given, else one built from ``fields``)."""
        return self._parsed(self.aggregate.record_opinion, participant,
                            opinion=opinion or Opinion(**fields))

    def vote(self, participant: str, vote: ConvergenceVote | None = None,
             **fields: Any) -> SessionBuilder:
        """``VoteRecorded`` (the ``vote`` given, else one built from ``fields``)."""
        return self._parsed(self.aggregate.record_vote, participant,
                            vote=vote or ConvergenceVote(**fields))

    def _parsed(self, record: Callable[..., None], participant: str,
                **answer: Any) -> SessionBuilder:
        """Record ``participant``'s parsed answer (its critique, opinion or vote) in the
        current round."""
        record(round=self.round_number, participant=participant, at=self.clock.now(), **answer)
        return self

    def parse_failure(self, participant: str, *, expected: str, error: str) -> SessionBuilder:
        self.aggregate.record_parse_failure(
            round=self.round_number, participant=participant, expected=expected, error=error,
            at=self.clock.now(),
        )
        return self

    def close_round(self, *, abstained: Iterable[str] = ()) -> SessionBuilder:
        """``RoundCompleted`` for the current round."""
        self.aggregate.complete_round(
            round=self.round_number, abstained=abstained, at=self.clock.now()
        )
        return self

    def evaluate(self, result: ev.ConvergenceEvaluated | None = None,
                 **fields: Any) -> SessionBuilder:
        """``ConvergenceEvaluated`` (``result``, else one built from ``fields``, whose
        ``round`` and ``iteration`` default to the current ones)."""
        if result is None:
            fields.setdefault("round", self.round_number)
            fields.setdefault("iteration", self.state.iteration)
            result = ev.ConvergenceEvaluated(**fields)
        self.aggregate.evaluate_convergence(result, at=self.clock.now())
        return self

    # ------------------------------------------------------------------ divergences, people

    def diverge(
        self,
        divergence_id: str,
        topic: str,
        positions: Mapping[str, tuple[str, Stance]] | Sequence[DivergentPosition],
        *,
        round: int | None = None,
        **fields: Any,
    ) -> SessionBuilder:
        """``DivergenceDetected``: ``positions`` maps participant → (position, stance)."""
        if isinstance(positions, Mapping):
            positions = [
                DivergentPosition(participant=who, position=text, stance=stance)
                for who, (text, stance) in positions.items()
            ]
        self.aggregate.detect_divergence(
            ev.DivergenceDetected(
                divergence_id=divergence_id, round=round or self.round_number, topic=topic,
                positions=tuple(positions), **fields,
            ),
            at=self.clock.now(),
        )
        return self

    def settle(self, divergence_id: str, status: DivergenceStatus, *, round: int | None = None,
               note: str = "", by: str = "") -> SessionBuilder:
        """The divergence is addressed, resolved, withdrawn or overruled."""
        self.aggregate.change_divergence(
            divergence_id, status, at=self.clock.now(),
            round=self.round_number if round is None else round, note=note, by=by,
        )
        return self

    def apply(self, payload: ev.Payload) -> SessionBuilder:
        """Record what the engine planned after a round (``engine.after_round``): a divergence
        detected or changed, or a convergence evaluation."""
        if isinstance(payload, ev.ConvergenceEvaluated):
            return self.evaluate(payload)
        if isinstance(payload, ev.DivergenceDetected):
            self.aggregate.detect_divergence(payload, at=self.clock.now())
            return self
        status = _SETTLED.get(type(payload))
        if status is None or not isinstance(payload, _Settled):
            raise TypeError(f"the builder cannot apply a {type(payload).__name__}")
        return self.settle(payload.divergence_id, status, round=payload.round,
                           note=payload.note, by=payload.by)

    def ask(self, *questions: str) -> SessionBuilder:
        self.aggregate.ask(questions, at=self.clock.now())
        return self

    def human(self, text: str, *, author: str = "human", kind: str = "answer") -> SessionBuilder:
        """``HumanInput``: a person answers, steers or overrules."""
        self.aggregate.human_input(author=author, text=text, kind=kind, at=self.clock.now())
        return self

    def rewind(self, steps: int = 1) -> SessionBuilder:
        """``SessionRewound`` (``back N``); the session is then paused until :meth:`resume`."""
        self.aggregate.rewind(steps, at=self.clock.now())
        return self

    def resume(self, *, reason: str = "") -> SessionBuilder:
        self.aggregate.resume(reason=reason, at=self.clock.now())
        return self

    def leave(self, name: str, *, reason: str = "") -> SessionBuilder:
        """``ParticipantLeft`` (a fork without ``name``), its role handed over as ``fork
        --without`` hands it (:func:`~forge_ledger.engine.steps.roles_after_leaving`)."""
        heirs = roles_after_leaving(self.state.participants, name)
        self.aggregate.leave(name, reassigned=heirs, reason=reason, at=self.clock.now())
        return self

    # ------------------------------------------------------------------ the end

    def finish(self, status: SessionStatus = SessionStatus.CONVERGED, *, reason: str = "",
               score: float = 1.0) -> SessionBuilder:
        self.aggregate.finish(status, reason=reason, score=score, at=self.clock.now())
        return self

    def save(self) -> SessionBuilder:
        """Write the pending events to the store, remembering each one's timestamp."""
        for e in self.aggregate.pending_events:
            self.saved_at[int(e.originator_version)] = e.timestamp
        self._store().save(self.aggregate)
        return self

    def seal(self, *, key: bytes | None = None) -> str:
        """Save, then seal (HMAC under ``key`` if given); returns the sealed root hash."""
        self.save()
        root = self.state.head_hash
        self.aggregate.seal(
            at=self.clock.now(), hmac=keyed_digest(key, root) if key is not None else None
        )
        self.save()
        return root

    def fork(self, *, session_id: uuid.UUID | None = None, **at: Any) -> SessionBuilder:
        """Save, then fork the stored session as of ``at`` (e.g. ``at_iteration=1``): a new
        builder on the fork, saved, sharing this one's clock, ids and store."""
        self.save()
        parent = self._store().state(self.id, **at)
        child = SessionBuilder(clock=self.clock, ids=self.ids, store=self.store)
        child._agg = Deliberation.fork(
            session_id=session_id or self.ids.new_id(), parent=parent, at=self.clock.now()
        )
        return child.save()

    # ------------------------------------------------------------------ internals

    def _store(self) -> SessionStoreLike:
        if self.store is None:
            raise RuntimeError("this builder has no store: pass store= to save, seal or fork")
        return self.store

    def _model_of(self, name: str) -> str:
        p = self.state.participant(name)
        if p is None:
            raise KeyError(f"{name!r} is not a participant")
        return p.model


def _default_prompt(number: int, participant: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=f"round {number} prompt for {participant}")]


def _participant(p: str | Participant) -> Participant:
    return p if isinstance(p, Participant) else Participant(name=p, model=f"openai/{p.lower()}")
