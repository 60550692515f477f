"""Ctrl-C while the command line is still loading, and what importing the package costs.

Loading the command line takes a second or more; a Ctrl-C then used to end in a Python
traceback. Here the interrupt is raised from inside the import of one command module, so the
case is deterministic rather than a matter of timing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import forge_ledger

_CTRL_C_WHILE_LOADING = textwrap.dedent(
    """
    import os, signal, sys

    class CtrlCDuringImport:
        def find_spec(self, name, path=None, target=None):
            if name == {module!r}:
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, CtrlCDuringImport())
    sys.argv = ["forge-ledger", "sessions", "--store", {store!r}]
    from forge_ledger._entry import main
    main()
    print("ran to the end")
    """
)


@pytest.mark.parametrize("module", ["forge_ledger.cli", "forge_ledger.cli.listing", "rich.table"])
def test_ctrl_c_while_the_command_line_loads_prints_one_line_and_exits_130(
    tmp_path: Path, module: str
) -> None:
    store = tmp_path / "s.sqlite"
    code = _CTRL_C_WHILE_LOADING.format(module=module, store=str(store))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted\n"
    assert done.stdout == ""
    assert not store.exists()


def test_the_console_script_is_the_entry_that_catches_it() -> None:
    (script,) = entry_points(group="console_scripts", name="forge-ledger")
    assert script.value == "forge_ledger._entry:main"


def _python(code: str) -> str:
    """What a fresh interpreter running ``code`` prints."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout


def test_importing_the_package_loads_nothing_heavy() -> None:
    printed = _python(
        "import sys, forge_ledger, forge_ledger._entry; "
        "print(sorted(m for m in ('pydantic', 'eventsourcing', 'click', 'litellm') "
        "if m in sys.modules))"
    )
    assert printed.strip() == "[]"


def test_every_public_name_loads_on_first_use() -> None:
    from forge_ledger.ledger import Ledger

    assert forge_ledger.Ledger is Ledger
    for name in forge_ledger.__all__:
        assert getattr(forge_ledger, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = forge_ledger.Nope  # type: ignore[attr-defined]


def test_submodules_are_attributes_of_the_package() -> None:
    """As when the package imported its parts itself: ``forge_ledger.ledger.Ledger`` after a
    bare ``import forge_ledger``; ``dir`` lists public names and submodules."""
    printed = _python(
        "import forge_ledger as f; "
        "print(f.ledger.Ledger.__name__, f.domain.canonical_json.__name__, "
        "{'Ledger', 'ledger', 'app', 'open'} <= set(dir(f)))"
    )
    assert printed.split() == ["Ledger", "canonical_json", "True"]
