"""The README's command reference is what the CLI prints now, so ``pytest`` alone catches a
stale one (CI also runs ``cog --check``).

The reference is a cog block in README.md filled by
:func:`forge_ledger.cli._reference.command_reference`; after changing a command, an option
or a help string, ``.venv/bin/cog -r README.md`` regenerates it.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import click
import pytest
from cogapp import Cog

from forge_ledger.cli import cli
from forge_ledger.cli._reference import HELP_WIDTH, command_reference

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_command_reference_is_current() -> None:
    """cog's own check, in-process: exit status 0 only when regenerating changes nothing."""
    out, err = io.StringIO(), io.StringIO()
    cog = Cog()
    cog.set_output(stdout=out, stderr=err)
    status = cog.main(["cog", "--check", "--diff", str(README)])
    assert status == 0, (
        "README.md's command reference differs from the CLI; regenerate it with "
        f".venv/bin/cog -r README.md\n{out.getvalue()}{err.getvalue()}"
    )


def test_reference_has_every_visible_command_in_help_order() -> None:
    """One section per command ``--help`` lists (subgroups included), in that order.

    Guards the generator itself: a cog block that printed nothing, or skipped a group's
    subcommands, would pass the check above as long as README.md matched it.
    """
    expected: list[str] = []

    def walk(cmd: click.Command, path: str, ctx: click.Context | None) -> None:
        expected.append(path)
        if isinstance(cmd, click.Group):
            sub_ctx = click.Context(cmd, info_name=path.rsplit(" ", 1)[-1], parent=ctx)
            for name in cmd.list_commands(sub_ctx):
                sub = cmd.get_command(sub_ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, f"{path} {name}", sub_ctx)

    walk(cli, "forge-ledger", None)
    headings = re.findall(r"^#{3,4} `([^`]+)`$", command_reference(), flags=re.MULTILINE)
    assert headings == expected
    assert "projections status" in " | ".join(headings)


def test_hidden_commands_stay_hidden_and_order_follows_the_group() -> None:
    """A hidden command gets no section; the others follow ``list_commands``, not definition."""

    @click.group()
    def tool() -> None:
        """Tool."""

    @tool.command()
    def zeta() -> None:
        """Last by name."""

    @tool.command(hidden=True)
    def secret() -> None:
        """Never listed."""

    @tool.group()
    def alpha() -> None:
        """First by name."""

    @alpha.command()
    def inner() -> None:
        """A subcommand."""

    text = command_reference(tool, prog_name="tool")
    headings = re.findall(r"^(#+) `([^`]+)`$", text, flags=re.MULTILINE)
    assert headings == [
        ("###", "tool"),
        ("###", "tool alpha"),
        ("####", "tool alpha inner"),
        ("###", "tool zeta"),
    ]
    assert "secret" not in text


@pytest.mark.parametrize("columns", ["40", "250"])
def test_reference_ignores_the_terminal_width(
    monkeypatch: pytest.MonkeyPatch, columns: str,
) -> None:
    """cog may run in any terminal (or none): the text is wrapped at HELP_WIDTH regardless."""
    monkeypatch.delenv("COLUMNS", raising=False)
    baseline = command_reference()
    monkeypatch.setenv("COLUMNS", columns)
    assert command_reference() == baseline
    assert max(len(line) for line in baseline.splitlines()) <= HELP_WIDTH
