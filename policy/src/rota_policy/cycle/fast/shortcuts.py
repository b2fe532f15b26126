"""Shortcuts of the walk: each one skips turns whose outcome the admission ladder already told.

Under overload most jobs a cycle looks at are blocked by a backfill reservation (212 per cycle
on philly-512), and trying them one by one is most of a replay's time. Two shortcuts answer
for many jobs at once, each from the ladder's rungs (`ladder`) asked of a queue's summary:
- `hopeless` drops a queue none of whose jobs can start, preempt or earn a reservation (or
  whose team has used its GPU-hour budget);
- `pass_over` passes over, in one step, the jobs right behind a reservation-blocked job that
  a reservation blocks too, and records for each the block the ladder gives it.
`Shortcuts` takes them behind the walk's one seam (`walkstate.FastPath`), whose base takes
none: the reference. `Rules.pass_over=False` keeps `hopeless` and drops `pass_over` (the engine
decides a cycle again so when a pass over may have hidden a search for victims); the tests
check that each decides as the reference: the same admissions, plans and reasons (DECISIONS 20).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

from rota_policy.admission.backfill import ReservationBook
from rota_policy.admission.block import Block
from rota_policy.admission.ladder import admission_block, quota_block, reservation_block
from rota_policy.cycle.state import Cycle
from rota_policy.cycle.walkstate import FastPath, WalkState
from rota_policy.model.keys import LaneKey
from rota_policy.model.snapshot import PendingJob, PendingQueue
from rota_policy.nominate.ordering import QueueWalk

__all__ = ["Change", "Shortcuts", "Turn", "Unsure", "all_blocked", "behind", "hopeless"]


class Turn(NamedTuple):
    """When a job's turn comes, in the order the walk yields jobs."""

    group: int
    """Its tier group's index."""
    key: float
    submitted_at: float
    job_id: str


class Change(NamedTuple):
    """Something the walk did that leaves fewer GPUs free: an admission or a preemption try."""

    turn: Turn
    attempts_left: int
    """Preemption attempts left after it."""
    free: dict[str, int]
    """Free GPUs per flavor after it."""


class Unsure(NamedTuple):
    """Jobs passed over while preemption attempts were left (see `Shortcuts.finish`)."""

    first: Turn
    last: Turn
    jobs: list[PendingJob]
    mark: int
    """How many changes had been logged when they were passed over."""


class Shortcuts(FastPath):
    """The walk's shortcuts, and what they carry through one cycle's walk. One per walk."""

    __slots__ = ("changes", "pass_over", "passed", "unsure")

    def __init__(self, pass_over: bool = True) -> None:
        self.pass_over = pass_over
        """Whether to pass over jobs behind a reservation-blocked one (`Rules.pass_over`)."""
        self.changes: list[Change] = []
        """Admissions and preemption tries since the first `unsure` run: `finish` reads only
        those after each run, so none is logged before the first."""
        self.unsure: list[Unsure] = []
        self.passed: list[tuple[Turn, PendingJob]] = []
        """Jobs passed over whose block is still to be recorded, as a heap by turn: each gets
        the ladder's answer once the walk reaches a later turn (`settle`)."""

    def hopeless(self, w: WalkState) -> Callable[[PendingQueue], bool]:
        return partial(hopeless, w)

    def before_turn(self, w: WalkState, group: int, order: QueueWalk) -> None:
        if self.passed:
            k, submitted, job_id = order.current_key
            settle(self, w, Turn(group, k, submitted, job_id))

    def changed(self, w: WalkState, group: int, order: QueueWalk) -> None:
        if self.unsure:  # only `confirm` reads the log, and only past its first entry
            k, submitted, job_id = order.current_key
            free = dict(w.cy.capacity.state.free_total)
            self.changes.append(Change(Turn(group, k, submitted, job_id), w.attempts, free))

    def reserved(self, w: WalkState, job: PendingJob, missed: int, group: int, order: QueueWalk) -> None:
        if self.pass_over:
            pass_over(self, w, job, missed, group, order)

    def finish(self, w: WalkState) -> bool:
        settle(self, w, None)
        return confirm(self)


