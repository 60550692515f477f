"""The forged document as a file: provenance, writing it beside the store, checking it.

A document file is Markdown: a YAML front matter (topic, status, iteration, weighted score and
threshold, plain majority, open dissent count, session id, the event position and the head
hash there), one block-quoted paragraph saying whether the text was agreed (and, if not, the
open dissent), a blank line, then the document body exactly as the model wrote it. Everything
in it is a function of the session's events up to that position, so
:func:`verify_spec` re-renders it from the store and compares bytes: the head hash ties the
file to the chain. The text itself is rendered by
:mod:`forge_ledger.projections.document_file`, which the read model shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import ImportValidationError
from ..ledger.outputs import store_outputs, write_output
from ..projections.document_file import SPEC_FORMAT, render_spec, spec_header, verdict

if TYPE_CHECKING:
    from ..domain.state import SessionState
    from ..ledger import Ledger
    from ..projections.document import Answer, ContributionRef, DocumentLineage
    from ..yaml_format.storage import CleanupItem
    from .sealing import ExportReport

# Printing a document needs the state and YAML only: the lineage, the chain check and the
# file clean-up load when their function runs.

__all__ = [
    "SPEC_FORMAT",
    "cleanup_specs",
    "provenance_json",
    "read_front_matter",
    "render_provenance",
    "render_spec",
    "spec_header",
    "spec_path",
    "split_spec",
    "verify_spec",
    "write_spec",
]

_MAX_HEADER = 64 * 1024


def split_spec(text: str) -> tuple[str, str]:
    """(header part, body) of a rendered document file."""
    if not text.startswith("---\n"):
        raise ImportValidationError("not a forge-ledger document (no front matter)")
    end = text.find("\n---\n", 4, _MAX_HEADER)
    if end < 0:
        raise ImportValidationError("not a forge-ledger document (front matter not closed)")
    gap = text.find("\n\n", end + 5)
    if gap < 0:
        return text, ""
    return text[: gap + 2], text[gap + 2 :]


def read_front_matter(path: Path) -> dict[str, Any] | None:
    """The front matter of a document file, or None when it is not one."""
    try:
        with path.open(encoding="utf-8") as fh:
            head = fh.read(_MAX_HEADER)
        header, _ = split_spec(head)
        doc = yaml.safe_load(header.split("\n---\n", 1)[0][4:])
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ImportValidationError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != SPEC_FORMAT:
        return None
    return doc


def spec_path(ledger: Ledger, state: SessionState, directory: Path | None = None) -> Path:
    """``specs/{slug}.md`` beside the store, with the YAML exports' naming rule."""
    target = directory if directory is not None else store_outputs(ledger.location).specs

    def owns(path: Path) -> bool:
        doc = read_front_matter(path)
        return doc is not None and doc.get("session_id") == state.id

    from ..yaml_format.storage import session_file_path

    return session_file_path(target, state.slug, ".md", state.id, owns)


def write_spec(
    ledger: Ledger, state: SessionState, *, path: Path | None = None,
    directory: Path | None = None,
) -> Path:
    """Write ``state``'s document file (atomic replace); returns its path."""
    target = path if path is not None else spec_path(ledger, state, directory)
    return write_output(target, render_spec(state))


# --------------------------------------------------------------------------- provenance


_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _sup(n: int) -> str:
    return str(n).translate(_SUPERSCRIPT)


def _describe(ref: ContributionRef) -> str:
    return (f"{ref.participant} · {ref.kind.value} · round {ref.round} · iteration "
            f"{ref.iteration} · event {ref.position}")


@dataclass
class _Legend:
    """Marker numbers in the order things happened (event position), so the legend reads as
    a timeline and a larger number is always a later contribution or answer."""

    refs: dict[int, int]
    answers: dict[tuple[str, int, str], int]

    @classmethod
    def of(cls, lineage: DocumentLineage) -> _Legend:
        shown = {s.origin.position for s in lineage.sentences if s.text.strip()}
        shown |= {s.revisions[-1].contribution.position
                  for s in lineage.sentences if s.text.strip() and s.revisions}
        answers = sorted({(a.kind, a.position, a.text) for s in lineage.sentences
                          if s.text.strip() for a in s.answers}, key=lambda k: (k[1], k[0], k[2]))
        return cls({p: n for n, p in enumerate(sorted(shown), 1)},
                   {k: n for n, k in enumerate(answers, 1)})

    def ref(self, r: ContributionRef) -> int:
        return self.refs[r.position]


