"""Sessions for the report's tests, built through the aggregate and saved to a real ledger.

``audited`` is the audit's three-iteration session (dissent left open, a failed call, a human
steer, a conformity flip). ``hostile`` puts markup in everything a model or a person can
write: the topic, a dissent topic and the document itself. ``demo`` is the four-voices demo,
whose document has sentences from several participants and whose audit has an influence edge.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from forge_ledger.domain.values import RoundKind, SessionStatus, Stance
from forge_ledger.ledger import Ledger
from support.stories import THREE_ITERATIONS, Iteration, build, play, story

CONSOLE_SCRIPT = str(Path(sys.executable).parent / "forge-ledger")
SCRIPT = "<script>document.title='pwned'</script>"
IMG = '<img src=x onerror="document.title=\'pwned\'">'
HOSTILE_DOC = (
    f"# Limits {SCRIPT}\n\nEvery key gets a bucket. {IMG} Bursts are capped at 2x.\n"
    "Headers say what is left."
)


def audited(ledger: Ledger, sid: uuid.UUID) -> None:
    ledger.save(build(sid, THREE_ITERATIONS))


def hostile(ledger: Ledger, sid: uuid.UUID) -> None:
    b = story(sid, title=f"Rate limits {SCRIPT}")
    play(b, Iteration(
        votes={"alice": Stance.AGREE, "bob": Stance.DISAGREE, "carol": Stance.AGREE},
        open_dissent=[("d1", f"bursts {IMG}", "bob")],
        synthesis=False,
    ))
    b.round(RoundKind.SYNTHESIS, iteration=b.state.iteration + 1,
            answers={"carol": HOSTILE_DOC}, close=True)
    b.finish(SessionStatus.COMPLETE, reason="test script ended")
    ledger.save(b.aggregate)


def demo(store: Path) -> uuid.UUID:
    """The four-voices demo (``forge-ledger demo``, a real subprocess) into ``store``."""
    proc = subprocess.run(
        [CONSOLE_SCRIPT, "demo", "--latency", "0", "--store", str(store), "--json"],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return uuid.UUID(json.loads(proc.stdout)["session_id"])
