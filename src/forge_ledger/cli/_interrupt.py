"""Ctrl-C during a deliberation, and output that nobody reads any more.

Ctrl-C: the first press interrupts the run as Python does (``KeyboardInterrupt``: calls in
flight are cancelled, whatever was appended is committed, the command prints how to resume);
a second press exits at once. Nothing is lost by exiting at once: every event is committed as it
is appended, so the store already holds everything the run did.

Closed output: ``forge-ledger run … | head -3`` closes stdout after three lines, and a closed
terminal or pipe can break stderr. Progress is a courtesy, never a reason to stop paying calls
half-way: writes to a broken stream are dropped quietly and the deliberation runs to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TextIO, TypeVar

from ._streams import ForwardingStream

__all__ = [
    "QuietWhenClosed",
    "abandoned_calls_are_quiet",
    "interrupt_reported_once",
    "quiet_when_closed",
    "second_interrupt_exits",
    "survives_closed_output",
]

_AGAIN = b"\ninterrupted again: exiting now (everything committed is kept)\n"


@contextlib.contextmanager
def second_interrupt_exits() -> Iterator[None]:
    """While active, the first SIGINT raises ``KeyboardInterrupt``, the second ends the process
    at once with exit code 130. The handler stays installed when the first interrupt
    propagates, so a second press during the clean-up still exits at once."""
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:  # pragma: no cover - not the main thread
        yield
        return
    pressed = 0

    def handler(_signum: int, _frame: FrameType | None) -> None:
        nonlocal pressed
        pressed += 1
        if pressed == 1:
            raise KeyboardInterrupt
        with contextlib.suppress(OSError):
            os.write(2, _AGAIN)
        os._exit(130)

    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # pragma: no cover - not the main thread
        yield
        return
    try:
        yield
    except KeyboardInterrupt:
        raise  # keep the handler: the process is on its way out
    except BaseException:
        signal.signal(signal.SIGINT, previous)
        raise
    signal.signal(signal.SIGINT, previous)


def interrupt_reported_once(loop: asyncio.AbstractEventLoop) -> None:
    """Keep asyncio from reporting the interrupt a second time, as a traceback.

    The first Ctrl-C raises ``KeyboardInterrupt`` wherever the main thread is. Inside a task's
    step (a stream chunk, a save, an HTTP client's own task) that task ends with the interrupt
    as its exception and the loop stops; the command then says in one line how to resume. When
    nobody awaited that task, asyncio prints "Task exception was never retrieved" and a
    traceback once the task is collected, before or after that line. Those reports are
    dropped; every other goes to asyncio's default handler.
    """

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not isinstance(context.get("exception"), KeyboardInterrupt):
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def abandoned_calls_are_quiet() -> None:
    """After the first Ctrl-C, keep Python from warning at exit about coroutines never awaited.

    An interrupt that lands between a client creating a call's coroutine and awaiting it
    (litellm's streaming call, say) leaves that coroutine to be collected unawaited, and Python
    prints a ``RuntimeWarning`` after the command's one line. The process is on its way out and
    the call's work is abandoned on purpose; the warning says nothing a user can act on.
    """
    warnings.filterwarnings(
        "ignore", message=r"coroutine .* was never awaited", category=RuntimeWarning,
    )


class QuietWhenClosed(ForwardingStream):
    """A text stream that forwards to ``target`` until a write fails because the reader went
    away (``BrokenPipeError``, a closed file); from then on it drops everything."""

    def __init__(self, target: TextIO) -> None:
        super().__init__(target)
        self.closed_by_reader = False

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                self._target.write(text)
                self._target.flush()
            except (BrokenPipeError, ValueError, OSError):
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self._target.flush()
            except (BrokenPipeError, ValueError, OSError):
                self._drop()

    def _drop(self) -> None:
        self.closed_by_reader = True
        # Point the descriptor at /dev/null so the interpreter's own flush at exit does not
        # report the broken pipe either.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._target.fileno())
            os.close(devnull)

    def isatty(self) -> bool:
        with contextlib.suppress(ValueError, OSError):
            return self._target.isatty()
        return False


@contextlib.contextmanager
def quiet_when_closed() -> Iterator[None]:
    """Route ``sys.stdout``/``sys.stderr`` through :class:`QuietWhenClosed` for a run."""
    saved = sys.stdout, sys.stderr
    sys.stdout = QuietWhenClosed(saved[0])
    sys.stderr = QuietWhenClosed(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


F = TypeVar("F", bound=Callable[..., Any])


def survives_closed_output(f: F) -> F:
    """Decorate a command that deliberates: its output may go to a closed pipe, it runs on."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with quiet_when_closed():
            return f(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
