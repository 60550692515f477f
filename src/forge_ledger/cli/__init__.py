"""The ``forge-ledger`` command line.

Commands live in small modules by theme and register themselves on :data:`cli`, which
imports a command's module only when that command runs (or its help is asked for):
:data:`COMMANDS` names each command's module and its one-line summary, so ``--help`` lists
every command without importing any, and ``sessions`` does not pay for the audit, the YAML
format or the model providers. ``main`` turns every
:class:`~forge_ledger.errors.ForgeLedgerError` (and click's usage errors) into one line on
stderr with a non-zero exit code.
"""

from __future__ import annotations

import importlib
import sys
from gettext import gettext
from pathlib import Path

import click

from .. import __version__
from ..errors import ArgumentError, ForgeLedgerError, RunInterrupted, exit_interrupted
from ..untrusted.terminal_text import printable

__all__ = ["COMMANDS", "cli", "main"]

COMMANDS: dict[str, tuple[str, str, str]] = {
    # name: (module in this package, the command's attribute there, the first paragraph of
    # its help: what --help lists). A test checks every entry against the command itself.
    "abort": ("deliberate", "abort",
              "End a session for good, with your reason (recorded, then sealed)."),
    "answer": ("deliberate", "answer",
               "Record your answer to a paused session's questions (then run 'resume')."),
    "audit": ("record_cmds", "audit", "How consensus formed in SESSION: scores beside majorities, "
              "who moved whom, conformity."),
    "back": ("yaml_cmds", "back_cmd", "Go back STEPS iterations (1-5, default 1) in a session "
             "still in progress or paused; history is kept and the questions of the target "
             "iteration are pending again."),
    "browse": ("browse", "browse",
               "Update the projections and open the read model in Datasette (Ctrl-C stops)."),
    "cleanup": ("yaml_cmds", "cleanup_cmd", "Remove YAML exports and documents of "
                "completed/abandoned sessions older than --days (never events)."),
    "copy": ("copy_cmd", "copy_cmd",
             "Copy SESSIONs (a fork with its ancestors) to another store, event for event."),
    "demo": ("demo", "demo",
             "Run an offline four-participant deliberation (no API key, no network)."),
    "diff": ("record_cmds", "diff",
             "Compare the consensus paths of sessions A and B, iteration by iteration."),
    "dissent": ("views", "dissent",
                "The dissent log of SESSION: divergences still open, with their lifecycle."),
    "export": ("yaml_cmds", "export_cmd",
               "Write SESSION as a YAML v1.2 session file, or SESSIONs as a one-file ledger."),
    "fake-server": ("fake_server", "fake_server",
                    "Serve scripted chat completions on HOST:PORT until interrupted (Ctrl-C)."),
    "fork": ("record_cmds", "fork_cmd", "Start a new session from SESSION as of a past point; "
             "prints the new session's id."),
    "import": ("yaml_cmds", "import_cmd", "Import a YAML session file (v1.0 or v1.2) as a new "
               "session; a bad file writes nothing."),
    "log": ("read", "log", "Print SESSION's events in order (full id or unique prefix)."),
    "migrate": ("migrate_cmd", "migrate_cmd", "Bring the store to the current format; the "
                "sessions and their hashes are unchanged."),
    "projections": ("views", "projections", "Read-model projections (SQLite file beside the "
                    "store, browsable with Datasette)."),
    "replay": ("replay_cmd", "replay",
               "Replay SESSION (or --all) deterministically; report the first difference."),
    "report": ("report_cmd", "report", "Write SESSION as one HTML page: charts, the document "
               "with provenance, the audit."),
    "resume": ("deliberate", "resume",
               "Continue a paused or interrupted session (calls only what is missing)."),
    "run": ("deliberate", "run", "Run a deliberation on TOPIC with the given participants."),
    "seal": ("record_cmds", "seal",
             "Verify the chain of a finished SESSION and close it with a seal."),
    "sessions": ("listing", "sessions", "List the sessions in the store (newest last)."),
    "show": ("read", "show",
             "Show SESSION (full id or unique prefix), now or as of a past point."),
    "spec": ("spec_cmd", "spec_cmd", "Print SESSION's document: the latest synthesis (before any, "
             "the latest draft or response) exactly as written, under a header saying whether "
             "it was agreed."),
    "store": ("store_cmd", "store_cmd", "Say which store the commands use here and why "
              "(--store, FORGE_LEDGER_STORE, the nearest .project-memory/, or the user-level "
              "store)."),
    "study": ("study_cmd", "study", "Run many sessions from one plan (topics x panels x "
              "variants x repeats) under one budget."),
    "trail": ("views", "trail", "The consensus trail of SESSION: each vote, stance changes, who "
              "moved whom, conformity."),
    "verify": ("read", "verify", "Recompute the hash chain of SESSION, of every session in the "
               "store, or check an export."),
    "verify-export": ("record_cmds", "verify_export_cmd", "Check a sealed session's YAML export, "
                      "or a document file, against the chain in the store."),
    "worker": ("study_cmd", "worker_cmd",
               "Run queued study cells from the PostgreSQL store until Ctrl-C."),
}
"""Every command, by name: where it lives and what ``--help`` says of it. A new command goes
here as well as in its module (``tests/cli/test_cli_startup.py`` fails until it does)."""


