"""The YAML session format v1.2: export (a projection), import (with v1.0 migration and
validation), storage rules (one file per session, cleanup). Going back in a session (``back``) is a
session operation: :func:`forge_ledger.app.back`."""

from typing import TYPE_CHECKING

from .. import _lazy

# ``migrate`` is also the name of its module, which the import system sets on this package
# whenever the module loads: bound here, before that can happen, it stays the function.
from .migrate import migrate

if TYPE_CHECKING:
    from .export import dump_document, export_events, session_document
    from .importer import ImportResult, build_import, import_session, parse_session_file
    from .migrate import migrate_v1_to_v12
    from .storage import (
        CleanupItem,
        autosave,
        cleanup,
        export_path,
        session_file_path,
        write_export,
    )

__getattr__, __dir__ = _lazy.exports(__name__, {
    "export": ("dump_document", "export_events", "session_document"),
    "importer": ("ImportResult", "build_import", "import_session", "parse_session_file"),
    "migrate": ("migrate_v1_to_v12",),
    "storage": (
        "CleanupItem",
        "autosave",
        "cleanup",
        "export_path",
        "session_file_path",
        "write_export",
    ),
})

__all__ = [
    "CleanupItem",
    "ImportResult",
    "autosave",
    "build_import",
    "cleanup",
    "dump_document",
    "export_events",
    "export_path",
    "import_session",
    "migrate",
    "migrate_v1_to_v12",
    "parse_session_file",
    "session_document",
    "session_file_path",
    "write_export",
]
