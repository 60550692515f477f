"""Stored states compressed with a preset dictionary: the dictionary is frozen (stored rows
need it), rows name the dictionary they need, and rows written before (compressed alone, or
plain JSON) read unchanged."""

from __future__ import annotations

import hashlib
import sqlite3
import zlib
from pathlib import Path

import pytest

from forge_ledger.ledger import Ledger
from forge_ledger.ledger.compression import STATE_DICTIONARY, StateCompressor, pack, unpack
from forge_ledger.testing import SessionBuilder

FROZEN_SHA256 = "4434f5ba1af8f2c9ec327a61728ee8733b8acec83efcf3ac697241d93a4ccc05"
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


@pytest.mark.parametrize("stored", [zlib.compress(STATE, 6), STATE], ids=["alone", "plain"])
def test_rows_written_before_read_unchanged(stored: bytes) -> None:
    assert unpack(stored) == STATE


def test_a_row_that_needs_an_unknown_dictionary_is_refused() -> None:
    other = pack(STATE, b"some other dictionary, of a later version " * 4)
    with pytest.raises(zlib.error, match="dictionary this version does not have"):
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
