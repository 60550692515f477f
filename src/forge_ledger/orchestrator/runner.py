"""The orchestrator: runs a session round by round, calling participants concurrently.

It asks the engine what comes next, fans the calls of a round out concurrently (bounded by
``config.max_concurrency``), streams deltas to subscribers, and appends events **in
participant order**: participant k's events are appended as soon as its own calls *and* those
of participants 1..k-1 are done, never in completion order. Each participant's batch is
committed at once, so a crash loses at most the calls in flight; ``run``/``resume`` picks
up an open round and only calls the participants whose contributions are missing.

Determinism rules this module keeps (so ``replay`` can re-run it against recorded answers):

* every stored event reads the clock exactly once, right before it is recorded;
* prompts are built from the state as of the round's start (not from answers of the same
  round that happen to be recorded already);
* decisions depend only on recorded state: budgets are checked against recorded costs and
  reservations made in participant order at the round's start; a call refused because the
  time budget ran out is recorded as a failed attempt, which a replay serves back.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from .. import engine
from ..clock import Clock, IdSource, SystemClock, UuidIds
from ..domain import events as ev
from ..domain.aggregate import Deliberation
from ..domain.state import ContributionState, RoundState, SessionState
from ..domain.values import (
    ChatMessage,
    ConvergenceVote,
    Critique,
    DivergenceStatus,
    ModelResponse,
    Opinion,
    Participant,
    RoundKind,
    SessionConfig,
    SessionStatus,
    StopReason,
    TokenCount,
    Topic,
)
from ..engine.steps import begin_round
from ..engine.votes import contradicting_votes
from ..errors import InvariantViolation
from ..providers import Provider, ProviderCall, ProviderCallError, retry_delay
from . import live
from .ports import KeyedSeal, MonotonicWallTime, SealPolicy, SessionStore, WallTime

__all__ = ["Orchestrator"]

_DIVERGENCE_STATUS: dict[type[ev.Payload], DivergenceStatus] = {
    event: status for status, event in Deliberation.CHANGES.items()
}


@dataclass(frozen=True)
class _Failure:
    """A call that failed (or was refused for a budget): recorded as it is."""

    event: ev.ProviderCallFailed


@dataclass(frozen=True)
class _Answer:
    """A call that answered: the prompt it was made with and the response."""

    attempt: int
    messages: tuple[ChatMessage, ...]
    call: ProviderCall
    prompt_hash: str
    response: ModelResponse
    purpose: str
    quotes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Parsed:
    """The structured output read from an answer."""

    value: Critique | Opinion | ConvergenceVote


@dataclass(frozen=True)
class _ParseFailed:
    """An answer (and its repair, if any) that gave no structured output."""

    expected: str
    error: str


_Action = _Failure | _Answer | _Parsed | _ParseFailed
"""One thing to record for a participant, in order (a failure, an answer, a parse)."""


@dataclass
class _Outcome:
    participant: str
    actions: list[_Action] = field(default_factory=list)
    answered: bool = False
    abstained: bool = False
    budget: str | None = None  # "cost" | "time" when a budget stopped this participant
    last_error: str = ""


class Orchestrator:
    """Runs deliberation sessions stored in ``ledger`` using ``provider`` for model calls.

    ``ledger`` is any :class:`~forge_ledger.orchestrator.ports.SessionStore`. ``seal`` says
    how an ended session is sealed (default: :class:`KeyedSeal` without a key) and
    ``wall_time`` how the time budget is measured (default: the monotonic clock); a replay
    injects policies that never seal and never run out of time.
    """

    def __init__(
        self,
        ledger: SessionStore,
        provider: Provider,
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        subscribers: Sequence[live.Subscriber] = (),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_checkpoint: Callable[[SessionState], None] | None = None,
        seal: SealPolicy | None = None,
        wall_time: WallTime | None = None,
    ) -> None:
        self.ledger = ledger
        self.provider = provider
        self.clock = clock or SystemClock()
        self.ids = ids or UuidIds()
        self._subscribers = list(subscribers)
        self._sleep = sleep
        self._on_checkpoint = on_checkpoint
        self._seal = seal or KeyedSeal()
        self._wall = wall_time or MonotonicWallTime()
        self._last_phase: str | None = None

    # ------------------------------------------------------------------ public API

    def subscribe(self, subscriber: live.Subscriber) -> None:
        self._subscribers.append(subscriber)

    def start(
        self,
        topic: Topic,
        config: SessionConfig,
        participants: Sequence[Participant],
        *,
        source: str = "run",
    ) -> UUID:
        """Record a new session (started + participants joined) and return its id."""
        if not participants:
            raise InvariantViolation("a session needs at least one participant")
        agg = Deliberation.start(
            session_id=self.ids.new_id(),
            topic=topic,
            config=config,
            participants=participants,
            at=self.clock.now(),
            source=source,
        )
        self.ledger.save(agg)
        self._checkpoint(agg.state, force=True)
        return agg.id

    async def run(self, session_id: UUID) -> SessionState:
        """Continue the session until it converges, ends, or pauses for a human."""
        return await self._run(self.ledger.get(session_id))

    async def _run(self, agg: Deliberation) -> SessionState:
        """``run`` on a session already loaded (loading decodes the whole state: once is
        enough per command)."""
        self._last_phase = agg.state.phase
        started = self._wall.now()
        elapsed_at_start = (agg.state.updated_at - agg.state.created_at).total_seconds()
        while True:
            state = agg.state
            if state.status.terminal or state.status is SessionStatus.PAUSED:
                return state
            open_round = state.open_round
            if open_round is not None:
                wall_left = state.config.max_time_secs - (
                    elapsed_at_start + self._wall.now() - started
                )
                await self._play_round(agg, open_round.number, wall_left)
                continue
            elapsed = (state.updated_at - state.created_at).total_seconds()
            step = engine.next_step(state, elapsed_secs=elapsed)
            self._take_step(agg, step)

    async def resume(self, session_id: UUID, *, reason: str = "resumed") -> SessionState:
        """Resume a paused session (or continue one interrupted by a crash) and run it.

        Idempotent: a session that already ended only gets what its end left undone (a crash
        can land between the last event and the seal or the exports), so a supervisor may run
        ``resume`` after any crash."""
        agg = self.ledger.get(session_id)
        if agg.state.status.terminal:
            self._complete_end(agg)
            return agg.state
        if agg.state.status is SessionStatus.PAUSED:
            agg.resume(at=self.clock.now(), reason=reason)
            self.ledger.save(agg)
        return await self._run(agg)

    # ------------------------------------------------------------------ steps

    def _take_step(self, agg: Deliberation, step: engine.Step) -> None:
        if isinstance(step, engine.StartRound):
            number = begin_round(agg, step, self.clock.now())
            self.ledger.save(agg)
            self._publish(
                live.RoundStartedLive(
                    round=number,
                    kind=step.kind,
                    iteration=step.iteration,
                    participants=tuple(step.participants),
                )
            )
            self._checkpoint(agg.state)
        elif isinstance(step, engine.Finish):
            self._finish(agg, step.status, step.reason, step.score)
        elif isinstance(step, engine.AskHuman):
            agg.ask(step.questions, at=self.clock.now())
            agg.pause(reason="awaiting human input", questions=step.questions, at=self.clock.now())
            self.ledger.save(agg)
            self._checkpoint(agg.state, force=True)
        elif isinstance(step, engine.BudgetStop):
            self._stop_for_budget(agg, step.budget, step.limit, step.spent, step.detail)
        else:  # pragma: no cover - exhaustive
            raise TypeError(f"unknown engine step {step!r}")

    def _stop_for_budget(
        self, agg: Deliberation, budget: str, limit: float, spent: float, detail: str
    ) -> None:
        agg.exhaust_budget(
            budget=budget, limit=limit, spent=spent, detail=detail, at=self.clock.now()
        )
        status = SessionStatus.TIMED_OUT if budget == "time" else SessionStatus.COMPLETE
        self._finish(agg, status, f"{budget} budget exhausted: {detail}".rstrip(": "), 0.0)

    def _finish(self, agg: Deliberation, status: SessionStatus, reason: str, score: float) -> None:
        agg.finish(status, reason=reason, score=score, at=self.clock.now())
        self._seal_now(agg)
        self.ledger.save(agg)
        self._checkpoint(agg.state, force=True)
        self._publish(live.SessionFinished(status=status.value, reason=reason))

    def _seal_now(self, agg: Deliberation) -> None:
        self._seal.seal(agg, self.clock)

    def _complete_end(self, agg: Deliberation) -> None:
        """Do what the end of an ended session left undone: the seal, then the exports."""
        before = agg.version
        self._seal_now(agg)
        if agg.version != before:
            self.ledger.save(agg)
        self._checkpoint(agg.state, force=True)

    # ------------------------------------------------------------------ rounds

    async def _play_round(self, agg: Deliberation, number: int, wall_left: float) -> None:
        state = agg.state
        rnd = state.round(number)
        assert rnd is not None
        basis = self._state_at_round_start(state, rnd)
        schema = engine.output_schema(rnd.kind)
        reserved = 0.0
        tasks: dict[str, asyncio.Task[_Outcome]] = {}
        limiter = asyncio.Semaphore(state.config.max_concurrency)
        deadline = self._wall.now() + wall_left
        outcomes: dict[str, _Outcome] = {}
        turns: list[tuple[_Turn, _Plan, tuple[ChatMessage, ...]]] = []
        for name in rnd.expected:
            plan = _Plan.of(rnd, name, schema, state)
            if plan.done:
                continue
            participant = state.participant(name)
            assert participant is not None
            prompt = engine.build_prompt(basis, rnd, name)
            messages = prompt.messages
            max_tokens = participant.max_tokens or state.config.max_tokens
            price = self.provider.price(participant)
            calls = plan.calls_needed
            need = calls * engine.worst_case_cost(messages, max_tokens, price)
            if calls and not engine.budget_allows(state, reserved + need):
                outcomes[name] = self._budget_refusal(state, rnd, name, plan, need, reserved)
                continue
            reserved += need
            turn = _Turn(
                rnd,
                participant,
                max_tokens,
                schema,
                limiter,
                deadline,
                state.config,
                quotes=prompt.quotes,
            )
            turns.append((turn, plan, messages))
        spare = state.config.max_cost_usd - state.cost_usd - reserved
        for turn, plan, messages in turns:
            allowed, worst = engine.continuation_allowance(
                rnd.kind, messages, turn.max_tokens, self.provider.price(turn.participant), spare
            )
            spare -= worst
            turn = dataclasses.replace(turn, continuations=allowed)
            tasks[turn.participant.name] = asyncio.create_task(
                self._participant(turn, plan, messages)
            )
        try:
            for name in rnd.expected:
                if name in tasks:
                    outcomes[name] = await tasks[name]
                if name in outcomes:
                    self._record_outcome(agg, rnd.number, outcomes[name])
        finally:
            for t in tasks.values():
                t.cancel()
        self._complete_round(agg, rnd.number, outcomes)

    def _state_at_round_start(self, state: SessionState, rnd: RoundState) -> SessionState:
        """Prompts see the session as it was when the round began (crash-resume safe)."""
        if rnd.started_position == state.version:
            return state
        return self.ledger.get(UUID(state.id), version=rnd.started_position).state

    def _budget_refusal(
        self,
        state: SessionState,
        rnd: RoundState,
        name: str,
        plan: _Plan,
        need: float,
        reserved: float,
    ) -> _Outcome:
        message = (
            f"call refused: worst-case cost ${need:.4f} on top of ${state.cost_usd:.4f} spent "
            f"and ${reserved:.4f} reserved would overrun max_cost_usd "
            f"${state.config.max_cost_usd:.4f}"
        )
        failure = ev.ProviderCallFailed(
            round=rnd.number,
            participant=name,
            attempt=plan.next_attempt,
            model=_model_of(state, name),
            error_type="budget_cost",
            message=message,
            retryable=False,
            will_retry=False,
        )
        return _Outcome(
            participant=name,
            actions=[_Failure(failure)],
            abstained=True,
            budget="cost",
            last_error=message,
        )

    async def _participant(
        self, turn: _Turn, plan: _Plan, messages: tuple[ChatMessage, ...]
    ) -> _Outcome:
        out = _Outcome(participant=turn.participant.name)
        attempt = plan.next_attempt
        answer_text, stop = plan.answer_text, plan.stop
        if answer_text is None:
            response, attempt = await self._call_with_retries(
                turn, messages, attempt, out, purpose="answer"
            )
            if response is None:
                out.abstained = True
                return out
            out.answered = True
            answer_text, stop = response.content, response.stop_reason
        answer_text, stop, attempt = await self._continue(
            turn, messages, _Cut(answer_text, stop, plan.continuations), attempt, out
        )
        if turn.schema is not None:
            await self._parse(turn, plan, messages, _Cut(answer_text, stop, 0), attempt, out)
        return out

    async def _continue(
        self,
        turn: _Turn,
        messages: tuple[ChatMessage, ...],
        cut: _Cut,
        attempt: int,
        out: _Outcome,
    ) -> tuple[str, StopReason, int]:
        """Ask for the rest of an answer cut off at its token limit, while the engine says
        so and the round's budget allows (``turn.continuations``); each call is recorded."""
        text, stop, done = cut.text, cut.stop, cut.done
        made = 0
        while made < turn.continuations and engine.needs_continuation(turn.rnd.kind, stop, done):
            response, attempt = await self._call_with_retries(
                turn,
                engine.continuation_messages(messages, text),
                attempt,
                out,
                purpose="continuation",
            )
            if response is None:
                break  # the failure is recorded; the answer stays cut off, and says so
            text, stop = text + response.content, response.stop_reason
            done, made = done + 1, made + 1
        return text, stop, attempt

    async def _parse(
        self,
        turn: _Turn,
        plan: _Plan,
        messages: tuple[ChatMessage, ...],
        answer: _Cut,
        attempt: int,
        out: _Outcome,
    ) -> None:
        """Read the structured output of an answer, with one repair call if it cannot be
        read; an answer still unreadable is an abstention (saying so if it was cut off)."""
        rnd, schema = turn.rnd, turn.schema
        assert schema is not None
        parsed = engine.parse_output(rnd.kind, answer.text)
        if parsed.value is None and plan.repair_text is not None:
            parsed = engine.parse_output(rnd.kind, plan.repair_text)
        elif parsed.value is None:
            original_error = parsed.error or "unparseable"
            if answer.stop is StopReason.MAX_TOKENS:
                original_error = engine.cut_off_reason(original_error, turn.max_tokens)
            repair = engine.repair_messages(messages, answer.text, original_error, rnd.kind)
            response, attempt = await self._call_with_retries(
                turn, repair, attempt, out, purpose="repair"
            )
            if response is not None:
                parsed = engine.parse_output(rnd.kind, response.content)
                if parsed.value is None:
                    parsed = engine.ParsedOutput(
                        value=None,
                        error=f"{original_error}; after repair: {parsed.error or 'unparseable'}",
                    )
            elif answer.stop is StopReason.MAX_TOKENS:
                parsed = engine.ParsedOutput(value=None, error=original_error)
        if parsed.value is not None:
            out.actions.append(_Parsed(parsed.value))
        else:
            out.actions.append(_ParseFailed(schema.__name__, parsed.error or ""))
            out.abstained = True

    async def _call_with_retries(
        self,
        turn: _Turn,
        messages: tuple[ChatMessage, ...],
        attempt: int,
        out: _Outcome,
        *,
        purpose: str,
    ) -> tuple[ModelResponse | None, int]:
        rnd, participant = turn.rnd, turn.participant
        first = attempt
        phash = ev.prompt_hash(messages)
        while True:
            call = ProviderCall(
                participant=participant,
                messages=messages,
                max_tokens=turn.max_tokens,
                output_ceiling=engine.output_ceiling(turn.max_tokens),
                temperature=participant.temperature,
                response_format=turn.schema,
                timeout_secs=self._wall.call_timeout(
                    turn.config.call_timeout_secs, turn.deadline
                ),
                round=rnd.number,
                attempt=attempt,
            )
            self._tell(turn, live.ParticipantThinking, model=participant.model, attempt=attempt)
            try:
                if self._wall.exhausted(turn.deadline):
                    raise _time_budget_error()
                async with turn.limiter:
                    response = await self.provider.complete(
                        call, on_delta=self._delta_sink(rnd.number, participant.name)
                    )
            except ProviderCallError as e:
                retry = (
                    e.retryable
                    and attempt - first + 1 < turn.config.max_attempts
                    and e.error_type not in ("budget_time", "budget_cost")
                )
                self._failed(turn, e, attempt, phash, out, retry=retry)
                if not retry:
                    return None, attempt + 1
                await self._sleep(retry_delay(attempt - first + 1, e))
                attempt += 1
                continue
            out.actions.append(
                _Answer(attempt, messages, call, phash, response, purpose, turn.quotes)
            )
            self._turn_over(turn, response.tokens, response.cost_usd)
            return response, attempt + 1

    def _tell(self, turn: _Turn, event: Callable[..., live.LiveEvent], **fields: Any) -> None:
        """Publish a live event about ``turn``: every one names its round and participant."""
        self._publish(event(round=turn.rnd.number, participant=turn.participant.name, **fields))

    def _turn_over(
        self, turn: _Turn, tokens: TokenCount, cost_usd: float, *, failure: str = ""
    ) -> None:
        """Tell the subscribers a participant's turn is over: answered, or ``failure`` (why
        it gave up)."""
        self._tell(
            turn,
            live.ParticipantComplete,
            tokens=tokens,
            cost_usd=cost_usd,
            ok=not failure,
            detail=failure,
        )

    def _failed(
        self,
        turn: _Turn,
        e: ProviderCallError,
        attempt: int,
        phash: str,
        out: _Outcome,
        *,
        retry: bool,
    ) -> None:
        """Note a failed call in ``out`` (to be recorded) and tell the subscribers."""
        rnd, participant = turn.rnd, turn.participant
        out.actions.append(
            _Failure(
                ev.ProviderCallFailed.carrying(
                    e,
                    round=rnd.number,
                    participant=participant.name,
                    attempt=attempt,
                    model=participant.model,
                    will_retry=retry,
                    prompt_hash=phash,
                )
            )
        )
        out.last_error = f"{e.error_type}: {e.message}"
        if e.error_type == "budget_time":
            out.budget = "time"
        self._tell(turn, live.ErrorRaised, message=e.message, will_retry=retry)
        if not retry:
            self._turn_over(turn, e.tokens, e.cost_usd, failure=out.last_error)

    def _delta_sink(self, round_no: int, name: str) -> Callable[[str], None] | None:
        if not self._subscribers:
            return None

        def sink(delta: str) -> None:
            self._publish(live.ContentDelta(round=round_no, participant=name, delta=delta))

        return sink

    # ------------------------------------------------------------------ recording

    def _record_outcome(self, agg: Deliberation, round_no: int, out: _Outcome) -> None:
        for action in out.actions:
            self._record_action(agg, round_no, out.participant, action)
        if out.actions:
            self.ledger.save(agg)

    def _record_action(
        self, agg: Deliberation, round_no: int, name: str, action: _Action
    ) -> None:
        at = self.clock.now()
        if isinstance(action, _Failure):
            agg.record_failure(action.event, at=at)
        elif isinstance(action, _Answer):
            call = action.call
            agg.record_contribution(
                round=round_no,
                participant=name,
                attempt=action.attempt,
                model=call.participant.model,
                messages=action.messages,
                params=ev.CallParams(
                    temperature=call.temperature,
                    max_tokens=call.max_tokens,
                    response_format=(
                        call.response_format.__name__ if call.response_format else None
                    ),
                    api_base=call.participant.api_base,
                ),
                prompt_hash=action.prompt_hash,
                response=action.response,
                purpose=action.purpose,
                quotes=action.quotes,
                at=at,
            )
        elif isinstance(action, _Parsed):
            value = action.value
            if isinstance(value, Critique):
                agg.record_critique(round=round_no, participant=name, critique=value, at=at)
            elif isinstance(value, Opinion):
                agg.record_opinion(round=round_no, participant=name, opinion=value, at=at)
            else:
                agg.record_vote(round=round_no, participant=name, vote=value, at=at)
        else:
            agg.record_parse_failure(
                round=round_no,
                participant=name,
                expected=action.expected,
                error=action.error,
                at=at,
            )

    def _complete_round(
        self, agg: Deliberation, number: int, outcomes: dict[str, _Outcome]
    ) -> None:
        rnd = agg.state.round(number)
        assert rnd is not None
        budgets = {o.budget for o in outcomes.values() if o.budget}
        missing = engine.round_shortfall(agg.state, rnd)
        if missing and not budgets:
            if not self._fall_back(agg, rnd, missing):
                self._pause_on_fault(agg, rnd, missing)
            return
        abstained = [n for n in rnd.expected if n not in rnd.contributors or n in rnd.abstained]
        # RoundCompleted and what the engine derives from it (divergences, the convergence
        # evaluation, techniques) are saved together: a crash between two saves would leave a
        # completed round whose consequences resume never records.
        agg.complete_round(round=number, abstained=abstained, at=self.clock.now())
        rnd = agg.state.round(number)
        assert rnd is not None
        if not rnd.contributions:
            self._budget_after_round(agg, budgets)
            return
        for payload in engine.after_round(agg.state, number):
            self._record_payload(agg, payload)
        result = agg.state.evaluation(number)
        if rnd.kind is RoundKind.CONVERGENCE and result is not None and not result.converged:
            from ..engine import ems

            for suggestion in ems.suggest_techniques(agg.state):
                agg.suggest_technique(suggestion, at=self.clock.now())
        self.ledger.save(agg)
        self._publish(
            live.RoundComplete(
                round=number,
                kind=rnd.kind,
                session_cost_usd=agg.state.cost_usd,
                score=result.score if result else None,
                majority_agrees=result.majority_agrees if result else None,
                contradictions=contradicting_votes(rnd),
            )
        )
        self._checkpoint(agg.state)
        if budgets:
            self._budget_after_round(agg, budgets)

    def _fall_back(self, agg: Deliberation, rnd: RoundState, missing: tuple[str, ...]) -> bool:
        """Hand the round to another participant when the session allows it (the engine
        chooses whom); the run loop then plays the still-open round for the newcomer only."""
        failed = missing[-1]
        chosen = engine.fallback_author(agg.state, rnd, failed)
        if chosen is None:
            return False
        fault = _fault_of(agg.state, rnd, (failed,))
        agg.choose_fallback(
            round=rnd.number,
            failed=failed,
            participant=chosen,
            reason=f"{fault.error_type}: {fault.message}",
            at=self.clock.now(),
        )
        self.ledger.save(agg)
        return True

    def _pause_on_fault(self, agg: Deliberation, rnd: RoundState, missing: tuple[str, ...]) -> None:
        """The round lacks an answer it needs (engine.round_shortfall): pause, keeping the
        round open, so ``resume`` retries only the missing participants. Never an abort: the
        work paid for so far stays resumable."""
        fault = _fault_of(agg.state, rnd, missing)
        others = fault.others_without_answer
        several = f"no answer from {others}" if others else ""
        reason = (
            f"provider fault in round {fault.round} ({fault.kind.value}): {several}"
            f"{fault.participant} ({fault.model}) failed {fault.attempts} attempt(s): "
            f"{fault.error_type}: {fault.message}"
        )
        agg.pause(reason=reason, fault=fault, at=self.clock.now())
        self.ledger.save(agg)
        self._checkpoint(agg.state, force=True)
        self._publish(live.SessionFinished(status=SessionStatus.PAUSED.value, reason=reason))

    def _budget_after_round(self, agg: Deliberation, budgets: set[str]) -> None:
        state = agg.state
        if "time" in budgets:
            elapsed = (state.updated_at - state.created_at).total_seconds()
            self._stop_for_budget(
                agg,
                "time",
                float(state.config.max_time_secs),
                elapsed,
                "max_time_secs reached during a round",
            )
        else:
            self._stop_for_budget(
                agg,
                "cost",
                state.config.max_cost_usd,
                state.cost_usd,
                "the next call could overrun max_cost_usd",
            )

    def _record_payload(self, agg: Deliberation, payload: ev.Payload) -> None:
        at = self.clock.now()
        if isinstance(payload, ev.DivergenceDetected):
            agg.detect_divergence(payload, at=at)
        elif isinstance(payload, ev.ConvergenceEvaluated):
            agg.evaluate_convergence(payload, at=at)
        elif type(payload) in _DIVERGENCE_STATUS:
            change: Any = payload
            agg.change_divergence(
                change.divergence_id,
                _DIVERGENCE_STATUS[type(payload)],
                round=change.round,
                note=change.note,
                by=change.by,
                at=at,
            )
        elif isinstance(payload, ev.TechniqueSuggested):
            agg.suggest_technique(payload, at=at)
        else:
            raise TypeError(f"engine returned an unexpected event {payload.TYPE}")

    # ------------------------------------------------------------------ plumbing

    def _publish(self, event: live.LiveEvent) -> None:
        for s in self._subscribers:
            s(event)

    def _checkpoint(self, state: SessionState, *, force: bool = False) -> None:
        phase = state.phase
        if self._on_checkpoint is None:
            self._last_phase = phase
            return
        if force or phase != self._last_phase:
            self._on_checkpoint(state)
        self._last_phase = phase


