"""ETAs of quota waits (phase 6): when the team's own runs free enough of its quota.

A job refused by its team's borrowing limit starts once the team's runs of the flavor have
freed what it lacks: a small list schedule per (team, flavor) over the team's limit (quota plus
borrowing limit), its runs ending at their scaled expected ends (the scaling `eta.Eta` uses)
and the team's quota-waiting jobs booked in policy order. A job refused because other teams'
lending limits keep their idle quota back starts once enough GPUs of the flavor are freed. Either
start is no earlier than the flavor has the job's GPUs back at all (`ReleaseCurve`). A job that
asks for more than its team may ever hold gets no ETA but a named blocker.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass

from rota_policy.cycle.state import Cycle
from rota_policy.explain.eta import scaled_end
from rota_policy.explain.protection import clock
from rota_policy.model.snapshot import PendingJob, expected_ends

__all__ = ["QuotaEta", "QuotaWait", "ReleaseCurve"]


class ReleaseCurve:
    """Per flavor, the GPUs free now plus those running work gives back by each time (runs not
    already victims, and this cycle's admissions), cumulated: when `gpus` are back at the
    earliest, ignoring who else waits for them. One sort per flavor per cycle."""

    def __init__(self, cy: Cycle) -> None:
        self.cy = cy
        self._curves: dict[str, tuple[list[float], list[float]]] = {}

    def _curve(self, flavor: str) -> tuple[list[float], list[float]]:
        found = self._curves.get(flavor)
        if found is None:
            cy = self.cy
            now, scale, taken = cy.now, cy.snapshot.runtime_scale, cy.capacity.taken
            live = [r for r in cy.capacity.runs_by_flavor.get(flavor, ()) if r.run_id not in taken]
            ends = expected_ends(live, now, cy.config.default_runtime_s)
            events = [(scaled_end(r.started_at, e, now, scale), r.gpus)
                      for r, e in zip(live, ends, strict=True)]
            admitted = (j for j in cy.outcome.admitted_jobs if j.flavor == flavor)
            events.extend((now + cy.runtime(j) * scale, j.gpus) for j in admitted)
            events.sort()
            times, cumulated = [now], [float(cy.capacity.state.free_total.get(flavor, 0))]
            for t, gpus in events:
                times.append(t)
                cumulated.append(cumulated[-1] + gpus)
            found = self._curves[flavor] = (times, cumulated)
        return found

    def back_by(self, flavor: str, gpus: float) -> float | None:
        """The first time at which `gpus` of `flavor` are free or given back; None: never."""
        times, cumulated = self._curve(flavor)
        k = bisect.bisect_left(cumulated, gpus)
        return times[k] if k < len(times) else None


@dataclass(frozen=True, slots=True)
class QuotaWait:
    """A quota wait's ETA (None: never, under the team's limits), what it rests on, in words,
    and the details that say so for machines."""

    eta: float | None
    message: str
    details: tuple[tuple[str, int | float | str], ...]


@dataclass(slots=True)
class _TeamClock:
    used: float
    limit: float
    clock: float
    releases: list[tuple[float, float, str]]
    """(end, GPUs, what ends): the team's runs of the flavor, a heap."""


def _what(tier: str, job_id: str) -> str:
    return f"your team's {tier} job {job_id}"


