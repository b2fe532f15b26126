"""ETAs for phase 6: exact list scheduling near the head of a flavor's queue, a fluid beyond.

Near the head, each job starts, in policy order, when enough GPUs have come back (`Eta`). Past
`EXACT_DEPTH` jobs of a flavor the queue is treated as a fluid: each further job adds its
GPU-seconds over the flavor's capacity. The exact answer there is no more accurate than the
runtime estimates, and the fluid lets a deep job's ETA be read from per-queue prefix sums
(`DeepQueues`) instead of walking every job ahead of it, which under overload is thousands.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Sequence
from typing import NamedTuple

from rota_policy.cycle.state import Cycle
from rota_policy.model.keys import LaneKey
from rota_policy.model.snapshot import PendingJob, PendingQueue, expected_ends

__all__ = ["EXACT_DEPTH", "DeepQueues", "Eta", "scaled_end"]

EXACT_DEPTH = 128

class OrderKey(NamedTuple):
    """Where a job comes in the walk's order within its tier group."""

    key: float
    submitted_at: float
    job_id: str



def scaled_end(started_at: float, declared_end: float, now: float, scale: float) -> float:
    """When a run is expected to end: its declared runtime scaled by what the caller observed
    (`Snapshot.runtime_scale`). Past its scaled estimate it is one of the longer runs for what
    it declared, so what is left of its declared runtime is what it is likely to use, scaled."""
    end = started_at + (declared_end - started_at) * scale
    if end < now:
        end = now + (declared_end - now) * scale if declared_end > now else now
    return end


class Eta:
    """Per-flavor list scheduling: start each job, in order, when enough GPUs have come back."""

    def __init__(self, cy: Cycle) -> None:
        self.cy = cy
        self.scale = cy.snapshot.runtime_scale
        self.free: dict[str, int] = dict(cy.capacity.state.free_total)
        self.clock: dict[str, float] = {}
        self.depth: dict[str, int] = {}
        self.releases: dict[str, list[tuple[float, int, str]]] = {}
        """Per flavor, a heap of (when, GPUs back, the running job whose end it is if that end
        assumes the default runtime, else "")."""
        self.assumed = ""
        """After `start`: the job, declared with no runtime, whose assumed end set the ETA."""
        scale = self.scale
        now = cy.now
        taken, default = cy.capacity.taken, cy.config.default_runtime_s
        releases = self.releases
        live = [run for run in cy.snapshot.running if run.run_id not in taken]
        for run, declared in zip(live, expected_ends(live, now, default), strict=True):
            end = scaled_end(run.started_at, declared, now, scale)
            release = (end, run.gpus, "" if run.expected_end is not None else run.job_id)
            found = releases.get(run.flavor)
            if found is None:
                releases[run.flavor] = [release]
            else:
                found.append(release)
        for job in cy.outcome.admitted_jobs:
            ends = (now + cy.runtime(job) * scale, job.gpus, _label(job))
            self.releases.setdefault(job.flavor, []).append(ends)
        for heap in self.releases.values():
            heapq.heapify(heap)

    def start(self, job: PendingJob) -> float | None:
        f, g, cy = job.flavor, job.gpus, self.cy
        depth = self.depth.get(f, 0)
        self.depth[f] = depth + 1
        clock = self.clock.get(f, cy.now)
        runtime = cy.runtime(job) * self.scale
        if depth >= EXACT_DEPTH:
            capacity = cy.capacity.state.layout.capacity.get(f, 0) or 1
            self.clock[f] = clock + g * runtime / capacity
            return clock
        heap = self.releases.setdefault(f, [])
        free = self.free.get(f, 0)
        assumed = ""
        while free < g and heap:
            t, back, label = heapq.heappop(heap)
            free += back
            if t > clock:
                clock, assumed = t, label
        if free < g:
            return None
        self.assumed = assumed
        self.free[f] = free - g
        self.clock[f] = clock
        heapq.heappush(heap, (clock + runtime, g, ""))  # a run yet to start is named by its own wait
        return clock

    def start_any(self, job: PendingJob) -> float | None:
        """`start` for a job that accepts several flavors: the earliest over them (the first
        listed among equals), booked on that flavor."""
        best: tuple[float, str] | None = None
        for flavor in job.flavors:
            at = self.peek(flavor, job.gpus)
            if at is not None and (best is None or at < best[0]):
                best = (at, flavor)
        return None if best is None else self.start(job.on(best[1]))

    def peek(self, flavor: str, gpus: int) -> float | None:
        """What `start` would answer for `gpus` of `flavor`, changing nothing."""
        clock = self.clock.get(flavor, self.cy.now)
        if self.depth.get(flavor, 0) >= EXACT_DEPTH:
            return clock
        free = self.free.get(flavor, 0)
        if free >= gpus:
            return clock
        # The releases in order, popped from a copy of the heap only as far as needed: a
        # multi-flavor job asks this of each flavor, and sorting all of them cost more.
        events = self.releases.get(flavor, []).copy()
        while events:
            t, back, _ = heapq.heappop(events)
            free += back
            clock = max(clock, t)
            if free >= gpus:
                return clock
        return None

    def start_by_plan(self, job: PendingJob, at: float) -> float:
        """A preemptor starts on its plan's GPUs when its victims have stopped, whatever the
        queue ahead of it: they are its own, held for it and taken from no one else's turn."""
        f = job.flavor
        self.depth[f] = self.depth.get(f, 0) + 1
        ends = (at + self.cy.runtime(job) * self.scale, job.gpus, "")
        heapq.heappush(self.releases.setdefault(f, []), ends)
        return at


