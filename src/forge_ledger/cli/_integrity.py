"""Commands that print a session say so when its hash chain does not verify.

``show`` (and ``log``, ``trail``, ``dissent``, ``audit``, ``diff``, ``export``) would otherwise
display a hand-edited vote as if it were recorded, while ``verify`` reports the break. Each
calls :func:`check_chain` for the session it prints; that verifies *that* session only (one
pass over its stored events, no other session read). A break does not hide the output: the
command prints what it prints, then the group's result callback (:func:`raise_chain_break`)
ends it with one line naming the first bad position and exit code 1, as ``verify`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

import click

from ..errors import ChainBrokenError

if TYPE_CHECKING:
    from ..ledger import Ledger

__all__ = ["chain_broken", "check_chain", "found_chain_break", "raise_chain_break"]

_KEY = "forge_ledger.chain_breaks"
_found: list[ChainBrokenError] = []


def check_chain(ledger: Ledger, session: str | UUID) -> UUID:
    """Verify ``session``'s chain; remember a break for the end of the command. Returns its id."""
    from ..ledger import verify_session  # the group's callback imports this module for any command

    sid = ledger.resolve(session)
    report = verify_session(ledger, sid)
    if not report.ok:
        error = ChainBrokenError(
            f"session {sid} does not verify: event {report.position}: {report.problem}; "
            "what was printed may have been altered",
            hint=f"see 'forge-ledger verify {str(sid)[:8]}'",
        )
        _found.append(error)
        ctx = click.get_current_context(silent=True)
        if ctx is not None:
            ctx.meta.setdefault(_KEY, []).append(error)
    return sid


def chain_broken() -> bool:
    """Whether a chain this command checked does not verify: it then prints the events as
    stored, never a view derived from them before they were altered (the read model)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_KEY))


def found_chain_break() -> ChainBrokenError | None:
    """The first break this process found: when an altered event then fails to load, the
    command ends with this line rather than with the decoding error it caused."""
    return _found[0] if _found else None


def raise_chain_break() -> None:
    """Called once the command's output is printed: raise the first break remembered."""
    ctx = click.get_current_context(silent=True)
    breaks = ctx.meta.get(_KEY) if ctx is not None else None
    if breaks:
        raise breaks[0]
