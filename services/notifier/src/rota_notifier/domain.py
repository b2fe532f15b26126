"""Events to notices: the pure half of the notifier's ingest (no I/O, no clock of its own).

`fold` keeps the notifier's small view of each job (owner, name, queue, since when it waits),
because most run events carry only ids. `notices` decides which events are worth telling a
person about. Routing them to recipients and channels is `routing.py`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from rota import waits
from rota.budget import WARN_FRACTION, reset_text
from rota.config import RotaConfig
from rota.contracts import Envelope
from rota.contracts import messages as m
from rota.contracts.subjects import control
from rota.units import gpu_time


class Kind(StrEnum):
    """What a notification is about. These names are the opt-out keys in `rota.yaml`."""

    preemption_noticed = "preemption_noticed"
    preemption_completed = "preemption_completed"
    run_started = "run_started"
    run_resumed = "run_resumed"
    run_failed = "run_failed"
    long_wait = "long_wait"
    budget_warning = "budget_warning"
    digest = "digest"


@dataclass(frozen=True)
class JobView:
    job_id: str
    name: str | None = None
    team: str | None = None
    user: str | None = None
    queue: str | None = None
    submitted_at: datetime | None = None
    pending_since: datetime | None = None
    episode: int = 0
    """How many times the job went back to its queue after a preemption."""


@dataclass(frozen=True)
class Notice:
    """One thing to tell people, before it is routed. `dedup_key` is usually the event id."""

    kind: Kind
    dedup_key: str
    event_id: str
    job_id: str | None
    team: str
    user: str | None
    context: dict[str, Any]


def fold(job: JobView | None, env: Envelope[BaseModel]) -> JobView | None:
    """The job's view after `env`, or None when `env` changes nothing we keep."""
    data = env.data
    if isinstance(data, m.JobSubmitted):
        spec = data.spec
        return JobView(
            job_id=data.job_id, name=spec.name, team=spec.team, user=spec.user,
            queue=spec.queue.value, submitted_at=data.submitted_at,
            pending_since=data.submitted_at, episode=job.episode if job else 0,
        )
    if isinstance(data, m.PreemptionNoticed):
        # The notice names the owner itself; fill in a job we never saw submitted.
        base = job or JobView(job_id=data.job_id)
        return replace(base, name=base.name or data.job_name, team=base.team or data.team,
                       user=base.user or data.user, queue=base.queue or data.queue.value)
    if isinstance(data, m.RunStarted) and job is not None and job.pending_since is not None:
        return replace(job, pending_since=None)  # it waits no more
    if isinstance(data, m.RunStopped) and job is not None and data.reason in (
            m.StopReason.preempted, m.StopReason.drained):
        # Back in the queue: a new wait starts now, and the next start is a resume.
        return replace(job, pending_since=env.occurred_at, episode=job.episode + 1)
    return None


def is_stale(env: Envelope[BaseModel], now: datetime, max_age_s: float) -> bool:
    """A replayed or long-delayed event updates state but would only confuse a person now."""
    return now - env.occurred_at > timedelta(seconds=max_age_s)


def _job_context(job: JobView | None, job_id: str | None) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "job_name": (job.name if job else None) or job_id,
        "team": job.team if job else None,
        "user": job.user if job else None,
        "queue": job.queue if job else None,
    }


def _threshold_s(config: RotaConfig, queue: str | None) -> float | None:
    for tier, q in config.queues.items():
        if tier.value == queue:
            return q.long_wait_threshold_s
    return None