def render_provenance(state: SessionState, lineage: DocumentLineage) -> str:
    """The document with a marker after each sentence (⁽origin→last revision⁾, ✓ for an
    answer) and a legend of contributions, answers and dropped sentences."""
    legend = _Legend.of(lineage)
    by_pos: dict[int, ContributionRef] = {}
    parts: list[str] = []
    for s in lineage.sentences:
        body = s.text.rstrip()
        if not body:
            parts.append(s.text)
            continue
        by_pos[s.origin.position] = s.origin
        mark = _sup(legend.ref(s.origin))
        if s.revisions:
            last = s.revisions[-1].contribution
            by_pos[last.position] = last
            mark += "→" + _sup(legend.ref(last))
        for a in sorted(s.answers, key=lambda a: legend.answers[(a.kind, a.position, a.text)]):
            mark += " ✓" + _sup(legend.answers[(a.kind, a.position, a.text)])
        parts.append(f"{body} ⁽{mark}⁾{s.text[len(body):]}")
    title = (f"{' '.join(state.topic.title.split())} — session {state.id}, event "
             f"{state.version}, head hash {state.head_hash[:16]}…")
    out = [title, "\n".join(verdict(state)), "", "".join(parts).rstrip("\n"), "",
           "Contributions:"]
    for pos, n in sorted(legend.refs.items(), key=lambda x: x[1]):
        out.append(f"  {_sup(n)} {_describe(by_pos[pos])}")
    answers: dict[tuple[str, int, str], Answer] = {
        (a.kind, a.position, a.text): a for s in lineage.sentences for a in s.answers
    }
    if answers:
        out.append("Answers:")
        for key, n in sorted(legend.answers.items(), key=lambda x: x[1]):
            a = answers[key]
            what = f"{a.participant}'s suggestion" if a.kind == "suggestion" else (
                f"divergence {a.divergence_id} ({a.participant})")
            out.append(f"  ✓{_sup(n)} {what}, event {a.position}: {' '.join(a.text.split())}")
    if lineage.dropped:
        out.append("Dropped:")
        for d in lineage.dropped:
            out.append(f"  - {' '.join(d.text.split())[:100]} (from {d.origin.participant} "
                       f"event {d.origin.position}; dropped by {_describe(d.dropped_by)})")
    return "\n".join(out) + "\n"


def provenance_json(state: SessionState, lineage: DocumentLineage) -> dict[str, Any]:
    """``spec --provenance --json``: the header, the body, and every sentence's lineage."""
    doc = {k: v for k, v in spec_header(state).items() if k != "format"}
    dumped = lineage.model_dump(mode="json")
    doc["text"] = lineage.text
    doc["sentences"] = dumped["sentences"]
    doc["dropped"] = dumped["dropped"]
    return doc


# --------------------------------------------------------------------------- checking


def verify_spec(ledger: Ledger, path: str | Path, key: bytes | None = None) -> ExportReport:
    """Check a document file against the store: the chain verifies, the header's head hash
    is the chain's hash at the header's position, and the file is byte for byte what that
    position renders."""
    p = Path(path)
    doc = read_front_matter(p)
    if doc is None or not doc.get("session_id"):
        raise ImportValidationError(
            f"{p} is not a forge-ledger document", hint="pass a file written by 'forge-ledger spec'"
        )
    from .sealing import ExportReport, check_stored_chain

    report = ExportReport(path=str(p))
    sid = check_stored_chain(ledger, report, str(doc["session_id"]), key)
    position = doc.get("position")
    if not isinstance(position, int) or not 1 <= position <= ledger.head_version(sid):
        report.problems.append(f"position {position!r} is not an event of the session")
        return report
    state = ledger.state(sid, at_event=position)
    report.block_ok = doc.get("head_hash") == state.head_hash
    if not report.block_ok:
        report.problems.append(
            f"head_hash in the file ({doc.get('head_hash')!r}) differs from the chain's hash "
            f"at event {position} ({state.head_hash!r})"
        )
    report.content_checked = True
    report.content_ok = p.read_text("utf-8") == render_spec(state)
    if not report.content_ok:
        report.problems.append(f"the file's content differs from the document at event {position}")
    return report


def _finished_spec(path: Path) -> tuple[str, datetime] | None:
    doc = read_front_matter(path)
    if doc is None or doc.get("finished") is not True:
        return None
    try:
        updated = datetime.fromisoformat(str(doc.get("updated")))
    except ValueError:
        return None
    return (str(doc.get("status")), updated) if updated.tzinfo is not None else None


def cleanup_specs(
    directory: Path, *, now: datetime, days: int = 30, dry_run: bool = False
) -> list[CleanupItem]:
    """Remove document files of finished sessions not updated for ``days`` days."""
    from ..yaml_format.storage import remove_finished

    return remove_finished(directory, "*.md", _finished_spec, now=now, days=days,
                           dry_run=dry_run)