class QuotaEta:
    """Quota waits' ETAs within one explain pass, booked in policy order per (team, flavor)."""

    def __init__(self, cy: Cycle, curve: ReleaseCurve) -> None:
        self.cy = cy
        self.curve = curve
        self._teams: dict[tuple[str, str], _TeamClock] = {}

    def _team(self, team: str, flavor: str, limit: float) -> _TeamClock:
        key = (team, flavor)
        found = self._teams.get(key)
        if found is None:
            cy = self.cy
            now, scale, save = cy.now, cy.snapshot.runtime_scale, cy.config.checkpoint_save_s
            own = [r for r in cy.snapshot.running if r.team == team and r.flavor == flavor]
            ends = expected_ends(own, now, cy.config.default_runtime_s)
            heap = [
                (now + save if r.run_id in cy.capacity.taken else scaled_end(r.started_at, end, now, scale),
                 r.demand,
                 _what(r.tier.value, r.job_id))
                for r, end in zip(own, ends, strict=True)
            ]
            heap.extend((now + cy.runtime(j) * scale, j.demand, _what(j.tier.value, j.job_id))
                        for j in cy.outcome.admitted_jobs if j.team == team and j.flavor == flavor)
            # Preemptors of the team whose plans hold quota: they run from their victims' save.
            default = cy.config.default_runtime_s * scale
            started = {a.job_id for a in cy.outcome.admissions}
            ready_at = cy.in_flight.plan_ready_at
            heap.extend((ready_at.get(job_id, now) + default, hold.gpus, f"your team's job {job_id}")
                        for job_id, hold in cy.in_flight.plan_holds.items()
                        if hold.team == team and hold.flavor == flavor and job_id not in started)
            heap.extend((cy.in_flight.plan_ready_at.get(j.job_id, now) + cy.runtime(j) * scale, j.demand,
                         _what(j.tier.value, j.job_id))
                        for j in cy.outcome.preemptors if j.team == team and j.flavor == flavor)
            heapq.heapify(heap)
            found = self._teams[key] = _TeamClock(cy.capacity.quota.in_use(team, flavor), limit, now, heap)
        return found

    def start(self, job: PendingJob, book: bool = True) -> QuotaWait:
        """The job's quota wait; `book` takes its GPUs off its team's limit from then on, for
        the jobs behind it (the exact walk's jobs, as `eta.Eta` books them)."""
        cy = self.cy
        f, team, demand = job.flavor, job.team, job.demand
        lim = cy.capacity.quota.limits(team, f)
        used = cy.capacity.quota.in_use(team, f)
        if lim.borrowing_limit is not None and used + demand > lim.quota + lim.borrowing_limit:
            return self._borrowing(job, lim.quota, lim.borrowing_limit, book)
        # Other teams' lending limits keep their idle quota back: GPUs in use must be freed.
        room = cy.capacity.state.layout.capacity.get(f, 0) - cy.capacity.quota.kept_back(team, f)
        short = max(0.0, cy.capacity.quota.total(f) + demand - room)
        freed = self.curve.back_by(f, short + cy.capacity.state.free_total.get(f, 0))
        physical = self.curve.back_by(f, demand)
        at = None if freed is None or physical is None else max(freed, physical)
        if at is None:
            return _never(f"other teams' lending limits keep back more {f} GPUs than running work will free")
        message = f"it should start by {clock(at)}, once running {f} work has freed {short:g} GPUs"
        return QuotaWait(at, message, (("eta_basis", "gpus_in_use_freed"),))

    def _borrowing(self, job: PendingJob, quota: float, borrowing: float, book: bool) -> QuotaWait:
        f, team, demand = job.flavor, job.team, job.demand
        limit = quota + borrowing
        if demand > limit:
            return _never(
                f"it asks for {demand:g} {f} GPUs, more than team {team} may ever hold: its quota of"
                f" {quota:g} plus its borrowing limit of {borrowing:g}; ask for at most {limit:g}, or"
                " for a higher limit"
            )
        tc = self._team(team, f, limit)
        releases = tc.releases if book else tc.releases.copy()
        used, quota_at, last = tc.used, tc.clock, ""
        while used + demand > tc.limit and releases:
            end, back, what = heapq.heappop(releases)
            used -= back
            quota_at = max(quota_at, end)
            last = what
        if used + demand > tc.limit:
            return _never(f"team {team}'s {f} GPUs in use are not all running work this cycle knows of")
        physical = self.curve.back_by(f, demand)
        at = max(quota_at, physical) if physical is not None else quota_at
        if book:
            tc.used, tc.clock = used + demand, quota_at
            heapq.heappush(releases, (quota_at + self.cy.runtime(job) * self.cy.snapshot.runtime_scale,
                                      demand, _what(job.tier.value, job.job_id)))
        if last:
            message = f"{last} should end by {clock(quota_at)}, which frees enough of team {team}'s {f} quota"
            details: tuple[tuple[str, int | float | str], ...] = (
                ("eta_basis", "own_runs_end"), ("held_by", last.rsplit(" ", 1)[-1]))
        else:
            message = f"team {team}'s {f} quota allows it once the jobs ahead of it have run"
            details = (("eta_basis", "own_runs_end"),)
        return QuotaWait(at, message, details)


def _never(why: str) -> QuotaWait:
    return QuotaWait(None, f"no ETA: {why}", (("blocker", "quota_limit"), ("blocker_reason", why)))
