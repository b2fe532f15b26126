"""The read API on `rota.api.>`: job get, job list and queue summary, from the projection."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from rota.bus.query import api_error
from rota.clock import Clock
from rota.config import RotaConfig
from rota.contracts import Tier, envelope
from rota.contracts import messages as m
from rota.contracts.subjects import SCHEDULER_WHY
from rota.ids import short_id
from rota.tracing import trace_id_hex
from rota.units import gpu_count
from sqlalchemy.ext.asyncio import AsyncEngine

from rota_submission import explain, record, store

log = logging.getLogger("rota.submission.queries")


async def get_job(engine: AsyncEngine, query: m.GetJob, *, team: str | None) -> m.ApiReply:
    job = await _one(engine, query.job_id, team)
    return job if isinstance(job, m.ApiReply) else m.ApiReply(ok=True, result=job)


async def _one(engine: AsyncEngine, job_id: str, team: str | None) -> dict[str, Any] | m.ApiReply:
    """The job, if `team` (the subject's; None for a trusted caller) may see it: another
    team's job is not found, exactly as a job that does not exist."""
    async with engine.connect() as conn:
        rows = await store.find_job(conn, job_id, team)
    if not rows:
        return api_error("JOB_NOT_FOUND", f"no job {job_id}", "job_id")
    if len(rows) > 1:
        return api_error("AMBIGUOUS_ID", f"{job_id!r} matches several jobs", "job_id")
    return _with_short_id(rows[0])


def _with_short_id(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "short_id": short_id(row["job_id"])}


FRESH_WITHIN_S = 3.0
"""How long `rota why` waits for the scheduler's fresh explanation (it answers within 2 s, or
says it could not) before it shows the published one."""

AskScheduler = Callable[[str], Awaitable[dict[str, Any] | None]]


async def ask_scheduler(nc: Client, job_id: str) -> dict[str, Any] | None:
    """The scheduler's leader's explanation of a pending job, made in its next cycle
    (`rota_scheduler.asking`); None when no leader answers in time or the job no longer waits
    there, and the read model's published explanation is what there is."""
    request = envelope(m.GetJob(job_id=job_id), source="submission").to_bytes()
    try:
        raw = await nc.request(SCHEDULER_WHY, request, timeout=FRESH_WITHIN_S)
        reply = m.ApiReply.model_validate(json.loads(raw.data)["data"])
    except (NoRespondersError, NatsTimeout, TimeoutError, ValueError, KeyError) as exc:
        log.info("rota why %s: no fresh explanation from the scheduler (%s)", job_id,
                 type(exc).__name__)
        return None
    result = reply.result if reply.ok else None
    return result if isinstance(result, dict) and result.get("pending") else None


async def why_job(engine: AsyncEngine, query: m.GetJob, *, team: str | None,
                  config: RotaConfig | None = None, clock: Clock | None = None,
                  ask: AskScheduler | None = None) -> m.ApiReply:
    """The job's wait as the scheduler explains it now (`ask`), else as it last published it;
    its age factor as of now (`explain.why`)."""
    job = await _one(engine, query.job_id, team)
    if isinstance(job, m.ApiReply):
        return job
    fresh = await ask(job["job_id"]) if ask is not None and job["state"] == "pending" else None
    if fresh is not None:
        job = {**job, "wait": {k: fresh.get(k) for k in ("reasons", "eta", "position", "factors")}}
    rule = None if config is None else explain.AgeRule(config.policy.weights.age,
                                                        config.policy.age_cap_s)
    now = clock.now() if clock is not None else None
    answer = explain.why(job, now=now, age=rule)
    if job["state"] == "pending":
        # Whether the scheduler explained it just now, or this is what it last published.
        answer["explained_at"] = fresh.get("explained_at") if fresh is not None else None
        answer["fresh"] = fresh is not None
    return m.ApiReply(ok=True, result=answer)


async def trace_job(engine: AsyncEngine, query: m.GetJob, *, team: str | None) -> m.ApiReply:
    job = await _one(engine, query.job_id, team)
    if isinstance(job, m.ApiReply):
        return job
    async with engine.connect() as conn:
        history = await store.job_history(conn, job["job_id"])
    job_id = job["job_id"]
    plans = record.preemptions(history, job_id)
    return m.ApiReply(ok=True, result={
        "job": job, "timeline": explain.timeline(history, job_id,
                                                 accepted_acks=record.accepted_acks(plans)),
        "decisions": record.decisions(history, job_id),
        "preemptions": plans,
        # The job's OpenTelemetry trace id is derived from its id (see `rota.tracing`).
        "trace_id": trace_id_hex(job_id),
    })


async def list_jobs(engine: AsyncEngine, query: m.ListJobs, *, team: str | None) -> m.ApiReply:
    if (scoped := _scope(query.team, team)) is not None:
        return scoped
    async with engine.connect() as conn:
        rows = await store.list_jobs(
            conn, team=team or query.team, queue=query.queue.value if query.queue else None,
            state=query.state, limit=query.limit, user=query.user, name=query.name,
            search=query.search, offset=query.offset,
        )
    return m.ApiReply(ok=True, result=[_with_short_id(row) for row in rows])


def _scope(asked: str | None, team: str | None) -> m.ApiReply | None:
    if team is not None and asked not in (None, team):
        return api_error("UNAUTHORISED", f"team {team!r} may not read team {asked!r}", "team")
    return None


async def summarize_queues(
    engine: AsyncEngine, query: m.SummarizeQueues, config: RotaConfig, *, team: str | None
) -> m.ApiReply:
    """Per queue, team and flavor, with the team's quota on that flavor beside its use."""
    if (scoped := _scope(query.team, team)) is not None:
        return scoped
    async with engine.connect() as conn:
        rows = await store.queue_summary(conn, team or query.team)
        budgets = await store.budget_uses(conn, team or query.team)
    for row in rows:
        row["pending_gpus"] = gpu_count(row["pending_gpus"])
        row["gpus_in_use"] = gpu_count(row["gpus_in_use"])
        team_config = config.teams.get(row["team"])
        row["quota"] = team_config.quota.get(row["flavor"], 0) if team_config else 0
        # The team's use this period against its budget of the flavor, as the scheduler last
        # reported it; None where it has no budget.
        use = budgets.get((row["team"], row["flavor"]))
        row["budget_used_gpu_hours"] = round(use["used_gpu_hours"], 3) if use else None
        row["budget_gpu_hours"] = use["budget_gpu_hours"] if use else None
        row["budget_resets_at"] = use["resets_at"] if use else None
    rows.sort(key=lambda r: (Tier(r["queue"]).rank, r["team"], r["flavor"]))
    return m.ApiReply(ok=True, result=rows)
