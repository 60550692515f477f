"""Hypothesis properties of the engine: scoring, termination, no self-critique, parsing."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_ledger import engine
from forge_ledger.domain.state import RoundState, SessionState
from forge_ledger.domain.values import (
    ConvergenceVote,
    Critique,
    Opinion,
    ParticipantRole,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Stance,
)
from support.engine_sim import drive, prompt_of, start

stances = st.sampled_from(list(Stance))
weights = st.floats(min_value=0, max_value=10, allow_nan=False)


@given(st.lists(st.tuples(stances, weights), max_size=12))
def test_score_is_in_unit_interval(votes: list[tuple[Stance, float]]) -> None:
    assert 0.0 <= engine.weighted_score(votes) <= 1.0


@given(st.lists(st.tuples(stances, weights), min_size=1, max_size=12), st.data())
def test_score_is_monotone_in_agreement(
    votes: list[tuple[Stance, float]], data: st.DataObject,
) -> None:
    i = data.draw(st.integers(0, len(votes) - 1))
    lower = list(votes)
    lower[i] = (Stance.DISAGREE, votes[i][1])
    higher = list(votes)
    higher[i] = (Stance.AGREE, votes[i][1])
    assert engine.weighted_score(higher) >= engine.weighted_score(lower)


@given(st.lists(weights.filter(lambda w: w > 0), min_size=1, max_size=8))
def test_unanimous_agreement_scores_one(ws: list[float]) -> None:
    assert engine.weighted_score([(Stance.AGREE, w) for w in ws]) == 1.0


# --------------------------------------------------------------------------- simulated runs

ROLES = st.lists(st.sampled_from(list(ParticipantRole)), min_size=1, max_size=4)


def random_answers(data: st.DataObject, fail_rate: int):  # type: ignore[no-untyped-def]
    """Answers drawn by hypothesis: stances, topics, and unparseable texts."""
    topics = st.lists(st.sampled_from(["quota storage", "audit logging", "naming", "latency"]),
                      max_size=2)

    def answer(_state: SessionState, rnd: RoundState, name: str) -> str:
        if rnd.kind is RoundKind.DRAFT:
            return f"Draft by {name}"
        if rnd.kind is RoundKind.SYNTHESIS:
            return f"Synthesis {rnd.number}: " + " ".join(data.draw(topics))
        if data.draw(st.integers(0, 9)) < fail_rate:
            return data.draw(st.sampled_from(["", "I agree.", "{not json", "```json\n[1]\n```"]))
        if rnd.kind is RoundKind.CRITIQUE:
            return json.dumps({
                "target": rnd.targets[name],
                "suggestions": [{"text": t, "section": t,
                                 "priority": data.draw(st.integers(1, 5))}
                                for t in data.draw(topics)],
                "score": data.draw(st.integers(0, 100)),
            })
        stance = data.draw(stances)
        concerns = data.draw(topics)
        if rnd.kind is RoundKind.CONVERGENCE:
            return json.dumps({"agrees": stance.agrees, "stance": stance.value,
                               "concerns": concerns})
        return json.dumps({"stance": stance.value, "concerns": concerns, "topics": concerns})

    return answer


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    roles=ROLES,
    max_rounds=st.integers(1, 14),
    depth=st.integers(0, 4),
    attended=st.booleans(),
    min_consensus=st.integers(1, 5),
    fail_rate=st.integers(0, 4),
    data=st.data(),
)
def test_any_run_terminates_within_max_rounds_and_never_self_critiques(
    roles: list[ParticipantRole],
    max_rounds: int,
    depth: int,
    attended: bool,
    min_consensus: int,
    fail_rate: int,
    data: st.DataObject,
) -> None:
    cfg = SessionConfig(max_rounds=max_rounds, max_recursive_depth=depth, attended=attended,
                        min_consensus=min_consensus, convergence_threshold=0.7)
    agg, clock = start(len(roles), cfg, roles=tuple(roles))
    run = drive(agg, random_answers(data, fail_rate), clock, limit=200)
    state = agg.state
    assert state.status.terminal
    assert len(state.rounds) <= max_rounds
    assert isinstance(run.final, engine.Finish | engine.BudgetStop)
    for r in state.rounds:
        if r.kind is RoundKind.CRITIQUE:
            assert all(critic != target for critic, target in r.targets.items())
            for c in r.contributions:
                assert c.critique is None or c.participant != r.targets[c.participant]
        if r.kind is RoundKind.REFINEMENT:
            assert 1 <= r.depth <= depth
        for c in r.contributions:
            first = prompt_of(agg, c)[1].content.split("\n", 1)[0]
            assert first == f"Round {r.number} · {r.kind.value} · iteration {r.iteration}"
    for result in state.convergence:
        assert 0.0 <= result.score <= 1.0
        if result.converged:
            assert result.score >= cfg.convergence_threshold
            assert not result.blocking
    if state.status is SessionStatus.CONVERGED:
        assert state.convergence[-1].converged


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 4), min_consensus=st.integers(1, 6))
def test_unanimity_converges_when_no_strong_dissent(n: int, min_consensus: int) -> None:
    from support.engine_sim import scripted

    agg, clock = start(n, SessionConfig(min_consensus=min_consensus))
    run = drive(agg, scripted(), clock)
    assert isinstance(run.final, engine.Finish)
    assert run.final.status is SessionStatus.CONVERGED
    result = agg.state.convergence[-1]
    assert result.agree == n
    assert result.score == 1.0


# --------------------------------------------------------------------------- parsing


KINDS = st.sampled_from(list(RoundKind))


@given(KINDS, st.text(max_size=400))
def test_parse_output_never_raises(kind: RoundKind, text: str) -> None:
    out = engine.parse_output(kind, text)
    if engine.output_schema(kind) is None:
        assert out == engine.ParsedOutput(None, None)
    else:
        assert (out.value is None) != (out.error is None)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["stance", "agrees", "Concerns", "score", "suggestions",
                                       "reasoning", "priority", "x"]), inner, max_size=5),
    max_leaves=12,
)


@given(KINDS, JSONISH, st.text(max_size=30), st.text(max_size=30))
def test_parse_output_never_raises_on_json_like_noise(
    kind: RoundKind, obj: object, before: str, after: str,
) -> None:
    text = before + "```json\n" + json.dumps(obj) + "\n```" + after
    out = engine.parse_output(kind, text)
    assert out.value is not None or out.error is not None or engine.output_schema(kind) is None


@given(stances, st.lists(st.text(min_size=1, max_size=20), max_size=3),
       st.text(max_size=60), st.text(max_size=60))
def test_vote_survives_prose_and_fences(
    stance: Stance, concerns: list[str], before: str, after: str,
) -> None:
    body = json.dumps({"agrees": stance.agrees, "stance": stance.value, "concerns": concerns})
    for text in (f"{before}\n```json\n{body}\n```\n{after}", f"Sure! {body} Hope it helps."):
        out = engine.parse_output(RoundKind.CONVERGENCE, text)
        assert isinstance(out.value, ConvergenceVote), out.error
        assert out.value.effective_stance is stance
        assert list(out.value.concerns) == [c for c in concerns if c.strip()]


def test_parse_key_variants_and_broken_inputs() -> None:
    out = engine.parse_output(
        RoundKind.REFINEMENT,
        'Thoughts first.\n{"Position": "Strongly Disagree", "Rationale": "too slow", '
        '"Issues": ["latency"], "confidence": 80,}\nThanks',
    )
    assert isinstance(out.value, Opinion)
    assert out.value.stance is Stance.STRONGLY_DISAGREE
    assert out.value.reasoning == "too slow"
    assert out.value.concerns == ("latency",)
    assert out.value.strength == 0.8

    out = engine.parse_output(
        RoundKind.CRITIQUE,
        '```\n{"pros": ["clear"], "cons": ["vague"], "recommendations": ["add tests", '
        '{"suggestion": "cache", "severity": "high", "type": "Performance"}], "rating": 0.7}\n```',
    )
    assert isinstance(out.value, Critique)
    assert out.value.strengths == ("clear",)
    assert out.value.weaknesses == ("vague",)
    assert [s.text for s in out.value.suggestions] == ["add tests", "cache"]
    assert out.value.suggestions[1].priority == 2
    assert out.value.suggestions[1].category.value == "performance"
    assert out.value.score == 70

    out = engine.parse_output(RoundKind.CONVERGENCE, '{"vote": "yes", "score": 90}')
    assert isinstance(out.value, ConvergenceVote)
    assert out.value.agrees

    for broken in ("", "I agree with everything.", '{"agrees": ', '{"stance": "maybe"}', "[1, 2]"):
        out = engine.parse_output(RoundKind.REFINEMENT, broken)
        assert out.value is None
        assert out.error

    assert engine.parse_output(RoundKind.DRAFT, "anything") == engine.ParsedOutput(None, None)
    assert engine.output_schema(RoundKind.CRITIQUE) is Critique
    assert engine.output_schema(RoundKind.RESPONSE) is Opinion
    assert engine.output_schema(RoundKind.CONVERGENCE) is ConvergenceVote
    assert engine.output_schema(RoundKind.SYNTHESIS) is None


@given(st.text(max_size=200))
def test_estimate_tokens_is_ceil_of_quarter_length(text: str) -> None:
    n = engine.estimate_tokens(text)
    assert 4 * (n - 1) < len(text) <= 4 * n or (n == 0 and text == "")
