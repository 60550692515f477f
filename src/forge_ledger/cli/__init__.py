"""The ``forge-ledger`` command line.

Commands live in small modules by theme and register themselves on :data:`cli`. ``main``
turns every :class:`~forge_ledger.errors.ForgeLedgerError` (and click's usage errors) into
one line on stderr with a non-zero exit code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import __version__
from ..errors import ArgumentError, ForgeLedgerError, RunInterrupted, exit_interrupted
from ..terminal_text import printable

__all__ = ["cli", "main"]


class _Group(click.Group):
    """The command group, with one rule for a reader that went away (``| head``).

    click turns a broken pipe into exit code 1 and Rich into ``SystemExit(1)``; a reader
    closing the pipe early is not the command's failure, so every command then exits 0,
    quietly (deliberations themselves never notice: see ``_interrupt``)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _discard_stdout()
            raise click.exceptions.Exit(0) from None


def _discard_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush meets no broken pipe."""
    import contextlib
    import os

    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    invoke_without_command=True,
)
@click.version_option(__version__, prog_name="forge-ledger")
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Where a PostgreSQL store's exports, documents and read model go "
    "[env FORGE_LEDGER_HOME; default ~/.local/share/forge-ledger]. "
    "A SQLite store's outputs always sit beside its file.",
)
@click.pass_context
def cli(ctx: click.Context, home: Path | None) -> None:
    """forge-ledger: multi-model deliberations recorded in a hash-chained event ledger.

    Every round, contribution, vote and dissent is an immutable event; sessions can be
    replayed without calling a model, audited, and inspected as of any past point.
    """
    from ..ledger.outputs import set_home_override

    set_home_override(home)
    if ctx.invoked_subcommand is None:  # bare `forge-ledger`: the help, as a success
        click.echo(ctx.get_help())


@cli.result_callback()
def _after_command(*_: object, **__: object) -> None:
    """A command that printed a session whose chain does not verify ends with exit 1."""
    from ._integrity import raise_chain_break

    raise_chain_break()


def _register() -> None:
    """Import every public module of this package; each adds its commands to ``cli``.

    Command modules must stay cheap to import (no litellm at module level).
    """
    import importlib
    import pkgutil

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_register()


def option_names() -> dict[str, str]:
    """Each command option's parameter name and its long form (``at_event`` → ``--at-event``):
    the library's errors name its parameters, the command line speaks of its options."""
    names: dict[str, str] = {}
    for command in cli.commands.values():
        for param in command.params:
            long = [o for o in param.opts if o.startswith("--")]
            if isinstance(param, click.Option) and param.name and long:
                names.setdefault(param.name, long[0])
    return names


def _in_cli_terms(e: ForgeLedgerError) -> ForgeLedgerError:
    """``e`` as the command line says it: a library parameter becomes the option it came from."""
    return e.renamed(option_names()) if isinstance(e, ArgumentError) else e


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="forge-ledger", standalone_mode=False)
    except RunInterrupted as e:
        exit_interrupted(e)
    except ForgeLedgerError as e:
        for line in _in_cli_terms(e).lines():
            click.echo(f"error: {printable(line)}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:  # click's name for Ctrl-C (and end of input at a prompt)
        exit_interrupted()
    except click.ClickException as e:
        ctx_hint = ""
        if isinstance(e, click.UsageError) and e.ctx is not None:
            ctx_hint = f" (see '{e.ctx.command_path} --help')"
        click.echo(f"error: {printable(e.format_message())}{ctx_hint}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        exit_interrupted()
    except BrokenPipeError:
        _discard_stdout()
        sys.exit(0)
    except Exception as e:
        from ..ledger import store_failure
        from ._integrity import found_chain_break

        failure = found_chain_break() or store_failure(e)
        if failure is None:
            raise
        click.echo(f"error: {printable(failure.one_line())}", err=True)
        sys.exit(failure.exit_code)
