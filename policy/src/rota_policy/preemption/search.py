"""Choosing victims: decide here, act elsewhere (the coordinator runs the plan).

A plan is made only if the preemptor really fits once its victims stop, gang and rack included:
the plan names the preemptor's exact placement (`target`), and the GPUs of that target are held
for it while the victims save and stop.

Rota's victim order (DESIGN §4): lower-tier work, resumable before not resumable, lowest tier
first, then the least work since the last checkpoint; then borrowed capacity that its owner
reclaims; then, as a last resort, borrowed production work. Who may be a victim of whom is
`victimrules`; which runs are protected whoever the preemptor (minimum runtime, preemption
budget) is `victimpool`.

Rota's victims get a notice and save before they stop, so a resumable victim loses nothing:
its expected loss is 0 and only a victim that cannot checkpoint loses its run. No plan may
destroy more than `max_lost_gpu_s_per_plan` (default 0), whatever the preemptor's tier, but
for borrowers taken back by a team that has waited its wait target for its own quota
(`victimrules.reclaims_at_any_loss`): their loss counts in the plan's expected loss only.
Selection is per node: each node's cheapest prefix of victims that frees a worker's GPUs,
then the cheapest nodes (in the best rack, for rack-bound gangs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from rota.contracts.common import Tier

from rota_policy.admission.placement import ClusterState, Fit
from rota_policy.model.decisions import PreemptionPlan, VictimChoice
from rota_policy.model.snapshot import QUARTERS, PendingJob, RunningRun, Slot
from rota_policy.preemption.sharevictims import (
    Choice,
    SharedGpus,
    describe_freed,
    describe_need,
    share_target,
)
from rota_policy.preemption.victimpool import (
    PoolRun,
    PreemptionContext,
    expected_loss,
    gpus_by_node,
    ranked_run,
    rota_loss,
    victim_pool,
)
from rota_policy.preemption.victimrules import (
    LAST_RESORT,
    RECLAIM,
    WHY,
    below_within_cap,
    may_reclaim_for,
    reclaims_at_any_loss,
    victim_category,
)

__all__ = [
    "FREE",
    "Candidate",
    "Offer",
    "OfferCost",
    "PoolRun",
    "PreemptionContext",
    "best_plan",
    "expected_loss",
    "lower_tier_loses_too_much",
    "make_plan",
    "offer_cost",
    "rota_plan",
    "slots_from",
    "victim_pool",
    "worst",
]



@dataclass(frozen=True, slots=True)
class Candidate:
    run: RunningRun
    category: int
    loss: float
    key: tuple[object, ...]


class OfferCost(NamedTuple):
    """What an offer costs; costs compare the worst victim first, then the loss, then how many
    runs stop."""

    worst: tuple[int, ...]
    """Its worst victim's (category, cannot checkpoint, tier rank): `worst`."""
    loss: float
    victims: int


FREE = OfferCost((-1, 0, False), 0.0, 0)
"""The cost of free GPUs: below every offer that stops a run."""


class Offer(NamedTuple):
    """What a node offers a gang."""

    cost: OfferCost
    node: int
    """The node's index."""
    slots: int
    """The worker slots it seats."""
    victims: tuple[Choice, ...]
    """The victims to stop for them, in Rota's order."""


def slots_from(state: ClusterState, fit: Fit, freed: dict[int, list[int]]) -> tuple[Slot, ...]:
    """Exact GPU indices for a fit on currently free GPUs plus the victims' GPUs."""
    pools = {node: sorted(set(state.free[node]) | set(freed.get(node, ()))) for node, _ in fit}
    slots = []
    for worker, (node, gpus) in enumerate(fit):
        pool = pools[node]
        slots.append(Slot(worker, state.layout.names[node], tuple(pool[:gpus])))
        del pool[:gpus]
    return tuple(slots)


