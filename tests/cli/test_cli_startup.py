"""What a command loads: each imports only what it uses (no timing here; the figures are
``bench/startup_bench.py``'s).

Run in a subprocess of the real CLI, so nothing a test imported before can hide an import.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest

import forge_ledger.cli as cli_package
from forge_ledger import _lazy
from forge_ledger.cli import COMMANDS, cli
from forge_ledger.domain import events as ev
from forge_ledger.domain.topics import TOPIC_PREFIX

FIXTURES = Path(__file__).parents[1] / "fixtures"

NEVER_FOR_HELP = (
    "litellm",
    "forge_ledger.audit",
    "forge_ledger.yaml_format",
    "forge_ledger.report",
    "forge_ledger.projections.runner",
)
NEVER_FOR_SESSIONS = ("litellm", "forge_ledger.audit", "forge_ledger.report")
NEVER_FOR_A_READ = (
    "litellm",
    "forge_ledger.report",
    "forge_ledger.yaml_format",
    "forge_ledger.projections.runner",
    "forge_ledger.orchestrator",
    "forge_ledger.records.lineage",
    "forge_ledger.records.sealing",
    # the application layer's running, answering and forking side
    "forge_ledger.app.forge",
    "forge_ledger.app.running",
    "forge_ledger.app.interventions",
    "forge_ledger.app.demo",
    "forge_ledger.app.participants",
    "forge_ledger.app.studies",
)
"""What none of ``show``, ``spec`` and ``audit`` needs to print a session."""

_PROBE = """
import json, sys
from forge_ledger.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
built = []
if "pydantic.main" in sys.modules:
    from pydantic import BaseModel
    todo = [BaseModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("forge_ledger") and sub.__pydantic_complete__:
                built.append(sub.__qualname__)
aggregate = sys.modules.get("forge_ledger.domain.aggregate")
made = sorted(aggregate._EVENT_CLASSES) if aggregate is not None else []
print(json.dumps({"modules": sorted(sys.modules), "built": sorted(built), "event_classes": made}),
      file=sys.stderr)
"""


def _run(*argv: str, store: Path | None = None) -> tuple[str, dict[str, Any]]:
    """What the command printed, and the modules loaded and the models of ours whose schema
    was built once it ran."""
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"}
    if store is not None:
        env["FORGE_LEDGER_STORE"] = str(store)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True, text=True, timeout=120, check=True, env=env,
    )
    return proc.stdout, json.loads(proc.stderr.splitlines()[-1])


def _loaded(*argv: str, store: Path | None = None) -> tuple[str, set[str]]:
    out, found = _run(*argv, store=store)
    return out, set(found["modules"])


def _found(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_help_loads_no_command_module_and_no_model() -> None:
    out, modules = _loaded("--help")
    assert "sessions" in out
    assert "verify-export" in out
    assert _found(modules, NEVER_FOR_HELP) == []
    assert [m for m in modules if m.startswith("forge_ledger.cli.")] == []
    assert "pydantic.main" not in modules, "--help built a pydantic model"


def test_importing_the_cli_loads_nothing_of_the_commands() -> None:
    _, modules = _loaded("--version")
    assert _found(modules, NEVER_FOR_HELP) == []
    assert _found(modules, ("forge_ledger.domain", "forge_ledger.ledger", "eventsourcing")) == []


def test_sessions_loads_neither_litellm_nor_the_audit_nor_the_report(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / "store-v2.sqlite", store)
    out, modules = _loaded("sessions", store=store)
    assert "Event log for multi-model deliberations" in out
    assert _found(modules, NEVER_FOR_SESSIONS) == []
    assert _found(modules, ("forge_ledger.cli.deliberate", "forge_ledger.yaml_format")) == []
    # a reader claims no session and, on SQLite, needs nothing of PostgreSQL
    assert _found(modules, ("forge_ledger.ledger.lease", "forge_ledger.ledger.postgres")) == []
    # the listing reads the read model or folds states: no projection runs, no engine rule
    assert _found(modules, (
        "forge_ledger.engine", "forge_ledger.projections.runner",
        "forge_ledger.projections.consensus", "forge_ledger.projections.dissent",
    )) == []


def _fixture_store(tmp_path: Path) -> Path:
    store = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / "store-v2.sqlite", store)
    return store


def test_show_folds_with_the_one_engine_rule_it_shows(tmp_path: Path) -> None:
    """Without a read model ``show`` folds the session and computes its EMS: the engine's
    other rules (convergence, conformity, divergence, the output schemas) stay unloaded."""
    out, modules = _loaded("show", "@~1", store=_fixture_store(tmp_path))
    assert "EMS" in out
    assert "forge_ledger.engine.ems" in modules
    assert _found(modules, NEVER_FOR_A_READ) == []
    assert _found(modules, (
        "forge_ledger.audit", "forge_ledger.app", "forge_ledger.records.spec",
    )) == []
    assert _found(modules, (
        "forge_ledger.engine.convergence", "forge_ledger.engine.conformity",
        "forge_ledger.engine.divergence", "forge_ledger.engine.parsing",
        "forge_ledger.engine.prompts", "forge_ledger.engine.steps",
    )) == []


def test_spec_loads_the_state_and_yaml_but_not_the_lineage(tmp_path: Path) -> None:
    """Printing the document needs its state and the YAML header: the lineage (and its fuzzy
    matching), the chain check of a written file and the engine are for other options."""
    out, modules = _loaded("spec", "@~1", store=_fixture_store(tmp_path))
    assert out.startswith("---\n")
    assert "forge_ledger.records.spec" in modules
    assert _found(modules, NEVER_FOR_A_READ) == []
    assert _found(modules, (
        "forge_ledger.projections.document", "rapidfuzz", "forge_ledger.engine",
        "forge_ledger.audit", "forge_ledger.app",
    )) == []


def test_spec_provenance_loads_the_lineage(tmp_path: Path) -> None:
    """The guard above can fail: the lineage is loaded when it is asked for."""
    _, modules = _loaded("spec", "@~1", "--provenance", store=_fixture_store(tmp_path))
    assert "forge_ledger.projections.document" in modules


def test_audit_loads_the_audit_and_not_the_running_side(tmp_path: Path) -> None:
    """``audit`` goes through the application layer's records: neither running, answering
    nor forking a session loads, nor the fork comparison or the metrics rows."""
    out, modules = _loaded("audit", "@~1", store=_fixture_store(tmp_path))
    assert out.startswith("# Audit: ")
    assert {"forge_ledger.app.records", "forge_ledger.audit.analysis"} <= modules
    assert _found(modules, NEVER_FOR_A_READ) == []
    assert _found(modules, ("forge_ledger.audit.counterfactual", "forge_ledger.audit.metrics",
                            "forge_ledger.audit.aggregates")) == []


@pytest.mark.slow
def test_sessions_from_a_current_read_model_builds_no_model(tmp_path: Path) -> None:
    """The read model holds the summaries: listing them defines no model of ours, let alone
    builds one."""
    store = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / "store-v2.sqlite", store)
    subprocess.run(
        [sys.executable, "-m", "forge_ledger", "projections", "update", "--store", str(store)],
        capture_output=True, timeout=120, check=True,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"},
    )
    out, found = _run("sessions", store=store)
    assert "Event log for multi-model deliberations" in out
    assert found["built"] == []
    # the store's newest row is read from the file itself to know that the read model is
    # current: no event class, no model of ours, not the ledger nor eventsourcing's application
    assert found["event_classes"] == []
    assert _found(set(found["modules"]), (
        "pydantic.main", "forge_ledger.domain.values", "forge_ledger.domain.aggregate",
        "forge_ledger.ledger.ledger", "eventsourcing.application",
    )) == []


def _with_current_read_model(tmp_path: Path) -> Path:
    store = _fixture_store(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "forge_ledger", "projections", "update", "--store", str(store)],
        capture_output=True, timeout=120, check=True,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"},
    )
    return store


@pytest.mark.slow
def test_spec_from_a_current_read_model_loads_neither_the_ledger_nor_a_model(
    tmp_path: Path,
) -> None:
    """The read model holds the document's text: printing it needs the store's heads, read
    from the file itself, and one row."""
    store = _fixture_store(tmp_path)
    with sqlite3.connect(store) as con:
        (first,) = con.execute("SELECT originator_id FROM stored_events WHERE rowid = 1").fetchone()
    prefix = str(first)[:8]  # the read model answers an id or a prefix (never @~N)
    folded, found = _run("spec", prefix, store=store)
    assert "SessionState" in found["built"]  # the guard below can fail
    (tmp_path / "current").mkdir()
    out, found = _run("spec", prefix, store=_with_current_read_model(tmp_path / "current"))
    assert out == folded
    assert out.startswith("---\n")
    assert found["built"] == []
    assert found["event_classes"] == []
    assert _found(set(found["modules"]), (
        "pydantic.main", "forge_ledger.domain.values", "forge_ledger.ledger.ledger",
        "eventsourcing.application", "forge_ledger.records.spec", "yaml",
    )) == []


@pytest.mark.slow
def test_show_from_a_current_read_model_builds_no_model(tmp_path: Path) -> None:
    """``show`` opens the ledger to check the session's chain, then prints the read model's
    rows: no model of ours is validated, so pydantic never looks for its plugins (which
    imports ``importlib.metadata`` and much of the standard library)."""
    store = _with_current_read_model(tmp_path)
    out, found = _run("show", "@~1", store=store)
    assert "EMS" in out
    assert found["built"] == []
    assert _found(set(found["modules"]), ("pydantic.plugin._loader", "importlib.metadata")) == []


@pytest.mark.slow
def test_audit_kept_in_the_read_model_loads_no_audit(tmp_path: Path) -> None:
    """``audit`` checks the session's chain, then prints the audit kept at the session's
    head: the audit's code and models stay unloaded, and no model is validated."""
    folded, found = _run("audit", "@~1", store=_fixture_store(tmp_path))
    assert "forge_ledger.audit.analysis" in found["modules"]  # the guard below can fail
    (tmp_path / "current").mkdir()
    out, found = _run("audit", "@~1", store=_with_current_read_model(tmp_path / "current"))
    assert out == folded
    assert found["built"] == []
    assert _found(set(found["modules"]), (
        "forge_ledger.audit", "forge_ledger.projections.runner", "importlib.metadata",
    )) == []


def test_a_folded_session_builds_the_models_it_reads(tmp_path: Path) -> None:
    """The probe above sees a model built when one is: without a read model, ``sessions``
    folds each session's events into its state."""
    store = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / "store-v2.sqlite", store)
    _, found = _run("sessions", store=store)
    assert "SessionState" in found["built"]


