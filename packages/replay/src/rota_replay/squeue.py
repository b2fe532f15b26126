"""What `squeue --start` would print: a Slurm-style start estimate, from the replay's own state.

Slurm's backfill scheduler walks pending jobs in priority order and gives each the earliest time
at which enough resources are free for its whole time limit, given that running jobs end at
their time limits and that the jobs before it hold their reservations; a later job may take a
hole before an earlier job's reservation. That time is what `squeue --start` shows. The
scheduler tests at most `bf_max_job_test` jobs (Slurm's default, 500): a deeper job shows N/A.

The model here, computed in the same replay and state as Rota's own ETA so that the two
compare on the same jobs:
- priority is strict by tier (a partition priority), then age: the submit time;
- the time limit is the declared runtime, the trace's default for a job that declared none;
- like Rota's ETA, a flavor's GPUs are counted, not placed on nodes;
- preemption plans are not known to it, as they are not to Slurm's estimate.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping, Sequence

from rota.contracts.common import TIER_ORDER, Tier
from rota_policy.model.snapshot import PendingJob, RunningRun

__all__ = ["BF_MAX_JOB_TEST", "FreeProfile", "squeue_start"]

BF_MAX_JOB_TEST = 500


class FreeProfile:
    """The free GPUs of one flavor over time, as a step function from `now` on.

    `free[i]` holds on `[times[i], times[i + 1])`, and the last value forever after."""

    def __init__(self, now: float, free_now: int, releases: Iterable[tuple[float, int]]) -> None:
        self.times = [now]
        self.free = [free_now]
        for end, gpus in sorted(releases):
            at = max(end, now)
            if at == self.times[-1]:
                self.free[-1] += gpus
            else:
                self.times.append(at)
                self.free.append(self.free[-1] + gpus)

    def earliest(self, gpus: int, limit: float) -> float | None:
        """The first time from which `gpus` stay free for `limit` seconds; None: never."""
        times, free = self.times, self.free
        i, n = 0, len(times)
        while i < n:
            if free[i] < gpus:
                i += 1
                continue
            start, j = times[i], i + 1
            while j < n and times[j] < start + limit and free[j] >= gpus:
                j += 1
            if j == n or times[j] >= start + limit:
                return start
            i = j + 1
        return None

    def reserve(self, start: float, gpus: int, limit: float) -> None:
        lo, hi = self._split(start), self._split(start + limit)
        for k in range(lo, hi):
            self.free[k] -= gpus

    def _split(self, at: float) -> int:
        """Index of the segment that starts at `at`, made if need be."""
        k = bisect.bisect_left(self.times, at)
        if k < len(self.times) and self.times[k] == at:
            return k
        self.times.insert(k, at)
        self.free.insert(k, self.free[k - 1])
        return k


def _order(queues: Mapping[tuple[Tier, str, str], Sequence[PendingJob]], flavor: str) -> Iterable[PendingJob]:
    """The flavor's pending jobs in Slurm's priority order: tier, then submit time."""
    for tier in TIER_ORDER:
        lists = [jobs for (t, _, f), jobs in queues.items() if t is tier and f == flavor and jobs]
        yield from heapq.merge(*lists, key=lambda p: (p.submitted_at, p.job_id))


def _ahead_of(queues: Mapping[tuple[Tier, str, str], Sequence[PendingJob]], job: PendingJob) -> int:
    """How many jobs come before `job` in the order, at least: every job of a higher tier."""
    higher = {t for t in TIER_ORDER if t.rank < job.tier.rank}
    return sum(len(jobs) for (t, _, f), jobs in queues.items() if f == job.flavor and t in higher)


def squeue_start(
    now: float,
    free_now: Mapping[str, int],
    running: Iterable[RunningRun],
    queues: Mapping[tuple[Tier, str, str], Sequence[PendingJob]],
    targets: Sequence[PendingJob],
    default_limit_s: float,
) -> dict[str, float | None]:
    """Each target's start as Slurm's backfill would estimate it now; None where it shows N/A."""
    out: dict[str, float | None] = {}
    by_flavor: dict[str, list[PendingJob]] = {}
    for job in targets:
        if _ahead_of(queues, job) >= BF_MAX_JOB_TEST:
            out[job.job_id] = None
        else:
            by_flavor.setdefault(job.flavor, []).append(job)
    runs = list(running)
    for flavor, wanted in by_flavor.items():
        releases = [
            (r.expected_end if r.expected_end is not None else r.started_at + default_limit_s, r.gpus)
            for r in runs
            if r.flavor == flavor
        ]
        profile = FreeProfile(now, free_now.get(flavor, 0), releases)
        left = {j.job_id for j in wanted}
        for depth, job in enumerate(_order(queues, flavor)):
            if depth >= BF_MAX_JOB_TEST or not left:
                break
            limit = job.runtime_estimate_s or default_limit_s
            start = profile.earliest(job.gpus, limit)
            if start is not None:
                profile.reserve(start, job.gpus, limit)
            if job.job_id in left:
                out[job.job_id] = start
                left.discard(job.job_id)
        out.update(dict.fromkeys(left))
    return out