def make_plan(
    job: PendingJob, chosen: Sequence[Candidate], target: tuple[Slot, ...], style: str
) -> PreemptionPlan:
    victims = tuple(
        VictimChoice(
            c.run.run_id,
            c.run.job_id,
            c.run.team,
            c.run.tier,
            c.run.gpus,
            c.loss,
            c.run.team != job.team,
            WHY[c.category],
            share=c.run.share,
        )
        for c in chosen
    )
    lost = sum(c.loss for c in chosen)
    worst = max(c.category for c in chosen)
    tiers = sorted({c.run.tier.value for c in chosen})
    return PreemptionPlan(
        preemptor_job_id=job.job_id,
        preemptor_tier=job.tier,
        victims=victims,
        target=target,
        expected_lost_gpu_s=lost,
        reason=f"{style}:{WHY[worst]}",
        message=(
            f"{job.tier.value} job {job.job_id} needs {describe_need(job.gpus, job.share, job.flavor)};"
            f" stopping {len(victims)} run(s) ({', '.join(tiers)}) {_frees(chosen, job.flavor)},"
            f" expected loss {lost / 3600:.2f} GPU-hours"
        ),
    )


def _frees(chosen: Sequence[Candidate], flavor: str) -> str:
    if not any(c.run.share for c in chosen):
        return "frees them"
    return "stops " + describe_freed([s for c in chosen for s in c.run.placement], flavor)


# ---------------------------------------------------------------- Rota


def lower_tier_loses_too_much(job: PendingJob, ctx: PreemptionContext, may_reclaim: bool) -> bool:
    """A job that cannot reclaim stops only lower-tier work, and `_must_lose_too_much` would
    refuse unless such runs within the cap make room. Asked of all of them (whichever team,
    taken or not: more than a search picks), from one map per cycle, before any search: under
    load nearly every search ends here."""
    cap = ctx.config.max_lost_gpu_s_per_plan
    return (
        cap is not None
        and not may_reclaim
        and _too_few_slots(job, ctx, below_within_cap(ctx, job.flavor, job.tier.rank, cap))
    )


def _rota_candidates(job: PendingJob, ctx: PreemptionContext) -> list[Choice]:
    """The runs this job may stop, in Rota's victim order (category first); empty when even
    all of them together with the free GPUs are too few."""
    quota, taken, flavor = ctx.quota, ctx.taken, job.flavor
    may_reclaim = may_reclaim_for(job, ctx)
    cap = ctx.config.max_lost_gpu_s_per_plan
    if lower_tier_loses_too_much(job, ctx, may_reclaim):
        return []
    borrowing: dict[str, float] = {}
    shielded = ctx.config.protection(job.tier).shielded_from
    picked: list[tuple[RunningRun, int, int]] = []
    picked_gpus = 0
    for run, run_rank in victim_pool(ctx, flavor):
        if run.run_id in taken:
            continue
        category = victim_category(job, run, run_rank, may_reclaim, borrowing, quota, shielded)
        if category is None:
            continue
        picked.append((run, run_rank, category))
        picked_gpus += run.gpus or 1  # a share may free its GPU, with the others on it
    # Every slot of a plan comes from free GPUs or victims' GPUs: if both together are too few,
    # no choice of nodes can fit the gang (the common case under load), so stop before costing.
    if ctx.state.free_total.get(flavor, 0) + picked_gpus < job.gpus:
        return []
    if cap is not None and _must_lose_too_much(job, ctx, picked, cap):
        return []
    choices = [(category, ranked_run(ctx, run, rank)) for run, rank, category in picked]
    choices.sort()
    return choices


def _must_lose_too_much(
    job: PendingJob, ctx: PreemptionContext, picked: list[tuple[RunningRun, int, int]], cap: float
) -> bool:
    """True when every placement the search could find stops a run that alone loses more than
    `cap`, so that `_admissible` would refuse whichever plan it found. A node offers a worker
    slot without such a run only from its free GPUs plus the allowed victims on it; if those
    slots are too few for the gang, there is no point in searching. (Most searches by
    non-production jobs under load end here: the runs they could stop cannot checkpoint.)"""
    now, index, quota = ctx.now, ctx.state.layout.index, ctx.quota
    at_any_loss = reclaims_at_any_loss(job, ctx)
    allowed: dict[int, int] = {}
    for run, _, _ in picked:
        if rota_loss(run, now) <= cap or (
            at_any_loss and run.team != job.team and quota.borrowing(run.team, job.flavor) >= run.demand
        ):
            gpus_by_node(run, index, allowed)
    return _too_few_slots(job, ctx, allowed)


