"""Sealing a finished session and checking a YAML export against the sealed chain.

A seal is the last event of a terminal session: ``SessionSealed(root_hash, events, hmac)``
where ``root_hash`` is the hash of the event before it (the head of the chain) and ``hmac`` is
HMAC-SHA256 of that hash under a key the operator holds (``FORGE_LEDGER_HMAC_KEY``). The chain
is verified *before* sealing, so a seal never vouches for a chain that was already broken.

Without a key the chain detects accidents and naive edits (anyone can recompute SHA-256 hashes
after an edit); with a key, someone without it cannot rewrite history and re-seal it. An export
(YAML v1.2) of a sealed session carries a ``ledger:`` block with the seal's values;
:func:`verify_export` recomputes the session's chain in the store and checks that the export's
block matches the stored seal (and, when the YAML module offers an exporter, that the file's
content equals a fresh export).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import yaml

from ..clock import Clock
from ..domain.hashing import seal_hmac
from ..domain.json_fields import JsonFields
from ..errors import ChainBrokenError, ImportValidationError
from ..ledger import ChainReport, Ledger, verify_session
from ..untrusted.bounded_yaml import load_yaml, read_yaml_file

__all__ = ["ExportReport", "check_stored_chain", "seal_session", "verify_export"]


def seal_session(
    ledger: Ledger, session_id: UUID | str, *, clock: Clock, key: bytes | None = None
) -> ChainReport:
    """Verify the chain of a terminal session, then append its seal; returns the new report.

    Refuses (``InvariantViolation``) a session that is still live or already sealed, and
    (``ChainBrokenError``) one whose chain does not verify. An empty key counts as no key.
    """
    sid = ledger.resolve(session_id)
    agg = ledger.get(sid)
    state = agg.state
    agg.require_sealable()
    before = verify_session(ledger, sid)
    if not before.ok:
        raise ChainBrokenError(
            f"session {sid} cannot be sealed: its chain is broken at position "
            f"{before.position}: {before.problem}",
            hint="restore the store from a backup before sealing",
        )
    if before.head_hash != state.head_hash or before.events != state.version:
        raise ChainBrokenError(
            f"session {sid} cannot be sealed: the stored chain head does not match the "
            "session's state",
            hint="run 'forge-ledger verify' and restore the store from a backup",
        )
    agg.seal(at=clock.now(), hmac=seal_hmac(key, state.head_hash))
    ledger.save(agg)
    return verify_session(ledger, sid, key=key or None)


# --------------------------------------------------------------------------- exports


@dataclass
class ExportReport(JsonFields):
    """The outcome of checking one export file against the store."""

    json_keys = ("path", "session_id", "ok", ...)

    path: str
    session_id: str | None = None
    chain: ChainReport | None = None
    block_ok: bool = False
    hmac_ok: bool | None = None
    content_checked: bool = False
    content_ok: bool | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            not self.problems
            and self.chain is not None
            and self.chain.ok
            and self.block_ok
            and self.hmac_ok is not False
            and self.content_ok is not False
        )


Exporter = Callable[[Ledger, UUID], str]


def _fresh_export(ledger: Ledger, session_id: UUID) -> str:
    """A fresh YAML export of the stored session, to compare a file's content with."""
    from ..yaml_format import export_events

    return export_events(list(ledger.events(session_id)))


def _load(path: Path) -> dict[str, Any]:
    try:
        text = read_yaml_file(path)
    except UnicodeDecodeError:
        raise ImportValidationError(f"{path} is not UTF-8 text") from None
    except OSError as e:
        raise ImportValidationError(
            f"cannot read {path}: {e.strerror or e}", hint="check the file path"
        ) from None
    try:
        doc = load_yaml(text, name=str(path))
    except yaml.YAMLError as e:
        raise ImportValidationError(
            f"{path} is not valid YAML: {str(e).splitlines()[0]}",
            hint="pass a session export file",
        ) from None
    if not isinstance(doc, dict):
        raise ImportValidationError(f"{path} is not a session export (not a mapping)")
    return doc


def check_stored_chain(
    ledger: Ledger, report: ExportReport, session: str, key: bytes | None
) -> UUID:
    """The part of checking a file derived from a session that is the store's own: resolve
    the session the file names and verify its chain, noting a break in ``report``."""
    sid = ledger.resolve(session)
    report.session_id = str(sid)
    report.chain = verify_session(ledger, sid, key=key or None)
    if not report.chain.ok:
        report.problems.append(
            f"the stored chain is broken at position {report.chain.position}: "
            f"{report.chain.problem}"
        )
    return sid


def verify_export(
    ledger: Ledger,
    yaml_path: str | Path,
    key: bytes | None = None,
    *,
    exporter: Exporter | None = None,
) -> ExportReport:
    """Check an export's ``ledger:`` block against the recomputed chain and seal in the store.

    A file without a ``ledger`` block (an unsealed session's export) or naming no session is an
    :class:`~forge_ledger.errors.ImportValidationError`; every other mismatch is reported in
    ``problems`` (``ok`` is then false). ``exporter`` (default: the YAML module's
    ``export_events`` over the session's events) produces a fresh export whose parsed
    content must equal the file's.
    """
    path = Path(yaml_path)
    doc = _load(path)
    report = ExportReport(path=str(path))
    block = doc.get("ledger")
    if not isinstance(block, dict) or not block.get("session_id"):
        raise ImportValidationError(
            f"{path} has no 'ledger' block with a session_id",
            hint="only exports of sealed sessions carry one; seal the session and export again",
        )
    sid = check_stored_chain(ledger, report, str(block["session_id"]), key)
    seal = ledger.state(sid).seal
    if seal is None:
        report.problems.append("the session is not sealed in the store")
    else:
        for name in ("root_hash", "events", "hmac"):
            if block.get(name) != seal.get(name):
                report.problems.append(
                    f"ledger.{name} in the export ({block.get(name)!r}) differs from the "
                    f"store's seal ({seal.get(name)!r})"
                )
        report.block_ok = not any(p.startswith("ledger.") for p in report.problems)
    if key:
        mac = block.get("hmac")
        root = block.get("root_hash")
        report.hmac_ok = isinstance(mac, str) and isinstance(root, str) and (
            mac == seal_hmac(key, root)
        )
        if not report.hmac_ok:
            report.problems.append("the export's HMAC does not match its root hash under the key")
    fresh = exporter or _fresh_export
    if fresh is not None:
        report.content_checked = True
        try:
            current = yaml.safe_load(fresh(ledger, sid))
        except Exception as e:  # the exporter is another module's code: report, don't crash
            report.content_ok = False
            report.problems.append(f"cannot produce a fresh export to compare: {e}")
        else:
            report.content_ok = current == doc
            if not report.content_ok:
                report.problems.append(
                    "the export's content differs from a fresh export of the session"
                )
    return report
