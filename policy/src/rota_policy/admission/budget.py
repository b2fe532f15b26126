"""GPU-hour budgets in one cycle: which (team, flavor) pairs are at their budget, and what that
means for them.

Use is given (`Snapshot.budget_used`); the policy only compares it with the budget. A pair is
exhausted when its use has reached the budget: like Slurm's GrpTRESMins, running work is not
stopped at the budget, and admitting a job never looks ahead at what it will use. Use does not
change within a cycle (it grows with time, not with admissions), so an exhausted pair stays
exhausted all cycle, and a whole queue is blocked or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rota.budget import period_bounds, reset_text

from rota_policy.model.config import BudgetLimit, PolicyConfig

__all__ = ["BudgetState", "Exhausted"]


@dataclass(frozen=True, slots=True)
class Exhausted:
    team: str
    flavor: str
    used_s: float
    limit: BudgetLimit
    resets_at: float

    @property
    def message(self) -> str:
        lim = self.limit
        then = (
            "its jobs start only on idle GPUs, and may be preempted by anyone, until"
            if lim.idle_only
            else "its jobs wait until"
        )
        return (
            f"team {self.team} has used {_hours(self.used_s / 3600.0)} of {_hours(lim.gpu_hours)}"
            f" {self.flavor} GPU-hours"
            f" this {lim.period.value}; {then} the budget resets at {reset_text(self.resets_at)}"
        )


def _hours(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


class BudgetState:
    """The exhausted pairs of one cycle, split by what exhaustion does to them."""

    __slots__ = ("idle_only", "waiting")

    def __init__(
        self, config: PolicyConfig, used: Mapping[tuple[str, str], float] | None, now: float
    ) -> None:
        self.waiting: dict[tuple[str, str], Exhausted] = {}
        """Pairs whose jobs wait for the reset (BUDGET_EXHAUSTED)."""
        self.idle_only: dict[tuple[str, str], Exhausted] = {}
        """Pairs whose jobs start only on idle GPUs and whose runs anyone may preempt."""
        if not config.budgets:
            return
        used = used or {}
        for key, limit in config.budgets.items():
            spent = used.get(key, 0.0)
            if spent < limit.gpu_s:
                continue
            found = Exhausted(key[0], key[1], spent, limit, period_bounds(limit.period, now)[1])
            (self.idle_only if limit.idle_only else self.waiting)[key] = found

    def waits(self, team: str, flavor: str) -> Exhausted | None:
        """The exhaustion that makes this pair's jobs wait, if any."""
        waiting = self.waiting
        return waiting.get((team, flavor)) if waiting else None

    def only_idle(self, team: str, flavor: str) -> Exhausted | None:
        """The exhaustion that keeps this pair's jobs to idle GPUs, if any."""
        idle = self.idle_only
        return idle.get((team, flavor)) if idle else None
