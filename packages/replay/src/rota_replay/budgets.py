"""The replay's GPU-hour budgets: the meter fed by the simulator's runs, and which jobs a budget
held (a metric of the replay only)."""

from __future__ import annotations

from collections.abc import Iterable

from rota.budget import BudgetMeter, period_bounds, period_label
from rota_policy.model.config import PolicyConfig

__all__ = ["SimBudgets"]


class SimBudgets:
    """The use of every (team, flavor) with a budget, and the jobs that waited at a budget.

    Only made when the scenario has budgets: without them the simulator keeps no meter and
    passes no use, so a replay decides as it did before budgets existed.
    """

    __slots__ = ("_exhausted", "_limits", "held", "meter", "peaks", "woken_at")

    def __init__(self, config: PolicyConfig) -> None:
        self._limits = {key: lim.gpu_s for key, lim in config.budgets.items() if not lim.idle_only}
        self.woken_at: set[float] = set()
        """Resets at which the simulator already has a cycle queued."""
        self.meter = BudgetMeter({key: lim.period for key, lim in config.budgets.items()})
        self._exhausted: set[tuple[str, str]] = set()
        self.held: set[str] = set()
        """Jobs that were pending while their team's budget made them wait."""
        self.peaks: dict[str, float] = {}
        """Per "team/flavor period", the most GPU-hours used as read at a cycle: how far
        running work takes use past a budget that is checked only at start."""

    def used(
        self, now: float, pending: Iterable[tuple[tuple[str, str], Iterable[str]]]
    ) -> dict[tuple[str, str], float]:
        """Use at `now`, for the snapshot; marks the jobs of `pending` ((team, flavor), job ids)
        whose pair has just reached a `wait` budget."""
        used = self.meter.used(now)
        peaks = self.peaks
        for (team, flavor), spent in used.items():
            label = f"{team}/{flavor} {period_label(self.meter.periods[(team, flavor)], now)}"
            hours = spent / 3600.0
            if hours > peaks.get(label, 0.0):
                peaks[label] = hours
        exhausted = {key for key, limit in self._limits.items() if used.get(key, 0.0) >= limit}
        fresh = exhausted - self._exhausted
        self._exhausted = exhausted
        if fresh:
            for key, ids in pending:
                if key in fresh:
                    self.held.update(ids)
        return used

    def next_reset(self, now: float) -> float | None:
        """The earliest reset of a pair whose jobs wait for it: the replay runs a cycle then, as
        nothing else might happen at that moment."""
        ends = [period_bounds(self.meter.periods[key], now)[1] for key in self._exhausted]
        return min(ends) if ends else None

    def enqueued(self, team: str, flavor: str, job_id: str) -> None:
        if (team, flavor) in self._exhausted:
            self.held.add(job_id)
