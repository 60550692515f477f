"""Dissent log, consensus trail, canned Datasette queries and the CLI commands over them."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from forge_ledger.cli import cli
from forge_ledger.domain import Deliberation
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.outputs import store_outputs
from forge_ledger.projections import catch_up, consensus_trail, dissent_log, open_views
from support.stories import CACHE_SID, CACHE_SYNTHESIS_TEXT, cache_design_session, random_sessions

YAML_PATH = Path(__file__).resolve().parents[2] / "projections" / "datasette.yaml"


@pytest.fixture
def scripted(tmp_path: Path) -> tuple[str, Deliberation]:
    store = str(tmp_path / "forge-ledger.sqlite")
    with Ledger(store) as ledger:
        agg = cache_design_session(ledger)
    return store, agg


def test_consensus_trail_flags_a_flip_without_new_argument(
    scripted: tuple[str, Deliberation],
) -> None:
    store, agg = scripted
    with Ledger(store, create=False) as ledger:
        events = list(ledger.events(CACHE_SID))
        from_state = consensus_trail(ledger.state(CACHE_SID))
    trail = consensus_trail(events)
    assert [t.as_json() for t in trail] == [t.as_json() for t in from_state]
    first, second = trail
    assert (first.round, first.majority_agrees, first.weighted_score) == (2, True, 0.6)
    assert (second.round, second.majority_agrees, second.weighted_score) == (5, True, 0.9)
    votes = {v.participant: v for v in second.votes}
    assert not votes["A"].changed
    assert not votes["A"].conformity
    # B's divergence (eviction) was answered by A's synthesis: an influence, no conformity
    assert votes["B"].changed
    assert votes["B"].previous_stance == "disagree"
    b = votes["B"].change
    assert b is not None
    assert not b.conformity
    assert b.toward_majority
    assert [(i.author, i.round, i.topic, i.quote) for i in b.influences] == [
        ("A", 4, "eviction", "The cache uses LRU eviction.")]
    assert b.influences[0].quote in CACHE_SYNTHESIS_TEXT
    # C moved to the majority with nothing on its point (ttl) in between: conformity
    assert votes["C"].changed
    assert votes["C"].new_arguments == ()
    assert votes["C"].conformity
    assert second.conformity == ["C"]
    synthesis = agg.state.round(4)
    assert synthesis is not None
    assert votes["C"].preceded_by is not None
    assert votes["C"].preceded_by.as_json() == {
        "round": 4, "kind": "synthesis", "position": synthesis.contributions[-1].position}


def test_dissent_log_lists_open_divergences_with_lifecycle(
    scripted: tuple[str, Deliberation],
) -> None:
    store, agg = scripted
    with Ledger(store, create=False) as ledger:
        events = list(ledger.events(CACHE_SID))
    by_type: dict[str, list[int]] = {}
    for e in events:
        by_type.setdefault(e.type, []).append(e.position)
    open_only = dissent_log(events)
    assert [d.divergence_id for d in open_only] == ["d2"]
    assert open_only[0].is_open
    assert open_only[0].rounds_open == 2
    everything = {d.divergence_id: d for d in dissent_log(agg.state, include_closed=True)}
    d1 = everything["d1"]
    assert d1.status == "resolved"
    assert d1.strong
    assert not d1.is_open
    assert [s.status for s in d1.lifecycle] == ["open", "addressed", "resolved"]
    assert d1.opened_position == by_type["DivergenceDetected"][0]
    assert d1.addressed_position == by_type["DivergenceAddressed"][0]
    assert d1.closed_position == by_type["DivergenceResolved"][0]
    assert d1.closed_by == "B"
    assert d1.rounds_open == 2  # rounds 4 and 5 started between open and resolve


def test_cli_dissent_and_trail(scripted: tuple[str, Deliberation]) -> None:
    store, _agg = scripted
    runner = CliRunner()
    res = runner.invoke(cli, ["dissent", str(CACHE_SID)[:8], "--store", store, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [d["divergence_id"] for d in doc["divergences"]] == ["d2"]
    res = runner.invoke(cli, ["dissent", str(CACHE_SID), "--all", "--store", store, "--json"])
    assert [d["status"] for d in json.loads(res.stdout)["divergences"]] == ["resolved", "open"]
    res = runner.invoke(cli, ["trail", str(CACHE_SID), "--store", store, "--json"])
    assert res.exit_code == 0, res.output
    rounds = json.loads(res.stdout)["rounds"]
    assert [[f["participant"] for f in r["conformity"]] for r in rounds] == [[], ["C"]]
    assert json.loads(res.stdout)["conformity"] == [
        {"participant": "C", "round": 5, "from": "disagree", "to": "agree",
         "reason": "moved toward the previous vote's majority (agreeing) with no new argument "
                   "between round 2 and round 5"}]
    res = runner.invoke(cli, ["trail", str(CACHE_SID), "--store", store])
    assert res.exit_code == 0
    assert "conformity" in res.stdout
    assert "0.90" in res.stdout


@pytest.mark.slow
def test_cli_user_mistakes_are_one_line(tmp_path: Path, scripted: tuple[str, Deliberation]) -> None:
    store, _ = scripted
    for args in (
        ["dissent", "ffff", "--store", store],
        ["trail", "x", "--store", str(tmp_path / "missing.sqlite")],
        ["projections", "rebuild", "nope", "--store", store],
    ):
        proc = subprocess.run([sys.executable, "-m", "forge_ledger", *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1
        assert proc.stderr.startswith("error: ")
        assert "Traceback" not in proc.stderr


def test_cli_projections_status_update_rebuild(tmp_path: Path) -> None:
    store = str(tmp_path / "forge-ledger.sqlite")
    with Ledger(store) as ledger:
        random_sessions(ledger, 4, 2)
        head = ledger.max_notification_id()
    runner = CliRunner()
    res = runner.invoke(cli, ["projections", "status", "--store", store, "--json"])
    doc = json.loads(res.stdout)
    # the study tables also follow the study log, which holds nothing here
    studies = {p["name"]: p["head"] for p in doc["projections"]}.pop("study_tables:studies")
    assert studies == 0
    on_sessions = [p for p in doc["projections"] if p["name"] != "study_tables:studies"]
    assert {p["lag"] for p in on_sessions} == {head}
    assert doc["read_model"].endswith("forge-ledger.views.sqlite")
    res = runner.invoke(cli, ["projections", "update", "--store", store, "--json"])
    assert json.loads(res.stdout) == {"events": head}
    res = runner.invoke(cli, ["projections", "status", "--store", store, "--json"])
    rows = json.loads(res.stdout)["projections"]
    assert {(p["position"], p["lag"]) for p in rows if p["name"] != "study_tables:studies"} == {
        (head, 0)}
    res = runner.invoke(cli, ["projections", "rebuild", "consensus", "--store", store, "--json"])
    assert json.loads(res.stdout) == {"rebuilt": "consensus", "events": head}
    res = runner.invoke(cli, ["projections", "status", "--store", store])
    assert res.exit_code == 0
    assert "current" in res.stdout


def _queries() -> dict[str, str]:
    meta = yaml.safe_load(YAML_PATH.read_text())
    q = meta["databases"]["forge-ledger.views"]["queries"]
    return {name: spec["sql"] for name, spec in q.items()}


def _built(tmp_path: Path) -> tuple[Path, Ledger]:
    ledger = Ledger(str(tmp_path / "forge-ledger.sqlite"))
    random_sessions(ledger, 77, 3)
    cache_design_session(ledger)
    db = open_views(store_outputs(ledger.location).views)
    catch_up(ledger, db)
    db.close()
    return store_outputs(ledger.location).views, ledger


def test_canned_queries_return_the_right_rows(tmp_path: Path) -> None:
    path, ledger = _built(tmp_path)
    events = ledger.notifications(limit=100_000)
    queries = _queries()
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row

    # cost per participant, computed independently from the events
    expected: dict[tuple[str, str, str], list[float]] = {}
    for e in events:
        if e.type == "ContributionRecorded":
            r = e.data["response"]
            key = (e.session_id, e.data["participant"], r["model"])
            tin, tout, cost = r["tokens"]["input"], r["tokens"]["output"], r["cost_usd"]
        elif e.type == "ProviderCallFailed":
            key = (e.session_id, e.data["participant"], e.data["model"])
            tin, tout, cost = e.data["tokens"]["input"], e.data["tokens"]["output"], 0.0
        else:
            continue
        acc = expected.setdefault(key, [0, 0, 0, 0.0])
        acc[0] += 1
        acc[1] += tin
        acc[2] += tout
        acc[3] += cost
    rows = con.execute(queries["cost_per_participant"]).fetchall()
    got = {(r["session_id"], r["participant"], r["model"]):
           [r["calls"], r["tokens_in"], r["tokens_out"], r["cost_usd"]] for r in rows}
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert got[k][:3] == v[:3]
        assert got[k][3] == pytest.approx(v[3], abs=1e-6)

    # dissent by participant
    stances: dict[str, list[str]] = {}
    for e in events:
        if e.type == "DivergenceDetected":
            for p in e.data["positions"]:
                stances.setdefault(p["participant"], []).append(p["stance"])
    rows = con.execute(queries["dissent_by_participant"]).fetchall()
    assert {r["participant"]: (r["divergences"], r["dissenting"]) for r in rows} == {
        p: (len(s), sum(x in ("disagree", "strongly_disagree") for x in s))
        for p, s in stances.items()
    }

    # session timeline of the scripted session: every contribution, vote and round, in order
    rows = con.execute(queries["session_timeline"], {"session_id": str(CACHE_SID)}).fetchall()
    mine = [e for e in events if e.session_id == str(CACHE_SID)]
    wanted = sorted(
        e.position for e in mine
        if e.type in ("RoundStarted", "ContributionRecorded", "DivergenceAddressed",
                      "DivergenceResolved")
    ) + [e.position for e in mine if e.type == "DivergenceDetected"]
    votes = [e for e in mine if e.type == "VoteRecorded"]
    positions = [r["position"] for r in rows]
    assert positions == sorted(positions)
    assert len(rows) == len(wanted) + len(votes)
    assert [r["detail"] for r in rows if r["what"] == "vote"] == [
        e.data["vote"]["stance"] for e in votes]
    by_prefix = con.execute(queries["session_timeline"], {"session_id": str(CACHE_SID)[:8]})
    assert [tuple(r) for r in by_prefix.fetchall()] == [tuple(r) for r in rows]
    con.close()
    ledger.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_datasette_serves_a_canned_query(tmp_path: Path) -> None:
    path, ledger = _built(tmp_path)
    ledger.close()
    exe = Path(sys.executable).with_name("datasette")
    for _attempt in range(3):
        # another process may take the free port before Datasette binds it: try another one
        port = _free_port()
        proc = subprocess.Popen(
            [str(exe), "serve", str(path), "-m", str(YAML_PATH), "--host", "127.0.0.1",
             "--port", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        # Datasette tilde-encodes the dot of the database name in URLs
        url = (f"http://127.0.0.1:{port}/forge-ledger~2Eviews/cost_per_participant.json"
               "?_shape=array")
        body: Any = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    body = json.loads(resp.read())
                break
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.2)
        if body is not None or proc.poll() is None:
            break
        err = proc.stderr.read().decode() if proc.stderr is not None else ""
        if "address already in use" not in err:
            pytest.fail(f"datasette stopped: {err}")
    try:
        assert body is not None, "datasette did not answer"
        con = sqlite3.connect(path)
        expected = con.execute(_queries()["cost_per_participant"]).fetchall()
        con.close()
        assert [tuple(r.values()) for r in body] == expected
        assert expected
    finally:
        proc.send_signal(signal.SIGINT)  # uvicorn's graceful stop (Ctrl-C)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def _waiting_follower(store: Path) -> Iterator[subprocess.Popen[str]]:
    """``projections update --follow`` on ``store``, which has said it waits for the ledger
    and is still running; stopped with Ctrl-C (SIGINT) on exit."""
    follower = subprocess.Popen(
        [sys.executable, "-m", "forge_ledger", "projections", "update", "--follow",
         "--interval", "0.1", "--store", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert follower.stderr is not None
        first = follower.stderr.readline()
        assert first == f"waiting for a ledger at {store} (Ctrl-C stops)\n", first
        assert follower.poll() is None
        yield follower
    finally:
        follower.send_signal(signal.SIGINT)
        follower.communicate(timeout=60)


@pytest.mark.slow
def test_follow_waits_for_a_store_that_does_not_exist_yet(tmp_path: Path) -> None:
    """A follower started before the first session waits for the store, then applies it."""
    store = tmp_path / "later" / "forge-ledger.sqlite"
    with _waiting_follower(store) as follower:
        assert follower.stderr is not None
        seed = Path(__file__).parents[1] / "fixtures" / "seed_standard.yaml"
        made = subprocess.run(
            [sys.executable, "-m", "forge_ledger", "import", str(seed), "--store", str(store)],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert made.returncode == 0, made.stderr
        assert follower.stderr.readline().startswith(f"following {store}")
        views = store.with_name("forge-ledger.views.sqlite")
        deadline = time.monotonic() + 120
        while _sessions_in(views) < 1:
            assert follower.poll() is None, follower.communicate()
            assert time.monotonic() < deadline, "the follower never applied the new store"
            time.sleep(0.1)


def _sessions_in(views: Path) -> int:
    try:
        with sqlite3.connect(f"file:{views}?mode=ro", uri=True) as db:
            return int(db.execute("SELECT count(*) FROM sessions").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


@pytest.mark.parametrize("start", ["empty file", "empty database"])
def test_follow_waits_through_a_store_that_is_being_created(tmp_path: Path, start: str) -> None:
    """A store being created is a 0-byte file, then an SQLite database without tables: a
    follower started then waits as for a missing store."""
    store = tmp_path / "forge-ledger.sqlite"
    store.touch()
    if start == "empty database":
        sqlite3.connect(store).execute("PRAGMA journal_mode=WAL").close()
    with _waiting_follower(store):
        pass  # it said it waits for the ledger and did not fail on the half-made store
