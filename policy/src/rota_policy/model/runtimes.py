"""How long jobs really run against what they declared, learned as they finish.

A declared runtime is a limit, and most jobs end well before theirs. ETAs scale declared
runtimes by the median actual ÷ declared ratio of recent finished jobs (`Snapshot.runtime_scale`);
no decision reads it. The simulator and the scheduler service learn it the same way, here.
"""

from __future__ import annotations

import statistics

__all__ = ["RuntimeScale"]


class RuntimeScale:
    """The median actual ÷ declared runtime of the `RECENT` latest finished jobs, refreshed
    every `REFRESH` finishes (so that ETAs do not all move at every finish); 1 until then."""

    RECENT = 2048
    REFRESH = 64

    def __init__(self) -> None:
        self._ratios: list[float] = []
        self._finished = 0
        self.value = 1.0

    def finished(self, actual_s: float, declared_s: float) -> None:
        if declared_s <= 0:
            return
        self._ratios.append(actual_s / declared_s)
        self._finished += 1
        if len(self._ratios) > 2 * self.RECENT:
            del self._ratios[: -self.RECENT]
        if self._finished % self.REFRESH == 0:
            self.value = statistics.median(self._ratios[-self.RECENT :])
