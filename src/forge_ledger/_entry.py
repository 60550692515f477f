"""The ``forge-ledger`` console script and ``python -m forge_ledger``.

Loading the command line and then the command's module takes a while (pydantic models,
eventsourcing). A Ctrl-C in that time used to end in a Python traceback, because the command
line's own handling of Ctrl-C did not exist yet. This module imports nothing heavy itself, so
it is in place before loading starts (the command group does the same for the command's
module); nothing has been recorded then, so the command just says it was interrupted.
"""

from __future__ import annotations

from .errors import exit_interrupted

__all__ = ["main"]


def main() -> None:
    """Load the command line, then run it (it handles Ctrl-C itself from then on)."""
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        exit_interrupted()
    run()
