"""A study plan: topics × panels × variants × repeats under one budget, checked in one pass.

The plan file is YAML (read through :mod:`forge_ledger.untrusted.bounded_yaml`); files it names
(participants files, topic files) are relative to the plan's folder. :func:`load_plan` reads
it and checks everything that can be known before a model is called, collecting every
problem, one line each, and raising them together as a
:class:`~forge_ledger.panel.preflight.PreflightError` (nothing is recorded then). The checks on
participants are the ones ``run`` makes (:func:`~forge_ledger.panel.preflight.check_participants`),
applied to every panel as each variant changes it.

What :func:`load_plan` returns is self-contained: the topics and participants are read in,
so the study's first event holds everything its cells need, and a study resumed later does
not depend on the files still being there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..domain.values import Participant, SessionConfig, Topic
from ..errors import ForgeLedgerError, dotted_loc
from ..panel.preflight import PreflightError, check_participants
from .counterfactual import (
    FORK_KEYS,
    MODEL_SWAPS,
    cell_count,
    counterfactual_cells,
    effective_variant,
    fork_problems,
    plain_variants,
)

__all__ = [
    "FORK_KEYS",
    "MODEL_SWAPS",
    "Budget",
    "CellSpec",
    "StudyPlan",
    "load_plan",
    "plan_from_document",
]


_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class _Plain(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Budget(_Plain):
    """The study-wide budget: none of its limits is required."""

    usd: Annotated[float, Field(gt=0)] | None = None
    """USD for every model call of every cell; each cell's session gets at most what is left
    (less what the cells running beside it may still spend), so the study never exceeds it."""
    calls: Annotated[int, Field(ge=1)] | None = None
    """Model calls; checked before each cell starts. A queued study's workers also reserve
    each call in the database, so together they never make more (a refused call pauses its
    session); in one process, a cell already running may end past it."""
    wall_secs: Annotated[int, Field(ge=1)] | None = None
    """Seconds from the study's planning; no cell starts after, and each session gets at most
    the time left as its ``max_time_secs``."""


class CellSpec(_Plain):
    """One cell: one session of one topic, panel and variant, the ``repeat``-th of them."""

    id: str
    topic: Annotated[int, Field(ge=0)]
    panel: str
    variant: str
    repeat: Annotated[int, Field(ge=1)]
    parent: str | None = None
    """A counterfactual cell's parent cell: the one whose session it forks."""
    without: str | None = None
    """The participant a counterfactual cell's fork drops."""


class StudyPlan(_Plain):
    """A checked plan, its files read in (see the module docstring)."""

    name: Annotated[str, Field(pattern=_NAME)]
    topics: Annotated[tuple[Topic, ...], Field(min_length=1)]
    panels: dict[Annotated[str, Field(pattern=_NAME)], tuple[Participant, ...]]
    variants: dict[Annotated[str, Field(pattern=_NAME)], dict[str, Any]]
    repeats: Annotated[int, Field(ge=1, le=10_000)] = 1
    session: dict[str, Any] = Field(default_factory=dict)
    budget: Budget = Budget()
    allow_unpriced: bool = False

    def cells(self) -> list[CellSpec]:
        """Every cell, repeat by repeat: a study stopped early has compared every variant
        about equally often. A counterfactual variant's cells follow their parents' (one
        per participant of the panel with ``leave_one_out``)."""
        plain = plain_variants(self.variants)
        out: list[CellSpec] = []
        for r in range(1, self.repeats + 1):
            for t in range(len(self.topics)):
                for panel in self.panels:
                    parents = {v: f"t{t + 1}/{panel}/{v}/{r}" for v in plain}
                    out += [
                        CellSpec(id=i, topic=t, panel=panel, variant=v, repeat=r)
                        for v, i in parents.items()
                    ]
                    forks = counterfactual_cells(self.variants, self.panels[panel], parents)
                    out += [
                        CellSpec(
                            id=f"t{t + 1}/{panel}/{self._arm(v, who)}/{r}",
                            topic=t,
                            panel=panel,
                            variant=v,
                            repeat=r,
                            parent=parent,
                            without=who,
                        )
                        for v, parent, who in forks
                    ]
        return out

    def _arm(self, variant: str, without: str | None) -> str:
        if without is not None and self.variants[variant].get("leave_one_out"):
            return f"{variant}-{without}"
        return variant

    def arm(self, cell: CellSpec) -> str:
        """The cell's arm, as tables and aggregates group it: its variant, and for a
        leave-one-out variant the participant it drops (``loo-dave``)."""
        return self._arm(cell.variant, cell.without)

    def effective(self, variant: str) -> dict[str, Any]:
        """The variant's settings and model swaps, over its parent's for a counterfactual one."""
        return effective_variant(self.variants, variant)

    def hold_usd(self, cell: CellSpec) -> float:
        """The most the cell's session may spend of the study's USD budget: the plan's
        ``max_cost_usd`` for it when set, else an even share of the budget."""
        variant = self.effective(cell.variant)
        return _hold(self.session, variant, self.budget, len(self.cells()))

    def session_of(self, cell: CellSpec) -> tuple[Topic, SessionConfig, list[Participant]]:
        """What the cell's session starts with: its topic, the plan's settings under its
        variant's, and its panel with the variant's model swaps."""
        variant = self.effective(cell.variant)
        return (
            self.topics[cell.topic],
            _config(self.session, variant),
            _participants(self.panels[cell.panel], variant),
        )


