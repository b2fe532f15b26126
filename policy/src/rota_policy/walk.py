"""Phases 2-5 of a cycle: nominate, admit, preempt, reserve (see `engine`)."""

from __future__ import annotations

from collections.abc import Callable

from rota.contracts.common import Tier
from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.backfill import ReservationBook
from rota_policy.cycle import Cycle
from rota_policy.model import PendingJob, PendingQueue
from rota_policy.ordering import QueueWalk, tier_queues

__all__ = ["walk"]

Turn = tuple[int, float, float, str]
"""When a job's turn comes: (tier group, key, submit time, id), the order the walk yields in."""
Change = tuple[Turn, int, dict[str, int]]
"""(the turn it happened in, attempts left after it, free GPUs per flavor after it)"""
Unsure = tuple[Turn, Turn, list[PendingJob], int]
"""Jobs passed over while preemption attempts were left: (the first's turn, the last's turn,
the jobs, how many changes had been logged then)."""


def _key(cy: Cycle) -> tuple[Callable[[PendingJob], float], bool]:
    return cy.order_key(), cy.rules.order == "score" and cy.scorer.dynamic


def walk(cy: Cycle) -> bool:
    """Phases 2-5. False when a job passed over would have had its own turn at preempting: the
    cycle must then be decided again without passing over (`Rules.pass_over=False`)."""
    rules, config, state, quota = cy.rules, cy.config, cy.state, cy.quota
    key, dynamic = _key(cy)
    limit = rules.reservations if rules.reservations is not None else config.backfill_reservations
    planner = rules.planner if config.preemption else None
    attempts = config.max_preemption_attempts if planner is not None else 0
    ready = {j for j, t in cy.planned.items() if t is not None}
    blocked_flavors: set[str] = set()
    all_blocked = False
    misses: dict[tuple[Tier, str, str], int] = {}
    depth = rules.per_queue_depth
    changes: list[Change] = []
    unsure: list[Unsure] = []
    free_total = state.free_total

    def quota_version() -> int:
        return quota.version

    def reservations_full(flavor: str) -> bool:
        book = cy.books.get(flavor)
        return book is not None and len(book.reservations) >= limit

    def reserved_out(q: PendingQueue) -> bool:
        # Every job of the queue would delay a reservation: too big for its spare GPUs, and
        # (even the shortest) still running at its start. Spare only shrinks within a cycle.
        book = cy.books.get(q.flavor)
        if book is None:
            return False
        end = cy.now + (q.min_runtime_s if q.min_runtime_s > 0 else 0.0)
        return any(end > r.start and q.min_gpus > r.spare for r in book.reservations)

    def hopeless(q: PendingQueue) -> bool:
        # Nothing in this queue can start now and it cannot preempt: skip it whole, unless it
        # may still hold the line (no backfill) or earn a reservation (backfill with reserve).
        if attempts > 0 or ready:
            return False
        if q.min_gpus <= free_total.get(q.flavor, 0):
            return rules.backfill == "reserve" and reservations_full(q.flavor) and reserved_out(q)
        if rules.backfill == "none":
            return all_blocked or q.flavor in blocked_flavors
        if rules.backfill == "reserve":
            return reservations_full(q.flavor)
        return True

    def room(q: PendingQueue) -> int:
        # The most GPUs a job of `q` could start on now: free, and allowed by quota. Both only
        # shrink within a cycle, and quota refuses every size above one it refuses, so the
        # largest size allowed is found by bisection, and a job above it stays unable to start.
        free = free_total.get(q.flavor, 0)
        if not rules.quotas or free <= 0 or quota.allows(q.team, q.flavor, free):
            return free
        allowed, refused = 0, free
        while refused - allowed > 1:
            mid = (allowed + refused) // 2
            if quota.allows(q.team, q.flavor, mid):
                allowed = mid
            else:
                refused = mid
        return allowed

    groups = (
        [list(cy.snapshot.pending)]
        if rules.order == "submit"
        else list(tier_queues(cy.snapshot.pending).values())
    )
    for group, queues in enumerate(groups):
        walk = QueueWalk(queues, key, dynamic=dynamic, hopeless=hopeless, version=quota_version,
                         room=room, always=cy.planned.keys())
        for job in walk:
            f, g = job.flavor, job.gpus
            if job.job_id in cy.planned:
                planned = cy.planned[job.job_id]
                if planned is not None:
                    cy.admit(job, planned, via_plan=True)
                    ready.discard(job.job_id)
                else:
                    cy.block(job, Code.WAITING_FOR_PREEMPTION)
                continue
            if f not in state.layout.flavors:
                cy.block(job, Code.NO_MATCHING_FLAVOR)
                continue
            if not state.can_ever_fit(job):
                cy.block(job, Code.EXCEEDS_CLUSTER)
                continue
            if all_blocked or f in blocked_flavors:
                cy.block(job, Code.PRIORITY, cy.head_of_line)
                continue
            code: Code
            detail = ""
            if rules.quotas and not quota.allows(job.team, f, g):
                code, detail = Code.QUOTA_EXCEEDED, quota.check(job.team, f, g).message
            elif free_total.get(f, 0) >= g:
                end = cy.now + cy.runtime(job)
                book = cy.books.get(f)
                res = book.blocking(g, end) if book is not None else None
                if res is None:
                    fit = state.find(job)
                    if fit is not None:
                        cy.admit(job, state.allocate(fit), via_plan=False)
                        changes.append(((group, *walk.current_key), attempts, dict(free_total)))
                        continue
                    code = Code.FRAGMENTATION
                else:
                    code, detail = Code.RESERVED_FOR_HIGHER_PRIORITY, res.job_id
            else:
                code = Code.INSUFFICIENT_CAPACITY
            # Blocked. Phase 4: preempt, if this job may and it really helps.
            if attempts > 0 and planner is not None and code is not Code.RESERVED_FOR_HIGHER_PRIORITY:
                attempts -= 1
                plan = planner(job, cy.preemption, cy)
                if plan is not None:
                    cy.accept_plan(job, plan)
                changes.append(((group, *walk.current_key), attempts, dict(free_total)))
                if plan is not None:
                    cy.block(job, Code.WAITING_FOR_PREEMPTION, plan.message)
                    continue
            cy.block(job, code, detail)
            # Phase 5: hold the line behind it, or reserve, or let others pass.
            if code is Code.QUOTA_EXCEEDED:
                pass
            elif rules.backfill == "none":
                cy.head_of_line = cy.head_of_line or job.job_id
                if rules.order == "submit":
                    all_blocked = True
                    break
                blocked_flavors.add(f)
            elif rules.backfill == "reserve" and code is not Code.RESERVED_FOR_HIGHER_PRIORITY:
                book = cy.book(f)
                if len(book.reservations) < limit:
                    book.reserve(job.job_id, job.tier.rank, g, free_total.get(f, 0), cy.now, cy.runtime(job))
            qkey = (job.tier, job.team, f)
            missed = misses[qkey] = misses.get(qkey, 0) + 1
            if missed >= depth:
                # Past the window only jobs that could start get a turn (those the free GPUs and
                # their quota allow, and preemptors with a plan in flight): the window bounds the
                # work spent on jobs that cannot start, never hides one that can.
                walk.narrow_current()
            if (
                attempts <= 0
                and not ready
                and not any(free_total.values())
                and (rules.backfill != "reserve" or all(reservations_full(fl) for fl in state.layout.flavors))
            ):
                break
            if (
                rules.pass_over
                and code is Code.RESERVED_FOR_HIGHER_PRIORITY
                and missed < depth
                and reservations_full(f)
                and (attempts <= 0 or not rules.quotas or quota.never_refuses(job.team, f))
            ):
                # The jobs right behind it in its queue that a reservation also blocks stay
                # blocked all cycle (reservations stay, their spare only shrinks). With no
                # reservation left to give, being blocked has no effect but the miss, unless
                # it is their turn at preempting: with attempts left, that happens only if free
                # GPUs fall below their size before their turn, which the log below tells.
                sure = attempts <= 0
                book, most = cy.books[f], None if sure else free_total.get(f, 0)
                upcoming = walk.upcoming(depth - missed)
                if _all_blocked(cy, upcoming, book, most):
                    walk.skip(len(upcoming))
                    passed = list(upcoming)
                else:
                    passed = walk.pass_over(_behind(cy, book, most), depth - missed)
                if passed:
                    _block_passed_over(cy, passed, book, sure)
                    if not sure:
                        first, last = passed[0], passed[-1]
                        unsure.append(
                            (
                                (group, key(first), first.submitted_at, first.job_id),
                                (group, key(last), last.submitted_at, last.job_id),
                                passed,
                                len(changes),
                            )
                        )
                    misses[qkey] = missed + len(passed)
                    if missed + len(passed) >= depth:
                        walk.narrow_current()
        if all_blocked and attempts <= 0 and not ready:
            break
    return _confirm(cy, unsure, changes)


