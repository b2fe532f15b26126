"""A grow's saga (DECISIONS 82): the preemption saga's notice, ack, stop and end, for one
elastic run that grows on idle GPUs. It is nobody's victim, so it is kept apart where that
matters: no `PreemptionNoticed` (nobody is preempted), a stop that says `resized`, an end
published as `GrowCompleted` (never counted as a preemption), and a notice that is withdrawn,
not enforced, when its deadline passes (`domain.deadlines_passed`).

The saga's plan is keyed by the grow's id, with the growing job as its "preemptor": so a
cancelled job aborts its grow as it aborts its plans (`domain.preemptor_cancelled`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from rota.contracts import messages as m
from rota.contracts.messages import VictimOutcome

from rota_preemption.domain import (
    Effect,
    Plan,
    PlanState,
    RunEnd,
    Saga,
    SendNotice,
    Victim,
    settle,
)

REASON = "grow"
"""The plan's reason for a grow's saga (`Plan.reason`)."""


def start_grow(
    request: m.GrowRequested,
    now: datetime,
    *,
    grace_s: float,
    ended_runs: Mapping[str, RunEnd],
    cancelled: bool,
    new_id: Callable[[], str],
) -> tuple[Saga, list[Effect]]:
    """Open a grow's saga: one notice to its run, unless the run is over or its job cancelled."""
    plan = Plan(
        plan_id=request.grow_id, preemptor_job_id=request.job_id,
        preemptor_queue=request.queue, preemptor_team=request.team, reason=REASON,
        message=request.message, state=PlanState.noticing, created_at=now,
    )
    victim = Victim(
        plan_id=request.grow_id, run_id=request.run_id, job_id=request.job_id,
        team=request.team, queue=request.queue, gpus=request.added_gpus,
        job_name=request.job_name or f"job-{request.job_id[:8]}",
        user=request.user or request.team, resumable=True, last_checkpoint_uri=None,
        expected_lost_gpu_seconds=0.0, notice_id=new_id(), grace_s=grace_s,
        deadline=now + timedelta(seconds=grace_s), grow_to=request.workers,
    )
    saga = Saga(plan, [victim])
    if request.run_id in ended_runs:
        victim.finish(VictimOutcome.finished, now)
    elif cancelled:
        victim.finish(VictimOutcome.aborted, now)
    else:
        victim.noticed_at = now
        return saga, [SendNotice(victim), *settle(saga, now)]
    return saga, settle(saga, now)


def completed_message(saga: Saga) -> m.GrowCompleted:
    [victim] = saga.victims
    return m.GrowCompleted(
        grow_id=saga.plan.plan_id, job_id=victim.job_id, run_id=victim.run_id,
        outcome=victim.outcome or VictimOutcome.aborted, checkpoint_uri=victim.checkpoint_uri,
    )
