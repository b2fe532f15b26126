"""Order of pending jobs: strict tiers, then a multifactor score, merged lazily from queues.

Rota's score (all weights are config):
    queue           w_queue x tier weight / largest tier weight
    age             w_age x min(wait, age cap) / age cap           (nothing starves)
    fairshare       w_fairshare x 2^(-U/S)                         (Slurm's classic factor)
    quota_headroom  w_headroom x unused share of the team's quota  (0 when at or above quota)

Every job of one (tier, team, flavor) queue shares all factors but age, and age grows with
wait, so each queue is already in score order; a heap over queue heads yields the global order
without scoring jobs that are never looked at. Headroom changes as the cycle admits work, so a
head's key is recomputed when it surfaces (keys only fall within a cycle, so a stale key is
never too low: the lazy check is exact).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence, Set

from rota.contracts.common import TIER_ORDER, Tier

from rota_policy.admission.quota import QuotaBook
from rota_policy.model.config import PolicyConfig
from rota_policy.model.decisions import ScoreBreakdown
from rota_policy.model.snapshot import PendingJob, PendingQueue
from rota_policy.nominate.fairshare import fairshare_factors

__all__ = ["QueueWalk", "Scorer", "tier_queues"]

KeyFn = Callable[[PendingJob], float]


class Scorer:
    """Computes Rota's score factors for one cycle; headroom reads the live quota book."""

    __slots__ = (
        "_age_w",
        "_cap",
        "_config",
        "_fs",
        "_headroom_w",
        "_now",
        "_queue",
        "_quota",
        "_static",
        "dynamic",
    )

    def __init__(
        self,
        config: PolicyConfig,
        now: float,
        usage: dict[str, float],
        quota: QuotaBook,
        teams: Sequence[str],
        *,
        headroom: bool = True,
    ) -> None:
        self._config = config
        self._now = now
        self._quota = quota
        w = config.weights
        top = max((config.tier(t).weight for t in TIER_ORDER), default=1.0) or 1.0
        self._queue = {t: w.queue * config.tier(t).weight / top for t in TIER_ORDER}
        shares = config.shares(teams)
        self._fs = {team: w.fairshare * f for team, f in fairshare_factors(usage, shares).items()}
        self._age_w = w.age
        self._cap = config.age_cap_s
        self._headroom_w = w.quota_headroom if headroom else 0.0
        self.dynamic = headroom and self._headroom_w > 0
        self._static: dict[tuple[Tier, str, str], tuple[int, float]] = {}
        """Per queue: (quota book version, queue weight + fair share + headroom) at that version."""

    def headroom(self, team: str, flavor: str) -> float:
        if not self._headroom_w:
            return 0.0
        quota = self._quota.limits(team, flavor).quota
        if quota <= 0:
            return 0.0
        return self._headroom_w * max(0.0, 1.0 - self._quota.in_use(team, flavor) / quota)

    def age(self, job: PendingJob) -> float:
        waited = self._now - job.submitted_at
        waited = waited if waited > 0.0 else 0.0
        return self._age_w * (waited if waited < self._cap else self._cap) / self._cap

    def breakdown(self, job: PendingJob) -> ScoreBreakdown:
        return ScoreBreakdown(
            queue=self._queue[job.tier],
            age=self.age(job),
            fairshare=self._fs.get(job.team, 0.0),
            quota_headroom=self.headroom(job.team, job.flavor),
        )

    def key(self, job: PendingJob) -> float:
        """Lower is earlier: the negated total.

        The hottest function of a replay, so it memoizes per queue what is constant until the
        quota book changes; the sum keeps the order queue, fair share, headroom, age, so that
        ties break as they always did.
        """
        queue = (job.tier, job.team, job.flavor)
        version = self._quota.version
        found = self._static.get(queue)
        if found is None or found[0] != version:
            found = self._static[queue] = (version, self._static_part(job))
        # self.age(job), inlined; conditionals, not min() and max(), which cost more here than
        # the rest of the key.
        waited = self._now - job.submitted_at
        waited = waited if waited > 0.0 else 0.0
        cap = self._cap
        return -(found[1] + self._age_w * (waited if waited < cap else cap) / cap)

    def _static_part(self, job: PendingJob) -> float:
        return self._queue[job.tier] + self._fs.get(job.team, 0.0) + self.headroom(job.team, job.flavor)


