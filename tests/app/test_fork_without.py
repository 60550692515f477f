"""Forks without a participant, and a fork beside its parent.

The scripted panel is built so that one participant's absence flips the outcome: alice and
bob always agree, carol disagrees only with the first synthesis, dave never agrees. With dave
the session runs out of refinements without converging; without him from iteration 1 on, the
second vote is unanimous.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from forge_ledger.audit import audit_report
from forge_ledger.audit.aggregates import counterfactual_influence
from forge_ledger.audit.counterfactual import compare_fork
from forge_ledger.audit.metrics import session_row
from forge_ledger.cli import main
from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.values import ParticipantRole, SessionConfig, SessionStatus
from forge_ledger.engine.steps import roles_after_leaving, synthesizer
from forge_ledger.errors import ConfigError, InvariantViolation
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.orchestrator import Orchestrator
from forge_ledger.records.lineage import fork
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import ScriptedProvider
from support.orchestrator import TOPIC, generalists, voice, vote_json

NAMES = ("alice", "bob", "carol", "dave")
CONFIG = SessionConfig(max_rounds=40, max_recursive_depth=2, max_cost_usd=10.0)
START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
AGREE = vote_json(True, "strongly_agree", 95)
AGAINST = vote_json(False, "disagree", 30, concerns=["every failed attempt must be kept"])


def _script() -> dict[str, Any]:
    first_vote = {"match": "· convergence · iteration 1", "content": AGAINST}
    return {
        "alice": voice("alice", vote=AGREE),
        "bob": voice("bob", vote=AGREE),
        "carol": voice("carol", vote=AGREE, before=[first_vote]),
        "dave": voice("dave", vote=AGAINST),
    }


async def _no_sleep(_: float) -> None:
    """Back-off is recorded, not waited for."""


def _orchestrator(ledger: Ledger, provider: ScriptedProvider, tag: str) -> Orchestrator:
    clock = FixedStepClock(START, timedelta(seconds=1))
    return Orchestrator(ledger, provider, clock=clock, ids=SequentialIds(tag), sleep=_no_sleep)


def _run_parent(ledger: Ledger) -> uuid.UUID:
    provider = ScriptedProvider.from_script(_script())
    orch = _orchestrator(ledger, provider, "p")
    sid = orch.start(TOPIC, CONFIG, generalists(None, NAMES))
    asyncio.run(orch.run(sid))
    return sid


def _resume(ledger: Ledger, fid: uuid.UUID) -> ScriptedProvider:
    provider = ScriptedProvider.from_script(_script())
    asyncio.run(_orchestrator(ledger, provider, "f").resume(fid))
    return provider


def _fork(ledger: Ledger, parent: uuid.UUID, **kwargs: Any) -> uuid.UUID:
    clock = FixedStepClock(START + timedelta(days=1))
    return fork(ledger, parent, clock=clock, ids=SequentialIds("k"), at_iteration=1, **kwargs)


@pytest.fixture
def ledger(sqlite_url: str) -> Any:
    with Ledger(sqlite_url) as led:
        yield led


def test_dropping_the_lone_dissenter_flips_the_outcome(ledger: Ledger) -> None:
    parent = _run_parent(ledger)
    assert ledger.state(parent).status is SessionStatus.COMPLETE
    fid = _fork(ledger, parent, without=["dave"])
    types = [e.type for e in ledger.events(fid)]
    assert types == ["SessionForked", "ParticipantLeft"]
    assert ledger.state(fid).participant_names == ["alice", "bob", "carol"]
    provider = _resume(ledger, fid)
    assert provider.calls_for("dave") == []
    after = ledger.state(fid)
    assert after.status is SessionStatus.CONVERGED
    assert verify_session(ledger, fid).ok
    assert replay_session(ledger, fid).ok

    c = compare_fork(list(ledger.events(parent)), list(ledger.events(fid)))
    assert c.without == ("dave",)
    assert c.outcome_changed
    assert c.converged_changed
    assert (c.parent.converged, c.fork.converged) == (False, True)
    assert c.fork.rounds_to_converge == c.fork.rounds
    assert c.parent.rounds_to_converge is None
    assert c.fork.rounds_after_fork == 3  # refinement, synthesis, vote
    assert c.fork.rounds_after_fork < c.parent.rounds_after_fork
    assert c.fork.cost_after_fork_usd is not None
    assert c.parent.cost_after_fork_usd is not None
    assert 0 < c.fork.cost_after_fork_usd < c.parent.cost_after_fork_usd
    assert c.document_similarity is not None
    assert 0.0 <= c.document_similarity <= 1.0
    assert c.fork_iteration == 1
    with pytest.raises(ValueError, match="not a fork"):
        compare_fork(list(ledger.events(fid)), list(ledger.events(parent)))

    row = session_row(audit_report(list(ledger.events(fid))), c, topic="retries", repeat=0)
    assert (row.parent_id, row.without, row.outcome_changed) == (str(parent), ("dave",), True)
    assert row.similarity_to_parent == c.document_similarity
    assert (row.rounds, row.cost_usd) == (c.fork.rounds, c.fork.cost_usd)
    assert row.converged
    influence = counterfactual_influence([row])
    assert [(i.participant, i.outcome_change.value, i.topics) for i in influence] == [
        ("dave", 1.0, 1)
    ]


BLOCKING = vote_json(False, "strongly_disagree", 10, concerns=["every failed attempt must be kept"])


def test_without_the_only_dissenter_the_others_vote_again(ledger: Ledger) -> None:
    """dave alone objects, strongly. Without him nobody is left to refine, and the vote he
    spoke in no longer speaks for the panel: the three who stay vote again on the same text.
    His strong dissent stays open in the log, but no participant holds it, so it blocks nothing."""
    script = _script()
    script["carol"] = voice("carol", vote=AGREE)
    script["dave"] = voice("dave", vote=BLOCKING)
    orch = _orchestrator(ledger, ScriptedProvider.from_script(script), "p")
    parent = orch.start(TOPIC, CONFIG, generalists(None, NAMES))
    asyncio.run(orch.run(parent))
    assert ledger.state(parent).status is SessionStatus.COMPLETE

    fid = _fork(ledger, parent, without=["dave"])
    asyncio.run(_orchestrator(ledger, ScriptedProvider.from_script(script), "f").resume(fid))
    after = ledger.state(fid)
    assert after.status is SessionStatus.CONVERGED, after.status_reason
    first_vote = [r for r in after.active_rounds if r.iteration == 1][-1]
    assert [(r.kind.value, r.iteration) for r in after.active_rounds][-1] == ("convergence", 2)
    assert [r.kind.value for r in after.active_rounds if r.iteration == 2] == ["convergence"]
    assert list(after.active_rounds[-1].expected) == ["alice", "bob", "carol"]
    assert first_vote.kind.value == "convergence"
    held = [d for d in after.divergences if d.is_open and d.strong]
    assert [
        p.participant for d in held for p in d.positions if p.stance.value == "strongly_disagree"
    ] == ["dave"]
    assert verify_session(ledger, fid).ok
    assert replay_session(ledger, fid).ok


def test_a_participant_still_present_keeps_a_strong_dissent_blocking(ledger: Ledger) -> None:
    """The same panel without bob: dave is still here, so his strong dissent still blocks and
    he still refines; the fork ends as its parent did."""
    script = _script()
    script["carol"] = voice("carol", vote=AGREE)
    script["dave"] = voice("dave", vote=BLOCKING)
    orch = _orchestrator(ledger, ScriptedProvider.from_script(script), "p")
    parent = orch.start(TOPIC, CONFIG, generalists(None, NAMES))
    asyncio.run(orch.run(parent))
    fid = _fork(ledger, parent, without=["bob"])
    asyncio.run(_orchestrator(ledger, ScriptedProvider.from_script(script), "f").resume(fid))
    after = ledger.state(fid)
    assert after.status is SessionStatus.COMPLETE
    assert "refinement" in [r.kind.value for r in after.active_rounds if r.iteration == 2]


def test_a_fork_without_change_reproduces_its_parent(ledger: Ledger) -> None:
    parent = _run_parent(ledger)
    fid = _fork(ledger, parent)
    _resume(ledger, fid)
    c = compare_fork(list(ledger.events(parent)), list(ledger.events(fid)))
    assert not c.outcome_changed
    assert c.without == ()
    assert c.document_similarity == 1.0
    same = {"session_id"}
    assert c.fork.model_dump(exclude=same) == c.parent.model_dump(exclude=same)
    assert c.still_open == tuple(d.id for d in c.dissent if d.parent_status == "open")
    assert c.closed_in_fork == ()


def test_a_fork_of_a_fork_point_only_is_its_parent_at_that_point(ledger: Ledger) -> None:
    """Not resumed, a fork without dave keeps every recorded vote, dave's included."""
    parent = _run_parent(ledger)
    fid = _fork(ledger, parent, without=["dave"])
    audit = audit_report(list(ledger.events(fid)))
    votes = {t.participant: len(t.votes) for t in audit.trajectories}
    assert votes["dave"] == 1
    dave = next(t for t in audit.trajectories if t.participant == "dave")
    assert dave.model == "openai/dave"  # who left keeps the model it answered with


