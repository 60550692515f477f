"""The domain knows nothing of storage: the session state is a fold of plain values.

How a snapshot lays a state out (its long lists in blocks by address, a critique by
reference) is the ledger's (:mod:`forge_ledger.ledger.snapshot_blocks`,
:mod:`forge_ledger.ledger.snapshot_states`); the domain declares plain lists, and the fold
builds plain lists."""

from __future__ import annotations

import re
from pathlib import Path

import forge_ledger.domain
from forge_ledger.domain.values import RoundKind
from forge_ledger.testing import SessionBuilder

_STORAGE_NAMES = re.compile(
    r"\b(?:BlockList|BlockSink|BlockLoader|BLOCK_\w+|InBlocks|RecordList|snapshot_blocks"
    r"|snapshot_states|blocks?\b(?! of| in| on)|sink|loader)",
    re.IGNORECASE,
)


def test_no_module_of_the_domain_names_a_storage_concept() -> None:
    """No block, sink or loader in any module of the domain (code or docstring); the
    ``ledger:`` block of an exported YAML file is the file format's, not storage."""
    root = Path(forge_ledger.domain.__file__).parent
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(root.glob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _STORAGE_NAMES.search(line.replace("``ledger:`` blocks", ""))
    ]
    assert found == []


def test_the_fold_builds_plain_lists() -> None:
    b = SessionBuilder().start("Plain", participants=["ana", "bo"])
    b.round(RoundKind.DRAFT, iteration=1, answers={"ana": "a draft", "bo": "another"})
    b.close_round()
    state = b.state
    for name in ("rounds", "failures", "convergence", "human_inputs", "asked", "rewinds"):
        assert type(getattr(state, name)) is list, name
    assert type(state.rounds[0].contributions) is list
    assert len(state.rounds[0].contributions) == 2
