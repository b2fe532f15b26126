"""Phases 2-5 of a cycle: nominate, admit, preempt, reserve (see `engine`).

`walk` is the reference: every job gets its turn in policy order and goes down the admission
ladder (`ladder`). It takes no shortcut itself: it tells its `FastPath` what it does, and asks
it for the one thing a shortcut may answer for it, which lanes to drop. The shortcuts
(`cycle.fast`: dropping a lane none of whose jobs can start, passing over runs of jobs a
reservation blocks) sit behind that seam, and the tests check that they give the same
admissions, plans and reasons as the walk without them (`walkstate.REFERENCE`).
"""

from __future__ import annotations

from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.admission.block import Block
from rota_policy.admission.ladder import admission, choose, widest
from rota_policy.cycle.restarts import restart_message
from rota_policy.cycle.state import Cycle
from rota_policy.cycle.walkstate import REFERENCE, FastPath, WalkState
from rota_policy.model.snapshot import PendingJob, PendingQueue, Restart, Slot
from rota_policy.nominate.ordering import QueueWalk, tier_queues

__all__ = ["walk"]

_FINAL = frozenset({Code.NO_MATCHING_FLAVOR, Code.EXCEEDS_CLUSTER, Code.PRIORITY, Code.BUDGET_EXHAUSTED})
"""Blocks that end a job's turn at once: it can never start, a job ahead holds the line, or its
team has no GPU-hours left this period (stopping others or a reservation would not help)."""


def walk(cy: Cycle, fast: FastPath = REFERENCE) -> bool:
    """Phases 2-5, with the shortcuts of `fast` (none by default). False when `fast` says a
    shortcut may have changed a decision: the cycle must then be decided again without it."""
    w = WalkState(cy, fast)
    for group, queues in enumerate(_groups(cy)):
        # 2. nominate: the jobs in policy order, lane heads merged lazily.
        order = _order(w, queues)
        for job in order:
            fast.before_turn(w, group, order)
            if job.job_id in cy.in_flight.planned:
                _plan_in_flight(w, job, group, order)
                continue
            # 3. admit: the admission ladder, at this job's turn.
            if job.fallback:
                blocked, go_on = _turn_of_many(w, job, group, order)
                if blocked is None:
                    continue
                if not go_on:
                    break
                code = blocked.code
            else:
                held = cy.outcome.head_of_line if w.all_blocked or job.flavor in w.blocked_flavors else None
                outcome = admission(cy, job, held)
                if not isinstance(outcome, Block):
                    sized, outcome = widest(cy, job, outcome)
                    cy.admit(sized, cy.capacity.state.place(sized, outcome), via_plan=False)
                    fast.changed(w, group, order)
                    continue
                if outcome.code in _FINAL:
                    cy.outcome.record(job, outcome)
                    continue
                # 4. preempt: victims whose stop really lets it fit.
                if _preempt(w, job, outcome.code, group, order):
                    continue
                cy.outcome.record(job, outcome)
                # 5. reserve for it, or hold the line behind it.
                if not _reserve_or_hold(w, job, outcome.code):
                    break
                code = outcome.code
            missed = w.count_miss(job, order)
            if w.nothing_left():
                break
            if code is Code.RESERVED_FOR_HIGHER_PRIORITY:
                fast.reserved(w, job, missed, group, order)
        if w.all_blocked and w.attempts <= 0 and not w.ready:
            break
    return fast.finish(w)


