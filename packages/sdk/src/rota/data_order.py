"""The order in which a training job visits its examples, as state a checkpoint can hold.

A resumed run must train on the same batches, in the same order, as the run it continues,
or it ends somewhere else than an uninterrupted run would. Re-seeding a generator on every
start replays the order from the beginning; saving a generator's internal state works but
ties the checkpoint to one library's format. Here the order of each epoch is a function of
(seed, epoch) alone, so three integers (seed, epoch, position) say exactly which example
comes next, in any language or framework:

    order = EpochOrder(size=len(dataset), seed=0)     # or EpochOrder.from_state(saved)
    batch = order.next_batch(256)                      # indices into the dataset
    checkpoint["data_order"] = order.state()

Pure Python, no dependencies: `examples/train_plain.py` and `examples/train_torch.py` use it,
and it is tested without torch.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

# Keeps (seed, epoch) pairs apart: seed s, epoch e and seed s+1, epoch e-2^32 never meet.
_EPOCH_SPAN = 2**32


@dataclass
class EpochOrder:
    """Every epoch is a fresh shuffle of `range(size)`; a batch never spans two epochs."""

    size: int
    seed: int = 0
    epoch: int = 0
    position: int = 0
    _permutation: list[int] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.size <= 0:
            raise ValueError("a data order needs at least one example")
        if not 0 <= self.position <= self.size or self.epoch < 0:
            raise ValueError(f"no such place in the order: epoch {self.epoch}, "
                             f"position {self.position} of {self.size}")

    def permutation(self) -> list[int]:
        """This epoch's order of the examples."""
        if self._permutation is None:
            order = list(range(self.size))
            random.Random(self.seed * _EPOCH_SPAN + self.epoch).shuffle(order)
            self._permutation = order
        return self._permutation

    def next_batch(self, batch_size: int) -> list[int]:
        """The next `batch_size` indices (fewer at the end of an epoch), and move past them."""
        if batch_size <= 0:
            raise ValueError("batch_size must be positive")
        if self.position >= self.size:
            self.epoch, self.position, self._permutation = self.epoch + 1, 0, None
        batch = self.permutation()[self.position:self.position + batch_size]
        self.position += len(batch)
        return batch

    def state(self) -> dict[str, int]:
        """Everything that decides the next batch; `from_state` gives the same order back."""
        return {"size": self.size, "seed": self.seed, "epoch": self.epoch,
                "position": self.position}

    @classmethod
    def from_state(cls, state: Mapping[str, int]) -> EpochOrder:
        return cls(size=int(state["size"]), seed=int(state["seed"]), epoch=int(state["epoch"]),
                   position=int(state["position"]))