def _too_few_slots(job: PendingJob, ctx: PreemptionContext, held: dict[int, int]) -> bool:
    """True when the gang has fewer worker slots than workers, where a node offers slots from
    its free GPUs, or one slot from its free GPUs plus the `held` GPUs (per node) of runs that
    would stop."""
    state, per_worker, workers = ctx.state, job.gpus_per_worker, job.workers
    if job.share and state.share_room(job.flavor, job.share):
        return False  # room on a GPU already shared seats it
    buckets = state.buckets.get(job.flavor, [])
    # Nodes by free count: what free GPUs alone offer costs a step per count, not per node.
    slots = sum((count // per_worker) * len(buckets[count]) for count in range(per_worker, len(buckets)))
    if slots >= workers:
        return False
    free_gpus = state.free
    for node, gpus in held.items():
        free = len(free_gpus[node])
        if free < per_worker <= free + gpus:
            slots += 1
            if slots >= workers:
                return False
    return True


def worst(choice: Choice) -> tuple[int, bool, int]:
    """How bad a victim is, worst first: its category, whether it cannot checkpoint, its tier."""
    category, ranked = choice
    return (category, ranked.key[0], ranked.key[1])


def free_offers(job: PendingJob, ctx: PreemptionContext) -> tuple[list[Offer], dict[int, int]]:
    """The worker slots the job's flavor has free, at no cost, and what each other node has
    free towards a worker."""
    state, per_worker = ctx.state, job.gpus_per_worker
    offers: list[Offer] = []
    gained: dict[int, int] = {}
    room = QUARTERS - job.share
    for node in state.layout.flavor_nodes.get(job.flavor, []):
        free = len(state.free[node])
        if free >= per_worker:
            offers.append(Offer(FREE, node, free // per_worker, ()))
        elif job.share and any(  # room on a GPU already shared seats a share at no cost
            used <= room and (node, gpu) not in state.held for gpu, used in state.parts.get(node, {}).items()
        ):
            offers.append(Offer(FREE, node, 1, ()))
        else:
            gained[node] = free
    return offers, gained


def credit(
    choice: Choice, gained: dict[int, int], prefixes: dict[int, list[Choice]], per_worker: int,
    shared: SharedGpus,
) -> list[tuple[int, tuple[Choice, ...]]]:
    """Adds a victim's GPUs to what each of its nodes has gained; returns the nodes whose gain
    now seats a worker, each with the victims that free it, in order. A share's GPU counts
    once the shares met on it leave the preemptor's room (`sharevictims`)."""
    if choice[1].run.share:
        return shared.credit(choice, gained, prefixes, per_worker)
    seated = []
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
        seated.append((node, tuple(prefix)))
    return seated


def offer_cost(victims: Sequence[Choice]) -> OfferCost:
    """Costs compare the worst victim first, then the loss, then how many runs stop."""
    return OfferCost(max(worst(c) for c in victims), sum(c[1].loss for c in victims), len(victims))


def _node_offers(job: PendingJob, ctx: PreemptionContext, choices: list[Choice]) -> list[Offer]:
    """Each node's offer: its free worker slots at no cost, or one slot after its cheapest
    prefix of victims. Costs compare worst category first, then loss, then victim count."""
    per_worker = job.gpus_per_worker
    offers, gained = free_offers(job, ctx)
    prefixes: dict[int, list[Choice]] = {}
    shared = SharedGpus(ctx.state, job.share)
    for choice in choices:
        for node, prefix in credit(choice, gained, prefixes, per_worker, shared):
            offers.append(Offer(offer_cost(prefix), node, 1, prefix))
    offers.sort(key=lambda o: (o.cost, o.node))
    return offers


def rota_plan(job: PendingJob, ctx: PreemptionContext) -> PreemptionPlan | None:
    """Rota's search, the reference: every candidate is costed (`cheapest.cheapest_plan` stops
    once the cheapest plan is known)."""
    choices = _rota_candidates(job, ctx)
    if not choices:
        return None
    return best_plan(job, ctx, _node_offers(job, ctx, choices))


def best_plan(job: PendingJob, ctx: PreemptionContext, offers: list[Offer]) -> PreemptionPlan | None:
    """The cheapest admissible plan from the nodes' `offers` in cost order (all of them, or at
    least the first ones that seat every worker, for a job of no rack affinity)."""
    state = ctx.state
    groups: list[list[Offer]] = []
    levels, hard = state.layout.chain(job.need)
    for level in levels:
        domains = state.layout.domains(level)
        by_domain: dict[str, list[Offer]] = {}
        for offer in offers:
            by_domain.setdefault(domains[offer.node], []).append(offer)
        groups.extend(by_domain.values())
    if not hard:
        groups.append(offers)
    per_worker = job.gpus_per_worker
    best: tuple[OfferCost, Fit, list[Choice]] | None = None
    for group in groups:
        fit: Fit = []
        chosen: dict[str, Choice] = {}
        for _, node, slots, node_victims in group:
            take = min(slots, job.workers - len(fit))
            fit.extend((node, per_worker) for _ in range(take))
            for c in node_victims:
                chosen[c[1].run.run_id] = c
            if len(fit) == job.workers:
                break
        if len(fit) < job.workers or not chosen:
            continue
        ordered = sorted(chosen.values(), key=lambda c: (c[0], c[1].key))
        cost = offer_cost(ordered)
        if best is None or cost < best[0]:
            best = (cost, fit, ordered)
    if best is None:
        return None
    _, fit, ordered = best
    victims = tuple(Candidate(r.run, category, r.loss, (category, *r.key)) for category, r in ordered)
    if not _admissible(job, victims, ctx):
        return None
    return make_plan(job, victims, _target(job, state, fit, victims), "rota")


def _target(job: PendingJob, state: ClusterState, fit: Fit, victims: Sequence[Candidate]) -> tuple[Slot, ...]:
    """The preemptor's exact placement on the plan's nodes: free GPUs and the GPUs its victims
    free (a share victim's GPU only with every share on it, which the search made sure of), or
    a share preemptor's one GPU with its quarters."""
    index = state.layout.index
    if job.share:
        node = fit[0][0]
        name = state.layout.names[node]
        slots = [s for v in victims for s in v.run.placement if s.node == name]
        return share_target(state, node, slots, job.share)
    freed: dict[int, list[int]] = {}
    for victim in victims:
        for slot in victim.run.placement:
            freed.setdefault(index[slot.node], []).extend(slot.gpus)
    return slots_from(state, fit, freed)


def _admissible(job: PendingJob, victims: Sequence[Candidate], ctx: PreemptionContext) -> bool:
    """Quota, borrowing and loss rules for the whole set (victims can share a team)."""
    quota, cfg = ctx.quota, ctx.config
    own = sum(c.run.demand for c in victims if c.run.team == job.team)
    if not quota.check(job.team, job.flavor, job.demand, released=own).ok:
        return False
    if any(c.category == RECLAIM or c.category == LAST_RESORT for c in victims) and (
        quota.in_use(job.team, job.flavor) - own + job.demand > quota.limits(job.team, job.flavor).quota
    ):
        return False
    per_team: dict[str, float] = {}
    over = ctx.idle_only
    for c in victims:
        # Only borrowed GPUs of another team's guaranteed work may be taken: experiment work
        # and work past an idle_only budget are guaranteed nothing.
        if (c.run.team != job.team and c.run.tier is not Tier.experiment
                and (not over or (c.run.team, job.flavor) not in over)):
            per_team[c.run.team] = per_team.get(c.run.team, 0) + c.run.demand
    if any(gpus > quota.borrowing(team, job.flavor) for team, gpus in per_team.items()):
        return False
    cap = cfg.max_lost_gpu_s_per_plan
    if cap is None:
        return True
    reclaimed = _reclaimed_teams(job, victims, ctx)
    return sum(c.loss for c in victims if c.run.team not in reclaimed) <= cap


def _reclaimed_teams(job: PendingJob, victims: Sequence[Candidate], ctx: PreemptionContext) -> set[str]:
    """The other teams whose victims the loss cap does not count: when the job reclaims at any
    loss (`victimrules.reclaims_at_any_loss`), those whose victims together hold no more than
    the team borrows, so that only borrowed GPUs are taken back at a loss."""
    if not reclaims_at_any_loss(job, ctx):
        return set()
    taken: dict[str, float] = {}
    for c in victims:
        if c.run.team != job.team:
            taken[c.run.team] = taken.get(c.run.team, 0) + c.run.demand
    return {team for team, gpus in taken.items() if gpus <= ctx.quota.borrowing(team, job.flavor)}
