"""The read-side CLI (``sessions``, ``show``, ``log``, ``verify``) against real stores.

Sessions are recorded through the aggregate into a real SQLite file (and PostgreSQL for the
``postgres`` tests) by the priced session of ``support.stories``; expected values are computed from
what the builders report or from the raw event log (the EMS is worked out by hand from the
stories' documented shape, so a wrong EMS rule cannot pass unnoticed). Commands run
in-process (click's CliRunner, and ``main`` for the error path) and as real subprocesses of the
``forge-ledger`` console script and ``python -m forge_ledger``.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_ledger.cli import cli, main
from forge_ledger.clock import FixedStepClock
from forge_ledger.domain.hashing import GENESIS
from forge_ledger.ledger import Ledger
from forge_ledger.testing import SessionBuilder
from support.store import raw_connection
from support.stories import VARIED_ROLES, BuiltSession, numbered_participants, priced_session

VENV_BIN = Path(sys.executable).parent
CONSOLE_SCRIPT = str(VENV_BIN / "forge-ledger")


# --------------------------------------------------------------------------- fixtures & helpers


class Store:
    """A ledger file with two sessions built by the helpers (read-only for the tests)."""

    def __init__(self, path: Path, a: BuiltSession, b: BuiltSession) -> None:
        self.path = path
        self.url = str(path)
        self.a = a
        self.b = b


def _build_store(path: Path) -> Store:
    clock = FixedStepClock()
    with Ledger(str(path)) as ledger:
        a = priced_session(ledger, iterations=2, participants=3, converge=True, clock=clock)
        b = priced_session(
            ledger,
            iterations=3,
            participants=4,
            converge=False,
            clock=clock,
            title="Pick a storage engine",
        )
    return Store(path, a, b)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return _build_store(tmp_path_factory.mktemp("read") / "ledger.sqlite")


def invoke(*args: str) -> Result:
    """Run the CLI in-process; stdout and stderr are captured separately."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def invoke_json(*args: str) -> Any:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)  # exactly one document, or this raises


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``main`` (the console entry point, with its error handling) in-process."""
    code = 0
    try:
        main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*args: str, module: bool = False, env: dict[str, str] | None = None,
                ) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "forge_ledger", *args] if module else [CONSOLE_SCRIPT, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)


def assert_one_error_line(stderr: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr


# --------------------------------------------------------------------------- sessions


def test_sessions_json_lists_every_session_with_its_figures(store: Store) -> None:
    doc = invoke_json("sessions", "--store", store.url)
    assert [row["id"] for row in doc] == [str(store.a.id), str(store.b.id)]
    a, b = doc
    assert a["slug"] == "design-a-rate-limiter"
    assert a["title"] == store.a.title
    assert b["slug"] == "pick-a-storage-engine"
    assert (a["status"], b["status"]) == ("converged", "in_progress")
    assert (a["iteration"], b["iteration"]) == (2, 3)
    assert a["events"] == store.a.iteration_end[2]
    assert b["events"] == store.b.iteration_end[3]
    assert a["created"] == store.a.timestamps[1].isoformat()
    assert b["updated"] == store.b.timestamps[b["events"]].isoformat()
    assert a["parent_id"] is None


def test_sessions_filters_by_status_time_text_and_count(store: Store) -> None:
    def ids(*args: str) -> list[str]:
        return [row["id"] for row in invoke_json("sessions", *args, "--store", store.url)]

    a, b = str(store.a.id), str(store.b.id)
    assert ids("--status", "converged") == [a]
    assert ids("--status", "converged", "--status", "in_progress") == [a, b]
    assert ids("--search", "STORAGE") == [b]
    assert ids("--search", "rate-limiter") == [a]
    assert ids("--limit", "1") == [b]
    updated_b = store.b.timestamps[store.b.iteration_end[3]]
    assert ids("--since", updated_b.isoformat()) == [b]
    assert ids("--since", (updated_b + timedelta(seconds=1)).isoformat()) == []
    local = invoke("sessions", "--since", "2020-01-01T00:00", "--store", store.url)
    assert local.exit_code == 0
    assert "--since 2020-01-01T00:00 read as local time" in local.stderr
    none = invoke("sessions", "--status", "aborted", "--store", store.url)
    assert (none.exit_code, none.stdout) == (0, "")
    assert "no sessions match those filters" in none.stderr


def test_sessions_table_names_each_session(store: Store) -> None:
    result = invoke("sessions", "--store", store.url)
    assert result.exit_code == 0
    assert store.a.id.hex[:8] in result.stdout
    assert str(store.b.id)[:8] in result.stdout
    assert "converged" in result.stdout
    assert "in_progress" in result.stdout


def test_sessions_on_an_empty_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    Ledger(str(path)).close()
    assert invoke_json("sessions", "--store", str(path)) == []
    result = invoke("sessions", "--store", str(path))
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "no sessions" in result.stderr


def test_store_can_come_from_the_environment(store: Store) -> None:
    result = CliRunner(env={"FORGE_LEDGER_STORE": store.url}).invoke(cli, ["sessions", "--json"])
    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)) == 2


# --------------------------------------------------------------------------- show


def test_show_json_now(store: Store) -> None:
    built = store.a
    doc = invoke_json("show", str(built.id), "--store", store.url)
    assert doc["id"] == str(built.id)
    assert doc["status"] == "converged"
    assert doc["phase"] == "convergent"
    assert doc["iteration"] == 2
    assert doc["version"] == built.iteration_end[2]
    assert doc["round"] == 4 * built.iterations
    assert doc["participants"] == [
        {"name": p.name, "model": p.model, "role": p.role.value}
        for p in numbered_participants(3, roles=VARIED_ROLES)
    ]
    assert doc["tokens"] == {"input": built.tokens.input, "output": built.tokens.output}
    # the built answers carry a cost but no price: the total is a part, flagged as such
    assert doc["cost_usd"] is None
    assert doc["priced_cost_usd"] == pytest.approx(built.cost_usd)
    assert doc["unpriced_calls"] > 0
    assert doc["cost_complete"] is False
    assert doc["lineage"] is None
    assert doc["convergence"]["converged"] is True
    assert doc["convergence"]["majority_agrees"] is True
    assert doc["convergence"]["score"] == pytest.approx(1.0)
    assert doc["open_dissent"] == []

    kinds = [r["kind"] for r in doc["rounds"]]
    first = ["draft", "critique", "synthesis", "convergence"]
    assert kinds == [*first, "refinement", *first[1:]]
    contributions = [c for r in doc["rounds"] for c in r["contributions"]]
    assert len(contributions) == built.contributions
    assert sum(c["tokens"]["input"] for c in contributions) == built.tokens.input
    for r in doc["rounds"]:
        for c in r["contributions"]:
            assert c["model"] == f"openai/model-{c['participant'][1:]}"
            assert c["stop_reason"] == "end_turn"
            assert c["participant"] in c["content"]
            assert ("critique" in c) == (r["kind"] == "critique")
            assert ("vote" in c) == (r["kind"] == "convergence")
            assert ("opinion" in c) == (r["kind"] == "refinement")
            if "critique" in c:
                assert c["critique"]["target"] == r["targets"][c["participant"]]
                assert c["critique"]["target"] != c["participant"]


def test_show_json_of_an_unconverged_session_reports_weighted_and_majority(store: Store) -> None:
    doc = invoke_json("show", str(store.b.id), "--store", store.url)
    conv = doc["convergence"]
    assert conv["converged"] is False
    assert conv["agree"] == 1
    assert conv["disagree"] == 3
    assert conv["majority_agrees"] is False
    assert conv["score"] == pytest.approx(0.25)
    assert [d["id"] for d in doc["open_dissent"]] == ["div-3"]
    dissent = doc["open_dissent"][0]
    assert dissent["status"] == "open"
    assert {p["participant"] for p in dissent["positions"]} == {"P1", "P2"}


def test_show_ems_is_the_hand_computed_maturity_score(store: Store) -> None:
    """The EMS of both built sessions, worked out from the builder's documented shape.

    Session b (3 iterations, 4 participants, not converged):
    clarity = mean of the last critiques' scores 90..93 = 91.5 → 92; coverage = 100 (the one
    suggestion, "add a token bucket", is followed by syntheses and refinements); consensus =
    the last vote's 1 of 4 agreeing → 25; resolution = div-1 and div-2 resolved, div-3 open →
    2/3 → 67. EMS = round(0.25·92 + 0.25·100 + 0.30·25 + 0.20·67) = round(68.9) = 69.

    Session a (2 iterations, 3 participants, converged): clarity = mean(80, 81, 82) = 81;
    coverage = 100; consensus = 3 of 3 → 100; resolution = div-1 resolved → 100.
    EMS = round(20.25 + 25 + 30 + 20) = 95.
    """
    assert invoke_json("show", str(store.b.id), "--store", store.url)["ems"] == 69
    assert invoke_json("show", str(store.a.id), "--store", store.url)["ems"] == 95
    out = invoke("show", str(store.b.id), "--store", store.url).stdout
    assert "69/100" in out


def test_show_at_iteration_selects_the_end_of_that_iteration(store: Store) -> None:
    built = store.a
    doc = invoke_json("show", str(built.id), "--at-iteration", "1", "--store", store.url)
    assert doc["version"] == built.iteration_end[1]
    assert doc["iteration"] == 1
    assert doc["status"] == "in_progress"
    assert doc["convergence"]["converged"] is False
    assert [d["id"] for d in doc["open_dissent"]] == ["div-1"]
    assert len(doc["rounds"]) == 4
    now = invoke_json("show", str(built.id), "--store", store.url)
    assert now["open_dissent"] == []  # div-1 was resolved in iteration 2
    assert doc["tokens"]["input"] < now["tokens"]["input"]


def test_show_at_time_selects_the_last_event_not_after_it(store: Store) -> None:
    built = store.b
    target = built.timestamps[20] + timedelta(milliseconds=500)
    expected = max(p for p, t in built.timestamps.items() if t <= target)
    doc = invoke_json(
        "show", built.prefix, "--at-time", target.isoformat().replace("+00:00", "Z"),
        "--store", store.url,
    )
    assert doc["version"] == expected
    local = target.astimezone().replace(tzinfo=None).isoformat()  # as a person types it
    assert invoke_json("show", built.prefix, "--at-time", local, "--store", store.url) == doc


def test_show_at_event_matches_the_log(store: Store) -> None:
    log = invoke_json("log", str(store.b.id), "--store", store.url)
    doc = invoke_json("show", str(store.b.id), "--at-event", "12", "--store", store.url)
    assert doc["version"] == 12
    assert doc["updated"] == log[11]["timestamp"]


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_show_at_any_event_agrees_with_a_fold_of_the_log(store: Store, data: st.DataObject) -> None:
    """Tokens, cost, rounds and votes as of event N equal what the raw log says up to N."""
    log = invoke_json("log", str(store.b.id), "--store", store.url)
    n = data.draw(st.integers(min_value=1, max_value=len(log)))
    doc = invoke_json("show", str(store.b.id), "--at-event", str(n), "--store", store.url)
    upto = log[:n]
    contributions = [e["data"] for e in upto if e["type"] == "ContributionRecorded"]
    assert doc["version"] == n
    assert doc["tokens"]["input"] == sum(c["response"]["tokens"]["input"] for c in contributions)
    assert doc["tokens"]["output"] == sum(c["response"]["tokens"]["output"] for c in contributions)
    assert doc["priced_cost_usd"] == pytest.approx(
        sum(c["response"]["cost_usd"] for c in contributions)
    )
    unpriced = sum(c["response"].get("price") is None for c in contributions)
    assert doc["unpriced_calls"] == unpriced
    assert doc["cost_usd"] == (None if unpriced else doc["priced_cost_usd"])
    assert len(doc["rounds"]) == sum(e["type"] == "RoundStarted" for e in upto)
    votes = sum("vote" in c for r in doc["rounds"] for c in r["contributions"])
    assert votes == sum(e["type"] == "VoteRecorded" for e in upto)
    evaluations = [e["data"] for e in upto if e["type"] == "ConvergenceEvaluated"]
    if evaluations:
        assert doc["convergence"]["score"] == evaluations[-1]["score"]
    else:
        assert doc["convergence"] is None


def test_show_human_view(store: Store) -> None:
    result = invoke("show", store.b.prefix, "--store", store.url)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert store.b.title in out
    assert "in_progress" in out
    assert "iteration 3" in out
    assert "openai/model-4" in out
    assert "Draft by P1 in iteration 1." in out  # a content preview
    assert "weighted score 0.25" in out
    assert "plain majority does not agree" in out
    assert "div-3" in out


def test_show_lineage_of_a_fork(tmp_path: Path) -> None:
    url = str(tmp_path / "fork.sqlite")
    clock = FixedStepClock()
    with Ledger(url) as ledger:
        parent = priced_session(ledger, iterations=2, clock=clock)
        child = SessionBuilder.of(ledger.get(parent.id), clock=clock, store=ledger).fork(
            at_iteration=1).id
    doc = invoke_json("show", str(child), "--store", url)
    assert doc["lineage"] == {
        "parent_id": str(parent.id),
        "parent_position": parent.iteration_end[1],
    }
    assert doc["iteration"] == 1
    rows = {r["id"]: r for r in invoke_json("sessions", "--store", url)}
    assert rows[str(child)]["parent_id"] == str(parent.id)


# --------------------------------------------------------------------------- prefixes


def test_prefix_resolution(tmp_path: Path) -> None:
    url = str(tmp_path / "prefix.sqlite")
    clock = FixedStepClock()
    ids = [
        uuid.UUID("abcd1234-0000-4000-8000-000000000001"),
        uuid.UUID("abcd1234-0000-4000-8000-000000000002"),
        uuid.UUID("ef000000-0000-4000-8000-000000000003"),
    ]
    with Ledger(url) as ledger:
        for sid in ids:
            priced_session(ledger, iterations=1, clock=clock, session_id=sid)
    assert invoke_json("show", "ef", "--store", url)["id"] == str(ids[2])
    assert invoke_json("show", "ABCD1234-0000-4000-8000-000000000002", "--store", url)["id"] == (
        str(ids[1])
    )
    assert invoke_json("show", ids[0].hex, "--store", url)["id"] == str(ids[0])
    log = invoke_json("log", "EF00", "--store", url)
    assert log[0]["type"] == "SessionStarted"
    with Ledger(url, create=False) as ledger:
        assert len(log) == ledger.head_version(ids[2])


def test_ambiguous_prefix_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    url = str(tmp_path / "ambiguous.sqlite")
    clock = FixedStepClock()
    with Ledger(url) as ledger:
        for i in (1, 2):
            priced_session(
                ledger, iterations=1, clock=clock,
                session_id=uuid.UUID(f"abcd0000-0000-4000-8000-00000000000{i}"),
            )
    code, out, err = run_main(capsys, "show", "abcd", "--store", url)
    assert code == 2
    assert out == ""
    assert_one_error_line(err)
    assert "matches 2 sessions: abcd0000 (" in err
    code, out, _ = run_main(capsys, "show", "@~1", "--store", url, "--json")
    assert code == 0
    assert json.loads(out)["id"] == "abcd0000-0000-4000-8000-000000000001"


# --------------------------------------------------------------------------- log


def test_log_json_is_the_whole_chain_in_order(store: Store) -> None:
    log = invoke_json("log", store.a.prefix, "--store", store.url)
    assert [e["position"] for e in log] == list(range(1, store.a.iteration_end[2] + 1))
    assert set(log[0]) == {"position", "type", "timestamp", "hash", "prev_hash", "data"}
    assert log[0]["type"] == "SessionStarted"
    assert log[0]["prev_hash"] == GENESIS
    for before, after in itertools.pairwise(log):
        assert after["prev_hash"] == before["hash"]
    assert log[-1]["type"] == "SessionConverged"
    assert [e["timestamp"] for e in log] == [
        store.a.timestamps[p].isoformat() for p in range(1, len(log) + 1)
    ]


def test_log_type_filter(store: Store) -> None:
    built = store.b
    log = invoke_json(
        "log", str(built.id), "--type", "VoteRecorded", "--type", "convergenceevaluated",
        "--store", store.url,
    )
    types = [e["type"] for e in log]
    assert set(types) == {"VoteRecorded", "ConvergenceEvaluated"}
    assert types.count("VoteRecorded") == len(built.participants) * built.iterations
    assert types.count("ConvergenceEvaluated") == built.iterations
    positions = [e["position"] for e in log]
    assert positions == sorted(positions)


def test_log_human_view(store: Store) -> None:
    result = invoke("log", store.a.prefix, "--type", "RoundStarted", "--store", store.url)
    assert result.exit_code == 0
    assert result.stdout.count("RoundStarted") == 4 * store.a.iterations
    assert "SessionStarted" not in result.stdout


# --------------------------------------------------------------------------- verify


def test_verify_a_sound_store(store: Store) -> None:
    doc = invoke_json("verify", "--store", store.url)
    assert doc["ok"] is True
    assert doc["keyed"] is False
    reports = {r["session_id"]: r for r in doc["sessions"]}
    assert reports[str(store.a.id)]["events"] == store.a.iteration_end[2]
    assert reports[str(store.b.id)]["events"] == store.b.iteration_end[3]
    assert all(r["ok"] and r["first_bad_position"] is None for r in reports.values())
    result = invoke("verify", "--store", store.url)
    assert result.exit_code == 0
    assert "2/2 session(s) verified" in result.stdout


def _tamper(path: Path, session: uuid.UUID, position: int) -> None:
    con = raw_connection(path)
    with con:
        cur = con.execute(
            "UPDATE stored_events SET state = CAST(json_set(CAST(unpack(state) AS TEXT), "
            "'$.data.response.content', 'rewritten later') AS BLOB) "
            "WHERE originator_id = ? AND originator_version = ?",
            (session.hex, position),
        )
        assert cur.rowcount == 1
    con.close()


def test_verify_names_the_first_tampered_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    built = _build_store(tmp_path / "tampered.sqlite")
    with Ledger(built.url, create=False) as ledger:
        position = next(
            e.position for e in ledger.events(built.b.id) if e.type == "ContributionRecorded"
        )
    _tamper(built.path, built.b.id, position)

    code, out, err = run_main(capsys, "verify", "--store", built.url)
    assert code == 1
    assert_one_error_line(err)
    assert str(built.b.id) in err
    assert f"position {position}" in err
    assert "altered" in err

    code, out, err = run_main(capsys, "verify", "--json", "--store", built.url)
    assert code == 1
    doc = json.loads(out)
    assert doc["ok"] is False
    bad = [r for r in doc["sessions"] if not r["ok"]]
    assert [(r["session_id"], r["first_bad_position"]) for r in bad] == [
        (str(built.b.id), position),
    ]

    # The untouched session still verifies on its own.
    code, out, err = run_main(capsys, "verify", built.a.prefix, "--store", built.url)
    assert code == 0, err

    # And as a real process: exit status 1 and the position on stderr.
    proc = run_process("verify", built.b.prefix, "--store", built.url)
    assert proc.returncode == 1
    assert f"position {position}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_verify_checks_seal_hmac_with_the_key_from_the_environment(tmp_path: Path) -> None:
    url = str(tmp_path / "sealed.sqlite")
    clock = FixedStepClock()
    with Ledger(url) as ledger:
        built = priced_session(ledger, iterations=1, clock=clock)
        SessionBuilder.of(ledger.get(built.id), clock=clock, store=ledger).seal(key=b"s3cret")

    good = CliRunner(env={"FORGE_LEDGER_HMAC_KEY": "s3cret"}).invoke(
        cli, ["verify", "--json", "--store", url],
    )
    assert good.exit_code == 0, good.stderr
    report = json.loads(good.stdout)["sessions"][0]
    assert report["sealed"] is True
    assert report["hmac_ok"] is True

    other = CliRunner(env={"OTHER_KEY": "wrong"}).invoke(
        cli, ["verify", "--json", "--key-env", "OTHER_KEY", "--store", url],
    )
    assert other.exit_code == 1
    report = json.loads(other.stdout)["sessions"][0]
    assert report["hmac_ok"] is False
    assert report["first_bad_position"] == report["events"] + 1

    unkeyed = CliRunner(env={"FORGE_LEDGER_HMAC_KEY": None}).invoke(
        cli, ["verify", "--json", "--store", url],
    )
    assert unkeyed.exit_code == 0
    assert json.loads(unkeyed.stdout)["sessions"][0]["hmac_ok"] is None


# --------------------------------------------------------------------------- user mistakes


def _mistakes(store: Store, tmp: Path) -> dict[str, list[str]]:
    other_sqlite = tmp / "other.sqlite"
    if not other_sqlite.exists():
        con = sqlite3.connect(other_sqlite)
        con.execute("CREATE TABLE notes (x)")
        con.commit()
        con.close()
    text_file = tmp / "notes.txt"
    text_file.write_text("not a database\n")
    return {
        "unknown session": ["show", "ffffffff", "--store", store.url],
        "bad url scheme": ["sessions", "--store", "mysql://db/x"],
        "missing store": ["sessions", "--store", str(tmp / "absent.sqlite")],
        "text file": ["log", "abc", "--store", str(text_file)],
        "foreign sqlite": ["verify", "--store", str(other_sqlite)],
        "conflicting --at": ["show", store.a.prefix, "--at-event", "3", "--at-iteration", "1",
                             "--store", store.url],
        "bad iso time": ["show", store.a.prefix, "--at-time", "yesterday", "--store", store.url],
        "event out of range": ["show", store.a.prefix, "--at-event", "100000",
                               "--store", store.url],
        "no such iteration": ["show", store.a.prefix, "--at-iteration", "9", "--store", store.url],
        "unknown event type": ["log", store.a.prefix, "--type", "Nope", "--store", store.url],
    }


MISTAKES = [
    "unknown session", "bad url scheme", "missing store", "text file", "foreign sqlite",
    "conflicting --at", "bad iso time", "event out of range",
    "no such iteration", "unknown event type",
]


@pytest.mark.parametrize("case", MISTAKES)
def test_user_mistakes_are_one_line_and_exit_2(
    case: str, store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    args = _mistakes(store, tmp_path)[case]
    code, out, err = run_main(capsys, *args)
    assert code == 2, (case, err)
    assert out == ""
    assert_one_error_line(err)


@pytest.mark.parametrize(
    "case", ["unknown session", "bad url scheme", "missing store", "foreign sqlite",
             "conflicting --at", "bad iso time"],
)
def test_user_mistakes_in_a_real_process(case: str, store: Store, tmp_path: Path) -> None:
    args = [*_mistakes(store, tmp_path)[case], "--json"]
    proc = run_process(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert_one_error_line(proc.stderr)


def test_missing_store_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "typo.sqlite"
    code, _, err = run_main(capsys, "sessions", "--store", str(path))
    assert code == 2
    assert "no ledger at" in err
    assert not path.exists()


# --------------------------------------------------------------------------- real processes


@pytest.mark.slow
def test_console_script_and_module_print_one_json_document(store: Store) -> None:
    script = run_process("sessions", "--json", "--store", store.url)
    module = run_process("show", store.a.prefix, "--json", "--store", store.url, module=True)
    assert script.returncode == 0, script.stderr + module.stderr
    assert module.returncode == 0, script.stderr + module.stderr
    rows = json.loads(script.stdout)
    assert [r["id"] for r in rows] == [str(store.a.id), str(store.b.id)]
    shown = json.loads(module.stdout)
    assert shown["id"] == str(store.a.id)
    assert shown["status"] == "converged"
    assert invoke_json("show", store.a.prefix, "--store", store.url) == shown


_DRIVER = """
import sys
from forge_ledger.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
else:
    code = 0