class _Group(click.Group):
    """The command group: commands loaded on first use, and one rule for a reader that went
    away (``| head``).

    Loading every command's module cost half a second per run (the audit, the YAML format,
    the projections runner and the pydantic models they build); a command now imports only
    its own module, and the command list comes from :data:`COMMANDS`.

    click turns a broken pipe into exit code 1 and Rich into ``SystemExit(1)``; a reader
    closing the pipe early is not the command's failure, so every command then exits 0,
    quietly (deliberations themselves never notice: see ``_interrupt``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, its module imported the first time (it registers itself on ``cli``),
        with its examples (``_examples.EXAMPLES``) as its help's epilog.

        A Ctrl-C while the module loads is one at start-up, before anything ran: it ends as
        one in ``_entry`` does, not as click's abort of a running command."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attribute, _ = COMMANDS[cmd_name]
            try:
                loaded = importlib.import_module(f"{__name__}.{module}")
            except KeyboardInterrupt:
                exit_interrupted()
            self.commands.setdefault(cmd_name, getattr(loaded, attribute))
        command = super().get_command(ctx, cmd_name)
        if command is not None and command.epilog is None:
            from ._examples import epilog  # the examples, kept in one map

            command.epilog = epilog(cmd_name)
            for name, sub in getattr(command, "commands", {}).items():  # a group's commands
                sub.epilog = sub.epilog or epilog(f"{cmd_name} {name}")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's command list, with a command not loaded yet standing in by its summary
        (the same words its help starts with, shortened by click's own rule)."""
        commands = [
            (name, self.commands.get(name) or click.Command(name, help=COMMANDS[name][2]))
            for name in self.list_commands(ctx)
        ]
        commands = [(name, command) for name, command in commands if not command.hidden]
        if not commands:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in commands)
        with formatter.section(gettext("Commands")):
            formatter.write_dl([(name, c.get_short_help_str(limit)) for name, c in commands])

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
    "[env FORGE_LEDGER_HOME, the folder of the user-level store too; default the user data "
    "folder, ~/.local/share/forge-ledger on Linux]. "
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


def all_commands() -> list[click.Command]:
    """Every command, each module imported (for what needs them all: the option names of an
    error, the documentation's reference)."""
    with click.Context(cli) as ctx:
        found = [cli.get_command(ctx, name) for name in cli.list_commands(ctx)]
    return [c for c in found if c is not None]


def option_names() -> dict[str, str]:
    """Each command option's parameter name and its long form (``at_event`` → ``--at-event``):
    the library's errors name its parameters, the command line speaks of its options."""
    names: dict[str, str] = {}
    for command in all_commands():
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
        _fail(e)
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
        _fail(failure)


def _fail(e: ForgeLedgerError) -> None:
    """One ``error:`` line on stderr (and the error as JSON on stdout under ``--json`` when a
    script acts on it), then the error's exit code."""
    from ._common import emit_json, json_asked

    if e.in_json and json_asked():
        emit_json(e.as_json())
    for line in _in_cli_terms(e).lines():
        click.echo(f"error: {printable(line)}", err=True)
    sys.exit(e.exit_code)
