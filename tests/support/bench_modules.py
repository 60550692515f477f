"""A benchmark script of ``bench/`` loaded as a module, for the tests that run a part of it
(no tests here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module (the benchmarks' shared set-up importable beside it)."""
    if str(BENCH_DIR) not in sys.path:  # a benchmark imports ``study_setup`` from its folder
        sys.path.append(str(BENCH_DIR))
    path = BENCH_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"forge_ledger_bench_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module
