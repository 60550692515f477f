"""Examples for every command's ``--help``, in one place.

The command group (:data:`forge_ledger.cli.cli`) gives each command its examples as the help's
epilog when it loads the command, so ``--help`` and the documentation's CLI reference (which
sphinx-click builds from the same group) show the same lines. ``tests/cli/test_cli_examples.py``
runs every example's arguments through the command's own parser.
"""

from __future__ import annotations

__all__ = ["EXAMPLES", "epilog"]

EXAMPLES: dict[str, tuple[str, ...]] = {
    "abort": ('forge-ledger abort 3f2a --reason "the question moved to another team"',),
    "answer": (
        'forge-ledger answer 3f2a "Keep the token bucket; drop the sliding window."',
        'forge-ledger answer @ "Agreed." --author ada',
    ),
    "audit": (
        "forge-ledger audit 3f2a",
        "forge-ledger audit @ --markdown > audit.md",
        "forge-ledger audit 3f2a --json",
    ),
    "back": ("forge-ledger back 3f2a", "forge-ledger back 3f2a 2"),
    "browse": ("forge-ledger browse", "forge-ledger browse --port 8002"),
    "cleanup": ("forge-ledger cleanup --dry-run", "forge-ledger cleanup --days 7"),
    "copy": (
        "forge-ledger copy 3f2a --to postgresql://team@db.example.org:5432/ledger",
        "forge-ledger copy 3f2a 9c41 --store archive.sqlite --to team.sqlite",
    ),
    "demo": (
        "forge-ledger demo",
        "forge-ledger demo --latency 0 --json",
        "forge-ledger demo --store /tmp/demo.sqlite",
    ),
    "diff": ("forge-ledger diff 3f2a 9c41", "forge-ledger diff 3f2a 9c41 --json"),
    "dissent": ("forge-ledger dissent 3f2a", "forge-ledger dissent @ --all"),
    "export": (
        "forge-ledger export 3f2a",
        "forge-ledger export 3f2a -o rate-limiting.yaml",
        "forge-ledger export 3f2a 9c41 --format ledger -o sessions.sqlite",
    ),
    "fake-server": ("forge-ledger fake-server --port 8787",),
    "fork": (
        "forge-ledger fork 3f2a --at-iteration 1",
        "forge-ledger fork 3f2a --at-event 40 -m openai/gpt-4o-mini",
    ),
    "import": ("forge-ledger import rate-limiting.yaml",),
    "log": ("forge-ledger log 3f2a", "forge-ledger log @ --json"),
    "migrate": ("forge-ledger migrate --dry-run", "forge-ledger migrate --store old.sqlite"),
    "projections": (
        "forge-ledger projections status",
        "forge-ledger projections update --follow",
        "forge-ledger projections rebuild",
    ),
    "projections rebuild": (
        "forge-ledger projections rebuild",
        "forge-ledger projections rebuild read_model --batch-size 500",
    ),
    "projections status": (
        "forge-ledger projections status",
        "forge-ledger projections status --json",
    ),
    "projections update": (
        "forge-ledger projections update",
        "forge-ledger projections update --follow --interval 0.5",
    ),
    "replay": ("forge-ledger replay 3f2a", "forge-ledger replay --all --json"),
    "report": (
        "forge-ledger report 3f2a",
        "forge-ledger report @ -o report.html",
        "forge-ledger report 3f2a --at-iteration 1",
    ),
    "resume": ("forge-ledger resume 3f2a", "forge-ledger resume @ -m openai/gpt-4o-mini"),
    "run": (
        'forge-ledger run "Rate limiting for the public API" -m openai/gpt-4o -m '
        "anthropic/claude-sonnet-4-5",
        'forge-ledger run "Rate limiting" --participants team.yaml --attended',
    ),
    "seal": ("forge-ledger seal 3f2a",),
    "sessions": (
        "forge-ledger sessions",
        "forge-ledger sessions --status converged --limit 5",
        "forge-ledger sessions --since 2026-11-01 --search rate --json",
    ),
    "show": (
        "forge-ledger show @",
        "forge-ledger show 3f2a --at-iteration 1",
        "forge-ledger show 3f2a --json",
    ),
    "spec": (
        "forge-ledger spec 3f2a",
        "forge-ledger spec 3f2a --provenance",
        "forge-ledger spec 3f2a -o rate-limiting.md",
    ),
    "study": (
        "forge-ledger study run anonymity.yaml -j 8",
        "forge-ledger study status anonymity",
        "forge-ledger study resume anonymity",
    ),
    "study export": (
        "forge-ledger study export anonymity > sessions.csv",
        "forge-ledger study export anonymity --table participants --format parquet -o p.parquet",
    ),
    "study list": ("forge-ledger study list", "forge-ledger study list --json"),
    "study report": (
        "forge-ledger study report anonymity -o study.html",
        "forge-ledger study report 5d1e --at-event 40 -o then.html --sessions",
    ),
    "study resume": (
        "forge-ledger study resume anonymity",
        "forge-ledger study resume 5d1e -j 16",
        "forge-ledger study resume anonymity --processes 2 -j 8",
    ),
    "study run": (
        "forge-ledger study run anonymity.yaml",
        "forge-ledger study run anonymity.yaml --concurrency 16 --quiet --json",
        "forge-ledger study run anonymity.yaml --processes 2 --concurrency 8",
    ),
    "study status": (
        "forge-ledger study status anonymity",
        "forge-ledger study status 5d1e --at-event 10 --json",
    ),
    "study verify": ("forge-ledger study verify anonymity",),
    "store": (
        "forge-ledger store",
        "forge-ledger store --json",
        "FORGE_LEDGER_STORE=team.sqlite forge-ledger store",
    ),
    "trail": ("forge-ledger trail 3f2a", "forge-ledger trail @ --json"),
    "verify": (
        "forge-ledger verify",
        "forge-ledger verify 3f2a",
        "forge-ledger verify --export rate-limiting.yaml",
    ),
    "verify-export": ("forge-ledger verify-export rate-limiting.yaml",),
    "worker": (
        "forge-ledger worker --store postgresql://team@db.example.org:5432/ledger",
        "forge-ledger worker --store postgresql://localhost/ledger -j 8 --grace 30",
    ),
}
"""Each command's examples, as typed in a shell (SESSION written as a prefix such as ``3f2a``,
or ``@``, the latest session); a group's subcommand by its full name (``projections update``)."""


def epilog(name: str) -> str | None:
    """The examples of command ``name`` as a help epilog (click prints a ``\\b`` paragraph
    as it is, unwrapped), or None for a command without examples."""
    examples = EXAMPLES.get(name)
    if not examples:
        return None
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in examples)
