"""Shared CLI plumbing: ``--store``/``--json`` options, output helpers, error handling.

Rules every command follows: with ``--json`` exactly one JSON document goes to stdout and
everything else (progress, warnings) to stderr; a user mistake is one line on stderr and a
non-zero exit, never a traceback. Nothing here imports litellm.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ..errors import UsageError
from ..untrusted.terminal_text import printable
from ._streams import ForwardingStream

if TYPE_CHECKING:
    from datetime import datetime

    from ..domain.state import SessionState
    from ..ledger import Ledger

__all__ = [
    "HMAC_KEY_ENV",
    "add_row",
    "document_output",
    "emit_json",
    "err_console",
    "has_unpriced_calls",
    "hmac_key",
    "json_asked",
    "json_option",
    "money",
    "open_ledger",
    "out_console",
    "print_markdown",
    "print_table",
    "printable",
    "remember_json",
    "shown",
    "store_option",
    "to_terminal",
    "when",
]

F = TypeVar("F", bound=Callable[..., Any])

class _Console(Console):
    """Rich's console, except for a reader that went away (``| head``).

    Rich's default ends the process with exit code 1 there, while output printed with
    ``click.echo`` raises ``BrokenPipeError``, which :func:`forge_ledger.cli.main` turns into
    exit 0: one closed pipe, one exit code, whichever way a command prints."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        stream = sys.stderr if self.stderr else sys.stdout
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())  # nothing left to flush at exit
        raise BrokenPipeError

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        """Every rendered piece of text through :func:`printable`: a value a print site did
        not escape still cannot drive the terminal. Rich's own control codes (cursor moves of
        the live view) are separate segments and pass; styles are not text."""
        for segment in super().render(renderable, options):
            if segment.control or not segment.text:
                yield segment
            else:
                yield Segment(printable(segment.text, multiline=True), segment.style)


out_console = _Console(highlight=False, soft_wrap=True, markup=False, emoji=False)
err_console = _Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)
"""Both consoles have Rich markup and emoji codes off: everything printed is store, model or
user text until proven otherwise, so ``[red]``, ``[link=…]`` or ``:fire:`` in a contribution
prints as typed. Styling is
done with :class:`~rich.text.Text` objects (or ``markup=True`` on a literal written here)."""


# --------------------------------------------------------------------------- terminal or not


def to_terminal(console: Console | None = None) -> bool:
    """The one rule for how output is rendered: Rich tables and Markdown on a terminal; plain,
    untruncated text when stdout is a pipe or a file (as ``llm`` and ``sqlite-utils`` do), so
    ``grep``, ``cut`` and ``less`` see every character."""
    return (console or out_console).is_terminal


def shown(value: object, *, multiline: bool = False, style: str = "") -> Text:
    """A value of the store, a model, a file or a person as terminal text: a plain
    :class:`~rich.text.Text` (never markup) with control characters escaped (a single-line
    field's newlines too), so a cell or a line prints as what it is."""
    return Text(printable(str(value), multiline=multiline), style=style)


def add_row(table: Table, *cells: object, end_section: bool = False) -> None:
    """Add a row of cells that are user, model or store text (titles, names, reasons)."""
    table.add_row(*(shown(c) for c in cells), end_section=end_section)


def _plain(cell: RenderableType) -> str:
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return printable(" ".join(text.replace("\t", " ").splitlines()))


def print_table(table: Table, console: Console | None = None) -> None:
    """Print ``table``: boxed on a terminal; elsewhere its title, then one tab-separated line
    for the header and for each row, with every cell whole (one line per row)."""
    con = console or out_console
    if to_terminal(con):
        con.print(table)
        return
    lines: list[str] = []
    if table.title:
        lines.append(_plain(table.title))
    if table.show_header:
        lines.append("\t".join(_plain(c.header) for c in table.columns))
    columns = [list(c.cells) for c in table.columns]
    for i in range(table.row_count):
        lines.append("\t".join(_plain(col[i]) if i < len(col) else "" for col in columns))
    con.file.write("\n".join(lines) + "\n")
    con.file.flush()


