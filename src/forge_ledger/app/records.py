"""What is done with a session's record: fork it, seal it, verify it, audit it, replay it, write
it out (YAML export, document, HTML report), copy it to another store.

Each function takes the store (or an opened ledger) and then the session, like every
application function; none calls a model. The audit, the report's libraries, replay and the
lineage load only when their function runs.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..clock import Clock, IdSource, SystemClock
from ..errors import ConfigError, UsageError
from ..ledger import ChainReport, Ledger, verify_session
from .stores import Store, opened

if TYPE_CHECKING:
    from ..audit import AuditReport
    from ..audit.counterfactual import ForkComparison
    from ..ledger.copying import CopiedSession
    from ..records.replay import ReplayResult
    from ..report import ReportModel

__all__ = [
    "ReportPage",
    "audit",
    "copy",
    "export",
    "fork",
    "fork_comparison",
    "replay",
    "report",
    "report_file_name",
    "seal",
    "spec",
    "verify",
]


def fork(
    store: Store,
    session: str | UUID,
    *,
    at_iteration: int | None = None,
    at_event: int | None = None,
    model_swaps: Sequence[str] = (),
    without: Sequence[str] = (),
    config_overrides: Mapping[str, Any] | None = None,
    api_base: str | None = None,
    clock: Clock | None = None,
    ids: IdSource | None = None,
) -> UUID:
    """A new session from ``session`` as of the end of iteration ``at_iteration`` or event
    ``at_event`` (its head when neither is given), left paused, ``without`` the participants
    named there; see :func:`forge_ledger.records.lineage.fork`."""
    from ..records import lineage

    with opened(store) as ledger:
        return lineage.fork(
            ledger,
            session,
            at_iteration=at_iteration,
            at_event=at_event,
            model_swaps=model_swaps,
            without=without,
            config_overrides=config_overrides,
            api_base=api_base,
            clock=clock,
            ids=ids,
        )


def seal(
    store: Store, session: str | UUID, *, key: bytes | None = None, clock: Clock | None = None
) -> ChainReport:
    """Verify the chain of a finished session and append its seal (an HMAC of the root hash
    with ``key``); returns the chain as sealed."""
    from ..records.sealing import seal_session

    with opened(store) as ledger:
        return seal_session(ledger, session, clock=clock or SystemClock(), key=key)


def verify(
    store: Store, session: str | UUID, *, key: bytes | None = None, snapshots: bool = False
) -> ChainReport:
    """The session's hash chain recomputed (and its seal's HMAC checked with ``key``; its
    snapshots checked against the events with ``snapshots``)."""
    with opened(store) as ledger:
        return verify_session(ledger, ledger.resolve(session), key=key, snapshots=snapshots)


def audit(store: Store, session: str | UUID) -> AuditReport:
    """How consensus formed in the session (see :mod:`forge_ledger.audit`)."""
    from ..audit import audit_report

    with opened(store) as ledger:
        return audit_report(list(ledger.events(ledger.resolve(session))))


def replay(store: Store, session: str | UUID) -> ReplayResult:
    """The session re-run against its recorded answers, compared event by event (no model
    is called, nothing is written)."""
    from ..records.replay import replay_session

    with opened(store) as ledger:
        return replay_session(ledger, session)


def export(store: Store, session: str | UUID, *, path: Path | None = None) -> Path:
    """Write the session's YAML v1.2 file (to ``path``, by default beside the store)."""
    from ..yaml_format import write_export

    with opened(store) as ledger:
        return write_export(ledger, ledger.resolve(session), path=path)


def spec(store: Store, session: str | UUID, *, path: Path | None = None) -> Path:
    """Write the session's document file, under its header (to ``path``, by default beside
    the store)."""
    from ..records.spec import write_spec

    with opened(store) as ledger:
        return write_spec(ledger, ledger.state(session), path=path)


@dataclass(frozen=True)
class ReportPage:
    """The HTML report of a session: what it shows, the page, and where it was written."""

    model: ReportModel
    html: str
    path: Path | None


