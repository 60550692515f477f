"""A snapshot refers to the reasoning of parsed opinions and votes by address, as their events
do: the texts are stored once, a restored state reads them back, and a snapshot holds only the
structure (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ledger.domain.texts import text_address
from forge_ledger.domain.values import ConvergenceVote, RoundKind, Stance
from forge_ledger.errors import StoreError
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.texts import (
    TEXT_KEYS,
    TEXT_TABLE,
    externalise,
    refer_to_texts,
    with_texts,
)
from forge_ledger.testing import SessionBuilder
from support.store import raw_connection, snapshot_rows

NAMES = ("p0", "p1")
_AWKWARD = 'quotes " and \\ backslashes, "reasoning":"not a key", é, 中文, \u2028 and\nlines. '


def _reasoning(round_no: int, name: str) -> str:
    return f"{name} in round {round_no}: " + _AWKWARD * 3


def _session(ledger: Ledger, iterations: int = 4) -> SessionBuilder:
    """Each iteration: a critique round where each participant gives an opinion, then a
    convergence round where each votes, both with long reasoning."""
    b = SessionBuilder(store=ledger).start("Snapshot texts", participants=NAMES).save()
    for it in range(1, iterations + 1):
        b.round(RoundKind.CRITIQUE, iteration=it, participants=NAMES)
        for name in NAMES:
            b.answer(name, f"critique by {name}, iteration {it}")
            b.opinion(name, stance=Stance.PARTIAL, reasoning=_reasoning(b.round_number, name))
        b.close_round().save()
        b.round(RoundKind.CONVERGENCE, iteration=it, participants=NAMES)
        for name in NAMES:
            b.answer(name, f"vote by {name}, iteration {it}")
            b.vote(name, ConvergenceVote(agrees=True, score=80, stance=Stance.AGREE,
                                         reasoning=_reasoning(b.round_number, name)))
        b.close_round().save()
    return b


def _reasonings(b: SessionBuilder) -> list[str]:
    state = b.aggregate.state
    out = [c.opinion.reasoning for r in state.rounds for c in r.contributions if c.opinion]
    return out + [c.vote.reasoning for r in state.rounds for c in r.contributions if c.vote]


def _long_texts(x: Any) -> list[str]:
    """The long strings under text keys anywhere in ``x`` (what a reference stands for)."""
    if isinstance(x, dict):
        return [
            t
            for k, v in x.items()
            for t in ([v] if k in TEXT_KEYS and isinstance(v, str) and len(v) >= 96 else [])
            + _long_texts(v)
        ]
    return [t for v in x for t in _long_texts(v)] if isinstance(x, list) else []


def test_a_snapshot_refers_to_reasoning_and_restores_it(store_url: str) -> None:
    with Ledger(store_url, snapshot_interval=5) as snap, Ledger(
        store_url, snapshot_interval=0, create=False
    ) as plain:
        b = _session(snap)
        texts = _reasonings(b)
        rows = [row for _, row in snapshot_rows(store_url, snap)]
        assert rows, "expected snapshots"
        for row in rows:
            state = json.loads(json.loads(row)["state"]["state"]["_data_"])
            assert _long_texts(state) == []
            assert b" in round " not in row  # the start of every reasoning
        assert any(text_address(t).encode() in row for t in texts for row in rows)
        assert set(snap.texts([text_address(t) for t in texts])) == {
            text_address(t) for t in texts
        }
        from_snapshot = 0
        for v in range(1, b.aggregate.version + 1):
            restored = snap.state(b.id, at_event=v)
            from_snapshot += restored.text_pool.fallback is not None
            assert restored == plain.state(b.id, at_event=v)
        assert from_snapshot > 0
        assert snap.state(b.id) == b.aggregate.state


def test_a_snapshot_whose_reasoning_is_missing_says_so(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with Ledger(str(path), snapshot_interval=5) as ledger:
        b = _session(ledger, iterations=2)
        gone = text_address(_reasonings(b)[0])
    with raw_connection(str(path)) as conn:
        deleted = conn.execute(f"DELETE FROM {TEXT_TABLE} WHERE address(sha256) = ?", (gone,))
        assert deleted.rowcount == 1
    with Ledger(str(path), create=False) as ledger, pytest.raises(
        StoreError, match=f"text {gone[:12]} is referenced but missing"
    ):
        ledger.state(b.id)


_KEYS = st.sampled_from(sorted(TEXT_KEYS | {"other", "sha256", "reasoning_x"}))
_TEXTS = st.text(min_size=0, max_size=200) | st.builds(lambda s: s * 12, st.text(max_size=20))
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXTS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
@pytest.mark.slow
def test_texts_out_of_a_document_and_back_give_it_unchanged(document: Any) -> None:
    """Any document, with any strings under any keys: referring to its long texts and reading
    them back gives the same document, and no long text under a text key stays inline."""
    compact = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    texts: dict[str, str] = {}
    referred = refer_to_texts(compact, texts)
    assert all(text_address(t) == a and len(t) >= 96 for a, t in texts.items())
    assert json.loads(with_texts(referred.encode(), lambda _: texts)) == document

    assert _long_texts(json.loads(referred)) == []
    assert json.loads(referred) == externalise(document, {})  # the rule events follow
