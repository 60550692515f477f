"""Named stories of sessions for the read-side tests, each told with
:class:`forge_ledger.testing.SessionBuilder` (the real aggregate commands, so every invariant
is checked) on a fixed-step clock, so the events are reproducible.

- **The rate limiter** among alice (drafter), bob (critic) and carol (synthesizer): ``story``
  starts it, ``play`` tells one :class:`Iteration` (alice drafts, the others critique her,
  dissent may open, a person may steer, carol synthesizes, dissent may close, everyone votes).
  ``THREE_ITERATIONS`` is the story most tests use; ``audited``, ``hostile`` (markup in
  everything a model or a person can write) and ``markdown`` (every Markdown construct the
  report page renders) are the report's variants.
- **The priced session** of P1..Pn (``priced_session``): every contribution's tokens and cost
  are known, so tests compute expected figures instead of hard-coding them.
- **Feature auth** among Alice, Bob and Carol, one minute per event (``feature_auth``): the
  YAML, EMS and lineage tests.
- **Cache design** (``cache_design_session``): the conformity story of the views tests.
- **Seeded random sessions** (``random_sessions``): interleaved in one ledger, as concurrent runs
  write them, for the projection tests.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from forge_ledger.clock import Clock, FixedStepClock
from forge_ledger.domain import events as ev
from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.values import (
    ChatMessage,
    DivergenceStatus,
    Mode,
    ModelResponse,
    Participant,
    ParticipantRole,
    Price,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Stance,
    Suggestion,
    SuggestionCategory,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger
from forge_ledger.testing import SessionBuilder

# --------------------------------------------------------------------------- the rate limiter

PARTICIPANTS = (
    Participant(name="alice", model="openai/alpha", role=ParticipantRole.DRAFTER),
    Participant(name="bob", model="openai/beta", role=ParticipantRole.CRITIC),
    Participant(name="carol", model="openai/gamma", role=ParticipantRole.SYNTHESIZER),
)
ANSWERS = {
    "params": ev.CallParams(temperature=0.7, max_tokens=256),
    "tokens": TokenCount(input=10, output=20),
    "cost_usd": 10 * 0.001,
}
"""Every answer of the story costs the same."""


@dataclass
class Iteration:
    """One scripted iteration: votes by participant, what critics say, dissent to open/close."""

    votes: Mapping[str, Stance]
    critiques: bool = True
    synthesis: bool = True
    vote_reasons: Mapping[str, str] = field(default_factory=dict)
    open_dissent: Sequence[tuple[str, str, str]] = ()
    """(divergence id, topic, dissenting participant) opened after the critique round."""
    close_dissent: Sequence[tuple[str, DivergenceStatus, str]] = ()
    """(divergence id, new status, by) applied after the synthesis."""
    human_note: str | None = None
    failure_for: str | None = None


def story(
    session_id: uuid.UUID,
    *,
    clock: Clock | None = None,
    title: str = "Rate limiter design",
) -> SessionBuilder:
    """The rate-limiter session, started: alice, bob and carol, 2 agreeing votes converge."""
    return SessionBuilder(clock=clock or FixedStepClock(), answer_defaults=ANSWERS).start(
        Topic(title=title, description="Design a token-bucket rate limiter."),
        participants=PARTICIPANTS,
        config=SessionConfig(min_consensus=2, convergence_threshold=0.6),
        session_id=session_id,
    )


def continued(aggregate: Deliberation) -> SessionBuilder:
    """The story continued on an existing session (a fork), with a fresh clock."""
    return SessionBuilder.of(aggregate, clock=FixedStepClock(), answer_defaults=ANSWERS)


def play(b: SessionBuilder, it: Iteration) -> SessionBuilder:
    """One iteration of the story (see the module docstring)."""
    k = b.state.iteration + 1
    alice, critics, carol = b.names[0], b.names[1:], b.names[-1]
    if k == 1:
        b.round(RoundKind.DRAFT, iteration=k,
                answers={alice: f"Draft v1 of the limiter ({k})"}, close=True)
    critique_round = 0
    if it.critiques:
        b.round(RoundKind.CRITIQUE, iteration=k, participants=critics,
                targets=dict.fromkeys(critics, alice))
        critique_round = b.round_number
        for c in critics:
            if it.failure_for == c:
                b.fail(c, model="openai/x", tokens=TokenCount(input=3), cost_usd=0.0005)
            b.answer(c, f"{c} critique in iteration {k}: bursts unbounded")
            b.critique(c, target=alice, weaknesses=(f"weakness seen by {c}",), score=60)
        b.close_round()
    for did, topic, who in it.open_dissent:
        b.diverge(did, topic, {who: (f"{who} objects: {topic}", Stance.STRONGLY_DISAGREE)},
                  round=critique_round or max(len(b.state.rounds), 1),
                  strongest=Stance.STRONGLY_DISAGREE)
    if it.human_note:
        b.human(it.human_note, author="dana", kind="steer")
    if it.synthesis:
        b.round(RoundKind.SYNTHESIS, iteration=k,
                answers={carol: f"Synthesis {k}: merge critiques"}, close=True)
    for did, status, by in it.close_dissent:
        b.settle(did, status, round=len(b.state.rounds), by=by,
                 note=f"{status.value} by {by or 'the group'}")
    return vote(b, it.votes, it.vote_reasons, iteration=k)


def vote(b: SessionBuilder, stances: Mapping[str, Stance], reasons: Mapping[str, str],
         *, iteration: int) -> SessionBuilder:
    """A convergence round where each votes its stance, then its evaluation."""
    b.round(RoundKind.CONVERGENCE, iteration=iteration, participants=list(stances))
    for name, stance in stances.items():
        b.answer(name, f"vote {stance.value}")
        b.vote(name, agrees=stance.agrees, stance=stance, score=80 if stance.agrees else 30,
               concerns=() if stance.agrees else (f"{name}: burst handling",),
               reasoning=reasons.get(name, ""))
    b.close_round()
    agree = sum(1 for s in stances.values() if s.agrees)
    disagree = sum(1 for s in stances.values() if s.disagrees)
    score = round(agree / len(stances), 4)
    cfg = b.state.config
    return b.evaluate(
        iteration=iteration, score=score,
        converged=score >= cfg.convergence_threshold and agree >= cfg.min_consensus,
        majority_agrees=agree * 2 > len(stances), agree=agree, disagree=disagree,
        partial=len(stances) - agree - disagree, threshold=cfg.convergence_threshold,
    )


def build(
    session_id: uuid.UUID,
    iterations: Sequence[Iteration],
    *,
    finish: SessionStatus | None = SessionStatus.CONVERGED,
    clock: Clock | None = None,
) -> Deliberation:
    """The whole story: every iteration, then ``finish`` (none: left running)."""
    b = story(session_id, clock=clock)
    for it in iterations:
        play(b, it)
    if finish is not None:
        b.finish(finish, reason="test script ended")
    return b.aggregate


S = Stance
THREE_ITERATIONS = (
    Iteration(
        votes={"alice": S.AGREE, "bob": S.DISAGREE, "carol": S.DISAGREE},
        open_dissent=[("d1", "burst limits", "bob")],
        failure_for="bob",
    ),
    Iteration(
        votes={"alice": S.AGREE, "bob": S.DISAGREE, "carol": S.AGREE},
        vote_reasons={"carol": "the synthesis bounded bursts"},
        open_dissent=[("d2", "clock skew", "carol")],
        close_dissent=[("d2", DivergenceStatus.RESOLVED, "")],
        human_note="Focus on distributed deployments.",
    ),
    Iteration(
        votes={"alice": S.AGREE, "bob": S.AGREE, "carol": S.AGREE},
        critiques=False,
        synthesis=False,
    ),
)
"""alice agrees throughout; carol changes after a synthesis; bob flips in iteration 3 with no
critique, synthesis or human input before the vote (a conformity flip); d1 stays open."""


# --------------------------------------------------------------------------- cache design

CACHE_SID = uuid.UUID("00000000-0000-4000-8000-00000000abcd")
CACHE_SYNTHESIS_TEXT = (
    "One cache per node.\nThe cache uses LRU eviction. Entries expire after a day."
)


def cache_design_session(ledger: Ledger) -> Deliberation:
    """A, B, C, D, E vote twice; the first vote's majority agrees (A, D, E). Between the votes
    A critiques B's draft, then A's synthesis answers B's divergence (eviction, "addressed")
    but not C's (ttl). B and C both move to agree: B was answered, C was not (conformity)."""
    b = SessionBuilder(store=ledger, answer_defaults={
        "messages": [ChatMessage(role="user", content="go")],
        "params": ev.CallParams(temperature=0.2, max_tokens=256),
        "tokens": TokenCount(input=10, output=5), "cost_usd": 0.01,
    })
    b.start("Cache design", participants=[Participant(name=n, model=f"openai/{n}")
                                          for n in "ABCDE"], session_id=CACHE_SID)

    def everyone_votes(stances: Mapping[str, Stance]) -> None:
        for n in stances:
            b.answer(n, f"text of {n}")
        for n, s in stances.items():
            b.vote(n, agrees=s.agrees, stance=s, score=70, reasoning="the cache is fine")
        b.close_round()

    b.round(RoundKind.DRAFT, iteration=1, answers={n: f"text of {n}" for n in "ABC"}, close=True)
    b.round(RoundKind.CONVERGENCE, iteration=1, participants="ABCDE")
    everyone_votes({"A": S.AGREE, "B": S.DISAGREE, "C": S.DISAGREE, "D": S.AGREE, "E": S.AGREE})
    b.evaluate(score=0.6, converged=False, majority_agrees=True, agree=3, disagree=2,
               partial=0, threshold=0.85)
    (b.round(RoundKind.CRITIQUE, iteration=2, targets={"A": "B"}, answers={"A": "text of A"})
     .critique("A", target="B", weaknesses=("ignores eviction",),
               suggestions=(Suggestion(text="add LRU"),), score=40)
     .close_round()
     .diverge("d1", "eviction", {"A": ("LRU", S.AGREE), "B": ("none", S.STRONGLY_DISAGREE)},
              strongest=S.STRONGLY_DISAGREE)
     .diverge("d2", "ttl", {"C": ("1h", S.DISAGREE), "A": ("1d", S.AGREE)})
     .round(RoundKind.SYNTHESIS, iteration=2, answers={"A": CACHE_SYNTHESIS_TEXT}, close=True)
     .settle("d1", DivergenceStatus.ADDRESSED, note="synthesis adds LRU")
     .round(RoundKind.CONVERGENCE, iteration=2, participants="ABCDE"))
    everyone_votes(dict.fromkeys("ABCDE", S.AGREE))
    b.evaluate(score=0.9, converged=True, majority_agrees=True, agree=5, disagree=0,
               partial=0, threshold=0.85)
    b.settle("d1", DivergenceStatus.RESOLVED, by="B").save()
    return b.aggregate


