"""The notifier's tables (schema `notifier`) and the queries on them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from rota.db.chunks import chunks
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from rota_notifier.domain import JobView
from rota_notifier.policy import DUE_STATUSES, Status

SCHEMA = "notifier"
metadata = sa.MetaData(schema=SCHEMA)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("job_id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text),
    sa.Column("team", sa.Text),
    sa.Column("user_name", sa.Text),
    sa.Column("queue", sa.Text),
    sa.Column("submitted_at", sa.DateTime(timezone=True)),
    sa.Column("pending_since", sa.DateTime(timezone=True)),
    sa.Column("episode", sa.Integer, nullable=False, server_default="0"),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

notifications = sa.Table(
    "notifications",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("dedup_key", sa.Text, nullable=False),
    sa.Column("recipient", sa.Text, nullable=False),
    sa.Column("channel", sa.Text, nullable=False),
    sa.Column("address", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("event_id", sa.Text),
    sa.Column("job_id", sa.Text),
    sa.Column("team", sa.Text),
    sa.Column("context", postgresql.JSONB, nullable=False),
    sa.Column("bypass_rate_limit", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_attempt_at", sa.DateTime(timezone=True)),
    sa.Column("sent_at", sa.DateTime(timezone=True)),
    sa.Column("last_error", sa.Text),
    sa.Column("digest_id", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

PUBLIC_COLUMNS = (
    "id", "created_at", "kind", "status", "attempts", "recipient", "channel", "address",
    "job_id", "team", "event_id", "dedup_key", "next_attempt_at", "last_attempt_at", "sent_at",
    "last_error", "digest_id",
)


# ---------------------------------------------------------------- jobs


def _view(row: sa.Row[Any]) -> JobView:
    return JobView(
        job_id=row.job_id, name=row.name, team=row.team, user=row.user_name, queue=row.queue,
        submitted_at=row.submitted_at, pending_since=row.pending_since, episode=row.episode,
    )


async def get_jobs(conn: AsyncConnection, job_ids: Iterable[str]) -> dict[str, JobView]:
    """The views of those of `job_ids` that exist, locked for the caller's transaction; in
    the ids' order, so two transactions that lock some of the same jobs cannot deadlock."""
    wanted = sorted(set(job_ids))
    found: dict[str, JobView] = {}
    for chunk in chunks(wanted, 1):
        query = (sa.select(jobs).where(jobs.c.job_id.in_(list(chunk)))
                 .order_by(jobs.c.job_id).with_for_update())
        found.update((row.job_id, _view(row)) for row in await conn.execute(query))
    return found


_UPSERT_JOB = insert(jobs).on_conflict_do_update(
    index_elements=[jobs.c.job_id],
    set_={c.name: insert(jobs).excluded[c.name] for c in jobs.columns if c.name != "job_id"},
)


async def put_jobs(conn: AsyncConnection, views: Iterable[JobView], now: datetime) -> None:
    """Upsert the views; a job at most once in `views`. An executemany (`rota.db.chunks`)."""
    rows = [{
        "job_id": job.job_id, "name": job.name, "team": job.team, "user_name": job.user,
        "queue": job.queue, "submitted_at": job.submitted_at, "pending_since": job.pending_since,
        "episode": job.episode, "updated_at": now,
    } for job in views]
    if rows:
        await conn.execute(_UPSERT_JOB, rows)


# ---------------------------------------------------------------- notifications


async def insert_notification(conn: AsyncConnection, values: dict[str, Any]) -> bool:
    """Record one notification before anything is sent. False: already recorded (a redelivery)."""
    return await insert_notifications(conn, [values]) == 1


_INSERT_NOTIFICATION = (insert(notifications)
                        .on_conflict_do_nothing(constraint="notifications_once")
                        .returning(notifications.c.id))


async def insert_notifications(conn: AsyncConnection, rows: list[dict[str, Any]]) -> int:
    """Record notifications before anything is sent; returns how many were new. A row whose
    (dedup_key, recipient, channel) is recorded already, or earlier in `rows`, is skipped."""
    if not rows:
        return 0
    return len((await conn.execute(_INSERT_NOTIFICATION, rows)).all())


async def claim_due(conn: AsyncConnection, now: datetime, limit: int) -> list[sa.Row[Any]]:
    """Due rows, locked. `sending` rows are due again only once their lease ran out (a crash)."""
    query = (
        sa.select(notifications)
        .where(notifications.c.status.in_(DUE_STATUSES), notifications.c.next_attempt_at <= now)
        .order_by(notifications.c.next_attempt_at, notifications.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return list((await conn.execute(query)).all())


async def recent_sends(
    conn: AsyncConnection, pairs: Iterable[tuple[str, str]], since: datetime
) -> dict[tuple[str, str], int]:
    """Messages sent (or being sent) per (recipient, channel) since `since`: the rate limit."""
    pairs = list(set(pairs))
    if not pairs:
        return {}
    n = notifications.c
    when = sa.func.coalesce(n.sent_at, n.last_attempt_at)
    query = (
        sa.select(n.recipient, n.channel, sa.func.count())
        .where(sa.tuple_(n.recipient, n.channel).in_(pairs),
               n.status.in_((Status.sent, Status.sending)), when > since)
        .group_by(n.recipient, n.channel)
    )
    return {(r, c): int(count) for r, c, count in (await conn.execute(query)).all()}


async def update(conn: AsyncConnection, notification_id: str, values: dict[str, Any]) -> None:
    await conn.execute(
        sa.update(notifications).where(notifications.c.id == notification_id).values(**values)
    )


async def held_groups_due(conn: AsyncConnection, now: datetime) -> list[tuple[str, str]]:
    """(recipient, channel) pairs whose oldest held message has waited out its window."""
    n = notifications.c
    query = (
        sa.select(n.recipient, n.channel)
        .where(n.status == Status.held)
        .group_by(n.recipient, n.channel)
        .having(sa.func.min(n.next_attempt_at) <= now)
    )
    return [(r, c) for r, c in (await conn.execute(query)).all()]


async def lock_held(conn: AsyncConnection, recipient: str, channel: str) -> list[sa.Row[Any]]:
    n = notifications.c
    query = (
        sa.select(notifications)
        .where(n.status == Status.held, n.recipient == recipient, n.channel == channel)
        .order_by(n.created_at, n.id)
        .with_for_update(skip_locked=True)
    )
    return list((await conn.execute(query)).all())


async def list_notifications(
    conn: AsyncConnection, *, failed: bool, limit: int, job_id: str | None = None
) -> list[dict[str, Any]]:
    """Newest first. `failed`: the dead letter only."""
    query = sa.select(*[notifications.c[name] for name in PUBLIC_COLUMNS])
    if failed:
        query = query.where(notifications.c.status == Status.dead)
    if job_id:
        query = query.where(notifications.c.job_id == job_id)
    query = query.order_by(notifications.c.created_at.desc(), notifications.c.id.desc())
    return [dict(row._mapping) for row in await conn.execute(query.limit(limit))]


def window_start(now: datetime, window_s: float) -> datetime:
    return now - timedelta(seconds=window_s)
