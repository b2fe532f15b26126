"""Rota's victim search with an early exit, beside the reference (`preemption.rota_plan`).

The reference costs every run a job may stop: under load about a hundred per search, while the
plan it keeps is most often one node's first victim. Victims come in Rota's order (category,
then the run's key), and a node's offer is the prefix of its victims in that order that frees
a worker's GPUs, so an offer is as bad as the last victim it needed: offers are made in the
order of their worst victim. Once the offers made with a worst victim below the next one's
seat every worker, no later offer can come before them in cost order, and the plan (made from
the first offers that seat the gang) is known. Only for a job of no rack affinity: a rack-bound
gang compares racks, and gets the reference. The differential test
(`tests/unit/policy/test_cheapest.py`) checks both give the same plan.
"""

from __future__ import annotations

from collections.abc import Iterator

from rota.contracts.job import RackAffinity

from rota_policy.model import PendingJob, PreemptionPlan
from rota_policy.preemption import (
    LOWER_TIER,
    Choice,
    Offer,
    PreemptionContext,
    best_plan,
    lower_tier_loses_too_much,
    may_reclaim_for,
    offer_cost,
    ordered_bucket,
    pool_buckets,
    rota_plan,
    victim_category,
    worst,
)

__all__ = ["cheapest_plan"]


def cheapest_plan(job: PendingJob, ctx: PreemptionContext) -> PreemptionPlan | None:
    """`rota_plan(job, ctx)`, costing only the victims that come before the plan is known."""
    if job.rack is not RackAffinity.none:
        return rota_plan(job, ctx)
    may_reclaim = may_reclaim_for(job, ctx)
    if lower_tier_loses_too_much(job, ctx, may_reclaim):
        return None
    return best_plan(job, ctx, _first_offers(job, ctx, _choices(job, ctx, may_reclaim)))


def _choices(job: PendingJob, ctx: PreemptionContext, may_reclaim: bool) -> Iterator[Choice | None]:
    """The runs `job` may stop, in Rota's victim order, as they are met: lower-tier runs from
    the buckets of lower tiers in order, then None (every victim after it is of a worse
    category, so the caller may stop there without sorting the other buckets), then the others."""
    taken, quota, flavor, rank = ctx.taken, ctx.quota, job.flavor, job.tier.rank
    borrowing: dict[str, int] = {}
    later: list[Choice] = []
    buckets = pool_buckets(ctx, flavor)
    for lower in (True, False):
        if not lower:
            yield None
        for bucket, runs in buckets:
            if (-bucket[1] > rank) is not lower:
                continue
            for ranked in ordered_bucket(ctx, flavor, bucket, runs):
                run = ranked.run
                if run.run_id in taken:
                    continue
                category = victim_category(job, run, ranked.rank, may_reclaim, borrowing, quota)
                if category == LOWER_TIER:
                    yield (category, ranked)
                elif category is not None:
                    later.append((category, ranked))
    later.sort(key=lambda c: (c[0], c[1].key))
    yield from later


def _first_offers(
    job: PendingJob, ctx: PreemptionContext, choices: Iterator[Choice | None]
) -> list[Offer]:
    """The nodes' offers in cost order (as `preemption._node_offers` makes them), up to the
    first ones that seat every worker and can come after no other offer."""
    state, per_worker, workers = ctx.state, job.gpus_per_worker, job.workers
    offers: list[Offer] = []
    """Offers that come before any offer still to be made."""
    made: list[Offer] = []
    """Offers whose worst victim is the one of the choice in hand: a later one may tie."""
    seated = 0
    gained: dict[int, int] = {}
    prefixes: dict[int, list[Choice]] = {}
    for node in state.layout.flavor_nodes.get(job.flavor, []):
        free = len(state.free[node])
        if free >= per_worker:
            offers.append((((-1, 0, False), 0.0, 0), node, free // per_worker, ()))
            seated += free // per_worker
        else:
            gained[node] = free
    current: tuple[int, bool, int] | None = None
    for choice in choices:
        bad = None if choice is None else worst(choice)
        if bad is None or bad != current:
            offers.extend(made)
            seated += len(made)  # a victim's offer seats one worker
            made.clear()
            if seated >= workers:
                break
            current = bad
        if choice is None:
            continue
        for node, gpus in choice[1].on_nodes:
            have = gained.get(node)
            if have is None:
                continue  # enough free already, or its offer is made
            prefix = prefixes.setdefault(node, [])
            prefix.append(choice)
            if have + gpus < per_worker:
                gained[node] = have + gpus
                continue
            del gained[node]
            made.append((offer_cost(prefix), node, 1, tuple(prefix)))
    offers.extend(made)
    offers.sort(key=lambda o: (o[0], o[1]))
    return offers