def _behind(cy: Cycle, book: ReservationBook, most: int | None) -> Callable[[PendingJob], bool]:
    """Blocked by a reservation now, hence all cycle; with `most`, also needing no more GPUs."""
    now, planned, can_ever_fit, runtime = cy.now, cy.planned, cy.state.can_ever_fit, cy.runtime
    most = most if most is not None else 1 << 62

    def blocked(job: PendingJob) -> bool:
        gpus = job.gpus
        if gpus > most or job.job_id in planned or not can_ever_fit(job):
            return False
        return book.blocking(gpus, now + runtime(job)) is not None

    return blocked


def _all_blocked(
    cy: Cycle, jobs: tuple[PendingJob, ...], book: ReservationBook, most: int | None
) -> bool:
    """True only if `_behind` says yes to every one of `jobs` (one queue's): none has a plan,
    every shape fits the empty cluster, none needs more than `most`, and one reservation
    blocks them all, as none is small enough for its spare or ends before its start. Told from
    a few columns at C speed, not job by job: under overload the walk passes over hundreds of
    jobs per cycle, nearly all behind the one reservation. False sends the caller job by job."""
    if not jobs:
        return False
    if cy.planned and not cy.planned.keys().isdisjoint([j.job_id for j in jobs]):
        return False
    sizes = [j.gpus for j in jobs]
    largest = max(sizes)
    if most is not None and largest > most:
        return False
    fits, flavor = cy.state.shape_fits, jobs[0].flavor
    # A job no larger than the largest node fits on it, whatever its shape: ask per shape
    # only when the run holds a bigger one.
    if largest > cy.state.layout.max_node.get(flavor, 0) and not all(
        fits(flavor, *shape) for shape in {(j.workers, j.gpus_per_worker, j.rack) for j in jobs}
    ):
        return False
    shortest = min([j.runtime_estimate_s or 0.0 for j in jobs])
    if shortest <= 0:  # some job has no estimate: the default applies to it
        shortest = min(map(cy.runtime, jobs))
    end, least = cy.now + shortest, min(sizes)
    return any(end > r.start and least > r.spare for r in book.reservations)


