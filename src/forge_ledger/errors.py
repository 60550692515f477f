"""The one exception tree of forge-ledger.

Every error a user can cause derives from :class:`ForgeLedgerError`; the CLI prints its
message (one line, saying what was wrong and how to fix it) and exits with ``exit_code``
instead of showing a traceback. Anything that is *not* a ``ForgeLedgerError`` is a bug.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "INTERRUPTED",
    "ArgumentError",
    "BudgetExhaustedError",
    "ChainBrokenError",
    "ConcurrencyConflictError",
    "ConfigError",
    "ForgeLedgerError",
    "ImportValidationError",
    "InputLimitError",
    "InvariantViolation",
    "LeaseHeldError",
    "Loc",
    "NonDeterminismError",
    "ProcessFailedError",
    "ProviderError",
    "RunInterrupted",
    "SessionDamagedError",
    "SessionNotFoundError",
    "SessionPausedError",
    "StoreError",
    "StoreMissingError",
    "StoreUnavailableError",
    "StudyDamagedError",
    "UsageError",
    "dotted_loc",
    "exit_interrupted",
    "validation_summary",
]

Loc = Sequence[int | str]


class ForgeLedgerError(Exception):
    """Base of every error forge-ledger raises on purpose."""

    exit_code: int = 2
    in_json: bool = False
    """Whether a command asked for ``--json`` also prints this error as a JSON object on
    stdout: for an outcome a script acts on (try again later), not for a user mistake (stdout
    stays empty, the one line on stderr says what to fix)."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message} ({hint})")

    def one_line(self) -> str:
        """The single line the CLI prints: what is wrong, then what to do."""
        text = self.message.rstrip(".")
        return f"{text}; {self.hint}" if self.hint else text

    def as_json(self) -> dict[str, object]:
        """The error as ``--json`` prints it (when :attr:`in_json`)."""
        return {
            "error": type(self).__name__,
            "message": self.message,
            "hint": self.hint,
            "exit_code": self.exit_code,
        }

    def lines(self) -> list[str]:
        """What the CLI prints, one ``error:`` line each (several only for lists of problems)."""
        return [self.one_line()]


class UsageError(ForgeLedgerError):
    """A command was given arguments that cannot work."""


class ArgumentError(UsageError):
    """A library call was given arguments that cannot work.

    The message names the call's own parameters (``at_event``), listed in ``parameters``, so
    that a front end can speak of its own names instead (the CLI of ``--at-event``): the
    library never knows which command line, if any, called it.
    """

    def __init__(
        self, message: str, *, parameters: tuple[str, ...], hint: str | None = None
    ) -> None:
        self.parameters = parameters
        super().__init__(message, hint=hint)

    def renamed(self, names: Mapping[str, str]) -> ArgumentError:
        """The same error with each parameter called as ``names`` says (others unchanged)."""
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, self.parameters)) + r")\b")

        def swap(text: str) -> str:
            return pattern.sub(lambda m: names.get(m[1], m[1]), text)

        return ArgumentError(
            swap(self.message),
            parameters=tuple(names.get(p, p) for p in self.parameters),
            hint=swap(self.hint) if self.hint is not None else None,
        )


class InputLimitError(ForgeLedgerError):
    """An input exceeds a documented bound (a YAML file's size, nodes or depth); nothing was
    loaded or written."""


class ConfigError(ForgeLedgerError):
    """A configuration value (participants file, config override, env var) is invalid."""


class StoreError(ForgeLedgerError):
    """The event store cannot be opened or is not a forge-ledger store."""


class StoreMissingError(StoreError):
    """There is no ledger at the store location yet (a follower may wait for one)."""


class StoreUnavailableError(StoreError):
    """The store could not be had in time (another process held its write lock past the lock
    wait, ``FORGE_LEDGER_LOCK_TIMEOUT``): nothing of the change was stored, and trying again
    later can succeed. Exit code 75 is ``EX_TEMPFAIL`` of ``sysexits.h``, "try again"."""

    exit_code = 75
    in_json = True


class SessionNotFoundError(ForgeLedgerError):
    """No session (or more than one) matches the given id or prefix."""


class InvariantViolation(ForgeLedgerError):
    """A command would break a rule of the deliberation (the aggregate refused it)."""


class ConcurrencyConflictError(ForgeLedgerError):
    """Another writer appended to the same session first; nothing of ours was stored."""


class LeaseHeldError(ConcurrencyConflictError):
    """Another live process has claimed the session (its lease); nothing was called or spent."""

    exit_code = 4


