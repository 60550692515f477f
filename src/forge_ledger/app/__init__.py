"""The application layer: every operation on a session, for the CLI, a worker and a program.

Start or resume a session, answer it, abort it, go back, fork it, seal, verify, audit,
replay, export it, write its document or report, copy it to another store. Each function
takes the store (a path, a ``postgresql://`` URL, ``None`` for the default, or an opened
:class:`~forge_ledger.ledger.Ledger`) and then the session; it does its own pre-flight checks,
writes the exports a session keeps beside its store, seals a session that ends, and closes
what it opens. The ``forge-ledger`` command parses its options, calls one of them and prints
the result, so a program calling the same function gets the same behaviour.
:func:`forge_ledger.open` offers them as methods of one opened store.

Each name loads with its own module on first use (see :mod:`forge_ledger._lazy`): a command
that audits a session does not load what running, answering or forking one needs.
"""

from typing import TYPE_CHECKING

from .. import _lazy

if TYPE_CHECKING:
    from .demo import restarted_demo_server
    from .forge import Forge, open
    from .interventions import JumpSummary, abort, answer, back, overrule
    from .participants import (
        add_participants,
        load_participants,
        participants_from_models,
        update_participants,
    )
    from .records import (
        ReportPage,
        audit,
        copy,
        export,
        fork,
        fork_comparison,
        replay,
        report,
        seal,
        spec,
        verify,
    )
    from .running import (
        Runtime,
        check_start,
        in_progress_session,
        resume,
        resume_session,
        start,
        start_session,
    )
    from .stores import Store, migrate, opened

__getattr__, __dir__ = _lazy.exports(
    __name__,
    {
        "demo": ("restarted_demo_server",),
        "forge": ("Forge", "open"),
        "interventions": ("JumpSummary", "abort", "answer", "back", "overrule"),
        "participants": (
            "add_participants",
            "load_participants",
            "participants_from_models",
            "update_participants",
        ),
        "records": (
            "ReportPage",
            "audit",
            "copy",
            "export",
            "fork",
            "fork_comparison",
            "replay",
            "report",
            "seal",
            "spec",
            "verify",
        ),
        "running": (
            "Runtime",
            "check_start",
            "in_progress_session",
            "resume",
            "resume_session",
            "start",
            "start_session",
        ),
        "stores": ("Store", "migrate", "opened"),
    },
)

__all__ = [
    "Forge",
    "JumpSummary",
    "ReportPage",
    "Runtime",
    "Store",
    "abort",
    "add_participants",
    "answer",
    "audit",
    "back",
    "check_start",
    "copy",
    "export",
    "fork",
    "fork_comparison",
    "in_progress_session",
    "load_participants",
    "migrate",
    "open",
    "opened",
    "overrule",
    "participants_from_models",
    "replay",
    "report",
    "restarted_demo_server",
    "resume",
    "resume_session",
    "seal",
    "spec",
    "start",
    "start_session",
    "update_participants",
    "verify",
]
