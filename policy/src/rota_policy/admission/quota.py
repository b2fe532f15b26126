"""Quota accounting for one cycle: nominal quota, borrowing limit, lending limit.

All teams form one cohort, as in Kueue: a team may use its nominal quota at any time, and above
it may borrow idle GPUs up to its borrowing limit, except the part of other teams' idle quota
that their lending limit keeps back. Capacity that no team owns can be borrowed by anyone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rota_policy.model.config import PolicyConfig, TeamLimits
from rota_policy.model.snapshot import RunningRun

__all__ = ["QuotaBook", "QuotaCheck"]


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    ok: bool
    borrowed: float = 0
    """GPUs of the request above the team's nominal quota."""
    message: str = ""
    limit: float = 0


_OK = QuotaCheck(True)


class QuotaBook:
    """Per (team, flavor) GPUs in use, updated as the cycle admits and plans. A GPU share counts
    as its fraction (quarters: float sums of them are exact); with none, every count is an int."""

    __slots__ = ("_capacity", "_config", "_limits", "_protected", "_total", "_used", "_version")

    def __init__(
        self,
        config: PolicyConfig,
        running: tuple[RunningRun, ...],
        capacity: dict[str, int],
        in_use: Mapping[tuple[str, str], float] | None = None,
    ) -> None:
        """`in_use`, if given, is what `running` holds per (team, flavor) (`Snapshot.in_use`)."""
        self._config = config
        self._capacity = capacity
        self._version = 0
        if in_use is not None:
            self._used: dict[tuple[str, str], float] = dict(in_use)
        else:
            used = self._used = {}
            for run in running:
                key = (run.team, run.flavor)
                used[key] = used.get(key, 0) + run.demand
        self._total: dict[str, float] = {}
        for (_, flavor), gpus in self._used.items():
            self._total[flavor] = self._total.get(flavor, 0) + gpus
        self._limits: dict[tuple[str, str], TeamLimits] = {}
        # Only teams with a lending limit keep anything back; most configs have none.
        self._protected = [
            (name, flavor, lim)
            for name, team in config.teams.items()
            for flavor, lim in team.limits.items()
            if lim.unlendable > 0
        ]

    @property
    def version(self) -> int:
        """Bumped by every `add`, the only way usage changes: what reads usage (the headroom
        score) may cache its answer until then."""
        return self._version

    def limits(self, team: str, flavor: str) -> TeamLimits:
        key = (team, flavor)
        found = self._limits.get(key)
        if found is None:
            found = self._config.team(team).on(flavor)
            self._limits[key] = found
        return found

    def in_use(self, team: str, flavor: str) -> float:
        return self._used.get((team, flavor), 0)

    def total(self, flavor: str) -> float:
        return self._total.get(flavor, 0)

    def borrowing(self, team: str, flavor: str) -> float:
        """GPUs the team uses above its nominal quota (what its owners may reclaim)."""
        above = self._used.get((team, flavor), 0) - self.limits(team, flavor).quota
        return above if above > 0 else 0

    def allows(self, team: str, flavor: str, gpus: float) -> bool:
        """`check(team, flavor, gpus).ok` without building the answer: the admission walk asks
        this of every job it looks at, and most are within quota or freely borrowing."""
        lim = self.limits(team, flavor)
        after = self._used.get((team, flavor), 0) + gpus
        if after <= lim.quota:
            return True
        if lim.borrowing_limit is not None and after > lim.quota + lim.borrowing_limit:
            return False
        return not self._protected or self.check(team, flavor, gpus).ok

    def never_refuses(self, team: str, flavor: str) -> bool:
        """True when no amount of use can make `allows` say no: no borrowing limit, and no team
        keeps part of its quota back from lending."""
        return self.limits(team, flavor).borrowing_limit is None and not self._protected

    def check(self, team: str, flavor: str, gpus: float, released: float = 0) -> QuotaCheck:
        """May `team` take `gpus` more, after `released` of its own GPUs are given back?"""
        lim = self.limits(team, flavor)
        after = self.in_use(team, flavor) - released + gpus
        if after <= lim.quota:
            return _OK
        borrowed = min(gpus, after - lim.quota)
        if lim.borrowing_limit is not None and after > lim.quota + lim.borrowing_limit:
            return QuotaCheck(
                False,
                borrowed,
                f"insufficient borrowing limit for {flavor}: {after - lim.quota - lim.borrowing_limit} more"
                f" needed (team {team} uses {self.in_use(team, flavor) - released} with a quota of"
                f" {lim.quota} and may borrow {lim.borrowing_limit}); it starts once its own runs free"
                " that many",
                lim.quota + lim.borrowing_limit,
            )
        if self._protected:
            kept_back = self.kept_back(team, flavor)
            room = self._capacity.get(flavor, 0) - kept_back
            short = self.total(flavor) - released + gpus - room
            if short > 0:
                # With nothing kept back the flavor is simply full: say so, not "0 kept back".
                held = (f"other teams' lending limits keep {kept_back} of their idle GPUs back" if kept_back
                        else f"all {self._capacity.get(flavor, 0)} {flavor} GPUs are in use or promised")
                return QuotaCheck(
                    False,
                    borrowed,
                    f"insufficient unused quota to borrow for {flavor}: {short}"
                    f" more needed (team {team} would borrow {after - lim.quota} above its quota of"
                    f" {lim.quota}; {held}); it starts once GPUs in use are freed, or within its quota",
                    room,
                )
        return QuotaCheck(True, borrowed)

    def kept_back(self, team: str, flavor: str) -> float:
        """The idle quota of `flavor` that other teams' lending limits keep from `team`."""
        return sum(
            max(0, other.unlendable - self.in_use(name, flavor))
            for name, fl, other in self._protected
            if fl == flavor and name != team
        )

    def add(self, team: str, flavor: str, gpus: float) -> None:
        key = (team, flavor)
        self._version += 1
        self._used[key] = self._used.get(key, 0) + gpus
        self._total[flavor] = self._total.get(flavor, 0) + gpus
