"""Document lineage: where each sentence of the forged document came from.

A pure, deterministic fold over a session's recorded contributions (no clock, no I/O): the same
state always gives the same lineage, live, replayed or as of any past position.

**Document versions.** The document is what :attr:`SessionState.document_source` names (the one
rule). Its successive versions are that rule applied to each prefix of the session's rounds
(rounds undone by a rewind are ignored): every time it names a new contribution, the document
has a new version.

**Segments.** A text is cut into sentences that cover it exactly (their concatenation is the
text): a Markdown heading, list item, table row, block quote line or line of a fenced block is
one segment; paragraph text is split after ``.``, ``!`` or ``?`` followed by white space.
Blank lines and trailing white space belong to the segment before them (leading white space to
the first). Segments are compared by their *key*: the text with white space collapsed, in
lower case.

**Alignment rule.** Between two successive versions, sentences with equal keys are first
matched in order (``difflib.SequenceMatcher`` over the key lists); then every sentence left on
either side is paired greedily, best first, with the remaining sentence of the other side whose
similarity is highest, if it is at least :data:`SIMILARITY_THRESHOLD` (0.6, difflib's own cutoff
for a "close match"). Similarity is ``2·LCS / (len a + len b)`` over the keys' characters (the
ratio difflib approximates), computed by rapidfuzz's ``Indel.normalized_similarity``: exact,
and fast enough to fold a 50-round session in milliseconds. A pair with equal
keys is the same sentence kept; a pair below equality is a **revision** by the new version (and
by the contribution in between that **proposed** it, when one holds a sentence closer to the new
text than the old one was); a new-version sentence left alone is **new**, and an old one left
alone is **dropped** by the new version.

**Origins.** A new sentence's origin is the earliest recorded contribution (draft, response,
refinement or synthesis, by anyone) holding a sentence with the same key; else, when it is
similar (ratio ≥ the threshold) to a sentence dropped by an earlier version, that sentence's
origin, and the new wording is a revision; else the contribution between the two versions
holding the most similar sentence; else the new version itself. Every origin is therefore a
contribution at or before the document's position.

**Answers.** A new or revised sentence *answers* a critique suggestion recorded before its
version and not answered yet, or a divergence open at the previous version (or opened since),
when at least :data:`ANSWER_COVERAGE` (half) of the suggestion's (or divergence topic's)
content words appear in the sentence and, for a revision, at least one of them is new to it.
Headings answer nothing (a heading names a subject, it does not settle it).
Content words: runs of ``[a-z0-9]`` of three letters or more, minus a short stop list.

:func:`document_versions`, :func:`document_at_iteration` and :func:`documents_by_iteration`
give the document's texts; :func:`fold_lineage` the lineage; :func:`document_diff` what
changed between two iterations, hunk by hunk, with who changed it and what it answered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Literal

from pydantic import BaseModel, ConfigDict
from rapidfuzz.distance import Indel

from forge_ledger.domain import SessionState
from forge_ledger.domain.state import ContributionState, RoundState, after_iteration
from forge_ledger.domain.values import RoundKind

__all__ = [
    "ANSWER_COVERAGE",
    "SIMILARITY_THRESHOLD",
    "Answer",
    "ContributionRef",
    "DiffHunk",
    "DocumentDiff",
    "DocumentLineage",
    "DocumentVersion",
    "DroppedSentence",
    "Revision",
    "Segment",
    "Sentence",
    "document_at_iteration",
    "document_diff",
    "document_versions",
    "documents_by_iteration",
    "fold_lineage",
    "segment",
]

SIMILARITY_THRESHOLD = 0.6
"""Minimum ``SequenceMatcher.ratio`` for two sentences to be the same sentence, revised."""
ANSWER_COVERAGE = 0.5
"""Share of a suggestion's (or divergence topic's) content words a sentence must contain."""

_TEXT_KINDS = frozenset(
    {RoundKind.DRAFT, RoundKind.RESPONSE, RoundKind.REFINEMENT, RoundKind.SYNTHESIS}
)
_STRUCTURAL = re.compile(r"^[ \t]{0,3}(#{1,6}[ \t]|[-*+][ \t]|\d{1,9}[.)][ \t]|\||>)")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_BOUNDARY = re.compile(r"[.!?]+[\"')\]*_`]*\s+")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    (
        "the", "and", "for", "are", "but", "not", "with", "this", "that", "from", "into", "onto",
        "its", "his", "her", "their", "our", "your", "you", "was", "were", "has", "have", "had",
        "can", "could", "should", "would", "will", "shall", "may", "might", "must", "all", "any",
        "each", "every", "than", "then", "there", "here", "what", "which", "who", "whom", "when",
        "where", "why", "how", "also", "just", "only", "own", "same", "such", "very", "too", "out",
        "off", "per", "via", "yet", "now", "one",
    )
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ContributionRef(_Model):
    """One recorded contribution, as the lineage names it."""

    participant: str
    round: int
    kind: RoundKind
    iteration: int
    position: int


class Answer(_Model):
    """A critique suggestion or a divergence that a change of the document answered."""

    kind: Literal["suggestion", "divergence"]
    participant: str
    """The critic, or the strongest dissenter of the divergence."""
    round: int
    position: int
    text: str
    """The suggestion's text, or the divergence's topic."""
    section: str | None = None
    divergence_id: str | None = None
    answered_by: ContributionRef


class Revision(_Model):
    """A later contribution that changed a sentence: ``rewrite`` (a new document version
    rewording it) or ``proposal`` (a contribution in between holding the new wording)."""

    change: Literal["rewrite", "proposal"]
    contribution: ContributionRef
    previous: str
    """The sentence before the change (white space collapsed)."""


class Sentence(_Model):
    text: str
    """Exactly ``document[start:end]``: the sentences cover the document."""
    start: int
    end: int
    origin: ContributionRef
    added_by: ContributionRef
    """The document version that put the sentence into the document."""
    revisions: list[Revision]
    answers: list[Answer]


class DroppedSentence(_Model):
    text: str
    origin: ContributionRef
    dropped_by: ContributionRef


class DocumentVersion(_Model):
    source: ContributionRef
    text: str


class DocumentLineage(_Model):
    source: ContributionRef | None
    text: str
    sentences: list[Sentence]
    dropped: list[DroppedSentence]


# --------------------------------------------------------------------------- segments


@dataclass(frozen=True)
class Segment:
    start: int
    end: int
    key: str


def _key(text: str) -> str:
    return " ".join(text.split()).lower()


def _unit_starts(text: str) -> list[int]:
    """Start offsets of every unit (structural line, fenced line, paragraph sentence)."""
    starts: list[int] = []
    pos = 0
    para: int | None = None
    in_fence = False
    for line in text.splitlines(keepends=True):
        start, pos = pos, pos + len(line)
        fence = bool(_FENCE.match(line))
        if in_fence or fence or not line.strip() or _STRUCTURAL.match(line):
            if para is not None:
                starts += _sentence_starts(text, para, start)
                para = None
            if fence:
                in_fence = not in_fence
            if line.strip() or in_fence or fence:
                starts.append(start)
        elif para is None:
            para = start
    if para is not None:
        starts += _sentence_starts(text, para, pos)
    return starts


def _sentence_starts(text: str, begin: int, end: int) -> list[int]:
    out = [begin]
    for m in _BOUNDARY.finditer(text, begin, end):
        if m.end() < end:
            out.append(m.end())
    return out


def segment(text: str) -> list[Segment]:
    """Cut ``text`` into sentences covering it exactly (see the module docstring)."""
    if not text:
        return []
    starts = sorted(set(_unit_starts(text)))
    if not starts or starts[0] != 0:
        starts = [0, *starts[1:]] if starts else [0]
    bounds = [*starts, len(text)]
    return [
        Segment(bounds[i], bounds[i + 1], _key(text[bounds[i] : bounds[i + 1]]))
        for i in range(len(starts))
    ]


# --------------------------------------------------------------------------- versions


def _ref(r: RoundState, c: ContributionState) -> ContributionRef:
    return ContributionRef(
        participant=c.participant,
        round=r.number,
        kind=r.kind,
        iteration=r.iteration,
        position=c.position,
    )


def document_versions(state: SessionState) -> list[DocumentVersion]:
    """Every text the document has had, oldest first (``document_source`` on each prefix)."""
    rounds = state.active_rounds
    out: list[DocumentVersion] = []
    last = -1
    for i in range(len(rounds)):
        found = state.model_copy(update={"rounds": rounds[: i + 1]}).document_source
        if found is not None and found[1].position != last:
            last = found[1].position
            out.append(DocumentVersion(source=_ref(*found), text=state.answer(found[1])))
    return out


def documents_by_iteration(state: SessionState) -> dict[int, str]:
    """The document's text at the end of each iteration that had one."""
    out: dict[int, str] = {}
    for v in document_versions(state):
        out[v.source.iteration] = v.text
    for k in sorted({r.iteration for r in state.active_rounds}):
        if k not in out and k - 1 in out:
            out[k] = out[k - 1]
    return dict(sorted(out.items()))


