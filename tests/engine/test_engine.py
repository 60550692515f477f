"""Engine rules driven through the real aggregate: sequence, prompts, divergences, votes."""

from __future__ import annotations

import json

import pytest

from forge_ledger import engine
from forge_ledger.domain import events as ev
from forge_ledger.domain.state import RoundState
from forge_ledger.domain.values import (
    ChatMessage,
    DivergenceStatus,
    Mode,
    ParticipantRole,
    Persona,
    Price,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Stance,
)
from forge_ledger.engine.techniques import all_techniques
from forge_ledger.engine.votes import CONTRADICTION_MARGIN, score_contradiction
from forge_ledger.errors import InvariantViolation
from support.engine_sim import draft_text, drive, play_round, prompt_of, scripted, start


def kinds(agg: object) -> list[str]:
    return [r.kind.value for r in agg.state.rounds]  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- sequence


def test_unanimous_session_runs_iteration_one_and_converges() -> None:
    agg, clock = start(3)
    run = drive(agg, scripted(), clock)
    assert kinds(agg) == ["draft", "critique", "response", "synthesis", "convergence"]
    assert isinstance(run.final, engine.Finish)
    assert run.final.status is SessionStatus.CONVERGED
    assert run.final.score == pytest.approx(1.0)
    result = agg.state.convergence[-1]
    assert result.converged
    assert result.majority_agrees
    assert result.agree == 3


def test_critique_rotation_never_targets_self_and_covers_every_draft() -> None:
    agg, clock = start(4)
    drive(agg, scripted(), clock)
    crit = agg.state.rounds[1]
    assert crit.kind is RoundKind.CRITIQUE
    assert all(critic != target for critic, target in crit.targets.items())
    assert sorted(crit.targets.values()) == sorted(agg.state.participant_names)


def test_critique_targets_with_drafter_roles_and_lone_author() -> None:
    t = engine.critique_targets(("A", "B", "C"), ("A",))
    assert t == {"B": "A", "C": "A"}
    t = engine.critique_targets(("A", "B", "C", "D"), ("A", "B"))
    assert t == {"A": "B", "B": "A", "C": "A", "D": "B"}
    assert engine.critique_targets(("A",), ("A",)) == {}


def test_single_participant_skips_critique_and_response() -> None:
    agg, clock = start(1, SessionConfig(min_consensus=1))
    drive(agg, scripted(), clock)
    assert kinds(agg) == ["draft", "synthesis", "convergence"]
    assert agg.state.status is SessionStatus.CONVERGED


def test_synthesizer_role_writes_the_synthesis() -> None:
    roles = (ParticipantRole.GENERALIST, ParticipantRole.SYNTHESIZER, ParticipantRole.CRITIC)
    agg, clock = start(3, roles=roles)
    drive(agg, scripted(), clock)
    synth = next(r for r in agg.state.rounds if r.kind is RoundKind.SYNTHESIS)
    assert synth.expected == ["P2"]


def test_dissent_leads_to_refinement_by_dissenters_only_then_converges() -> None:
    def vote(r: RoundState, name: str) -> str:
        return "disagree" if name == "P3" and r.iteration == 1 else "agree"

    agg, clock = start(3)
    run = drive(agg, scripted(vote=vote), clock)
    assert kinds(agg) == ["draft", "critique", "response", "synthesis", "convergence",
                          "refinement", "synthesis", "convergence"]
    refinement = agg.state.rounds[5]
    assert refinement.expected == ["P3"]
    assert refinement.targets == {"P3": "P1"}
    assert refinement.iteration == 2
    assert refinement.depth == 1
    assert isinstance(run.final, engine.Finish)
    assert run.final.status is SessionStatus.CONVERGED


def test_depth_exhausted_completes() -> None:
    cfg = SessionConfig(max_recursive_depth=1, max_rounds=50)
    agg, clock = start(3, cfg)
    run = drive(agg, scripted(vote=lambda _r, _n: "disagree"), clock)
    assert sum(1 for r in agg.state.rounds if r.kind is RoundKind.REFINEMENT) == 1
    assert isinstance(run.final, engine.Finish)
    assert run.final.status is SessionStatus.COMPLETE
    assert "depth" in run.final.reason


