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
from types import ModuleType
from typing import Any

__all__ = ["exports"]


class _KeepingPackage(ModuleType):
    """A package that offers, under a submodule's name, a value that submodule holds
    (``engine.convergence`` is the function): the import system binds every submodule it
    loads on its package, and here that binding gives the value instead."""

    _kept: frozenset[str] = frozenset()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._kept and isinstance(value, ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


def exports(
    package: str,
    where: Mapping[str, Iterable[str]],
    *,
    values: Iterable[str] = (),
    rest: str | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose names ``where`` lists by the
    submodule that holds them (a submodule's own name among them stands for the submodule,
    unless ``values`` names it: then it stands for the submodule's attribute of that name).

    ``rest`` names a submodule that offers every other name of the package: its own
    ``__all__`` lists them, so no second list goes stale. It loads on the first name the map
    does not hold, or when the package's ``__all__`` or ``dir()`` is asked for (the package
    then defines ``__all__`` for type checkers only).

    A name is looked up once: its value is then set on the package itself."""
    if any(isinstance(names, str) for names in [*where.values(), values]):
        raise TypeError(f"{package}: list each module's names, not one string")
    home = {name: module for module, names in where.items() for name in names}
    kept = frozenset(values)
    if kept:
        module_object = sys.modules[package]
        module_object.__class__ = _KeepingPackage
        object.__setattr__(module_object, "_kept", kept)

    def rest_names() -> list[str]:
        if rest is None:
            return []
        return list(importlib.import_module(f"{package}.{rest}").__all__)

    def __getattr__(name: str) -> Any:
        if name == "__all__" and rest is not None:
            value: Any = list(dict.fromkeys([*home, *rest_names()]))
        elif name in home:
            found = importlib.import_module(f"{package}.{home[name]}")
            value = found if name == home[name] and name not in kept else getattr(found, name)
        elif not name.startswith("_") and name in rest_names():
            value = getattr(importlib.import_module(f"{package}.{rest}"), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *home, *rest_names()})

    return __getattr__, __dir__
