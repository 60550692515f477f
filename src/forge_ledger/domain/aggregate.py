"""The ``Deliberation`` aggregate: one session, its invariants and its hash-chained events.

Built on ``eventsourcing``: every fact is a ``Deliberation.Event`` subclass (one per payload
type, with a stable explicit topic ``forge_ledger:<Type>``) whose ``data`` is the payload as
JSON-ready dict. Command methods check the rules *before* an event exists (validation in an
event's apply would re-run on every replay), then trigger the event, which folds it into
:class:`~forge_ledger.domain.state.SessionState`. Timestamps are always given by the caller
(from an injected clock), never read here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, ClassVar, cast
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic, register_topic

from ..errors import InvariantViolation, SessionDamagedError
from . import events as ev
from .fold import apply_event, begin
from .hashing import GENESIS, chain_hash
from .state import SessionState
from .topics import TOPIC_PREFIX, topic_for
from .values import (
    MAX_PARTICIPANTS,
    MIN_DELIBERATING,
    ChatMessage,
    ConvergenceVote,
    Critique,
    DivergenceStatus,
    ModelResponse,
    Opinion,
    Participant,
    RoundKind,
    RoundStatus,
    SessionConfig,
    SessionStatus,
    Topic,
)

__all__ = ["AGGREGATE_TOPIC", "Deliberation", "event_class_for", "known_topic", "topic_for"]

AGGREGATE_TOPIC = topic_for("Deliberation")


class Deliberation(Aggregate):
    """One deliberation session (see module docstring)."""

    TOPIC = AGGREGATE_TOPIC

    state: SessionState

    class Event(Aggregate.Event):
        """Base of all stored events: payload dict plus the hash chain links."""

        TOPIC = "forge_ledger:Event"
        TYPE: ClassVar[str] = ""

        data: dict[str, Any]
        prev_hash: str
        hash: str
        quotes: ClassVar[tuple[str, ...]] = ()
        """The answers (their texts' addresses) this event's texts quote, set on an event as it
        is recorded and never stored or hashed: the ledger stores a prompt or a parsed value
        packed against them. An event read back has none."""

        def payload(self) -> ev.Payload:
            return ev.payload_class(self.TYPE).model_validate(self.data)

        def apply(self, aggregate: Any) -> None:
            # A command that just built this event hands over its validated payload, so a
            # live append does not validate it twice; replays and loads validate ``data``.
            fresh = aggregate.__dict__.pop("_fresh_payload", None)
            payload = fresh[1] if fresh is not None and fresh[0] == self.hash else None
            state = cast(Deliberation, aggregate).state
            if self.prev_hash != state.head_hash:
                # Each event names its predecessor's hash: one that does not follow the
                # session's last one was moved, copied or altered in the store, and folding
                # it would show a history that was never recorded.
                raise SessionDamagedError(
                    self.originator_id,
                    self.originator_version,
                    f"it does not follow event {self.originator_version - 1} (its link to the "
                    "previous event differs: reordered, duplicated or altered)",
                )
            apply_event(
                state,
                payload or self.payload(),
                position=self.originator_version,
                at=self.timestamp,
                hash_=self.hash,
            )

    class Created(Event, Aggregate.Created):
        """Base of the two events that begin a session (started, forked)."""

        TOPIC = "forge_ledger:Created"

        def apply(self, aggregate: Any) -> None:
            aggregate.state = begin(
                str(self.originator_id),
                self.payload(),
                position=self.originator_version,
                at=self.timestamp,
                hash_=self.hash,
            )

    def __init__(self) -> None:
        """State is set by the created event's ``apply``."""

    # ------------------------------------------------------------------ creation

    @classmethod
    def start(
        cls,
        *,
        session_id: UUID,
        topic: Topic,
        config: SessionConfig,
        participants: Sequence[Participant],
        at: datetime,
        source: str = "run",
    ) -> Deliberation:
        names = [p.name for p in participants]
        if len(set(names)) != len(names):
            raise InvariantViolation(
                "participant names must be unique", hint="give each participant its own name"
            )
        payload = ev.SessionStarted(topic=topic, config=config, slug=topic.slug, source=source)
        agg = cls._create_with(payload, session_id, at)
        for p in participants:
            agg.join(p, at=at)
        return agg

    @staticmethod
    def require_forkable(parent: SessionState) -> None:
        """Refuse to fork where a round is open: the fork would inherit a half-run round.

        The one place of that rule: :meth:`fork` checks it, and so does forking a stored
        session before it resolves participants and config (it adds a hint naming the events
        to fork at instead).
        """
        r = parent.open_round
        if r is not None:
            raise InvariantViolation(
                f"cannot fork at event {parent.version}: round {r.number} ({r.kind.value}) is "
                "still open there",
                hint="fork at an iteration boundary or at an event after the round completed",
            )

    @classmethod
    def fork(
        cls,
        *,
        session_id: UUID,
        parent: SessionState,
        config: SessionConfig | None = None,
        participants: Sequence[Participant] = (),
        at: datetime,
    ) -> Deliberation:
        cls.require_forkable(parent)
        origin = ev.ForkOrigin(
            parent_id=parent.id,
            parent_position=parent.version,
            parent_hash=parent.head_hash,
            parent_iteration=parent.iteration,
        )
        payload = ev.SessionForked(
            origin=origin,
            state=parent.model_dump_with_answers(),
            config=config or parent.config,
            participants=tuple(participants),
        )
        # The fork's first event stands for the parent's events up to the fork point, so it
        # takes that point's position and the fork's own events continue the parent's
        # numbering: every rule that compares positions (the open dissent a prompt shows, a
        # divergence's lifecycle, provenance) sees the same numbers in a parent and its fork.
        return cls._create_with(payload, session_id, at, position=parent.version)

    @classmethod
    def _create_with(
        cls, payload: ev.Payload, session_id: UUID, at: datetime, *, position: int = 1
    ) -> Deliberation:
        data = payload.model_dump(mode="json")
        digest = chain_hash(
            session_id=str(session_id),
            position=position,
            type_name=payload.TYPE,
            timestamp=at,
            data=data,
            prev_hash=GENESIS,
        )
        # eventsourcing's ``_create`` numbers a created event INITIAL_VERSION (1); a fork's
        # begins at its fork point, so the created event is made here as ``_create`` makes it
        created: Any = event_class_for(payload.TYPE)(  # type: ignore[call-arg]
            originator_topic=get_topic(cls),
            originator_id=session_id,
            originator_version=position,
            timestamp=at,
            data=data,
            prev_hash=GENESIS,
            hash=digest,
        )
        agg = cast(Deliberation, created.mutate(None))
        agg.pending_events.append(created)
        return agg

    # ------------------------------------------------------------------ recording

    def _record(self, payload: ev.Payload, at: datetime, quotes: Sequence[str] = ()) -> None:
        data = payload.model_dump(mode="json")
        prev = self.state.head_hash
        digest = chain_hash(
            session_id=str(self.id),
            position=self.version + 1,
            type_name=payload.TYPE,
            timestamp=at,
            data=data,
            prev_hash=prev,
        )
        self.__dict__["_fresh_payload"] = (digest, payload)
        try:
            self.trigger_event(
                event_class_for(payload.TYPE), timestamp=at, data=data, prev_hash=prev, hash=digest
            )
            if quotes:
                object.__setattr__(self.pending_events[-1], "quotes", tuple(quotes))
        finally:
            self.__dict__.pop("_fresh_payload", None)

    def _require_live(self, what: str) -> None:
        if self.state.status.terminal:
            raise InvariantViolation(
                f"cannot {what}: session {self.id} is {self.state.status.value}",
                hint="fork it to continue from an earlier point",
            )

    def _require_open_round(self, number: int, what: str) -> Any:
        r = self.state.open_round
        if r is None or r.number != number:
            current = f"round {r.number} is open" if r else "no round is open"
            raise InvariantViolation(f"cannot {what} round {number}: {current}")
        return r

    def _require_member(self, name: str) -> None:
        if self.state.participant(name) is None:
            raise InvariantViolation(
                f"unknown participant {name!r}",
                hint=f"participants are: {', '.join(self.state.participant_names) or 'none'}",
            )

    def join(self, participant: Participant, *, at: datetime) -> None:
        self._require_live("add a participant")
        if self.state.participant(participant.name) is not None:
            raise InvariantViolation(f"participant {participant.name!r} already joined")
        if len(self.state.participants) >= MAX_PARTICIPANTS:
            raise InvariantViolation(
                f"a session has at most {MAX_PARTICIPANTS} participants",
                hint="deliberate with fewer models",
            )
        self._record(ev.ParticipantJoined(participant=participant), at)

    def start_round(
        self,
        *,
        kind: RoundKind,
        iteration: int,
        participants: Sequence[str],
        at: datetime,
        targets: dict[str, str] | None = None,
        depth: int = 0,
        focus: str = "",
        technique: str | None = None,
    ) -> int:
        self._require_live("start a round")
        if self.state.status is SessionStatus.PAUSED:
            raise InvariantViolation(
                "cannot start a round while the session is paused", hint="resume it first"
            )
        if self.state.open_round is not None:
            raise InvariantViolation(
                f"cannot start a round: round {self.state.open_round.number} is still open"
            )
        if not participants:
            raise InvariantViolation("a round needs at least one participant")
        for name in participants:
            self._require_member(name)
        for critic, target in (targets or {}).items():
            if not target and kind is not RoundKind.CRITIQUE:
                continue  # e.g. a response round: the author answers no one in particular
            self._require_member(target)
            if kind is RoundKind.CRITIQUE and critic == target:
                raise InvariantViolation(f"{critic!r} may not critique its own work")
        number = len(self.state.rounds) + 1
        self._record(
            ev.RoundStarted(
                number=number,
                kind=kind,
                iteration=iteration,
                participants=tuple(participants),
                targets=dict(targets or {}),
                depth=depth,
                focus=focus,
                technique=technique,
            ),
            at,
        )
        return number

    def record_contribution(
        self,
        *,
        round: int,
        participant: str,
        model: str,
        messages: Sequence[ChatMessage],
        params: ev.CallParams,
        prompt_hash: str,
        response: ModelResponse,
        at: datetime,
        attempt: int = 1,
        purpose: str = "answer",
        quotes: Sequence[str] = (),
    ) -> None:
        """``quotes``: the answers the prompt quotes (``engine.Prompt.quotes``), passed on to
        the ledger with the event (:attr:`Event.quotes`)."""
        self._require_live("record a contribution")
        r = self._require_open_round(round, "contribute to")
        self._require_member(participant)
        if participant not in r.expected:
            raise InvariantViolation(f"{participant!r} is not a contributor of round {round}")
        existing = r.contribution_of(participant)
        if purpose == "answer" and existing is not None:
            raise InvariantViolation(f"{participant!r} already contributed to round {round}")
        if purpose in ("repair", "continuation") and existing is None:
            raise InvariantViolation(
                f"{participant!r} has no answer to {purpose.replace('ation', 'e')} "
                f"in round {round}"
            )
        self._record(
            ev.ContributionRecorded(
                round=round,
                participant=participant,
                attempt=attempt,
                model=model,
                messages=tuple(messages),
                params=params,
                prompt_hash=prompt_hash,
                response=response,
                purpose=purpose,
            ),
            at,
            quotes,
        )

    def record_failure(self, failure: ev.ProviderCallFailed, *, at: datetime) -> None:
        self._require_live("record a failed call")
        self._require_open_round(failure.round, "record a failure in")
        self._require_member(failure.participant)
        self._record(failure, at)

    def _require_contribution(self, round: int, participant: str, what: str) -> Any:
        r = self._require_open_round(round, what)
        c = r.contribution_of(participant)
        if c is None:
            raise InvariantViolation(
                f"cannot {what} round {round}: {participant!r} has not contributed yet"
            )
        return r, c

    def record_critique(
        self, *, round: int, participant: str, critique: Critique, at: datetime
    ) -> None:
        self._require_live("record a critique")
        _, c = self._require_contribution(round, participant, "record a critique in")
        if critique.target == participant:
            raise InvariantViolation(f"{participant!r} may not critique its own work")
        if c.critique is not None:
            raise InvariantViolation(f"{participant!r} already has a critique in round {round}")
        self._record(
            ev.CritiqueRecorded(round=round, participant=participant, critique=critique),
            at,
            (c.answer_sha256,),
        )

    def record_opinion(
        self, *, round: int, participant: str, opinion: Opinion, at: datetime
    ) -> None:
        self._require_live("record an opinion")
        _, c = self._require_contribution(round, participant, "record an opinion in")
        if c.opinion is not None:
            raise InvariantViolation(f"{participant!r} already has an opinion in round {round}")
        self._record(
            ev.OpinionRecorded(round=round, participant=participant, opinion=opinion),
            at,
            (c.answer_sha256,),
        )

    def record_vote(
        self, *, round: int, participant: str, vote: ConvergenceVote, at: datetime
    ) -> None:
        self._require_live("record a vote")
        r, answered = self._require_contribution(round, participant, "vote in")
        if r.kind is not RoundKind.CONVERGENCE:
            raise InvariantViolation(f"round {round} is a {r.kind.value} round, not a vote")
        if any(c.vote is not None for c in r.contributions if c.participant == participant):
            raise InvariantViolation(f"{participant!r} already voted in round {round}")
        self._record(
            ev.VoteRecorded(round=round, participant=participant, vote=vote),
            at,
            (answered.answer_sha256,),
        )

    def record_parse_failure(
        self, *, round: int, participant: str, expected: str, error: str, at: datetime
    ) -> None:
        self._require_live("record a parse failure")
        self._require_contribution(round, participant, "record a parse failure in")
        self._record(
            ev.ParseFailed(round=round, participant=participant, expected=expected, error=error),
            at,
        )

    def choose_fallback(
        self, *, round: int, failed: str, participant: str, at: datetime, reason: str = ""
    ) -> None:
        """Hand an open single-author round over to ``participant`` (its author failed)."""
        self._require_live("choose a fallback")
        r = self._require_open_round(round, "choose a fallback in")
        self._require_member(participant)
        if failed not in r.expected or r.contribution_of(failed) is not None:
            raise InvariantViolation(f"{failed!r} has not failed in round {round}")
        if participant in r.expected:
            raise InvariantViolation(f"{participant!r} already takes part in round {round}")
        self._record(
            ev.FallbackChosen(round=round, failed=failed, participant=participant, reason=reason),
            at,
        )

    def complete_round(self, *, round: int, at: datetime, abstained: Iterable[str] = ()) -> None:
        self._require_live("complete a round")
        self._require_open_round(round, "complete")
        self._record(ev.RoundCompleted(number=round, abstained=tuple(abstained)), at)

    def evaluate_convergence(self, result: ev.ConvergenceEvaluated, *, at: datetime) -> None:
        self._require_live("record a convergence evaluation")
        r = self.state.round(result.round)
        if r is None or r.kind is not RoundKind.CONVERGENCE:
            raise InvariantViolation(f"round {result.round} is not a convergence round")
        if r.status is not RoundStatus.COMPLETE:
            raise InvariantViolation(f"convergence round {result.round} is not complete yet")
        if self.state.evaluation(result.round) is not None:
            raise InvariantViolation(f"round {result.round} was already evaluated")
        self._record(result, at)

    def detect_divergence(self, divergence: ev.DivergenceDetected, *, at: datetime) -> None:
        self._require_live("record a divergence")
        if self.state.divergence(divergence.divergence_id) is not None:
            raise InvariantViolation(f"divergence {divergence.divergence_id} already exists")
        for pos in divergence.positions:
            self._require_member(pos.participant)
        self._record(divergence, at)

    CHANGES: ClassVar[dict[DivergenceStatus, type[ev._DivergenceChange]]] = {
        DivergenceStatus.ADDRESSED: ev.DivergenceAddressed,
        DivergenceStatus.RESOLVED: ev.DivergenceResolved,
        DivergenceStatus.WITHDRAWN: ev.DivergenceWithdrawn,
        DivergenceStatus.OVERRULED: ev.DivergenceOverruled,
    }
    """Which event records a divergence moving to each status."""

    def change_divergence(
        self,
        divergence_id: str,
        status: DivergenceStatus,
        *,
        at: datetime,
        round: int = 0,
        note: str = "",
        by: str = "",
    ) -> None:
        self._require_live("change a divergence")
        d = self.state.divergence(divergence_id)
        if d is None:
            raise InvariantViolation(f"unknown divergence {divergence_id!r}")
        if not d.is_open:
            raise InvariantViolation(f"divergence {divergence_id} is already {d.status.value}")
        if status is DivergenceStatus.OVERRULED and not by:
            raise InvariantViolation("an overrule needs the human author's name")
        cls = self.CHANGES.get(status)
        if cls is None:
            raise InvariantViolation(f"cannot change a divergence to {status.value}")
        self._record(cls(divergence_id=divergence_id, round=round, note=note, by=by), at)

    def pause(
        self,
        *,
        reason: str,
        at: datetime,
        questions: Sequence[str] = (),
        fault: ev.PauseFault | None = None,
    ) -> None:
        self._require_live("pause")
        if self.state.status is SessionStatus.PAUSED:
            raise InvariantViolation("the session is already paused")
        if fault is not None:
            self._require_open_round(fault.round, "pause on a fault in")
        self._record(
            ev.SessionPaused(reason=reason, questions=tuple(questions), fault=fault), at
        )

    def update_participant(self, participant: Participant, *, at: datetime, reason: str) -> None:
        """Change a member's model or endpoint for the calls still to come (it keeps its name:
        the history refers to it)."""
        self._require_live("change a participant")
        current = self.state.participant(participant.name)
        if current is None:
            self._require_member(participant.name)
        if current == participant:
            return
        self._record(ev.ParticipantUpdated(participant=participant, reason=reason), at)

    def leave(
        self,
        name: str,
        *,
        at: datetime,
        reassigned: Sequence[Participant] = (),
        reason: str = "",
    ) -> None:
        """``name`` takes no part from here on (a fork without it); ``reassigned`` are the
        remaining participants whose role changes to take over one it held."""
        self._require_live("remove a participant")
        self._require_member(name)
        if len(self.state.participants) - 1 < MIN_DELIBERATING:
            raise InvariantViolation(
                f"cannot drop {name!r}: at least {MIN_DELIBERATING} participants must stay "
                f"and {len(self.state.participants)} are left",
                hint="drop fewer participants",
            )
        for p in reassigned:
            if p.name == name:
                raise InvariantViolation(f"{name!r} leaves and cannot take over a role")
            self._require_member(p.name)
        self._record(
            ev.ParticipantLeft(participant=name, reassigned=tuple(reassigned), reason=reason), at
        )

    def resume(self, *, at: datetime, reason: str = "") -> None:
        self._require_live("resume")
        if self.state.status is not SessionStatus.PAUSED:
            raise InvariantViolation(f"the session is {self.state.status.value}, not paused")
        self._record(ev.SessionResumed(reason=reason), at)

    def assign_review_labels(self, labels: dict[str, str], *, at: datetime) -> None:
        """Record which label stands for which participant (anonymized review)."""
        self._require_live("assign review labels")
        for name in labels.values():
            self._require_member(name)
        if len(set(labels.values())) != len(labels):
            raise InvariantViolation("each participant gets one review label")
        self._record(ev.ReviewLabelsAssigned(labels=dict(labels)), at)

    def ask(self, questions: Sequence[str], *, at: datetime) -> None:
        self._require_live("ask questions")
        self._record(
            ev.QuestionsAsked(iteration=self.state.iteration, questions=tuple(questions)), at
        )

    def human_input(
        self,
        *,
        author: str,
        text: str,
        at: datetime,
        kind: str = "answer",
    ) -> None:
        self._require_live("record human input")
        if not author.strip():
            raise InvariantViolation("human input needs an author")
        self._record(
            ev.HumanInputRecorded(
                author=author,
                text=text,
                kind=kind,
                iteration=self.state.iteration,
                questions=tuple(self.state.pending_questions) if kind == "answer" else (),
            ),
            at,
        )

    def rewind(self, steps: int, *, at: datetime) -> int:
        """``back N``: returns the target iteration."""
        self._require_live("go back")
        if not 1 <= steps <= 5:
            raise InvariantViolation("back takes 1 to 5 iterations", hint="use back 1..5")
        if self.state.open_round is not None:
            raise InvariantViolation("cannot go back while a round is open")
        current = self.state.iteration
        target = current - steps
        if target < 1:
            raise InvariantViolation(
                f"cannot go back {steps} from iteration {current}: iteration 1 is the earliest",
                hint=f"use back {max(current - 1, 1)} or less" if current > 1 else None,
            )
        self._record(
            ev.SessionRewound(from_iteration=current, to_iteration=target, steps=steps), at
        )
        return target

    def suggest_technique(self, suggestion: ev.TechniqueSuggested, *, at: datetime) -> None:
        self._require_live("suggest a technique")
        self._record(suggestion, at)

    def record_import(self, payload: ev.Payload, *, at: datetime) -> None:
        """Record one fact read from a YAML session file (iterations, ideas, the closing
        ``SessionImported``). Only an imported session accepts them, and only until the
        ``SessionImported`` that ends the import; ideas are also accepted in live sessions."""
        allowed = (ev.IdeaRecorded, ev.IterationRecorded, ev.SessionImported)
        if not isinstance(payload, allowed):
            raise InvariantViolation(f"{payload.TYPE} is not an import event")
        if isinstance(payload, ev.IdeaRecorded) and self.state.source != "import":
            self._require_live("record an idea")
        elif self.state.source != "import" or self.state.imported is not None:
            raise InvariantViolation(
                "only a session being imported accepts imported history",
                hint="import the YAML file as a new session",
            )
        self._record(payload, at)

    def exhaust_budget(
        self, *, budget: str, limit: float, spent: float, at: datetime, detail: str = ""
    ) -> None:
        self._require_live("record an exhausted budget")
        self._record(
            ev.BudgetExhausted(budget=budget, limit=limit, spent=spent, detail=detail),
            at,
        )

    def finish(
        self, status: SessionStatus, *, at: datetime, reason: str = "", score: float = 1.0
    ) -> None:
        """Move to a terminal status (converged, complete, aborted, timed_out)."""
        self._require_live(f"mark the session {status.value}")
        payload: ev.Payload
        if status is SessionStatus.CONVERGED:
            payload = ev.SessionConverged(reason=reason, score=score)
        elif status is SessionStatus.COMPLETE:
            payload = ev.SessionCompleted(reason=reason)
        elif status is SessionStatus.ABORTED:
            payload = ev.SessionAborted(reason=reason)
        elif status is SessionStatus.TIMED_OUT:
            payload = ev.SessionTimedOut(reason=reason)
        else:
            raise InvariantViolation(f"{status.value} is not a terminal status")
        self._record(payload, at)

    def abort(self, *, reason: str, by: str, at: datetime) -> None:
        """A person ends the session for good (a fault pause never does that on its own)."""
        self._require_live("abort")
        if not by.strip() or not reason.strip():
            raise InvariantViolation("an abort needs the person's name and a reason")
        self._record(ev.SessionAborted(reason=reason, by=by), at)

    def require_sealable(self) -> None:
        """Refuse a session that is still live or already sealed: the one place of that rule.

        :meth:`seal` checks it before recording, and sealing a stored session checks it before
        verifying the chain, so both refuse with the same words.
        """
        state = self.state
        if not state.status.terminal:
            raise InvariantViolation(
                f"session {self.id} is {state.status.value}; only a finished session can be "
                "sealed",
                hint="finish it first (converged, complete, aborted or timed out)",
            )
        if state.seal is not None:
            root = str(state.seal["root_hash"])[:16]
            raise InvariantViolation(
                f"session {self.id} is already sealed (root hash {root}…)",
                hint="'forge-ledger verify' checks the existing seal",
            )

    def seal(self, *, at: datetime, hmac: str | None = None) -> None:
        """Close a finished session with the chain's root hash (and its HMAC when keyed)."""
        self.require_sealable()
        self._record(
            ev.SessionSealed(root_hash=self.state.head_hash, events=self.version, hmac=hmac), at
        )


# --------------------------------------------------------------------------- event classes


_EVENT_CLASSES: dict[str, type[Deliberation.Event]] = {}


def _make_upcasters(type_name: str, version: int) -> dict[str, Any]:
    """eventsourcing calls ``upcast_vN_vN+1(state)`` on decode; we upcast ``state['data']``."""
    methods: dict[str, Any] = {}
    for v in range(1, version):
        fn = ev.UPCASTERS.get((type_name, v))
        if fn is None:
            raise RuntimeError(f"missing upcaster for {type_name} v{v}")

        def upcast(state: dict[str, Any], _fn: Any = fn) -> None:
            state["data"] = _fn(state["data"])

        methods[f"upcast_v{v}_v{v + 1}"] = staticmethod(upcast)
    return methods


_DEFINING = threading.Lock()


def _define_event_class(type_name: str) -> type[Deliberation.Event]:
    payload_cls = ev.EVENT_TYPES[type_name]
    created = type_name in ev.FIRST_EVENT_TYPES
    base: type[Any] = Deliberation.Created if created else Deliberation.Event
    namespace: dict[str, Any] = {
        "TOPIC": topic_for(type_name),
        "TYPE": type_name,
        "__module__": __name__,
        "__qualname__": f"Deliberation.{type_name}",
        "__annotations__": {},
        # An event class adds no field to its base, so it is the base's frozen dataclass as
        # it stands: given the base's fields, eventsourcing's metaclass (which makes every
        # event class a dataclass) generates no methods from source for it, a millisecond
        # per class that every command reading a session paid for each type it met.
        "__dataclass_fields__": base.__dataclass_fields__,
        "__dataclass_params__": base.__dataclass_params__,
    }
    if payload_cls.SCHEMA_VERSION > 1:
        namespace["class_version"] = payload_cls.SCHEMA_VERSION
        namespace.update(_make_upcasters(type_name, payload_cls.SCHEMA_VERSION))
    metaclass: Any = type(base)
    cls: type[Deliberation.Event] = metaclass(type_name, (base,), namespace)
    register_topic(topic_for(type_name), cls)
    setattr(Deliberation, type_name, cls)
    _EVENT_CLASSES[type_name] = cls
    return cls


def event_class_for(type_name: str) -> type[Deliberation.Event]:
    """The stored event class of a payload type, made on first use: each is a dataclass that
    eventsourcing builds from source, and a command that reads a session meets only the types
    the session recorded (a demo session, 14 of the 35)."""
    found = _EVENT_CLASSES.get(type_name)
    if found is not None:
        return found
    with _DEFINING:  # two threads must not register two classes under one topic
        found = _EVENT_CLASSES.get(type_name)
        return found if found is not None else _define_event_class(type_name)


def known_topic(topic: str) -> None:
    """Make the event class a stored event's ``topic`` names, if it names one of ours, so that
    eventsourcing can resolve the topic when it decodes the event."""
    type_name = topic.removeprefix(TOPIC_PREFIX)
    if type_name != topic and type_name in ev.EVENT_TYPES:
        event_class_for(type_name)
