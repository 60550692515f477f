"""Stored states compressed with a preset dictionary: the dictionary is frozen (stored rows
need it), rows name the dictionary they need, and rows written before (compressed alone, or
plain JSON) read unchanged."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ledger.ledger import Ledger
from forge_ledger.ledger.compression import STATE_DICTIONARY, NewerFormatError, pack, unpack
from forge_ledger.ledger.state_codec import StateCompressor
from forge_ledger.testing import SessionBuilder

FROZEN_SHA256 = "0f99254e044498aff9edf9a3a051b290bb822ebef596a28c30fd3313751c0730"
STATE = (
    b'{"timestamp":{"_type_":"datetime_iso","_data_":"2026-01-01T00:00:00+00:00"},'
    b'"data":{"round":3,"participant":"ada","vote":{"agrees":true,"score":80,'
    b'"stance":"agree"}},"prev_hash":"' + b"ab" * 32 + b'","hash":"' + b"cd" * 32 + b'"}'
)


def test_the_dictionary_never_changes() -> None:
    """Every row compressed with it needs these exact bytes: a new dictionary gets a new file."""
    assert hashlib.sha256(STATE_DICTIONARY).hexdigest() == FROZEN_SHA256


def test_a_state_names_its_dictionary_and_reads_back() -> None:
    packed = StateCompressor().compress(STATE)
    assert packed[0] == 0x78  # zlib
    assert packed[1] & 0x20  # with a preset dictionary
    assert int.from_bytes(packed[2:6], "big") == zlib.adler32(STATE_DICTIONARY)
    assert len(packed) < len(zlib.compress(STATE, 6))
    assert unpack(packed) == STATE


@given(st.binary(min_size=0, max_size=40_000) | st.builds(lambda n: STATE * n, st.integers(1, 200)))
@settings(max_examples=60, deadline=None)
def test_a_packed_state_is_a_plain_zlib_stream(data: bytes) -> None:
    """Written by a raw compressor with a smaller window under the header a default one
    writes: zlib itself reads it (so does any version that reads the dictionary's rows),
    whatever the state's length, and nothing follows the stream."""
    packed = pack(data, STATE_DICTIONARY)
    if packed == data:  # left as it was: too short, or not smaller compressed
        return
    default = zlib.compressobj(6, zdict=STATE_DICTIONARY)  # the level states are packed at
    assert packed[:6] == (default.compress(b"") + default.flush())[:6]
    reader = zlib.decompressobj(zdict=STATE_DICTIONARY)
    assert reader.decompress(packed) + reader.flush() == data
    assert reader.eof
    assert not reader.unused_data
    assert unpack(packed) == data


@pytest.mark.parametrize("stored", [zlib.compress(STATE, 6), STATE], ids=["alone", "plain"])
def test_rows_written_before_read_unchanged(stored: bytes) -> None:
    assert unpack(stored) == STATE


def test_a_row_that_needs_an_unknown_dictionary_is_refused() -> None:
    other = pack(STATE, b"some other dictionary, of a later version " * 4)
    with pytest.raises(NewerFormatError, match="written by a newer forge-ledger"):
        unpack(other)


def test_a_store_holds_dictionary_rows_and_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with Ledger(str(path)) as ledger:
        b = SessionBuilder(store=ledger).start("Dictionary", participants=("p0", "p1")).save()
        expected = [e.data for e in ledger.events(b.id)]
    with sqlite3.connect(path) as conn:
        rows = [bytes(s) for (s,) in conn.execute("SELECT state FROM stored_events")]
    assert any(r[0] == 0x78 and r[1] & 0x20 for r in rows)
    with Ledger(str(path), create=False) as ledger:
        assert [e.data for e in ledger.events(b.id)] == expected


@pytest.mark.parametrize("command", ["replay", "log", "verify"])
def test_a_row_this_version_cannot_read_is_one_line(tmp_path: Path, command: str) -> None:
    """A store written by a later version (a dictionary this one lacks): each command says so
    in one line, exit non-zero, no traceback."""
    path = tmp_path / "s.sqlite"
    with Ledger(str(path)) as ledger:
        b = SessionBuilder(store=ledger).start("Dictionary", participants=("p0", "p1")).save()
    with sqlite3.connect(path) as conn:
        rowid, state = conn.execute("SELECT rowid, state FROM stored_events LIMIT 1").fetchone()
        later = pack(unpack(bytes(state)), b"a dictionary of a later version " * 8)
        conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (later, rowid))
    done = subprocess.run(
        [sys.executable, "-m", "forge_ledger", command, str(b.id), "--store", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "written by a newer forge-ledger" in last
    assert last.endswith("upgrade forge-ledger to read it")


@pytest.mark.parametrize(
    "damage",
    ["cut at the end", "cut short", "checksum", "data", "header"],
)
def test_a_damaged_dictionary_row_is_refused_never_read_short(damage: str) -> None:
    packed = StateCompressor().compress(STATE)
    bad = {
        "cut at the end": packed[:-1],
        "cut short": packed[: len(packed) // 2],
        "checksum": packed[:-1] + bytes([packed[-1] ^ 1]),
        "data": packed[:10] + bytes([packed[10] ^ 0x55]) + packed[11:],
        "header": packed[:1] + bytes([packed[1] ^ 0x01]) + packed[2:],
    }[damage]
    with pytest.raises(zlib.error):
        unpack(bad)
