"""Storage rules of YAML exports: one file per session, directory made on demand, no
overwriting another session's file, cleanup of old finished exports (never of events).

Exports are a convenience copy: the ledger stays the source of truth, so cleanup only ever
deletes files under the export directory, and only those whose own ``updated`` field says
they finished more than ``days`` ago.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import yaml

from ..domain.json_fields import JsonFields
from ..errors import InputLimitError, UsageError
from ..ledger import Ledger
from ..ledger.outputs import store_outputs, write_output
from ..untrusted.bounded_yaml import load_yaml, read_yaml_file
from .schema import SLUG_RE

__all__ = [
    "CleanupItem",
    "autosave",
    "cleanup",
    "export_path",
    "remove_finished",
    "session_file_path",
    "write_export",
]

FINISHED = ("completed", "abandoned")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = load_yaml(read_yaml_file(path), name=str(path))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, InputLimitError):
        return None
    return doc if isinstance(doc, dict) else None


def _owner(doc: dict[str, Any] | None) -> tuple[str | None, str | None]:
    if doc is None:
        return None, None
    session = doc.get("session")
    ledger = doc.get("ledger")
    sid = session.get("id") if isinstance(session, dict) else None
    lid = ledger.get("session_id") if isinstance(ledger, dict) else None
    return (str(sid) if sid is not None else None, str(lid) if lid is not None else None)


_OTHERS: set[tuple[str, str, str]] = set()
"""Export files found to belong to another session: (path, yaml id, ledger id) of the session
that asked."""

_OTHERS_KEPT = 4096


def session_file_path(
    directory: Path, slug: str, suffix: str, ledger_id: str, owns: Callable[[Path], bool]
) -> Path:
    """The one naming rule of per-session files (YAML exports, documents):
    ``{slug}{suffix}``, or ``{slug}-{shortid}{suffix}`` when that file exists and ``owns``
    says it belongs to another session. Same-slug sessions never share a file."""
    if not SLUG_RE.match(slug) or len(slug) > 80:
        raise UsageError(f"session slug {slug!r} is not kebab-case; refusing to use it as a file")
    plain = directory / f"{slug}{suffix}"
    if not plain.exists() or owns(plain):
        return plain
    short = UUID(ledger_id).hex[:8]
    return directory / f"{slug}-{short}{suffix}"


def export_path(directory: Path, slug: str, yaml_id: str, ledger_id: str) -> Path:
    """``{slug}.yaml``, or ``{slug}-{shortid}.yaml`` when that file belongs to another session
    (its ``session.id`` differs, or its ``ledger.session_id`` names another session)."""

    def owns(path: Path) -> bool:
        if (str(path), yaml_id, ledger_id) in _OTHERS:
            return False
        sid, lid = _owner(_read(path))
        if sid == yaml_id and lid in (None, ledger_id):
            return True
        if len(_OTHERS) >= _OTHERS_KEPT:
            _OTHERS.clear()
        _OTHERS.add((str(path), yaml_id, ledger_id))
        return False

    # Another session's file stays another's while it exists: it is replaced only by its
    # own session or, once gone, by whichever session takes the name; so it is parsed once
    # per asking session, not at every checkpoint of every session sharing the slug (all the
    # cells of a study's topic), where parsing it was a quarter of an autosave's CPU.
    path = session_file_path(directory, slug, ".yaml", ledger_id, owns)
    _OTHERS.discard((str(path), yaml_id, ledger_id))  # the name is (about to be) this session's
    return path


def write_export(
    ledger: Ledger,
    session_id: str | UUID,
    *,
    directory: Path | None = None,
    path: Path | None = None,
) -> Path:
    """Export a session to ``path`` (or its file in ``directory``, by default the store's
    exports directory: ``ledger.outputs.store_outputs``); atomic replace."""
    sid = ledger.resolve(session_id) if isinstance(session_id, str) else session_id
    from .export import dump_document, session_document  # the export format, for an export

    doc = session_document(ledger.history(sid))  # a fork's file tells its inherited rounds too
    text = dump_document(doc)  # the file's name comes from the document, not from re-reading it
    if path is None:
        target_dir = directory if directory is not None else store_outputs(ledger.location).exports
        path = export_path(target_dir, doc["session"]["slug"], doc["session"]["id"], str(sid))
    return write_output(path, text)


def autosave(ledger: Ledger, session_id: str | UUID, *, directory: Path | None = None) -> Path:
    """Write the session's export to its file; the orchestrator calls this on every phase
    change and at the end of a session (seed: auto-save checkpoints)."""
    return write_export(ledger, session_id, directory=directory)


@dataclass(frozen=True)
class CleanupItem(JsonFields):
    """One export file ``cleanup`` removed or would remove."""

    path: Path
    status: str
    updated: str
    removed: bool


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return t if t.tzinfo else t.replace(tzinfo=UTC)
    return None


def remove_finished(
    directory: Path,
    pattern: str,
    finished: Callable[[Path], tuple[str, datetime] | None],
    *,
    now: datetime,
    days: int = 30,
    dry_run: bool = False,
) -> list[CleanupItem]:
    """The one cleanup rule for files derived from a session (exports, documents): remove
    those matching ``pattern`` that ``finished`` says belong to a finished session (its status
    and an aware ``updated`` time) last updated more than ``days`` ago. Anything else — not
    ours, in progress, undated — is kept; events are never touched."""
    if days < 0:
        raise UsageError("--days must be 0 or more")
    if not directory.is_dir():
        return []
    limit = now - timedelta(days=days)
    out: list[CleanupItem] = []
    for path in sorted(directory.glob(pattern)):
        found = finished(path)
        if found is None or found[1] >= limit:
            continue
        status, updated = found
        if not dry_run:
            path.unlink()
        out.append(CleanupItem(path, status, updated.isoformat(), removed=not dry_run))
    return out


def _finished_export(path: Path) -> tuple[str, datetime] | None:
    doc = _read(path)
    session = doc.get("session") if doc else None
    if not isinstance(session, dict):
        return None
    status = str(session.get("status", ""))
    updated = _when(session.get("updated"))
    if status not in FINISHED or updated is None:
        return None
    return status, updated


def cleanup(
    directory: Path, *, now: datetime, days: int = 30, dry_run: bool = False
) -> list[CleanupItem]:
    """Remove exports of completed/abandoned sessions whose ``updated`` is older than
    ``days``. Files that are not session exports, in progress, or undated are kept."""
    return remove_finished(
        directory, "*.yaml", _finished_export, now=now, days=days, dry_run=dry_run
    )
