"""Stores written in past storage formats still read exactly as they did.

``tests/fixtures/store-NAME.sqlite`` was written by the code of one past format and
``tests/fixtures/store-NAME/`` holds what the commands printed for it then (both made by
``tests/fixtures/make_store.py NAME``): ``v1``, texts inline in every event; ``v2``, each text
stored once under its SHA-256 in hexadecimal. Whatever the current format, such a store must
open, verify, replay identically and give the same listing, log, document, state, audit and
YAML export, byte for byte.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FORMATS = ("v1", "v2")
GOLDEN = FIXTURES / "store-v1"
STORE_MARK = "{store}"
MANIFESTS: dict[str, dict[str, dict[str, Any]]] = {
    f: json.loads((FIXTURES / f"store-{f}" / "manifest.json").read_text()) for f in FORMATS
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A copy of each fixture store (reading must not depend on the file being writable)."""
    out: dict[str, Path] = {}
    for f in FORMATS:
        out[f] = tmp_path_factory.mktemp(f"store-{f}") / "store.sqlite"
        shutil.copyfile(FIXTURES / f"store-{f}.sqlite", out[f])
    return out


def _run(store: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forge_ledger", *args, "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("fmt", "name"), [(f, name) for f in FORMATS for name in sorted(MANIFESTS[f])]
)
@pytest.mark.slow
def test_command_output_is_unchanged(
    stores: dict[str, Path], tmp_path: Path, fmt: str, name: str
) -> None:
    store, golden = stores[fmt], FIXTURES / f"store-{fmt}"
    entry = MANIFESTS[fmt][name]
    expected = (golden / name).read_text(encoding="utf-8")
    if entry.get("writes"):
        target = tmp_path / name
        proc = _run(store, [a.format(output=target) for a in entry["args"]])
        assert proc.returncode == entry["exit"], proc.stderr
        assert target.read_bytes() == (golden / name).read_bytes()
        return
    proc = _run(store, entry["args"])
    assert proc.returncode == entry["exit"], proc.stderr
    assert proc.stdout.replace(str(store), STORE_MARK) == expected


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_session_verifies_and_replays_identically(fmt: str) -> None:
    """The golden outputs themselves say the store was sound when it was made."""
    golden = FIXTURES / f"store-{fmt}"
    verify = json.loads((golden / "verify.json").read_text())
    replay = json.loads((golden / "replay-all.json").read_text())
    sessions = json.loads((golden / "sessions.json").read_text())
    assert verify["ok"]
    assert len(verify["sessions"]) == len(sessions) == 4
    assert all(r["ok"] for r in replay)
    assert len(replay) == 4
    assert {s["status"] for s in sessions} >= {"converged", "paused"}


@pytest.mark.slow
def test_sessions_reads_the_read_model_only_when_it_is_current(tmp_path: Path) -> None:
    """``sessions`` lists from the read model's summary rows once the projections have caught
    up (same output as from the ledger), and from the ledger as soon as the store moved on."""
    path = tmp_path / "store.sqlite"
    shutil.copyfile(FIXTURES / "store-v1.sqlite", path)
    expected = (GOLDEN / "sessions.json").read_text(encoding="utf-8")
    assert _run(path, ["projections", "update"]).returncode == 0
    listed = _run(path, ["sessions", "--json"])
    assert listed.returncode == 0
    assert listed.stdout == expected

    # The listing really comes from the read model: a title changed there shows.
    views = sqlite3.connect(tmp_path / "store.views.sqlite")
    first = json.loads(expected)[0]["id"]
    views.execute("UPDATE sessions SET title = 'from the read model' WHERE id = ?", [first])
    views.commit()
    views.close()
    rows = json.loads(_run(path, ["sessions", "--json"]).stdout)
    assert rows[0]["title"] == "from the read model"

    # A new session makes the read model stale: the ledger is read (true title, new row).
    imported = _run(path, ["import", str(FIXTURES / "v1_0_session.yaml"), "--json"])
    assert imported.returncode == 0, imported.stderr
    rows = json.loads(_run(path, ["sessions", "--json"]).stdout)
    assert [r for r in rows[:4]] == json.loads(expected)
    assert len(rows) == 5
