"""The scheduler's tables (schema `scheduler`): the runs it proposed, and the decision log."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from rota.db.chunks import chunks, row_chunks
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from rota_scheduler.actions import DecisionRecord, NewRun

SCHEMA = "scheduler"
metadata = sa.MetaData(schema=SCHEMA)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("job_id", sa.Text, nullable=False),
    sa.Column("proposal_id", sa.Text, nullable=False),
    sa.Column("proposed_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("start_sent_at", sa.DateTime(timezone=True)),
)

decisions = sa.Table(
    "decisions",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("cycle_id", sa.Text, nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("job_id", sa.Text, nullable=False),
    sa.Column("decision", sa.Text, nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("factors", postgresql.JSONB, nullable=False),
    sa.Column("details", postgresql.JSONB, nullable=False),
)


async def add_runs(conn: AsyncConnection, new_runs: list[NewRun], at: datetime) -> None:
    rows = [
        {"run_id": r.run_id, "job_id": r.job_id, "proposal_id": r.proposal_id, "proposed_at": at}
        for r in new_runs
    ]
    for chunk in row_chunks(runs, rows):
        await conn.execute(sa.insert(runs), list(chunk))


async def add_decisions(
    conn: AsyncConnection, cycle_id: str, at: datetime, records: list[DecisionRecord]
) -> None:
    rows = [
        {"cycle_id": cycle_id, "at": at, "job_id": r.job_id, "decision": r.decision,
         "reason": r.reason, "factors": r.factors, "details": r.details}
        for r in records
    ]  # fmt: skip
    for chunk in row_chunks(decisions, rows):
        await conn.execute(sa.insert(decisions), list(chunk))


async def claim_starts(conn: AsyncConnection, run_ids: list[str], at: datetime) -> set[str]:
    """The runs whose StartRun has not been sent yet, marked sent."""
    claimed: set[str] = set()
    for chunk in chunks(run_ids, 1):
        rows = await conn.execute(
            sa.update(runs)
            .where(runs.c.run_id.in_(chunk), runs.c.start_sent_at.is_(None))
            .values(start_sent_at=at)
            .returning(runs.c.run_id)
        )
        claimed.update(str(row.run_id) for row in rows)
    return claimed


async def prune_decisions(conn: AsyncConnection, older_than: datetime) -> int:
    result = await conn.execute(sa.delete(decisions).where(decisions.c.at < older_than))
    return int(result.rowcount)
