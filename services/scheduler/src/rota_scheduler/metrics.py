"""The scheduler's metrics: what its view and the policy know after each cycle.

Queue lengths, GPU use and quota use are recomputed from the view after every cycle, whole
(`SnapshotGauge`): the view is the scheduler's truth and a cycle runs at least every tick.
Gauges cover every team and flavor of the configuration, zero included, so a team that stops
using GPUs drops to 0 on a dashboard rather than disappearing from it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from rota import metrics
from rota.config import RotaConfig
from rota.contracts.common import Tier
from rota.contracts.lifecycle import Phase
from rota_policy import Decisions
from rota_policy.model.snapshot import QUARTERS

from rota_scheduler.actions import DecisionRecord
from rota_scheduler.budgets import budget_uses
from rota_scheduler.records import JobRecord
from rota_scheduler.view import ClusterView

# A cycle's duration, observed around the whole cycle by the leader loop.
cycle_timer = metrics.SCHEDULE_CYCLE.time


@metrics.never_raises
def observe_cycle(view: ClusterView, decisions: Decisions, now: float, *,
                  queues: bool = True) -> None:
    """Recompute the scheduler gauges from the view and this cycle's decisions; the per-job
    ones (`queues`) only when the caller knows they may have changed."""
    config = view.config
    if queues:
        # A cycle explains only some jobs (see Scheduler._to_explain); the others keep the
        # primary reason they were last published with.
        fresh = {e.job_id: e.primary.value for e in decisions.pending}
        pending: Counter[tuple[str, str, str]] = Counter()
        for job in view.pending_jobs():
            last = job.pending_fingerprint
            reason = fresh.get(job.job_id) or (last.codes[0] if last and last.codes else "UNEXPLAINED")
            pending[(job.spec.queue, job.spec.team, reason)] += 1
        metrics.QUEUE_PENDING.set_all({k: float(v) for k, v in pending.items()})
        metrics.RUNNING_JOBS.set_all(
            {(): float(sum(1 for j in view.jobs.values() if j.phase is Phase.RUNNING))})

    deferred = Counter(
        found.spec.queue.value for job_id, _ in decisions.deferred if (found := view.jobs.get(job_id))
    )
    metrics.PREEMPTION_DEFERRED.set_all(
        {(tier.value,): float(deferred.get(tier.value, 0)) for tier in Tier})

    allocated = gpus_allocated(view)
    metrics.GPUS_ALLOCATED.set_all({k: float(v) for k, v in allocated.items()})
    metrics.GPUS_CAPACITY.set_all({(f,): float(n) for f, n in config.capacity().items()})
    metrics.QUOTA_USED_RATIO.set_all(quota_used_ratio(config, allocated))

    half_life = config.policy.fairshare_half_life_s
    decay = 0.5 ** (max(0.0, now - view.usage_as_of) / half_life) if view.usage_as_of else 1.0
    usage = dict.fromkeys(config.teams, 0.0)
    usage.update(view.usage)
    metrics.TEAM_USAGE.set_all({(team,): used * decay for team, used in usage.items()})
    uses = budget_uses(view, now)
    metrics.BUDGET_USED_GPU_HOURS.set_all({(u.team, u.flavor): u.used_gpu_hours for u in uses})
    metrics.BUDGET_GPU_HOURS.set_all({(u.team, u.flavor): u.budget_gpu_hours for u in uses})


def gpus_allocated(view: ClusterView) -> dict[tuple[str, str], float]:
    """GPUs the ledger granted, per (team, flavor); every configured pair present. A GPU
    share counts its fraction (two halves on one GPU: 1)."""
    config = view.config
    flavors = [f.name for f in config.cluster.flavors]
    allocated: dict[tuple[str, str], float] = {
        (team, flavor): 0 for team in config.teams for flavor in flavors}
    for allocation in view.allocations.values():
        job = view.jobs.get(allocation.job_id)
        if not allocation.granted or job is None:
            continue
        key = (job.spec.team, allocation.flavor or job.spec.flavor)
        allocated[key] = allocated.get(key, 0) + sum(
            s.share / QUARTERS if s.share else len(s.gpus) for s in allocation.placement)
    return allocated


def quota_used_ratio(
    config: RotaConfig, allocated: dict[tuple[str, str], float]
) -> dict[tuple[str, ...], float]:
    # No series where the quota is 0: the ratio would be infinite, and a team that owns
    # nothing of a flavor is all borrowing there, which `rota_gpus_allocated` shows.
    return {
        (team, flavor): allocated.get((team, flavor), 0) / quota
        for team, spec in config.teams.items()
        for flavor, quota in spec.quota.items()
        if quota > 0
    }


@metrics.never_raises
def job_started(job: JobRecord, now: float) -> None:
    """A run of `job` was just told to start: its wait in the queue ends now."""
    spec = job.spec
    metrics.QUEUE_WAIT.labels(queue=spec.queue, team=spec.team, flavor=spec.flavor).observe(
        max(0.0, now - job.queued_since))


@metrics.never_raises
def decided(records: Iterable[DecisionRecord]) -> None:
    """Count decisions once they are committed to the decision log."""
    for record in records:
        metrics.DECISIONS.labels(decision=record.decision).inc()
