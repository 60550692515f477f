"""``audit``: how consensus formed, from a real session's events and state."""

from __future__ import annotations

import itertools
import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_ledger import engine
from forge_ledger.audit import AuditReport, audit_report, render_markdown
from forge_ledger.cli import main
from forge_ledger.domain.values import DivergenceStatus, RoundKind, SessionStatus, Stance
from forge_ledger.ledger import Ledger, RecordedEvent
from support.stories import THREE_ITERATIONS, Iteration, build, play, story

SID = uuid.UUID(int=1)


def _report(ledger: Ledger, sid: uuid.UUID = SID) -> AuditReport:
    return audit_report(list(ledger.events(sid)))


@pytest.fixture
def ledger(sqlite_url: str) -> Ledger:
    led = Ledger(sqlite_url)
    led.save(build(SID, THREE_ITERATIONS))
    return led


def test_consensus_beside_majority_and_trajectories(ledger: Ledger) -> None:
    r = _report(ledger)
    state = ledger.state(SID)
    assert [(c.iteration, c.weighted_score, c.majority_agrees) for c in r.consensus] == [
        (c.iteration, c.score, c.majority_agrees) for c in state.convergence
    ]
    by_name = {t.participant: [v.stance for v in t.votes] for t in r.trajectories}
    for name in ("alice", "bob", "carol"):
        assert by_name[name] == [it.votes[name] for it in THREE_ITERATIONS]
    votes = {e.position for e in ledger.events(SID) if e.type == "VoteRecorded"}
    assert {v.position for t in r.trajectories for v in t.votes} == votes


def test_stance_changes_follow_the_one_conformity_rule(ledger: Ledger) -> None:
    r = _report(ledger)
    shifts = {s.participant: s for s in r.stance_shifts}
    assert set(shifts) == {"bob", "carol"}
    # carol moved to agree after the first vote's majority disagreed: away from it, no flag
    carol = shifts["carol"]
    assert not carol.conformity
    assert not carol.toward_majority
    assert not carol.majority_agreed
    assert carol.reason == "moved away from the previous vote's majority"
    # bob moved to the agreeing majority with no round and no human input in between
    bob = shifts["bob"]
    assert bob.conformity
    assert bob.toward_majority
    assert bob.influences == ()
    assert [(c.participant, c.round, c.from_, c.to) for c in r.conformity] == [
        ("bob", bob.to_round, Stance.DISAGREE, Stance.AGREE)]
    flags = engine.conformity_flags(ledger.state(SID))
    assert [(f.participant, f.to_round, f.reason) for f in flags] == [
        (c.participant, c.round, c.reason) for c in r.conformity]


def test_dissent_minority_report_failures_and_usage(ledger: Ledger) -> None:
    r = _report(ledger)
    events = list(ledger.events(SID))
    d1, d2 = r.dissent
    assert (d1.id, d1.status, d1.closed_position) == ("d1", DivergenceStatus.OPEN, None)
    resolved_at = next(e.position for e in events if e.type == "DivergenceResolved")
    assert (d2.status, d2.closed_position) == (DivergenceStatus.RESOLVED, resolved_at)
    assert [(m.who, m.divergence_id, m.since_iteration) for m in r.minority_report] == [
        (("bob",), "d1", 1),
    ]
    failed = [e for e in events if e.type == "ProviderCallFailed"]
    assert [(f.position, f.model, f.error_type) for f in r.failed_calls] == [
        (e.position, e.data["model"], e.data["error_type"]) for e in failed
    ]
    state = ledger.state(SID)
    assert sum(u.priced_cost_usd for u in r.usage_by_participant) == pytest.approx(state.cost_usd)
    assert sum(u.priced_cost_usd for u in r.usage_by_round) == pytest.approx(state.cost_usd)
    assert sum(u.unpriced_calls for u in r.usage_by_round) == state.unpriced_calls
    assert r.total.cost_complete is (state.unpriced_calls == 0)
    assert sum(u.input_tokens for u in r.usage_by_participant) == state.tokens.input
    assert sum(u.output_tokens for u in r.usage_by_round) == state.tokens.output
    contributions = sum(1 for e in events if e.type == "ContributionRecorded")
    assert r.total.calls == contributions + len(failed)


def test_human_interventions_overrule_rewind_and_vote_minority(sqlite_url: str) -> None:
    sid = uuid.UUID(int=2)
    b = story(sid)
    play(b, Iteration(votes={"alice": Stance.AGREE, "bob": Stance.DISAGREE,
                               "carol": Stance.AGREE},
                        open_dissent=[("d1", "burst limits", "bob")]))
    play(b, Iteration(votes={"alice": Stance.AGREE, "bob": Stance.DISAGREE,
                               "carol": Stance.DISAGREE},
                        close_dissent=[("d1", DivergenceStatus.OVERRULED, "dana")]))
    b.rewind(1).resume()
    play(b, Iteration(votes={"alice": Stance.AGREE, "bob": Stance.STRONGLY_DISAGREE,
                             "carol": Stance.AGREE}, critiques=False, synthesis=False))
    b.finish(SessionStatus.COMPLETE, reason="test script ended")
    with Ledger(sqlite_url) as led:
        led.save(b.aggregate)
        r = _report(led, sid)
        events = list(led.events(sid))
    kinds = [(h.kind, h.author) for h in r.human_interventions]
    assert kinds == [("overrule", "dana"), ("rewind", "")]
    assert [h.position for h in r.human_interventions] == [
        e.position for e in events if e.type in ("DivergenceOverruled", "SessionRewound")
    ]
    assert r.minority_report[0].source == "vote"
    bob_minority = r.minority_report[0]
    first_bob_vote = next(
        e.position for e in events if e.type == "VoteRecorded" and e.data["participant"] == "bob"
    )
    assert bob_minority.who == ("bob",)
    assert bob_minority.since_position == first_bob_vote
    assert "burst handling" in bob_minority.concern
    md = render_markdown(r)
    assert "overrule" in md
    assert "back 1" in md


