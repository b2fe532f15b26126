"""The read model: every job event from ROTA_EVT, folded into `jobs` and kept in `job_events`.
(The teams' feeds have their own durable, `rota_submission.feed`, which does not wait for it.)"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rota.contracts import ContractError, Envelope, parse_any
from rota.contracts import messages as m
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from rota_submission import store
from rota_submission.domain import STATE_EVENTS, apply_event, related_jobs

log = logging.getLogger("rota.submission.projection")


def _everything(job_id: str | None) -> bool:
    return True


async def project_batch(engine: AsyncEngine, raws: list[bytes], *, max_bytes: int,
                        owns: Callable[[str | None], bool] = _everything) -> int:
    """Apply a batch of events in one transaction (the read model's hot path: about six
    events per job). Idempotent per event, so a retried batch changes nothing twice.

    The history rows of the whole batch go in with one statement; only events that are new
    for their job and can change its state then touch the job's row. Returns how many
    (event, job) pairs were new.

    `owns`: with several replicas, the jobs this one folds (`rota.bus.partition`); what
    concerns no job (None) is replica 0's. An event about several jobs (a plan) is folded
    into each by the replica that owns it, so every job has one writer, in stream order.
    """
    facts: list[tuple[Envelope[Any], dict[str, Any], str]] = []
    budgets: list[dict[str, Any]] = []
    """Rows of the budget use reports, which concern no job: `rota queues` shows them."""
    for raw in raws:
        try:
            env = parse_any(raw, max_bytes=max_bytes)
        except ContractError as exc:
            log.warning("projection: skipping an unreadable event: %s", exc)
            continue
        data: dict[str, Any] = env.data.model_dump(mode="json")
        # An acknowledgement from before the executor verified them carried a run token; the
        # read model, and so `rota trace`, never keeps one.
        data.pop("run_token", None)
        if isinstance(env.data, m.BudgetUsageRecorded) and owns(None):
            as_of = env.data.as_of
            budgets.extend({**use.model_dump(), "as_of": as_of} for use in env.data.budgets)
        facts.extend((env, data, job_id) for job_id in related_jobs(env.data, env.job_id)
                     if owns(job_id))
    if budgets:
        async with engine.begin() as conn:
            await store.record_budget_use(conn, budgets)
    if not facts:
        return 0
    async with engine.begin() as conn:
        new = await store.record_events(conn, [
            {"event_id": env.id, "job_id": job_id, "type": env.type,
             "occurred_at": env.occurred_at, "source": env.source, "data": data}
            for env, data, job_id in facts
        ])
        unapplied = set(new)  # a duplicate inside the batch is applied, and fed, once
        folds: list[tuple[Envelope[Any], str]] = []
        for env, _, job_id in facts:
            if (env.id, job_id) not in unapplied:
                continue
            unapplied.discard((env.id, job_id))
            if type(env.data) in STATE_EVENTS:
                folds.append((env, job_id))
        if folds:
            await _fold_all(conn, folds)
    return len(new)


async def _fold_all(conn: AsyncConnection, folds: list[tuple[Envelope[Any], str]]) -> None:
    """New events' effect on their jobs' state: the jobs locked with one statement, the
    events folded in order in memory (each sees the ones before it, as row by row would),
    then one update per set of changed columns."""
    rows = await store.lock_jobs(conn, sorted({job_id for _, job_id in folds}))
    changed: dict[str, dict[str, Any]] = {}
    for env, job_id in folds:
        row = rows.get(job_id)
        if row is None:
            continue  # an event of a job submitted elsewhere; its history is still kept
        state, changes = apply_event(row["state"], env.data, job_id)
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