def _config(session: Mapping[str, Any], variant: Mapping[str, Any]) -> SessionConfig:
    skip = {MODEL_SWAPS, *FORK_KEYS}
    settings = {k: v for k, v in {**session, **variant}.items() if k not in skip}
    return SessionConfig.model_validate(settings)


def _hold(
    session: Mapping[str, Any], variant: Mapping[str, Any], budget: Budget, cells: int
) -> float:
    """The one rule of a cell's hold (see :meth:`StudyPlan.hold_usd`)."""
    if "max_cost_usd" in {**session, **variant} or budget.usd is None:
        return _config(session, variant).max_cost_usd
    return budget.usd / max(cells, 1)


def _participants(panel: Sequence[Participant], variant: Mapping[str, Any]) -> list[Participant]:
    from ..records.lineage import apply_model_swaps

    swaps = variant.get(MODEL_SWAPS) or []
    return apply_model_swaps(panel, swaps) if swaps else list(panel)


# --------------------------------------------------------------------------- reading


def _one_plain_variant() -> dict[str, dict[str, Any] | None]:
    """A plan without variants runs the plan's settings as they are."""
    return {"default": {}}


class _PlanFile(_Plain):
    """The plan as written (before its files are read)."""

    name: Annotated[str, Field(pattern=_NAME)]
    topics: Annotated[list[dict[str, Any]], Field(min_length=1)]
    panels: Annotated[dict[Annotated[str, Field(pattern=_NAME)], str], Field(min_length=1)]
    variants: dict[Annotated[str, Field(pattern=_NAME)], dict[str, Any] | None] = Field(
        default_factory=_one_plain_variant
    )
    repeats: Annotated[int, Field(ge=1, le=10_000)] = 1
    session: dict[str, Any] = Field(default_factory=dict)
    budget: Budget = Budget()
    allow_unpriced: bool = False

    def variants_given(self) -> dict[str, dict[str, Any]]:
        return {key: dict(v or {}) for key, v in self.variants.items()}


def load_plan(path: Path) -> StudyPlan:
    """Read and check the plan file ``path`` (see the module docstring)."""
    doc = _read_yaml(path, "plan")
    return plan_from_document(doc, base=path.parent, name=str(path))


def plan_from_document(doc: Any, *, base: Path, name: str = "plan") -> StudyPlan:
    """Check a plan already parsed (a notebook's dict); files are relative to ``base``."""
    try:
        written = _PlanFile.model_validate(doc)
    except ValidationError as e:
        raise PreflightError(
            [f"{name}: {dotted_loc(p['loc'])}: {p['msg']}" for p in e.errors()]
        ) from None
    problems: list[str] = []
    topics = list(_topics(written.topics, base, problems))
    panels = {key: _panel(key, file, base, problems) for key, file in written.panels.items()}
    variants = written.variants_given()
    problems += _settings_problems(written.session, variants)
    problems += fork_problems(variants, panels)
    effective = {key: effective_variant(variants, key) for key in variants}
    problems += _budget_problems(written, effective)
    problems += _panel_problems(written, topics, panels, effective)
    if problems:
        raise PreflightError(list(dict.fromkeys(f"{name}: {p}" for p in problems)))
    return StudyPlan(
        name=written.name,
        topics=tuple(topics),
        panels={k: tuple(v) for k, v in panels.items()},
        variants=variants,
        repeats=written.repeats,
        session=written.session,
        budget=written.budget,
        allow_unpriced=written.allow_unpriced,
    )


def _read_yaml(path: Path, role: str) -> Any:
    from ..untrusted.bounded_yaml import load_settings_file

    return load_settings_file(path, role)


def _topics(items: Sequence[dict[str, Any]], base: Path, problems: list[str]) -> Iterator[Topic]:
    """Each topic written inline, or each of a topics file's (``file: topics.yaml``, holding a
    list of topics or ``topics:`` and the list)."""
    for i, item in enumerate(items):
        if set(item) == {"file"}:
            yield from _topics_file(f"topics[{i}]", base / str(item["file"]), problems)
        else:
            yield from _topic(f"topics[{i}]", item, problems)


