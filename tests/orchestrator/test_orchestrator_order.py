"""Event order never depends on network timing; calls of a round really run concurrently;
each participant's batch is committed as soon as it and everyone before it completed.

Network timing is the subject of all but the last test, so they run on the HTTP server with
scripted latencies; the last compares two stores and runs in-process."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest

from forge_ledger.domain.values import SessionConfig
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.testing import FakeOpenAIServer, RecordedRequest, ScriptedProvider
from support.orchestrator import (
    event_view,
    generalists,
    round_events,
    run_session,
    types_of,
    voice,
)

NAMES = ("ana", "ben", "cleo", "dov")
STEP = 0.15  # latency spacing: wide enough that client-side overhead cannot reorder


def _script(latencies: dict[str, float]) -> dict[str, list[dict[str, object]]]:
    return {n: voice(n, latency=latencies[n]) for n in NAMES}


def _draft_requests(server: FakeOpenAIServer) -> list[RecordedRequest]:
    assert server.wait_idle()
    return [r for r in server.requests if "· draft ·" in r.last_user_message]


@pytest.mark.slow
def test_events_follow_participant_order_whatever_the_latencies(
    fake_openai: FakeOpenAIServer, tmp_path: Path,
) -> None:
    config = SessionConfig(max_rounds=8)
    later_first = {n: STEP * (len(NAMES) - i) for i, n in enumerate(NAMES)}
    earlier_first = {n: STEP * (i + 1) for i, n in enumerate(NAMES)}
    views = []
    for label, latencies in (("later-first", later_first), ("earlier-first", earlier_first)):
        fake_openai.set_script(_script(latencies))
        fake_openai.clear_requests()
        with Ledger(str(tmp_path / f"{label}.sqlite"), create=True) as ledger:
            sid, state = run_session(ledger, generalists(fake_openai.url, NAMES), config)
            assert state.status.value == "converged"
            draft = state.rounds[0]
            assert draft.kind.value == "draft"
            contributions = [
                p for t, p in round_events(ledger, sid, draft.number) if t == "ContributionRecorded"
            ]
            assert contributions == list(NAMES)
            views.append(event_view(ledger, sid))
        reqs = _draft_requests(fake_openai)
        finished = {r.model: r.finished_at for r in reqs}
        assert all(v is not None for v in finished.values())
        order = sorted(finished, key=lambda m: finished[m] or 0.0)
        expected = list(NAMES) if label == "earlier-first" else list(reversed(NAMES))
        assert order == expected, f"{label}: the server finished in {order}"
        # the draft calls were in flight together: count what the server held at once
        spans = [(r.received_at, r.finished_at or 0.0) for r in reqs]
        peak = max(sum(1 for s0, e in spans if s0 <= t < e) for t, _ in spans)
        assert peak >= 3, f"{label}: at most {peak} of {len(spans)} draft calls overlapped"
    assert len(views[0]) > 20
    assert views[0] == views[1]


@pytest.mark.slow
def test_max_concurrency_one_runs_calls_one_after_another(
    fake_openai: FakeOpenAIServer, tmp_path: Path,
) -> None:
    fake_openai.set_script(_script({n: 0.03 for n in NAMES}))
    with Ledger(str(tmp_path / "serial.sqlite"), create=True) as ledger:
        _, state = run_session(
            ledger, generalists(fake_openai.url, NAMES), SessionConfig(max_concurrency=1),
        )
    assert state.status.value == "converged"
    assert fake_openai.wait_idle()
    reqs = sorted(fake_openai.requests, key=lambda r: r.received_at)
    assert len(reqs) >= 2 * len(NAMES)
    for before, after in itertools.pairwise(reqs):
        assert before.finished_at is not None
        assert after.received_at >= before.finished_at


@pytest.mark.slow
def test_first_contributions_are_committed_while_the_round_is_open(
    fake_openai: FakeOpenAIServer, tmp_path: Path,
) -> None:
    path = str(tmp_path / "commit.sqlite")
    slow = NAMES[-1]
    script = {n: voice(n) for n in NAMES[:-1]}
    script[slow] = voice(
        slow, before=[{"match": "· draft ·", "content": "late draft", "latency": 1.2}],
    )
    fake_openai.set_script(script)
    seen: dict[str, object] = {}
    stop = threading.Event()

    def watch() -> None:
        """Another reader of the same SQLite file, polling while the round runs."""
        while not stop.is_set():
            try:
                with Ledger(path) as reader:
                    ids = reader.session_ids()
                    if ids:
                        types = [
                            (e.type, e.data.get("participant"), e.data.get("number"))
                            for e in reader.events(ids[0])
                        ]
                        early = {p for t, p, _ in types if t == "ContributionRecorded"}
                        if set(NAMES[:-1]) <= early:
                            seen["early"] = early
                            seen["round_done"] = any(
                                t == "RoundCompleted" and n == 1 for t, _, n in types
                            )
                            seen["slow_in_flight"] = any(
                                r.model == slow and r.finished_at is None
                                for r in fake_openai.requests
                            )
                            return
            except Exception as e:  # the file may not exist yet
                seen["last_error"] = repr(e)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with Ledger(path, create=True) as ledger:
            sid, state = run_session(ledger, generalists(fake_openai.url, NAMES), SessionConfig())
            final_types = types_of(ledger, sid)
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert state.status.value == "converged"
    assert "early" in seen, seen
    assert seen["early"] == set(NAMES[:-1])
    assert seen["round_done"] is False
    assert seen["slow_in_flight"] is True
    assert final_types.count("RoundCompleted") == len(state.rounds)


@pytest.mark.postgres
def test_end_to_end_on_postgresql_matches_sqlite(pg_url: str, tmp_path: Path) -> None:
    """The same session recorded on PostgreSQL and on SQLite is the same events (the stores
    are the subject: the voices answer in-process)."""
    views = []
    for url in (pg_url, str(tmp_path / "same.sqlite")):
        provider = ScriptedProvider.from_script({n: voice(n) for n in NAMES})
        with Ledger(url, create=True) as ledger:
            sid, state = run_session(ledger, generalists(None, NAMES), SessionConfig(),
                                     provider=provider)
            assert state.status.value == "converged"
            assert verify_session(ledger, sid).ok
            views.append(event_view(ledger, sid))
    assert views[0] == views[1]