def _recorded_types(store: Path) -> set[str]:
    with sqlite3.connect(store) as con:
        topics = con.execute("SELECT DISTINCT topic FROM stored_events").fetchall()
    return {t.removeprefix(TOPIC_PREFIX) for (t,) in topics if t.startswith(TOPIC_PREFIX)}


@pytest.mark.parametrize("argv", [("sessions",), ("show", "@"), ("log", "@")])
def test_reading_sessions_makes_only_the_event_classes_they_recorded(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    """Each stored event class is a dataclass eventsourcing builds from source: a read makes
    those of the types the store holds, not all of them."""
    store = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / "store-v2.sqlite", store)
    recorded = _recorded_types(store)
    _, found = _run(*argv, store=store)
    made = set(found["event_classes"])
    assert made, "the probe sees the classes a read makes"
    assert made <= recorded
    assert len(recorded) < len(ev.EVENT_TYPES)


def _all_command_modules() -> None:
    for info in pkgutil.iter_modules(cli_package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"forge_ledger.cli.{info.name}")


def test_the_command_map_names_every_command_where_it_lives() -> None:
    _all_command_modules()  # each registers its commands on `cli`
    assert sorted(COMMANDS) == sorted(cli.commands)
    for name, (module, attribute, _) in COMMANDS.items():
        assert getattr(importlib.import_module(f"forge_ledger.cli.{module}"), attribute) is (
            cli.commands[name]
        ), name


