"""Replay reports non-determinism at the right position, never calls out, never writes.

Issue "The promises", items 1–2: the offline demo deliberation (four scripted participants,
a strong dissent in iteration 1, convergence in iteration 2) is run once through the real
orchestrator into a SQLite file, its voices answering in-process by the demo's script
(``ScriptedProvider``); each test works on its own copy. Expected positions are read from the
recorded log (the first event of the kind the change affects), never hard-coded.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import shutil
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from forge_ledger.app.demo import DEMO_SCRIPT, demo_topic
from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.values import ParticipantRole, Persona, SessionConfig
from forge_ledger.engine import prompts, steps
from forge_ledger.ledger import Ledger, RecordedEvent
from forge_ledger.ledger.verify import verify_session
from forge_ledger.orchestrator import Orchestrator
from forge_ledger.records.replay import ReplayResult, replay_session
from forge_ledger.testing import ScriptedProvider, bundled_script
from support.orchestrator import offline_demo_participants
from support.replay import AGREEING_VOTE, first_dissenting_vote, tamper_content

convergence_rules = importlib.import_module("forge_ledger.engine.convergence")
"""The module (``forge_ledger.engine.convergence`` is also the name of a re-exported function)."""


async def _no_sleep(_: float) -> None:
    """Back-off is recorded, not waited for."""


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, UUID]:
    """One demo deliberation recorded in a SQLite file (copied by each test), its voices
    answering in-process by the demo's script: how it was recorded is not the subject."""
    path = tmp_path_factory.mktemp("replay-demo") / "demo.sqlite"
    with Ledger(str(path)) as ledger:

        async def go() -> UUID:
            provider = ScriptedProvider.from_script(bundled_script(DEMO_SCRIPT))
            try:
                orch = Orchestrator(
                    ledger,
                    provider,
                    clock=FixedStepClock(datetime(2026, 3, 1, tzinfo=UTC), timedelta(seconds=2)),
                    ids=SequentialIds("replay-detection"),
                    sleep=_no_sleep,
                )
                sid = orch.start(
                    demo_topic(),
                    SessionConfig(max_cost_usd=1.0, max_rounds=12),
                    offline_demo_participants(),
                )
                state = await orch.run(sid)
                assert state.status.value == "converged"
                return sid
            finally:
                await provider.aclose()

        sid = asyncio.run(go())
    return path, sid


@pytest.fixture
def demo_copy(demo_store: tuple[Path, UUID], tmp_path: Path) -> tuple[str, UUID]:
    src, sid = demo_store
    dst = tmp_path / "demo.sqlite"
    shutil.copyfile(src, dst)
    return str(dst), sid


def _events(url: str, sid: UUID) -> list[RecordedEvent]:
    with Ledger(url) as ledger:
        return list(ledger.events(sid))


def _replay(url: str, sid: UUID) -> ReplayResult:
    with Ledger(url) as ledger:
        return replay_session(ledger, sid)


def _paths(result: ReplayResult) -> set[str]:
    assert result.difference is not None
    return {f["path"] for f in result.difference.fields}


def _first(events: list[RecordedEvent], type_: str, **data: Any) -> RecordedEvent:
    return next(
        e for e in events if e.type == type_ and all(e.data.get(k) == v for k, v in data.items())
    )


def _round_kinds(events: list[RecordedEvent]) -> dict[int, str]:
    return {e.data["number"]: e.data["kind"] for e in events if e.type == "RoundStarted"}


# --------------------------------------------------------------------------- baseline


def test_untouched_demo_replays_identically(demo_copy: tuple[str, UUID]) -> None:
    url, sid = demo_copy
    events = _events(url, sid)
    result = _replay(url, sid)
    assert result.ok, result.difference and result.difference.as_json()
    assert result.matched == result.events == len(events)
    contributions = sum(1 for e in events if e.type == "ContributionRecorded")
    assert result.calls_served == contributions


def test_tamper_helper_recomputes_the_stored_hashes_exactly(demo_copy: tuple[str, UUID]) -> None:
    """The forger's re-hash, applied without a change, reproduces the stored chain."""
    url, sid = demo_copy
    events = _events(url, sid)
    contribution, _ = first_dissenting_vote(events)
    tamper_content(
        url, sid, contribution.position, contribution.data["response"]["content"], rehash=True,
    )
    assert [e.hash for e in _events(url, sid)] == [e.hash for e in events]


