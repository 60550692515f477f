"""Anonymized review: which label ("Response A", "Response B", …) stands for whose work.

With ``SessionConfig.anonymize`` on, critique and convergence prompts show other participants'
work under a label instead of a name or a model, so a model cannot favour (or punish) a known
author. The assignment is a pure function of recorded data — the session id and the
participants' names — shuffled by SHA-256 so it does not simply follow the roster order, and it
is recorded in a ``ReviewLabelsAssigned`` event: replay reproduces it and the audit names the
authors behind the labels.
"""

from __future__ import annotations

import hashlib

from ..domain.state import SessionState
from ..domain.values import RoundKind

__all__ = ["REVIEW_KINDS", "label_for", "labels_before", "letters", "review_labels"]

REVIEW_KINDS = (RoundKind.CRITIQUE, RoundKind.CONVERGENCE)
"""The rounds whose prompts show others' work under labels."""


def letters(index: int) -> str:
    """0 → A, 25 → Z, 26 → AA… (bijective base 26)."""
    out = ""
    n = index + 1
    while n:
        n, rem = divmod(n - 1, 26)
        out = chr(ord("A") + rem) + out
    return out


def _rank(session_id: str, name: str) -> str:
    return hashlib.sha256(f"{session_id}\x00{name}".encode()).hexdigest()


def review_labels(state: SessionState) -> dict[str, str] | None:
    """The labels to record before an anonymized review round, or None when none are needed.

    None when the session is not anonymized or every participant already has a label (a
    participant who joins later gets a fresh assignment for everyone, since labels are only
    ever read from the latest ``ReviewLabelsAssigned``).
    """
    if not state.config.anonymize:
        return None
    names = state.participant_names
    if set(names) <= set(state.review_labels.values()):
        return None
    ordered = sorted(names, key=lambda n: (_rank(state.id, n), n))
    return {f"Response {letters(i)}": name for i, name in enumerate(ordered)}


def label_for(state: SessionState, name: str) -> str | None:
    """The recorded label of ``name``'s work (None when the session is not anonymized)."""
    if not state.config.anonymize:
        return None
    for label, who in state.review_labels.items():
        if who == name:
            return label
    return None


def labels_before(state: SessionState, kind: RoundKind) -> dict[str, str] | None:
    """The labels to record before starting a round of ``kind`` (None: nothing to record)."""
    return review_labels(state) if kind in REVIEW_KINDS else None