@pytest.mark.parametrize("limit", [20, 45, 81, 10_000])
def test_each_summary_is_what_the_command_s_help_says(limit: int) -> None:
    """--help lists a command not loaded yet by its summary: click must shorten it to the
    very words it shortens the command's own help to."""
    _all_command_modules()
    for name, (_, _, summary) in COMMANDS.items():
        stand_in = click.Command(name, help=summary)
        assert stand_in.get_short_help_str(limit) == cli.commands[name].get_short_help_str(limit)


LAZY_PACKAGES = ["forge_ledger.app", "forge_ledger.audit", "forge_ledger.domain",
                 "forge_ledger.engine", "forge_ledger.ledger", "forge_ledger.projections",
                 "forge_ledger.yaml_format"]
MODULES_BY_NAME = {"forge_ledger.domain": {"events"}}
"""The names in a lazy package's ``__all__`` that are its submodules, on purpose."""


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_a_lazy_package_offers_each_name_it_lists(package: str) -> None:
    """Every name in a lazily loaded package's ``__all__`` resolves, once every submodule has
    loaded too, to what it did when the package imported it: never to a submodule that the
    import system set on the package under the same name (``engine.convergence`` is the
    function)."""
    module: Any = importlib.import_module(package)
    for info in pkgutil.iter_modules(module.__path__):
        importlib.import_module(f"{package}.{info.name}")
    for name in module.__all__:
        value = getattr(module, name)
        assert isinstance(value, ModuleType) == (name in MODULES_BY_NAME.get(package, set())), name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError):
        _ = module.no_such_name


