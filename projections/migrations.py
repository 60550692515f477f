"""Schema of the read-model database, as sqlite-utils migrations.

The read model lives in its own SQLite file beside the event store. Its schema evolves through
``sqlite_utils.Migrations`` (sqlite-utils 4): each function below runs once per database, in a
transaction, and is recorded in ``_sqlite_migrations``. A projection's *content* is versioned
separately (``Projection.version``): bumping it empties the projection's tables and refolds
them from event zero, without touching the schema.

Foreign keys are declared so Datasette links rows (contributions → rounds → sessions …); JSON
values are stored as text (canonical JSON, so rebuilds are byte-identical).
"""

from __future__ import annotations

from typing import Any

from sqlite_utils import Database, Migrations

__all__ = ["MIGRATIONS", "STUDY_SCHEMA", "TABLE_KEYS", "migrate"]

MIGRATIONS = Migrations("forge-ledger-views")

TABLE_KEYS: dict[str, str] = {}
"""table → primary-key column, for the runner's upserts."""


def _table(
    db: Database,
    name: str,
    columns: dict[str, Any],
    *,
    fks: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    indexes: tuple[tuple[str, ...], ...] = (),
) -> None:
    db[name].create(columns, pk="id", foreign_keys=list(fks))  # type: ignore[union-attr]
    for cols in indexes:
        db[name].create_index(list(cols))  # type: ignore[union-attr]


