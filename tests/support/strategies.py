"""Hypothesis strategies for forge-ledger's value types and event payloads.

Whole sessions are told with :class:`forge_ledger.testing.SessionBuilder`, not built here.

Other test modules reuse these (``from support.strategies import ...``): every value type and every
event payload has a strategy generating valid instances, so round-trip and fold properties can
range over the whole catalogue rather than hand-picked examples.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from forge_ledger.domain import events as ev
from forge_ledger.domain.values import (
    PARTICIPANT_NAME_RE,
    ChatMessage,
    ConvergenceVote,
    Critique,
    DivergentPosition,
    Mode,
    ModelProvider,
    ModelResponse,
    Opinion,
    OutputType,
    Participant,
    ParticipantRole,
    Persona,
    Price,
    Reference,
    ReferenceType,
    RoundKind,
    SessionConfig,
    Stance,
    StopReason,
    Suggestion,
    SuggestionCategory,
    TokenCount,
    Topic,
)

# --------------------------------------------------------------------------- primitives

text = st.text(max_size=40)
short_text = st.text(min_size=1, max_size=20)
names = st.from_regex(PARTICIPANT_NAME_RE, fullmatch=True)
ints = st.integers(min_value=0, max_value=2**53)


def floats(lo: float | None = None, hi: float | None = None) -> st.SearchStrategy[float]:
    return st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False)


def small_tuple(elem: st.SearchStrategy[Any], max_size: int = 3) -> st.SearchStrategy[Any]:
    return st.lists(elem, max_size=max_size).map(tuple)


json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | floats() | text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)

# --------------------------------------------------------------------------- values

references = st.builds(Reference, name=text, content=text, ref_type=st.sampled_from(ReferenceType))
topics = st.builds(
    Topic,
    title=st.text(min_size=1, max_size=60),
    description=text,
    constraints=small_tuple(text),
    references=small_tuple(references),
    output_type=st.sampled_from(OutputType),
)
session_configs = st.builds(
    SessionConfig,
    max_rounds=st.integers(1, 10_000),
    max_time_secs=st.integers(1, 10**7),
    max_cost_usd=floats(0, 1e6),
    convergence_threshold=floats(0, 1),
    attended=st.booleans(),
    min_consensus=st.integers(1, 10),
    recursive_refinement=st.booleans(),
    max_recursive_depth=st.integers(0, 100),
    mode=st.sampled_from(Mode),
    persona=st.sampled_from(Persona),
    max_concurrency=st.integers(1, 64),
    max_tokens=st.integers(1, 10**6),
    call_timeout_secs=floats(0.001, 1e5),
    max_attempts=st.integers(1, 10),
    role_weights=st.dictionaries(
        st.sampled_from([r.value for r in ParticipantRole]), floats(0, 10),
    ),
    fallback=st.booleans(),
)
token_counts = st.builds(TokenCount, input=ints, output=ints)
prices = st.builds(
    Price,
    input_cost_per_token=floats(0, 1),
    output_cost_per_token=floats(0, 1),
    source=st.sampled_from(["user", "litellm", "unknown"]),
)
model_ids = st.sampled_from(
    ["gpt-4o", "anthropic/claude-3-5-sonnet-20241022", "gemini/gemini-pro", "ollama/llama3",
     "openai/scripted-a", "mistral/mistral-large"],
)
participants = st.builds(
    Participant,
    name=names,
    model=model_ids,
    provider=st.sampled_from(ModelProvider),
    role=st.sampled_from(ParticipantRole),
    expertise=st.none() | text,
    framework=st.none() | text,
    temperature=floats(0, 2),
    max_tokens=st.none() | st.integers(1, 10**6),
    api_base=st.none() | st.just("http://127.0.0.1:8000/v1"),
    price=st.none() | prices,
)
chat_messages = st.builds(
    ChatMessage, role=st.sampled_from(["system", "user", "assistant"]), content=text,
)
model_responses = st.builds(
    ModelResponse,
    content=text,
    model=model_ids,
    tokens=token_counts,
    cost_usd=floats(0, 1e4),
    price=st.none() | prices,
    duration_ms=st.integers(0, 10**9),
    ttft_ms=st.none() | st.integers(0, 10**9),
    stop_reason=st.sampled_from(StopReason),
    finish_reason=st.none() | st.sampled_from(["stop", "length", "tool_calls"]),
    usage_reported=st.booleans(),
)
suggestions = st.builds(
    Suggestion,
    text=text,
    section=st.none() | text,
    priority=st.integers(1, 5),
    category=st.sampled_from(SuggestionCategory),
)
critiques = st.builds(
    Critique,
    target=st.none() | names,
    strengths=small_tuple(text),
    weaknesses=small_tuple(text),
    suggestions=small_tuple(suggestions),
    score=st.integers(0, 100),
)
opinions = st.builds(
    Opinion,
    stance=st.sampled_from(Stance),
    reasoning=text,
    concerns=small_tuple(text),
    strength=floats(0, 1),
    topics=small_tuple(text),
)
votes = st.builds(
    ConvergenceVote,
    agrees=st.booleans(),
    score=st.integers(0, 100),
    concerns=small_tuple(text),
    stance=st.none() | st.sampled_from(Stance),
    reasoning=text,
)
divergent_positions = st.builds(
    DivergentPosition, participant=names, position=text, stance=st.sampled_from(Stance),
)

VALUE_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    Reference: references,
    Topic: topics,
    SessionConfig: session_configs,
    TokenCount: token_counts,
    Price: prices,
    Participant: participants,
    ChatMessage: chat_messages,
    ModelResponse: model_responses,
    Suggestion: suggestions,
    Critique: critiques,
    Opinion: opinions,
    ConvergenceVote: votes,
    DivergentPosition: divergent_positions,
}

# --------------------------------------------------------------------------- payloads

pos_int = st.integers(1, 10_000)
nat_int = st.integers(0, 10_000)
hex64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
slugs = st.from_regex(r"[a-z0-9-]{1,30}", fullmatch=True)
call_params = st.builds(
    ev.CallParams,
    temperature=floats(0, 2),
    max_tokens=st.integers(1, 10**6),
    response_format=st.none() | st.sampled_from(["CritiqueOut", "VoteOut"]),
    api_base=st.none() | st.just("http://127.0.0.1:9/v1"),
)
fork_origins = st.builds(
    ev.ForkOrigin,
    parent_id=st.uuids().map(str),
    parent_position=pos_int,
    parent_hash=hex64,
    parent_iteration=nat_int,
)
_div_change_kw: dict[str, Any] = {
    "divergence_id": short_text,
    "round": nat_int,
    "note": text,
    "by": text,
}

PAYLOAD_STRATEGIES: dict[type[ev.Payload], st.SearchStrategy[Any]] = {
    ev.SessionStarted: st.builds(
        ev.SessionStarted,
        topic=topics,
        config=session_configs,
        slug=slugs,
        source=st.sampled_from(["run", "import", "demo"]),
    ),
    ev.SessionForked: st.builds(
        ev.SessionForked,
        origin=fork_origins,
        state=st.dictionaries(text, json_values, max_size=4),
        config=session_configs,
        participants=small_tuple(participants, 2),
    ),
    ev.ParticipantJoined: st.builds(ev.ParticipantJoined, participant=participants),
    ev.ParticipantUpdated: st.builds(ev.ParticipantUpdated, participant=participants, reason=text),
    ev.ParticipantLeft: st.builds(
        ev.ParticipantLeft, participant=names, reassigned=small_tuple(participants, 2), reason=text
    ),
    ev.SessionPaused: st.builds(
        ev.SessionPaused,
        reason=text,
        questions=small_tuple(text),
        fault=st.none() | st.builds(
            ev.PauseFault,
            round=pos_int,
            kind=st.sampled_from(RoundKind),
            participant=names,
            model=model_ids,
            error_type=short_text,
            message=text,
            attempts=nat_int,
            missing=small_tuple(names),
        ),
    ),
    ev.SessionResumed: st.builds(ev.SessionResumed, reason=text),
    ev.SessionRewound: st.builds(
        ev.SessionRewound, from_iteration=pos_int, to_iteration=pos_int, steps=st.integers(1, 5),
    ),
    ev.QuestionsAsked: st.builds(ev.QuestionsAsked, iteration=nat_int, questions=small_tuple(text)),
    ev.HumanInputRecorded: st.builds(
        ev.HumanInputRecorded,
        author=text,
        text=text,
        kind=st.sampled_from(["answer", "note", "overrule", "steer"]),
        iteration=nat_int,
        questions=small_tuple(text),
    ),
    ev.TechniqueSuggested: st.builds(
        ev.TechniqueSuggested,
        iteration=nat_int,
        technique_slug=slugs,
        category=text,
        suggested_reason=text,
        weak_axes=small_tuple(text),
        source=st.sampled_from(["auto", "manual", "random", "progressive"]),
        applied=st.booleans(),
    ),
    ev.BudgetExhausted: st.builds(
        ev.BudgetExhausted,
        budget=st.sampled_from(["cost", "time", "rounds"]),
        limit=floats(),
        spent=floats(),
        detail=text,
    ),
    ev.SessionConverged: st.builds(ev.SessionConverged, reason=text, score=floats(0, 1)),
    ev.SessionCompleted: st.builds(ev.SessionCompleted, reason=text),
    ev.SessionAborted: st.builds(ev.SessionAborted, reason=text, by=st.just("") | names),
    ev.SessionTimedOut: st.builds(ev.SessionTimedOut, reason=text),
    ev.SessionSealed: st.builds(
        ev.SessionSealed, root_hash=hex64, events=pos_int, hmac=st.none() | hex64,
    ),
    ev.RoundStarted: st.builds(
        ev.RoundStarted,
        number=pos_int,
        kind=st.sampled_from(RoundKind),
        iteration=pos_int,
        participants=small_tuple(names),
        targets=st.dictionaries(names, names, max_size=3),
        depth=nat_int,
        focus=text,
        technique=st.none() | slugs,
    ),
    ev.RoundCompleted: st.builds(ev.RoundCompleted, number=pos_int, abstained=small_tuple(names)),
    ev.FallbackChosen: st.builds(
        ev.FallbackChosen, round=pos_int, failed=names, participant=names, reason=text,
    ),
    ev.ContributionRecorded: st.builds(
        ev.ContributionRecorded,
        round=pos_int,
        participant=names,
        attempt=st.integers(1, 10),
        model=model_ids,
        messages=small_tuple(chat_messages),
        params=call_params,
        prompt_hash=hex64,
        response=model_responses,
        purpose=st.sampled_from(["answer", "repair"]),
    ),
    ev.ProviderCallFailed: st.builds(
        ev.ProviderCallFailed,
        round=pos_int,
        participant=names,
        attempt=st.integers(1, 10),
        model=model_ids,
        error_type=short_text,
        message=text,
        retryable=st.booleans(),
        will_retry=st.booleans(),
        retry_after_secs=st.none() | floats(0, 600),
        partial_text=text,
        tokens=token_counts,
        cost_usd=floats(0, 100),
        duration_ms=nat_int,
        prompt_hash=text,
    ),
    ev.CritiqueRecorded: st.builds(
        ev.CritiqueRecorded, round=pos_int, participant=names, critique=critiques,
    ),
    ev.OpinionRecorded: st.builds(
        ev.OpinionRecorded, round=pos_int, participant=names, opinion=opinions,
    ),
    ev.VoteRecorded: st.builds(ev.VoteRecorded, round=pos_int, participant=names, vote=votes),
    ev.ParseFailed: st.builds(
        ev.ParseFailed, round=pos_int, participant=names, expected=text, error=text,
    ),
    ev.ConvergenceEvaluated: st.builds(
        ev.ConvergenceEvaluated,
        round=pos_int,
        iteration=pos_int,
        score=floats(0, 1),
        converged=st.booleans(),
        majority_agrees=st.booleans(),
        agree=nat_int,
        disagree=nat_int,
        partial=nat_int,
        abstain=nat_int,
        threshold=floats(0, 1),
        blocking=small_tuple(text),
        remaining_issues=small_tuple(text),
        weights=st.dictionaries(names, floats(0, 10), max_size=3),
    ),
    ev.DivergenceDetected: st.builds(
        ev.DivergenceDetected,
        divergence_id=short_text,
        round=pos_int,
        topic=text,
        positions=small_tuple(divergent_positions),
        strongest=st.sampled_from(Stance),
    ),
    ev.DivergenceAddressed: st.builds(ev.DivergenceAddressed, **_div_change_kw),
    ev.DivergenceResolved: st.builds(ev.DivergenceResolved, **_div_change_kw),
    ev.DivergenceWithdrawn: st.builds(ev.DivergenceWithdrawn, **_div_change_kw),
    ev.DivergenceOverruled: st.builds(ev.DivergenceOverruled, **_div_change_kw),
    ev.IdeaRecorded: st.builds(
        ev.IdeaRecorded, idea_id=pos_int, content=text, score=st.integers(0, 10),
    ),
    ev.IterationRecorded: st.builds(
        ev.IterationRecorded,
        iteration=pos_int,
        phase=st.sampled_from(["divergent", "transition", "convergent"]),
        ems=st.integers(0, 100),
        ems_delta=st.integers(-100, 100),
        timestamp=short_text,
        duration=st.none() | st.integers(0, 10_000),
    ),
    ev.SessionImported: st.builds(
        ev.SessionImported,
        format_version=st.sampled_from(["1.0", "1.2"]),
        yaml_id=short_text,
        status=st.sampled_from(["in_progress", "completed", "abandoned"]),
        phase=st.sampled_from(["divergent", "transition", "convergent"]),
        ems=st.integers(0, 100),
        iteration=st.integers(0, 50),
        techniques_used=small_tuple(short_text),
        party_history=small_tuple(st.dictionaries(short_text, text, max_size=2)),
        last_question=st.none() | text,
    ),
    ev.ReviewLabelsAssigned: st.builds(
        ev.ReviewLabelsAssigned,
        labels=st.dictionaries(st.from_regex(r"Response [A-Z]{1,2}", fullmatch=True), names,
                               max_size=4),
    ),
}

any_payload = st.sampled_from(sorted(PAYLOAD_STRATEGIES, key=lambda c: c.TYPE)).flatmap(
    lambda cls: PAYLOAD_STRATEGIES[cls],
)