def _turn_of_many(w: WalkState, job: PendingJob, group: int, order: QueueWalk) -> tuple[Block | None, bool]:
    """Phases 3-5 for a job that accepts several flavors: the ladder over its flavors
    (`ladder.choose`); then, while attempts last, one search for victims that tries its
    flavors in order of preference; then a reservation on the flavor where it is expected to
    start first, or (without backfill) the line held on every flavor it accepts. Returns its
    block, None when its turn is over (admitted, final, or a plan made), and whether the walk
    goes on (False: it holds the line for every job behind it)."""
    cy = w.cy

    def held(flavor: str) -> str | None:
        return cy.outcome.head_of_line if w.all_blocked or flavor in w.blocked_flavors else None

    choice = choose(cy, job, held)
    chosen, outcome = choice.job, choice.outcome
    if not isinstance(outcome, Block):
        sized, outcome = widest(cy, chosen, outcome)
        cy.admit(sized, cy.capacity.state.place(sized, outcome), via_plan=False)
        w.fast.changed(w, group, order)
        return None, True
    if outcome.code in _FINAL:
        cy.outcome.record_on(job, chosen.flavor, outcome)
        return None, True
    if _preempt_many(w, job, choice.tried, group, order):
        return None, True
    cy.outcome.record_on(job, chosen.flavor, outcome)
    waiting = [v for v, b in choice.tried if b.code not in _FINAL and b.code is not Code.QUOTA_EXCEEDED]
    go_on = True
    if cy.rules.backfill == "none":
        for variant, block in choice.tried:
            if block.code not in _FINAL:
                go_on = _reserve_or_hold(w, variant, block.code) and go_on
    elif (cy.rules.backfill == "reserve" and outcome.code is not Code.RESERVED_FOR_HIGHER_PRIORITY
          and not all(w.reservations_full(v.flavor) for v in waiting)):
        # On the soonest flavor, or nowhere if that one's reservations are all given.
        soonest = min(waiting, key=lambda v: _first_start(cy, v), default=None)
        if soonest is not None:
            _reserve_or_hold(w, soonest, Code.INSUFFICIENT_CAPACITY)
    return outcome, go_on


def _first_start(cy: Cycle, job: PendingJob) -> float:
    found = cy.book(job.flavor).earliest(job.gpus, cy.capacity.state.free_total.get(job.flavor, 0), cy.now)
    return found[0] if found is not None else float("inf")


def _preempt_many(
    w: WalkState, job: PendingJob, tried: tuple[tuple[PendingJob, Block], ...], group: int, order: QueueWalk
) -> bool:
    """Phase 4 for a multi-flavor job: one attempt that tries each flavor whose block a
    preemption could lift, in order of preference (Kueue's whenCanPreempt: TryNextFlavor has
    already tried them all without preempting)."""
    cy = w.cy
    if w.attempts <= 0 or w.planner is None:
        return False
    candidates = [
        v for v, b in tried
        if b.code not in _FINAL and b.code is not Code.RESERVED_FOR_HIGHER_PRIORITY
        and _may_search(cy, v, b.code)
    ]
    return _search(w, job, candidates, group, order)


def _groups(cy: Cycle) -> list[list[PendingQueue]]:
    if cy.rules.order == "submit":
        return [list(cy.snapshot.pending)]
    return list(tier_queues(cy.snapshot.pending).values())


def _order(w: WalkState, queues: list[PendingQueue]) -> QueueWalk:
    return QueueWalk(queues, w.key, dynamic=w.dynamic, hopeless=w.fast.hopeless(w),
                     version=w.quota_version, room=w.room, held_back=w.held_back,
                     holds_back_all=w.holds_back_all,
                     always=w.cy.in_flight.planned.keys())


def _plan_in_flight(w: WalkState, job: PendingJob, group: int, order: QueueWalk) -> None:
    """A preemptor starts on its plan's GPUs once all are held. Until then it starts on
    capacity that freed itself, if the ladder admits it there without the plan's quota, and
    the plan gives way; or else it waits for its victims."""
    cy = w.cy
    target = cy.in_flight.planned[job.job_id]
    restart = cy.in_flight.restarting.get(job.job_id)
    if restart is not None:
        _restart_in_flight(w, job, restart, target)
        return
    if job.fallback:  # its plan is on one of its flavors: it starts there or waits
        hold = cy.in_flight.plan_holds.get(job.job_id)
        job = job.on(hold.flavor if hold is not None else job.flavor)
    if target is not None:
        cy.admit(job, target, via_plan=True)
        w.ready.discard(job.job_id)
        return
    state, flavor = cy.capacity.state, job.flavor
    if state.free_total.get(flavor, 0) >= job.gpus or (job.share and state.share_room(flavor, job.share)):
        cy.release_plan_quota(job.job_id)
        outcome = admission(cy, job)
        if not isinstance(outcome, Block):
            sized, outcome = widest(cy, job, outcome)
            placement = cy.capacity.state.place(sized, outcome)
            cy.give_up_plan(job.job_id)
            cy.admit(sized, placement, via_plan=False)
            w.fast.changed(w, group, order)  # it took free GPUs, as any admission does
            return
        cy.release_plan_quota(job.job_id, back=True)
    cy.outcome.block(job, Code.WAITING_FOR_PREEMPTION)


