"""Rota's policy: `schedule(snapshot, now, config) -> Decisions`. Pure and deterministic.

Strict tiers; within a tier the multifactor score (queue weight, capped age, classic fair
share, quota headroom); quotas with borrowing and lending limits; best-fit gangs with rack
affinity; EASY backfill behind the head job; checkpoint-aware preemption (see `preemption`).
"""

from __future__ import annotations

from dataclasses import replace

from rota_policy.cycle.engine import Cycle, Rules, run_cycle
from rota_policy.cycle.state import MissKey
from rota_policy.model.config import PolicyConfig
from rota_policy.model.decisions import Decisions, PreemptionPlan
from rota_policy.model.snapshot import PendingJob, Snapshot
from rota_policy.preemption.cheapest import cheapest_plan
from rota_policy.preemption.search import PreemptionContext, victim_pool
from rota_policy.preemption.shrink import shrink_plan
from rota_policy.preemption.victimrules import wait_target_ends

__all__ = ["ROTA_RULES", "schedule"]


def _victim_pool_rank(cy: Cycle, flavor: str) -> int:
    """The lowest tier (highest rank) among runs of `flavor` that any rule could preempt; runs
    past an idle_only budget rank below every tier (`victimpool.OVER_BUDGET`)."""
    ranks = cy.planner_cache.pool_rank
    rank = ranks.get(flavor)
    if rank is None:
        rank = ranks[flavor] = max((r for _, r in victim_pool(cy.preemption, flavor)), default=-1)
    return rank


def _rota_planner(job: PendingJob, ctx: PreemptionContext, cy: Cycle) -> PreemptionPlan | None:
    # Cheap gate first: a plan needs either lower-tier work to stop, or room in the team's own
    # quota that borrowers are using (reclaim). Most blocked jobs have neither.
    # The victim pool costs a pass over the running runs, so it is looked at last.
    misses = cy.planner_cache.fewest_missed
    waited = cy.now >= wait_target_ends(job, cy.config.tier(job.tier).long_wait_s)
    miss_key = MissKey(job.tier, job.team, job.flavor, job.gpus_per_worker, job.need, job.share, waited)
    missed = misses.get(miss_key)
    if missed is not None and job.workers >= missed:
        return None
    quota = ctx.quota
    reclaim = quota.in_use(job.team, job.flavor) + job.demand <= quota.limits(job.team, job.flavor).quota
    if not reclaim and _victim_pool_rank(cy, job.flavor) <= job.tier.rank:
        return None
    # An elastic victim shrunk keeps running: asked before any run is stopped (DECISIONS 73);
    # not for a share, whose target is quarters of one GPU (DECISIONS 84).
    plan = (None if job.share else shrink_plan(job, ctx)) or cheapest_plan(job, ctx)
    if plan is None:
        misses[miss_key] = job.workers
    return plan


ROTA_RULES = Rules(name="rota", order="score", quotas=True, backfill="reserve", planner=_rota_planner,
                   preempt_for_wait_target=True, grow=True, share_victims=True)
_ROTA_NO_BACKFILL = replace(ROTA_RULES, backfill="none")


def schedule(snapshot: Snapshot, now: float, config: PolicyConfig) -> Decisions:
    """One Rota scheduling cycle: admissions, preemption plans, and why every other job waits."""
    return run_cycle(snapshot, now, config, ROTA_RULES if config.backfill else _ROTA_NO_BACKFILL)
