"""Files shipped inside the package (``forge_ledger/data``), read through its loader.

``pkgutil.get_data`` reads them from wherever the package was installed (a wheel, an editable
checkout, a zip) as ``importlib.resources`` would, without the ten milliseconds of imports
that ``importlib.resources`` costs every command that reads a stored event.
"""

from __future__ import annotations

import pkgutil

__all__ = ["packaged_data"]


def packaged_data(name: str) -> bytes:
    """The bytes of ``data/<name>``; a package installed without it is broken, and says so."""
    found = pkgutil.get_data("forge_ledger", f"data/{name}")
    if found is None:  # a loader that cannot read files at all
        raise FileNotFoundError(f"forge_ledger/data/{name} cannot be read from the package")
    return found
