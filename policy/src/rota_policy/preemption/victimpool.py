"""The runs a cycle's searches for victims may stop, and what a search needs of each.

Every search of one cycle filters the same running runs and ranks the same ones, so the pool,
its order and each run's ranking are memoized in the cycle's `PreemptionContext`. The pool is
split by how the victim key starts (resumable, tier), and each bucket is ranked only as far as
some search has read it (`cheapest`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import NamedTuple

from rota.contracts.common import TIER_ORDER

from rota_policy.admission.placement import ClusterState
from rota_policy.admission.quota import QuotaBook
from rota_policy.model.config import PolicyConfig
from rota_policy.model.snapshot import RunningRun

__all__ = [
    "OVER_BUDGET",
    "Bucket",
    "BucketOrder",
    "PoolRun",
    "PreemptionContext",
    "Ranked",
    "VictimKey",
    "expected_loss",
    "gpus_by_node",
    "ordered_bucket",
    "pool_buckets",
    "ranked_run",
    "rota_loss",
    "victim_pool",
]


def rota_loss(run: RunningRun, now: float) -> float:
    """GPU-seconds lost under Rota's notice-and-save: nothing if resumable, else the whole run
    (a share's, times its fraction: `demand`)."""
    if run.resumable:
        return 0.0
    ran = now - run.started_at  # a conditional, not max(): asked of every pool run per cycle
    return run.demand * (ran if ran > 0.0 else 0.0)


def expected_loss(run: RunningRun, now: float) -> float:
    """GPU-seconds lost if the run stopped now without saving: since its last checkpoint, or all
    (a share's times its fraction)."""
    last = run.last_checkpoint(now) if run.resumable else None
    since = run.started_at if last is None else last
    unsaved = now - since
    return run.demand * (unsaved if unsaved > 0.0 else 0.0)


OVER_BUDGET = len(TIER_ORDER)
"""The rank of a run whose team is past an `idle_only` budget: below the lowest tier."""

PoolRun = tuple[RunningRun, int]
"""A run that may be a victim this cycle (not too young, within its preemption budget), and
its tier's rank: a plain tuple, as a pool is built over every run in most cycles."""


VictimKey = tuple[bool, int, float, float, str]


class Ranked(NamedTuple):
    """A pool run ready for Rota's search (a tuple: built per run in most cycles, and sorted)."""

    key: VictimKey
    """Its victim order within a category: not resumable, lower tier, least work since its
    checkpoint, youngest, id."""
    run: RunningRun
    rank: int
    """Its tier's rank."""
    loss: float
    """Rota's loss: GPU-seconds destroyed if it stops now."""
    on_nodes: tuple[tuple[int, int], ...]
    """The GPUs it holds on each node it spans, by node index."""


Bucket = tuple[bool, int]
"""How a victim key starts: (not resumable, minus the tier's rank)."""


@dataclass(slots=True)
class PreemptionContext:
    """What every plan of one cycle shares: state, accounting, and who is already a victim."""

    now: float
    config: PolicyConfig
    state: ClusterState
    quota: QuotaBook
    runs_by_flavor: dict[str, list[RunningRun]]
    taken: set[str]
    """Run ids already victims of a plan in flight or of this cycle."""
    pools: dict[str, list[PoolRun]] = field(default_factory=dict)
    """Per flavor, the runs no rule protects: built once per cycle because every plan of the
    cycle filters the same runs."""
    ranked: dict[str, Ranked] = field(default_factory=dict)
    """Per run id, its order key and costs, which are constant within a cycle (`ranked_run`)."""
    buckets: dict[str, list[tuple[Bucket, list[PoolRun]]]] = field(default_factory=dict)
    """Per flavor, the pool split by the start of the victim key (`pool_buckets`)."""
    ordered: dict[tuple[str, Bucket], BucketOrder] = field(default_factory=dict)
    """Per flavor and bucket, its runs in victim order (`ordered_bucket`)."""
    below: dict[tuple[str, int, float], dict[int, int]] = field(default_factory=dict)
    """Per (flavor, tier rank, loss cap), the GPUs per node of pool runs below that tier that
    lose no more than the cap (`victimrules.below_within_cap`)."""
    shrinkable: dict[str, list[PoolRun]] = field(default_factory=dict)
    """Per flavor, the pool runs that could give up a worker (`shrink.shrinkable`)."""
    idle_only: frozenset[tuple[str, str]] = frozenset()
    """(team, flavor) pairs past a budget that keeps them to idle GPUs: their runs rank below
    every tier (`OVER_BUDGET`), so anyone may stop them, as borrowed experiment work."""
    share_runs: dict[str, list[RunningRun]] = field(default_factory=dict)
    """Per flavor, the runs that hold GPU shares, victims as any run (DECISIONS 84); empty for
    the baselines, whose searches count whole GPUs only."""


def victim_pool(ctx: PreemptionContext, flavor: str) -> list[PoolRun]:
    """The runs of `flavor` that no rule protects, whoever the preemptor (memoized per cycle)."""
    pool = ctx.pools.get(flavor)
    if pool is None:
        cfg = ctx.config
        # Per tier: its rank (None when its queue is not preemptible), and the runtime and
        # preemption count below which its runs are protected (the victim's queue decides its
        # minimum runtime and budget). Past an idle_only GPU-hour budget a run is preemptible
        # whatever its tier's setting and ranks below every tier; its queue's minimum runtime
        # and preemption budget still protect it from thrashing.
        now, over = ctx.now, ctx.idle_only
        rules = {
            t: (i if cfg.tier(t).preemptible else None, p.min_runtime_s, p.max_preemptions)
            for i, t in enumerate(TIER_ORDER)
            for p in (cfg.protection(t),)
        }
        runs: list[PoolRun] = []
        whole, shares = ctx.runs_by_flavor.get(flavor, ()), ctx.share_runs.get(flavor)
        for run in chain(whole, shares) if shares else whole:
            rank, min_runtime, budget = rules[run.tier]
            if over and (run.team, flavor) in over:
                rank = OVER_BUDGET
            if rank is not None and now - run.started_at >= min_runtime and run.preemptions < budget:
                runs.append((run, rank))
        pool = ctx.pools[flavor] = runs
    return pool


def pool_buckets(ctx: PreemptionContext, flavor: str) -> list[tuple[Bucket, list[PoolRun]]]:
    """The pool of `flavor` split by the start of the victim key, in key order (memoized per
    cycle): a search meets its victims in order by sorting only the buckets it gets to."""
    found = ctx.buckets.get(flavor)
    if found is None:
        split: dict[Bucket, list[PoolRun]] = {}
        for run, rank in victim_pool(ctx, flavor):
            split.setdefault((not run.resumable, -rank), []).append((run, rank))
        found = ctx.buckets[flavor] = sorted(split.items(), key=itemgetter(0))
    return found


@dataclass(slots=True)
class BucketOrder:
    """A bucket's runs in victim order, ranked only as far as some search of the cycle has
    read them: most searches stop after a few."""

    done: list[Ranked]
    rest: list[tuple[VictimKey, int, RunningRun]]
    """The others, as a heap by key."""


def ordered_bucket(
    ctx: PreemptionContext, flavor: str, bucket: Bucket, runs: list[PoolRun]
) -> Iterator[Ranked]:
    """A bucket's runs ranked and in victim order (memoized per cycle, as far as read)."""
    order = ctx.ordered.get((flavor, bucket))
    if order is None:
        rest = [(_key(run, rank, ctx.now), rank, run) for run, rank in runs]
        heapq.heapify(rest)
        order = ctx.ordered[(flavor, bucket)] = BucketOrder([], rest)
    done, rest = order.done, order.rest
    i = 0
    while True:
        if i == len(done):
            if not rest:
                return
            _, rank, run = heapq.heappop(rest)
            done.append(ranked_run(ctx, run, rank))
        yield done[i]
        i += 1


def _key(run: RunningRun, rank: int, now: float) -> VictimKey:
    return (not run.resumable, -rank, expected_loss(run, now), -run.started_at, run.run_id)


def ranked_run(ctx: PreemptionContext, run: RunningRun, rank: int) -> Ranked:
    """What every search needs of a pool run, computed once per cycle and only for the runs
    some search looks at."""
    found = ctx.ranked.get(run.run_id)
    if found is None:
        now = ctx.now
        on_nodes = tuple(gpus_by_node(run, ctx.state.layout.index).items())
        key, loss = _key(run, rank, now), rota_loss(run, now)
        found = ctx.ranked[run.run_id] = Ranked(key, run, rank, loss, on_nodes)
    return found


def gpus_by_node(
    run: RunningRun, index: dict[str, int], into: dict[int, int] | None = None
) -> dict[int, int]:
    """The GPUs `run` holds on each node (several of its workers may share one), added to `into`.
    A share counts its one GPU: what stopping it could free at most, as the searches' early
    refusals that read this need (it frees the GPU only with the other shares on it)."""
    out = {} if into is None else into
    for slot in run.placement:
        node = index[slot.node]
        out[node] = out.get(node, 0) + len(slot.gpus)
    return out