_SCHEMA: dict[str, dict[str, Any]] = {
    "sessions": {
        "columns": {
            "id": str, "slug": str, "title": str, "description": str, "output_type": str,
            "status": str, "status_reason": str, "phase": str, "iteration": int, "events": int,
            "tokens_in": int, "tokens_out": int, "cost_usd": float, "parent_id": str,
            "parent_position": int, "source": str, "config_json": str, "head_hash": str,
            "created_at": str, "updated_at": str,
        },
        "fks": [("parent_id", "sessions", "id")],
    },
    "participants": {
        "columns": {
            "id": str, "session_id": str, "name": str, "model": str, "provider": str,
            "role": str, "joined_position": int, "participant_json": str,
        },
        "fks": [("session_id", "sessions", "id")],
        "indexes": (("session_id",),),
    },
    "rounds": {
        "columns": {
            "id": str, "session_id": str, "number": int, "kind": str, "iteration": int,
            "depth": int, "focus": str, "technique": str, "status": str, "superseded": int,
            "expected_json": str, "targets_json": str, "abstained_json": str,
            "started_position": int, "started_at": str, "completed_at": str,
        },
        "fks": [("session_id", "sessions", "id")],
        "indexes": (("session_id", "number"),),
    },
    "contributions": {
        "columns": {
            "id": str, "session_id": str, "round_id": str, "participant_id": str,
            "participant": str, "round": int, "position": int, "attempt": int, "purpose": str,
            "model": str, "content": str, "messages_json": str, "prompt_hash": str,
            "stop_reason": str, "duration_ms": int, "tokens_in": int, "tokens_out": int,
            "cost_usd": float, "at": str,
        },
        "fks": [
            ("session_id", "sessions", "id"),
            ("round_id", "rounds", "id"),
            ("participant_id", "participants", "id"),
        ],
        "indexes": (("session_id", "position"), ("round_id",)),
    },
    "critiques": {
        "columns": {
            "id": str, "session_id": str, "round_id": str, "participant_id": str,
            "contribution_id": str, "participant": str, "target": str, "score": int,
            "strengths_json": str, "weaknesses_json": str, "position": int,
        },
        "fks": [
            ("session_id", "sessions", "id"),
            ("round_id", "rounds", "id"),
            ("participant_id", "participants", "id"),
            ("contribution_id", "contributions", "id"),
        ],
        "indexes": (("session_id",),),
    },
    "suggestions": {
        "columns": {
            "id": str, "critique_id": str, "session_id": str, "participant_id": str,
            "idx": int, "text": str, "section": str, "priority": int, "category": str,
        },
        "fks": [
            ("critique_id", "critiques", "id"),
            ("session_id", "sessions", "id"),
            ("participant_id", "participants", "id"),
        ],
        "indexes": (("critique_id",),),
    },
    "votes": {
        "columns": {
            "id": str, "session_id": str, "round_id": str, "participant_id": str,
            "contribution_id": str, "participant": str, "round": int, "agrees": int,
            "stance": str, "score": int, "concerns_json": str, "reasoning": str, "position": int,
        },
        "fks": [
            ("session_id", "sessions", "id"),
            ("round_id", "rounds", "id"),
            ("participant_id", "participants", "id"),
            ("contribution_id", "contributions", "id"),
        ],
        "indexes": (("session_id", "round"),),
    },
    "costs": {
        "columns": {
            "id": str, "session_id": str, "round_id": str, "participant_id": str,
            "participant": str, "kind": str, "attempt": int, "model": str, "tokens_in": int,
            "tokens_out": int, "cost_usd": float, "price_in": float, "price_out": float,
            "price_source": str, "position": int, "at": str,
        },
        "fks": [
            ("session_id", "sessions", "id"),
            ("round_id", "rounds", "id"),
            ("participant_id", "participants", "id"),
        ],
        "indexes": (("session_id", "participant"),),
    },
    "divergences": {
        "columns": {
            "id": str, "session_id": str, "divergence_id": str, "round_id": str, "topic": str,
            "strongest": str, "strong": int, "status": str, "opened_round": int,
            "opened_position": int, "addressed_position": int, "closed_position": int,
            "closed_by": str, "positions_json": str,
        },
        "fks": [("session_id", "sessions", "id"), ("round_id", "rounds", "id")],
        "indexes": (("session_id", "status"),),
    },
    "divergence_positions": {
        "columns": {
            "id": str, "divergence_id": str, "session_id": str, "participant_id": str,
            "participant": str, "stance": str, "position_text": str,
        },
        "fks": [
            ("divergence_id", "divergences", "id"),
            ("session_id", "sessions", "id"),
            ("participant_id", "participants", "id"),
        ],
        "indexes": (("participant",),),
    },
    "divergence_events": {
        "columns": {
            "id": str, "divergence_id": str, "session_id": str, "status": str,
            "position": int, "round": int, "note": str, "by": str,
        },
        "fks": [("divergence_id", "divergences", "id"), ("session_id", "sessions", "id")],
        "indexes": (("divergence_id",),),
    },
    "consensus_trail": {
        "columns": {
            "id": str, "session_id": str, "round_id": str, "participant_id": str,
            "participant": str, "round": int, "iteration": int, "stance": str, "agrees": int,
            "score": int, "concerns_json": str, "previous_round": int, "previous_stance": str,
            "changed": int, "preceded_by_round": int, "preceded_by_kind": str,
            "preceded_by_position": int, "new_arguments": int, "reasoning_changed": int,
            "conformity": int, "weighted_score": float, "majority_agrees": int,
            "vote_position": int,
        },
        "fks": [
            ("session_id", "sessions", "id"),
            ("round_id", "rounds", "id"),
            ("participant_id", "participants", "id"),
        ],
        "indexes": (("session_id", "round"),),
    },
    "session_states": {
        "columns": {
            "id": str, "status": str, "iteration": int, "version": int, "head_hash": str,
            "state_json": str,
        },
        "fks": [("id", "sessions", "id")],
    },
}

for _name in _SCHEMA:
    TABLE_KEYS[_name] = "id"


@MIGRATIONS(name="m001_tracking")
def m001_tracking(db: Database) -> None:
    """The runner's tracking table: one row per projection (name, version, position)."""
    db["_projections"].create(  # type: ignore[union-attr]
        {"name": str, "version": int, "position": int}, pk="name"
    )


