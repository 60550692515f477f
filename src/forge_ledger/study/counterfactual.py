"""Counterfactual variants: a variant whose cells fork the sessions of another variant.

A plan's variant is counterfactual when it names ``fork_of`` (a plain variant)::

    variants:
      base: {}
      no-dave: {fork_of: base, at_iteration: 1, without: dave}
      gpt: {fork_of: base, at_iteration: 1, models: ["dave=openai/gpt-4o"]}
      loo: {fork_of: base, at_iteration: 1, leave_one_out: true}

Each of its cells forks the session of the parent variant's cell with the same topic, panel
and repeat, as of the end of iteration ``at_iteration`` (1 by default), with one change:
``without`` drops a participant, ``models`` swaps models, any session setting overrides the
parent's; ``leave_one_out: true`` makes one cell per participant of the panel, each dropping
that one. The fork is made by :func:`forge_ledger.records.lineage.fork` (``fork --without``), then
resumed like any cell's session. A counterfactual cell runs only once its parent cell is done.

Pure: these functions read the plan, never the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..domain.values import Participant

__all__ = [
    "FORK_KEYS",
    "MODEL_SWAPS",
    "cell_count",
    "counterfactual_cells",
    "effective_variant",
    "fork_problems",
    "is_counterfactual",
    "plain_variants",
]


MODEL_SWAPS = "models"
"""The variant key that swaps models (``NAME=MODEL`` or bare ``MODEL``, as ``fork --swap``)."""

FORK_KEYS = ("fork_of", "at_iteration", "without", "leave_one_out")
"""The keys of a counterfactual variant; not session settings."""


def is_counterfactual(variant: Mapping[str, Any]) -> bool:
    return "fork_of" in variant


def plain_variants(variants: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The variants whose cells start their own sessions, in the plan's order."""
    return [name for name, v in variants.items() if not is_counterfactual(v)]


def effective_variant(variants: Mapping[str, Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The settings and model swaps a cell of ``name`` runs with: a counterfactual variant's
    over its parent's (the parent's swaps first), without the fork keys."""
    own = dict(variants[name])
    parent = variants.get(str(own.get("fork_of", "")))
    base = dict(parent) if parent is not None and is_counterfactual(own) else {}
    merged = {**base, **own}
    swaps = [*(base.get(MODEL_SWAPS) or []), *(own.get(MODEL_SWAPS) or [])]
    if swaps:
        merged[MODEL_SWAPS] = swaps
    return {k: v for k, v in merged.items() if k not in FORK_KEYS}


def counterfactual_cells(
    variants: Mapping[str, Mapping[str, Any]],
    panel: Sequence[Participant],
    parents: Mapping[str, str],
) -> list[tuple[str, str, str | None]]:
    """The counterfactual cells of one topic, panel and repeat, given its plain cells' ids
    by variant: (variant, parent cell id, participant dropped) each."""
    out: list[tuple[str, str, str | None]] = []
    for name, variant in variants.items():
        if not is_counterfactual(variant):
            continue
        parent = parents[str(variant["fork_of"])]
        if variant.get("leave_one_out"):
            out += [(name, parent, p.name) for p in panel]
        else:
            out.append((name, parent, variant.get("without")))
    return out


def cell_count(
    variants: Mapping[str, Mapping[str, Any]],
    panels: Mapping[str, Sequence[Participant]],
    topics: int,
    repeats: int,
) -> int:
    """How many cells the plan has (the even share of a USD budget divides by it)."""
    per_panel = 0
    for panel in panels.values():
        for v in variants.values():
            per_panel += len(panel) if v.get("leave_one_out") else 1
    return per_panel * topics * repeats


def fork_problems(
    variants: Mapping[str, Mapping[str, Any]], panels: Mapping[str, Sequence[Participant]]
) -> list[str]:
    """What is wrong with the plan's counterfactual variants, one line each."""
    problems: list[str] = []
    for name, v in variants.items():
        where = f"variants.{name}"
        if not is_counterfactual(v):
            problems += [
                f"{where}.{k}: only a counterfactual variant takes it; add fork_of: VARIANT"
                for k in FORK_KEYS
                if k in v
            ]
            continue
        problems += _one_fork_problems(where, v, variants, panels)
    return problems


def _one_fork_problems(
    where: str,
    v: Mapping[str, Any],
    variants: Mapping[str, Mapping[str, Any]],
    panels: Mapping[str, Sequence[Participant]],
) -> list[str]:
    problems: list[str] = []
    parent = v["fork_of"]
    plain = plain_variants(variants)
    if parent not in plain:
        problems.append(
            f"{where}.fork_of: {parent!r} is not a plain variant of the plan; "
            f"name one of: {', '.join(plain) or 'none'}"
        )
    k = v.get("at_iteration", 1)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        problems.append(f"{where}.at_iteration: give an iteration number, 1 or more")
    without = v.get("without")
    if without is not None and v.get("leave_one_out"):
        problems.append(f"{where}: give either without or leave_one_out, not both")
    elif without is not None:
        problems += [
            f"{where}.without: no participant named {without!r} in panel {key}"
            for key, panel in panels.items()
            if panel and without not in [p.name for p in panel]
        ]
    if without is not None or v.get("leave_one_out"):
        problems += [
            f"{where}: panel {key} keeps {len(panel) - 1} participant(s) when one leaves; "
            "a session needs at least 2"
            for key, panel in panels.items()
            if panel and len(panel) < 3
        ]
    return problems
