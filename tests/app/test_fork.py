"""Forks: shared prefix, recorded origin, model swaps and config overrides, continuing a fork."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from forge_ledger.cli import main
from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.state import SessionState
from forge_ledger.domain.values import ModelProvider, RoundKind, SessionStatus, Stance
from forge_ledger.errors import ConfigError, InvariantViolation, UsageError
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.orchestrator import Orchestrator
from forge_ledger.projections.consensus import consensus_trail
from forge_ledger.projections.dissent import dissent_log
from forge_ledger.projections.document import fold_lineage
from forge_ledger.projections.show_view import session_ems
from forge_ledger.records.lineage import apply_model_swaps, fork, override_config
from forge_ledger.report._gather import gather
from forge_ledger.testing import ScriptedProvider, bundled_script
from support.orchestrator import run_demo_session
from support.stories import PARTICIPANTS, THREE_ITERATIONS, build, continued, story, vote

PARENT = uuid.UUID(int=1)


@pytest.fixture
def parent_ledger(store_url: str) -> Any:
    with Ledger(store_url) as ledger:
        ledger.save(build(PARENT, THREE_ITERATIONS))
        yield ledger


def _event_hash(ledger: Ledger, sid: uuid.UUID, position: int) -> str:
    return next(e.hash for e in ledger.events(sid) if e.position == position)


def test_fork_at_iteration_records_origin_and_verifies(parent_ledger: Ledger) -> None:
    ledger = parent_ledger
    fid = fork(
        ledger, PARENT, clock=FixedStepClock(), ids=SequentialIds("t"), at_iteration=2,
        model_swaps=["bob=anthropic/claude-x"], config_overrides={"max_rounds": 20},
    )
    boundary = ledger.position_of_iteration(PARENT, 2)
    state = ledger.state(fid)
    origin = state.fork_origin
    assert origin is not None
    assert origin.parent_id == str(PARENT)
    assert origin.parent_position == boundary
    assert origin.parent_iteration == 2
    assert origin.parent_hash == _event_hash(ledger, PARENT, boundary)
    assert verify_session(ledger, fid).ok
    assert verify_session(ledger, PARENT).ok
    assert state.status is SessionStatus.PAUSED
    assert state.config.max_rounds == 20
    bob = state.participant("bob")
    assert bob is not None
    assert bob.model == "anthropic/claude-x"
    assert bob.provider is ModelProvider.ANTHROPIC
    parent_at = ledger.state(PARENT, at_iteration=2)
    assert [r.model_dump() for r in state.rounds] == [r.model_dump() for r in parent_at.rounds]
    assert state.iteration == 2
    assert len(state.convergence) == 2


def test_a_fork_before_its_fork_point_is_its_parent(parent_ledger: Ledger) -> None:
    """Positions, iterations and times before the fork point read the parent's history,
    under the fork's name; the fork's own events continue the parent's numbering."""
    ledger = parent_ledger
    at = datetime(2030, 1, 1, tzinfo=UTC)
    fid = fork(ledger, PARENT, clock=FixedStepClock(at), ids=SequentialIds("b"), at_iteration=2)
    k = ledger.position_of_iteration(PARENT, 2)
    assert [e.position for e in ledger.events(fid)] == [k]
    one = ledger.position_of_iteration(PARENT, 1)
    assert ledger.position_of_iteration(fid, 1) == one
    assert ledger.position_of_iteration(fid, 2) == k
    early = next(e for e in ledger.events(PARENT) if e.position == one)
    for state in (
        ledger.state(fid, at_iteration=1),
        ledger.state(fid, at_event=one),
        ledger.state(fid, at_time=early.timestamp),
    ):
        assert state.id == str(fid)
        assert state.head_hash == early.hash
        assert state.version == one
    contribution = ledger.state(fid).rounds[0].contributions[0]
    assert ledger.prompt(fid, contribution) == ledger.prompt(PARENT, contribution)
    b = continued(ledger.get(fid)).resume()
    ledger.save(b.aggregate)
    assert [e.position for e in ledger.events(fid)] == [k, k + 1]
    assert ledger.position_at_time(fid, at + timedelta(days=1)) == k + 1


