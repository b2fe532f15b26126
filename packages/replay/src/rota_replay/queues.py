"""The replay's pending queues: one per (tier, team, preferred flavor), each in submit order,
with the counts that a `PendingQueue` summarises (its smallest request, its shortest runtime,
the other flavors its jobs accept). A cycle rebuilds only the queues that changed since the
last one, so a deep queue costs nothing while it stands still.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from typing import TypeVar

from rota.contracts.common import Tier
from rota_policy.model.snapshot import PendingJob, PendingQueue

__all__ = ["QueueKey", "SimQueues", "count"]

QueueKey = tuple[Tier, str, str]
"""(tier, team, the flavor the jobs prefer)."""

_V = TypeVar("_V", bound=Hashable)


def count(counts: dict[_V, int], value: _V, delta: int) -> None:
    """Add `delta` to a multiset kept as value -> count; a count that reaches 0 goes."""
    left = counts.get(value, 0) + delta
    if left:
        counts[value] = left
    else:
        del counts[value]


class SimQueues:
    def __init__(self) -> None:
        self.jobs: dict[QueueKey, list[PendingJob]] = {}
        """Per queue, its jobs in (submit time, job id) order."""
        self.sizes: dict[QueueKey, dict[int, int]] = {}
        """Per queue, how many jobs ask for each GPU count (the queue's smallest request)."""
        self.runtimes: dict[QueueKey, dict[float, int]] = {}
        """Per queue, how many jobs have each runtime estimate, 0 for none (its shortest)."""
        self.fallback: dict[QueueKey, dict[str, int]] = {}
        """Per queue, how many jobs accept each flavor beyond the queue's (`PendingQueue.fallback`)."""
        self.shares: dict[QueueKey, int] = {}
        """Per queue, how many of its jobs ask for a GPU share (`PendingQueue.shares`)."""
        self.built: dict[QueueKey, PendingQueue] = {}
        self.dirty: set[QueueKey] = set()
        self.count = 0
        """Jobs pending in all queues."""

    def add(self, key: QueueKey, job: PendingJob) -> None:
        queue = self.jobs.setdefault(key, [])
        if not queue or (queue[-1].submitted_at, queue[-1].job_id) <= (job.submitted_at, job.job_id):
            queue.append(job)
        else:
            bisect.insort(queue, job, key=lambda p: (p.submitted_at, p.job_id))
        self._counted(key, job, +1)

    def remove(self, key: QueueKey, job: PendingJob) -> None:
        queue = self.jobs[key]
        if queue[0] is job:
            del queue[0]
        else:
            queue.remove(job)
        self._counted(key, job, -1)

    def _counted(self, key: QueueKey, job: PendingJob, delta: int) -> None:
        count(self.sizes.setdefault(key, {}), job.gpus, delta)
        count(self.runtimes.setdefault(key, {}), job.runtime_estimate_s or 0.0, delta)
        for flavor in job.fallback:
            count(self.fallback.setdefault(key, {}), flavor, delta)
        if job.share:
            self.shares[key] = self.shares.get(key, 0) + delta
        self.dirty.add(key)
        self.count += delta

    def pending(self) -> tuple[PendingQueue, ...]:
        """Every non-empty queue as the policy sees it, rebuilding the ones that changed."""
        for key in self.dirty:
            queue = self.jobs[key]
            if queue:
                jobs, least = tuple(queue), min(self.sizes[key])
                shortest = min(self.runtimes[key])
                fallback = tuple(sorted(self.fallback.get(key, ())))
                shares = self.shares.get(key, 0) > 0
                before = self.built.get(key)
                self.built[key] = (
                    before.followed_by(jobs, least, shortest, fallback, shares)
                    if before is not None
                    else PendingQueue(key[0], key[1], key[2], jobs, least, shortest, fallback, shares)
                )
            else:
                self.built.pop(key, None)
        self.dirty.clear()
        return tuple(self.built.values())
