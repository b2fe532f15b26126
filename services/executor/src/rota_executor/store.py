"""The executor's table (schema `executor`): one row per run, and the queries on it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from rota.contracts import messages as m
from rota.contracts.job import JobSpec, WorkerPlacement
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from rota_executor.backend import RunRecord, WorkerProcess

SCHEMA = "executor"
metadata = sa.MetaData(schema=SCHEMA)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("job_id", sa.Text, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("backend", sa.Text, nullable=False),
    sa.Column("spec", postgresql.JSONB, nullable=False),
    sa.Column("placement", postgresql.JSONB, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("token_sha256", sa.Text, nullable=False),
    sa.Column("resume_from", sa.Text),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("pids", postgresql.JSONB),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_checkpoint_uri", sa.Text),
    sa.Column("last_checkpoint_at", sa.DateTime(timezone=True)),
    sa.Column("last_checkpoint_progress_s", sa.Float),
    sa.Column("notice_id", sa.Text),
    sa.Column("notice_at", sa.DateTime(timezone=True)),
    sa.Column("notice_acked_at", sa.DateTime(timezone=True)),
    sa.Column("stop_reason", sa.Text),
    sa.Column("stop_forced", sa.Boolean),
    sa.Column("stop_requested_at", sa.DateTime(timezone=True)),
    sa.Column("ended_at", sa.DateTime(timezone=True)),
    sa.Column("exit_code", sa.Integer),
    sa.Column("outcome", sa.Text),
    sa.Column("detail", sa.Text),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

LIVE_STATES = ("running", "stopping")


def record(row: Any) -> RunRecord:
    return RunRecord(
        run_id=row.run_id, job_id=row.job_id, attempt=row.attempt, backend=row.backend,
        spec=JobSpec.model_validate(row.spec),
        placement=[WorkerPlacement.model_validate(w) for w in row.placement],
        state=row.state, started_at=row.started_at,
        resume_from=row.resume_from,
        processes=[WorkerProcess.from_doc(p) for p in row.pids or []],
        last_checkpoint_uri=row.last_checkpoint_uri, last_checkpoint_at=row.last_checkpoint_at,
        last_checkpoint_progress_s=row.last_checkpoint_progress_s,
        notice_id=row.notice_id, notice_at=row.notice_at, notice_acked_at=row.notice_acked_at,
        stop_requested_at=row.stop_requested_at,
    )


def run_row(
    start: m.StartRun, *, token_sha256: str, backend: str, state: str, now: datetime,
    detail: str | None = None,
) -> dict[str, Any]:
    """The row recording `start`, for `insert_runs`.

    A resumed run's checkpoint is its last acknowledged one until it makes its own, so that
    stopping it before its first checkpoint still hands the same checkpoint on.
    """
    return dict(
        run_id=start.run_id, job_id=start.job_id, attempt=start.attempt, backend=backend,
        spec=start.spec.model_dump(mode="json"),
        placement=[w.model_dump(mode="json") for w in start.placement],
        gpus=sum(len(w.gpus) for w in start.placement), token_sha256=token_sha256,
        resume_from=start.resume_from,
        state=state, started_at=now, last_checkpoint_uri=start.resume_from,
        ended_at=None if state in LIVE_STATES else now, detail=detail, updated_at=now,
    )


def new_record(start: m.StartRun, *, backend: str, now: datetime) -> RunRecord:
    """What `record` reads back from a live run's `run_row`, without reading it back."""
    return RunRecord(
        run_id=start.run_id, job_id=start.job_id, attempt=start.attempt, backend=backend,
        spec=start.spec, placement=list(start.placement), state="running", started_at=now,
        resume_from=start.resume_from, last_checkpoint_uri=start.resume_from,
    )


async def insert_runs(conn: AsyncConnection, rows: list[dict[str, Any]]) -> set[str]:
    """Insert each run once: the run_ids inserted now. A run known already (a duplicate
    StartRun) is left as it is and not among them. An executemany with RETURNING
    (`rota.db.chunks`)."""
    if not rows:
        return set()
    result = await conn.execute(
        insert(runs).on_conflict_do_nothing(index_elements=["run_id"]).returning(runs.c.run_id),
        rows,
    )
    return {str(row.run_id) for row in result}


async def lock(conn: AsyncConnection, run_id: str) -> Any:
    """The run's row, locked for this transaction, or None."""
    return (
        await conn.execute(sa.select(runs).where(runs.c.run_id == run_id).with_for_update())
    ).first()


async def get(conn: AsyncConnection, run_id: str) -> RunRecord | None:
    row = (await conn.execute(sa.select(runs).where(runs.c.run_id == run_id))).first()
    return record(row) if row is not None else None


async def live_runs(conn: AsyncConnection) -> list[RunRecord]:
    rows = await conn.execute(
        sa.select(runs).where(runs.c.state.in_(LIVE_STATES)).order_by(runs.c.started_at)
    )
    return [record(row) for row in rows]


async def update(conn: AsyncConnection, run_id: str, values: dict[str, Any]) -> None:
    await conn.execute(sa.update(runs).where(runs.c.run_id == run_id).values(**values))
