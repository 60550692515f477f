"""A damaged store never crashes a command (real subprocesses of the CLI).

A copy of a golden store has one session damaged in one of six ways: an event row deleted,
two rows reordered, a row duplicated over the next one, a row corrupted, a text it alone
refers to deleted or altered. Every command that reads that session answers in one line
naming it and the first damaged position, and exits non-zero, without a traceback;
``sessions`` lists every session and marks the damaged one; the other sessions' documents
and reports are still produced; ``report`` of the damaged session still writes its page, as
of its last intact event.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from forge_ledger.ledger.compression import unpack
from support.cli import CONSOLE_SCRIPT

FIXTURE = Path(__file__).parents[1] / "fixtures" / "store-v2.sqlite"
DAMAGED = "c5fae2a9cb1d4111b3bf8c1db4ca57c8"
INTACT = "ee721eed"
WITH_DOCUMENT = "336389ba"
_REF = re.compile(rb'"sha256"\s*:\s*"([0-9a-f]{64})"')
_PROMPT_REF = re.compile(
    rb'"role"\s*:\s*"[a-z]+"\s*,\s*"content"\s*:\s*\{\s*"sha256"\s*:\s*"([0-9a-f]{64})"'
)


def _state(con: sqlite3.Connection, version: int) -> bytes:
    row = con.execute(
        "SELECT state FROM stored_events WHERE originator_id = ? AND originator_version = ?",
        (DAMAGED, version),
    ).fetchone()
    return bytes(row[0])


def _set_state(con: sqlite3.Connection, version: int, state: bytes) -> None:
    con.execute(
        "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
        (state, DAMAGED, version),
    )


def _delete(con: sqlite3.Connection) -> int:
    con.execute(
        "DELETE FROM stored_events WHERE originator_id = ? AND originator_version = 24",
        (DAMAGED,),
    )
    return 24


def _reorder(con: sqlite3.Connection) -> int:
    a, b = _state(con, 20), _state(con, 21)
    _set_state(con, 20, b)
    _set_state(con, 21, a)
    return 20


def _duplicate(con: sqlite3.Connection) -> int:
    _set_state(con, 21, _state(con, 20))
    return 21


def _corrupt(con: sqlite3.Connection) -> int:
    _set_state(con, 22, b"\x78\x9c not a compressed event")
    return 22


def _own_text(con: sqlite3.Connection) -> tuple[int, str]:
    """The first event of the damaged session referring to a text the intact session does not
    use, other than a prompt's (an answer, a parsed critique or reasoning: what its state holds;
    a prompt's text is read by the commands that show prompts, and by ``verify``)."""
    others: set[bytes] = set()
    for (state,) in con.execute(
        "SELECT state FROM stored_events WHERE originator_id LIKE ?", (INTACT + "%",)
    ):
        others.update(_REF.findall(unpack(bytes(state))))
    for version in range(1, 64):
        plain = unpack(_state(con, version))
        prompts = set(_PROMPT_REF.findall(plain))
        own = [a for a in _REF.findall(plain) if a not in others and a not in prompts]
        if own:
            return version, own[0].decode()
    raise AssertionError("no text of the session's own")


_KEYED = "WHERE sha256 = ? OR sha256 = ?"
"""A text's row, keyed by its digest's bytes or (in older stores) its hex digits."""


def _keys(address: str) -> tuple[bytes, str]:
    return bytes.fromhex(address), address


def _text_deleted(con: sqlite3.Connection) -> int:
    version, address = _own_text(con)
    assert con.execute(f"DELETE FROM forge_texts {_KEYED}", _keys(address)).rowcount == 1
    return version


def _text_altered(con: sqlite3.Connection) -> int:
    version, address = _own_text(con)
    altered = con.execute(f"UPDATE forge_texts SET body = 'an altered text' {_KEYED}",
                          _keys(address))
    assert altered.rowcount == 1
    return version