# --------------------------------------------------------------------------- its report variants

SCRIPT = "<script>document.title='pwned'</script>"
IMG = '<img src=x onerror="document.title=\'pwned\'">'
HOSTILE_DOC = (
    f"# Limits {SCRIPT}\n\nEvery key gets a bucket. {IMG} Bursts are capped at 2x.\n"
    "Headers say what is left."
)


def audited(ledger: Ledger, sid: uuid.UUID) -> None:
    ledger.save(build(sid, THREE_ITERATIONS))


def hostile(ledger: Ledger, sid: uuid.UUID) -> None:
    b = story(sid, title=f"Rate limits {SCRIPT}")
    play(b, Iteration(
        votes={"alice": Stance.AGREE, "bob": Stance.DISAGREE, "carol": Stance.AGREE},
        open_dissent=[("d1", f"bursts {IMG}", "bob")],
        synthesis=False,
    ))
    b.round(RoundKind.SYNTHESIS, iteration=b.state.iteration + 1,
            answers={"carol": HOSTILE_DOC}, close=True)
    b.finish(SessionStatus.COMPLETE, reason="test script ended")
    ledger.save(b.aggregate)


MARKDOWN_RESPONSE = (
    "## Scope\nEvery client gets a **token bucket. Bursts** are capped at twice the rate.\n\n"
    "- Buckets refill every second.\n"
)
MARKDOWN_DOC = (
    "# Rate limiter\n\n"
    + MARKDOWN_RESPONSE.replace("\n\n-", " See [RFC 6585](https://example.org/rfc6585) and "
                                "`Retry-After`.\n\n-")
    + f"- Headers say what is left: {SCRIPT}\n\n"
    "### Limits\n"
    "| Tier | Rate |\n|:-----|-----:|\n| free | 10/s |\n| paid | 100/s |\n\n"
    "```toml\nrate = 10\nburst = 20\n```\n\n"
    f"1. Reject with 429. {IMG}\n2. Log the rejection. ![limits diagram](limits.png)\n"
)