def document_at_iteration(state: SessionState, iteration: int) -> str | None:
    """The document's text at the end of ``iteration`` (None before any document)."""
    text: str | None = None
    for v in document_versions(state):
        if after_iteration(v.source.iteration, iteration):
            break
        text = v.text
    return text


# --------------------------------------------------------------------------- alignment


def _ratio(a: str, b: str) -> float:
    """2·LCS / (len a + len b), or 0 below the threshold (rapidfuzz's Indel similarity)."""
    return float(Indel.normalized_similarity(a, b, score_cutoff=SIMILARITY_THRESHOLD))


def _align(prev: Sequence[str], new: Sequence[str]) -> dict[int, int]:
    """new index → prev index (see the alignment rule in the module docstring)."""
    matches: dict[int, int] = {}
    left_prev: list[int] = []
    left_new: list[int] = []
    ops = SequenceMatcher(None, list(prev), list(new), autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            matches.update({j1 + d: i1 + d for d in range(i2 - i1)})
        else:
            left_prev += range(i1, i2)
            left_new += range(j1, j2)
    pairs: list[tuple[float, int, int]] = []
    for j in left_new:
        for i in left_prev:
            if new[j] and prev[i]:
                r = 1.0 if new[j] == prev[i] else _ratio(new[j], prev[i])
                if r >= SIMILARITY_THRESHOLD:
                    pairs.append((-r, j, i))
    used: set[int] = set()
    for _, j, i in sorted(pairs):
        if j not in matches and i not in used:
            matches[j] = i
            used.add(i)
    return matches


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _STOP)


