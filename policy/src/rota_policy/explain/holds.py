"""The rules that hold a preemptor back, as reasons (phase 6): a victim's minimum runtime, the
preemptor's wait target, and the victims' preemption budget. Each says what holds the job,
until when, and what that does to its ETA. (The preemption delay is `protection.delay_reason`;
borrowed runs under their minimum runtime that a team within its quota would take back are
`protection.reclaim_reason`.)

The rules themselves are applied where victims are chosen (`victimpool`, `victimrules`) and
where a job decides to search (`walk`): this module only reads them, memoized per shape of job
within one explain pass, since deep queues ask it of many jobs alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rota.contracts.common import TIER_ORDER
from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.cycle.state import Cycle
from rota_policy.explain.protection import clock
from rota_policy.model.decisions import Reason
from rota_policy.model.snapshot import PendingJob, RunningRun
from rota_policy.preemption.victimpool import OVER_BUDGET, rota_loss
from rota_policy.preemption.victimrules import may_reclaim_for, victim_category, wait_target_ends

__all__ = ["Holds"]


def _who(run: RunningRun, team: str) -> str:
    owner = "your team's" if run.team == team else f"team {run.team}'s"
    return f"{owner} {run.tier.value} job {run.job_id}"


@dataclass(frozen=True, slots=True)
class _Protected:
    """What keeps a job's victims from it: the time the last one needed comes out of its
    minimum runtime (None: not that rule), the first of them, and whether the preemption
    budget of runs it could otherwise stop is what keeps them instead."""

    until: float | None
    first: RunningRun | None
    min_runtime_s: float
    over_budget: bool


@dataclass(slots=True)
class Holds:
    """The holds of one explain pass."""

    cy: Cycle
    _protected: dict[tuple[object, ...], _Protected] = field(default_factory=dict)
    _waits: dict[tuple[object, ...], Reason] = field(default_factory=dict)

    def _may_preempt(self, job: PendingJob) -> bool:
        cy = self.cy
        if cy.rules.planner is None or not cy.config.preemption:
            return False
        if job.share and not cy.rules.share_victims:
            return False
        return cy.capacity.budget.only_idle(job.team, job.flavor) is None

    def victims(
        self, job: PendingJob, code: Code, ahead: int, start: float | None
    ) -> tuple[float | None, Reason] | None:
        """For a job short of quota or GPUs whose victims are too young (their queue's minimum
        runtime) or preempted too often (their queue's budget): a reason that says so, and the
        ETA it implies (the end of the minimum runtime plus the save) when the job is near
        enough the head of its queue for its search to be the one that takes them (else None)."""
        if code not in (Code.QUOTA_EXCEEDED, Code.INSUFFICIENT_CAPACITY, Code.FRAGMENTATION):
            return None
        if not self._may_preempt(job):
            return None
        cy, cfg = self.cy, self.cy.config
        quota_case = code is Code.QUOTA_EXCEEDED
        lim = cy.capacity.quota.limits(job.team, job.flavor)
        if quota_case and lim.borrowing_limit is None:
            return None  # other teams' lending limits: stopping its own runs would not help
        key = (job.tier, job.team, job.flavor, job.gpus, job.demand, code)
        found = self._protected.get(key)
        if found is None:
            found = self._protected[key] = self._find(job, quota_case, lim.quota + (lim.borrowing_limit or 0))
        if found.until is None or found.first is None:
            if not found.over_budget:
                return None
            message = ("the runs it could stop to make room have been preempted as often as their queues"
                       " allow: it waits for them to end")
            return None, Reason(Code.PREEMPTION_HELD, message, (("hold", "preemption_budget"),))
        at = max(found.until, cfg.preemption_allowed_at(job.tier, job.submitted_at))
        patient = self._patient_until(job, code, start)
        if patient is not None:
            at = max(at, patient[0])
        start = at + cfg.checkpoint_save_s
        message = (
            f"it would stop {_who(found.first, job.team)}, but that run's queue protects it for its first"
            f" {found.min_runtime_s:g} s, until {clock(found.until)}; it may preempt from {clock(at)} and"
            f" start once the run has saved ({cfg.checkpoint_save_s:g} s)"
        )
        details = (("hold", "min_runtime"), ("hold_ends_at", found.until), ("held_by", found.first.job_id))
        near = ahead < cfg.max_preemption_attempts
        return (start if near else None), Reason(Code.PREEMPTION_HELD, message, details)

    def _find(self, job: PendingJob, quota_case: bool, limit: float) -> _Protected:
        cy, cfg, now = self.cy, self.cy.config, self.cy.now
        f = job.flavor
        ctx = cy.preemption
        may_reclaim = may_reclaim_for(job, ctx)
        shielded = cfg.protection(job.tier).shielded_from
        cap = cfg.max_lost_gpu_s_per_plan
        over = ctx.idle_only
        rules = {t: (i if cfg.tier(t).preemptible else None, cfg.protection(t))
                 for i, t in enumerate(TIER_ORDER)}
        borrowing: dict[str, float] = {}
        ready, spent = 0.0, 0.0
        young: list[tuple[float, str, RunningRun]] = []
        for run in cy.capacity.runs_by_flavor.get(f, ()):
            if run.run_id in ctx.taken or (quota_case and run.team != job.team):
                continue
            rank, rule = rules[run.tier]
            if over and (run.team, f) in over:
                rank = OVER_BUDGET
            if rank is None or (cap is not None and not run.resumable and rota_loss(run, now) > cap):
                continue
            if victim_category(job, run, rank, may_reclaim, borrowing, cy.capacity.quota, shielded) is None:
                continue
            held = run.demand if quota_case else run.gpus
            if run.preemptions >= rule.max_preemptions:
                spent += held
            elif now - run.started_at < rule.min_runtime_s:
                young.append((run.started_at + rule.min_runtime_s, run.run_id, run))
            else:
                ready += held
        if quota_case:
            need = cy.capacity.quota.in_use(job.team, f) + job.demand - limit
        else:
            need = job.gpus - cy.capacity.state.free_total.get(f, 0)
        if need <= 0 or ready >= need:
            return _Protected(None, None, 0.0, False)
        young.sort()
        got = ready
        for until, _, run in young:
            got += run.demand if quota_case else run.gpus
            if got >= need:
                first = young[0][2]
                return _Protected(until, first, cfg.protection(first.tier).min_runtime_s, False)
        return _Protected(None, None, 0.0, got + spent >= need and spent > 0)

    def _patient_until(self, job: PendingJob, code: Code, start: float | None) -> tuple[float, float] | None:
        """For a job short of GPUs that does not search for victims because running work should
        free them within its tier's wait target (`walk`: `Rules.preempt_for_wait_target`): when
        its wait target ends, and when the GPUs should be free; None if it is not so held. The
        walk asked the reservation book as it stood at the job's turn; its ETA (`start`), from
        the same running work and the jobs ahead, stands for that here."""
        cy = self.cy
        if not cy.rules.preempt_for_wait_target or code is not Code.INSUFFICIENT_CAPACITY or start is None:
            return None
        target = cy.config.tier(job.tier).long_wait_s
        ends = wait_target_ends(job, target)
        if cy.now >= ends or start - job.submitted_at > target:
            return None
        return ends, start

    def wait_target(self, job: PendingJob, code: Code, start: float | None) -> Reason | None:
        """For a job held by its wait target (`_patient_until`): a reason that says so. Its ETA
        already rests on the running work's end, which comes before the target."""
        if job.job_id in self.cy.outcome.deferred or not self._may_preempt(job):
            return None
        if self._patient_until(job, code, start) is None:
            return None
        # One reason per queue, the times left to the ETA: a deep queue holds many such jobs.
        target = self.cy.config.tier(job.tier).long_wait_s
        reason = self._waits.get((job.tier,))
        if reason is None:
            message = (
                f"running work should free these GPUs by its ETA, within queue {job.tier.value}'s"
                f" {target:g} s wait target: it stops no one unless it waits that long"
            )
            reason = self._waits[(job.tier,)] = Reason(
                Code.PREEMPTION_HELD, message, (("hold", "wait_target"), ("wait_target_s", target)))
        return reason
