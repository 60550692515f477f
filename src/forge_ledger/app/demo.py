"""The offline demo's session: its topic, its four scripted participants, and the scripted
server a demo session needs again when it is resumed.

The demo runs four participants (a drafter, a critic, a synthesizer and a devil's advocate)
against the scripted OpenAI-compatible server of :mod:`forge_ledger.testing`, through the real
orchestrator, provider and store. The server lives as long as the process that started it, so
resuming a demo session (or a fork of one) later starts it again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..domain.state import SessionState
from ..domain.values import Participant, ParticipantRole, Price, Topic

__all__ = [
    "DEMO_LATENCY",
    "DEMO_SCRIPT",
    "demo_participants",
    "demo_topic",
    "endpoint_accepts_connections",
    "restarted_demo_server",
]

DEMO_SCRIPT = "four-voices"
DEMO_LATENCY = 0.15
"""Seconds each scripted model waits before answering (the demo's and its resumes')."""
_PRICE = Price(input_cost_per_token=3e-6, output_cost_per_token=15e-6, source="user")
"""Illustrative prices (USD per token) so the demo shows real cost accounting."""


def demo_topic() -> Topic:
    return Topic(
        title="Event log for multi-model deliberations",
        description=(
            "Design the storage of a tool where several language models draft, critique and "
            "vote on a document: what is recorded, how it is verified, how it is replayed."
        ),
        constraints=("Events are immutable", "Replays never call a model"),
    )


def demo_participants(api_base: str) -> list[Participant]:
    roles = {
        "alice": ParticipantRole.DRAFTER,
        "bob": ParticipantRole.CRITIC,
        "carol": ParticipantRole.SYNTHESIZER,
        "dave": ParticipantRole.DEVILS_ADVOCATE,
    }
    return [
        Participant(
            name=name,
            model=f"openai/{name}",
            role=role,
            api_base=api_base,
            price=_PRICE,
            temperature=0.2,
        )
        for name, role in roles.items()
    ]


def endpoint_accepts_connections(url: str) -> bool:
    """Whether something accepts TCP connections at ``url``'s host and port (one attempt,
    one second at most)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=1.0):
            return True
    except OSError:
        return False


def _lost_its_demo_server(state: SessionState) -> bool:
    """Whether every participant talks to a scripted endpoint that no longer answers.
    Participants pointed elsewhere (``fork --api-base``, a server that still answers) keep
    their endpoint."""
    return bool(state.participants) and all(
        p.model.startswith("openai/")
        and p.api_base
        and not endpoint_accepts_connections(p.api_base)
        for p in state.participants
    )


@contextlib.contextmanager
def restarted_demo_server(state: SessionState) -> Iterator[str | None]:
    """For a session made by ``demo`` (or forked from one) whose scripted server ended with the
    demo: the server started again, as the demo starts it, for as long as the block runs; its
    address is yielded. Any other session: ``None``, and nothing is started."""
    if state.source != "demo" or not _lost_its_demo_server(state):
        yield None
        return
    from ..testing import FakeOpenAIServer, bundled_script

    with FakeOpenAIServer(bundled_script(DEMO_SCRIPT), latency=DEMO_LATENCY) as server:
        yield server.url
