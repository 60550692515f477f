"""Bounded input, refused fast, nothing written.

YAML from any file (import, participants, fake-server scripts, verify-export) goes through one
bounded loader; hostile files are refused through the real CLI in a subprocess whose peak
memory is measured. Topic, constraints, participants and ``max_tokens`` are bounded in the
domain values. ``--store`` pointing at things that are not a ledger is refused in one line,
leaving the file as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain.values import (
    MAX_CONSTRAINTS,
    MAX_DESCRIPTION_CHARS,
    MAX_PARTICIPANTS,
    MAX_TOKENS_LIMIT,
    Participant,
    SessionConfig,
    Topic,
)
from forge_ledger.errors import InputLimitError, InvariantViolation, StoreError, UsageError
from forge_ledger.ledger import Ledger
from forge_ledger.testing import SessionBuilder
from forge_ledger.untrusted.bounded_yaml import DEFAULT_LIMITS, YamlLimits, load_yaml, yaml_limits
from support.cli import run_console
from support.hostile_inputs import (
    BILLION_LAUGHS,
    fingerprint,
    measure_cli,
    one_error_line,
)
from support.stories import VARIED_ROLES, numbered_participants, priced_session

FIXTURES = Path(__file__).parents[1] / "fixtures"

# --------------------------------------------------------------------------- the loader


def test_aliases_count_as_the_subtree_they_repeat() -> None:
    # a: 1 mapping + 2 keys + (1 list + 3 items) = 7 nodes; root 1 + 2 keys; *x repeats 5
    text = "a: &x [1, 2, 3]\nb: *x\n"
    assert load_yaml(text, name="t", limits=YamlLimits(max_nodes=11)) == {
        "a": [1, 2, 3], "b": [1, 2, 3],
    }
    with pytest.raises(InputLimitError, match="too many YAML nodes after alias expansion"):
        load_yaml(text, name="t", limits=YamlLimits(max_nodes=10))


def test_merge_keys_and_scalar_anchors_are_counted() -> None:
    text = "base: &b {x: 1, y: 2}\nname: &n hello\nc: {<<: *b, z: *n}\n"
    doc = load_yaml(text, name="t")
    assert doc["c"] == {"x": 1, "y": 2, "z": "hello"}
    # root 1 + keys 3 + base map 5 + scalar 1 + c map (1 + 2 keys + merge 5 + alias 1) = 19
    assert load_yaml(text, name="t", limits=YamlLimits(max_nodes=19)) == doc
    with pytest.raises(InputLimitError):
        load_yaml(text, name="t", limits=YamlLimits(max_nodes=18))


def test_depth_and_size_caps() -> None:
    deep = "[" * 10 + "]" * 10
    assert load_yaml(deep, name="t", limits=YamlLimits(max_depth=10)) is not None
    with pytest.raises(InputLimitError, match="nested too deeply") as info:
        load_yaml(deep, name="deep.yaml", limits=YamlLimits(max_depth=9))
    assert "FORGE_LEDGER_YAML_MAX_DEPTH" in info.value.one_line()
    with pytest.raises(InputLimitError, match="too large"):
        load_yaml("a: " + "x" * 100, name="t", limits=YamlLimits(max_bytes=100))
    # bytes, not characters: 40 three-byte characters are 120 bytes
    with pytest.raises(InputLimitError):
        load_yaml("a: " + "€" * 40, name="t", limits=YamlLimits(max_bytes=100))


def test_only_plain_data_is_built() -> None:
    with pytest.raises(yaml.YAMLError):
        load_yaml("!!python/object/apply:os.system ['true']", name="t")


def test_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert yaml_limits() == DEFAULT_LIMITS
    monkeypatch.setenv("FORGE_LEDGER_YAML_MAX_BYTES", "2M")
    monkeypatch.setenv("FORGE_LEDGER_YAML_MAX_NODES", "1000")
    monkeypatch.setenv("FORGE_LEDGER_YAML_MAX_DEPTH", "8")
    assert yaml_limits() == YamlLimits(max_bytes=2 * 1024 * 1024, max_nodes=1000, max_depth=8)
    monkeypatch.setenv("FORGE_LEDGER_YAML_MAX_NODES", "lots")
    with pytest.raises(UsageError, match="FORGE_LEDGER_YAML_MAX_NODES"):
        yaml_limits()


def test_a_real_export_fits_the_default_limits() -> None:
    for name in ("seed_standard.yaml", "seed_panel.yaml", "v1_0_session.yaml"):
        assert isinstance(load_yaml((FIXTURES / name).read_text(), name=name), dict)


# --------------------------------------------------------------------------- hostile files


def _sixty_megabytes(path: Path) -> None:
    line = "- " + "x" * 1021 + "\n"
    with path.open("w") as fh:
        fh.write("participants:\n")
        for _ in range(60 * 1024):
            fh.write(line)


CASES = {
    "billion-laughs/import": ("bomb.yaml", ["import", "bomb.yaml", "--store", "{store}"]),
    "billion-laughs/participants": (
        "bomb.yaml", ["run", "A topic", "--participants", "bomb.yaml", "--store", "{store}"],
    ),
    "billion-laughs/fake-server": ("bomb.yaml", ["fake-server", "--script", "bomb.yaml"]),
    "billion-laughs/verify-export": (
        "bomb.yaml", ["verify-export", "bomb.yaml", "--store", "{store}"],
    ),
    "60MB/import": ("big.yaml", ["import", "big.yaml", "--store", "{store}"]),
    "60MB/participants": (
        "big.yaml", ["run", "A topic", "--participants", "big.yaml", "--store", "{store}"],
    ),
}


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    (d / "bomb.yaml").write_text(BILLION_LAUGHS)
    _sixty_megabytes(d / "big.yaml")
    return d


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_yaml_is_refused_fast_in_little_memory(
    case: str, hostile_dir: Path, tmp_path: Path,
) -> None:
    name, args = CASES[case]
    store = tmp_path / "store" / "ledger.sqlite"
    if case.endswith("verify-export"):
        with Ledger(str(store)) as ledger:
            SessionBuilder(store=ledger).start("Bounds", participants=["p0", "p1"]).save()
    before = _files(tmp_path)
    shutil.copy(hostile_dir / name, tmp_path / name)
    m = measure_cli(*(a.format(store=store) for a in args), cwd=tmp_path)
    print(f"\n{case}: rc {m.rc}, wall {m.wall_s:.2f} s, cpu {m.cpu_s:.2f} s, "
          f"peak RSS {m.peak_rss_mb:.0f} MB")
    assert m.rc == 2, m.stderr
    line = one_error_line(m.stderr)
    assert name in line
    assert ("too many YAML nodes" in line) if "laughs" in case else ("too large" in line)
    assert m.peak_rss_mb < 300
    assert m.cpu_s < 5  # CPU time of the child: the load of other processes does not count
    after = _files(tmp_path)
    del after[name]
    # nothing written: no store created, an existing one unchanged (bytes and mtime); opening
    # an existing store may leave SQLite's own -wal/-shm files beside it
    assert {k: v for k, v in after.items() if not k.endswith(("-wal", "-shm"))} == before


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): fingerprint(p) for p in root.rglob("*") if p.is_file()}


# --------------------------------------------------------------------------- domain bounds


def test_topic_bounds() -> None:
    Topic(title="t", description="d" * MAX_DESCRIPTION_CHARS,
          constraints=tuple("c" for _ in range(MAX_CONSTRAINTS)))
    with pytest.raises(ValidationError, match="at most 20000 characters"):
        Topic(title="t", description="d" * (MAX_DESCRIPTION_CHARS + 1))
    with pytest.raises(ValidationError, match="at most 100 items"):
        Topic(title="t", constraints=tuple("c" for _ in range(MAX_CONSTRAINTS + 1)))
    with pytest.raises(ValidationError, match="at most 2000 characters"):
        Topic(title="t", constraints=("c" * 2001,))
    with pytest.raises(ValidationError, match="at most 500 characters"):
        Topic(title="t" * 501)


def test_max_tokens_bounds() -> None:
    assert SessionConfig(max_tokens=MAX_TOKENS_LIMIT).max_tokens == MAX_TOKENS_LIMIT
    with pytest.raises(ValidationError, match="less than or equal to 1000000"):
        SessionConfig(max_tokens=MAX_TOKENS_LIMIT + 1)
    with pytest.raises(ValidationError, match="less than or equal to 1000000"):
        Participant(name="a", model="m", max_tokens=10**9)


def test_participant_count_bound() -> None:
    b = SessionBuilder().start("Bounds", participants=[f"p{i}" for i in range(MAX_PARTICIPANTS)])
    assert len(b.state.participants) == MAX_PARTICIPANTS
    extra = numbered_participants(MAX_PARTICIPANTS + 1, roles=VARIED_ROLES)[-1]
    with pytest.raises(InvariantViolation, match=f"at most {MAX_PARTICIPANTS} participants"):
        b.aggregate.join(extra, at=b.clock.now())


@pytest.mark.slow
def test_cli_bounds_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s" / "ledger.sqlite"
    long_description = run_console(
        "run", "A topic", "-m", "openai/a", "-m", "openai/b", "--description", "d" * 20_001,
        "--store", str(store), cwd=tmp_path,
    )
    assert long_description.returncode == 2
    assert "description" in one_error_line(long_description.stderr)
    team = tmp_path / "team.yaml"
    team.write_text("participants:\n  - {name: a, model: openai/a, max_tokens: 5000000}\n")
    too_many_tokens = run_console(
        "run", "A topic", "--participants", str(team), "--store", str(store), cwd=tmp_path,
    )
    assert too_many_tokens.returncode == 2
    assert "max_tokens" in one_error_line(too_many_tokens.stderr)
    assert not store.parent.exists()


# --------------------------------------------------------------------------- --store


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder an unprivileged user can enter (pytest's own tmp tree is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="fl-store-"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(d)


def _real_store(path: Path) -> None:
    with Ledger(str(path)) as ledger:
        priced_session(ledger, iterations=2, participants=3, converge=True,
                      clock=FixedStepClock())
    assert path.stat().st_size >= 8 * 4096


def _make(kind: str, d: Path) -> Path:
    target = d / f"{kind}.sqlite"
    if kind == "directory":
        target.mkdir()
    elif kind == "text":
        target.write_text("these are my notes\n" * 100)
    elif kind == "random":
        target.write_bytes(os.urandom(50_000))
    elif kind == "truncated":
        _real_store(d / "whole.sqlite")
        target.write_bytes((d / "whole.sqlite").read_bytes()[: 5 * 4096])
    elif kind == "read-only":
        _real_store(target)
        target.chmod(0o444)
        d.chmod(0o555)
    return target


@pytest.mark.parametrize("kind", ["directory", "text", "random", "truncated", "read-only"])
@pytest.mark.parametrize("command", ["import", "sessions"])
def test_store_that_is_not_a_ledger(kind: str, command: str, open_dir: Path) -> None:
    target = _make(kind, open_dir)
    before = None if target.is_dir() else fingerprint(target)
    listing = sorted(p.name for p in open_dir.rglob("*"))
    args = ["import", str(FIXTURES / "seed_standard.yaml")] if command == "import" else [
        "sessions",
    ]
    result = run_console(*args, "--store", str(target), cwd=open_dir, unprivileged=True)
    if kind == "read-only" and command == "sessions":
        assert result.returncode == 0, result.stderr  # reading a read-only store works
    else:
        assert result.returncode == 2, result.stderr
        line = one_error_line(result.stderr)
        assert str(target) in line
    if before is not None:
        assert fingerprint(target) == before
    assert sorted(p.name for p in open_dir.rglob("*")) == listing


def test_truncated_store_message(open_dir: Path) -> None:
    target = _make("truncated", open_dir)
    before = fingerprint(target)
    for create in (False, True):
        with pytest.raises(StoreError, match="damaged SQLite file") as info:
            Ledger(str(target), create=create)
        assert "where its header says" in info.value.one_line()
    assert fingerprint(target) == before


@pytest.mark.parametrize("depth", [70, 2000])
def test_deep_nesting_is_one_message_in_flow_and_block_style(tmp_path: Path, depth: int) -> None:
    """libyaml stops a deep flow collection with its own cap before the parser reaches ours;
    either way the file is refused with the same line."""
    flow = tmp_path / "flow.yaml"
    flow.write_text("a: " + "[" * depth + "]" * depth + "\n", encoding="utf-8")
    block = tmp_path / "block.yaml"
    block.write_text("".join("  " * i + "k:\n" for i in range(depth)) + "  " * depth + "v\n",
                     encoding="utf-8")
    lines = []
    for path in (flow, block):
        result = run_console("import", str(path), "--store", str(tmp_path / "s.sqlite"),
                         cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        lines.append(one_error_line(result.stderr).replace(path.name, "FILE"))
    assert lines[0] == lines[1]
    assert "nested too deeply (limit 64)" in lines[0]
    assert not (tmp_path / "s.sqlite").exists()


def test_a_depth_limit_raised_past_the_parsers_own_says_so(tmp_path: Path) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text("a: " + "[" * 2000 + "]" * 2000 + "\n", encoding="utf-8")
    result = run_console("import", str(flow), "--store", str(tmp_path / "s.sqlite"), cwd=tmp_path,
                     env={"FORGE_LEDGER_YAML_MAX_DEPTH": "5000"})
    assert result.returncode == 2
    line = one_error_line(result.stderr)
    assert "the YAML parser's own" in line
    assert "FORGE_LEDGER_YAML_MAX_DEPTH" not in line