def submit_key(job: PendingJob) -> float:
    return job.submitted_at


class QueueWalk:
    """Lazily merges sorted queues by `key`.

    `dynamic` re-checks a head's key when it surfaces. `hopeless(queue)` lets the caller drop a
    queue none of whose jobs can start this cycle (its smallest request exceeds what is free),
    and `narrow_current()` narrows the queue of the job just yielded to the jobs that fit
    `room(queue)` GPUs at their turn: both keep a cycle's cost proportional to the queues and
    to the jobs that could start, not to all the jobs.
    """

    __slots__ = (
        "_always",
        "_current",
        "_dynamic",
        "_heap",
        "_held_back",
        "_holds_back_all",
        "_hopeless",
        "_key",
        "_narrow",
        "_narrowed",
        "_passed",
        "_queues",
        "_room",
        "_version",
        "current_key",
    )

    def __init__(
        self,
        queues: Sequence[PendingQueue],
        key: KeyFn,
        *,
        dynamic: bool = False,
        hopeless: Callable[[PendingQueue], bool] | None = None,
        version: Callable[[], int] | None = None,
        room: Callable[[PendingQueue], int] | None = None,
        held_back: Callable[[PendingJob], bool] | None = None,
        holds_back_all: Callable[[str, int, float], bool] | None = None,
        always: Set[str] = frozenset(),
    ) -> None:
        """`version()`, if given, changes whenever a dynamic key may have changed: a head whose
        key was computed at the current version is not recomputed when it surfaces. `room(q)`
        is how many GPUs a job of `q` could start on now (needed by `narrow_current`), and
        `held_back(job)` whether a reservation keeps it from starting now (`holds_back_all`: see
        `next_fitting`); the jobs in `always`
        get their turn in a narrowed queue whatever their size."""
        self._queues = queues
        self._key = key
        self._dynamic = dynamic
        self._hopeless = hopeless
        self._version = version
        self._room = room
        self._held_back = held_back
        self._holds_back_all = holds_back_all
        self._always = always
        self._narrow = False
        self._narrowed: set[int] = set()
        """Queues past their window: they yield only jobs that fit `room` at their turn."""
        self._current: tuple[PendingJob, ...] = ()
        self._passed = 0
        self.current_key: tuple[float, float, str] = (0.0, 0.0, "")
        """The heap key of the job just yielded: jobs come out in this order."""
        at = version() if version is not None else 0
        heap = []
        for i, q in enumerate(queues):
            if q.jobs:
                head = q.jobs[0]
                heap.append((key(head), head.submitted_at, head.job_id, i, 0, at))
        heapq.heapify(heap)
        self._heap = heap

    def narrow_current(self) -> None:
        """From now on, the queue of the job just yielded yields only the jobs that fit
        `room(queue)` GPUs when their turn comes; those that do not are passed by unseen. A
        window on how many blocked jobs a queue may show thus never hides one that could start.
        """
        assert self._room is not None, "narrow_current needs `room`"
        self._narrow = True

    def pass_over(self, blocked: Callable[[PendingJob], bool], limit: int) -> list[PendingJob]:
        """Consume the jobs right after the one just yielded, in its queue, while `blocked`
        says yes (at most `limit`); the walk then resumes after them. The caller vouches that
        nothing it does before their turn would come could change what happens to them."""
        jobs = self._current
        start = self._passed
        pos = start
        end = min(len(jobs), start + limit)
        while pos < end and blocked(jobs[pos]):
            pos += 1
        self._passed = pos
        return list(jobs[start:pos])

    def upcoming(self, limit: int) -> tuple[PendingJob, ...]:
        """The next `limit` jobs (or fewer) of the queue of the job just yielded."""
        start = self._passed
        return self._current[start : start + limit]

    def skip(self, count: int) -> None:
        """Consume the next `count` jobs of that queue unseen (see `pass_over`)."""
        self._passed += count

    def __iter__(self) -> Iterator[PendingJob]:
        heap, queues, key, hopeless = self._heap, self._queues, self._key, self._hopeless
        version, room, narrowed, always = self._version, self._room, self._narrowed, self._always
        dynamic, held_back = self._dynamic, self._held_back
        while heap:
            k, submitted, job_id, qi, pos, at = heap[0]
            queue = queues[qi]
            if hopeless is not None and hopeless(queue):
                heapq.heappop(heap)
                continue
            jobs = queue.jobs
            job = jobs[pos]
            if (qi in narrowed and room is not None and job.job_id not in always
                    and (job.gpus > (most := room(queue)) or (held_back is not None and held_back(job)))):
                # Free GPUs only shrink within a cycle, and reservations only grow: a job too
                # big for them now, or held back, stays so. Its successors' keys are no lower,
                # so the merged order still holds.
                nxt_pos = next_fitting(queue, pos + 1, most, always, held_back, self._holds_back_all)
                if nxt_pos is None:
                    heapq.heappop(heap)
                else:
                    self._push_back(qi, nxt_pos)
                continue
            if dynamic:
                now_at = version() if version is not None else at + 1
                if now_at != at:
                    fresh = key(job)
                    if fresh > k + 1e-9:
                        heapq.heapreplace(heap, (fresh, submitted, job_id, qi, pos, now_at))
                        continue
            self._narrow = False
            self._current, self._passed = jobs, pos + 1
            self.current_key = (k, submitted, job_id)
            yield job
            pos = self._passed
            if self._narrow:
                narrowed.add(qi)
            if pos >= len(jobs):
                heapq.heappop(heap)
            else:
                self._push_back(qi, pos)

    def _push_back(self, qi: int, pos: int) -> None:
        """Replace the heap's head, a job of queue `qi`, with that queue's job at `pos`."""
        nxt = self._queues[qi].jobs[pos]
        at = self._version() if self._version is not None else 0
        heapq.heapreplace(self._heap, (self._key(nxt), nxt.submitted_at, nxt.job_id, qi, pos, at))


