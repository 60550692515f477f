"""``diff``: two sessions' consensus paths side by side (a parent and a fork gone elsewhere)."""

from __future__ import annotations

import json
import uuid

import pytest

from forge_ledger.cli import main
from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.values import Stance
from forge_ledger.engine.ems import ems_score
from forge_ledger.ledger import Ledger
from forge_ledger.records.lineage import diff_sessions, fork
from support.stories import THREE_ITERATIONS, Iteration, build, continued, play

PARENT = uuid.UUID(int=1)


def _parent_and_fork(path: str) -> uuid.UUID:
    """The fork continues from iteration 2 where bob keeps disagreeing and a dissent opens."""
    with Ledger(path) as ledger:
        ledger.save(build(PARENT, THREE_ITERATIONS))
        fid = fork(ledger, PARENT, clock=FixedStepClock(), ids=SequentialIds(), at_iteration=2)
        b = continued(ledger.get(fid)).resume()
        play(
            b,
            Iteration(
                votes={"alice": Stance.AGREE, "bob": Stance.STRONGLY_DISAGREE,
                       "carol": Stance.PARTIAL},
                open_dissent=[("f1", "fairness across tenants", "bob")],
            ),
        )
        ledger.save(b.aggregate)
        return fid


def test_diff_compares_paths_iteration_by_iteration(sqlite_url: str) -> None:
    fid = _parent_and_fork(sqlite_url)
    with Ledger(sqlite_url, create=False) as ledger:
        d = diff_sessions(ledger, PARENT, fid)
        parent, child = ledger.state(PARENT), ledger.state(fid)
        assert d.iterations == (1, 2, 3)
        assert d.common_ancestor == f"{PARENT}@{ledger.position_of_iteration(PARENT, 2)}"
        for state, path in ((parent, d.path_a), (child, d.path_b)):
            for c in state.convergence:
                p = path[c.iteration]
                assert (p.weighted_score, p.majority_agrees) == (c.score, c.majority_agrees)
                assert (p.agree, p.disagree, p.partial) == (c.agree, c.disagree, c.partial)
        # the shared iterations are identical, including EMS and dissent as of their end
        for k in (1, 2):
            assert d.path_a[k] == d.path_b[k]
            assert d.path_a[k].ems == ems_score(ledger.state(PARENT, at_iteration=k)).score
        # iteration 3 differs: the parent converged unanimously, the fork did not
        a3, b3 = d.path_a[3], d.path_b[3]
        assert a3.agree == 3
        assert b3.agree == 1
        assert a3.ems == ems_score(ledger.state(PARENT, at_iteration=3)).score
        assert b3.ems == ems_score(ledger.state(fid, at_iteration=3)).score
        assert b3.open_dissent == len(child.open_divergences)
        assert "fairness across tenants" in b3.open_dissent_topics
        assert {c.participant for c in a3.changed_stance} == {"bob"}
        assert {(c.participant, c.after) for c in b3.changed_stance} == {
            ("bob", Stance.STRONGLY_DISAGREE), ("carol", Stance.PARTIAL),
        }


def test_diff_cli_json_and_table(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    fid = _parent_and_fork(sqlite_url)
    with pytest.raises(SystemExit) as exc:
        _main_then_exit(["diff", str(PARENT), str(fid), "--store", sqlite_url, "--json"])
    assert exc.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["a"] == str(PARENT)
    assert doc["b"] == str(fid)
    assert doc["path_b"]["3"]["agree"] == 1
    assert doc["path_a"]["3"]["agree"] == 3
    with pytest.raises(SystemExit) as exc:
        _main_then_exit(["diff", str(PARENT), str(fid), "--store", sqlite_url])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert "fairness" in out
    assert "A=B" in out
    with pytest.raises(SystemExit) as exc:
        main(["diff", str(PARENT), "ffff", "--store", sqlite_url])
    assert exc.value.code == 2
    assert "no session matches 'ffff'" in capsys.readouterr().err


def _main_then_exit(argv: list[str]) -> None:
    """Run the CLI in-process; a command that returns is exit code 0, as the console script's."""
    main(argv)
    raise SystemExit(0)
