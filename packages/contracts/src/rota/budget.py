"""GPU-hour budgets: calendar periods and the one meter of GPU-seconds used in the current period.

A budget is per team and flavor, over a UTC calendar period (Slurm's PriorityUsageResetPeriod:
day, week from Monday, month, quarter, year). Use in a period is the GPU-seconds its runs held
within it; a run that spans a boundary counts in each period for its part. The meter is the
single home of that computation: the replay's simulator and the scheduler's view feed it run
starts and stops, in time order, and hand what it reads to the pure policy (`Snapshot.budget_used`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

__all__ = [
    "WARN_FRACTION", "BudgetMeter", "Exhaustion", "Period", "period_bounds", "period_label", "reset_text",
]

WARN_FRACTION = 0.8
"""The share of a budget at which the team is warned, once per period."""


class Period(StrEnum):
    day = "day"
    week = "week"
    month = "month"
    quarter = "quarter"
    year = "year"


class Exhaustion(StrEnum):
    """What a team's jobs do once it has used its budget, until the period resets."""

    wait = "wait"
    """New jobs wait with BUDGET_EXHAUSTED; running ones go on."""
    idle_only = "idle_only"
    """New jobs start only on idle GPUs, and the team's runs may be preempted by anyone."""


def _start_of(period: Period, at: datetime) -> datetime:
    day = at.replace(hour=0, minute=0, second=0, microsecond=0)
    if period is Period.day:
        return day
    if period is Period.week:
        return datetime.fromordinal(day.toordinal() - day.weekday()).replace(tzinfo=UTC)
    if period is Period.month:
        return day.replace(day=1)
    if period is Period.quarter:
        return day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1)
    return day.replace(month=1, day=1)


def _next(period: Period, start: datetime) -> datetime:
    if period is Period.day:
        return datetime.fromordinal(start.toordinal() + 1).replace(tzinfo=UTC)
    if period is Period.week:
        return datetime.fromordinal(start.toordinal() + 7).replace(tzinfo=UTC)
    months = {Period.month: 1, Period.quarter: 3, Period.year: 12}[period]
    index = start.year * 12 + start.month - 1 + months
    return start.replace(year=index // 12, month=index % 12 + 1)


def period_bounds(period: Period, t: float) -> tuple[float, float]:
    """The UTC calendar period holding epoch second `t`: [start, end)."""
    start = _start_of(period, datetime.fromtimestamp(t, UTC))
    return start.timestamp(), _next(period, start).timestamp()


def period_label(period: Period, t: float) -> str:
    """A name for the period holding `t`, as users read it ("2026-12", "2026-W49", "2026-Q4")."""
    start = datetime.fromtimestamp(period_bounds(period, t)[0], UTC)
    if period is Period.day:
        return start.strftime("%Y-%m-%d")
    if period is Period.week:
        year, week, _ = start.isocalendar()
        return f"{year}-W{week:02d}"
    if period is Period.month:
        return start.strftime("%Y-%m")
    if period is Period.quarter:
        return f"{start.year}-Q{(start.month - 1) // 3 + 1}"
    return f"{start.year}"


def reset_text(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%MZ")


@dataclass(slots=True)
class _Account:
    start: float
    end: float
    closed: float = 0.0
    """GPU-seconds of stopped runs within the period."""
    gpus: float = 0
    """GPUs of the open runs."""
    weighted_start: float = 0.0
    """Sum of gpus x max(started, period start) over the open runs."""


@dataclass(slots=True)
class BudgetMeter:
    """GPU-seconds per (team, flavor) in its current period, kept as runs start and stop.

    Only the pairs with a period (a budget) are metered, so a config without budgets costs
    nothing. Each operation is O(1): open runs are kept as a sum, so reading use at `now` does
    not walk them. Calls must come in time order.
    """

    periods: dict[tuple[str, str], Period]
    _accounts: dict[tuple[str, str], _Account] = field(default_factory=dict)
    _open: dict[str, tuple[tuple[str, str], float, float]] = field(default_factory=dict)

    def _account(self, key: tuple[str, str], at: float) -> _Account | None:
        period = self.periods.get(key)
        if period is None:
            return None
        acc = self._accounts.get(key)
        if acc is None or at >= acc.end:
            start, end = period_bounds(period, at)
            gpus = acc.gpus if acc is not None else 0
            acc = self._accounts[key] = _Account(start, end, 0.0, gpus, gpus * start)
        return acc

    def started(self, run_id: str, team: str, flavor: str, gpus: float, at: float) -> None:
        key = (team, flavor)
        acc = self._account(key, at)
        if acc is None or run_id in self._open:
            return
        self._open[run_id] = (key, gpus, at)
        acc.gpus += gpus
        acc.weighted_start += gpus * max(at, acc.start)

    def stopped(self, run_id: str, at: float) -> None:
        found = self._open.pop(run_id, None)
        if found is None:
            return
        key, gpus, began = found
        acc = self._account(key, at)
        if acc is None:
            return
        since = max(began, acc.start)
        acc.closed += gpus * max(0.0, at - since)
        acc.gpus -= gpus
        acc.weighted_start -= gpus * since

    def used(self, now: float) -> dict[tuple[str, str], float]:
        """GPU-seconds each metered pair has used in its period holding `now`, open runs up to now."""
        out: dict[tuple[str, str], float] = {}
        for key in self.periods:
            acc = self._account(key, now)
            assert acc is not None
            out[key] = acc.closed + acc.gpus * now - acc.weighted_start
        return out