def print_markdown(text: str, console: Console | None = None) -> None:
    """Markdown rendered on a terminal, the Markdown source itself elsewhere (nothing cut)."""
    con = console or out_console
    if to_terminal(con):
        from rich.markdown import Markdown  # markdown-it and Pygments: only when rendering

        con.print(Markdown(printable(text, multiline=True), hyperlinks=False))
        return
    con.file.write(text if text.endswith("\n") else text + "\n")
    con.file.flush()


class _Printable(ForwardingStream):
    """A text stream that writes to ``target`` what :func:`printable` makes of each write
    (newlines kept): it escapes character by character, so how a text is split into writes
    changes nothing."""

    def write(self, text: str) -> int:
        self._target.write(printable(text, multiline=True))
        return len(text)


@contextlib.contextmanager
def document_output() -> Iterator[None]:
    """stdout for a document (``spec``, ``audit --markdown``, ``report -o -``): its exact bytes
    for a pipe or a file, every write escaped (:func:`printable`, newlines kept) on a terminal.
    Never around ``--json``: JSON keeps its bytes wherever it goes. The stream itself
    decides, not Rich's guess: ``FORCE_COLOR`` (set by many CI systems) makes Rich style a
    pipe, but a document piped to a file must stay byte for byte what was recorded."""
    if not sys.stdout.isatty():
        yield
        return
    saved = sys.stdout
    sys.stdout = _Printable(saved)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = saved


def money(usd: float, *, unpriced: bool | int = False) -> str:
    """A cost as shown everywhere (:func:`forge_ledger.engine.cost_text`): calls made at no
    known price are ``unpriced``, never a misleading ``$0.0000``."""
    from ..engine import cost_text

    return cost_text(usd, int(unpriced))


def has_unpriced_calls(state: SessionState) -> bool:
    """Whether any contribution of ``state`` was charged at no known price."""
    return state.unpriced_calls > 0


HMAC_KEY_ENV = "FORGE_LEDGER_HMAC_KEY"
"""Environment variable holding the key that signs seals (HMAC) and checks them."""


def hmac_key(env_name: str = HMAC_KEY_ENV) -> bytes | None:
    """The seal key from the environment, or None when it is not set."""
    value = os.environ.get(env_name)
    return value.encode("utf-8") if value else None


def store_option(f: F) -> F:
    """``--store PATH|URL``; without it the store is found by
    :func:`~forge_ledger.ledger.store.find_store` (``FORGE_LEDGER_STORE``, the nearest
    ``.project-memory/``, the user-level store), the one rule, which says which rule chose."""
    return click.option(
        "--store",
        "store",
        default=None,
        metavar="PATH|URL",
        help="Event store: a SQLite file path or a postgresql:// URL [else FORGE_LEDGER_STORE, "
        "else the nearest .project-memory/ here or above, else the user-level store: "
        "'forge-ledger store' says which].",
    )(f)


_JSON_ASKED: list[bool] = []


def remember_json(_ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """The ``--json`` option's callback: the command line's error handling prints an error a
    script acts on as JSON too (:attr:`~forge_ledger.errors.ForgeLedgerError.in_json`)."""
    if value:
        _JSON_ASKED.append(True)
    return value


def json_asked() -> bool:
    """Whether the command being run was given ``--json``."""
    return bool(_JSON_ASKED)


def json_option(f: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, callback=remember_json,
        help="Print exactly one JSON document on stdout.",
    )(f)


def open_ledger(store: str | None, *, create: bool = False) -> Ledger:
    """Open the ledger; read-only commands pass ``create=False`` (a missing file is an error)."""
    from ..ledger import Ledger  # the event store, its models: loaded by commands that read it

    return Ledger(store, create=create)


def when(t: datetime) -> str:
    """A time as the tables show it, to the second."""
    return t.strftime("%Y-%m-%d %H:%M:%S")


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2, default=str))
    sys.stdout.write("\n")
    sys.stdout.flush()


def parse_iso(value: str, option: str) -> Any:
    """An ISO 8601 time from the command line; one without a zone is read as local time, as a
    person typing it means it, and the command says so on stderr."""
    from datetime import datetime

    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option} {value!r} is not an ISO 8601 time", hint="e.g. 2026-01-09T10:30:00Z"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()
        err_console.print(f"{option} {printable(value)} read as local time, "
                          f"{when.isoformat()}", markup=False)
    return when
