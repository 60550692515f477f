"""What a study's record gives: its tables of metrics, their files, and the study report.

Each is a pure function of the store (and of the study event it is asked as of): the tables
come from :func:`forge_ledger.study.tables.study_tables`, the aggregates from
:func:`forge_ledger.study.summary.summarize`, the page from
:func:`forge_ledger.report.render_study_html`; nothing reads the clock, so the same store
gives the same bytes. None calls a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from uuid import UUID

from ..errors import ConfigError
from .records import _report_libraries, _write, report, report_file_name
from .stores import Store, opened

if TYPE_CHECKING:
    from ..ledger import Ledger
    from ..report._study import StudyReportModel
    from ..study.exports import Format
    from ..study.state import StudyState
    from ..study.tables import StudyTables

__all__ = ["StudyPage", "study_export", "study_report", "study_tables"]

Table = Literal["sessions", "participants"]


def _state(ledger: Ledger, study: str | UUID, at_event: int | None) -> StudyState:
    from ..study import StudyStream

    stream = StudyStream(ledger)
    sid = stream.resolve(study)
    if at_event is not None:
        head = stream.state(sid).version
        if not 1 <= at_event <= head:
            raise ConfigError(
                f"--at-event {at_event} is out of range", hint=f"the study has events 1..{head}"
            )
    return stream.state(sid, at_event=at_event)


def study_tables(store: Store, study: str | UUID, *, at_event: int | None = None) -> StudyTables:
    """The study's tables (one row per session, one per participant and session), now or
    as of its event ``at_event``."""
    from ..study.tables import study_tables as tables

    with opened(store, create=False) as ledger:
        return tables(ledger, _state(ledger, study, at_event))


def study_export(
    store: Store,
    study: str | UUID,
    *,
    table: Table = "sessions",
    fmt: Format = "csv",
    path: Path | None = None,
    at_event: int | None = None,
) -> bytes:
    """One of the study's tables as a file's bytes (written to ``path`` when given)."""
    from ..audit.metrics import ParticipantMetrics, SessionMetrics
    from ..study.exports import table_bytes

    tables = study_tables(store, study, at_event=at_event)
    if table == "sessions":
        data = table_bytes(tables.sessions, SessionMetrics, fmt)
    else:
        data = table_bytes(tables.participants, ParticipantMetrics, fmt)
    if path is not None:
        _write(path, data)
    return data


@dataclass(frozen=True)
class StudyPage:
    """The study report: what it shows, the page, where it was written, and the session
    reports written beside it."""

    model: StudyReportModel
    html: str
    path: Path
    session_reports: tuple[Path, ...] = ()


def _model(ledger: Ledger, state: StudyState, command: str) -> StudyReportModel:
    from ..report._study import CellLine, StudyReportModel
    from ..study import StudyStream
    from ..study.summary import summarize
    from ..study.tables import study_tables as tables

    t = tables(ledger, state)
    summary = summarize(state.plan, t.sessions)
    rows = {r.cell: r for r in t.sessions}
    lines = []
    for c in state.cells.values():
        row = rows.get(c.spec.id)
        slug = t.slugs.get(row.session_id, "") if row is not None else ""
        lines.append(
            CellLine(
                cell=c.spec.id,
                arm=state.plan.arm(c.spec),
                topic=f"t{c.spec.topic + 1}",
                title=state.plan.topics[c.spec.topic].title,
                status=c.status,
                outcome=c.outcome,
                session_id=c.session_id,
                report_file=report_file_name(slug, row.session_id) if row is not None else None,
                converged=row.converged if row is not None else None,
                rounds=row.rounds if row is not None else None,
                cost_usd=row.cost_usd if row is not None else None,
                parent_cell=c.spec.parent,
                outcome_changed=row.outcome_changed if row is not None else None,
                similarity_to_parent=row.similarity_to_parent if row is not None else None,
            )
        )
    head = StudyStream(ledger).state(UUID(state.id))
    return StudyReportModel(
        study_id=state.id,
        name=state.name,
        status=state.status,
        as_of_event=state.version,
        total_events=head.version,
        head_hash=state.head_hash,
        cells_total=len(state.cells),
        counts={k: state.count(k) for k in ("done", "failed", "paused", "running", "pending")},
        spent_usd=round(state.spent_usd, 6),
        arms=summary.arms,
        differences=summary.differences,
        influence=summary.influence,
        cells=tuple(lines),
        command=command,
    )


def study_report(
    store: Store,
    study: str | UUID,
    *,
    path: Path,
    at_event: int | None = None,
    sessions: bool = False,
) -> StudyPage:
    """The study as one self-contained HTML page at ``path`` (as of its event ``at_event``);
    with ``sessions``, each cell's session report too, beside it under the name the page
    links to."""
    with _report_libraries():
        from ..report._study import render_study_html
    with opened(store, create=False) as ledger:
        state = _state(ledger, study, at_event)
        at = f" --at-event {at_event}" if at_event is not None else ""
        command = f"forge-ledger study report {state.id[:8]}{at} -o {path.name} --sessions"
        model = _model(ledger, state, command)
        html = render_study_html(model)
        _write(path, html)
        written = []
        if sessions:
            for line in model.cells:
                if line.session_id is not None and line.report_file is not None:
                    target = path.parent / line.report_file
                    report(ledger, line.session_id, path=target)
                    written.append(target)
    return StudyPage(model=model, html=html, path=path, session_reports=tuple(written))
