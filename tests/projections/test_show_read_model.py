"""``show`` reads the read model when it is current, and prints exactly what the ledger gives.

Stores are real SQLite files with sessions told by ``SessionBuilder`` (seeded random ones from
``support.stories.random_sessions``, plus a fork run on after its parent's first round, a fork at an
iteration's end, and a rewound and aborted session with unpriced, failed and unparsed calls and
user text that looks like markup). Each session
is shown before the read model exists (the ledger path) and after ``projections update`` (the
read-model path, which the tests check was taken); the two outputs must be the same bytes, as
plain text and as a terminal renders them. A read model that is stale, of an older version,
of an older schema or damaged is not read.
"""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.color import ColorSystem
from sqlite_utils import Database

import forge_ledger.cli.read as read_cli
from forge_ledger.cli import cli
from forge_ledger.cli._common import out_console
from forge_ledger.clock import FixedStepClock
from forge_ledger.domain.text import clip
from forge_ledger.domain.values import (
    ModelResponse,
    Participant,
    RoundKind,
    SessionStatus,
    Stance,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.outputs import store_outputs
from forge_ledger.projections import ReadModelProjection
from forge_ledger.projections.migrations import MIGRATIONS
from forge_ledger.projections.show_view import preview
from forge_ledger.testing import SessionBuilder
from support.read_models import spied, update_read_model
from support.store import raw_connection
from support.stories import random_sessions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# --------------------------------------------------------------------------- stores


def _unpriced_rewound_aborted(ledger: Ledger, clock: FixedStepClock, seed: int) -> str:
    """Unpriced and failed calls, an unparsed vote, a rewind (superseded rounds), an abort,
    and answers whose first line is blank or looks like Rich markup."""
    b = SessionBuilder(clock=clock, store=ledger).start(
        Topic(title="Keep [bold]tags[/bold] and [/] literal"),
        participants=[Participant(name="alpha", model="openai/a"),
                      Participant(name="b", model="openai/b")],
        session_id=uuid.UUID(int=seed + 1),
    )
    unpriced = ModelResponse(content="\n\n  [red]not red[/red]  second word \nnext line",
                             model="openai/a", tokens=TokenCount(input=7, output=3),
                             cost_usd=0.0)
    b.round(RoundKind.DRAFT, iteration=1)
    b.fail("alpha", message="429", cost_usd=0.0)
    b.answer("alpha", response=unpriced).answer("b", "x" * 200).close_round()
    b.round(RoundKind.CONVERGENCE, iteration=1)
    b.answer("alpha", "I agree").vote("alpha", agrees=True, score=90, stance=Stance.AGREE)
    b.answer("b", "{not json").parse_failure("b", expected="vote", error="no json\nat all")
    b.close_round(abstained=["b"])
    b.evaluate(iteration=1, score=0.45, converged=False, majority_agrees=True, agree=1,
               disagree=0, partial=0, threshold=0.85)
    b.round(RoundKind.REFINEMENT, iteration=2)
    b.answer("alpha", "refined").opinion("alpha", stance=Stance.PARTIAL, concerns=("cost",))
    b.close_round()
    b.save()
    b.rewind(1).resume(reason="again")
    b.round(RoundKind.CRITIQUE, iteration=2, targets={"alpha": "b", "b": "alpha"})
    b.answer("alpha", "too long").critique("alpha", target="b", score=40, weaknesses=("long",))
    b.finish(SessionStatus.ABORTED, reason="stopped by [i]someone[/i]")
    b.save()
    return str(b.id)


def _fork_continued(ledger: Ledger, clock: FixedStepClock, parent_id: str) -> str:
    """A fork of ``parent_id`` after its first round (mid-iteration), then run on."""
    parent = SessionBuilder.of(ledger.get(parent_id), clock=clock, store=ledger)
    first = next(e.position for e in ledger.events(parent_id) if e.type == "RoundCompleted")
    child = parent.fork(at_event=first, session_id=uuid.uuid5(uuid.NAMESPACE_URL, parent_id))
    child.round_number = len(child.state.rounds)
    child.resume(reason="run the fork")
    names = child.names
    child.round(RoundKind.CONVERGENCE, participants=names)
    for name in names:
        child.answer(name, f"{name} votes in the fork").vote(
            name, agrees=True, score=80, stance=Stance.AGREE)
    child.close_round().save()
    return str(child.id)


def _build(path: Path | str, seed: int) -> list[str]:
    clock = FixedStepClock(step=timedelta(seconds=2))
    with Ledger(str(path)) as ledger:
        ids = random_sessions(ledger, seed, 3)
        ids.append(_unpriced_rewound_aborted(ledger, clock, seed))
        ids.append(_fork_continued(ledger, clock, ids[0]))
        b = SessionBuilder.of(ledger.get(ids[1]), clock=clock, store=ledger)
        fork = b.fork(at_iteration=1, session_id=uuid.uuid5(uuid.NAMESPACE_URL, ids[1]))
        ids.append(str(fork.id))  # a fork at an iteration's end, as forked
        ids.append(_fork_without(ledger, clock, ids[2]))
    return ids


def _fork_without(ledger: Ledger, clock: FixedStepClock, parent_id: str) -> str:
    """A fork at iteration 1's end that its first participant leaves (one joins first when
    only two take part): ``show`` lists those who stay."""
    b = SessionBuilder.of(ledger.get(parent_id), clock=clock, store=ledger)
    child = b.fork(at_iteration=1, session_id=uuid.uuid5(uuid.NAMESPACE_URL, f"{parent_id}-w"))
    if len(child.names) < 3:
        child.aggregate.join(Participant(name="extra", model="openai/extra"), at=clock.now())
    child.leave(child.names[0], reason="fork --without").save()
    return str(child.id)


def _views(path: Path) -> Path:
    with Ledger(str(path), create=False) as ledger:
        return store_outputs(ledger.location).views


# --------------------------------------------------------------------------- showing


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per ``show``: whether it printed from the read model."""
    return spied(monkeypatch, read_cli, "current_session_view")


def show(path: Path | str, sid: str, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["show", sid, "--store", str(path), *extra],
                                catch_exceptions=False)
    return result.exit_code, result.stdout


def _both_renderings(path: Path, ids: list[str], monkeypatch: pytest.MonkeyPatch,
                     ) -> dict[tuple[str, bool], tuple[int, str]]:
    out: dict[tuple[str, bool], tuple[int, str]] = {}
    for on_terminal in (False, True):
        with monkeypatch.context() as m:
            if on_terminal:
                m.setattr(out_console, "_force_terminal", True)
                m.setattr(out_console, "_color_system", ColorSystem.STANDARD)
            for sid in ids:
                out[sid, on_terminal] = show(path, sid)
    return out


# --------------------------------------------------------------------------- the same bytes


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(min_value=0, max_value=10_000))
@pytest.mark.slow
def test_show_from_the_read_model_prints_what_the_ledger_path_prints(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    taken: list[bool], seed: int,
) -> None:
    taken.clear()  # one fixture for every example
    path = tmp_path_factory.mktemp("show") / "store.sqlite"
    ids = _build(path, seed)
    from_ledger = _both_renderings(path, ids, monkeypatch)
    assert not any(taken)  # no read model yet
    update_read_model(path)
    taken.clear()
    from_views = _both_renderings(path, ids, monkeypatch)
    assert taken == [True] * len(taken)
    assert len(taken) == 2 * len(ids)
    for key, (code, text) in from_ledger.items():
        assert code == 0
        assert from_views[key] == (code, text), key


def test_the_read_model_path_is_the_one_taken(tmp_path: Path, taken: list[bool]) -> None:
    """A value changed in the read model shows: ``show`` really read it."""
    path = tmp_path / "store.sqlite"
    ids = _build(path, 3)
    update_read_model(path)
    views = sqlite3.connect(_views(path))
    views.execute("UPDATE sessions SET title = 'from the read model' WHERE id = ?", [ids[3]])
    views.commit()
    views.close()
    code, text = show(path, ids[3])
    assert code == 0
    assert "from the read model" in text
    assert taken == [True]


def test_the_first_format_store_and_an_imported_session(tmp_path: Path, taken: list[bool]) -> None:
    """Sessions written in the first event format (texts inline) and one imported from a
    v1.0 YAML file (no rounds; its EMS the file's) print the same from the read model."""
    path = tmp_path / "store.sqlite"
    shutil.copyfile(FIXTURES / "store-v1.sqlite", path)
    imported = CliRunner().invoke(
        cli, ["import", str(FIXTURES / "v1_0_session.yaml"), "--store", str(path)])
    assert imported.exit_code == 0, imported.output
    with Ledger(str(path), create=False) as ledger:
        ids = [str(s) for s in ledger.session_ids()]
    assert len(ids) == 5
    expected = {sid: show(path, sid) for sid in ids}
    update_read_model(path)
    taken.clear()
    assert {sid: show(path, sid) for sid in ids} == expected
    assert taken == [True] * len(ids)


@pytest.mark.postgres
@pytest.mark.slow
def test_show_from_the_read_model_on_postgresql(pg_url: str, taken: list[bool]) -> None:
    """The read model of a PostgreSQL store (a SQLite file under the forge-ledger home)."""
    ids = _build(pg_url, 2)
    expected = {sid: show(pg_url, sid) for sid in ids}
    update_read_model(pg_url)
    taken.clear()
    assert {sid: show(pg_url, sid) for sid in ids} == expected
    assert taken == [True] * len(ids)


# --------------------------------------------------------------------------- falling back


@pytest.fixture
def current(tmp_path: Path) -> tuple[Path, list[str], dict[str, str]]:
    """A store, its ledger-path outputs, and a current read model beside it."""
    path = tmp_path / "store.sqlite"
    ids = _build(path, 11)
    expected = {sid: show(path, sid)[1] for sid in ids}
    update_read_model(path)
    return path, ids, expected


def test_a_stale_read_model_is_not_read(
    current: tuple[Path, list[str], dict[str, str]], taken: list[bool],
) -> None:
    path, ids, _expected = current
    sid = ids[4]
    with Ledger(str(path), create=False) as ledger:
        b = SessionBuilder.of(ledger.get(sid), clock=FixedStepClock(), store=ledger)
        b.human("one more word", kind="steer").save()
        moved = ledger.state(sid).version
    code, text = show(path, sid)
    assert code == 0
    assert f"event {moved} " in text
    # another session's event makes the whole read model stale too
    with Ledger(str(path), create=False) as ledger:
        SessionBuilder.of(ledger.get(ids[5]), clock=FixedStepClock(), store=ledger).human(
            "later", kind="steer").save()
    assert show(path, ids[3])[0] == 0
    assert taken == [False, False]


def test_a_store_restored_from_a_backup_and_written_again_is_not_taken_for_current(
    tmp_path: Path, taken: list[bool],
) -> None:
    """A restored store whose session was then written to the same length has the same event
    counts as the read model, but other events: the read model is not read, and ``show``
    prints the new last event."""
    path = tmp_path / "restored.sqlite"
    clock = FixedStepClock(step=timedelta(seconds=2))
    with Ledger(str(path)) as ledger:
        b = SessionBuilder(clock=clock, store=ledger).start(
            Topic(title="Backups"), participants=[Participant(name="a", model="openai/a")],
            session_id=uuid.UUID(int=7),
        )
        b.round(RoundKind.DRAFT, iteration=1).answer("a", "first draft").save()
    backup = tmp_path / "backup.sqlite"
    shutil.copy(path, backup)
    with Ledger(str(path), create=False) as ledger:
        SessionBuilder.of(ledger.get(str(b.id)), clock=clock, store=ledger).human(
            "the lost remark", kind="steer").save()
    update_read_model(path)
    sid = str(b.id)
    assert show(path, sid)[0] == 0
    shutil.copy(backup, path)  # the store restored; its read model left as it was
    with Ledger(str(path), create=False) as ledger:
        SessionBuilder.of(ledger.get(sid), clock=clock, store=ledger).human(
            "a different remark", kind="steer").save()
    code, text = show(path, sid)
    assert code == 0
    assert taken == [True, False]
    with Ledger(str(path), create=False) as ledger:
        assert ledger.head_version(uuid.UUID(sid)) == ledger.state(sid).version
        assert f"event {ledger.state(sid).version} " in text


def test_a_read_model_of_an_older_version_is_not_read_until_refolded(
    current: tuple[Path, list[str], dict[str, str]], taken: list[bool],
) -> None:
    path, ids, expected = current
    views = sqlite3.connect(_views(path))
    views.execute("UPDATE _projections SET version = ? WHERE name = ?",
                  [ReadModelProjection.version - 1, ReadModelProjection.name])
    views.execute("DELETE FROM round_lines")  # an older version's rows would be wrong
    views.commit()
    views.close()
    assert [show(path, sid)[1] for sid in ids] == [expected[sid] for sid in ids]
    assert taken == [False] * len(ids)
    update_read_model(path)  # the runner empties the projection and refolds it
    taken.clear()
    assert [show(path, sid)[1] for sid in ids] == [expected[sid] for sid in ids]
    assert taken == [True] * len(ids)


def test_a_read_model_of_the_schema_before_show_is_migrated_and_refolded(
    tmp_path: Path, taken: list[bool],
) -> None:
    path = tmp_path / "store.sqlite"
    ids = _build(path, 5)
    expected = {sid: show(path, sid)[1] for sid in ids}
    taken.clear()
    with Ledger(str(path), create=False) as ledger:
        head = ledger.max_notification_id()
    old = Database(sqlite3.connect(_views(path)))
    MIGRATIONS.apply(old, stop_before="m005_show")
    old.execute("INSERT INTO _projections (name, version, position) VALUES (?, 1, ?)",
                [ReadModelProjection.name, head])
    old.conn.commit()
    old.close()
    assert [show(path, sid)[1] for sid in ids] == [expected[sid] for sid in ids]
    assert taken == [False] * len(ids)
    update_read_model(path)
    taken.clear()
    assert [show(path, sid)[1] for sid in ids] == [expected[sid] for sid in ids]
    assert taken == [True] * len(ids)


_DAMAGED_CONVERGENCE = {
    "wrong type": "json_set(convergence_json, '$.score', 'high')",
    "a flag as a number": "json_set(convergence_json, '$.converged', 1)",
    "missing key": "json_remove(convergence_json, '$.agree')",
    "not an object": "'[1, 2]'",
}
"""A latest convergence that is JSON but not the state's value (SQL over the column)."""


@pytest.mark.parametrize(
    "damage", ["garbage", "truncated", "json", "null", *_DAMAGED_CONVERGENCE]
)
def test_a_damaged_read_model_is_not_read(
    current: tuple[Path, list[str], dict[str, str]], taken: list[bool], damage: str,
) -> None:
    path, ids, expected = current
    views = _views(path)
    if damage == "garbage":
        views.write_bytes(b"this is not a database" * 100)
    elif damage == "truncated":
        views.write_bytes(views.read_bytes()[:2048])
    else:
        conn = sqlite3.connect(views)
        if damage == "json":
            conn.execute("UPDATE sessions SET convergence_json = '{not json'")
        elif damage in _DAMAGED_CONVERGENCE:  # a session without a vote keeps its NULL
            voted = {r[0] for r in conn.execute(
                "SELECT id FROM sessions WHERE convergence_json != 'null'"
            )}
            assert voted
            conn.execute(
                f"UPDATE sessions SET convergence_json = {_DAMAGED_CONVERGENCE[damage]} "
                "WHERE convergence_json != 'null'"
            )
            ids = [sid for sid in ids if sid in voted]
        else:
            conn.execute("UPDATE round_lines SET preview = NULL")
        conn.commit()
        conn.close()
    for sid in ids:
        assert show(path, sid) == (0, expected[sid])
    assert taken == [False] * len(ids)


@pytest.mark.slow
def test_a_locked_read_model_is_not_waited_for(
    current: tuple[Path, list[str], dict[str, str]], taken: list[bool],
) -> None:
    """Another process holds the file exclusively: ``show`` gives up on it within its short
    timeout and prints from the ledger."""
    path, ids, expected = current
    holder = sqlite3.connect(_views(path))
    try:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        assert show(path, ids[0]) == (0, expected[ids[0]])
    finally:
        holder.close()
    assert taken == [False]
    assert show(path, ids[0]) == (0, expected[ids[0]])
    assert taken == [False, True]


def test_a_broken_chain_is_shown_from_the_ledger(
    current: tuple[Path, list[str], dict[str, str]], taken: list[bool],
) -> None:
    """An event altered after the read model was built: ``show`` prints the events as stored
    (and fails as the ledger path does), never the read model's older picture."""
    path, ids, _expected = current
    sid = ids[3]
    with Ledger(str(path), create=False) as ledger:
        position = next(e.position for e in ledger.events(sid) if e.type == "SessionAborted")
    con = raw_connection(str(path))
    with con:
        cur = con.execute(
            "UPDATE stored_events SET state = CAST(json_set(CAST(unpack(state) AS TEXT), "
            "'$.data.reason', 'edited') AS BLOB) "
            "WHERE originator_id = ? AND originator_version = ?",
            (uuid.UUID(sid).hex, position),
        )
        assert cur.rowcount == 1
    con.close()
    result = CliRunner().invoke(cli, ["show", sid, "--store", str(path)])
    assert result.exit_code == 1
    assert "edited" in result.stdout
    assert taken == []


def test_json_and_time_travel_read_the_ledger(
    current: tuple[Path, list[str], dict[str, str]], taken: list[bool],
) -> None:
    path, ids, _expected = current
    assert show(path, ids[0], "--json")[0] == 0
    assert show(path, ids[0], "--at-event", "2")[0] == 0
    assert taken == []


# --------------------------------------------------------------------------- the preview rule

_LINE_TEXT = st.text(st.sampled_from(list(
    "ab \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029\xa0\u3000")), max_size=40)


@settings(max_examples=500, deadline=None)
@given(text=_LINE_TEXT | st.text(max_size=40), width=st.integers(min_value=1, max_value=20))
def test_preview_is_the_first_non_empty_line_clipped(text: str, width: int) -> None:
    """The preview searches for the first line without splitting the whole text; it must
    give what the plain rule gives, whatever the line breaks and blanks."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    assert preview(text, width) == clip(first, width)