def test_the_domain_package_offers_every_value_type_it_does_not_import() -> None:
    """``forge_ledger.domain`` offers the names ``values.__all__`` lists, and lists them in
    its own ``__all__``."""
    import forge_ledger.domain as domain
    from forge_ledger.domain import values

    assert set(values.__all__) <= set(domain.__all__)
    for name in values.__all__:
        assert getattr(domain, name) is getattr(values, name), name


def test_a_value_named_as_its_module_stays_the_value() -> None:
    """``engine.convergence`` is the function, whether the package or its module loaded
    first, in a fresh interpreter (each order once)."""
    probe = (
        "import importlib, sys\n"
        "first, second = sys.argv[1:]\n"
        "importlib.import_module(first)\n"
        "importlib.import_module(second)\n"
        "import forge_ledger.engine as engine\n"
        "from forge_ledger.engine import convergence\n"
        "module = sys.modules['forge_ledger.engine.convergence']\n"
        "assert engine.convergence is convergence is module.convergence, engine.convergence\n"
    )
    for order in (("forge_ledger.engine", "forge_ledger.engine.convergence"),
                  ("forge_ledger.engine.convergence", "forge_ledger.engine")):
        subprocess.run([sys.executable, "-c", probe, *order], check=True, timeout=120)


def test_a_lazy_map_refuses_a_bare_string() -> None:
    with pytest.raises(TypeError):
        _lazy.exports("forge_ledger.engine", {"steps": "next_step"})


@pytest.mark.parametrize("ask", ["domain.Topic", "domain.__all__"])
def test_the_domain_package_loads_the_value_types_only_when_asked_for_them(ask: str) -> None:
    """Importing ``forge_ledger.domain`` or asking it for a name of another module leaves the
    value types unloaded; a value type's name, or the package's ``__all__``, loads them (in a
    fresh interpreter)."""
    probe = (
        "import sys\n"
        "import forge_ledger.domain as domain\n"
        "loaded = lambda: 'forge_ledger.domain.values' in sys.modules\n"
        "assert domain.canonical_json and not loaded()\n"
        f"{ask}\n"
        "assert loaded()\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=120)