def test_a_fork_at_a_time_before_it_was_made_reads_its_parent_then(
    parent_ledger: Ledger,
) -> None:
    """Until the fork was made, a time reads what its parent held then, the fork point
    included (the fork's first event stands for it); once made, the fork's own first event."""
    ledger = parent_ledger
    made = datetime(2030, 1, 1, tzinfo=UTC)
    fid = fork(ledger, PARENT, clock=FixedStepClock(made), ids=SequentialIds("b"), at_iteration=2)
    k = ledger.position_of_iteration(PARENT, 2)
    parent_events = list(ledger.events(PARENT))
    assert parent_events[-1].position > k  # the parent went on after the fork point
    fork_point = ledger.state(PARENT, at_event=k)
    for e in parent_events:
        then = ledger.state(PARENT, at_time=e.timestamp)
        want = then if then.version <= k else fork_point
        got = ledger.state(fid, at_time=e.timestamp)
        assert got.id == str(fid)
        assert got.fork_origin is not None
        assert got.fork_origin.parent_position == k
        assert got.model_dump(exclude={"id", "fork_origin"}) == want.model_dump(
            exclude={"id", "fork_origin"}
        )
    assert ledger.position_at_time(fid, made - timedelta(seconds=1)) == k
    own = ledger.state(fid, at_time=made)
    assert own == ledger.state(fid, at_event=k) == ledger.state(fid, at_iteration=2)
    assert own.status is SessionStatus.PAUSED


def test_forked_session_can_continue(parent_ledger: Ledger) -> None:
    """The fork is left in a state the engine continues from: resume and run an iteration."""
    ledger = parent_ledger
    fid = fork(ledger, PARENT, clock=FixedStepClock(), ids=SequentialIds("c"), at_iteration=1)
    agg = ledger.get(fid)
    clock = FixedStepClock()
    agg.resume(at=clock.now(), reason="continue the fork")
    number = agg.start_round(
        kind=RoundKind.SYNTHESIS, iteration=2, participants=["carol"], at=clock.now(),
    )
    assert number == len(ledger.state(PARENT, at_iteration=1).rounds) + 1
    ledger.save(agg)
    after = ledger.state(fid)
    assert after.status is SessionStatus.IN_PROGRESS
    assert after.open_round is not None
    assert after.open_round.number == number
    assert verify_session(ledger, fid).ok


