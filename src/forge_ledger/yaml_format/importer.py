"""Import: a YAML session file (v1.0 or v1.2) becomes a session of events.

The file is read with the bounded safe loader (:mod:`forge_ledger.untrusted.bounded_yaml`),
migrated, then validated; any error names the field's path and line and nothing is
written. The session is then built through the ``Deliberation`` aggregate (so its
invariants hold) and saved in one transaction:
``SessionStarted`` (source ``import``), the participants of the extension block, per history
entry an ``IterationRecorded`` with the questions asked and the answers given, the
techniques, the ideas, and a closing ``SessionImported`` with the fields no other event
carries (the panel history, the document, the last vote, the ``ledger:`` block). Exporting it
again reproduces the file in the exporter's normal form.

A file holds what was said, not how: no prompts, no call records, no model answers beyond the
document. :data:`REPLAY_GAP` says so in one line wherever an import is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from pydantic import ValidationError

from ..clock import Clock, IdSource
from ..domain import Deliberation
from ..domain import events as ev
from ..domain.json_fields import JsonFields
from ..domain.values import SessionConfig, Topic
from ..errors import ImportValidationError, Loc, validation_summary
from ..ledger import Ledger
from ..untrusted.bounded_yaml import load_yaml
from .lines import format_path, line_of, path_lines
from .migrate import migrate
from .schema import Extension, SessionFile

__all__ = ["REPLAY_GAP", "ImportResult", "build_import", "import_session", "parse_session_file"]

REPLAY_GAP = (
    "not replayable: a YAML file holds no prompts, model answers or call records; "
    "replay and verify need the original ledger (export --format ledger)"
)


@dataclass(frozen=True)
class ImportResult(JsonFields):
    """The session an import made, as ``import`` reports it."""

    session_id: str
    slug: str
    status: str
    iterations: int
    format_version: str
    participants: int
    has_document: bool
    lacks: str = REPLAY_GAP


def parse_session_file(text: str, *, source: str = "session file") -> tuple[SessionFile, str]:
    """Parse, migrate and validate; returns the v1.2 model and the version it was read as."""
    try:
        raw = load_yaml(text, name=source)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ImportValidationError(
            f"{source}: not valid YAML{where}: {problem}", hint="fix the YAML syntax"
        ) from None
    if not isinstance(raw, dict):
        raise ImportValidationError(
            f"{source}: expected a mapping with format_version and session",
            hint="see the YAML session format v1.2",
        )
    if raw.get("format_version") in (1.2, 1.0):
        raw["format_version"] = f"{raw['format_version']:.1f}"
    doc, version = migrate(raw)
    try:
        model = SessionFile.model_validate(doc)
    except ValidationError as e:

        def place(loc: Loc) -> str:
            line = line_of(path_lines(text), loc)
            return format_path(loc) + (f" (line {line})" if line is not None else "")

        raise ImportValidationError(
            f"{source}: {validation_summary(e, where=place, count_more=True)}",
            hint="fix that field and import again; nothing was written",
        ) from None
    return model, version


def _title(model: SessionFile) -> str:
    """The topic's title: an export made here carries it in ``ledger.title``; older files
    have only the slug."""
    title = (model.ledger or {}).get("title")
    if isinstance(title, str) and title.strip():
        try:
            return Topic(title=title).title
        except ValidationError:  # an unusable title is not worth refusing the file for
            pass
    return model.session.slug


def build_import(model: SessionFile, version: str, *, clock: Clock, ids: IdSource) -> Deliberation:
    """The aggregate (pending events, nothing saved) that reproduces the file."""
    s = model.session
    topic = Topic(title=_title(model))
    agg = Deliberation.start(
        session_id=ids.new_id(),
        topic=topic,
        config=SessionConfig(mode=s.mode, persona=s.persona),
        participants=[],
        at=clock.now(),
        source="import",
    )
    extension = model.forge_ledger or Extension()
    for p in extension.participants:
        agg.join(p, at=clock.now())
    for h in s.history:
        agg.record_import(ev.IterationRecorded.carrying(h), at=clock.now())
        if h.questions:
            agg.ask(h.questions, at=clock.now())
        for answer in h.responses:
            agg.human_input(author="human", text=answer, at=clock.now())
    for t in s.techniques_history:
        agg.suggest_technique(ev.TechniqueSuggested.carrying(t), at=clock.now())
    for idea in s.ideas:
        agg.record_import(
            ev.IdeaRecorded(idea_id=idea.id, content=idea.content, score=idea.score),
            at=clock.now(),
        )
    imported = ev.SessionImported.carrying(
        s,
        format_version=version,
        yaml_id=s.id,
        party_history=[r.model_dump() for r in s.party_history],
        panel_history=[r.model_dump() for r in s.panel_history],
        document=extension.document,
        vote=extension.vote,
        ledger=model.ledger,
    )
    agg.record_import(imported, at=clock.now())
    return agg


def import_session(
    ledger: Ledger, text: str, *, clock: Clock, ids: IdSource, source: str = "session file"
) -> ImportResult:
    """Validate ``text`` and store it as a new session (all events in one transaction)."""
    model, version = parse_session_file(text, source=source)
    agg = build_import(model, version, clock=clock, ids=ids)
    ledger.save(agg)
    return ImportResult(
        session_id=str(agg.id),
        slug=model.session.slug,
        status=model.session.status,
        iterations=len(model.session.history),
        format_version=version,
        participants=len(agg.state.participants),
        has_document=agg.state.latest_text is not None,
    )