loaded = sorted(m for m in sys.modules if m == "litellm" or m.startswith("litellm."))
sys.stderr.write(f"\\nEXIT={code} LITELLM={len(loaded)}\\n")
"""


@pytest.mark.parametrize(
    "command",
    [
        ["sessions", "--json"],
        ["show", "{a}", "--json"],
        ["show", "{a}", "--at-iteration", "1"],
        ["log", "{a}", "--json"],
        ["verify", "--json"],
        ["verify", "{a}"],
    ],
)
def test_read_commands_never_import_litellm(command: list[str], store: Store) -> None:
    args = [c.format(a=store.a.prefix) for c in command] + ["--store", store.url]
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert "EXIT=0 " in proc.stderr, proc.stderr
    assert "LITELLM=0" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- PostgreSQL


@pytest.mark.postgres
def test_sessions_and_show_on_postgresql(pg_url: str) -> None:
    clock = FixedStepClock()
    with Ledger(pg_url) as ledger:
        a = priced_session(ledger, iterations=2, participants=3, clock=clock)
        b = priced_session(ledger, iterations=1, participants=2, converge=False, clock=clock)
    rows = invoke_json("sessions", "--store", pg_url)
    assert [r["id"] for r in rows] == [str(a.id), str(b.id)]
    assert [r["events"] for r in rows] == [a.iteration_end[2], b.iteration_end[1]]
    doc = invoke_json("show", a.prefix, "--store", pg_url)
    assert doc["status"] == "converged"
    assert doc["tokens"] == {"input": a.tokens.input, "output": a.tokens.output}
    past = invoke_json("show", a.prefix, "--at-iteration", "1", "--store", pg_url)
    assert past["version"] == a.iteration_end[1]
    assert invoke_json("verify", "--store", pg_url)["ok"] is True
    log = invoke_json("log", str(b.id), "--store", pg_url)
    assert len(log) == b.iteration_end[1]


def test_human_views_print_user_text_literally(tmp_path: Path) -> None:
    """Titles are user text: rich markup in them is shown as typed, never interpreted."""
    url = str(tmp_path / "markup.sqlite")
    title = "Keep [bold]tags[/bold] and [/] literal"
    with Ledger(url) as ledger:
        built = priced_session(ledger, iterations=1, title=title)
    shown = invoke("show", built.prefix, "--store", url)
    assert shown.exit_code == 0, shown.stderr
    assert title in shown.stdout
    listed = invoke("sessions", "--store", url)
    assert listed.exit_code == 0
    assert "[bold]tags[/bold]" in listed.stdout
