"""The suite must leave the checkout as it found it: ``conftest`` fails a run that leaves files
behind. Checked here on a throwaway git checkout holding a test that does leave one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, timeout=60)


@pytest.mark.slow
def test_a_run_that_leaves_a_file_in_the_checkout_fails(tmp_path: Path) -> None:
    repo = tmp_path / "checkout"
    (repo / "tests").mkdir(parents=True)
    shutil.copy(HERE / "conftest.py", repo / "tests" / "conftest.py")
    shutil.copytree(HERE / "support", repo / "tests" / "support",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(HERE.parent / ".gitignore", repo / ".gitignore")
    (repo / "tests" / "test_litter.py").write_text(
        "from pathlib import Path\n\n\n"
        "def test_litter() -> None:\n"
        "    (Path(__file__).parent.parent / 'left-behind.yaml').write_text('x')\n",
        "utf-8",
    )
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "init")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=repo, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert "the tests left files in the checkout:" in proc.stdout
    assert "?? left-behind.yaml" in proc.stdout
