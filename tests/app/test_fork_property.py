"""Property: a fork's state at its first event is its parent's state at the fork position.

Exactly these fields differ, by design (see forge_ledger.records.lineage's docstring):
``id``, ``fork_origin``, ``created_at`` (the fork's identity and time), ``head_hash`` (the
fork's own chain; its position is the parent's), ``status``/``status_reason`` (paused, "forked"),
``seal``/``budget_exhausted`` (cleared), and ``config``/``participants`` when overridden.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.values import SessionStatus, Stance
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.records.lineage import fork
from support.stories import Iteration, build

DIFFERS = {
    "id", "fork_origin", "created_at", "head_hash", "status", "status_reason",
    "seal", "budget_exhausted", "config", "participants",
}

stances = st.sampled_from(list(Stance))
iterations = st.builds(
    Iteration,
    votes=st.fixed_dictionaries({"alice": stances, "bob": stances, "carol": stances}),
    critiques=st.booleans(),
    synthesis=st.booleans(),
)


def _dump(state: Any) -> dict[str, Any]:
    return state.model_dump(mode="json", exclude=DIFFERS)  # type: ignore[no-any-return]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.lists(iterations, min_size=1, max_size=3),
    finish=st.sampled_from([None, SessionStatus.COMPLETE]),
    pick=st.floats(min_value=0, max_value=1),
    swap=st.booleans(),
    threshold=st.none() | st.floats(min_value=0, max_value=1),
)
def test_fork_state_equals_parent_state_at_fork_point(
    script: list[Iteration],
    finish: SessionStatus | None,
    pick: float,
    swap: bool,
    threshold: float | None,
) -> None:
    parent_id = uuid.UUID(int=7)
    with tempfile.TemporaryDirectory() as d, Ledger(str(Path(d) / "l.sqlite")) as ledger:
        ledger.save(build(parent_id, script, finish=finish))
        # every position where no round is open is a legal fork point
        legal = [
            e.position for e in ledger.events(parent_id)
            if ledger.state(parent_id, at_event=e.position).open_round is None
        ]
        position = legal[min(int(pick * len(legal)), len(legal) - 1)]
        overrides = {} if threshold is None else {"convergence_threshold": threshold}
        parent = ledger.state(parent_id, at_event=position)
        swap = swap and parent.participant("bob") is not None
        fid = fork(
            ledger, parent_id, clock=FixedStepClock(), ids=SequentialIds("p"), at_event=position,
            model_swaps=["bob=openai/swapped"] if swap else [], config_overrides=overrides,
        )
        child = ledger.state(fid, at_event=position)
        assert _dump(child) == _dump(parent)
        assert ledger.head_version(fid) == position  # the fork's first event is the fork point
        # the fields that do differ, differ exactly as documented
        assert child.id == str(fid)
        if position > 1:  # before the fork point, the fork is its parent
            before = ledger.state(fid, at_event=position - 1)
            assert _dump(before) == _dump(ledger.state(parent_id, at_event=position - 1))
            assert (before.id, before.fork_origin) == (str(fid), child.fork_origin)
        assert child.fork_origin is not None
        assert child.fork_origin.parent_hash == parent.head_hash
        assert child.fork_origin.parent_position == position
        assert child.seal is None
        assert child.budget_exhausted is None
        expected = (
            SessionStatus.INITIALIZED
            if parent.status is SessionStatus.INITIALIZED
            else SessionStatus.PAUSED
        )
        assert child.status is expected
        if threshold is not None:
            assert child.config.convergence_threshold == threshold
        else:
            assert child.config == parent.config
        assert [p.name for p in child.participants] == [p.name for p in parent.participants]
        for mine, theirs in zip(child.participants, parent.participants, strict=True):
            swapped = swap and mine.name == "bob"
            assert mine.model == ("openai/swapped" if swapped else theirs.model)
        assert verify_session(ledger, fid).ok
