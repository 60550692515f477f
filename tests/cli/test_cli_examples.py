"""Every command's ``--help`` ends with its examples, and every example parses: its options
and arguments are ones the command's own click parser accepts."""

from __future__ import annotations

import shlex

import click
import pytest
from click.testing import CliRunner

from forge_ledger.cli import COMMANDS, cli
from forge_ledger.cli._examples import EXAMPLES


def _words(example: str) -> list[str]:
    """The example's arguments after ``forge-ledger``: leading ``NAME=value`` settings and a
    shell redirection (``> FILE``) are the shell's, not the command's."""
    words = shlex.split(example)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    if ">" in words:
        words = words[: words.index(">")]
    assert words[0] == "forge-ledger", example
    return words[1:]


def parse(words: list[str]) -> None:
    """Run ``words`` through click's parsers, command by command (a group's subcommand too),
    without invoking anything: an unknown option, a missing value or a surplus argument
    raises click's usage error."""
    command: click.Command = cli
    ctx = click.Context(cli, info_name="forge-ledger")
    while isinstance(command, click.Group):
        name, words = words[0], words[1:]
        sub = command.get_command(ctx, name)
        assert sub is not None, f"no command {name!r}"
        command, ctx = sub, click.Context(sub, info_name=name, parent=ctx)
    parser = command.make_parser(ctx)
    _opts, extra, _order = parser.parse_args(list(words))
    if extra and not ctx.allow_extra_args:
        raise click.UsageError(f"unexpected arguments {extra}", ctx)


def _every_command() -> list[str]:
    """Every command by its full name: a group's commands too (``projections update``)."""
    ctx = click.Context(cli, info_name="forge-ledger")
    names = []
    for name in sorted(COMMANDS):
        command = cli.get_command(ctx, name)
        names.append(name)
        if isinstance(command, click.Group):
            names += [f"{name} {sub}" for sub in sorted(command.commands)]
    return names


ALL = _every_command()


@pytest.mark.parametrize("name", ALL)
def test_every_command_has_one_to_three_examples_that_parse(name: str) -> None:
    examples = EXAMPLES.get(name, ())
    assert 1 <= len(examples) <= 3, f"{name}: give 1-3 examples in cli/_examples.py"
    for example in examples:
        words = _words(example)
        assert " ".join(words[: len(name.split())]) == name, example
        parse(words)


@pytest.mark.parametrize("name", ALL)
def test_help_ends_with_the_examples(name: str) -> None:
    result = CliRunner().invoke(cli, [*name.split(), "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    tail = result.output.rstrip().splitlines()[-len(EXAMPLES[name]) :]
    assert [line.strip() for line in tail] == list(EXAMPLES[name])


@pytest.mark.parametrize(
    "example",
    [
        "forge-ledger show 3f2a --no-such-option",
        "forge-ledger abort 3f2a --reason",
        "forge-ledger seal 3f2a 9c41",
        "forge-ledger projections nothing",
    ],
)
def test_an_example_that_does_not_parse_is_caught(example: str) -> None:
    with pytest.raises((click.UsageError, AssertionError)):
        parse(_words(example))


def test_no_examples_for_a_command_that_does_not_exist() -> None:
    assert set(EXAMPLES) <= set(ALL)
