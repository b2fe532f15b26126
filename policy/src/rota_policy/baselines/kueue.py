"""Kueue, classic preemption (no fair sharing), as its docs and code describe it.

- Queueing: one ClusterQueue per team, `queueingStrategy: BestEffortFIFO`: workloads are
  ordered by priority (here the tier), then creation time; an inadmissible head does not block
  the workloads behind it, and there is no backfill reservation (concepts/cluster_queue).
- Quota: nominal quota per flavor with borrowing from the cohort up to `borrowingLimit`, and
  `lendingLimit` (concepts/cluster_queue, "Borrowing", "LendingLimit").
- Preemption: `withinClusterQueue: LowerPriority` (own queue, strictly lower priority) and
  `reclaimWithinCohort: Any` (any priority, from ClusterQueues that are borrowing, only if
  the preemptor then fits within its own nominal quota) (concepts/preemption).
- Victim order, `pkg/scheduler/preemption/common/ordering.go` CandidatesOrdering: workloads
  already evicted first; other ClusterQueues before the preemptor's own; lower priority
  first; most recently admitted first; then UID. Candidates are added in that order until the
  preemptor fits, then those not needed are dropped in reverse order.
- The attempts, v0.17 `classicalPreemptions` (no `borrowWithinCohort`): when the preemptor
  fits within its nominal quota as things stand, borrowing ClusterQueues' workloads are
  candidates ("hierarchical advantage") and it may borrow to fit. When it does not, but its
  queue is below its nominal quota, Kueue first tries without borrowing: the other queues'
  borrowed workloads and then its own lower-priority ones are candidates, and it must end
  within its nominal quota; then, as when its queue is at or over nominal, only its own
  lower-priority workloads, borrowing allowed.
- Kueue has no minimum runtime and no per-job preemption budget.
- Eviction (simulated, not decided here): SIGTERM with a 30 s grace; the job does not save on
  SIGTERM, so it loses the work since its last periodic checkpoint.
"""

from __future__ import annotations

from rota_policy.baselines.greedy import greedy_plan
from rota_policy.cycle.engine import Cycle, Rules, run_cycle
from rota_policy.model.config import PolicyConfig
from rota_policy.model.decisions import Decisions, PreemptionPlan
from rota_policy.model.snapshot import PendingJob, Snapshot
from rota_policy.preemption.search import Candidate, PreemptionContext, expected_loss

__all__ = ["KUEUE_RULES", "schedule_kueue"]


def _kueue_planner(job: PendingJob, ctx: PreemptionContext, cy: Cycle) -> PreemptionPlan | None:
    quota, now = ctx.quota, ctx.now
    nominal = quota.limits(job.team, job.flavor).quota
    in_use = quota.in_use(job.team, job.flavor)
    cands: list[Candidate] = []
    for run in ctx.runs_by_flavor.get(job.flavor, ()):
        if run.run_id in ctx.taken:
            continue
        same_queue = run.team == job.team
        if same_queue and run.tier.rank <= job.tier.rank:
            continue
        if not same_queue and quota.borrowing(run.team, job.flavor) <= 0:
            continue
        priority = 2 - run.tier.rank
        key = (same_queue, priority, -run.started_at, run.run_id)
        cands.append(Candidate(run, 0 if same_queue else 1, expected_loss(run, now), key))
    if not cands:
        return None
    cands.sort(key=lambda c: c.key)

    def still_borrowing(c: Candidate, taken: dict[str, int]) -> bool:
        # reclaimWithinCohort: the target queue must still be over its nominal quota.
        return quota.in_use(c.run.team, job.flavor) - taken.get(c.run.team, 0) > (
            quota.limits(c.run.team, job.flavor).quota
        )

    def allowed(c: Candidate, taken: dict[str, int], own: int) -> bool:
        return c.run.team == job.team or still_borrowing(c, taken)

    if in_use + job.gpus <= nominal:
        # Hierarchical advantage: borrowers first, then its own, borrowing allowed.
        return greedy_plan(job, ctx, cands, allowed, "kueue", quotas=True)
    if in_use < nominal and any(c.run.team != job.team for c in cands):
        # Without borrowing: borrowers and its own, ending within its nominal quota.
        plan = greedy_plan(job, ctx, cands, allowed, "kueue", quotas=True,
                           within=lambda own: in_use - own + job.gpus <= nominal)
        if plan is not None:
            return plan
    own_queue = [c for c in cands if c.run.team == job.team]
    if not own_queue:
        return None
    return greedy_plan(job, ctx, own_queue, allowed, "kueue", quotas=True)


KUEUE_RULES = Rules(name="kueue", order="tier_fifo", quotas=True, backfill="greedy", planner=_kueue_planner)


def schedule_kueue(snapshot: Snapshot, now: float, config: PolicyConfig) -> Decisions:
    """Kueue ignores Rota's minimum runtime and preemption budget, so they are switched off."""
    kueue_config = config.without_protection()
    return run_cycle(snapshot, now, kueue_config, KUEUE_RULES)