def test_no_recursive_refinement_completes_after_first_vote() -> None:
    agg, clock = start(2, SessionConfig(recursive_refinement=False))
    run = drive(agg, scripted(vote=lambda _r, _n: "disagree"), clock)
    assert kinds(agg)[-1] == "convergence"
    assert len(agg.state.rounds) == 5
    assert isinstance(run.final, engine.Finish)
    assert run.final.status is SessionStatus.COMPLETE


def test_rounds_budget_stops() -> None:
    agg, clock = start(3, SessionConfig(max_rounds=3))
    run = drive(agg, scripted(), clock)
    assert len(agg.state.rounds) == 3
    assert isinstance(run.final, engine.BudgetStop)
    assert run.final.budget == "rounds"


def test_time_and_cost_budgets() -> None:
    agg, _ = start(2, SessionConfig(max_time_secs=60, max_cost_usd=0.0005))
    step = engine.next_step(agg.state, elapsed_secs=61)
    assert isinstance(step, engine.BudgetStop)
    assert step.budget == "time"
    agg2, clock2 = start(2, SessionConfig(max_cost_usd=0.0015, max_rounds=50))
    run = drive(agg2, scripted(), clock2)  # every simulated call costs $0.001
    assert isinstance(run.final, engine.BudgetStop)
    assert run.final.budget == "cost"
    assert agg2.state.cost_usd >= 0.0015


def test_next_step_refuses_while_a_round_is_open() -> None:
    agg, clock = start(2)
    agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["P1", "P2"],
                    at=clock.now())
    with pytest.raises(InvariantViolation):
        engine.next_step(agg.state, elapsed_secs=0)


def test_attended_mode_asks_then_continues_after_answer() -> None:
    cfg = SessionConfig(attended=True)
    agg, clock = start(3, cfg)
    answer = scripted(vote=lambda r, n: "disagree" if n == "P2" and r.iteration == 1
                      else "agree")
    run = drive(agg, answer, clock, stop_at_ask=True)
    assert isinstance(run.final, engine.AskHuman)
    assert run.final.questions
    assert any("quota storage" in q for q in run.final.questions)
    agg.ask(run.final.questions, at=clock.now())
    agg.human_input(author="alice", text="Use Redis for quotas", at=clock.now())
    step = engine.next_step(agg.state, elapsed_secs=0)
    assert isinstance(step, engine.StartRound)
    assert step.kind is RoundKind.REFINEMENT
    play_round(agg, step, answer, clock)
    synth_step = engine.next_step(agg.state, elapsed_secs=0)
    assert isinstance(synth_step, engine.StartRound)
    number = play_round(agg, synth_step, answer, clock)
    rnd = agg.state.round(number)
    assert rnd is not None
    prompt = engine.build_messages(agg.state, rnd, "P1")[1].content
    assert "Use Redis for quotas" in prompt


def test_rewind_ignores_superseded_rounds() -> None:
    agg, clock = start(3, SessionConfig(max_rounds=50, max_recursive_depth=5))
    n = 0

    def vote(_r: RoundState, name: str) -> str:
        return "disagree" if name == "P3" else "agree"

    answer = scripted(vote=vote)
    while n < 8:  # iteration 1 (5 rounds) + iteration 2 (3 rounds)
        step = engine.next_step(agg.state, elapsed_secs=0)
        assert isinstance(step, engine.StartRound)
        play_round(agg, step, answer, clock)
        n += 1
    assert agg.state.iteration == 2
    agg.rewind(1, at=clock.now())
    agg.resume(at=clock.now())
    step = engine.next_step(agg.state, elapsed_secs=0)
    assert isinstance(step, engine.StartRound)
    assert step.kind is RoundKind.REFINEMENT
    assert step.iteration == 2
    assert step.depth == 1


# --------------------------------------------------------------------------- prompts


