"""Decayed usage for fair share, with no I/O.

A stored value is "GPU-seconds as of `as_of`" and decays by half every `half_life_s`. Rows are
decayed lazily: only when a release touches them, to that release's time. Whoever reads them
later decays them further to its own now (`decayed_to`).

A run's contribution is the exact integral of its GPUs under the decay, from grant to release,
so a long run's early hours weigh less than its last ones, exactly as if usage had been
recorded every second. That is the same formula as the scheduler's `fairshare.accrue`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

_LN2 = math.log(2.0)


def decay(value: float, elapsed_s: float, half_life_s: float) -> float:
    """`value` after `elapsed_s`; a negative span (an event older than the row) grows nothing."""
    if elapsed_s <= 0:
        return value
    return value * math.pow(2.0, -elapsed_s / half_life_s)


def run_usage(gpus: float, duration_s: float, half_life_s: float) -> float:
    """Decayed GPU-seconds, as of the run's end, of `gpus` busy for `duration_s`.

    ∫₀ᵈ g·2^(-(d-t)/h) dt = g·h/ln2·(1 - 2^(-d/h)); never more than g·d, never negative.
    """
    if duration_s <= 0 or gpus <= 0:
        return 0.0
    return gpus * (half_life_s / _LN2) * -math.expm1(-duration_s * _LN2 / half_life_s)


@dataclass(frozen=True, slots=True)
class Usage:
    gpu_seconds: float
    as_of: datetime

    def decayed_to(self, at: datetime, half_life_s: float) -> float:
        return decay(self.gpu_seconds, (at - self.as_of).total_seconds(), half_life_s)

    def plus(self, amount: float, at: datetime, half_life_s: float) -> Usage:
        """Add `amount` (valued as of `at`). Events may arrive out of order: one older than
        the row is decayed to the row's time instead, so the row's time never goes back."""
        if at >= self.as_of:
            return Usage(self.decayed_to(at, half_life_s) + amount, at)
        late = decay(amount, (self.as_of - at).total_seconds(), half_life_s)
        return Usage(self.gpu_seconds + late, self.as_of)