# --------------------------------------------------------------------------- the fold


@dataclass
class _Line:
    key: str
    origin: ContributionRef
    added_by: ContributionRef
    revisions: list[Revision] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)


@dataclass(frozen=True)
class _Contribution:
    ref: ContributionRef
    keys: tuple[str, ...]


@dataclass(frozen=True)
class _Question:
    """A suggestion or divergence that a change could answer."""

    ident: str
    answer: Answer
    words: frozenset[str]
    opened: int
    closed: int | None


class _Fold:
    """The mutable accumulator of :func:`fold_lineage` (private, used once)."""

    def __init__(self, state: SessionState) -> None:
        self.contributions = _text_contributions(state)
        self.questions = _questions(state)
        self.answered: set[str] = set()
        self.first_seen: dict[str, ContributionRef] = {}
        self.indexed = 0
        self.lines: list[_Line] = []
        self.texts: list[str] = []
        self.gone: list[_Line] = []
        self.dropped: list[DroppedSentence] = []
        self.prev_pos = 0

    def index_before(self, position: int) -> None:
        while self.indexed < len(self.contributions):
            c = self.contributions[self.indexed]
            if c.ref.position >= position:
                return
            for k in c.keys:
                if k:
                    self.first_seen.setdefault(k, c.ref)
            self.indexed += 1

    def between(self, version: ContributionRef) -> list[_Contribution]:
        return [
            c
            for c in self.contributions
            if self.prev_pos < c.ref.position < version.position
        ]

    def step(self, version: DocumentVersion, texts: list[str]) -> None:
        ref = version.source
        self.index_before(ref.position)
        keys = [_key(t) for t in texts]
        prev_keys = [line.key for line in self.lines]
        matches = _align(prev_keys, keys)
        between = self.between(ref)
        lines: list[_Line] = []
        for j, key in enumerate(keys):
            i = matches.get(j)
            if i is None:
                line = self._new_line(key, between, ref)
            else:
                old = self.lines[i]
                line = _Line(key, old.origin, old.added_by, list(old.revisions), list(old.answers))
                if key != old.key:
                    self._revise(line, old.key, between, ref)
            lines.append(line)
        kept = set(matches.values())
        for i, old in enumerate(self.lines):
            if i not in kept:
                self.gone.append(old)
                self.dropped.append(
                    DroppedSentence(text=self.texts[i], origin=old.origin, dropped_by=ref)
                )
        self.lines, self.texts, self.prev_pos = lines, texts, ref.position

    def _new_line(
        self, key: str, between: Sequence[_Contribution], version: ContributionRef
    ) -> _Line:
        """A sentence the previous version did not hold: known verbatim, a dropped sentence
        brought back (revised), or new (see "Origins" in the module docstring)."""
        if key not in self.first_seen and key:
            best = (0.0, -1)
            for n, old in enumerate(self.gone):
                r = _ratio(key, old.key)
                if r >= SIMILARITY_THRESHOLD and (r, n) > best:
                    best = (r, n)
            if best[1] >= 0:
                old = self.gone.pop(best[1])
                line = _Line(key, old.origin, version, list(old.revisions), list(old.answers))
                self._revise(line, old.key, between, version)
                return line
        line = _Line(key, self._origin(key, between, version), version)
        self._answer(line, version, None)
        return line

    def _origin(
        self, key: str, between: Iterable[_Contribution], version: ContributionRef
    ) -> ContributionRef:
        if key in self.first_seen:
            return self.first_seen[key]
        best: tuple[float, int] = (0.0, 0)
        found = version
        for c in between:
            for k in c.keys:
                r = _ratio(key, k) if k else 0.0
                if r >= SIMILARITY_THRESHOLD and (r, -c.ref.position) > best:
                    best, found = (r, -c.ref.position), c.ref
        return found

    def _revise(
        self, line: _Line, previous: str, between: Iterable[_Contribution],
        version: ContributionRef,
    ) -> None:
        baseline = _ratio(line.key, previous)
        proposer: ContributionRef | None = None
        best = baseline
        for c in between:
            for k in c.keys:
                r = 1.0 if k == line.key else (_ratio(line.key, k) if k else 0.0)
                if r >= SIMILARITY_THRESHOLD and r > best:
                    best, proposer = r, c.ref
        if proposer is not None:
            line.revisions.append(Revision(change="proposal", contribution=proposer,
                                           previous=previous))
        line.revisions.append(Revision(change="rewrite", contribution=version, previous=previous))
        self._answer(line, version, previous)

    def _answer(self, line: _Line, version: ContributionRef, previous: str | None) -> None:
        if line.key.startswith("#"):
            return  # a heading names a subject; it answers nothing
        words = _words(line.key)
        gained = words - _words(previous) if previous is not None else words
        for q in self.questions:
            if q.ident in self.answered or q.opened >= version.position:
                continue
            if q.closed is not None and q.closed <= self.prev_pos:
                continue
            common = q.words & words
            if q.words and len(common) >= ANSWER_COVERAGE * len(q.words) and common & gained:
                line.answers.append(q.answer.model_copy(update={"answered_by": version}))
                self.answered.add(q.ident)


