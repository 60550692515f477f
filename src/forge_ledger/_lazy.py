"""Packages whose public names load on first use.

A package that imported all its modules itself made every importer of any one of them pay
for all (importing ``forge_ledger.engine.conformity`` ran the whole engine, importing
``forge_ledger.domain.values`` built the aggregate's event classes). Such a package lists
its names here instead, each with the module it lives in, and gets a module
``__getattr__`` that imports that module when the name is first asked for. Type checkers
see the names through the package's ``if TYPE_CHECKING:`` imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(
    package: str, where: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose names ``where`` lists by the
    submodule that holds them (a submodule's own name among them stands for the submodule).

    A name is looked up once: its value is then set on the package itself."""
    if any(isinstance(names, str) for names in where.values()):
        raise TypeError(f"{package}: list each module's names, not one string")
    home = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        found = importlib.import_module(f"{package}.{module}")
        value = found if name == module else getattr(found, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *home})

    return __getattr__, __dir__