def markdown(ledger: Ledger, sid: uuid.UUID) -> None:
    b = story(sid, title="Rate limits")
    play(b, Iteration(votes={"alice": Stance.AGREE, "bob": Stance.AGREE, "carol": Stance.AGREE},
                      synthesis=False))
    k = b.state.iteration + 1
    b.round(RoundKind.RESPONSE, iteration=k, answers={"alice": MARKDOWN_RESPONSE}, close=True)
    b.round(RoundKind.SYNTHESIS, iteration=k, answers={"carol": MARKDOWN_DOC}, close=True)
    b.finish(SessionStatus.COMPLETE, reason="test script ended")
    ledger.save(b.aggregate)


# --------------------------------------------------------------------------- the priced session

INPUT_TOKENS = 100
"""Input tokens of contribution number ``i`` (1-based, session-wide) = INPUT_TOKENS + i."""
OUTPUT_TOKENS = 40
"""Output tokens of contribution number ``i`` = OUTPUT_TOKENS + 2*i."""
_PRICE_IN = 1e-6
_PRICE_OUT = 3e-6

VARIED_ROLES = (
    ParticipantRole.SYNTHESIZER,
    ParticipantRole.CRITIC,
    ParticipantRole.DOMAIN_EXPERT,
    ParticipantRole.DEVILS_ADVOCATE,
    ParticipantRole.GENERALIST,
)
"""The roles P1, P2, … of the priced session take in turn."""


