"""Fewer runs of Python's cyclic garbage collector during bulk work.

A projection rebuild, a replay or a long fold keeps every session it touches in memory (their
states are hundreds of thousands of small objects) while it allocates and drops a few objects
per event. With CPython's default thresholds the collector runs after every 700 net
allocations, and every tenth of its runs over the middle generation is a full collection
that walks every live object again. On a 100,000-event rebuild of 100 sessions that walking
was a third of the time, and it is what made the cost per event grow with the size of the
store (66 µs per event at 10,000 events, 97 at 100,000). Almost nothing in that work is a
reference cycle, so the collector found next to nothing.

During bulk work the youngest generation's threshold is raised, so the collector runs a few
hundred times less often; the others keep their values, and the host's settings come back
when the last bulk work in the process ends. Cycles created meanwhile are still collected,
only later. A host that tuned the collector itself (a higher threshold, or disabled it) is
left alone.

A long-running command (a study) also marks what it has made before its work
begins as long-lived (:func:`long_lived_so_far`).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BULK_THRESHOLD", "long_lived_so_far", "raised_gc_threshold"]

BULK_THRESHOLD = 50_000
"""Net allocations between two runs of the collector during bulk work."""

_lock = threading.Lock()
_active = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def raised_gc_threshold() -> Iterator[None]:
    """Raise the collector's first threshold for the duration (see the module docstring).
    Nested and concurrent uses share one change, undone when the last of them ends."""
    global _active, _saved
    with _lock:
        if _active == 0:
            before = gc.get_threshold()
            if 0 < before[0] < BULK_THRESHOLD:
                _saved = before
                gc.set_threshold(BULK_THRESHOLD, before[1], before[2])
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None


def long_lived_so_far() -> None:
    """Collect once, then move every object that survives out of the collector's reach
    (``gc.freeze``): it lives as long as the process.

    By the time a study starts its cells it has imported its libraries and the
    model client, whose tables are hundreds of thousands of objects. Every full collection
    walked them again, on the event loop, while every session waited: during a 64-session
    study, nine collections of up to a quarter of a second each. From then on a collection
    walks only what the command makes. Called by the command line's long-running commands,
    never by the library on its host's behalf.
    """
    gc.collect()
    gc.freeze()