def _label(job: PendingJob) -> str:
    """A started job's label in the releases: its id if its end assumes the default runtime."""
    est = job.runtime_estimate_s
    return "" if est is not None and est > 0 else job.job_id


class DeepQueues:
    """What lies ahead of a job beyond where the exact walk stopped, from prefix sums.

    `groups` are the walk's queue groups in order (strict tiers, or one group); `done` is how
    many jobs of each queue the walk consumed; `key` is the walk's order key. Within a queue the
    walk's order (key, submit time, id) is the queue's order, so the jobs of a queue ahead of a
    job are a bisect away. `skipped` are jobs that do not count as they would in the queue
    (admitted this cycle, or without an ETA): `(job, counts_in_position)`.
    """

    def __init__(
        self,
        groups: Sequence[Sequence[PendingQueue]],
        done: dict[LaneKey, int],
        key: Callable[[PendingJob], float],
        skipped: Sequence[tuple[PendingJob, bool]],
    ) -> None:
        self.groups = groups
        self.done = done
        self.key = key
        self.group_of: dict[LaneKey, int] = {}
        self.queue_of: dict[LaneKey, PendingQueue] = {}
        for gi, group in enumerate(groups):
            for q in group:
                self.group_of[LaneKey(q.tier, q.team, q.flavor)] = gi
                self.queue_of[LaneKey(q.tier, q.team, q.flavor)] = q
        self.skipped = skipped

    def _order(self, job: PendingJob) -> OrderKey:
        return OrderKey(self.key(job), job.submitted_at, job.job_id)

    def _index(self, q: PendingQueue, job: PendingJob) -> int:
        """How many jobs of `q` come before `job` in the walk's order."""
        jobs = q.jobs
        if jobs and jobs[-1] is job:
            # A new submission is the tail of its own queue, which is in the walk's order.
            return len(jobs) - 1
        target = self._order(job)
        return bisect.bisect_left(jobs, target, key=self._order)

    def ahead(self, job: PendingJob, default_runtime_s: float) -> tuple[int, int, float]:
        """Jobs, GPUs and GPU-seconds of `job`'s flavor between the walk's stop and `job`."""
        f = job.flavor
        qkey = LaneKey(job.tier, job.team, f)
        gi = self.group_of[qkey]
        count, gpus, work = 0, 0, 0.0
        for gj in range(gi + 1):
            for q in self.groups[gj]:
                if q.flavor != f:
                    continue
                lo = self.done.get(LaneKey(q.tier, q.team, f), 0)
                hi = len(q.jobs) if gj < gi else self._index(q, job)
                if hi <= lo:
                    continue
                span_gpus, span_work, span_unknown = q.sums().between(lo, hi)
                count += hi - lo
                gpus += span_gpus
                work += span_work + default_runtime_s * span_unknown
        target = self._order(job)
        for other, counts in self.skipped:
            if other.flavor != f or other.job_id == job.job_id:
                continue
            okey = LaneKey(other.tier, other.team, f)
            go = self.group_of.get(okey)
            if go is None or go > gi or (go == gi and self._order(other) >= target):
                continue
            q = self.queue_of[okey]
            if self._index(q, other) < self.done.get(okey, 0):
                continue  # the exact walk already accounted for it
            g = other.gpus
            est = other.runtime_estimate_s
            work -= g * (est if est is not None and est > 0 else default_runtime_s)
            if not counts:
                count -= 1
                gpus -= g
        return count, gpus, work