def cost_of(tokens: TokenCount) -> float:
    """The USD cost the builders record for ``tokens`` (a fixed user price)."""
    return tokens.input * _PRICE_IN + tokens.output * _PRICE_OUT


def numbered_participants(n: int, *, roles: Sequence[ParticipantRole] = ()) -> list[Participant]:
    """``n`` participants P1..Pn on distinct ``openai/model-i`` models, taking ``roles`` in turn
    (generalists when none are given)."""
    return [
        Participant(name=f"P{i}", model=f"openai/model-{i}",
                    role=roles[(i - 1) % len(roles)] if roles else ParticipantRole.GENERALIST)
        for i in range(1, n + 1)
    ]


def contribution_text(kind: RoundKind, participant: str, iteration: int) -> str:
    """The text a builder session records for one contribution (deterministic)."""
    return (
        f"{kind.value.capitalize()} by {participant} in iteration {iteration}.\n"
        f"Section A: the proposal as {participant} sees it after iteration {iteration}.\n"
        f"Section B: details and trade-offs ({kind.value})."
    )


@dataclass
class BuiltSession:
    """What a builder recorded: enough for tests to compute expected projections."""

    id: uuid.UUID
    title: str
    participants: list[Participant]
    iterations: int
    converged: bool
    iteration_end: dict[int, int] = field(default_factory=dict)
    """iteration → position of its last event (what ``--at-iteration`` selects)."""
    tokens: TokenCount = field(default_factory=TokenCount)
    cost_usd: float = 0.0
    contributions: int = 0
    timestamps: dict[int, datetime] = field(default_factory=dict)
    """position → recorded timestamp of that event."""

    @property
    def prefix(self) -> str:
        return self.id.hex[:8]