def test_a_fork_after_the_drafts_critiques_only_those_who_stay(ledger: Ledger) -> None:
    parent = _run_parent(ledger)
    drafted = next(
        e.position
        for e in ledger.events(parent)
        if e.type == "RoundCompleted" and e.data["number"] == 1
    )
    clock = FixedStepClock(START + timedelta(days=1))
    fid = fork(
        ledger, parent, clock=clock, ids=SequentialIds("d"), at_event=drafted, without=["dave"]
    )
    provider = _resume(ledger, fid)
    assert provider.calls_for("dave") == []
    critique = ledger.state(fid).rounds[1]
    assert critique.kind.value == "critique"
    assert critique.expected == ["alice", "bob", "carol"]
    assert "dave" not in critique.targets.values()
    assert ledger.state(fid).status is SessionStatus.CONVERGED
    assert replay_session(ledger, fid).ok


def test_refusals(ledger: Ledger) -> None:
    parent = _run_parent(ledger)
    with pytest.raises(ConfigError, match="no participant named 'erin'"):
        _fork(ledger, parent, without=["erin"])
    with pytest.raises(ConfigError, match="given twice"):
        _fork(ledger, parent, without=["dave", "dave"])
    with pytest.raises(InvariantViolation, match="at least 2 participants"):
        _fork(ledger, parent, without=["alice", "bob", "carol"])
    assert ledger.session_ids() == [parent]  # nothing half-written


