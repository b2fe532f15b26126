"""The scheduler's view is frozen out of the collector's full passes, and swept whole now and
then so that a cycle that became garbage while frozen is still reclaimed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from rota_scheduler.heap import FrozenHeap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def heap() -> Iterator[FrozenHeap]:
    gc.unfreeze()
    heap = FrozenHeap(sweep_every_s=3600.0, slow_pass_s=0.0)  # every full pass counts as slow
    heap.start()
    yield heap
    heap.stop()


def test_the_first_settle_collects_the_heap_and_freezes_it(heap: FrozenHeap) -> None:
    heap.settle(0.0)
    assert gc.get_freeze_count() > 0
    heap.stop()
    assert gc.get_freeze_count() == 0


def test_a_slow_full_pass_freezes_what_survived_it_at_the_next_settle(heap: FrozenHeap) -> None:
    heap.settle(0.0)
    kept = [Node() for _ in range(1000)]
    frozen = gc.get_freeze_count()
    heap.settle(1.0)
    assert gc.get_freeze_count() == frozen  # no full pass since: nothing owed
    gc.collect(2)
    heap.settle(2.0)
    assert gc.get_freeze_count() >= frozen + len(kept)


def test_a_fast_full_pass_freezes_nothing(heap: FrozenHeap) -> None:
    heap.slow_pass_s = 1e9
    heap.settle(0.0)
    frozen = gc.get_freeze_count()
    kept = [Node() for _ in range(1000)]
    gc.collect(2)
    heap.settle(1.0)
    assert gc.get_freeze_count() < frozen + len(kept)


def test_a_sweep_reclaims_a_cycle_that_became_garbage_while_frozen(heap: FrozenHeap) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    heap.settle(0.0)  # frozen with the cycle in it
    del a, b
    gc.collect()
    assert alive() is not None  # frozen: out of the collector's reach
    heap.settle(1800.0)
    assert alive() is not None  # no sweep yet
    heap.settle(3600.0)
    assert alive() is None
    assert gc.get_freeze_count() > 0  # and what is alive is frozen again
