"""The read model: every job event from ROTA_EVT, folded into `jobs` and kept in `job_events`."""

from __future__ import annotations

import logging
from typing import Any

from rota.contracts import ContractError, Envelope, parse_any
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from rota_submission import store
from rota_submission.domain import STATE_EVENTS, apply_event, related_jobs

log = logging.getLogger("rota.submission.projection")


async def project_batch(engine: AsyncEngine, raws: list[bytes], *, max_bytes: int) -> int:
    """Apply a batch of events in one transaction (the read model's hot path: about five
    events per job). Idempotent per event, so a retried batch changes nothing twice."""
    parsed = []
    for raw in raws:
        try:
            parsed.append(parse_any(raw, max_bytes=max_bytes))
        except ContractError as exc:
            log.warning("projection: skipping an unreadable event: %s", exc)
    applied = 0
    async with engine.begin() as conn:
        for env in parsed:
            data: dict[str, Any] = env.data.model_dump(mode="json")
            for job_id in related_jobs(env.type, data, env.job_id):
                applied += await _fold(conn, env, data, job_id)
    return applied


async def _fold(conn: AsyncConnection, env: Envelope[Any], data: dict[str, Any], job_id: str) -> bool:
    """One event into one job's history and state; False if that job already had it."""
    first = await store.record_event(
        conn, event_id=env.id, job_id=job_id, type_=env.type,
        occurred_at=env.occurred_at, source=env.source, data=data,
    )
    if not first:
        return False
    if env.type not in STATE_EVENTS:
        return True  # history only: no need to lock and rewrite the job's row
    row = await store.lock_job(conn, job_id)
    if row is None:
        return True  # an event of a job submitted elsewhere; its history is still kept
    state, changes = apply_event(row.state, env.type, data, job_id)
    values: dict[str, Any] = {}
    if changes.pop("started", False):
        values["started_at"] = env.occurred_at
        values["attempts"] = row.attempts + 1
    if changes.pop("ended", False):
        values["ended_at"] = env.occurred_at
    values.update(changes)
    if state != row.state or values:
        values.update(state=state, updated_at=env.occurred_at)
        await store.update_job(conn, job_id, values)
    return True
