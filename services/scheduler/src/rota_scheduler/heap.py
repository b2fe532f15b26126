"""Keeping the scheduler's view out of the cyclic collector's full passes.

The view holds several objects per job (its record, its spec, its queue entries): about
940,000 at 100,000 pending, none of them garbage. CPython's full (generation 2) collection
walks every one of them, about 0.9 s of the whole process, and with a deep queue that changes
it ran every 10-20 s. No cycle runs meanwhile, so a job that fits waits that long: these
pauses were the slowest grants at 100,000 pending, and most of the idle scheduler's CPU.

`gc.freeze()` moves every object alive now out of the collector's reach, and later passes walk
only what was allocated since. A pass that is slow says the unfrozen heap has grown, so it is
frozen again after the pass. A frozen object that later becomes part of an unreachable
reference cycle is not reclaimed while frozen, so every `sweep_every_s` the heap is unfrozen,
collected whole and frozen again: one full pause per sweep instead of one every few seconds.
"""

from __future__ import annotations

import gc
import time
from typing import Any

SLOW_PASS_S = 0.02
"""A full pass longer than this freezes what survived it."""


class FrozenHeap:
    """Call `settle` between cycles, when no thread is deciding: it freezes or sweeps there,
    never inside a cycle."""

    def __init__(self, sweep_every_s: float, slow_pass_s: float = SLOW_PASS_S) -> None:
        self.sweep_every_s = sweep_every_s
        self.slow_pass_s = slow_pass_s
        self.freeze_owed = False
        self.swept_at: float | None = None
        self._pass_started = 0.0

    def start(self) -> None:
        gc.callbacks.append(self._observe)

    def stop(self) -> None:
        """Stop watching, and give the collector back everything frozen."""
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)
        gc.unfreeze()

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._pass_started = time.perf_counter()
        elif time.perf_counter() - self._pass_started > self.slow_pass_s:
            self.freeze_owed = True

    def sweep(self, now: float) -> None:
        """Collect the whole heap, frozen part included, then freeze what is alive."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.swept_at = now
        self.freeze_owed = False

    def settle(self, now: float) -> None:
        if self.swept_at is None or now - self.swept_at >= self.sweep_every_s:
            self.sweep(now)
        elif self.freeze_owed:
            gc.freeze()
            self.freeze_owed = False