def test_fork_inside_open_round_is_refused(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.save(build(PARENT, THREE_ITERATIONS))
        inside = next(
            e.position for e in ledger.events(PARENT)
            if e.type == "ContributionRecorded" and e.position > 20
        )
        with pytest.raises(InvariantViolation, match="still open"):
            fork(ledger, PARENT, clock=FixedStepClock(), ids=SequentialIds(), at_event=inside)
        assert len(ledger.session_ids()) == 1


def test_fork_of_finished_session_at_head_is_paused(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.save(build(PARENT, THREE_ITERATIONS))
        fid = fork(ledger, PARENT, clock=FixedStepClock(), ids=SequentialIds())
        state = ledger.state(fid)
        assert ledger.state(PARENT).status is SessionStatus.CONVERGED
        assert state.status is SessionStatus.PAUSED
        assert state.fork_origin is not None
        assert state.fork_origin.parent_position == ledger.head_version(PARENT)


def test_fork_rejects_bad_positions_and_renamed_participants(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.save(build(PARENT, THREE_ITERATIONS))
        kw: dict[str, Any] = {"clock": FixedStepClock(), "ids": SequentialIds()}
        with pytest.raises(UsageError):
            fork(ledger, PARENT, at_event=10_000, **kw)
        with pytest.raises(UsageError):
            fork(ledger, PARENT, at_iteration=9, **kw)
        with pytest.raises(UsageError):
            fork(ledger, PARENT, at_iteration=1, at_event=3, **kw)
        renamed = [*PARTICIPANTS[:2], PARTICIPANTS[2].model_copy(update={"name": "x"})]
        with pytest.raises(ConfigError, match="keep the parent's names"):
            fork(ledger, PARENT, at_iteration=1, participants=renamed, **kw)
        reordered = [PARTICIPANTS[2], PARTICIPANTS[0], PARTICIPANTS[1]]
        fid = fork(ledger, PARENT, at_iteration=1, participants=reordered, **kw)
        assert ledger.state(fid).participant_names == ["alice", "bob", "carol"]


def test_model_swaps_named_and_positional() -> None:
    swapped = apply_model_swaps(PARTICIPANTS, ["gemini/g1", "carol=openai/o4"])
    assert [p.model for p in swapped] == ["gemini/g1", "openai/beta", "openai/o4"]
    assert swapped[0].provider is ModelProvider.GOOGLE
    assert [p.name for p in swapped] == [p.name for p in PARTICIPANTS]
    assert swapped[1] is PARTICIPANTS[1]
    with pytest.raises(ConfigError, match="no participant named"):
        apply_model_swaps(PARTICIPANTS, ["dave=openai/x"])
    with pytest.raises(ConfigError, match="more positional"):
        apply_model_swaps(PARTICIPANTS, ["a", "b", "c", "d"])
    with pytest.raises(ConfigError, match="swapped twice"):
        apply_model_swaps(PARTICIPANTS, ["m1", "alice=m2"])


def test_config_overrides_are_validated() -> None:
    base = story(uuid.uuid4()).state.config
    assert override_config(base, {"convergence_threshold": 0.9}).convergence_threshold == 0.9
    with pytest.raises(ConfigError, match="unknown config"):
        override_config(base, {"bogus": 1})
    with pytest.raises(ConfigError, match="convergence_threshold"):
        override_config(base, {"convergence_threshold": 3})


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        _main_then_exit([*argv])
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_cli_fork(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.save(build(PARENT, THREE_ITERATIONS[:2]))
    code, out, err = _run(
        ["fork", str(PARENT)[:8], "--at-iteration", "1", "-m", "openai/new", "--threshold",
         "0.95", "--max-cost", "2.5", "--min-consensus", "3", "--store", sqlite_url, "--json"],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    with Ledger(sqlite_url, create=False) as ledger:
        state = ledger.state(uuid.UUID(doc["session_id"]))
        assert doc["parent_position"] == ledger.position_of_iteration(PARENT, 1)
        assert doc["parent_hash"] == _event_hash(ledger, PARENT, doc["parent_position"])
    assert doc["parent_id"] == str(PARENT)
    assert state.participants[0].model == "openai/new"
    assert (state.config.convergence_threshold, state.config.max_cost_usd) == (0.95, 2.5)
    assert state.config.min_consensus == 3

    code, out, err = _run(["fork", str(PARENT), "--store", sqlite_url], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "exactly one of" in err
    code, out, err = _run(
        ["fork", str(PARENT), "--at-iteration", "1", "-m", "zed=x", "--store", sqlite_url], capsys,
    )
    assert code == 2
    assert "no participant named 'zed'" in err
    assert "Traceback" not in err


def test_fork_votes_differ_after_continuing(sqlite_url: str) -> None:
    """The parent is untouched by what happens in its fork."""
    with Ledger(sqlite_url) as ledger:
        ledger.save(build(PARENT, THREE_ITERATIONS))
        head = ledger.head_version(PARENT)
        fid = fork(ledger, PARENT, clock=FixedStepClock(), ids=SequentialIds(), at_iteration=2)
        b = continued(ledger.get(fid)).resume()
        vote(b, {"alice": Stance.AGREE, "bob": Stance.STRONGLY_DISAGREE, "carol": Stance.AGREE},
             {}, iteration=3)
        ledger.save(b.aggregate)
        assert ledger.head_version(PARENT) == head
        assert ledger.state(PARENT).convergence[-1].agree == 3
        assert ledger.state(fid).convergence[-1].agree == 2
        assert verify_session(ledger, fid).ok


def _main_then_exit(argv: list[str]) -> None:
    """Run the CLI in-process; a command that returns is exit code 0, as the console script's."""
    main(argv)
    raise SystemExit(0)


# --------------------------------------------------------------------------- fork context


FORK_DIFFERS = {
    "id", "fork_origin", "created_at", "head_hash", "status", "status_reason", "seal",
    "budget_exhausted",
}
"""What a fork's state at its fork point differs from its parent's in, by design (see
:mod:`forge_ledger.records.lineage`); no config or participant is overridden here."""


async def _no_sleep(_: float) -> None:
    """Back-off is recorded, not waited for."""


def _as_of(state: SessionState) -> dict[str, Any]:
    """Every view of a session that compares positions, as of one state: the state itself, the
    dissent log, the consensus trail, the EMS, the provenance and the document."""
    return {
        "state": state.model_dump(mode="json", exclude=FORK_DIFFERS),
        "dissent": [d.as_json() for d in dissent_log(state, include_closed=True)],
        "trail": [t.as_json() for t in consensus_trail(state)],
        "ems": session_ems(state),
        "provenance": fold_lineage(state).model_dump(mode="json"),
        "document": state.latest_text,
    }


def _round_boundaries(ledger: Ledger, sid: uuid.UUID) -> list[int]:
    """Every position where one round has ended and the next has not started, and the head:
    the places a fork may start from."""
    starts = [e.position for e in ledger.events(sid) if e.type == "RoundStarted"]
    return [p - 1 for p in starts[1:]] + [ledger.head_version(sid)]


def _prompts_after(ledger: Ledger, sid: uuid.UUID, after: int) -> list[tuple[Any, ...]]:
    """(round, participant, attempt, prompt) of every answer recorded after ``after``."""
    state = ledger.state(sid)
    return [
        (r.number, c.participant, c.attempt, [m.model_dump() for m in ledger.prompt(sid, c)])
        for r in state.rounds
        for c in r.contributions
        if c.position > after
    ]


@pytest.mark.slow
def test_a_fork_is_its_parent_up_to_the_fork_point_and_asks_what_it_asked(
    store_url: str,
) -> None:
    """The demo's session forked after each of its rounds: at the fork point every view equals
    the parent's, and resumed with the same scripted answers, the fork sends exactly the
    prompts its parent sent after that point (the open dissent and human input included) and
    ends with the same document, dissent log and cost."""
    parent = run_demo_session(store_url, anonymize=False)
    with Ledger(store_url) as ledger:
        final = ledger.state(parent)
        assert any(d.strong for d in final.divergences)  # the demo's dissent, to carry over
        expected_after = {k: _prompts_after(ledger, parent, k) for k in _round_boundaries(
            ledger, parent)}
        for k, expected in expected_after.items():
            clock = FixedStepClock(datetime(2026, 3, 1, tzinfo=UTC), timedelta(seconds=1))
            fid = fork(ledger, parent, clock=clock, ids=SequentialIds(f"k{k}"), at_event=k)
            assert ledger.head_version(fid) == k
            assert _as_of(ledger.state(fid, at_event=k)) == _as_of(
                ledger.state(parent, at_event=k)
            )
            voices = ScriptedProvider.from_script(bundled_script("four-voices"))
            asyncio.run(Orchestrator(ledger, voices, clock=clock, sleep=_no_sleep).resume(fid))
            got = _prompts_after(ledger, fid, k)
            if expected:
                assert got[0] == expected[0], f"first prompt after the fork point {k}"
            assert got == expected, f"prompts after the fork point {k}"
            after = ledger.state(fid)
            assert after.latest_text == final.latest_text
            assert after.cost_usd == pytest.approx(final.cost_usd)
            assert [(d.id, d.status, [h.status for h in d.history]) for d in after.divergences] \
                == [(d.id, d.status, [h.status for h in d.history]) for d in final.divergences]
            assert verify_session(ledger, fid).ok


def _forge_json(*args: str, cwd: Path) -> Any:
    """One command of the installed CLI in a subprocess; its one JSON document."""
    done = subprocess.run(
        [sys.executable, "-m", "forge_ledger", *args, "--json"],
        capture_output=True, text=True, timeout=180, cwd=cwd, check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _shifted(doc: Any, after: int, by: int) -> Any:
    """``doc`` with every position past ``after`` moved back ``by``: a resumed fork records a
    few events of its own before its first round (the resume, its scripted server's new
    address), so its later events stand ``by`` positions after its parent's."""
    if isinstance(doc, dict):
        return {
            k: v - by if "position" in k and isinstance(v, int) and v > after
            else _shifted(v, after, by)
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_shifted(v, after, by) for v in doc]
    return doc


def _without(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in keys}


@pytest.mark.slow
def test_cli_a_resumed_fork_of_the_demo_agrees_with_its_parent(tmp_path: Path) -> None:
    """Through the real CLI: the demo, forked at iteration 1 and resumed, has its parent's
    dissent log, provenance and summary (cost, events); forked at its end, ``back`` says what
    ``show --at-iteration`` says, for the fork as for the parent."""
    store = str(tmp_path / "forks.sqlite")

    def forge(*args: str) -> Any:
        return _forge_json(*args, "--store", store, cwd=tmp_path)

    demo = forge("demo", "--latency", "0")
    parent = demo["session_id"]
    forked = forge("fork", parent, "--at-iteration", "1")
    child, k = forked["session_id"], forked["parent_position"]
    resumed = forge("resume", child)
    own = forge("log", child)
    assert (own[0]["position"], own[0]["type"]) == (k, "SessionForked")
    first_round = next(e["position"] for e in own if e["type"] == "RoundStarted")
    by = first_round - (k + 1)

    assert resumed["cost_usd"] == demo["cost_usd"]
    assert resumed["events"] - by == demo["events"] == own[-1]["position"] - by
    assert _shifted(forge("dissent", child, "--all"), k, by) == {
        **forge("dissent", parent, "--all"), "session_id": child,
    }
    fork_spec = forge("spec", child, "--provenance")
    parent_spec = forge("spec", parent, "--provenance")
    assert _without(_shifted(fork_spec, k, by), "session_id", "head_hash", "updated") == (
        _without(parent_spec, "session_id", "head_hash", "updated")
    )

    at_end = forge("fork", parent, "--at-iteration", "2")["session_id"]
    before = forge("show", at_end)
    mine = forge("show", parent)
    assert [before[key] for key in ("version", "iteration", "phase", "ems", "cost_usd")] == [
        mine[key] for key in ("version", "iteration", "phase", "ems", "cost_usd")
    ]
    shown = [forge("show", sid, "--at-iteration", "1") for sid in (parent, at_end)]
    jump = forge("back", at_end, "1")
    assert jump["ems_before"] == before["ems"]
    assert jump["ems_after"] == shown[0]["ems"] == shown[1]["ems"]
    assert shown[1]["version"] == shown[0]["version"] == k


def test_a_report_of_a_fork_before_its_fork_point_is_its_parents(parent_ledger: Ledger) -> None:
    """The report's audit of an iteration the fork inherited is its parent's, named as the
    fork (the fork's own events begin after it)."""
    ledger = parent_ledger
    fid = fork(ledger, PARENT, clock=FixedStepClock(), ids=SequentialIds("r"), at_iteration=3)
    page, parents = gather(ledger, fid, at_iteration=1), gather(ledger, PARENT, at_iteration=1)
    assert page.session_id == str(fid)
    assert page.position == parents.position == ledger.position_of_iteration(PARENT, 1)
    assert page.audit.model_dump(exclude={"session_id"}) == parents.audit.model_dump(
        exclude={"session_id"})
