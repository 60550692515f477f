"""Sessions for the report's tests, built through the aggregate and saved to a real ledger.

``audited`` is the audit's three-iteration session (dissent left open, a failed call, a human
steer, a conformity flip). ``hostile`` puts markup in everything a model or a person can
write: the topic, a dissent topic and the document itself. ``markdown`` ends with a document
using every Markdown construct the page renders, part of it from an earlier answer of another
participant. ``demo`` is the four-voices demo, whose document has sentences from several
participants and whose audit has an influence edge.
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


MARKDOWN_RESPONSE = (
    "## Scope\nEvery client gets a **token bucket. Bursts** are capped at twice the rate.\n\n"
    "- Buckets refill every second.\n"
)
MARKDOWN_DOC = (
    "# Rate limiter\n\n"
    + MARKDOWN_RESPONSE.replace("\n\n-", " See [RFC 6585](https://example.org/rfc6585) and "
                                "`Retry-After`.\n\n-")
    + f"- Headers say what is left: {SCRIPT}\n\n"
    "### Limits\n"
    "| Tier | Rate |\n|:-----|-----:|\n| free | 10/s |\n| paid | 100/s |\n\n"
    "```toml\nrate = 10\nburst = 20\n```\n\n"
    f"1. Reject with 429. {IMG}\n2. Log the rejection. ![limits diagram](limits.png)\n"
)


def markdown(ledger: Ledger, sid: uuid.UUID) -> None:
    b = story(sid, title="Rate limits")
    play(b, Iteration(votes={"alice": Stance.AGREE, "bob": Stance.AGREE, "carol": Stance.AGREE},
                      synthesis=False))
    k = b.state.iteration + 1
    b.round(RoundKind.RESPONSE, iteration=k, answers={"alice": MARKDOWN_RESPONSE}, close=True)
    b.round(RoundKind.SYNTHESIS, iteration=k, answers={"carol": MARKDOWN_DOC}, close=True)
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