def hopeless(w: WalkState, q: PendingQueue) -> bool:
    """Nothing in this queue can start now and it cannot preempt: skip it whole, unless it may
    still hold the line (no backfill) or earn a reservation (backfill with reserve). A queue
    whose jobs accept other flavors too is hopeless only if it is so on each of them: every
    job's flavors are among them, and every job is at least the queue's smallest."""
    cy = w.cy
    if (not q.fallback and cy.capacity.budget.waiting and cy.capacity.budget.waits(q.team, q.flavor)
            and cy.in_flight.planned.keys().isdisjoint(q.ids())):
        return True  # rung 2b blocks every job of the queue all cycle, and ends their turns
    if w.attempts > 0 or w.ready:
        return False
    if q.fallback:
        return _hopeless_on(w, q, q.flavor) and all(_hopeless_on(w, q, f) for f in q.fallback)
    return _hopeless_on(w, q, q.flavor)


def _hopeless_on(w: WalkState, q: PendingQueue, flavor: str) -> bool:
    cy, backfill = w.cy, w.cy.rules.backfill
    if q.shares and cy.capacity.state.share_room(flavor, 1):
        return False  # a share may start on a GPU already shared (no free GPU, no reservation)
    # Else a share is a 1-GPU job on every rung that follows (`ladder._share_fit`).
    if q.min_gpus <= cy.capacity.state.free_total.get(flavor, 0):
        return backfill == "reserve" and w.reservations_full(flavor) and _reserved_out(cy, q, flavor)
    if backfill == "none":
        return w.all_blocked or flavor in w.blocked_flavors
    if backfill == "reserve":
        return w.reservations_full(flavor)
    return True


def _reserved_out(cy: Cycle, q: PendingQueue, flavor: str) -> bool:
    """Rung 5 blocks the queue's smallest job, at its shortest runtime, hence every job of the
    queue (spare GPUs only shrink within a cycle). A job without an estimate counts as ending
    now, which only makes this say no more often."""
    book = cy.capacity.books.get(flavor)
    if book is None:
        return False
    return book.blocking(q.min_gpus, cy.now + (q.min_runtime_s if q.min_runtime_s > 0 else 0.0)) is not None


def pass_over(s: Shortcuts, w: WalkState, job: PendingJob, missed: int, group: int, order: QueueWalk) -> None:
    """After `job` was blocked by a reservation: pass over the jobs right behind it in its
    queue that a reservation blocks too. They stay blocked all cycle (reservations stay, their
    spare only shrinks), and with no reservation left to give, being blocked has no effect but
    the miss, unless it is their turn at preempting: with attempts left, that happens only if
    free GPUs fall below their size before their turn, which `confirm` checks at the end."""
    cy, f = w.cy, job.flavor
    if missed >= w.depth or job.fallback or job.share or not w.reservations_full(f):
        return
    if w.attempts > 0 and cy.rules.quotas and not cy.capacity.quota.never_refuses(job.team, f):
        return
    sure = w.attempts <= 0
    book, most = cy.capacity.books[f], None if sure else cy.capacity.state.free_total.get(f, 0)
    upcoming = order.upcoming(w.depth - missed)
    if all_blocked(cy, upcoming, book, most):
        order.skip(len(upcoming))
        passed = list(upcoming)
    else:
        passed = order.pass_over(behind(cy, most), w.depth - missed)
    if not passed:
        return
    _defer_blocks(s, w, passed, group)
    if not sure:
        first, last = passed[0], passed[-1]
        s.unsure.append(Unsure(_turn(w, group, first), _turn(w, group, last), passed, len(s.changes)))
    w.misses[LaneKey(job.tier, job.team, f)] = missed + len(passed)
    if missed + len(passed) >= w.depth:
        order.narrow_current()


def _turn(w: WalkState, group: int, job: PendingJob) -> Turn:
    return Turn(group, w.key(job), job.submitted_at, job.job_id)


def behind(cy: Cycle, most: int | None) -> Callable[[PendingJob], bool]:
    """Rung 5 blocks it now, hence all cycle (rung 2 passes, and it has no plan in flight);
    with `most`, it also needs no more GPUs than that."""
    planned, can_ever_fit = cy.in_flight.planned, cy.capacity.state.can_ever_fit
    most = most if most is not None else 1 << 62

    def blocked(job: PendingJob) -> bool:
        if job.gpus > most or job.fallback or job.share or job.job_id in planned or not can_ever_fit(job):
            return False
        return reservation_block(cy, job) is not None

    return blocked