def priced_session(
    ledger: Ledger,
    *,
    iterations: int = 2,
    participants: int = 3,
    converge: bool = True,
    clock: Clock | None = None,
    session_id: uuid.UUID | None = None,
    title: str = "Design a rate limiter",
) -> BuiltSession:
    """Record a whole deliberation of P1..Pn; each iteration ``k`` is:

    1. a draft round (iteration 1) or a refinement round where each also records an opinion
       and the divergence of iteration ``k - 1`` is resolved;
    2. a critique round where P(i) critiques P(i+1);
    3. unless the session converges in this iteration, divergence ``div-k`` between P1 and P2;
    4. a synthesis round by P1;
    5. a convergence round where everyone votes, then its evaluation: only the last iteration
       of a ``converge=True`` session agrees (and the session converges).

    Contribution texts come from :func:`contribution_text`; contribution number ``i``
    (session-wide) costs INPUT_TOKENS + i tokens in and OUTPUT_TOKENS + 2*i out.
    ``clock`` defaults to a fresh :class:`FixedStepClock` (2026-01-01T00:00:00Z, +1 s per
    event); pass a shared clock to keep several sessions' timestamps distinct. Each round is
    saved separately, as the orchestrator does.
    """
    if iterations < 1 or participants < 2:
        raise ValueError("a session needs at least one iteration and two participants")
    people = numbered_participants(participants, roles=VARIED_ROLES)
    b = SessionBuilder(clock=clock or FixedStepClock(), store=ledger).start(
        Topic(title=title, description="How should the service limit request rates?"),
        participants=people,
        config=SessionConfig(convergence_threshold=0.8, min_consensus=2),
        session_id=session_id or uuid.uuid4(),
    )
    built = BuiltSession(
        id=b.id, title=title, participants=people, iterations=iterations, converged=converge,
        timestamps=b.saved_at,
    )
    b.save()
    for k in range(1, iterations + 1):
        _priced_iteration(b, built, k, agrees=converge and k == iterations)
        built.iteration_end[k] = b.aggregate.version
    return built


def _priced_round(b: SessionBuilder, built: BuiltSession, kind: RoundKind, iteration: int,
                  names: list[str], targets: dict[str, str] | None = None) -> None:
    """Start a round where each of ``names`` contributes; contribution number ``i`` (counted
    session-wide) costs INPUT_TOKENS + i tokens in and OUTPUT_TOKENS + 2*i out."""
    b.round(kind, iteration=iteration, participants=names, targets=targets)
    for name in names:
        built.contributions += 1
        i = built.contributions
        tokens = TokenCount(input=INPUT_TOKENS + i, output=OUTPUT_TOKENS + 2 * i)
        participant = next(p for p in built.participants if p.name == name)
        b.answer(
            name,
            contribution_text(kind, name, iteration),
            messages=[
                ChatMessage(role="system", content=f"You are {name}."),
                ChatMessage(role="user",
                            content=f"{kind.value} round {b.round_number} on {built.title!r}"),
            ],
            params=ev.CallParams(temperature=participant.temperature, max_tokens=512),
            tokens=tokens, cost_usd=cost_of(tokens), duration_ms=100 * i,
        )
        built.tokens = built.tokens + tokens
        built.cost_usd += cost_of(tokens)


