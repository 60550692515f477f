"""The README's command reference: every command's ``--help``, exactly as the CLI prints it.

README.md embeds :func:`command_reference` in a cog block (``cog -r README.md`` rewrites
it), and CI and ``tests/test_readme_reference.py`` run ``cog --check``: the reference is
generated from the click commands themselves, so a changed option or help string cannot
leave it stale unnoticed.

The help is rendered in-process (``Context.get_help``, no subprocess and no command
callback runs) at a fixed width, so the text depends on the code only, never on the
terminal cog happens to run in. The CLI is plain click (no rich-click), so help carries no
colour or Rich markup.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from . import cli

__all__ = ["HELP_WIDTH", "PROG_NAME", "command_reference"]

HELP_WIDTH = 98
"""Columns the reference is wrapped at: what click prints on a terminal of 100 columns or
more (the group's ``max_content_width`` is 100 and click keeps a 2-column margin). Passed
as ``terminal_width`` so neither ``COLUMNS`` nor the real terminal size has a say."""

PROG_NAME = "forge-ledger"
"""The name in every usage line and heading (what the installed script is called)."""


def _contexts(ctx: click.Context) -> Iterator[click.Context]:
    """``ctx`` and, depth first, a context for every visible subcommand.

    Subcommands come in the order ``--help`` lists them (the group's ``list_commands``);
    hidden ones are skipped, as ``--help`` skips them. Each context inherits the root's
    width and help option names, just as click's own parsing would give it.
    """
    yield ctx
    group = ctx.command
    if not isinstance(group, click.Group):
        return
    for name in group.list_commands(ctx):
        sub = group.get_command(ctx, name)
        if sub is None or sub.hidden:
            continue
        yield from _contexts(click.Context(sub, info_name=name, parent=ctx, **sub.context_settings))


def command_reference(
    command: click.Command = cli, *, prog_name: str = PROG_NAME, heading_level: int = 3
) -> str:
    """Markdown: one heading per command (subcommands one level deeper), its help in a block.

    The heading is the command path (``forge-ledger projections status``), so each section
    gets a predictable anchor to link to. ``command`` defaults to the whole CLI; the tests
    pass a small group to pin down ordering and hidden commands.
    """
    root = click.Context(
        command,
        info_name=prog_name,
        terminal_width=HELP_WIDTH,
        **command.context_settings,
    )
    parts: list[str] = []
    for ctx in _contexts(root):
        depth = ctx.command_path.count(" ")
        level = heading_level + max(depth - 1, 0)
        parts.append(f"{'#' * level} `{ctx.command_path}`\n")
        parts.append(f"```text\n{ctx.get_help().rstrip()}\n```\n")
    return "\n".join(parts)