def test_prompt_first_line_and_blind_drafts() -> None:
    agg, clock = start(3)
    drive(agg, scripted(), clock)
    for r in agg.state.rounds:
        for c in r.contributions:
            user = next(m for m in prompt_of(agg, c) if m.role == "user").content
            assert user.split("\n", 1)[0] == (
                f"Round {r.number} · {r.kind.value} · iteration {r.iteration}"
            )
    draft = agg.state.rounds[0]
    for c in draft.contributions:
        text = "\n".join(m.content for m in prompt_of(agg, c))
        assert "DRAFT-MARKER" not in text
    crit = agg.state.rounds[1]
    for c in crit.contributions:
        text = "\n".join(m.content for m in prompt_of(agg, c))
        target = crit.targets[c.participant]
        assert draft_text(target) in text
        others = [p for p in agg.state.participant_names if p != target]
        assert not any(draft_text(p) in text for p in others)
        assert '"properties"' in text  # the JSON schema is inline


def test_build_messages_is_deterministic_and_uses_state_at_round_start() -> None:
    agg, clock = start(3)
    drive(agg, scripted(vote=lambda _r, n: "disagree" if n == "P1" else "agree"), clock)
    state = agg.state
    # as restored from a snapshot: the state's JSON, its answers read from a text source
    copy = type(state).load(state.model_dump_json(), fallback=state.text_pool)
    for r in state.rounds:
        for c in r.contributions:
            rebuilt = engine.build_messages(state, r, c.participant)
            assert rebuilt == engine.build_messages(copy, copy.round(r.number), c.participant)
            assert ev.prompt_hash(rebuilt) == c.prompt_hash


def test_a_prompt_names_the_answers_it_quotes() -> None:
    """Each answer whose text (or parsed value) a prompt takes in is among its quotes, and
    nothing else: the draft a critique reviews, every answer a synthesis merges."""
    agg, clock = start(3)
    drive(agg, scripted(vote=lambda _r, n: "disagree" if n == "P1" else "agree"), clock)
    state = agg.state
    kinds: set[RoundKind] = set()
    for r in state.rounds:
        for c in r.contributions:
            prompt = engine.build_prompt(state, r, c.participant)
            assert prompt.messages == engine.build_messages(state, r, c.participant)
            assert len(set(prompt.quotes)) == len(prompt.quotes)
            text = prompt.messages[1].content
            for address in prompt.quotes:
                answered = next(
                    a for rr in state.rounds for a in rr.contributions if a.answer_sha256 == address
                )
                assert (
                    answered.critique
                    or answered.opinion
                    or answered.vote
                    or (state.answer(answered).strip() in text)
                )
            if r.kind is RoundKind.DRAFT:
                assert prompt.quotes == ()
            else:
                kinds.add(r.kind)
                assert prompt.quotes
            if r.kind is RoundKind.CRITIQUE:
                target = r.targets[c.participant]
                draft = next(x for x in state.rounds if x.kind is RoundKind.DRAFT)
                own = draft.contribution_of(target)
                assert own is not None
                assert prompt.quotes == (own.answer_sha256,)
    assert {RoundKind.CRITIQUE, RoundKind.SYNTHESIS, RoundKind.CONVERGENCE} <= kinds


def test_system_prompt_carries_role_mode_and_persona_for_synthesis() -> None:
    cfg = SessionConfig(mode=Mode.PANEL, persona=Persona.SPARRING)
    roles = (ParticipantRole.DOMAIN_EXPERT, ParticipantRole.SYNTHESIZER)
    agg, clock = start(2, cfg, roles=roles)
    drive(agg, scripted(), clock)
    draft = agg.state.rounds[0]
    system = prompt_of(agg, draft.contribution_of("P1"))[0].content  # type: ignore[arg-type]
    assert ParticipantRole.DOMAIN_EXPERT.system_prompt_modifier in system
    assert "panel" in system
    assert "sparring" not in system
    synth = next(r for r in agg.state.rounds if r.kind is RoundKind.SYNTHESIS)
    s_system = prompt_of(agg, synth.contribution_of("P2"))[0].content  # type: ignore[arg-type]
    assert "sparring" in s_system
    assert ParticipantRole.SYNTHESIZER.system_prompt_modifier in s_system


