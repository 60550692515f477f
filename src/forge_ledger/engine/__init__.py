"""The deliberation engine: pure rules over :class:`~forge_ledger.domain.state.SessionState`.

Nothing here reads a clock, randomness, the environment or the network, and nothing imports
litellm: given the same recorded events the engine always answers the same, which is what
makes replay and time travel trustworthy. The orchestrator asks :func:`next_step`, builds
prompts with :func:`build_messages`, parses answers with :func:`parse_output` and records
what :func:`after_round` plans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _lazy

if TYPE_CHECKING:
    from .anonymity import label_for, labels_before, review_labels
    from .budget import (
        budget_allows,
        cost_fields,
        cost_text,
        estimate_prompt_tokens,
        estimate_tokens,
        known_cost,
        output_ceiling,
        reserved_calls,
        worst_case_cost,
    )
    from .conformity import (
        Influence,
        StanceChange,
        conformity_flags,
        plain_majority,
        round_changes,
        stance_changes,
    )
    from .continuation import (
        CONTINUED_KINDS,
        MAX_CONTINUATIONS,
        continuation_allowance,
        continuation_messages,
        cut_off_reason,
        needs_continuation,
    )
    from .convergence import (
        DEFAULT_ROLE_WEIGHTS,
        STANCE_VALUES,
        convergence,
        role_weight,
        weighted_score,
    )
    from .divergence import plan_divergences
    from .least_budget import (
        FirstCall,
        first_call,
    )
    from .needs import answers_needed, fallback_author, round_shortfall
    from .outcomes import after_round
    from .parsing import ParsedOutput, output_schema, parse_output
    from .prompts import Prompt, build_messages, build_prompt, header, repair_messages
    from .steps import (
        AskHuman,
        BudgetStop,
        Finish,
        StartRound,
        Step,
        critique_targets,
        drafters,
        next_step,
        synthesizer,
    )

__getattr__, __dir__ = _lazy.exports(__name__, {
    "anonymity": ("label_for", "labels_before", "review_labels"),
    "budget": (
        "budget_allows",
        "estimate_prompt_tokens",
        "estimate_tokens",
        "worst_case_cost",
        "output_ceiling",
        "cost_fields",
        "cost_text",
        "known_cost",
        "reserved_calls",
    ),
    "conformity": (
        "Influence",
        "StanceChange",
        "conformity_flags",
        "plain_majority",
        "round_changes",
        "stance_changes",
    ),
    "continuation": (
        "CONTINUED_KINDS",
        "MAX_CONTINUATIONS",
        "continuation_allowance",
        "continuation_messages",
        "cut_off_reason",
        "needs_continuation",
    ),
    "convergence": (
        "DEFAULT_ROLE_WEIGHTS",
        "STANCE_VALUES",
        "convergence",
        "role_weight",
        "weighted_score",
    ),
    "divergence": ("plan_divergences",),
    "least_budget": ("FirstCall", "first_call"),
    "needs": ("answers_needed", "fallback_author", "round_shortfall"),
    "outcomes": ("after_round",),
    "parsing": ("ParsedOutput", "output_schema", "parse_output"),
    "prompts": ("Prompt", "build_messages", "build_prompt", "header", "repair_messages"),
    "steps": (
        "AskHuman",
        "BudgetStop",
        "Finish",
        "StartRound",
        "Step",
        "critique_targets",
        "drafters",
        "next_step",
        "synthesizer",
    ),
}, values=["convergence"])  # the function, not its module of the same name

__all__ = [
    "CONTINUED_KINDS",
    "DEFAULT_ROLE_WEIGHTS",
    "MAX_CONTINUATIONS",
    "STANCE_VALUES",
    "AskHuman",
    "BudgetStop",
    "Finish",
    "FirstCall",
    "Influence",
    "ParsedOutput",
    "Prompt",
    "StanceChange",
    "StartRound",
    "Step",
    "after_round",
    "answers_needed",
    "budget_allows",
    "build_messages",
    "build_prompt",
    "conformity_flags",
    "continuation_allowance",
    "continuation_messages",
    "convergence",
    "cost_fields",
    "cost_text",
    "critique_targets",
    "cut_off_reason",
    "drafters",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "fallback_author",
    "first_call",
    "header",
    "known_cost",
    "label_for",
    "labels_before",
    "needs_continuation",
    "next_step",
    "output_ceiling",
    "output_schema",
    "parse_output",
    "plain_majority",
    "plan_divergences",
    "repair_messages",
    "reserved_calls",
    "review_labels",
    "role_weight",
    "round_changes",
    "round_shortfall",
    "stance_changes",
    "synthesizer",
    "weighted_score",
    "worst_case_cost",
]
