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
        # A job's own acknowledgement carries its run token; the read model, and so `rota
        # trace`, never keeps it.
        data.pop("run_token", None)
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
        folds: list[tuple[Envelope[Any], dict[str, Any], str]] = []
        for env, data, job_id in facts:
            if (env.id, job_id) not in unapplied:
                continue
            unapplied.discard((env.id, job_id))
            if env.type in STATE_EVENTS:
                folds.append((env, data, job_id))
        if folds:
            await _fold_all(conn, folds)
    return len(new)


async def _fold_all(conn: AsyncConnection, folds: list[tuple[Envelope[Any], dict[str, Any], str]]) -> None:
    """New events' effect on their jobs' state: the jobs locked with one statement, the
    events folded in order in memory (each sees the ones before it, as row by row would),
    then one update per set of changed columns."""
    rows = await store.lock_jobs(conn, sorted({job_id for _, _, job_id in folds}))
    changed: dict[str, dict[str, Any]] = {}
    for env, data, job_id in folds:
        row = rows.get(job_id)
        if row is None:
            continue  # an event of a job submitted elsewhere; its history is still kept
        state, changes = apply_event(row["state"], env.type, data, job_id)
        values: dict[str, Any] = {}
        if changes.pop("started", False):
            values["started_at"] = env.occurred_at
            values["attempts"] = row["attempts"] + 1
        if changes.pop("ended", False):
            values["ended_at"] = env.occurred_at
        values.update(changes)
        if state != row["state"] or values:
            values.update(state=state, updated_at=env.occurred_at)
            row.update(values)
            changed.setdefault(job_id, {}).update(values)
    await store.update_jobs(conn, changed)