def _restart_in_flight(
    w: WalkState, job: PendingJob, restart: Restart, target: tuple[Slot, ...] | None
) -> None:
    """A job restarting at another size starts on exactly its held GPUs once all are free, at
    that size; until then it waits for its run to stop, never starting elsewhere meanwhile:
    its GPUs are a moment away (DECISIONS 81)."""
    cy = w.cy
    if target is None:
        cy.outcome.block(job, Code.WAITING_FOR_PREEMPTION, restart_message(restart))
        return
    job = job.on(cy.in_flight.plan_holds[job.job_id].flavor)
    cy.admit(job.sized(len(target)), target, via_plan=True)
    w.ready.discard(job.job_id)


def _preempt(w: WalkState, job: PendingJob, code: Code, group: int, order: QueueWalk) -> bool:
    """Phase 4, while attempts last: True if a plan was made for `job`."""
    if w.attempts <= 0 or w.planner is None or code is Code.RESERVED_FOR_HIGHER_PRIORITY:
        return False
    cy = w.cy
    if not _may_search(cy, job, code):
        return False
    return _search(w, job, [job], group, order)


def _search(
    w: WalkState, job: PendingJob, candidates: list[PendingJob], group: int, order: QueueWalk
) -> bool:
    """One attempt: a search for victims on each candidate (the job on one of its flavors) in
    order, until one gives a plan. True if one did."""
    cy, planner = w.cy, w.planner
    if not candidates or planner is None:
        return False
    w.attempts -= 1
    plan = None
    for variant in candidates:
        plan = planner(variant, cy.preemption, cy)
        if plan is not None:
            cy.accept_plan(variant, plan)
            break
    w.fast.changed(w, group, order)
    if plan is None:
        return False
    cy.outcome.block(job, Code.WAITING_FOR_PREEMPTION, plan.message)
    return True


def _may_search(cy: Cycle, job: PendingJob, code: Code) -> bool:
    """Whether the job, on its flavor, may search for victims now that `code` blocks it."""
    if job.share and not cy.rules.share_victims:
        return False  # the baselines' searches count whole GPUs (DECISIONS 84)
    if cy.capacity.budget.only_idle(job.team, job.flavor) is not None:
        return False  # past its budget a job takes idle GPUs only, never anyone's
    patient = cy.rules.preempt_for_wait_target and code is Code.INSUFFICIENT_CAPACITY
    if patient and not _wait_target_at_stake(cy, job):
        return False
    allowed_at = cy.config.preemption_allowed_at(job.tier, job.submitted_at)
    if cy.now < allowed_at:
        # Its queue's preemption delay: GPUs may still free themselves. It spends no attempt,
        # so the jobs behind it search as if it had not been blocked.
        cy.outcome.deferred[job.job_id] = allowed_at
        return False
    return True


def _wait_target_at_stake(cy: Cycle, job: PendingJob) -> bool:
    """Whether stopping others is needed for the job's tier's wait target, for a job short of
    free GPUs: it has waited that long already, or the GPUs that running work is expected to
    free (after the reservations ahead of it) come too late. On a light cluster they mostly
    come in time. (Counts cannot say when a fragmented cluster fits a gang, nor when quota
    allows one: those blocks search at once.)"""
    target = cy.config.tier(job.tier).long_wait_s
    if cy.now - job.submitted_at >= target:
        return True
    found = cy.book(job.flavor).earliest(job.gpus, cy.capacity.state.free_total.get(job.flavor, 0), cy.now)
    return found is None or found[0] - job.submitted_at > target


def _reserve_or_hold(w: WalkState, job: PendingJob, code: Code) -> bool:
    """Phase 5: without backfill a blocked job holds the line behind it; with reservations it
    gets one while some are left. False when it holds the line for every job behind it."""
    cy, backfill = w.cy, w.cy.rules.backfill
    if code is Code.QUOTA_EXCEEDED:
        return True
    if cy.capacity.budget.idle_only and cy.capacity.budget.only_idle(job.team, job.flavor) is not None:
        return True  # past its budget it takes idle GPUs as they come, and holds none back
    if backfill == "none":
        cy.outcome.head_of_line = cy.outcome.head_of_line or job.job_id
        if cy.rules.order == "submit":
            w.all_blocked = True
            return False
        w.blocked_flavors.add(job.flavor)
    elif backfill == "reserve" and code is not Code.RESERVED_FOR_HIGHER_PRIORITY:
        book = cy.book(job.flavor)
        if len(book.reservations) < w.limit:
            free = cy.capacity.state.free_total.get(job.flavor, 0)
            book.reserve(job.job_id, job.tier.rank, job.gpus, free, cy.now, cy.runtime(job))
    return True