def _priced_iteration(b: SessionBuilder, built: BuiltSession, k: int, *, agrees: bool) -> None:
    """Iteration ``k``: draft or refinement, critique, synthesis, convergence (saved after each)."""
    names = b.names
    if k == 1:
        _priced_round(b, built, RoundKind.DRAFT, k, names)
    else:
        _priced_round(b, built, RoundKind.REFINEMENT, k, names)
        for i, name in enumerate(names):
            b.opinion(name, stance=Stance.AGREE if i % 2 == 0 else Stance.PARTIAL,
                      reasoning=f"{name} on iteration {k}", concerns=(f"concern of {name}",),
                      strength=0.6, topics=("limits",))
    b.close_round()
    if k > 1:
        b.settle(f"div-{k - 1}", DivergenceStatus.RESOLVED, note="settled")
    b.save()

    targets = {names[i]: names[(i + 1) % len(names)] for i in range(len(names))}
    _priced_round(b, built, RoundKind.CRITIQUE, k, names, targets)
    for i, name in enumerate(names):
        b.critique(
            name, target=targets[name], strengths=(f"clear structure ({targets[name]})",),
            weaknesses=(f"missing burst handling (iteration {k})",),
            suggestions=(Suggestion(text="add a token bucket", section="Section B",
                                    priority=1 + i % 5,
                                    category=SuggestionCategory.COMPLETENESS),),
            score=60 + 10 * k + i,
        )
    b.close_round()
    if not agrees:
        b.diverge(f"div-{k}", f"burst size (iteration {k})",
                  {names[0]: ("fixed bursts", Stance.AGREE),
                   names[1]: ("adaptive bursts", Stance.STRONGLY_DISAGREE)},
                  strongest=Stance.STRONGLY_DISAGREE)
    b.save()

    _priced_round(b, built, RoundKind.SYNTHESIS, k, names[:1])
    b.close_round().save()

    _priced_round(b, built, RoundKind.CONVERGENCE, k, names)
    votes = [agrees or i == 0 for i in range(len(names))]
    for name, yes in zip(names, votes, strict=True):
        b.vote(name, agrees=yes, score=90 if yes else 40, concerns=() if yes else ("bursts",))
    b.close_round()
    n, agree_count = len(names), sum(votes)
    b.evaluate(
        iteration=k, score=round(agree_count / n, 4), converged=agrees,
        majority_agrees=agree_count * 2 > n, agree=agree_count, disagree=n - agree_count,
        partial=0, threshold=0.8, blocking=() if agrees else (names[1],),
        remaining_issues=() if agrees else ("burst size",),
    )
    if agrees:
        b.finish(SessionStatus.CONVERGED, reason="all agree", score=1.0)
    b.save()


# --------------------------------------------------------------------------- feature auth

FEATURE_AUTH_NAMES = ("Alice", "Bob", "Carol")


def minute_clock() -> FixedStepClock:
    return FixedStepClock(datetime(2026, 1, 9, 10, 30, tzinfo=UTC), timedelta(minutes=1))


def minute_builder(c: FixedStepClock | None = None) -> SessionBuilder:
    """A builder whose answers are ``openai/fake``'s, to the prompt ``round N``."""
    return SessionBuilder(
        clock=c or minute_clock(),
        answer_defaults={"model": "openai/fake",
                         "params": ev.CallParams(temperature=0.0, max_tokens=100)},
        prompt=lambda number, _name: [ChatMessage(role="user", content=f"round {number}")],
    )


def feature_auth(
    *,
    iterations: int = 2,
    title: str = "Feature Auth",
    mode: Mode = Mode.STANDARD,
    critique_scores: tuple[int, ...] = (60, 70, 80),
    vote_agree: tuple[bool, ...] = (True, True, False),
    questions: bool = True,
    session_id: uuid.UUID | None = None,
    c: FixedStepClock | None = None,
) -> Deliberation:
    """A session with ``iterations`` full cycles: draft, critique, synthesis, convergence."""
    b = minute_builder(c).start(
        Topic(title=title),
        participants=[Participant(name=n, model=f"openai/{n.lower()}") for n in FEATURE_AUTH_NAMES],
        config=SessionConfig(mode=mode),
        session_id=session_id or uuid.uuid5(uuid.NAMESPACE_URL, title),
    )
    for it in range(1, iterations + 1):
        _feature_auth_iteration(b, it, critique_scores=critique_scores, vote_agree=vote_agree,
                                questions=questions)
    return b.aggregate


