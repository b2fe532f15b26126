"""What the replay counts as its clock runs (`Accounts`): the GPUs each team runs and waits
for, its decayed usage, the busy and held GPU-seconds, and the fairness samples.

The simulator changes these as runs start and stop and jobs queue; `advance` integrates them
over the time between two events, when nothing changes. The metrics read them at the end.
"""

from __future__ import annotations

from rota_policy.nominate.fairshare import accrue, usage_share_gap, water_fill

from rota_replay.simjob import Mean

__all__ = ["FAIRNESS_SAMPLE_S", "TIMELINE_S", "Accounts"]

FAIRNESS_SAMPLE_S = 300.0
TIMELINE_S = 3600.0


class Accounts:
    def __init__(
        self, teams: list[str], quotas: dict[str, int], window: tuple[float, float],
        capacity: int, half_life_s: float,
    ) -> None:
        self.capacity = capacity
        self.half_life_s = half_life_s
        self.running_gpus: dict[str, float] = dict.fromkeys(teams, 0)
        self.in_use: dict[tuple[str, str], float] = {}
        """GPUs that runs hold per (team, flavor), a share as its fraction."""
        self.pending_gpus: dict[str, float] = dict.fromkeys(teams, 0)
        self.usage = {team: (0.0, 0.0) for team in teams}  # (decayed GPU-s, as of time)
        self.weights = {team: float(quotas.get(team, 0) or 1) for team in teams}
        self.busy: float = 0
        self.busy_gpu_s = 0.0
        self.held_gpu_s = 0.0
        """GPU-seconds held over the whole replay (a shared GPU counts whole)."""
        self.window = window
        """From the first submission to the last: the span utilization and goodput cover."""
        self.fairness, self.long_term_fairness = Mean(), Mean()
        self.teams_waiting_samples = 0
        """Samples of the long-term error at which two or more teams had unmet demand."""
        self.next_sample = 0.0
        self.timeline: list[tuple[float, float]] = []
        self.next_timeline = 0.0
        self.clock = 0.0

    def advance(self, t: float, held: int) -> None:
        """Integrate busy and `held` GPUs and take fairness samples over [clock, t), state
        unchanged."""
        start, end = self.window
        lo, hi = max(self.clock, start), min(t, end)
        if hi > lo:
            self.busy_gpu_s += self.busy * (hi - lo)
        if t > self.clock:
            self.held_gpu_s += held * (t - self.clock)
        if t >= self.next_sample:
            count = int((t - self.next_sample) // FAIRNESS_SAMPLE_S) + 1
            self.next_sample += count * FAIRNESS_SAMPLE_S
            demand = {team: self.running_gpus[team] + self.pending_gpus[team] for team in self.running_gpus}
            if sum(demand.values()) >= self.capacity:
                fair = water_fill(self.capacity, demand, self.weights)
                error = sum(abs(self.running_gpus[team] - fair[team]) for team in fair) / (2 * self.capacity)
                self.fairness.add(error, count)
            gap = self._long_term_error(t)
            self.long_term_fairness.add(gap or 0.0, count)
            self.teams_waiting_samples += count if gap is not None else 0
        while t >= self.next_timeline:
            self.timeline.append((self.next_timeline, self.busy))
            self.next_timeline += TIMELINE_S
        self.clock = t

    def _long_term_error(self, t: float) -> float | None:
        """`usage_share_gap` of the decayed usage of the teams with unmet demand: fairness as
        users define it, no team monopolising GPUs over the long run, whatever the split at
        this instant."""
        used = {}
        for team, gpus in self.pending_gpus.items():
            if gpus > 0:
                value, since = self.usage[team]
                used[team] = accrue(value, self.running_gpus[team], t - since, self.half_life_s)
        return usage_share_gap(used, self.weights)

    def set_usage(self, team: str, flavor: str, t: float, delta: float) -> None:
        """A run of `team` on `flavor` started (delta > 0) or stopped (delta < 0) at `t`."""
        value, since = self.usage[team]
        self.usage[team] = (accrue(value, self.running_gpus[team], t - since, self.half_life_s), t)
        self.running_gpus[team] += delta
        left = self.in_use.get((team, flavor), 0) + delta
        if left:
            self.in_use[(team, flavor)] = left
        else:
            del self.in_use[(team, flavor)]
        self.busy += delta

    def decayed_usage(self, t: float) -> dict[str, float]:
        """Each team's usage decayed to `t`, as the policy's snapshot takes it."""
        return {
            team: accrue(value, self.running_gpus[team], t - since, self.half_life_s)
            for team, (value, since) in self.usage.items()
        }
