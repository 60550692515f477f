"""How a session is named: a full id, a unique prefix of it (with or without dashes), or
``@`` / ``last`` / ``@~N`` for the newest sessions (:meth:`~forge_ledger.ledger.Ledger.resolve`).

The prefix rule is here alone, so a reader of the read model (``spec`` answering from it)
picks a session exactly as the ledger would, and leaves every other form to the ledger.
"""

from __future__ import annotations

__all__ = ["id_prefix", "is_newest_ref"]


def is_newest_ref(ref: str) -> bool:
    """Whether ``ref`` counts back from the newest session (``@``, ``last``, ``@~N``)."""
    text = ref.strip().lower()
    return text == "last" or text.startswith("@")


def id_prefix(ref: str) -> str | None:
    """The id digits ``ref`` starts a session id with (lower case, no dashes), or None when
    ``ref`` is empty or counts back from the newest session."""
    text = ref.strip().lower()
    if not text or is_newest_ref(text):
        return None
    return text.replace("-", "")