def test_technique_suggestion_is_applied_to_refinement_prompt() -> None:
    technique = all_techniques()[0]
    agg, clock = start(3, SessionConfig(max_rounds=50))
    answer = scripted(vote=lambda _r, n: "disagree" if n == "P3" else "agree")
    for _ in range(5):
        step = engine.next_step(agg.state, elapsed_secs=0)
        assert isinstance(step, engine.StartRound)
        play_round(agg, step, answer, clock)
    agg.suggest_technique(
        ev.TechniqueSuggested(iteration=1, technique_slug=technique.slug,
                              category=technique.category, suggested_reason="weak clarity"),
        at=clock.now(),
    )
    step = engine.next_step(agg.state, elapsed_secs=0)
    assert isinstance(step, engine.StartRound)
    assert step.technique == technique.slug
    number = play_round(agg, step, answer, clock)
    rnd = agg.state.round(number)
    assert rnd is not None
    user = prompt_of(agg, rnd.contribution_of("P3"))[1].content  # type: ignore[arg-type]
    assert technique.prompt in user
    assert agg.state.techniques[-1].applied


def test_repair_messages_keep_prompt_and_ask_for_json_only() -> None:
    original = (ChatMessage(role="system", content="sys"),
                ChatMessage(role="user", content="Round 5 · convergence · iteration 1\nVote."))
    out = engine.repair_messages(
        original, "I agree!", "no JSON object found", RoundKind.CONVERGENCE,
    )
    assert out[:2] == original
    assert out[2] == ChatMessage(role="assistant", content="I agree!")
    assert out[3].content.split("\n", 1)[0] == "Round 5 · convergence · iteration 1 · repair"
    assert "no JSON object found" in out[3].content
    assert "ConvergenceVote" in out[3].content


# --------------------------------------------------------------------------- divergences


def test_divergences_grouped_by_topic_then_resolved_and_withdrawn() -> None:
    def vote(r: RoundState, name: str) -> str:
        if r.iteration == 1 and name in ("P2", "P3"):
            return "disagree"
        return "agree"

    def opinion(r: RoundState, name: str) -> tuple[str, list[str]]:
        if r.kind is RoundKind.REFINEMENT and name == "P3":
            return ("partial", ["naming style"])
        return ("agree", [])

    base = scripted(vote=vote, opinion=opinion)

    def answer(state, rnd, name):  # type: ignore[no-untyped-def]
        if rnd.kind is RoundKind.CONVERGENCE and rnd.iteration == 1:
            topics = {"P2": ["Quota storage backend"], "P3": ["Audit logging"]}.get(name, [])
            if topics:
                return json.dumps({"agrees": False, "stance": "disagree", "concerns": topics})
        return base(state, rnd, name)

    agg, clock = start(3, SessionConfig(max_rounds=50))
    drive(agg, answer, clock)
    vote_round = next(r for r in agg.state.rounds if r.kind is RoundKind.CONVERGENCE)
    opened = [d for d in agg.state.divergences if d.opened_round == vote_round.number]
    assert [d.id for d in opened] == [f"d{vote_round.number}-1", f"d{vote_round.number}-2"]
    assert [d.topic for d in opened] == ["quota storage backend", "audit logging"]
    by_topic = {d.topic: d for d in opened}
    p2 = by_topic["quota storage backend"]
    assert {p.participant for p in p2.positions if p.stance.disagrees} == {"P2"}
    assert {p.participant for p in p2.positions if p.stance.agrees} == {"P1"}
    # P2 agreed in the refinement: resolved; P3 dropped 'audit logging' while partial: withdrawn
    assert p2.status is DivergenceStatus.RESOLVED
    assert by_topic["audit logging"].status is DivergenceStatus.WITHDRAWN
    assert agg.state.status is SessionStatus.CONVERGED


