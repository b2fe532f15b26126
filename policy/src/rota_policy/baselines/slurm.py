"""Slurm with the multifactor priority plugin, backfill and partition-priority preemption.

- Priority (priority_multifactor docs): each tier is a partition with its own PriorityTier;
  higher-tier partitions are scheduled first. Within a tier, job priority is
  PriorityWeightAge x age factor (wait / PriorityMaxAge, capped at 1) + PriorityWeightFairshare
  x the classic fair-share factor 2^(-U/S), with usage decayed by PriorityDecayHalfLife (7 days).
  There are no quotas.
- Backfill (sched_config docs, sched/backfill): jobs are tested in priority order; a lower job
  may start only if it does not delay the expected start of any higher job tested before it,
  judged by time limits (declared runtimes). Each tested job that cannot start keeps a
  reservation, up to a depth like bf_max_job_test; bf_max_job_user bounds jobs tried per queue.
- Preemption (preempt docs): PreemptType=preempt/partition_prio, PreemptMode=REQUEUE,
  GraceTime=300. Only jobs in a lower-PriorityTier partition are preemptable. Candidates are
  taken from the lowest partition tier first, then by lowest job priority (here the owner's
  fair-share factor), the most recently started first; Slurm then drops the preemptees that
  the preemptor does not need. No PreemptExemptTime is set, so there is no minimum runtime.
- Eviction (simulated): on SIGTERM a resumable job saves a checkpoint in its 60 s and exits;
  a job that is not resumable exits and loses everything.
"""

from __future__ import annotations

from rota_policy.baselines.greedy import greedy_plan
from rota_policy.cycle.engine import Cycle, Rules, run_cycle
from rota_policy.model.config import PolicyConfig
from rota_policy.model.decisions import Decisions, PreemptionPlan
from rota_policy.model.snapshot import PendingJob, Snapshot
from rota_policy.preemption.search import Candidate, PreemptionContext, expected_loss

__all__ = ["SLURM_RESERVATIONS", "SLURM_RULES", "schedule_slurm"]

SLURM_RESERVATIONS = 16
"""Reservations per flavor: the blocked jobs whose expected start backfill must not delay."""


def _slurm_planner(job: PendingJob, ctx: PreemptionContext, cy: Cycle) -> PreemptionPlan | None:
    fs = cy.fairshare()
    cands = [
        Candidate(
            run,
            0,
            expected_loss(run, ctx.now),
            (-run.tier.rank, fs.get(run.team, 0.0), -run.started_at, run.run_id),
        )
        for run in ctx.runs_by_flavor.get(job.flavor, ())
        if run.run_id not in ctx.taken and run.tier.rank > job.tier.rank
    ]
    if not cands:
        return None
    cands.sort(key=lambda c: c.key)
    return greedy_plan(job, ctx, cands, lambda c, taken, own: True, "slurm", quotas=False)


SLURM_RULES = Rules(
    name="slurm",
    order="slurm",
    quotas=False,
    backfill="reserve",
    planner=_slurm_planner,
    reservations=SLURM_RESERVATIONS,
)


def schedule_slurm(snapshot: Snapshot, now: float, config: PolicyConfig) -> Decisions:
    slurm_config = config.without_protection()
    return run_cycle(snapshot, now, slurm_config, SLURM_RULES)
