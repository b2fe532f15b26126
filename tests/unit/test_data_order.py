"""A resumed data order continues exactly where the saved one was: the batches after a
save and restore are the batches an uninterrupted order gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from rota.data_order import EpochOrder


def batches(order: EpochOrder, count: int, size: int) -> list[list[int]]:
    return [order.next_batch(size) for _ in range(count)]


@pytest.mark.parametrize("stop_after", [0, 1, 3, 4, 7])
def test_save_and_restore_gives_the_same_batches_as_an_uninterrupted_order(
        stop_after: int) -> None:
    whole = batches(EpochOrder(size=10, seed=7), 12, 3)
    first = EpochOrder(size=10, seed=7)
    before = batches(first, stop_after, 3)
    # Through JSON, as a checkpoint would carry it.
    resumed = EpochOrder.from_state(json.loads(json.dumps(first.state())))
    assert before + batches(resumed, 12 - stop_after, 3) == whole


def test_each_epoch_is_a_new_shuffle_of_every_example_and_batches_stay_in_their_epoch() -> None:
    order = EpochOrder(size=10, seed=1)
    epoch0 = batches(order, 4, 3)
    assert [len(b) for b in epoch0] == [3, 3, 3, 1]
    assert sorted(i for b in epoch0 for i in b) == list(range(10))
    epoch1 = batches(order, 4, 3)
    assert order.epoch == 1 and sorted(i for b in epoch1 for i in b) == list(range(10))
    assert epoch0 != epoch1


def test_the_order_depends_on_the_seed_and_never_on_the_process() -> None:
    assert EpochOrder(size=50, seed=0).permutation() != EpochOrder(size=50, seed=1).permutation()
    # A resumed run is another process: string hashing is salted per process, so prove the
    # order does not depend on it.
    code = "from rota.data_order import EpochOrder; print(EpochOrder(size=50, seed=3).permutation())"
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": salt}).stdout
            for salt in ("1", "2")}
    assert seen == {f"{EpochOrder(size=50, seed=3).permutation()}\n"}


def test_a_place_outside_the_data_set_is_refused() -> None:
    with pytest.raises(ValueError):
        EpochOrder.from_state({"size": 4, "seed": 0, "epoch": 0, "position": 5})
    with pytest.raises(ValueError):
        EpochOrder(size=0)