def notices(
    env: Envelope[BaseModel], job: JobView | None, config: RotaConfig
) -> list[Notice]:
    """What `env` tells people, given the job's view before `env` (after `fold` when it was
    unknown before). Staleness is the caller's.

    `PreemptionCompleted` covers several jobs, so it goes through `completed_notices`.
    """
    data = env.data
    base = {"event_id": env.id, "occurred_at": env.occurred_at.isoformat()}

    def notice(kind: Kind, key: str, ctx: dict[str, Any], job_id: str | None,
               team: str | None, user: str | None) -> list[Notice]:
        if team is None:
            return []  # nobody to route to: a job this notifier never heard of
        return [Notice(kind, key, env.id, job_id, team, user, base | ctx)]

    if isinstance(data, m.PreemptionNoticed):
        ctx = _job_context(job, data.job_id) | {
            "job_name": data.job_name, "team": data.team, "user": data.user,
            "queue": data.queue.value, "run_id": data.run_id, "plan_id": data.plan_id,
            "notice_id": data.notice_id, "deadline": data.deadline.isoformat(),
            "grace_s": data.grace_s, "preemptor_job_id": data.preemptor_job_id,
            "preemptor_queue": data.preemptor_queue.value, "reason": data.reason,
            "resumable": data.resumable, "resume_from": data.resume_from,
            "control_subject": control(data.run_id), "shrink_to": data.shrink_to,
            "node": data.node,
        }
        return notice(Kind.preemption_noticed, env.id, ctx, data.job_id, data.team, data.user)

    if isinstance(data, m.RunFailed) and job is not None:
        ctx = _job_context(job, data.job_id) | {
            "run_id": data.run_id, "exit_code": data.exit_code, "error": data.error,
        }
        return notice(Kind.run_failed, env.id, ctx, data.job_id, job.team, job.user)

    if isinstance(data, m.RunStarted) and job is not None:
        waited = (env.occurred_at - job.pending_since).total_seconds() if job.pending_since else 0.0
        ctx = _job_context(job, data.job_id) | {
            "run_id": data.run_id, "attempt": data.attempt, "resumed_from": data.resumed_from,
            "waited_s": max(waited, 0.0),
        }
        if data.resumed_from or job.episode > 0:
            return notice(Kind.run_resumed, env.id, ctx, data.job_id, job.team, job.user)
        threshold = _threshold_s(config, job.queue)
        if threshold is not None and waited >= threshold:
            return notice(Kind.run_started, env.id, ctx | {"threshold_s": threshold},
                          data.job_id, job.team, job.user)
        return []

    if isinstance(data, m.JobPending) and job is not None and job.pending_since is not None:
        threshold = _threshold_s(config, data.queue.value)
        waited = (env.occurred_at - job.pending_since).total_seconds()
        if threshold is None or waited < threshold:
            return []
        primary = data.reasons[0]
        ctx = _job_context(job, data.job_id) | {
            "waited_s": waited, "threshold_s": threshold, "reason_code": primary.code.value,
            "reason_message": primary.message, "position": data.position,
            "eta": data.eta.isoformat() if data.eta else None,
            "other_reasons": [r.code.value for r in data.reasons[1:]],
            # The same in words (rota.waits), which the shipped templates show.
            "reason_title": waits.title(primary.code.value),
            "other_titles": [waits.title(r.code.value) for r in data.reasons[1:]],
        }
        # Once per job, wait (episode) and threshold, however often the scheduler re-explains.
        key = f"long_wait:{data.job_id}:{job.episode}:{int(threshold)}"
        return notice(Kind.long_wait, key, ctx, data.job_id, job.team or data.team, job.user)

    return []


def budget_notices(env: Envelope[BaseModel]) -> list[Notice]:
    """`BudgetUsageRecorded`: a warning to each team that has used 80% of a budget. The key
    names the team, flavor and period, so the unique key of the notifications table lets one
    through per period, however often the scheduler reports and across restarts."""
    data = env.data
    assert isinstance(data, m.BudgetUsageRecorded)
    out: list[Notice] = []
    for use in data.budgets:
        share = use.used_gpu_hours / use.budget_gpu_hours
        if share < WARN_FRACTION:
            continue
        ctx = {
            "event_id": env.id, "occurred_at": env.occurred_at.isoformat(), "job_id": None,
            "team": use.team, "flavor": use.flavor, "period": use.period,
            "used_gpu_hours": round(use.used_gpu_hours), "budget_gpu_hours": round(use.budget_gpu_hours),
            "percent": int(share * 100), "resets": reset_text(use.resets_at.timestamp()),
            "when_exhausted": use.when_exhausted,
        }
        key = f"budget_warning:{use.team}:{use.flavor}:{use.period_start.isoformat()}"
        out.append(Notice(Kind.budget_warning, key, env.id, None, use.team, None, ctx))
    return out


def completed_notices(
    env: Envelope[BaseModel], victims: list[tuple[m.VictimResult, JobView | None]]
) -> list[Notice]:
    """`PreemptionCompleted`: acked or forced (or finished, or withdrawn), per victim.

    The key names the victim, since one event covers several jobs, maybe of one owner.
    """
    data = env.data
    assert isinstance(data, m.PreemptionCompleted)
    out: list[Notice] = []
    for victim, job in victims:
        if job is None or job.team is None:
            continue
        ctx = {"event_id": env.id, "occurred_at": env.occurred_at.isoformat()} | _job_context(
            job, victim.job_id
        ) | {
            "run_id": victim.run_id, "plan_id": data.plan_id, "outcome": victim.outcome.value,
            "aborted": data.aborted, "checkpoint_uri": victim.checkpoint_uri,
            "lost_gpu_hours": round(victim.lost_gpu_seconds / 3600.0, 2),
            "lost_gpu_seconds": victim.lost_gpu_seconds,
            "lost_work": gpu_time(victim.lost_gpu_seconds),
            "preemptor_job_id": data.preemptor_job_id,
        }
        out.append(Notice(Kind.preemption_completed, f"{env.id}:{victim.job_id}", env.id,
                          victim.job_id, job.team, job.user, ctx))
    return out