def test_high_priority_critiques_open_divergences_resolved_when_authors_accept() -> None:
    agg, clock = start(3)
    drive(agg, scripted(suggestion_priority=1), clock)
    crit = agg.state.rounds[1]
    opened = [d for d in agg.state.divergences if d.opened_round == crit.number]
    assert len(opened) == 1
    assert opened[0].topic == "quotas"
    assert {p.participant for p in opened[0].positions} == {"P1", "P2", "P3"}
    assert opened[0].strongest is Stance.DISAGREE
    assert opened[0].status is DivergenceStatus.RESOLVED


def test_strong_dissent_blocks_until_overruled() -> None:
    cfg = SessionConfig(convergence_threshold=0.6, recursive_refinement=False)
    agg, clock = start(3, cfg)
    answer = scripted(vote=lambda _r, n: "strongly_disagree" if n == "P3" else "agree")
    for _ in range(5):
        step = engine.next_step(agg.state, elapsed_secs=0)
        assert isinstance(step, engine.StartRound)
        play_round(agg, step, answer, clock)
    vote_round = agg.state.rounds[-1]
    result = agg.state.convergence[-1]
    assert result.score == pytest.approx(2 / 3)
    assert not result.converged
    assert result.blocking
    assert result.majority_agrees
    strong = [d for d in agg.state.open_divergences if d.strong]
    assert strong
    for d in strong:
        agg.change_divergence(d.id, DivergenceStatus.OVERRULED, at=clock.now(), by="alice")
    again = engine.convergence(agg.state, vote_round)
    assert again.converged
    assert not again.blocking


def test_an_overruled_topic_does_not_block_again_when_the_dissent_repeats() -> None:
    """A human overrule settles the point: the same strong dissent voiced again in the next
    vote opens a new divergence (the record shows it) but does not block convergence."""
    cfg = SessionConfig(convergence_threshold=0.6)
    agg, clock = start(3, cfg)
    answer = scripted(vote=lambda _r, n: "strongly_disagree" if n == "P3" else "agree")
    for _ in range(5):
        step = engine.next_step(agg.state, elapsed_secs=0)
        assert isinstance(step, engine.StartRound)
        play_round(agg, step, answer, clock)
    assert agg.state.convergence[-1].blocking
    overruled = [d for d in agg.state.open_divergences if d.strong]
    for d in overruled:
        agg.change_divergence(d.id, DivergenceStatus.OVERRULED, at=clock.now(), by="alice")
    run = drive(agg, answer, clock)
    last = agg.state.convergence[-1]
    assert last.iteration == 2
    assert last.score == pytest.approx(2 / 3)
    repeated = [
        d for d in agg.state.divergences
        if d.strong and d.opened_round > overruled[0].opened_round
    ]
    assert repeated, "the repeated dissent is still recorded as a divergence"
    assert not last.blocking
    assert last.converged
    assert isinstance(run.final, engine.Finish)
    assert run.final.status is SessionStatus.CONVERGED


def test_after_round_is_idempotent() -> None:
    agg, clock = start(3)
    drive(agg, scripted(vote=lambda _r, n: "disagree" if n == "P1" else "agree"), clock)
    for r in agg.state.rounds:
        assert engine.after_round(agg.state, r.number) == ()


# --------------------------------------------------------------------------- convergence rule


def test_two_person_session_can_converge_with_min_consensus_above_voters() -> None:
    agg, clock = start(2, SessionConfig(min_consensus=5))
    run = drive(agg, scripted(), clock)
    assert isinstance(run.final, engine.Finish)
    assert run.final.status is SessionStatus.CONVERGED


def test_role_weights_defaults_and_override() -> None:
    cfg = SessionConfig()
    assert engine.role_weight(ParticipantRole.DOMAIN_EXPERT, cfg) == 1.5
    assert engine.role_weight(ParticipantRole.SYNTHESIZER, cfg) == 0.75
    assert engine.role_weight(ParticipantRole.GENERALIST, cfg) == 1.0
    over = SessionConfig(role_weights={"generalist": 3.0, "critic": -1.0})
    assert engine.role_weight(ParticipantRole.GENERALIST, over) == 3.0
    assert engine.role_weight(ParticipantRole.CRITIC, over) == 0.0