@dataclass(frozen=True)
class _Turn:
    """One participant's part in one round: what all of its calls (answer, retries, repair)
    share."""

    rnd: RoundState
    participant: Participant
    max_tokens: int
    schema: type[BaseModel] | None
    limiter: asyncio.Semaphore
    deadline: float
    config: SessionConfig
    continuations: int = 0
    """Continuation calls the round's budget leaves this turn (engine.continuation_allowance)."""
    quotes: tuple[str, ...] = ()
    """The answers its prompt quotes (``engine.Prompt.quotes``), recorded with each call."""


@dataclass(frozen=True)
class _Cut:
    """An answer so far: its text, how its last call stopped, and how often it was continued."""

    text: str
    stop: StopReason
    done: int


@dataclass(frozen=True)
class _Plan:
    """What a participant still owes in an open round (after a crash, some is recorded)."""

    done: bool
    next_attempt: int
    answer_text: str | None
    repair_text: str | None
    calls_needed: int
    stop: StopReason = StopReason.END_TURN
    """How the latest call of the answer so far stopped (cut off: it may be continued)."""
    continuations: int = 0
    """Continuation calls the answer so far has had."""

    @classmethod
    def of(
        cls, rnd: RoundState, name: str, schema: type[BaseModel] | None, state: SessionState
    ) -> _Plan:
        contributions = [c for c in rnd.contributions if c.participant == name]
        failures = [f for f in state.failures if f.round == rnd.number and f.participant == name]
        attempts = [c.attempt for c in contributions] + [f.attempt for f in failures]
        next_attempt = max(attempts, default=0) + 1
        answer = next((c for c in contributions if c.purpose == "answer"), None)
        repair = next((c for c in contributions if c.purpose == "repair"), None)
        continued = [c for c in contributions if c.purpose == "continuation"]
        so_far = continued[-1] if continued else answer
        gave_up = _gave_up(state, failures, so_far, repair)
        pending = (
            so_far is not None
            and not gave_up
            and repair is None
            and engine.needs_continuation(rnd.kind, so_far.response.stop_reason, len(continued))
        )
        if so_far is not None and (_parsed(rnd, name) or (schema is None and not pending)):
            return cls(True, next_attempt, state.answer(so_far), None, 0)
        if gave_up or name in rnd.abstained or name in rnd.replaced:
            return cls(True, next_attempt, None, None, 0)
        if so_far is None:
            return cls(False, next_attempt, None, None, engine.reserved_calls(rnd.kind))
        return cls(
            False,
            next_attempt,
            state.answer(so_far),
            state.answer(repair) if repair else None,
            int(pending) + (0 if repair or schema is None else 1),
            stop=so_far.response.stop_reason,
            continuations=len(continued),
        )


