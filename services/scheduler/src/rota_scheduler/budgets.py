"""What the scheduler tells of GPU-hour budgets: each team's use against its budget, as the
metrics and `BudgetUsageRecorded` carry it, and when that event is worth publishing.

The use itself is counted once, by the view's `rota.budget.BudgetMeter`; the policy reads the
same numbers from the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from rota.budget import WARN_FRACTION, period_bounds
from rota.contracts import messages as m

from rota_scheduler.view import ClusterView

__all__ = ["REPORT_EVERY_S", "BudgetReporter", "budget_uses"]

REPORT_EVERY_S = 300.0
"""Between crossings, use is published this often at most: `rota queues` is that fresh."""


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def budget_uses(view: ClusterView, now: float) -> list[m.BudgetUse]:
    """Each budgeted (team, flavor): its use this period against its budget."""
    used = view.budget_meter.used(now) if view.budget_meter.periods else {}
    out = []
    for name, team in sorted(view.config.teams.items()):
        for flavor, budget in sorted(team.budgets.items()):
            start, end = period_bounds(budget.period, now)
            out.append(m.BudgetUse(
                team=name, flavor=flavor, period=budget.period.value, period_start=_at(start),
                resets_at=_at(end), used_gpu_hours=used.get((name, flavor), 0.0) / 3600.0,
                budget_gpu_hours=budget.gpu_hours, when_exhausted=budget.when_exhausted.value,
            ))  # fmt: skip
    return out


def _band(use: m.BudgetUse) -> int:
    """0 below the warning, 1 from it, 2 at or past the budget."""
    share = use.used_gpu_hours / use.budget_gpu_hours
    return 2 if share >= 1.0 else 1 if share >= WARN_FRACTION else 0


@dataclass
class BudgetReporter:
    """Decides when a cycle publishes `BudgetUsageRecorded`: at once when a pair crosses 80%
    or 100% or its period resets, else every `REPORT_EVERY_S`. What was last published is
    kept in memory: a new leader publishes again at once, which the notifier's deduplication
    (one warning per team, flavor and period) makes harmless."""

    last_at: float | None = None
    marks: dict[tuple[str, str], tuple[datetime, int]] = field(default_factory=dict)

    def report(self, view: ClusterView, now: float) -> m.BudgetUsageRecorded | None:
        uses = budget_uses(view, now)
        if not uses:
            return None
        marks = {(u.team, u.flavor): (u.period_start, _band(u)) for u in uses}
        fresh = self.last_at is not None and now - self.last_at < REPORT_EVERY_S
        if marks == self.marks and fresh:
            return None
        self.marks, self.last_at = marks, now
        return m.BudgetUsageRecorded(as_of=_at(now), budgets=uses)
