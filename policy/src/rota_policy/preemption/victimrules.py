"""Who may be a victim of whom: Rota's victim categories and the rules that give them.

  1. lower-tier work (`LOWER_TIER`);
  2. borrowed capacity that its owner reclaims, the preemptor's team staying within its quota
     (`RECLAIM`);
  3. production work, as a last resort, and only borrowed production work of another team
     (`LAST_RESORT`).
Another team's in-quota training or production work is never a victim: only what that team
borrowed is reclaimable. Experiment work is never guaranteed, so any higher tier may stop it;
nor is the work of a team past an `idle_only` GPU-hour budget, which ranks below every tier. A
queue's `preemptible_by` may leave out the preemptor's tier. The reference victim search
(`preemption`) and the early-exit one (`cheapest`) both ask `victim_category`.

The loss cap keeps a run that cannot checkpoint from being stopped, except where its team
borrowed the GPUs and their owner has waited its wait target for them (`reclaims_at_any_loss`):
then, as Kueue reclaims borrowed quota, the borrower is taken back and loses its work; else a
team could keep another's quota by marking its borrowing jobs as unable to resume.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from types import MappingProxyType

from rota.contracts.common import TIER_ORDER, Tier

from rota_policy.admission.quota import QuotaBook
from rota_policy.model.snapshot import PendingJob, RunningRun
from rota_policy.preemption.victimpool import (
    OVER_BUDGET,
    PreemptionContext,
    gpus_by_node,
    rota_loss,
    victim_pool,
)

__all__ = [
    "LAST_RESORT",
    "LOWER_TIER",
    "RECLAIM",
    "WHY",
    "below_within_cap",
    "may_reclaim_for",
    "reclaims_at_any_loss",
    "victim_category",
    "wait_target_ends",
]

LOWER_TIER, RECLAIM, LAST_RESORT = 0, 1, 2
WHY: Mapping[int, str] = MappingProxyType(
    {LOWER_TIER: "lower_tier", RECLAIM: "reclaim", LAST_RESORT: "last_resort"}
)


def below_within_cap(ctx: PreemptionContext, flavor: str, rank: int, cap: float) -> dict[int, int]:
    """GPUs per node of the pool runs of a tier below `rank` that lose at most `cap` if stopped
    (memoized per cycle): without reclaim, every victim a capped plan could keep is among them."""
    key = (flavor, rank, cap)
    held = ctx.below.get(key)
    if held is None:
        held = ctx.below[key] = {}
        now, index = ctx.now, ctx.state.layout.index
        shielded = ctx.config.protection(TIER_ORDER[rank]).shielded_from
        for run, run_rank in victim_pool(ctx, flavor):
            if (run_rank > rank and (run.tier not in shielded or run_rank == OVER_BUDGET)
                    and rota_loss(run, now) <= cap):
                gpus_by_node(run, index, held)
    return held


def victim_category(
    job: PendingJob, run: RunningRun, run_rank: int, may_reclaim: bool, borrowing: dict[str, float],
    quota: QuotaBook, shielded: Container[Tier],
) -> int | None:
    """The category `run` has as a victim of `job`, or None if no rule lets `job` stop it.
    `borrowing` memoizes per team what it borrows of the flavor, for one search; `shielded` are
    the tiers whose queues do not let `job`'s tier stop them (`Protection.shielded_from`), unless
    the run's team is past an idle_only budget (`OVER_BUDGET`), which lets anyone stop it."""
    if run.tier in shielded and run_rank != OVER_BUDGET:
        return None
    lower = run_rank > job.tier.rank
    if run.team == job.team:
        return LOWER_TIER if lower else None
    # Another team's in-quota work is guaranteed, except experiment work, which only ever
    # uses idle GPUs: otherwise only what the team borrowed is fair game.
    lent = borrowing.get(run.team)
    if lent is None:
        lent = borrowing[run.team] = quota.borrowing(run.team, job.flavor)
    borrowed = lent >= run.demand
    if lower and (borrowed or run.tier is Tier.experiment or run_rank == OVER_BUDGET):
        return LOWER_TIER
    if not borrowed or not may_reclaim:
        return None
    return LAST_RESORT if run.tier is Tier.production else RECLAIM


def may_reclaim_for(job: PendingJob, ctx: PreemptionContext) -> bool:
    """Whether `job` stays within its team's quota: only then may it take back what others
    borrowed."""
    quota = ctx.quota
    return quota.in_use(job.team, job.flavor) + job.demand <= quota.limits(job.team, job.flavor).quota


def wait_target_ends(job: PendingJob, long_wait_s: float) -> float:
    """When `job` has waited its tier's wait target (`TierPolicy.long_wait_s`)."""
    return job.submitted_at + long_wait_s


def reclaims_at_any_loss(job: PendingJob, ctx: PreemptionContext) -> bool:
    """Whether `job` takes back what other teams borrowed whatever the borrowers lose: it stays
    within its team's quota and has waited its tier's wait target. The loss cap does not count
    what such borrowers lose (`search._admissible`), but the plan's expected loss does."""
    target = ctx.config.tier(job.tier).long_wait_s
    return ctx.now >= wait_target_ends(job, target) and may_reclaim_for(job, ctx)
