"""What per-queue protection tells a waiting job: its preemption delay, and borrowed runs that
only their queue's minimum runtime keeps from being taken back (phase 6, `reasons`).

The rules themselves are applied where victims are chosen (`victimpool.victim_pool`: minimum
runtime and budget of the victim's queue; `preemption.victimrules.victim_category`: `preemptible_by`) and
where a job would search (`walk._preempt`: the preemptor's delay).
"""

from __future__ import annotations

import heapq
from collections import Counter
from datetime import UTC, datetime

from rota.contracts.common import TIER_ORDER, Tier
from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.cycle.state import Cycle
from rota_policy.model.decisions import Reason
from rota_policy.model.snapshot import PendingJob
from rota_policy.preemption.victimpool import rota_loss, victim_pool
from rota_policy.preemption.victimrules import may_reclaim_for, victim_category, wait_target_ends

__all__ = ["Borrowed", "Borrowers", "clock", "delay_reason", "protected_borrowers", "reclaim_reason"]

Borrowed = tuple[float, int, str, Tier]
"""A borrowed run that may not be taken back yet: (when its minimum runtime ends, GPUs, team,
tier)."""
Borrowers = dict[str, tuple[list[Borrowed], list[Borrowed]]]
"""Per flavor, borrowed runs that may not be taken back yet, soonest first: those that can
checkpoint, which only their minimum runtime protects, and those that cannot, which the
preemptor's wait target protects too (`victimrules.reclaims_at_any_loss`)."""


def clock(epoch: float) -> str:
    # An absolute time, so that the message does not change from one cycle to the next.
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def delay_reason(cy: Cycle, job: PendingJob, start: float | None) -> tuple[float | None, Reason] | None:
    """For a job whose queue's preemption delay kept it from searching for victims this cycle:
    the reason that says until when, and its ETA, which is no later than the delay's end plus
    the victims' save when what it may stop would make room."""
    allowed_at = cy.outcome.deferred.get(job.job_id)
    if allowed_at is None:
        return None
    f, cfg = job.flavor, cy.config
    ctx = cy.preemption
    may_reclaim = may_reclaim_for(job, ctx)
    shielded = cfg.protection(job.tier).shielded_from
    borrowing: dict[str, float] = {}
    cap, now = cfg.max_lost_gpu_s_per_plan, cy.now
    # The runs a search could stop alone without exceeding the loss cap: what a plan at the
    # delay's end could be made of, if they are still running then.
    stoppable = sum(
        run.gpus
        for run, rank in victim_pool(ctx, f)
        if run.run_id not in ctx.taken
        and (cap is None or rota_loss(run, now) <= cap)
        and victim_category(job, run, rank, may_reclaim, borrowing, cy.capacity.quota, shielded) is not None
    )
    free = cy.capacity.state.free_total.get(f, 0)
    delay = cfg.protection(job.tier).delay_s
    message = (
        f"queue {job.tier.value} waits {delay:g} s after submission for GPUs to free themselves"
        f" before it stops anyone; it may preempt from {clock(allowed_at)}"
    )
    if free + stoppable >= job.gpus:
        message += f" ({stoppable} {f} GPUs it may stop are running now)"
        at = allowed_at + cfg.checkpoint_save_s
        start = at if start is None else min(start, at)
    else:
        message += f", though the {stoppable} {f} GPUs it may stop now would not make room"
    details = (("preemption_allowed_at", allowed_at), ("delay_s", delay), ("stoppable", stoppable))
    return start, Reason(Code.PREEMPTION_DELAYED, message, details)


def protected_borrowers(cy: Cycle) -> Borrowers:
    now, cfg, quota = cy.now, cy.config, cy.capacity.quota
    rules = {t: cfg.protection(t) for t in TIER_ORDER if cfg.tier(t).preemptible}
    out: Borrowers = {}
    for run in cy.snapshot.running:
        rule = rules.get(run.tier)
        if rule is None:
            continue
        until = run.started_at + rule.min_runtime_s
        # One that cannot checkpoint waits for the preemptor's wait target, which
        # `reclaim_reason` knows: it is kept whatever its age.
        if ((until > now or not run.resumable) and run.run_id not in cy.capacity.taken
                and run.tier is not Tier.production and run.preemptions < rule.max_preemptions
                and quota.borrowing(run.team, run.flavor) > 0):
            saving, losing = out.setdefault(run.flavor, ([], []))
            (saving if run.resumable else losing).append((until, run.gpus, run.team, run.tier))
    for saving, losing in out.values():
        saving.sort()
        losing.sort()
    return out


def reclaim_reason(cy: Cycle, job: PendingJob, borrowers: Borrowers) -> tuple[float, Reason] | None:
    """For a job within its team's quota, short of GPUs because other teams borrowed them and
    their runs may not be taken back yet (under their queue's minimum runtime, or unable to
    checkpoint before the job has waited its wait target): when enough of them may be (not
    before the job's own preemption delay ends, plus the save), and a reason that says so."""
    f, team, quota, cfg, now = job.flavor, job.team, cy.capacity.quota, cy.config, cy.now
    if quota.in_use(team, f) + job.gpus > quota.limits(team, f).quota or not cfg.preemption:
        return None
    if cy.capacity.budget.only_idle(team, f) is not None:
        return None  # past its budget it takes back nothing
    shielded = cfg.protection(job.tier).shielded_from
    allowed_at = cfg.preemption_allowed_at(job.tier, job.submitted_at)
    target = cfg.tier(job.tier).long_wait_s
    target_ends = wait_target_ends(job, target)
    saving, losing = borrowers.get(f, ((), ()))
    # One that cannot checkpoint comes back when the later of its minimum runtime and the
    # job's wait target ends: in the same order as their minimum runtimes end.
    unsaved = ((max(until, target_ends), gpus, other, tier, False) for until, gpus, other, tier in losing)
    runs = heapq.merge(((until, gpus, other, tier, True) for until, gpus, other, tier in saving),
                       (b for b in unsaved if b[0] > now))
    free = cy.capacity.state.free_total.get(f, 0)
    got, lenders, losing_gpus = free, Counter[str](), 0
    for back_at, gpus, other, tier, saves in runs:
        if other == team or tier in shielded:
            continue
        got += gpus
        lenders[other] += gpus
        losing_gpus += 0 if saves else gpus
        if got >= job.gpus:
            when = max(back_at, allowed_at)
            at = when + cfg.checkpoint_save_s
            teams = ", ".join(f"{n} GPUs to {t}" for t, n in sorted(lenders.items()))
            if back_at < allowed_at:
                ends = f"when queue {job.tier.value}'s preemption delay ends"
            elif saves or back_at > target_ends:
                ends = "when the borrowers' minimum runtime ends"
            else:
                ends = f"when queue {job.tier.value}'s wait target of {target:g} s ends"
            message = (f"needs {job.gpus} {f} GPUs; {free} are free. Team {team} is within its quota"
                       f" and has lent {teams}: they can be taken back at {clock(when)}, {ends}")
            if losing_gpus:
                message += (f"; {losing_gpus} of those GPUs hold runs that cannot checkpoint, which then"
                            " lose their work since they started")
            details = (("gpus", job.gpus), ("free", free), ("reclaimable_at", at))
            return at, Reason(Code.INSUFFICIENT_CAPACITY, message, details)
    return None