DAMAGE: dict[str, Callable[[sqlite3.Connection], int]] = {
    "deleted": _delete,
    "reordered": _reorder,
    "duplicated": _duplicate,
    "corrupted": _corrupt,
    "text deleted": _text_deleted,
    "text altered": _text_altered,
}

COMMANDS = [
    ["show"], ["spec"], ["fork", "--at-iteration", "1"], ["resume"], ["seal"], ["audit"],
    ["dissent"], ["log"], ["trail"], ["export"], ["back"], ["verify"],
]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CONSOLE_SCRIPT, *args], capture_output=True, text=True, cwd=cwd, timeout=120,
        check=False, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )


def _one_line(
    done: subprocess.CompletedProcess[str], position: int | None, *, session: str = DAMAGED
) -> str:
    assert done.returncode not in (0, 2), done.stderr  # a damaged store, not a user error
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    assert session[:8] in errors[0], errors[0]
    if position is not None:
        assert re.search(rf"(event|position) {position}\b", errors[0]), errors[0]
    else:
        assert re.search(r"(event|position) \d+", errors[0]), errors[0]
    return errors[0]


def _text_damage(store: Path) -> bool:
    return store.parent.name.startswith("text")


@pytest.fixture(scope="module", params=list(DAMAGE))
def damaged(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[
    Path, int
]:
    store = tmp_path_factory.mktemp(request.param.replace(" ", "-")) / "store.sqlite"
    shutil.copy(FIXTURE, store)
    with sqlite3.connect(store) as con:
        position = DAMAGE[request.param](con)
    return store, position


@pytest.mark.slow
def test_every_command_on_the_damaged_session_answers_in_one_line(
    damaged: tuple[Path, int],
) -> None:
    store, position = damaged
    for command in COMMANDS:
        args = [command[0], DAMAGED[:8], *command[1:]] if command != ["verify"] else command
        _one_line(_cli(*args, "--store", str(store), cwd=store.parent), position)


def test_sessions_lists_every_session_and_marks_the_damaged_one(
    damaged: tuple[Path, int],
) -> None:
    store, position = damaged
    done = _cli("sessions", "--store", str(store), "--json", cwd=store.parent)
    _one_line(done, position)
    rows = {r["id"][:8]: r for r in json.loads(done.stdout)}
    assert set(rows) == {"c5fae2a9", "e886069d", "336389ba", "ee721eed"}
    assert rows[DAMAGED[:8]]["status"] == "damaged"
    assert f"at event {position}" in rows[DAMAGED[:8]]["damaged"]
    assert rows[DAMAGED[:8]]["events"] == position - 1
    assert "damaged" not in rows[INTACT]
    assert rows[INTACT]["status"] == "complete"


@pytest.mark.slow
def test_intact_sessions_still_give_their_document_and_report(damaged: tuple[Path, int]) -> None:
    """The session with a document shares every answer with the damaged one (both were
    scripted alike): its document is checked when the damage is to an event row."""
    store, _ = damaged
    spec = _cli("spec", WITH_DOCUMENT, "--store", str(store), cwd=store.parent)
    if _text_damage(store):
        _one_line(spec, None, session=WITH_DOCUMENT)
    else:
        assert spec.returncode == 0, spec.stderr
        assert "#" in spec.stdout
    page = store.parent / "intact.html"
    report = _cli("report", INTACT, "-o", str(page), "--store", str(store), cwd=store.parent)
    assert report.returncode == 0, report.stderr
    assert "<html" in page.read_text(encoding="utf-8")


@pytest.mark.slow
def test_report_of_the_damaged_session_writes_its_page_as_of_the_last_intact_event(
    damaged: tuple[Path, int],
) -> None:
    store, position = damaged
    page = store.parent / "damaged.html"
    done = _cli("report", DAMAGED[:8], "-o", str(page), "--json", "--store", str(store),
                cwd=store.parent)
    _one_line(done, position)
    doc = json.loads(done.stdout)
    assert doc["position"] == position - 1
    assert doc["chain_ok"] is False
    html = page.read_text(encoding="utf-8")
    assert f"broken at event {position}" in html