def test_weighted_vote_uses_roles() -> None:
    roles = (ParticipantRole.DOMAIN_EXPERT, ParticipantRole.GENERALIST)
    agg, clock = start(2, SessionConfig(recursive_refinement=False), roles=roles)
    drive(agg, scripted(vote=lambda _r, n: "agree" if n == "P1" else "disagree"), clock)
    result = agg.state.convergence[-1]
    assert result.score == pytest.approx(1.5 / 2.5)
    assert not result.majority_agrees  # 1 of 2 is not more than half


def test_conformity_flag_on_flip_with_identical_reasoning() -> None:
    agg, clock = start(3, SessionConfig(max_rounds=50))
    base = scripted(vote=lambda r, n: "disagree" if n == "P3" and r.iteration == 1 else "agree")

    def answer(state, rnd, name):  # type: ignore[no-untyped-def]
        if rnd.kind is RoundKind.CONVERGENCE and name == "P3":
            stance = "disagree" if rnd.iteration == 1 else "agree"
            return json.dumps({"agrees": stance == "agree", "stance": stance,
                               "reasoning": "Looks fine to me overall."})
        return base(state, rnd, name)

    drive(agg, answer, clock)
    flags = engine.conformity_flags(agg.state)
    assert [(f.participant, f.from_stance, f.to_stance) for f in flags] == [
        ("P3", Stance.DISAGREE, Stance.AGREE),
    ]
    assert flags[0].toward_majority
    assert "no new argument" in flags[0].reason
    assert flags[0].influences == ()
    assert flags[0].own_arguments == ()


def test_no_conformity_flag_when_concern_was_taken_up() -> None:
    agg, clock = start(3, SessionConfig(max_rounds=50))
    drive(agg, scripted(vote=lambda r, n: "disagree" if n == "P3" and r.iteration == 1
                        else "agree"), clock)
    # the scripted synthesis mentions quotas, P3's concern was "quota storage"
    assert engine.conformity_flags(agg.state) == []


# --------------------------------------------------------------------------- budget


def test_token_estimate_and_worst_case_cost() -> None:
    assert engine.estimate_tokens("") == 0
    assert engine.estimate_tokens("abcd") == 1
    assert engine.estimate_tokens("abcde") == 2
    msgs = (ChatMessage(role="system", content="x" * 8), ChatMessage(role="user", content="y" * 9))
    prompt_tokens = engine.estimate_prompt_tokens(msgs)
    assert prompt_tokens == 3 + (2 + 4) + (3 + 4)
    price = Price(input_cost_per_token=1e-6, output_cost_per_token=2e-6)
    assert engine.worst_case_cost(msgs, 100, price) == pytest.approx(
        prompt_tokens * 1e-6 + 100 * 2e-6,
    )
    assert engine.worst_case_cost(msgs, 100, None) == 0.0


def test_budget_allows() -> None:
    agg, clock = start(2, SessionConfig(max_cost_usd=0.0025, max_rounds=50))
    step = engine.next_step(agg.state, elapsed_secs=0)
    assert isinstance(step, engine.StartRound)
    play_round(agg, step, scripted(), clock)  # two calls at $0.001
    assert engine.budget_allows(agg.state, 0.0005)
    assert not engine.budget_allows(agg.state, 0.0006)


@pytest.mark.parametrize(
    ("stance", "score", "contradicts"),
    [
        (Stance.AGREE, 12, True), (Stance.STRONGLY_AGREE, 29, True), (Stance.AGREE, 30, False),
        (Stance.AGREE, 95, False), (Stance.DISAGREE, 95, True),
        (Stance.STRONGLY_DISAGREE, 71, True), (Stance.DISAGREE, 70, False),
        (Stance.DISAGREE, 5, False), (Stance.PARTIAL, 0, False), (Stance.PARTIAL, 100, False),
    ],
)
def test_a_score_contradicts_a_stance_past_the_margin_on_the_other_side(
    stance: Stance, score: int, contradicts: bool
) -> None:
    """One rule: an agreeing stance under 50 - margin, a disagreeing one over 50 + margin."""
    assert CONTRADICTION_MARGIN == 20
    assert (score_contradiction(stance, score) is not None) is contradicts
