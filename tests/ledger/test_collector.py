"""The garbage collector's thresholds during bulk work (``forge_ledger._collector``)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from forge_ledger._collector import BULK_THRESHOLD, raised_gc_threshold


@pytest.fixture(autouse=True)
def _host_thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield (700, 10, 10)
    gc.set_threshold(*before)


def test_the_first_threshold_is_raised_during_bulk_work_and_restored_after() -> None:
    with raised_gc_threshold():
        assert gc.get_threshold() == (BULK_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_an_error_restores_the_thresholds() -> None:
    with pytest.raises(KeyError), raised_gc_threshold():
        raise KeyError("x")
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_bulk_work_restores_once_the_outer_work_ends() -> None:
    with raised_gc_threshold():
        with raised_gc_threshold():
            assert gc.get_threshold()[0] == BULK_THRESHOLD
        assert gc.get_threshold()[0] == BULK_THRESHOLD
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_bulk_work_in_two_threads_restores_when_the_last_ends() -> None:
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with raised_gc_threshold():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with raised_gc_threshold():
        thread.start()
        assert entered.wait(10)
    assert gc.get_threshold()[0] == BULK_THRESHOLD  # the other thread is still at work
    release.set()
    thread.join(10)
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("tuned", [(0, 10, 10), (200_000, 5, 5)], ids=["disabled", "higher"])
def test_a_host_that_tuned_the_collector_is_left_alone(tuned: tuple[int, int, int]) -> None:
    gc.set_threshold(*tuned)
    with raised_gc_threshold():
        assert gc.get_threshold() == tuned
    assert gc.get_threshold() == tuned