def _feature_auth_iteration(b: SessionBuilder, it: int, *, critique_scores: tuple[int, ...],
                            vote_agree: tuple[bool, ...], questions: bool) -> None:
    names = FEATURE_AUTH_NAMES
    b.round(RoundKind.DRAFT, iteration=it, answers={n: f"draft {it} by {n}" for n in names},
            close=True)
    targets = {names[i]: names[(i + 1) % 3] for i in range(3)}
    b.round(RoundKind.CRITIQUE, iteration=it, participants=names, targets=targets)
    for i, n in enumerate(names):
        b.answer(n, f"critique {it} by {n}, see {targets[n]}")
        b.critique(n, target=targets[n], weaknesses=(f"weak point {it}",),
                   suggestions=(Suggestion(text=f"Add section {it}-{i}", priority=1 + i),
                                Suggestion(text="Clarify the token storage", priority=2)),
                   score=critique_scores[i % len(critique_scores)])
        b.opinion(n, stance=Stance.AGREE if i else Stance.DISAGREE,
                  reasoning=f"{n} thinks {targets[n]} is partly right",
                  concerns=(f"concern of {n} in {it}",))
    b.close_round()
    if it == 1:
        b.diverge(f"d{it}", "token storage",
                  {"Alice": ("DB", Stance.AGREE), "Bob": ("Redis", Stance.DISAGREE)})
    b.round(RoundKind.SYNTHESIS, iteration=it, answers={names[0]: f"synthesis {it}"},
            close=True)
    if questions:
        b.ask(f"Question {it}a?", f"Question {it}b?").human(f"Answer {it}")
    b.round(RoundKind.CONVERGENCE, iteration=it, participants=names)
    agree = 0
    for i, n in enumerate(names):
        ok = vote_agree[i % len(vote_agree)]
        agree += ok
        b.answer(n, f"vote {it} by {n}").vote(n, agrees=ok, score=80 if ok else 30)
    b.close_round()
    b.evaluate(iteration=it, score=round(min(1.0, 0.2 + 0.2 * it + 0.1 * agree), 4),
               converged=False, majority_agrees=agree >= 2, agree=agree,
               disagree=3 - agree, partial=0, threshold=0.85)
    if it == 1:
        b.settle("d1", DivergenceStatus.RESOLVED)


# --------------------------------------------------------------------------- seeded random sessions

PRICE = Price(input_cost_per_token=1e-6, output_cost_per_token=2e-6)
STANCES = list(Stance)
PARAMS = ev.CallParams(temperature=0.2, max_tokens=256)


def _answer(text: str, rng: random.Random) -> ModelResponse:
    tokens = TokenCount(input=rng.randint(10, 500), output=rng.randint(10, 300))
    return ModelResponse(
        content=text, model="openai/fake", tokens=tokens, cost_usd=PRICE.cost(tokens),
        price=PRICE, duration_ms=rng.randint(1, 900),
    )


