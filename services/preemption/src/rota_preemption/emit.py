"""Effects of the saga → outgoing messages, queued in the outbox of the caller's transaction."""

from __future__ import annotations

from datetime import datetime

from opentelemetry.trace import SpanContext
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.db.outbox import Outbox
from sqlalchemy.ext.asyncio import AsyncConnection

from rota_preemption.domain import (
    DRAIN_REASON,
    Effect,
    PublishCompleted,
    Saga,
    SendNotice,
    SendStop,
    Victim,
    WithdrawNotice,
    completed_message,
)
from rota_preemption.grow import completed_message as grow_completed
from rota_preemption.spans import effect_span

SOURCE = "preemption"


def notice(saga: Saga, victim: Victim, *, withdrawn: bool = False) -> m.PreemptionNotice:
    return m.PreemptionNotice(
        notice_id=victim.notice_id, plan_id=saga.plan.plan_id, run_id=victim.run_id,
        job_id=victim.job_id, action="withdrawn" if withdrawn else "checkpoint_and_stop",
        deadline=victim.deadline, grace_s=victim.grace_s, ack_subject=s.run_checkpoint(victim.run_id),
        reason=saga.plan.message, shrink_to=None if withdrawn else victim.shrink_to,
        grow_to=None if withdrawn else victim.grow_to,
    )


def noticed(saga: Saga, victim: Victim) -> m.PreemptionNoticed:
    return m.PreemptionNoticed(
        plan_id=saga.plan.plan_id, notice_id=victim.notice_id, run_id=victim.run_id,
        job_id=victim.job_id, job_name=victim.job_name, team=victim.team, user=victim.user,
        queue=victim.queue, deadline=victim.deadline, grace_s=victim.grace_s,
        preemptor_job_id=saga.plan.preemptor_job_id, preemptor_queue=saga.plan.preemptor_queue,
        reason=saga.plan.reason, resumable=victim.resumable,
        resume_from=victim.last_checkpoint_uri, shrink_to=victim.shrink_to, node=saga.plan.node,
    )


def stop(saga: Saga, victim: Victim, *, forced: bool) -> m.StopRun:
    # A grow's stop is no preemption: the job's budget and the preemption counts ignore it;
    # nor is a drain's, for another job (DECISIONS 100): it spends no preemption budget.
    reason = (m.StopReason.resized if victim.grow_to
              else m.StopReason.drained if saga.plan.reason == DRAIN_REASON
              else m.StopReason.preempted)
    return m.StopRun(run_id=victim.run_id, job_id=victim.job_id, reason=reason, forced=forced,
                     plan_id=saga.plan.plan_id)


async def emit(
    outbox: Outbox, conn: AsyncConnection, saga: Saga, effects: list[Effect], now: datetime,
    plan: SpanContext | None = None,
) -> None:
    for effect in effects:
        # Each effect is a span in the trace of the job it is about (the victim's, or the
        # preemptor's for the completion), linked to the plan span when it is known.
        with effect_span(saga, effect, plan):
            await _emit_one(outbox, conn, saga, effect, now)


async def _emit_one(
    outbox: Outbox, conn: AsyncConnection, saga: Saga, effect: Effect, now: datetime
) -> None:
    match effect:
        case SendNotice(victim):
            await _run_message(outbox, conn, notice(saga, victim), victim, now,
                               s.control(victim.run_id), s.STREAM_CTL)
            if not victim.grow_to:  # for humans: a grow preempts nobody
                await _run_message(outbox, conn, noticed(saga, victim), victim, now,
                                   s.EVENT_SUBJECTS["PreemptionNoticed"], s.STREAM_EVT)
        case WithdrawNotice(victim):
            await _run_message(outbox, conn, notice(saga, victim, withdrawn=True), victim,
                               now, s.control(victim.run_id), s.STREAM_CTL)
        case SendStop(victim, forced):
            await _run_message(outbox, conn, stop(saga, victim, forced=forced), victim, now,
                               s.RUN_STOP, s.STREAM_CMD)
        case PublishCompleted(done) if done.grow:
            env = envelope(grow_completed(done), source=SOURCE,
                           job_id=done.plan.preemptor_job_id, occurred_at=now)
            await outbox.add(conn, env, s.EVENT_SUBJECTS["GrowCompleted"], stream=s.STREAM_EVT)
        case PublishCompleted(done):
            env = envelope(completed_message(done), source=SOURCE,
                           job_id=done.plan.preemptor_job_id, occurred_at=now)
            await outbox.add(conn, env, s.EVENT_SUBJECTS["PreemptionCompleted"],
                             stream=s.STREAM_EVT)


async def _run_message(
    outbox: Outbox, conn: AsyncConnection, data: m.PreemptionNotice | m.PreemptionNoticed
    | m.StopRun, victim: Victim, now: datetime, subject: str, stream: str,
) -> None:
    env = envelope(data, source=SOURCE, job_id=victim.job_id, run_id=victim.run_id,
                   occurred_at=now)
    await outbox.add(conn, env, subject, stream=stream)