@contextlib.contextmanager
def _report_libraries() -> Iterator[None]:
    """Around the import of the report's renderer: its libraries (Jinja, the charts) come with
    the ``report`` extra, and without it the user is told which to install, in one line."""
    try:
        yield
    except ModuleNotFoundError as e:
        raise ConfigError(
            f"the report needs the 'report' extra ({e.name} is not installed)",
            hint="pip install 'forge-ledger[report]'",
        ) from None


def report(
    store: Store,
    session: str | UUID,
    *,
    at_iteration: int | None = None,
    path: Path | None = None,
    write: bool = True,
    key: bytes | None = None,
    checked_at: datetime | None = None,
) -> ReportPage:
    """The session as one self-contained HTML page (as of iteration ``at_iteration``), written
    to ``path`` (by default ``reports/`` beside the store) unless ``write`` is false. The page
    says whether the chain verified and the seal checked (its HMAC with ``key``)."""
    with _report_libraries():
        from ..report import gather, render_html
    with opened(store) as ledger:
        model = gather(
            ledger, session, at_iteration, key=key, checked_at=checked_at or SystemClock().now()
        )
        html = render_html(model)
        target = None
        if write:
            target = path or _report_path(ledger, model.slug, model.session_id, at_iteration)
    if target is not None:
        _write(target, html)
    return ReportPage(model=model, html=html, path=target)


def report_file_name(slug: str, session_id: str, at_iteration: int | None = None) -> str:
    """The file name of a session's report (the study report links to it by this name)."""
    safe = re.sub(r"[^a-z0-9-]+", "-", slug.lower()).strip("-")[:60] or "session"
    suffix = f"-it{at_iteration}" if at_iteration is not None else ""
    return f"{safe}-{session_id[:8]}{suffix}.html"


def _report_path(ledger: Ledger, slug: str, session_id: str, at_iteration: int | None) -> Path:
    from ..ledger.outputs import store_outputs

    return store_outputs(ledger.location).reports / report_file_name(slug, session_id, at_iteration)


def _write(target: Path, html: str | bytes) -> None:
    """Write atomically: a reader never sees half a page."""
    from ..ledger.outputs import write_output

    try:
        write_output(target, html)
    except OSError as e:
        raise UsageError(
            f"cannot write {target}: {e.strerror or e}", hint="choose another file with -o"
        ) from None


Progress = Callable[[int, int, "CopiedSession"], None]
"""Told after each session copied: how many are done, of how many, and that one."""


def copy(
    store: Store,
    sessions: Sequence[str | UUID],
    to: Store,
    *,
    progress: Progress | None = None,
) -> list[CopiedSession]:
    """Copy ``sessions`` (a fork with its ancestors) from ``store`` to ``to``, event for event,
    every hash kept. A store given by name is opened read-only; ``to`` is created if missing."""
    from ..ledger.copying import copy_sessions

    with _read_only(store) as source:
        ids = list(dict.fromkeys(source.resolve(s) for s in sessions))
        with opened(to, create=True) as target:
            return copy_sessions(source, target, ids, progress=progress)


@contextlib.contextmanager
def _read_only(store: Store) -> Iterator[Ledger]:
    """The store sessions are copied from: one opened here is opened read-only (a copy never
    writes to it) and closed on exit; an open ledger is used as it is."""
    if isinstance(store, Ledger):
        yield store
        return
    with Ledger(store, create=False, snapshot_interval=0, read_only=True) as ledger:
        yield ledger


def fork_comparison(store: Store, a: str | UUID, b: str | UUID) -> ForkComparison | None:
    """When one of ``a`` and ``b`` is a fork of the other, the fork against its parent
    (:func:`forge_ledger.audit.compare_fork`, from each one's own events); else None."""
    from ..audit import compare_fork

    with opened(store) as ledger:
        ia, ib = ledger.resolve(a), ledger.resolve(b)
        for parent, child in ((ia, ib), (ib, ia)):
            origin = ledger.state(child).fork_origin
            if origin is not None and origin.parent_id == str(parent):
                return compare_fork(list(ledger.events(parent)), list(ledger.events(child)))
    return None