def _gave_up(
    state: SessionState,
    failures: list[Any],
    so_far: ContributionState | None,
    repair: ContributionState | None,
) -> bool:
    """Whether the participant's last call failed for good after its answer so far. One that
    gave up before the session resumed (from a fault pause) gets a fresh set of attempts:
    only giving up since then counts."""
    recent = [f for f in failures if f.position > state.resumed_position]
    return (
        bool(recent)
        and not recent[-1].will_retry
        and (so_far is None or (repair is None and recent[-1].attempt > so_far.attempt))
    )


def _parsed(rnd: RoundState, name: str) -> bool:
    """Whether the participant's answer in ``rnd`` was read (or found unreadable) already."""
    c = rnd.contribution_of(name)
    return c is not None and (
        c.critique is not None
        or c.opinion is not None
        or c.vote is not None
        or c.parse_error is not None
    )


def _fault_of(state: SessionState, rnd: RoundState, missing: tuple[str, ...]) -> ev.PauseFault:
    """The fault to record: the first missing participant's failures since the last resume."""
    def failures_of(name: str) -> list[Any]:
        return [
            f
            for f in state.failures
            if f.round == rnd.number
            and f.participant == name
            and f.position > state.resumed_position
        ]

    name = next((n for n in missing if failures_of(n)), missing[0])
    failures = failures_of(name)
    last = failures[-1] if failures else None
    return ev.PauseFault(
        round=rnd.number,
        kind=rnd.kind,
        participant=name,
        model=_model_of(state, name),
        error_type=last.error_type if last else "unknown",
        message=last.message if last else "no answer was recorded",
        attempts=len(failures),
        missing=missing,
    )


def _model_of(state: SessionState, name: str) -> str:
    p = state.participant(name)
    return p.model if p else ""


def _time_budget_error() -> ProviderCallError:
    return ProviderCallError(
        error_type="budget_time",
        message="call not made: the session's max_time_secs is used up",
        retryable=False,
        retry_after_secs=None,
        partial_text="",
        tokens=TokenCount(),
        cost_usd=0.0,
        duration_ms=0,
    )
