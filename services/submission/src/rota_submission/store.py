"""The submission service's tables (schema `submission`) and the queries on them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from rota.contracts import JobSpec
from rota.contracts.job import TERMINAL_STATES
from rota.db.chunks import row_chunks
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

SCHEMA = "submission"
metadata = sa.MetaData(schema=SCHEMA)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("job_id", sa.Text, primary_key=True),
    sa.Column("team", sa.Text, nullable=False),
    sa.Column("user_name", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("flavor", sa.Text, nullable=False),
    sa.Column("workers", sa.Integer, nullable=False),
    sa.Column("gpus_per_worker", sa.Integer, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("submission_id", sa.Text, nullable=False),
    sa.Column("spec_hash", sa.Text, nullable=False),
    sa.Column("spec", postgresql.JSONB, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True)),
    sa.Column("ended_at", sa.DateTime(timezone=True)),
    sa.Column("run_id", sa.Text),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("resume_from", sa.Text),
    sa.Column("wait", postgresql.JSONB),
    sa.Column("detail", sa.Text),
    sa.Column("borrowed_gpus", sa.Integer, nullable=False, server_default="0"),
)

job_events = sa.Table(
    "job_events",
    metadata,
    sa.Column("event_id", sa.Text, primary_key=True),
    sa.Column("job_id", sa.Text, primary_key=True),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("data", postgresql.JSONB, nullable=False),
)

budget_use = sa.Table(
    "budget_use",
    metadata,
    sa.Column("team", sa.Text, primary_key=True),
    sa.Column("flavor", sa.Text, primary_key=True),
    sa.Column("period", sa.Text, nullable=False),
    sa.Column("period_start", sa.DateTime(timezone=True), nullable=False),
    sa.Column("resets_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("used_gpu_hours", sa.Float, nullable=False),
    sa.Column("budget_gpu_hours", sa.Float, nullable=False),
    sa.Column("when_exhausted", sa.Text, nullable=False),
    sa.Column("as_of", sa.DateTime(timezone=True), nullable=False),
)
"""The scheduler's latest `BudgetUsageRecorded`, one row per budgeted team and flavor."""

PUBLIC_COLUMNS = (
    "job_id", "name", "team", "user_name", "queue", "flavor", "workers", "gpus_per_worker",
    "gpus", "state", "submission_id", "submitted_at", "updated_at", "started_at", "ended_at",
    "run_id", "attempts", "resume_from", "wait", "detail", "borrowed_gpus",
)


def _public() -> list[sa.ColumnElement[Any]]:
    """The public columns, and the job's GPU share (None: whole GPUs) from its spec."""
    share = jobs.c.spec["gpu_share"].as_float().label("gpu_share")
    return [*(jobs.c[name] for name in PUBLIC_COLUMNS), share]


def job_row(job_id: str, spec: JobSpec, spec_hash: str, now: datetime) -> dict[str, Any]:
    return dict(
        job_id=job_id, team=spec.team, user_name=spec.user, name=spec.name,
        queue=spec.queue.value, flavor=spec.flavor, workers=spec.workers,
        gpus_per_worker=spec.gpus_per_worker, gpus=spec.total_gpus,
        submission_id=spec.submission_id, spec_hash=spec_hash,
        spec=spec.model_dump(mode="json"), state="pending", submitted_at=now, updated_at=now,
    )


async def insert_jobs(conn: AsyncConnection, rows: list[dict[str, Any]]) -> set[str]:
    """Insert once per (team, submission_id), many jobs per statement: the job ids that
    went in. A row whose key already has a job (in the table, or earlier in `rows`) is
    skipped, exactly as inserting them one by one would."""
    inserted: set[str] = set()
    for chunk in row_chunks(jobs, rows):  # in order: a later chunk sees an earlier one's rows
        result = await conn.execute(
            insert(jobs).on_conflict_do_nothing(constraint="jobs_submission_once")
            .returning(jobs.c.job_id),
            list(chunk),
        )
        inserted.update(str(row.job_id) for row in result)
    return inserted