def _text_contributions(state: SessionState) -> list[_Contribution]:
    out: list[_Contribution] = []
    for r in state.active_rounds:
        if r.kind not in _TEXT_KINDS:
            continue
        for name in r.contributors:
            c = r.contribution_of(name)
            if c is not None and not c.abstained and not c.blank:
                keys = tuple(s.key for s in segment(state.answer(c)))
                out.append(_Contribution(_ref(r, c), keys))
    return sorted(out, key=lambda c: c.ref.position)


_NOBODY = ContributionRef.model_construct(
    participant="", round=0, kind=RoundKind.DRAFT, iteration=0, position=0
)
"""No one: built without validation, so loading this module builds no schema."""


def _questions(state: SessionState) -> list[_Question]:
    out: list[_Question] = []
    for r in state.active_rounds:
        for c in r.contributions:
            if c.critique is None:
                continue
            for n, s in enumerate(c.critique.suggestions):
                answer = Answer(kind="suggestion", participant=c.participant, round=r.number,
                                position=c.position, text=s.text, section=s.section,
                                answered_by=_NOBODY)
                out.append(_Question(f"s{c.position}.{n}", answer, _words(s.text), c.position,
                                     None))
    for d in state.divergences:
        closed = next((h.position for h in d.history if h.status.closed), None)
        dissenter = max(d.positions, key=lambda p: _STANCE_WEIGHT.get(p.stance.value, 0),
                        default=None)
        answer = Answer(kind="divergence", participant=dissenter.participant if dissenter else "",
                        round=d.opened_round, position=d.opened_position, text=d.topic,
                        divergence_id=d.id, answered_by=_NOBODY)
        out.append(_Question(f"d{d.id}", answer, _words(d.topic), d.opened_position, closed))
    return sorted(out, key=lambda q: (q.opened, q.ident))


_STANCE_WEIGHT = {"strongly_disagree": 4, "disagree": 3, "partial": 2}