def test_markdown_reads_as_a_document(ledger: Ledger) -> None:
    md = render_markdown(_report(ledger))
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Consensus per iteration", "## Did deliberation help?", "## Stance trajectories",
        "## Stance changes", "## Who moved whom", "## Conformity flags", "## Self-preference",
        "## Dissent", "## Human interventions", "## Tokens and cost", "## Failed calls",
        "## Minority report",
    ]
    assert "conformity flag" in md
    assert "burst limits" in md
    for line in md.splitlines():
        if line.startswith("|"):
            assert line.endswith("|")


def test_audit_cli(ledger: Ledger, sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected = _report(ledger).model_dump(mode="json")
    ledger.close()
    for args, check in (
        (["--json"], lambda out: json.loads(out) == expected),
        (["--markdown"], lambda out: out.startswith("# Audit: Rate limiter design")),
        ([], lambda out: "Minority report" in out),
    ):
        with pytest.raises(SystemExit) as exc:
            _main_then_exit(["audit", str(SID)[:6], "--store", sqlite_url, *args])
        assert exc.value.code == 0
        assert check(capsys.readouterr().out)
    with pytest.raises(SystemExit) as exc:
        main(["audit", str(SID), "--store", sqlite_url, "--json", "--markdown"])
    captured = capsys.readouterr()
    assert exc.value.code == 2
    assert captured.out == ""
    assert "at most one" in captured.err


stances = st.sampled_from(list(Stance))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.builds(
            Iteration,
            votes=st.fixed_dictionaries({"alice": stances, "bob": stances, "carol": stances}),
            critiques=st.booleans(),
            synthesis=st.booleans(),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_conformity_on_generated_sessions(script: list[Iteration]) -> None:
    """The rule restated for the builder's sessions: critiques and syntheses never mention a
    voter's own concern, so nothing influences anyone; a vote that stops agreeing raises a new
    concern (an own argument); a flag is a side move toward the previous majority without one."""
    agg = build(uuid.UUID(int=3), script)
    events = [
        RecordedEvent(
            session_id=str(e.originator_id), position=e.originator_version, type=e.TYPE,
            timestamp=e.timestamp, data=e.data, hash=e.hash, prev_hash=e.prev_hash,
        )
        for e in agg.collect_events()
    ]
    r = audit_report(events)
    expected = []
    for prev, cur in itertools.pairwise(script):
        majority = 2 * sum(1 for s in prev.votes.values() if s.agrees) > len(prev.votes)
        for name in ("alice", "bob", "carol"):
            a, b = prev.votes[name], cur.votes[name]
            if a is b:
                continue
            side = {True: 1, False: 0}
            sa = side[a.agrees] - int(a.disagrees)
            sb = side[b.agrees] - int(b.disagrees)
            toward = sb > sa if majority else sb < sa
            own = a.agrees and not b.agrees
            expected.append((name, toward and not own))
    got = [(s.participant, s.conformity) for s in r.stance_shifts]
    assert sorted(got) == sorted(expected)
    assert [c.participant for c in r.conformity] == [s.participant for s in r.stance_shifts
                                                     if s.conformity]


def _main_then_exit(argv: list[str]) -> None:
    """Run the CLI in-process; a command that returns is exit code 0, as the console script's."""
    main(argv)
    raise SystemExit(0)


def test_a_vote_whose_score_contradicts_its_stance_is_flagged(sqlite_url: str) -> None:
    """The audit names each vote whose score says the opposite of its stance, and the events
    stay as they were recorded."""
    b = story(SID)
    b.round(RoundKind.DRAFT, iteration=1, answers={b.names[0]: "Draft"}, close=True)
    b.round(RoundKind.CONVERGENCE, iteration=1, participants=b.names)
    for name, (agrees, score) in zip(b.names, [(True, 12), (False, 95), (True, 80)], strict=True):
        b.answer(name, "my vote").vote(name, agrees=agrees, score=score)
    b.close_round()
    with Ledger(sqlite_url) as led:
        led.save(b.aggregate)
        r = _report(led)
        recorded = [e.data["vote"]["score"] for e in led.events(SID) if e.type == "VoteRecorded"]
    flagged = {t.participant: [v.contradiction for v in t.votes] for t in r.trajectories}
    alice, bob, carol = b.names
    assert flagged == {
        alice: ["agree with score 12: the score says it does not agree"],
        bob: ["disagree with score 95: the score says it agrees"],
        carol: [None],
    }
    assert recorded == [12, 95, 80]
    in_json = {t["participant"]: t["votes"][0] for t in r.model_dump(mode="json")["trajectories"]}
    assert in_json[alice]["contradiction"] == flagged[alice][0]
    assert "contradiction" not in in_json[carol]
    md = render_markdown(r)
    assert "agree ⚠" in md
    assert f"- ⚠ {alice}, round 2: agree with score 12: the score says it does not agree" in md