# --------------------------------------------------------------------------- (a) recorded answer


def test_edited_response_without_rehash_is_reported_at_the_edited_event(
    demo_copy: tuple[str, UUID],
) -> None:
    url, sid = demo_copy
    events = _events(url, sid)
    contribution, _ = first_dissenting_vote(events)
    tamper_content(url, sid, contribution.position, AGREEING_VOTE, rehash=False)

    result = _replay(url, sid)
    d = result.difference
    assert d is not None
    # The replayed contribution carries the (edited) recorded answer, so its data matches;
    # only its hash does not: the stored event no longer hashes to the hash it carries.
    assert d.position == contribution.position
    assert d.recorded_type == d.replayed_type == "ContributionRecorded"
    assert _paths(result) == {"hash"}
    assert "edited" in d.message
    assert result.matched == contribution.position - 1
    with Ledger(url) as ledger:
        report = verify_session(ledger, sid)
    assert not report.ok
    assert report.position == contribution.position


def test_edited_vote_with_rewritten_chain_is_reported_at_the_parsed_vote(
    demo_copy: tuple[str, UUID],
) -> None:
    """A consistent forgery passes the hash chain but not replay: the current parser turns the
    edited answer into a vote that differs from the recorded ``VoteRecorded``."""
    url, sid = demo_copy
    events = _events(url, sid)
    contribution, vote = first_dissenting_vote(events)
    tamper_content(url, sid, contribution.position, AGREEING_VOTE, rehash=True)

    result = _replay(url, sid)
    d = result.difference
    assert d is not None
    assert d.position == vote.position
    assert d.recorded_type == d.replayed_type == "VoteRecorded"
    paths = _paths(result)
    assert {"data.vote.agrees", "data.vote.stance", "data.vote.score"} <= paths
    agrees = next(f for f in d.fields if f["path"] == "data.vote.agrees")
    assert agrees["recorded"] is False
    assert agrees["replayed"] is True
    assert result.matched == vote.position - 1


# --------------------------------------------------------------------------- (b) prompt template


def _alt_header(round: Any) -> str:
    return f"Round {round.number} — {round.kind.value} — iteration {round.iteration}"