@MIGRATIONS(name="m002_views")
def m002_views(db: Database) -> None:
    """The read-model tables (created in dependency order so foreign keys resolve)."""
    for name, spec in _SCHEMA.items():
        _table(db, name, spec["columns"], fks=spec.get("fks", []),
               indexes=spec.get("indexes", ()))


@MIGRATIONS(name="m003_contributions_fts")
def m003_contributions_fts(db: Database) -> None:
    """Full-text search on contribution texts, kept in sync by triggers."""
    db["contributions"].enable_fts(["content"], create_triggers=True)  # type: ignore[union-attr]


SESSION_SUMMARY_COLUMNS: dict[str, Any] = {
    "id": str, "status": str, "status_reason": str, "phase": str, "iteration": int,
    "version": int, "head_hash": str, "participants": int, "rounds": int, "contributions": int,
    "failures": int, "divergences": int, "open_divergences": int, "pending_questions": int,
    "last_round": int, "last_round_kind": str, "last_round_status": str,
    "convergence_round": int, "convergence_score": float, "convergence_threshold": float,
    "converged": int, "majority_agrees": int, "tokens_in": int, "tokens_out": int,
    "cost_usd": float, "updated_at": str,
}


@MIGRATIONS(name="m004_session_summary")
def m004_session_summary(db: Database) -> None:
    """``session_states`` becomes a summary row (no full-state JSON).

    Its rows are a projection (``session_state`` version 2 refolds them from the events), so
    the old table is dropped rather than converted.
    """
    db["session_states"].drop(ignore=True)
    _table(db, "session_states", SESSION_SUMMARY_COLUMNS, fks=[("id", "sessions", "id")])


SHOW_SESSION_COLUMNS: dict[str, Any] = {
    "ems": int, "convergence_json": str, "open_dissent_json": str,
}
"""What ``show`` prints of a session beyond its summary (``read_model`` version 2 fills them)."""

ROUND_LINES_COLUMNS: dict[str, Any] = {
    "id": str, "session_id": str, "round_id": str, "round": int, "idx": int,
    "participant": str, "tokens": int, "preview": str, "failed": int, "unpriced": int,
}
TABLE_KEYS["round_lines"] = "id"


@MIGRATIONS(name="m005_show")
def m005_show(db: Database) -> None:
    """What ``show`` prints, so it can read a session here: the session's EMS, latest
    convergence and open dissent, and one line per contribution of each round
    (``round_lines``, a fork's inherited rounds included)."""
    for name, kind in SHOW_SESSION_COLUMNS.items():
        db["sessions"].add_column(name, kind)  # type: ignore[union-attr]
    _table(db, "round_lines", ROUND_LINES_COLUMNS,
           fks=[("session_id", "sessions", "id"), ("round_id", "rounds", "id")],
           indexes=(("session_id", "round", "idx"),))


@MIGRATIONS(name="m006_participants_left")
def m006_participants_left(db: Database) -> None:
    """The position a participant left a fork at (``fork --without``); NULL while it takes
    part. ``show`` lists only those who take part."""
    db["participants"].add_column("left_position", int)  # type: ignore[union-attr]


