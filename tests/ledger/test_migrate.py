"""``forge-ledger migrate``: a store of an older format brought to the current one, in one
transaction, and then read exactly as before; a second run, a dry run and read-only commands
change nothing; a store of a newer format is refused untouched."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from forge_ledger.cli import cli
from forge_ledger.domain import events as ev
from forge_ledger.domain.values import ChatMessage, RoundKind
from forge_ledger.errors import StoreError
from forge_ledger.ledger import Ledger, migrate, texts, verify_session
from forge_ledger.ledger.migrate import QUOTES_TABLE, format_of, migrate_store
from forge_ledger.ledger.store import FORMAT_VERSION, resolve_store
from forge_ledger.ledger.text_bodies import quoting_body
from forge_ledger.testing import SessionBuilder
from support.store import as_format_1_with_quote_lists, text_bodies

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FORMATS = ("v1", "v2")
STORE_MARK = "{store}"
READ_ONLY_COMMANDS = (["sessions", "--json"], ["verify", "--json"], ["show", "@", "--json"])


def _copy(fmt: str, tmp_path: Path) -> Path:
    """A copy of a golden store, in WAL mode as every store forge-ledger opened is (opening
    one switches it, which changes the file's header, not its contents)."""
    path = tmp_path / f"store-{fmt}.sqlite"
    shutil.copyfile(FIXTURES / f"store-{fmt}.sqlite", path)
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("PRAGMA journal_mode=WAL")
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _folder(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


def _format(path: Path) -> int:
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as con:
        return format_of(con)


def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_golden_store_migrates_then_reads_exactly_as_before(fmt: str, tmp_path: Path) -> None:
    path = _copy(fmt, tmp_path)
    done = _cli("migrate", "--store", str(path), "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["changed"]
    assert report["from_version"] == 0
    assert report["to_version"] == FORMAT_VERSION == _format(path)
    golden = FIXTURES / f"store-{fmt}"
    for name, args in (
        ("sessions.json", ["sessions", "--json"]),
        ("verify.json", ["verify", "--json"]),
        ("replay-all.json", ["replay", "--all", "--json"]),
    ):
        got = _cli(*args, "--store", str(path))
        assert got.exit_code == 0, got.output
        expected = (golden / name).read_text(encoding="utf-8")
        assert json.loads(got.stdout.replace(str(path), STORE_MARK)) == json.loads(expected)


@pytest.mark.parametrize("fmt", FORMATS)
def test_migrating_twice_changes_nothing(fmt: str, tmp_path: Path) -> None:
    path = _copy(fmt, tmp_path)
    first = migrate_store(resolve_store(str(path)))
    assert first.steps
    before, files = _digest(path), _folder(path)
    again = migrate_store(resolve_store(str(path)))
    assert again.steps == []
    assert again.from_version == FORMAT_VERSION
    assert (_digest(path), _folder(path)) == (before, files)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_dry_run_and_read_only_commands_write_nothing(fmt: str, tmp_path: Path) -> None:
    path = _copy(fmt, tmp_path)
    before, files = _digest(path), _folder(path)
    dry = _cli("migrate", "--dry-run", "--store", str(path))
    assert dry.exit_code == 0, dry.output
    assert "migrating would" in dry.stdout
    assert "record format" in dry.stdout
    for args in READ_ONLY_COMMANDS:
        assert _cli(*args, "--store", str(path)).exit_code == 0
    assert (_digest(path), _folder(path)) == (before, files)
    assert _format(path) == 0


def _asked(prompt: str) -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content="Deliberate."),
        ChatMessage(role="user", content=prompt),
    ]


def _quoting_session(sid: uuid.UUID) -> Any:
    b = SessionBuilder(
        answer_defaults={
            "model": "openai/scripted",
            "params": ev.CallParams(temperature=0.2, max_tokens=256),
        }
    )
    b.start("Migrated topic", participants=["p0", "p1"], session_id=sid)
    first, second = b.names
    draft = " ".join(f"draft{i} of the ledger's format" for i in range(120))
    b.round(RoundKind.DRAFT, iteration=1, participants=[first])
    b.answer(first, draft)
    b.close_round()
    b.round(RoundKind.CRITIQUE, iteration=1, participants=[second], targets={second: first})
    prompt = f"## Draft to critique\n\n{draft}\n\nReview it."
    b.answer(second, "Fine. " * 40, messages=_asked(prompt), quotes=[texts.text_address(draft)])
    return b.aggregate, prompt


def test_a_store_with_quote_lists_in_their_own_table_migrates(tmp_path: Path) -> None:
    """Format 1 as some stores had it (hex keys, quote lists in a table of their own): after
    migrating, one table, keys of 32 bytes, each list in its body, the same payloads."""
    url, sid = str(tmp_path / "one.sqlite"), uuid.uuid4()
    agg, prompt = _quoting_session(sid)
    written = [dict(e.data) for e in agg.pending_events if hasattr(e, "data")]
    with Ledger(url) as ledger:
        ledger.save(agg)
    assert as_format_1_with_quote_lists(url) == 1
    done = migrate_store(resolve_store(url))
    assert any(QUOTES_TABLE in step for step in done.steps)
    with sqlite3.connect(url) as con:
        tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master")}
        keys = set(con.execute(f"SELECT typeof(sha256), length(sha256) FROM {texts.TEXT_TABLE}"))
    assert QUOTES_TABLE not in tables
    assert keys == {("blob", 32)}
    assert quoting_body(text_bodies(url)[texts.text_address(prompt)]) is not None
    with Ledger(url, create=False) as ledger:
        assert [e.data for e in ledger.events(sid)] == written
        assert verify_session(ledger, sid).ok


def test_an_interrupted_migration_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _copy("v2", tmp_path)
    before = _digest(path)
    rewrite = migrate._rewrite_texts  # noqa: SLF001

    def interrupted(c: Any, *, with_lists: bool) -> None:
        rewrite(c, with_lists=with_lists)
        raise KeyboardInterrupt

    monkeypatch.setattr(migrate, "_rewrite_texts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        migrate_store(resolve_store(str(path)))
    assert _digest(path) == before
    assert _format(path) == 0


def test_a_store_of_a_newer_format_is_refused_untouched(tmp_path: Path) -> None:
    path = _copy("v2", tmp_path)
    migrate_store(resolve_store(str(path)))
    with sqlite3.connect(path) as con:
        con.execute(f"PRAGMA user_version = {FORMAT_VERSION + 1}")
    before = _digest(path)
    refused = subprocess.run(
        [sys.executable, "-m", "forge_ledger", "migrate", "--store", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "upgrade forge-ledger" in refused.stderr
    assert _digest(path) == before
    with pytest.raises(StoreError, match="upgrade forge-ledger"):
        migrate_store(resolve_store(str(path)), dry_run=True)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A migrated copy of each golden store."""
    out: dict[str, Path] = {}
    for fmt in FORMATS:
        out[fmt] = _copy(fmt, tmp_path_factory.mktemp(f"migrated-{fmt}"))
        assert migrate_store(resolve_store(str(out[fmt]))).steps
    return out


MANIFESTS = {
    f: json.loads((FIXTURES / f"store-{f}" / "manifest.json").read_text()) for f in FORMATS
}


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "name"), [(f, n) for f in FORMATS for n in sorted(MANIFESTS[f])])
def test_every_golden_output_is_unchanged_after_migrating(
    migrated: dict[str, Path], tmp_path: Path, fmt: str, name: str
) -> None:
    store, golden = migrated[fmt], FIXTURES / f"store-{fmt}"
    entry = MANIFESTS[fmt][name]
    target = tmp_path / name
    args = [a.format(output=target) for a in entry["args"]]
    proc = subprocess.run(
        [sys.executable, "-m", "forge_ledger", *args, "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == entry["exit"], proc.stderr
    if entry.get("writes"):
        assert target.read_bytes() == (golden / name).read_bytes()
    else:
        assert proc.stdout.replace(str(store), STORE_MARK) == (golden / name).read_text("utf-8")


@pytest.mark.postgres
def test_a_postgres_store_records_its_format_and_migrate_records_it_in_an_older_one(
    pg_url: str,
) -> None:
    from forge_ledger.ledger.postgres import EVENTS_TABLE, connect, pg_format

    location = resolve_store(pg_url)
    with Ledger(pg_url) as ledger:
        ledger.save(_quoting_session(uuid.uuid4())[0])
    with contextlib.closing(connect(location)) as conn:
        assert pg_format(conn, location.schema) == FORMAT_VERSION
        conn.execute(f'COMMENT ON TABLE "{location.schema}".{EVENTS_TABLE} IS NULL')
        assert pg_format(conn, location.schema) == 0  # as stores made before recorded it
    dry = migrate_store(location, dry_run=True)
    assert dry.steps == [f"record format {FORMAT_VERSION} (was 0)"]
    with contextlib.closing(connect(location)) as conn:
        assert pg_format(conn, location.schema) == 0
    assert migrate_store(location).steps == dry.steps
    assert migrate_store(location).steps == []
    with contextlib.closing(connect(location)) as conn:
        conn.execute(
            f'COMMENT ON TABLE "{location.schema}".{EVENTS_TABLE} '
            f"IS 'forge-ledger format {FORMAT_VERSION + 1}'"
        )
    with pytest.raises(StoreError, match="upgrade forge-ledger"):
        Ledger(pg_url, create=False)
    with pytest.raises(StoreError, match="upgrade forge-ledger"):
        migrate_store(location)


def test_a_damaged_quote_list_stops_the_migration_before_anything_changes(tmp_path: Path) -> None:
    """A migration never drops a row, even one already unreadable: it refuses, in one line."""
    url, sid = str(tmp_path / "damaged.sqlite"), uuid.uuid4()
    with Ledger(url) as ledger:
        ledger.save(_quoting_session(sid)[0])
    assert as_format_1_with_quote_lists(url) == 1
    with sqlite3.connect(url) as con:
        con.execute(f"UPDATE {QUOTES_TABLE} SET members = 'not a list'")
    before = _digest(Path(url))
    with pytest.raises(StoreError, match="damaged key or quote list"):
        migrate_store(resolve_store(url))
    assert _digest(Path(url)) == before