def _confirm(cy: Cycle, unsure: list[Unsure], changes: list[Change]) -> bool:
    """Check each run of jobs passed over with attempts left against the changes logged after
    it: a change before the last one's turn that leaves fewer free GPUs than one of them needs
    may have made that job short of capacity at its turn, and with attempts left then, that
    turn would have searched for victims, which passing over skipped. Jobs' turns within a run
    are not told apart, so any such change counts against the whole run (the caller decides
    the cycle again: exact, only slower, and rare)."""
    for first, last, jobs, mark in unsure:
        flavor, most = jobs[0].flavor, -1
        short: Change | None = None
        for change in changes[mark:]:
            if change[0] >= last:
                break
            if most < 0:
                most = max([j.gpus for j in jobs])
            if change[2].get(flavor, 0) < most:
                if change[1] > 0:
                    return False
                short = change
        if short is not None and short[0] < first:
            # Attempts were spent by then, and every job of the run had its turn after it: only
            # the reason changes, for those too big for what was left free.
            free = short[2].get(flavor, 0)
            for job in jobs:
                if job.gpus > free:
                    cy.block(job, Code.INSUFFICIENT_CAPACITY)
    return True


def _block_passed_over(cy: Cycle, jobs: list[PendingJob], book: ReservationBook, sure: bool) -> None:
    """Each job passed over gets the reason its own turn would most likely have given it: the
    state has not moved since the job ahead of it was blocked. Unless `sure`, `_behind` already
    checked that quota cannot refuse them and that they fit in the free GPUs. The jobs share
    one queue, hence one team and flavor: quota's answer depends only on their size."""
    quota, asked, now = cy.quota, cy.asked, cy.now
    team, flavor = jobs[0].team, jobs[0].flavor
    quotas = sure and cy.rules.quotas and not quota.never_refuses(team, flavor)
    free = cy.state.free_total.get(flavor, 0)
    if not quotas:
        # Only a job asked about gets a block (`cy.block` drops the others' reasons, none of
        # which is NO_ETA); most cycles of a replay ask about nobody.
        if not asked:
            return
        jobs = [job for job in jobs if job.job_id in asked]
    refused: dict[int, bool] = {}
    for job in jobs:
        g = job.gpus
        if quotas:
            no = refused.get(g)
            if no is None:
                no = refused[g] = not quota.allows(team, flavor, g)
            if no:
                cy.block(job, Code.QUOTA_EXCEEDED, quota.check(team, flavor, g).message)
                continue
        if job.job_id not in asked:
            continue  # what `cy.block` would drop anyway
        if sure and free < g:
            cy.block(job, Code.INSUFFICIENT_CAPACITY)
        else:
            res = book.blocking(g, now + cy.runtime(job))
            cy.block(job, Code.RESERVED_FOR_HIGHER_PRIORITY, res.job_id if res is not None else "")
