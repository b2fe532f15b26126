"""The coordinator's tables (schema `preemption`) and the queries on them.

Locking, so that concurrent handlers (one per durable, plus the timer) never lose an event:
- every saga change holds the plan row (`FOR UPDATE`) first, then touches its victims;
- a plan and a run event for one of its runs meet on the `runs` row, which both upsert;
- a plan and the cancellation of its preemptor meet on a transaction-scoped advisory lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from rota.contracts import Tier
from rota.contracts.messages import VictimOutcome
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from rota_preemption.domain import Plan, PlanState, RunEnd, Saga, Victim, VictimState
from rota_preemption.grow import REASON as GROW_REASON

SCHEMA = "preemption"
metadata = sa.MetaData(schema=SCHEMA)
TS = sa.DateTime(timezone=True)

runs = sa.Table(
    "runs", metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("job_id", sa.Text, nullable=False),
    sa.Column("ended", sa.Text),
    sa.Column("ended_at", TS),
)

cancelled_jobs = sa.Table(
    "cancelled_jobs", metadata,
    sa.Column("job_id", sa.Text, primary_key=True),
    sa.Column("cancelled_at", TS, nullable=False),
)

plans = sa.Table(
    "plans", metadata,
    sa.Column("plan_id", sa.Text, primary_key=True),
    sa.Column("preemptor_job_id", sa.Text, nullable=False),
    sa.Column("preemptor_queue", sa.Text, nullable=False),
    sa.Column("preemptor_team", sa.Text),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("updated_at", TS, nullable=False),
    sa.Column("completed_at", TS),
)

victims = sa.Table(
    "victims", metadata,
    sa.Column("plan_id", sa.Text, primary_key=True),
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("job_id", sa.Text, nullable=False),
    sa.Column("team", sa.Text, nullable=False),
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("job_name", sa.Text, nullable=False),
    sa.Column("user_name", sa.Text, nullable=False),
    sa.Column("resumable", sa.Boolean, nullable=False),
    sa.Column("last_checkpoint_uri", sa.Text),
    sa.Column("expected_lost_gpu_seconds", sa.Float, nullable=False),
    sa.Column("notice_id", sa.Text, nullable=False),
    sa.Column("grace_s", sa.Float, nullable=False),
    sa.Column("deadline", TS, nullable=False),
    sa.Column("shrink_to", sa.Integer),
    sa.Column("grow_to", sa.Integer),
    sa.Column("gpu_share", sa.Float),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("outcome", sa.Text),
    sa.Column("checkpoint_uri", sa.Text),
    sa.Column("lost_gpu_seconds", sa.Float, nullable=False),
    sa.Column("noticed_at", TS),
    sa.Column("acked_at", TS),
    sa.Column("stop_sent_at", TS),
    sa.Column("done_at", TS),
)

OPEN_STATES = (PlanState.noticing.value, PlanState.stopping.value)

# Mutable columns: what a transition may change. The rest is fixed when the saga opens.
_PLAN_MUTABLE = ("state", "completed_at")
_VICTIM_MUTABLE = ("state", "outcome", "checkpoint_uri", "lost_gpu_seconds", "noticed_at",
                   "acked_at", "stop_sent_at", "done_at")


# ---------------------------------------------------------------- runs and cancellations


async def record_run_ended(
    conn: AsyncConnection, run_id: str, job_id: str, how: RunEnd, at: datetime
) -> None:
    """Upserting the row also takes its lock, which a plan for this run waits on."""
    await conn.execute(
        insert(runs).values(run_id=run_id, job_id=job_id, ended=how.value, ended_at=at)
        .on_conflict_do_update(index_elements=[runs.c.run_id], set_={
            "ended": sa.func.coalesce(runs.c.ended, how.value),
            "ended_at": sa.func.coalesce(runs.c.ended_at, at),
        })
    )


async def lock_runs(conn: AsyncConnection, pairs: Iterable[tuple[str, str]]) -> dict[str, RunEnd]:
    """Upsert and lock the rows of these (run_id, job_id); returns the runs already ended."""
    # In run id order, so two plans naming the same runs never wait on each other in a cycle.
    values = [{"run_id": run_id, "job_id": job_id} for run_id, job_id in sorted(set(pairs))]
    if not values:
        return {}
    stmt = insert(runs).values(values)
    rows = await conn.execute(
        stmt.on_conflict_do_update(index_elements=[runs.c.run_id],
                                   set_={"run_id": stmt.excluded.run_id})
        .returning(runs.c.run_id, runs.c.ended)
    )
    return {row.run_id: RunEnd(row.ended) for row in rows if row.ended}


async def lock_preemptor(conn: AsyncConnection, job_id: str) -> None:
    """Serialises a plan's creation with its preemptor's cancellation, in either order."""
    await conn.execute(sa.select(sa.func.pg_advisory_xact_lock(
        sa.func.hashtextextended(f"rota.preemption.preemptor:{job_id}", 0))))


async def record_cancelled(conn: AsyncConnection, job_id: str, at: datetime) -> None:
    await conn.execute(insert(cancelled_jobs).values(job_id=job_id, cancelled_at=at)
                       .on_conflict_do_nothing())


async def is_cancelled(conn: AsyncConnection, job_id: str) -> bool:
    return (await conn.execute(sa.select(cancelled_jobs.c.job_id)
                               .where(cancelled_jobs.c.job_id == job_id))).first() is not None


# ---------------------------------------------------------------- sagas


async def insert_saga(conn: AsyncConnection, saga: Saga, now: datetime) -> bool:
    """False when the plan exists already (the same plan requested again)."""
    p = saga.plan
    result = await conn.execute(
        insert(plans).values(
            plan_id=p.plan_id, preemptor_job_id=p.preemptor_job_id,
            preemptor_queue=p.preemptor_queue.value, preemptor_team=p.preemptor_team,
            reason=p.reason, message=p.message, state=p.state.value, created_at=p.created_at,
            updated_at=now, completed_at=p.completed_at,
        ).on_conflict_do_nothing()
    )
    if not result.rowcount:
        return False
    await conn.execute(insert(victims).values([_victim_row(v) for v in saga.victims]))
    return True


async def plan_exists(conn: AsyncConnection, plan_id: str) -> bool:
    return (await conn.execute(sa.select(plans.c.plan_id)
                               .where(plans.c.plan_id == plan_id))).first() is not None


async def save_saga(conn: AsyncConnection, saga: Saga, now: datetime) -> None:
    p = saga.plan
    await conn.execute(sa.update(plans).where(plans.c.plan_id == p.plan_id).values(
        updated_at=now, **{k: _db(getattr(p, k)) for k in _PLAN_MUTABLE}))
    for v in saga.victims:
        await conn.execute(
            sa.update(victims)
            .where(victims.c.plan_id == v.plan_id, victims.c.run_id == v.run_id)
            .values(**{k: _db(getattr(v, k)) for k in _VICTIM_MUTABLE})
        )


async def lock_saga(conn: AsyncConnection, plan_id: str, *, skip_locked: bool = False
                    ) -> Saga | None:
    """Load one saga holding its plan row; None if absent (or busy, with `skip_locked`)."""
    row = (await conn.execute(
        sa.select(plans).where(plans.c.plan_id == plan_id)
        .with_for_update(skip_locked=skip_locked))).first()
    if row is None:
        return None
    rows = await conn.execute(sa.select(victims).where(victims.c.plan_id == plan_id)
                              .order_by(victims.c.run_id))
    return Saga(_plan(row._mapping), [_victim(r._mapping) for r in rows])


async def plan_of_notice(conn: AsyncConnection, notice_id: str) -> str | None:
    return (await conn.execute(sa.select(victims.c.plan_id)
                               .where(victims.c.notice_id == notice_id))).scalar_one_or_none()


async def open_plans_of_run(conn: AsyncConnection, run_id: str) -> list[str]:
    rows = await conn.execute(
        sa.select(victims.c.plan_id)
        .where(victims.c.run_id == run_id, victims.c.state != VictimState.done.value)
        .order_by(victims.c.plan_id))
    return list(rows.scalars())


async def live_victim_runs_of_job(conn: AsyncConnection, job_id: str) -> list[str]:
    rows = await conn.execute(
        sa.select(victims.c.run_id)
        .where(victims.c.job_id == job_id, victims.c.state != VictimState.done.value))
    return list(rows.scalars())


async def open_plans_of_preemptor(conn: AsyncConnection, job_id: str) -> list[str]:
    rows = await conn.execute(
        sa.select(plans.c.plan_id)
        .where(plans.c.preemptor_job_id == job_id, plans.c.state.in_(OPEN_STATES))
        .order_by(plans.c.plan_id))
    return list(rows.scalars())


async def plans_due(conn: AsyncConnection, now: datetime, limit: int) -> list[str]:
    """Plans with a victim still unacknowledged at its deadline."""
    rows = await conn.execute(
        sa.select(victims.c.plan_id).distinct()
        .where(victims.c.state == VictimState.noticed.value, victims.c.deadline <= now)
        .limit(limit))
    return list(rows.scalars())


async def list_sagas(
    conn: AsyncConnection, *, plan_id: str | None, job_id: str | None, open_only: bool,
    limit: int,
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    # A grow's saga shares the tables but is no preemption: the read API lists plans only.
    query = sa.select(plans).where(plans.c.reason != GROW_REASON)
    if plan_id:
        query = query.where(plans.c.plan_id == plan_id)
    if job_id:
        query = query.where(sa.or_(
            plans.c.preemptor_job_id == job_id,
            plans.c.plan_id.in_(sa.select(victims.c.plan_id).where(victims.c.job_id == job_id)),
        ))
    if open_only:
        query = query.where(plans.c.state.in_(OPEN_STATES))
    plan_rows = [dict(r._mapping) for r in await conn.execute(
        query.order_by(plans.c.created_at.desc(), plans.c.plan_id.desc()).limit(limit))]
    ids = [p["plan_id"] for p in plan_rows]
    by_plan: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
    if ids:
        for r in await conn.execute(sa.select(victims).where(victims.c.plan_id.in_(ids))
                                    .order_by(victims.c.run_id)):
            by_plan[r.plan_id].append(dict(r._mapping))
    return [(p, by_plan[p["plan_id"]]) for p in plan_rows]


# ---------------------------------------------------------------- row mapping


def _db(value: Any) -> Any:
    return value.value if hasattr(value, "value") else value


def _victim_row(v: Victim) -> dict[str, Any]:
    return {
        "plan_id": v.plan_id, "run_id": v.run_id, "job_id": v.job_id, "team": v.team,
        "queue": v.queue.value, "gpus": v.gpus, "job_name": v.job_name, "user_name": v.user,
        "resumable": v.resumable, "last_checkpoint_uri": v.last_checkpoint_uri,
        "expected_lost_gpu_seconds": v.expected_lost_gpu_seconds, "notice_id": v.notice_id,
        "grace_s": v.grace_s, "deadline": v.deadline, "shrink_to": v.shrink_to,
        "grow_to": v.grow_to, "gpu_share": v.gpu_share,
        **{k: _db(getattr(v, k)) for k in _VICTIM_MUTABLE},
    }


def _plan(row: Any) -> Plan:
    return Plan(
        plan_id=row["plan_id"], preemptor_job_id=row["preemptor_job_id"],
        preemptor_queue=Tier(row["preemptor_queue"]), preemptor_team=row["preemptor_team"],
        reason=row["reason"], message=row["message"], state=PlanState(row["state"]),
        created_at=row["created_at"], completed_at=row["completed_at"],
    )


def _victim(row: Any) -> Victim:
    return Victim(
        plan_id=row["plan_id"], run_id=row["run_id"], job_id=row["job_id"], team=row["team"],
        queue=Tier(row["queue"]), gpus=row["gpus"], job_name=row["job_name"],
        user=row["user_name"], resumable=row["resumable"],
        last_checkpoint_uri=row["last_checkpoint_uri"],
        expected_lost_gpu_seconds=row["expected_lost_gpu_seconds"], notice_id=row["notice_id"],
        grace_s=row["grace_s"], deadline=row["deadline"], shrink_to=row["shrink_to"],
        grow_to=row["grow_to"], gpu_share=row["gpu_share"],
        state=VictimState(row["state"]),
        outcome=VictimOutcome(row["outcome"]) if row["outcome"] else None,
        checkpoint_uri=row["checkpoint_uri"], lost_gpu_seconds=row["lost_gpu_seconds"],
        noticed_at=row["noticed_at"], acked_at=row["acked_at"],
        stop_sent_at=row["stop_sent_at"], done_at=row["done_at"],
    )