def next_fitting(
    queue: PendingQueue,
    start: int,
    most: int,
    always: Set[str] = frozenset(),
    held_back: Callable[[PendingJob], bool] | None = None,
    holds_back_all: Callable[[str, int, float], bool] | None = None,
) -> int | None:
    """The position of the first job of `queue` from `start` on that needs at most `most`
    GPUs and that no reservation holds back, or that is in `always`. A plain scan, unless the
    queue's suffix minima tell at once that there is none: every job from `start` on needs
    more than `most`, or `holds_back_all(flavor, gpus, runtime_s)` says a reservation holds
    back every job of at least `gpus` GPUs and `runtime_s` (as it does one of exactly that
    size and runtime: the reservation rung only blocks more of a larger or longer job).
    Under overload nearly every scan of a narrowed queue finds nothing."""
    jobs = queue.jobs
    if start >= len(jobs):
        return None
    if not always or queue.ids().isdisjoint(always):
        # The whole queue's minima first: the caller keeps them, the suffix's cost a pass.
        if _none_from(queue, most, holds_back_all, queue.min_gpus, queue.min_runtime_s):
            return None
        if _none_from(queue, most, holds_back_all, *queue.least_from(start)):
            return None
    for pos in range(start, len(jobs)):
        job = jobs[pos]
        if job.job_id in always or (job.gpus <= most and (held_back is None or not held_back(job))):
            return pos
    return None


def _none_from(
    queue: PendingQueue,
    most: int,
    holds_back_all: Callable[[str, int, float], bool] | None,
    least: int,
    shortest: float,
) -> bool:
    if least > most or holds_back_all is None or queue.shares:
        return least > most  # (a share may start on a GPU already shared: no reservation holds it)
    if not holds_back_all(queue.flavor, least, shortest):
        return False
    return all(holds_back_all(f, least, shortest) for f in queue.fallback) if queue.fallback else True


def tier_queues(queues: Sequence[PendingQueue]) -> dict[Tier, list[PendingQueue]]:
    by_tier: dict[Tier, list[PendingQueue]] = {t: [] for t in TIER_ORDER}
    for q in queues:
        by_tier[q.tier].append(q)
    return by_tier


def ordered(
    queues: Sequence[PendingQueue], key: KeyFn, *, strict_tiers: bool, dynamic: bool = False
) -> Iterator[PendingJob]:
    """All pending jobs in policy order: per tier when `strict_tiers`, else one merged stream."""
    if not strict_tiers:
        yield from QueueWalk(queues, key, dynamic=dynamic)
        return
    for tier_list in tier_queues(queues).values():
        yield from QueueWalk(tier_list, key, dynamic=dynamic)