def fold_lineage(state: SessionState) -> DocumentLineage:
    """The lineage of the document as of ``state`` (see the module docstring)."""
    versions = document_versions(state)
    if not versions:
        return DocumentLineage(source=None, text="", sentences=[], dropped=[])
    fold = _Fold(state)
    segments: list[Segment] = []
    for v in versions:
        segments = segment(v.text)
        fold.step(v, [v.text[s.start : s.end] for s in segments])
    last = versions[-1]
    sentences = [
        Sentence(
            text=last.text[s.start : s.end],
            start=s.start,
            end=s.end,
            origin=line.origin,
            added_by=line.added_by,
            revisions=line.revisions,
            answers=line.answers,
        )
        for s, line in zip(segments, fold.lines, strict=True)
    ]
    return DocumentLineage(
        source=last.source, text=last.text, sentences=sentences, dropped=fold.dropped
    )


# --------------------------------------------------------------------------- diff


class DiffHunk(_Model):
    header: str
    lines: list[str]
    changed_by: list[ContributionRef]
    answers: list[Answer]


class DocumentDiff(_Model):
    from_iteration: int
    to_iteration: int
    from_source: ContributionRef | None
    to_source: ContributionRef | None
    hunks: list[DiffHunk]


def _upto_iteration(state: SessionState, iteration: int) -> SessionState:
    return state.model_copy(update={"rounds": state.rounds_through(iteration)})


def _source_at(state: SessionState, iteration: int) -> ContributionRef | None:
    found = _upto_iteration(state, iteration).document_source
    return _ref(*found) if found is not None else None


def document_diff(state: SessionState, from_iteration: int, to_iteration: int) -> DocumentDiff:
    """What changed in the document between the ends of two iterations, as unified-diff hunks,
    each with the contributions that made the change and what it answered."""
    old = document_at_iteration(state, from_iteration) or ""
    lineage = fold_lineage(_upto_iteration(state, to_iteration))
    base = _source_at(state, from_iteration)
    since = base.position if base is not None else 0
    a = _lines(old)
    b = _lines(lineage.text)
    offsets = [0]
    for line in b:
        offsets.append(offsets[-1] + len(line))
    hunks: list[DiffHunk] = []
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        lines: list[str] = []
        touched: list[Sentence] = []
        removed: list[str] = []
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [" " + x for x in a[i1:i2]]
                continue
            lines += ["-" + x for x in a[i1:i2]] + ["+" + x for x in b[j1:j2]]
            removed += a[i1:i2]
            lo, hi = offsets[j1], offsets[j2]
            touched += [s for s in lineage.sentences if s.start < hi and s.end > lo]
        hunks.append(_hunk(group, lines, touched, _key("".join(removed)), lineage, since))
    return DocumentDiff(
        from_iteration=from_iteration,
        to_iteration=to_iteration,
        from_source=base,
        to_source=lineage.source,
        hunks=hunks,
    )


_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


def _lines(text: str) -> list[str]:
    """Lines as ``patch`` reads them: ended by ``\n`` only (``str.splitlines`` also ends one at
    U+2028, a form feed or a lone carriage return, which models do write mid-line)."""
    return _LINE.findall(text)


def _range(start: int, stop: int) -> str:
    """A unified-diff range: an empty side names the line before it (as ``diff -u`` does)."""
    return f"{start + 1 if stop > start else start},{stop - start}"


def _hunk(
    group: Sequence[tuple[str, int, int, int, int]],
    lines: list[str],
    touched: Sequence[Sentence],
    removed_key: str,
    lineage: DocumentLineage,
    since: int,
) -> DiffHunk:
    i1, i2 = group[0][1], group[-1][2]
    j1, j2 = group[0][3], group[-1][4]
    header = f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@"
    changed: dict[int, ContributionRef] = {}
    answers: dict[tuple[str, int, str], Answer] = {}
    for s in touched:
        for ref in [s.added_by, *(r.contribution for r in s.revisions)]:
            if ref.position > since:
                changed[ref.position] = ref
        for ans in s.answers:
            if ans.answered_by.position > since:
                answers[(ans.kind, ans.position, ans.text)] = ans
    for d in lineage.dropped:
        if d.dropped_by.position > since and _key(d.text) and _key(d.text) in removed_key:
            changed[d.dropped_by.position] = d.dropped_by
    return DiffHunk(
        header=header,
        lines=lines,
        changed_by=[changed[k] for k in sorted(changed)],
        answers=sorted(answers.values(), key=lambda x: (x.position, x.text)),
    )