STUDY_SCHEMA: dict[str, dict[str, Any]] = {
    "studies": {
        "columns": {
            "id": str, "name": str, "status": str, "stopped": str, "cells": int, "pending": int,
            "running": int, "paused": int, "done": int, "failed": int, "spent_usd": float,
            "calls": int, "budget_json": str, "events": int, "head_hash": str,
            "planned_at": str, "updated_at": str,
        },
    },
    "study_cells": {
        "columns": {
            "id": str, "study_id": str, "cell": str, "topic": int, "panel": str, "variant": str,
            "arm": str, "repeat": int, "parent_cell": str, "without": str, "status": str,
            "session_id": str, "parent_id": str, "outcome": str, "reason": str,
            "cost_usd": float, "calls": int,
        },
        "fks": [("study_id", "studies", "id"), ("session_id", "sessions", "id")],
        "indexes": (("study_id",), ("session_id",)),
    },
    "study_sessions": {
        "columns": {
            "id": str, "study_id": str, "study": str, "cell": str, "topic": str, "panel": str,
            "variant": str, "repeat": int, "session_id": str, "title": str, "status": str,
            "iterations": int, "rounds": int, "cost_usd": float, "input_tokens": int,
            "output_tokens": int, "tokens": int, "converged": int, "first_vote_majority": int,
            "final_vote_majority": int, "first_majority_is_final": int, "stance_changes": int,
            "conformity_flags": int, "conformity_rate": float, "dissents_opened": int,
            "dissents_resolved": int, "dissents_overruled": int, "dissents_withdrawn": int,
            "dissents_open": int, "self_preference": float, "parent_id": str,
            "fork_iteration": int, "without": str, "similarity_to_parent": float,
            "outcome_changed": int,
        },
        "fks": [
            ("study_id", "studies", "id"),
            ("session_id", "sessions", "id"),
            ("parent_id", "sessions", "id"),
        ],
        "indexes": (("study_id", "variant"), ("session_id",)),
    },
    "study_participants": {
        "columns": {
            "id": str, "study_id": str, "study": str, "cell": str, "topic": str, "panel": str,
            "variant": str, "repeat": int, "session_id": str, "participant": str, "model": str,
            "calls": int, "failed_calls": int, "cost_usd": float, "input_tokens": int,
            "output_tokens": int, "votes": int, "first_stance": str, "final_stance": str,
            "final_agrees": int, "stance_changes": int, "conformity_flags": int,
            "dissents_held": int, "self_preference": float,
        },
        "fks": [("study_id", "studies", "id"), ("session_id", "sessions", "id")],
        "indexes": (("study_id", "participant"), ("session_id",)),
    },
}
"""The study tables: each study, its cells, and ``study export``'s two tables (the columns
after ``session_id``/``study_id`` are the export's, in its order; a yes/no is 0/1, a list
JSON text). Filled by ``forge_ledger.app.study_views``, not by a projection of this package:
the rows are the audit's, which sits above the projections."""

for _name in STUDY_SCHEMA:
    TABLE_KEYS[_name] = "id"


@MIGRATIONS(name="m007_studies")
def m007_studies(db: Database) -> None:
    """The study tables (:data:`STUDY_SCHEMA`): ``studies``, ``study_cells`` (every cell,
    planned or not), ``study_sessions`` and ``study_participants`` (``study export``'s rows)."""
    for name, spec in STUDY_SCHEMA.items():
        _table(db, name, spec["columns"], fks=spec.get("fks", []),
               indexes=spec.get("indexes", ()))


DOCUMENT_COLUMNS: dict[str, Any] = {
    "id": str, "status": str, "iteration": int, "position": int, "agreed": int, "text": str,
}
"""Each session's document file as ``spec`` prints it (``id`` is the session's; ``text`` is
NULL while the session has no document)."""
TABLE_KEYS["documents"] = "id"


@MIGRATIONS(name="m008_documents")
def m008_documents(db: Database) -> None:
    """``documents``: the text of each session's document file (``read_model`` version 6
    fills it), so ``spec`` can print it from here."""
    _table(db, "documents", DOCUMENT_COLUMNS, fks=[("id", "sessions", "id")])


AUDIT_COLUMNS: dict[str, Any] = {
    "id": str, "version": int, "position": int, "head_hash": str, "markdown": str,
}
"""Each session's audit as ``audit`` prints it (``id`` is the session's), with the head it was
made at. Filled by ``forge_ledger.app.audit_views``: the audit sits above the projections."""
TABLE_KEYS["audits"] = "id"


@MIGRATIONS(name="m009_audits")
def m009_audits(db: Database) -> None:
    """``audits``: each session's audit in Markdown, with the session's head it was made at
    (see :data:`AUDIT_COLUMNS`)."""
    _table(db, "audits", AUDIT_COLUMNS, fks=[("id", "sessions", "id")])


def migrate(db: Database) -> None:
    """Apply every pending migration (idempotent)."""
    MIGRATIONS.apply(db)
