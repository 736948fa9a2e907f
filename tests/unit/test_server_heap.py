"""The collector settings a replica starts with (``threadline.server.settle_the_heap``)."""

from __future__ import annotations

import gc
import weakref

from threadline.server import GC_YOUNG_THRESHOLD, settle_the_heap


def test_start_up_objects_are_frozen_and_young_collections_are_rarer() -> None:
    before = gc.get_threshold()
    try:
        settle_the_heap()
        assert gc.get_freeze_count() > 10_000  # the imported modules, at least
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        # Still collected: a cycle made after start-up is freed by a collection.
        cycle = _Node()
        cycle.next = cycle
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


class _Node:
    next: _Node | None = None