def all_blocked(cy: Cycle, jobs: tuple[PendingJob, ...], book: ReservationBook, most: int | None) -> bool:
    """True only if `behind` says yes to every one of `jobs` (one queue's): none has a plan,
    rung 2 passes for every shape, none needs more than `most`, and rung 5 blocks the smallest
    at the shortest runtime, hence all. Told from a few columns at C speed, not job by job:
    under overload the walk passes over hundreds of jobs per cycle, nearly all behind the one
    reservation. False sends the caller job by job."""
    if not jobs or (cy.many and any(j.fallback for j in jobs)) or (cy.shares and any(j.share for j in jobs)):
        return False
    if cy.in_flight.planned and not cy.in_flight.planned.keys().isdisjoint([j.job_id for j in jobs]):
        return False
    sizes = [j.gpus for j in jobs]
    largest = max(sizes)
    if most is not None and largest > most:
        return False
    fits, flavor = cy.capacity.state.shape_fits, jobs[0].flavor
    # A job no larger than the largest node fits on it, whatever its shape: ask per shape
    # only when the run holds a bigger one.
    if largest > cy.capacity.state.layout.max_node.get(flavor, 0) and not all(
        fits(flavor, *shape) for shape in {(j.workers, j.gpus_per_worker, j.need) for j in jobs}
    ):
        return False
    shortest = min([j.runtime_estimate_s or 0.0 for j in jobs])
    if shortest <= 0:  # some job has no estimate: the default applies to it
        shortest = min(map(cy.runtime, jobs))
    return book.blocking(min(sizes), cy.now + shortest) is not None


def _defer_blocks(s: Shortcuts, w: WalkState, jobs: list[PendingJob], group: int) -> None:
    """Each job passed over is to get the block its own turn would have given it: the ladder's
    answer in the state of that turn, which `settle` records when the walk gets past it. Only
    a job asked about keeps a block (`Cycle.record`), but for QUOTA_EXCEEDED, which every job
    keeps; the jobs share one queue, hence one team and flavor."""
    cy = w.cy
    job = jobs[0]
    if not (cy.rules.quotas and not cy.capacity.quota.never_refuses(job.team, job.flavor)):
        if not cy.outcome.asked:  # most cycles of a replay ask about nobody
            return
        jobs = [j for j in jobs if j.job_id in cy.outcome.asked]
    for j in jobs:
        heapq.heappush(s.passed, (_turn(w, group, j), j))


def settle(s: Shortcuts, w: WalkState, turn: Turn | None) -> None:
    """Record the block of each job passed over whose turn came before `turn` (all, if None):
    the walk has changed nothing since, so the ladder answers as at that turn."""
    cy, passed = w.cy, s.passed
    refused: dict[tuple[str, str, int, int], Block | None] = {}
    while passed and (turn is None or passed[0][0] < turn):
        _, job = heapq.heappop(passed)
        if job.job_id in cy.outcome.asked:
            block = admission_block(cy, job)
        else:  # only QUOTA_EXCEEDED would be kept: rung 3 alone, once per size
            key = (job.team, job.flavor, job.gpus, cy.capacity.quota.version)
            if key not in refused:
                refused[key] = quota_block(cy, job)
            block = refused[key]
        if block is not None:
            cy.outcome.record(job, block)


def confirm(s: Shortcuts) -> bool:
    """Check each run of jobs passed over with attempts left against the changes logged after
    it: a change before the last one's turn that leaves fewer free GPUs than one of them needs
    may have made that job short of capacity at its turn, and with attempts left then, that
    turn would have searched for victims, which passing over skipped. Jobs' turns within a run
    are not told apart, so any such change counts against the whole run (the caller decides
    the cycle again: exact, only slower, and rare). Their blocks need no check: `settle` took
    each from the ladder in the state of its turn."""
    for run in s.unsure:
        flavor, most = run.jobs[0].flavor, -1
        for change in s.changes[run.mark :]:
            if change.turn >= run.last:
                break
            if most < 0:
                most = max([j.gpus for j in run.jobs])
            if change.free.get(flavor, 0) < most and change.attempts_left > 0:
                return False
    return True