class SessionPausedError(ForgeLedgerError):
    """A provider fault left a round without an answer it needs: the session is paused, kept,
    and resumable (``forge-ledger resume S``)."""

    exit_code = 3


class RunInterrupted(ForgeLedgerError):
    """The person pressed Ctrl-C during a run: what was committed is kept and the session is
    resumable. Its message starts with :data:`INTERRUPTED` (see :func:`exit_interrupted`)."""

    exit_code = 130


INTERRUPTED = "interrupted"
"""The first word of what Ctrl-C prints, wherever it lands."""


def exit_interrupted(during_run: RunInterrupted | None = None) -> NoReturn:
    """Ctrl-C, whenever it lands: one line on stderr that starts with :data:`INTERRUPTED`
    (a run adds which session keeps what and how to resume it), exit
    ``RunInterrupted.exit_code`` (130, as a shell reports a process ended by SIGINT)."""
    sys.stderr.write(f"{during_run.one_line() if during_run else INTERRUPTED}\n")
    # Leave at once rather than through SystemExit: on CPython 3.11 an interrupt that passed
    # through ``exec`` of a string (dataclasses and eventsourcing build classes that way while
    # a command loads) marks the interpreter to end by SIGINT at exit, handled or not, and the
    # exit code would not be 130. Everything committed is already stored; the stack is unwound.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(RunInterrupted.exit_code)


class ChainBrokenError(ForgeLedgerError):
    """The hash chain of a session does not verify."""

    exit_code = 1


class SessionDamagedError(StoreError):
    """A session's stored events or texts are damaged (an event deleted, reordered,
    duplicated or unreadable, a text missing or altered): it cannot be read past
    ``position``, the first damaged event. Other sessions of the store are not affected.
    Exit 1, as for a chain that does not verify (``verify`` names the same position)."""

    exit_code = 1

    def __init__(self, session_id: object, position: int, problem: str) -> None:
        self.session_id = str(session_id)
        self.position = position
        self.problem = problem
        short = self.session_id[:8]
        super().__init__(
            f"session {short} is damaged at event {position}: {problem}",
            hint=f"restore the store from a backup; 'forge-ledger verify {short}' checks it",
        )


class StudyDamagedError(StoreError):
    """A study's stored events are damaged (an event deleted, reordered, duplicated or
    unreadable): it cannot be read past ``position``, the first damaged event. Other studies
    and the sessions are not affected. Exit 1, as for a damaged session."""

    exit_code = 1

    def __init__(self, study_id: object, position: int, problem: str) -> None:
        self.study_id = str(study_id)
        self.position = position
        self.problem = problem
        short = self.study_id[:8]
        super().__init__(
            f"study {short} is damaged at event {position}: {problem}",
            hint=f"restore the store from a backup; 'forge-ledger study verify {short}' checks it",
        )


class ProviderError(ForgeLedgerError):
    """A model provider could not be reached or refused the call (never carries secrets)."""


class BudgetExhaustedError(ForgeLedgerError):
    """A call would overrun the session's cost or time budget."""


class ImportValidationError(ForgeLedgerError):
    """A YAML session file failed validation; nothing was written."""


class NonDeterminismError(ForgeLedgerError):
    """A replay produced an event different from the recorded one."""

    exit_code = 1


class ProcessFailedError(ForgeLedgerError):
    """Another process running the same study's cells (``--processes``) was killed or ended
    on an error; the study keeps what every process recorded, and ``study resume`` goes on."""

    exit_code = 1


def dotted_loc(loc: Loc) -> str:
    """A pydantic error location as ``field.sub.0``; ``value`` for the value as a whole."""
    return ".".join(str(x) for x in loc) or "value"


def validation_summary(
    err: ValidationError,
    *,
    most: int = 1,
    where: Callable[[Loc], str] = dotted_loc,
    count_more: bool = False,
) -> str:
    """pydantic's problems as ``where: what`` for the first ``most``, joined by semicolons.

    The one way a rejected value is explained, so a config file, a command-line option, an
    import and a model's answer all say what was wrong in the same words. ``where`` names the
    place in the caller's terms (an option, a YAML path with its line); ``count_more`` adds
    how many problems were left out.
    """
    problems = err.errors()
    text = "; ".join(f"{where(p['loc'])}: {p['msg']}" for p in problems[:most])
    more = len(problems) - most
    return f"{text}; {more} more problem(s)" if count_more and more > 0 else text
