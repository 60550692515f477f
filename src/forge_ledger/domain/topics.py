"""The stored topic of our events and of the aggregate: ``forge_ledger:<Type>``.

eventsourcing records a topic beside each event and resolves it to a class when it decodes
one. Ours are explicit and stable (never a module path, which a move would change), and the
prefix tells our events apart from anything else in a store: the aggregate names its event
classes with it, the store recognises a ledger by it, and verification and copying read an
event's type from it.
"""

from __future__ import annotations

__all__ = ["TOPIC_PREFIX", "topic_for"]

TOPIC_PREFIX = "forge_ledger:"


def topic_for(type_name: str) -> str:
    """The stored topic of the event type (or the aggregate) called ``type_name``."""
    return f"{TOPIC_PREFIX}{type_name}"
