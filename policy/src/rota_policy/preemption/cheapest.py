"""Rota's victim search with an early exit, beside the reference (`search.rota_plan`).

The reference costs every run a job may stop: under load about a hundred per search, while the
plan it keeps is most often one node's first victim. Victims come in Rota's order (category,
then the run's key), and a node's offer is the prefix of its victims in that order that frees
a worker's GPUs, so an offer is as bad as the last victim it needed: offers are made in the
order of their worst victim. Once the offers made with a worst victim below the next one's
seat every worker, no later offer can come before them in cost order, and the plan (made from
the first offers that seat the gang) is known. Only for a job that tries no topology level
(none asked, none declared): a gang bound to a level compares its domains, and gets the
reference. The differential test (`tests/unit/policy/test_cheapest.py`) checks both give the
same plan.
"""

from __future__ import annotations

from collections.abc import Iterator

from rota_policy.model.decisions import PreemptionPlan
from rota_policy.model.snapshot import PendingJob
from rota_policy.preemption.search import (
    Offer,
    best_plan,
    credit,
    free_offers,
    lower_tier_loses_too_much,
    offer_cost,
    rota_plan,
    worst,
)
from rota_policy.preemption.sharevictims import Choice, SharedGpus
from rota_policy.preemption.victimpool import PreemptionContext, ordered_bucket, pool_buckets
from rota_policy.preemption.victimrules import LOWER_TIER, may_reclaim_for, victim_category

__all__ = ["cheapest_plan"]


def cheapest_plan(job: PendingJob, ctx: PreemptionContext) -> PreemptionPlan | None:
    """`rota_plan(job, ctx)`, costing only the victims that come before the plan is known."""
    if ctx.state.layout.chain(job.need)[0]:
        return rota_plan(job, ctx)
    may_reclaim = may_reclaim_for(job, ctx)
    if lower_tier_loses_too_much(job, ctx, may_reclaim):
        return None
    offers = _first_offers(job, ctx, _lower_tier(job, ctx, may_reclaim))
    # Lower-tier victims come first; when they cannot seat the gang the reference decides,
    # with its refusals before costing (most such searches find nothing).
    return rota_plan(job, ctx) if offers is None else best_plan(job, ctx, offers)


def _lower_tier(job: PendingJob, ctx: PreemptionContext, may_reclaim: bool) -> Iterator[Choice]:
    """The lower-tier runs `job` may stop, in Rota's victim order, as they are met: from the
    buckets of lower tiers in order, each ranked only as far as read."""
    taken, quota, flavor, rank = ctx.taken, ctx.quota, job.flavor, job.tier.rank
    borrowing: dict[str, float] = {}
    shielded = ctx.config.protection(job.tier).shielded_from
    for bucket, runs in pool_buckets(ctx, flavor):
        if -bucket[1] <= rank:
            continue
        for ranked in ordered_bucket(ctx, flavor, bucket, runs):
            run = ranked.run
            if run.run_id in taken:
                continue
            if victim_category(job, run, ranked.rank, may_reclaim, borrowing, quota, shielded) == LOWER_TIER:
                yield (LOWER_TIER, ranked)


def _first_offers(job: PendingJob, ctx: PreemptionContext, choices: Iterator[Choice]) -> list[Offer] | None:
    """The nodes' offers in cost order (as `search._node_offers` makes them), up to the
    first ones that seat every worker and can come after no other offer; None if all of
    `choices` do not seat it."""
    per_worker, workers = job.gpus_per_worker, job.workers
    offers, gained = free_offers(job, ctx)  # offers: those that come before any still to be made
    made: list[tuple[float, Offer]] = []
    """Offers whose worst victim is the one of the choice in hand (a later one may tie), with
    what their victims lose."""
    seated = sum(offer.slots for offer in offers)
    prefixes: dict[int, list[Choice]] = {}
    shared = SharedGpus(ctx.state, job.share)
    current: tuple[int, bool, int] | None = None
    for choice in choices:
        bad, loss = worst(choice), choice[1].loss
        if bad != current:
            offers.extend(o for _, o in made)
            seated += len(made)  # a victim's offer seats one worker
            made.clear()
            current = bad
        elif made:
            # Within one worst victim, victims come by what they lose (the key orders runs that
            # cannot checkpoint by their loss; the others lose nothing): an offer that loses
            # less than this victim alone comes before every offer still to be made.
            cheaper = [o for lost, o in made if lost < loss]
            if cheaper:
                offers.extend(cheaper)
                seated += len(cheaper)
                made[:] = [m for m in made if m[0] >= loss]
        if seated >= workers:
            break
        for node, prefix in credit(choice, gained, prefixes, per_worker, shared):
            cost = offer_cost(prefix)
            made.append((cost.loss, Offer(cost, node, 1, prefix)))
    else:
        offers.extend(o for _, o in made)
        seated += len(made)
        if seated < workers:
            return None
    offers.sort(key=lambda o: (o.cost, o.node))
    return offers