class SessionScript:
    """Builds one session step by step; each ``step()`` appends one round's worth of events."""

    def __init__(self, seed: int, index: int, clock: FixedStepClock) -> None:
        self.rng = random.Random(seed * 1000 + index)
        self.names = [f"P{i}" for i in range(1, self.rng.randint(2, 4) + 1)]
        self.b = SessionBuilder(clock=clock).start(
            Topic(title=f"Topic {index} of {seed}", description="what to build"),
            participants=[Participant(name=n, model=f"openai/m{n}") for n in self.names],
            session_id=uuid.uuid5(uuid.NAMESPACE_URL, f"proj-{seed}-{index}"),
        )
        self.agg = self.b.aggregate
        self.iterations = self.rng.randint(1, 3)
        self.div_counter = 0

    def _contribute(self, name: str, kind: RoundKind, it: int) -> None:
        rng = self.rng
        if rng.random() < 0.1:
            self.b.fail(name, message="429", cost_usd=0.0)
        text = f"{kind.value} by {name} in iteration {it}: " + rng.choice(
            ["caching layer", "event sourcing", "sharded queue", "retry budget", "audit trail"],
        )
        response = _answer(text, rng)
        self.b.answer(name, response=response, params=PARAMS,
                      messages=[ChatMessage(role="user", content=f"do the {kind.value}")],
                      attempt=2 if rng.random() < 0.1 else 1)

    def _parsed(self, kind: RoundKind, i: int, name: str) -> None:
        """What the round's kind parses from ``name``'s answer (drawn from the seed)."""
        rng, b, names = self.rng, self.b, self.names
        if kind is RoundKind.CRITIQUE:
            sugg = tuple(Suggestion(text=f"improve {rng.choice('abc')}",
                                    priority=rng.randint(1, 5))
                         for _ in range(rng.randint(0, 2)))
            b.critique(name, target=names[(i + 1) % len(names)],
                       weaknesses=("vague",) if rng.random() < 0.5 else (),
                       suggestions=sugg, score=rng.randint(0, 100))
        elif kind is RoundKind.REFINEMENT:
            b.opinion(name, stance=rng.choice(STANCES),
                      concerns=("latency",) if rng.random() < 0.3 else ())
        elif kind is RoundKind.CONVERGENCE:
            if rng.random() < 0.1:
                b.parse_failure(name, expected="vote", error="no json")
                return
            stance = rng.choice(STANCES)
            b.vote(name, agrees=stance.agrees, score=rng.randint(0, 100), stance=stance,
                   concerns=("cost",) if rng.random() < 0.3 else (),
                   reasoning=rng.choice(["same", "same", "because of the cache"]))

    def _after(self, kind: RoundKind, it: int) -> None:
        """The round's evaluation, divergence and divergence changes (drawn from the seed)."""
        rng, b, names = self.rng, self.b, self.names
        if kind is RoundKind.CONVERGENCE:
            votes = [c.vote for c in b.state.round(b.round_number).contributions if c.vote]
            agree = sum(1 for v in votes if v.agrees)
            b.evaluate(iteration=it, score=rng.random(), converged=False,
                       majority_agrees=agree * 2 > len(votes), agree=agree,
                       disagree=len(votes) - agree, partial=0, threshold=0.85)
        if kind is RoundKind.CRITIQUE and rng.random() < 0.7:
            self.div_counter += 1
            b.diverge(f"div-{self.div_counter}", rng.choice(["storage", "api shape"]),
                      {names[0]: ("x", Stance.AGREE),
                       names[1]: ("y", rng.choice([Stance.DISAGREE, Stance.STRONGLY_DISAGREE]))},
                      strongest=Stance.DISAGREE)
        for d in list(b.state.open_divergences):
            if rng.random() < 0.3:
                status = rng.choice([DivergenceStatus.ADDRESSED, DivergenceStatus.RESOLVED,
                                     DivergenceStatus.WITHDRAWN, DivergenceStatus.OVERRULED])
                if d.status is DivergenceStatus.ADDRESSED and status is d.status:
                    status = DivergenceStatus.RESOLVED
                b.settle(d.id, status, note="n",
                         by="human" if status is DivergenceStatus.OVERRULED else "")

    def rounds(self) -> Iterator[None]:
        """Yields after each round (callers save there)."""
        names = self.names
        for it in range(1, self.iterations + 1):
            kinds = [RoundKind.DRAFT if it == 1 else RoundKind.REFINEMENT, RoundKind.CRITIQUE,
                     RoundKind.SYNTHESIS, RoundKind.CONVERGENCE]
            for kind in kinds:
                who = names[:1] if kind is RoundKind.SYNTHESIS else names
                targets = (
                    {n: names[(i + 1) % len(names)] for i, n in enumerate(names)}
                    if kind is RoundKind.CRITIQUE else None
                )
                self.b.round(kind, iteration=it, participants=who, targets=targets)
                for i, name in enumerate(who):
                    self._contribute(name, kind, it)
                    self._parsed(kind, i, name)
                self.b.close_round()
                self._after(kind, it)
                yield None
        if self.rng.random() < 0.5:
            self.b.finish(SessionStatus.COMPLETE, reason="done")
            yield None


def random_sessions(ledger: Ledger, seed: int, sessions: int) -> list[str]:
    """Builds ``sessions`` interleaved sessions, saving after every round; returns their ids."""
    clock = FixedStepClock(step=timedelta(milliseconds=1500))
    scripts = [SessionScript(seed, i, clock) for i in range(sessions)]
    gens = [s.rounds() for s in scripts]
    live = list(range(sessions))
    rng = random.Random(seed)
    for s in scripts:
        ledger.save(s.agg)
    while live:
        i = rng.choice(live)
        try:
            next(gens[i])
        except StopIteration:
            live.remove(i)
        ledger.save(scripts[i].agg)
    return [str(s.agg.id) for s in scripts]
