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
    """Apply a batch of events in one transaction (the read model's hot path: about six
    events per job). Idempotent per event, so a retried batch changes nothing twice.

    The history rows of the whole batch go in with one statement; only events that are new
    for their job and can change its state then touch the job's row.
    """
    facts: list[tuple[Envelope[Any], dict[str, Any], str]] = []
    for raw in raws:
        try:
            env = parse_any(raw, max_bytes=max_bytes)
        except ContractError as exc:
            log.warning("projection: skipping an unreadable event: %s", exc)
            continue
        data: dict[str, Any] = env.data.model_dump(mode="json")
        facts.extend((env, data, job_id) for job_id in related_jobs(env.type, data, env.job_id))
    if not facts:
        return 0
    async with engine.begin() as conn:
        new = await store.record_events(conn, [
            {"event_id": env.id, "job_id": job_id, "type": env.type,
             "occurred_at": env.occurred_at, "source": env.source, "data": data}
            for env, data, job_id in facts
        ])
        unapplied = set(new)  # a duplicate inside the batch is applied once
        for env, data, job_id in facts:
            if (env.id, job_id) not in unapplied:
                continue
            unapplied.discard((env.id, job_id))
            if env.type in STATE_EVENTS:
                await _fold(conn, env, data, job_id)
    return len(new)


async def _fold(conn: AsyncConnection, env: Envelope[Any], data: dict[str, Any], job_id: str) -> None:
    """A new event's effect on its job's state."""
    row = await store.lock_job(conn, job_id)
    if row is None:
        return  # an event of a job submitted elsewhere; its history is still kept
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