def test_the_only_synthesizer_hands_its_role_to_a_generalist() -> None:
    people = generalists(None, ["ann", "ben", "cid"])
    people[0] = people[0].model_copy(update={"role": ParticipantRole.SYNTHESIZER})
    people[1] = people[1].model_copy(update={"role": ParticipantRole.CRITIC})
    heirs = roles_after_leaving(people, "ann")
    assert [(p.name, p.role) for p in heirs] == [("cid", ParticipantRole.SYNTHESIZER)]
    assert roles_after_leaving(people, "ben") == ()  # a critic's role leaves with it
    people[2] = people[2].model_copy(update={"role": ParticipantRole.DEVILS_ADVOCATE})
    with pytest.raises(InvariantViolation, match="only synthesizer"):
        roles_after_leaving(people, "ann")


def test_the_heir_synthesizes_in_the_fork(ledger: Ledger) -> None:
    provider = ScriptedProvider.from_script(_script())
    people = generalists(None, NAMES)
    people[3] = people[3].model_copy(update={"role": ParticipantRole.SYNTHESIZER})
    orch = _orchestrator(ledger, provider, "s")
    parent = orch.start(TOPIC, CONFIG, people)
    asyncio.run(orch.run(parent))
    fid = _fork(ledger, parent, without=["dave"])
    state = ledger.state(fid)
    assert synthesizer(state) == "alice"
    assert state.participant("alice") is not None
    assert state.participant("alice").role is ParticipantRole.SYNTHESIZER  # type: ignore[union-attr]
    _resume(ledger, fid)
    after = ledger.state(fid)
    synth = [r for r in after.rounds if r.kind.value == "synthesis"][-1]
    assert [c.participant for c in synth.contributions] == ["alice"]
    assert replay_session(ledger, fid).ok


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The CLI in-process: (exit code, stdout, stderr); a command that returns exits 0."""
    code = 0
    try:
        main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_fork_without_and_diff(
    sqlite_url: str, ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = _run_parent(ledger)
    code, out, err = _run(
        [
            "fork",
            str(parent),
            "--at-iteration",
            "1",
            "--without",
            "dave",
            "--store",
            sqlite_url,
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["without"] == ["dave"]
    fid = uuid.UUID(doc["session_id"])
    _resume(ledger, fid)
    code, out, err = _run(["diff", str(parent), str(fid), "--store", sqlite_url, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fork_comparison"]["outcome_changed"] is True
    assert doc["fork_comparison"]["without"] == ["dave"]
    code, out, err = _run(["diff", str(fid), str(parent), "--store", sqlite_url, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["fork_comparison"] == doc["fork_comparison"]  # either order
    code, text, err = _run(["diff", str(parent), str(fid), "--store", sqlite_url], capsys)
    assert code == 0, err
    assert "outcome changed" in text
    assert "without dave" in text


def test_cli_refuses_an_unknown_name_in_one_line(
    sqlite_url: str, ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = _run_parent(ledger)
    code, out, err = _run(
        ["fork", str(parent), "--at-iteration", "1", "--without", "erin", "--store", sqlite_url],
        capsys,
    )
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "no participant named 'erin'" in err
    assert "Traceback" not in err


def test_a_forks_export_tells_the_iterations_it_inherited(ledger: Ledger, tmp_path: Any) -> None:
    """The fork is its parent up to the fork point, in its YAML file too: the history lists
    the parent's iteration 1, as the parent's own file does, then the fork's own."""
    import yaml

    from forge_ledger.yaml_format import write_export

    parent = _run_parent(ledger)
    fid = _fork(ledger, parent, without=["dave"])
    _resume(ledger, fid)
    mine = yaml.safe_load(write_export(ledger, fid, path=tmp_path / "f.yaml").read_text())
    theirs = yaml.safe_load(write_export(ledger, parent, path=tmp_path / "p.yaml").read_text())
    history = mine["session"]["history"]
    assert [h["iteration"] for h in history] == [1, 2]
    assert history[0] == theirs["session"]["history"][0]
    assert mine["session"]["iteration"] == 2
    assert [e.position for e in ledger.history(fid)] == list(range(1, ledger.head_version(fid) + 1))