def _topics_file(where: str, path: Path, problems: list[str]) -> Iterator[Topic]:
    try:
        doc = _read_yaml(path, "topics")
    except ForgeLedgerError as e:
        problems.append(f"{where}: {e.one_line()}")
        return
    listed = doc.get("topics") if isinstance(doc, dict) else doc
    if not isinstance(listed, list) or not listed:
        problems.append(f"{where}: {path} holds no list of topics; write 'topics:' and a list")
        return
    for j, item in enumerate(listed):
        yield from _topic(f"{path}: topics[{j}]", item, problems)


def _topic(where: str, item: Any, problems: list[str]) -> Iterator[Topic]:
    try:
        yield Topic.model_validate(item)
    except ValidationError as e:
        problems += [f"{where}.{dotted_loc(p['loc'])}: {p['msg']}" for p in e.errors()]


def _panel(key: str, file: str, base: Path, problems: list[str]) -> list[Participant]:
    from ..panel.participants_file import load_participants

    try:
        return load_participants(base / file)
    except ForgeLedgerError as e:
        problems.append(f"panels.{key}: {e.one_line()}")
        return []


def _settings_problems(session: Mapping[str, Any], variants: Mapping[str, Any]) -> list[str]:
    """Unknown setting names, then settings a session would refuse, one line each."""
    known = set(SessionConfig.model_fields)
    names = f"known: {', '.join(sorted(known))}"
    problems = [f"session.{k}: unknown setting; {names}" for k in session if k not in known]
    for name, variant in variants.items():
        problems += [
            f"variants.{name}.{k}: unknown setting; {names}, {MODEL_SWAPS}, {', '.join(FORK_KEYS)}"
            for k in variant
            if k not in known and k not in (MODEL_SWAPS, *FORK_KEYS)
        ]
    if problems:
        return problems
    for name, variant in variants.items():
        try:
            _config(session, variant)
        except ValidationError as e:
            problems += [f"variants.{name}: {dotted_loc(p['loc'])}: {p['msg']}" for p in e.errors()]
    return problems


def _budget_problems(written: _PlanFile, variants: Mapping[str, Any]) -> list[str]:
    """A session allowed more than the whole study budget: no cell could ever start."""
    usd = written.budget.usd
    problems = []
    for name, variant in _valid_variants(written.session, variants).items():
        cap = {**written.session, **variant}.get("max_cost_usd")
        if usd is not None and cap is not None and float(cap) > usd:
            problems.append(
                f"variants.{name}: max_cost_usd {cap:g} is more than the study's budget.usd "
                f"{usd:g}, so no cell could start; give each session at most the budget"
            )
    return problems


def _valid_variants(session: Mapping[str, Any], variants: Mapping[str, Any]) -> dict[str, Any]:
    """The variants whose settings a session takes (the others are reported already)."""
    return {
        name: variant
        for name, variant in variants.items()
        if not _settings_problems(session, {name: variant})
    }


def _panel_problems(
    written: _PlanFile,
    topics: Sequence[Topic],
    panels: Mapping[str, list[Participant]],
    variants: Mapping[str, Any],
) -> list[str]:
    """``run``'s checks on every panel that could be read, as each valid variant makes it;
    under a USD budget, with the cell's hold as its ``max_cost_usd`` and the longest topic
    (the costliest first call)."""
    problems: list[str] = []
    usable = _valid_variants(written.session, variants)
    cells = cell_count(written.variants_given(), panels, len(topics), written.repeats)
    longest = max(topics, key=lambda t: len(t.model_dump_json()), default=None)
    for key, panel in panels.items():
        for name, variant in usable.items() if panel else ():
            where = f"panels.{key}" + (f" in variant {name}" if variant.get(MODEL_SWAPS) else "")
            given = frozenset({*written.session, *variant}) - {MODEL_SWAPS}
            config = _config(written.session, variant)
            if written.budget.usd is not None:
                given |= {"max_cost_usd"}
                hold = _hold(written.session, variant, written.budget, cells)
                config = config.model_copy(update={"max_cost_usd": hold})
                if "max_cost_usd" not in {**written.session, **variant}:
                    where += f" (each cell's share of budget.usd is ${hold:.4g})"
            try:
                check_participants(
                    _participants(panel, variant),
                    config,
                    given=given,
                    allow_unpriced=written.allow_unpriced,
                    topic=longest if written.budget.usd is not None else None,
                )
            except PreflightError as e:
                problems += [f"{where}: {p}" for p in e.problems]
            except ForgeLedgerError as e:
                problems.append(f"{where}: {e.one_line()}")
    return problems