def test_changed_prompt_header_is_reported_at_the_first_contribution_with_a_text_diff(
    demo_copy: tuple[str, UUID], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, sid = demo_copy
    events = _events(url, sid)
    first = _first(events, "ContributionRecorded")
    old_first_line = first.data["messages"][1]["content"].split("\n", 1)[0]
    monkeypatch.setattr(prompts, "header", _alt_header)

    result = _replay(url, sid)
    d = result.difference
    assert d is not None
    assert d.position == first.position
    assert d.recorded_type == d.replayed_type == "ContributionRecorded"
    assert {"data.messages[1].content", "data.prompt_hash"} <= _paths(result)
    assert f"-{old_first_line}" in d.prompt_diff.splitlines()
    assert "+Round 1 — draft — iteration 1" in d.prompt_diff.splitlines()
    assert "[system]" not in {ln[1:] for ln in d.prompt_diff.splitlines() if ln[:1] in "+-"}


def test_changed_persona_text_is_reported_at_the_first_synthesis_contribution(
    demo_copy: tuple[str, UUID], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the synthesizer's system prompt holds the persona: the first difference is the
    first contribution of the first synthesis round, everything before it matches."""
    url, sid = demo_copy
    events = _events(url, sid)
    kinds = _round_kinds(events)
    synthesis = next(
        e
        for e in events
        if e.type == "ContributionRecorded" and kinds[e.data["round"]] == "synthesis"
    )
    changed = dict(vars(prompts)["_PERSONA_TEXT"])
    changed[Persona.ARCHITECTE] = "Facilitator persona: architecte. Be brief."
    monkeypatch.setattr(prompts, "_PERSONA_TEXT", changed)

    result = _replay(url, sid)
    d = result.difference
    assert d is not None
    assert d.position == synthesis.position
    assert result.matched == synthesis.position - 1
    assert "data.messages[0].content" in _paths(result)
    assert "+Facilitator persona: architecte. Be brief." in d.prompt_diff.splitlines()


# --------------------------------------------------------------------------- (c) engine rules


def test_changed_role_weight_is_reported_at_the_first_convergence_evaluation(
    demo_copy: tuple[str, UUID], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, sid = demo_copy
    events = _events(url, sid)
    evaluated = _first(events, "ConvergenceEvaluated")
    synthesizer = next(
        e.data["participant"]["name"]
        for e in events
        if e.type == "ParticipantJoined" and e.data["participant"]["role"] == "synthesizer"
    )
    monkeypatch.setitem(convergence_rules.DEFAULT_ROLE_WEIGHTS, ParticipantRole.SYNTHESIZER, 2.0)

    result = _replay(url, sid)
    d = result.difference
    assert d is not None
    assert d.position == evaluated.position
    assert d.recorded_type == d.replayed_type == "ConvergenceEvaluated"
    fields = {f["path"]: f for f in d.fields}
    assert fields[f"data.weights.{synthesizer}"]["recorded"] == 0.75
    assert fields[f"data.weights.{synthesizer}"]["replayed"] == 2.0
    assert "data.score" in fields
    assert result.matched == evaluated.position - 1


def test_changed_critique_rotation_is_reported_at_the_critique_round_start(
    demo_copy: tuple[str, UUID], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, sid = demo_copy
    events = _events(url, sid)
    critique_start = _first(events, "RoundStarted", kind="critique")
    original = steps.critique_targets

    def last_critic_skips(
        participants: tuple[str, ...], authors: tuple[str, ...],
    ) -> dict[str, str]:
        """A changed rotation: the last critic in participant order no longer critiques."""
        targets = original(participants, authors)
        last = [p for p in participants if p in targets][-1]
        return {k: v for k, v in targets.items() if k != last}

    monkeypatch.setattr(steps, "critique_targets", last_critic_skips)
    result = _replay(url, sid)
    d = result.difference
    assert d is not None
    assert d.position == critique_start.position
    assert d.recorded_type == d.replayed_type == "RoundStarted"
    paths = _paths(result)
    assert "data.participants" in paths
    assert any(p.startswith("data.targets") for p in paths)
    assert result.matched == critique_start.position - 1


def test_stricter_convergence_rule_is_reported_where_the_session_converged(
    demo_copy: tuple[str, UUID], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rule change that flips the final decision: the last ``ConvergenceEvaluated`` now says
    "not converged"."""
    url, sid = demo_copy
    events = _events(url, sid)
    last_evaluation = [e for e in events if e.type == "ConvergenceEvaluated"][-1]
    assert last_evaluation.data["converged"] is True
    original = convergence_rules.convergence

    def never_converge(state: Any, round: Any) -> Any:
        result = original(state, round)
        return result.model_copy(update={"converged": False})

    monkeypatch.setattr(convergence_rules, "convergence", never_converge)
    monkeypatch.setattr(steps, "convergence", never_converge)
    import forge_ledger.engine.outcomes as outcomes

    if hasattr(outcomes, "convergence"):
        monkeypatch.setattr(outcomes, "convergence", never_converge)
    result = _replay(url, sid)
    d = result.difference
    assert d is not None
    assert d.position == last_evaluation.position
    fields = {f["path"]: f for f in d.fields}
    assert fields["data.converged"]["recorded"] is True
    assert fields["data.converged"]["replayed"] is False


# --------------------------------------------------------------------------- no network, no writes


def _digest(path: Path) -> dict[str, str]:
    out = {}
    for p in sorted(path.parent.iterdir()):
        if p.name.startswith(path.name):
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_replay_opens_no_connection_and_writes_nothing(
    demo_copy: tuple[str, UUID], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, sid = demo_copy
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args[1:] if args else kwargs)
        raise AssertionError(f"replay opened a network connection: {args!r}")

    with Ledger(url) as ledger:
        before_id = ledger.max_notification_id()
        before_bytes = _digest(Path(url))

        def no_save(*_aggregates: Any) -> None:
            raise AssertionError("replay tried to save")

        monkeypatch.setattr(ledger, "save", no_save)
        monkeypatch.setattr(socket.socket, "connect", refuse)
        monkeypatch.setattr(socket.socket, "connect_ex", refuse)
        monkeypatch.setattr(socket, "create_connection", refuse)
        result = replay_session(ledger, sid)
        monkeypatch.undo()
        assert attempts == []
        assert result.ok, result.difference and result.difference.as_json()
        assert result.calls_served > 0
        assert ledger.max_notification_id() == before_id
        assert _digest(Path(url)) == before_bytes