async def jobs_by_submission(
    conn: AsyncConnection, keys: set[tuple[str, str]]
) -> dict[tuple[str, str], Any]:
    """(team, submission_id) → the job recorded under it, for every key that has one."""
    if not keys:
        return {}
    result = await conn.execute(
        sa.select(jobs.c.team, jobs.c.submission_id, jobs.c.job_id, jobs.c.spec_hash,
                  jobs.c.state)
        .where(sa.tuple_(jobs.c.team, jobs.c.submission_id).in_(sorted(keys)))
    )
    return {(row.team, row.submission_id): row for row in result}


async def lock_job(conn: AsyncConnection, job_id: str) -> Any:
    return (
        await conn.execute(sa.select(jobs).where(jobs.c.job_id == job_id).with_for_update())
    ).first()


async def lock_jobs(conn: AsyncConnection, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """job id → its state and attempts, for those that exist, locked (in id order, so two
    transactions locking overlapping sets wait for each other instead of deadlocking)."""
    result = await conn.execute(
        sa.select(jobs.c.job_id, jobs.c.state, jobs.c.attempts)
        .where(jobs.c.job_id.in_(job_ids)).order_by(jobs.c.job_id).with_for_update()
    )
    return {row.job_id: {"state": row.state, "attempts": row.attempts} for row in result}


async def update_jobs(conn: AsyncConnection, changes: dict[str, dict[str, Any]]) -> None:
    """Set each job's changed columns: one executemany per set of columns, not a statement
    per job (the projection's batches change the same few columns for many jobs)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for job_id, values in changes.items():
        columns = tuple(sorted(values))
        groups.setdefault(columns, []).append(
            {"b_job_id": job_id, **{f"b_{c}": v for c, v in values.items()}})
    for columns, params in groups.items():
        await conn.execute(
            sa.update(jobs).where(jobs.c.job_id == sa.bindparam("b_job_id"))
            .values({c: sa.bindparam(f"b_{c}") for c in columns}),
            params,
        )


async def find_job(
    conn: AsyncConnection, id_or_prefix: str, team: str | None = None
) -> list[dict[str, Any]]:
    """By full id, or by a part of one from its start or from its end (the short id is its
    last 12 characters); more than one row means the part is ambiguous. With a team, only
    that team's jobs are looked at."""
    columns = _public()
    if len(id_or_prefix) == 36:
        query = sa.select(*columns).where(jobs.c.job_id == id_or_prefix)
    else:
        # `reverse(job_id)` has an index of its own (migration 0004): a tail is its prefix.
        query = sa.select(*columns).where(sa.or_(
            jobs.c.job_id.startswith(id_or_prefix, autoescape=True),
            sa.func.reverse(jobs.c.job_id).startswith(id_or_prefix[::-1], autoescape=True),
        )).limit(2)
    if team is not None:
        query = query.where(jobs.c.team == team)
    return [dict(row._mapping) for row in await conn.execute(query)]


async def list_jobs(
    conn: AsyncConnection, *, team: str | None, queue: str | None, state: str | None, limit: int,
    user: str | None = None, name: str | None = None, search: str | None = None,
    offset: int = 0,
) -> list[dict[str, Any]]:
    query = sa.select(*_public())
    if search:
        # A part of the name, any case; or of the id from its start or its end (a short id).
        query = query.where(sa.or_(
            jobs.c.name.icontains(search, autoescape=True),
            jobs.c.job_id.startswith(search.lower(), autoescape=True),
            sa.func.reverse(jobs.c.job_id).startswith(search.lower()[::-1], autoescape=True),
        ))
    if user:
        query = query.where(jobs.c.user_name == user)
    if name:
        query = query.where(jobs.c.name == name)
    if team:
        query = query.where(jobs.c.team == team)
    if queue:
        query = query.where(jobs.c.queue == queue)
    if state:
        query = query.where(jobs.c.state == state)
    query = (query.order_by(jobs.c.submitted_at.desc(), jobs.c.job_id.desc())
             .offset(offset).limit(limit))
    return [dict(row._mapping) for row in await conn.execute(query)]


ACTIVE = ("admitted", "running", "preempting")


async def queue_summary(conn: AsyncConnection, team: str | None) -> list[dict[str, Any]]:
    """Per (queue, team, flavor): pending and running jobs and GPUs, and borrowed GPUs. A
    GPU share counts its fraction of one GPU, as the ledger counts it against quota."""
    pending = jobs.c.state == "pending"
    active = jobs.c.state.in_(ACTIVE)
    gpus = sa.func.coalesce(jobs.c.spec["gpu_share"].as_float(), jobs.c.gpus)
    query = sa.select(
        jobs.c.queue, jobs.c.team, jobs.c.flavor,
        sa.func.count().filter(pending).label("pending_jobs"),
        sa.func.coalesce(sa.func.sum(gpus).filter(pending), 0).label("pending_gpus"),
        sa.func.count().filter(active).label("running_jobs"),
        sa.func.coalesce(sa.func.sum(gpus).filter(active), 0).label("gpus_in_use"),
        sa.func.coalesce(sa.func.sum(jobs.c.borrowed_gpus).filter(active), 0).label("borrowed_gpus"),
        sa.func.min(jobs.c.submitted_at).filter(pending).label("oldest_pending_at"),
    ).where(jobs.c.state.in_(("pending", *ACTIVE))).group_by(jobs.c.queue, jobs.c.team, jobs.c.flavor)
    if team:
        query = query.where(jobs.c.team == team)
    result = await conn.execute(query.order_by(jobs.c.queue, jobs.c.team, jobs.c.flavor))
    return [dict(row._mapping) for row in result]


async def record_budget_use(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    """Keep each pair's newest report: a redelivered or late one changes nothing."""
    for row in rows:
        stmt = insert(budget_use).values(row)
        changes = {k: stmt.excluded[k] for k in row if k not in ("team", "flavor")}
        await conn.execute(stmt.on_conflict_do_update(
            index_elements=["team", "flavor"], set_=changes, where=budget_use.c.as_of < stmt.excluded.as_of))


async def budget_uses(conn: AsyncConnection, team: str | None) -> dict[tuple[str, str], dict[str, Any]]:
    query = sa.select(budget_use)
    if team:
        query = query.where(budget_use.c.team == team)
    result = await conn.execute(query)
    return {(row.team, row.flavor): dict(row._mapping) for row in result}


async def job_history(conn: AsyncConnection, job_id: str) -> list[dict[str, Any]]:
    result = await conn.execute(
        sa.select(job_events.c.event_id, job_events.c.type, job_events.c.occurred_at,
                  job_events.c.source, job_events.c.data)
        .where(job_events.c.job_id == job_id)
        .order_by(job_events.c.occurred_at, job_events.c.event_id)
    )
    return [dict(row._mapping) for row in result]


async def teams_of(conn: AsyncConnection, job_ids: list[str]) -> dict[str, str]:
    if not job_ids:
        return {}
    rows = await conn.execute(sa.select(jobs.c.job_id, jobs.c.team).where(jobs.c.job_id.in_(job_ids)))
    return {row.job_id: row.team for row in rows}


async def record_events(conn: AsyncConnection, rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The projection's idempotency guard, for a whole batch in a statement per chunk: the
    (event_id, job_id) pairs seen for the first time."""
    fresh: set[tuple[str, str]] = set()
    for chunk in row_chunks(job_events, rows):
        result = await conn.execute(
            insert(job_events).values(list(chunk)).on_conflict_do_nothing()
            .returning(job_events.c.event_id, job_events.c.job_id)
        )
        fresh.update((row.event_id, row.job_id) for row in result)
    return fresh


async def update_job(conn: AsyncConnection, job_id: str, values: dict[str, Any]) -> None:
    await conn.execute(sa.update(jobs).where(jobs.c.job_id == job_id).values(**values))


async def prune_history(conn: AsyncConnection, older_than: datetime) -> int:
    """Drop the history of jobs that ended before `older_than` (their `jobs` row stays, so
    `rota job` still answers), and stray events of unknown jobs that old. A live job's history
    is never pruned, however long it has waited: its record must stay whole."""
    ended = sa.select(jobs.c.job_id).where(jobs.c.state.in_(TERMINAL_STATES),
                                           jobs.c.ended_at < older_than)
    known = sa.select(jobs.c.job_id)
    result = await conn.execute(sa.delete(job_events).where(
        sa.or_(job_events.c.job_id.in_(ended),
               sa.and_(job_events.c.occurred_at < older_than, job_events.c.job_id.not_in(known)))))
    return int(result.rowcount)
