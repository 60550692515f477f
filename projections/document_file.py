"""The document file's text: a YAML front matter, a verdict, then the body as the model wrote it.

It is a function of the session's state alone, so the read model keeps each session's file
text (``documents``) and ``spec`` prints it from there when the read model is current, and
:mod:`forge_ledger.records.spec` writes and re-checks files with the very same rendering.
"""

from __future__ import annotations

from typing import Any

import yaml

from forge_ledger.domain import SessionState
from forge_ledger.domain.values import SessionStatus

__all__ = ["SPEC_FORMAT", "TRUNCATED_NOTE", "render_spec", "spec_header", "verdict"]

SPEC_FORMAT = "forge-ledger-document/1"
TRUNCATED_NOTE = (
    "> **Truncated.** The answer that is this document was cut off at its token limit and "
    "continuing it did not finish it: its end is missing."
)


def _source(state: SessionState) -> dict[str, Any] | None:
    found = state.document_source
    if found is None:
        return None
    r, c = found
    return {"participant": c.participant, "round": r.number, "kind": r.kind.value,
            "position": c.position}


def spec_header(state: SessionState) -> dict[str, Any]:
    """The header fields (also the top level of ``spec --json``)."""
    conv = state.latest_convergence
    majority = None
    if conv is not None:
        majority = {"agrees": conv.majority_agrees, "agree": conv.agree,
                    "partial": conv.partial, "disagree": conv.disagree, "abstain": conv.abstain}
    return {
        "format": SPEC_FORMAT,
        "topic": state.topic.title,
        "session_id": state.id,
        "slug": state.slug,
        "status": state.status.value,
        "finished": state.status.terminal,
        "agreed": state.status is SessionStatus.CONVERGED,
        "iteration": state.iteration,
        "position": state.version,
        "head_hash": state.head_hash,
        "updated": state.updated_at.isoformat(),
        "score": conv.score if conv is not None else None,
        "threshold": conv.threshold if conv is not None else state.config.convergence_threshold,
        "majority": majority,
        "open_dissent": len(state.open_divergences),
        "source": _source(state),
        "truncated": state.document_truncated,
    }


def verdict(state: SessionState) -> list[str]:
    conv = state.latest_convergence
    vote = "no vote yet"
    if conv is not None:
        vote = (
            f"weighted score {conv.score:.2f} (threshold {conv.threshold:.2f}); plain majority "
            f"{'agrees' if conv.majority_agrees else 'does not agree'} ({conv.agree} agree, "
            f"{conv.partial} partial, {conv.disagree} disagree, {conv.abstain} abstain)"
        )
    cut = [TRUNCATED_NOTE] if state.document_truncated else []
    if state.status is SessionStatus.CONVERGED:
        return [f"> **Agreed.** The participants converged on this text at iteration "
                f"{state.iteration}: {vote}.", *cut]
    out = [f"> **Not agreed.** Status {state.status.value} at iteration {state.iteration}: "
           f"{vote}. Open dissent: {len(state.open_divergences)}."]
    for d in state.open_divergences:
        who = ", ".join(f"{p.participant} ({p.stance.value})" for p in d.positions)
        out.append(f"> - {d.id}: {' '.join(d.topic.split())} — {who}")
    out[1:1] = cut
    return out


def render_spec(state: SessionState) -> str:
    """The document file for ``state``: front matter, verdict, blank line, body verbatim."""
    front = yaml.safe_dump(spec_header(state), sort_keys=False, allow_unicode=True, width=1000)
    body = state.latest_text or ""
    return "---\n" + front + "---\n" + "\n".join(verdict(state)) + "\n\n" + body
