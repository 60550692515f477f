"""Shared fixtures: real stores (a SQLite file per test, a PostgreSQL schema per test).

PostgreSQL runs on 127.0.0.1:5432 (trust auth, database ``test``) on development and CI
machines; ``FORGE_LEDGER_TEST_PG`` overrides the base URL. PostgreSQL tests are not optional:
when the server is unreachable they fail, they do not skip.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from forge_ledger.testing import FakeOpenAIServer
from support.orchestrator import voice
from support.postgres import PG_BASE, drop_schema

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# A PostgreSQL store's exports, documents and read model go under FORGE_LEDGER_HOME: the tests
# use a fresh temporary home, never the user's ~/.local/share/forge-ledger.
os.environ.setdefault("FORGE_LEDGER_HOME", tempfile.mkdtemp(prefix="forge-ledger-test-home-"))

# Property tests check results, never speed: a loaded CI machine must not fail them on time.
settings.register_profile("forge-ledger", deadline=None)
settings.load_profile("forge-ledger")

pytest_plugins = ["forge_ledger.testing.pytest_plugin", "support.browser"]

@pytest.fixture(autouse=True)
def _own_user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own user-level folder: a command run where no store is given or found
    uses the user-level store, which two tests must never share."""
    monkeypatch.setenv("FORGE_LEDGER_HOME", str(tmp_path / "user-home"))
    monkeypatch.delenv("FORGE_LEDGER_STORE", raising=False)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return str(tmp_path / "ledger.sqlite")


@pytest.fixture
def pg_url() -> Iterator[str]:
    schema = f"fl_test_{uuid.uuid4().hex[:12]}"
    yield f"{PG_BASE}?schema={schema}"
    drop_schema(schema)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each test using this runs once on a SQLite file and once on PostgreSQL."""
    if request.param == "sqlite":
        yield str(tmp_path / "ledger.sqlite")
        return
    schema = f"fl_test_{uuid.uuid4().hex[:12]}"
    yield f"{PG_BASE}?schema={schema}"
    drop_schema(schema)


# --------------------------------------------------------------------------- a clean checkout

_CHECKOUT = Path(__file__).resolve().parent.parent
_BEFORE = pytest.StashKey[set[str] | None]()


def _status() -> set[str] | None:
    """``git status --porcelain`` lines of the checkout (None outside a git checkout)."""
    try:
        proc = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"],
            cwd=_CHECKOUT, capture_output=True, text=True, timeout=60, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(proc.stdout.splitlines()) if proc.returncode == 0 else None


def _is_worker(session: pytest.Session) -> bool:
    """Under pytest-xdist the check belongs to the controller, which starts before the workers
    and finishes after them; a worker would see the others' files still in use."""
    return hasattr(session.config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if not _is_worker(session):
        session.stash[_BEFORE] = _status()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when the tests left files in the checkout (outputs belong beside the
    store, in the test's temporary directory)."""
    before = session.stash.get(_BEFORE, None)
    if before is None or _is_worker(session):
        return
    after = _status()
    if after is None:
        return
    left = sorted(after - before)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("the tests left files in the checkout:", red=True)
            for line in left:
                reporter.write_line(f"  {line}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def ana_and_ben(fake_openai: FakeOpenAIServer) -> list[str]:
    """ana and ben answering every round on the fake server (a test may re-script either): the
    ``-m``/``--api-base`` arguments of ``forge-ledger run`` that name them."""
    fake_openai.set_script({"ana": voice("ana"), "ben": voice("ben")})
    return ["-m", "openai/ana", "-m", "openai/ben", "--api-base", fake_openai.url]
